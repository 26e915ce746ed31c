//! The simulator has teeth: each planted bug in the machines it drives is caught within
//! 1,000 seeds, and the same seed without the bug passes.
#![cfg(feature = "planted-bugs")]

use pgyard_sim::planted::{first_catch, run_seed_with_bug, ALL};
use pgyard_sim::{run_seed, scenario, Trace};

/// The budget: every bug within this many seeds.
const SEEDS_MAX: u64 = 1000;

#[test]
fn every_planted_bug_is_caught_within_1000_seeds() {
    let mut missed = Vec::new();
    for &bug in ALL {
        match first_catch(bug, SEEDS_MAX) {
            Some((seed, name, v)) => {
                println!(
                    "planted bug {bug:?} caught at seed {seed} ({name}: {})",
                    v.invariant
                );
                // Without the bug the same seed passes: the catch is the bug's doing.
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
                // And the catch replays.
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

#[test]
fn every_planted_proxy_bug_is_caught_within_1000_seeds() {
    use pgyard_sim::planted::{first_proxy_catch, run_proxy_seed_with_bug, PROXY};
    for &bug in PROXY {
        let (seed, v) = first_proxy_catch(bug, SEEDS_MAX)
            .unwrap_or_else(|| panic!("proxy bug {bug:?} not caught within {SEEDS_MAX} seeds"));
        println!("planted proxy bug {bug:?} caught at seed {seed}: {v}");
        let clean = run_seed(
            scenario("proxy").expect("registered"),
            seed,
            &mut Trace::hashing(),
        );
        assert!(
            clean.violation.is_none(),
            "proxy seed {seed} fails without {bug:?}"
        );
        let again = run_proxy_seed_with_bug(seed, bug, &mut Trace::hashing());
        assert_eq!(again.violation.map(|v| v.invariant), Some(v.invariant));
    }
}
