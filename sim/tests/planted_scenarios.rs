//! The `delayq` and `slotsync` scenarios have teeth: each bug planted in their driving code
//! is caught within 1,000 seeds, the same seed passes without it, and the catch replays.
#![cfg(feature = "planted-bugs")]

use pgyard_sim::planted_scenarios::{first_catch, run_seed_with_bug, ALL};
use pgyard_sim::{run_seed, scenario, Trace};

/// The budget: every bug within this many seeds.
const SEEDS_MAX: u64 = 1000;

#[test]
fn every_scenario_bug_is_caught_within_1000_seeds() {
    let mut missed = Vec::new();
    for &(bug, name) in ALL {
        match first_catch(name, bug, SEEDS_MAX) {
            Some((seed, v)) => {
                println!(
                    "planted bug {bug:?} caught at seed {seed} ({name}: {})",
                    v.invariant
                );
                let clean = run_seed(
                    scenario(name).expect("registered"),
                    seed,
                    &mut Trace::hashing(),
                );
                assert!(
                    clean.violation.is_none(),
                    "{name} seed {seed} fails without {bug:?}: {:?}",
                    clean.violation
                );
                let again = run_seed_with_bug(name, seed, bug, &mut Trace::hashing())
                    .expect("known scenario");
                assert_eq!(again.violation.map(|v| v.invariant), Some(v.invariant));
            }
            None => missed.push(bug),
        }
    }
    assert!(
        missed.is_empty(),
        "not caught within {SEEDS_MAX} seeds: {missed:?}"
    );
}
