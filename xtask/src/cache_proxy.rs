//! `cargo xtask cache-proxy [MODES]`: what each proxy's process executes per transaction, and
//! how often that misses the level-1 caches, counted by valgrind's cachegrind with fixed
//! cache sizes (a 32 KiB, 8-way instruction cache and a 32 KiB, 8-way data cache, as most
//! x86 cores of the last decade have), so that the figures are the same on any machine and
//! from one run to the next. Each proxy (`pgyard proxy` as `cargo build --release` builds it
//! and as built with profile-guided optimisation (`pgo.rs`), and Debian's PgBouncer;
//! transaction mode, the benchmark's pool size) runs under cachegrind twice, for `pgbench -n -S -c 1 -j 1
//! -t T` with T = 2000 and T = 4000; the difference of the two runs, divided by the 2,000
//! transactions between them, is one transaction's cost without start-up, login and
//! shutdown. One client, so that each transaction takes the same path through the proxy and
//! the figures repeat to within a percent (with four, how the clients' requests happen to
//! meet moves them by a tenth). Wall-clock speed is `bench-proxy`'s; this says where it goes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use pgyard_testkit::cluster::ensure_server_user;
use pgyard_testkit::fixtures::pgbench;
use std::os::unix::fs::chown;
use std::os::unix::process::CommandExt;

use crate::bench_proxy::{
    daemon, ensure_package, free_port, proxy_args, wait_listening, Contenders,
};
use crate::Running;

/// The caches simulated: size, associativity and line size.
const I1: &str = "--I1=32768,8,64";
const D1: &str = "--D1=32768,8,64";
const LL: &str = "--LL=8388608,16,64";

/// Transactions of the short and the long run (their difference is what is reported).
const SHORT: u64 = 2000;
const LONG: u64 = 4000;
const CLIENTS: u64 = 1;

/// cachegrind's totals of one run.
#[derive(Clone, Copy, Debug, Default)]
struct Counts {
    instructions: u64,
    i1_misses: u64,
    d1_misses: u64,
}

pub fn run(modes: &[&str]) -> Result<(), String> {
    let valgrind = ensure_package("/usr/bin/valgrind", "valgrind")?;
    let Contenders {
        pgbouncer,
        pgyard,
        pgyard_pgo,
        primary,
    } = Contenders::prepare()?;
    let dir = primary.root().join("cachegrind");
    let user = ensure_server_user().map_err(|e| e.to_string())?;
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    chown(&dir, Some(user.uid), Some(user.gid)).map_err(|e| e.to_string())?;
    println!(
        "cachegrind {I1} {D1}; pgbench -n -S -c {CLIENTS} -j 1 -t {SHORT} and -t {LONG}; \
         per transaction: (long - short) / {}",
        CLIENTS * (LONG - SHORT)
    );
    let target = Target {
        valgrind: &valgrind,
        pgyard: &pgyard,
        pgyard_pgo: &pgyard_pgo,
        pgbouncer: &pgbouncer,
        dir: &dir,
        pg_port: primary.port(),
        owner: (user.uid, user.gid),
    };
    for &mode in modes {
        for proxy in [Proxy::Pgyard, Proxy::PgyardPgo, Proxy::Pgbouncer] {
            let mut runs = [Counts::default(); 2];
            for (slot, t) in runs.iter_mut().zip([SHORT, LONG]) {
                *slot = target.measure(proxy, mode, t)?;
            }
            let per = |f: fn(&Counts) -> u64| {
                f(&runs[1]).saturating_sub(f(&runs[0])) as f64 / (CLIENTS * (LONG - SHORT)) as f64
            };
            println!(
                "{mode:<9} {:<10} instructions {:>8.0}  I1 misses {:>7.1}  D1 misses {:>6.1}",
                proxy.name(),
                per(|c| c.instructions),
                per(|c| c.i1_misses),
                per(|c| c.d1_misses),
            );
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Proxy {
    Pgyard,
    /// pgyard built with profile-guided optimisation (`pgo.rs`).
    PgyardPgo,
    Pgbouncer,
}

impl Proxy {
    fn name(self) -> &'static str {
        match self {
            Proxy::Pgyard => "pgyard",
            Proxy::PgyardPgo => "pgyard-pgo",
            Proxy::Pgbouncer => "pgbouncer",
        }
    }
}

struct Target<'a> {
    valgrind: &'a Path,
    pgyard: &'a Path,
    pgyard_pgo: &'a Path,
    pgbouncer: &'a Path,
    dir: &'a Path,
    pg_port: u16,
    /// The servers' account (uid, gid), which PgBouncer runs as (it refuses root).
    owner: (u32, u32),
}

impl Target<'_> {
    /// One proxy under cachegrind for `transactions` per client; its totals once it exited.
    fn measure(&self, proxy: Proxy, mode: &str, transactions: u64) -> Result<Counts, String> {
        let port = free_port()?;
        let out = self
            .dir
            .join(format!("{}.{mode}.{transactions}.out", proxy.name()));
        let _ = std::fs::remove_file(&out);
        let mut command = daemon(self.valgrind);
        command.args(["--tool=cachegrind", "--cache-sim=yes", I1, D1, LL]);
        command.arg(format!("--cachegrind-out-file={}", out.display()));
        match proxy {
            Proxy::Pgyard | Proxy::PgyardPgo => {
                let program = match proxy {
                    Proxy::PgyardPgo => self.pgyard_pgo,
                    _ => self.pgyard,
                };
                command.arg(program).args(proxy_args(self.pg_port, port));
            }
            Proxy::Pgbouncer => {
                let home = self.dir.join(format!("pgbouncer.{port}"));
                let ini = crate::bench_proxy::write_pgbouncer_config(&home, self.pg_port, port)?;
                command
                    .arg(self.pgbouncer)
                    .arg(ini)
                    .uid(self.owner.0)
                    .gid(self.owner.1)
                    .current_dir(&home);
            }
        }
        let mut running = Running(
            command
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {} under valgrind: {e}", proxy.name()))?,
        );
        // Valgrind starts slowly.
        wait_listening(port, Duration::from_secs(60))?;
        let conninfo = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres");
        let (c, t) = (CLIENTS.to_string(), transactions.to_string());
        let args = [
            "-n", "-S", "-c", &c, "-j", "1", "-t", &t, "-M", mode, &conninfo,
        ];
        pgbench(&args, Duration::from_secs(600))
            .map_err(|e| format!("pgbench through {}: {e}", proxy.name()))?;
        running.interrupt(proxy.name(), Duration::from_secs(60))?;
        read_summary(&out)
    }
}

/// The `summary:` line of a cachegrind output file, in the order of its `events:` line.
fn read_summary(path: &Path) -> Result<Counts, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let field = |prefix: &str| -> Result<Vec<&str>, String> {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|l| l.split_whitespace().collect())
            .ok_or_else(|| format!("{}: no {prefix:?} line", path.display()))
    };
    let events = field("events:")?;
    let values = field("summary:")?;
    let get = |name: &str| -> Result<u64, String> {
        let i = events
            .iter()
            .position(|e| *e == name)
            .ok_or_else(|| format!("{}: no {name} event", path.display()))?;
        values
            .get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{}: no {name} total", path.display()))
    };
    Ok(Counts {
        instructions: get("Ir")?,
        i1_misses: get("I1mr")?,
        d1_misses: get("D1mr")? + get("D1mw")?,
    })
}

#[cfg(test)]
mod tests {
    use super::read_summary;

    #[test]
    fn the_summary_is_read_by_event_name() {
        let path = std::env::temp_dir().join(format!("pgyard-cg-{}.out", std::process::id()));
        std::fs::write(
            &path,
            "desc: I1 cache: 32768 B, 64 B, 8-way associative\ncmd: x\n\
             events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\nfl=a\n\
             summary: 100 7 1 50 3 0 40 2 0\n",
        )
        .expect("write");
        let c = read_summary(&path).expect("a summary");
        assert_eq!((c.instructions, c.i1_misses, c.d1_misses), (100, 7, 5));
        std::fs::write(&path, "events: Ir\n").expect("write");
        assert!(read_summary(&path).is_err());
        let _ = std::fs::remove_file(&path);
    }
}
