//! `cargo xtask bench-proxy [SECONDS]`: pgbench's select-only load (`-S -c 16 -j 2`) against
//! one PostgreSQL 18, directly, through PgBouncer (Debian's package, transaction mode) and
//! through `pgyard proxy` (transaction mode), with the same pool size, in simple, extended
//! and prepared query mode. The three targets run in turn three times per mode; the medians
//! and the ratios are printed. A whole-process load benchmark: criterion does not fit it.

use std::net::TcpStream;
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{ensure_server_user, Options, Primary};
use pgyard_testkit::fixtures::pgbench;

const CLIENTS: &str = "16";
const THREADS: &str = "2";
const POOL_SIZE: &str = "16";
const ROUNDS: usize = 3;

use crate::Running;

pub fn run(seconds: u64) -> Result<(), String> {
    let pgbouncer = ensure_pgbouncer()?;
    let pgyard = crate::build_pgyard_release()?;
    let options = Options::default().conf("max_connections = 200");
    let primary = Primary::start(options).map_err(|e| format!("primary: {e}"))?;
    let direct = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        primary.port()
    );
    pgbench(&["-i", "-q", "-s", "10", &direct], Duration::from_secs(300))
        .map_err(|e| format!("pgbench -i: {e}"))?;

    let pgyard_port = free_port()?;
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let _pgyard = Running(
        Command::new(&pgyard)
            .args(["proxy", "--listen", &format!("127.0.0.1:{pgyard_port}")])
            .args(["--backend", &backend, "--auth", "trust"])
            .args(["--pool-mode", "transaction", "--pool-size", POOL_SIZE])
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting pgyard proxy: {e}"))?,
    );
    let bouncer_port = free_port()?;
    let dir = primary.root().join("pgbouncer");
    let _bouncer = start_pgbouncer(&pgbouncer, &dir, primary.port(), bouncer_port)?;
    wait_listening(pgyard_port)?;
    wait_listening(bouncer_port)?;

    let targets = [
        ("direct", primary.port()),
        ("pgbouncer", bouncer_port),
        ("pgyard", pgyard_port),
    ];
    println!(
        "pgbench -S -c {CLIENTS} -j {THREADS} -T {seconds}, pool size {POOL_SIZE}, {ROUNDS} rounds, median TPS"
    );
    for mode in ["simple", "extended", "prepared"] {
        let mut tps: Vec<Vec<Option<f64>>> = vec![Vec::new(); targets.len()];
        for _ in 0..ROUNDS {
            for (i, (_, port)) in targets.iter().enumerate() {
                tps[i].push(one_run(*port, mode, seconds));
            }
        }
        let medians: Vec<Option<f64>> = tps.iter().map(|r| median(r)).collect();
        let show = |m: Option<f64>| m.map_or("failed".to_owned(), |v| format!("{v:.0}"));
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
            _ => "-".to_owned(),
        };
        println!(
            "{mode:<9} direct {:>8}  pgbouncer {:>8}  pgyard {:>8}  pgyard/pgbouncer {}  pgyard/direct {}",
            show(medians[0]),
            show(medians[1]),
            show(medians[2]),
            ratio(medians[2], medians[1]),
            ratio(medians[2], medians[0]),
        );
    }
    Ok(())
}

/// One pgbench run's TPS, or `None` when it failed.
fn one_run(port: u16, mode: &str, seconds: u64) -> Option<f64> {
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let t = seconds.to_string();
    let args = [
        "-n", "-S", "-c", CLIENTS, "-j", THREADS, "-T", &t, "-M", mode, &conninfo,
    ];
    let out = pgbench(&args, Duration::from_secs(seconds + 60)).ok()?;
    let line = out.lines().find(|l| l.starts_with("tps = "))?;
    line.trim_start_matches("tps = ")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

fn median(runs: &[Option<f64>]) -> Option<f64> {
    let mut ok: Vec<f64> = runs.iter().copied().collect::<Option<Vec<f64>>>()?;
    ok.sort_by(f64::total_cmp);
    ok.get(ok.len() / 2).copied()
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn wait_listening(port: u16) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nothing listens on port {port}"))
}

/// Debian's pgbouncer, installed with apt-get when missing.
fn ensure_pgbouncer() -> Result<PathBuf, String> {
    let path = PathBuf::from("/usr/sbin/pgbouncer");
    if path.is_file() {
        return Ok(path);
    }
    println!("pgbouncer missing; installing it with apt-get");
    let install = || {
        crate::run_inherit(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .arg("pgbouncer")
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    // The package lists may be missing or stale on a fresh machine.
    install()
        .or_else(|_| {
            crate::run_inherit(Command::new("apt-get").args(["update", "-q"]))?;
            install()
        })
        .map_err(|e| format!("installing pgbouncer: {e}"))?;
    Ok(path)
}

/// PgBouncer in transaction mode with the same pool size, run as the servers' account (it
/// refuses to run as root).
fn start_pgbouncer(bin: &Path, dir: &Path, pg_port: u16, port: u16) -> Result<Running, String> {
    let user = ensure_server_user().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let ini = format!(
        "[databases]\npostgres = host=127.0.0.1 port={pg_port} dbname=postgres\n\n\
         [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
         auth_type = trust\nauth_file = {users}\npool_mode = transaction\n\
         default_pool_size = {POOL_SIZE}\nmax_client_conn = 200\n\
         ignore_startup_parameters = extra_float_digits\nlogfile = {log}\npidfile = {pid}\n",
        users = dir.join("users.txt").display(),
        log = dir.join("pgbouncer.log").display(),
        pid = dir.join("pgbouncer.pid").display(),
    );
    for (name, text) in [
        ("pgbouncer.ini", ini.as_str()),
        ("users.txt", "\"postgres\" \"\"\n"),
    ] {
        std::fs::write(dir.join(name), text).map_err(|e| e.to_string())?;
    }
    for entry in [
        dir.to_path_buf(),
        dir.join("pgbouncer.ini"),
        dir.join("users.txt"),
    ] {
        chown(&entry, Some(user.uid), Some(user.gid)).map_err(|e| e.to_string())?;
    }
    let child = Command::new(bin)
        .arg(dir.join("pgbouncer.ini"))
        .uid(user.uid)
        .gid(user.gid)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting pgbouncer: {e}"))?;
    Ok(Running(child))
}
