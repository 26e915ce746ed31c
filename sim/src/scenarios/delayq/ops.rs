//! What each change of the publisher's workload does to its tables. The publisher model names
//! its changes (`C<xid>.<seq>`) and leaves their meaning to the scenario; here each becomes an
//! INSERT, an UPDATE, a DELETE or a TRUNCATE, drawn in log order from an RNG stream of its own
//! (a seed that draws inserts only runs exactly the world it ran before these existed).
//!
//! An UPDATE or DELETE changes a row its own (sub)transaction inserted or claimed earlier, or
//! claims one now among the rows others committed lately (`public.rs`: a claim is the row
//! lock, held until the transaction ends, so the subscriber, applying whole transactions in
//! commit order, finds each row as the publisher's change saw it). A TRUNCATE empties whole
//! tables, rows of other transactions included, where nobody else holds a claim; later
//! changes of its own transaction leave the rows it removed alone. Values follow TOAST as
//! pgoutput sends it: a value of the long kind (`L…`) an UPDATE leaves as it was travels as
//! "unchanged" (`u`), and so does one in a REPLICA IDENTITY FULL old row; keys are never long.
//!
//! What the checks compare: a hash of every row (table, column names, values), summed per
//! table, so that the publisher's committed prefix and the subscriber's tables can be compared
//! at every step in constant time. [`Op::deltas`] gives what a change does to those sums,
//! except for a TRUNCATE, which removes whatever the table holds when it is applied.

use std::collections::BTreeMap;

use pgyard_delayq::Event;
use pgyard_types::{side_stream, uniform_inclusive, Rng};

use super::public::{take_groups, Group, Public};
use super::walsender::{column_count, Catalog, RELATIONS};
use crate::publisher::{decimal, LogItem};
use crate::trace::decimal as decimal_digits;

/// The RNG stream the kinds of changes are drawn from.
const STREAM: u64 = 0x6368_616e_6765;

/// One row's values in column order, `None` for NULL.
pub(super) type Values = Vec<Option<Vec<u8>>>;

/// A value of an UPDATE's new row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Cell {
    /// Sent in full (`None`: NULL).
    Sent(Option<Vec<u8>>),
    /// Unchanged and stored out of line: sent as `u`, the subscriber keeps its value.
    Unchanged,
}

/// What one change does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Op {
    /// A new row (the payload, the version, NULLs) in table `rel`.
    Insert { rel: u32, hash: u64 },
    /// A row of table `rel` changed from `old` to `new`.
    Update {
        rel: u32,
        old: Values,
        new: Vec<Cell>,
        /// The key (`payload`) changed: pgoutput sends the old key.
        key_changed: bool,
        hashes: (u64, u64),
    },
    /// A row of table `rel` removed.
    Delete { rel: u32, old: Values, hash: u64 },
    /// Tables emptied, with the options as written.
    Truncate {
        rels: Vec<u32>,
        cascade: bool,
        restart: bool,
    },
}

impl Op {
    /// Whether the change writes to (and so locks) table `rel`.
    pub(super) fn touches(&self, rel: u32) -> bool {
        self.tables().contains(&rel)
    }

    /// The tables a change writes to, in the order it names them.
    pub(super) fn tables(&self) -> &[u32] {
        match self {
            Op::Insert { rel, .. } | Op::Update { rel, .. } | Op::Delete { rel, .. } => {
                std::slice::from_ref(rel)
            }
            Op::Truncate { rels, .. } => rels,
        }
    }

    /// Applies the change to per-table sums of row hashes (a TRUNCATE zeroes its tables).
    pub(super) fn apply(&self, sums: &mut [u64; RELATIONS as usize]) {
        match self {
            Op::Insert { rel, hash } => {
                let s = &mut sums[*rel as usize];
                *s = s.wrapping_add(*hash);
            }
            Op::Update {
                rel,
                hashes: (old, new),
                ..
            } => {
                let s = &mut sums[*rel as usize];
                *s = s.wrapping_sub(*old).wrapping_add(*new);
            }
            Op::Delete { rel, hash, .. } => {
                let s = &mut sums[*rel as usize];
                *s = s.wrapping_sub(*hash);
            }
            Op::Truncate { rels, .. } => rels.iter().for_each(|r| sums[*r as usize] = 0),
        }
    }
}

/// How a seed mixes its changes, drawn once.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct ChangeMix {
    /// Percent of changes that update a row of their own, when there is one ...
    update_percent: u64,
    /// ... that delete one ...
    delete_percent: u64,
    /// ... and that truncate one or two tables.
    truncate_percent: u64,
    /// Percent of updates that change the key.
    key_change_percent: u64,
    /// Tables under REPLICA IDENTITY FULL (the others have their key as identity).
    pub(super) full: [bool; RELATIONS as usize],
    /// The subscriber has a unique index on the key of every table whose identity is the key.
    pub(super) unique_key: bool,
    /// Percent of steps in which somebody deletes a row by hand on the subscriber.
    pub(super) tamper_percent: u64,
    /// The size of the big values an eighth of long values get (0: none): larger than any
    /// segment (16–64 KB), or in a few seeds than a direct read (over 1 MiB).
    big_bytes: usize,
}

impl ChangeMix {
    /// Inserts only in a quarter of the seeds; otherwise every kind, in proportions drawn.
    fn draw(rng: &mut Rng) -> ChangeMix {
        let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
        if r(rng, 3) == 0 {
            return ChangeMix::default();
        }
        ChangeMix {
            update_percent: 5 + r(rng, 40),
            delete_percent: r(rng, 25),
            truncate_percent: if r(rng, 2) == 0 { 1 + r(rng, 3) } else { 0 },
            key_change_percent: r(rng, 30),
            full: [r(rng, 2) == 0, r(rng, 2) == 0, r(rng, 2) == 0],
            unique_key: r(rng, 1) == 0,
            tamper_percent: if r(rng, 1) == 0 { 1 + r(rng, 3) } else { 0 },
            big_bytes: match r(rng, 299) {
                0 => 1_100_000 + r(rng, 200_000) as usize,
                1..=74 => 16_000 + r(rng, 48_000) as usize,
                _ => 0,
            },
        }
    }

    /// Whether the seed has changes other than inserts.
    pub(super) fn any(&self) -> bool {
        self.update_percent + self.delete_percent + self.truncate_percent > 0
    }
}

/// A row its own (sub)transaction inserted and may still change.
#[derive(Debug)]
struct Live {
    rel: u32,
    version: u32,
    values: Values,
}

/// The kind of every change in the publisher's log, decided as the log grows.
#[derive(Debug)]
pub(super) struct Ops {
    /// The mix.
    pub(super) mix: ChangeMix,
    rng: Rng,
    /// The op of each change, by its sequence number less one.
    by_seq: Vec<Option<Op>>,
    /// Log messages looked at so far.
    seen: usize,
    /// Rows each (transaction, subtransaction) inserted or claimed and may still change.
    live: BTreeMap<Group, Vec<Live>>,
    /// Rows committed, and the claims on them.
    public: Public,
    /// The sequence number of each group's first change.
    first: BTreeMap<Group, u64>,
    /// The transaction whose Begin came last (plain ones are contiguous in the log).
    current: u32,
}

impl Ops {
    /// A seed's ops, drawn from `rng`'s own stream (the caller's draws are untouched).
    pub(super) fn new(rng: &Rng) -> Ops {
        let mut rng = side_stream(rng, STREAM);
        Ops {
            mix: ChangeMix::draw(&mut rng),
            rng,
            by_seq: Vec::new(),
            seen: 0,
            live: BTreeMap::new(),
            public: Public::default(),
            first: BTreeMap::new(),
            current: 0,
        }
    }

    /// The op of the change `payload` names (`None` for a payload no change has).
    pub(super) fn op(&self, payload: &[u8]) -> Option<&Op> {
        let (_, seq) = change_ids(payload)?;
        self.by_seq
            .get(usize::try_from(seq.checked_sub(1)?).ok()?)?
            .as_ref()
    }

    /// Decides the kind of every change logged since the last call.
    pub(super) fn extend(&mut self, log: &[LogItem], catalog: &Catalog) {
        for item in &log[self.seen.min(log.len())..] {
            match item.event {
                Event::Begin { xid, .. } => self.current = xid.0,
                Event::Commit { .. } => self.committed(self.current),
                Event::StreamCommit { xid, .. } | Event::CommitPrepared { xid, .. } => {
                    self.committed(xid.0)
                }
                Event::StreamAbort { xid, sub_xid } => {
                    self.aborted(xid.0, (sub_xid != xid).then_some(sub_xid.0))
                }
                Event::RollbackPrepared { xid, .. } => self.aborted(xid.0, None),
                Event::Change { xid } => {
                    let Some((top, seq)) = change_ids(&item.payload) else {
                        continue;
                    };
                    let group = (top, xid.map_or(top, |x| x.0));
                    self.first.entry(group).or_insert(seq);
                    let op = self.draw(group, seq, item, catalog);
                    let at = usize::try_from(seq.saturating_sub(1)).unwrap_or(usize::MAX);
                    if at >= self.by_seq.len() {
                        self.by_seq.resize(at + 1, None);
                    }
                    self.by_seq[at] = Some(op);
                }
                _ => {}
            }
        }
        self.seen = log.len();
    }

    /// The operator skips transaction `xid`: whether that leaves every change drawn so far
    /// and later applicable (see [`Public::forget`]).
    pub(super) fn skip(&mut self, xid: u32) -> bool {
        self.public.forget(xid)
    }

    /// Transaction `top` committed: its rows, as it left them, are everyone's to change.
    fn committed(&mut self, top: u32) {
        self.first.retain(|g, _| g.0 != top);
        let rows = take_groups(&mut self.live, top)
            .into_values()
            .flatten()
            .map(|r| (r.rel, r.version, r.values))
            .collect();
        self.public.commit(top, rows);
    }

    /// Transaction `top`, or its subtransaction `sub`, rolled back: its rows are gone and
    /// the rows it claimed are free again. A subtransaction takes with it every group that
    /// began after its first change — the ones nested in it, and the ones released into it
    /// (the publisher cuts the transaction's changes there).
    fn aborted(&mut self, top: u32, sub: Option<u32>) {
        let Some(s) = sub else {
            self.live.retain(|g, _| g.0 != top);
            self.first.retain(|g, _| g.0 != top);
            self.public.abort(top, None);
            return;
        };
        let Some(&cut) = self.first.get(&(top, s)) else {
            return;
        };
        let gone: Vec<Group> = self
            .first
            .range((top, 0)..=(top, u32::MAX))
            .filter(|(_, first)| **first >= cut)
            .map(|(g, _)| *g)
            .collect();
        for g in gone {
            self.first.remove(&g);
            self.live.remove(&g);
            self.public.abort(top, Some(g.1));
        }
    }

    /// A row for `group` to update or delete: one it inserted or claimed, or one it claims
    /// now from what others committed (its index among the group's rows).
    fn target(&mut self, group: Group, item: &LogItem, catalog: &Catalog) -> Option<usize> {
        let own = self.live.get(&group).map_or(0, Vec::len);
        let recent = self.public.recent_len();
        if recent > 0 && (own == 0 || uniform_inclusive(&mut self.rng, 1) == 0) {
            let pick = uniform_inclusive(&mut self.rng, recent as u64 - 1) as usize;
            let version_of = |rel| catalog.version(rel, item.lsn);
            if let Some((rel, version, values)) = self.public.claim(group, pick, version_of) {
                let rows = self.live.entry(group).or_default();
                rows.push(Live {
                    rel,
                    version,
                    values,
                });
                return Some(rows.len() - 1);
            }
        }
        (own > 0).then(|| uniform_inclusive(&mut self.rng, own as u64 - 1) as usize)
    }

    /// The kind of change `seq` of `group`, logged as `item`.
    fn draw(&mut self, group: (u32, u32), seq: u64, item: &LogItem, catalog: &Catalog) -> Op {
        let any = self.mix.any();
        let m = &self.mix;
        let (upd, del, tru) = (m.update_percent, m.delete_percent, m.truncate_percent);
        let roll = if any {
            uniform_inclusive(&mut self.rng, 99)
        } else {
            100
        };
        if roll < tru {
            if let Some(op) = self.truncate(group) {
                return op;
            }
        } else if roll < tru + del + upd {
            if let Some(i) = self.target(group, item, catalog) {
                if roll < tru + del {
                    let row = self.live.get_mut(&group).map(|l| l.swap_remove(i));
                    if let Some(row) = row {
                        let hash = row_hash(row.rel, row.version, &row.values);
                        return Op::Delete {
                            rel: row.rel,
                            old: row.values,
                            hash,
                        };
                    }
                } else if let Some(op) = self.update(group, i, seq) {
                    return op;
                }
            }
        }
        let rel = super::walsender::rel_of(&item.payload);
        let version = catalog.version(rel, item.lsn);
        let width = column_count(version);
        let mut digits = [0u8; 20];
        let ver = decimal_digits(u64::from(version), &mut digits);
        // The row as the subscriber will hold it: the payload, the version, NULLs. It is
        // kept (as values) only where later changes may pick it; most seeds with inserts
        // alone hash it where it lies.
        let cell = |i: usize| match i {
            0 => Some(&item.payload[..]),
            1 => Some(ver),
            _ => None,
        };
        let hash = hash_row(
            TABLE_HASHES[rel as usize % TABLE_HASHES.len()],
            (0..width).map(|i| (column_name_hash(version, i), cell(i))),
        );
        if any {
            let values = (0..width).map(|i| cell(i).map(<[u8]>::to_vec)).collect();
            self.live.entry(group).or_default().push(Live {
                rel,
                version,
                values,
            });
        }
        Op::Insert { rel, hash }
    }

    /// An UPDATE of row `i` of `group`'s own: each value after the version kept, set short,
    /// set long or set NULL, and maybe a new key.
    fn update(&mut self, group: (u32, u32), i: usize, seq: u64) -> Option<Op> {
        let key_change = uniform_inclusive(&mut self.rng, 99) < self.mix.key_change_percent;
        let big = self.mix.big_bytes > 0 && uniform_inclusive(&mut self.rng, 7) == 0;
        let big_bytes = self.mix.big_bytes;
        let picks: Vec<u64> = (0..4)
            .map(|_| uniform_inclusive(&mut self.rng, 3))
            .collect();
        let row = self.live.get_mut(&group)?.get_mut(i)?;
        let old = row.values.clone();
        let mut new = Vec::with_capacity(old.len());
        for (c, v) in row.values.iter_mut().enumerate() {
            let cell = match c {
                0 if key_change => {
                    let old = v.as_deref().unwrap_or_default();
                    let mut k = Vec::with_capacity(old.len() + 21);
                    k.extend_from_slice(old);
                    k.push(b'k');
                    decimal(&mut k, seq);
                    *v = Some(k.clone());
                    Cell::Sent(Some(k))
                }
                0 | 1 => Cell::Sent(v.clone()),
                _ => match picks[(c - 2).min(3)] {
                    0 if long(v) => Cell::Unchanged,
                    0 => Cell::Sent(v.clone()),
                    p => {
                        *v = match p {
                            1 => Some(tagged_value(b's', seq)),
                            2 if big => {
                                let mut l = tagged_value(b'L', seq);
                                l.resize(big_bytes, b'.');
                                Some(l)
                            }
                            2 => Some(tagged_value(b'L', seq)),
                            _ => None,
                        };
                        Cell::Sent(v.clone())
                    }
                },
            };
            new.push(cell);
        }
        let hashes = (
            row_hash(row.rel, row.version, &old),
            row_hash(row.rel, row.version, &row.values),
        );
        Some(Op::Update {
            rel: row.rel,
            old,
            new,
            key_changed: key_change,
            hashes,
        })
    }

    /// A TRUNCATE of one table or two by `group`: the rows its transaction inserted or
    /// claimed there are gone for it too. `None` where another transaction has claimed a row
    /// in one of them (on the server the TRUNCATE would wait for it).
    fn truncate(&mut self, group: Group) -> Option<Op> {
        let first = uniform_inclusive(&mut self.rng, u64::from(RELATIONS) - 1) as u32;
        let mut rels = vec![first];
        if uniform_inclusive(&mut self.rng, 1) == 0 {
            let other = (first + 1 + uniform_inclusive(&mut self.rng, 1) as u32) % RELATIONS;
            rels.push(other);
        }
        let cascade = uniform_inclusive(&mut self.rng, 1) == 0;
        let restart = uniform_inclusive(&mut self.rng, 1) == 0;
        if !rels.iter().all(|r| self.public.may_truncate(group, *r)) {
            return None;
        }
        self.public.truncated(group, &rels);
        let top = group.0;
        for (_, rows) in self.live.range_mut((top, 0)..=(top, u32::MAX)) {
            rows.retain(|r| !rels.contains(&r.rel));
        }
        Some(Op::Truncate {
            rels,
            cascade,
            restart,
        })
    }
}

/// Whether a value is of the kind stored out of line (TOASTed).
pub(super) fn long(v: &Option<Vec<u8>>) -> bool {
    v.as_ref().is_some_and(|v| v.first() == Some(&b'L'))
}

fn tagged_value(tag: u8, seq: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(21);
    v.push(tag);
    decimal(&mut v, seq);
    v
}

/// The transaction and sequence number of a change's payload, `C<xid>.<seq>`.
pub(super) fn change_ids(payload: &[u8]) -> Option<(u32, u64)> {
    let rest = payload.strip_prefix(b"C")?;
    let dot = rest.iter().position(|b| *b == b'.')?;
    let num = |d: &[u8]| -> Option<u64> {
        if d.is_empty() {
            return None;
        }
        d.iter().try_fold(0u64, |n, b| {
            let d = b.checked_sub(b'0').filter(|d| *d < 10)?;
            n.checked_mul(10)?.checked_add(u64::from(d))
        })
    };
    let xid = u32::try_from(num(&rest[..dot])?).ok()?;
    Some((xid, num(&rest[dot + 1..])?))
}

/// The table's part of a row's hash: its qualified name, as the applier writes it.
pub(super) fn table_hash(name: &[u8]) -> u64 {
    fnv(FNV_OFFSET, name)
}

/// The hash of a row of version `version` of table `rel`, as the subscriber computes it from
/// what it holds.
pub(super) fn row_hash(rel: u32, version: u32, values: &Values) -> u64 {
    // The table's and the first two columns' name hashes are constants, and the other
    // names are hashed as they are spelt, without writing them out: this runs for every row
    // drawn.
    hash_row(
        TABLE_HASHES[rel as usize % TABLE_HASHES.len()],
        values
            .iter()
            .enumerate()
            .map(|(i, v)| (column_name_hash(version, i), v.as_deref())),
    )
}

/// `name_hash` of the name `column_name(version, i)` writes.
fn column_name_hash(version: u32, i: usize) -> u64 {
    match i {
        0 => PAYLOAD_HASH,
        1 => VER_HASH,
        _ => {
            let mut digits = [0u8; 20];
            let h = fnv(FNV_OFFSET, b"x");
            let h = fnv(h, decimal_digits(u64::from(version), &mut digits));
            let h = fnv(h, b"_");
            fnv(h, decimal_digits((i - 2) as u64, &mut digits))
        }
    }
}

/// `table_hash(table_name(rel))` for each table (checked by a test).
const TABLE_HASHES: [u64; 3] = [
    fnv_const(b"\"public\".\"t0\""),
    fnv_const(b"\"public\".\"t1\""),
    fnv_const(b"\"public\".\"t2\""),
];
/// `name_hash` of the first two columns' names.
const PAYLOAD_HASH: u64 = fnv_const(b"payload");
const VER_HASH: u64 = fnv_const(b"ver");

/// [`fnv`] from the offset basis, at compile time.
const fn fnv_const(bytes: &[u8]) -> u64 {
    let mut h = FNV_OFFSET;
    let mut i = 0;
    while i < bytes.len() {
        h = (h ^ bytes[i] as u64).wrapping_mul(FNV_PRIME);
        i += 1;
    }
    h
}

/// A row's hash from its table's hash and each column's (name hash, value).
pub(super) fn hash_row<'v>(table: u64, cols: impl Iterator<Item = (u64, Option<&'v [u8]>)>) -> u64 {
    let mut h = table;
    for (name, v) in cols {
        h = (h ^ name).wrapping_mul(FNV_PRIME);
        h = match v {
            None => (h ^ 0xA5).wrapping_mul(FNV_PRIME),
            Some(v) => value_hash((h ^ 0x5A).wrapping_mul(FNV_PRIME), v),
        };
        h = (h ^ 0xFF).wrapping_mul(FNV_PRIME);
    }
    // A final mix, so that sums of hashes of similar rows do not cancel out.
    let mut z = h;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A column name's part of a row's hash.
pub(super) fn name_hash(name: &[u8]) -> u64 {
    fnv(FNV_OFFSET, name)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h = (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME);
    }
    h
}

/// A value's part of a row's hash: FNV-1a's step over eight bytes at a time, then the length.
/// Each step is a bijection of the state (an odd multiplier), as FNV's byte steps are, so two
/// values of one length that differ in a single word always hash apart; the length tells
/// values apart that differ only in trailing zero bytes. Byte by byte, the multiplications'
/// latency made hashing the 16–64 KB values of some seeds a few per cent of the run.
fn value_hash(mut h: u64, bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut words = bytes.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K);
    }
    let rest = words.remainder();
    let mut b = [0u8; 8];
    b[..rest.len()].copy_from_slice(rest);
    h = (h ^ u64::from_le_bytes(b)).wrapping_mul(K);
    (h ^ bytes.len() as u64).wrapping_mul(FNV_PRIME)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenarios::delayq::walsender::{column_name, table_name};

    #[test]
    fn change_ids_read_the_publishers_payloads() {
        assert_eq!(change_ids(b"C1000.7"), Some((1000, 7)));
        assert_eq!(change_ids(b"C1000."), None);
        assert_eq!(change_ids(b"B1000.7"), None);
        assert_eq!(change_ids(b"C1x.7"), None);
        assert_eq!(change_ids(b"C99999999999.7"), None);
    }

    #[test]
    fn constant_name_hashes_match_the_names() {
        for rel in 0..RELATIONS {
            assert_eq!(
                TABLE_HASHES[rel as usize],
                table_hash(table_name(rel).as_bytes())
            );
        }
        for version in [0, 1, 2, 7, 10, 99, 12_345, u32::MAX] {
            for i in 0..14 {
                let mut name = Vec::new();
                column_name(version, i, &mut name);
                assert_eq!(column_name_hash(version, i), name_hash(&name));
            }
        }
    }

    #[test]
    fn a_row_hash_sees_every_name_and_value() {
        let a: Values = vec![Some(b"C1.1".to_vec()), Some(b"1".to_vec()), None];
        let h = row_hash(0, 1, &a);
        let mut b = a.clone();
        b[2] = Some(Vec::new());
        assert_ne!(h, row_hash(0, 1, &b), "NULL is not the empty string");
        assert_ne!(h, row_hash(1, 1, &a), "another table");
        assert_ne!(h, row_hash(0, 4, &a), "other column names");
        for (x, y) in [
            (&b"ab"[..], &b"ab\0"[..]),
            (b"", b"\0"),
            (b"12345678", b"12345679"),
            (b"123456789", b"123456788"),
        ] {
            let mut c = a.clone();
            let mut d = a.clone();
            c[2] = Some(x.to_vec());
            d[2] = Some(y.to_vec());
            assert_ne!(row_hash(0, 1, &c), row_hash(0, 1, &d), "{x:?} {y:?}");
        }
        let name = table_hash(b"\"public\".\"t0\"");
        let cols = [b"payload".as_slice(), b"ver", b"x1_0"];
        let by_names = hash_row(
            name,
            cols.iter()
                .zip(&a)
                .map(|(c, v)| (name_hash(c), v.as_deref())),
        );
        assert_eq!(h, by_names, "the subscriber's way gives the same hash");
    }
}
