//! A deterministic publisher model shared by the `slotsync` and `delayq` scenarios: a WAL
//! position that advances with a random workload, the logical change stream pgoutput would
//! send for it, a logical replication slot, and physical standbys with lagging positions.
//!
//! The workload mixes plain transactions, streamed transactions (chunks interleaved with other
//! work, savepoints rolled back with `Stream Abort (xid, sub)`), two-phase transactions decided
//! later by `COMMIT PREPARED` or `ROLLBACK PREPARED`, and non-transactional messages. Commit
//! timestamps come from the caller's virtual wall clock plus a bounded random skew, so they are
//! not monotonic. Every output message is a [`LogItem`]: its `'w'` LSN, the queue's view of it
//! ([`Event`]) and payload bytes that name what they carry (`C<xid>.<n>` for a change).
//!
//! Re-sending after a reconnect follows the walsender: [`Publisher::resend_from`] starts at the
//! later of the requested LSN and the slot's `confirmed_flush_lsn`, and skips every unit whose
//! deciding record (commit, prepare, abort, message) lies before that start; transactions still
//! in progress are re-sent from their first chunk.

use std::collections::{BTreeMap, BTreeSet};

use pgyard_delayq::Event;
use pgyard_types::{uniform_inclusive, Lsn, PgTimestamp, Rng, RngCore, UnixTime, Xid};

pub(crate) use payload::decimal;
use payload::{pair, tagged};
pub use records::{Commit, Fate, LogicalSlot, Note, PhysicalStandby, Txn, TxnKind};
pub use wal_facts::WalFacts;
pub use workload::Workload;

mod payload;
mod records;
mod wal_facts;
mod workload;

/// What unit of the stream a message belongs to, for re-sending decisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Unit {
    /// A transaction's data (plain; streamed; two-phase up to its prepare).
    Body(u32),
    /// A prepared transaction's decision.
    Decision(u32),
    /// A non-transactional message, by LSN.
    Note(u64),
}

/// One message the publisher sends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogItem {
    /// The `'w'` header's WAL start.
    pub lsn: Lsn,
    /// What it is.
    pub event: Event,
    /// Its bytes (self-describing text, stored verbatim by a consumer).
    pub payload: Vec<u8>,
    unit: Unit,
}

#[derive(Clone, Debug)]
struct OpenStream {
    xid: u32,
    started: bool,
    /// Savepoint stack: innermost last.
    savepoints: Vec<u32>,
}

/// The publisher model.
#[derive(Clone, Debug)]
pub struct Publisher {
    lsn: u64,
    next_xid: u32,
    change_seq: u64,
    workload: Workload,
    /// How far the publisher's clock has been stepped off the wall (see clock steps).
    clock_offset: i64,
    log: Vec<LogItem>,
    /// Deciding LSN of every finished unit; units absent are still in progress.
    decided: BTreeMap<Unit, Lsn>,
    /// Every transaction, by xid.
    pub txns: BTreeMap<u32, Txn>,
    /// Commits in commit order.
    pub commits: Vec<Commit>,
    /// Non-transactional messages in LSN order.
    pub notes: Vec<Note>,
    open: Vec<OpenStream>,
    prepared: Vec<u32>,
    /// Prepared transactions whose decision waits for `finish_all`.
    held: Vec<u32>,
    /// Transactions not yet confirmed by the slot: first LSN → (xid, end of its final record).
    unconfirmed: BTreeMap<u64, (u32, Option<Lsn>)>,
    /// The entries of `unconfirmed` with an end, by (end, first LSN): a confirmation takes
    /// out those it passes without a walk over every unconfirmed transaction.
    unconfirmed_ends: BTreeSet<(Lsn, u64)>,
    /// The logical slot.
    pub slot: LogicalSlot,
    /// Physical standbys.
    pub standbys: Vec<PhysicalStandby>,
    /// The WAL facts decoding reads, when tracked.
    facts: Option<WalFacts>,
}

impl Publisher {
    /// A publisher at LSN `start` with no history.
    pub fn new(workload: Workload, start: Lsn) -> Publisher {
        Publisher {
            lsn: start.0,
            next_xid: 1000,
            change_seq: 0,
            workload,
            clock_offset: 0,
            log: Vec::new(),
            decided: BTreeMap::new(),
            txns: BTreeMap::new(),
            commits: Vec::new(),
            notes: Vec::new(),
            open: Vec::new(),
            prepared: Vec::new(),
            held: Vec::new(),
            unconfirmed: BTreeMap::new(),
            unconfirmed_ends: BTreeSet::new(),
            slot: LogicalSlot {
                restart_lsn: start,
                confirmed_flush_lsn: start,
                catalog_xmin: Xid(1000),
            },
            standbys: Vec::new(),
            facts: None,
        }
    }

    /// Keeps the WAL facts decoding reads from now on (see [`WalFacts`]).
    pub fn track_wal(&mut self) {
        self.facts.get_or_insert_with(WalFacts::default);
    }

    /// The WAL facts, when tracked.
    pub fn wal_facts(&self) -> Option<&WalFacts> {
        self.facts.as_ref()
    }

    /// Writes an `XLOG_RUNNING_XACTS` record (as the background writer and every checkpoint
    /// do) when the WAL facts are tracked; returns its start.
    pub fn log_running_xacts(&mut self) -> Option<Lsn> {
        self.facts.as_ref()?;
        let mut running: Vec<u32> = self
            .open
            .iter()
            .filter(|o| o.started)
            .map(|o| o.xid)
            .chain(self.prepared.iter().chain(&self.held).copied())
            .collect();
        running.sort_unstable();
        let next = self.next_xid;
        let (start, end) = self.append_wal(0x20 + 4 * running.len() as u64);
        let facts = self.facts.as_mut()?;
        facts.running_xacts(start, end, &running, next);
        Some(start)
    }

    /// The workload mix.
    pub fn workload(&self) -> &Workload {
        &self.workload
    }

    /// The WAL insert (and flush) position.
    pub fn flush_lsn(&self) -> Lsn {
        Lsn(self.lsn)
    }

    /// Appends a record of `bytes` that no consumer decodes (a catalog prune, say); returns
    /// its start and end.
    pub fn append_wal(&mut self, bytes: u64) -> (Lsn, Lsn) {
        let start = self.lsn;
        self.lsn += bytes;
        (Lsn(start), Lsn(self.lsn))
    }

    /// The next xid to be assigned.
    pub fn next_xid(&self) -> Xid {
        Xid(self.next_xid)
    }

    /// Every message sent so far, in order.
    pub fn log(&self) -> &[LogItem] {
        &self.log
    }

    /// Transactions prepared and not yet decided, or streamed and not yet finished.
    pub fn open_count(&self) -> usize {
        self.open.len() + self.prepared.len() + self.held.len()
    }

    /// Adds a physical standby caught up to the current position.
    pub fn add_standby(&mut self, slot: &str, stall_percent: u64) {
        let at = Lsn(self.lsn);
        self.standbys.push(PhysicalStandby {
            slot: slot.to_owned(),
            receive_lsn: at,
            replay_lsn: at,
            feedback_lsn: at,
            stall_percent,
        });
    }

    /// One tick of physical replication: each standby receives a random part of what it
    /// lacks (unless it stalls), replays part of what it received, and reports part of it.
    pub fn advance_standbys(&mut self, rng: &mut Rng) {
        let flush = self.lsn;
        for s in &mut self.standbys {
            if uniform_inclusive(rng, 99) >= s.stall_percent {
                s.receive_lsn = Lsn(toward(rng, s.receive_lsn.0, flush));
            }
            s.replay_lsn = Lsn(toward(rng, s.replay_lsn.0, s.receive_lsn.0));
            s.feedback_lsn = Lsn(toward(rng, s.feedback_lsn.0, s.receive_lsn.0));
        }
    }

    /// One step of workload at wall time `wall`: appends messages to the log and returns the
    /// range of their indices.
    pub fn step(&mut self, rng: &mut Rng, wall: UnixTime) -> std::ops::Range<usize> {
        let from = self.log.len();
        let w = &self.workload;
        let total = w.plain + w.streamed + w.two_phase + w.messages;
        let pick = uniform_inclusive(rng, total.saturating_sub(1));
        let (plain, streamed, two_phase) = (w.plain, w.streamed, w.two_phase);
        if pick < plain {
            self.plain(rng, wall);
        } else if pick < plain + streamed {
            self.stream_step(rng, wall);
        } else if pick < plain + streamed + two_phase {
            self.two_phase_step(rng, wall);
        } else {
            self.note(rng);
        }
        from..self.log.len()
    }

    /// Ends every open transaction (streams finish, prepared ones are decided); for the end of
    /// a run. Returns the range of new log indices.
    pub fn finish_all(&mut self, rng: &mut Rng, wall: UnixTime) -> std::ops::Range<usize> {
        let from = self.log.len();
        while !self.open.is_empty() {
            self.stream_finish(rng, wall, 0);
        }
        self.prepared.append(&mut self.held);
        while !self.prepared.is_empty() {
            self.decide(rng, wall, 0);
        }
        from..self.log.len()
    }

    /// Log indices a walsender sends after `START_REPLICATION` at `requested`: it starts at the
    /// later of that and the slot's `confirmed_flush_lsn`, and skips every unit decided before
    /// the start. Returns the start and the indices.
    pub fn resend_from(&self, requested: Lsn) -> (Lsn, Vec<usize>) {
        let start = requested.max(self.slot.confirmed_flush_lsn);
        // A unit's messages are mostly adjacent: look each unit up once per run of them.
        let mut last: Option<(Unit, bool)> = None;
        let mut send = |unit: Unit| match last {
            Some((u, s)) if u == unit => s,
            _ => {
                let s = self.decided.get(&unit).is_none_or(|d| *d >= start);
                last = Some((unit, s));
                s
            }
        };
        let idx = (0..self.log.len())
            .filter(|&i| send(self.log[i].unit))
            .collect();
        (start, idx)
    }

    /// The subscriber confirmed (flushed) up to `lsn`: the slot's `confirmed_flush_lsn` moves
    /// forward, and `restart_lsn`/`catalog_xmin` follow the oldest transaction still needed.
    pub fn confirm(&mut self, lsn: Lsn) {
        if lsn <= self.slot.confirmed_flush_lsn {
            return;
        }
        let lsn = lsn.min(Lsn(self.lsn));
        self.slot.confirmed_flush_lsn = self.slot.confirmed_flush_lsn.max(lsn);
        let c = self.slot.confirmed_flush_lsn;
        while let Some(&(end, first)) = self.unconfirmed_ends.first() {
            if end > c {
                break;
            }
            self.unconfirmed_ends.pop_first();
            self.unconfirmed.remove(&first);
        }
        let oldest = self.unconfirmed.iter().next();
        self.slot.restart_lsn = self
            .slot
            .restart_lsn
            .max(oldest.map_or(c, |(first, _)| Lsn(*first).min(c)));
        let xmin = oldest.map_or(self.next_xid, |(_, (x, _))| *x);
        self.slot.catalog_xmin = Xid(self.slot.catalog_xmin.0.max(xmin));
    }

    // ---- generation ------------------------------------------------------------------------

    fn record(&mut self, rng: &mut Rng) -> (Lsn, Lsn) {
        let start = self.lsn;
        self.lsn += 0x18 + 8 * uniform_inclusive(rng, 60);
        (Lsn(start), Lsn(self.lsn))
    }

    fn xid(&mut self) -> u32 {
        let x = self.next_xid;
        self.next_xid += 1;
        x
    }

    fn ts(&mut self, rng: &mut Rng, wall: UnixTime) -> PgTimestamp {
        let w = &self.workload;
        // No draw without steps, so scenarios that never set them keep their streams.
        if w.clock_step_percent > 0 && uniform_inclusive(rng, 99) < w.clock_step_percent {
            let m = w.clock_step_micros;
            let step = uniform_inclusive(rng, (2 * m) as u64) as i64 - m;
            self.clock_offset = (self.clock_offset + step).clamp(-4 * m, 4 * m);
        }
        let s = self.workload.skew_micros;
        let off = uniform_inclusive(rng, (2 * s) as u64) as i64 - s;
        PgTimestamp::from_unix(UnixTime(wall.0 + self.clock_offset + off))
    }

    fn push(&mut self, lsn: Lsn, event: Event, payload: Vec<u8>, unit: Unit) {
        self.log.push(LogItem {
            lsn,
            event,
            payload,
            unit,
        });
    }

    fn new_txn(&mut self, xid: u32, kind: TxnKind, first: Lsn) {
        self.txns.insert(
            xid,
            Txn {
                xid: Xid(xid),
                kind,
                first_lsn: first,
                fate: if kind == TxnKind::Streamed {
                    Fate::InProgress
                } else {
                    Fate::Prepared
                },
                changes: Vec::new(),
                prepare_end: None,
                subs: Vec::new(),
            },
        );
        self.set_unconfirmed(first.0, xid, None);
    }

    /// Transaction `xid`, first at `first`, is unconfirmed (ending at `end`, when known).
    fn set_unconfirmed(&mut self, first: u64, xid: u32, end: Option<Lsn>) {
        if let Some((_, Some(old))) = self.unconfirmed.insert(first, (xid, end)) {
            self.unconfirmed_ends.remove(&(old, first));
        }
        if let Some(e) = end {
            self.unconfirmed_ends.insert((e, first));
        }
    }

    fn change_payload(&mut self, xid: u32) -> Vec<u8> {
        self.change_seq += 1;
        pair(b'C', xid.into(), b'.', self.change_seq)
    }

    /// Records changes of `xid` (sub `sub`) at fresh LSNs; returns (lsn, payload, sub).
    fn changes(&mut self, rng: &mut Rng, xid: u32, sub: u32, n: u64) -> Vec<(Lsn, Vec<u8>, u32)> {
        // Sized up front (a workload's steps write a handful of changes each).
        let mut out = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(1024));
        for _ in 0..n {
            let (l, _) = self.record(rng);
            let p = self.change_payload(xid);
            if let Some(t) = self.txns.get_mut(&xid) {
                t.changes.push(p.clone());
                t.subs.push(sub);
                if let Some(f) = self.facts.as_mut().filter(|_| t.kind != TxnKind::Plain) {
                    f.change(xid, sub, l);
                }
            }
            out.push((l, p, sub));
        }
        out
    }

    fn finished(&mut self, xid: u32, end: Lsn) {
        if let Some(t) = self.txns.get(&xid) {
            let first = t.first_lsn.0;
            self.set_unconfirmed(first, xid, Some(end));
        }
    }

    fn commit(&mut self, xid: u32, commit_lsn: Lsn, end_lsn: Lsn, ts: PgTimestamp) {
        if let Some(t) = self.txns.get_mut(&xid) {
            t.fate = Fate::Committed {
                commit_lsn,
                end_lsn,
                ts,
            };
            self.commits.push(Commit {
                xid: Xid(xid),
                first_lsn: t.first_lsn,
                commit_lsn,
                end_lsn,
            });
        }
        self.finished(xid, end_lsn);
    }

    fn plain(&mut self, rng: &mut Rng, wall: UnixTime) {
        let xid = self.xid();
        let first = Lsn(self.lsn);
        self.new_txn(xid, TxnKind::Plain, first);
        let n = uniform_inclusive(rng, self.workload.changes_max);
        let changes = self.changes(rng, xid, xid, n);
        let (commit_lsn, end_lsn) = self.record(rng);
        let ts = self.ts(rng, wall);
        let unit = Unit::Body(xid);
        self.push(
            first,
            Event::Begin {
                xid: Xid(xid),
                final_lsn: commit_lsn,
                commit_ts: ts,
            },
            tagged(b'B', xid.into()),
            unit,
        );
        for (l, p, _) in changes {
            self.push(l, Event::Change { xid: None }, p, unit);
        }
        self.push(
            commit_lsn,
            Event::Commit {
                commit_lsn,
                end_lsn,
                commit_ts: ts,
            },
            tagged(b'K', xid.into()),
            unit,
        );
        self.decided.insert(unit, commit_lsn);
        self.commit(xid, commit_lsn, end_lsn, ts);
    }

    fn note(&mut self, rng: &mut Rng) {
        let (lsn, _) = self.record(rng);
        let payload = tagged(b'N', lsn.0);
        let unit = Unit::Note(lsn.0);
        self.push(
            lsn,
            Event::Message {
                transactional: false,
                xid: None,
                lsn,
            },
            payload.clone(),
            unit,
        );
        self.decided.insert(unit, lsn);
        self.notes.push(Note { lsn, payload });
    }

    fn two_phase_step(&mut self, rng: &mut Rng, wall: UnixTime) {
        if !self.prepared.is_empty() && rng.next_u32().is_multiple_of(2) {
            let i = uniform_inclusive(rng, self.prepared.len() as u64 - 1) as usize;
            self.decide(rng, wall, i);
            return;
        }
        let xid = self.xid();
        let first = Lsn(self.lsn);
        self.new_txn(xid, TxnKind::TwoPhase, first);
        let n = uniform_inclusive(rng, self.workload.changes_max);
        let changes = self.changes(rng, xid, xid, n);
        let (prepare_lsn, end_lsn) = self.record(rng);
        let ts = self.ts(rng, wall);
        let unit = Unit::Body(xid);
        self.push(
            first,
            Event::BeginPrepare {
                xid: Xid(xid),
                prepare_lsn,
                end_lsn,
                prepare_ts: ts,
            },
            tagged(b'b', xid.into()),
            unit,
        );
        for (l, p, _) in changes {
            self.push(l, Event::Change { xid: None }, p, unit);
        }
        self.push(
            prepare_lsn,
            Event::Prepare {
                xid: Xid(xid),
                prepare_lsn,
                end_lsn,
                prepare_ts: ts,
            },
            tagged(b'P', xid.into()),
            unit,
        );
        self.decided.insert(unit, prepare_lsn);
        if let Some(t) = self.txns.get_mut(&xid) {
            t.prepare_end = Some(end_lsn);
        }
        if let Some(f) = &mut self.facts {
            f.prepare(xid, prepare_lsn);
        }
        let held = self.workload.held_percent;
        if held > 0 && uniform_inclusive(rng, 99) < held {
            self.held.push(xid);
        } else {
            self.prepared.push(xid);
        }
    }

    /// Decides the `i`-th prepared transaction: commit or roll back.
    fn decide(&mut self, rng: &mut Rng, wall: UnixTime, i: usize) {
        let xid = self.prepared.remove(i);
        let (lsn, end) = self.record(rng);
        let ts = self.ts(rng, wall);
        let unit = Unit::Decision(xid);
        let prepare_end = self
            .decided
            .get(&Unit::Body(xid))
            .copied()
            .unwrap_or(Lsn::INVALID);
        if uniform_inclusive(rng, 99) < self.workload.abort_percent {
            self.push(
                lsn,
                Event::RollbackPrepared {
                    xid: Xid(xid),
                    prepare_end_lsn: prepare_end,
                    rollback_end_lsn: end,
                    rollback_ts: ts,
                },
                tagged(b'r', xid.into()),
                unit,
            );
            if let Some(t) = self.txns.get_mut(&xid) {
                t.fate = Fate::Aborted;
            }
            if let Some(f) = &mut self.facts {
                f.end(xid, lsn, true);
            }
            self.finished(xid, end);
        } else {
            if let Some(f) = &mut self.facts {
                f.end(xid, lsn, false);
            }
            self.push(
                lsn,
                Event::CommitPrepared {
                    xid: Xid(xid),
                    commit_lsn: lsn,
                    end_lsn: end,
                    commit_ts: ts,
                },
                tagged(b'k', xid.into()),
                unit,
            );
            self.commit(xid, lsn, end, ts);
        }
        self.decided.insert(unit, lsn);
    }

    fn stream_step(&mut self, rng: &mut Rng, wall: UnixTime) {
        if self.open.is_empty() || (self.open.len() < 3 && rng.next_u32().is_multiple_of(3)) {
            let xid = self.xid();
            let first = Lsn(self.lsn);
            self.new_txn(xid, TxnKind::Streamed, first);
            self.open.push(OpenStream {
                xid,
                started: false,
                savepoints: Vec::new(),
            });
            self.stream_block(rng, self.open.len() - 1);
            return;
        }
        let i = uniform_inclusive(rng, self.open.len() as u64 - 1) as usize;
        match uniform_inclusive(rng, 99) {
            r if r < self.workload.sub_abort_percent && !self.open[i].savepoints.is_empty() => {
                self.sub_abort(rng, i)
            }
            r if r >= 75 => self.stream_finish(rng, wall, i),
            _ => self.stream_block(rng, i),
        }
    }

    /// One stream block of the `i`-th open stream: maybe a new savepoint (with a change of its
    /// own, so rolling it back finds where to cut), maybe releasing the innermost one.
    fn stream_block(&mut self, rng: &mut Rng, i: usize) {
        let xid = self.open[i].xid;
        let first = !self.open[i].started;
        self.open[i].started = true;
        let unit = Unit::Body(xid);
        let (l, _) = self.record(rng);
        if let Some(f) = &mut self.facts {
            f.record(xid, l);
        }
        self.push(
            l,
            Event::StreamStart {
                xid: Xid(xid),
                first,
            },
            tagged(b'S', xid.into()),
            unit,
        );
        if rng.next_u32().is_multiple_of(4) && !self.open[i].savepoints.is_empty() {
            self.open[i].savepoints.pop();
        }
        let sub = *self.open[i].savepoints.last().unwrap_or(&xid);
        let n = 1 + uniform_inclusive(rng, self.workload.changes_max);
        let mut changes = self.changes(rng, xid, sub, n);
        if rng.next_u32().is_multiple_of(3) {
            let s = self.xid();
            self.open[i].savepoints.push(s);
            changes.extend(self.changes(rng, xid, s, 1));
        }
        for (l, p, sub) in changes {
            self.push(
                l,
                Event::Change {
                    xid: Some(Xid(sub)),
                },
                p,
                unit,
            );
        }
        let (l, _) = self.record(rng);
        if let Some(f) = &mut self.facts {
            f.record(xid, l);
        }
        self.push(l, Event::StreamStop, b"E".to_vec(), unit);
    }

    /// Rolls back the innermost savepoint of the `i`-th open stream.
    fn sub_abort(&mut self, rng: &mut Rng, i: usize) {
        let xid = self.open[i].xid;
        let Some(sub) = self.open[i].savepoints.pop() else {
            return;
        };
        let (l, _) = self.record(rng);
        if let Some(f) = &mut self.facts {
            f.sub_abort(sub, l);
        }
        if let Some(t) = self.txns.get_mut(&xid) {
            if let Some(at) = t.subs.iter().position(|s| *s == sub) {
                t.changes.truncate(at);
                t.subs.truncate(at);
            }
        }
        self.push(
            l,
            Event::StreamAbort {
                xid: Xid(xid),
                sub_xid: Xid(sub),
            },
            pair(b'A', xid.into(), b'/', sub.into()),
            Unit::Body(xid),
        );
    }

    /// Ends the `i`-th open stream: commit, prepare (decided later) or abort.
    fn stream_finish(&mut self, rng: &mut Rng, wall: UnixTime, i: usize) {
        let st = self.open.remove(i);
        let xid = st.xid;
        let unit = Unit::Body(xid);
        if !st.started {
            // Never sent anything: nothing to finish on the stream.
            self.push_empty_abort(xid);
            return;
        }
        let (lsn, end) = self.record(rng);
        let ts = self.ts(rng, wall);
        let roll = uniform_inclusive(rng, 99);
        if roll < self.workload.abort_percent {
            self.push(
                lsn,
                Event::StreamAbort {
                    xid: Xid(xid),
                    sub_xid: Xid(xid),
                },
                tagged(b'A', xid.into()),
                unit,
            );
            if let Some(t) = self.txns.get_mut(&xid) {
                t.fate = Fate::Aborted;
            }
            if let Some(f) = &mut self.facts {
                f.end(xid, lsn, true);
            }
            self.finished(xid, end);
        } else if self.workload.two_phase > 0 && roll.is_multiple_of(4) {
            self.push(
                lsn,
                Event::StreamPrepare {
                    xid: Xid(xid),
                    prepare_lsn: lsn,
                    end_lsn: end,
                    prepare_ts: ts,
                },
                tagged(b'p', xid.into()),
                unit,
            );
            if let Some(t) = self.txns.get_mut(&xid) {
                t.fate = Fate::Prepared;
                t.prepare_end = Some(end);
            }
            if let Some(f) = &mut self.facts {
                f.prepare(xid, lsn);
            }
            self.prepared.push(xid);
        } else {
            self.push(
                lsn,
                Event::StreamCommit {
                    xid: Xid(xid),
                    commit_lsn: lsn,
                    end_lsn: end,
                    commit_ts: ts,
                },
                tagged(b'c', xid.into()),
                unit,
            );
            if let Some(f) = &mut self.facts {
                f.end(xid, lsn, false);
            }
            self.commit(xid, lsn, end, ts);
        }
        self.decided.insert(unit, lsn);
    }

    fn push_empty_abort(&mut self, xid: u32) {
        if let Some(f) = &mut self.facts {
            f.forget(xid);
        }
        if let Some(t) = self.txns.get_mut(&xid) {
            t.fate = Fate::Aborted;
            let first = t.first_lsn;
            if let Some((_, Some(end))) = self.unconfirmed.remove(&first.0) {
                self.unconfirmed_ends.remove(&(end, first.0));
            }
        }
        self.decided.insert(Unit::Body(xid), Lsn(self.lsn));
    }
}

/// A random point between `from` and `to` (inclusive), never backwards.
fn toward(rng: &mut Rng, from: u64, to: u64) -> u64 {
    if to <= from {
        return from;
    }
    from + uniform_inclusive(rng, to - from)
}
