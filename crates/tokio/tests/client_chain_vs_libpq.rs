//! The tokio adapter's side of `pgyard-blocking`'s `client_chain_vs_libpq`: a client
//! certificate issued by an intermediate CA is sent with the issuers libpq 18 sends (from the
//! root file when the certificate file holds it alone), and a server's refusal reads as
//! libpq's `SSL error: tlsv1 alert unknown ca`. psql and `pgyard_tokio::connect` must agree.

use pgyard_testkit::client_chain::client_chain_cases;

#[tokio::test]
async fn a_client_certificate_is_sent_with_the_issuers_libpq_sends() {
    let setup = client_chain_cases().expect("a server and the certificates");
    let mut ours = Vec::new();
    for (_, conninfo, _) in &setup.cases {
        ours.push(match pgyard_tokio::connect(conninfo).await {
            Ok(s) => {
                s.close().await;
                Ok(())
            }
            Err(e) => Err(e.to_string().trim_end().to_owned()),
        });
    }
    setup.assert_same_as_psql(&ours);
}
