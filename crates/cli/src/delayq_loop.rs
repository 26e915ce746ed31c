//! The apply loop of `pgyard delayq apply` and `run`: due transactions in commit order,
//! gathered into batches of up to [`BATCH_TXNS`] (one subscriber transaction each, see
//! `pgyard_delayq::apply::Batch`), up to [`DEPTH`] batches in flight on the subscriber
//! connection (each one simple query that either commits with its origin progress or leaves
//! the transaction aborted, so that everything pipelined after a failure fails too and
//! nothing is applied out of order), with the operator's controls obeyed between sends. A
//! batch the subscriber refuses is applied again one transaction at a time, so that
//! everything before the culprit is applied and the error names it alone. The subscriber commits asynchronously; a
//! transaction is acknowledged to the queue (in the order handed out) only once the origin's
//! progress made durable there has passed it, asked for every [`PROGRESS_EVERY`]
//! transactions, every [`PROGRESS_INTERVAL`], and whenever apply goes idle or stops.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pgyard_blocking::PendingQuery;
use pgyard_delayq::apply::{Applier, Batch};
use pgyard_delayq::{ItemId, Ready};
use pgyard_tokio::follow::{lock, SharedQueue};
use pgyard_types::{Lsn, PgTimestamp};

use crate::delayq_apply::{status_line, unix_now, Applied, ApplyFailure, PendingBatch, Subscriber};
use crate::delayq_control::{status_json, Control, Until};

/// Batches in flight at most ...
pub const DEPTH: usize = 32;
/// ... and bytes of SQL in flight at most.
pub const BYTES_IN_FLIGHT: usize = 4 << 20;
/// Transactions in one batch at most (a row that every transaction updates gets one
/// unprunable version per transaction of its batch, which later updates walk) ...
pub const BATCH_TXNS: usize = 32;
/// ... and bytes of change SQL in one batch before it is closed.
pub const BATCH_BYTES: usize = 1 << 20;
/// Applied segments are purged this often while apply is busy (and whenever it goes idle).
pub const PURGE_INTERVAL: Duration = Duration::from_secs(1);
/// The durable progress is asked for after this many transactions ...
pub const PROGRESS_EVERY: usize = 256;
/// ... or this long after the last question.
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(100);

/// Where the operator's controls live and where applying holds.
#[derive(Clone, Debug)]
pub struct Controls {
    /// The queue directory (`control.json`, `status.json`).
    pub dir: PathBuf,
    /// Apply only what committed before this, then hold.
    pub until: Option<Until>,
}

/// One transaction of a batch sent to the subscriber.
struct SentTxn {
    id: ItemId,
    commit_lsn: Lsn,
    end_lsn: Lsn,
    commit_ts: PgTimestamp,
    changes: u64,
}

/// One item handed out by the queue and not yet acknowledged.
enum Entry {
    /// A batch of transactions sent to the subscriber as one.
    Sent {
        txns: Vec<SentTxn>,
        bytes: usize,
        pending: PendingBatch,
    },
    /// A message (nothing to apply) or a transaction the operator skips.
    Ack { id: ItemId, skipped: Option<Lsn> },
    /// The question for the origin's durable progress.
    Progress { pending: PendingQuery },
}

/// A handed-out item waiting to be acknowledged to the queue.
struct Waiting {
    id: ItemId,
    /// The subscriber's durable progress that must reach this end LSN first (`None`: at once).
    needs: Option<Lsn>,
    commit_ts: PgTimestamp,
    changes: u64,
    skipped: Option<Lsn>,
}

/// One apply run's state (see [`apply_loop`]).
struct Looper<'a> {
    queue: &'a SharedQueue,
    sub: &'a mut Subscriber,
    stop: Option<&'a AtomicBool>,
    controls: &'a Controls,
    control: Control,
    control_read: Instant,
    applier: Applier,
    pipe: VecDeque<Entry>,
    pipe_bytes: usize,
    /// A transaction that could not be turned into SQL: reported once the pipe is empty.
    failed: Option<ApplyFailure>,
    /// After a refused batch: one transaction per batch through this commit LSN.
    singly_through: Option<Lsn>,
    /// Handed out and done, in order, until the durable progress lets them be acknowledged.
    waiting: VecDeque<Waiting>,
    /// The origin's durable progress on the subscriber, as last asked.
    flushed: Lsn,
    /// Whether a progress question is in the pipe, and when the last one was sent.
    asking: bool,
    asked: Instant,
    sent_since_asked: usize,
    done: Applied,
    last_log: Instant,
    last_status: Instant,
    /// When applied segments were last flushed and purged.
    last_purge: Instant,
}

/// What one turn of the loop did.
enum Turn {
    Go,
    Wait(Duration),
    Finished,
}

fn qerr(e: pgyard_delayq::Error) -> ApplyFailure {
    ApplyFailure::Queue(e.to_string())
}

/// Space and other retryable refusals resolve as apply and purge free segments.
fn soft<T>(r: Result<T, pgyard_delayq::Error>) -> Result<(), ApplyFailure> {
    match r {
        Err(e) if !e.is_retryable() => Err(qerr(e)),
        _ => Ok(()),
    }
}

/// Applies due items in commit order. Without `stop`, returns once the queue holds nothing
/// more (waiting for due times) or holds at `--until`; with it, runs until the flag is set
/// (`delayq run`, where `follow` fills the same queue). Obeys `pause`, `resume` and `skip`
/// within 200 ms and writes `status.json` every second.
pub fn apply_loop(
    queue: &SharedQueue,
    sub: &mut Subscriber,
    stop: Option<&AtomicBool>,
    controls: &Controls,
) -> Result<Applied, ApplyFailure> {
    let mut done = Applied::default();
    {
        let mut q = lock(queue);
        done.skipped_at_start = q.skip_applied_through(sub.progress).map_err(qerr)?;
        soft(q.flush())?;
    }
    let long_ago = Instant::now() - Duration::from_secs(60);
    let flushed = sub.progress;
    let mut l = Looper {
        queue,
        sub,
        stop,
        controls,
        control: Control::default(),
        control_read: long_ago,
        applier: Applier::new(),
        pipe: VecDeque::new(),
        pipe_bytes: 0,
        failed: None,
        singly_through: None,
        waiting: VecDeque::new(),
        flushed,
        asking: false,
        asked: Instant::now(),
        sent_since_asked: 0,
        done,
        last_log: Instant::now(),
        last_status: long_ago,
        last_purge: Instant::now(),
    };
    loop {
        let turn = l.turn();
        if turn.is_err() {
            l.last_status = long_ago;
            l.report();
        }
        match turn? {
            Turn::Go => {}
            Turn::Wait(d) => std::thread::sleep(d),
            Turn::Finished => {
                soft(lock(l.queue).flush())?;
                l.last_status = long_ago;
                l.report();
                return Ok(l.done);
            }
        }
        l.report();
    }
}

impl Looper<'_> {
    fn turn(&mut self) -> Result<Turn, ApplyFailure> {
        let idle = Duration::from_millis(200);
        let stopping = self.stop.is_some_and(|s| s.load(Ordering::Relaxed));
        if self.control_read.elapsed() >= idle {
            self.control_read = Instant::now();
            match Control::load(&self.controls.dir) {
                Ok(c) => self.control = c,
                Err(e) => eprintln!("pgyard delayq: {e}; keeping the previous controls"),
            }
        }
        if !stopping && !self.control.paused && self.failed.is_none() {
            self.fill()?;
        }
        let due =
            self.sent_since_asked >= PROGRESS_EVERY || self.asked.elapsed() >= PROGRESS_INTERVAL;
        if !self.waiting.is_empty() && !self.asking && (due || self.pipe.is_empty()) {
            let pending = self.sub.send_progress()?;
            self.pipe.push_back(Entry::Progress { pending });
            self.asking = true;
            self.asked = Instant::now();
            self.sent_since_asked = 0;
        }
        if !self.pipe.is_empty() {
            self.complete_one()?;
            if self.last_purge.elapsed() >= PURGE_INTERVAL {
                // The APPLIED records need no fsync of their own (the subscriber's origin is
                // the durable truth); a long catch-up still frees its segments as it goes.
                self.last_purge = Instant::now();
                let mut q = lock(self.queue);
                soft(q.flush())?;
                soft(q.purge())?;
            }
            return Ok(Turn::Go);
        }
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        if !self.waiting.is_empty() {
            // Nothing in the pipe yet something waits: the next turn asks for the progress.
            return Ok(Turn::Go);
        }
        if stopping {
            return Ok(Turn::Finished);
        }
        if self.control.paused {
            return Ok(Turn::Wait(idle));
        }
        if self.done.held_at.is_some() {
            return Ok(if self.stop.is_some() {
                Turn::Wait(idle)
            } else {
                Turn::Finished
            });
        }
        let next = {
            let mut q = lock(self.queue);
            soft(q.flush())?;
            soft(q.purge())?;
            q.next_due()
        };
        let wait = match (next, self.stop) {
            (None, None) => return Ok(Turn::Finished),
            (None, Some(_)) => 200_000,
            (Some(due), _) => (due.0 - unix_now().0).clamp(1_000, 200_000),
        };
        Ok(Turn::Wait(Duration::from_micros(wait as u64)))
    }

    /// Hands out due items and sends them until the pipe is full or nothing more is due.
    fn fill(&mut self) -> Result<(), ApplyFailure> {
        self.done.held_at = None;
        while self.pipe.len() < DEPTH && self.pipe_bytes < BYTES_IN_FLIGHT {
            let Some(entry) = self.next_entry()? else {
                return Ok(());
            };
            if let Entry::Sent { bytes, .. } = &entry {
                self.pipe_bytes += bytes;
            }
            self.pipe.push_back(entry);
        }
        Ok(())
    }

    /// The next entry for the pipe: a message or skipped transaction to acknowledge, or a
    /// batch of due transactions, sent. `None` when nothing is due, applying holds at
    /// `--until`, or a transaction could not be turned into SQL.
    fn next_entry(&mut self) -> Result<Option<Entry>, ApplyFailure> {
        let mut batch = Batch::new();
        let mut txns = Vec::new();
        while self.failed.is_none() && self.done.held_at.is_none() {
            let next = lock(self.queue).next_commit();
            if let (Some(until), Some((lsn, ts))) = (self.controls.until, next) {
                if until.holds(lsn, ts) {
                    self.done.held_at = Some(lsn);
                    break;
                }
            }
            if let (Some(through), Some((lsn, _))) = (self.singly_through, next) {
                if lsn > through {
                    self.singly_through = None;
                }
            }
            if !batch.is_empty() {
                // Messages and skipped transactions go on their own; so does everything
                // while a refused batch is retried one by one.
                let full = batch.len() >= BATCH_TXNS || batch.bytes() >= BATCH_BYTES;
                let skip = next.is_some_and(|(lsn, _)| self.control.skip.contains(&lsn));
                if full || skip || next.is_none() || self.singly_through.is_some() {
                    break;
                }
            }
            let ready = lock(self.queue).poll_ready(unix_now()).map_err(qerr)?;
            match ready {
                None => break,
                Some(Ready::Message(m)) => {
                    return Ok(Some(Entry::Ack {
                        id: m.id,
                        skipped: None,
                    }))
                }
                Some(Ready::Transaction(t)) if self.control.skip.contains(&t.commit_lsn) => {
                    return Ok(Some(Entry::Ack {
                        id: t.id,
                        skipped: Some(t.commit_lsn),
                    }))
                }
                Some(Ready::Transaction(t)) => match self.applier.add(&mut batch, &t) {
                    Ok(changes) => txns.push(SentTxn {
                        id: t.id,
                        commit_lsn: t.commit_lsn,
                        end_lsn: t.end_lsn,
                        commit_ts: t.commit_ts,
                        changes,
                    }),
                    Err(e) => self.failed = Some(ApplyFailure::Apply(e)),
                },
            }
        }
        let Some(plan) = batch.finish() else {
            return Ok(None);
        };
        let pending = self.sub.send(&plan)?;
        self.sent_since_asked += txns.len();
        Ok(Some(Entry::Sent {
            txns,
            bytes: plan.bytes(),
            pending,
        }))
    }

    /// Waits for the oldest entry's outcome; acknowledges to the queue what is durable.
    fn complete_one(&mut self) -> Result<(), ApplyFailure> {
        let Some(entry) = self.pipe.pop_front() else {
            return Ok(());
        };
        match entry {
            Entry::Ack { id, skipped } => self.waiting.push_back(Waiting {
                id,
                needs: None,
                commit_ts: PgTimestamp(0),
                changes: 0,
                skipped,
            }),
            Entry::Progress { pending } => {
                self.asking = false;
                self.flushed = self.flushed.max(self.sub.finish_progress(pending)?);
            }
            Entry::Sent {
                txns,
                bytes,
                pending,
            } => {
                self.pipe_bytes -= bytes;
                let (Some(first), Some(last)) = (txns.first(), txns.last()) else {
                    return Ok(());
                };
                let (commit_lsn, end_lsn) = (first.commit_lsn, last.end_lsn);
                if let Err(e) = self.sub.finish(pending, commit_lsn, end_lsn) {
                    let rest: Vec<PendingQuery> = self
                        .pipe
                        .drain(..)
                        .flat_map(|e| match e {
                            Entry::Sent { pending, .. } => pending.into_replies(),
                            Entry::Progress { pending } => vec![pending],
                            Entry::Ack { .. } => Vec::new(),
                        })
                        .collect();
                    self.pipe_bytes = 0;
                    self.asking = false;
                    self.sub.abandon(rest)?;
                    let refused =
                        matches!(e, ApplyFailure::RowCheck(_) | ApplyFailure::Refused { .. });
                    if txns.len() > 1 && refused {
                        return self.retry_singly(last.commit_lsn, e);
                    }
                    return Err(e);
                }
                for t in txns {
                    self.waiting.push_back(Waiting {
                        id: t.id,
                        needs: Some(end_lsn),
                        commit_ts: t.commit_ts,
                        changes: t.changes,
                        skipped: None,
                    });
                }
            }
        }
        self.acknowledge()
    }

    /// After a refused batch (rolled back, the pipe drained): acknowledges what committed
    /// before it, then hands everything after that out again to be applied one transaction
    /// at a time through the batch's last commit.
    fn retry_singly(&mut self, through: Lsn, refused: ApplyFailure) -> Result<(), ApplyFailure> {
        let pending = self.sub.send_progress()?;
        self.flushed = self.flushed.max(self.sub.finish_progress(pending)?);
        self.acknowledge()?;
        if !self.waiting.is_empty() {
            // Committed before the batch yet not durable after a flush: nothing to retry on.
            return Err(refused);
        }
        lock(self.queue).rehand();
        self.singly_through = Some(through);
        self.sent_since_asked = 0;
        Ok(())
    }

    /// Marks applied, in order, what needs nothing more or lies within the durable progress.
    fn acknowledge(&mut self) -> Result<(), ApplyFailure> {
        let mut q = lock(self.queue);
        while let Some(w) = self.waiting.front() {
            if w.needs.is_some_and(|end| end > self.flushed) {
                break;
            }
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            q.mark_applied(w.id).map_err(qerr)?;
            match (w.needs, w.skipped) {
                (_, Some(lsn)) => {
                    soft(q.flush())?;
                    eprintln!(
                        "pgyard delayq: skipped the transaction committed at {lsn}, as asked"
                    );
                    self.done.skipped.push(lsn);
                }
                (Some(end), None) => {
                    self.done.transactions += 1;
                    self.done.rows += w.changes;
                    self.done.last_end_lsn = Some(end);
                    self.done.last_commit_ts = Some(w.commit_ts);
                }
                (None, None) => {}
            }
        }
        Ok(())
    }

    /// The status line every 5 s on standard error, `status.json` every second.
    fn report(&mut self) {
        if self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            eprintln!("{}", status_line(&lock(self.queue), &self.done));
        }
        if self.last_status.elapsed() >= Duration::from_secs(1) {
            self.last_status = Instant::now();
            let applied = self.done.last_end_lsn.zip(self.done.last_commit_ts);
            let mut v = status_json(
                &lock(self.queue).inspect(),
                &self.control,
                applied,
                unix_now(),
            );
            v["running"] = true.into();
            v["pid"] = std::process::id().into();
            v["held_at"] = self.done.held_at.map(|l| l.to_string()).into();
            let path = self.controls.dir.join("status.json");
            if let Err(e) = write_status(&path, &v) {
                eprintln!("pgyard delayq: {e}");
            }
        }
    }
}

/// Replaces `status.json` (informational: renamed into place, not fsynced).
fn write_status(path: &std::path::Path, v: &serde_json::Value) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, v.to_string())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}
