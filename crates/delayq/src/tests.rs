//! Engine tests, each run over both [`FsStorage`] and [`SimStorage`].

use crate::*;
use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use std::path::PathBuf;
use std::time::Duration;

/// A way to get storage and to restart over it.
trait Harness {
    type S: Storage + std::fmt::Debug;
    fn fresh(&mut self) -> Self::S;
    /// Process crash or power loss: unsynced data may be lost (Sim) or kept (real fs).
    fn crash(&mut self, s: Self::S) -> Self::S;
    fn xor_byte(&mut self, s: Self::S, file: &str, offset: usize) -> Self::S;
    fn append_raw(&mut self, s: Self::S, file: &str, bytes: &[u8]) -> Self::S;
    fn files(&mut self, s: &Self::S) -> Vec<String> {
        let mut v = s.list().unwrap();
        v.sort();
        v
    }
}

struct Fs(tempfile::TempDir);

impl Fs {
    fn path(&self, f: &str) -> PathBuf {
        self.0.path().join(f)
    }
}

impl Harness for Fs {
    type S = FsStorage;
    fn fresh(&mut self) -> FsStorage {
        FsStorage::open(self.0.path()).unwrap()
    }
    fn crash(&mut self, s: FsStorage) -> FsStorage {
        drop(s);
        self.fresh()
    }
    fn xor_byte(&mut self, s: FsStorage, file: &str, offset: usize) -> FsStorage {
        drop(s);
        let mut b = std::fs::read(self.path(file)).unwrap();
        b[offset] ^= 0x40;
        std::fs::write(self.path(file), b).unwrap();
        self.fresh()
    }
    fn append_raw(&mut self, s: FsStorage, file: &str, bytes: &[u8]) -> FsStorage {
        drop(s);
        let mut b = std::fs::read(self.path(file)).unwrap();
        b.extend_from_slice(bytes);
        std::fs::write(self.path(file), b).unwrap();
        self.fresh()
    }
}

struct Sim;

impl Harness for Sim {
    type S = SimStorage;
    fn fresh(&mut self) -> SimStorage {
        SimStorage::new(7)
    }
    fn crash(&mut self, mut s: SimStorage) -> SimStorage {
        s.crash();
        s
    }
    fn xor_byte(&mut self, mut s: SimStorage, file: &str, offset: usize) -> SimStorage {
        s.corrupt(file, offset, 0x40);
        s
    }
    fn append_raw(&mut self, mut s: SimStorage, file: &str, bytes: &[u8]) -> SimStorage {
        s.append(file, bytes).unwrap();
        s.sync(file).unwrap();
        s
    }
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        $(mod $name {
            #[test]
            fn fs() {
                super::$name(&mut super::Fs(tempfile::tempdir().unwrap()));
            }
            #[test]
            fn sim() {
                super::$name(&mut super::Sim);
            }
        })*
    };
}

both!(
    nothing_undurable_is_handed_out_and_flush_lsn_never_falls,
    commit_order_and_due_times,
    flush_lsn_contract,
    streamed_interleaved_with_aborts,
    two_phase_across_segments,
    relation_survives_purge_and_restart,
    duplicates_after_reconnect,
    purge_leaves_no_orphans,
    torn_tail_and_corruption,
    backpressure_and_budget,
    messages_in_stream_order,
    protocol_violations_change_nothing,
    prepared_transaction_no_longer_deadlocks_a_tiny_budget,
    undecided_bodies_over_budget_do_not_pause,
    stream_commit_promotes_in_stream_relations,
    reported_position_past_a_later_commit_hands_out_nothing_unsynced,
    rehand_gives_the_map_as_of_the_rehanded_item,
    a_stale_description_in_a_resent_transaction_does_not_regress_the_map,
);

mod crash_large;
mod found_by_sim;
mod large;
mod pieces;
mod read_ahead;
mod sim_disk;
mod stream_schema;

fn nothing_undurable_is_handed_out_and_flush_lsn_never_falls<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), delayed(0)).unwrap();
    let mut g = Gen::default();
    let mut last = q.flush_lsn();
    for xid in 1..=4 {
        for m in g.plain(xid, 10, 2) {
            feed(&mut q, &[m]);
            // Reported positions only move forward, whatever arrives.
            assert!(q.flush_lsn() >= last, "{} < {last}", q.flush_lsn());
            last = q.flush_lsn();
        }
        q.note_received(Lsn(g.lsn + 0x10));
        assert!(q.flush_lsn() >= last);
        last = q.flush_lsn();
    }
    // Due, but buffered only: a crash could still take them away, so none is handed out.
    assert!(q.poll_ready(at(100)).unwrap().is_none());
    q.flush().unwrap();
    assert!(q.flush_lsn() >= last);
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("a durable, due transaction is handed out");
    };
    assert_eq!(t.xid, Xid(1));
}

/// Found by the `delayq_stream` fuzz target: a keepalive past a transaction the publisher
/// sends afterwards made the flush LSN cover the transaction's commit before it was durable, and
/// `poll_ready` handed it out (a crash then lost it).
fn reported_position_past_a_later_commit_hands_out_nothing_unsynced<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), delayed(0)).unwrap();
    let mut g = Gen::default();
    let t = g.plain(1, 1, 1);
    let Event::Commit { end_lsn, .. } = t.last().unwrap().0 else {
        unreachable!()
    };
    q.note_received(Lsn(end_lsn.0 + 0x1000));
    feed(&mut q, &t);
    assert!(q.flush_lsn() > end_lsn);
    assert!(
        q.poll_ready(at(100)).unwrap().is_none(),
        "handed out unsynced"
    );
    q.flush().unwrap();
    let Some(Ready::Transaction(r)) = q.poll_ready(at(100)).unwrap() else {
        panic!("a durable, due transaction is handed out");
    };
    assert_eq!(r.xid, Xid(1));
}

// ---- stream builder ------------------------------------------------------------------------

const SEC: i64 = 1_000_000;

fn ts(secs: i64) -> PgTimestamp {
    PgTimestamp(secs * SEC)
}

fn at(secs: i64) -> UnixTime {
    ts(secs).to_unix()
}

/// Builds event sequences with increasing LSNs and recognisable payloads.
#[derive(Default)]
struct Gen {
    lsn: u64,
}

type Msgs = Vec<(Event, Vec<u8>)>;

impl Gen {
    fn next(&mut self) -> Lsn {
        self.lsn += 0x100;
        Lsn(self.lsn)
    }

    fn plain(&mut self, xid: u32, secs: i64, changes: usize) -> Msgs {
        let commit = Lsn(self.lsn + 0x100 * (changes as u64 + 1));
        let mut v = vec![(
            Event::Begin {
                xid: Xid(xid),
                final_lsn: commit,
                commit_ts: ts(secs),
            },
            format!("B{xid}").into_bytes(),
        )];
        for i in 0..changes {
            self.next();
            v.push((
                Event::Change { xid: None },
                format!("I{xid}.{i}").into_bytes(),
            ));
        }
        let c = self.next();
        let end = self.next();
        v.push((
            Event::Commit {
                commit_lsn: c,
                end_lsn: end,
                commit_ts: ts(secs),
            },
            format!("C{xid}").into_bytes(),
        ));
        v
    }

    fn relation(&mut self, oid: u32, version: u32) -> Msgs {
        vec![(
            Event::Relation { oid, xid: None },
            format!("R{oid}v{version}").into_bytes(),
        )]
    }

    fn stream_block(&mut self, xid: u32, first: bool, subs: &[u32]) -> Msgs {
        let mut v = vec![(
            Event::StreamStart {
                xid: Xid(xid),
                first,
            },
            b"S".to_vec(),
        )];
        for &sub in subs {
            let l = self.next();
            v.push((
                Event::Change {
                    xid: Some(Xid(sub)),
                },
                format!("I{xid}/{sub}@{}", l.0).into_bytes(),
            ));
        }
        v.push((Event::StreamStop, b"E".to_vec()));
        v
    }

    fn stream_commit(&mut self, xid: u32, secs: i64) -> Msgs {
        let c = self.next();
        let end = self.next();
        vec![(
            Event::StreamCommit {
                xid: Xid(xid),
                commit_lsn: c,
                end_lsn: end,
                commit_ts: ts(secs),
            },
            format!("c{xid}").into_bytes(),
        )]
    }

    fn prepare(&mut self, xid: u32, secs: i64, changes: usize) -> Msgs {
        let p = Lsn(self.lsn + 0x100 * (changes as u64 + 1));
        let pend = Lsn(p.0 + 0x100);
        let mut v = vec![(
            Event::BeginPrepare {
                xid: Xid(xid),
                prepare_lsn: p,
                end_lsn: pend,
                prepare_ts: ts(secs),
            },
            format!("b{xid}").into_bytes(),
        )];
        for i in 0..changes {
            self.next();
            v.push((
                Event::Change { xid: None },
                format!("I{xid}.{i}").into_bytes(),
            ));
        }
        let p2 = self.next();
        let e2 = self.next();
        assert_eq!((p2, e2), (p, pend));
        v.push((
            Event::Prepare {
                xid: Xid(xid),
                prepare_lsn: p,
                end_lsn: pend,
                prepare_ts: ts(secs),
            },
            format!("P{xid}").into_bytes(),
        ));
        v
    }

    fn commit_prepared(&mut self, xid: u32, secs: i64) -> Msgs {
        let c = self.next();
        let end = self.next();
        vec![(
            Event::CommitPrepared {
                xid: Xid(xid),
                commit_lsn: c,
                end_lsn: end,
                commit_ts: ts(secs),
            },
            format!("K{xid}").into_bytes(),
        )]
    }

    fn rollback_prepared(&mut self, xid: u32, secs: i64) -> Msgs {
        self.next();
        let end = self.next();
        vec![(
            Event::RollbackPrepared {
                xid: Xid(xid),
                prepare_end_lsn: Lsn(1),
                rollback_end_lsn: end,
                rollback_ts: ts(secs),
            },
            format!("r{xid}").into_bytes(),
        )]
    }

    fn note(&mut self, text: &str) -> Msgs {
        let l = self.next();
        vec![(
            Event::Message {
                transactional: false,
                xid: None,
                lsn: l,
            },
            text.as_bytes().to_vec(),
        )]
    }
}

fn feed<S: Storage>(q: &mut DelayQueue<S>, msgs: &[(Event, Vec<u8>)]) -> Vec<Accepted> {
    msgs.iter()
        .map(|(e, p)| {
            q.handle(
                at(0),
                Received {
                    wal_lsn: Lsn::INVALID,
                    payload: p,
                    event: *e,
                },
            )
            .unwrap_or_else(|err| panic!("{e:?}: {err}"))
        })
        .collect()
}

fn small() -> Config {
    Config {
        segment_bytes_max: 4096,
        write_buffer_bytes: 512,
        ..Config::default()
    }
}

fn delayed(secs: u64) -> Config {
    Config {
        delay: Duration::from_secs(secs),
        ..small()
    }
}

/// Drains everything due at `now`, acknowledging each item; returns the texts of the
/// transactions' first messages (or the message payloads).
fn drain<S: Storage>(q: &mut DelayQueue<S>, now: UnixTime) -> Vec<String> {
    let mut out = Vec::new();
    while let Some(r) = q.poll_ready(now).unwrap() {
        out.push(match &r {
            Ready::Transaction(t) => String::from_utf8_lossy(t.messages.last().unwrap()).into(),
            Ready::Message(m) => String::from_utf8_lossy(&m.payload).into(),
        });
        q.mark_applied(r.id()).unwrap();
    }
    out
}

fn states<S: Storage>(q: &DelayQueue<S>) -> Vec<(u32, &'static str)> {
    q.inspect()
        .transactions
        .iter()
        .map(|t| (t.xid.0, t.state.as_str()))
        .collect()
}

// ---- tests ---------------------------------------------------------------------------------

fn commit_order_and_due_times<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), delayed(10)).unwrap();
    let mut g = Gen::default();
    // Commit timestamps out of order: 100, 50, 200.
    for (xid, secs) in [(1, 100), (2, 50), (3, 200)] {
        feed(&mut q, &g.plain(xid, secs, 2));
    }
    q.flush().unwrap();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), delayed(10)).unwrap();
    assert_eq!(q.next_due(), Some(at(110)));
    assert!(q.poll_ready(at(109)).unwrap().is_none());
    let Some(Ready::Transaction(t)) = q.poll_ready(at(110)).unwrap() else {
        panic!("first transaction not due")
    };
    assert_eq!(t.xid, Xid(1));
    assert_eq!(t.due, at(110));
    let texts: Vec<_> = t
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m))
        .collect();
    assert_eq!(texts, ["B1", "I1.0", "I1.1", "C1"]);
    q.mark_applied(t.id).unwrap();
    // Committed later with an earlier timestamp: due with its predecessor, not before.
    let Some(Ready::Transaction(t2)) = q.poll_ready(at(110)).unwrap() else {
        panic!("second transaction not due")
    };
    assert_eq!((t2.xid, t2.due), (Xid(2), at(110)));
    q.mark_applied(t2.id).unwrap();
    assert!(q.poll_ready(at(209)).unwrap().is_none());
    assert_eq!(drain(&mut q, at(210)), ["C3"]);
    assert_eq!(q.apply_lsn(), q.inspect().transactions[2].end_lsn.unwrap());
    // Applied state survives a restart once flushed.
    q.flush().unwrap();
    let q = DelayQueue::open(h.crash(q.into_storage()), delayed(10)).unwrap();
    assert_eq!(states(&q), [(1, "applied"), (2, "applied"), (3, "applied")]);
}

fn flush_lsn_contract<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let t1 = g.plain(1, 1, 1);
    let Event::Commit { end_lsn: end1, .. } = t1.last().unwrap().0 else {
        unreachable!()
    };
    feed(&mut q, &t1);
    // Sealed but not durable: not confirmed.
    assert_eq!(q.flush_lsn(), Lsn(0));
    assert_eq!(q.write_lsn(), end1);
    assert_eq!(q.flush().unwrap(), end1);
    assert_eq!(q.resume_lsn(), end1);
    // Only an incomplete transaction pending: last received may be confirmed.
    let t2 = g.plain(2, 2, 3);
    feed(&mut q, &t2[..2]);
    q.note_received(Lsn(end1.0 + 5));
    assert_eq!(q.flush_lsn(), Lsn(end1.0 + 5));
    // The crash loses the incomplete transaction; resume from the last durable seal.
    q.flush().unwrap();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    assert_eq!(q.resume_lsn(), end1);
    assert_eq!(states(&q), [(1, "committed"), (2, "in-progress")]);
    q.restart_stream(at(0)).unwrap();
    feed(&mut q, &t2);
    q.flush().unwrap();
    assert_eq!(
        states(&q),
        [(1, "committed"), (2, "committed"), (2, "aborted")]
    );
    assert_eq!(drain(&mut q, at(100)), ["C1", "C2"]);
}

fn streamed_interleaved_with_aborts<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let mut all = Msgs::new();
    // Blocks of 10 and 20 interleave over many segments; 11 is a subtransaction of 10.
    for round in 0..30 {
        all.extend(g.stream_block(10, round == 0, &[10, 10]));
        all.extend(g.stream_block(20, round == 0, &[20]));
        if round == 5 {
            all.extend(g.stream_block(10, false, &[11, 11, 10]));
            all.extend(g.plain(5, 3, 1));
        }
        if round == 6 {
            // Subtransaction 11 aborts: its changes and everything after them go.
            all.push((
                Event::StreamAbort {
                    xid: Xid(10),
                    sub_xid: Xid(11),
                },
                b"A".to_vec(),
            ));
        }
    }
    all.extend(g.stream_block(30, true, &[30]));
    all.extend(g.stream_commit(10, 5));
    all.push((
        Event::StreamAbort {
            xid: Xid(20),
            sub_xid: Xid(20),
        },
        b"A".to_vec(),
    ));
    feed(&mut q, &all);
    q.flush().unwrap();
    assert!(
        q.inspect().segments.len() >= 2,
        "{:?}",
        q.inspect().segments
    );
    let before = q.inspect();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    let after = q.inspect();
    assert_eq!(before.transactions, after.transactions);
    assert_eq!(
        states(&q),
        [
            (5, "committed"),
            (10, "committed"),
            (20, "aborted"),
            (30, "in-progress")
        ]
    );
    let _ = q.poll_ready(at(100)).unwrap();
    q.mark_applied(ItemId(q.inspect().transactions[0].id.0))
        .unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("stream commit not ready")
    };
    assert_eq!(t.kind, CommitKind::StreamCommit);
    let texts: Vec<String> = t
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m).into())
        .collect();
    // Rounds 0..=5 kept (2 changes each) plus nothing of the aborted subtransaction block,
    // rounds 6.. (after the abort) kept again: the abort only cut what was there.
    assert!(texts.iter().all(|m| !m.contains("/11@")), "{texts:?}");
    // 30 blocks of 2 changes, plus the block [11, 11, 10], minus what the abort of 11 cut
    // (that block and the 2 changes of round 6 that followed it), plus the commit.
    assert_eq!(texts.len(), 30 * 2 + 3 - 3 - 2 + 1);
    assert_eq!(texts.last().unwrap(), "c10");
    q.mark_applied(t.id).unwrap();
    // Restarting the stream abandons 30; then everything can be purged but the active one.
    q.restart_stream(at(0)).unwrap();
    q.purge().unwrap();
    assert_eq!(q.inspect().segments.len(), 1);
}

fn two_phase_across_segments<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), delayed(1)).unwrap();
    let mut g = Gen::default();
    feed(&mut q, &g.prepare(100, 10, 3));
    feed(&mut q, &g.prepare(200, 10, 3));
    for xid in 1..40 {
        feed(&mut q, &g.plain(xid, 20, 2));
    }
    feed(&mut q, &g.commit_prepared(100, 30));
    assert_eq!(
        feed(&mut q, &g.rollback_prepared(200, 30)),
        [Accepted::Queued]
    );
    // Unknown prepared transaction: ignored, as the apply worker does.
    assert_eq!(
        feed(&mut q, &g.rollback_prepared(300, 30)),
        [Accepted::Ignored]
    );
    q.flush().unwrap();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), delayed(1)).unwrap();
    let st = states(&q);
    assert_eq!(st[39], (100, "committed"));
    assert_eq!(st[40], (200, "aborted"));
    let seg_of_prepare = q.inspect().transactions[39].first_segment;
    assert_eq!(seg_of_prepare, 1);
    let got = drain(&mut q, at(31));
    assert_eq!(got.len(), 40);
    assert_eq!(got.last().unwrap(), "K100");
    assert!(!got.iter().any(|m| m.contains("200")));
    q.purge().unwrap();
    assert_eq!(q.inspect().segments.len(), 1);
}

fn relation_survives_purge_and_restart<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let mut t1 = g.plain(1, 1, 1);
    t1.splice(1..1, g.relation(16384, 1));
    feed(&mut q, &t1);
    for xid in 2..60 {
        feed(&mut q, &g.plain(xid, 2, 2));
    }
    // A redefinition applies to later transactions only.
    let mut t60 = g.plain(60, 3, 1);
    t60.splice(1..1, g.relation(16384, 2));
    feed(&mut q, &t60);
    q.flush().unwrap();
    // Apply the first transaction (the one that carried the Relation), purge, restart.
    let Some(first) = q.poll_ready(at(100)).unwrap() else {
        panic!("nothing ready")
    };
    q.mark_applied(first.id()).unwrap();
    assert!(q.purge().unwrap().is_empty(), "txn 2 pins segment 1");
    for _ in 2..40 {
        let r = q.poll_ready(at(100)).unwrap().unwrap();
        q.mark_applied(r.id()).unwrap();
    }
    let removed = q.purge().unwrap();
    assert!(!removed.is_empty());
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("nothing ready after restart")
    };
    assert_eq!(t.xid, Xid(40));
    assert_eq!(t.schema, [b"R16384v1".to_vec()]);
    q.mark_applied(t.id).unwrap();
    let mut last = None;
    while let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() {
        q.mark_applied(t.id).unwrap();
        last = Some(t);
    }
    let last = last.unwrap();
    assert_eq!(last.xid, Xid(60));
    assert_eq!(last.schema, [b"R16384v2".to_vec()]);
}

/// A consumer that starts over gets the descriptions its first item was encoded with, not a
/// redefinition that came later (and went out with a later item before the restart).
fn rehand_gives_the_map_as_of_the_rehanded_item<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let mut t1 = g.plain(1, 1, 1);
    t1.splice(1..1, g.relation(16384, 1));
    feed(&mut q, &t1);
    feed(&mut q, &g.plain(2, 1, 1));
    let mut t3 = g.plain(3, 1, 1);
    t3.splice(1..1, g.relation(16384, 2));
    feed(&mut q, &t3);
    feed(&mut q, &g.plain(4, 1, 1));
    q.flush().unwrap();
    let schemas = |q: &mut DelayQueue<H::S>| -> Vec<(Xid, Vec<Vec<u8>>)> {
        let mut out = Vec::new();
        while let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() {
            out.push((t.xid, t.schema));
        }
        out
    };
    let v1 = b"R16384v1".to_vec();
    let v2 = b"R16384v2".to_vec();
    let first = schemas(&mut q);
    assert_eq!(
        first,
        [
            (Xid(1), vec![v1.clone()]),
            (Xid(2), vec![]),
            (Xid(3), vec![v2.clone()]),
            (Xid(4), vec![])
        ]
    );
    // The first one was applied; the consumer lost the rest and starts over.
    let Some(head) = q.transactions().find(|t| t.xid == Xid(1)) else {
        panic!("transaction 1 is pending")
    };
    q.mark_applied(head.id).unwrap();
    q.rehand();
    let again = schemas(&mut q);
    assert_eq!(
        again,
        [
            (Xid(2), vec![v1.clone()]),
            (Xid(3), vec![v2.clone()]),
            (Xid(4), vec![])
        ],
        "the map as of transaction 2, then the redefinition with its own item"
    );
    // Once the redefinition's transaction is applied it is settled for the next restart.
    for t in [Xid(2), Xid(3)] {
        let id = q.transactions().find(|i| i.xid == t).unwrap().id;
        q.mark_applied(id).unwrap();
    }
    q.rehand();
    assert_eq!(schemas(&mut q), [(Xid(4), vec![v2])]);
}

/// A reconnect re-sends an old transaction with the old description of a relation that a
/// prepared transaction queued since uses in its newer form; the session ends before the
/// prepared one is re-sent, and it is decided later. It must still get the newer description.
fn a_stale_description_in_a_resent_transaction_does_not_regress_the_map<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let mut t1 = g.plain(1, 1, 1);
    t1.splice(1..1, g.relation(16384, 1));
    let mut t2 = g.prepare(2, 1, 1);
    t2.splice(1..1, g.relation(16384, 2));
    let decide = g.commit_prepared(2, 2);
    // Every message with the WAL position of its transaction's changes, as the walsender's
    // `'w'` header carries it.
    let feed_at = |q: &mut DelayQueue<H::S>, msgs: &Msgs, wal: u64| {
        for (event, payload) in msgs {
            let received = Received {
                wal_lsn: Lsn(wal),
                payload,
                event: *event,
            };
            q.handle(at(0), received).unwrap();
        }
    };
    feed_at(&mut q, &t1, 0x10);
    feed_at(&mut q, &t2, 0x20);
    q.flush().unwrap();
    q.restart_stream(at(0)).unwrap();
    feed_at(&mut q, &t1, 0x10);
    q.flush().unwrap();
    q.restart_stream(at(0)).unwrap();
    feed_at(&mut q, &decide, 0x30);
    q.flush().unwrap();
    let mut held = std::collections::BTreeMap::new();
    while let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() {
        for raw in &t.schema {
            held.insert(raw[..6].to_vec(), raw.clone());
        }
        if t.xid == Xid(2) {
            assert_eq!(held.values().collect::<Vec<_>>(), [&b"R16384v2".to_vec()]);
        } else {
            assert_eq!(t.schema, [b"R16384v1".to_vec()]);
        }
        q.mark_applied(t.id).unwrap();
    }
    assert_eq!(q.apply_lsn(), q.resume_lsn(), "both handed out");
}

fn duplicates_after_reconnect<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let mut all = Msgs::new();
    all.extend(g.plain(1, 1, 2));
    all.extend(g.prepare(2, 1, 1));
    all.extend(g.stream_block(3, true, &[3]));
    all.extend(g.stream_commit(3, 1));
    all.extend(g.note("hello"));
    all.extend(g.commit_prepared(2, 2));
    let tail = g.plain(4, 2, 1);
    feed(&mut q, &all);
    feed(&mut q, &tail[..2]);
    q.flush().unwrap();
    let resume = q.resume_lsn();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    assert_eq!(q.resume_lsn(), resume);
    q.restart_stream(at(0)).unwrap();
    // A publisher that re-sends everything: all complete work is recognised.
    let acc = feed(&mut q, &all);
    assert!(acc
        .iter()
        .all(|a| *a == Accepted::Duplicate || *a == Accepted::Queued));
    assert_eq!(acc[0], Accepted::Duplicate);
    feed(&mut q, &tail);
    q.flush().unwrap();
    let got = drain(&mut q, at(100));
    assert_eq!(got, ["C1", "c3", "hello", "K2", "C4"]);
    assert_eq!(
        states(&q).iter().filter(|s| s.1 == "applied").count(),
        4,
        "{:?}",
        states(&q)
    );
}

fn purge_leaves_no_orphans<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    for xid in 1..100 {
        feed(&mut q, &g.plain(xid, 1, 3));
    }
    q.flush().unwrap();
    let n = q.inspect().segments.len();
    assert!(n > 5);
    drain(&mut q, at(10));
    let removed = q.purge().unwrap();
    assert_eq!(removed.len(), n - 1);
    let files = h.files(q.storage());
    assert_eq!(files, [q.inspect().segments[0].file.clone()]);
    // Restart after purging everything: watermarks survive in the remaining segment.
    let apply = q.apply_lsn();
    let q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    assert_eq!(q.apply_lsn(), apply);
    assert_eq!(q.resume_lsn(), apply);
}

fn torn_tail_and_corruption<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    for xid in 1..40 {
        feed(&mut q, &g.plain(xid, 1, 3));
    }
    q.flush().unwrap();
    let segs = q.inspect().segments;
    let last = segs.last().unwrap().clone();
    // A torn tail: the start of a record that never finished.
    let s = h.append_raw(q.into_storage(), &last.file, &[60, 0, 0, 0, 1, 2, 3]);
    let q = DelayQueue::open(s, small()).unwrap();
    let torn = q.recovery().torn_tail.clone().unwrap();
    assert_eq!(
        (torn.file.as_str(), torn.offset),
        (last.file.as_str(), last.valid_bytes)
    );
    assert_eq!(torn.dropped_bytes, 7);
    assert_eq!(
        q.inspect().segments.last().unwrap().valid_bytes,
        last.valid_bytes
    );
    assert_eq!(q.inspect().transactions.len(), 39);
    // Corruption in the middle of a non-last segment: a clear error naming file and offset.
    let mid = &segs[1];
    let off = (mid.valid_bytes / 2) as usize;
    let s = h.xor_byte(q.into_storage(), &mid.file, off);
    let err = DelayQueue::open(s, small()).unwrap_err();
    let Error::Corrupt { file, offset, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(file, &mid.file);
    assert!(*offset <= off as u64 && *offset >= 72, "{err}");
    assert!(err.to_string().contains(&mid.file), "{err}");
}

fn backpressure_and_budget<H: Harness>(h: &mut H) {
    let cfg = Config {
        disk_bytes_max: 12_000,
        disk_high_watermark_bytes: 8_000,
        disk_low_watermark_bytes: 4_500,
        ..small()
    };
    let mut q = DelayQueue::open(h.fresh(), cfg.clone()).unwrap();
    let mut g = Gen::default();
    let mut xid = 1;
    let mut refused = None;
    while xid < 1000 {
        let t = g.plain(xid, 1, 5);
        let r = q.handle(
            at(0),
            Received {
                wal_lsn: Lsn::INVALID,
                payload: &t[0].1,
                event: t[0].0,
            },
        );
        match r {
            Ok(_) => {
                feed(&mut q, &t[1..]);
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                refused = Some(t);
                break;
            }
        }
        xid += 1;
    }
    let refused = refused.expect("budget never reached");
    assert_eq!(q.flow(), Flow::Pause);
    q.flush().unwrap();
    // While a refusal is pending, nothing newer is confirmed.
    let flushed = q.flush_lsn();
    q.note_received(Lsn(u64::MAX / 2));
    assert_eq!(q.flush_lsn(), flushed);
    drain(&mut q, at(10));
    q.purge().unwrap();
    assert_eq!(q.flow(), Flow::Read);
    feed(&mut q, &refused);
    q.flush().unwrap();
    assert_eq!(drain(&mut q, at(10)), [format!("C{xid}")]);
}

fn messages_in_stream_order<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), delayed(10)).unwrap();
    let mut g = Gen::default();
    feed(&mut q, &g.note("m0"));
    feed(&mut q, &g.plain(1, 100, 1));
    feed(&mut q, &g.note("m1"));
    feed(&mut q, &g.plain(2, 200, 1));
    q.flush().unwrap();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), delayed(10)).unwrap();
    assert_eq!(q.inspect().transactions.len(), 2);
    assert_eq!(q.inspect().messages_pending, 2);
    // A message waits for the transaction before it, and is due with it.
    assert_eq!(drain(&mut q, at(0)), ["m0"]);
    assert_eq!(drain(&mut q, at(110)), ["C1", "m1"]);
    assert_eq!(drain(&mut q, at(210)), ["C2"]);
}

fn protocol_violations_change_nothing<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let t = g.plain(1, 1, 1);
    let bad: Msgs = vec![
        t[2].clone(),
        t[1].clone(),
        (Event::StreamStop, vec![]),
        (
            Event::StreamStart {
                xid: Xid(9),
                first: false,
            },
            vec![],
        ),
        g.commit_prepared(77, 1)[0].clone(),
    ];
    for (e, p) in &bad {
        let r = q.handle(
            at(0),
            Received {
                wal_lsn: Lsn::INVALID,
                payload: p,
                event: *e,
            },
        );
        assert!(matches!(r, Err(Error::Protocol(_))), "{e:?} -> {r:?}");
    }
    assert_eq!(q.disk_bytes(), 0);
    assert!(matches!(q.mark_applied(ItemId(1)), Err(Error::Misuse(_))));
}

fn tiny_budget() -> Config {
    Config {
        disk_bytes_max: 4 * 4096,
        disk_high_watermark_bytes: 3 * 4096,
        disk_low_watermark_bytes: 2 * 4096,
        ..small()
    }
}

/// Feeds one message, honouring the queue as a producer must: `Ok(false)` when the message
/// was refused as `Full` (to be submitted again).
fn offer<S: Storage>(q: &mut DelayQueue<S>, (e, p): &(Event, Vec<u8>)) -> bool {
    let r = q.handle(
        at(0),
        Received {
            wal_lsn: Lsn::INVALID,
            payload: p,
            event: *e,
        },
    );
    match r {
        Ok(_) => true,
        Err(Error::Full { .. }) => false,
        Err(err) => panic!("{e:?}: {err}"),
    }
}

/// Plays `msgs` like a producer that honours `Pause` and `Full`: whenever it has to stop, it
/// applies what is due and purges, and then it must be able to go on. Returns how often it had
/// to stop.
fn produce<S: Storage>(q: &mut DelayQueue<S>, msgs: &[(Event, Vec<u8>)]) -> usize {
    let mut stops = 0;
    let mut i = 0;
    while i < msgs.len() {
        if q.flow() == Flow::Read && offer(q, &msgs[i]) {
            i += 1;
            continue;
        }
        stops += 1;
        q.flush().unwrap();
        drain(q, at(1000));
        q.purge().unwrap();
        // Before carry-forward, this was the deadlock: the prepared transaction pinned every
        // segment, nothing could be freed, and its decision lay behind the refused message.
        assert_eq!(q.flow(), Flow::Read, "stuck: {:?}", q.inspect().segments);
        assert!(offer(q, &msgs[i]), "still refused after purging");
        i += 1;
    }
    stops
}

fn prepared_transaction_no_longer_deadlocks_a_tiny_budget<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), tiny_budget()).unwrap();
    let mut g = Gen::default();
    let mut stream = g.prepare(500, 1, 4);
    // A streamed transaction that stays in progress all along pins segments the same way.
    stream.extend(g.stream_block(600, true, &[600, 600]));
    for xid in 1..300 {
        stream.extend(g.plain(xid, 2, 3));
        if xid % 50 == 0 {
            stream.extend(g.stream_block(600, false, &[600]));
        }
    }
    let stops = produce(&mut q, &stream);
    assert!(stops >= 3, "the budget was never reached ({stops} stops)");
    // Both undecided transactions were carried forward: old segments are gone.
    q.flush().unwrap();
    drain(&mut q, at(1000));
    q.purge().unwrap();
    let info = q.inspect();
    assert!(info.segments[0].seq > 3, "{:?}", info.segments);
    assert!(info.disk_bytes <= tiny_budget().disk_bytes_max);
    let first = |q: &DelayQueue<_>, xid| {
        let t = q.inspect().transactions;
        t.iter()
            .find(|t| t.xid == Xid(xid))
            .map(|t| (t.state, t.first_segment))
    };
    assert_eq!(first(&q, 500).unwrap().0, TxnState::Prepared);
    assert_eq!(first(&q, 600).unwrap().0, TxnState::InProgress);
    // Recovery after the old copies are gone: each transaction exactly once.
    let mut q = DelayQueue::open(h.crash(q.into_storage()), tiny_budget()).unwrap();
    assert_eq!(
        q.inspect()
            .transactions
            .iter()
            .filter(|t| t.xid == Xid(500))
            .count(),
        1
    );
    q.restart_stream(at(0)).unwrap();
    let mut tail = g.commit_prepared(500, 3);
    tail.extend(g.stream_block(600, true, &[600]));
    tail.extend(g.stream_commit(600, 3));
    produce(&mut q, &tail);
    q.flush().unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(1000)).unwrap() else {
        panic!("the prepared transaction is not handed out");
    };
    let texts: Vec<String> = t
        .messages
        .iter()
        .map(|m| String::from_utf8_lossy(m).into_owned())
        .collect();
    assert_eq!(
        texts,
        ["b500", "I500.0", "I500.1", "I500.2", "I500.3", "P500", "K500"]
    );
    q.mark_applied(t.id).unwrap();
    assert_eq!(drain(&mut q, at(1000)), ["c600"]);
    q.purge().unwrap();
    assert_eq!(q.inspect().segments.len(), 1);
}

fn undecided_bodies_over_budget_do_not_pause<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), tiny_budget()).unwrap();
    let mut g = Gen::default();
    // Larger than the whole budget (and than a segment, so it cannot even be carried).
    let mut stream = g.prepare(500, 1, 700);
    for xid in 1..200 {
        stream.extend(g.plain(xid, 2, 3));
    }
    produce(&mut q, &stream);
    q.flush().unwrap();
    drain(&mut q, at(1000));
    q.purge().unwrap();
    let info = q.inspect();
    assert!(info.disk_bytes > tiny_budget().disk_bytes_max);
    assert!(info.budget_bytes <= tiny_budget().disk_low_watermark_bytes);
    assert_eq!(q.flow(), Flow::Read);
    produce(&mut q, &g.commit_prepared(500, 3));
    q.flush().unwrap();
    let got = drain(&mut q, at(1000));
    assert_eq!(got, ["K500"]);
    q.purge().unwrap();
    assert_eq!(q.inspect().segments.len(), 1);
}

/// Real pgoutput bytes of a Relation message (in-stream form when `xid` is set).
fn relation_bytes(oid: u32, xid: Option<Xid>, column: &[u8]) -> Vec<u8> {
    use pgyard_wire::pgoutput::{PgOutputMessage, Relation, RelationColumn, ReplicaIdentity, Seq};
    let cols = [RelationColumn {
        key: true,
        name: column,
        type_oid: 23,
        type_modifier: -1,
    }];
    PgOutputMessage::Relation(Relation {
        xid,
        oid,
        namespace: b"public",
        name: b"t",
        replica_identity: ReplicaIdentity::Default,
        columns: Seq::from_slice(&cols),
    })
    .to_bytes()
    .unwrap()
    .to_vec()
}

fn stream_commit_promotes_in_stream_relations<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    // The stream describes relation 16400 inside its block; pgoutput then counts it as sent
    // for the session, so the plain transaction after it uses 16400 without a Relation.
    let mut stream = g.stream_block(700, true, &[700]);
    stream.insert(
        1,
        (
            Event::Relation {
                oid: 16400,
                xid: Some(Xid(700)),
            },
            relation_bytes(16400, Some(Xid(700)), b"v2"),
        ),
    );
    feed(&mut q, &stream);
    for xid in 1..40 {
        feed(&mut q, &g.plain(xid, 1, 2));
    }
    q.flush().unwrap();
    drain(&mut q, at(100));
    // Carried forward with its in-stream Relation still marked as one.
    q.purge().unwrap();
    assert!(q.inspect().segments[0].seq > 1);
    feed(&mut q, &g.stream_commit(700, 2));
    feed(&mut q, &g.plain(800, 2, 1));
    q.flush().unwrap();
    let got = drain(&mut q, at(100));
    assert_eq!(got, ["c700", "C800"]);
    // A consumer that restarts learns 16400 from the map, in the outside-stream form.
    feed(&mut q, &g.plain(801, 3, 1));
    q.flush().unwrap();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("nothing ready");
    };
    assert_eq!(t.xid, Xid(801));
    assert_eq!(t.schema, [relation_bytes(16400, None, b"v2")]);
}

// ---- tests that only the simulated disk can do ---------------------------------------------

#[test]
fn bad_record_followed_by_valid_ones_in_last_segment_is_an_error() {
    let mut q = DelayQueue::open(SimStorage::new(1), small()).unwrap();
    let mut g = Gen::default();
    for xid in 1..4 {
        feed(&mut q, &g.plain(xid, 1, 2));
    }
    q.flush().unwrap();
    let seg = q.inspect().segments[0].clone();
    assert_eq!(q.inspect().segments.len(), 1);
    let mut s = q.into_storage();
    s.corrupt(&seg.file, 72 + 40, 0xff);
    let err = verify(&s).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { file, offset: 107, .. } if *file == seg.file),
        "{err}"
    );
    let err = DelayQueue::open(s.clone(), small()).unwrap_err();
    assert!(err.to_string().contains("valid record follows"), "{err}");
    // Nothing was truncated.
    assert_eq!(s.file(&seg.file).unwrap().len() as u64, seg.valid_bytes);
}

#[test]
fn verify_reports_torn_tail_without_repairing() {
    let mut q = DelayQueue::open(SimStorage::new(1), small()).unwrap();
    let mut g = Gen::default();
    feed(&mut q, &g.plain(1, 1, 2));
    q.flush().unwrap();
    let seg = q.inspect().segments[0].clone();
    let mut s = q.into_storage();
    s.append(&seg.file, &[0xAA; 5]).unwrap();
    let rep = verify(&s).unwrap();
    assert_eq!(rep.torn_tail.unwrap().offset, seg.valid_bytes);
    assert_eq!(s.file(&seg.file).unwrap().len() as u64, seg.valid_bytes + 5);
}

#[test]
fn fsync_failure_poisons_and_recovery_keeps_what_was_flushed() {
    let mut s = SimStorage::new(3);
    let mut g = Gen::default();
    let mut q = DelayQueue::open(s.clone(), small()).unwrap();
    feed(&mut q, &g.plain(1, 1, 1));
    q.flush().unwrap();
    s = q.into_storage();
    s.set_faults(SimFaults {
        fsync_fail_per_million: 1_000_000,
        ..SimFaults::default()
    });
    let mut q = DelayQueue::open(s, small()).unwrap();
    feed(&mut q, &g.plain(2, 1, 1));
    let flushed = q.flush_lsn();
    assert!(matches!(q.flush(), Err(Error::Storage(_))));
    assert!(!q.flush().unwrap_err().is_retryable());
    assert!(matches!(q.poll_ready(at(9)), Err(Error::Poisoned(_))));
    assert_eq!(q.flush_lsn(), flushed);
    let mut s = q.into_storage();
    s.crash();
    s.set_faults(SimFaults::default());
    let mut q = DelayQueue::open(s, small()).unwrap();
    assert_eq!(drain(&mut q, at(10)), ["C1"]);
}

#[test]
fn enospc_is_retryable_and_loses_nothing() {
    let mut s = SimStorage::new(5);
    s.set_faults(SimFaults {
        capacity_bytes: Some(6000),
        ..SimFaults::default()
    });
    let mut q = DelayQueue::open(s, small()).unwrap();
    let mut g = Gen::default();
    let mut pending = Msgs::new();
    let mut xid = 1;
    let mut hits = 0;
    let mut steps = 0;
    while xid < 60 || !pending.is_empty() {
        steps += 1;
        assert!(steps < 10_000, "no progress");
        if pending.is_empty() {
            pending = g.plain(xid, 1, 3);
            xid += 1;
        }
        let (e, p) = pending[0].clone();
        let r = q.handle(
            at(0),
            Received {
                wal_lsn: Lsn::INVALID,
                payload: &p,
                event: e,
            },
        );
        let r = r.and_then(|_| q.flush().map(|_| Accepted::Queued));
        match r {
            Ok(_) => {
                pending.remove(0);
            }
            Err(e) => {
                assert!(e.is_retryable(), "{e}");
                hits += 1;
                drain(&mut q, at(10));
                q.purge().unwrap();
            }
        }
    }
    assert!(hits > 0);
    let mut s = q.into_storage();
    s.crash();
    let mut q = DelayQueue::open(s, small()).unwrap();
    drain(&mut q, at(10));
    let applied = states(&q);
    assert!(applied.iter().all(|s| s.1 == "applied"), "{applied:?}");
}

/// A carry-forward set cut at every possible point by a power loss (torn writes), and after it
/// became durable but before or after the old segments went: recovery always finds the
/// prepared transaction exactly once, with all of its changes.
#[test]
fn carry_forward_is_crash_safe() {
    for seed in 0..40u64 {
        let faults = SimFaults {
            torn_writes: true,
            ..SimFaults::default()
        };
        let storage = SimStorage::with_rng(pgyard_types::rng_from_seed(seed), faults);
        let mut q = DelayQueue::open(storage, small()).unwrap();
        let mut g = Gen::default();
        feed(&mut q, &g.prepare(500, 1, 6));
        for xid in 1..60 {
            feed(&mut q, &g.plain(xid, 2, 3));
        }
        q.flush().unwrap();
        drain(&mut q, at(1000));
        q.flush().unwrap();
        let segments = q.inspect().segments.len();
        assert!(q.carry_forward().unwrap(), "seed {seed}: nothing carried");
        let step = seed % 3;
        if step >= 1 {
            q.flush().unwrap();
        }
        if step == 2 {
            assert_eq!(q.purge().unwrap().len(), segments - 1, "seed {seed}");
        }
        let mut s = q.into_storage();
        s.crash();
        let mut q = DelayQueue::open(s, small()).unwrap();
        let again = DelayQueue::open(q.storage().clone(), small()).unwrap();
        assert_eq!(q.inspect(), again.inspect(), "seed {seed}");
        let p: Vec<_> = q
            .inspect()
            .transactions
            .into_iter()
            .filter(|t| t.xid == Xid(500))
            .collect();
        assert_eq!(p.len(), 1, "seed {seed}: {p:?}");
        assert_eq!((p[0].state, p[0].messages), (TxnState::Prepared, 6));
        q.restart_stream(at(0)).unwrap();
        feed(&mut q, &g.commit_prepared(500, 3));
        q.flush().unwrap();
        let Some(Ready::Transaction(t)) = q.poll_ready(at(1000)).unwrap() else {
            panic!("seed {seed}: not handed out");
        };
        assert_eq!(t.messages.len(), 9, "seed {seed}");
        assert_eq!(t.messages[6], b"I500.5");
        q.mark_applied(t.id).unwrap();
        q.purge().unwrap();
        assert_eq!(q.inspect().segments.len(), 1, "seed {seed}");
    }
}

mod props;

// ---- ids and sequence numbers at the end of their range -------------------------------------

/// One segment `seq` holding the given records, on a fresh simulated disk.
fn disk_with(seq: u64, records: &[crate::format::Rec<'_>]) -> SimStorage {
    let header = crate::format::SegmentHeader {
        seq,
        capacity: 4096,
        created: UnixTime(0),
        horizon: Lsn(0),
        apply_lsn: Lsn(0),
        next_id: 1,
    };
    let mut bytes = header.encode().to_vec();
    for r in records {
        r.encode(&mut bytes);
    }
    let name = crate::format::segment_name(seq);
    let mut s = SimStorage::new(1);
    s.create(&name).unwrap();
    s.append(&name, &bytes).unwrap();
    s.sync(&name).unwrap();
    s.sync_dir().unwrap();
    s
}

/// Found by the `delayq_recover` fuzz target: a checksum-valid record with the largest item id
/// overflowed the next id during recovery.
#[test]
fn largest_item_id_on_disk_is_corruption() {
    use crate::format::{Body, Carry, Flavor, Rec};
    let begin = Rec {
        flags: 0,
        carry: Carry::No,
        xid: Xid(7),
        item: u64::MAX,
        lsn: Lsn(0x100),
        body: Body::Begin {
            flavor: Flavor::Plain,
            raw: b"B",
        },
    };
    let note = Rec {
        body: Body::Note { raw: b"M" },
        ..begin
    };
    for rec in [begin, note] {
        let disk = disk_with(1, &[rec]);
        let want = Err(Error::Corrupt {
            file: crate::format::segment_name(1),
            offset: 72,
            reason: "item id out of range".into(),
        });
        assert_eq!(verify(&disk).map(|_| ()), want);
        assert_eq!(DelayQueue::open(disk, small()).map(|_| ()), want);
    }
}

/// Rolling over from the segment with the largest sequence number is refused, not a panic.
#[test]
fn last_segment_sequence_number_does_not_roll_over() {
    let disk = disk_with(u64::MAX, &[]);
    let mut q = DelayQueue::open(disk, small()).unwrap();
    let mut g = Gen::default();
    let mut refused = None;
    'fill: for xid in 1..200 {
        for (event, payload) in g.plain(xid, 1, 4) {
            let msg = Received {
                wal_lsn: Lsn(0),
                payload: &payload,
                event,
            };
            if let Err(e) = q.handle(at(1), msg) {
                refused = Some(e);
                break 'fill;
            }
        }
    }
    assert!(matches!(refused, Some(Error::Misuse(_))), "{refused:?}");
}
