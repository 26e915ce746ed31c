//! `sim_connect/pgyard`: the `connect` scenario of the deterministic simulator, N seeds per
//! iteration on one thread (`pgyard sim --scenario connect --seeds N --jobs 1`, without the
//! CLI); `sim_connect/pgyard_all_cores`: the same seeds spread over one thread per core, as
//! `pgyard sim` runs them by default. There is no peer to compare with; the number to watch is
//! seeds per second.

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use pgyard_sim::{scenario, SeedSelection, Sweep};

/// The allocator `pgyard sim` runs with, so the bench tracks the command's speed.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Seeds per iteration.
const SEEDS: u64 = 1000;

fn bench(c: &mut Criterion) {
    let connect = scenario("connect").expect("the connect scenario is registered");
    let sweep = Sweep {
        seeds: SeedSelection::Count(SEEDS),
        shard: None,
    };
    // Every seed must pass, or the benchmark would time failure reports.
    let summary = sweep.run(connect, |_| {});
    assert!(
        summary.failures.is_empty(),
        "{:?}",
        summary.failures.first()
    );
    let mut group = c.benchmark_group("sim_connect");
    group.throughput(Throughput::Elements(SEEDS));
    group.sample_size(10);
    group.bench_function("pgyard", |b| {
        b.iter(|| black_box(sweep.run(connect, |_| {}).combined_hash))
    });
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    group.bench_function("pgyard_all_cores", |b| {
        b.iter(|| black_box(sweep.run_jobs(connect, jobs, |_| {}).combined_hash))
    });
    group.finish();
}

fn main() {
    // `criterion_main!` spelled out: its generated `pub fn` would lack a doc comment.
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
}
