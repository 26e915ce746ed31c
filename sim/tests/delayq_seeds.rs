//! Seeds of the `delayq` scenario that once broke an invariant, replayed on every test run.
//! They found their bugs under the scenario's draws as of trace hash `2a43cbbc237c6cee`; the
//! follow machine and the apply pieces have moved the draws since, so a seed no longer replays
//! its original run. The regression tests proper are the unit tests in pgyard-delayq
//! (`tests/found_by_sim.rs`), which rebuild each failing sequence directly.

use pgyard_sim::{run_seed, scenarios, Trace};

/// Each seed with what it found.
const FOUND: &[(u64, &str)] = &[
    // A carry-forward set cut by a power loss stayed in the segment's record count.
    (12071, "recovery-repeatable"),
    (22131, "recovery-repeatable"),
    (61431, "recovery-repeatable"),
    (69261, "recovery-repeatable"),
    // `restart_stream` refused for space after abandoning part of the open streams.
    (21119, "queue-accepts-valid-stream"),
];

#[test]
fn delayq_seeds_that_once_failed_pass() {
    let sc = scenarios()
        .iter()
        .find(|s| s.name() == "delayq")
        .expect("the delayq scenario");
    for (seed, what) in FOUND {
        let out = run_seed(*sc, *seed, &mut Trace::hashing());
        assert!(
            out.violation.is_none(),
            "seed {seed} (found {what}): {:?}",
            out.violation
        );
    }
}
