//! Session mode's ROUTE rule at the edge the simulator found: a ROUTE read while the welcome
//! waits for the server it already asked for.

use bytes::BytesMut;
use pgyard_proxy::classes::ROUTE;
use pgyard_proxy::{ClientOut, Lent, PoolMode, Route, ServerId};
use pgyard_wire::frame::{frames, ProtocolVersion};
use pgyard_wire::frontend;
use pgyard_wire::middleware::encode_middleware;

mod common;
use common::{outputs, session, T0};

fn startup_with_route(route: &[u8]) -> Vec<u8> {
    let params: [(&[u8], &[u8]); 2] = [(b"user", b"alice"), (b"database", b"app")];
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    encode_middleware(ROUTE, route, &mut b).expect("M");
    b.to_vec()
}

/// The type bytes of every frame in `bytes`.
fn tags(bytes: &[u8]) -> Vec<u8> {
    frames(bytes, 1 << 30)
        .map(|f| f.expect("frame").tag)
        .collect()
}

/// Found while growing the simulator's session-mode world (issue #16): in session mode the
/// server is asked for at login, so a ROUTE that arrives while the welcome waits for it can no
/// longer choose its pool. It used to be taken silently (the client's route changed, its
/// session ran on the default route's server); now it gets the NOTICE a ROUTE after the
/// assignment gets, held until the welcome has been written (libpq reads nothing but
/// authentication messages before AuthenticationOk).
#[test]
fn a_route_behind_the_startup_message_in_session_mode_is_ignored_with_a_notice() {
    let mut s = session(PoolMode::Session);
    s.handle_client_bytes(T0, &startup_with_route(b"standby"));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::Acquire(k)] if k.route == Route::Primary),
        "{out:?}"
    );
    let server = Lent {
        id: ServerId(1),
        settings: [("TimeZone".to_owned(), "UTC".to_owned())]
            .into_iter()
            .collect(),
        prepared: Default::default(),
    };
    s.handle_server(T0, server);
    let out = outputs(&mut s);
    let [ClientOut::ToClient(welcome), ClientOut::ToClient(notice)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(tags(welcome).last(), Some(&b'Z'));
    assert_eq!(tags(notice), b"N");
    assert!(String::from_utf8_lossy(notice).contains("ROUTE ignored"));
    assert_eq!(
        s.route(),
        Route::Primary,
        "the route in force is the session's"
    );
}
