//! Each planted bug, switched on, changes an observable outcome (and is off by default).

#![cfg(feature = "planted-bugs")]

mod common;

use std::time::Duration;

use common::*;
use pgyard_connect::{Action, Connector, PlantedBug};
use pgyard_types::Instant;

const TWO: &str = "host=127.0.0.1,127.0.0.2 port=6001,6002";

fn run(w: &mut World, conninfo: &str, bug: Option<PlantedBug>) -> bool {
    let mut c = Connector::new(config(conninfo), Instant::ZERO, 3);
    if let Some(b) = bug {
        c = c.with_planted_bug(b);
    }
    w.run(&mut c).is_ok()
}

#[test]
fn ignore_target_session_attrs() {
    let mk = || {
        World::new()
            .pg("127.0.0.1:6001", Pg::standby())
            .pg("127.0.0.2:6002", Pg::standby())
    };
    let ci = format!("{TWO} target_session_attrs=read-write");
    assert!(!run(&mut mk(), &ci, None));
    assert!(run(
        &mut mk(),
        &ci,
        Some(PlantedBug::IgnoreTargetSessionAttrs)
    ));
}

#[test]
fn drop_attempt_timeout() {
    let mut c = Connector::new(
        config("host=127.0.0.1 port=6001 connect_timeout=1"),
        Instant::ZERO,
        3,
    );
    while c.poll_action().is_some() {}
    assert_eq!(c.poll_timeout(), Some(Instant(1_000_000_000)));
    let mut c = Connector::new(
        config("host=127.0.0.1 port=6001 connect_timeout=1"),
        Instant::ZERO,
        3,
    )
    .with_planted_bug(PlantedBug::DropAttemptTimeout);
    while c.poll_action().is_some() {}
    assert_eq!(c.poll_timeout(), None);
}

#[test]
fn reuse_closed_attempt() {
    let mk = || World::new().pg("127.0.0.1:6001", Pg::new().ssl(Ssl::YesButFails));
    let ids = |w: &World| {
        w.actions
            .iter()
            .filter_map(|a| match a {
                Action::Open { attempt, .. } => Some(*attempt),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let mut w = mk();
    assert!(run(&mut w, "host=127.0.0.1 port=6001", None));
    let a = ids(&w);
    assert_ne!(a[0], a[1]);
    let mut w = mk();
    run(
        &mut w,
        "host=127.0.0.1 port=6001",
        Some(PlantedBug::ReuseClosedAttempt),
    );
    let a = ids(&w);
    assert_eq!(a[0], a[1]);
}

#[test]
fn skip_prefer_second_pass() {
    let mk = || {
        World::new()
            .pg("127.0.0.1:6001", Pg::primary())
            .pg("127.0.0.2:6002", Pg::primary())
    };
    let ci = format!("{TWO} target_session_attrs=prefer-standby");
    assert!(run(&mut mk(), &ci, None));
    assert!(!run(&mut mk(), &ci, Some(PlantedBug::SkipPreferSecondPass)));
}

#[test]
fn trust_stale_parameter_status() {
    let mk = || {
        World::new()
            .pg("127.0.0.1:6001", Pg::standby())
            .pg("127.0.0.2:6002", Pg::old(false))
    };
    let ci = format!("{TWO} target_session_attrs=primary sslmode=disable");
    assert!(run(&mut mk(), &ci, None));
    assert!(!run(
        &mut mk(),
        &ci,
        Some(PlantedBug::TrustStaleParameterStatus)
    ));
}

#[test]
fn startup_error_next_address() {
    let mk = || {
        World::new()
            .dns("pgmulti", &["127.0.0.1:6003", "127.0.0.2:6003"])
            .pg("127.0.0.1:6003", Pg::error("57P03", "starting"))
            .pg("127.0.0.2:6003", Pg::new())
    };
    let ci = "host=pgmulti port=6003";
    assert!(!run(&mut mk(), ci, None));
    assert!(run(
        &mut mk(),
        ci,
        Some(PlantedBug::StartupErrorNextAddress)
    ));
    let _ = Duration::ZERO;
}

#[test]
fn accept_any_alpn() {
    let mk = || World::new().pg("127.0.0.1:6001", Pg::new().ssl(Ssl::Yes).alpn(None));
    let ci = "host=127.0.0.1 port=6001 sslmode=require sslnegotiation=direct";
    assert!(!run(&mut mk(), ci, None));
    assert!(run(&mut mk(), ci, Some(PlantedBug::AcceptAnyAlpn)));
}

#[test]
fn ignore_default_read_only() {
    // A primary in maintenance first, a writable primary second: read-write must skip the
    // first, and with the bug takes it.
    let mk = || {
        World::new()
            .pg("127.0.0.1:6001", Pg::dtro_on())
            .pg("127.0.0.2:6002", Pg::primary())
    };
    let ci = format!("{TWO} target_session_attrs=read-write sslmode=disable");
    let est = connect(&mut mk(), &ci).expect("the writable primary");
    assert_eq!(est.slot, 1);
    let mut c = Connector::new(config(&ci), Instant::ZERO, 3)
        .with_planted_bug(PlantedBug::IgnoreDefaultReadOnly);
    let est = mk().run(&mut c).expect("the first server");
    assert_eq!(est.slot, 0);
}

#[test]
fn broken_worded_as_closed() {
    // An alert after the startup went out: the error carries its text, and with the bug the
    // text of a closed connection instead.
    let alert = "SSL error: tlsv1 alert unknown ca";
    let broken = |bug: Option<PlantedBug>| {
        let mut c = Connector::new(config("host=127.0.0.1 port=6001"), Instant::ZERO, 3);
        if let Some(b) = bug {
            c = c.with_planted_bug(b);
        }
        let Some(Action::Open { attempt, .. }) = c.poll_action() else {
            panic!("the machine opens first")
        };
        c.handle_event(Instant::ZERO, pgyard_connect::Event::Opened { attempt });
        while let Some(Action::Send { .. }) = c.poll_action() {}
        let message = alert.to_owned();
        c.handle_event(
            Instant::ZERO,
            pgyard_connect::Event::Broken { attempt, message },
        );
        loop {
            match c.poll_action() {
                Some(Action::Done(Err(e))) => return e.message(),
                Some(Action::Done(Ok(_))) => panic!("connected"),
                Some(_) => {}
                None => panic!("the machine stopped without an outcome"),
            }
        }
    };
    assert!(broken(None).contains(alert), "{}", broken(None));
    let with_bug = broken(Some(PlantedBug::BrokenWordedAsClosed));
    assert!(!with_bug.contains(alert), "{with_bug}");
    assert!(
        with_bug.contains("server closed the connection unexpectedly"),
        "{with_bug}"
    );
}
