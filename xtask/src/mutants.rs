//! `cargo xtask mutants [CRATE] [--sample N] [--jobs N] [--sim-only] [--list]`: the simulator's teeth, measured as
//! a mutation score. For each machine crate it lists every mutant cargo-mutants can make,
//! draws a fixed sample with a fixed seed (so two runs score the same mutants), and scores
//! the sample twice: with `pgyard sim` over the crate's scenarios as the only test (through
//! `crates/cli/tests/sim_mutants.rs`, feature `pgyard-cli/mutants`), and with the crate's own
//! pure tests (no real-server test). Both build with the `mutants` profile (opt-level 1, no
//! LTO). It ends with one table: caught, missed, unviable and timeout per crate and scoring,
//! and the score, (caught + timeout) / viable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::{banner, cargo, run_inherit, workspace_root};

/// Mutants drawn per crate unless `--sample` says otherwise.
const SAMPLE_DEFAULT: usize = 100;
/// The seed of the sample: the issue's number, fixed so that runs compare.
const SAMPLE_SEED: u64 = 16;
/// Seeds per scenario for every mutant: the default run's count, about a second per scenario
/// at opt-level 1 for connect and failover, a few for delayq.
const SIM_SEEDS: u64 = 2000;
/// Seconds a mutant's test may run before it counts as a timeout (the sim's own step limit
/// ends a busy loop sooner; this catches a mutant that hangs outside it).
const TEST_TIMEOUT_S: u64 = 180;
/// Seconds a mutant's build may take (the first one builds the whole workspace).
const BUILD_TIMEOUT_S: u64 = 1800;

/// A crate whose mutants are scored.
struct Target {
    /// The name `cargo xtask mutants` takes.
    name: &'static str,
    /// Its package.
    package: &'static str,
    /// The `pgyard sim` scenarios that drive it.
    scenarios: &'static str,
    /// Features its pure tests need (test targets that require them).
    features: &'static [&'static str],
    /// Test targets that need a real server, left out of the pure scoring.
    real_server_tests: &'static [&'static str],
}

const TARGETS: &[Target] = &[
    Target {
        name: "connect",
        package: "pgyard-connect",
        scenarios: "connect,failover",
        features: &["fuzzing"],
        real_server_tests: &["examples"],
    },
    Target {
        name: "slotsync",
        package: "pgyard-slotsync",
        scenarios: "slotsync",
        features: &[],
        real_server_tests: &["differential"],
    },
    Target {
        name: "delayq",
        package: "pgyard-delayq",
        scenarios: "delayq",
        features: &["fuzzing"],
        real_server_tests: &[],
    },
    Target {
        name: "proxy",
        package: "pgyard-proxy",
        scenarios: "proxy,proxy-login",
        features: &["fuzzing"],
        real_server_tests: &[],
    },
];

/// What `cargo xtask mutants` was asked.
struct Options {
    crates: Vec<&'static Target>,
    sample: usize,
    jobs: u32,
    /// Score with the simulator alone (the pure tests' score does not change with the world).
    sim_only: bool,
    /// Print the sample and stop.
    list: bool,
}

/// One scoring's outcome, as sets of mutant names.
#[derive(Default)]
struct Outcome {
    caught: BTreeSet<String>,
    missed: BTreeSet<String>,
    unviable: BTreeSet<String>,
    timeout: BTreeSet<String>,
}

/// Runs the subcommand with its arguments (after `mutants`).
pub fn run(args: &[String]) -> Result<(), String> {
    let opts = parse_args(args)?;
    ensure_cargo_mutants()?;
    let root = workspace_root();
    // Shared by every run (and by a developer's own `--profile mutants` builds): the
    // dependencies build once, only the copied workspace crates build per run.
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let out_root = target_dir.join("mutants-out");
    let mut rows = Vec::new();
    for t in &opts.crates {
        let sample = draw_sample(&root, t, opts.sample)?;
        println!(
            "{}: {} mutants sampled (seed {SAMPLE_SEED})",
            t.name,
            sample.len()
        );
        if sample.len() <= 10 || opts.list {
            for name in &sample {
                println!("  {name}");
            }
        }
        if opts.list {
            continue;
        }
        let sim = score(&root, &target_dir, &out_root, t, &sample, &opts, true)?;
        if opts.sim_only {
            rows.push((t.name, "sim", sim));
            continue;
        }
        let pure = score(&root, &target_dir, &out_root, t, &sample, &opts, false)?;
        let both = combine(&sim, &pure);
        rows.push((t.name, "sim", sim));
        rows.push((t.name, "tests", pure));
        rows.push((t.name, "tests+sim", both));
    }
    if opts.list {
        return Ok(());
    }
    println!();
    println!(
        "{:<10} {:<10} {:>7} {:>7} {:>9} {:>8} {:>7}",
        "crate", "scoring", "caught", "missed", "unviable", "timeout", "score"
    );
    for (name, scoring, o) in &rows {
        let viable = o.caught.len() + o.missed.len() + o.timeout.len();
        let detected = o.caught.len() + o.timeout.len();
        let score = if viable == 0 {
            "-".to_owned()
        } else {
            format!("{:.0} %", 100.0 * detected as f64 / viable as f64)
        };
        println!(
            "{name:<10} {scoring:<10} {:>7} {:>7} {:>9} {:>8} {score:>7}",
            o.caught.len(),
            o.missed.len(),
            o.unviable.len(),
            o.timeout.len()
        );
    }
    println!("\nmissed mutants are listed in {}", out_root.display());
    Ok(())
}

fn parse_args(args: &[String]) -> Result<Options, String> {
    let mut opts = Options {
        crates: Vec::new(),
        sample: SAMPLE_DEFAULT,
        jobs: 1,
        sim_only: false,
        list: false,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut number = |what: &str| -> Result<u64, String> {
            it.next()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| format!("mutants: {what} takes a positive integer"))
        };
        match a.as_str() {
            "--sample" => opts.sample = number("--sample")? as usize,
            "--jobs" => opts.jobs = number("--jobs")? as u32,
            "--sim-only" => opts.sim_only = true,
            "--list" => opts.list = true,
            name => match TARGETS.iter().find(|t| t.name == name) {
                Some(t) => opts.crates.push(t),
                None => {
                    let known: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
                    return Err(format!(
                        "mutants: unknown crate {name:?} (known: {})",
                        known.join(", ")
                    ));
                }
            },
        }
    }
    if opts.crates.is_empty() {
        opts.crates = TARGETS.iter().collect();
    }
    Ok(opts)
}

fn ensure_cargo_mutants() -> Result<(), String> {
    let present = Command::new(cargo())
        .args(["mutants", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !present {
        banner("installing cargo-mutants");
        run_inherit(Command::new(cargo()).args(["install", "cargo-mutants", "--locked"]))
            .map_err(|e| format!("installing cargo-mutants failed: {e}"))?;
    }
    Ok(())
}

/// Every mutant of the crate outside its test tooling (planted-only lines included), in cargo-mutants' listing order, then
/// `n` of them drawn with the fixed seed (all when there are fewer), in listing order.
fn draw_sample(root: &Path, t: &Target, n: usize) -> Result<Vec<String>, String> {
    let out = Command::new(cargo())
        .current_dir(root)
        .args(["mutants", "--list", "--package", t.package])
        .args(excludes())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo mutants --list: {e}"))?;
    if !out.status.success() {
        return Err(format!("cargo mutants --list failed: {}", out.status));
    }
    let mut planted = BTreeMap::new();
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !crate::planted_only::is_planted_only(root, l, &mut planted))
        .map(str::to_owned)
        .collect();
    Ok(pick(&all, n, SAMPLE_SEED))
}

/// `n` items of `all` chosen by a partial Fisher–Yates shuffle driven by splitmix64 from
/// `seed`, returned in their original order.
fn pick(all: &[String], n: usize, seed: u64) -> Vec<String> {
    let mut idx: Vec<usize> = (0..all.len()).collect();
    let mut state = seed;
    let take = n.min(all.len());
    for i in 0..take {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let j = i + (z % (all.len() - i) as u64) as usize;
        idx.swap(i, j);
    }
    let mut chosen = idx[..take].to_vec();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| all[i].clone()).collect()
}

/// The files left out: the fuzz harnesses and the planted-bug switches are test tooling
/// compiled only with their features, so a mutant there changes nothing the tests build.
/// Given to the run as well as to the listing: cargo-mutants lets some mutants of
/// `fuzzing/server.rs` through any `--re`.
fn excludes() -> [&'static str; 4] {
    [
        "--exclude",
        "crates/*/src/fuzzing/**",
        "--exclude",
        "**/planted.rs",
    ]
}

/// The regex that matches exactly `name` (the characters `regex::escape` escapes).
fn exact(name: &str) -> String {
    let mut re = String::with_capacity(name.len() + 8);
    re.push('^');
    for c in name.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            re.push('\\');
        }
        re.push(c);
    }
    re.push('$');
    re
}

/// Runs cargo-mutants on the sample with `pgyard sim` (`sim`) or the pure tests as the test.
fn score(
    root: &Path,
    target_dir: &Path,
    out_root: &Path,
    t: &Target,
    sample: &[String],
    opts: &Options,
    sim: bool,
) -> Result<Outcome, String> {
    let scoring = if sim { "sim" } else { "tests" };
    let out = out_root.join(t.name).join(scoring);
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    banner(&format!("{}: scoring with {scoring}", t.name));
    let mut cmd = Command::new(cargo());
    cmd.current_dir(root)
        .env("CARGO_TARGET_DIR", target_dir)
        .args(["mutants", "--no-shuffle", "--profile", "mutants"])
        .args(["--package", t.package])
        .args(excludes())
        .arg(format!("--jobs={}", opts.jobs))
        .arg(format!("--timeout={TEST_TIMEOUT_S}"))
        .arg(format!("--build-timeout={BUILD_TIMEOUT_S}"))
        .arg("--output")
        .arg(&out);
    if sim {
        // cargo-mutants builds its baseline from the mutated package, not the test package,
        // so the unmutated run is ours, in the real tree: every mutant must then fail it.
        sim_baseline(root, target_dir, t)?;
        cmd.env("PGYARD_MUTANTS_SCENARIOS", t.scenarios)
            .env("PGYARD_MUTANTS_SEEDS", SIM_SEEDS.to_string())
            .arg("--baseline=skip")
            .args(["--test-package", "pgyard-cli"])
            .args(["--features", "pgyard-cli/mutants"])
            // To the build too (`--cargo-test-arg` reaches only the run), so a mutant
            // rebuilds this one test, not all of pgyard-cli's.
            .arg("--cargo-arg=--test=sim_mutants");
    } else {
        cmd.args(["--test-package", t.package]);
        for f in t.features {
            cmd.arg(format!("--features={}/{f}", t.package));
        }
        cmd.arg("--cargo-arg=--lib");
        for test in pure_tests(root, t)? {
            cmd.arg(format!("--cargo-arg=--test={test}"));
        }
    }
    for name in sample {
        cmd.arg("--re").arg(exact(name));
    }
    // Exit status 2 means "some mutants were missed", 3 timeouts: both are results here.
    let status = cmd
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cargo mutants: {e}"))?;
    if !matches!(status.code(), Some(0 | 2 | 3)) {
        return Err(format!("cargo mutants ({}, {scoring}): {status}", t.name));
    }
    let dir = out.join("mutants.out");
    Ok(Outcome {
        caught: names(&dir.join("caught.txt"))?,
        missed: names(&dir.join("missed.txt"))?,
        unviable: names(&dir.join("unviable.txt"))?,
        timeout: names(&dir.join("timeout.txt"))?,
    })
}

/// The sim test on the unmutated tree: it must pass, else every mutant would count as caught.
fn sim_baseline(root: &Path, target_dir: &Path, t: &Target) -> Result<(), String> {
    run_inherit(
        Command::new(cargo())
            .current_dir(root)
            .env("CARGO_TARGET_DIR", target_dir)
            .env("PGYARD_MUTANTS_SCENARIOS", t.scenarios)
            .env("PGYARD_MUTANTS_SEEDS", SIM_SEEDS.to_string())
            .args([
                "test",
                "-q",
                "--profile",
                "mutants",
                "--package",
                "pgyard-cli",
            ])
            .args(["--features", "pgyard-cli/mutants", "--test", "sim_mutants"]),
    )
    .map_err(|e| format!("{}: pgyard sim fails without a mutant: {e}", t.name))
}

/// The crate's test targets (`tests/*.rs`) except those that need a real server.
fn pure_tests(root: &Path, t: &Target) -> Result<Vec<String>, String> {
    let dir = root.join("crates").join(t.name).join("tests");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut tests: Vec<String> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_suffix(".rs").map(str::to_owned)
        })
        .filter(|stem| !t.real_server_tests.contains(&stem.as_str()))
        .collect();
    tests.sort();
    Ok(tests)
}

/// The mutant names in one of cargo-mutants' outcome lists (absent: none).
fn names(path: &Path) -> Result<BTreeSet<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(str::to_owned)
            .collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeSet::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// Pure tests and sim together: a mutant either catches counts as caught (a timeout of one
/// counts as a timeout unless the other caught it); unviable as the sim build found it.
fn combine(sim: &Outcome, pure: &Outcome) -> Outcome {
    let mut o = Outcome {
        unviable: sim.unviable.clone(),
        ..Outcome::default()
    };
    let viable = sim.caught.iter().chain(&sim.missed).chain(&sim.timeout);
    for name in viable {
        if sim.caught.contains(name) || pure.caught.contains(name) {
            o.caught.insert(name.clone());
        } else if sim.timeout.contains(name) || pure.timeout.contains(name) {
            o.timeout.insert(name.clone());
        } else {
            o.missed.insert(name.clone());
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_is_fixed_sized_and_in_listing_order() {
        let all: Vec<String> = (0..500).map(|i| format!("m{i:03}")).collect();
        let a = pick(&all, 100, SAMPLE_SEED);
        assert_eq!(a.len(), 100);
        assert_eq!(a, pick(&all, 100, SAMPLE_SEED));
        assert_ne!(a, pick(&all, 100, SAMPLE_SEED + 1));
        assert!(a.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(pick(&all[..10], 100, SAMPLE_SEED), all[..10].to_vec());
    }

    #[test]
    fn a_name_becomes_an_anchored_literal_regex() {
        assert_eq!(
            exact("src/a.rs:1:2: replace f -> bool with (true)"),
            r"^src/a\.rs:1:2: replace f \-> bool with \(true\)$"
        );
    }

    #[test]
    fn either_scoring_catches_for_both() {
        let set = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
        let sim = Outcome {
            caught: set(&["a"]),
            missed: set(&["b", "c"]),
            unviable: set(&["u"]),
            timeout: set(&["d"]),
        };
        let pure = Outcome {
            caught: set(&["b", "d"]),
            missed: set(&["a", "c"]),
            ..Outcome::default()
        };
        let both = combine(&sim, &pure);
        assert_eq!(both.caught, set(&["a", "b", "d"]));
        assert_eq!(both.missed, set(&["c"]));
        assert_eq!(both.unviable, set(&["u"]));
        assert!(both.timeout.is_empty());
    }
}
