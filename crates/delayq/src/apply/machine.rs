//! [`ApplyMachine`]: from due transactions in the queue to batches on a subscriber and back to
//! `mark_applied` and purge — the acknowledgement logic of `pgyard delayq apply` and `run`, as
//! a sans-IO machine that the CLI drives over a real subscriber and the simulator over a
//! modelled one.
//!
//! The one rule it protects: a transaction is marked applied (so it may be purged) only once
//! the subscriber's COMMIT of it succeeded **and** the replication origin's *durable* progress
//! passed its end LSN. The subscriber commits asynchronously (`synchronous_commit = off`, as
//! PostgreSQL's apply worker), so a COMMIT that returned may still be lost in a crash of the
//! subscriber, with the origin progress it carried; acknowledging on the COMMIT alone would
//! let the queue purge a transaction the subscriber no longer has.
//!
//! Driving it (every call takes the queue and, where time matters, `now`):
//!
//! * [`ApplyMachine::new`] for each subscriber session, with the origin's progress read at
//!   connect (`pg_replication_origin_progress(name, true)`): everything up to it is marked
//!   applied and the queue hands out again from the oldest unacknowledged item.
//! * [`ApplyMachine::poll_command`] until `None`: each [`Command`] is I/O for the adapter —
//!   send a batch, ask for the durable progress, roll back after a refusal. Requests are
//!   pipelined; their replies come back in the order sent.
//! * [`ApplyMachine::wait`] says what to do next: read the oldest reply and hand it in
//!   ([`ApplyMachine::handle_committed`], [`ApplyMachine::handle_refused`],
//!   [`ApplyMachine::handle_progress`]), or sleep until a due time, or stop.
//! * [`ApplyMachine::poll_notice`] reports what it did on its own (a message handed out, a
//!   transaction skipped as the operator asked, a purge).
//!
//! A broken connection is the adapter's business: it drops the machine, reconnects and
//! starts a new one from the origin's progress.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use pgyard_types::{Lsn, PgTimestamp, UnixTime};

use super::{Applier, ApplyError, Plan};
use crate::{DelayQueue, Error, ItemId, ReadyMessage, Storage, TxnCursor};

mod send;

/// How an [`ApplyMachine`] paces its work. The defaults are what `pgyard delayq apply` uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApplyConfig {
    /// Batches in flight at most ...
    pub depth: usize,
    /// ... and bytes of SQL in flight at most.
    pub bytes_in_flight: usize,
    /// Transactions in one batch at most (a row every transaction updates gets one
    /// unprunable version per transaction of its batch, which later updates walk) ...
    pub batch_txns: usize,
    /// ... and bytes of change SQL in one batch before it is closed.
    pub batch_bytes: usize,
    /// A transaction is read out of the queue in pieces of this many bytes of messages at
    /// most (a larger message alone), each sent as a part of one subscriber transaction: with
    /// `bytes_in_flight`, what bounds the memory a large transaction takes.
    pub piece_bytes: usize,
    /// The durable progress is asked for after this many transactions were sent ...
    pub progress_every: usize,
    /// ... or this long after the last question (and whenever nothing else is in flight).
    pub progress_interval: Duration,
    /// Applied segments are purged this often while busy, and when apply goes idle.
    pub purge_interval: Duration,
}

impl Default for ApplyConfig {
    fn default() -> Self {
        ApplyConfig {
            depth: 32,
            bytes_in_flight: 4 << 20,
            batch_txns: 32,
            batch_bytes: 1 << 20,
            piece_bytes: 1 << 20,
            progress_every: 256,
            progress_interval: Duration::from_millis(100),
            purge_interval: Duration::from_secs(1),
        }
    }
}

/// Where applying stops and holds (`--until`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// Apply what committed before this LSN.
    Lsn(Lsn),
    /// Apply what committed before this time.
    Time(UnixTime),
}

impl Until {
    /// Whether a transaction that committed at `lsn`, `ts` is to be held.
    pub fn holds(self, lsn: Lsn, ts: PgTimestamp) -> bool {
        match self {
            Until::Lsn(u) => lsn >= u,
            Until::Time(u) => ts.to_unix() >= u,
        }
    }
}

/// The operator's controls, as the machine obeys them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApplyControls {
    /// Send nothing more until unpaused (what is in flight completes).
    pub paused: bool,
    /// Transactions (by commit LSN) to mark applied without applying them.
    pub skip: BTreeSet<Lsn>,
    /// Apply only what committed before this, then hold.
    pub until: Option<Until>,
}

/// Names one batch sent to the subscriber; its reply is handed back with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct BatchId(pub u64);

/// I/O the adapter performs for the machine, in the order polled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// Send `plan` — [`Plan::BEGIN`] if it [opens](Plan::opens), its steps,
    /// [`Plan::commit_sql`] if it [closes](Plan::closes) — without waiting for the reply;
    /// hand the outcome to [`ApplyMachine::handle_committed`] or
    /// [`ApplyMachine::handle_refused`]. A transaction larger than
    /// [`ApplyConfig::piece_bytes`] comes as several plans, one subscriber transaction.
    Send {
        /// The batch's name.
        id: BatchId,
        /// What to run.
        plan: Plan,
    },
    /// Ask `pg_replication_origin_session_progress(true)` (pipelined behind what was sent):
    /// it flushes the subscriber's WAL up to the origin's progress and returns it. Hand the
    /// answer to [`ApplyMachine::handle_progress`].
    AskProgress,
    /// A batch was refused, so everything sent after it fails in the aborted transaction
    /// block: read and drop the replies still in flight, `ROLLBACK`, and put the origin back
    /// at `origin` (the last batch that committed) if the abort moved it.
    RollBack {
        /// Where the origin's progress must stand.
        origin: Lsn,
    },
}

/// What the machine did on its own, for the adapter to report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Notice {
    /// A non-transactional message was handed out (nothing to apply; acknowledged in order).
    Message(ReadyMessage),
    /// The transaction committed at this LSN was marked applied without being applied, as
    /// the operator asked (flushed at once).
    Skipped(Lsn),
    /// The queue was purged; this many segment files were removed.
    Purged(usize),
}

/// What the adapter should do once [`ApplyMachine::poll_command`] has nothing more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Replies are outstanding: read the oldest and hand it in.
    Reply,
    /// An acknowledgement waits for space in the queue: poll again shortly.
    Poll,
    /// Stopped after [`ApplyMachine::stop`]: nothing in flight, everything acknowledged.
    Stopped,
    /// Paused by the operator.
    Paused,
    /// Holding before the transaction committed at this LSN (`until`).
    Held(Lsn),
    /// Nothing more is queued.
    Drained,
    /// The next item becomes due at this time (it may be past: then it waits to be durable).
    Due(UnixTime),
}

/// Why the machine stopped. Once it returns one, every later poll returns it again.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The queue failed (poisoned, corrupt, out of space where that cannot wait).
    #[error("queue: {0}")]
    Queue(Error),
    /// A transaction could not be turned into SQL; it stays queued.
    #[error("{0}")]
    Plan(ApplyError),
    /// The subscriber refused the transaction (applied alone) at `commit_lsn`; it stays
    /// queued.
    #[error("commit {commit_lsn}: the subscriber refused it: {text}")]
    Refused {
        /// The refused transaction's commit LSN.
        commit_lsn: Lsn,
        /// The subscriber's error text.
        text: String,
    },
    /// A reply that does not answer the oldest request in flight (the adapter's mistake).
    #[error("apply machine misuse: {0}")]
    Misuse(String),
}

impl Failure {
    /// Whether it is a queue refusal that goes away as space is freed (worth a retry).
    pub fn is_retryable(&self) -> bool {
        matches!(self, Failure::Queue(e) if e.is_retryable())
    }
}

/// What a machine has acknowledged so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Transactions applied.
    pub transactions: u64,
    /// Rows inserted, updated or deleted.
    pub rows: u64,
    /// Transactions the origin's progress showed as applied already.
    pub skipped_at_start: usize,
    /// The commit end LSN of the last transaction applied.
    pub last_end_lsn: Option<Lsn>,
    /// Its commit time on the publisher.
    pub last_commit_ts: Option<PgTimestamp>,
    /// Transactions dropped as the operator asked, by commit LSN.
    pub skipped: Vec<Lsn>,
    /// Where `until` made applying hold (the next transaction's commit LSN).
    pub held_at: Option<Lsn>,
}

/// Realistic bugs for the simulator to catch; compiled only with the `planted-bugs` feature
/// and off until switched on with [`ApplyMachine::with_planted_bug`].
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Marks a batch's transactions applied as soon as it is sent, before the subscriber's
    /// COMMIT is acknowledged (let alone durable).
    AckBeforeCommit,
}

/// The planted bug in force (never anything without the `planted-bugs` feature).
#[cfg(feature = "planted-bugs")]
type Bug = Option<PlantedBug>;
#[cfg(not(feature = "planted-bugs"))]
type Bug = Option<std::convert::Infallible>;

/// What a handed-out item still needs before `mark_applied`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needs {
    /// Its batch's COMMIT (by batch number).
    Commit(u64),
    /// The last piece of its subscriber transaction to be sent (then its COMMIT).
    Sending,
    /// The durable progress to reach this end LSN.
    Durable(Lsn),
    /// Nothing: a message or a skipped transaction.
    Nothing,
}

/// A handed-out item, in hand-out order, until it is acknowledged to the queue.
#[derive(Clone, Debug)]
struct Waiting {
    id: ItemId,
    needs: Needs,
    /// For a transaction: end LSN, commit time and rows changed.
    txn: Option<(Lsn, PgTimestamp, u64)>,
    skipped: Option<Lsn>,
}

/// A request whose reply has not been handed in yet.
#[derive(Clone, Copy, Debug)]
enum InFlight {
    Batch {
        id: u64,
        /// First and last commit LSN of its transactions.
        first: Lsn,
        last: Lsn,
        end: Lsn,
        /// Whether it ends its subscriber transaction (else a piece of a larger one).
        closes: bool,
        txns: usize,
        bytes: usize,
    },
    Progress,
}

/// The subscriber transaction still open for the pieces of a transaction handed out in
/// pieces.
#[derive(Clone, Debug)]
struct OpenTxn {
    /// Where its next piece is read.
    cursor: TxnCursor,
    /// The commit LSN of the first transaction in the subscriber transaction ...
    first: Lsn,
    /// ... of the last one (the one in pieces) ...
    last: Lsn,
    /// ... and how many.
    txns: usize,
}

/// The apply machine (see the module documentation).
#[derive(Debug)]
pub struct ApplyMachine {
    config: ApplyConfig,
    controls: ApplyControls,
    applier: Applier,
    pipe: VecDeque<InFlight>,
    batches_in_flight: usize,
    bytes_in_flight: usize,
    next_batch: u64,
    waiting: VecDeque<Waiting>,
    /// A transaction is being sent in pieces: nothing else is sent until its last one.
    open: Option<OpenTxn>,
    /// The origin's durable progress, as last answered.
    flushed: Lsn,
    /// The origin's progress after the last batch that committed.
    committed: Lsn,
    asking: bool,
    asked_at: UnixTime,
    sent_since_asked: usize,
    last_purge: UnixTime,
    acked_since_purge: bool,
    /// A refusal happened: the RollBack command is still to be polled.
    rollback: Option<Lsn>,
    /// After a refused batch of several: apply one by one through this commit LSN, once the
    /// durable progress says what committed before it (else stop with the refusal).
    recovering: Option<(Lsn, Failure)>,
    singly_through: Option<Lsn>,
    failed: Option<Failure>,
    stopping: bool,
    applied: Applied,
    notices: VecDeque<Notice>,
    bug: Bug,
}

/// Whether `interval` has passed since `since` (a clock that stepped back counts as passed,
/// so a wall clock set back an hour cannot hold progress questions and purges back an hour).
pub(crate) fn elapsed(since: UnixTime, now: UnixTime, interval: Duration) -> bool {
    let micros = i64::try_from(interval.as_micros()).unwrap_or(i64::MAX);
    now < since || now.0.saturating_sub(since.0) >= micros
}

impl ApplyMachine {
    /// Starts applying for a new subscriber session whose origin's progress is `origin`:
    /// the queue hands out again from the oldest unacknowledged item (with the whole relation
    /// map, for this machine's fresh statement builder), and everything the origin already
    /// covers is marked applied and flushed.
    pub fn new<S: Storage>(
        q: &mut DelayQueue<S>,
        origin: Lsn,
        config: ApplyConfig,
        controls: ApplyControls,
        now: UnixTime,
    ) -> Result<ApplyMachine, Failure> {
        q.rehand();
        let skipped = q.skip_applied_through(origin).map_err(Failure::Queue)?;
        soft(q.flush())?;
        Ok(ApplyMachine {
            config,
            controls,
            applier: Applier::new(),
            pipe: VecDeque::new(),
            batches_in_flight: 0,
            bytes_in_flight: 0,
            next_batch: 0,
            waiting: VecDeque::new(),
            open: None,
            flushed: origin,
            committed: origin,
            asking: false,
            asked_at: now,
            sent_since_asked: 0,
            last_purge: now,
            acked_since_purge: false,
            rollback: None,
            recovering: None,
            singly_through: None,
            failed: None,
            stopping: false,
            applied: Applied {
                skipped_at_start: skipped,
                ..Applied::default()
            },
            notices: VecDeque::new(),
            bug: None,
        })
    }

    /// Switches a planted bug on (simulator tests only).
    #[cfg(feature = "planted-bugs")]
    pub fn with_planted_bug(mut self, bug: PlantedBug) -> Self {
        self.bug = Some(bug);
        self
    }

    /// Replaces the operator's controls (read again by the adapter now and then).
    pub fn set_controls(&mut self, controls: ApplyControls) {
        self.controls = controls;
    }

    /// Sends nothing more; [`Wait::Stopped`] once everything in flight is acknowledged.
    pub fn stop(&mut self) {
        self.stopping = true;
    }

    /// What has been acknowledged so far.
    pub fn applied(&self) -> &Applied {
        &self.applied
    }

    /// The origin's durable progress as last answered (what the queue may be purged behind).
    pub fn durable_progress(&self) -> Lsn {
        self.flushed
    }

    /// The next notice, oldest first.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    /// The next I/O to perform, `None` when there is nothing to send now (see
    /// [`ApplyMachine::wait`]). Hands due items out of the queue, acknowledges what the
    /// replies allow, and flushes and purges the queue when apply goes idle.
    pub fn poll_command<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<Option<Command>, Failure> {
        if let Some(origin) = self.rollback.take() {
            return Ok(Some(Command::RollBack { origin }));
        }
        if self.recovering.is_some() {
            return Ok((!self.asking).then(|| self.ask(now)));
        }
        if let Some(f) = &self.failed {
            if self.pipe.is_empty() {
                return Err(f.clone());
            }
        }
        // Retries an acknowledgement that found the queue out of space.
        self.acknowledge(q)?;
        if self.open.is_some() {
            // A subscriber transaction left half sent holds its locks and leaves the rest
            // waiting: its pieces go on even when paused or stopping.
            if self.may_continue() {
                if let Some(command) = self.next_piece(q) {
                    return Ok(Some(command));
                }
            }
        } else if self.may_send() {
            let sent = self.next_batch(q, now);
            // Messages and skipped transactions handed out on the way may be due now.
            self.acknowledge(q)?;
            if let Some(command) = sent {
                return Ok(Some(command));
            }
        }
        let due = self.sent_since_asked >= self.config.progress_every
            || elapsed(self.asked_at, now, self.config.progress_interval);
        // Not in the middle of an open subscriber transaction: the question would run in it.
        if self.committed > self.flushed
            && !self.asking
            && self.open.is_none()
            && (due || self.pipe.is_empty())
        {
            return Ok(Some(self.ask(now)));
        }
        if self.pipe.is_empty() {
            if let Some(f) = &self.failed {
                return Err(f.clone());
            }
            let idle_due =
                self.acked_since_purge || elapsed(self.last_purge, now, self.config.purge_interval);
            if self.waiting.is_empty() && idle_due {
                self.maintain(q, now)?;
            }
        }
        Ok(None)
    }

    /// What to do once [`ApplyMachine::poll_command`] returned `None`.
    pub fn wait<S: Storage>(&self, q: &DelayQueue<S>) -> Wait {
        if !self.pipe.is_empty() {
            return Wait::Reply;
        }
        if !self.waiting.is_empty() || self.rollback.is_some() || self.failed.is_some() {
            return Wait::Poll;
        }
        if self.stopping {
            return Wait::Stopped;
        }
        if self.controls.paused {
            return Wait::Paused;
        }
        if let Some(lsn) = self.applied.held_at {
            return Wait::Held(lsn);
        }
        match q.next_due() {
            None => Wait::Drained,
            Some(due) => Wait::Due(due),
        }
    }

    /// The oldest batch in flight committed on the subscriber (with its origin progress);
    /// for a piece that does not close its subscriber transaction ([`Plan::closes`]), ran
    /// without error.
    pub fn handle_committed<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        id: BatchId,
        now: UnixTime,
    ) -> Result<(), Failure> {
        let (_, _, end, _, closes) = self.pop_batch(id)?;
        if closes {
            self.committed = self.committed.max(end);
        }
        for w in &mut self.waiting {
            if w.needs == Needs::Commit(id.0) {
                w.needs = Needs::Durable(end);
            }
        }
        self.acknowledge(q)?;
        self.maintain_if_due(q, now)
    }

    /// The subscriber refused the oldest batch in flight with `text` (the transaction block
    /// is aborted; nothing of it committed). Everything sent after it is lost with it. A
    /// batch of several transactions is applied again one at a time through its last one, so
    /// that what precedes the culprit is applied and the error names the culprit alone.
    pub fn handle_refused(&mut self, id: BatchId, text: String) -> Result<(), Failure> {
        let (first, last, _, txns, _) = self.pop_batch(id)?;
        self.pipe.clear();
        // A transaction sent in pieces is rolled back whole, and handed out again whole.
        self.open = None;
        self.batches_in_flight = 0;
        self.bytes_in_flight = 0;
        self.asking = false;
        // What was handed out from this batch on goes back to the queue (handed out again).
        if let Some(at) = self.waiting.iter().position(|w| {
            matches!(w.needs, Needs::Commit(b) if b >= id.0) || w.needs == Needs::Sending
        }) {
            self.waiting.truncate(at);
        }
        self.rollback = Some(self.committed);
        let refusal = Failure::Refused {
            commit_lsn: first,
            text,
        };
        if txns > 1 {
            self.recovering = Some((last, refusal));
        } else {
            self.failed = Some(refusal);
        }
        Ok(())
    }

    /// The answer to the oldest [`Command::AskProgress`] in flight: the origin's progress,
    /// now durable on the subscriber.
    pub fn handle_progress<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        durable: Lsn,
        now: UnixTime,
    ) -> Result<(), Failure> {
        if !matches!(self.pipe.front(), Some(InFlight::Progress)) {
            return Err(self.misuse("a progress answer while no question is the oldest in flight"));
        }
        self.pipe.pop_front();
        self.asking = false;
        self.flushed = self.flushed.max(durable);
        self.acknowledge(q)?;
        if let Some((through, refusal)) = self.recovering.take() {
            if !self.waiting.is_empty() {
                // Committed before the refused batch yet not durable after a flush: nothing
                // to retry on.
                self.failed = Some(refusal);
                return Ok(());
            }
            q.rehand();
            self.singly_through = Some(through);
            self.sent_since_asked = 0;
            return Ok(());
        }
        self.maintain_if_due(q, now)
    }

    fn may_send(&self) -> bool {
        !self.stopping
            && !self.controls.paused
            && self.failed.is_none()
            && self.batches_in_flight < self.config.depth
            && self.bytes_in_flight < self.config.bytes_in_flight
    }

    /// Whether the next piece of the open subscriber transaction may be sent.
    fn may_continue(&self) -> bool {
        self.failed.is_none()
            && self.batches_in_flight < self.config.depth
            && self.bytes_in_flight < self.config.bytes_in_flight
    }

    fn ask(&mut self, now: UnixTime) -> Command {
        self.pipe.push_back(InFlight::Progress);
        self.asking = true;
        self.asked_at = now;
        self.sent_since_asked = 0;
        Command::AskProgress
    }

    fn misuse(&mut self, what: &str) -> Failure {
        let f = Failure::Misuse(what.to_owned());
        self.failed = Some(f.clone());
        f
    }

    /// Takes the oldest request in flight, which must be batch `id`: its first and last
    /// commit LSN, end LSN, transaction count and whether it closes its transaction.
    fn pop_batch(&mut self, id: BatchId) -> Result<(Lsn, Lsn, Lsn, usize, bool), Failure> {
        match self.pipe.front().copied() {
            Some(InFlight::Batch {
                id: head,
                first,
                last,
                end,
                closes,
                txns,
                bytes,
            }) if head == id.0 => {
                self.pipe.pop_front();
                self.batches_in_flight -= 1;
                self.bytes_in_flight -= bytes;
                Ok((first, last, end, txns, closes))
            }
            _ => Err(self.misuse(&format!(
                "a reply for batch {} while it is not the oldest in flight",
                id.0
            ))),
        }
    }

    /// Marks applied, in hand-out order, what needs nothing more or lies within the durable
    /// progress. A queue out of space leaves the rest for a later call.
    fn acknowledge<S: Storage>(&mut self, q: &mut DelayQueue<S>) -> Result<(), Failure> {
        while let Some(w) = self.waiting.front() {
            match w.needs {
                Needs::Commit(_) | Needs::Sending => break,
                Needs::Durable(end) if end > self.flushed => break,
                _ => {}
            }
            match q.mark_applied(w.id) {
                Ok(()) => {}
                Err(e) if e.is_retryable() => break,
                Err(e) => {
                    self.failed = Some(Failure::Queue(e.clone()));
                    return Err(Failure::Queue(e));
                }
            }
            let Some(w) = self.waiting.pop_front() else {
                break;
            };
            self.acked_since_purge = true;
            if let Some(lsn) = w.skipped {
                // A skip is the operator's decision, not the subscriber's: made durable now.
                soft(q.flush())?;
                self.applied.skipped.push(lsn);
                self.notices.push_back(Notice::Skipped(lsn));
            } else if let Some((end, ts, rows)) = w.txn {
                self.applied.transactions += 1;
                self.applied.rows += rows;
                self.applied.last_end_lsn = Some(end);
                self.applied.last_commit_ts = Some(ts);
            }
        }
        Ok(())
    }

    fn maintain_if_due<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<(), Failure> {
        if elapsed(self.last_purge, now, self.config.purge_interval) {
            self.maintain(q, now)?;
        }
        Ok(())
    }

    /// Flushes the queue and purges what is applied. The APPLIED records need no fsync of
    /// their own (the subscriber's origin is the durable truth), so this runs now and then.
    fn maintain<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<(), Failure> {
        self.last_purge = now;
        self.acked_since_purge = false;
        match q.purge() {
            Ok(removed) => self.notices.push_back(Notice::Purged(removed.len())),
            Err(e) if e.is_retryable() => {}
            Err(e) => {
                self.failed = Some(Failure::Queue(e.clone()));
                return Err(Failure::Queue(e));
            }
        }
        Ok(())
    }
}

/// Space and other retryable refusals resolve as apply and purge free segments.
fn soft<T>(r: Result<T, Error>) -> Result<(), Failure> {
    match r {
        Err(e) if !e.is_retryable() => Err(Failure::Queue(e)),
        _ => Ok(()),
    }
}
