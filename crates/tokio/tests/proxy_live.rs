//! `pgyard proxy` (the tokio adapter over pgyard-proxy's machines) between psql or
//! pgyard-tokio clients and a real PostgreSQL 18 primary with a standby.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::classes::{ROUTE, TAG};
use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, PoolMode, PoolSettings, Route};
use pgyard_testkit::cluster::{psql, Options, Primary};
use pgyard_tokio::proxy::{spawn, ProxyConfig};
use pgyard_tokio::{connect, Session};

fn config(backend: String, mode: PoolMode, auth: ClientAuth, size: usize) -> ProxyConfig {
    ProxyConfig {
        backend,
        client: ClientConfig {
            auth,
            pool_mode: mode,
            default_route: Route::Primary,
            login_timeout: Duration::from_secs(10),
        },
        pool: PoolSettings {
            size,
            wait_timeout: Duration::from_secs(10),
            ..PoolSettings::default()
        },
        seed: Some(7),
    }
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
    let backend = format!("host=127.0.0.1,127.0.0.1 port={p},{standby}");
    let cfg = config(backend, PoolMode::Transaction, ClientAuth::Trust, 1);
    let proxy = spawn(cfg, "127.0.0.1:0".parse().unwrap())
        .await
        .expect("proxy");

    // psql (libpq 18) through the proxy lands on the primary by default.
    let out = psql_at(
        via(proxy.addr, "postgres"),
        "select pg_is_in_recovery(), inet_server_port()",
    )
    .await
    .expect("psql through the proxy");
    assert_eq!(out, format!("f|{p}"));

    // ROUTE moves the next transaction; the M frames never reach a server (a server would
    // end the session on them), and an unknown class is dropped.
    let mut c = connect(&via(proxy.addr, "postgres")).await.expect("client");
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
    let mut a = connect(&via(proxy.addr, "postgres")).await.expect("a");
    let mut b = connect(&via(proxy.addr, "postgres")).await.expect("b");
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
    drop((a, b, c));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passwords_from_the_auth_file_and_malformed_middleware_messages() {
    let primary = Primary::start(Options::default()).expect("primary");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let mut rng = pgyard_types::rng_from_seed(3);
    let file = AuthFile::parse("\"postgres\" \"s3cret\"\n", &mut rng).expect("auth file");
    let auth = ClientAuth::File(Arc::new(file));
    let proxy = spawn(
        config(backend, PoolMode::Session, auth, 2),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .expect("proxy");
    let good = format!("{} password=s3cret", via(proxy.addr, "postgres"));
    assert_eq!(
        psql_at(good, "select 1").await.expect("right password"),
        "1"
    );
    let bad = format!("{} password=nope", via(proxy.addr, "postgres"));
    let err = psql_at(bad, "select 1").await.expect_err("wrong password");
    assert!(
        err.to_string()
            .contains("password authentication failed for user \"postgres\""),
        "{err}"
    );
    let nobody = format!("{} password=x", via(proxy.addr, "mallory"));
    let err = psql_at(nobody, "select 1").await.expect_err("unknown user");
    assert!(
        err.to_string()
            .contains("password authentication failed for user \"mallory\""),
        "{err}"
    );

    let mut c = connect(&format!("{} password=s3cret", via(proxy.addr, "postgres")))
        .await
        .expect("client");
    assert_eq!(one(&mut c, "select 2").await, "2");
    c.send_middleware(ROUTE, b"master").await.expect("send");
    let err = c.simple_query("select 3").await.expect_err("disconnected");
    assert!(
        err.to_string().contains("invalid ROUTE middleware message"),
        "{err}"
    );
}
