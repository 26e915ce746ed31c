//! The client-session machine on its own: what it sends each side, when it asks for and gives
//! back servers, and what it refuses — no sockets, no clock.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgyard_proxy::classes::{MIN_LSN, ROUTE, TAG};
use pgyard_proxy::{
    CancelKey, ClientAuth, ClientConfig, ClientId, ClientOut, ClientSession, Lent, PoolMode, Route,
    ServerId,
};
use pgyard_types::Instant;
use pgyard_wire::auth::LoginRandom;
use pgyard_wire::backend::{self, TransactionStatus};
use pgyard_wire::frame::{frames, ProtocolVersion};
use pgyard_wire::frontend;
use pgyard_wire::middleware::encode_middleware;
use proptest::prelude::*;

mod common;

use common::{outputs, query, server, session, welcome_outputs, T0};

fn startup(extra: &[(&[u8], &[u8])]) -> Vec<u8> {
    let mut params: Vec<(&[u8], &[u8])> = vec![(b"user", b"alice"), (b"database", b"app")];
    params.extend_from_slice(extra);
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    b.to_vec()
}

/// The type bytes of every frame in `bytes`.
fn tags(bytes: &[u8]) -> Vec<u8> {
    frames(bytes, 1 << 30)
        .map(|f| f.expect("frame").tag)
        .collect()
}

fn middleware(class: i64, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    encode_middleware(class, payload, &mut b).expect("M");
    b.to_vec()
}

fn reply(status: TransactionStatus) -> Bytes {
    let mut b = BytesMut::new();
    backend::encode_command_complete(b"SELECT 1", &mut b).expect("C");
    backend::encode_ready_for_query(status, &mut b);
    b.freeze()
}

/// Logs a transaction-mode client in and gives the welcome server back.
fn logged_in(mode: PoolMode, extra: &[(&[u8], &[u8])]) -> (ClientSession, Vec<ClientOut>) {
    let mut s = session(mode);
    s.handle_client_bytes(T0, &startup(extra));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::Acquire(k)] if k.user == "alice" && k.database == "app"),
        "{out:?}"
    );
    s.handle_server(
        T0,
        server(1, &[("TimeZone", "UTC"), ("server_version", "18.4")]),
    );
    let out = welcome_outputs(&mut s);
    (s, out)
}

#[test]
fn the_welcome_shows_the_servers_settings_with_the_clients_own() {
    let (_, out) = logged_in(
        PoolMode::Transaction,
        &[
            (b"TimeZone", b"Asia/Tokyo"),
            (b"_pq_.middleware_messages", b"on"),
        ],
    );
    let ClientOut::ToClient(welcome) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(tags(welcome), b"RSSSKZ");
    let text = String::from_utf8_lossy(welcome);
    assert!(text.contains("TimeZone\0Asia/Tokyo\0"), "{text:?}");
    assert!(text.contains("middleware_messages\0on\0"), "{text:?}");
    assert!(text.contains("server_version\u{0}18.4"), "{text:?}");
    assert!(
        matches!(&out[1], ClientOut::Release { server, reusable: true } if server.id == ServerId(1)),
        "transaction mode gives the welcome server back: {out:?}"
    );
}

#[test]
fn a_transaction_borrows_a_server_until_ready_for_query_idle() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    let mut input = middleware(ROUTE, b"standby");
    input.extend(query("begin"));
    s.handle_client_bytes(T0, &input);
    let out = outputs(&mut s);
    let [ClientOut::Acquire(key)] = &out[..] else {
        panic!("{out:?}")
    };
    assert_eq!(key.route, Route::Standby);
    // Same TimeZone as the client saw: nothing to align, the held query goes out.
    s.handle_server(T0, server(2, &[("TimeZone", "UTC")]));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(b)] if tags(b) == b"Q"),
        "{out:?}"
    );
    s.handle_server_bytes(T0, reply(TransactionStatus::InTransaction));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(_)]),
        "inside a block it stays: {out:?}"
    );
    s.handle_client_bytes(T0, &query("commit"));
    s.handle_server_bytes(T0, reply(TransactionStatus::Idle));
    let out = outputs(&mut s);
    assert!(
        matches!(
            &out[..],
            [
                ClientOut::ToServer(_),
                ClientOut::ToClient(_),
                ClientOut::Release { reusable: true, .. }
            ]
        ),
        "{out:?}"
    );
    assert_eq!(s.stats().transactions, 1);
}

#[test]
fn a_pipeline_keeps_its_server_until_its_last_sync_is_answered() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    let mut b = BytesMut::new();
    for _ in 0..2 {
        frontend::encode_parse(b"", b"select 1", &[], &mut b).expect("P");
        frontend::encode_bind(b"", b"", &[], &[], &[], &mut b).expect("B");
        frontend::encode_execute(b"", 0, &mut b).expect("E");
        frontend::encode_sync(&mut b);
    }
    s.handle_client_bytes(T0, &b);
    s.handle_server(T0, server(3, &[("TimeZone", "UTC")]));
    outputs(&mut s);
    s.handle_server_bytes(T0, reply(TransactionStatus::Idle));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(_)]),
        "one Sync still owed: {out:?}"
    );
    s.handle_server_bytes(T0, reply(TransactionStatus::Idle));
    let out = outputs(&mut s);
    assert!(
        matches!(out.last(), Some(ClientOut::Release { reusable: true, .. })),
        "{out:?}"
    );
}

#[test]
fn settings_are_aligned_before_the_clients_query_and_the_replies_are_swallowed() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[(b"application_name", b"o'k")]);
    s.handle_client_bytes(T0, &query("select 1"));
    outputs(&mut s);
    s.handle_server(T0, server(4, &[("TimeZone", "Europe/Paris")]));
    let out = outputs(&mut s);
    let [ClientOut::ToServer(set)] = &out[..] else {
        panic!("{out:?}")
    };
    let sql = String::from_utf8_lossy(&set[5..]).into_owned();
    assert!(sql.contains("SET TimeZone TO 'UTC';"), "{sql}");
    assert!(sql.contains("SET application_name TO 'o''k';"), "{sql}");
    let mut answer = BytesMut::new();
    backend::ParameterStatus {
        name: b"TimeZone",
        value: b"UTC",
    }
    .encode(&mut answer)
    .expect("S");
    answer.extend_from_slice(&reply(TransactionStatus::Idle));
    s.handle_server_bytes(T0, answer.freeze());
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(q)] if tags(q) == b"Q"),
        "the alignment's replies never reach the client: {out:?}"
    );
}

#[test]
fn terminate_and_middleware_messages_never_reach_the_server() {
    let (mut s, _) = logged_in(PoolMode::Session, &[]);
    outputs(&mut s);
    let mut input = query("select 1");
    input.extend(middleware(TAG, b"batch"));
    input.extend(middleware(MIN_LSN, b"0/16B3748"));
    input.extend(middleware(9, b"someone else's"));
    input.extend([b'X', 0, 0, 0, 4]);
    s.handle_client_bytes(T0, &input);
    let out = outputs(&mut s);
    let sent = common::sent_to_server(&out);
    assert_eq!(tags(&sent), b"Q");
    assert_eq!(s.tag(), Some("batch"));
    assert_eq!(s.stats().middleware, 3);
    assert_eq!(s.stats().unknown_classes, 1);
    assert!(matches!(out.last(), Some(ClientOut::Close)), "{out:?}");
    // A query was owed a reply: the server is not clean.
    assert!(out.iter().any(|o| matches!(
        o,
        ClientOut::Release {
            reusable: false,
            ..
        }
    )));
}

#[test]
fn a_malformed_payload_of_a_known_class_disconnects_with_08p01() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    s.handle_client_bytes(T0, &middleware(ROUTE, b"master"));
    let out = outputs(&mut s);
    let ClientOut::ToClient(err) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(tags(err), b"E");
    let text = String::from_utf8_lossy(err);
    assert!(
        text.contains("C08P01") && text.contains("invalid ROUTE"),
        "{text}"
    );
    assert!(matches!(out.last(), Some(ClientOut::Close)));
    assert!(s.is_closed());
}

#[test]
fn startup_packets_answered_as_a_server_would() {
    let mut s = session(PoolMode::Transaction);
    let mut ssl = BytesMut::new();
    frontend::encode_ssl_request(&mut ssl);
    s.handle_client_bytes(T0, &ssl);
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::ToClient(b)] if &b[..] == b"N"));

    let mut s = session(PoolMode::Transaction);
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::new(4, 0), &[(b"user", b"a")], &mut b).expect("v4");
    s.handle_client_bytes(T0, &b);
    let out = outputs(&mut s);
    let ClientOut::ToClient(err) = &out[0] else {
        panic!("{out:?}")
    };
    assert!(String::from_utf8_lossy(err).contains("unsupported frontend protocol 4.0"));

    let mut s = session(PoolMode::Transaction);
    s.handle_client_bytes(T0, &startup(&[(b"_pq_.compression", b"on")]));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[0], ClientOut::ToClient(b) if tags(b) == b"v"),
        "NegotiateProtocolVersion names the option: {out:?}"
    );

    let mut cancel = BytesMut::new();
    frontend::encode_cancel_request(77, &[9; 4], &mut cancel).expect("cancel");
    let mut s = session(PoolMode::Transaction);
    s.handle_client_bytes(T0, &cancel);
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::Cancel { pid: 77, key }, ClientOut::Close] if key == &[9; 4]),
        "{out:?}"
    );
}

#[test]
fn a_lost_server_fails_only_a_client_that_was_owed_a_reply() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    s.handle_client_bytes(T0, &query("select pg_sleep(10)"));
    s.handle_server(T0, server(5, &[("TimeZone", "UTC")]));
    outputs(&mut s);
    s.handle_server_gone();
    let out = outputs(&mut s);
    assert!(
        matches!(
            &out[0],
            ClientOut::Release {
                reusable: false,
                ..
            }
        ),
        "{out:?}"
    );
    let ClientOut::ToClient(err) = &out[1] else {
        panic!("{out:?}")
    };
    assert!(String::from_utf8_lossy(err).contains("C08006"));
    assert!(s.is_closed());
}

#[test]
fn the_login_timeout_ends_a_silent_client() {
    let mut s = session(PoolMode::Transaction);
    assert_eq!(s.poll_timeout(), Some(Instant(5_000_000_000)));
    s.handle_timeout(Instant(5_000_000_000));
    let out = outputs(&mut s);
    assert!(matches!(out.last(), Some(ClientOut::Close)), "{out:?}");
}

proptest! {
    /// However the client's bytes are cut, the server gets exactly its non-M, non-Terminate
    /// frames, in order, and never an `M` or any byte of the closing Terminate (which
    /// PostgreSQL takes with a body too).
    #[test]
    fn cuts_never_leak_middleware(
        kinds in proptest::collection::vec(0u8..4, 1..12),
        cuts in proptest::collection::vec(1usize..40, 0..20),
        terminate_body in 0usize..30,
    ) {
        let (mut s, _) = logged_in(PoolMode::Session, &[]);
        outputs(&mut s);
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for (i, k) in kinds.iter().enumerate() {
            match k {
                0 => input.extend(middleware(ROUTE, b"any")),
                1 => input.extend(middleware(7, &vec![b'x'; i])),
                _ => {
                    let q = query(&format!("select {i}"));
                    expected.extend_from_slice(&q);
                    input.extend(q);
                }
            }
        }
        input.push(b'X');
        input.extend_from_slice(&(4 + terminate_body as i32).to_be_bytes());
        input.extend(vec![0; terminate_body]);
        let mut sent = Vec::new();
        let mut rest = &input[..];
        for c in cuts {
            let (now, later) = rest.split_at(c.min(rest.len()));
            s.handle_client_bytes(T0, now);
            rest = later;
        }
        s.handle_client_bytes(T0, rest);
        for o in outputs(&mut s) {
            if let ClientOut::ToServer(b) = o {
                sent.extend_from_slice(&b);
            }
        }
        prop_assert_eq!(sent, expected);
        prop_assert!(s.is_closed());
    }
}

fn extended(named: &[u8], parse: bool) -> Vec<u8> {
    let mut b = BytesMut::new();
    if parse {
        frontend::encode_parse(named, b"select $1::int", &[23], &mut b).expect("P");
    }
    frontend::encode_bind(b"", named, &[], &[Some(b"7")], &[], &mut b).expect("B");
    frontend::encode_execute(b"", 0, &mut b).expect("E");
    frontend::encode_sync(&mut b);
    b.to_vec()
}

fn server_reply(tags: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    for &t in tags {
        match t {
            b'C' => backend::encode_command_complete(b"SELECT 1", &mut b).expect("C"),
            b'Z' => backend::encode_ready_for_query(TransactionStatus::Idle, &mut b),
            b'E' => pgyard_wire::error_fields::encode_error_response(
                &[(b'S', b"ERROR"), (b'C', b"42601"), (b'M', b"syntax error")],
                &mut b,
            )
            .expect("E"),
            t => backend::encode_empty(t, &mut b),
        }
    }
    b.freeze()
}

/// Sends the server's reply and returns what the client got, as type bytes.
fn answer(s: &mut ClientSession, reply_tags: &[u8]) -> (Vec<u8>, Option<Lent>) {
    s.handle_server_bytes(T0, server_reply(reply_tags));
    let mut seen = Vec::new();
    let mut back = None;
    for o in outputs(s) {
        match o {
            ClientOut::ToClient(b) => seen.extend(tags(&b)),
            ClientOut::Release { server, .. } => back = Some(server),
            other => panic!("unexpected {other:?}"),
        }
    }
    (seen, back)
}

/// The statement names in the Parse and Bind frames of `bytes`.
fn statement_names(bytes: &[u8]) -> Vec<(u8, String)> {
    frames(bytes, 1 << 30)
        .map(|f| f.expect("frame"))
        .filter_map(|f| match f.tag {
            b'P' => Some((b'P', frontend::Parse::decode(f.body).ok()?.name)),
            b'B' => Some((b'B', frontend::Bind::decode(f.body).ok()?.statement)),
            _ => None,
        })
        .map(|(t, n)| (t, String::from_utf8_lossy(n).into_owned()))
        .collect()
}

fn sent(out: &[ClientOut]) -> Vec<u8> {
    out.iter()
        .filter_map(|o| match o {
            ClientOut::ToServer(b) => Some(b.to_vec()),
            _ => None,
        })
        .flatten()
        .collect()
}

#[test]
fn a_named_statement_follows_its_client_to_every_server() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    // First transaction, server 2: the Parse goes out under the proxy's name.
    s.handle_client_bytes(T0, &extended(b"s1", true));
    outputs(&mut s);
    s.handle_server(T0, server(2, &[("TimeZone", "UTC")]));
    let names = statement_names(&sent(&outputs(&mut s)));
    assert_eq!(names.len(), 2);
    let proxy = names[0].1.clone();
    assert!(proxy.starts_with("pgyard_") && proxy.len() == 39, "{proxy}");
    assert_eq!(names[1], (b'B', proxy.clone()));
    let (seen, back) = answer(&mut s, b"12CZ");
    assert_eq!(seen, b"12CZ");
    let two = back.expect("released");
    assert!(two.prepared.contains_key(&proxy));

    // Second transaction, server 3 without it: the proxy parses first and hides the reply.
    s.handle_client_bytes(T0, &extended(b"s1", false));
    outputs(&mut s);
    s.handle_server(T0, server(3, &[("TimeZone", "UTC")]));
    let names = statement_names(&sent(&outputs(&mut s)));
    assert_eq!(names, [(b'P', proxy.clone()), (b'B', proxy.clone())]);
    let (seen, _) = answer(&mut s, b"12CZ");
    assert_eq!(
        seen, b"2CZ",
        "the proxy's own ParseComplete never reaches the client"
    );

    // Back on server 2, which has it: a new Parse of the same text is answered by the proxy.
    s.handle_client_bytes(T0, &extended(b"s2", true));
    outputs(&mut s);
    s.handle_server(T0, two);
    let out = outputs(&mut s);
    assert_eq!(statement_names(&sent(&out)), [(b'B', proxy.clone())]);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(_), ClientOut::ToClient(b)] if tags(b) == b"1"),
        "ParseComplete at once, before anything the server says: {out:?}"
    );
    let (seen, _) = answer(&mut s, b"2CZ");
    assert_eq!(seen, b"2CZ");

    // Closing the client's name costs the server nothing.
    let mut close = BytesMut::new();
    frontend::encode_close(frontend::Target::Statement, b"s2", &mut close).expect("C");
    frontend::encode_sync(&mut close);
    s.handle_client_bytes(T0, &close);
    s.handle_server(T0, server(4, &[("TimeZone", "UTC")]));
    let out = outputs(&mut s);
    assert_eq!(tags(&sent(&out)), b"S");
    let got: Vec<u8> = out
        .iter()
        .filter_map(|o| match o {
            ClientOut::ToClient(b) => Some(tags(b)),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(got, b"3");
}

#[test]
fn a_failed_parse_is_not_remembered_on_the_server() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    s.handle_client_bytes(T0, &extended(b"bad", true));
    outputs(&mut s);
    s.handle_server(T0, server(2, &[("TimeZone", "UTC")]));
    outputs(&mut s);
    let (seen, back) = answer(&mut s, b"EZ");
    assert_eq!(seen, b"EZ");
    assert!(back.expect("released").prepared.is_empty());
}

#[test]
fn min_lsn_asks_the_adapter_and_falls_back_to_the_primary() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    let mut input = middleware(ROUTE, b"standby");
    input.extend(middleware(MIN_LSN, b"0/3000148"));
    input.extend(query("select 1"));
    s.handle_client_bytes(T0, &input);
    let out = outputs(&mut s);
    assert!(matches!(&out[..], [ClientOut::Acquire(k)] if k.route == Route::Standby));
    assert_eq!(s.needs_lsn(), Some(pgyard_types::Lsn(0x3000148)));
    // The standby offered is behind: the same transaction asks the primary instead.
    s.fall_back();
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::Acquire(k)] if k.route == Route::Primary),
        "{out:?}"
    );
    assert_eq!(s.needs_lsn(), None);
    s.handle_server(T0, server(9, &[("TimeZone", "UTC")]));
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::ToServer(_)]));
    // The next transaction is back on the standby route, with no position to wait for.
    s.handle_server_bytes(T0, reply(TransactionStatus::Idle));
    outputs(&mut s);
    s.handle_client_bytes(T0, &query("select 2"));
    let out = outputs(&mut s);
    assert!(matches!(&out[..], [ClientOut::Acquire(k)] if k.route == Route::Standby));
    assert_eq!(s.needs_lsn(), None);
}

#[test]
fn a_client_over_max_client_conn_is_refused_with_53300() {
    let mut s = session(PoolMode::Transaction).over_limit();
    s.handle_client_bytes(T0, &startup(&[]));
    let out = outputs(&mut s);
    let ClientOut::ToClient(err) = &out[0] else {
        panic!("{out:?}")
    };
    let text = String::from_utf8_lossy(err);
    assert!(
        text.contains("C53300") && text.contains("no more connections allowed (max_client_conn)"),
        "{text}"
    );
    assert!(matches!(out.last(), Some(ClientOut::Close)));
}

#[test]
fn a_demoted_primary_is_never_lent_to_the_primary_route() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    s.handle_client_bytes(T0, &query("insert into t values (1)"));
    outputs(&mut s);
    // The server came back as a standby of the new primary since it was opened.
    s.handle_server(
        T0,
        server(7, &[("TimeZone", "UTC"), ("in_hot_standby", "on")]),
    );
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::Release { server, reusable: false }, ClientOut::Acquire(k)]
            if server.id == ServerId(7) && k.route == Route::Primary),
        "{out:?}"
    );
    s.handle_server(
        T0,
        server(8, &[("TimeZone", "UTC"), ("in_hot_standby", "off")]),
    );
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::ToServer(_)]));
}

/// The text of the one ErrorResponse among `out`, and whether the connection closes after it.
fn fatal_text(out: &[ClientOut]) -> (String, bool) {
    let text = out
        .iter()
        .find_map(|o| match o {
            ClientOut::ToClient(b) if tags(b) == b"E" => Some(String::from_utf8_lossy(b).into()),
            _ => None,
        })
        .unwrap_or_default();
    (text, matches!(out.last(), Some(ClientOut::Close)))
}

#[test]
fn a_database_without_a_backend_is_refused_after_the_password_check() {
    let mut names = std::collections::BTreeSet::new();
    names.insert("shop".to_owned());
    let config = ClientConfig {
        login_timeout: Duration::from_secs(5),
        databases: pgyard_proxy::Databases::Only(std::sync::Arc::new(names)),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let random = LoginRandom {
        salt: [1; 4],
        nonce: [2; 18],
        mock_salt: [3; 16],
    };
    let key = CancelKey {
        pid: 1,
        secret: vec![1; 32],
    };
    let mut s = ClientSession::new(T0, ClientId(1), config, key, random);
    s.handle_client_bytes(T0, &startup(&[]));
    let out = outputs(&mut s);
    assert!(
        !out.iter().any(|o| matches!(o, ClientOut::Acquire(_))),
        "{out:?}"
    );
    let (text, closed) = fatal_text(&out);
    assert!(
        text.contains("FATAL") && text.contains("C08P01") && text.contains("no such database: app"),
        "{text:?}"
    );
    assert!(closed);
}

#[test]
fn a_shutdown_closes_idle_clients_now_and_busy_ones_at_their_boundary() {
    // Not logged in yet: closed at once.
    let mut s = session(PoolMode::Transaction);
    s.handle_shutdown();
    let (text, closed) = fatal_text(&outputs(&mut s));
    assert!(text.contains("pooler is shutting down") && closed, "{text}");

    // Between transactions: closed at once.
    let (mut idle, _) = logged_in(PoolMode::Transaction, &[]);
    idle.handle_shutdown();
    let (text, closed) = fatal_text(&outputs(&mut idle));
    assert!(text.contains("C08P01") && closed, "{text}");

    // Inside a transaction block: its COMMIT is answered, then it is closed.
    let (mut busy, _) = logged_in(PoolMode::Transaction, &[]);
    busy.handle_client_bytes(T0, &query("begin"));
    busy.handle_server(T0, server(2, &[("TimeZone", "UTC")]));
    busy.handle_server_bytes(T0, reply(TransactionStatus::InTransaction));
    outputs(&mut busy);
    busy.handle_shutdown();
    assert!(outputs(&mut busy).is_empty(), "the transaction goes on");
    busy.handle_client_bytes(T0, &query("commit"));
    busy.handle_server_bytes(T0, reply(TransactionStatus::Idle));
    let out = outputs(&mut busy);
    assert!(
        matches!(
            &out[..],
            [
                ClientOut::ToServer(_),
                ClientOut::ToClient(ok),
                ClientOut::Release { reusable: true, .. },
                ClientOut::ToClient(_),
                ClientOut::Close
            ] if tags(ok) == b"CZ"
        ),
        "{out:?}"
    );
    assert!(busy.is_closed());
}

#[test]
fn a_shutdown_leaves_a_session_mode_client_to_leave_by_itself() {
    let (mut s, _) = logged_in(PoolMode::Session, &[]);
    s.handle_shutdown();
    assert!(outputs(&mut s).is_empty());
    assert!(s.is_draining() && !s.is_closed());
    s.handle_client_bytes(T0, &query("select 1"));
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::ToServer(_)]));
}

/// A FATAL 57P01 as a server says it when it shuts down.
fn shutdown_fatal() -> Vec<u8> {
    let mut b = BytesMut::new();
    let fields: [(u8, &[u8]); 4] = [
        (b'S', b"FATAL"),
        (b'V', b"FATAL"),
        (b'C', b"57P01"),
        (b'M', b"terminating connection due to administrator command"),
    ];
    pgyard_wire::error_fields::encode_error_response(&fields, &mut b).expect("E");
    b.to_vec()
}

/// Found by the simulator (`proxy`, a server dying under a transaction): the server's last
/// message reached the client only in part, so a message of the proxy's own after it would
/// be read as the rest of that message. The connection just ends, as it would from the
/// server itself.
#[test]
fn a_server_lost_in_the_middle_of_a_message_ends_the_client_without_a_word() {
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    s.handle_client_bytes(T0, &query("begin"));
    s.handle_server(T0, server(5, &[("TimeZone", "UTC")]));
    outputs(&mut s);
    s.handle_server_bytes(T0, reply(TransactionStatus::InTransaction));
    outputs(&mut s);
    let fatal = shutdown_fatal();
    s.handle_server_bytes(T0, Bytes::copy_from_slice(&fatal[..9]));
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(b)] if b[..] == fatal[..9]),
        "{out:?}"
    );
    s.handle_server_gone();
    let out = outputs(&mut s);
    assert!(
        matches!(
            &out[..],
            [
                ClientOut::Release {
                    reusable: false,
                    ..
                },
                ClientOut::Close
            ]
        ),
        "{out:?}"
    );
    assert!(s.is_closed());
    // Three bytes of a header are held back, never forwarded: the client stands between
    // messages and gets the proxy's 08006.
    let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
    s.handle_client_bytes(T0, &query("select 1"));
    s.handle_server(T0, server(5, &[("TimeZone", "UTC")]));
    outputs(&mut s);
    s.handle_server_bytes(T0, Bytes::copy_from_slice(&fatal[..3]));
    s.handle_server_gone();
    let (text, closed) = fatal_text(&outputs(&mut s));
    assert!(text.contains("C08006") && closed, "{text}");
}

/// Found by the simulator (`proxy`, a server shut down right after a transaction): what a
/// server says after the ReadyForQuery that ends the transaction (here its FATAL 57P01, whole
/// or in part) is not the client's, who stands between transactions; the server goes back
/// as unusable, and the client's next transaction runs undisturbed on another.
#[test]
fn what_a_server_says_after_the_transaction_ends_is_not_the_clients() {
    for cut in [0, 9] {
        let (mut s, _) = logged_in(PoolMode::Transaction, &[]);
        s.handle_client_bytes(T0, &query("select 1"));
        s.handle_server(T0, server(5, &[("TimeZone", "UTC")]));
        outputs(&mut s);
        let mut chunk = reply(TransactionStatus::Idle).to_vec();
        let fatal = shutdown_fatal();
        chunk.extend_from_slice(if cut == 0 { &fatal[..] } else { &fatal[..cut] });
        s.handle_server_bytes(T0, Bytes::from(chunk));
        let out = outputs(&mut s);
        let ClientOut::ToClient(to_client) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(tags(to_client), b"CZ", "cut {cut}: {out:?}");
        assert!(
            matches!(
                &out[1..],
                [ClientOut::Release {
                    reusable: false,
                    ..
                }]
            ),
            "cut {cut}: {out:?}"
        );
        // The next transaction, on another server, reads that server's replies whole.
        s.handle_client_bytes(T0, &query("select 2"));
        s.handle_server(T0, server(6, &[("TimeZone", "UTC")]));
        outputs(&mut s);
        s.handle_server_bytes(T0, reply(TransactionStatus::Idle));
        let out = outputs(&mut s);
        let ClientOut::ToClient(next) = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(tags(next), b"CZ", "cut {cut}: {out:?}");
        assert!(
            matches!(&out[1..], [ClientOut::Release { reusable: true, .. }]),
            "cut {cut}: {out:?}"
        );
    }
}

#[test]
fn peer_authentication_lets_in_only_the_socket_owners_own_name() {
    let peer = |os_user: Option<&str>| {
        let auth = ClientAuth::Peer {
            os_user: os_user.map(str::to_owned),
        };
        let mut s = common::session_with(PoolMode::Transaction, auth);
        s.handle_client_bytes(T0, &startup(&[]));
        outputs(&mut s)
    };
    // The OS user is the user asked for: in, with no password asked.
    let out = peer(Some("alice"));
    assert!(
        matches!(&out[..], [ClientOut::Acquire(k)] if k.user == "alice"),
        "{out:?}"
    );
    // Anyone else, or an owner the adapter could not name: PostgreSQL's FATAL 28000.
    for os_user in [Some("mallory"), Some("Alice"), None] {
        let out = peer(os_user);
        assert!(
            !out.iter().any(|o| matches!(o, ClientOut::Acquire(_))),
            "{os_user:?}: {out:?}"
        );
        let (text, closed) = fatal_text(&out);
        assert!(
            text.contains("FATAL")
                && text.contains("C28000")
                && text.contains("Peer authentication failed for user \"alice\""),
            "{os_user:?}: {text:?}"
        );
        assert!(closed);
    }
}
