//! [`DelayQueue`]: the engine.

use crate::format::{
    segment_name, Body, Carry, Flavor, Rec, SealKind, SegmentHeader, SEGMENT_HEADER_BYTES,
};
use crate::model::{CommitKind, Loc, Model, Pos, SchemaMap, TxnState};
use crate::recover::{scan, Recovery, SegState};
use crate::storage::{Storage, StorageErrorKind};
use crate::{Accepted, Config, Error, Event, Received};
use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use std::ops::Bound;

mod consume;

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
    /// `Commit`, `Prepare`/`Stream Prepare` + `Commit Prepared`, or `Stream Commit`.
    pub messages: Vec<Vec<u8>>,
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
    /// A retryable refusal is pending: do not confirm anything newer.
    stalled: bool,
    /// A carry-forward set is not durable yet: segments from this one on must stay.
    carry_unsynced_from: Option<u64>,
    paused: bool,
    now: UnixTime,
    fatal: Option<Error>,
    recovery: Recovery,
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

    /// Takes one received message. Records are buffered; they are durable after
    /// [`DelayQueue::flush`].
    ///
    /// Retryable errors ([`Error::is_retryable`]) leave the queue unchanged: stop reading and
    /// submit the same message again later. Until then nothing newer is confirmed.
    pub fn handle(&mut self, now: UnixTime, msg: Received<'_>) -> Result<Accepted, Error> {
        self.check()?;
        self.now = now;
        // What may already have been reported stays reported: a completed transaction that
        // now waits for its fsync holds `flush_lsn` where it was, never below.
        let floor = self.flush_lsn();
        let r = self.handle_inner(&msg);
        self.flushed = self.flushed.max(floor);
        match &r {
            Ok(_) => {
                self.stalled = false;
                self.received = self.received.max(msg.wal_lsn).max(event_end(&msg.event));
            }
            Err(e) if e.is_retryable() => self.stalled = true,
            Err(_) => {}
        }
        self.refresh_flow();
        r
    }

    /// A keepalive's (or any other) report of the last WAL position received.
    pub fn note_received(&mut self, lsn: Lsn) {
        if !self.stalled {
            self.received = self.received.max(lsn);
        }
    }

    /// Forgets the per-connection stream state before a (re)connect: every transaction still in
    /// progress is abandoned (the publisher sends it again from the start).
    pub fn restart_stream(&mut self, now: UnixTime) -> Result<(), Error> {
        self.check()?;
        self.now = now;
        let open: Vec<(u64, Xid)> = self
            .model
            .items
            .values()
            .filter(|it| it.state == TxnState::InProgress)
            .map(|it| (it.id, it.xid))
            .collect();
        for (id, xid) in open {
            self.push(Rec {
                flags: 0,
                carry: Carry::No,
                xid,
                item: id,
                lsn: Lsn::INVALID,
                body: Body::Abort {
                    sub_xid: 0,
                    raw: &[],
                },
            })?;
        }
        self.in_block = None;
        self.skipping = None;
        self.stalled = false;
        Ok(())
    }

    /// Writes buffered records and fsyncs (group commit): afterwards everything accepted so
    /// far is durable. Returns the new [`DelayQueue::flush_lsn`].
    pub fn flush(&mut self) -> Result<Lsn, Error> {
        self.check()?;
        self.write_out()?;
        if self.unsynced {
            if let Some(name) = self.segs.last().map(|s| s.name.clone()) {
                let r = self.storage.sync(&name);
                r.map_err(|e| self.fail(Error::Storage(e)))?;
            }
            self.unsynced = false;
            self.synced = self.written;
        }
        if self.dir_dirty {
            let r = self.storage.sync_dir();
            r.map_err(|e| self.fail(Error::Storage(e)))?;
            self.dir_dirty = false;
        }
        self.unsynced_seal = false;
        self.carry_unsynced_from = None;
        self.durable_horizon = self.durable_horizon.max(self.model.horizon);
        self.flushed = self.flushed.max(self.durable_horizon).max(self.received);
        Ok(self.flush_lsn())
    }

    /// True when records were accepted since the last flush.
    pub fn needs_flush(&self) -> bool {
        self.unsynced || self.dir_dirty
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

    /// The bytes the budget and the watermarks count: all segments except the oldest ones kept
    /// only by undecided transactions (prepared, or in progress) — from the oldest segment an
    /// unfinished item began in up to the oldest one holding committed, unapplied work.
    /// Applying cannot free those; only reading on (to their decision) can, so counting them
    /// would let a paused producer wait forever. Carry-forward keeps them small.
    pub fn budget_bytes(&self) -> u64 {
        let Some(active) = self.segs.last().map(|s| s.seq) else {
            return 0;
        };
        let held_from = self.model.pinned_from().unwrap_or(active);
        let held_to = self.model.committed_from().unwrap_or(active).min(active);
        self.segs
            .iter()
            .filter(|s| s.seq < held_from || s.seq >= held_to)
            .map(|s| s.len)
            .sum()
    }

    /// A summary for tools and tests.
    pub fn inspect(&self) -> Inspection {
        let segments = self
            .segs
            .iter()
            .map(|s| SegmentInfo {
                file: s.name.clone(),
                seq: s.seq,
                valid_bytes: s.len,
                capacity: s.capacity,
                records: s.records,
            })
            .collect();
        let mut txns: Vec<_> = self.model.items.values().filter(|it| !it.note).collect();
        txns.sort_by_key(|it| match it.commit {
            Some(c) => (0, c.pos, it.id),
            None => (1, (0, 0), it.id),
        });
        let transactions = txns
            .into_iter()
            .map(|it| TxnInfo {
                id: ItemId(it.id),
                xid: it.xid,
                state: it.state,
                commit_lsn: it.commit.map(|c| c.lsn),
                end_lsn: it.commit.map(|c| c.end),
                commit_time: it.commit.map(|c| c.ts),
                due: it.due,
                messages: it.body.len(),
                first_segment: it.first_seg,
            })
            .collect();
        let messages_pending = self
            .model
            .order
            .values()
            .filter(|id| self.model.items.get(id).is_some_and(|it| it.note))
            .count();
        Inspection {
            flush_lsn: self.flush_lsn(),
            apply_lsn: self.apply_lsn(),
            resume_lsn: self.resume_lsn(),
            write_lsn: self.write_lsn(),
            segments,
            transactions,
            messages_pending,
            disk_bytes: self.disk_bytes(),
            budget_bytes: self.budget_bytes(),
        }
    }

    // ---- helpers -------------------------------------------------------------------------

    fn handle_inner(&mut self, msg: &Received<'_>) -> Result<Accepted, Error> {
        let raw = msg.payload;
        let wal = msg.wal_lsn;
        let horizon = self.model.horizon;
        match msg.event {
            Event::Begin { xid, final_lsn, .. } => {
                self.expect_idle("BEGIN")?;
                if final_lsn < horizon {
                    self.skipping = Some(Flavor::Plain);
                    return Ok(Accepted::Duplicate);
                }
                self.begin(xid, wal, Flavor::Plain, raw)
            }
            Event::BeginPrepare {
                xid, prepare_lsn, ..
            } => {
                self.expect_idle("BEGIN PREPARE")?;
                if prepare_lsn < horizon || self.model.prepared.contains_key(&xid.0) {
                    self.skipping = Some(Flavor::TwoPhase);
                    return Ok(Accepted::Duplicate);
                }
                self.begin(xid, wal, Flavor::TwoPhase, raw)
            }
            Event::Commit {
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.seal_open(
                Flavor::Plain,
                SealKind::Commit,
                commit_lsn,
                end_lsn,
                commit_ts,
                wal,
                raw,
            ),
            Event::Prepare {
                prepare_lsn,
                end_lsn,
                prepare_ts,
                ..
            } => self.seal_open(
                Flavor::TwoPhase,
                SealKind::Prepare,
                prepare_lsn,
                end_lsn,
                prepare_ts,
                wal,
                raw,
            ),
            Event::CommitPrepared {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => {
                self.expect_idle("COMMIT PREPARED")?;
                if commit_lsn < horizon {
                    return Ok(Accepted::Duplicate);
                }
                let Some(&id) = self.model.prepared.get(&xid.0) else {
                    return Err(Error::Protocol(format!(
                        "COMMIT PREPARED for transaction {xid}, which is not prepared in the queue"
                    )));
                };
                self.push(Rec {
                    flags: 0,
                    carry: Carry::No,
                    xid,
                    item: id,
                    lsn: wal,
                    body: Body::Decide {
                        commit: true,
                        commit_lsn,
                        end_lsn,
                        ts: commit_ts,
                        raw,
                    },
                })?;
                self.unsynced_seal = true;
                Ok(Accepted::Queued)
            }
            Event::RollbackPrepared {
                xid,
                prepare_end_lsn,
                rollback_end_lsn,
                rollback_ts,
            } => {
                self.expect_idle("ROLLBACK PREPARED")?;
                if rollback_end_lsn <= horizon {
                    return Ok(Accepted::Duplicate);
                }
                let Some(&id) = self.model.prepared.get(&xid.0) else {
                    return Ok(Accepted::Ignored);
                };
                self.push(Rec {
                    flags: 0,
                    carry: Carry::No,
                    xid,
                    item: id,
                    lsn: wal,
                    body: Body::Decide {
                        commit: false,
                        commit_lsn: prepare_end_lsn,
                        end_lsn: rollback_end_lsn,
                        ts: rollback_ts,
                        raw,
                    },
                })?;
                self.unsynced_seal = true;
                Ok(Accepted::Queued)
            }
            Event::StreamStart { xid, first } => {
                if self.in_block.is_some() {
                    return Err(Error::Protocol("duplicate STREAM START message".into()));
                }
                self.expect_idle("STREAM START")?;
                let known = self.model.streams.get(&xid.0).copied();
                if first {
                    self.check_budget()?;
                    if let Some(old) = known {
                        // Re-streamed from the start (after a reconnect): drop the old chunks.
                        self.push(abort_rec(xid, old, 0))?;
                    }
                    let id = self.model.next_id;
                    self.push(Rec {
                        flags: 0,
                        carry: Carry::No,
                        xid,
                        item: id,
                        lsn: wal,
                        body: Body::Begin {
                            flavor: Flavor::Streamed,
                            raw,
                        },
                    })?;
                } else if known.is_none() {
                    return Err(Error::Protocol(format!(
                        "STREAM START for transaction {xid} continues a stream the queue does not hold"
                    )));
                }
                self.in_block = Some(xid.0);
                Ok(Accepted::Queued)
            }
            Event::StreamStop => match self.in_block.take() {
                Some(_) => Ok(Accepted::Queued),
                None => Err(Error::Protocol(
                    "STREAM STOP message without STREAM START".into(),
                )),
            },
            Event::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.seal_stream(
                xid,
                SealKind::StreamCommit,
                commit_lsn,
                end_lsn,
                commit_ts,
                wal,
                raw,
            ),
            Event::StreamPrepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            } => self.seal_stream(
                xid,
                SealKind::StreamPrepare,
                prepare_lsn,
                end_lsn,
                prepare_ts,
                wal,
                raw,
            ),
            Event::StreamAbort { xid, sub_xid } => {
                if self.in_block.is_some() {
                    return Err(Error::Protocol(
                        "STREAM ABORT message without STREAM STOP".into(),
                    ));
                }
                let Some(&id) = self.model.streams.get(&xid.0) else {
                    return Ok(Accepted::Ignored);
                };
                let mut rec = abort_rec(xid, id, sub_xid.0);
                rec.body = Body::Abort {
                    sub_xid: sub_xid.0,
                    raw,
                };
                self.push(rec)?;
                Ok(Accepted::Queued)
            }
            Event::Relation { oid, .. } | Event::Type { oid, .. } => {
                if self.in_block.is_some() {
                    return self.data(msg);
                }
                let tag = if matches!(msg.event, Event::Relation { .. }) {
                    b'R'
                } else {
                    b'Y'
                };
                // Kept even inside a re-sent (skipped) transaction: the publisher will not
                // send it again in this session.
                let key_same = self
                    .model
                    .schema
                    .current
                    .get(&SchemaMap::key(tag, oid))
                    .is_some_and(|(t, p)| *t == tag && p.as_slice() == raw);
                if key_same {
                    return Ok(Accepted::Queued);
                }
                self.push(Rec {
                    flags: 0,
                    carry: Carry::No,
                    xid: Xid(0),
                    item: 0,
                    lsn: wal,
                    body: Body::Schema { tag, oid, raw },
                })?;
                Ok(Accepted::Queued)
            }
            Event::Change { .. } => self.data(msg),
            Event::Message {
                transactional: true,
                ..
            } => self.data(msg),
            Event::Message {
                transactional: false,
                lsn,
                ..
            } => {
                if lsn < horizon {
                    return Ok(Accepted::Duplicate);
                }
                self.check_budget()?;
                let id = self.model.next_id;
                self.push(Rec {
                    flags: 0,
                    carry: Carry::No,
                    xid: Xid(0),
                    item: id,
                    lsn,
                    body: Body::Note { raw },
                })?;
                self.unsynced_seal = true;
                Ok(Accepted::Queued)
            }
        }
    }

    fn expect_idle(&self, what: &str) -> Result<(), Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(format!("{what} inside a stream block")));
        }
        if self.model.open_tx.is_some() || self.skipping.is_some() {
            return Err(Error::Protocol(format!("{what} inside a transaction")));
        }
        Ok(())
    }

    fn begin(&mut self, xid: Xid, wal: Lsn, flavor: Flavor, raw: &[u8]) -> Result<Accepted, Error> {
        self.check_budget()?;
        let id = self.model.next_id;
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid,
            item: id,
            lsn: wal,
            body: Body::Begin { flavor, raw },
        })?;
        Ok(Accepted::Queued)
    }

    #[allow(clippy::too_many_arguments)]
    fn seal_open(
        &mut self,
        flavor: Flavor,
        kind: SealKind,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(format!("{kind:?} inside a stream block")));
        }
        if self.skipping == Some(flavor) {
            self.skipping = None;
            return Ok(Accepted::Duplicate);
        }
        let open = self.model.open_tx.and_then(|id| self.model.items.get(&id));
        let Some((id, xid)) = open
            .filter(|it| it.flavor == flavor)
            .map(|it| (it.id, it.xid))
        else {
            return Err(Error::Protocol(format!(
                "{kind:?} without a matching BEGIN"
            )));
        };
        self.push_seal(
            xid,
            id,
            wal,
            Body::Seal {
                kind,
                commit_lsn,
                end_lsn,
                ts,
                raw,
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn seal_stream(
        &mut self,
        xid: Xid,
        kind: SealKind,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(format!(
                "{} message without STREAM STOP",
                if kind == SealKind::StreamCommit {
                    "STREAM COMMIT"
                } else {
                    "STREAM PREPARE"
                }
            )));
        }
        let known = self.model.streams.get(&xid.0).copied();
        if kind == SealKind::StreamCommit {
            if let Some(id) = known {
                self.promote_stream_schema(id)?;
            }
        }
        if commit_lsn < self.model.horizon {
            if let Some(id) = known {
                self.push(abort_rec(xid, id, 0))?;
            }
            return Ok(Accepted::Duplicate);
        }
        let Some(id) = known else {
            return Err(Error::Protocol(format!(
                "{kind:?} for transaction {xid}, which the queue does not hold"
            )));
        };
        self.push_seal(
            xid,
            id,
            wal,
            Body::Seal {
                kind,
                commit_lsn,
                end_lsn,
                ts,
                raw,
            },
        )
    }

    /// At Stream Commit pgoutput marks the relations described inside the stream as sent for
    /// the whole session (`cleanup_rel_sync_cache`), so later transactions use them without a
    /// new Relation message: their descriptions join the map here, in the outside-stream form
    /// (the in-stream form only adds the Int32 xid after the tag). Written before the seal: a
    /// crash between the two leaves descriptions that were current anyway (the streamed
    /// transaction holds its relations' locks until it ends).
    fn promote_stream_schema(&mut self, id: u64) -> Result<(), Error> {
        let Some(it) = self.model.items.get(&id) else {
            return Ok(());
        };
        let mut latest: Vec<((u8, u32), Lsn, Vec<u8>)> = Vec::new();
        for (_, tag, oid, lsn, raw) in &it.schema {
            let Some(rest) = raw.get(5..) else { continue };
            let global: Vec<u8> = std::iter::once(*tag).chain(rest.iter().copied()).collect();
            latest.retain(|(k, _, _)| *k != (*tag, *oid));
            latest.push(((*tag, *oid), *lsn, global));
        }
        for ((tag, oid), lsn, raw) in latest {
            let key = SchemaMap::key(tag, oid);
            let same = self
                .model
                .schema
                .current
                .get(&key)
                .is_some_and(|(t, p)| *t == tag && *p == raw);
            // A description sent later in the WAL than the stream's wins: DDL after the stream
            // described the relation (possible once the change that locked it was rolled back
            // to a savepoint) invalidates the stream's list on the publisher, so pgoutput does
            // not count it as sent, and a transaction queued since may depend on the newer one.
            let newer = self
                .model
                .schema
                .current_lsn
                .get(&key)
                .is_some_and(|l| *l > lsn);
            if !same && !newer {
                self.push(Rec {
                    flags: 0,
                    carry: Carry::No,
                    xid: Xid(0),
                    item: 0,
                    lsn,
                    body: Body::Schema {
                        tag,
                        oid,
                        raw: &raw,
                    },
                })?;
            }
        }
        Ok(())
    }

    /// A data message: inside a stream block it belongs to the block's transaction.
    fn data(&mut self, msg: &Received<'_>) -> Result<Accepted, Error> {
        let sub = match msg.event {
            Event::Change { xid }
            | Event::Relation { xid, .. }
            | Event::Type { xid, .. }
            | Event::Message { xid, .. } => xid,
            _ => None,
        };
        let (id, sub) = if let Some(top) = self.in_block {
            let id =
                self.model.streams.get(&top).copied().ok_or_else(|| {
                    Error::Protocol("stream block for an unknown transaction".into())
                })?;
            (id, sub.map_or(top, |x| x.0))
        } else if self.skipping.is_some() {
            return Ok(Accepted::Duplicate);
        } else if let Some(id) = self.model.open_tx {
            (id, 0)
        } else {
            return Err(Error::Protocol("data message outside a transaction".into()));
        };
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid: Xid(sub),
            item: id,
            lsn: msg.wal_lsn,
            body: Body::Msg {
                schema: match msg.event {
                    Event::Relation { oid, .. } => Some((b'R', oid)),
                    Event::Type { oid, .. } => Some((b'Y', oid)),
                    _ => None,
                },
                raw: msg.payload,
            },
        })?;
        Ok(Accepted::Queued)
    }

    fn push_applied(&mut self, id: u64) -> Result<(), Error> {
        let it = &self.model.items[&id];
        let lsn = match it.commit {
            Some(c) if !it.note => c.end,
            _ => Lsn::INVALID,
        };
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid: it.xid,
            item: id,
            lsn,
            body: Body::Applied,
        })?;
        Ok(())
    }

    /// Whether the record at `loc` survives a crash: older segments were synced before the
    /// active one was created.
    fn is_durable(&self, loc: Loc) -> bool {
        match self.segs.last() {
            Some(active) if active.seq == loc.seg => loc.off + loc.len <= self.synced,
            _ => true,
        }
    }

    /// Queues a SEAL record (commit, prepare, stream commit or stream prepare) for item `id`.
    fn push_seal(&mut self, xid: Xid, id: u64, wal: Lsn, body: Body) -> Result<Accepted, Error> {
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid,
            item: id,
            lsn: wal,
            body,
        })?;
        self.unsynced_seal = true;
        Ok(Accepted::Queued)
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

    /// Appends one record: rolls over when needed (retryable failures change nothing), buffers
    /// it and applies it to the model.
    fn push(&mut self, rec: Rec<'_>) -> Result<Loc, Error> {
        let len = rec.encoded_len();
        self.ensure_room(len)?;
        let Some(seg) = self.segs.last_mut() else {
            return Err(self.fail(Error::Misuse("no active segment".into())));
        };
        let loc = Loc {
            seg: seg.seq,
            off: seg.len,
            len,
        };
        rec.encode(&mut self.buf);
        seg.len += len;
        seg.records += 1;
        self.unsynced = true;
        if let Err(reason) = self.model.apply(&rec, loc) {
            let name = seg.name.clone();
            return Err(self.fail(Error::Corrupt {
                file: name,
                offset: loc.off,
                reason: format!("internal: record rejected by the index: {reason}"),
            }));
        }
        if self.buf.len() >= self.config.write_buffer_bytes {
            match self.write_out() {
                Ok(()) => {}
                // Kept in the buffer; the next flush retries.
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(loc)
    }

    fn ensure_room(&mut self, len: u64) -> Result<(), Error> {
        if let Some(seg) = self.segs.last() {
            if seg.len + len <= seg.capacity {
                return Ok(());
            }
        }
        let capacity = self.config.segment_bytes_max;
        let seq = match self.segs.last() {
            None => 1,
            Some(s) => s.seq.checked_add(1).ok_or_else(|| {
                Error::Misuse("segment sequence numbers are used up; start a new directory".into())
            })?,
        };
        let mut snap = Vec::new();
        let mut snap_records = 0;
        for (key, (tag, raw)) in &self.model.schema.current {
            let lsn = self.model.schema.current_lsn.get(key).copied();
            let mut rec = schema_rec(*tag, key.1, raw);
            rec.lsn = lsn.unwrap_or(Lsn::INVALID);
            rec.encode(&mut snap);
            snap_records += 1;
        }
        let need = SEGMENT_HEADER_BYTES + snap.len() as u64 + len;
        if need > capacity {
            return Err(Error::RecordTooLarge {
                len: need,
                capacity,
            });
        }
        // The old segment becomes immutable and durable before the next one exists, so only
        // the newest segment can ever have a torn tail.
        if let Some(old) = self.segs.last().map(|s| s.name.clone()) {
            self.write_out()?;
            if self.unsynced {
                let r = self.storage.sync(&old);
                r.map_err(|e| self.fail(Error::Storage(e)))?;
                self.unsynced = false;
            }
        }
        let name = segment_name(seq);
        if let Err(e) = self.storage.create(&name) {
            let e = Error::Storage(e);
            return Err(if e.is_retryable() { e } else { self.fail(e) });
        }
        let header = SegmentHeader {
            seq,
            capacity,
            created: self.now,
            horizon: self.model.horizon,
            apply_lsn: self.model.apply_lsn,
            next_id: self.model.next_id,
        };
        self.buf.clear();
        self.buf.extend_from_slice(&header.encode());
        self.buf.extend_from_slice(&snap);
        self.written = 0;
        self.synced = 0;
        self.segs.push(SegState {
            seq,
            name,
            capacity,
            len: SEGMENT_HEADER_BYTES + snap.len() as u64,
            records: snap_records,
        });
        self.dir_dirty = true;
        self.unsynced = true;
        Ok(())
    }

    /// Writes the buffer to the active segment. On ENOSPC the file is cut back to what was
    /// written before and the buffer kept (retryable); other failures are fatal.
    fn write_out(&mut self) -> Result<(), Error> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(name) = self.segs.last().map(|s| s.name.clone()) else {
            return Ok(());
        };
        match self.storage.append(&name, &self.buf) {
            Ok(()) => {
                self.written += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(e) if e.kind == StorageErrorKind::NoSpace => {
                if let Err(t) = self.storage.truncate(&name, self.written) {
                    return Err(self.fail(Error::Storage(t)));
                }
                Err(Error::Storage(e))
            }
            Err(e) => Err(self.fail(Error::Storage(e))),
        }
    }

    /// Copies the records of undecided items (prepared, or streamed and in progress) that keep
    /// old segments alive into the newest segment, one set per item ending with a CARRY record
    /// flagged last, when that frees more than it writes. Returns whether anything was copied;
    /// the caller flushes before removing the old segments.
    pub(crate) fn carry_forward(&mut self) -> Result<bool, Error> {
        let Some(active) = self.segs.last().map(|s| s.seq) else {
            return Ok(false);
        };
        // Room in an empty segment: a set never spans two.
        let snapshot: u64 = self
            .model
            .schema
            .current
            .iter()
            .map(|(&(_, oid), (tag, raw))| schema_rec(*tag, oid, raw).encoded_len())
            .sum();
        let room = self
            .config
            .segment_bytes_max
            .saturating_sub(SEGMENT_HEADER_BYTES + snapshot);
        let carriable = |it: &crate::model::Item| {
            it.state == TxnState::Prepared
                || (it.state == TxnState::InProgress && it.flavor == Flavor::Streamed)
        };
        let set_bytes = |it: &crate::model::Item| -> u64 {
            std::iter::once(it.start)
                .chain(it.body.iter().map(|(l, _)| *l))
                .chain(it.seal)
                .map(|l| l.len + 2)
                .sum()
        };
        // Segments below `floor` become removable once the sets below are copied.
        let mut floor = self.model.committed_from().unwrap_or(active).min(active);
        for it in self.model.items.values() {
            if !it.state.finished()
                && it.first_seg < floor
                && (!carriable(it) || set_bytes(it) > room)
            {
                floor = it.first_seg;
            }
        }
        let mut sets: Vec<(u64, u64)> = self
            .model
            .items
            .values()
            .filter(|it| !it.state.finished() && it.first_seg < floor)
            .map(|it| (it.id, set_bytes(it)))
            .collect();
        if sets.is_empty() {
            return Ok(false);
        }
        let freed: u64 = self
            .segs
            .iter()
            .filter(|s| s.seq < floor)
            .map(|s| s.len)
            .sum();
        let copied: u64 = sets.iter().map(|s| s.1).sum();
        if copied + SEGMENT_HEADER_BYTES + snapshot >= freed {
            return Ok(false);
        }
        sets.sort_unstable();
        for (id, bytes) in sets {
            let locs: Vec<Loc> = {
                let it = &self.model.items[&id];
                std::iter::once(it.start)
                    .chain(it.body.iter().map(|(l, _)| *l))
                    .chain(it.seal)
                    .collect()
            };
            // Read the whole set before writing any of it, so that only a fatal error can
            // leave a set unfinished.
            let mut records = Vec::with_capacity(locs.len());
            for loc in &locs {
                records.push((self.read_record(*loc)?, loc.seg));
            }
            match self.ensure_room(bytes) {
                Ok(()) => {}
                Err(e) if e.is_retryable() => return Ok(self.carry_unsynced_from.is_some()),
                Err(e) => return Err(e),
            }
            let from = self.model.items[&id].first_seg;
            self.carry_unsynced_from = Some(self.carry_unsynced_from.unwrap_or(from).min(from));
            let n = records.len();
            for (i, (bytes, seg)) in records.iter().enumerate() {
                let name = segment_name(*seg);
                let rec = crate::format::decode_record(bytes).map_err(|r| Error::Corrupt {
                    file: name,
                    offset: 0,
                    reason: r.to_owned(),
                })?;
                let carry = if i + 1 == n { Carry::Last } else { Carry::Copy };
                self.push(Rec { carry, ..rec })?;
            }
        }
        Ok(true)
    }

    /// The stored pgoutput bytes of one record, checked again.
    fn read_raw(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        let bytes = self.read_record(loc)?;
        let rec = crate::format::decode_record(&bytes).map_err(|r| Error::Corrupt {
            file: segment_name(loc.seg),
            offset: loc.off,
            reason: r.to_owned(),
        })?;
        Ok(match rec.body {
            Body::Begin { raw, .. }
            | Body::Msg { raw, .. }
            | Body::Note { raw }
            | Body::Seal { raw, .. }
            | Body::Decide { raw, .. }
            | Body::Abort { raw, .. }
            | Body::Schema { raw, .. } => raw.to_vec(),
            Body::Applied => Vec::new(),
        })
    }

    /// The bytes of one whole record, with its checksum verified.
    fn read_record(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        let active = self.segs.last().map(|s| (s.seq, s.name.clone()));
        let name = self
            .segs
            .iter()
            .find(|s| s.seq == loc.seg)
            .map(|s| s.name.clone())
            .ok_or_else(|| Error::Corrupt {
                file: segment_name(loc.seg),
                offset: loc.off,
                reason: "segment of a pending record is gone".into(),
            })?;
        let bytes = match active {
            Some((seq, _)) if seq == loc.seg && loc.off >= self.written => {
                let from = (loc.off - self.written) as usize;
                self.buf
                    .get(from..from + loc.len as usize)
                    .map(<[u8]>::to_vec)
                    .unwrap_or_default()
            }
            _ => {
                let mut b = vec![0u8; loc.len as usize];
                let n = self
                    .storage
                    .read(&name, loc.off, &mut b)
                    .map_err(Error::Storage)?;
                b.truncate(n);
                b
            }
        };
        if let Err(reason) = crate::format::decode_record(&bytes) {
            return Err(Error::Corrupt {
                file: name,
                offset: loc.off,
                reason: reason.to_owned(),
            });
        }
        Ok(bytes)
    }
}

/// A segment-start snapshot copy of one Relation/Type description.
fn schema_rec(tag: u8, oid: u32, raw: &[u8]) -> Rec<'_> {
    Rec {
        flags: 1,
        carry: Carry::No,
        xid: Xid(0),
        item: 0,
        lsn: Lsn::INVALID,
        body: Body::Schema { tag, oid, raw },
    }
}

fn abort_rec(xid: Xid, id: u64, sub_xid: u32) -> Rec<'static> {
    Rec {
        flags: 0,
        carry: Carry::No,
        xid,
        item: id,
        lsn: Lsn::INVALID,
        body: Body::Abort { sub_xid, raw: &[] },
    }
}

/// An LSN the message proves was received.
fn event_end(e: &Event) -> Lsn {
    match *e {
        Event::Commit { end_lsn, .. }
        | Event::Prepare { end_lsn, .. }
        | Event::CommitPrepared { end_lsn, .. }
        | Event::StreamCommit { end_lsn, .. }
        | Event::StreamPrepare { end_lsn, .. } => end_lsn,
        Event::RollbackPrepared {
            rollback_end_lsn, ..
        } => rollback_end_lsn,
        _ => Lsn::INVALID,
    }
}
