//! The tokio adapter's side of `pgyard-blocking`'s `client_chain_vs_libpq`: a client
//! certificate issued by an intermediate CA is sent with the issuers libpq 18 sends (from the
//! root file when the certificate file holds it alone), and a server's refusal reads as
//! libpq's `SSL error: tlsv1 alert unknown ca`. psql and `pgyard_tokio::connect` must agree.

use pgyard_testkit::client_chain::client_chain_cases;
use pgyard_testkit::fixtures::psql_outcome;

#[tokio::test]
async fn a_client_certificate_is_sent_with_the_issuers_libpq_sends() {
    let setup = client_chain_cases().expect("a server and the certificates");
    let mut differences = Vec::new();
    for (label, conninfo, logs_in) in &setup.cases {
        let theirs = psql_outcome(conninfo, "select current_user").map(|_| ());
        let ours = match pgyard_tokio::connect(conninfo).await {
            Ok(s) => {
                s.close().await;
                Ok(())
            }
            Err(e) => Err(e.to_string().trim_end().to_owned()),
        };
        if ours != theirs || theirs.is_ok() != *logs_in {
            differences.push(format!("{label}:\n  ours: {ours:?}\n  psql: {theirs:?}"));
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} outcomes differ:\n{}",
        differences.len(),
        setup.cases.len(),
        differences.join("\n")
    );
}
