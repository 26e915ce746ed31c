//! [`DelayQueue`]: the engine. This file holds its state, opening, and the positions it
//! reports; `ingest` takes the producer's messages, `writer` puts records on disk and `reader`
//! reads them back, `consume` hands due work out, and `purge` frees segments.

use crate::format::Flavor;
use crate::model::{CommitKind, Item, Model, Pos, TxnState};
use crate::recover::{scan, Recovery, SegState};
use crate::storage::Storage;
use crate::{Config, Error};
use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use std::ops::Bound;

mod consume;
mod ingest;
mod purge;
mod reader;
mod writer;

/// Identifies one queued transaction or message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ItemId(pub u64);

/// Whether the producer should keep reading the replication stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Keep reading.
    Read,
    /// Above the high watermark: stop reading until the queue shrinks below the low watermark
    /// (keep sending status updates).
    Pause,
}

/// A committed transaction that is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyTxn {
    /// Pass to [`DelayQueue::mark_applied`] after applying.
    pub id: ItemId,
    /// Top-level transaction id.
    pub xid: Xid,
    /// Which message committed it.
    pub kind: CommitKind,
    /// Commit LSN (of the `Commit`, `Stream Commit` or `Commit Prepared`).
    pub commit_lsn: Lsn,
    /// End LSN of the commit: the replication origin progress to record with the apply.
    pub end_lsn: Lsn,
    /// The publisher's commit timestamp.
    pub commit_ts: PgTimestamp,
    /// When it became due.
    pub due: UnixTime,
    /// `Relation`/`Type` messages to apply to the relation map first: all of them for the
    /// first item handed out after opening, afterwards the ones that changed (and the ones a
    /// streamed transaction handed out before redescribed differently in its messages).
    pub schema: Vec<Vec<u8>>,
    /// The transaction's raw pgoutput messages in order: `Begin`/`Begin Prepare` (absent for
    /// streamed transactions), the data messages (without discarded subtransactions), then
    /// `Commit`, `Prepare`/`Stream Prepare` + `Commit Prepared`, or `Stream Commit`. Only the
    /// first piece when `more` is set.
    pub messages: Vec<Vec<u8>>,
    /// Where the rest of the messages is read with [`DelayQueue::read_more`]; `None` when
    /// `messages` is the whole transaction.
    pub more: Option<TxnCursor>,
}

/// The place in a transaction handed out in pieces, for [`DelayQueue::read_more`]: valid
/// until the queue hands out again ([`DelayQueue::rehand`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnCursor {
    id: ItemId,
    /// Index of the next message (in the order of [`ReadyTxn::messages`]).
    next: usize,
    /// The hand-out session it belongs to.
    session: u64,
}

impl TxnCursor {
    /// The transaction it reads.
    pub fn id(&self) -> ItemId {
        self.id
    }

    /// The index of the next message in the whole transaction.
    pub fn next_index(&self) -> usize {
        self.next
    }
}

/// The next piece of a transaction handed out in pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnPiece {
    /// The messages, in order, following the previous piece.
    pub messages: Vec<Vec<u8>>,
    /// Where the next piece is read; `None` after the last one.
    pub more: Option<TxnCursor>,
}

/// A non-transactional logical message that is due.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyMessage {
    /// Pass to [`DelayQueue::mark_applied`] after delivering.
    pub id: ItemId,
    /// The message's LSN.
    pub lsn: Lsn,
    /// The raw `Message` bytes.
    pub payload: Vec<u8>,
}

/// Due output, in commit order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// A transaction.
    Transaction(ReadyTxn),
    /// A non-transactional message.
    Message(ReadyMessage),
}

impl Ready {
    /// The id to acknowledge.
    pub fn id(&self) -> ItemId {
        match self {
            Ready::Transaction(t) => t.id,
            Ready::Message(m) => m.id,
        }
    }
}

/// A summary of the queue for tools and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspection {
    /// See [`DelayQueue::flush_lsn`].
    pub flush_lsn: Lsn,
    /// See [`DelayQueue::apply_lsn`].
    pub apply_lsn: Lsn,
    /// See [`DelayQueue::resume_lsn`].
    pub resume_lsn: Lsn,
    /// See [`DelayQueue::write_lsn`].
    pub write_lsn: Lsn,
    /// Segment files, oldest first.
    pub segments: Vec<SegmentInfo>,
    /// Transactions: committed ones in commit order, then the others by arrival.
    pub transactions: Vec<TxnInfo>,
    /// Non-transactional messages not yet delivered.
    pub messages_pending: usize,
    /// Bytes in segment files (including buffered ones).
    pub disk_bytes: u64,
    /// The part of `disk_bytes` counted against the budget and the watermarks (see
    /// [`DelayQueue::budget_bytes`]).
    pub budget_bytes: u64,
}

/// One segment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// File name.
    pub file: String,
    /// Sequence number.
    pub seq: u64,
    /// Where the last whole record ends.
    pub valid_bytes: u64,
    /// Capacity from its header.
    pub capacity: u64,
    /// Records in it.
    pub records: u64,
}

/// One transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnInfo {
    /// Queue-local id.
    pub id: ItemId,
    /// Top-level xid.
    pub xid: Xid,
    /// State.
    pub state: TxnState,
    /// Commit LSN, once committed.
    pub commit_lsn: Option<Lsn>,
    /// End LSN of the commit, once committed.
    pub end_lsn: Option<Lsn>,
    /// Publisher commit time, once committed.
    pub commit_time: Option<PgTimestamp>,
    /// Due time, once committed.
    pub due: Option<UnixTime>,
    /// Data messages (changes, transactional messages, in-stream Relation/Type) kept.
    pub messages: usize,
    /// Sequence number of the segment holding its first record.
    pub first_segment: u64,
}

/// The durable delay queue over a [`Storage`].
#[derive(Debug)]
pub struct DelayQueue<S: Storage> {
    storage: S,
    config: Config,
    model: Model,
    segs: Vec<SegState>,
    /// Records of the active (last) segment not yet written to storage.
    buf: Vec<u8>,
    /// Reused buffer for records read back from storage: durable bytes of one segment read
    /// ahead from `rwin`'s offset, so that the records after the one asked for come out of
    /// memory (one read per record was a quarter of the applier's CPU).
    rbuf: Vec<u8>,
    /// The segment and offset `rbuf` holds bytes of, when it holds a window.
    rwin: Option<(u64, u64)>,
    /// Bytes of the active segment already written to storage.
    written: u64,
    /// Bytes of the active segment known durable (every older segment is durable).
    synced: u64,
    unsynced: bool,
    unsynced_seal: bool,
    dir_dirty: bool,
    /// Highest flush LSN reported so far (never decreases).
    flushed: Lsn,
    durable_horizon: Lsn,
    received: Lsn,
    /// Top-level xid of the open stream block.
    in_block: Option<u32>,
    /// Dropping a re-sent non-streamed transaction until its Commit/Prepare.
    skipping: Option<Flavor>,
    /// Commit position of the last item handed out this session.
    handed: Option<Pos>,
    /// The transaction handed out in pieces and not read to its end yet: id and the index
    /// of its next message. Nothing else is handed out, nor marked applied, meanwhile.
    reading: Option<(u64, usize)>,
    /// Counts [`DelayQueue::rehand`] calls: a cursor of an earlier session is stale.
    session: u64,
    /// A retryable refusal is pending: do not confirm anything newer.
    stalled: bool,
    /// A carry-forward set is not durable yet: segments from this one on must stay.
    carry_unsynced_from: Option<u64>,
    paused: bool,
    now: UnixTime,
    fatal: Option<Error>,
    recovery: Recovery,
}

fn txn_info(it: &Item) -> TxnInfo {
    TxnInfo {
        id: ItemId(it.id),
        xid: it.xid,
        state: it.state,
        commit_lsn: it.commit.map(|c| c.lsn),
        end_lsn: it.commit.map(|c| c.end),
        commit_time: it.commit.map(|c| c.ts),
        due: it.due,
        messages: it.body.len(),
        first_segment: it.first_seg,
    }
}

impl<S: Storage> DelayQueue<S> {
    /// Opens (and recovers) the queue in `storage`: rebuilds the index from the files, cuts off
    /// a torn tail, and fails with [`Error::Corrupt`] on anything else that is not valid.
    pub fn open(mut storage: S, config: Config) -> Result<Self, Error> {
        config.validate()?;
        let scanned = scan(&storage, config.delay_micros())?;
        let mut segs = scanned.segs;
        if let Some(t) = &scanned.recovery.torn_tail {
            if t.offset == 0 {
                storage.remove(&t.file).map_err(Error::Storage)?;
                storage.sync_dir().map_err(Error::Storage)?;
            } else {
                storage
                    .truncate(&t.file, t.offset)
                    .map_err(Error::Storage)?;
                storage.sync(&t.file).map_err(Error::Storage)?;
            }
        }
        let model = scanned.model;
        let written = segs.last().map_or(0, |s| s.len);
        let horizon = model.horizon.max(model.apply_lsn);
        segs.shrink_to_fit();
        let mut q = DelayQueue {
            storage,
            config,
            model,
            segs,
            buf: Vec::new(),
            rbuf: Vec::new(),
            rwin: None,
            written,
            synced: written,
            unsynced: false,
            unsynced_seal: false,
            dir_dirty: false,
            flushed: horizon,
            durable_horizon: horizon,
            received: horizon,
            in_block: None,
            skipping: None,
            handed: None,
            reading: None,
            session: 0,
            stalled: false,
            carry_unsynced_from: None,
            paused: false,
            now: UnixTime(0),
            fatal: None,
            recovery: scanned.recovery,
        };
        q.refresh_flow();
        Ok(q)
    }

    /// What recovery found when the queue was opened.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// Gives the storage back (e.g. to crash a simulated disk and reopen).
    pub fn into_storage(self) -> S {
        self.storage
    }

    /// The storage.
    pub fn storage(&self) -> &S {
        &self.storage
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The LSN to report as flushed: every transaction committed below it is durable here (or
    /// applied). When no completed transaction waits for an fsync it is the last received LSN.
    /// Never decreases.
    pub fn flush_lsn(&self) -> Lsn {
        if self.unsynced_seal || self.stalled {
            self.flushed
        } else {
            self.flushed.max(self.received)
        }
    }

    /// End LSN of the newest transaction marked applied.
    pub fn apply_lsn(&self) -> Lsn {
        self.model.apply_lsn
    }

    /// Last LSN received.
    pub fn write_lsn(&self) -> Lsn {
        self.received
    }

    /// Where to start replication after a (re)connect: the larger of what is applied and the
    /// end of the last durably queued transaction.
    pub fn resume_lsn(&self) -> Lsn {
        self.model.apply_lsn.max(self.durable_horizon)
    }

    /// Whether the producer should read more.
    pub fn flow(&self) -> Flow {
        if self.paused {
            Flow::Pause
        } else {
            Flow::Read
        }
    }

    /// Bytes in segment files, including records still buffered.
    pub fn disk_bytes(&self) -> u64 {
        self.segs.iter().map(|s| s.len).sum()
    }

    /// The bytes the budget and the watermarks count. Not counted is what only reading on (to
    /// a commit, prepare or decision) can free, since a paused producer would wait for it
    /// forever: the records of undecided transactions (in progress or prepared) wherever they
    /// lie, a segment of nothing else (header and snapshot included), and the oldest segments
    /// kept only by undecided transactions — from the oldest segment an unfinished item began
    /// in up to the oldest one holding committed, unapplied work. So one transaction larger
    /// than the budget streams through; once it commits it counts, and applying it frees it.
    /// Carry-forward keeps the old segments small.
    pub fn budget_bytes(&self) -> u64 {
        let Some(active) = self.segs.last().map(|s| s.seq) else {
            return 0;
        };
        let held_from = self.model.pinned_from().unwrap_or(active);
        let held_to = self.model.committed_from().unwrap_or(active).min(active);
        self.segs
            .iter()
            .filter(|s| s.seq < held_from || s.seq >= held_to)
            .map(|s| {
                let held = self.model.held.get(s.seq);
                let rest = s.len.saturating_sub(held);
                if held > 0 && rest <= s.prefix {
                    0
                } else {
                    rest
                }
            })
            .sum()
    }

    /// A summary for tools and tests.
    pub fn inspect(&self) -> Inspection {
        let mut txns: Vec<_> = self.model.items.values().filter(|it| !it.note).collect();
        txns.sort_by_key(|it| match it.commit {
            Some(c) => (0, c.pos, it.id),
            None => (1, (0, 0), it.id),
        });
        Inspection {
            flush_lsn: self.flush_lsn(),
            apply_lsn: self.apply_lsn(),
            resume_lsn: self.resume_lsn(),
            write_lsn: self.write_lsn(),
            segments: self.segments().collect(),
            transactions: txns.into_iter().map(txn_info).collect(),
            messages_pending: self.messages_pending(),
            disk_bytes: self.disk_bytes(),
            budget_bytes: self.budget_bytes(),
        }
    }

    /// The segment files, oldest first (as in [`Inspection::segments`]).
    pub fn segments(&self) -> impl ExactSizeIterator<Item = SegmentInfo> + '_ {
        self.segs.iter().map(|s| SegmentInfo {
            file: s.name.clone(),
            seq: s.seq,
            valid_bytes: s.len,
            capacity: s.capacity,
            records: s.records,
        })
    }

    /// The transactions of [`Inspection::transactions`] by id, without the sort and the
    /// allocation: for checks that run after every step.
    pub fn transactions(&self) -> impl Iterator<Item = TxnInfo> + '_ {
        self.model
            .items
            .values()
            .filter(|it| !it.note)
            .map(txn_info)
    }

    /// Non-transactional messages not yet delivered (as in [`Inspection::messages_pending`]).
    pub fn messages_pending(&self) -> usize {
        self.model
            .order
            .values()
            .filter(|id| self.model.items.get(id).is_some_and(|it| it.note))
            .count()
    }

    fn check(&self) -> Result<(), Error> {
        match &self.fatal {
            Some(e) => Err(Error::Poisoned(Box::new(e.clone()))),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: Error) -> Error {
        self.fatal = Some(e.clone());
        e
    }

    fn check_budget(&self) -> Result<(), Error> {
        let bytes = self.budget_bytes();
        if bytes >= self.config.disk_bytes_max {
            return Err(Error::Full {
                bytes,
                max: self.config.disk_bytes_max,
            });
        }
        Ok(())
    }

    fn refresh_flow(&mut self) {
        let bytes = self.budget_bytes();
        if bytes >= self.config.disk_high_watermark_bytes {
            self.paused = true;
        } else if bytes <= self.config.disk_low_watermark_bytes {
            self.paused = false;
        }
    }

    fn next_unhanded(&self) -> Option<(Pos, u64)> {
        let lower = match self.handed {
            Some(h) => Bound::Excluded(h),
            None => Bound::Unbounded,
        };
        self.model
            .order
            .range((lower, Bound::Unbounded))
            .next()
            .map(|(p, id)| (*p, *id))
    }
}
