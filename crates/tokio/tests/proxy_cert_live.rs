//! Client certificates at `pgyard proxy`, held to a real PostgreSQL 18 as the oracle: the
//! same psql (libpq 18) clients, with the same certificates, go to the server (whose
//! `pg_hba.conf` has a `hostssl` line for each rule) and to a proxy configured with the same
//! rule, and must get the same outcome, word for word — the login, or libpq's error text.
//! pgyard's own client logs in with a certificate too.

#[path = "common/psql.rs"]
mod psql;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, PoolMode, TlsMode};
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::fixtures::{openssl, serve_certificate, write_for_server, TestCa};
use pgyard_tokio::proxy::{spawn, Proxy, ProxyConfig, ProxyTls};

/// The CA, the servers' certificate (the server's and the proxy's: both for `127.0.0.1`),
/// and client certificates by name, all as files.
struct Files {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    dir: tempfile::TempDir,
}

impl Files {
    /// The client certificate and key written for `name` (see [`files`]).
    fn client(&self, name: &str) -> String {
        let at = |suffix| self.dir.path().join(format!("{name}.{suffix}"));
        format!(
            "sslcert={} sslkey={}",
            at("crt").display(),
            at("key").display()
        )
    }
}

/// Writes the files: the server's own under its data folder (it must own its key), the
/// clients' in a temporary folder, each key readable by this process only (libpq insists).
/// `intruder` has the Common Name `alice` but is signed by another CA.
fn files(primary: &Primary) -> Files {
    use std::os::unix::fs::PermissionsExt;
    let ca = TestCa::new("pgyard test CA").expect("CA");
    let server_dir = primary.root().join("tls");
    std::fs::create_dir_all(&server_dir).expect("tls folder");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])
        .expect("params");
    let (cert, key) = ca.sign(params).expect("server certificate");
    let for_server = |name, text: String, mode| {
        PathBuf::from(write_for_server(&server_dir, name, &text, mode).expect("server file"))
    };
    let server_cert = for_server("server.crt", cert.pem(), 0o644);
    let server_key = for_server("server.key", key.serialize_pem(), 0o600);
    let ca_file = for_server("root.crt", ca.cert.pem(), 0o644);

    let dir = tempfile::tempdir().expect("temp dir");
    let other = TestCa::new("someone else's CA").expect("CA");
    let write = |name: &str, by: &TestCa, cn: &str| {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let (cert, key) = by.sign(params).expect("client certificate");
        let crt = dir.path().join(format!("{name}.crt"));
        let key_path = dir.path().join(format!("{name}.key"));
        std::fs::write(&crt, cert.pem()).expect("write");
        std::fs::write(&key_path, key.serialize_pem()).expect("write");
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    for name in ["alice", "bob", "carol", "dave"] {
        write(name, &ca, name);
    }
    write("intruder", &other, "alice");
    // `alice-ku-int` comes through an intermediate CA whose keyUsage does not allow signing
    // certificates (the client sends both): OpenSSL refuses it, webpki passes it.
    // `alice-ku-leaf` has a keyUsage that allows no TLS use: PostgreSQL takes it.
    let ca_key = rcgen::KeyPair::from_pem(&ca.key_pem()).expect("the CA's key");
    let mut int_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    int_params.distinguished_name.push(
        rcgen::DnType::CommonName,
        "intermediate without keyCertSign",
    );
    int_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    int_params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    let int_key = rcgen::KeyPair::generate().expect("key");
    let int = int_params
        .signed_by(&int_key, &ca.cert, &ca_key)
        .expect("intermediate");
    let client_with = |name: &str,
                       params: rcgen::CertificateParams,
                       by: (&rcgen::Certificate, &rcgen::KeyPair),
                       chain: &str| {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = params
            .signed_by(&key, by.0, by.1)
            .expect("client certificate");
        let key_path = dir.path().join(format!("{name}.key"));
        std::fs::write(dir.path().join(format!("{name}.crt")), cert.pem() + chain).expect("write");
        std::fs::write(&key_path, key.serialize_pem()).expect("write");
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    };
    let alice = || {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        p
    };
    client_with("alice-ku-int", alice(), (&int, &int_key), &int.pem());
    let mut ku_leaf = alice();
    ku_leaf.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
    client_with("alice-ku-leaf", ku_leaf, (&ca.cert, &ca_key), "");
    // `alice-v1`: Common Name `alice`, X.509 version 1, as PostgreSQL's documentation makes a
    // client certificate (`openssl x509 -req`, no extensions).
    let d = dir.path();
    std::fs::write(d.join("ca.key"), ca.key_pem()).expect("write");
    std::fs::write(d.join("ca.crt"), ca.cert.pem()).expect("write");
    let openssl = |args: &[&str]| openssl(d, args);
    openssl(&[
        "req",
        "-new",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
        "-keyout",
        "alice-v1.key",
        "-out",
        "alice-v1.csr",
        "-subj",
        "/CN=alice",
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        "alice-v1.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-out",
        "alice-v1.crt",
    ]);
    let text = openssl(&["x509", "-in", "alice-v1.crt", "-noout", "-text"]);
    assert!(text.contains("Version: 1 (0x0)"));
    std::fs::set_permissions(
        d.join("alice-v1.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    Files {
        ca: ca_file,
        server_cert,
        server_key,
        dir,
    }
}

/// One proxy per rule, in front of the same server, which it reaches over plaintext (the
/// server's `hostssl` lines are for the clients; the proxy's servers match its `host` line).
async fn proxy(primary: &Primary, f: &Files, auth: ClientAuth, mode: TlsMode) -> Proxy {
    let tls = ProxyTls::from_files_with_ca(mode, &f.server_cert, &f.server_key, Some(&f.ca))
        .expect("certificate, key and CA");
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        admin_users: Arc::new(Default::default()),
        ..ClientConfig::new(auth, PoolMode::Transaction)
    };
    let backend = format!("host=127.0.0.1 port={} sslmode=disable", primary.port());
    let mut config = ProxyConfig::new(backend, client);
    config.seed = Some(3);
    config.tls = Some(tls);
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    spawn(config.checked().expect("a valid configuration"), addr)
        .await
        .expect("proxy")
}

/// psql's outcome at `port` (see [`psql::outcome`]).
async fn outcome(port: u16, rest: &str) -> Result<String, String> {
    psql::outcome(port, &format!("dbname=postgres sslmode=require {rest}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_rules_answer_as_postgresql_does() {
    let options = Options::default()
        .hba("hostssl all alice,bob 127.0.0.1/32 cert")
        .hba("hostssl all carol 127.0.0.1/32 scram-sha-256 clientcert=verify-full")
        .hba("hostssl all dave 127.0.0.1/32 trust clientcert=verify-full")
        .hba("hostssl all erin 127.0.0.1/32 trust clientcert=verify-ca");
    let primary = Primary::start(options).expect("primary");
    let f = files(&primary);
    primary
        .psql(&format!(
            "alter system set ssl_ca_file = '{}'",
            f.ca.display()
        ))
        .expect("ssl_ca_file");
    let (cert, key) = (f.server_cert.display(), f.server_key.display());
    serve_certificate(&primary, &cert.to_string(), &key.to_string()).expect("TLS on");
    primary
        .psql(
            "create user alice; create user bob; create user carol password 'pw'; \
             create user dave; create user erin",
        )
        .expect("users");

    let mut rng = pgyard_types::rng_from_seed(9);
    let carol = AuthFile::parse("\"carol\" \"pw\"\n", &mut rng).expect("auth file");
    let cert_rule = proxy(&primary, &f, ClientAuth::Cert, TlsMode::Require).await;
    let scram_full = proxy(
        &primary,
        &f,
        ClientAuth::File(Arc::new(carol)),
        TlsMode::VerifyFull,
    )
    .await;
    let trust_full = proxy(&primary, &f, ClientAuth::Trust, TlsMode::VerifyFull).await;
    let trust_ca = proxy(&primary, &f, ClientAuth::Trust, TlsMode::VerifyCa).await;

    let none = "sslcertmode=disable".to_owned();
    let cases: Vec<(&Proxy, &str, String, bool)> = vec![
        (&cert_rule, "user=alice", f.client("alice"), true),
        (&cert_rule, "user=bob", f.client("bob"), true),
        (&cert_rule, "user=alice", f.client("bob"), false),
        (&cert_rule, "user=alice", none.clone(), false),
        (&cert_rule, "user=alice", f.client("intruder"), false),
        (&cert_rule, "user=alice", f.client("alice-v1"), true),
        (&cert_rule, "user=alice", f.client("alice-ku-int"), false),
        (&cert_rule, "user=alice", f.client("alice-ku-leaf"), true),
        (&cert_rule, "user=bob", f.client("alice-v1"), false),
        (
            &scram_full,
            "user=carol password=pw",
            f.client("carol"),
            true,
        ),
        (
            &scram_full,
            "user=carol password=pw",
            f.client("alice"),
            false,
        ),
        (
            &scram_full,
            "user=carol password=nope",
            f.client("carol"),
            false,
        ),
        (&scram_full, "user=carol password=pw", none.clone(), false),
        (&trust_full, "user=dave", f.client("dave"), true),
        (&trust_full, "user=dave", f.client("alice"), false),
        (&trust_ca, "user=erin", f.client("alice"), true),
        (&trust_ca, "user=erin", none.clone(), false),
        (&trust_ca, "user=erin", f.client("intruder"), false),
        (&trust_ca, "user=erin", f.client("alice-v1"), true),
    ];
    for (proxy, who, cert, logs_in) in cases {
        let rest = format!("{who} {cert}");
        let server = outcome(primary.port(), &rest).await;
        let ours = outcome(proxy.addr.port(), &rest).await;
        assert_eq!(
            server.is_ok(),
            logs_in,
            "{rest}: the server says {server:?}"
        );
        assert_eq!(ours, server, "{rest}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgyards_own_client_logs_in_with_its_certificate() {
    let primary = Primary::start(Options::default()).expect("primary");
    let f = files(&primary);
    primary.psql("create user alice").expect("user");
    let proxy = proxy(&primary, &f, ClientAuth::Cert, TlsMode::VerifyFull).await;
    let at = |rest: &str| {
        format!(
            "host=127.0.0.1 port={} user=alice dbname=postgres sslmode=verify-full \
             sslrootcert={} {rest}",
            proxy.addr.port(),
            f.ca.display()
        )
    };
    let mut s = pgyard_tokio::connect(&at(&f.client("alice")))
        .await
        .expect("logs in with alice's certificate");
    let rows = s.simple_query("select current_user").await.expect("query");
    assert_eq!(rows[0][0].as_deref(), Some("alice"));
    s.close().await;

    let text = match pgyard_tokio::connect(&at(&f.client("bob"))).await {
        Ok(_) => panic!("bob's certificate is not alice's"),
        Err(e) => e.to_string(),
    };
    assert!(
        text.contains("certificate authentication failed for user \"alice\""),
        "{text}"
    );
}
