//! `pgyard proxy` on a Unix-domain socket (`DIR/.s.PGSQL.PORT`), with psql (libpq 18) and
//! pgyard-tokio clients in front and a real PostgreSQL 18 behind, reached over TCP and over
//! its own Unix socket: login and pooling, SHOW CLIENTS in PgBouncer's words, TLS never
//! offered on the socket while TCP requires it, and the file gone once the proxy stops.

use std::path::{Path, PathBuf};
use std::time::Duration;

use pgyard_proxy::{ClientAuth, ClientConfig, PoolMode, TlsMode};
use pgyard_testkit::cluster::{psql, Options, Primary};
use pgyard_testkit::fixtures::TestCa;
use pgyard_tokio::proxy::{socket_path, spawn_listening, Proxy, ProxyConfig, ProxyTls};
use pgyard_tokio::{connect, SessionInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A folder of its own for the proxy's socket, removed at the end.
struct SocketDir(PathBuf);

impl SocketDir {
    fn new(name: &str) -> SocketDir {
        // Short: a socket's path holds at most 107 bytes.
        let d = std::env::temp_dir().join(format!("pgy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("socket folder");
        SocketDir(d)
    }
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn config(backend: String, tls: Option<ProxyTls>) -> ProxyConfig {
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let mut config = ProxyConfig::new(backend, client);
    config.pool.size = 1;
    config.seed = Some(3);
    config.tls = tls;
    config
}

async fn proxy_at(dir: &Path, config: ProxyConfig) -> Proxy {
    let tcp = ["127.0.0.1:0".parse().expect("an address")];
    spawn_listening(config, &tcp, Some(dir))
        .await
        .expect("proxy")
}

/// libpq's way to a Unix socket: the folder as `host`, the port naming the file.
fn over_socket(dir: &Path, proxy: &Proxy, db: &str) -> String {
    format!(
        "host={} port={} user=postgres dbname={db}",
        dir.display(),
        proxy.addr.port()
    )
}

async fn psql_at(conninfo: String, sql: &'static str) -> std::io::Result<String> {
    tokio::task::spawn_blocking(move || psql(&conninfo, sql))
        .await
        .expect("psql thread")
}

/// Waits up to five seconds for `path` to go.
async fn gone(path: &Path) -> bool {
    for _ in 0..500 {
        if !path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_on_the_unix_socket_share_the_pool_and_show_as_unix() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = SocketDir::new("pool");
    // The backend over PostgreSQL's own Unix socket: the proxy's servers take that path too.
    let backend = format!(
        "host={} port={}",
        primary.socket_dir().display(),
        primary.port()
    );
    let proxy = proxy_at(&dir.0, config(backend, None)).await;
    let path = socket_path(&dir.0, proxy.addr.port());
    assert_eq!(proxy.unix_socket.as_deref(), Some(path.as_path()));

    // psql (libpq 18) finds the socket from host=DIR port=PORT; the server sees a Unix-socket
    // client (no client address), as the proxy reached it over PostgreSQL's own socket.
    let out = psql_at(
        over_socket(&dir.0, &proxy, "postgres"),
        "select inet_client_addr() is null, current_setting('port')",
    )
    .await
    .expect("psql over the proxy's Unix socket");
    assert_eq!(out, format!("t|{}", primary.port()));

    // Two pgyard-tokio clients on the socket, one on TCP, one server (pool size 1): each
    // transaction borrows it in turn.
    let on_socket = over_socket(&dir.0, &proxy, "postgres");
    let mut a = connect(&format!("{on_socket} application_name=unix-a"))
        .await
        .expect("a");
    let mut b = connect(&format!("{on_socket} application_name=unix-b"))
        .await
        .expect("b");
    let tcp = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable \
         application_name=tcp-c",
        proxy.addr.port()
    );
    let mut c = connect(&tcp).await.expect("c");
    assert_eq!(a.host(), dir.0.to_string_lossy());
    let mut pids = Vec::new();
    for s in [&mut a, &mut b, &mut c] {
        let rows = s
            .simple_query("select pg_backend_pid()")
            .await
            .expect("pid");
        pids.push(rows[0][0].clone().expect("a pid"));
    }
    assert!(
        pids.iter().all(|p| *p == pids[0]),
        "one server serves all three: {pids:?}"
    );
    // The idle server, on PostgreSQL's Unix socket, is ended behind the proxy's back: it is
    // found to have spoken (its FATAL, then EOF) before it is lent again, and the next
    // transaction runs on a new one.
    primary
        .psql(&format!("select pg_terminate_backend({})", pids[0]))
        .expect("terminate the idle server");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while primary
        .psql(&format!(
            "select count(*) from pg_stat_activity where pid = {}",
            pids[0]
        ))
        .expect("pg_stat_activity")
        != "0"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the server never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows = a
        .simple_query("select pg_backend_pid()")
        .await
        .expect("after the kill");
    let fresh = rows[0][0].clone().expect("a pid");
    assert_ne!(fresh, pids[0], "a new server, not the dead one");

    // SHOW CLIENTS (from psql on the socket): the Unix clients as PgBouncer shows them, the
    // TCP one with its address.
    let port = proxy.addr.port();
    let clients = psql_at(over_socket(&dir.0, &proxy, "pgyard"), "SHOW CLIENTS")
        .await
        .expect("SHOW CLIENTS");
    let row = |name: &str| {
        let rows: Vec<&str> = clients
            .lines()
            .filter(|l| l.contains(&format!("|{name}|")))
            .collect();
        assert_eq!(rows.len(), 1, "one row of {name}:\n{clients}");
        rows[0].to_owned()
    };
    let unix = format!("|unix|{port}|unix|{port}|");
    assert!(row("unix-a").contains(&unix), "{clients}");
    assert!(row("unix-b").contains(&unix), "{clients}");
    let c_row = row("tcp-c");
    assert!(
        c_row.contains("|127.0.0.1|") && c_row.contains(&format!("|127.0.0.1|{port}|")),
        "c's own address, then the TCP listener:\n{clients}"
    );
    let config = psql_at(over_socket(&dir.0, &proxy, "pgyard"), "SHOW CONFIG")
        .await
        .expect("SHOW CONFIG");
    assert!(
        config
            .lines()
            .any(|l| l.starts_with(&format!("unix_socket_dir|{}|", dir.0.display()))),
        "{config}"
    );

    drop((a, b, c));
    proxy.stop();
    assert!(
        gone(&path).await,
        "the socket file goes when the proxy stops"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_required_on_tcp_and_never_offered_on_the_socket() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = SocketDir::new("tls");
    let ca = TestCa::new("unix CA").expect("CA");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).expect("params");
    let (cert, key) = ca.sign(params).expect("signed");
    let (cert_file, key_file) = (dir.0.join("cert.pem"), dir.0.join("key.pem"));
    std::fs::write(&cert_file, cert.pem()).expect("cert");
    std::fs::write(&key_file, key.serialize_pem()).expect("key");
    let tls = ProxyTls::from_files(TlsMode::Require, &cert_file, &key_file).expect("tls");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let proxy = proxy_at(&dir.0, config(backend, Some(tls))).await;

    // On TCP a plaintext login is refused.
    let tcp = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        proxy.addr.port()
    );
    assert!(connect(&tcp).await.is_err(), "TLS is required on TCP");

    // On the socket a plaintext login is welcome: libpq asks for no TLS there (it ignores
    // sslmode on Unix sockets), nor does pgyard-tokio, which follows it.
    let on_socket = over_socket(&dir.0, &proxy, "postgres");
    let out = psql_at(format!("{on_socket} sslmode=require"), "select 1")
        .await
        .expect("psql on the socket");
    assert_eq!(out, "1");
    let mut s = connect(&format!("{on_socket} sslmode=prefer"))
        .await
        .expect("pgyard-tokio on the socket");
    assert!(!s.tls(), "no TLS on a Unix socket");
    let rows = s.simple_query("select 2").await.expect("select");
    assert_eq!(rows[0][0].as_deref(), Some("2"));

    // A client that asks anyway is told `N`, as PostgreSQL tells it on its own sockets.
    let path = socket_path(&dir.0, proxy.addr.port());
    let mut raw = tokio::net::UnixStream::connect(&path).await.expect("raw");
    let mut request = bytes::BytesMut::new();
    pgyard_wire::frontend::encode_ssl_request(&mut request);
    raw.write_all(&request).await.expect("SSLRequest");
    let mut answer = [0u8; 1];
    raw.read_exact(&mut answer).await.expect("answer");
    assert_eq!(&answer, b"N");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_authentication_on_the_socket_and_trust_on_tcp() {
    use std::os::unix::fs::MetadataExt;
    let primary = Primary::start(Options::default()).expect("primary");
    // This process's own user, which peer authentication will find at the socket's other end
    // (psql runs as it too); the server gets a role of that name to log in as.
    let uid = std::fs::metadata("/proc/self").expect("/proc/self").uid();
    let me = pgyard_driver::user_name(uid).expect("this process's user name");
    assert_ne!(
        me, "postgres",
        "the test needs a user other than the server's superuser"
    );
    let role = format!("\"{}\"", me.replace('"', "\"\""));
    primary
        .psql(&format!("create role {role} login"))
        .expect("a role for this user");
    let dir = SocketDir::new("peer");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let mut cfg = config(backend, None);
    cfg.unix_peer = true;
    let proxy = proxy_at(&dir.0, cfg).await;

    // As oneself over the socket: in, with no password, as that role on the server.
    let as_me = format!(
        "host={} port={} user={me} dbname=postgres",
        dir.0.display(),
        proxy.addr.port()
    );
    let out = psql_at(as_me, "select current_user")
        .await
        .expect("peer login as oneself");
    assert_eq!(out, me);

    // As anyone else over the socket: PostgreSQL's refusal.
    let e = connect(&over_socket(&dir.0, &proxy, "postgres"))
        .await
        .expect_err("another user's name");
    let text = e.to_string();
    assert!(
        text.contains("Peer authentication failed for user \"postgres\""),
        "{text}"
    );

    // TCP clients keep the proxy's own auth (trust here).
    let tcp = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres sslmode=disable",
        proxy.addr.port()
    );
    let mut c = connect(&tcp).await.expect("trust on TCP");
    let rows = c.simple_query("select current_user").await.expect("query");
    assert_eq!(rows[0][0].as_deref(), Some("postgres"));
}
