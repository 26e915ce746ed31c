//! The ALPN verdict after a TLS handshake is the machine's (drivers only report what the server
//! selected): libpq 17+ refuses direct TLS without `postgresql`, and any other selection.

mod common;

use common::*;
use pgyard_connect::{Action, ClientCert, Connector, Established, Event};
use pgyard_types::Instant;

const ONE: &str = "host=127.0.0.1 port=6001";

fn connect(pg: Pg, options: &str) -> Result<Established, String> {
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    let mut c = Connector::new(config(&format!("{ONE} {options}")), Instant::ZERO, 3);
    w.run(&mut c).map_err(|e| e.message())
}

#[test]
fn direct_tls_without_alpn_fails_with_libpqs_text() {
    let pg = Pg::new().ssl(Ssl::Yes).alpn(None);
    let err = connect(pg, "sslmode=require sslnegotiation=direct").unwrap_err();
    assert_eq!(
        err,
        "connection to server at \"127.0.0.1\", port 6001 failed: direct SSL connection was \
         established without ALPN protocol negotiation extension\n"
    );
}

#[test]
fn direct_tls_with_postgresql_connects() {
    let est = connect(
        Pg::new().ssl(Ssl::Yes),
        "sslmode=require sslnegotiation=direct",
    )
    .expect("direct TLS with ALPN postgresql");
    assert!(est.tls);
}

#[test]
fn negotiated_tls_accepts_no_alpn_but_refuses_another_protocol() {
    let est = connect(Pg::new().ssl(Ssl::Yes).alpn(None), "sslmode=require")
        .expect("a pre-17 server selects no ALPN");
    assert!(est.tls);
    let err = connect(
        Pg::new().ssl(Ssl::Yes).alpn(Some(b"http/1.1")),
        "sslmode=require",
    )
    .unwrap_err();
    assert_eq!(
        err,
        "connection to server at \"127.0.0.1\", port 6001 failed: SSL connection was established \
         with unexpected ALPN protocol\n"
    );
    // prefer falls back to a plaintext connection after the refused handshake, as libpq does.
    let est = connect(
        Pg::new().ssl(Ssl::Yes).alpn(Some(b"http/1.1")),
        "sslmode=prefer",
    )
    .expect("prefer retries without TLS");
    assert!(!est.tls);
}

#[test]
fn a_late_tls_event_changes_nothing() {
    let mut c = Connector::new(config(ONE), Instant::ZERO, 3);
    let Some(Action::Open { attempt, .. }) = c.poll_action() else {
        panic!("the machine opens first")
    };
    c.handle_event(Instant::ZERO, Event::Opened { attempt });
    let sent: Vec<Action> = std::iter::from_fn(|| c.poll_action()).collect();
    // Plaintext startup: no handshake is under way, so a stray event is ignored.
    c.handle_event(
        Instant::ZERO,
        Event::TlsEstablished {
            attempt,
            server_end_point: None,
            alpn: Some(b"http/1.1".to_vec()),
            client_cert: ClientCert::NotRequested,
        },
    );
    assert!(sent.iter().all(|a| matches!(a, Action::Send { .. })));
    assert_eq!(c.poll_action(), None);
}

#[test]
fn a_refused_selection_with_no_method_left_aborts_the_walk() {
    // libpq's error_return: a failed handshake with no other encryption method left ends the
    // whole connect; the second host is never tried.
    let mut w = World::new()
        .pg(
            "127.0.0.1:6001",
            Pg::standby().ssl(Ssl::Yes).alpn(Some(b"http/1.1")),
        )
        .pg("127.0.0.2:6002", Pg::primary().ssl(Ssl::Yes));
    let mut c = Connector::new(
        config("host=127.0.0.1,127.0.0.2 port=6001,6002 sslmode=require"),
        Instant::ZERO,
        3,
    );
    let err = w.run(&mut c).unwrap_err();
    assert_eq!(err.reports.len(), 1, "{}", err.message());
    assert!(!w
        .actions
        .iter()
        .any(|a| matches!(a, Action::Open { target, .. } if *target == tcp("127.0.0.2:6002"))));
}
