//! The admin console of `pgyard proxy` (database `pgyard`) through psql (libpq 18), in front
//! of a real PostgreSQL 18: SHOW POOLS, CLIENTS, SERVERS, STATS, CONFIG, DATABASES and LISTS
//! against what the clients are doing, PAUSE and RESUME staged by what SHOW reports (never by
//! sleeping), RELOAD without a file, a user who is not an admin refused, and the pools and
//! counters of databases that do not exist forgotten.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pgyard_proxy::classes::TAG;
use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, PoolMode, PoolSettings};
use pgyard_testkit::cluster::{psql, Options, Primary};
use pgyard_tokio::proxy::{spawn, ProxyConfig};
use pgyard_tokio::{connect_with, ConnectOptions, Session};

/// PgBouncer's SHOW POOLS columns as pgyard orders them.
const POOL_COLUMNS: [&str; 14] = [
    "database",
    "user",
    "cl_active",
    "cl_waiting",
    "sv_active",
    "sv_idle",
    "sv_used",
    "sv_tested",
    "sv_login",
    "maxwait",
    "maxwait_us",
    "pool_mode",
    "route",
    "options",
];

/// Where `column` is in a SHOW CLIENTS row (PgBouncer's 21 columns, then pgyard's).
fn client_column(column: &str) -> usize {
    let columns = [
        "type",
        "user",
        "database",
        "replication",
        "state",
        "addr",
        "port",
        "local_addr",
        "local_port",
        "connect_time",
        "request_time",
        "wait",
        "wait_us",
        "close_needed",
        "ptr",
        "link",
        "remote_pid",
        "tls",
        "application_name",
        "prepared_statements",
        "id",
        "route",
        "tag",
        "middleware",
        "unknown_middleware",
    ];
    columns
        .iter()
        .position(|c| *c == column)
        .unwrap_or_else(|| panic!("{column}"))
}

/// A transaction-mode proxy of pool size 1 over `port`, whose auth file has `postgres`
/// (a database user) and `ops` (an admin user with no server account).
async fn proxy(port: u16) -> SocketAddr {
    let text = "\"postgres\" \"pw\"\n\"ops\" \"opspw\"\n";
    let file = AuthFile::parse(text, &mut pgyard_types::rng_from_seed(5)).expect("auth file");
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        admin_users: Arc::new(["ops".to_owned()].into()),
        ..ClientConfig::new(ClientAuth::File(Arc::new(file)), PoolMode::Transaction)
    };
    let mut config = ProxyConfig::new(format!("host=127.0.0.1 port={port}"), client);
    config.pool = PoolSettings {
        size: 1,
        wait_timeout: Duration::from_secs(60),
        ..PoolSettings::default()
    };
    config.seed = Some(11);
    let proxy = spawn(config, "127.0.0.1:0".parse().expect("address"));
    proxy.await.expect("proxy").addr
}

/// A database client through the proxy, with middleware messages on.
async fn client(addr: SocketAddr) -> Session {
    let conninfo = format!(
        "host=127.0.0.1 port={} user=postgres password=pw dbname=postgres sslmode=disable",
        addr.port()
    );
    let options = ConnectOptions::default().middleware(true);
    connect_with(&conninfo, &options).await.expect("client")
}

fn console(addr: SocketAddr, user: &str, password: &str) -> String {
    format!(
        "host=127.0.0.1 port={} user={user} password={password} dbname=pgyard sslmode=disable",
        addr.port()
    )
}

/// psql as the admin user, in a thread of its own (it blocks).
async fn admin(addr: SocketAddr, sql: &'static str) -> std::io::Result<String> {
    let conninfo = console(addr, "ops", "opspw");
    tokio::task::spawn_blocking(move || psql(&conninfo, sql))
        .await
        .expect("psql thread")
}

/// SHOW POOLS's row of the `postgres` pool (primary route), by column.
async fn pool(addr: SocketAddr) -> Vec<(&'static str, String)> {
    let out = admin(addr, "SHOW POOLS").await.expect("SHOW POOLS");
    let line = out
        .lines()
        .find(|l| l.starts_with("postgres|postgres|") && l.ends_with("|primary|"))
        .unwrap_or_else(|| panic!("no postgres pool in:\n{out}"));
    POOL_COLUMNS
        .iter()
        .copied()
        .zip(line.split('|').map(str::to_owned))
        .collect()
}

/// The counts of `columns` in the pool's row.
async fn counts(addr: SocketAddr, columns: &[&str]) -> Vec<String> {
    let row = pool(addr).await;
    columns
        .iter()
        .map(|c| row.iter().find(|(k, _)| k == c).expect("column").1.clone())
        .collect()
}

/// Asks SHOW POOLS until `columns` read `want` (bounded; each look is a real answer).
async fn until_pool(addr: SocketAddr, columns: &[&str], want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = counts(addr, columns).await;
        if got == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{columns:?} stayed {got:?}, not {want:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn one(s: &mut Session, sql: &str) -> String {
    let rows = s.simple_query(sql).await.expect(sql);
    rows[0][0].clone().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_shows_what_clients_do_and_pauses_lending() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;

    // A client holding a transaction, tagged, having sent a class nobody knows; b connects
    // first (its welcome needs the pool's one server).
    let mut a = client(addr).await;
    let b = client(addr).await;
    a.send_middleware(TAG, b"report-7").await.expect("tag");
    a.send_middleware(4_000_000_000, b"?")
        .await
        .expect("unknown");
    a.simple_query("begin").await.expect("begin");
    one(&mut a, "select 1").await;

    // SHOW POOLS: a in its transaction is active and holds the pool's one server; b, idle
    // between transactions, is active too (PgBouncer's cl_active).
    let row = counts(
        addr,
        &[
            "cl_active",
            "cl_waiting",
            "sv_active",
            "sv_idle",
            "pool_mode",
        ],
    );
    assert_eq!(row.await, ["2", "0", "1", "0", "transaction"]);

    // SHOW CLIENTS: the TAG, the unknown class, and the link to the server a holds.
    let out = admin(addr, "show clients;").await.expect("SHOW CLIENTS");
    let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('|').collect()).collect();
    let tagged = rows
        .iter()
        .find(|r| r[client_column("tag")] == "report-7")
        .unwrap_or_else(|| panic!("no tagged client in:\n{out}"));
    assert_eq!(tagged[client_column("state")], "active");
    assert_eq!(tagged[client_column("unknown_middleware")], "1");
    assert_eq!(tagged[client_column("addr")], "127.0.0.1");
    let link = tagged[client_column("link")];
    assert!(link.starts_with('s'), "{out}");
    let me = rows
        .iter()
        .find(|r| r[client_column("database")] == "pgyard")
        .unwrap_or_else(|| panic!("the console's own row in:\n{out}"));
    assert_eq!(me[client_column("user")], "ops");

    // SHOW SERVERS: that server, lent to a.
    let out = admin(addr, "SHOW SERVERS").await.expect("SHOW SERVERS");
    let server: Vec<&str> = out.lines().next().expect("a server").split('|').collect();
    assert_eq!(
        (server[4], server[client_column("ptr")]),
        ("active", link),
        "{out}"
    );
    assert_eq!(server[client_column("link")], tagged[client_column("ptr")]);
    assert_eq!(server[6], primary.port().to_string(), "its port");

    // Someone who is not an admin user is refused after the password check.
    let refused = console(addr, "postgres", "pw");
    let err = tokio::task::spawn_blocking(move || psql(&refused, "SHOW POOLS"))
        .await
        .expect("psql thread")
        .expect_err("not an admin");
    assert!(err.to_string().contains("not allowed"), "{err}");

    // PAUSE while a holds the server: answered only once a has committed.
    let pausing = tokio::spawn(admin(addr, "PAUSE"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin(addr, "SHOW STATE").await.expect("state") != "active|no\npaused|yes\nsuspended|no" {
        assert!(Instant::now() < deadline, "never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The flag is up, and the server is still lent: the PAUSE cannot have been answered.
    assert_eq!(counts(addr, &["sv_active"]).await, ["1"]);
    assert!(
        !pausing.is_finished(),
        "PAUSE answered while a server is lent"
    );
    a.simple_query("commit").await.expect("commit");
    let paused = pausing.await.expect("task").expect("PAUSE answered");
    assert_eq!(paused, "");
    until_pool(addr, &["sv_active", "sv_idle"], &["0", "0"]).await;

    // While paused, b's next transaction waits in the pool; RESUME lets it run.
    let mut b = b;
    let waiting = tokio::spawn(async move {
        let pid = one(&mut b, "select pg_backend_pid()").await;
        (b, pid)
    });
    until_pool(addr, &["cl_waiting"], &["1"]).await;
    assert!(!waiting.is_finished(), "a query ran while paused");
    let err = admin(addr, "PAUSE").await.expect_err("paused already");
    assert!(
        err.to_string().contains("already suspended/paused"),
        "{err}"
    );
    admin(addr, "RESUME").await.expect("RESUME");
    let (_b, pid) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("b runs after RESUME")
        .expect("task");
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    let err = admin(addr, "RESUME").await.expect_err("not paused");
    assert!(
        err.to_string().contains("pooler is not paused/suspended"),
        "{err}"
    );

    // SHOW STATS counts the transactions and the unknown class of the postgres database.
    let out = admin(addr, "SHOW STATS").await.expect("SHOW STATS");
    let stats: Vec<&str> = out
        .lines()
        .find(|l| l.starts_with("postgres|"))
        .unwrap_or_else(|| panic!("{out}"))
        .split('|')
        .collect();
    let xacts: u64 = stats[2].parse().expect("total_xact_count");
    assert!(xacts >= 2, "a's transaction and b's query: {out}");
    assert_eq!(stats[10], "1", "total_unknown_middleware: {out}");

    // SHOW CONFIG names the admin users; RELOAD has no file to read (built in code).
    let out = admin(addr, "SHOW CONFIG").await.expect("SHOW CONFIG");
    assert!(out.contains("admin_users|ops||yes"), "{out}");
    let err = admin(addr, "RELOAD").await.expect_err("no file");
    assert!(err.to_string().contains("nothing to re-read"), "{err}");
    let err = admin(addr, "SHOW MEM").await.expect_err("unknown");
    assert!(
        err.to_string()
            .contains("invalid command 'SHOW MEM', use SHOW HELP;"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_databases_and_lists_answer_with_pgbouncers_columns() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    let mut s = client(addr).await;
    assert_eq!(one(&mut s, "select 1").await, "1");

    // The columns' names and types are the render's tests' (crates/proxy); here the row.
    let out = admin(addr, "SHOW DATABASES").await.expect("SHOW DATABASES");
    let port = primary.port();
    let row = format!("postgres|127.0.0.1|{port}|postgres||1|0|0||0|1|0|0");
    assert_eq!(out, row, "the backend serves the one name in use");

    let out = admin(addr, "SHOW LISTS").await.expect("SHOW LISTS");
    let lists: Vec<&str> = out.lines().collect();
    assert_eq!(
        lists,
        [
            "databases|1",
            "users|1",
            "pools|1",
            "free_clients|0",
            // The client above and psql's own console session.
            "used_clients|2",
            "login_clients|0",
            "free_servers|0",
            "used_servers|1",
            "dns_names|0",
            "dns_zones|0",
            "dns_queries|0",
            "dns_pending|0",
        ],
        "{out}"
    );

    // SHOW USERS, STATS_TOTALS and TOTALS: the one user, and the database's counters as
    // SHOW STATS counts them (transactions, queries, bytes from and to the client).
    let out = admin(addr, "SHOW USERS").await.expect("SHOW USERS");
    assert_eq!(out, "postgres|", "one user, no pool mode of its own");
    let stats = admin(addr, "SHOW STATS").await.expect("SHOW STATS");
    let stats: Vec<&str> = stats.lines().next().expect("a row").split('|').collect();
    let out = admin(addr, "SHOW STATS_TOTALS")
        .await
        .expect("SHOW STATS_TOTALS");
    let totals: Vec<&str> = out.lines().next().expect("a row").split('|').collect();
    assert_eq!(totals[0], "postgres");
    assert_eq!(totals[1..], stats[2..9], "{out}");
    let out = admin(addr, "SHOW TOTALS").await.expect("SHOW TOTALS");
    let named: Vec<&str> = out.lines().collect();
    assert_eq!(named.len(), 7, "{out}");
    assert_eq!(named[0], format!("total_xact_count|{}", totals[1]));
    assert_eq!(named[2], format!("total_client_bytes|{}", totals[3]));
    s.close().await;
}

/// A client looping over database names that do not exist leaves no pool behind for ever
/// (session 35): SHOW POOLS used to keep one row for every name ever asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_of_databases_that_do_not_exist_are_forgotten() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    let names = 200;
    for batch in 0..2 {
        for n in 0..names / 2 {
            let conninfo = format!(
                "host=127.0.0.1 port={} user=postgres password=pw dbname=nodb_{batch}_{n} \
                 sslmode=disable",
                addr.port()
            );
            let Err(error) = connect_with(&conninfo, &ConnectOptions::default()).await else {
                panic!("nodb_{batch}_{n} let in");
            };
            assert!(error.to_string().contains("does not exist"), "{error}");
        }
        // Past the first retry pause (100 ms) of every pool the batch made.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let out = admin(addr, "SHOW POOLS").await.expect("SHOW POOLS");
    let rows = out.lines().filter(|l| l.starts_with("nodb_")).count();
    assert!(rows > 0, "the last names' pools are still there:\n{out}");
    assert!(rows < names, "{rows} pools kept of {names} names:\n{out}");
    // Nor do their clients' counters: no server of theirs ever served one.
    let stats = admin(addr, "SHOW STATS").await.expect("SHOW STATS");
    assert!(!stats.contains("nodb_"), "{stats}");
    // A client its database served still counts once it has gone.
    let mut c = client(addr).await;
    assert_eq!(one(&mut c, "select 1").await, "1");
    c.close().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while admin(addr, "SHOW CLIENTS")
        .await
        .expect("SHOW CLIENTS")
        .lines()
        .any(|l| l.split('|').nth(2) == Some("postgres"))
    {
        assert!(Instant::now() < deadline, "the client stays listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = admin(addr, "SHOW STATS").await.expect("SHOW STATS");
    let row = stats.lines().find(|l| l.starts_with("postgres|"));
    let xacts = row.and_then(|l| l.split('|').nth(2)).unwrap_or_default();
    assert_eq!(xacts, "1", "total_xact_count, select 1: {stats}");
}
