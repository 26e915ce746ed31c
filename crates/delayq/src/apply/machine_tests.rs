//! The apply machine against a real queue (over `SimStorage`) and hand-played replies.

use std::collections::BTreeSet;
use std::time::Duration;

use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};

use super::tests::{insert, relation};
use super::*;
use crate::{Config, DelayQueue, Event, Received, SimStorage};

/// Far past every commit time the tests use: everything queued is due.
pub(super) const NOW: UnixTime = UnixTime(2_000_000_000_000_000);

pub(super) type Queue = DelayQueue<SimStorage>;

/// A queue builder: LSNs advance by 0x100 per message.
pub(super) struct Feed {
    q: Queue,
    lsn: u64,
    described: bool,
}

impl Feed {
    pub(super) fn new() -> Feed {
        let config = Config {
            delay: Duration::ZERO,
            ..Config::default()
        };
        Feed {
            q: DelayQueue::open(SimStorage::new(3), config).expect("an empty queue opens"),
            lsn: 0x1000,
            described: false,
        }
    }

    fn handle(&mut self, event: Event, payload: &[u8]) {
        let received = Received {
            wal_lsn: Lsn::INVALID,
            payload,
            event,
        };
        self.q.handle(UnixTime(0), received).expect("accepted");
    }

    /// A transaction inserting row `id` into relation 1; returns its (commit, end) LSNs.
    pub(super) fn txn(&mut self, xid: u32, id: &str) -> (Lsn, Lsn) {
        self.rows(xid, &[id])
    }

    /// A transaction inserting rows `ids` into relation 1; returns its (commit, end) LSNs.
    pub(super) fn rows(&mut self, xid: u32, ids: &[&str]) -> (Lsn, Lsn) {
        let changes: Vec<Vec<u8>> = ids.iter().map(|id| insert(1, &[Some(id)])).collect();
        self.changes(xid, &changes)
    }

    /// A transaction of the change messages `changes` (relation 1 described before it);
    /// returns its (commit, end) LSNs.
    pub(super) fn changes(&mut self, xid: u32, changes: &[Vec<u8>]) -> (Lsn, Lsn) {
        if !std::mem::replace(&mut self.described, true) {
            let r = relation(1, "t", b'd', &[("id", true)]);
            self.handle(Event::Relation { oid: 1, xid: None }, &r);
        }
        let (commit, end) = (Lsn(self.lsn + 0x100), Lsn(self.lsn + 0x180));
        self.lsn += 0x200;
        let ts = PgTimestamp(i64::from(xid));
        let mut begin = vec![b'B'];
        begin.extend_from_slice(&commit.0.to_be_bytes());
        begin.extend_from_slice(&ts.0.to_be_bytes());
        begin.extend_from_slice(&xid.to_be_bytes());
        self.handle(
            Event::Begin {
                xid: Xid(xid),
                final_lsn: commit,
                commit_ts: ts,
            },
            &begin,
        );
        for change in changes {
            self.handle(Event::Change { xid: None }, change);
        }
        let mut c = vec![b'C', 0];
        c.extend_from_slice(&commit.0.to_be_bytes());
        c.extend_from_slice(&end.0.to_be_bytes());
        c.extend_from_slice(&ts.0.to_be_bytes());
        let event = Event::Commit {
            commit_lsn: commit,
            end_lsn: end,
            commit_ts: ts,
        };
        self.handle(event, &c);
        (commit, end)
    }

    /// A non-transactional logical message; returns its LSN.
    fn message(&mut self) -> Lsn {
        let lsn = Lsn(self.lsn);
        self.lsn += 0x100;
        let mut m = vec![b'M', 0];
        m.extend_from_slice(&lsn.0.to_be_bytes());
        m.extend_from_slice(b"p\0");
        m.extend_from_slice(&2u32.to_be_bytes());
        m.extend_from_slice(b"hi");
        let event = Event::Message {
            transactional: false,
            xid: None,
            lsn,
        };
        self.handle(event, &m);
        lsn
    }

    /// Everything durable, so that it can be handed out.
    pub(super) fn done(mut self) -> Queue {
        self.q.flush().expect("flushed");
        self.q
    }
}

/// A machine told to skip the transaction that committed at `skipped`.
fn skipping(q: &mut Queue, skipped: Lsn) -> ApplyMachine {
    let controls = ApplyControls {
        skip: BTreeSet::from([skipped]),
        ..ApplyControls::default()
    };
    ApplyMachine::new(q, Lsn::INVALID, ApplyConfig::default(), controls, NOW).expect("starts")
}

pub(super) fn machine(q: &mut Queue, config: ApplyConfig) -> ApplyMachine {
    ApplyMachine::new(q, Lsn::INVALID, config, ApplyControls::default(), NOW).expect("starts")
}

/// The next command, which must be a batch: its id and plan.
pub(super) fn sent(m: &mut ApplyMachine, q: &mut Queue) -> (BatchId, Plan) {
    match m.poll_command(q, NOW) {
        Ok(Some(Command::Send { id, plan })) => (id, plan),
        other => panic!("expected a batch, got {other:?}"),
    }
}

pub(super) fn rows(plan: &Plan) -> usize {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Run(st) => st.params.len(),
            Step::Copy(c) => c.rows,
        })
        .sum()
}

#[test]
fn a_transaction_is_acknowledged_only_after_its_commit_and_the_durable_progress() {
    let mut f = Feed::new();
    f.txn(10, "1");
    f.txn(11, "2");
    let (_, end) = f.txn(12, "3");
    let mut q = f.done();
    let mut m = machine(&mut q, ApplyConfig::default());
    let (id, plan) = sent(&mut m, &mut q);
    assert_eq!((plan.end_lsn, rows(&plan)), (end, 3), "one batch of three");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    assert_eq!(m.wait(&q), Wait::Reply);
    assert_eq!(
        q.apply_lsn(),
        Lsn::INVALID,
        "nothing acknowledged while in flight"
    );

    m.handle_committed(&mut q, id, NOW).expect("committed");
    assert_eq!(q.apply_lsn(), Lsn::INVALID, "a COMMIT alone is not durable");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    // The subscriber's WAL was flushed only up to an earlier transaction.
    m.handle_progress(&mut q, Lsn(end.0 - 1), NOW)
        .expect("answered");
    assert_eq!(
        q.apply_lsn(),
        Lsn::INVALID,
        "the batch ends past the durable progress"
    );
    assert_eq!(m.applied().transactions, 0);

    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end, NOW).expect("answered");
    assert_eq!(q.apply_lsn(), end);
    assert_eq!(m.applied().transactions, 3);
    assert_eq!(m.applied().rows, 3);
    assert_eq!(m.durable_progress(), end);
    // Idle: the queue is flushed and purged once, then nothing is left to do.
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    assert_eq!(m.poll_notice(), Some(Notice::Purged(0)));
    assert_eq!(m.wait(&q), Wait::Drained);
}

#[test]
fn batches_and_the_pipeline_keep_to_their_limits() {
    let mut f = Feed::new();
    for xid in 1..=7 {
        f.txn(xid, &xid.to_string());
    }
    let mut q = f.done();
    let config = ApplyConfig {
        depth: 2,
        batch_txns: 3,
        ..ApplyConfig::default()
    };
    let mut m = machine(&mut q, config);
    let (a, pa) = sent(&mut m, &mut q);
    let (b, pb) = sent(&mut m, &mut q);
    assert_eq!((rows(&pa), rows(&pb)), (3, 3));
    assert_eq!(
        m.poll_command(&mut q, NOW),
        Ok(None),
        "two batches in flight at most"
    );
    m.handle_committed(&mut q, a, NOW).expect("committed");
    // Room again: the last transaction goes out before the progress question.
    let (c, pc) = sent(&mut m, &mut q);
    assert_eq!(rows(&pc), 1);
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    m.handle_committed(&mut q, b, NOW).expect("committed");
    m.handle_committed(&mut q, c, NOW).expect("committed");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, pc.end_lsn, NOW)
        .expect("answered");
    assert_eq!(m.applied().transactions, 7);
}

#[test]
fn a_refused_batch_is_retried_one_by_one_and_the_culprit_named() {
    let mut f = Feed::new();
    let (_, end1) = f.txn(1, "1");
    let (culprit, _) = f.txn(2, "2");
    f.txn(3, "3");
    let mut q = f.done();
    let mut m = machine(&mut q, ApplyConfig::default());
    let (id, _) = sent(&mut m, &mut q);
    m.handle_refused(id, "relation does not exist".into())
        .expect("taken");
    assert_eq!(
        m.poll_command(&mut q, NOW),
        Ok(Some(Command::RollBack {
            origin: Lsn::INVALID
        }))
    );
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    assert_eq!(
        m.poll_command(&mut q, NOW),
        Ok(None),
        "nothing before the answer"
    );
    m.handle_progress(&mut q, Lsn::INVALID, NOW)
        .expect("answered");
    // One transaction per batch now.
    let (first, plan) = sent(&mut m, &mut q);
    assert_eq!((rows(&plan), plan.end_lsn), (1, end1));
    let (second, plan) = sent(&mut m, &mut q);
    assert_eq!(plan.commit_lsn, culprit);
    m.handle_committed(&mut q, first, NOW).expect("committed");
    m.handle_refused(second, "relation does not exist".into())
        .expect("taken");
    assert!(matches!(
        m.poll_command(&mut q, NOW),
        Ok(Some(Command::RollBack { origin })) if origin == end1
    ));
    let failure = Failure::Refused {
        commit_lsn: culprit,
        text: "relation does not exist".into(),
    };
    assert_eq!(m.poll_command(&mut q, NOW), Err(failure.clone()));
    assert_eq!(
        m.poll_command(&mut q, NOW),
        Err(failure),
        "it stays stopped"
    );
    assert_eq!(
        q.apply_lsn(),
        Lsn::INVALID,
        "the first commit was never durable"
    );
}

#[test]
fn a_reply_for_anything_but_the_oldest_request_is_misuse() {
    let mut f = Feed::new();
    f.txn(1, "1");
    let mut q = f.done();
    let mut m = machine(&mut q, ApplyConfig::default());
    let (id, _) = sent(&mut m, &mut q);
    let wrong = BatchId(id.0 + 1);
    assert!(matches!(
        m.handle_committed(&mut q, wrong, NOW),
        Err(Failure::Misuse(_))
    ));
    assert!(matches!(
        m.handle_progress(&mut q, Lsn(1), NOW),
        Err(Failure::Misuse(_))
    ));
    // Still answered in order, then stopped.
    m.handle_committed(&mut q, id, NOW).expect("the oldest");
    assert!(matches!(
        m.poll_command(&mut q, NOW),
        Err(Failure::Misuse(_))
    ));
}

#[test]
fn messages_and_skipped_transactions_are_acknowledged_in_their_turn() {
    let mut f = Feed::new();
    let (_, end1) = f.txn(1, "1");
    let note = f.message();
    let (skipped, _) = f.txn(2, "2");
    let (_, end3) = f.txn(3, "3");
    let mut q = f.done();
    let mut m = skipping(&mut q, skipped);
    let (a, pa) = sent(&mut m, &mut q);
    assert_eq!(pa.end_lsn, end1, "the message ends the batch");
    let (b, pb) = sent(&mut m, &mut q);
    assert_eq!(pb.end_lsn, end3, "the skipped transaction is not applied");
    assert!(matches!(m.poll_notice(), Some(Notice::Message(n)) if n.lsn == note));
    assert_eq!(
        m.poll_notice(),
        None,
        "the skip waits behind the first batch"
    );
    m.handle_committed(&mut q, a, NOW).expect("committed");
    m.handle_committed(&mut q, b, NOW).expect("committed");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end3, NOW).expect("answered");
    assert_eq!(m.poll_notice(), Some(Notice::Skipped(skipped)));
    assert_eq!(m.applied().skipped, vec![skipped]);
    assert_eq!(m.applied().transactions, 2);
    assert_eq!(q.apply_lsn(), end3);
}

#[test]
fn a_skipped_transaction_still_describes_its_relations() {
    // The description goes out with the first transaction handed out, which the operator
    // skips; the next one changes the relation without describing it again.
    let mut f = Feed::new();
    let (skipped, _) = f.txn(1, "1");
    let (_, end2) = f.txn(2, "2");
    let mut q = f.done();
    let mut m = skipping(&mut q, skipped);
    let (_, plan) = sent(&mut m, &mut q);
    assert_eq!(plan.end_lsn, end2, "the skipped transaction is not applied");
    assert_eq!(
        rows(&plan),
        1,
        "the second one is, into the relation the first described"
    );
}

#[test]
fn until_holds_and_pause_sends_nothing() {
    let mut f = Feed::new();
    let (_, end1) = f.txn(1, "1");
    let (held, _) = f.txn(2, "2");
    let mut q = f.done();
    let paused = ApplyControls {
        paused: true,
        until: Some(Until::Lsn(held)),
        ..ApplyControls::default()
    };
    let mut m = ApplyMachine::new(&mut q, Lsn::INVALID, ApplyConfig::default(), paused, NOW)
        .expect("starts");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    assert_eq!(m.wait(&q), Wait::Paused);
    m.set_controls(ApplyControls {
        until: Some(Until::Lsn(held)),
        ..ApplyControls::default()
    });
    let (id, plan) = sent(&mut m, &mut q);
    assert_eq!(plan.end_lsn, end1);
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    m.handle_committed(&mut q, id, NOW).expect("committed");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end1, NOW).expect("answered");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    assert_eq!(m.wait(&q), Wait::Held(held));
    assert_eq!(m.applied().held_at, Some(held));
}

#[test]
fn a_new_machine_skips_what_the_origin_has_and_hands_out_the_rest_with_the_schema() {
    let mut f = Feed::new();
    let (_, end1) = f.txn(1, "1");
    let (_, end2) = f.txn(2, "2");
    let mut q = f.done();
    let mut lost = machine(&mut q, ApplyConfig::default());
    let (_, plan) = sent(&mut lost, &mut q);
    assert_eq!(plan.end_lsn, end2);
    drop(lost);
    // The subscriber has the first transaction; the session that sent the rest is gone.
    let mut m = ApplyMachine::new(
        &mut q,
        end1,
        ApplyConfig::default(),
        ApplyControls::default(),
        NOW,
    )
    .expect("starts");
    assert_eq!(m.applied().skipped_at_start, 1);
    assert_eq!(q.apply_lsn(), end1);
    // A fresh statement builder can only plan this with the relation handed out again.
    let (_, plan) = sent(&mut m, &mut q);
    assert_eq!((rows(&plan), plan.end_lsn), (1, end2));
}

#[test]
fn stop_finishes_what_is_in_flight() {
    let mut f = Feed::new();
    let (_, end) = f.txn(1, "1");
    let mut q = f.done();
    let mut m = machine(&mut q, ApplyConfig::default());
    let (id, _) = sent(&mut m, &mut q);
    m.stop();
    assert_eq!(m.wait(&q), Wait::Reply);
    m.handle_committed(&mut q, id, NOW).expect("committed");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(Some(Command::AskProgress)));
    m.handle_progress(&mut q, end, NOW).expect("answered");
    assert_eq!(m.poll_command(&mut q, NOW), Ok(None));
    assert_eq!(m.wait(&q), Wait::Stopped);
    assert_eq!(q.apply_lsn(), end);
}

#[test]
fn intervals_pass_when_the_clock_steps_back() {
    let at = UnixTime(1_000_000);
    assert!(!super::machine::elapsed(
        at,
        UnixTime(1_050_000),
        Duration::from_millis(100)
    ));
    assert!(super::machine::elapsed(
        at,
        UnixTime(1_100_000),
        Duration::from_millis(100)
    ));
    assert!(super::machine::elapsed(
        at,
        UnixTime(999_999),
        Duration::from_millis(100)
    ));
}

#[cfg(feature = "planted-bugs")]
#[test]
fn the_planted_bug_acknowledges_on_send() {
    let mut f = Feed::new();
    let (_, end) = f.txn(1, "1");
    let mut q = f.done();
    let mut m =
        machine(&mut q, ApplyConfig::default()).with_planted_bug(PlantedBug::AckBeforeCommit);
    sent(&mut m, &mut q);
    assert_eq!(q.apply_lsn(), end, "marked applied with no reply at all");
}

#[test]
fn the_progress_question_comes_after_progress_every_transactions_with_replies_pending() {
    // With the interval far off, only the count can make the question due while batches are
    // still in flight.
    let asks_with_replies_pending = |progress_every: usize| {
        let mut f = Feed::new();
        for xid in 1..=6 {
            f.txn(xid, &xid.to_string());
        }
        let mut q = f.done();
        let config = ApplyConfig {
            depth: 3,
            batch_txns: 1,
            progress_every,
            progress_interval: Duration::from_secs(3600),
            ..ApplyConfig::default()
        };
        let mut m = machine(&mut q, config);
        let (a, _) = sent(&mut m, &mut q);
        sent(&mut m, &mut q);
        sent(&mut m, &mut q);
        assert_eq!(m.poll_command(&mut q, NOW), Ok(None), "three in flight");
        m.handle_committed(&mut q, a, NOW).expect("committed");
        // Room for one more batch, which goes first; then the pipeline is full again.
        sent(&mut m, &mut q);
        m.poll_command(&mut q, NOW).expect("no failure")
    };
    assert_eq!(asks_with_replies_pending(2), Some(Command::AskProgress));
    assert_eq!(asks_with_replies_pending(256), None);
}
