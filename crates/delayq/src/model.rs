//! The in-memory index of the queue, built by applying records in log order. The live write
//! path and recovery both go through [`Model::apply`], so a recovered queue is the queue that was
//! written, minus what never reached the disk.

use crate::format::{Body, Carry, Flavor, Rec, SealKind};
use crate::items::{ItemMap, SegBytes, SegCounts};
use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// A position in the log: (segment sequence number, byte offset in the segment).
pub(crate) type Pos = (u64, u64);

/// Where a record lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Loc {
    pub seg: u64,
    pub off: u64,
    pub len: u64,
}

impl Loc {
    pub fn pos(&self) -> Pos {
        (self.seg, self.off)
    }
}

/// State of a queued transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TxnState {
    /// Changes are arriving; no commit yet.
    InProgress,
    /// Prepared (two-phase); waiting for COMMIT PREPARED or ROLLBACK PREPARED.
    Prepared,
    /// Committed and queued; handed out once due.
    Committed,
    /// Applied by the caller.
    Applied,
    /// Aborted, rolled back or abandoned; never handed out.
    Aborted,
}

impl TxnState {
    /// The name used by `pgyard delayq inspect`.
    pub fn as_str(self) -> &'static str {
        match self {
            TxnState::InProgress => "in-progress",
            TxnState::Prepared => "prepared",
            TxnState::Committed => "committed",
            TxnState::Applied => "applied",
            TxnState::Aborted => "aborted",
        }
    }

    pub(crate) fn finished(self) -> bool {
        matches!(self, TxnState::Applied | TxnState::Aborted)
    }
}

/// Which message completed a transaction (the one whose LSNs and timestamp order it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommitKind {
    /// `Commit` (`'C'`).
    Commit,
    /// `Stream Commit` (`'c'`).
    StreamCommit,
    /// `Commit Prepared` (`'K'`).
    CommitPrepared,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CommitInfo {
    pub kind: CommitKind,
    pub lsn: Lsn,
    pub end: Lsn,
    pub ts: PgTimestamp,
    pub pos: Pos,
}

/// One queued unit: a transaction or a non-transactional message (`note`).
#[derive(Clone, Debug)]
pub(crate) struct Item {
    pub id: u64,
    pub xid: Xid,
    pub note: bool,
    pub flavor: Flavor,
    pub state: TxnState,
    /// The BEGIN (or NOTE) record: what a carry-forward copies first.
    pub start: Loc,
    /// Data records (changes, in-stream Relation/Type, transactional messages) with the
    /// subtransaction xid they carry (0 = none).
    pub body: Vec<(Loc, u32)>,
    /// In-stream Relation/Type messages among `body`: (index in `body`, tag, OID, WAL LSN,
    /// message).
    pub schema: Vec<(usize, u8, u32, Lsn, Vec<u8>)>,
    pub seal: Option<Loc>,
    pub decide: Option<Loc>,
    pub commit: Option<CommitInfo>,
    pub due: Option<UnixTime>,
    pub first_seg: u64,
    pub last_seg: u64,
    /// While undecided (in progress or prepared): the bytes of its records, by segment.
    pub held: SegBytes,
}

impl Item {
    /// The record handed out as the first message: the BEGIN (or NOTE) record, except for
    /// streamed transactions, whose BEGIN holds a `Stream Start`.
    pub fn begin(&self) -> Option<Loc> {
        (self.flavor != Flavor::Streamed).then_some(self.start)
    }

    /// A transaction whose BEGIN record is at `loc` (read from its own record or a carried copy).
    pub(crate) fn begun(id: u64, xid: Xid, flavor: Flavor, loc: Loc) -> Item {
        Item {
            id,
            xid,
            note: false,
            flavor,
            state: TxnState::InProgress,
            start: loc,
            body: Vec::new(),
            schema: Vec::new(),
            seal: None,
            decide: None,
            commit: None,
            due: None,
            first_seg: loc.seg,
            last_seg: loc.seg,
            held: SegBytes::default(),
        }
    }
}

/// Counts the record at `loc` as held by undecided item `it` (in `all` too).
fn hold(all: &mut SegBytes, it: &mut Item, loc: Loc) {
    it.held.add(loc.seg, loc.len);
    all.add(loc.seg, loc.len);
}

/// Item `it` is decided: its records count against the budget again.
fn release(all: &mut SegBytes, it: &mut Item) {
    all.sub_all(&it.held);
    it.held = SegBytes::default();
}

type SchemaKey = (u8, u32);

/// The Relation/Type map, as of any position still needed by a pending transaction.
#[derive(Clone, Debug, Default)]
pub(crate) struct SchemaMap {
    /// The latest description per key (used for segment snapshots and de-duplication).
    pub current: BTreeMap<SchemaKey, (u8, Vec<u8>)>,
    /// The WAL LSN each current description was sent at (catalog time, unlike log order).
    pub current_lsn: BTreeMap<SchemaKey, Lsn>,
    /// The map before the first change in `history`.
    base: BTreeMap<SchemaKey, (u8, Vec<u8>)>,
    /// Changes in log order, kept while an item that may be handed out (again) precedes them
    /// or the consumer has not been sent them: a consumer that starts over (`rehand`) from
    /// the oldest unapplied item needs the map as of that item, not as of the last hand-out.
    history: VecDeque<(Pos, SchemaKey, u8, Vec<u8>)>,
    /// The consumer holds the map as of this position; `None`: a new consumer, which is sent
    /// all of it.
    sent_upto: Option<Pos>,
    /// Keys the consumer may hold differently from the map: a streamed transaction handed out
    /// carried its own (possibly outdated) descriptions in its messages.
    dirty: BTreeSet<SchemaKey>,
}

impl SchemaMap {
    pub fn key(tag: u8, oid: u32) -> SchemaKey {
        // Types before relations, as the publisher sends them.
        let rank = match tag {
            b'Y' => 0,
            b'R' => 1,
            _ => 2,
        };
        (rank, oid)
    }

    fn record(&mut self, pos: Pos, tag: u8, oid: u32, raw: &[u8], lsn: Lsn) {
        let key = Self::key(tag, oid);
        let at = self.current_lsn.entry(key).or_insert(lsn);
        *at = (*at).max(lsn);
        if self
            .current
            .get(&key)
            .is_some_and(|(t, p)| *t == tag && p.as_slice() == raw)
        {
            return;
        }
        self.current.insert(key, (tag, raw.to_vec()));
        self.current_lsn.insert(key, lsn);
        self.history.push_back((pos, key, tag, raw.to_vec()));
    }

    /// The description of `key` in force for something committed at `pos`.
    fn value_at(&self, key: SchemaKey, pos: Pos) -> Option<&Vec<u8>> {
        self.history
            .iter()
            .rev()
            .find(|h| h.1 == key && h.0 < pos)
            .map(|h| &h.3)
            .or_else(|| self.base.get(&key).map(|(_, p)| p))
    }

    /// The consumer applied `raw` (outside-stream form) from a streamed transaction's messages;
    /// if the map says otherwise, the next hand-out repeats the map's description.
    pub fn consumer_applied(&mut self, tag: u8, oid: u32, raw: &[u8]) {
        let key = Self::key(tag, oid);
        let Some(at) = self.sent_upto else { return };
        if self.value_at(key, at).is_none_or(|p| p.as_slice() != raw) {
            self.dirty.insert(key);
        }
    }

    /// A new consumer (it lost its session): the next hand-out carries the whole map again.
    pub fn restart_consumer(&mut self) {
        self.sent_upto = None;
        self.dirty.clear();
    }

    /// Descriptions the consumer needs before applying something committed at `pos`: the whole
    /// map as of `pos` on the first call, afterwards only what changed since the previous call.
    /// `oldest` is the position of the oldest item that may still be handed out again.
    pub fn delta_until(&mut self, pos: Pos, oldest: Pos) -> Vec<Vec<u8>> {
        // Changes before anything that may be handed out again, and already sent, are settled.
        let settled = self.sent_upto.map_or(oldest, |s| s.min(oldest));
        while self.history.front().is_some_and(|h| h.0 < settled) {
            if let Some((_, key, tag, raw)) = self.history.pop_front() {
                self.base.insert(key, (tag, raw));
            }
        }
        let Some(from) = self.sent_upto else {
            self.sent_upto = Some(pos);
            self.dirty.clear();
            let mut map = self.base.clone();
            for (_, key, tag, raw) in self.history.iter().take_while(|h| h.0 < pos) {
                map.insert(*key, (*tag, raw.clone()));
            }
            return map.into_values().map(|(_, p)| p).collect();
        };
        let mut changed: BTreeSet<SchemaKey> = self
            .history
            .iter()
            .filter(|h| h.0 >= from && h.0 < pos)
            .map(|h| h.1)
            .collect();
        changed.append(&mut self.dirty);
        self.sent_upto = Some(from.max(pos));
        changed
            .iter()
            .filter_map(|k| self.value_at(*k, pos).cloned())
            .collect()
    }
}

/// The index.
#[derive(Clone, Debug, Default)]
pub(crate) struct Model {
    pub items: ItemMap,
    /// Committed, not yet applied items by commit position: the hand-out order.
    pub order: BTreeMap<Pos, u64>,
    /// The open non-streamed transaction (`B`…`C` or `b`…`P`).
    pub open_tx: Option<u64>,
    /// Open streamed transactions by top-level xid.
    pub streams: BTreeMap<u32, u64>,
    /// Prepared transactions waiting for their decision, by xid.
    pub prepared: BTreeMap<u32, u64>,
    pub schema: SchemaMap,
    /// Everything that starts below this LSN is already queued or applied (exclusive end).
    pub horizon: Lsn,
    pub apply_lsn: Lsn,
    pub next_id: u64,
    last_due: Option<UnixTime>,
    /// Delay plus skew tolerance, in microseconds.
    pub delay_micros: i64,
    /// Items with smaller ids began in segments that were purged: they are finished (or
    /// carried forward), and their records before a carry-forward are skipped during recovery.
    pub floor_id: u64,
    /// A carry-forward set being read: the item as its copies describe it, and where the set
    /// starts.
    pub carrying: Option<(Item, Loc)>,
    /// Unfinished items by the segment of their first record: `pinned_from` in O(1).
    live_by_seg: SegCounts,
    /// Committed, unapplied items (and messages) by the segment of their first record.
    due_by_seg: SegCounts,
    /// What undecided items hold of each segment (the sum of their `held`).
    pub held: SegBytes,
}

impl Model {
    pub fn new(delay_micros: i64) -> Self {
        Model {
            next_id: 1,
            delay_micros,
            ..Model::default()
        }
    }

    /// Applies one record found (or just written) at `loc`.
    pub fn apply(&mut self, rec: &Rec<'_>, loc: Loc) -> Result<(), &'static str> {
        if rec.carry == Carry::No && self.carrying.is_some() {
            return Err("carry-forward set interrupted");
        }
        // Data and schema records, and copies other than a set's last, change no item's
        // state or first segment: most records skip the two lookups.
        let moves = match rec.carry {
            Carry::No => !matches!(rec.body, Body::Msg { .. } | Body::Schema { .. }),
            Carry::Copy => false,
            Carry::Last => true,
        };
        let before = if moves { self.tracked(rec.item) } else { None };
        let r = if rec.carry == Carry::No {
            self.apply_original(rec, loc)
        } else {
            self.apply_carried(rec, loc)
        };
        if moves {
            let after = self.tracked(rec.item);
            if before != after {
                untrack(&mut self.live_by_seg, &mut self.due_by_seg, before);
                track(&mut self.live_by_seg, &mut self.due_by_seg, after);
            }
        }
        r
    }

    fn tracked(&self, id: u64) -> Option<(TxnState, u64)> {
        self.items.get(&id).map(|it| (it.state, it.first_seg))
    }

    /// A record of a carry-forward set: the copies build the item afresh, and only the last one
    /// moves it (so a set cut short by a crash changes nothing).
    fn apply_carried(&mut self, rec: &Rec<'_>, loc: Loc) -> Result<(), &'static str> {
        match rec.body {
            Body::Begin { flavor, .. } => {
                if self.carrying.is_some() {
                    return Err("carry-forward set interrupted");
                }
                let mut it = Item::begun(rec.item, rec.xid, flavor, loc);
                it.held.add(loc.seg, loc.len);
                self.carrying = Some((it, loc));
            }
            Body::Msg { schema, raw } => {
                let it = self.carried_item(rec.item)?;
                if let Some((tag, oid)) = schema {
                    it.schema
                        .push((it.body.len(), tag, oid, rec.lsn, raw.to_vec()));
                }
                it.body.push((loc, rec.xid.0));
                it.last_seg = loc.seg;
                it.held.add(loc.seg, loc.len);
            }
            Body::Seal {
                kind: SealKind::Prepare | SealKind::StreamPrepare,
                ..
            } => {
                let it = self.carried_item(rec.item)?;
                it.seal = Some(loc);
                it.state = TxnState::Prepared;
                it.last_seg = loc.seg;
                it.held.add(loc.seg, loc.len);
            }
            _ => return Err("record kind that is never carried forward"),
        }
        if rec.carry == Carry::Last {
            self.finish_carry()?;
        }
        Ok(())
    }

    fn carried_item(&mut self, id: u64) -> Result<&mut Item, &'static str> {
        match &mut self.carrying {
            Some((it, _)) if it.id == id => Ok(it),
            _ => Err("carried record outside its carry-forward set"),
        }
    }

    fn finish_carry(&mut self) -> Result<(), &'static str> {
        let Some((c, _)) = self.carrying.take() else {
            return Err("carry-forward set without a beginning");
        };
        match self.items.get_mut(&c.id) {
            // The originals are still there (not purged yet): the item moves to the copies.
            Some(old) => {
                let same = old.state == c.state
                    && old.xid == c.xid
                    && old.flavor == c.flavor
                    && old.body.len() == c.body.len()
                    && old.seal.is_some() == c.seal.is_some();
                if !same {
                    return Err("carried copy disagrees with the original transaction");
                }
                // The originals are garbage now (purge removes them): only the copies are held.
                self.held.sub_all(&old.held);
                self.held.add_all(&c.held);
                *old = c;
            }
            // The originals were purged: the copies are the item.
            None => {
                self.next_id = self.next_id.max(next_id_after(c.id)?);
                match c.state {
                    TxnState::Prepared => {
                        self.prepared.insert(c.xid.0, c.id);
                    }
                    TxnState::InProgress if c.flavor == Flavor::Streamed => {
                        self.streams.insert(c.xid.0, c.id);
                    }
                    _ => return Err("carried transaction that is neither prepared nor streaming"),
                }
                self.held.add_all(&c.held);
                self.items.insert(c.id, c);
            }
        }
        Ok(())
    }

    fn apply_original(&mut self, rec: &Rec<'_>, loc: Loc) -> Result<(), &'static str> {
        let pos = loc.pos();
        match rec.body {
            Body::Begin { flavor, .. } => self.begin(rec, flavor, loc)?,
            Body::Msg { schema, raw } => self.message(rec, schema, raw, loc)?,
            Body::Seal {
                kind,
                commit_lsn,
                end_lsn,
                ts,
                ..
            } => self.seal(rec.item, kind, commit_lsn, end_lsn, ts, loc)?,
            Body::Decide {
                commit,
                commit_lsn,
                end_lsn,
                ts,
                ..
            } => self.decide(rec.item, commit, commit_lsn, end_lsn, ts, loc)?,
            Body::Abort { sub_xid, .. } => self.abort(rec.item, sub_xid, loc)?,
            Body::Schema { tag, oid, raw } => self.schema.record(pos, tag, oid, raw, rec.lsn),
            Body::Note { .. } => self.note(rec, loc)?,
            Body::Applied => self.applied(rec, loc)?,
        }
        Ok(())
    }

    fn begin(&mut self, rec: &Rec<'_>, flavor: Flavor, loc: Loc) -> Result<(), &'static str> {
        if rec.item == 0 || self.items.contains_key(&rec.item) {
            return Err("transaction begins twice");
        }
        self.next_id = self.next_id.max(next_id_after(rec.item)?);
        let mut it = Item::begun(rec.item, rec.xid, flavor, loc);
        hold(&mut self.held, &mut it, loc);
        self.items.insert(rec.item, it);
        match flavor {
            Flavor::Streamed => {
                self.streams.insert(rec.xid.0, rec.item);
            }
            _ => self.open_tx = Some(rec.item),
        }
        Ok(())
    }

    /// A data message; `schema` marks an in-stream Relation/Type description.
    fn message(
        &mut self,
        rec: &Rec<'_>,
        schema: Option<(u8, u32)>,
        raw: &[u8],
        loc: Loc,
    ) -> Result<(), &'static str> {
        if self.purged(rec.item) {
            return Ok(());
        }
        let it = live(&mut self.items, rec.item, loc)?;
        if it.state != TxnState::InProgress {
            return Err("change for a transaction that is not in progress");
        }
        if let Some((tag, oid)) = schema {
            it.schema
                .push((it.body.len(), tag, oid, rec.lsn, raw.to_vec()));
        }
        if it.body.capacity() == 0 {
            // Room for a small transaction's records at once: growing from four took a
            // reallocation for most transactions (every record of the index passes here,
            // in recovery too).
            it.body.reserve(8);
        }
        it.body.push((loc, rec.xid.0));
        hold(&mut self.held, it, loc);
        Ok(())
    }

    /// A commit, prepare, stream commit or stream prepare.
    fn seal(
        &mut self,
        item: u64,
        kind: SealKind,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        loc: Loc,
    ) -> Result<(), &'static str> {
        if self.purged(item) {
            self.horizon = self.horizon.max(end_lsn);
            return Ok(());
        }
        let delay = self.delay_micros;
        let last_due = self.last_due;
        let it = live(&mut self.items, item, loc)?;
        if it.state != TxnState::InProgress {
            return Err("seal for a transaction that is not in progress");
        }
        it.seal = Some(loc);
        let (xid, id) = (it.xid.0, it.id);
        match kind {
            SealKind::Commit | SealKind::StreamCommit => {
                let ck = if kind == SealKind::Commit {
                    CommitKind::Commit
                } else {
                    CommitKind::StreamCommit
                };
                let due = due_after(last_due, ts, delay);
                it.state = TxnState::Committed;
                it.commit = Some(CommitInfo {
                    kind: ck,
                    lsn: commit_lsn,
                    end: end_lsn,
                    ts,
                    pos: loc.pos(),
                });
                it.due = Some(due);
                release(&mut self.held, it);
                self.last_due = Some(due);
                self.order.insert(loc.pos(), id);
            }
            SealKind::Prepare | SealKind::StreamPrepare => {
                it.state = TxnState::Prepared;
                hold(&mut self.held, it, loc);
                self.prepared.insert(xid, id);
            }
        }
        self.close_open(id, xid);
        self.horizon = self.horizon.max(end_lsn);
        Ok(())
    }

    /// COMMIT PREPARED (`commit`) or ROLLBACK PREPARED.
    fn decide(
        &mut self,
        item: u64,
        commit: bool,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        loc: Loc,
    ) -> Result<(), &'static str> {
        if self.purged(item) {
            self.horizon = self.horizon.max(end_lsn);
            return Ok(());
        }
        let delay = self.delay_micros;
        let last_due = self.last_due;
        let it = live(&mut self.items, item, loc)?;
        if it.state != TxnState::Prepared {
            return Err("decision for a transaction that is not prepared");
        }
        it.decide = Some(loc);
        release(&mut self.held, it);
        let (xid, id) = (it.xid.0, it.id);
        if commit {
            let due = due_after(last_due, ts, delay);
            it.state = TxnState::Committed;
            it.commit = Some(CommitInfo {
                kind: CommitKind::CommitPrepared,
                lsn: commit_lsn,
                end: end_lsn,
                ts,
                pos: loc.pos(),
            });
            it.due = Some(due);
            self.last_due = Some(due);
            self.order.insert(loc.pos(), id);
        } else {
            it.state = TxnState::Aborted;
        }
        self.prepared.remove(&xid);
        self.horizon = self.horizon.max(end_lsn);
        Ok(())
    }

    /// An abort of the whole transaction, or (`sub_xid` another xid) of one subtransaction.
    fn abort(&mut self, item: u64, sub_xid: u32, loc: Loc) -> Result<(), &'static str> {
        let Some(it) = self.items.get_mut(&item) else {
            // The whole transaction lived in purged segments.
            return Ok(());
        };
        it.last_seg = it.last_seg.max(loc.seg);
        if it.state != TxnState::InProgress {
            return Err("abort of a transaction that is not in progress");
        }
        if sub_xid != 0 && sub_xid != it.xid.0 {
            // Like the apply worker's spool: drop from the subtransaction's first
            // change onwards.
            if let Some(i) = it.body.iter().position(|(_, s)| *s == sub_xid) {
                it.body.truncate(i);
                it.schema.retain(|s| s.0 < i);
            }
            // The dropped changes stay in the transaction's segments until it ends.
            hold(&mut self.held, it, loc);
        } else {
            it.state = TxnState::Aborted;
            release(&mut self.held, it);
            let (id, xid) = (it.id, it.xid.0);
            self.close_open(id, xid);
        }
        Ok(())
    }

    /// A non-transactional message: an item committed on arrival.
    fn note(&mut self, rec: &Rec<'_>, loc: Loc) -> Result<(), &'static str> {
        if rec.item == 0 || self.items.contains_key(&rec.item) {
            return Err("message queued twice");
        }
        let pos = loc.pos();
        self.next_id = self.next_id.max(next_id_after(rec.item)?);
        let due = self.last_due;
        self.items.insert(
            rec.item,
            Item {
                id: rec.item,
                xid: Xid(0),
                note: true,
                flavor: Flavor::Plain,
                state: TxnState::Committed,
                start: loc,
                body: Vec::new(),
                schema: Vec::new(),
                seal: None,
                decide: None,
                commit: Some(CommitInfo {
                    kind: CommitKind::Commit,
                    lsn: rec.lsn,
                    end: Lsn(rec.lsn.0.saturating_add(1)),
                    ts: PgTimestamp(0),
                    pos,
                }),
                due,
                first_seg: loc.seg,
                last_seg: loc.seg,
                held: SegBytes::default(),
            },
        );
        self.order.insert(pos, rec.item);
        self.horizon = self.horizon.max(Lsn(rec.lsn.0.saturating_add(1)));
        Ok(())
    }

    fn applied(&mut self, rec: &Rec<'_>, loc: Loc) -> Result<(), &'static str> {
        if let Some(it) = self.items.get_mut(&rec.item) {
            if it.state != TxnState::Committed {
                return Err("applied record for a transaction that is not committed");
            }
            it.state = TxnState::Applied;
            it.last_seg = it.last_seg.max(loc.seg);
            if let Some(c) = it.commit {
                self.order.remove(&c.pos);
            }
        }
        self.apply_lsn = self.apply_lsn.max(rec.lsn);
        Ok(())
    }

    /// True for a record of an item that began in a purged segment.
    fn purged(&self, id: u64) -> bool {
        id < self.floor_id && !self.items.contains_key(&id)
    }

    fn close_open(&mut self, id: u64, xid: u32) {
        if self.open_tx == Some(id) {
            self.open_tx = None;
        }
        if self.streams.get(&xid) == Some(&id) {
            self.streams.remove(&xid);
        }
    }

    /// Oldest segment still needed by an unfinished item.
    pub fn pinned_from(&self) -> Option<u64> {
        self.live_by_seg.first()
    }

    /// Oldest segment holding the first record of a committed item not yet applied: what
    /// applying due work (and nothing else) will release.
    pub fn committed_from(&self) -> Option<u64> {
        self.due_by_seg.first()
    }

    /// Forgets finished items whose records all lie before segment `first_kept`.
    pub fn forget_before(&mut self, first_kept: u64) {
        self.items
            .retain(|_, it| !(it.state.finished() && it.last_seg < first_kept));
    }
}

/// The unfinished item a data record belongs to (a function of the map alone, so that the
/// caller can update the model's other fields while it holds the item).
fn live(items: &mut ItemMap, id: u64, loc: Loc) -> Result<&mut Item, &'static str> {
    let it = items
        .get_mut(&id)
        .ok_or("record for an unknown transaction (its beginning is missing)")?;
    if it.state.finished() {
        return Err("record for a finished transaction");
    }
    it.last_seg = it.last_seg.max(loc.seg);
    Ok(it)
}

fn track(live: &mut SegCounts, due: &mut SegCounts, at: Option<(TxnState, u64)>) {
    let Some((state, seg)) = at else { return };
    if !state.finished() {
        live.add(seg);
    }
    if state == TxnState::Committed {
        due.add(seg);
    }
}

fn untrack(live: &mut SegCounts, due: &mut SegCounts, at: Option<(TxnState, u64)>) {
    let Some((state, seg)) = at else { return };
    if !state.finished() {
        live.remove(seg);
    }
    if state == TxnState::Committed {
        due.remove(seg);
    }
}

/// The id after `id`; the last id is never handed out, so a record carrying it is damage.
fn next_id_after(id: u64) -> Result<u64, &'static str> {
    id.checked_add(1).ok_or("item id out of range")
}

fn due_after(last: Option<UnixTime>, ts: PgTimestamp, delay_micros: i64) -> UnixTime {
    let own = UnixTime(ts.to_unix().0.saturating_add(delay_micros));
    match last {
        Some(l) if l > own => l,
        _ => own,
    }
}
