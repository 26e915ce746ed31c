//! The structured session fuzzer (`pgyard_proxy::fuzzing::structured_session`, target
//! `proxy_session`) on seeded inputs and on its committed corpus: every run passes its
//! checks, and together the runs reach what the fuzzer exists to reach.

use std::collections::BTreeSet;

use pgyard_proxy::fuzzing::{
    structured_session, structured_session_without_faults, SessionOutcome,
};

/// A seeded stand-in for a fuzzer's input.
fn input(seed: u64, len: usize) -> Vec<u8> {
    pgyard_types::seeded_bytes(seed, len)
}

#[test]
fn seeded_inputs_pass_every_check_and_reach_far() {
    let runs: Vec<SessionOutcome> = (0..600u64)
        .map(|seed| structured_session(&input(seed, 32 + (seed as usize * 13) % 480)))
        .collect();
    let clean: Vec<&SessionOutcome> = runs.iter().filter(|o| o.faults == 0).collect();
    assert!(clean.len() > 100, "runs without faults: {}", clean.len());
    assert!(
        clean.iter().any(|o| o.replies >= 20),
        "a fault-free run with twenty replies matched against the reference"
    );
    let most = runs
        .iter()
        .map(|o| (o.reused, o.lent, o.requests, o.faults))
        .max();
    assert!(
        runs.iter().any(|o| o.reused >= 3),
        "servers reused: {most:?}"
    );
    let lends = runs.iter().map(|o| o.lent).max();
    assert!(
        runs.iter().any(|o| o.lent >= 4),
        "four lends in one run: {lends:?}"
    );
    assert!(
        runs.iter().any(|o| o.faults > 0 && o.replies > 0),
        "faults after replies"
    );
    let traces: BTreeSet<u64> = runs.iter().map(|o| o.trace).collect();
    assert!(
        traces.len() > 250,
        "inputs drive distinct runs: {}",
        traces.len()
    );
}

/// Each run is checked against a twin that never takes the session's transaction-mode
/// shortcuts, which proves them only where they are taken: calm runs on longer inputs must
/// take both many times (1,785 requests and 1,121 replies, both in 163 of the 200 runs,
/// when this was written).
#[test]
fn the_shortcuts_are_taken_and_change_nothing() {
    let runs: Vec<SessionOutcome> = (0..200u64)
        .map(|seed| {
            let data = input(1_000_000 + seed, 2_000 + (seed as usize * 37) % 3_000);
            structured_session_without_faults(&data)
        })
        .collect();
    let requests: u64 = runs.iter().map(|o| o.shortcuts.0).sum();
    let replies: u64 = runs.iter().map(|o| o.shortcuts.1).sum();
    let both = runs
        .iter()
        .filter(|o| o.shortcuts.0 > 0 && o.shortcuts.1 > 0)
        .count();
    assert!(
        requests >= 900 && replies >= 550 && both >= 80,
        "shortcuts taken: {requests} requests, {replies} replies, both in {both} runs"
    );
}

#[test]
fn the_committed_corpus_passes() {
    pgyard_testkit::fuzz::replay("proxy_session", |data| {
        structured_session(data);
    });
}
