//! `delayq`: the publisher model's stream (plain, streamed with savepoint aborts, two-phase,
//! non-transactional messages) through a `DelayQueue` over a faulty `SimStorage`, with random
//! flush points, standby status reports, apply polls at an advancing wall clock, purges,
//! reconnects, crashes (torn writes), fsync failures (poisoned → crash → reopen) and ENOSPC.
//!
//! Invariants, checked after every step and every recovery: every transaction committed at or
//! below a reported flush LSN survives any crash and is applied exactly once, in commit order,
//! never before its due time, with exactly its surviving changes; aborted work is never handed
//! out; after a purge no segment file is orphaned or missing; recovery is repeatable. At the end
//! faults stop, every open transaction ends, time passes every due time, and everything
//! committed must have been applied (non-transactional messages at least once).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use pgyard_delayq::{
    Config, DelayQueue, Error, Flow, Ready, ReadyMessage, ReadyTxn, Received, SimFaults,
    SimStorage, Storage, TxnState,
};
use pgyard_types::{rng_from_seed, uniform_inclusive, Lsn, Rng, RngCore, UnixTime};

use crate::planted_scenarios::ScenarioBug;
use crate::publisher::{Fate, Publisher, Workload};
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct DelayqScenario;

impl Scenario for DelayqScenario {
    fn name(&self) -> &'static str {
        "delayq"
    }

    fn description(&self) -> &'static str {
        "delay queue under crashes, torn writes, fsync failures and ENOSPC: exactly-once, in order, on time"
    }

    fn run(&self, rng: &mut Rng, trace: &mut Trace) -> Result<u64, Violation> {
        run_delayq(rng, trace, None)
    }
}

/// What one seed draws before it starts.
#[derive(Debug)]
struct Mix {
    steps: u64,
    workload: Workload,
    delay_ms: u64,
    skew_tolerance_ms: u64,
    tick_max_ms: u64,
    deliver_max: u64,
    flush_percent: u64,
    report_percent: u64,
    poll_percent: u64,
    purge_percent: u64,
    crash_percent: u64,
    reconnect_percent: u64,
    fsync_fail_per_million: u32,
    enospc_per_million: u32,
    torn_writes: bool,
    segment_bytes: u64,
    write_buffer: usize,
    budget_segments: Option<u64>,
}

fn draw_mix(rng: &mut Rng) -> Mix {
    let pick = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    Mix {
        steps: 20 + pick(rng, 90),
        workload: Workload::draw(rng),
        delay_ms: pick(rng, 3000),
        skew_tolerance_ms: if pick(rng, 1) == 0 {
            0
        } else {
            pick(rng, 2000)
        },
        tick_max_ms: 1 + pick(rng, 400),
        deliver_max: 1 + pick(rng, 12),
        flush_percent: pick(rng, 60),
        report_percent: pick(rng, 60),
        poll_percent: 5 + pick(rng, 60),
        purge_percent: pick(rng, 30),
        crash_percent: pick(rng, 8),
        reconnect_percent: pick(rng, 5),
        fsync_fail_per_million: if pick(rng, 2) == 0 {
            pick(rng, 30_000) as u32
        } else {
            0
        },
        enospc_per_million: if pick(rng, 2) == 0 {
            pick(rng, 50_000) as u32
        } else {
            0
        },
        torn_writes: pick(rng, 1) == 0,
        segment_bytes: 4096 * (1 + pick(rng, 3)),
        write_buffer: pick(rng, 2048) as usize,
        budget_segments: if pick(rng, 3) == 0 {
            Some(4 + pick(rng, 6))
        } else {
            None
        },
    }
}

/// The subscriber: what it applied, and its replication origin.
#[derive(Debug, Default)]
struct Subscriber {
    /// End LSN of the last applied transaction (the replication origin's progress).
    origin: Lsn,
    applied: BTreeSet<u32>,
    /// Non-transactional messages delivered: LSN → session of the last delivery.
    notes: BTreeMap<u64, u64>,
    /// Stream position of the last item handed out in this session.
    last_pos: Lsn,
    /// An applied item whose `mark_applied` must be retried.
    unacked: Option<pgyard_delayq::ItemId>,
}

struct Run<'a> {
    rng: &'a mut Rng,
    t: &'a mut Trace,
    mix: Mix,
    bug: Option<ScenarioBug>,
    cfg: Config,
    faults: SimFaults,
    publ: Publisher,
    q: Option<DelayQueue<SimStorage>>,
    now: UnixTime,
    start: UnixTime,
    conn: VecDeque<usize>,
    /// Highest flush LSN reported to the publisher (its slot's `confirmed_flush_lsn`).
    reported: Lsn,
    /// Highest flush LSN reported by the current queue incarnation.
    reported_here: Lsn,
    session: u64,
    sub: Subscriber,
}

fn fail(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Runs one seed; `bug` plants a scenario bug (see [`ScenarioBug`]).
pub fn run_delayq(
    rng: &mut Rng,
    t: &mut Trace,
    bug: Option<ScenarioBug>,
) -> Result<u64, Violation> {
    let mix = draw_mix(rng);
    trace!(t, "mix {mix:?}");
    let budget = mix
        .budget_segments
        .map_or(Config::default().disk_bytes_max, |n| n * mix.segment_bytes);
    let cfg = Config {
        delay: Duration::from_millis(mix.delay_ms),
        skew_tolerance: Duration::from_millis(mix.skew_tolerance_ms),
        segment_bytes_max: mix.segment_bytes,
        write_buffer_bytes: mix.write_buffer,
        disk_bytes_max: budget,
        disk_high_watermark_bytes: budget / 4 * 3,
        disk_low_watermark_bytes: budget / 2,
    };
    let faults = SimFaults {
        fsync_fail_per_million: mix.fsync_fail_per_million,
        enospc_per_million: mix.enospc_per_million,
        capacity_bytes: None,
        torn_writes: mix.torn_writes,
    };
    let storage = SimStorage::with_rng(rng_from_seed(rng.next_u64()), faults.clone());
    let q = DelayQueue::open(storage, cfg.clone())
        .map_err(|e| fail("open-empty", format!("opening an empty queue failed: {e}")))?;
    let start = UnixTime(1_700_000_000_000_000);
    let publ = Publisher::new(mix.workload.clone(), Lsn(0x100_0000));
    let mut run = Run {
        rng,
        t,
        mix,
        bug,
        cfg,
        faults,
        publ,
        q: Some(q),
        now: start,
        start,
        conn: VecDeque::new(),
        reported: Lsn(0),
        reported_here: Lsn(0),
        session: 0,
        sub: Subscriber::default(),
    };
    run.safety()?;
    run.liveness()?;
    Ok(u64::try_from(run.now.0 - run.start.0).unwrap_or(0) * 1000)
}

impl Run<'_> {
    fn q(&mut self) -> &mut DelayQueue<SimStorage> {
        self.q.as_mut().expect("queue is open between steps")
    }

    fn roll(&mut self, percent: u64) -> bool {
        uniform_inclusive(self.rng, 99) < percent
    }

    fn safety(&mut self) -> Result<(), Violation> {
        for step in 0..self.mix.steps {
            self.now.0 += uniform_inclusive(self.rng, self.mix.tick_max_ms * 1000) as i64;
            let new = self.publ.step(self.rng, self.now);
            self.conn.extend(new);
            self.deliver()?;
            if self.roll(self.mix.flush_percent) {
                self.flush()?;
            }
            if self.roll(self.mix.report_percent) {
                self.report_status()?;
            }
            if self.roll(self.mix.poll_percent) {
                self.poll()?;
            }
            if self.roll(self.mix.purge_percent) {
                self.purge()?;
            }
            if self.roll(self.mix.crash_percent) {
                trace!(self.t, "step {step}: power loss");
                self.restart(true)?;
            } else if self.roll(self.mix.reconnect_percent) {
                trace!(self.t, "step {step}: reconnect");
                self.reconnect()?;
            }
        }
        Ok(())
    }

    /// Faults stop; every transaction ends; the queue drains.
    fn liveness(&mut self) -> Result<(), Violation> {
        trace!(self.t, "liveness: faults stop, the budget is lifted");
        self.faults = SimFaults::default();
        // A small budget can deadlock (documented limit: prepared transactions pin their
        // segments, and their decisions may wait behind refused new items); the operator's
        // remedy is a larger budget, applied at the restart below.
        let d = Config::default();
        self.cfg.disk_bytes_max = d.disk_bytes_max;
        self.cfg.disk_high_watermark_bytes = d.disk_high_watermark_bytes;
        self.cfg.disk_low_watermark_bytes = d.disk_low_watermark_bytes;
        self.restart(false)?;
        let new = self.publ.finish_all(self.rng, self.now);
        self.conn.extend(new);
        for round in 0..10_000u32 {
            self.deliver()?;
            self.flush()?;
            self.report_status()?;
            if let Some(due) = self.q().next_due() {
                self.now = self.now.max(due);
            }
            self.poll()?;
            self.purge()?;
            if self.conn.is_empty() && self.q().next_due().is_none() && self.sub.unacked.is_none() {
                trace!(self.t, "liveness: drained after {round} rounds");
                return self.final_checks();
            }
            self.now.0 += 100_000;
        }
        Err(fail(
            "liveness-drains",
            format!(
                "queue did not drain: {} messages unsent, next due {:?}",
                self.conn.len(),
                self.q().next_due()
            ),
        ))
    }

    fn final_checks(&mut self) -> Result<(), Violation> {
        for (xid, txn) in &self.publ.txns {
            if let Fate::Committed { end_lsn, .. } = txn.fate {
                if !self.sub.applied.contains(xid) {
                    return Err(fail(
                        "liveness-all-applied",
                        format!(
                            "transaction {xid} committed (end {end_lsn}) was never applied; \
                             origin {}, reported flush {}",
                            self.sub.origin, self.reported
                        ),
                    ));
                }
            }
        }
        for n in &self.publ.notes {
            if !self.sub.notes.contains_key(&n.lsn.0) {
                return Err(fail(
                    "liveness-all-applied",
                    format!("message at {} was never delivered", n.lsn),
                ));
            }
        }
        self.check_no_orphans()?;
        trace!(
            self.t,
            "end: {} transactions applied, {} messages, {} commits",
            self.sub.applied.len(),
            self.sub.notes.len(),
            self.publ.commits.len()
        );
        Ok(())
    }

    // ---- the stream ------------------------------------------------------------------------

    fn deliver(&mut self) -> Result<(), Violation> {
        for _ in 0..self.mix.deliver_max {
            // Pause is honoured while applying due work can free space; with nothing due,
            // only later messages (a decision for a prepared transaction that pins old
            // segments) can, so reading goes on and the budget refuses new items instead.
            if self.q().flow() == Flow::Pause && self.q().next_due().is_some() {
                return Ok(());
            }
            let Some(&i) = self.conn.front() else {
                return Ok(());
            };
            let item = &self.publ.log()[i];
            let (wal_lsn, event) = (item.lsn, item.event);
            let now = self.now;
            let payload = item.payload.clone();
            let r = self.q().handle(
                now,
                Received {
                    wal_lsn,
                    payload: &payload,
                    event,
                },
            );
            match r {
                Ok(_) => {
                    self.conn.pop_front();
                }
                Err(e) if e.is_retryable() => {
                    trace!(self.t, "handle {event:?}: {e} (retry later)");
                    return Ok(());
                }
                Err(e) => return self.on_error("handle", e),
            }
        }
        Ok(())
    }

    /// A non-retryable error: protocol errors are violations, storage failures make the
    /// process restart over the same (crashed) disk.
    fn on_error(&mut self, what: &str, e: Error) -> Result<(), Violation> {
        match e {
            Error::Protocol(_) | Error::Misuse(_) | Error::Corrupt { .. } => {
                Err(fail("queue-accepts-valid-stream", format!("{what}: {e}")))
            }
            _ => {
                trace!(self.t, "{what}: {e}: restart");
                self.restart(true)
            }
        }
    }

    fn flush(&mut self) -> Result<(), Violation> {
        match self.q().flush() {
            Ok(lsn) => {
                trace!(self.t, "flush -> {lsn}");
                self.report(lsn)
            }
            Err(e) if e.is_retryable() => {
                trace!(self.t, "flush: {e}");
                Ok(())
            }
            Err(e) => self.on_error("flush", e),
        }
    }

    /// A standby status update between flushes.
    fn report_status(&mut self) -> Result<(), Violation> {
        let lsn = self.q().flush_lsn();
        self.report(lsn)
    }

    fn report(&mut self, lsn: Lsn) -> Result<(), Violation> {
        let lsn = if self.bug == Some(ScenarioBug::ReportWriteAsFlush) {
            self.q().write_lsn()
        } else {
            lsn
        };
        if lsn < self.reported_here {
            // `flush_lsn()` falls back to the last flush point while a completed transaction
            // waits for its fsync, below a receive position reported before it arrived.
            // Harmless (the slot only moves forward), but it is recorded.
            trace!(
                self.t,
                "flush LSN went back from {} to {lsn}",
                self.reported_here
            );
        }
        self.reported_here = self.reported_here.max(lsn);
        if lsn > self.reported {
            self.reported = lsn;
            self.publ.confirm(lsn);
        }
        Ok(())
    }

    // ---- apply -----------------------------------------------------------------------------

    /// Applies what is due. Everything is flushed first: `poll_ready` also hands out items
    /// that are only buffered, and applying one moves the subscriber's origin past earlier
    /// prepared transactions that a crash could still lose; the walsender, started at the
    /// origin, would then never re-send their prepare (see docs/simulation.md).
    fn poll(&mut self) -> Result<(), Violation> {
        if self.q().needs_flush() {
            match self.q().flush() {
                Ok(lsn) => self.report(lsn)?,
                Err(e) if e.is_retryable() => return Ok(()),
                Err(e) => return self.on_error("flush", e),
            }
        }
        for _ in 0..1000 {
            if let Some(id) = self.sub.unacked {
                match self.q().mark_applied(id) {
                    Ok(()) => self.sub.unacked = None,
                    Err(e) if e.is_retryable() => return Ok(()),
                    Err(e) => return self.on_error("mark_applied", e),
                }
            }
            let now = self.now;
            let ready = match self.q().poll_ready(now) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(e) => return self.on_error("poll_ready", e),
            };
            match &ready {
                Ready::Transaction(t) => self.apply_txn(t)?,
                Ready::Message(m) => self.deliver_note(m)?,
            }
            self.sub.unacked = Some(ready.id());
        }
        Ok(())
    }

    fn apply_txn(&mut self, t: &ReadyTxn) -> Result<(), Violation> {
        let Some(txn) = self.publ.txns.get(&t.xid.0) else {
            return Err(fail(
                "only-published",
                format!("handed out unknown xid {}", t.xid),
            ));
        };
        let Fate::Committed {
            commit_lsn,
            end_lsn,
            ts,
        } = txn.fate
        else {
            return Err(fail(
                "aborted-never-applied",
                format!(
                    "transaction {} handed out while {:?} on the publisher",
                    t.xid, txn.fate
                ),
            ));
        };
        if (t.commit_lsn, t.end_lsn) != (commit_lsn, end_lsn) {
            return Err(fail(
                "commit-positions",
                format!(
                    "transaction {} handed out with commit {}..{}, published {commit_lsn}..{end_lsn}",
                    t.xid, t.commit_lsn, t.end_lsn
                ),
            ));
        }
        if self.sub.applied.contains(&t.xid.0) {
            return Err(fail(
                "applied-exactly-once",
                format!("transaction {} (end {end_lsn}) handed out again", t.xid),
            ));
        }
        if end_lsn <= self.sub.origin {
            return Err(fail(
                "commit-order",
                format!(
                    "transaction {} ends at {end_lsn}, before the last applied end {}",
                    t.xid, self.sub.origin
                ),
            ));
        }
        let earliest =
            ts.to_unix().0 + (self.mix.delay_ms + self.mix.skew_tolerance_ms) as i64 * 1000;
        if t.due.0 < earliest || t.due > self.now {
            return Err(fail(
                "never-before-due",
                format!(
                    "transaction {} due {} (commit ts + delay = {earliest}), handed out at {}",
                    t.xid, t.due.0, self.now.0
                ),
            ));
        }
        let data: Vec<&Vec<u8>> = t
            .messages
            .iter()
            .filter(|m| m.first() == Some(&b'C'))
            .collect();
        if data.len() != txn.changes.len() || data.iter().zip(&txn.changes).any(|(a, b)| *a != b) {
            return Err(fail(
                "applied-content",
                format!(
                    "transaction {} applied {} changes, expected {:?}",
                    t.xid,
                    data.len(),
                    txn.changes
                        .iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect::<Vec<_>>()
                ),
            ));
        }
        trace!(
            self.t,
            "apply {} end {end_lsn} due {} at {}",
            t.xid,
            t.due.0,
            self.now.0
        );
        self.sub.applied.insert(t.xid.0);
        self.sub.origin = end_lsn;
        self.sub.last_pos = self.sub.last_pos.max(commit_lsn);
        Ok(())
    }

    fn deliver_note(&mut self, m: &ReadyMessage) -> Result<(), Violation> {
        let known = self
            .publ
            .notes
            .iter()
            .any(|n| n.lsn == m.lsn && n.payload == m.payload);
        if !known {
            return Err(fail(
                "only-published",
                format!("handed out unknown message at {}", m.lsn),
            ));
        }
        if self.sub.notes.get(&m.lsn.0) == Some(&self.session) {
            return Err(fail(
                "applied-exactly-once",
                format!("message at {} delivered twice in one session", m.lsn),
            ));
        }
        if m.lsn < self.sub.last_pos {
            return Err(fail(
                "commit-order",
                format!(
                    "message at {} after an item at {}",
                    m.lsn, self.sub.last_pos
                ),
            ));
        }
        trace!(self.t, "deliver message {}", m.lsn);
        self.sub.notes.insert(m.lsn.0, self.session);
        self.sub.last_pos = m.lsn;
        Ok(())
    }

    // ---- purge, crash, recovery ------------------------------------------------------------

    fn purge(&mut self) -> Result<(), Violation> {
        match self.q().purge() {
            Ok(removed) => {
                if !removed.is_empty() {
                    trace!(self.t, "purge removed {}", removed.len());
                }
                self.check_no_orphans()
            }
            Err(e) if e.is_retryable() => Ok(()),
            Err(e) => self.on_error("purge", e),
        }
    }

    /// After a purge: the files on disk are exactly the queue's segments, and nothing older
    /// than the oldest unfinished transaction is kept (unless a pending message pins it).
    fn check_no_orphans(&mut self) -> Result<(), Violation> {
        let info = self.q().inspect();
        let mut files: Vec<String> = self
            .q()
            .storage()
            .list()
            .map_err(|e| fail("no-orphan-segments", format!("list: {e}")))?
            .into_iter()
            .filter(|f| f.starts_with("dq-"))
            .collect();
        files.sort();
        let segs: Vec<String> = info.segments.iter().map(|s| s.file.clone()).collect();
        if files != segs {
            return Err(fail(
                "no-orphan-segments",
                format!("disk has {files:?}, queue knows {segs:?}"),
            ));
        }
        let (Some(first), Some(last)) = (info.segments.first(), info.segments.last()) else {
            return Ok(());
        };
        let floor = info
            .transactions
            .iter()
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
        let bad = first.seq > floor || (info.messages_pending == 0 && first.seq < floor);
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

    fn reconnect(&mut self) -> Result<(), Violation> {
        let now = self.now;
        match self.q().restart_stream(now) {
            Ok(()) => {}
            Err(e) if e.is_retryable() => return Ok(()),
            Err(e) => return self.on_error("restart_stream", e),
        }
        self.start_replication();
        Ok(())
    }

    fn start_replication(&mut self) {
        let resume = self.q().resume_lsn();
        let requested = resume.max(self.sub.origin);
        let (start, idx) = self.publ.resend_from(requested);
        trace!(
            self.t,
            "START_REPLICATION {requested} (resume {resume}, origin {}) -> from {start}, {} messages",
            self.sub.origin,
            idx.len()
        );
        self.conn = idx.into();
        self.session += 1;
        self.sub.last_pos = Lsn(0);
    }

    /// Process restart over the same disk (`crash`: after a power loss), recovery checks, and
    /// a new replication session.
    fn restart(&mut self, crash: bool) -> Result<(), Violation> {
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
            self.q = Some(q);
            self.check_recovery()?;
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
    fn check_recovery(&mut self) -> Result<(), Violation> {
        let info = self.q().inspect();
        let mut again = self.q().storage().clone();
        again.set_faults(SimFaults::default());
        let twin = DelayQueue::open(again, self.cfg.clone())
            .map_err(|e| fail("recovery-repeatable", format!("second reopen: {e}")))?;
        if twin.inspect() != info {
            return Err(fail(
                "recovery-repeatable",
                format!(
                    "a second recovery of the same disk differs: {:?} vs {:?}",
                    twin.inspect(),
                    info
                ),
            ));
        }
        let (reported, origin) = (self.reported, self.sub.origin);
        let state_of = |xid: u32| {
            info.transactions
                .iter()
                .filter(|t| t.xid.0 == xid)
                .map(|t| t.state)
                .find(|s| *s != TxnState::Aborted)
        };
        for (xid, txn) in &self.publ.txns {
            let need = match txn.fate {
                Fate::Committed { end_lsn, .. } if end_lsn <= origin => None,
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
        trace!(
            self.t,
            "recovered: {} transactions, {} segments, resume {}",
            info.transactions.len(),
            info.segments.len(),
            info.resume_lsn
        );
        Ok(())
    }

    fn after_open(&mut self) -> Result<(), AfterOpen> {
        let origin = self.sub.origin;
        let now = self.now;
        self.sub.unacked = None;
        self.retry(|q| q.skip_applied_through(origin).map(|_| ()))?;
        self.retry(|q| q.restart_stream(now))?;
        self.reported_here = Lsn(0);
        self.start_replication();
        Ok(())
    }

    fn retry(
        &mut self,
        mut f: impl FnMut(&mut DelayQueue<SimStorage>) -> Result<(), Error>,
    ) -> Result<(), AfterOpen> {
        for _ in 0..50 {
            match f(self.q()) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() => continue,
                Err(e @ (Error::Protocol(_) | Error::Misuse(_) | Error::Corrupt { .. })) => {
                    return Err(AfterOpen::Violation(fail(
                        "queue-accepts-valid-stream",
                        format!("after reopen: {e}"),
                    )))
                }
                Err(e) => return Err(AfterOpen::Fatal(e)),
            }
        }
        Err(AfterOpen::Fatal(Error::Misuse("still out of space".into())))
    }
}

/// Why the steps after a reopen did not complete.
enum AfterOpen {
    Violation(Violation),
    Fatal(Error),
}
