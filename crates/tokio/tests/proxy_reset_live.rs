//! `server_reset_query_always` against a real PostgreSQL 18 (session 35): in transaction mode
//! what a client leaves on its server beyond the tracked settings (a role, another setting, a
//! temporary table, an advisory lock, a LISTEN) reaches the next client of that server unless
//! the proxy runs `DISCARD ALL` between them; with the switch on it does, the tracked settings
//! still follow their client, and a named statement is prepared again where it was discarded.

use std::net::SocketAddr;

use bytes::BytesMut;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_wire::frontend;
use tokio::io::AsyncWriteExt;

mod common;
#[path = "common/raw.rs"]
mod raw;

use raw::{status, Raw};

/// A transaction-mode proxy with one server connection to the server on `port`.
async fn proxy(port: u16, reset_always: bool) -> SocketAddr {
    common::transaction_proxy(port, 1, 35, |c| c.server_reset_query_always = reset_always).await
}

/// What client B finds on the one server after client A's session-level changes: the
/// current role, `statement_timeout`, whether A's temporary table is there, and how many
/// advisory locks (A takes `lock`) and LISTENs the backend holds.
async fn left_behind(addr: SocketAddr, lock: u32) -> [String; 5] {
    let mut a = Raw::start(addr, &[]).await;
    a.until_ready().await;
    let set = a.exec("set role pgyard_carol").await;
    assert_eq!(
        status(&set, "is_superuser").as_deref(),
        Some("off"),
        "{set:?}"
    );
    a.exec("set statement_timeout = '77s'").await;
    a.exec("create temporary table pgyard_left (x int)").await;
    a.exec(&format!("select pg_advisory_lock({lock})")).await;
    a.exec("listen pgyard_channel").await;
    let mut b = Raw::start(addr, &[]).await;
    b.until_ready().await;
    [
        b.one("select current_user").await,
        b.one("show statement_timeout").await,
        b.one("select to_regclass('pg_temp.pgyard_left') is not null")
            .await,
        b.one(
            "select count(*) from pg_locks \
             where locktype = 'advisory' and pid = pg_backend_pid()",
        )
        .await,
        b.one("select count(*) from pg_listening_channels()").await,
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_session_state_reaches_the_next_client_only_without_the_reset() {
    let primary = Primary::start(Options::default()).expect("primary");
    let p = primary.port();
    let mut admin = Raw::start(raw::loopback(p), &[]).await;
    admin.until_ready().await;
    admin.exec("create role pgyard_carol").await;

    // PgBouncer's transaction mode and this proxy's default: the next client inherits it all.
    let leaky = proxy(p, false).await;
    assert_eq!(
        left_behind(leaky, 1).await,
        ["pgyard_carol", "77s", "t", "1", "1"].map(String::from),
        "without the reset the server keeps what the last client left"
    );

    let reset = proxy(p, true).await;
    assert_eq!(
        left_behind(reset, 2).await,
        ["postgres", "0", "f", "0", "0"].map(String::from),
        "DISCARD ALL ran between the two clients"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_reset_tracked_settings_and_named_statements_still_follow_their_client() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port(), true).await;
    let mut a = Raw::start(addr, &[("TimeZone", "Asia/Tokyo")]).await;
    a.until_ready().await;
    a.exec("set DateStyle = 'German'").await;
    parse_and_run(&mut a).await;
    let mut b = Raw::start(addr, &[]).await;
    b.until_ready().await;
    for _ in 0..3 {
        // Each transaction of either client ends with DISCARD ALL on the one server: A's
        // settings are set again before each of its transactions, its statement parsed again.
        assert_eq!(a.one("show TimeZone").await, "Asia/Tokyo");
        assert_eq!(a.one("show DateStyle").await, "German, DMY");
        assert_eq!(b.one("show TimeZone").await, "Etc/UTC");
        assert_eq!(b.one("show DateStyle").await, "ISO, MDY");
        let mut run = BytesMut::new();
        bind_execute(&mut run);
        a.sock.write_all(&run).await.expect("write");
        let tags: Vec<u8> = a.until_ready().await.iter().map(|m| m.0).collect();
        assert_eq!(tags, b"2DCZ", "the client's statement is there for it");
        assert_eq!(
            b.one("select count(*) from pg_prepared_statements").await,
            "0",
            "the statement the proxy prepared for A went with the reset"
        );
    }
}

/// Parses the named statement `s1` and runs it once.
async fn parse_and_run(c: &mut Raw) {
    let mut b = BytesMut::new();
    frontend::encode_parse(b"s1", b"select 1", &[], &mut b).expect("parse");
    bind_execute(&mut b);
    c.sock.write_all(&b).await.expect("write");
    let reply = c.until_ready().await;
    let tags: Vec<u8> = reply.iter().map(|m| m.0).collect();
    assert_eq!(tags, b"12DCZ", "{reply:?}");
    let row = reply
        .iter()
        .find(|m| m.0 == b'D')
        .map(|m| m.1[6..].to_vec());
    assert_eq!(row.as_deref(), Some(&b"1"[..]), "{reply:?}");
}

/// Bind of `s1` to the unnamed portal, Execute and Sync.
fn bind_execute(b: &mut BytesMut) {
    frontend::encode_bind(b"", b"s1", &[], &[], &[], b).expect("bind");
    frontend::encode_execute(b"", 0, b).expect("execute");
    frontend::encode_sync(b);
}
