//! Seeds of the `delayq` scenario that once broke an invariant, replayed on every test run
//! (each fix also has a unit test in pgyard-delayq; these keep the whole path covered).

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
