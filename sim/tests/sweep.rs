//! Seed sweeps of every scenario, determinism, and shard independence.

use pgyard_sim::{run_seed, scenarios, SeedSelection, Sweep, Trace};

/// More seeds in release mode (what `cargo xtask test` runs), fewer in debug.
const SEEDS: u64 = if cfg!(debug_assertions) { 300 } else { 5000 };

#[test]
fn every_scenario_passes_a_sweep() {
    for sc in scenarios() {
        let sweep = Sweep {
            seeds: SeedSelection::Count(SEEDS),
            shard: None,
        };
        let summary = sweep.run(*sc, |_| {});
        assert_eq!(summary.seeds, SEEDS);
        assert!(
            summary.failures.is_empty(),
            "{}: {} failing seeds, first: {:?}",
            sc.name(),
            summary.failures.len(),
            summary.failures.first()
        );
    }
}

#[test]
fn same_seed_same_trace() {
    for sc in scenarios() {
        for seed in [0, 1, 17, 4242, u64::MAX] {
            let mut a = Trace::recording();
            let mut b = Trace::hashing();
            let ra = run_seed(*sc, seed, &mut a);
            let rb = run_seed(*sc, seed, &mut b);
            assert_eq!(ra.hash, rb.hash, "{} seed {seed}", sc.name());
            assert!(
                a.steps() > 2,
                "{} seed {seed} recorded too little",
                sc.name()
            );
            assert_eq!(a.steps(), b.steps());
        }
        // Different seeds explore different inputs.
        let h: std::collections::BTreeSet<u64> = (0..20)
            .map(|s| run_seed(*sc, s, &mut Trace::hashing()).hash)
            .collect();
        assert!(h.len() > 15, "{}: seeds collide: {}", sc.name(), h.len());
    }
}

#[test]
fn shards_cover_the_seeds_once_with_the_same_hashes() {
    for sc in scenarios() {
        let whole = Sweep {
            seeds: SeedSelection::Count(40),
            shard: None,
        };
        let mut from_shards = Vec::new();
        for i in 0..3 {
            let part = Sweep {
                seeds: SeedSelection::Count(40),
                shard: Some((i, 3)),
            };
            for seed in part.seeds() {
                from_shards.push((seed, run_seed(*sc, seed, &mut Trace::hashing()).hash));
            }
        }
        from_shards.sort();
        let direct: Vec<_> = whole
            .seeds()
            .map(|seed| (seed, run_seed(*sc, seed, &mut Trace::hashing()).hash))
            .collect();
        assert_eq!(from_shards, direct, "{}", sc.name());
    }
}

/// The trace format is part of the replay contract: a change to it must be deliberate.
#[test]
fn trace_of_a_known_seed_starts_with_its_header_and_mix() {
    let sc = pgyard_sim::scenario("conninfo").expect("registered");
    let mut t = Trace::recording();
    run_seed(sc, 7, &mut t);
    assert_eq!(t.lines()[0], "SEED=7 scenario=conninfo");
    assert!(t.lines()[1].starts_with("mix Mix {"), "{}", t.lines()[1]);
}

#[test]
fn threads_give_the_summary_of_one_thread() {
    for sc in scenarios() {
        let sweep = Sweep {
            seeds: SeedSelection::Count(70),
            shard: Some((1, 2)),
        };
        let one = sweep.run(*sc, |_| {});
        let calls = std::sync::atomic::AtomicU64::new(0);
        let many = sweep.run_jobs(*sc, 3, |_| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(one.seeds, 35, "{}", sc.name());
        assert_eq!(many.seeds, one.seeds, "{}", sc.name());
        assert_eq!(calls.into_inner(), one.seeds, "{}", sc.name());
        assert_eq!(many.combined_hash, one.combined_hash, "{}", sc.name());
        assert_eq!(many.simulated_nanos, one.simulated_nanos, "{}", sc.name());
        assert_eq!(many.failures, one.failures, "{}", sc.name());
    }
}
