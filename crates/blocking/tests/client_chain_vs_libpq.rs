//! A client certificate issued by an intermediate CA, against libpq 18 on a live PostgreSQL 18
//! that trusts only the root (`pgyard_testkit::client_chain`): when the certificate file
//! holds the client's certificate alone, OpenSSL completes its chain from the root file, so
//! libpq logs in wherever the intermediate is there (docs/adapters.md, "Client
//! certificates"); when the server refuses the certificate, libpq reports the server's alert.
//! psql and the blocking adapter must both log in or both fail, with the same text.

use pgyard_blocking::connect;
use pgyard_testkit::client_chain::client_chain_cases;

#[test]
fn a_client_certificate_is_sent_with_the_issuers_libpq_sends() {
    let setup = client_chain_cases().expect("a server and the certificates");
    let ours: Vec<Result<(), String>> = setup
        .cases
        .iter()
        .map(|(_, conninfo, _)| {
            connect(conninfo)
                .map(drop)
                .map_err(|e| e.to_string().trim_end().to_owned())
        })
        .collect();
    setup.assert_same_as_psql(&ours);
}
