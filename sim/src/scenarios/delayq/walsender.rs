//! The tables' definitions over time and the walsender's pgoutput for the publisher's log.

use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use bytes::BytesMut;

use pgyard_delayq::Event;
use pgyard_types::{Lsn, PgTimestamp, Xid};
use pgyard_wire::pgoutput::{
    self as po, PgOutputMessage, RelationColumn, ReplicaIdentity, Seq, TupleValue,
};

use super::fail;
use super::ops::{long, Cell, Op, Ops, Values};
use crate::publisher::{decimal, LogItem};
use crate::trace::decimal as digits;
use crate::Violation;

/// Tables the workload writes to.
pub(super) const RELATIONS: u32 = 3;

/// Table `rel`'s name as the apply machine qualifies it.
pub(super) fn table_name(rel: u32) -> &'static str {
    [
        "\"public\".\"t0\"",
        "\"public\".\"t1\"",
        "\"public\".\"t2\"",
    ][rel as usize % 3]
}
pub(super) const REL_OID_BASE: u32 = 16384;
/// OIDs of the custom (non-built-in) column types, one per table.
pub(super) const TYPE_OID_BASE: u32 = 70000;
const TEXT_OID: u32 = 25;
const INT4_OID: u32 = 23;

/// Table definitions over time: version `v` of a table holds from its DDL's WAL position on.
#[derive(Debug, Default)]
pub(super) struct Catalog {
    history: BTreeMap<u32, Vec<(Lsn, u32)>>,
}

impl Catalog {
    pub(super) fn version(&self, rel: u32, at: Lsn) -> u32 {
        // Redefinitions come at the publisher's flush position, which only moves forward:
        // each history is in LSN order, and the version at `at` is the last one from at or
        // before it (every change looks it up, and some seeds redefine a table dozens of times).
        let Some(h) = self.history.get(&rel) else {
            return 1;
        };
        let after = h.partition_point(|(l, _)| *l <= at);
        after.checked_sub(1).map_or(1, |i| h[i].1)
    }

    pub(super) fn redefine(&mut self, rel: u32, at: Lsn) -> u32 {
        let h = self.history.entry(rel).or_default();
        debug_assert!(
            h.last().is_none_or(|(l, _)| *l <= at),
            "redefined back in time"
        );
        let v = h.last().map_or(1, |(_, v)| *v) + 1;
        h.push((at, v));
        v
    }
}

/// The table a change (`C<xid>.<n>`) writes to: `n` modulo the tables (0 when the payload is
/// not UTF-8 or its part after the last dot is not a number).
pub(super) fn rel_of(payload: &[u8]) -> u32 {
    let tail = match payload.iter().rposition(|b| *b == b'.') {
        Some(dot) => &payload[dot + 1..],
        None => payload,
    };
    // What `str::parse::<u64>` accepts: an optional `+`, then at least one digit, no overflow.
    let digits = tail.strip_prefix(b"+").unwrap_or(tail);
    // ASCII (as the publisher's payloads are) is UTF-8 without the full check.
    let n = if digits.is_empty() || !(payload.is_ascii() || std::str::from_utf8(payload).is_ok()) {
        0
    } else {
        digits
            .iter()
            .try_fold(0u64, |n, b| {
                let d = b.checked_sub(b'0').filter(|d| *d < 10)?;
                n.checked_mul(10)?.checked_add(u64::from(d))
            })
            .unwrap_or(0)
    };
    (n % u64::from(RELATIONS)) as u32
}

/// Version `v` of table `rel`: the payload and version columns, then `v % 3` more whose names
/// name the version, the first of a custom type when `v` is even.
pub(super) fn columns(rel: u32, v: u32) -> Vec<(Vec<u8>, u32, bool)> {
    (0..column_count(v))
        .map(|i| {
            let mut name = Vec::new();
            column_name(v, i, &mut name);
            (name, column_type(rel, v, i), i == 0)
        })
        .collect()
}

/// How many columns version `v` of a table has.
pub(super) fn column_count(v: u32) -> usize {
    2 + (v % 3) as usize
}

/// Appends the name of column `i` of version `v` to `out`.
pub(super) fn column_name(v: u32, i: usize, out: &mut Vec<u8>) {
    match i {
        0 => out.extend_from_slice(b"payload"),
        1 => out.extend_from_slice(b"ver"),
        _ => {
            out.push(b'x');
            decimal(out, u64::from(v));
            out.push(b'_');
            decimal(out, (i - 2) as u64);
        }
    }
}

/// Whether `name` is what [`column_name`] writes for column `i` of version `v`, found
/// without writing it out: the checks compare the columns of every inserted shape.
pub(super) fn is_column_name(v: u32, i: usize, name: &[u8]) -> bool {
    match i {
        0 => name == b"payload",
        1 => name == b"ver",
        _ => {
            let (mut a, mut b) = ([0u8; 20], [0u8; 20]);
            let version = digits(u64::from(v), &mut a);
            let index = digits((i - 2) as u64, &mut b);
            let rest = name
                .strip_prefix(b"x")
                .and_then(|r| r.strip_prefix(version));
            rest.and_then(|r| r.strip_prefix(b"_")) == Some(index)
        }
    }
}

/// The type OID of column `i` of version `v` of table `rel`.
pub(super) fn column_type(rel: u32, v: u32, i: usize) -> u32 {
    match i {
        0 => TEXT_OID,
        1 => INT4_OID,
        2 if v.is_multiple_of(2) => TYPE_OID_BASE + rel,
        _ => TEXT_OID,
    }
}

/// What pgoutput sends for one walsender session: Relation (with Type) messages before a
/// table's first change in the session, again after a redefinition, and per streamed
/// transaction inside its blocks; at Stream Commit the tables described in the stream count as
/// described for the session (`cleanup_rel_sync_cache`). Descriptions sent inside a rolled-back
/// subtransaction's part of a stream are dropped with it on the apply side, so the model sends
/// them again (pgoutput's own bookkeeping of that case is not modelled).
///
/// The bytes of a log message never change (a DDL applies from the WAL position after every
/// logged message), and neither do those of a description: both are encoded once per seed and
/// shared by every session that sends them again.
#[derive(Debug)]
pub(super) struct Walsender {
    block: Option<u32>,
    global: BTreeMap<u32, u32>,
    /// Per streamed transaction: (table, version, sequence number of the description).
    streams: BTreeMap<u32, Vec<(u32, u32, u64)>>,
    /// Sequence number of the first change of each (transaction, subtransaction).
    first_change: BTreeMap<(u32, u32), u64>,
    seq: u64,
    /// Encoded messages not yet taken by the follower: (`'w'` LSN, bytes).
    pub(super) out: VecDeque<(Lsn, Rc<[u8]>)>,
    /// Reused encoding buffer: encoding into a fresh one grew it several times per message.
    scratch: BytesMut,
    /// The encoding of each log message sent so far, by log index (empty: not yet).
    logged: Vec<Option<Rc<[u8]>>>,
    /// Descriptions by (table, version, stream): the Type message if any, and the Relation.
    described: BTreeMap<(u32, u32, Option<u32>), Description>,
    /// Tables under REPLICA IDENTITY FULL.
    full: [bool; RELATIONS as usize],
}

/// An old row as pgoutput would send it: the key alone (other columns null) or all of it.
enum OldRow<'a> {
    Key(Vec<TupleValue<'a>>),
    Full(Vec<TupleValue<'a>>),
}

/// The old row of an update or delete of a table with (`full`) or without REPLICA IDENTITY
/// FULL: a long value in a full old row goes as unchanged, as pgoutput sends values stored
/// out of line.
fn old_tuple(old: &Values, full: bool) -> OldRow<'_> {
    if full {
        return OldRow::Full(
            old.iter()
                .map(|v| {
                    if long(v) {
                        TupleValue::UnchangedToast
                    } else {
                        sent(v)
                    }
                })
                .collect(),
        );
    }
    OldRow::Key(
        old.iter()
            .enumerate()
            .map(|(i, v)| if i == 0 { sent(v) } else { TupleValue::Null })
            .collect(),
    )
}

/// A value sent in text form, or NULL.
fn sent(v: &Option<Vec<u8>>) -> TupleValue<'_> {
    v.as_deref().map_or(TupleValue::Null, TupleValue::Text)
}

/// The Type message (if the table has a custom type) and the Relation message of a table.
type Description = (Option<Rc<[u8]>>, Rc<[u8]>);

impl Walsender {
    pub(super) fn new(full: [bool; RELATIONS as usize]) -> Self {
        Walsender {
            full,
            block: None,
            global: BTreeMap::new(),
            streams: BTreeMap::new(),
            first_change: BTreeMap::new(),
            seq: 0,
            out: VecDeque::new(),
            scratch: BytesMut::new(),
            logged: Vec::new(),
            described: BTreeMap::new(),
        }
    }

    /// A new walsender session (after `START_REPLICATION`): nothing described, nothing
    /// pending; the encodings stay.
    pub(super) fn new_session(&mut self) {
        let logged = std::mem::take(&mut self.logged);
        let described = std::mem::take(&mut self.described);
        *self = Walsender {
            logged,
            described,
            ..Walsender::new(self.full)
        };
    }

    /// Sends message `idx` of the publisher's log, with the descriptions it needs first.
    pub(super) fn send(
        &mut self,
        idx: usize,
        item: &LogItem,
        catalog: &Catalog,
        ops: &Ops,
    ) -> Result<(), Violation> {
        match item.event {
            Event::StreamStart { xid, .. } => self.block = Some(xid.0),
            Event::StreamStop => self.block = None,
            Event::StreamCommit { xid, .. } => self.stream_committed(xid, item.lsn, catalog),
            Event::StreamAbort { xid, sub_xid } => self.stream_aborted(xid, sub_xid),
            Event::StreamPrepare { xid, .. } => {
                self.streams.remove(&xid.0);
            }
            Event::Change { xid } => self.before_change(item, xid, catalog, ops)?,
            Event::Relation { .. } | Event::Type { .. } => {
                return Err(fail(
                    "queue-accepts-valid-stream",
                    "the publisher model never logs descriptions".into(),
                ))
            }
            _ => {}
        }
        if self.logged.len() <= idx {
            self.logged.resize(idx + 1, None);
        }
        let bytes = match &self.logged[idx] {
            Some(b) => Rc::clone(b),
            None => {
                let b = self.encode_logged(item, catalog, ops)?;
                self.logged[idx] = Some(Rc::clone(&b));
                b
            }
        };
        self.emit(item.lsn, bytes);
        Ok(())
    }

    /// The bytes of one log message.
    fn encode_logged(
        &mut self,
        item: &LogItem,
        catalog: &Catalog,
        ops: &Ops,
    ) -> Result<Rc<[u8]>, Violation> {
        match item.event {
            Event::Begin {
                xid,
                final_lsn,
                commit_ts,
            } => self.encode(PgOutputMessage::Begin(po::Begin {
                final_lsn,
                commit_time: commit_ts,
                xid,
            })),
            Event::Commit {
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.encode(PgOutputMessage::Commit(po::Commit {
                commit_lsn,
                end_lsn,
                commit_time: commit_ts,
            })),
            Event::BeginPrepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            }
            | Event::Prepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            }
            | Event::StreamPrepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            } => self.prepare(item.event, xid, prepare_lsn, end_lsn, prepare_ts),
            Event::CommitPrepared {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => {
                let g = gid(xid);
                self.encode(PgOutputMessage::CommitPrepared(po::CommitPrepared {
                    commit_lsn,
                    end_lsn,
                    commit_time: commit_ts,
                    xid,
                    gid: &g,
                }))
            }
            Event::RollbackPrepared {
                xid,
                prepare_end_lsn,
                rollback_end_lsn,
                rollback_ts,
            } => {
                let g = gid(xid);
                self.encode(PgOutputMessage::RollbackPrepared(po::RollbackPrepared {
                    prepare_end_lsn,
                    rollback_end_lsn,
                    prepare_time: PgTimestamp(0),
                    rollback_time: rollback_ts,
                    xid,
                    gid: &g,
                }))
            }
            Event::StreamStart { xid, first } => {
                self.encode(PgOutputMessage::StreamStart(po::StreamStart {
                    xid,
                    first_segment: first,
                }))
            }
            Event::StreamStop => self.encode(PgOutputMessage::StreamStop),
            Event::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.encode(PgOutputMessage::StreamCommit(po::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_time: commit_ts,
            })),
            Event::StreamAbort { xid, sub_xid } => {
                self.encode(PgOutputMessage::StreamAbort(po::StreamAbort {
                    xid,
                    subxid: sub_xid,
                    abort: None,
                }))
            }
            Event::Change { xid } => self.change(item, xid, catalog, ops),
            Event::Message {
                transactional,
                xid,
                lsn: at,
            } => self.encode(PgOutputMessage::Message(po::LogicalMessage {
                xid,
                transactional,
                lsn: at,
                prefix: b"pgyard",
                content: &item.payload,
            })),
            Event::Relation { .. } | Event::Type { .. } => Err(fail(
                "queue-accepts-valid-stream",
                "the publisher model never logs descriptions".into(),
            )),
        }
    }

    /// Begin Prepare, Prepare or Stream Prepare (`event` tells which).
    fn prepare(
        &mut self,
        event: Event,
        xid: Xid,
        prepare_lsn: Lsn,
        end_lsn: Lsn,
        prepare_ts: PgTimestamp,
    ) -> Result<Rc<[u8]>, Violation> {
        let g = gid(xid);
        let p = po::Prepare {
            prepare_lsn,
            end_lsn,
            prepare_time: prepare_ts,
            xid,
            gid: &g,
        };
        self.encode(match event {
            Event::BeginPrepare { .. } => PgOutputMessage::BeginPrepare(p),
            Event::Prepare { .. } => PgOutputMessage::Prepare(p),
            _ => PgOutputMessage::StreamPrepare(p),
        })
    }

    /// At Stream Commit the tables the stream described count as described for the session.
    fn stream_committed(&mut self, xid: Xid, lsn: Lsn, catalog: &Catalog) {
        // DDL since the stream described a table invalidated that (pgoutput clears
        // the entry's list of streamed transactions): only current ones count.
        for (rel, v, _) in self.streams.remove(&xid.0).unwrap_or_default() {
            if catalog.version(rel, lsn) == v {
                self.global.insert(rel, v);
            }
        }
    }

    /// A Stream Abort drops the descriptions sent in the aborted part of the stream.
    fn stream_aborted(&mut self, xid: Xid, sub_xid: Xid) {
        if sub_xid == xid {
            self.streams.remove(&xid.0);
        } else if let Some(cut) = self.first_change.get(&(xid.0, sub_xid.0)) {
            let cut = *cut;
            if let Some(sent) = self.streams.get_mut(&xid.0) {
                sent.retain(|(_, _, at)| *at < cut);
            }
        }
    }

    /// Before a change: the Relation (and Type) message of each table it writes to, when the
    /// session (or, inside a stream block, the stream) does not hold the current definition.
    fn before_change(
        &mut self,
        item: &LogItem,
        xid: Option<Xid>,
        catalog: &Catalog,
        ops: &Ops,
    ) -> Result<(), Violation> {
        let lsn = item.lsn;
        let one = [rel_of(&item.payload)];
        let rels = ops.op(&item.payload).map_or(&one[..], Op::tables);
        let top = self.block;
        for &rel in rels {
            let v = catalog.version(rel, lsn);
            let described = match top {
                Some(top) => self
                    .streams
                    .get(&top)
                    .and_then(|s| s.iter().rev().find(|(r, _, _)| *r == rel))
                    .is_some_and(|(_, sv, _)| *sv == v),
                None => self.global.get(&rel) == Some(&v),
            };
            if !described {
                self.describe(rel, v, top, lsn)?;
            }
        }
        if let (Some(top), Some(sub)) = (top, xid) {
            self.first_change.entry((top, sub.0)).or_insert(self.seq);
        }
        Ok(())
    }

    /// The change's message: an insert into its table unless its op says otherwise.
    fn change(
        &mut self,
        item: &LogItem,
        xid: Option<Xid>,
        catalog: &Catalog,
        ops: &Ops,
    ) -> Result<Rc<[u8]>, Violation> {
        let op = ops.op(&item.payload);
        let rel = match op {
            Some(Op::Insert { rel, .. }) => *rel,
            None => rel_of(&item.payload),
            Some(other) => return self.encode_op(other, xid),
        };
        let v = catalog.version(rel, item.lsn);
        let mut ver = Vec::with_capacity(10);
        decimal(&mut ver, u64::from(v));
        let mut vals = [TupleValue::Null; 4];
        vals[0] = TupleValue::Text(&item.payload);
        vals[1] = TupleValue::Text(&ver);
        let vals = &vals[..column_count(v)];
        self.encode(PgOutputMessage::Insert(po::Insert {
            xid,
            relation: REL_OID_BASE + rel,
            new: Seq::from_slice(vals),
        }))
    }

    /// An UPDATE, DELETE or TRUNCATE as pgoutput sends it: the old key only when an update
    /// changed it, the whole old row (long values as unchanged) under REPLICA IDENTITY FULL.
    fn encode_op(&mut self, op: &Op, xid: Option<Xid>) -> Result<Rc<[u8]>, Violation> {
        match op {
            Op::Update {
                rel,
                old,
                new,
                key_changed,
                ..
            } => {
                let cells: Vec<TupleValue<'_>> = new
                    .iter()
                    .map(|c| match c {
                        Cell::Sent(v) => sent(v),
                        Cell::Unchanged => TupleValue::UnchangedToast,
                    })
                    .collect();
                let before = old_tuple(old, self.full[*rel as usize]);
                let old = match &before {
                    OldRow::Full(t) => Some(po::OldTuple::Full(Seq::from_slice(t))),
                    OldRow::Key(t) if *key_changed => Some(po::OldTuple::Key(Seq::from_slice(t))),
                    OldRow::Key(_) => None,
                };
                self.encode(PgOutputMessage::Update(po::Update {
                    xid,
                    relation: REL_OID_BASE + rel,
                    old,
                    new: Seq::from_slice(&cells),
                }))
            }
            Op::Delete { rel, old, .. } => {
                let before = old_tuple(old, self.full[*rel as usize]);
                let old = match &before {
                    OldRow::Full(t) => po::OldTuple::Full(Seq::from_slice(t)),
                    OldRow::Key(t) => po::OldTuple::Key(Seq::from_slice(t)),
                };
                self.encode(PgOutputMessage::Delete(po::Delete {
                    xid,
                    relation: REL_OID_BASE + rel,
                    old,
                }))
            }
            Op::Truncate {
                rels,
                cascade,
                restart,
            } => {
                let oids: Vec<u32> = rels.iter().map(|r| REL_OID_BASE + r).collect();
                self.encode(PgOutputMessage::Truncate(po::Truncate {
                    xid,
                    cascade: *cascade,
                    restart_identity: *restart,
                    relations: Seq::from_slice(&oids),
                }))
            }
            Op::Insert { .. } => Err(fail(
                "queue-accepts-valid-stream",
                "an insert encoded as another change".into(),
            )),
        }
    }

    /// Sends version `v` of table `rel` (with its custom type first, when it has one), inside
    /// the stream block of `top` if there is one, and records it as described.
    fn describe(&mut self, rel: u32, v: u32, top: Option<u32>, lsn: Lsn) -> Result<(), Violation> {
        let (ty, relation) = match self.described.get(&(rel, v, top)) {
            Some(d) => d.clone(),
            None => {
                let d = self.encode_description(rel, v, top)?;
                self.described.insert((rel, v, top), d.clone());
                d
            }
        };
        if let Some(y) = ty {
            self.emit(lsn, y);
        }
        let at = self.seq;
        self.emit(lsn, relation);
        match top {
            Some(top) => self.streams.entry(top).or_default().push((rel, v, at)),
            None => {
                self.global.insert(rel, v);
            }
        }
        Ok(())
    }

    /// The Type (when version `v` of table `rel` has a custom type) and Relation messages.
    fn encode_description(
        &mut self,
        rel: u32,
        v: u32,
        top: Option<u32>,
    ) -> Result<Description, Violation> {
        let in_stream = top.map(Xid);
        let mut ty = None;
        if v.is_multiple_of(2) && !v.is_multiple_of(3) {
            let name = format!("t{rel}_kind").into_bytes();
            let y = self.encode(PgOutputMessage::Type(po::Type {
                xid: in_stream,
                oid: TYPE_OID_BASE + rel,
                namespace: b"public",
                name: &name,
            }))?;
            ty = Some(y);
        }
        let cols = columns(rel, v);
        let rc: Vec<RelationColumn<'_>> = cols
            .iter()
            .map(|(name, ty, key)| RelationColumn {
                // Under REPLICA IDENTITY FULL pgoutput flags every column as part of it.
                key: *key || self.full[rel as usize],
                name,
                type_oid: *ty,
                type_modifier: -1,
            })
            .collect();
        let name = format!("t{rel}").into_bytes();
        let r = self.encode(PgOutputMessage::Relation(po::Relation {
            xid: in_stream,
            oid: REL_OID_BASE + rel,
            namespace: b"public",
            name: &name,
            replica_identity: if self.full[rel as usize] {
                ReplicaIdentity::Full
            } else {
                ReplicaIdentity::Default
            },
            columns: Seq::from_slice(&rc),
        }))?;
        Ok((ty, r))
    }

    /// Queues one encoded message (the follow machine decodes it, as from a socket).
    fn emit(&mut self, lsn: Lsn, bytes: Rc<[u8]>) {
        self.seq += 1;
        self.out.push_back((lsn, bytes));
    }
}

impl Walsender {
    fn encode(&mut self, m: PgOutputMessage<'_>) -> Result<Rc<[u8]>, Violation> {
        self.scratch.clear();
        m.encode(&mut self.scratch)
            .map_err(|e| fail("queue-accepts-valid-stream", format!("encode {m:?}: {e}")))?;
        Ok(Rc::from(&self.scratch[..]))
    }
}

/// The global transaction identifier the publisher model gives transaction `xid`.
fn gid(xid: Xid) -> Vec<u8> {
    let mut g = Vec::with_capacity(27);
    g.extend_from_slice(b"pgyard_");
    decimal(&mut g, u64::from(xid.0));
    g
}

#[cfg(test)]
mod tests {
    /// `rel_of` as it was written first, with `str::parse`.
    fn rel_of_by_parse(payload: &[u8]) -> u32 {
        let n: u64 = std::str::from_utf8(payload)
            .ok()
            .and_then(|p| p.rsplit('.').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        (n % u64::from(super::RELATIONS)) as u32
    }

    #[test]
    fn column_names_are_recognised_as_written() {
        for v in [0, 1, 2, 9, 10, 99, 100, 12345, u32::MAX] {
            for i in 0..14 {
                let mut name = Vec::new();
                super::column_name(v, i, &mut name);
                assert!(super::is_column_name(v, i, &name), "{v} {i}");
                let mut longer = name.clone();
                longer.push(b'0');
                assert!(!super::is_column_name(v, i, &longer), "{v} {i}");
                assert!(
                    !super::is_column_name(v, i, &name[..name.len() - 1]),
                    "{v} {i}"
                );
                if i > 0 {
                    assert!(!super::is_column_name(v, i - 1, &name), "{v} {i}");
                }
                if i > 1 {
                    let other = v.wrapping_add(1);
                    assert!(!super::is_column_name(other, i, &name), "{v} {i}");
                }
            }
        }
    }

    #[test]
    fn rel_of_reads_the_number_after_the_last_dot() {
        let cases: [&[u8]; 14] = [
            b"C1000.7",
            b"C1000.8",
            b"C1000.18446744073709551615",
            b"C1000.18446744073709551616",
            b"C1.+5",
            b"C1.+",
            b"C1.",
            b"C1.-5",
            b"5",
            b"",
            b"a.b.41",
            b"C1.4x",
            b"\xff.4",
            b"C1000.0004",
        ];
        for c in cases {
            assert_eq!(super::rel_of(c), rel_of_by_parse(c), "{c:?}");
        }
    }
}
