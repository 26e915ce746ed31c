//! `pgyard sim`: seed sweeps over the registered scenarios.

use clap::{Args, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};
use pgyard_sim::trace::combine_run;
use pgyard_sim::{
    run_seed, scenario, scenarios, Scenario, ScenarioReport, SeedSelection, Sweep, Trace,
};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

/// Seeds per scenario when none are asked for: enough to find bugs, well under a minute.
const DEFAULT_SEEDS: u64 = 2000;

/// Failing seeds reported in full per scenario; the rest are counted.
const FAILURES_SHOWN: usize = 3;

/// Arguments of `pgyard sim`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SimArgs {
    /// What to do instead of running a sweep.
    #[command(subcommand)]
    command: Option<SimCommand>,
    /// Scenario to run, or `all`.
    #[arg(long, default_value = "all")]
    scenario: String,
    /// Run seeds 0..N.
    #[arg(long, conflicts_with = "seed")]
    seeds: Option<u64>,
    /// Run exactly this seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Run every N-th seed starting at I (`I/N`), to spread a sweep over machines.
    #[arg(long, value_parser = parse_shard)]
    shard: Option<(u64, u64)>,
    /// Print each seed's event log.
    #[arg(long)]
    trace: bool,
    /// Print the trace hash as the last line.
    #[arg(long)]
    trace_hash: bool,
    /// Machine-readable summary.
    #[arg(long)]
    json: bool,
    /// Threads to spread the seeds over (default: one per core). Every seed runs alone on
    /// one thread; results and hashes do not depend on this.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    jobs: Option<u64>,
}

/// `pgyard sim` subcommands.
#[derive(Subcommand, Debug)]
pub enum SimCommand {
    /// Fold the `--json` reports of every shard of a sweep into the unsharded run's summary.
    Merge(crate::sim_merge::MergeArgs),
}

/// Parses `I/N` (as `--shard` takes it and a shard's report records it).
pub(crate) fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let (i, n) = s.split_once('/').ok_or("expected I/N, e.g. 0/4")?;
    let i: u64 = i.parse().map_err(|_| format!("bad shard index {i:?}"))?;
    let n: u64 = n.parse().map_err(|_| format!("bad shard count {n:?}"))?;
    if n == 0 || i >= n {
        return Err(format!("shard {i}/{n}: need 0 <= I < N"));
    }
    Ok((i, n))
}

/// Runs `pgyard sim`.
pub fn run(args: SimArgs) -> ExitCode {
    if let Some(SimCommand::Merge(merge)) = args.command {
        return crate::sim_merge::run(merge);
    }
    let chosen: Vec<&'static dyn Scenario> = if args.scenario == "all" {
        scenarios().to_vec()
    } else {
        match scenario(&args.scenario) {
            Some(s) => vec![s],
            None => {
                let names: Vec<_> = scenarios().iter().map(|s| s.name()).collect();
                eprintln!(
                    "unknown scenario {:?}; known: all, {}",
                    args.scenario,
                    names.join(", ")
                );
                return ExitCode::from(2);
            }
        }
    };
    let seeds = match args.seed {
        Some(s) => SeedSelection::One(s),
        None => SeedSelection::Count(args.seeds.unwrap_or(DEFAULT_SEEDS)),
    };
    let sweep = Sweep {
        seeds,
        shard: args.shard,
    };
    if args.trace {
        return run_traced(&chosen, &sweep, args.trace_hash);
    }

    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, |n| n.get()),
        |j| j as usize,
    );
    let total: u64 = sweep.seeds().count() as u64 * chosen.len() as u64;
    let bar = if std::io::stderr().is_terminal() && !args.json {
        let bar = ProgressBar::new(total);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>10} [{bar:40}] {pos}/{len} seeds {per_sec}")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        Some(bar)
    } else {
        None
    };

    let mut rows = Vec::new();
    for sc in &chosen {
        if let Some(bar) = &bar {
            bar.set_prefix(sc.name());
        }
        let started = Instant::now();
        let summary = sweep.run_jobs(*sc, jobs, |_| {
            if let Some(bar) = &bar {
                bar.inc(1);
            }
        });
        let wall = started.elapsed().as_secs_f64();
        for (seed, violation) in summary.failures.iter().take(FAILURES_SHOWN) {
            report_failure(*sc, *seed, violation);
        }
        if summary.failures.len() > FAILURES_SHOWN {
            eprintln!(
                "... and {} more failing seeds of {}",
                summary.failures.len() - FAILURES_SHOWN,
                sc.name()
            );
        }
        rows.push(ScenarioReport::from_sweep(sc.name(), summary, wall));
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }

    let failed = rows.iter().any(|r| !r.failures.is_empty());
    if args.json {
        let sweep_json = sweep_json(sweep.seeds, sweep.shard);
        // A shard's report carries its seeds' hashes so that `sim merge` can fold them in the
        // unsharded order; an unsharded report has no use for them.
        let with_hashes = sweep.shard.is_some();
        println!("{}", report_json(sweep_json, &rows, with_hashes));
    } else {
        print_table(&rows);
    }
    if args.trace_hash {
        let combined = combine_run(rows.iter().map(|r| r.trace_hash));
        println!("trace-hash {combined:016x}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The `sweep` member of a JSON report: which seeds, which shard (`"I/N"`, or null).
pub(crate) fn sweep_json(seeds: SeedSelection, shard: Option<(u64, u64)>) -> Value {
    let shard = shard.map_or(Value::Null, |(i, n)| json!(format!("{i}/{n}")));
    match seeds {
        SeedSelection::Count(n) => json!({ "seeds": n, "shard": shard }),
        SeedSelection::One(s) => json!({ "seed": s, "shard": shard }),
    }
}

/// The `--json` report; `with_hashes` adds each scenario's per-seed hashes as one string of
/// 16 hex digits per seed, in seed order (`docs/simulation.md`, "Sharding a sweep over
/// machines").
pub(crate) fn report_json(sweep: Value, rows: &[ScenarioReport], with_hashes: bool) -> Value {
    let list: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut v = json!({
                "scenario": r.scenario,
                "seeds": r.seeds,
                "failures": r.failures.iter().map(|f| json!({
                    "seed": f.seed, "invariant": f.invariant, "detail": f.detail,
                })).collect::<Vec<_>>(),
                "simulated_seconds": r.simulated_nanos as f64 / 1e9,
                "simulated_nanos": r.simulated_nanos,
                "wall_seconds": r.wall_seconds,
                "seeds_per_second": r.seeds as f64 / r.wall_seconds.max(1e-9),
                "trace_hash": format!("{:016x}", r.trace_hash),
            });
            if with_hashes {
                let mut hex = String::with_capacity(r.seed_hashes.len() * 16);
                for h in &r.seed_hashes {
                    // Writing into a String cannot fail.
                    let _ = write!(hex, "{h:016x}");
                }
                v["seed_hashes"] = Value::String(hex);
            }
            v
        })
        .collect();
    let ok = rows.iter().all(|r| r.failures.is_empty());
    json!({ "sweep": sweep, "scenarios": list, "ok": ok })
}

/// The human summary: one row per scenario, then `ok` or how many seeds failed.
pub(crate) fn print_table(rows: &[ScenarioReport]) {
    println!(
        "{:<12} {:>8} {:>9} {:>14} {:>10} {:>10}",
        "scenario", "seeds", "failures", "simulated", "wall", "seeds/s"
    );
    for r in rows {
        println!(
            "{:<12} {:>8} {:>9} {:>13.3}s {:>9.3}s {:>10.0}",
            r.scenario,
            r.seeds,
            r.failures.len(),
            r.simulated_nanos as f64 / 1e9,
            r.wall_seconds,
            r.seeds as f64 / r.wall_seconds.max(1e-9)
        );
    }
    let failures: usize = rows.iter().map(|r| r.failures.len()).sum();
    if failures > 0 {
        println!("FAILED: {failures} seed(s) broke an invariant");
    } else {
        println!("ok");
    }
}

/// `--trace`: every seed's full event log.
fn run_traced(chosen: &[&'static dyn Scenario], sweep: &Sweep, print_hash: bool) -> ExitCode {
    let mut per_scenario_hashes = Vec::new();
    let mut failed = false;
    for sc in chosen {
        let mut per_scenario = pgyard_sim::trace::COMBINE_START;
        for seed in sweep.seeds() {
            let mut trace = Trace::recording();
            let out = run_seed(*sc, seed, &mut trace);
            for line in trace.lines() {
                println!("{line}");
            }
            per_scenario = pgyard_sim::trace::combine(per_scenario, seed, out.hash);
            if let Some(v) = &out.violation {
                failed = true;
                report_failure(*sc, seed, v);
            }
        }
        per_scenario_hashes.push(per_scenario);
    }
    if print_hash {
        let combined = combine_run(per_scenario_hashes);
        println!("trace-hash {combined:016x}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// A failing seed: the invariant, the end of its trace (re-run with recording, which is
/// deterministic) and the command that replays it.
fn report_failure(sc: &dyn Scenario, seed: u64, violation: &pgyard_sim::Violation) {
    let mut trace = Trace::recording();
    run_seed(sc, seed, &mut trace);
    let lines = trace.lines();
    eprintln!("seed {seed} of scenario {}: {violation}", sc.name());
    eprintln!("  last steps:");
    for line in &lines[lines.len().saturating_sub(12)..] {
        eprintln!("    {line}");
    }
    eprintln!(
        "  replay: pgyard sim --scenario {} --seed {seed} --trace",
        sc.name()
    );
}
