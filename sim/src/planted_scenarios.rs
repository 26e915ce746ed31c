//! Planted bugs of the `delayq` and `slotsync` scenarios. They live in the scenarios' use of
//! the engines (never in `crates/delayq` or `crates/slotsync`): the registered scenarios always
//! pass `None`; with feature `planted-bugs`, `planted::run_seed_with_bug` and
//! `planted::first_catch` run the same scenario code with one bug switched on, to prove the
//! invariants have teeth.

/// A bug a scenario can plant in its own driving code.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScenarioBug {
    /// `delayq`: the subscriber reports the queue's write position as flushed, i.e. it
    /// confirms received data before the queue made it durable (flush before fsync).
    ReportWriteAsFlush,
    /// `slotsync`: the failover walsender ignores `synchronized_standby_slots` and sends
    /// everything the primary flushed, past what the standby has.
    IgnoreStandbySlots,
    /// `slotsync`: the readiness check is not told what the walsender has sent, so it judges
    /// by the slot's `confirmed_flush_lsn`, which lags what the subscriber received.
    CheckWithoutSentLsn,
}

/// Every scenario bug with the scenario that should catch it, in a fixed order.
pub const ALL: &[(ScenarioBug, &str)] = &[
    (ScenarioBug::ReportWriteAsFlush, "delayq"),
    (ScenarioBug::IgnoreStandbySlots, "slotsync"),
    (ScenarioBug::CheckWithoutSentLsn, "slotsync"),
];

#[cfg(feature = "planted-bugs")]
mod runner {
    use super::ScenarioBug;
    use crate::runner::SeedOutcome;
    use crate::scenarios::{delayq, slotsync};
    use crate::trace::Trace;
    use crate::Violation;

    /// Runs `seed` of scenario `name` (`delayq` or `slotsync`) with `bug` switched on; the RNG
    /// is seeded as the runner seeds the registered scenario. `None` for an unknown name.
    pub fn run_seed_with_bug(
        name: &str,
        seed: u64,
        bug: ScenarioBug,
        trace: &mut Trace,
    ) -> Option<SeedOutcome> {
        let mut rng = pgyard_types::rng_from_seed(crate::runner::derive_seed(name, seed));
        crate::trace!(trace, "SEED={seed} scenario={name} planted={bug:?}");
        let result: Result<u64, Violation> = match name {
            "delayq" => delayq::run_delayq(&mut rng, trace, Some(bug)),
            "slotsync" => slotsync::run_slotsync(&mut rng, trace, Some(bug)).map(|r| r.nanos),
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

    /// The first seed below `seeds_max` at which scenario `name` catches `bug`.
    pub fn first_catch(name: &str, bug: ScenarioBug, seeds_max: u64) -> Option<(u64, Violation)> {
        (0..seeds_max).find_map(|seed| {
            run_seed_with_bug(name, seed, bug, &mut Trace::hashing())?
                .violation
                .map(|v| (seed, v))
        })
    }
}

#[cfg(feature = "planted-bugs")]
pub use runner::{first_catch, run_seed_with_bug};
