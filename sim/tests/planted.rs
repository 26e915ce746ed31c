//! The simulator has teeth: every bug of the planted registry is caught by its scenario, by
//! the invariant the registry names, within its seed budget; the same seed passes without
//! the bug (so the catch is the bug's doing), and the catch replays.
#![cfg(feature = "planted-bugs")]

use std::collections::BTreeSet;

use pgyard_sim::planted::{Entry, REGISTRY};
use pgyard_sim::{run_seed, scenario, Trace};

/// What is wrong with one entry's catch, if anything; prints the catch line the CI log shows.
fn judge(entry: &Entry) -> Option<String> {
    let (bug, name) = (entry.bug, entry.scenario);
    let Some(sc) = scenario(name) else {
        return Some(format!("{bug}: scenario {name} is not registered"));
    };
    if entry.run(0, &mut Trace::hashing()).is_none() {
        return Some(format!("{bug}: scenario {name} cannot switch it on"));
    }
    let Some((seed, v)) = entry.first_catch() else {
        return Some(format!(
            "{bug}: not caught by {name} within {} seeds",
            entry.seeds_max
        ));
    };
    println!(
        "planted bug {bug} caught at seed {seed} ({name}: {})",
        v.invariant
    );
    if v.invariant != entry.invariant {
        return Some(format!(
            "{bug}: {name} seed {seed} broke {} instead of {}: {v}",
            v.invariant, entry.invariant
        ));
    }
    let clean = run_seed(sc, seed, &mut Trace::hashing());
    if let Some(c) = clean.violation {
        return Some(format!("{bug}: {name} seed {seed} fails without it: {c}"));
    }
    let again = entry
        .run(seed, &mut Trace::hashing())
        .and_then(|o| o.violation);
    if again.as_ref().map(|a| a.invariant) != Some(v.invariant) {
        return Some(format!(
            "{bug}: {name} seed {seed} does not replay: {again:?}"
        ));
    }
    None
}

#[test]
fn every_planted_bug_is_caught_within_its_budget() {
    let problems: Vec<String> = REGISTRY.iter().filter_map(judge).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_registry_names_each_bug_once() {
    let mut seen = BTreeSet::new();
    for e in REGISTRY {
        assert!(seen.insert(e.bug.to_string()), "{} listed twice", e.bug);
        assert!(e.seeds_max > 0, "{}: an empty budget", e.bug);
    }
}

/// A pool that ignores `options`, whose registry row names the `proxy-login` scenario (the
/// session's Acquire), is also caught end to end by the `proxy` world, where clients with and
/// without `options` share routes, servers fail over and pools shrink: a server is lent to a
/// client that did not ask for the options it logged in with.
#[test]
fn the_proxy_world_catches_pools_that_ignore_options() {
    let entry = Entry {
        bug: pgyard_sim::planted::Planted::Proxy(pgyard_sim::planted::ProxyBug::PoolIgnoresOptions),
        scenario: "proxy",
        invariant: "pool-per-options",
        seeds_max: 1000,
    };
    assert_eq!(judge(&entry), None);
}
