//! Switching planted bugs on for a sweep (feature `planted-bugs`): the registered scenarios
//! always run the machines as shipped, so the tests that prove the simulator has teeth run
//! the same scenario code through these functions with one bug switched on.

use pgyard_connect::PlantedBug;

use crate::runner::SeedOutcome;
use crate::scenarios::{connect, failover};
use crate::trace::Trace;
use crate::Violation;

/// Every planted bug, in a fixed order.
pub const ALL: &[PlantedBug] = &[
    PlantedBug::IgnoreTargetSessionAttrs,
    PlantedBug::DropAttemptTimeout,
    PlantedBug::ReuseClosedAttempt,
    PlantedBug::SkipPreferSecondPass,
    PlantedBug::TrustStaleParameterStatus,
    PlantedBug::StartupErrorNextAddress,
    PlantedBug::AcceptAnyAlpn,
];

/// Scenarios that accept a planted bug, by name.
pub const SCENARIOS: &[&str] = &["connect", "failover"];

/// Runs `seed` of scenario `name` (`connect` or `failover`) with `bug` switched on in every
/// machine the run builds; `None` for an unknown name.
pub fn run_seed_with_bug(
    name: &str,
    seed: u64,
    bug: PlantedBug,
    trace: &mut Trace,
) -> Option<SeedOutcome> {
    let mut rng = pgyard_types::rng_from_seed(crate::runner::derive_seed(name, seed));
    crate::trace!(trace, "SEED={seed} scenario={name} planted={bug:?}");
    let result: Result<u64, Violation> = match name {
        "connect" => connect::run_connect(&mut rng, trace, Some(bug)),
        "failover" => failover::run_failover(&mut rng, trace, Some(bug)),
        _ => return None,
    };
    let (simulated_nanos, violation) = match result {
        Ok(t) => (t, None),
        Err(v) => (0, Some(v)),
    };
    Some(SeedOutcome {
        seed,
        hash: trace.hash(),
        simulated_nanos,
        violation,
    })
}

/// The first seed below `seeds_max` at which some scenario catches `bug`, with the scenario
/// and the broken invariant. Scenarios are interleaved seed by seed.
pub fn first_catch(bug: PlantedBug, seeds_max: u64) -> Option<(u64, &'static str, Violation)> {
    for seed in 0..seeds_max {
        for &name in SCENARIOS {
            let out = run_seed_with_bug(name, seed, bug, &mut Trace::hashing())?;
            if let Some(v) = out.violation {
                return Some((seed, name, v));
            }
        }
    }
    None
}

/// Every planted bug of the proxy's client sessions, caught by the `proxy` scenario.
pub const PROXY: &[pgyard_proxy::PlantedBug] = &[
    pgyard_proxy::PlantedBug::ReleaseInTransaction,
    pgyard_proxy::PlantedBug::ForwardMiddleware,
    pgyard_proxy::PlantedBug::ForgetStatementOnNewServer,
];

/// Runs `seed` of the `proxy` scenario with `bug` switched on in every client session.
pub fn run_proxy_seed_with_bug(
    seed: u64,
    bug: pgyard_proxy::PlantedBug,
    trace: &mut Trace,
) -> SeedOutcome {
    let mut rng = pgyard_types::rng_from_seed(crate::runner::derive_seed("proxy", seed));
    crate::trace!(trace, "SEED={seed} scenario=proxy planted={bug:?}");
    let (simulated_nanos, violation) =
        match crate::scenarios::proxy::run_proxy(&mut rng, trace, Some(bug)) {
            Ok(t) => (t, None),
            Err(v) => (0, Some(v)),
        };
    SeedOutcome {
        seed,
        hash: trace.hash(),
        simulated_nanos,
        violation,
    }
}

/// The first seed below `seeds_max` at which the `proxy` scenario catches `bug`.
pub fn first_proxy_catch(
    bug: pgyard_proxy::PlantedBug,
    seeds_max: u64,
) -> Option<(u64, Violation)> {
    (0..seeds_max).find_map(|seed| {
        run_proxy_seed_with_bug(seed, bug, &mut Trace::hashing())
            .violation
            .map(|v| (seed, v))
    })
}
