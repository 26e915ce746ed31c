//! Server logins without a password in the proxy's hands: the auth file holds what
//! `pg_authid` holds (a SCRAM verifier or an MD5 secret), clients prove their password to the
//! proxy, and the proxy logs in to a real PostgreSQL 18 with what they proved — SCRAM keys
//! (PgBouncer's pass-through) or the MD5 secret. A verifier with another salt cannot.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, PoolMode};
use pgyard_testkit::cluster::{psql, Auth, Options, Primary};
use pgyard_tokio::proxy::{spawn, Proxy, ProxyConfig};

/// A server that checks `alice` with SCRAM and `bob` with MD5 over TCP.
fn server() -> Primary {
    let primary = Primary::start(
        Options::default()
            .auth(Auth::ScramSha256)
            .hba("host all bob 127.0.0.1/32 md5"),
    )
    .expect("primary");
    primary
        .psql(
            "create role alice login password 'wonderland'; \
             set password_encryption = 'md5'; create role bob login password 'builder'",
        )
        .expect("roles");
    primary
}

fn stored(primary: &Primary, role: &str) -> String {
    primary
        .psql(&format!(
            "select rolpassword from pg_authid where rolname = '{role}'"
        ))
        .expect("pg_authid")
}

/// A proxy in front of `primary` whose backend string has no password (and no password
/// file), checking clients against `auth_file`.
async fn proxy(primary: &Primary, auth_file: &str) -> Proxy {
    let mut rng = pgyard_types::rng_from_seed(3);
    let file = AuthFile::parse(auth_file, &mut rng).expect("auth file");
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        admin_users: Arc::new(Default::default()),
        ..ClientConfig::new(ClientAuth::File(Arc::new(file)), PoolMode::Transaction)
    };
    let backend = format!(
        "host=127.0.0.1 port={} passfile=/nonexistent/pgpass connect_timeout=5",
        primary.port()
    );
    let mut config = ProxyConfig::new(backend, client);
    config.seed = Some(7);
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    spawn(config, addr).await.expect("proxy")
}

async fn psql_as(proxy: &Proxy, user: &str, password: &str) -> std::io::Result<String> {
    let conninfo = format!(
        "host=127.0.0.1 port={} user={user} password={password} dbname=postgres",
        proxy.addr.port()
    );
    tokio::task::spawn_blocking(move || psql(&conninfo, "select current_user"))
        .await
        .expect("psql thread")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_keys_and_md5_secrets_log_in_to_the_server() {
    let primary = server();
    let (alice, bob) = (stored(&primary, "alice"), stored(&primary, "bob"));
    assert!(alice.starts_with("SCRAM-SHA-256$"), "{alice}");
    assert!(bob.starts_with("md5"), "{bob}");
    let proxy = proxy(
        &primary,
        &format!("\"alice\" \"{alice}\"\n\"bob\" \"{bob}\"\n"),
    )
    .await;

    assert_eq!(
        psql_as(&proxy, "alice", "wonderland")
            .await
            .expect("alice through the proxy"),
        "alice"
    );
    assert_eq!(
        psql_as(&proxy, "bob", "builder")
            .await
            .expect("bob through the proxy"),
        "bob"
    );
    // A second login reuses the pool's server, and a wrong password still stops at the proxy.
    assert_eq!(
        psql_as(&proxy, "alice", "wonderland").await.expect("again"),
        "alice"
    );
    let wrong = psql_as(&proxy, "alice", "rabbit")
        .await
        .expect_err("a wrong password");
    assert!(
        wrong
            .to_string()
            .contains("password authentication failed for user \"alice\""),
        "{wrong}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verifier_with_another_salt_cannot_log_in_to_the_server() {
    let primary = server();
    // The right password, but a verifier the proxy made itself: another salt than the server's.
    let mut rng = pgyard_types::rng_from_seed(9);
    let own = pgyard_wire::auth::ScramSecret::from_rng("wonderland", 4096, &mut rng);
    let proxy = proxy(&primary, &format!("\"alice\" \"{own}\"\n")).await;
    let refused = psql_as(&proxy, "alice", "wonderland")
        .await
        .expect_err("the server refuses the keys");
    assert!(
        refused
            .to_string()
            .contains("differs from the one the keys come from"),
        "{refused}"
    );
}
