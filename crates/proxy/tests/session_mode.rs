//! Session mode's ROUTE rule at the edges the simulator found: a ROUTE read while the welcome
//! waits for the server it already asked for, and one read while the proxy aligns that
//! server's settings with the client's.

use bytes::{Bytes, BytesMut};
use pgyard_proxy::classes::ROUTE;
use pgyard_proxy::{ClientOut, Lent, PoolMode, Route, ServerId};
use pgyard_wire::backend::{self, ParameterStatus, TransactionStatus};
use pgyard_wire::frame::{frames, ProtocolVersion};
use pgyard_wire::frontend;
use pgyard_wire::middleware::encode_middleware;

mod common;
use common::{outputs, query, server, session, T0};

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

/// Found when the simulator's clients began to send a TimeZone of their own (session 32): a
/// ROUTE read while the proxy aligned the server's settings was held as if the client's
/// stream stood inside a server frame, and reached the client after the reply of the query
/// sent with it. Since session 33 the alignment comes before the welcome (whose ReadyForQuery
/// it delays), so a ROUTE read with the StartupMessage is answered after the welcome, which
/// now shows the TimeZone as the server spelt it; the alignment's replies, cut inside a
/// frame, never reach the client.
#[test]
fn the_welcome_waits_for_the_alignment_and_a_held_route_notice_follows_it() {
    let mut s = session(PoolMode::Session);
    let params: [(&[u8], &[u8]); 3] = [
        (b"user", b"alice"),
        (b"database", b"app"),
        (b"TimeZone", b"asia/tokyo"),
    ];
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    encode_middleware(ROUTE, b"standby", &mut b).expect("M");
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, server(1, &[("TimeZone", "UTC")]));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(set)]
            if String::from_utf8_lossy(set).contains("SET TimeZone TO 'asia/tokyo';")),
        "the alignment, and no welcome yet: {out:?}"
    );
    let mut answer = BytesMut::new();
    backend::encode_command_complete(b"SET", &mut answer).expect("C");
    ParameterStatus {
        name: b"TimeZone",
        value: b"Asia/Tokyo",
    }
    .encode(&mut answer)
    .expect("S");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut answer);
    let answer = answer.freeze();
    s.handle_server_bytes(T0, answer.slice(..3));
    assert!(outputs(&mut s).is_empty());
    s.handle_server_bytes(T0, answer.slice(3..));
    let out = outputs(&mut s);
    let [ClientOut::ToClient(welcome), ClientOut::ToClient(notice)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(tags(welcome), b"RSKZ");
    assert!(String::from_utf8_lossy(welcome).contains("TimeZone\0Asia/Tokyo\0"));
    assert_eq!(tags(notice), b"N");
    s.handle_client_bytes(T0, &query("select 1"));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(q)] if tags(q) == b"Q"),
        "{out:?}"
    );
    let mut reply = BytesMut::new();
    backend::encode_command_complete(b"SELECT 1", &mut reply).expect("C");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut reply);
    s.handle_server_bytes(T0, Bytes::from(reply));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(r)] if tags(r) == b"CZ"),
        "the client's reply, and only it: {out:?}"
    );
}
