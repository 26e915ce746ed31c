//! Regressions found by `pgyard sim --scenario delayq`, each rebuilt as a crafted sequence on
//! the simulated disk (the seeds themselves are replayed by `sim/tests/delayq_seeds.rs`).

use super::*;

/// Seeds 12071, 22131, 61431, 69261: a carry-forward set cut short by a power loss is cut off
/// like a torn tail, but its copies stayed in the segment's record count, so a second recovery
/// of the same (now truncated) disk counted fewer records than the first.
#[test]
fn a_cut_carry_forward_set_leaves_the_record_count_as_a_second_recovery_finds_it() {
    let mut q = DelayQueue::open(SimStorage::new(3), small()).unwrap();
    let mut g = Gen::default();
    feed(&mut q, &g.prepare(500, 1, 6));
    for xid in 1..60 {
        feed(&mut q, &g.plain(xid, 2, 3));
    }
    q.flush().unwrap();
    drain(&mut q, at(1000));
    q.flush().unwrap();
    let before = q.segments().last().unwrap();
    assert!(q.carry_forward().unwrap(), "nothing carried");
    q.flush().unwrap();
    let after = q.segments().last().unwrap();
    // The set is durable; cutting its flagged last copy by one byte leaves every other copy
    // whole and checksum-valid on disk, as a power loss in the middle of its write would.
    let mut s = q.into_storage();
    s.truncate(&after.file, after.valid_bytes - 1).unwrap();
    s.sync(&after.file).unwrap();

    let q = DelayQueue::open(s, small()).unwrap();
    let torn = q.recovery().torn_tail.clone().expect("the set is cut off");
    assert_eq!(torn.reason, "incomplete carry-forward set");
    // Cut from the set's first copy to the end of the file.
    assert_eq!(torn.file, after.file);
    assert!(torn.offset < after.valid_bytes - 1);
    assert_eq!(torn.offset + torn.dropped_bytes, after.valid_bytes - 1);
    let twin = DelayQueue::open(q.storage().clone(), small()).unwrap();
    assert_eq!(twin.recovery().torn_tail, None);
    let segs = |q: &DelayQueue<SimStorage>| q.segments().collect::<Vec<_>>();
    assert_eq!(segs(&q), segs(&twin));
    assert_eq!(q.inspect(), twin.inspect());
    assert_eq!(q.recovery().records, twin.recovery().records);
    // What is left is the segment as it was before the set, whichever segment that was.
    let last = q.segments().last().unwrap();
    if last.seq == before.seq {
        assert_eq!(
            (last.valid_bytes, last.records),
            (before.valid_bytes, before.records)
        );
    }
    // Nothing was lost: the prepared transaction is there once, from its originals.
    let p: Vec<_> = q
        .transactions()
        .filter(|t| t.xid == Xid(500))
        .map(|t| (t.state, t.messages))
        .collect();
    assert_eq!(p, [(TxnState::Prepared, 6)]);
}

/// Seed 21119: `restart_stream` wrote an ABORT per open transaction one by one; when a later
/// one needed a roll-over that ran out of space, the error was retryable but the earlier
/// transactions were already abandoned. The caller, still in its session, then sent the next
/// chunk of an abandoned stream and the queue refused it as a protocol violation.
#[test]
fn restart_stream_refused_for_space_changes_nothing() {
    let mut q = DelayQueue::open(SimStorage::new(5), small()).unwrap();
    let mut g = Gen::default();
    feed(&mut q, &g.stream_block(100, true, &[100]));
    feed(&mut q, &g.stream_block(200, true, &[200]));
    q.flush().unwrap();
    // Nothing more fits on the disk: what follows stays buffered.
    let mut s = q.into_storage();
    let used: u64 = s.list().unwrap().iter().map(|f| s.size(f).unwrap()).sum();
    s.set_faults(SimFaults {
        capacity_bytes: Some(used),
        ..SimFaults::default()
    });
    let mut q = DelayQueue::open(s, small()).unwrap();
    // A message that leaves room in the active segment for one ABORT (36 bytes), not two.
    let seg = q.segments().last().unwrap();
    let room = seg.capacity - seg.valid_bytes;
    let note = "n".repeat((room - 32 - 50) as usize);
    feed(&mut q, &g.note(&note));
    let before = q.inspect();

    let e = q.restart_stream(at(1)).unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(q.inspect(), before, "a retryable refusal changed the queue");
    // The session goes on: both streams are still the queue's (blocks without changes: the
    // disk is still full).
    feed(&mut q, &g.stream_block(100, false, &[]));
    feed(&mut q, &g.stream_block(200, false, &[]));

    // With space again, the restart abandons both, and the publisher streams them anew.
    let mut s = q.into_storage();
    s.set_faults(SimFaults::default());
    let mut q = DelayQueue::open(s, small()).unwrap();
    q.restart_stream(at(2)).unwrap();
    assert!(
        q.transactions().all(|t| t.state == TxnState::Aborted),
        "{:?}",
        states(&q)
    );
    feed(&mut q, &g.stream_block(100, true, &[100]));
    feed(&mut q, &g.stream_commit(100, 3));
    q.flush().unwrap();
    assert_eq!(drain(&mut q, at(1000)), ["c100"]);
}
