//! `pgyard` for the proxy, built with profile-guided optimisation (PGO): an instrumented
//! build runs the proxy's own load (pgbench's select-only transactions in simple, extended
//! and prepared mode through `pgyard proxy` in transaction mode, against the PostgreSQL the
//! caller started), and the counts it writes steer a second build: which branches are hot,
//! what to inline, and, what matters most here, where each piece of code goes, so that the
//! code one transaction runs sits together instead of being spread over the binary among
//! the branches it never takes. `docs/proxy-performance.md` shows why: the plain build's
//! per-transaction path does not fit a 32 KiB instruction cache and misses it some 160-260
//! times a transaction; the PGO build 6-51 times, depending on the training.
//!
//! The instrumented and the final build each have their own target directory under
//! `target/pgo`, so neither disturbs the plain release build. The profile's file name holds
//! a digest of its contents: the flags of the final build name it, so that a new profile
//! makes cargo rebuild (cargo does not look into files named by `RUSTFLAGS`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pgyard_testkit::fixtures::pgbench;

use crate::bench_proxy::{daemon, free_port, proxy_args, wait_listening};
use crate::{cargo, run_inherit, workspace_root, Running};

/// Seconds of pgbench per query mode while training.
const TRAIN_SECONDS: &str = "5";

/// Builds the PGO `pgyard`, trained against the PostgreSQL on `pg_port` (user `postgres`,
/// pgbench's tables in database `postgres`); returns the binary's path.
pub fn build(pg_port: u16) -> Result<PathBuf, String> {
    let (host, sysroot) = toolchain()?;
    let profdata = ensure_llvm_profdata(&host, &sysroot)?;
    let root = workspace_root();
    let pgo = root.join("target/pgo");
    let raw = pgo.join("raw");
    let _ = std::fs::remove_dir_all(&raw);
    std::fs::create_dir_all(&raw).map_err(|e| format!("{}: {e}", raw.display()))?;

    println!("PGO: building the instrumented pgyard");
    let generate = format!("-Cprofile-generate={}", raw.display());
    let instrumented = cargo_build(&host, &pgo.join("generate"), &generate)?;
    println!("PGO: training it on the proxy's load");
    train(&instrumented, &raw, pg_port)?;

    let merged = pgo.join("merged.profdata");
    run_inherit(
        Command::new(&profdata)
            .arg("merge")
            .arg("-o")
            .arg(&merged)
            .arg(&raw),
    )
    .map_err(|e| format!("llvm-profdata merge: {e}"))?;
    let bytes = std::fs::read(&merged).map_err(|e| format!("{}: {e}", merged.display()))?;
    remove_profiles(&pgo)?;
    let named = pgo.join(format!("pgyard-{:016x}.profdata", digest(&bytes)));
    std::fs::rename(&merged, &named).map_err(|e| format!("{}: {e}", named.display()))?;
    println!("PGO: building pgyard with {}", named.display());
    // LLD keeps the functions the profile marks hot in a `.text.hot` section of their own
    // only when asked; otherwise they stay where the one codegen unit put them, spread among
    // cold ones (with the same profile, twice the instruction-cache misses; session 45).
    let use_profile = format!(
        "-Cprofile-use={} -Clink-arg=-Wl,-z,keep-text-section-prefix",
        named.display()
    );
    cargo_build(&host, &pgo.join("use"), &use_profile)
}

/// `cargo xtask pgo`: only the PGO build, for deploying the proxy. It trains against a
/// PostgreSQL 18 of its own, the proxy benchmarks' server (so the build is trained as the
/// ones they measure), and prints the binary's path.
pub fn standalone() -> Result<(), String> {
    let primary = crate::bench_proxy::bench_server()?;
    let binary = build(primary.port())?;
    println!("PGO: pgyard for the proxy is {}", binary.display());
    Ok(())
}

/// Removes the profiles of earlier builds (each is named by its digest, so they pile up).
fn remove_profiles(pgo: &Path) -> Result<(), String> {
    let entries = std::fs::read_dir(pgo).map_err(|e| format!("{}: {e}", pgo.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("pgyard-") && name.ends_with(".profdata") {
            std::fs::remove_file(entry.path()).map_err(|e| format!("{name}: {e}"))?;
        }
    }
    Ok(())
}

/// A digest of the profile, for its file name (std's hasher has fixed keys: the same bytes
/// give the same name in every run).
fn digest(bytes: &[u8]) -> u64 {
    use std::hash::{DefaultHasher, Hasher};
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

/// The host's target triple and the toolchain's sysroot, from the `rustc` cargo uses.
fn toolchain() -> Result<(String, PathBuf), String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let output = |args: &[&str]| -> Result<String, String> {
        let out = Command::new(&rustc)
            .args(args)
            .output()
            .map_err(|e| format!("rustc {args:?}: {e}"))?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let host = output(&["-vV"])?
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .ok_or("rustc -vV names no host")?;
    let sysroot = PathBuf::from(output(&["--print", "sysroot"])?.trim());
    Ok((host, sysroot))
}

/// The toolchain's own `llvm-profdata` (an older LLVM cannot read the profiles this rustc's
/// LLVM writes), added with rustup's `llvm-tools` component when missing.
fn ensure_llvm_profdata(host: &str, sysroot: &Path) -> Result<PathBuf, String> {
    let path = sysroot.join(format!("lib/rustlib/{host}/bin/llvm-profdata"));
    if !path.is_file() {
        run_inherit(Command::new("rustup").args(["component", "add", "llvm-tools"]))
            .map_err(|e| format!("rustup component add llvm-tools: {e}"))?;
    }
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{} is missing after adding llvm-tools",
            path.display()
        ))
    }
}

/// `cargo build --release -p pgyard-cli` with `flags`. The explicit `--target` keeps the
/// flags off build scripts and procedural macros, which run on this machine at build time.
fn cargo_build(host: &str, target_dir: &Path, flags: &str) -> Result<PathBuf, String> {
    run_inherit(
        Command::new(cargo())
            .current_dir(workspace_root())
            .env("RUSTFLAGS", flags)
            .args([
                "build",
                "--release",
                "-q",
                "-p",
                "pgyard-cli",
                "--target",
                host,
            ])
            .arg("--target-dir")
            .arg(target_dir),
    )
    .map_err(|e| format!("building pgyard ({flags}): {e}"))?;
    Ok(target_dir.join(host).join("release/pgyard"))
}

/// Runs the instrumented proxy under pgbench in the three query modes, then stops it with
/// SIGINT, on which it exits normally and writes its counts into `raw`.
fn train(instrumented: &Path, raw: &Path, pg_port: u16) -> Result<(), String> {
    let port = free_port()?;
    let mut proxy = Running(
        daemon(instrumented)
            .args(proxy_args(pg_port, port))
            .env("LLVM_PROFILE_FILE", raw.join("pgyard-%p.profraw"))
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting the instrumented proxy: {e}"))?,
    );
    wait_listening(port, Duration::from_secs(20))?;
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    for mode in ["simple", "extended", "prepared"] {
        let args = [
            "-n",
            "-S",
            "-c",
            "16",
            "-j",
            "2",
            "-T",
            TRAIN_SECONDS,
            "-M",
            mode,
            &conninfo,
        ];
        pgbench(&args, Duration::from_secs(120))
            .map_err(|e| format!("training pgbench -M {mode}: {e}"))?;
    }
    let status = proxy.interrupt("the instrumented proxy", Duration::from_secs(30))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the instrumented proxy ended with {status}"))
    }
}

#[cfg(test)]
mod tests {
    use super::{digest, toolchain};

    #[test]
    fn the_toolchain_names_its_host_and_sysroot() {
        let (host, sysroot) = toolchain().expect("rustc answers");
        assert!(host.contains("linux"), "host {host:?}");
        assert!(
            sysroot.join("lib/rustlib").is_dir(),
            "{}",
            sysroot.display()
        );
    }

    /// The profile's name must follow its contents (a new profile, a rebuild) and nothing
    /// else (the same profile, no rebuild).
    #[test]
    fn the_profile_digest_follows_the_contents_only() {
        assert_eq!(digest(b"counts"), digest(b"counts"));
        assert_ne!(digest(b"counts"), digest(b"counts2"));
    }
}
