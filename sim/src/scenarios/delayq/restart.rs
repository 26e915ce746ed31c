//! Purges and process restarts over the crashed disk, with the checks that
//! recovery kept everything it must.

use std::collections::BTreeMap;

use pgyard_delayq::follow::Failure;
use pgyard_delayq::{DelayQueue, Error, Inspection, SegmentInfo, SimFaults, SimStorage, TxnState};
use pgyard_types::Lsn;

use super::checks::Known;
use super::disk::{judge_recovery, judge_segments, Disk, Memo};
use super::follow::new_follower;
use super::realdisk;
use super::{fail, Run};
use crate::publisher::Fate;
use crate::{trace, Violation};

impl Run<'_> {
    pub(super) fn purge(&mut self) -> Result<(), Violation> {
        match self.q().purge() {
            Ok(removed) => {
                if !removed.is_empty() {
                    trace!(self.t, "purge removed {}", removed.len());
                }
                self.check_no_orphans()?;
                judge_segments(self.q.as_ref().expect("queue is open between steps"))
            }
            Err(e) if e.is_retryable() => Ok(()),
            Err(e) => self.on_error("purge", e),
        }
    }

    /// After a purge: the files on disk are exactly the queue's segments, and nothing older
    /// than the oldest unfinished transaction is kept (unless a pending message pins it).
    pub(super) fn check_no_orphans(&mut self) -> Result<(), Violation> {
        // This runs after every purge, so it reads the queue's segments and transactions
        // directly instead of building (and sorting) a whole `inspect()`: the same values.
        // The simulated disk's names are borrowed in name order (what `list` returns, sorted,
        // without copying every name after every purge).
        let q = self.q.as_ref().expect("queue is open between steps");
        let files = || q.storage().names().filter(|f| f.starts_with("dq-"));
        let segments: Vec<SegmentInfo> = q.segments().collect();
        if !files().eq(segments.iter().map(|s| s.file.as_str())) {
            let files: Vec<&str> = files().collect();
            let segs: Vec<&String> = segments.iter().map(|s| &s.file).collect();
            return Err(fail(
                "no-orphan-segments",
                format!("disk has {files:?}, queue knows {segs:?}"),
            ));
        }
        let (Some(first), Some(last)) = (segments.first(), segments.last()) else {
            return Ok(());
        };
        let floor = q
            .transactions()
            .filter(|t| {
                matches!(
                    t.state,
                    TxnState::InProgress | TxnState::Prepared | TxnState::Committed
                )
            })
            .map(|t| t.first_segment)
            .min()
            .unwrap_or(last.seq)
            .min(last.seq);
        // Segments below the floor may stay while a carry-forward set is not yet durable
        // (purge's flush ran out of space); a pending message pins its segment too.
        let settled = q.messages_pending() == 0 && !q.needs_flush();
        let bad = first.seq > floor || (settled && first.seq < floor);
        if bad {
            return Err(fail(
                "no-orphan-segments",
                format!(
                    "after purge the oldest segment is {}, the oldest needed is {floor}",
                    first.seq
                ),
            ));
        }
        Ok(())
    }

    /// Process restart over the same disk (`crash`: after a power loss), recovery checks, and
    /// a new replication session.
    pub(super) fn restart(&mut self, crash: bool) -> Result<(), Violation> {
        // The applier runs in the same process: killed with it (part of what it sent may have
        // reached the subscriber), or, at a clean restart, after everything it sent arrived.
        if self.sub.connected() {
            if crash {
                self.crash_applier()?;
            } else {
                let (sent, _) = self.sub.in_flight();
                self.end_session(sent)?;
            }
        }
        let Some(q) = self.q.take() else {
            return Err(fail("recovery-succeeds", "no queue to restart".into()));
        };
        let mut storage = q.into_storage();
        for attempt in 0..20 {
            if crash || attempt > 0 {
                storage.crash();
            }
            // A fault that broke the previous attempt is taken as transient: later attempts
            // run without fsync failures.
            let mut faults = self.faults.clone();
            if attempt > 0 {
                faults.fsync_fail_per_million = 0;
            }
            storage.set_faults(faults);
            let twin = storage.clone();
            let before = storage.changes();
            let q = match DelayQueue::open(storage, self.cfg.clone()) {
                Ok(q) => q,
                Err(Error::Storage(e)) => {
                    trace!(self.t, "reopen: {e}; retry");
                    storage = twin;
                    continue;
                }
                Err(e) => return Err(fail("recovery-succeeds", format!("reopen: {e}"))),
            };
            if let Some(tt) = &q.recovery().torn_tail {
                trace!(
                    self.t,
                    "recovery cut a torn tail of {} bytes",
                    tt.dropped_bytes
                );
            }
            let disk = Disk::read(&twin, &self.disk_memo)?;
            judge_recovery(&disk, &q)?;
            let scans = disk.scans();
            drop(disk);
            if std::mem::take(&mut self.real_disk) {
                realdisk::judge(&twin, &self.cfg, &q)?;
            }
            self.disk_memo = Memo::keep(twin, scans);
            // A recovery that only read the disk leaves the bytes it recovered from.
            let wrote = q.storage().changes() != before;
            self.q = Some(q);
            self.check_recovery(wrote)?;
            match self.after_open() {
                Ok(()) => return Ok(()),
                Err(AfterOpen::Violation(v)) => return Err(v),
                Err(AfterOpen::Fatal(e)) => {
                    trace!(self.t, "after reopen: {e}; restart again");
                    let Some(q) = self.q.take() else {
                        return Err(fail("recovery-succeeds", "no queue".into()));
                    };
                    storage = q.into_storage();
                }
            }
        }
        Err(fail(
            "recovery-succeeds",
            "20 restarts in a row failed".into(),
        ))
    }

    /// Right after recovery: the same disk recovers to the same queue again, everything
    /// reported flushed and not yet applied is there, and nothing the publisher did not
    /// commit is queued as committed.
    ///
    /// `wrote`: the recovery changed the disk (it cut a torn tail). Only then is the second
    /// recovery run: one that only read the disk leaves the very bytes it recovered from, and
    /// recovery is a function of those bytes (the queue has no clock, randomness or hashed
    /// containers, and a simulated read injects no faults), so a second run over them could
    /// only repeat the first. It was a third of each restart's cost.
    fn check_recovery(&mut self, wrote: bool) -> Result<(), Violation> {
        let info = self.q().inspect();
        if wrote {
            self.check_repeatable(&info)?;
        }
        let (reported, origin) = (self.reported, self.sub.durable_origin());
        // Per xid, the state of its first transaction (in inspection order) that is not
        // aborted: looked up for many of the publisher's transactions, so gathered once.
        let mut states: BTreeMap<u32, TxnState> = BTreeMap::new();
        for t in info
            .transactions
            .iter()
            .filter(|t| t.state != TxnState::Aborted)
        {
            states.entry(t.xid.0).or_insert(t.state);
        }
        let state_of = |xid: u32| states.get(&xid).copied();
        for (xid, txn) in &self.publ.txns {
            let need = match txn.fate {
                Fate::Committed { end_lsn, .. } if end_lsn <= origin => None,
                // Skipped by the operator: marked applied (and maybe purged) without applying.
                Fate::Committed { commit_lsn, .. } if self.operator.skips(commit_lsn) => None,
                Fate::Committed { end_lsn, .. } if end_lsn <= reported => {
                    Some(&[TxnState::Committed, TxnState::Applied][..])
                }
                Fate::Committed { .. } | Fate::Prepared
                    if txn.prepare_end.is_some_and(|p| p <= reported) =>
                {
                    Some(&[TxnState::Prepared, TxnState::Committed, TxnState::Applied][..])
                }
                _ => None,
            };
            if let Some(ok) = need {
                let got = state_of(*xid);
                if !got.is_some_and(|s| ok.contains(&s)) {
                    return Err(fail(
                        "flushed-survives-crash",
                        format!(
                            "transaction {xid} ({:?}, prepare end {:?}) is at or below the \
                             reported flush {reported} but recovered as {got:?}; origin {origin}",
                            txn.fate, txn.prepare_end
                        ),
                    ));
                }
            }
        }
        for t in &info.transactions {
            if t.state != TxnState::Committed {
                continue;
            }
            let published = self.publ.txns.get(&t.xid.0).map(|p| p.fate);
            let ok = matches!(published, Some(Fate::Committed { end_lsn, .. }) if Some(end_lsn) == t.end_lsn);
            if !ok {
                return Err(fail(
                    "aborted-never-applied",
                    format!(
                        "recovered queue holds {} as committed (end {:?}); publisher: {published:?}",
                        t.xid, t.end_lsn
                    ),
                ));
            }
        }
        // The due times' running maximum starts over from what the queue still holds.
        let recovered = info
            .transactions
            .iter()
            .filter(|t| matches!(t.state, TxnState::Committed | TxnState::Applied))
            .filter_map(|t| Some((t.commit_lsn?, t.commit_time?.to_unix().0)))
            .collect();
        let fresh = (self.publ.commits).partition_point(|c| c.commit_lsn < info.resume_lsn);
        self.known = Known::new(recovered, fresh);
        trace!(
            self.t,
            "recovered: {} transactions, {} segments, resume {}",
            info.transactions.len(),
            info.segments.len(),
            info.resume_lsn
        );
        Ok(())
    }

    /// A second recovery of the recovered disk gives the same `inspect()`.
    fn check_repeatable(&mut self, info: &Inspection) -> Result<(), Violation> {
        let mut again = self.q().storage().clone();
        again.set_faults(SimFaults::default());
        let twin = DelayQueue::open(again, self.cfg.clone())
            .map_err(|e| fail("recovery-repeatable", format!("second reopen: {e}")))?;
        let second = twin.inspect();
        if second != *info {
            return Err(fail(
                "recovery-repeatable",
                format!("a second recovery of the same disk differs: {second:?} vs {info:?}"),
            ));
        }
        Ok(())
    }

    /// A new follower process over the reopened queue: what the subscriber's origin holds is
    /// marked applied, and its machine's first session starts (`restart_stream` retried
    /// while the queue is out of space).
    fn after_open(&mut self) -> Result<(), AfterOpen> {
        let origin = self.sub.durable_origin();
        self.retry(|q| q.skip_applied_through(origin).map(|_| ()))?;
        let now = self.now;
        self.follower = new_follower(self, now);
        self.tally = super::follow::Tally::default();
        self.reconnect_at = None;
        self.reported_here = Lsn(0);
        for _ in 0..50 {
            let q = self.q.as_mut().expect("queue is open between steps");
            match self.follower.start_session(q, now) {
                Ok(start) => return self.started(start).map_err(AfterOpen::Violation),
                Err(f) if f.is_retryable() => continue,
                Err(Failure::Queue(e)) => return Err(classify(e)),
                Err(f) => {
                    return Err(AfterOpen::Violation(fail(
                        "queue-accepts-valid-stream",
                        format!("after reopen: {f}"),
                    )))
                }
            }
        }
        Err(AfterOpen::Fatal(Error::Misuse("still out of space".into())))
    }

    fn retry(
        &mut self,
        mut f: impl FnMut(&mut DelayQueue<SimStorage>) -> Result<(), Error>,
    ) -> Result<(), AfterOpen> {
        for _ in 0..50 {
            match f(self.q()) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() => continue,
                Err(e) => return Err(classify(e)),
            }
        }
        Err(AfterOpen::Fatal(Error::Misuse("still out of space".into())))
    }
}

/// A queue error after a reopen: the stream's or the engine's logic is a violation, a storage
/// failure another restart.
fn classify(e: Error) -> AfterOpen {
    match e {
        Error::Protocol(_) | Error::Misuse(_) | Error::Corrupt { .. } => AfterOpen::Violation(
            fail("queue-accepts-valid-stream", format!("after reopen: {e}")),
        ),
        e => AfterOpen::Fatal(e),
    }
}

/// Why the steps after a reopen did not complete.
enum AfterOpen {
    Violation(Violation),
    Fatal(Error),
}
