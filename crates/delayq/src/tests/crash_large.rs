//! Power loss at every write and fsync boundary while records larger than a segment are
//! written, carried forward and purged; and a carry-forward of a large set cut short by a
//! lack of space.

use super::large::{big, with_change};
use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// A simulated disk that keeps a copy of itself after every change (append, fsync, creation,
/// removal, truncation, rename, directory fsync): each is a moment the power could fail.
#[derive(Debug)]
struct Probe {
    disk: SimStorage,
    moments: Vec<SimStorage>,
}

impl Probe {
    fn after<T>(&mut self, r: Result<T, StorageError>) -> Result<T, StorageError> {
        self.moments.push(self.disk.clone());
        r
    }
}

impl Storage for Probe {
    fn list(&self) -> Result<Vec<String>, StorageError> {
        self.disk.list()
    }
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        let r = self.disk.create(name);
        self.after(r)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> Result<(), StorageError> {
        let r = self.disk.append(name, data);
        self.after(r)
    }
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        self.disk.read(name, offset, buf)
    }
    fn size(&self, name: &str) -> Result<u64, StorageError> {
        self.disk.size(name)
    }
    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        let r = self.disk.sync(name);
        self.after(r)
    }
    fn sync_dir(&mut self) -> Result<(), StorageError> {
        let r = self.disk.sync_dir();
        self.after(r)
    }
    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        let r = self.disk.remove(name);
        self.after(r)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), StorageError> {
        let r = self.disk.rename(from, to);
        self.after(r)
    }
    fn truncate(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        let r = self.disk.truncate(name, len);
        self.after(r)
    }
}

/// What the producer knew when a moment was recorded: the flush LSN reported so far and the
/// transactions acknowledged as applied.
#[derive(Clone, Debug, Default)]
struct Known {
    acked: Lsn,
    applied: BTreeSet<u32>,
}

/// The run: transactions with their messages and end LSNs, and the moments with what was
/// known at each.
struct Run {
    expected: BTreeMap<u32, (Lsn, Vec<Vec<u8>>)>,
    moments: Vec<(SimStorage, Known)>,
    prepared_end: Lsn,
    commit_prepared: Msgs,
}

const P: u32 = 500;

/// Writes the workload: a prepared transaction with a change of three segments, a plain one
/// with a change of two, small ones around them, everything applied, purged (the prepared one
/// is carried forward into a segment of its own), then its COMMIT PREPARED.
fn run() -> Run {
    let probe = Probe {
        disk: SimStorage::new(11),
        moments: Vec::new(),
    };
    let mut q = DelayQueue::open(probe, small()).unwrap();
    let mut g = Gen::default();
    let mut expected = BTreeMap::new();
    let mut marks: Vec<(usize, Known)> = Vec::new();
    let mut known = Known::default();
    let mut step = |q: &mut DelayQueue<Probe>, known: &Known| {
        marks.push((q.storage().moments.len(), known.clone()));
    };
    let mut plain = |g: &mut Gen, xid: u32, big_at: Option<usize>| {
        let mut t = g.plain(xid, 1, 3);
        if let Some(i) = big_at {
            t = with_change(t, i, big(b'A' + (xid % 26) as u8, 2 * 4096 + 100));
        }
        let Event::Commit { end_lsn, .. } = t[4].0 else {
            unreachable!("the fifth message commits")
        };
        expected.insert(xid, (end_lsn, t.iter().map(|(_, p)| p.clone()).collect()));
        t
    };
    // Built in stream order: the LSNs follow the calls.
    let first = plain(&mut g, 1, None);
    let prepared = {
        let mut t = g.prepare(P, 1, 3);
        t[2].1 = big(b'P', 3 * 4096);
        t
    };
    let Event::Prepare { end_lsn, .. } = prepared[4].0 else {
        unreachable!("the fifth message prepares")
    };
    let prepared_end = end_lsn;
    let mut units = vec![first, prepared.clone()];
    units.push(plain(&mut g, 2, Some(1)));
    for xid in 3..20 {
        units.push(plain(&mut g, xid, (xid == 9).then_some(0)));
    }
    for (i, u) in units.iter().enumerate() {
        feed(&mut q, u);
        step(&mut q, &known);
        if i % 4 == 3 {
            known.acked = q.flush().unwrap();
            step(&mut q, &known);
        }
    }
    known.acked = q.flush().unwrap();
    step(&mut q, &known);
    while let Some(r) = q.poll_ready(at(100)).unwrap() {
        let Ready::Transaction(t) = &r else {
            panic!("{r:?}")
        };
        q.mark_applied(r.id()).unwrap();
        known.applied.insert(t.xid.0);
    }
    step(&mut q, &known);
    let removed = q.purge().unwrap();
    assert!(removed.len() >= 4, "{removed:?}");
    let carried = q.inspect().transactions;
    let p = carried.iter().find(|t| t.xid == Xid(P)).unwrap();
    assert!(p.first_segment > 4, "not carried: {carried:?}");
    step(&mut q, &known);
    for xid in 20..23 {
        feed(&mut q, &plain(&mut g, xid, (xid == 21).then_some(2)));
        step(&mut q, &known);
    }
    let commit_prepared = g.commit_prepared(P, 2);
    feed(&mut q, &commit_prepared);
    known.acked = q.flush().unwrap();
    step(&mut q, &known);
    let mut want = prepared.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>();
    want.push(commit_prepared[0].1.clone());
    let Event::CommitPrepared { end_lsn, .. } = commit_prepared[0].0 else {
        unreachable!()
    };
    expected.insert(P, (end_lsn, want));
    let moments = q.into_storage().moments;
    let moments = moments
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            // What was known before the call that made this change began.
            let k = marks
                .iter()
                .rev()
                .find(|(n, _)| *n <= i)
                .map(|(_, k)| k.clone())
                .unwrap_or_default();
            (m, k)
        })
        .collect();
    Run {
        expected,
        moments,
        prepared_end,
        commit_prepared,
    }
}

/// The disks a power loss at `moment` can leave: the durable state, and the durable state plus
/// every so many of the bytes written after the last fsync (a torn write); each also with the
/// names of files created since the last directory fsync kept, as a file system may keep
/// them anyway (in order: a journal commits them in order). The segment a large record gets
/// is new when the record is written, so only the second kind tears one.
fn losses(moment: &SimStorage) -> Vec<SimStorage> {
    let mut out = Vec::new();
    for names_kept in [false, true] {
        let mut durable = moment.clone();
        if names_kept {
            durable.sync_dir().unwrap();
        }
        durable.crash();
        out.push(durable.clone());
        for name in durable.list().unwrap() {
            let (Some(now), Some(kept)) = (moment.file(&name), durable.file(&name)) else {
                continue;
            };
            if now.len() <= kept.len() || !now.starts_with(kept) {
                continue;
            }
            let extra = now.len() - kept.len();
            let stride = (extra / 24).max(1);
            for k in (1..extra).step_by(stride).chain([extra - 1]) {
                let mut d = durable.clone();
                d.append(&name, &now[kept.len()..kept.len() + k]).unwrap();
                d.sync(&name).unwrap();
                out.push(d);
            }
        }
    }
    out
}

/// Power loss at every write and fsync boundary, with every torn tail in steps: recovery
/// always succeeds, keeps everything acknowledged, and hands out only transactions whose
/// every message is exactly what was sent — the large ones included, through the carried
/// copy too.
#[test]
fn power_loss_at_every_boundary_while_large_records_are_written_and_carried() {
    let run = run();
    assert!(run.moments.len() > 60, "{} moments", run.moments.len());
    let mut torn_large = 0;
    let mut checked = 0;
    for (i, (moment, known)) in run.moments.iter().enumerate() {
        for disk in losses(moment) {
            checked += 1;
            let v = verify(&disk).unwrap_or_else(|e| panic!("moment {i}: {e}"));
            if v.torn_tail.as_ref().is_some_and(|t| t.dropped_bytes > 4096) {
                torn_large += 1;
            }
            let mut q = DelayQueue::open(disk, small()).unwrap_or_else(|e| panic!("{i}: {e}"));
            check(&run, &mut q, known, i);
        }
    }
    assert!(
        torn_large > 10,
        "{torn_large} torn large records of {checked} losses"
    );
}

fn check(run: &Run, q: &mut DelayQueue<SimStorage>, known: &Known, i: usize) {
    let present: BTreeMap<u32, TxnState> = q
        .inspect()
        .transactions
        .iter()
        .map(|t| (t.xid.0, t.state))
        .collect();
    for (xid, (end, _)) in &run.expected {
        let acked = *end <= known.acked || (*xid == P && run.prepared_end <= known.acked);
        if acked && !known.applied.contains(xid) {
            assert!(present.contains_key(xid), "moment {i}: {xid} lost");
        }
    }
    let prepared = present.get(&P) == Some(&TxnState::Prepared);
    q.restart_stream(at(0)).unwrap();
    if prepared {
        feed(q, &run.commit_prepared);
        q.flush().unwrap();
    }
    while let Some(r) = q.poll_ready(at(100)).unwrap() {
        let Ready::Transaction(t) = &r else {
            panic!("moment {i}: {r:?}")
        };
        let want = &run.expected[&t.xid.0].1;
        assert!(t.messages == *want, "moment {i}: {} damaged", t.xid);
        q.mark_applied(r.id()).unwrap();
    }
}

/// A carry-forward of a set larger than a segment that runs out of space half-way is taken
/// back out: the queue is as it was, and the next purge with room carries it.
#[test]
fn a_large_carry_forward_without_space_is_taken_back() {
    let mut q = DelayQueue::open(SimStorage::new(9), small()).unwrap();
    let mut g = Gen::default();
    let mut prepared = g.prepare(P, 1, 3);
    prepared[2].1 = big(b'Q', 2 * 4096);
    feed(&mut q, &prepared);
    for xid in 1..40 {
        feed(&mut q, &g.plain(xid, 1, 3));
    }
    q.flush().unwrap();
    drain(&mut q, at(100));
    q.flush().unwrap();
    let used: u64 = {
        let s = q.storage();
        s.list().unwrap().iter().map(|n| s.size(n).unwrap()).sum()
    };
    let mut s = q.into_storage();
    // Room for the set's first copies, not for its large one.
    s.set_faults(SimFaults {
        capacity_bytes: Some(used + 600),
        ..SimFaults::default()
    });
    let mut q = DelayQueue::open(s, small()).unwrap();
    let before = q.inspect();
    let first = |i: &Inspection| {
        i.transactions
            .iter()
            .find(|t| t.xid == Xid(P))
            .map(|t| t.first_segment)
    };
    assert_eq!(first(&before), Some(1));
    assert!(!q.carry_forward().unwrap(), "nothing was carried");
    let after = q.inspect();
    assert_eq!(after.transactions, before.transactions);
    let active = after.segments.last().unwrap();
    assert_eq!(
        active.valid_bytes, 72,
        "the set's copies are gone: {active:?}"
    );
    q.flush().unwrap();
    // The disk agrees: reopened, the queue is the same (and has no torn tail to cut).
    let mut s = q.into_storage();
    s.crash();
    s.set_faults(SimFaults::default());
    let mut q = DelayQueue::open(s, small()).unwrap();
    assert_eq!(q.recovery().torn_tail, None);
    assert_eq!(q.inspect().transactions, before.transactions);
    let removed = q.purge().unwrap();
    assert!(removed.len() >= 5, "{removed:?}");
    assert!(first(&q.inspect()).unwrap() > 5);
    q.restart_stream(at(0)).unwrap();
    feed(&mut q, &g.commit_prepared(P, 2));
    q.flush().unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("not handed out");
    };
    assert_eq!(t.messages[2], big(b'Q', 2 * 4096));
    assert_eq!(t.messages.len(), 6);
}

/// Found by `delayq_stream` with large payloads (`fuzz/regressions/delayq_stream/
/// older_segment_name_not_durable`): segments filled between two flushes were synced but
/// their names were not, so a transaction in an older segment, committed below a position
/// the publisher had already reported, was handed out and then lost with its segment's name
/// in a crash. Rolling over now makes the old segment's name durable too.
#[test]
fn a_transaction_handed_out_from_an_older_segment_survives_a_crash() {
    let mut q = DelayQueue::open(SimStorage::new(13), small()).unwrap();
    let mut g = Gen::default();
    // The publisher reported a position far ahead (a keepalive), then sends what commits below.
    q.note_received(Lsn(0x10_0000));
    feed(&mut q, &g.plain(1, 1, 1));
    for xid in 2..60 {
        feed(&mut q, &g.plain(xid, 1, 3));
    }
    assert!(q.inspect().segments.len() >= 3);
    let Some(Ready::Transaction(t)) = q.poll_ready(at(10)).unwrap() else {
        panic!("the transaction in the oldest segment is not handed out");
    };
    assert_eq!(t.xid, Xid(1));
    let mut s = q.storage().clone();
    s.crash();
    let after = DelayQueue::open(s, small()).unwrap();
    assert!(
        after.inspect().transactions.iter().any(|x| x.id == t.id),
        "handed out, then lost in a crash"
    );
}
