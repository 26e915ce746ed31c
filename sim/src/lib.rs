//! The deterministic simulator of pgyard: one thread, one seeded RNG per seed, virtual time,
//! ordered collections only, so the same seed gives the same trace, byte for byte, anywhere.
//!
//! A [`Scenario`] turns a seed into a run: it first draws its mix of options and faults
//! (swarm testing), then drives the pure state machines of the workspace through their public
//! APIs (the same calls the adapters make), and checks its invariants as it goes. The runner
//! ([`run_seed`], [`Sweep`]) records every step in a [`Trace`] whose hash proves determinism.

pub mod merge;
pub mod planted;
pub mod publisher;
pub mod runner;
pub mod scenarios;
pub mod trace;
pub mod world;

pub use merge::{merge, Merged, ScenarioReport, ShardReport};
pub use runner::{run_seed, SeedOutcome, SeedSelection, Sweep, SweepSummary};
pub use trace::Trace;

use pgyard_types::Rng;

/// One registered simulation.
pub trait Scenario: Sync {
    /// The name used on the command line (`--scenario NAME`).
    fn name(&self) -> &'static str;
    /// One line saying what it exercises.
    fn description(&self) -> &'static str;
    /// Runs one seed: `rng` is seeded from it; every step goes into `trace`. Returns the
    /// simulated time covered (nanoseconds) or the invariant that broke.
    fn run(&self, rng: &mut Rng, trace: &mut Trace) -> Result<u64, Violation>;
}

/// An invariant that did not hold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's short name.
    pub invariant: &'static str,
    /// What was seen.
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invariant {} broken: {}", self.invariant, self.detail)
    }
}

/// Every registered scenario, in the order `all` runs them.
pub fn scenarios() -> &'static [&'static dyn Scenario] {
    scenarios::ALL
}

/// The scenario registered under `name`.
pub fn scenario(name: &str) -> Option<&'static dyn Scenario> {
    scenarios().iter().copied().find(|s| s.name() == name)
}
