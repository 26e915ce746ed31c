//! The console commands of a switchover script (PgBouncer's DISABLE, RECONNECT, WAIT_CLOSE
//! and ENABLE) through psql (libpq 18), against `pgyard proxy` in front of a real
//! PostgreSQL 18: a disabled database refuses new logins and keeps its clients, RECONNECT
//! closes idle servers at once and lent ones when they come back, WAIT_CLOSE answers only
//! once the last one has closed (staged by what SHOW reports, never by sleeping), and the
//! clients' next transactions run on backends opened anew.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{psql, Options, Primary};
use pgyard_tokio::{connect, Session};

mod common;

/// A transaction-mode proxy of pool size 2 over `port`, under trust (every user may use the
/// console).
async fn proxy(port: u16) -> SocketAddr {
    common::transaction_proxy(port, 2, 23, |_| {}).await
}

fn conninfo(addr: SocketAddr, dbname: &str) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres dbname={dbname} sslmode=disable",
        addr.port()
    )
}

/// psql on the console, in a thread of its own (it blocks).
async fn admin(addr: SocketAddr, sql: &'static str) -> std::io::Result<String> {
    let conninfo = conninfo(addr, "pgyard");
    tokio::task::spawn_blocking(move || psql(&conninfo, sql))
        .await
        .expect("psql thread")
}

async fn one(s: &mut Session, sql: &str) -> String {
    let rows = s.simple_query(sql).await.expect(sql);
    rows[0][0].clone().unwrap_or_default()
}

/// SHOW SERVERS's rows as (state, close_needed, remote_pid).
async fn servers(addr: SocketAddr) -> Vec<(String, String, String)> {
    let out = admin(addr, "SHOW SERVERS").await.expect("SHOW SERVERS");
    out.lines()
        .map(|l| {
            let c: Vec<&str> = l.split('|').collect();
            (c[4].to_owned(), c[13].to_owned(), c[16].to_owned())
        })
        .collect()
}

/// Console sessions running a command now (the one asking included).
async fn busy_consoles(addr: SocketAddr) -> usize {
    let out = admin(addr, "SHOW CLIENTS").await.expect("SHOW CLIENTS");
    out.lines()
        .map(|l| l.split('|').collect::<Vec<_>>())
        .filter(|c| c[2] == "pgyard" && c[4] == "active")
        .count()
}

/// Asks `check` until it holds (bounded; each look is a real answer).
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disable_reconnect_wait_close_and_enable_as_a_switchover_script_runs_them() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    let direct = format!("{} sslmode=disable", primary.conninfo());

    // a holds a server in a transaction; b has been served and is idle between transactions.
    let mut a = connect(&conninfo(addr, "postgres")).await.expect("a");
    let mut b = connect(&conninfo(addr, "postgres")).await.expect("b");
    a.simple_query("begin").await.expect("begin");
    let pid_a = one(&mut a, "select pg_backend_pid()").await;
    let pid_b = one(&mut b, "select pg_backend_pid()").await;
    assert_ne!(pid_a, pid_b, "a holds its server, so b ran on the other");

    // DISABLE: a new login is refused with PgBouncer's words; the clients in stay.
    assert_eq!(admin(addr, "DISABLE postgres").await.expect("DISABLE"), "");
    let refused = conninfo(addr, "postgres");
    let err = tokio::task::spawn_blocking(move || psql(&refused, "select 1"))
        .await
        .expect("psql thread")
        .expect_err("disabled");
    assert!(
        err.to_string()
            .contains("FATAL:  database \"postgres\" is disabled"),
        "{err}"
    );
    let out = admin(addr, "SHOW DATABASES").await.expect("SHOW DATABASES");
    assert!(
        out.starts_with("postgres|") && out.ends_with("|0|1"),
        "{out}"
    );
    assert_eq!(one(&mut b, "select 1").await, "1", "b is still served");

    // RECONNECT: b's idle server closes at once, a's is marked and stays while lent.
    assert_eq!(
        admin(addr, "RECONNECT postgres").await.expect("RECONNECT"),
        ""
    );
    until("b's idle server closed", || async {
        servers(addr).await == [("active".into(), "1".into(), pid_a.clone())]
    })
    .await;

    // WAIT_CLOSE waits for a's server: its console is seen waiting, then a commits.
    let waiting = tokio::spawn(admin(addr, "WAIT_CLOSE postgres"));
    until("WAIT_CLOSE waiting", || async {
        busy_consoles(addr).await == 2
    })
    .await;
    assert!(
        !waiting.is_finished(),
        "answered while a retired server is lent"
    );
    a.simple_query("commit").await.expect("commit");
    let answered = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("WAIT_CLOSE answered once a's server closed")
        .expect("task");
    assert_eq!(answered.expect("WAIT_CLOSE"), "");
    assert!(
        servers(addr).await.iter().all(|s| s.2 != pid_a),
        "a's server is gone"
    );

    // Both backends have exited; the next transactions run on backends opened anew.
    let old = format!("select count(*) from pg_stat_activity where pid in ({pid_a}, {pid_b})");
    until("the old backends exited", || {
        let (direct, old) = (direct.clone(), old.clone());
        async move {
            tokio::task::spawn_blocking(move || psql(&direct, &old))
                .await
                .expect("psql thread")
                .expect("pg_stat_activity")
                == "0"
        }
    })
    .await;
    for s in [&mut a, &mut b] {
        let pid = one(s, "select pg_backend_pid()").await;
        assert!(pid != pid_a && pid != pid_b, "{pid} is an old backend");
    }

    // ENABLE admits logins again; with nothing retired, WAIT_CLOSE answers at once.
    assert_eq!(admin(addr, "ENABLE postgres").await.expect("ENABLE"), "");
    let mut c = connect(&conninfo(addr, "postgres"))
        .await
        .expect("c after ENABLE");
    assert_eq!(one(&mut c, "select 1").await, "1");
    assert_eq!(admin(addr, "WAIT_CLOSE").await.expect("WAIT_CLOSE"), "");
    for s in [a, b, c] {
        s.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_commands_are_refused_with_pgbouncers_texts() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    for (sql, text) in [
        ("DISABLE nosuch", "no such database: nosuch"),
        ("RECONNECT \"Postgres\"", "no such database: Postgres"),
        ("WAIT_CLOSE nosuch", "no such database: nosuch"),
        ("ENABLE", "a database is required"),
        ("RECONNECT pgyard", "cannot reconnect admin db: pgyard"),
        ("WAIT_CLOSE pgyard", "cannot wait in admin db: pgyard"),
        ("ENABLE pgyard", "cannot disable admin db: pgyard"),
        (
            "RECONNECT a b",
            "invalid command 'RECONNECT a b', use SHOW HELP;",
        ),
    ] {
        let err = admin(addr, sql).await.expect_err(sql);
        assert!(
            err.to_string().contains(&format!("ERROR:  {text}")),
            "{sql}: {err}"
        );
    }
    // A name in use is known without a [databases] entry, as PgBouncer's `*` databases are;
    // RECONNECT of every database needs no name.
    let mut s = connect(&conninfo(addr, "postgres")).await.expect("client");
    assert_eq!(one(&mut s, "select 1").await, "1");
    assert_eq!(admin(addr, "RECONNECT").await.expect("RECONNECT"), "");
    assert_eq!(
        admin(addr, "wait_close postgres;")
            .await
            .expect("WAIT_CLOSE"),
        ""
    );
    assert_eq!(
        admin(addr, "disable \"postgres\"").await.expect("DISABLE"),
        ""
    );
    assert_eq!(admin(addr, "ENABLE postgres").await.expect("ENABLE"), "");
    s.close().await;
}

/// SHOW POOLS's `cl_waiting` and `sv_active` of `database`'s pool (user postgres, primary).
async fn pool_counts(addr: SocketAddr, database: &str) -> Option<(String, String)> {
    let out = admin(addr, "SHOW POOLS").await.expect("SHOW POOLS");
    let prefix = format!("{database}|postgres|");
    out.lines()
        .find(|l| l.starts_with(&prefix) && l.ends_with("|primary|"))
        .map(|l| {
            let c: Vec<&str> = l.split('|').collect();
            (c[3].to_owned(), c[4].to_owned())
        })
}

/// SHOW DATABASES's `paused` of `database`.
async fn paused(addr: SocketAddr, database: &str) -> String {
    let out = admin(addr, "SHOW DATABASES").await.expect("SHOW DATABASES");
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("{database}|")))
        .unwrap_or_else(|| panic!("no {database} in:\n{out}"));
    row.split('|').nth(11).expect("paused").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_resume_and_kill_of_one_database_leave_the_others_served() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    let mut a = connect(&conninfo(addr, "postgres")).await.expect("a");
    let mut t = connect(&conninfo(addr, "template1")).await.expect("t");

    // PAUSE postgres while a holds a server in a transaction: not answered until a commits;
    // template1 is served meanwhile, and only postgres shows paused.
    a.simple_query("begin").await.expect("begin");
    one(&mut a, "select 1").await;
    let pausing = tokio::spawn(admin(addr, "PAUSE postgres"));
    until("postgres paused", || async {
        paused(addr, "postgres").await == "1"
    })
    .await;
    assert_eq!(paused(addr, "template1").await, "0");
    assert_eq!(one(&mut t, "select current_database()").await, "template1");
    assert!(
        !pausing.is_finished(),
        "PAUSE answered while a server is lent"
    );
    a.simple_query("commit").await.expect("commit");
    let answer = tokio::time::timeout(Duration::from_secs(30), pausing)
        .await
        .expect("PAUSE answered after the commit")
        .expect("task");
    assert_eq!(answer.expect("PAUSE"), "");

    // a's next transaction waits; RESUME postgres lets it run.
    let waiting = tokio::spawn(async move {
        let db = one(&mut a, "select current_database()").await;
        (a, db)
    });
    until("a waiting", || async {
        pool_counts(addr, "postgres")
            .await
            .is_some_and(|c| c.0 == "1")
    })
    .await;
    assert!(!waiting.is_finished(), "a query ran on a paused database");
    assert_eq!(admin(addr, "RESUME postgres").await.expect("RESUME"), "");
    let (a, db) = tokio::time::timeout(Duration::from_secs(30), waiting)
        .await
        .expect("a runs after RESUME")
        .expect("task");
    assert_eq!(db, "postgres");
    let err = admin(addr, "RESUME postgres")
        .await
        .expect_err("not paused");
    assert!(
        err.to_string().contains("database postgres is not paused"),
        "{err}"
    );

    // KILL postgres while psql runs a query there: psql is told `database removed` at once.
    let victim = conninfo(addr, "postgres");
    let sleeping = tokio::task::spawn_blocking(move || psql(&victim, "select pg_sleep(20)"));
    until("psql's query running", || async {
        pool_counts(addr, "postgres")
            .await
            .is_some_and(|c| c.1 == "1")
    })
    .await;
    assert_eq!(admin(addr, "KILL postgres").await.expect("KILL"), "");
    let killed = tokio::time::timeout(Duration::from_secs(15), sleeping)
        .await
        .expect("the killed psql ends before its query would")
        .expect("psql thread")
        .expect_err("killed");
    assert!(
        killed.to_string().contains("FATAL:  database removed"),
        "{killed}"
    );
    assert_eq!(paused(addr, "postgres").await, "1", "KILL pauses");
    assert_eq!(
        one(&mut t, "select 1").await,
        "1",
        "template1 is still served"
    );

    // A new client of the killed database waits for RESUME.
    let late = tokio::spawn(connect_owned(conninfo(addr, "postgres")));
    until("the new client waiting", || async {
        pool_counts(addr, "postgres")
            .await
            .is_some_and(|c| c.0 == "1")
    })
    .await;
    assert!(!late.is_finished(), "logged in to a killed database");
    assert_eq!(admin(addr, "RESUME postgres").await.expect("RESUME"), "");
    let mut late = tokio::time::timeout(Duration::from_secs(30), late)
        .await
        .expect("logged in after RESUME")
        .expect("task");
    assert_eq!(one(&mut late, "select 1").await, "1");
    for s in [a, t, late] {
        s.close().await;
    }
}

async fn connect_owned(conninfo: String) -> Session {
    connect(&conninfo).await.expect("connect")
}
