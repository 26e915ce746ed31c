//! Bugs the fuzzers (`pgyard_proxy::fuzzing::structured_session` and `client_session`) found
//! in the client-session machine, each kept as a plain test of the machine.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use pgyard_proxy::classes::ROUTE;
use pgyard_proxy::{AuthFile, ClientAuth, ClientOut, ClientSession, Lent, PoolMode, ServerId};
use pgyard_wire::backend::{self, TransactionStatus};
use pgyard_wire::error_fields::encode_error_response;
use pgyard_wire::frame::{frames, ProtocolVersion};
use pgyard_wire::frontend::{self, Target};
use pgyard_wire::middleware::encode_middleware;

mod common;

use common::{outputs, released, sent_to_server, session, T0};

/// A trusting session in `mode`, logged in, its welcome server `1` kept (session mode) or
/// given back (transaction mode, returned).
fn logged_in(mode: PoolMode) -> (ClientSession, Option<Lent>) {
    let mut s = session(mode);
    let mut b = BytesMut::new();
    let params: [(&[u8], &[u8]); 3] = [
        (b"user", b"u"),
        (b"database", b"d"),
        (b"_pq_.middleware_messages", b"on"),
    ];
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    s.handle_client_bytes(T0, &b);
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::Acquire(_)]));
    let lent = Lent {
        id: ServerId(1),
        settings: Default::default(),
        prepared: Default::default(),
    };
    s.handle_server(T0, lent);
    let back = released(outputs(&mut s));
    (s, back)
}

/// A transaction-mode session that prepared `s1` (`text`) on server 1, which went back.
fn prepared_on_server_1(text: &[u8]) -> (ClientSession, Lent) {
    let (mut s, back) = logged_in(PoolMode::Transaction);
    let mut b = BytesMut::new();
    frontend::encode_parse(b"s1", text, &[], &mut b).expect("P");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, back.expect("the welcome server went back"));
    outputs(&mut s);
    let mut r = BytesMut::new();
    backend::encode_empty(b'1', &mut r);
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    s.handle_server_bytes(T0, r.freeze());
    let server = released(outputs(&mut s)).expect("server 1 went back");
    (s, server)
}

fn to_client(out: &[ClientOut]) -> Vec<u8> {
    let mut all = Vec::new();
    for o in out {
        if let ClientOut::ToClient(b) = o {
            all.extend_from_slice(b);
        }
    }
    all
}

fn tags(bytes: &[u8]) -> String {
    frames(bytes, 1 << 30)
        .map(|f| char::from(f.expect("a whole frame").tag))
        .collect()
}

fn error(text: &[u8], out: &mut BytesMut) {
    let fields: [(u8, &[u8]); 3] = [(b'S', b"ERROR"), (b'C', b"42000"), (b'M', text)];
    encode_error_response(&fields, out).expect("E");
}

/// Session mode streams client frames as they come: a server that got part of one and went
/// back reusable would read the next client's bytes (or `DISCARD ALL`) as its rest.
#[test]
fn a_client_gone_mid_message_leaves_its_server_unusable() {
    let (mut s, _) = logged_in(PoolMode::Session);
    let mut q = BytesMut::new();
    frontend::encode_query(b"select 1", &mut q).expect("Q");
    s.handle_client_bytes(T0, &q[..7]);
    let sent: Vec<u8> = sent_to_server(&outputs(&mut s));
    assert_eq!(sent, &q[..7], "the frame streams as it comes");
    s.handle_client_gone();
    let reusable = outputs(&mut s).into_iter().find_map(|o| match o {
        ClientOut::Release { reusable, .. } => Some(reusable),
        _ => None,
    });
    assert_eq!(reusable, Some(false));
}

/// After an error in a pipeline whose Sync is not sent yet, the server ignores everything up
/// to that Sync, including what the client sends later; the proxy's reply queue must too,
/// or its own CloseComplete lands after the wrong ReadyForQuery.
#[test]
fn an_error_before_the_pipelines_sync_skips_what_follows_until_it() {
    // `s1` on server 1 first, so that a later Close of it is the proxy's to answer.
    let (mut s, server) = prepared_on_server_1(b"x");
    // A pipeline without Sync whose Execute fails.
    let mut b = BytesMut::new();
    frontend::encode_parse(b"", b"fail", &[], &mut b).expect("P");
    frontend::encode_bind(b"", b"", &[], &[], &[], &mut b).expect("B");
    frontend::encode_execute(b"", 0, &mut b).expect("E");
    frontend::encode_flush(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, server);
    outputs(&mut s);
    let mut r = BytesMut::new();
    backend::encode_empty(b'1', &mut r);
    backend::encode_empty(b'2', &mut r);
    error(b"fail", &mut r);
    s.handle_server_bytes(T0, r.freeze());
    assert_eq!(tags(&to_client(&outputs(&mut s))), "12E");
    // Then more of the pipeline, its Sync, a Close of `s1` and the Close's Sync.
    let mut b = BytesMut::new();
    frontend::encode_parse(b"", b"x2", &[], &mut b).expect("P");
    frontend::encode_sync(&mut b);
    frontend::encode_close(Target::Statement, b"s1", &mut b).expect("C");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    // The server ignored the Parse: one ReadyForQuery for each Sync.
    let mut r = BytesMut::new();
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    s.handle_server_bytes(T0, r.freeze());
    assert_eq!(tags(&to_client(&outputs(&mut s))), "Z3Z");
}

/// In session mode a ROUTE is answered with a NOTICE; written while a server's reply to the
/// client was cut mid-frame, it would have been read as that frame's rest.
#[test]
fn a_notice_waits_for_the_servers_frame_to_end() {
    let (mut s, _) = logged_in(PoolMode::Session);
    outputs(&mut s);
    let mut q = BytesMut::new();
    frontend::encode_query(b"select 1", &mut q).expect("Q");
    s.handle_client_bytes(T0, &q);
    outputs(&mut s);
    let mut r = BytesMut::new();
    backend::encode_command_complete(b"SELECT 1", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    let r = r.freeze();
    s.handle_server_bytes(T0, r.slice(..6));
    let mut m = BytesMut::new();
    encode_middleware(ROUTE, b"standby", &mut m).expect("M");
    s.handle_client_bytes(T0, &m);
    let mut seen = to_client(&outputs(&mut s));
    s.handle_server_bytes(T0, Bytes::copy_from_slice(&r[6..]));
    seen.extend(to_client(&outputs(&mut s)));
    assert_eq!(tags(&seen), "CZN");
}

/// A named Parse the server refused (here in a failed block) created nothing: a Bind of that
/// name later must reach the server as the client wrote it and fail there, as it would on a
/// direct connection, instead of the proxy parsing the statement again behind its back.
#[test]
fn a_refused_named_parse_leaves_no_statement_behind() {
    let (mut s, back) = logged_in(PoolMode::Transaction);
    let mut b = BytesMut::new();
    frontend::encode_query(b"begin", &mut b).expect("Q");
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, back.expect("the welcome server went back"));
    outputs(&mut s);
    let mut r = BytesMut::new();
    backend::encode_command_complete(b"BEGIN", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::InTransaction, &mut r);
    error(b"boom", &mut r);
    backend::encode_ready_for_query(TransactionStatus::Failed, &mut r);
    let mut b = BytesMut::new();
    frontend::encode_query(b"fail", &mut b).expect("Q");
    s.handle_client_bytes(T0, &b);
    s.handle_server_bytes(T0, r.freeze());
    outputs(&mut s);
    let mut b = BytesMut::new();
    frontend::encode_parse(b"s1", b"select 1", &[], &mut b).expect("P");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    let mut r = BytesMut::new();
    error(b"current transaction is aborted", &mut r);
    backend::encode_ready_for_query(TransactionStatus::Failed, &mut r);
    backend::encode_command_complete(b"ROLLBACK", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    let mut b = BytesMut::new();
    frontend::encode_query(b"commit", &mut b).expect("Q");
    s.handle_client_bytes(T0, &b);
    s.handle_server_bytes(T0, r.freeze());
    let server = released(outputs(&mut s));
    let mut b = BytesMut::new();
    frontend::encode_bind(b"", b"s1", &[], &[], &[], &mut b).expect("B");
    frontend::encode_execute(b"", 0, &mut b).expect("E");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, server.expect("the server went back after the block"));
    let sent: Vec<u8> = sent_to_server(&outputs(&mut s));
    assert_eq!(
        sent,
        b.to_vec(),
        "the Bind goes as written, with no Parse before it"
    );
}

/// In a failed block the server refuses every Parse: the proxy must not answer one itself
/// because the server already holds the same statement for another name.
#[test]
fn a_parse_in_a_failed_block_reaches_the_server_even_when_it_holds_the_statement() {
    let (mut s, back) = logged_in(PoolMode::Transaction);
    let mut b = BytesMut::new();
    frontend::encode_parse(b"s1", b"select 1", &[], &mut b).expect("P");
    frontend::encode_sync(&mut b);
    frontend::encode_query(b"begin", &mut b).expect("Q");
    frontend::encode_query(b"fail", &mut b).expect("Q");
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, back.expect("the welcome server went back"));
    outputs(&mut s);
    let mut r = BytesMut::new();
    backend::encode_empty(b'1', &mut r);
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    backend::encode_command_complete(b"BEGIN", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::InTransaction, &mut r);
    error(b"boom", &mut r);
    backend::encode_ready_for_query(TransactionStatus::Failed, &mut r);
    s.handle_server_bytes(T0, r.freeze());
    outputs(&mut s);
    let mut b = BytesMut::new();
    frontend::encode_parse(b"s2", b"select 1", &[], &mut b).expect("P");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    let out = outputs(&mut s);
    let sent: Vec<u8> = sent_to_server(&out);
    assert_eq!(tags(&sent), "PS", "the Parse goes to the server");
    assert!(
        to_client(&out).is_empty(),
        "no ParseComplete of the proxy's own"
    );
}

/// An error voids only the Parses the server skips for it (up to the next Sync): a named
/// Parse pipelined after a failing simple query still lands, and a later Bind of it must not
/// parse it again (the server would answer 42P05, statement already exists).
#[test]
fn an_error_voids_only_the_parses_it_makes_the_server_skip() {
    let (mut s, back) = logged_in(PoolMode::Transaction);
    let mut b = BytesMut::new();
    frontend::encode_query(b"fail", &mut b).expect("Q");
    frontend::encode_parse(b"s1", b"select 1", &[], &mut b).expect("P");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, back.expect("the welcome server went back"));
    outputs(&mut s);
    let mut r = BytesMut::new();
    error(b"fail", &mut r);
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    backend::encode_empty(b'1', &mut r);
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    s.handle_server_bytes(T0, r.freeze());
    let server = released(outputs(&mut s));
    let mut b = BytesMut::new();
    frontend::encode_bind(b"", b"s1", &[], &[], &[], &mut b).expect("B");
    frontend::encode_execute(b"", 0, &mut b).expect("E");
    frontend::encode_sync(&mut b);
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    s.handle_server(T0, server.expect("the server went back"));
    let sent: Vec<u8> = sent_to_server(&outputs(&mut s));
    assert_eq!(
        tags(&sent),
        "BES",
        "no second Parse of a statement the server holds"
    );
}

/// A Parse the proxy puts before a Bind (the lent server lacks the statement) can be refused
/// by a failed block; a later Bind of the same statement, sent before that answer came, must
/// not count on it: it gets a Parse of its own, so that it succeeds once the block has ended,
/// as on a direct connection.
#[test]
fn a_bind_does_not_count_on_a_reparse_still_unanswered() {
    let (mut s, _) = prepared_on_server_1(b"select 1");
    // A block that fails, a Bind of s1 inside it, its end, and another Bind of s1: all in one
    // flight, to a server that has never seen s1.
    let mut b = BytesMut::new();
    frontend::encode_query(b"begin", &mut b).expect("Q");
    frontend::encode_query(b"fail", &mut b).expect("Q");
    for end in [&b"commit"[..], b""] {
        frontend::encode_bind(b"", b"s1", &[], &[], &[], &mut b).expect("B");
        frontend::encode_execute(b"", 0, &mut b).expect("E");
        frontend::encode_sync(&mut b);
        if !end.is_empty() {
            frontend::encode_query(end, &mut b).expect("Q");
        }
    }
    s.handle_client_bytes(T0, &b);
    outputs(&mut s);
    let fresh = Lent {
        id: ServerId(2),
        settings: Default::default(),
        prepared: Default::default(),
    };
    s.handle_server(T0, fresh);
    let sent = sent_to_server(&outputs(&mut s));
    assert_eq!(
        tags(&sent),
        "QQPBESQPBES",
        "each Bind behind a Parse of its own"
    );
    let parses: Vec<Vec<u8>> = frames(&sent, 1 << 30)
        .map(|f| f.expect("a frame"))
        .filter(|f| f.tag == b'P')
        .map(|f| {
            f.body
                .split(|&c| c == 0)
                .next()
                .unwrap_or_default()
                .to_vec()
        })
        .collect();
    assert_ne!(
        parses[0], parses[1],
        "the second Parse has a name of its own"
    );
    // The server: the block fails, refuses the first Parse, and takes the second.
    let mut r = BytesMut::new();
    backend::encode_command_complete(b"BEGIN", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::InTransaction, &mut r);
    error(b"fail", &mut r);
    backend::encode_ready_for_query(TransactionStatus::Failed, &mut r);
    error(b"current transaction is aborted", &mut r);
    backend::encode_ready_for_query(TransactionStatus::Failed, &mut r);
    backend::encode_command_complete(b"ROLLBACK", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    backend::encode_empty(b'1', &mut r);
    backend::encode_empty(b'2', &mut r);
    backend::encode_command_complete(b"SELECT 1", &mut r).expect("C");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut r);
    s.handle_server_bytes(T0, r.freeze());
    assert_eq!(tags(&to_client(&outputs(&mut s))), "CZEZEZCZ2CZ");
}

/// `proxy_client` found it: a StartupMessage and the start of a frame in one read. The
/// splitter counted the frame's header as typed bytes and forwarded the rest of its declared
/// length as they came, while the startup decoder read the header as more parameters; a
/// middleware message sent later inside those 768 bytes then reached a server.
#[test]
fn bytes_after_the_startup_packet_in_the_same_read_are_not_startup_parameters() {
    let mut startup = BytesMut::new();
    let params: [(&[u8], &[u8]); 1] = [(b"user", b"u")];
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut startup).expect("startup");
    let mut read = startup.to_vec();
    read.extend_from_slice(&[b'd', 0, 0, 3, 0]); // CopyData, 768 bytes declared
    read.extend_from_slice(b"\0\0");
    let mut s = session(PoolMode::Transaction);
    s.handle_client_bytes(T0, &read);
    let out = outputs(&mut s);
    // The user is `u` (no parameter was made of the frame), and the frame, arriving before
    // the server was ready, ends the session, as bytes arriving then in a read of their own do.
    assert!(
        matches!(&out[0], ClientOut::Acquire(k) if k.user == "u" && k.database == "u"),
        "{out:?}"
    );
    let text = String::from_utf8_lossy(&to_client(&out)).into_owned();
    assert!(
        text.contains("message received before the server was ready"),
        "{text}"
    );
    assert!(s.is_closed());
    let mut m = BytesMut::new();
    encode_middleware(ROUTE, b"standby", &mut m).expect("M");
    s.handle_client_bytes(T0, &m);
    assert!(sent_to_server(&outputs(&mut s)).is_empty());
}

/// What follows a StartupMessage in its read is read by the login that the message starts:
/// a password sent at once, before the server asked, is checked as if it came later.
#[test]
fn a_password_in_the_startup_packets_read_is_checked() {
    let text = "\"u\" \"md5aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n";
    let file = AuthFile::parse(text, &mut pgyard_types::rng_from_seed(1)).expect("auth file");
    let mut s = common::session_with(PoolMode::Transaction, ClientAuth::File(Arc::new(file)));
    let mut read = BytesMut::new();
    let params: [(&[u8], &[u8]); 1] = [(b"user", b"u")];
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut read).expect("startup");
    frontend::encode_password(b"wrong", &mut read).expect("p");
    s.handle_client_bytes(T0, &read);
    let text = String::from_utf8_lossy(&to_client(&outputs(&mut s))).into_owned();
    assert!(
        text.contains("password authentication failed for user \"u\""),
        "{text}"
    );
    assert!(s.is_closed());
}
