//! `pgyard proxy` (the tokio adapter over pgyard-proxy's machines) between psql or
//! pgyard-tokio clients and a real PostgreSQL 18 primary with a standby.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::classes::{ROUTE, TAG};
use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, PoolMode, PoolSettings};
use pgyard_testkit::cluster::{psql, Options, Primary};
use pgyard_tokio::proxy::{spawn, ProxyConfig};
use pgyard_tokio::{connect, connect_with, ConnectOptions, Session, SessionInfo};

/// A client that asks for middleware messages.
async fn with_middleware(conninfo: &str) -> Session {
    let options = ConnectOptions::default().middleware(true);
    let s = connect_with(conninfo, &options).await.expect("client");
    assert!(
        s.middleware_consumed(),
        "the proxy answers middleware_messages=on"
    );
    s
}

fn config(backend: String, mode: PoolMode, auth: ClientAuth, size: usize) -> ProxyConfig {
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        ..ClientConfig::new(auth, mode)
    };
    let mut config = ProxyConfig::new(backend, client);
    config.pool = PoolSettings {
        size,
        wait_timeout: Duration::from_secs(30),
        ..PoolSettings::default()
    };
    config.seed = Some(7);
    config.max_client_conn = 20;
    config
}

/// A proxy on a free loopback port in front of the servers on `ports`.
async fn proxy_over(ports: &[u16], mode: PoolMode, auth: ClientAuth, size: usize) -> SocketAddr {
    let hosts: Vec<&str> = ports.iter().map(|_| "127.0.0.1").collect();
    let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
    let backend = format!("host={} port={}", hosts.join(","), ports.join(","));
    let cfg = config(backend, mode, auth, size);
    let proxy = spawn(cfg, "127.0.0.1:0".parse().expect("an address"));
    proxy.await.expect("proxy").addr
}

fn via(addr: SocketAddr, user: &str) -> String {
    format!(
        "host=127.0.0.1 port={} user={user} dbname=postgres sslmode=disable",
        addr.port()
    )
}

async fn one(s: &mut Session, sql: &str) -> String {
    let rows = s.simple_query(sql).await.expect(sql);
    rows[0][0].clone().unwrap_or_default()
}

/// Polls `sql` on `standby` until it prints `want`, for up to twenty seconds.
async fn wait_for_standby(standby: &pgyard_testkit::cluster::Node, sql: &str, want: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while standby.psql(sql).expect(sql) != want {
        assert!(
            std::time::Instant::now() < deadline,
            "the standby never caught up: {sql}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// psql in a thread of its own (it blocks).
async fn psql_at(conninfo: String, sql: &'static str) -> std::io::Result<String> {
    tokio::task::spawn_blocking(move || psql(&conninfo, sql))
        .await
        .expect("psql thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_pools_by_transaction_and_keeps_each_clients_settings() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let standby = primary.add_standby("s1").expect("standby").port();
    let p = primary.port();
    let addr = proxy_over(&[p, standby], PoolMode::Transaction, ClientAuth::Trust, 1).await;

    // psql (libpq 18) through the proxy lands on the primary by default.
    let out = psql_at(
        via(addr, "postgres"),
        "select pg_is_in_recovery(), inet_server_port()",
    )
    .await
    .expect("psql through the proxy");
    assert_eq!(out, format!("f|{p}"));

    // ROUTE moves the next transaction; the M frames never reach a server (a server would
    // end the session on them), and an unknown class is dropped.
    let mut c = with_middleware(&via(addr, "postgres")).await;
    c.send_middleware(ROUTE, b"standby").await.expect("route");
    assert_eq!(
        one(&mut c, "select inet_server_port()").await,
        standby.to_string()
    );
    assert_eq!(one(&mut c, "select pg_is_in_recovery()").await, "t");
    c.send_middleware(TAG, b"report-7").await.expect("tag");
    c.send_middleware(4_000_000_000, b"?")
        .await
        .expect("unknown");
    c.send_middleware(ROUTE, b"primary").await.expect("route");
    assert_eq!(
        one(&mut c, "select inet_server_port()").await,
        p.to_string()
    );

    // Pool size 1: two clients take turns on one server connection, a transaction at a time.
    let mut a = connect(&via(addr, "postgres")).await.expect("a");
    let mut b = connect(&via(addr, "postgres")).await.expect("b");
    let pid_a = one(&mut a, "select pg_backend_pid()").await;
    let pid_b = one(&mut b, "select pg_backend_pid()").await;
    assert_eq!(pid_a, pid_b, "one server connection serves both");
    a.simple_query("begin").await.expect("begin");
    one(&mut a, "select 1").await;
    let waiting = tokio::spawn(async move {
        let started = std::time::Instant::now();
        let port = one(&mut b, "select inet_server_port()").await;
        (b, port, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "b waits while a's transaction holds the server"
    );
    a.simple_query("commit").await.expect("commit");
    let (mut b, port, waited) = waiting.await.expect("b");
    assert_eq!(port, p.to_string());
    assert!(waited >= Duration::from_millis(250), "{waited:?}");

    // Settings follow each client across the shared server.
    let zone = one(&mut b, "show TimeZone").await;
    assert_ne!(zone, "Asia/Tokyo");
    a.simple_query("set TimeZone = 'Asia/Tokyo'")
        .await
        .expect("set");
    assert_eq!(one(&mut b, "show TimeZone").await, zone);
    assert_eq!(one(&mut a, "show TimeZone").await, "Asia/Tokyo");
    assert_eq!(one(&mut b, "show TimeZone").await, zone);

    // A client that connects after a's SET is welcomed on the server a last used (one
    // connection in the pool) and must be shown, and run with, the server's own TimeZone,
    // as a direct connection would: a's SET is a's alone.
    a.simple_query("set TimeZone = 'Asia/Tokyo'")
        .await
        .expect("set again, the last to use the server");
    let mut d = connect(&via(addr, "postgres")).await.expect("d");
    assert_eq!(d.parameter("TimeZone"), Some(zone.as_str()));
    assert_eq!(one(&mut d, "show TimeZone").await, zone);
    assert_eq!(one(&mut a, "show TimeZone").await, "Asia/Tokyo");
    drop((a, b, c, d));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_from_the_auth_file_and_malformed_middleware_messages() {
    let primary = Primary::start(Options::default()).expect("primary");
    let mut rng = pgyard_types::rng_from_seed(3);
    let file = AuthFile::parse("\"postgres\" \"s3cret\"\n", &mut rng).expect("auth file");
    let auth = ClientAuth::File(Arc::new(file));
    let addr = proxy_over(&[primary.port()], PoolMode::Session, auth, 2).await;
    let good = format!("{} password=s3cret", via(addr, "postgres"));
    assert_eq!(
        psql_at(good, "select 1").await.expect("right password"),
        "1"
    );
    let bad = format!("{} password=nope", via(addr, "postgres"));
    let err = psql_at(bad, "select 1").await.expect_err("wrong password");
    assert!(
        err.to_string()
            .contains("password authentication failed for user \"postgres\""),
        "{err}"
    );
    let nobody = format!("{} password=x", via(addr, "mallory"));
    let err = psql_at(nobody, "select 1").await.expect_err("unknown user");
    assert!(
        err.to_string()
            .contains("password authentication failed for user \"mallory\""),
        "{err}"
    );

    let mut c = with_middleware(&format!("{} password=s3cret", via(addr, "postgres"))).await;
    assert_eq!(one(&mut c, "select 2").await, "2");
    c.send_middleware(ROUTE, b"master").await.expect("send");
    let err = c.simple_query("select 3").await.expect_err("disconnected");
    assert!(
        err.to_string().contains("invalid ROUTE middleware message"),
        "{err}"
    );
}

/// pgbench's standard output for `args` against the proxy (a thread of its own).
async fn pgbench(args: Vec<String>) -> String {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        pgyard_testkit::fixtures::pgbench(&args, Duration::from_secs(120))
    })
    .await
    .expect("pgbench thread")
    .expect("pgbench")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_runs_through_transaction_pooling() {
    let primary = Primary::start(Options::default()).expect("primary");
    let direct = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        primary.port()
    );
    pgbench(vec![
        "-i".into(),
        "-q".into(),
        "-s".into(),
        "1".into(),
        direct,
    ])
    .await;
    let addr = proxy_over(
        &[primary.port()],
        PoolMode::Transaction,
        ClientAuth::Trust,
        2,
    )
    .await;
    for mode in ["simple", "extended", "prepared"] {
        for select_only in [true, false] {
            // One pgbench thread per client: pgbench prepares statements with the blocking
            // PQprepare, which on a shared thread would stall the thread's other clients while
            // they hold a server mid-transaction (a deadlock any transaction pooler shares).
            let mut args: Vec<String> = ["-n", "-c", "6", "-j", "6", "-t", "50", "-M", mode]
                .iter()
                .map(|s| s.to_string())
                .collect();
            if select_only {
                args.push("-S".into());
            }
            args.push(via(addr, "postgres"));
            let out = pgbench(args).await;
            assert!(
                out.contains("number of transactions actually processed: 300/300"),
                "{mode} select_only={select_only}:\n{out}"
            );
            assert!(out.contains("number of failed transactions: 0"), "{out}");
        }
    }
    // Six clients shared two server connections.
    let servers = psql(
        &format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            primary.port()
        ),
        "select count(*) from pg_stat_activity \
         where backend_type = 'client backend' and pid <> pg_backend_pid()",
    )
    .expect("count");
    let servers: u32 = servers.parse().expect("a number");
    assert!((1..=2).contains(&servers), "{servers} server connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_query_of_the_client_that_asked() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy_over(
        &[primary.port()],
        PoolMode::Transaction,
        ClientAuth::Trust,
        4,
    )
    .await;
    let mut sleeper = connect(&via(addr, "postgres")).await.expect("sleeper");
    let mut bystander = connect(&via(addr, "postgres")).await.expect("bystander");
    let token = sleeper.cancel_token().expect("the proxy's key");
    let bystanding = tokio::spawn(async move {
        let r = bystander.simple_query("select pg_sleep(1.5)").await;
        (bystander, r)
    });
    let started = std::time::Instant::now();
    let sleeping = tokio::spawn(async move { sleeper.simple_query("select pg_sleep(30)").await });
    tokio::time::sleep(Duration::from_millis(400)).await;
    token.cancel().await.expect("cancel sent");
    let err = sleeping.await.expect("task").expect_err("cancelled");
    assert!(
        err.to_string()
            .contains("canceling statement due to user request"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let (_, r) = bystanding.await.expect("task");
    assert!(r.is_ok(), "the other client's query is untouched: {r:?}");
}

/// Whether `sql` is running on the server at `port` (seen from a direct connection).
async fn running_on(port: u16, sql: &str) -> bool {
    let direct =
        format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=disable");
    let mut c = connect(&direct).await.expect("direct connection");
    let probe =
        format!("select count(*) from pg_stat_activity where state = 'active' and query = '{sql}'");
    one(&mut c, &probe).await == "1"
}

/// The failover is staged so that which transaction is in flight is known, not left to
/// timing: one client's query runs on the primary when it stops; four clients hold no
/// server then, and send their next transaction in the gap before the standby is promoted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_fails_only_transactions_in_flight() {
    use pgyard_tokio::ErrorKind;
    let mut primary = Primary::start(Options::default()).expect("primary");
    let p = primary.port();
    let s1 = primary.add_standby("s1").expect("standby").port();
    let addr = proxy_over(&[p, s1], PoolMode::Transaction, ClientAuth::Trust, 5).await;

    // Four clients between transactions, with four idle server connections to the primary
    // behind them (each transaction held its own).
    let mut idle = Vec::new();
    for _ in 0..4 {
        let mut c = connect(&via(addr, "postgres")).await.expect("client");
        c.simple_query("begin").await.expect("begin");
        assert_eq!(
            one(&mut c, "select inet_server_port()").await,
            p.to_string()
        );
        idle.push(c);
    }
    for c in &mut idle {
        c.simple_query("commit").await.expect("commit");
    }

    // The fifth client's query is in flight: the primary is running it.
    const SLEEP: &str = "select pg_sleep(60)";
    let mut busy = connect(&via(addr, "postgres")).await.expect("client");
    let in_flight = tokio::spawn(async move {
        let r = busy.simple_query(SLEEP).await.map(|_| ());
        (busy, r)
    });
    let seen = std::time::Instant::now();
    while !running_on(p, SLEEP).await {
        assert!(
            seen.elapsed() < Duration::from_secs(30),
            "the sleep never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let mut primary = tokio::task::spawn_blocking(move || {
        primary.stop().expect("stop the primary");
        primary
    })
    .await
    .expect("stop thread");
    let (_busy, err) = in_flight.await.expect("in-flight task");
    let err = err.expect_err("the transaction in flight fails");
    let sqlstate = err.sqlstate().map(|s| s.to_string());
    assert!(
        matches!(sqlstate.as_deref(), Some("57P01" | "08006"))
            || err.kind() == ErrorKind::Transient,
        "{err} ({sqlstate:?})"
    );

    // No primary now: the idle servers are dead and s1 is still a standby. The next
    // transactions wait in the pool instead of failing, and run once s1 is promoted.
    let next: Vec<_> = idle
        .into_iter()
        .map(|mut c| {
            tokio::spawn(async move {
                let r = c.simple_query("select inet_server_port()").await;
                r.map(|rows| rows[0][0].clone().unwrap_or_default())
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Kept until the end: dropping the cluster stops its servers.
    let _cluster = tokio::task::spawn_blocking(move || {
        let standby = primary.standby_mut("s1").expect("s1");
        standby.promote().expect("promote s1");
        primary
    })
    .await
    .expect("promote thread");
    for n in next {
        let port = n.await.expect("client task");
        assert_eq!(
            port.expect("a client between transactions never notices"),
            s1.to_string()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_lsn_reads_a_write_back_through_the_standby_route() {
    use pgyard_proxy::classes::MIN_LSN;
    let mut primary = Primary::start(Options::default()).expect("primary");
    let s1 = primary.add_standby("s1").expect("standby").port();
    let p = primary.port();
    let addr = proxy_over(&[p, s1], PoolMode::Transaction, ClientAuth::Trust, 2).await;
    let mut c = with_middleware(&via(addr, "postgres")).await;
    c.simple_query("create table written(x int)")
        .await
        .expect("ddl");
    // The table must exist on the standby before replay stops, or the stale read below
    // finds no table at all instead of an empty one.
    let standby = primary.standby("s1").expect("s1");
    wait_for_standby(standby, "select to_regclass('written') is not null", "t").await;
    // A standby that has stopped replaying cannot serve a read of what comes next.
    standby.psql("select pg_wal_replay_pause()").expect("pause");
    c.simple_query("insert into written values (1)")
        .await
        .expect("write");
    let lsn = one(&mut c, "select pg_current_wal_insert_lsn()").await;
    let read = "select count(*)::text || ' ' || inet_server_port() from written";

    c.send_middleware(ROUTE, b"standby").await.expect("route");
    c.send_middleware(MIN_LSN, lsn.as_bytes())
        .await
        .expect("min lsn");
    assert_eq!(
        one(&mut c, read).await,
        format!("1 {p}"),
        "falls back to the primary"
    );
    // Without MIN_LSN the standby route serves the (stale) standby.
    assert_eq!(one(&mut c, read).await, format!("0 {s1}"));

    standby
        .psql("select pg_wal_replay_resume()")
        .expect("resume");
    wait_for_standby(standby, "select count(*) from written", "1").await;
    c.send_middleware(MIN_LSN, lsn.as_bytes())
        .await
        .expect("min lsn");
    assert_eq!(
        one(&mut c, read).await,
        format!("1 {s1}"),
        "a caught-up standby serves it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_beyond_max_client_conn_are_refused() {
    let primary = Primary::start(Options::default()).expect("primary");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let mut cfg = config(backend, PoolMode::Transaction, ClientAuth::Trust, 1);
    cfg.max_client_conn = 1;
    let addr = spawn(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("proxy")
        .addr;
    let mut first = connect(&via(addr, "postgres"))
        .await
        .expect("the first fits");
    let err = psql_at(via(addr, "postgres"), "select 1")
        .await
        .expect_err("the second is one too many");
    assert!(
        err.to_string()
            .contains("no more connections allowed (max_client_conn)"),
        "{err}"
    );
    assert_eq!(one(&mut first, "select 1").await, "1");
    drop(first);
    // The slot is free again once the first has gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match psql_at(via(addr, "postgres"), "select 2").await {
            Ok(out) => break assert_eq!(out, "2"),
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The old primary, listed first in the backend, comes back as a standby of the promoted
/// one: no transaction for the primary route lands on it again, neither through a server
/// connection pooled before the failover nor through a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejoined_old_primary_never_serves_the_primary_route() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let p = primary.port();
    let s1 = primary.add_standby("s1").expect("standby").port();
    let addr = proxy_over(&[p, s1], PoolMode::Transaction, ClientAuth::Trust, 4).await;

    // Four transactions at once: four server connections to the old primary stay pooled.
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut c = with_middleware(&via(addr, "postgres")).await;
        c.simple_query("begin").await.expect("begin");
        assert_eq!(
            one(&mut c, "select inet_server_port()").await,
            p.to_string()
        );
        clients.push(c);
    }
    for c in &mut clients {
        c.simple_query("commit").await.expect("commit");
    }
    let pooled = primary
        .psql(
            "select count(*) from pg_stat_activity \
             where backend_type = 'client backend' and application_name <> 'psql'",
        )
        .expect("count");
    assert_eq!(pooled, "4", "the servers pooled before the failover");

    // Failover, then the old primary back on its port as a standby of s1.
    let _cluster = tokio::task::spawn_blocking(move || {
        primary.stop().expect("stop the primary");
        primary
            .standby_mut("s1")
            .expect("s1")
            .promote()
            .expect("promote");
        primary.rejoin_as_standby_of("s1").expect("rejoin");
        assert_eq!(
            primary.psql("select pg_is_in_recovery()").expect("role"),
            "t"
        );
        primary
    })
    .await
    .expect("failover thread");

    let here = "select inet_server_port() || ' ' || pg_is_in_recovery()";
    let new_primary = format!("{s1} false");
    for round in 0..30 {
        for (i, c) in clients.iter_mut().enumerate() {
            // Half say ROUTE primary each time; the rest rely on the default route.
            if (round + i) % 2 == 0 {
                c.send_middleware(ROUTE, b"primary").await.expect("route");
            }
            let at = one(c, here).await;
            assert_eq!(at, new_primary, "round {round}, client {i}");
        }
    }
    // The rejoined server does serve, as a standby.
    let c = &mut clients[0];
    c.send_middleware(ROUTE, b"standby").await.expect("route");
    assert_eq!(one(c, here).await, format!("{p} true"));
    c.send_middleware(ROUTE, b"primary").await.expect("route");
    c.simple_query("create table after_failover(x int)")
        .await
        .expect("a write lands on the new primary");
}

/// The proxy's server connections on the server at `port` (an earlier probe's backend may
/// still be on its way out, so probes are told apart by name).
async fn backends(port: u16) -> String {
    let direct = format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=disable \
         application_name=probe"
    );
    let mut c = connect(&direct).await.expect("direct connection");
    let sql = "select count(*) from pg_stat_activity \
               where backend_type = 'client backend' and application_name <> 'probe'";
    one(&mut c, sql).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_grows_the_pool_for_a_waiting_client() {
    let primary = Primary::start(Options::default()).expect("primary");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let cfg = config(backend, PoolMode::Transaction, ClientAuth::Trust, 1);
    let proxy = spawn(cfg.clone(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("proxy");
    let mut a = connect(&via(proxy.addr, "postgres")).await.expect("a");
    let mut b = connect(&via(proxy.addr, "postgres")).await.expect("b");
    a.simple_query("begin").await.expect("begin");
    one(&mut a, "select 1").await;
    // a holds the pool's only server until it commits, so b can only run on a second one.
    let waiting = tokio::spawn(async move { one(&mut b, "select 2").await });
    assert_eq!(backends(primary.port()).await, "1");

    let mut bad = cfg.clone();
    bad.pool.size = 0;
    assert!(proxy.reload(bad).is_err(), "a pool of none is refused");
    let mut bigger = cfg;
    bigger.pool.size = 2;
    proxy.reload(bigger).expect("reload");
    assert_eq!(proxy.config().pool.size, 2);
    let got = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("b got a server of its own")
        .expect("b's task");
    assert_eq!(got, "2");
    assert_eq!(backends(primary.port()).await, "2");
    a.simple_query("commit").await.expect("commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_waits_for_session_clients_up_to_its_bound() {
    let primary = Primary::start(Options::default()).expect("primary");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let cfg = config(backend, PoolMode::Session, ClientAuth::Trust, 2);
    let proxy = spawn(cfg.clone(), "127.0.0.1:0".parse().unwrap())
        .await
        .expect("proxy");
    let addr = proxy.addr;
    let mut c = connect(&via(addr, "postgres")).await.expect("client");
    one(&mut c, "select 1").await;
    let draining = tokio::spawn(async move { proxy.shutdown(Duration::from_secs(120)).await });
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(std::time::Instant::now() < deadline, "still accepting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A session-mode client is not closed under it; the shutdown waits while it stays.
    c.simple_query("set application_name = 'still here'")
        .await
        .expect("set");
    assert_eq!(one(&mut c, "show application_name").await, "still here");
    assert!(!draining.is_finished());
    drop(c);
    let left = tokio::time::timeout(Duration::from_secs(20), draining)
        .await
        .expect("the shutdown ends once the client left")
        .expect("task");
    assert!(left, "every client left within the bound");

    // A client that never leaves is cut off at the bound.
    let proxy = spawn(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("proxy");
    let mut stays = connect(&via(proxy.addr, "postgres")).await.expect("client");
    one(&mut stays, "select 1").await;
    assert!(!proxy.shutdown(Duration::from_millis(200)).await);
    assert!(stays.simple_query("select 1").await.is_err(), "cut off");
}
