//! The structured session fuzzer (`pgyard_connect::fuzzing`, target `connect_session`) on
//! seeded inputs and on its committed corpus: every run passes its checks, and together the
//! runs reach what the fuzzer exists to reach.

use std::collections::BTreeSet;

use pgyard_connect::fuzzing::{session, Outcome};

/// A seeded stand-in for a fuzzer's input.
fn input(seed: u64, len: usize) -> Vec<u8> {
    pgyard_types::seeded_bytes(seed, len)
}

#[test]
fn seeded_inputs_pass_every_check_and_reach_every_outcome() {
    let runs: Vec<Outcome> = (0..1500u64)
        .map(|seed| session(&input(seed, 16 + (seed as usize * 7) % 240)))
        .collect();
    let accepted: BTreeSet<&str> = runs
        .iter()
        .filter(|o| o.ok)
        .map(|o| o.target_session_attrs)
        .collect();
    assert_eq!(
        accepted.len(),
        6,
        "every target_session_attrs value succeeds somewhere: {accepted:?}"
    );
    assert!(
        runs.iter().any(|o| !o.ok && o.faults == 0),
        "a failure without faults"
    );
    assert!(
        runs.iter().any(|o| !o.ok && o.faults > 0),
        "a failure after faults"
    );
    assert!(
        runs.iter().any(|o| o.ok && o.faults > 0),
        "a success despite faults"
    );
    assert!(runs.iter().any(|o| o.ok && o.tls), "a TLS connection");
    assert!(
        runs.iter().any(|o| !o.ok && o.broken > 0),
        "a failure after a connection broke with an alert"
    );
    assert!(
        runs.iter().any(|o| o.protocol == Some((3, 2))),
        "protocol 3.2"
    );
    assert!(
        runs.iter().any(|o| o.protocol == Some((3, 0))),
        "protocol 3.0"
    );
    assert!(
        runs.iter().any(|o| o.ok && o.attempts >= 3),
        "a success on a third attempt"
    );
    let traces: BTreeSet<u64> = runs.iter().map(|o| o.trace).collect();
    assert!(
        traces.len() > 400,
        "inputs drive distinct runs: {}",
        traces.len()
    );
}

#[test]
fn an_empty_input_connects_to_one_healthy_primary() {
    let o = session(&[]);
    assert!(o.ok && o.attempts == 1 && o.faults == 0, "{o:?}");
    assert_eq!(o.target_session_attrs, "any");
}

#[test]
fn the_committed_corpus_passes() {
    pgyard_testkit::fuzz::replay("connect_session", |data| {
        session(data);
    });
}
