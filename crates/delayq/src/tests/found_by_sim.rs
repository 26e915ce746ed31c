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
