//! TLS between clients and `pgyard proxy`, with psql (libpq 18) and pgyard-tokio clients in
//! front and a real PostgreSQL 18 behind: SSLRequest and direct TLS, certificate
//! verification, SCRAM channel binding to the proxy's certificate, the required mode, bytes
//! stuffed in before the handshake, and a reload that changes the certificate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, Databases, PoolMode, Route, TlsMode};
use pgyard_testkit::cluster::{psql, Options, Primary};
use pgyard_testkit::fixtures::{openssl, TestCa};
use pgyard_tokio::proxy::{spawn, Proxy, ProxyConfig, ProxyTls};
use pgyard_tokio::{connect, SessionInfo};
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A CA and a certificate it signed for `127.0.0.1` and `localhost`, as files.
struct Certs {
    ca: rcgen::Certificate,
    ca_file: PathBuf,
    cert_file: PathBuf,
    key_file: PathBuf,
}

fn certs(dir: &Path, name: &str) -> Certs {
    let ca = TestCa::new(&format!("{name} CA")).expect("CA");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("params");
    let (cert, key) = ca.sign(params).expect("signed");
    let file = |suffix: &str, text: String| {
        let path = dir.join(format!("{name}-{suffix}.pem"));
        std::fs::write(&path, text).expect("write");
        path
    };
    Certs {
        ca_file: file("ca", ca.cert.pem()),
        cert_file: file("cert", cert.pem()),
        key_file: file("key", key.serialize_pem()),
        ca: ca.cert,
    }
}

fn tls(mode: TlsMode, c: &Certs) -> ProxyTls {
    ProxyTls::from_files(mode, &c.cert_file, &c.key_file).expect("certificate and key")
}

/// The proxy's configuration: `postgres` with password `s3cret` (checked with SCRAM).
fn config(port: u16, tls: Option<ProxyTls>) -> ProxyConfig {
    let mut rng = pgyard_types::rng_from_seed(5);
    let file = AuthFile::parse("\"postgres\" \"s3cret\"\n", &mut rng).expect("auth file");
    let client = ClientConfig {
        default_route: Route::Primary,
        login_timeout: Duration::from_secs(10),
        databases: Databases::Any,
        // The admin console shows which clients use TLS.
        disabled: Default::default(),
        admin_users: Arc::new(["postgres".to_owned()].into()),
        ..ClientConfig::new(ClientAuth::File(Arc::new(file)), PoolMode::Transaction)
    };
    let mut config = ProxyConfig::new(format!("host=127.0.0.1 port={port}"), client);
    config.seed = Some(11);
    config.tls = tls;
    config
}

async fn proxy(port: u16, tls: Option<ProxyTls>) -> Proxy {
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    spawn(config(port, tls), addr).await.expect("proxy")
}

/// The proxy's address for psql, logging in as `postgres`, with `extra` settings.
fn at(proxy: &Proxy, extra: &str) -> String {
    format!(
        "host=127.0.0.1 port={} user=postgres password=s3cret dbname=postgres {extra}",
        proxy.addr.port()
    )
}

/// psql in a thread of its own (it blocks).
async fn psql_at(conninfo: String, sql: &'static str) -> std::io::Result<String> {
    tokio::task::spawn_blocking(move || psql(&conninfo, sql))
        .await
        .expect("psql thread")
}

fn verify(c: &Certs) -> String {
    format!("sslmode=verify-full sslrootcert={}", c.ca_file.display())
}

/// Whether psql's `\conninfo` reports an SSL connection (libpq's own view of the link).
async fn psql_sees_tls(conninfo: String) -> bool {
    let out = psql_at(conninfo, "\\conninfo").await.expect("\\conninfo");
    assert!(out.contains("You are connected"), "{out}");
    out.contains("SSL connection (protocol: TLS")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn libpq_and_pgyard_clients_log_in_over_tls() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = tempfile::tempdir().expect("temp dir");
    let c = certs(dir.path(), "one");
    let proxy = proxy(primary.port(), Some(tls(TlsMode::Prefer, &c))).await;

    let out = psql_at(at(&proxy, "sslmode=require"), "select 1").await;
    assert_eq!(out.expect("sslmode=require"), "1");

    // The certificate checks out against the CA for the address connected to, and libpq
    // binds its SCRAM login to that certificate.
    let strict = at(&proxy, &format!("{} channel_binding=require", verify(&c)));
    assert!(psql_sees_tls(strict.clone()).await, "verify-full");
    assert_eq!(psql_at(strict, "select 2").await.expect("verify-full"), "2");

    // PostgreSQL 17's direct TLS: no SSLRequest; libpq offers ALPN `postgresql`, without
    // which the proxy would refuse it (below).
    let direct = format!(
        "{} sslnegotiation=direct channel_binding=require",
        verify(&c)
    );
    assert!(psql_sees_tls(at(&proxy, &direct)).await, "direct TLS");

    // `prefer` still lets a plaintext client in.
    assert!(!psql_sees_tls(at(&proxy, "sslmode=disable")).await);

    // The pgyard client, verifying and binding the same way, by SSLRequest and directly.
    for negotiation in ["postgres", "direct"] {
        let conninfo = at(
            &proxy,
            &format!(
                "{} channel_binding=require sslnegotiation={negotiation}",
                verify(&c)
            ),
        );
        let conninfo = format!("{conninfo} application_name=tls-{negotiation}");
        let mut s = connect(&conninfo).await.expect("pgyard client");
        assert!(s.established().tls, "{negotiation}: TLS in use");
        let rows = s.simple_query("select 3").await.expect("query");
        assert_eq!(rows[0][0].as_deref(), Some("3"));

        // The admin console (itself over plaintext) shows the TLS session in SHOW CLIENTS's
        // `tls` column as PgBouncer does (`TLSv1.3/TLS_AES_256_GCM_SHA384/ECDH=X25519`), and
        // nothing for its own plaintext connection.
        let console = at(&proxy, "sslmode=disable dbname=pgyard");
        let out = psql_at(console, "SHOW CLIENTS")
            .await
            .expect("SHOW CLIENTS");
        let rows: Vec<Vec<&str>> = out.lines().map(|l| l.split('|').collect()).collect();
        let (tls_column, name_column, database_column) = (17, 18, 2);
        let row = |pick: &dyn Fn(&[&str]) -> bool| {
            rows.iter()
                .find(|r| pick(r))
                .unwrap_or_else(|| panic!("no such row in:\n{out}"))
                .clone()
        };
        let tls_client = row(&|r| r[name_column] == format!("tls-{negotiation}"));
        let shown = tls_client[tls_column];
        assert!(
            shown.starts_with("TLSv1.") && shown.contains("/TLS_") && shown.contains("/ECDH="),
            "{negotiation}: {out}"
        );
        let console_row = row(&|r| r[database_column] == "pgyard");
        assert_eq!(console_row[tls_column], "", "{out}");
    }

    // A client that trusts another CA refuses the proxy's certificate.
    let other = certs(dir.path(), "other");
    let err = psql_at(at(&proxy, &verify(&other)), "select 1")
        .await
        .expect_err("wrong CA");
    assert!(
        err.to_string().contains("certificate verify failed"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_certificate_ssl_requests_are_declined() {
    let primary = Primary::start(Options::default()).expect("primary");
    let proxy = proxy(primary.port(), None).await;
    let err = psql_at(at(&proxy, "sslmode=require"), "select 1")
        .await
        .expect_err("no TLS to give");
    assert!(
        err.to_string()
            .contains("server does not support SSL, but SSL was required"),
        "{err}"
    );
    let direct = "sslmode=require sslnegotiation=direct";
    psql_at(at(&proxy, direct), "select 1")
        .await
        .expect_err("direct TLS without TLS");
    let out = psql_at(at(&proxy, "sslmode=prefer"), "select 1").await;
    assert_eq!(out.expect("prefer falls back to plaintext"), "1");
}

/// Reads what the proxy sends until it closes the connection.
async fn read_to_close(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> Vec<u8> {
    let mut got = Vec::new();
    let read = stream.read_to_end(&mut got);
    // A close that resets the connection still leaves what arrived before it in `got`.
    let _ = tokio::time::timeout(Duration::from_secs(20), read).await;
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_refuses_plaintext_stuffing_and_direct_tls_without_alpn() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = tempfile::tempdir().expect("temp dir");
    let c = certs(dir.path(), "req");
    let proxy = proxy(primary.port(), Some(tls(TlsMode::Require, &c))).await;

    let err = psql_at(at(&proxy, "sslmode=disable"), "select 1")
        .await
        .expect_err("plaintext login");
    assert!(err.to_string().contains("SSL required"), "{err}");
    assert!(psql_sees_tls(at(&proxy, "sslmode=prefer")).await);

    // An SSLRequest with a StartupMessage behind it, in one write: the StartupMessage was
    // sent before any answer, in plaintext, and is refused rather than answered with `S`.
    let mut packets = BytesMut::new();
    frontend::encode_ssl_request(&mut packets);
    let params: [(&[u8], &[u8]); 1] = [(b"user", b"postgres")];
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut packets).expect("startup");
    let mut sock = TcpStream::connect(proxy.addr).await.expect("connect");
    sock.write_all(&packets).await.expect("write");
    let got = read_to_close(&mut sock).await;
    assert_eq!(got.first(), Some(&b'E'), "{got:?}");
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("received unencrypted data after SSL request"),
        "{text}"
    );

    // Direct TLS from a client that offers no ALPN: the handshake completes, then the proxy
    // says why it will not go on, over TLS.
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(rustls_pki_types::CertificateDer::from(c.ca.der().to_vec()))
        .expect("root");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let client = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let name = rustls_pki_types::ServerName::try_from("localhost").expect("name");
    let sock = TcpStream::connect(proxy.addr).await.expect("connect");
    let mut tls = connector.connect(name, sock).await.expect("handshake");
    let got = read_to_close(&mut tls).await;
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("received direct SSL connection request without ALPN"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_shows_new_connections_the_new_certificate() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = tempfile::tempdir().expect("temp dir");
    let first = certs(dir.path(), "first");
    let second = certs(dir.path(), "second");
    let proxy = proxy(primary.port(), Some(tls(TlsMode::Prefer, &first))).await;

    let mut kept = connect(&at(&proxy, &verify(&first)))
        .await
        .expect("client of the first certificate");
    proxy
        .reload(config(primary.port(), Some(tls(TlsMode::Prefer, &second))))
        .expect("reload");

    let out = psql_at(at(&proxy, &verify(&second)), "select 1").await;
    assert_eq!(out.expect("the new certificate"), "1");
    let err = psql_at(at(&proxy, &verify(&first)), "select 1")
        .await
        .expect_err("the old certificate is gone");
    assert!(
        err.to_string().contains("certificate verify failed"),
        "{err}"
    );
    // A connection made before the reload keeps its session.
    let rows = kept.simple_query("select 4").await.expect("kept client");
    assert_eq!(rows[0][0].as_deref(), Some("4"));
}

/// A server certificate made as the PostgreSQL documentation makes one (`openssl x509 -req`,
/// which writes X.509 version 1) is served, and psql and the pgyard client verify it against
/// its root; a key that is not the certificate's is refused when the files are read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_1_certificate_is_served_and_verified() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let rsa = ["-newkey", "rsa:2048", "-nodes"];
    let mut root = vec![
        "req",
        "-new",
        "-x509",
        "-days",
        "30",
        "-subj",
        "/CN=v1 root",
    ];
    root.extend_from_slice(&rsa);
    root.extend_from_slice(&["-keyout", "root.key", "-out", "root.crt"]);
    openssl(d, &root);
    let mut req = vec!["req", "-new", "-subj", "/CN=localhost"];
    req.extend_from_slice(&rsa);
    req.extend_from_slice(&["-keyout", "server.key", "-out", "server.csr"]);
    openssl(d, &req);
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "root.crt",
            "-CAkey",
            "root.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            "server.crt",
        ],
    );
    let shown = openssl(d, &["x509", "-in", "server.crt", "-noout", "-text"]);
    assert!(
        shown.contains("Version: 1 (0x0)"),
        "openssl x509 -req no longer writes version 1: the test lost its subject"
    );
    let tls = ProxyTls::from_files(
        TlsMode::Prefer,
        &d.join("server.crt"),
        &d.join("server.key"),
    )
    .expect("a version 1 certificate and its key");
    let proxy = proxy(primary.port(), Some(tls)).await;
    let root = d.join("root.crt");
    let verify_ca = format!("sslmode=verify-ca sslrootcert={}", root.display());
    assert!(
        psql_sees_tls(at(&proxy, &verify_ca)).await,
        "psql, verify-ca"
    );
    let mut s = connect(&at(&proxy, &verify_ca))
        .await
        .expect("pgyard client");
    assert!(s.established().tls, "TLS in use");
    let rows = s.simple_query("select 4").await.expect("query");
    assert_eq!(rows[0][0].as_deref(), Some("4"));

    let e = ProxyTls::from_files(TlsMode::Prefer, &d.join("server.crt"), &d.join("root.key"))
        .expect_err("another key");
    assert!(
        e.to_string()
            .contains("the key does not go with the certificate"),
        "{e}"
    );
}
