//! The apply machine with a transaction handed out in pieces: one subscriber transaction
//! sent as several plans, acknowledged only after its COMMIT and the durable progress, and
//! rolled back and handed out again whole when a piece is refused.

use pgyard_types::Lsn;

use super::machine_tests::{machine, rows, sent, Feed, Queue, NOW};
use super::tests::insert;
use super::*;

/// A queue with a small transaction, one of `n` rows and another small one: their (commit,
/// end) LSNs.
fn queue(n: usize) -> (Queue, [(Lsn, Lsn); 3]) {
    let mut f = Feed::new();
    let a = f.txn(10, "a");
    let ids: Vec<String> = (0..n).map(|i| format!("row{i}")).collect();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    let b = f.rows(11, &ids);
    let c = f.txn(12, "c");
    (f.done(), [a, b, c])
}

fn config() -> ApplyConfig {
    ApplyConfig {
        piece_bytes: 200,
        ..ApplyConfig::default()
    }
}

/// Sends until the plan that closes its subscriber transaction: the plans.
fn send_through_commit(m: &mut ApplyMachine, q: &mut Queue) -> Vec<(BatchId, Plan)> {
    let mut out = vec![sent(m, q)];
    while !out.last().is_some_and(|(_, p)| p.closes) {
        out.push(sent(m, q));
    }
    out
}

#[test]
fn a_transaction_in_pieces_is_one_subscriber_transaction_acknowledged_after_its_commit() {
    let (mut q, [_, (commit_b, end_b), (commit_c, end_c)]) = queue(50);
    let mut m = machine(&mut q, config());
    let plans = send_through_commit(&mut m, &mut q);
    assert!(plans.len() >= 4, "{} plans", plans.len());
    for (i, (_, p)) in plans.iter().enumerate() {
        assert_eq!(p.opens, i == 0, "only the first piece begins");
        assert_eq!(p.closes, i == plans.len() - 1, "only the last one commits");
    }
    assert_eq!(plans.iter().map(|(_, p)| rows(p)).sum::<usize>(), 51);
    assert_eq!(plans.last().map(|(_, p)| p.end_lsn), Some(end_b));
    // The next transaction goes after the COMMIT, never into the middle.
    let (c_id, c_plan) = sent(&mut m, &mut q);
    assert_eq!(
        (c_plan.commit_lsn, c_plan.opens, c_plan.closes),
        (commit_c, true, true)
    );
    let (last, rest) = plans.split_last().expect("plans");
    for (id, _) in rest {
        m.handle_committed(&mut q, *id, NOW).expect("ran");
        assert_eq!(m.poll_command(&mut q, NOW), Ok(None), "no question mid-way");
    }
    assert_eq!(q.apply_lsn(), Lsn::INVALID);
    m.handle_committed(&mut q, last.0, NOW).expect("committed");
    assert_eq!(q.apply_lsn(), Lsn::INVALID, "a COMMIT alone is not durable");
    assert_eq!(m.applied().transactions, 0);
    m.handle_committed(&mut q, c_id, NOW).expect("committed");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end_b, NOW).expect("answered");
    assert_eq!(q.apply_lsn(), end_b);
    assert_eq!((m.applied().transactions, m.applied().rows), (2, 51));
    assert!(commit_b < commit_c);
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end_c, NOW).expect("answered");
    assert_eq!((q.apply_lsn(), m.applied().transactions), (end_c, 3));
}

#[test]
fn a_refused_piece_rolls_the_whole_transaction_back_and_it_is_sent_again_from_its_start() {
    let (mut q, [(commit_a, end_a), (commit_b, end_b), (commit_c, _)]) = queue(50);
    let mut m = machine(&mut q, config());
    let plans = send_through_commit(&mut m, &mut q);
    let first_plan = plans[0].1.clone();
    m.handle_committed(&mut q, plans[0].0, NOW).expect("ran");
    m.handle_refused(plans[1].0, "no space".into())
        .expect("refused");
    assert_eq!(
        m.poll_command(&mut q, NOW),
        Ok(Some(Command::RollBack {
            origin: Lsn::INVALID
        }))
    );
    // The rolled back subscriber transaction held two transactions: one at a time now.
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, Lsn::INVALID, NOW)
        .expect("answered");
    let (a_id, a_plan) = sent(&mut m, &mut q);
    assert_eq!((a_plan.commit_lsn, a_plan.end_lsn), (commit_a, end_a));
    assert!(a_plan.opens && a_plan.closes);
    let again = send_through_commit(&mut m, &mut q);
    assert!(again[0].1.opens && !again[0].1.closes);
    assert_eq!(again[0].1.commit_lsn, commit_b);
    // Its first piece again, without the transaction before it.
    assert_eq!(rows(&again[0].1), rows(&first_plan) - 1);
    assert_eq!(again.iter().map(|(_, p)| rows(p)).sum::<usize>(), 50);
    m.handle_committed(&mut q, a_id, NOW).expect("committed");
    for (id, _) in &again {
        m.handle_committed(&mut q, *id, NOW).expect("committed");
    }
    let (c_id, c_plan) = sent(&mut m, &mut q);
    assert_eq!(c_plan.commit_lsn, commit_c);
    m.handle_committed(&mut q, c_id, NOW).expect("committed");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end_b, NOW).expect("answered");
    assert_eq!((q.apply_lsn(), m.applied().transactions), (end_b, 2));
}

/// A message that does not decode, at `bad` among 50 inserts read in pieces: the failure the
/// machine stops with, once every piece sent before it committed.
fn failure_at(bad: usize) -> (Lsn, Failure) {
    let mut f = Feed::new();
    let changes: Vec<Vec<u8>> = (0..50)
        .map(|i| {
            let mut m = insert(1, &[Some(&format!("row{i}"))]);
            if i == bad {
                // Neither a new tuple nor a key: the same size as its neighbours, so the
                // pieces fall as they would without it.
                m[5] = b'X';
            }
            m
        })
        .collect();
    let (commit, _) = f.changes(11, &changes);
    let mut q = f.done();
    let mut m = machine(&mut q, config());
    let mut sent = 0;
    loop {
        match m.poll_command(&mut q, NOW) {
            Ok(Some(Command::Send { id, .. })) => {
                sent += 1;
                m.handle_committed(&mut q, id, NOW).expect("ran");
            }
            Ok(other) => panic!("after {sent} plans: {other:?}"),
            Err(failure) => return (commit, failure),
        }
    }
}

#[test]
fn a_message_that_does_not_decode_is_named_by_its_place_in_the_whole_transaction() {
    // Pieces of 200 bytes: the BEGIN and two inserts, then four inserts each. These land in
    // the first piece, the second, the third and a late one; an index counts from the
    // transaction's start whichever piece it is in.
    for bad in [1, 3, 8, 44] {
        let (commit, failure) = failure_at(bad);
        match failure {
            Failure::Plan(ApplyError::Decode {
                commit_lsn, index, ..
            }) => assert_eq!(
                (commit_lsn, index),
                (commit, bad + 1),
                "the BEGIN is message 0"
            ),
            other => panic!("insert {bad}: {other:?}"),
        }
    }
}
