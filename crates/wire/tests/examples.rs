//! The crate's examples run against a real PostgreSQL 18 server (`pgyard_testkit::cluster`),
//! so that they keep compiling and keep working: `minimal_client` logs in with trust and with
//! SCRAM-SHA-256, reads rows (NULL included), reports a wrong password and an SQL error in
//! the server's words.

// The example's `main` is not called here; the test drives its `run` and `Client`.
#[allow(dead_code)]
#[path = "../examples/minimal_client.rs"]
mod minimal_client;

use pgyard_testkit::cluster::{Options, Primary};

#[test]
fn minimal_client_logs_in_with_trust_and_scram_and_reads_rows() {
    // TCP clients are trusted, except `app`, who must prove its password with SCRAM.
    let primary = Primary::start(Options::default().hba("host all app 127.0.0.1/32 scram-sha-256"))
        .expect("a primary starts");
    primary
        .psql("create role app login password 'app-sécret'")
        .expect("create role");
    let addr = format!("127.0.0.1:{}", primary.port());

    let rows = minimal_client::run(&addr, "postgres", "postgres", None, "select 1, null, 'x'")
        .expect("trust login and query");
    assert_eq!(rows, [vec![Some("1".into()), None, Some("x".into())]]);

    let sql = "select current_user, g from generate_series(1, 3) g";
    let rows = minimal_client::run(&addr, "app", "postgres", Some("app-sécret"), sql)
        .expect("SCRAM login and query");
    let users: Vec<_> = rows
        .iter()
        .map(|r| (r[0].as_deref(), r[1].as_deref()))
        .collect();
    assert_eq!(
        users,
        [
            (Some("app"), Some("1")),
            (Some("app"), Some("2")),
            (Some("app"), Some("3"))
        ]
    );

    let err = minimal_client::run(&addr, "app", "postgres", Some("wrong"), "select 1")
        .expect_err("a wrong password fails");
    assert_eq!(
        err.to_string(),
        "FATAL:  password authentication failed for user \"app\""
    );
    let err = minimal_client::run(&addr, "app", "postgres", None, "select 1")
        .expect_err("no password fails");
    assert_eq!(err.to_string(), "fe_sendauth: no password supplied");

    // An SQL error leaves the connection usable.
    let mut client =
        minimal_client::Client::connect(&addr, "postgres", "postgres", None).expect("connect");
    let err = client
        .simple_query("select 1/0")
        .expect_err("division by zero");
    assert_eq!(err.to_string(), "ERROR:  division by zero");
    assert_eq!(
        client.simple_query("select 2").expect("after the error"),
        [vec![Some("2".to_string())]]
    );
    client.terminate().expect("terminate");
}
