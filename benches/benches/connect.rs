//! `connect_failover/{pgyard_sequential,libpq,pgyard_race,healthy}`: one connect (and close)
//! per iteration to a PostgreSQL 18 primary from pgyard-testkit (trust authentication over
//! TCP, `sslmode=disable`).
//!
//! `connect_single/{pgyard_blocking,pgyard_tokio,libpq,tokio_postgres,tokio_postgres_config}`
//! and `connect_single_scram/…`: one connect and close per iteration to one host, with trust
//! and with SCRAM-SHA-256, the ids taking turns within every iteration (see `interleaved`);
//! the paired ratios printed after each group are the figures the goal is judged on. Goal:
//! pgyard ≤ 1.0× libpq and ≤ 1.0× tokio-postgres in both. Every id but one starts from the
//! connection string (`tokio_postgres` through `tokio_postgres::connect`);
//! `tokio_postgres_config` connects from a `Config` parsed once, as a pool holding one does.
//! Run one group with `cargo bench -p pgyard-benches --bench connect -- connect_single`.
//!
//! `connect_tls/{pgyard_blocking,pgyard_tokio,libpq}`: the same over TLS with
//! `sslmode=verify-full` against a CA-signed certificate for `localhost` (the chain checked
//! by webpki, then by OpenSSL's rules in pgyard, by OpenSSL in libpq), ids taking turns as
//! above. tokio-postgres is left out: this workspace has no TLS connector for it.
//!
//! The failover ids use the host list [hung, hung, refused, primary] with `connect_timeout=2`:
//! two listeners of this benchmark that accept and never answer, then a port nothing listens
//! on, then the primary. `pgyard_sequential` (the blocking adapter, libpq's strategy) and
//! `libpq` (libpq 18's `PQconnectdb`, `PQstatus`, `PQfinish`) wait out both timeouts, about
//! 4 s per iteration; `pgyard_race` starts an attempt every stagger (250 ms by default) and
//! at once after a failure, so it should land about 2 × stagger after `healthy`, which is
//! pgyard straight to the primary.
//!
//! Goals: `pgyard_sequential` within 10% of `libpq`; `pgyard_race` ≤ `healthy` + 2 × stagger
//! + 10%. The slow ids run 10 single-iteration samples (flat sampling), about 40 s each.

use pgyard_blocking::SessionInfo;
use std::ffi::CString;
use std::hint::black_box;
use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, SamplingMode};
use pgyard_benches::libpq18::Libpq18;
use pgyard_blocking::{ConnectOptions, Strategy};
use pgyard_testkit::cluster::{Auth, Options, Primary, DEFAULT_PASSWORD};
use pgyard_testkit::fixtures::{pki_tls_options, server_readable_dir, write_pki};
use pgyard_testkit::postgres;

/// Seed of pgyard's random source, fixed so that no connect draws from the OS.
const SEED: u64 = 0x00c0_ffee;

/// A listener on 127.0.0.1 that accepts every connection and never sends a byte; each
/// connection is held (read and discarded) until the client closes it.
fn hung_listener() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a hung listener");
    let port = listener.local_addr().expect("listener address").port();
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || drain(stream));
        }
    });
    port
}

/// Reads until the peer closes, answering nothing.
fn drain(mut stream: TcpStream) {
    let mut buf = [0u8; 512];
    while matches!(stream.read(&mut buf), Ok(n) if n > 0) {}
}

/// A loopback port that refuses connections: bound by a throwaway listener, then released.
fn refused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a throwaway listener");
    let port = listener.local_addr().expect("listener address").port();
    drop(listener);
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "port {port} was expected to refuse connections"
    );
    port
}

/// Connects with pgyard's blocking adapter and checks that it reached `port`.
fn pgyard_connect(conninfo: &str, options: &ConnectOptions, port: u16) -> pgyard_blocking::Session {
    let s = pgyard_blocking::connect_with(conninfo, options)
        .unwrap_or_else(|e| panic!("pgyard could not connect with {conninfo:?}: {e}"));
    assert_eq!(s.port(), Some(port), "pgyard landed elsewhere");
    s
}

/// Runs `f` once and reports how long it took (a sanity check printed before timing).
fn once(name: &str, f: impl FnOnce()) {
    let start = Instant::now();
    f();
    eprintln!(
        "connect_failover/{name}: one untimed run took {:?}",
        start.elapsed()
    );
}

/// Configures `group` for the next id: flat sampling, `measure` of measurement time.
fn timing(group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, measure: Duration) {
    group
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(measure);
}

fn connect_failover(c: &mut Criterion, libpq: &Libpq18) {
    let primary = Primary::start(Options::default()).expect("start a PostgreSQL 18 primary");
    let port = primary.port();
    let (hung1, hung2, refused) = (hung_listener(), hung_listener(), refused_port());

    let failover = format!(
        "host=127.0.0.1,127.0.0.1,127.0.0.1,127.0.0.1 port={hung1},{hung2},{refused},{port} \
         connect_timeout=2 user=postgres dbname=postgres sslmode=disable"
    );
    let healthy = format!("{} connect_timeout=2 sslmode=disable", primary.conninfo());
    let failover_c = CString::new(failover.as_str()).expect("conninfo holds no NUL byte");
    let sequential = ConnectOptions::default()
        .seed(SEED)
        .strategy(Strategy::Sequential);
    let race = ConnectOptions::default()
        .seed(SEED)
        .strategy(Strategy::Race);
    let direct = ConnectOptions::default().seed(SEED);

    // Every id reaches the primary, and the failover ids take roughly the expected time.
    once("pgyard_sequential", || {
        drop(pgyard_connect(&failover, &sequential, port))
    });
    once("libpq", || {
        let conn = libpq
            .connect(&failover_c)
            .unwrap_or_else(|e| panic!("libpq 18 could not connect: {e}"));
        assert_eq!(conn.port(), port.to_string(), "libpq landed elsewhere");
    });
    once("pgyard_race", || {
        drop(pgyard_connect(&failover, &race, port))
    });
    once("healthy", || drop(pgyard_connect(&healthy, &direct, port)));

    let mut group = c.benchmark_group("connect_failover");
    group.sample_size(10);
    // About 4 s per iteration: 10 samples of one iteration each. Flat sampling rounds the
    // iterations per sample up, so the target stays a little under 10 × 4 s (criterion then
    // warns that it needs about 40 s, which is expected).
    timing(&mut group, Duration::from_secs(36));
    group.bench_function("pgyard_sequential", |b| {
        b.iter(|| black_box(pgyard_connect(&failover, &sequential, port)))
    });
    group.bench_function("libpq", |b| {
        b.iter(|| {
            let conn = libpq.connect(&failover_c).expect("libpq 18 connects");
            black_box(&conn);
        })
    });
    // About 0.5 s per iteration.
    timing(&mut group, Duration::from_secs(8));
    group.bench_function("pgyard_race", |b| {
        b.iter(|| black_box(pgyard_connect(&failover, &race, port)))
    });
    timing(&mut group, Duration::from_secs(5));
    group.bench_function("healthy", |b| {
        b.iter(|| black_box(pgyard_connect(&healthy, &direct, port)))
    });
    group.finish();
    drop(primary);
}

/// One group of single-host connects (and closes) to the server behind `conninfo`: pgyard's
/// blocking and tokio adapters, libpq 18, and tokio-postgres, each checked once first.
fn connect_single_group(c: &mut Criterion, name: &str, conninfo: &str, libpq: &Libpq18, port: u16) {
    let options = ConnectOptions::default().seed(SEED);
    let tokio_options = pgyard_tokio::ConnectOptions::default().seed(SEED);
    let libpq_c = CString::new(conninfo).expect("conninfo holds no NUL byte");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let pg_config: tokio_postgres::Config = conninfo.parse().expect("tokio-postgres parses it");

    let pgyard_tokio_once = || async {
        let s = pgyard_tokio::connect_with(conninfo, &tokio_options)
            .await
            .unwrap_or_else(|e| panic!("pgyard-tokio could not connect: {e}"));
        assert_eq!(pgyard_tokio::SessionInfo::port(&s), Some(port));
        s.close().await;
    };
    // From the connection string each time, as the other ids start (`PQconnectdb` and
    // pgyard's `connect_with` parse theirs on every call).
    let tokio_postgres_once = || async {
        let (client, connection) = tokio_postgres::connect(conninfo, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("tokio-postgres could not connect: {e}"));
        // Dropping the client makes the connection send Terminate and end.
        drop(client);
        connection.await.expect("tokio-postgres closes cleanly");
    };
    // From a `Config` parsed once, as a pool holding one would connect.
    let tokio_postgres_config_once = || async {
        let (client, connection) = pg_config
            .connect(tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("tokio-postgres could not connect: {e}"));
        drop(client);
        connection.await.expect("tokio-postgres closes cleanly");
    };
    // Each id reaches the server before anything is timed.
    pgyard_connect(conninfo, &options, port).close();
    rt.block_on(pgyard_tokio_once());
    rt.block_on(tokio_postgres_once());
    rt.block_on(tokio_postgres_config_once());
    let conn = libpq
        .connect(&libpq_c)
        .unwrap_or_else(|e| panic!("libpq 18 could not connect: {e}"));
    assert_eq!(conn.port(), port.to_string(), "libpq landed elsewhere");
    drop(conn);

    let mut ids: Vec<Id<'_>> = vec![
        (
            "pgyard_blocking",
            Box::new(|| pgyard_connect(conninfo, &options, port).close()),
        ),
        (
            "pgyard_tokio",
            Box::new(|| rt.block_on(pgyard_tokio_once())),
        ),
        (
            "libpq",
            Box::new(|| {
                let conn = libpq.connect(&libpq_c).expect("libpq 18 connects");
                black_box(&conn);
            }),
        ),
        (
            "tokio_postgres",
            Box::new(|| rt.block_on(tokio_postgres_once())),
        ),
        (
            "tokio_postgres_config",
            Box::new(|| rt.block_on(tokio_postgres_config_once())),
        ),
    ];
    run_interleaved(c, name, &mut ids);
}

/// Runs the group `name` of `ids`. Each iteration runs every id (one connect each) and the id
/// being measured reports only its own connect's time, so it is sampled beside the others
/// rather than minutes apart: the server's connect cost drifts by more than the differences
/// between ids. The wall time is as many times what criterion plans for as there are ids; its
/// warning says so. The paired figures are printed after the group.
fn run_interleaved(c: &mut Criterion, name: &str, ids: &mut [Id<'_>]) {
    let names: Vec<&str> = ids.iter().map(|(n, _)| *n).collect();
    let mut paired = Paired::new(ids.len());
    let mut group = c.benchmark_group(name);
    group
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for (me, own) in names.iter().enumerate() {
        group.bench_function(*own, |b| {
            b.iter_custom(|iters| interleaved(ids, &mut paired, me, iters))
        });
    }
    group.finish();
    paired.report(name, &names);
}

/// One id of a group: its name and one connect and close.
type Id<'a> = (&'static str, Box<dyn FnMut() + 'a>);

/// Every round's time of every id, whichever id criterion was measuring: the paired figures
/// printed after each group compare ids over the same rounds.
struct Paired {
    rounds: Vec<Vec<Duration>>,
    /// State of the xorshift that orders each round.
    random: u64,
}

impl Paired {
    fn new(ids: usize) -> Self {
        Paired {
            rounds: vec![Vec::new(); ids],
            random: SEED,
        }
    }

    fn next_random(&mut self) -> u64 {
        let mut x = self.random;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.random = x;
        x
    }

    /// Prints each id's median connect time over all rounds, and the median over rounds of
    /// its time divided by each peer's time in the same round.
    fn report(&self, group: &str, names: &[&str]) {
        let n = self.rounds.first().map_or(0, Vec::len);
        if n == 0 {
            return;
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        eprintln!("{group}: paired over {n} rounds (each id once per round)");
        for (i, own) in names.iter().enumerate() {
            let ms = median(
                self.rounds[i]
                    .iter()
                    .map(|d| d.as_secs_f64() * 1e3)
                    .collect(),
            );
            let ratios: Vec<String> = names
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(j, peer)| {
                    let r = self.rounds[i]
                        .iter()
                        .zip(&self.rounds[j])
                        .map(|(a, b)| a.as_secs_f64() / b.as_secs_f64())
                        .collect();
                    format!("{:.3}x {peer}", median(r))
                })
                .collect();
            eprintln!("  {group}/{own}: median {ms:.3} ms; {}", ratios.join(", "));
        }
    }
}

/// Runs `iters` rounds of every id in `ids` and returns the time `ids[me]` took in total.
/// Each round takes the ids in a fresh order (a fixed-seed shuffle), so that every id comes
/// right after every other about equally often: a connect right after a close meets the
/// previous backend still exiting, and a fixed rotation would always put an id behind the
/// same predecessor.
fn interleaved(ids: &mut [Id<'_>], paired: &mut Paired, me: usize, iters: u64) -> Duration {
    let mut order: Vec<usize> = (0..ids.len()).collect();
    let mut mine = Duration::ZERO;
    for _ in 0..iters {
        for k in (1..order.len()).rev() {
            let j = (paired.next_random() % (k as u64 + 1)) as usize;
            order.swap(k, j);
        }
        for &i in &order {
            let start = Instant::now();
            (ids[i].1)();
            let took = start.elapsed();
            paired.rounds[i].push(took);
            if i == me {
                mine += took;
            }
        }
    }
    mine
}

/// `connect_single` (trust) and `connect_single_scram` (SCRAM-SHA-256, PBKDF2 with the
/// server's 4,096 iterations run by every client on every connect: no id caches it).
fn connect_single(c: &mut Criterion, libpq: &Libpq18) {
    let trust = Primary::start(Options::default()).expect("start a trust primary");
    let conninfo = format!("{} sslmode=disable", trust.conninfo());
    connect_single_group(c, "connect_single", &conninfo, libpq, trust.port());
    drop(trust);

    let options = Options {
        auth: Auth::ScramSha256,
        ..Options::default()
    };
    let scram = Primary::start(options).expect("start a SCRAM primary");
    let conninfo = format!(
        "{} password={DEFAULT_PASSWORD} sslmode=disable",
        scram.conninfo()
    );
    connect_single_group(c, "connect_single_scram", &conninfo, libpq, scram.port());
}

/// `connect_tls`: single-host connects with TLS and full verification (see the module's
/// comment), trust authentication.
fn connect_tls(c: &mut Criterion, libpq: &Libpq18) {
    let dir = server_readable_dir("pgyard-bench-tls-").expect("a directory");
    let pki = write_pki(dir.path()).expect("certificates written");
    let primary = Primary::start(pki_tls_options(&pki)).expect("start a TLS primary");
    let port = primary.port();
    let conninfo = format!(
        "host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full \
         sslrootcert={} sslcertmode=disable",
        pki.ca
    );
    let options = ConnectOptions::default().seed(SEED);
    let tokio_options = pgyard_tokio::ConnectOptions::default().seed(SEED);
    let libpq_c = CString::new(conninfo.as_str()).expect("conninfo holds no NUL byte");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let pgyard_tokio_once = || async {
        let s = pgyard_tokio::connect_with(&conninfo, &tokio_options)
            .await
            .unwrap_or_else(|e| panic!("pgyard-tokio could not connect: {e}"));
        assert!(pgyard_tokio::SessionInfo::tls(&s), "TLS in use");
        s.close().await;
    };
    let s = pgyard_connect(&conninfo, &options, port);
    assert!(s.tls(), "TLS in use");
    s.close();
    rt.block_on(pgyard_tokio_once());
    drop(
        libpq
            .connect(&libpq_c)
            .unwrap_or_else(|e| panic!("libpq 18 could not connect: {e}")),
    );
    let mut ids: Vec<Id<'_>> = vec![
        (
            "pgyard_blocking",
            Box::new(|| pgyard_connect(&conninfo, &options, port).close()),
        ),
        (
            "pgyard_tokio",
            Box::new(|| rt.block_on(pgyard_tokio_once())),
        ),
        (
            "libpq",
            Box::new(|| {
                let conn = libpq.connect(&libpq_c).expect("libpq 18 connects");
                black_box(&conn);
            }),
        ),
    ];
    run_interleaved(c, "connect_tls", &mut ids);
}

fn main() {
    // `criterion_main!` spelled out: its generated `pub fn` would lack a doc comment.
    let mut c = Criterion::default().configure_from_args();
    let install = postgres::ensure_installed().expect("PostgreSQL 18 from pgyard-testkit");
    let libpq = Libpq18::load(&install.libpq).expect("load libpq 18");
    connect_single(&mut c, &libpq);
    connect_tls(&mut c, &libpq);
    connect_failover(&mut c, &libpq);
    c.final_summary();
}
