//! `cargo xtask bench-proxy [SECONDS] [MODES] [ROUNDS]`: pgbench's select-only load
//! (`-S -c 16 -j 2`) against one PostgreSQL 18, directly, through PgBouncer (Debian's package,
//! transaction mode) and through `pgyard proxy` (transaction mode), with the same pool size,
//! in simple, extended and prepared query mode; pgyard twice, as `cargo build --release`
//! builds it and built with profile-guided optimisation for the proxy (`pgo.rs`). The four
//! targets run in turn three times per mode (or ROUNDS times, an odd number); the medians
//! and the ratios are printed, with the median of each pgyard build's ratio to PgBouncer
//! within each round, each target's CPU time per transaction
//! (the whole machine's, and the proxy process's) and the machine's idle and stolen shares.
//! Each proxy runs in a session of its own, as a service would. A whole-process load
//! benchmark: criterion does not fit it.

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
/// Rounds per mode unless the command line asks for more (the method: three).
pub const ROUNDS_DEFAULT: usize = 3;

use crate::Running;

/// What both proxy benchmarks measure: PgBouncer, the two builds of pgyard, and one
/// PostgreSQL 18 with pgbench's tables.
pub(crate) struct Contenders {
    pub pgbouncer: PathBuf,
    pub pgyard: PathBuf,
    pub pgyard_pgo: PathBuf,
    pub primary: Primary,
}

impl Contenders {
    /// Installs PgBouncer if missing, builds pgyard, starts the server with pgbench's
    /// tables, then builds pgyard with PGO (its training needs those tables).
    pub(crate) fn prepare() -> Result<Contenders, String> {
        let pgbouncer = ensure_pgbouncer()?;
        let pgyard = crate::build_pgyard_release()?;
        let primary = bench_server()?;
        let pgyard_pgo = crate::pgo::build(primary.port())?;
        Ok(Contenders {
            pgbouncer,
            pgyard,
            pgyard_pgo,
            primary,
        })
    }
}

/// pgbench's scale for the proxy benchmarks' tables (and so for every PGO training).
const SCALE: &str = "10";

/// Starts the proxy benchmarks' PostgreSQL 18 (room for the pools of several proxies) and
/// fills pgbench's tables at [`SCALE`] in database `postgres`: the one server every proxy
/// benchmark and PGO training runs against, so that each PGO build is trained alike.
pub(crate) fn bench_server() -> Result<Primary, String> {
    let options = Options::default().conf("max_connections = 200");
    let primary = Primary::start(options).map_err(|e| format!("primary: {e}"))?;
    let direct = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        primary.port()
    );
    pgbench(
        &["-i", "-q", "-s", SCALE, &direct],
        Duration::from_secs(300),
    )
    .map_err(|e| format!("pgbench -i: {e}"))?;
    Ok(primary)
}

pub fn run(seconds: u64, modes: &[&str], rounds: usize) -> Result<(), String> {
    let Contenders {
        pgbouncer,
        pgyard,
        pgyard_pgo,
        primary,
    } = Contenders::prepare()?;

    let (pgyard_port, pgo_port) = (free_port()?, free_port()?);
    let _pgyard = start_pgyard(&pgyard, primary.port(), pgyard_port)?;
    let _pgo = start_pgyard(&pgyard_pgo, primary.port(), pgo_port)?;
    let bouncer_port = free_port()?;
    let dir = primary.root().join("pgbouncer");
    let _bouncer = start_pgbouncer(&pgbouncer, &dir, primary.port(), bouncer_port)?;
    for port in [pgyard_port, pgo_port, bouncer_port] {
        wait_listening(port, Duration::from_secs(20))?;
    }
    for (name, pid) in [
        ("pgbench", std::process::id()),
        ("pgbouncer", _bouncer.0.id()),
        ("pgyard", _pgyard.0.id()),
        ("pgyard-pgo", _pgo.0.id()),
    ] {
        let group = std::fs::read_to_string(format!("/proc/{pid}/autogroup")).unwrap_or_default();
        println!(
            "{name} runs in {}",
            group.trim().split(' ').next().unwrap_or("(no autogroup)")
        );
    }

    // Each target with the process whose CPU time it adds (none when direct). PgBouncer
    // stands between the two builds of pgyard, so that it runs next to each in every round.
    let targets = [
        ("direct", primary.port(), None),
        ("pgyard-pgo", pgo_port, Some(_pgo.0.id())),
        ("pgbouncer", bouncer_port, Some(_bouncer.0.id())),
        ("pgyard", pgyard_port, Some(_pgyard.0.id())),
    ];
    println!(
        "pgbench -S -c {CLIENTS} -j {THREADS} -T {seconds}, pool size {POOL_SIZE}, {rounds} rounds, median TPS"
    );
    for &mode in modes {
        let mut tps: Vec<Vec<Option<f64>>> = vec![Vec::new(); targets.len()];
        let mut cpu: Vec<Vec<Option<Cpu>>> = vec![Vec::new(); targets.len()];
        for round in 0..rounds {
            // Every other round runs the targets in reverse, so that none always follows the
            // same other (a run meets the state the one before it left: its closing
            // backends, the machine's caches and clock).
            let order: Vec<usize> = if round % 2 == 0 {
                (0..targets.len()).collect()
            } else {
                (0..targets.len()).rev().collect()
            };
            let mut line = format!("{mode:<9} round {}:", round + 1);
            for i in order {
                let (name, port, pid) = &targets[i];
                let (t, c) = measured_run(*port, *pid, mode, seconds);
                line.push_str(&format!(
                    " {name} {}",
                    t.map_or("failed".into(), |v| format!("{v:.0}"))
                ));
                tps[i].push(t);
                cpu[i].push(c);
            }
            println!("{line}");
        }
        let names: Vec<&str> = targets.iter().map(|t| t.0).collect();
        report(mode, &names, &tps, &cpu);
    }
    Ok(())
}

/// `pgyard proxy` from `program` on `port`, in front of `pg_port`.
fn start_pgyard(program: &Path, pg_port: u16, port: u16) -> Result<Running, String> {
    Ok(Running(
        daemon(program)
            .args(proxy_args(pg_port, port))
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", program.display()))?,
    ))
}

/// `pgyard proxy`'s arguments in every proxy benchmark (and the PGO training): listening on
/// `port`, in front of `pg_port`, trust, transaction mode, the benchmark's pool size.
pub(crate) fn proxy_args(pg_port: u16, port: u16) -> Vec<String> {
    let listen = format!("127.0.0.1:{port}");
    let backend = format!("host=127.0.0.1 port={pg_port}");
    [
        "proxy",
        "--listen",
        &listen,
        "--backend",
        &backend,
        "--auth",
        "trust",
        "--pool-mode",
        "transaction",
        "--pool-size",
        POOL_SIZE,
    ]
    .map(str::to_owned)
    .to_vec()
}

/// Prints one mode's medians, each pgyard build's ratio to PgBouncer (of the medians, and
/// within each round) and to a direct connection, and each target's CPU time.
fn report(mode: &str, names: &[&str], tps: &[Vec<Option<f64>>], cpu: &[Vec<Option<Cpu>>]) {
    let medians: Vec<Option<f64>> = tps.iter().map(|r| median(r)).collect();
    let at = |name: &str| names.iter().position(|n| *n == name);
    let show = |m: Option<f64>| m.map_or("failed".to_owned(), |v| format!("{v:.0}"));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".to_owned(),
    };
    let mut line = format!("{mode:<9}");
    for (name, m) in names.iter().zip(&medians) {
        line.push_str(&format!(" {name} {:>8}", show(*m)));
    }
    println!("{line}");
    let (Some(direct), Some(bouncer)) = (at("direct"), at("pgbouncer")) else {
        return;
    };
    for build in ["pgyard", "pgyard-pgo"] {
        let Some(i) = at(build) else { continue };
        // The proxies run next to each other in every round, so the ratio within a round is
        // spared the drift of the machine between rounds.
        let paired: Vec<Option<f64>> = tps[i]
            .iter()
            .zip(&tps[bouncer])
            .map(|(a, b)| Some(a.as_ref()? / b.as_ref()?))
            .collect();
        let mut line = format!(
            "          {build}/pgbouncer {}  {build}/direct {}",
            ratio(medians[i], medians[bouncer]),
            ratio(medians[i], medians[direct]),
        );
        if let (Some(m), Some(lo), Some(hi)) = (
            median(&paired),
            paired.iter().flatten().copied().reduce(f64::min),
            paired.iter().flatten().copied().reduce(f64::max),
        ) {
            line.push_str(&format!(
                "; within each round: median {m:.3}x, from {lo:.3}x to {hi:.3}x"
            ));
        }
        println!("{line}");
    }
    for (name, runs) in names.iter().zip(cpu) {
        let pick = |f: fn(&Cpu) -> f64| {
            median(&runs.iter().map(|c| c.as_ref().map(f)).collect::<Vec<_>>())
        };
        let us = |m: Option<f64>| m.map_or("-".to_owned(), |v| format!("{v:.1}"));
        println!(
            "          {name:<10} CPU per transaction: machine {} us, proxy {} us; idle {}%, steal {}%",
            us(pick(|c| c.machine_us)),
            us(pick(|c| c.proxy_us)),
            us(pick(|c| c.idle_percent)),
            us(pick(|c| c.steal_percent)),
        );
    }
}

/// Where the CPU went during one run, per transaction.
#[derive(Clone, Debug)]
struct Cpu {
    /// Busy time of the whole machine (every core, steal excluded) per transaction.
    machine_us: f64,
    /// The proxy process's user and system time per transaction (0 when direct).
    proxy_us: f64,
    /// Share of the machine's time spent idle, and taken by the hypervisor.
    idle_percent: f64,
    steal_percent: f64,
}

/// One pgbench run's TPS and CPU accounting (`None` when the run failed).
fn measured_run(
    port: u16,
    pid: Option<u32>,
    mode: &str,
    seconds: u64,
) -> (Option<f64>, Option<Cpu>) {
    let machine_before = machine_ticks();
    let proxy_before = pid.and_then(process_ticks);
    let Some((tps, txns)) = one_run(port, mode, seconds) else {
        return (None, None);
    };
    let machine_after = machine_ticks();
    let proxy_after = pid.and_then(process_ticks);
    let cpu = (|| {
        let (before, after) = (machine_before?, machine_after?);
        let d: Vec<f64> = after
            .iter()
            .zip(&before)
            .map(|(a, b)| (a - b) as f64)
            .collect();
        let total: f64 = d.iter().sum();
        // /proc/stat's cpu line: user nice system idle iowait irq softirq steal.
        let idle = d.get(3)? + d.get(4)?;
        let steal = *d.get(7)?;
        let ticks_us = 1e6 / ticks_per_second();
        let proxy = match (proxy_before, proxy_after) {
            (Some(b), Some(a)) => (a - b) as f64,
            _ => 0.0,
        };
        (total > 0.0 && txns > 0).then(|| Cpu {
            machine_us: (total - idle - steal) * ticks_us / txns as f64,
            proxy_us: proxy * ticks_us / txns as f64,
            idle_percent: 100.0 * idle / total,
            steal_percent: 100.0 * steal / total,
        })
    })();
    (Some(tps), cpu)
}

/// The machine's CPU time so far, in clock ticks, by kind (the `cpu` line of /proc/stat).
fn machine_ticks() -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    line.split_whitespace().map(|v| v.parse().ok()).collect()
}

/// A process's user and system time so far, in clock ticks.
fn process_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields after it are plain.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are the 14th and 15th fields, the 12th and 13th after the name.
    Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
}

/// The unit of /proc's times (`getconf CLK_TCK`; Linux's USER_HZ, 100 on common machines).
fn ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|t| t.trim().parse().ok())
        .filter(|&hz: &f64| hz > 0.0)
        .unwrap_or(100.0)
}

/// One pgbench run's TPS and number of transactions, or `None` when it failed.
fn one_run(port: u16, mode: &str, seconds: u64) -> Option<(f64, u64)> {
    let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
    let t = seconds.to_string();
    let args = [
        "-n", "-S", "-c", CLIENTS, "-j", THREADS, "-T", &t, "-M", mode, &conninfo,
    ];
    let out = pgbench(&args, Duration::from_secs(seconds + 60)).ok()?;
    let line = out.lines().find(|l| l.starts_with("tps = "))?;
    let tps = line
        .trim_start_matches("tps = ")
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let txns = out
        .lines()
        .find_map(|l| l.strip_prefix("number of transactions actually processed: "))?
        .split('/')
        .next()?
        .trim()
        .parse()
        .ok()?;
    Some((tps, txns))
}

fn median(runs: &[Option<f64>]) -> Option<f64> {
    let mut ok: Vec<f64> = runs.iter().copied().collect::<Option<Vec<f64>>>()?;
    ok.sort_by(f64::total_cmp);
    ok.get(ok.len() / 2).copied()
}

pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

/// Waits up to `timeout` for something to listen on `port`.
pub(crate) fn wait_listening(port: u16, timeout: Duration) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!("nothing listens on port {port}"))
}

/// A command that runs `program` in a session of its own, as a service manager starts a
/// proxy. With the kernel's autogroup scheduling (`/proc/sys/kernel/sched_autogroup_enabled`)
/// a session is also a scheduling group that gets its fair share of the CPU: a proxy left in
/// the benchmark's session would share one share with pgbench's threads (every PostgreSQL
/// backend makes a session of its own). `setsid` execs in place (the child is no process
/// group leader), so the child's pid is the proxy's.
pub(crate) fn daemon(program: &Path) -> Command {
    let mut command = Command::new("setsid");
    command.arg(program);
    command
}

/// Debian's pgbouncer, installed with apt-get when missing.
pub(crate) fn ensure_pgbouncer() -> Result<PathBuf, String> {
    ensure_package("/usr/sbin/pgbouncer", "pgbouncer")
}

/// `program`, installed with Debian's `package` through apt-get when missing.
pub(crate) fn ensure_package(program: &str, package: &str) -> Result<PathBuf, String> {
    let path = PathBuf::from(program);
    if path.is_file() {
        return Ok(path);
    }
    println!("{package} missing; installing it with apt-get");
    let install = || {
        crate::run_inherit(
            Command::new("apt-get")
                .args(["install", "-y", "-q", "--no-install-recommends"])
                .arg(package)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    // The package lists may be missing or stale on a fresh machine.
    install()
        .or_else(|_| {
            crate::run_inherit(Command::new("apt-get").args(["update", "-q"]))?;
            install()
        })
        .map_err(|e| format!("installing {package}: {e}"))?;
    Ok(path)
}

/// PgBouncer in transaction mode with the same pool size, run as the servers' account (it
/// refuses to run as root).
fn start_pgbouncer(bin: &Path, dir: &Path, pg_port: u16, port: u16) -> Result<Running, String> {
    let ini = write_pgbouncer_config(dir, pg_port, port)?;
    let user = ensure_server_user().map_err(|e| e.to_string())?;
    let child = daemon(bin)
        .arg(ini)
        .uid(user.uid)
        .gid(user.gid)
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting pgbouncer: {e}"))?;
    Ok(Running(child))
}

/// PgBouncer's configuration in `dir` (owned by the servers' account, which runs it): transaction
/// mode, the benchmark's pool size, trust; returns the ini file's path.
pub(crate) fn write_pgbouncer_config(
    dir: &Path,
    pg_port: u16,
    port: u16,
) -> Result<PathBuf, String> {
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
    Ok(dir.join("pgbouncer.ini"))
}
