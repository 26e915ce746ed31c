//! The crate's example runs against a real PostgreSQL 18 server (`pgyard_testkit::cluster`),
//! so that it keeps compiling and keeps working: `poll_loop` walks past a refused address to
//! the server, logs in with SCRAM-SHA-256 through the machine, and queries.

// The example's `main` is not called here; the test drives its `connect` and `simple_query`.
#[allow(dead_code)]
#[path = "../examples/poll_loop.rs"]
mod poll_loop;

use pgyard_conninfo::resolve::Environment;
use pgyard_testkit::cluster::{Auth, Options, Primary};

/// A port that was free a moment ago, so connecting to it is refused.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

#[test]
fn poll_loop_walks_past_a_refused_host_logs_in_and_queries() {
    let primary = Primary::start(Options::default().auth(Auth::ScramSha256)).expect("primary");
    let env = Environment::new().with_os_user("nobody");
    // libpq keeps the last value of a keyword: the host list replaces the harness's host.
    let conninfo = format!(
        "{} host=127.0.0.1,127.0.0.1 port={},{} connect_timeout=5",
        primary.conninfo(),
        refused_port(),
        primary.port()
    );

    let (established, mut socket) = poll_loop::connect(&conninfo, &env).expect("connect");
    assert_eq!(established.slot, 1, "the first host refuses");
    assert!(established.backend_key.is_some());
    let rows = poll_loop::simple_query(
        &mut socket,
        &established.leftover,
        "select current_user, 6 * 7",
    )
    .expect("query");
    assert_eq!(rows, [vec![Some("postgres".into()), Some("42".into())]]);
    let err =
        poll_loop::simple_query(&mut socket, &[], "select nonsense").expect_err("an SQL error");
    assert!(err
        .to_string()
        .starts_with("ERROR:  column \"nonsense\" does not exist"));

    // Every failure comes back as libpq's error text, one paragraph per attempt.
    let wrong = format!("{conninfo} password=wrong");
    let err = poll_loop::connect(&wrong, &env).expect_err("a wrong password");
    let text = err.to_string();
    assert!(text.contains("Connection refused"), "{text}");
    assert!(
        text.contains("password authentication failed for user \"postgres\""),
        "{text}"
    );
}
