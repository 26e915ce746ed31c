//! `sslcertmode=require` through the tokio adapter, on both of its drivers (the sequential
//! walk on the caller's task and the racing one with a task per attempt), against a live
//! PostgreSQL 18 that asks for client certificates: each outcome is libpq 18's for the same
//! string, the error text byte for byte.

use pgyard_testkit::cluster::Primary;
use pgyard_testkit::fixtures::{pki_tls_options, write_other_ca, write_pki};
use pgyard_testkit::libpq::Libpq;
use pgyard_tokio::{connect_with, ConnectOptions, SessionInfo, Strategy};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sslcertmode_require_is_judged_as_libpq_judges_it() {
    let dir = tempfile::Builder::new()
        .prefix("pgyard-certmode-")
        .tempdir()
        .expect("a directory");
    let pki = write_pki(dir.path()).expect("certificates written");
    let other_ca = write_other_ca(dir.path()).expect("a second CA");
    let server = Primary::start(pki_tls_options(&pki)).expect("a primary asking for certificates");
    let base = format!(
        "host=localhost port={} user=postgres dbname=postgres sslcertmode=require",
        server.port()
    );
    let with_cert = format!("sslcert={} sslkey={}", pki.client_cert, pki.client_key);
    let without = "sslcert=/nonexistent/client.crt sslkey=/nonexistent/client.key";
    let ca = format!("sslrootcert={}", pki.ca);
    let wrong_ca = format!("sslrootcert={other_ca}");
    let cases = [
        // Asked and answered: in.
        (format!("{base} sslmode=verify-full {ca} {with_cert}"), true),
        // Asked, nothing to answer with.
        (format!("{base} sslmode=require {ca} {without}"), false),
        // No TLS, so never asked.
        (format!("{base} sslmode=disable {without}"), false),
        // The handshake asks, a certificate is loaded, then the chain fails (TLS 1.3): the
        // plaintext retry is judged by what that handshake saw, and passes, as in libpq.
        (
            format!("{base} sslmode=prefer {wrong_ca} {with_cert}"),
            true,
        ),
        // In TLS 1.2 the chain fails before the request is read: never asked.
        (
            format!(
                "{base} sslmode=prefer {wrong_ca} {with_cert} ssl_max_protocol_version=TLSv1.2"
            ),
            false,
        ),
    ];
    let libpq = Libpq::shared().expect("libpq 18");
    for strategy in [Strategy::Sequential, Strategy::Race] {
        let options = ConnectOptions::default().seed(7).strategy(strategy);
        for (conninfo, lands) in &cases {
            let theirs = libpq.connect_outcome(conninfo);
            let ours = match connect_with(conninfo, &options).await {
                Ok(s) => {
                    let landed = (s.port().unwrap_or(0).to_string().into_bytes(), s.tls());
                    s.close().await;
                    Ok(landed)
                }
                Err(e) => Err(e.to_string().trim_end().to_owned()),
            };
            assert_eq!(ours, theirs, "{strategy:?}: {conninfo}");
            assert_eq!(ours.is_ok(), *lands, "{strategy:?}: {conninfo}");
        }
    }
}
