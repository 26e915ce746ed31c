//! `Event::Broken`: a connection that breaks with the driver's own text (an alert the server
//! sent after the TLS handshake) ends the attempt as a closed one does, with that text where
//! libpq would otherwise say the server closed the connection.

mod common;

use common::config;
use pgyard_connect::{Action, Connector, Event};
use pgyard_types::Instant;

/// Opens the first attempt of `conninfo`, lets the startup go out, then breaks it with
/// `message` (`None`: closes it); the error and how many more attempts were opened.
fn broken_after_startup(conninfo: &str, message: Option<&str>) -> (String, usize) {
    let mut c = Connector::new(config(conninfo), Instant::ZERO, 3);
    let Some(Action::Open { attempt, .. }) = c.poll_action() else {
        panic!("the machine opens first")
    };
    c.handle_event(Instant::ZERO, Event::Opened { attempt });
    while let Some(a) = c.poll_action() {
        assert!(matches!(a, Action::Send { .. }), "{a:?}");
    }
    let event = match message {
        Some(m) => Event::Broken {
            attempt,
            message: m.to_owned(),
        },
        None => Event::Closed { attempt },
    };
    c.handle_event(Instant::ZERO, event);
    let mut opened = 0;
    loop {
        match c.poll_action() {
            Some(Action::Done(Err(e))) => return (e.message(), opened),
            Some(Action::Open { .. }) => opened += 1,
            Some(Action::Done(Ok(_))) => panic!("connected"),
            Some(_) => {}
            None => panic!("the machine stopped without an outcome"),
        }
    }
}

#[test]
fn the_drivers_text_replaces_the_closed_connection_text() {
    let one = "host=127.0.0.1 port=6001";
    let (message, opened) = broken_after_startup(one, Some("SSL error: tlsv1 alert unknown ca"));
    assert_eq!(
        message,
        "connection to server at \"127.0.0.1\", port 6001 failed: SSL error: tlsv1 alert \
         unknown ca\n"
    );
    assert_eq!(opened, 0);
    let (closed, _) = broken_after_startup(one, None);
    assert!(
        closed.contains("server closed the connection unexpectedly"),
        "{closed}"
    );
    // Otherwise as a closed connection: the walk over the hosts goes on (or not) alike.
    let two = "host=127.0.0.1,127.0.0.2 port=6001,6002";
    let (message, opened) =
        broken_after_startup(two, Some("SSL error: sslv3 alert bad certificate\n"));
    let (closed, opened_closed) = broken_after_startup(two, None);
    assert_eq!(opened, opened_closed, "{message}\n{closed}");
    assert!(
        message.ends_with("failed: SSL error: sslv3 alert bad certificate\n"),
        "{message}"
    );
}
