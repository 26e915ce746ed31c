//! Running seeds: one seed, or a sweep over many with sharding.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::trace::{combine, COMBINE_START};
use crate::{Scenario, Trace, Violation};

/// The result of one seed of one scenario.
#[derive(Clone, Debug)]
pub struct SeedOutcome {
    /// The seed.
    pub seed: u64,
    /// The trace's hash.
    pub hash: u64,
    /// Simulated nanoseconds covered.
    pub simulated_nanos: u64,
    /// The broken invariant, if any.
    pub violation: Option<Violation>,
}

/// The RNG seed a scenario's run of `seed` starts from: distinct per scenario, so that seed 7
/// of two scenarios are independent, and stable forever.
pub fn derive_seed(scenario: &str, seed: u64) -> u64 {
    let mut h = COMBINE_START;
    for b in scenario.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

/// Runs one seed of `scenario`, writing into `trace`.
pub fn run_seed(scenario: &dyn Scenario, seed: u64, trace: &mut Trace) -> SeedOutcome {
    let mut rng = pgyard_types::rng_from_seed(derive_seed(scenario.name(), seed));
    crate::trace_line!(trace, "SEED=", seed, " scenario=", scenario.name());
    let result = scenario.run(&mut rng, trace);
    let (simulated_nanos, violation) = match result {
        Ok(t) => (t, None),
        Err(v) => {
            crate::trace!(trace, "VIOLATION {v}");
            (0, Some(v))
        }
    };
    SeedOutcome {
        seed,
        hash: trace.hash(),
        simulated_nanos,
        violation,
    }
}

/// Which seeds a sweep runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SeedSelection {
    /// Seeds `0..n`.
    Count(u64),
    /// Exactly one seed.
    One(u64),
}

/// A sweep of one scenario over a seed selection, optionally one shard of it.
#[derive(Clone, Copy, Debug)]
pub struct Sweep {
    /// The seeds.
    pub seeds: SeedSelection,
    /// `(i, n)`: run only the seeds `s` with `s % n == i`.
    pub shard: Option<(u64, u64)>,
}

/// What a sweep of one scenario found.
#[derive(Clone, Debug, Default)]
pub struct SweepSummary {
    /// Seeds run.
    pub seeds: u64,
    /// Seeds whose invariants broke, with what broke.
    pub failures: Vec<(u64, Violation)>,
    /// Simulated nanoseconds over all seeds.
    pub simulated_nanos: u64,
    /// All per-seed trace hashes folded in seed order.
    pub combined_hash: u64,
    /// Each seed's trace hash, in seed order: a shard's output carries them so that a merge
    /// can fold every shard's seeds in the unsharded order (the fold is order-dependent).
    pub seed_hashes: Vec<u64>,
}

impl Sweep {
    /// The seeds this sweep covers, in order.
    pub fn seeds(&self) -> impl Iterator<Item = u64> + '_ {
        let (first, end) = match self.seeds {
            SeedSelection::Count(n) => (0, n),
            SeedSelection::One(s) => (s, s.saturating_add(1)),
        };
        (first..end).filter(move |s| match self.shard {
            Some((i, n)) => s % n == i,
            None => true,
        })
    }

    /// Runs the sweep on this thread; `progress` is called after every seed.
    pub fn run(&self, scenario: &dyn Scenario, mut progress: impl FnMut(u64)) -> SweepSummary {
        let mut summary = SweepSummary::empty();
        for seed in self.seeds() {
            let mut trace = Trace::hashing();
            summary.add(run_seed(scenario, seed, &mut trace));
            progress(seed);
        }
        summary
    }

    /// Runs the sweep's seeds on `jobs` threads. Each seed still runs alone on one thread
    /// with its own RNG, so its trace is the one [`Sweep::run`] gives; the outcomes are
    /// folded in seed order, so the summary (combined hash included) is identical too.
    /// `progress` is called after every seed, from whichever thread ran it.
    pub fn run_jobs(
        &self,
        scenario: &dyn Scenario,
        jobs: usize,
        progress: impl Fn(u64) + Sync,
    ) -> SweepSummary {
        let seeds: Vec<u64> = self.seeds().collect();
        if jobs <= 1 || seeds.len() < 2 {
            return self.run(scenario, progress);
        }
        // Small blocks handed out from a shared cursor: seeds differ a lot in cost, so a
        // static split would leave one thread idle at the end.
        const BLOCK: usize = 32;
        let cursor = AtomicUsize::new(0);
        let parts: Vec<Vec<(usize, SeedOutcome)>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..jobs.min(seeds.len()))
                .map(|_| {
                    s.spawn(|| {
                        let mut done = Vec::new();
                        loop {
                            let start = cursor.fetch_add(BLOCK, Ordering::Relaxed);
                            if start >= seeds.len() {
                                break;
                            }
                            for (i, &seed) in seeds.iter().enumerate().skip(start).take(BLOCK) {
                                let mut trace = Trace::hashing();
                                done.push((i, run_seed(scenario, seed, &mut trace)));
                                progress(seed);
                            }
                        }
                        done
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(done) => done,
                    // A scenario that panics is a bug in the simulator: surface it as is.
                    Err(panic) => std::panic::resume_unwind(panic),
                })
                .collect()
        });
        let mut all: Vec<(usize, SeedOutcome)> = parts.into_iter().flatten().collect();
        all.sort_unstable_by_key(|(i, _)| *i);
        let mut summary = SweepSummary::empty();
        for (_, out) in all {
            summary.add(out);
        }
        summary
    }
}

impl SweepSummary {
    /// The summary of no seeds yet.
    fn empty() -> Self {
        SweepSummary {
            combined_hash: COMBINE_START,
            ..Default::default()
        }
    }

    /// Folds in the next seed's outcome (seeds must come in sweep order).
    fn add(&mut self, out: SeedOutcome) {
        self.seeds += 1;
        self.simulated_nanos = self.simulated_nanos.saturating_add(out.simulated_nanos);
        self.combined_hash = combine(self.combined_hash, out.seed, out.hash);
        self.seed_hashes.push(out.hash);
        if let Some(v) = out.violation {
            self.failures.push((out.seed, v));
        }
    }
}
