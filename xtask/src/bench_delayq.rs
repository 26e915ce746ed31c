//! `cargo xtask bench-delayq [SCALE]`: how fast a subscriber catches up, native logical
//! replication (CREATE SUBSCRIPTION … WITH (copy_data = false), PostgreSQL 18's defaults
//! otherwise) against `pgyard delayq run --delay 0s`, on the same publisher WAL:
//!
//! * (a) 100,000 × SCALE single-row INSERT transactions (pgbench, 4 clients);
//! * (b) 20 transactions of 50,000 × SCALE rows each;
//! * (c) pgbench's TPC-B-like transactions (scale 1, 4 clients, 20,000 × SCALE transactions).
//!
//! For each workload both consumers' slots exist before it runs and both are stopped while
//! it runs; then each in turn catches up from the same WAL, timed from its start until the
//! marker row committed after the workload is on its subscriber. Rows per second and the
//! ratio pgyard/native are printed, and where each consumer's CPU went (seconds of user and
//! system time of the publisher's walsender, the subscriber's applying backend and, for
//! pgyard, its own process: on 2 cores they compete). A whole-process benchmark: criterion
//! does not fit it.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{Node, Options, Primary};
use pgyard_testkit::fixtures::pgbench;

use crate::Running;

fn q(node: &Node, sql: &str) -> Result<String, String> {
    node.psql(sql)
        .map_err(|e| format!("{}: {sql}: {e}", node.name()))
}

fn tcp(node: &Node) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        node.port()
    )
}

struct Workload {
    name: &'static str,
    /// Rows changed on the publisher.
    rows: u64,
}

/// The CPU seconds (user + system) a process has used so far, from `/proc/PID/stat`.
fn cpu_seconds(pid: &str) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map_err(|e| format!("/proc/{pid}/stat: {e}"))?;
    // The command name may hold spaces; the fields after it do not.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        // utime and stime, in clock ticks of 1/100 s on Linux.
        (Some(user), Some(system)) => Ok((user + system) / 100.0),
        _ => Err(format!("/proc/{pid}/stat: no utime and stime in {stat:?}")),
    }
}

/// Where one consumer's CPU went during its catch-up.
struct Cpu {
    walsender: f64,
    backend: f64,
    process: Option<f64>,
}

impl std::fmt::Display for Cpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "walsender {:.2}s, subscriber backend {:.2}s",
            self.walsender, self.backend
        )?;
        if let Some(p) = self.process {
            write!(f, ", pgyard {p:.2}s")?;
        }
        Ok(())
    }
}

/// Runs the workloads named in `which` (any of `a`, `b`, `c`).
pub fn run(scale: u64, which: &str) -> Result<(), String> {
    let pgyard = crate::build_pgyard_release()?;
    let mut results = Vec::new();
    for w in ["a", "b", "c"].into_iter().filter(|w| which.contains(w)) {
        let (workload, native, ours, cpu) = one(w, scale, &pgyard)?;
        println!(
            "delayq_catch_up_{}/native: {:.0} rows/s ({:.2}s); delayq_catch_up_{}/pgyard: {:.0} rows/s ({:.2}s); ratio {:.2}",
            workload.name,
            workload.rows as f64 / native,
            native,
            workload.name,
            workload.rows as f64 / ours,
            ours,
            native / ours
        );
        println!("  cpu native: {}; cpu pgyard: {}", cpu.0, cpu.1);
        results.push((workload.name, native / ours));
    }
    println!("ratios pgyard/native: {results:?} (goal: >= 0.5 on a and c, >= 1.0 on b)");
    Ok(())
}

/// One workload: fresh servers, both slots, the workload, then each consumer's catch-up.
fn one(w: &str, scale: u64, pgyard: &Path) -> Result<(Workload, f64, f64, (Cpu, Cpu)), String> {
    let options = Options::default()
        .conf("max_wal_senders = 20")
        .conf("max_replication_slots = 20")
        .conf("checkpoint_timeout = 30min")
        .conf("max_wal_size = 8GB");
    let publisher = Primary::start(options.clone()).map_err(|e| e.to_string())?;
    let native_sub = Primary::start(options.clone()).map_err(|e| e.to_string())?;
    let our_sub = Primary::start(options).map_err(|e| e.to_string())?;
    let schema = "create table ta(id bigserial primary key, v int); \
                  create table tb(id bigint primary key, v text); \
                  create table marker(id int primary key)";
    for n in [&*publisher, &*native_sub, &*our_sub] {
        q(n, schema)?;
        if w == "c" {
            pgbench(&["-i", "-q", "-s", "1", &tcp(n)], Duration::from_secs(300))
                .map_err(|e| format!("pgbench -i: {e}"))?;
        }
    }
    let tables = if w == "c" {
        "ta, tb, marker, pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"
    } else {
        "ta, tb, marker"
    };
    q(
        &publisher,
        &format!("create publication pub for table {tables}"),
    )?;
    q(
        &native_sub,
        &format!(
            "create subscription native connection '{}' publication pub \
             with (copy_data = false, enabled = false)",
            tcp(&publisher)
        ),
    )?;
    q(
        &publisher,
        "select pg_create_logical_replication_slot('pgyard', 'pgoutput')",
    )?;
    let workload = generate(w, scale, &publisher)?;
    q(&publisher, "insert into marker values (1)")?;

    let started = Instant::now();
    q(&native_sub, "alter subscription native enable")?;
    wait_marker(&native_sub)?;
    let native = started.elapsed().as_secs_f64();
    let native_cpu = Cpu {
        walsender: cpu_of(
            &publisher,
            "select pid from pg_stat_replication where application_name = 'native'",
        )?,
        backend: cpu_of(
            &native_sub,
            "select pid from pg_stat_subscription where subname = 'native' and relid is null",
        )?,
        process: None,
    };
    q(&native_sub, "alter subscription native disable")?;

    let dir = publisher.root().join("dq");
    let started = Instant::now();
    let _run = Running(
        Command::new(pgyard)
            .args(["delayq", "run", "--publisher", &tcp(&publisher)])
            .args(["--slot", "pgyard", "--publication", "pub"])
            .args(["--subscriber", &tcp(&our_sub), "--delay", "0s"])
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting pgyard delayq run: {e}"))?,
    );
    wait_marker(&our_sub)?;
    let ours = started.elapsed().as_secs_f64();
    let our_cpu = Cpu {
        walsender: cpu_of(&publisher, "select pid from pg_stat_replication where application_name <> 'native'")?,
        backend: cpu_of(&our_sub, "select pid from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid() and application_name <> 'psql'")?,
        process: Some(cpu_seconds(&_run.0.id().to_string())?),
    };
    let check = "select count(*) || ':' || coalesce(sum(id), 0) from tb";
    if q(&publisher, check)? != q(&our_sub, check)? {
        return Err(format!(
            "workload {w}: the subscriber differs from the publisher"
        ));
    }
    Ok((workload, native, ours, (native_cpu, our_cpu)))
}

fn generate(w: &str, scale: u64, publisher: &Node) -> Result<Workload, String> {
    let conn = tcp(publisher);
    let bench = |args: &[&str]| {
        pgbench(args, Duration::from_secs(3600)).map_err(|e| format!("pgbench: {e}"))
    };
    match w {
        "a" => {
            let script = publisher.data_dir().with_file_name("insert.sql");
            std::fs::write(&script, "insert into ta(v) values (1);\n")
                .map_err(|e| e.to_string())?;
            let per_client = (25_000 * scale).to_string();
            bench(&[
                "-n",
                "-c",
                "4",
                "-j",
                "2",
                "-t",
                &per_client,
                "-f",
                &script.to_string_lossy(),
                &conn,
            ])?;
            Ok(Workload {
                name: "a_single_row_inserts",
                rows: 100_000 * scale,
            })
        }
        "b" => {
            let n = 50_000 * scale;
            for i in 0..20u64 {
                q(
                    publisher,
                    &format!(
                        "insert into tb select g, repeat('x', 40) from generate_series({}, {}) g",
                        i * n + 1,
                        (i + 1) * n
                    ),
                )?;
            }
            Ok(Workload {
                name: "b_large_transactions",
                rows: 20 * n,
            })
        }
        _ => {
            let per_client = (5_000 * scale).to_string();
            bench(&["-n", "-c", "4", "-j", "2", "-t", &per_client, &conn])?;
            // Three updates and one insert per transaction.
            Ok(Workload {
                name: "c_pgbench_tpcb",
                rows: 4 * 20_000 * scale,
            })
        }
    }
}

/// The CPU seconds of the one process `sql` names on `node`.
fn cpu_of(node: &Node, sql: &str) -> Result<f64, String> {
    let pid = q(node, sql)?;
    if pid.is_empty() || pid.contains('\n') {
        return Err(format!(
            "{}: {sql}: expected one pid, got {pid:?}",
            node.name()
        ));
    }
    cpu_seconds(&pid)
}

fn wait_marker(sub: &Node) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(3600);
    while q(sub, "select count(*) from marker")? != "1" {
        if Instant::now() > deadline {
            return Err("the subscriber never caught up".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}
