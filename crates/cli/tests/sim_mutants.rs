//! The one test `cargo xtask mutants` runs for each mutant when it scores the simulator:
//! `pgyard sim` over the scenarios in `PGYARD_MUTANTS_SCENARIOS` (comma-separated, default
//! all) with `PGYARD_MUTANTS_SEEDS` seeds each (default 2000). A mutant is caught when a seed
//! breaks an invariant. Built only with feature `mutants`, so `cargo test` never runs it.
#![cfg(feature = "mutants")]

use std::process::Command;

#[test]
fn pgyard_sim_keeps_every_invariant() {
    let scenarios = std::env::var("PGYARD_MUTANTS_SCENARIOS").unwrap_or_else(|_| "all".into());
    let seeds = std::env::var("PGYARD_MUTANTS_SEEDS").unwrap_or_else(|_| "2000".into());
    for scenario in scenarios.split(',') {
        let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["sim", "--scenario", scenario, "--seeds", &seeds])
            .output()
            .expect("pgyard runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        // The summary and the first failures are enough to say which invariant broke.
        let head: String = stdout.lines().take(40).collect::<Vec<_>>().join("\n");
        assert!(
            out.status.success(),
            "pgyard sim --scenario {scenario} --seeds {seeds}: {}\n{head}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains(scenario),
            "no summary line for {scenario}:\n{head}"
        );
    }
}
