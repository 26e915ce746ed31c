//! `pgyard sim`: seed sweeps over the registered scenarios.

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use pgyard_sim::{run_seed, scenario, scenarios, Scenario, SeedSelection, Sweep, Trace};
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

/// Seeds per scenario when none are asked for: enough to find bugs, well under a minute.
const DEFAULT_SEEDS: u64 = 2000;

/// Failing seeds reported in full per scenario; the rest are counted.
const FAILURES_SHOWN: usize = 3;

/// Arguments of `pgyard sim`.
#[derive(Args, Debug)]
pub struct SimArgs {
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

fn parse_shard(s: &str) -> Result<(u64, u64), String> {
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
    let mut combined = pgyard_sim::trace::COMBINE_START;
    let mut failed = false;
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
        let wall = started.elapsed();
        combined = pgyard_sim::trace::combine(combined, 0, summary.combined_hash);
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
        failed |= !summary.failures.is_empty();
        rows.push((sc.name(), summary, wall));
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }

    if args.json {
        let list: Vec<_> = rows
            .iter()
            .map(|(name, s, wall)| {
                serde_json::json!({
                    "scenario": name,
                    "seeds": s.seeds,
                    "failures": s.failures.iter().map(|(seed, v)| serde_json::json!({
                        "seed": seed, "invariant": v.invariant, "detail": v.detail,
                    })).collect::<Vec<_>>(),
                    "simulated_seconds": s.simulated_nanos as f64 / 1e9,
                    "wall_seconds": wall.as_secs_f64(),
                    "seeds_per_second": s.seeds as f64 / wall.as_secs_f64().max(1e-9),
                    "trace_hash": format!("{:016x}", s.combined_hash),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "scenarios": list, "ok": !failed })
        );
    } else {
        println!(
            "{:<12} {:>8} {:>9} {:>14} {:>10} {:>10}",
            "scenario", "seeds", "failures", "simulated", "wall", "seeds/s"
        );
        for (name, s, wall) in &rows {
            println!(
                "{:<12} {:>8} {:>9} {:>13.3}s {:>9.3}s {:>10.0}",
                name,
                s.seeds,
                s.failures.len(),
                s.simulated_nanos as f64 / 1e9,
                wall.as_secs_f64(),
                s.seeds as f64 / wall.as_secs_f64().max(1e-9)
            );
        }
        let failures: usize = rows.iter().map(|(_, s, _)| s.failures.len()).sum();
        println!(
            "{}",
            if failed {
                format!("FAILED: {failures} seed(s) broke an invariant")
            } else {
                "ok".to_string()
            }
        );
    }
    if args.trace_hash {
        println!("trace-hash {combined:016x}");
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `--trace`: every seed's full event log.
fn run_traced(chosen: &[&'static dyn Scenario], sweep: &Sweep, print_hash: bool) -> ExitCode {
    let mut combined = pgyard_sim::trace::COMBINE_START;
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
        combined = pgyard_sim::trace::combine(combined, 0, per_scenario);
    }
    if print_hash {
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
