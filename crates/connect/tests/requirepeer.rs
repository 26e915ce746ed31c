//! `requirepeer` as libpq 18 applies it: on a Unix socket, once connected and before anything
//! is sent, the owner of the server's end must be the user named, else the connect ends
//! (no further host is tried) with libpq's text; TCP connections and an empty value are
//! never checked. The machine asks its driver for the owner (`Action::Open`'s `peer_user`)
//! and judges what comes back (`Event::PeerUser`).

mod common;

use common::*;
use pgyard_connect::{Action, Connector, FailureKind};

const SOCK: &str = "/run/pg/.s.PGSQL.5432";
const PS: &str = "connection to server on socket \"/run/pg/.s.PGSQL.5432\" failed: ";
const TWO: &str = "host=/run/pg,127.0.0.2 port=5432,6002";

fn world(sock: Pg) -> World {
    World::new().pg(SOCK, sock).pg("127.0.0.2:6002", Pg::new())
}

#[test]
fn the_owner_named_lets_the_connect_go_on() {
    let mut w = world(Pg::new());
    let est = connect(&mut w, &format!("{TWO} requirepeer=postgres")).expect("the owner");
    assert_eq!(est.host, "/run/pg");
}

#[test]
fn another_owner_ends_the_connect_in_libpqs_words() {
    let mut w = world(Pg::new());
    let e = connect(&mut w, &format!("{TWO} requirepeer=alice")).expect_err("refused");
    assert_eq!(
        e.message(),
        format!("{PS}requirepeer specifies \"alice\", but actual peer user name is \"postgres\"\n")
    );
    assert_eq!(e.kind(), FailureKind::Authentication);
    // The second host was never tried.
    assert_eq!(w.opened.len(), 1, "{:?}", w.opened);
}

#[test]
fn an_owner_that_cannot_be_learnt_ends_the_connect() {
    let mut pg = Pg::new();
    pg.peer = Some(Err("local user with ID 4242 does not exist".into()));
    let mut w = world(pg);
    let e = connect(&mut w, &format!("{TWO} requirepeer=postgres")).expect_err("refused");
    assert_eq!(
        e.message(),
        format!("{PS}local user with ID 4242 does not exist\n")
    );
    // A driver that reports nothing fails closed.
    let mut pg = Pg::new();
    pg.peer = None;
    let mut w = world(pg);
    let e = connect(&mut w, &format!("{TWO} requirepeer=postgres")).expect_err("refused");
    assert_eq!(
        e.message(),
        format!("{PS}could not get peer credentials: not reported by the driver\n")
    );
}

#[test]
fn tcp_and_an_empty_value_are_not_checked_and_not_asked() {
    for conninfo in [
        "host=127.0.0.2 port=6002 requirepeer=alice".to_owned(),
        format!("{TWO} requirepeer="),
        TWO.to_owned(),
    ] {
        let mut w = world(Pg::new());
        connect(&mut w, &conninfo).expect(&conninfo);
    }
    // Only a Unix socket under a non-empty requirepeer asks for the owner.
    for (conninfo, asks) in [
        ("host=/run/pg port=5432 requirepeer=alice", true),
        ("host=/run/pg port=5432 requirepeer=", false),
        ("host=127.0.0.2 port=6002 requirepeer=alice", false),
    ] {
        let mut c = Connector::new(config(conninfo), pgyard_types::Instant::ZERO, 1);
        c.handle_timeout(pgyard_types::Instant::ZERO);
        let open = std::iter::from_fn(|| c.poll_action())
            .find_map(|a| match a {
                Action::Open { peer_user, .. } => Some(peer_user),
                _ => None,
            })
            .expect("an open");
        assert_eq!(open, asks, "{conninfo}");
    }
}
