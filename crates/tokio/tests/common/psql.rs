//! psql (libpq 18) as the oracle of the live proxy tests that compare outcomes word for word.

use pgyard_testkit::fixtures::psql_outcome;

/// psql's outcome for `select current_user` over `host=127.0.0.1 port={port} {rest}`, with the
/// port taken out of libpq's message (the proxy and the server it is compared with listen on
/// different ones).
pub async fn outcome(port: u16, rest: &str) -> Result<String, String> {
    let conninfo = format!("host=127.0.0.1 port={port} {rest}");
    tokio::task::spawn_blocking(move || psql_outcome(&conninfo, "select current_user"))
        .await
        .expect("psql thread")
        .map_err(|e| e.replace(&format!("port {port} "), "port PORT "))
}
