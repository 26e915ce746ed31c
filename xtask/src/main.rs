//! Project automation for pgyard.
//!
//! - `cargo xtask test`: provisions PostgreSQL 18 and the unprivileged server account through
//!   `pgyard-testkit`, then runs, in order, `cargo fmt --all --check`, `cargo clippy --workspace
//!   --all-targets -- -D warnings`, `cargo test --workspace --no-fail-fast` and `cargo test -p
//!   pgyard-sim --release --features planted-bugs --no-fail-fast`. Every step runs even if an
//!   earlier one failed; the run then exits non-zero and names each failed step. A
//!   provisioning failure stops it at once. The summary ends with every binary's libtest
//!   line and the ten slowest test binaries.
//! - `cargo xtask provision`: only the provisioning part of `test`.
//! - `cargo xtask publish-check`: [`PUBLISH_CHECK`], one `cargo publish --dry-run` over
//!   every library crate together.
//! - `cargo xtask fuzz [SECONDS]`: runs every cargo-fuzz target in `fuzz/` for SECONDS each
//!   (default 60), installing cargo-fuzz first if it is missing.
//! - `cargo xtask bench-proxy [SECONDS] [MODES] [ROUNDS]`: pgbench through PgBouncer and `pgyard proxy` beside
//!   a direct connection (see `bench_proxy.rs`).
//! - `cargo xtask pgo`: `pgyard` built with profile-guided optimisation for the proxy, the
//!   build to deploy it with (see `pgo.rs`).
//! - `cargo xtask cache-proxy [MODES]`: instructions and level-1 cache misses per transaction
//!   of both proxies under cachegrind (see `cache_proxy.rs`).
//! - `cargo xtask bench-delayq [SCALE] [WORKLOADS]`: a subscriber's catch-up, native logical replication
//!   against `pgyard delayq run` (see `bench_delayq.rs`).
//! - `cargo xtask mutants [CRATE…] [--sample N] [--jobs N]`: the mutation score of the
//!   simulator and of each machine crate's pure tests on a fixed sample (see `mutants.rs`).

mod bench_delayq;
mod bench_proxy;
mod cache_proxy;
mod mutants;
mod pgo;
mod planted_only;

/// A child process killed on drop (the benchmarks' servers and proxies).
pub(crate) struct Running(pub std::process::Child);

impl Running {
    /// Sends SIGINT (on which both proxies end their event loop and exit normally: cachegrind
    /// and the PGO instrumentation write their files then) and waits up to `timeout` for the
    /// process to end; `what` names it in the error.
    pub(crate) fn interrupt(
        &mut self,
        what: &str,
        timeout: Duration,
    ) -> Result<std::process::ExitStatus, String> {
        let pid = self.0.id().to_string();
        run_inherit(Command::new("kill").args(["-INT", &pid]))?;
        let deadline = Instant::now() + timeout;
        loop {
            match self.0.try_wait().map_err(|e| e.to_string())? {
                Some(status) => return Ok(status),
                None if Instant::now() > deadline => {
                    return Err(format!("{what} did not stop after SIGINT"))
                }
                None => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Builds `pgyard` in release mode and says where it is.
pub(crate) fn build_pgyard_release() -> Result<PathBuf, String> {
    let root = workspace_root();
    run_inherit(Command::new(cargo()).current_dir(&root).args([
        "build",
        "--release",
        "-q",
        "-p",
        "pgyard-cli",
    ]))
    .map_err(|e| format!("building pgyard: {e}"))?;
    Ok(root.join("target/release/pgyard"))
}

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test              provision PostgreSQL 18, then fmt, clippy, cargo test (debug) and the
                    simulator's tests in release mode; every step runs, failures are
                    listed at the end
  provision         only install PostgreSQL 18 and the server account
  publish-check     cargo publish --dry-run --workspace --allow-dirty: package and verify
                    every library crate together, upload nothing
  fuzz [SECONDS]    run every cargo-fuzz target in fuzz/ for SECONDS each (default 60)
  bench-proxy [SECONDS] [MODES] [ROUNDS]
                    pgbench -S directly, through PgBouncer and through pgyard proxy
                    (the release build, and a build with profile-guided optimisation
                    trained on the proxy's load: target/pgo), SECONDS per run
                    (default 15), medians of ROUNDS (odd, default 3);
                    MODES is a comma-separated list of simple, extended, prepared
                    (default all three)
  pgo               build pgyard with profile-guided optimisation, trained on the proxy's
                    load against a PostgreSQL 18 of its own (the build to deploy pgyard
                    proxy with; bench-proxy measures it as pgyard-pgo); prints its path
  cache-proxy [MODES]
                    instructions and level-1 cache misses per transaction of pgyard proxy
                    (both builds, as in bench-proxy) and PgBouncer under valgrind's
                    cachegrind (fixed 32 KiB caches), for MODES as in bench-proxy
                    (default simple,extended)
  bench-delayq [SCALE] [WORKLOADS]
                    catch-up of native logical replication and pgyard delayq run on the
                    same WAL: (a) 100k×SCALE single-row inserts, (b) 20 transactions of
                    50k×SCALE rows, (c) 20k×SCALE pgbench TPC-B transactions (default
                    SCALE 1, WORKLOADS abc), with each consumer's CPU seconds
  mutants [CRATE…] [--sample N] [--jobs N]
                    cargo-mutants on connect, slotsync, delayq and proxy (or the CRATEs
                    named): a fixed seeded sample of N mutants per crate (default 100),
                    scored with `pgyard sim` alone and with the crate's pure tests; prints
                    caught/missed/unviable/timeout and the score per crate (about an hour)";

const FUZZ_SECONDS_DEFAULT: u64 = 60;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("test") if args.len() == 1 => test(),
        Some("provision") if args.len() == 1 => provision(),
        Some("publish-check") if args.len() == 1 => publish_check(),
        Some("fuzz") if args.len() <= 2 => match args.get(1).map(|s| s.parse::<u64>()) {
            None => fuzz(FUZZ_SECONDS_DEFAULT),
            Some(Ok(seconds)) if seconds > 0 => fuzz(seconds),
            Some(_) => Err(format!(
                "fuzz: SECONDS must be a positive integer\n\n{USAGE}"
            )),
        },
        Some("bench-proxy") if args.len() <= 4 => bench_proxy_args(&args[1..]),
        Some("pgo") if args.len() == 1 => pgo::standalone(),
        Some("cache-proxy") if args.len() <= 2 => {
            proxy_modes("cache-proxy", args.get(1), "simple,extended")
                .and_then(|modes| cache_proxy::run(&modes))
        }
        Some("bench-delayq") if args.len() <= 3 => {
            let which = args.get(2).map_or("abc", String::as_str);
            match args.get(1).map(|s| s.parse::<u64>()) {
                _ if which.is_empty() || !which.chars().all(|c| "abc".contains(c)) => Err(format!(
                    "bench-delayq: WORKLOADS is some of a, b, c\n\n{USAGE}"
                )),
                None => bench_delayq::run(1, which),
                Some(Ok(scale)) if scale > 0 => bench_delayq::run(scale, which),
                Some(_) => Err(format!(
                    "bench-delayq: SCALE must be a positive integer\n\n{USAGE}"
                )),
            }
        }
        Some("mutants") => mutants::run(&args[1..]),
        Some("help" | "--help" | "-h") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(USAGE.to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            let _ = io::stdout().flush();
            eprintln!("xtask: {message}");
            ExitCode::FAILURE
        }
    }
}

/// One step's outcome, kept for the summary at the end.
struct StepReport {
    name: String,
    elapsed: Duration,
    /// `None` when the step passed, else why it failed.
    failure: Option<String>,
}

/// A proxy benchmark's MODES argument (`default` when absent), checked.
fn proxy_modes<'a>(
    command: &str,
    arg: Option<&'a String>,
    default: &'a str,
) -> Result<Vec<&'a str>, String> {
    let modes: Vec<&str> = arg.map_or(default, String::as_str).split(',').collect();
    if modes
        .iter()
        .all(|m| ["simple", "extended", "prepared"].contains(m))
    {
        Ok(modes)
    } else {
        Err(format!(
            "{command}: MODES is a comma-separated list of simple, extended, prepared\n\n{USAGE}"
        ))
    }
}

/// `bench-proxy [SECONDS] [MODES] [ROUNDS]`, checked before anything starts.
fn bench_proxy_args(args: &[String]) -> Result<(), String> {
    let modes = proxy_modes("bench-proxy", args.get(1), "simple,extended,prepared")?;
    let seconds = match args.first().map(|s| s.parse::<u64>()) {
        None => 15,
        Some(Ok(seconds)) if seconds > 0 => seconds,
        Some(_) => {
            return Err(format!(
                "bench-proxy: SECONDS must be a positive integer\n\n{USAGE}"
            ))
        }
    };
    // An odd count, so that the median is one round's figure.
    let rounds = match args.get(2).map(|s| s.parse::<usize>()) {
        None => bench_proxy::ROUNDS_DEFAULT,
        Some(Ok(rounds)) if rounds % 2 == 1 => rounds,
        Some(_) => {
            return Err(format!(
                "bench-proxy: ROUNDS must be a positive odd integer\n\n{USAGE}"
            ))
        }
    };
    bench_proxy::run(seconds, &modes, rounds)
}

/// Provisions, then runs every step even after a failure (so one CI run shows fmt, clippy and
/// test results together), and fails at the end naming each failed step.
fn test() -> Result<(), String> {
    let root = workspace_root();
    let started = Instant::now();
    let mut reports = Vec::new();

    let t = Instant::now();
    provision()?;
    reports.push(StepReport {
        name: "provision".into(),
        elapsed: t.elapsed(),
        failure: None,
    });

    let mut test_log = TestLog::default();
    let steps: [(&str, &[&str], bool); 7] = [
        ("cargo fmt", &["fmt", "--all", "--check"], false),
        // With RUSTDOCFLAGS=-D warnings (set below): a broken intra-doc link fails the run.
        ("cargo doc", &["doc", "--workspace", "--no-deps"], false),
        (
            "cargo clippy",
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
            false,
        ),
        // --no-fail-fast: one failing test binary must not hide the results of the others.
        (
            "cargo test (debug)",
            &["test", "--workspace", "--no-fail-fast"],
            true,
        ),
        // The connect machine's planted bugs, each shown to change an outcome on its own
        // (the feature is off in the workspace run above, so these ran nowhere before
        // session 43).
        (
            "cargo test -p pgyard-connect --features planted-bugs --test planted",
            &[
                "test",
                "-p",
                "pgyard-connect",
                "--features",
                "planted-bugs",
                "--test",
                "planted",
                "--no-fail-fast",
            ],
            true,
        ),
        // The apply machine's unit tests with its planted bug compiled in (one of them plants
        // it), for the same reason.
        (
            "cargo test -p pgyard-delayq --features planted-bugs --lib",
            &[
                "test",
                "-p",
                "pgyard-delayq",
                "--features",
                "planted-bugs",
                "--lib",
                "--no-fail-fast",
            ],
            true,
        ),
        // The release sweeps run with the planted bugs compiled in (each off unless a test
        // switches it on), so the same run shows the bugs caught and everything else passing.
        (
            "cargo test -p pgyard-sim --release --features planted-bugs",
            &[
                "test",
                "-p",
                "pgyard-sim",
                "--release",
                "--features",
                "planted-bugs",
                "--no-fail-fast",
                "--",
                // Shows the `planted bug NAME caught at seed S` lines in the CI log.
                "--nocapture",
            ],
            true,
        ),
    ];
    for (name, args, is_test) in steps {
        let t = Instant::now();
        let command = format!("cargo {}", args.join(" "));
        banner(&format!("{name}: {command}"));
        let mut cmd = Command::new(cargo());
        cmd.args(args).current_dir(&root);
        if args.first() == Some(&"doc") {
            cmd.env("RUSTDOCFLAGS", "-D warnings");
        }
        let outcome = if is_test {
            test_log.suffix = if args.contains(&"--release") {
                " (release)"
            } else {
                ""
            };
            run_collecting_summary(&mut cmd, &mut test_log)
        } else {
            run_inherit(&mut cmd)
        };
        reports.push(StepReport {
            name: name.into(),
            elapsed: t.elapsed(),
            failure: outcome
                .err()
                .map(|why| format!("{why} (command: {command})")),
        });
    }
    print_summary(&reports, &test_log.results);
    let failed: Vec<String> = reports
        .iter()
        .filter_map(|r| {
            r.failure
                .as_ref()
                .map(|why| format!("step `{}` failed: {why}", r.name))
        })
        .collect();
    if failed.is_empty() {
        println!("xtask: all steps passed in {}", seconds(started.elapsed()));
        Ok(())
    } else {
        Err(failed.join("\nxtask: "))
    }
}

/// The arguments of `cargo xtask publish-check`. Cargo publishes a set of workspace crates in
/// one command: it packages each, then builds each package against the packaged copies of the
/// others (as crates.io would serve them), and `--dry-run` stops before the upload. The
/// members marked `publish = false` (the CLI, the test kit, the simulator, the benchmarks and
/// this crate) are left out by cargo itself, so a library crate added under `crates/` is
/// checked without changing this line; `tests/publish.rs` holds that set to what it should be.
/// `--allow-dirty` lets it check work not committed yet.
const PUBLISH_CHECK: [&str; 4] = ["publish", "--dry-run", "--workspace", "--allow-dirty"];

fn publish_check() -> Result<(), String> {
    let command = format!("cargo {}", PUBLISH_CHECK.join(" "));
    banner(&command);
    run_inherit(
        Command::new(cargo())
            .current_dir(workspace_root())
            .args(PUBLISH_CHECK),
    )
    .map_err(|why| format!("{command} failed: {why}"))
}

fn provision() -> Result<(), String> {
    banner("provision");
    let install = pgyard_testkit::postgres::ensure_installed()
        .map_err(|e| format!("step `provision` failed: installing PostgreSQL 18: {e}"))?;
    println!(
        "PostgreSQL 18 ({}) is in {}",
        pgyard_testkit::postgres::PACKAGE,
        install.bin_dir.display()
    );
    println!("libpq 18: {}", install.libpq.display());
    let v17 = pgyard_testkit::postgres::Major::V17;
    let pg17 = pgyard_testkit::postgres::ensure_major(v17)
        .map_err(|e| format!("step `provision` failed: installing PostgreSQL 17: {e}"))?;
    println!(
        "PostgreSQL 17 ({}) is in {} (slot sync's version-differential tests)",
        v17.package(),
        pg17.bin_dir.display()
    );

    let user = pgyard_testkit::cluster::ensure_server_user()
        .map_err(|e| format!("step `provision` failed: server account: {e}"))?;
    println!(
        "servers run as `{}` (uid {}, gid {}){}",
        user.name,
        user.uid,
        user.gid,
        if user.created {
            ", account created now"
        } else {
            ", account already present"
        }
    );

    // The golden captures drive Debian's psql, pgbench and pg_recvlogical.
    let tools_present = |path: &std::path::Path| {
        let bin = path
            .parent()
            .map(std::path::Path::to_path_buf)
            .unwrap_or_default();
        ["pgbench", "pg_recvlogical"]
            .iter()
            .all(|t| bin.join(t).is_file())
    };
    match pgyard_testkit::cluster::psql_path() {
        Some(path) if tools_present(&path) => {
            println!("psql, pgbench, pg_recvlogical: {}", path.display())
        }
        _ => {
            println!("PostgreSQL client tools missing; installing them with apt-get");
            install_psql().map_err(|e| format!("step `provision` failed: installing psql: {e}"))?;
            let path = pgyard_testkit::cluster::psql_path().ok_or(
                "step `provision` failed: psql is still missing after installing postgresql-client",
            )?;
            if !tools_present(&path) {
                return Err(
                    "step `provision` failed: pgbench or pg_recvlogical still missing".into(),
                );
            }
            println!("psql, pgbench, pg_recvlogical: {}", path.display());
        }
    }
    Ok(())
}

fn install_psql() -> Result<(), String> {
    run_inherit(
        Command::new("apt-get")
            .args(["update", "-q"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    run_inherit(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            // pgbench ships in the server package; pg_recvlogical and psql in the client.
            .args(["postgresql-client-15", "postgresql-15"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn fuzz(seconds: u64) -> Result<(), String> {
    let root = workspace_root();
    let fuzz_dir = root.join("fuzz");
    if !fuzz_dir.join("Cargo.toml").exists() {
        println!(
            "xtask: {} has no Cargo.toml: no fuzz targets to run",
            fuzz_dir.display()
        );
        return Ok(());
    }
    let has_cargo_fuzz = Command::new(cargo())
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !has_cargo_fuzz {
        banner("installing cargo-fuzz");
        run_inherit(Command::new(cargo()).args(["install", "cargo-fuzz", "--locked"]))
            .map_err(|e| format!("installing cargo-fuzz failed: {e}"))?;
    }
    let listed = Command::new(cargo())
        .args(["fuzz", "list", "--fuzz-dir"])
        .arg(&fuzz_dir)
        .current_dir(&root)
        .env("RUSTC_BOOTSTRAP", "1")
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cargo fuzz list: {e}"))?;
    if !listed.status.success() {
        return Err(format!("cargo fuzz list failed ({})", listed.status));
    }
    let targets: Vec<String> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if targets.is_empty() {
        println!("xtask: cargo fuzz list found no targets");
        return Ok(());
    }
    println!(
        "xtask: fuzzing {} target(s) for {seconds} s each: {}",
        targets.len(),
        targets.join(", ")
    );
    let max_total_time = format!("-max_total_time={seconds}");
    for target in &targets {
        banner(&format!("fuzz {target} ({seconds} s)"));
        run_inherit(
            Command::new(cargo())
                .args(["fuzz", "run", "--fuzz-dir"])
                .arg(&fuzz_dir)
                .args([target.as_str(), "--", &max_total_time])
                .current_dir(&root)
                .env("RUSTC_BOOTSTRAP", "1"),
        )
        .map_err(|e| format!("fuzz target `{target}` failed: {e}"))?;
    }
    println!(
        "xtask: {} fuzz target(s) ran without findings",
        targets.len()
    );
    Ok(())
}

fn print_summary(reports: &[StepReport], results: &[BinaryResult]) {
    println!();
    println!("xtask summary:");
    for report in reports {
        let verdict = if report.failure.is_some() {
            "FAILED"
        } else {
            "ok"
        };
        println!(
            "  {verdict:<6} {:<40} {:>8}",
            report.name,
            seconds(report.elapsed)
        );
    }
    if results.is_empty() {
        return;
    }
    let (mut passed, mut failed, mut ignored) = (0u64, 0u64, 0u64);
    for r in results {
        passed += count_before(&r.summary, " passed");
        failed += count_before(&r.summary, " failed");
        ignored += count_before(&r.summary, " ignored");
    }
    println!(
        "  {} test runs: {passed} passed, {failed} failed, {ignored} ignored",
        results.len()
    );
    for r in results {
        println!("{}  [{}]", r.summary, r.binary);
    }
    // CI has 90 minutes on two cores: keep the biggest costs in sight.
    let mut slowest: Vec<&BinaryResult> = results.iter().filter(|r| r.elapsed.is_some()).collect();
    slowest.sort_by_key(|r| std::cmp::Reverse(r.elapsed));
    println!("ten slowest test binaries:");
    for r in slowest.iter().take(10) {
        println!(
            "  {:>8}  {}",
            seconds(r.elapsed.unwrap_or_default()),
            r.binary
        );
    }
    // The plain closing line CI reads: totals over every test binary.
    println!("tests: {passed} passed, {failed} failed");
}

/// The number written just before `word` in a libtest summary line (`... 12 passed; ...`).
fn count_before(line: &str, word: &str) -> u64 {
    line.find(word)
        .and_then(|end| line[..end].rsplit([' ', '.']).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

fn banner(text: &str) {
    println!();
    println!("==> {text}");
    let _ = io::stdout().flush();
}

fn run_inherit(cmd: &mut Command) -> Result<(), String> {
    let status = cmd
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("could not run {:?}: {e}", cmd.get_program()))?;
    if status.success() {
        Ok(())
    } else {
        Err(status.to_string())
    }
}

/// One test binary's libtest summary, with the binary cargo named before it.
struct BinaryResult {
    /// The crate and what cargo named, e.g. `pgyard_slotsync tests/differential.rs`.
    binary: String,
    /// The `test result:` line.
    summary: String,
    /// The `finished in` time libtest reported.
    elapsed: Option<Duration>,
}

/// Follows one merged stdout+stderr stream of `cargo test`: cargo names each binary on stderr
/// just before running it, and the binary prints its `test result:` line on stdout.
#[derive(Default)]
struct TestLog {
    /// Appended to every binary's name (the release step runs some binaries again).
    suffix: &'static str,
    /// The crate whose unit tests ran last: cargo runs a package's unit tests before its
    /// integration tests, whose `Running` lines name only a path inside the package.
    package: String,
    current: Option<String>,
    results: Vec<BinaryResult>,
}

impl TestLog {
    fn line(&mut self, line: &str) {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("Running ") {
            let (source, stem) = binary_source_and_stem(rest);
            if source.starts_with("unittests ") {
                self.package = stem.to_owned();
            }
            self.current = Some(if self.package.is_empty() || self.package == stem {
                format!("{stem} {source}")
            } else {
                format!("{} {source}", self.package)
            });
        } else if let Some(rest) = t.strip_prefix("Doc-tests ") {
            self.current = Some(format!("{rest} doc-tests"));
        } else if t.starts_with("test result:") {
            let binary = self.current.take().unwrap_or_else(|| "(unnamed)".into());
            self.results.push(BinaryResult {
                binary: format!("{binary}{}", self.suffix),
                summary: t.to_owned(),
                elapsed: finished_in(t),
            });
        }
    }
}

/// `tests/x.rs (target/debug/deps/x-0123abcd)` → (`tests/x.rs`, `x`).
fn binary_source_and_stem(running: &str) -> (&str, &str) {
    let Some((source, path)) = running.rsplit_once(" (") else {
        return (running, "");
    };
    let file = path
        .trim_end_matches(')')
        .rsplit('/')
        .next()
        .unwrap_or(path);
    let stem = match file.rsplit_once('-') {
        Some((stem, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => stem,
        _ => file,
    };
    (source, stem)
}

/// The duration in libtest's `...; finished in 12.34s` ending.
fn finished_in(summary: &str) -> Option<Duration> {
    let (_, rest) = summary.rsplit_once("finished in ")?;
    let secs: f64 = rest.trim().trim_end_matches('s').parse().ok()?;
    Duration::try_from_secs_f64(secs).ok()
}

/// Runs `cmd` with stderr merged into its stdout (one pipe keeps cargo's `Running` lines in
/// order with the binaries' output), echoing each line and keeping libtest's summaries.
fn run_collecting_summary(cmd: &mut Command, log: &mut TestLog) -> Result<(), String> {
    let program = cmd.get_program().to_owned();
    let (reader, writer) = io::pipe().map_err(|e| format!("creating a pipe: {e}"))?;
    let writer_err = writer
        .try_clone()
        .map_err(|e| format!("duplicating a pipe: {e}"))?;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_err)
        .spawn()
        .map_err(|e| format!("could not run {program:?}: {e}"))?;
    // The command holds the only write ends now (ours went into `cmd`); drop it so the
    // reader sees end-of-file when the child exits.
    drop(std::mem::replace(cmd, Command::new("true")));
    let mut out = io::stdout();
    for line in BufReader::new(reader).lines() {
        let Ok(line) = line else { break };
        let _ = writeln!(out, "{line}");
        log.line(&line);
    }
    let _ = out.flush();
    let status = child
        .wait()
        .map_err(|e| format!("waiting for {program:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(status.to_string())
    }
}

fn cargo() -> PathBuf {
    std::env::var_os("CARGO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("cargo"))
}

fn workspace_root() -> PathBuf {
    // xtask lives in `<root>/xtask`; the manifest dir is baked in at compile time.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_read_from_libtest_summaries() {
        let line = "test result: ok. 12 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out; \
                    finished in 0.50s";
        assert_eq!(count_before(line, " passed"), 12);
        assert_eq!(count_before(line, " failed"), 1);
        assert_eq!(count_before(line, " ignored"), 3);
        assert_eq!(count_before("test result: ok. 0 passed;", " failed"), 0);
        assert_eq!(finished_in(line), Some(Duration::from_millis(500)));
    }

    #[test]
    fn summaries_are_paired_with_the_binary_cargo_named() {
        let mut log = TestLog::default();
        for line in [
            "     Running unittests src/lib.rs (target/debug/deps/pgyard_slotsync-0a1b2c3d4e5f6789)",
            "test result: ok. 9 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
             finished in 0.20s",
            "     Running tests/differential.rs (target/debug/deps/differential-0a1b2c3d4e5f6789)",
            "running 1 test",
            "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
             finished in 61.20s",
            "   Doc-tests pgyard_wire",
            "test result: ok. 3 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
             finished in 0.01s",
            "test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
             finished in 0.00s",
        ] {
            log.line(line);
        }
        let named: Vec<(&str, Option<Duration>)> = log
            .results
            .iter()
            .map(|r| (r.binary.as_str(), r.elapsed))
            .collect();
        assert_eq!(
            named,
            [
                (
                    "pgyard_slotsync unittests src/lib.rs",
                    Some(Duration::from_millis(200))
                ),
                (
                    "pgyard_slotsync tests/differential.rs",
                    Some(Duration::from_millis(61_200))
                ),
                ("pgyard_wire doc-tests", Some(Duration::from_millis(10))),
                ("(unnamed)", Some(Duration::ZERO)),
            ]
        );
    }
}
