//! The structured session fuzzer (`pgyard_proxy::fuzzing::structured_session`, target
//! `proxy_session`) on seeded inputs and on its committed corpus: every run passes its
//! checks, and together the runs reach what the fuzzer exists to reach.

use std::collections::BTreeSet;
use std::path::Path;

use pgyard_proxy::fuzzing::{structured_session, SessionOutcome};

/// splitmix64: inputs that differ in every byte from one seed to the next.
fn input(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        out.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    out.truncate(len);
    out
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

#[test]
fn the_committed_corpus_passes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/proxy_session");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("the proxy_session corpus is committed") {
        let data = std::fs::read(entry.expect("a corpus entry").path()).expect("readable");
        structured_session(&data);
        n += 1;
    }
    assert!(n > 0, "the corpus at {} is empty", dir.display());
}
