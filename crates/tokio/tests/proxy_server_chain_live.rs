//! The proxy's own certificate chain, held to PostgreSQL 18 as the oracle: both serve a
//! certificate an intermediate CA issued, from a certificate file that holds it alone, with a
//! CA file that holds the root and the intermediate. PostgreSQL's server (OpenSSL) sends the
//! certificate with its issuers from `ssl_ca_file`, so a psql (libpq 18) that trusts only the
//! root verifies it; the proxy must too. Every case must get the same outcome from both, word
//! for word.

#[path = "common/psql.rs"]
mod psql;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::{ClientAuth, ClientConfig, PoolMode, TlsMode};
use pgyard_testkit::cluster::Primary;
use pgyard_testkit::fixtures::{server_readable_dir, tls_options, write_for_server, TestCa};
use pgyard_tokio::proxy::{spawn, ProxyConfig, ProxyTls};

/// psql's outcome at `port` (see [`psql::outcome`]).
async fn outcome(port: u16, rest: &str) -> Result<String, String> {
    psql::outcome(port, &format!("user=alice dbname=postgres {rest}")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_sends_its_certificate_with_the_issuers_postgresql_sends() {
    let dir = server_readable_dir("pgyard-server-chain-").expect("a directory");
    let path = |name: &str| dir.path().join(name);
    let root = TestCa::new("pgyard server-chain root").expect("a root");
    let int = root
        .intermediate("pgyard server-chain intermediate")
        .expect("an intermediate");
    let params = rcgen::CertificateParams::new(vec!["127.0.0.1".into()]).expect("params");
    let (cert, key) = int.sign(params).expect("a server certificate");
    let written = |name, text: String, mode| {
        write_for_server(dir.path(), name, &text, mode).expect("a server file")
    };
    let cert_file = written("server.crt", cert.pem(), 0o644);
    let key_file = written("server.key", key.serialize_pem(), 0o600);
    let ca_file = written("ca.crt", root.cert.pem() + &int.cert.pem(), 0o644);
    for (name, text) in [
        ("root.crt", root.cert.pem()),
        ("root-int.crt", root.cert.pem() + &int.cert.pem()),
        ("int.crt", int.cert.pem()),
    ] {
        std::fs::write(path(name), text).expect("a root file");
    }

    let options =
        tls_options(&cert_file, &key_file, Some(&ca_file)).hba("host all all 127.0.0.1/32 trust");
    let primary = Primary::start(options).expect("a primary serving TLS");
    primary.psql("CREATE ROLE alice LOGIN").expect("a user");

    let tls = ProxyTls::from_files_with_ca(
        TlsMode::Prefer,
        cert_file.as_ref(),
        key_file.as_ref(),
        Some(ca_file.as_ref()),
    )
    .expect("certificate, key and CA");
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        admin_users: Arc::new(Default::default()),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let backend = format!("host=127.0.0.1 port={} sslmode=disable", primary.port());
    let mut config = ProxyConfig::new(backend, client);
    config.seed = Some(3);
    config.tls = Some(tls);
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let proxy = spawn(config.checked().expect("a valid configuration"), addr)
        .await
        .expect("proxy");

    let mut differences = Vec::new();
    let mut logins = 0;
    for roots in ["root.crt", "root-int.crt", "int.crt"] {
        for mode in ["verify-full", "verify-ca", "require"] {
            let rest = format!("sslmode={mode} sslrootcert={}", path(roots).display());
            let server = outcome(primary.port(), &rest).await;
            let ours = outcome(proxy.addr.port(), &rest).await;
            logins += usize::from(server.is_ok());
            if ours != server {
                differences.push(format!(
                    "{roots}, {mode}:\n  proxy:      {ours:?}\n  PostgreSQL: {server:?}"
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of 9 outcomes differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    // The root alone and the root with the intermediate verify; the intermediate alone is
    // no trust anchor for OpenSSL.
    assert_eq!(logins, 6, "which root files verify the server");
}
