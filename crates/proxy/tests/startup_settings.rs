//! A client's startup settings (session 33): the welcome's server takes them before the
//! client is welcomed, so a value the server refuses ends the login as a direct one would,
//! and the client is shown and compared with the values as the server spells them — never a
//! `SET` repeated before every transaction because the client wrote `ISO` where the server
//! says `ISO, MDY`.

use bytes::{Bytes, BytesMut};
use pgyard_proxy::{ClientOut, PoolMode};
use pgyard_wire::backend::{self, TransactionStatus};
use pgyard_wire::error_fields::{encode_error_response, ErrorFields};
use pgyard_wire::frame::frames;

mod common;

use common::{
    outputs, query, released, server, session, session_configured, set_reply, start, starting, T0,
};
use pgyard_proxy::{ClientAuth, ClientConfig};
use std::sync::Arc;

/// The SQL of the one Query in `out`.
fn the_query(out: &[ClientOut]) -> String {
    let [ClientOut::ToServer(q)] = out else {
        panic!("one message for the server: {out:?}")
    };
    String::from_utf8_lossy(&q[5..q.len() - 1]).into_owned()
}

/// Frames `(tag, body)` of `bytes`.
fn frames_of(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    frames(bytes, 1 << 20)
        .map(|f| f.expect("frame"))
        .map(|f| (f.tag, f.body.to_vec()))
        .collect()
}

/// The value of ParameterStatus `name` in `bytes`.
fn status(bytes: &[u8], name: &str) -> Option<String> {
    frames_of(bytes).into_iter().find_map(|(tag, body)| {
        let mut parts = body.split(|&b| b == 0);
        (tag == b'S' && parts.next() == Some(name.as_bytes()))
            .then(|| String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned())
    })
}

/// PostgreSQL's answer to a `SET` of a value it does not take (the statements of the query
/// string roll back together, so nothing is reported).
fn refusal(message: &str) -> Bytes {
    let mut b = BytesMut::new();
    let fields: [(u8, &[u8]); 5] = [
        (b'S', b"ERROR"),
        (b'V', b"ERROR"),
        (b'C', b"22023"),
        (b'M', message.as_bytes()),
        (b'R', b"parse_and_validate_value"),
    ];
    encode_error_response(&fields, &mut b).expect("E");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut b);
    b.freeze()
}

#[test]
fn startup_values_are_shown_as_the_server_spells_them_and_not_set_again() {
    let mut s = starting(
        PoolMode::Transaction,
        &[(b"DateStyle", b"ISO"), (b"TimeZone", b"europe/paris")],
    );
    let login = [("DateStyle", "ISO, MDY"), ("TimeZone", "Etc/UTC")];
    s.handle_server(T0, server(1, &login));
    let sql = the_query(&outputs(&mut s));
    assert_eq!(
        sql,
        "SET DateStyle TO 'ISO';SET TimeZone TO 'europe/paris';"
    );
    // DateStyle was already ISO, MDY: only the TimeZone changed, as the server spells it.
    s.handle_server_bytes(T0, set_reply(2, &[(b"TimeZone", b"Europe/Paris")]));
    let out = outputs(&mut s);
    let Some(ClientOut::ToClient(welcome)) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(status(welcome, "DateStyle").as_deref(), Some("ISO, MDY"));
    assert_eq!(status(welcome, "TimeZone").as_deref(), Some("Europe/Paris"));
    let back = released(out).expect("transaction mode gives the welcome server back");

    // The next transaction, on the same server: nothing to align.
    s.handle_client_bytes(T0, &query("select 1"));
    outputs(&mut s);
    s.handle_server(T0, back);
    assert_eq!(the_query(&outputs(&mut s)), "select 1");
}

#[test]
fn a_startup_value_the_server_refuses_ends_the_login_with_its_error() {
    let mut s = starting(PoolMode::Transaction, &[(b"TimeZone", b"Not/AZone")]);
    s.handle_server(T0, server(1, &[("TimeZone", "Etc/UTC")]));
    assert_eq!(the_query(&outputs(&mut s)), "SET TimeZone TO 'Not/AZone';");
    let text = r#"invalid value for parameter "TimeZone": "Not/AZone""#;
    s.handle_server_bytes(T0, refusal(text));
    let out = outputs(&mut s);
    let [ClientOut::ToClient(ok), ClientOut::ToClient(error), ClientOut::Release { reusable, .. }, ClientOut::Close] =
        &out[..]
    else {
        panic!("{out:?}")
    };
    assert!(
        *reusable,
        "the failed SET changed nothing: the server goes back clean"
    );
    assert_eq!(frames_of(ok), [(b'R', vec![0, 0, 0, 0])]);
    let [(b'E', body)] = &frames_of(error)[..] else {
        panic!("{error:?}")
    };
    let fields = ErrorFields::decode(body).expect("fields");
    assert_eq!(fields.severity(), Some(&b"FATAL"[..]));
    assert_eq!(fields.code(), Some(&b"22023"[..]));
    assert_eq!(fields.message(), Some(text.as_bytes()));
    assert!(s.is_closed());
}

#[test]
fn a_setting_a_later_server_refuses_ends_the_client_and_the_server_goes_back_clean() {
    let mut s = starting(PoolMode::Transaction, &[]);
    s.handle_server(T0, server(1, &[("TimeZone", "Etc/UTC")]));
    let out = outputs(&mut s);
    let back = released(out).expect("welcomed");
    // The client sets a zone its first server takes...
    s.handle_client_bytes(T0, &query("set timezone to 'Mars/Base'"));
    outputs(&mut s);
    s.handle_server(T0, back);
    outputs(&mut s);
    s.handle_server_bytes(T0, set_reply(1, &[(b"TimeZone", b"Mars/Base")]));
    outputs(&mut s);
    // ...and its next transaction lands on a server that does not know it.
    s.handle_client_bytes(T0, &query("select now()"));
    outputs(&mut s);
    s.handle_server(T0, server(2, &[("TimeZone", "Etc/UTC")]));
    assert_eq!(the_query(&outputs(&mut s)), "SET TimeZone TO 'Mars/Base';");
    s.handle_server_bytes(
        T0,
        refusal(r#"invalid value for parameter "TimeZone": "Mars/Base""#),
    );
    let out = outputs(&mut s);
    let sent: Vec<u8> = out
        .iter()
        .filter_map(|o| match o {
            ClientOut::ToClient(b) => Some(b.to_vec()),
            ClientOut::ToServer(b) => panic!("the held query never goes out: {b:?}"),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(
        frames_of(&sent).iter().map(|f| f.0).collect::<Vec<_>>(),
        b"E",
        "no AuthenticationOk after the welcome: {out:?}"
    );
    assert!(matches!(
        &out[..],
        [
            ClientOut::ToClient(_),
            ClientOut::Release { reusable: true, .. },
            ClientOut::Close
        ]
    ));
}

#[test]
fn a_welcome_server_lost_while_it_takes_the_settings_is_replaced() {
    let mut s = starting(PoolMode::Session, &[(b"application_name", b"app")]);
    s.handle_server(T0, server(1, &[("application_name", "")]));
    outputs(&mut s);
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
                ClientOut::Acquire(_)
            ]
        ),
        "another server is asked for; the client has seen nothing: {out:?}"
    );
    s.handle_server(T0, server(2, &[("application_name", "")]));
    assert_eq!(
        the_query(&outputs(&mut s)),
        "SET application_name TO 'app';"
    );
    s.handle_server_bytes(T0, set_reply(1, &[(b"application_name", b"app")]));
    let out = outputs(&mut s);
    let [ClientOut::ToClient(welcome)] = &out[..] else {
        panic!("session mode keeps the server: {out:?}")
    };
    assert_eq!(status(welcome, "application_name").as_deref(), Some("app"));
    assert_eq!(frames_of(welcome).last().map(|f| f.0), Some(b'Z'));
}

#[test]
fn a_message_sent_before_the_welcome_while_the_settings_are_set_is_refused() {
    let mut s = starting(PoolMode::Transaction, &[(b"application_name", b"app")]);
    s.handle_server(T0, server(1, &[("application_name", "")]));
    outputs(&mut s);
    s.handle_client_bytes(T0, &query("select 1"));
    let out = outputs(&mut s);
    assert!(
        matches!(
            &out[..],
            [
                ClientOut::ToClient(_),
                ClientOut::Release {
                    reusable: false,
                    ..
                },
                ClientOut::Close
            ]
        ),
        "the server is mid-alignment: it cannot go back to the pool: {out:?}"
    );
}

/// Found by the simulator while this change was grown (seed 222 of `proxy`): the answer's
/// last chunk also held the first bytes of a shutdown's FATAL, which stayed in the scanner
/// the session keeps across servers, and the next server's answer was read as its rest.
#[test]
fn a_welcome_server_that_speaks_after_the_settings_goes_back_unusable() {
    let mut s = starting(PoolMode::Transaction, &[(b"TimeZone", b"Asia/Tokyo")]);
    s.handle_server(T0, server(1, &[("TimeZone", "Etc/UTC")]));
    outputs(&mut s);
    let mut chunk = BytesMut::from(&set_reply(1, &[(b"TimeZone", b"Asia/Tokyo")])[..]);
    chunk.extend_from_slice(b"E\0");
    s.handle_server_bytes(T0, chunk.freeze());
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(w), ClientOut::Release { reusable: false, .. }]
            if frames_of(w).last().map(|f| f.0) == Some(b'Z')),
        "the welcome, and the server back as unusable: {out:?}"
    );
    s.handle_client_bytes(T0, &query("select 1"));
    outputs(&mut s);
    s.handle_server(T0, server(2, &[("TimeZone", "Asia/Tokyo")]));
    assert_eq!(the_query(&outputs(&mut s)), "select 1");
    let mut reply = BytesMut::new();
    backend::encode_command_complete(b"SELECT 1", &mut reply).expect("C");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut reply);
    s.handle_server_bytes(T0, reply.freeze());
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(r), ClientOut::Release { reusable: true, .. }]
            if frames_of(r).iter().map(|f| f.0).collect::<Vec<_>>() == b"CZ"),
        "the next server's answer is read from its first byte: {out:?}"
    );
}

/// The fields of the FATAL error that ends `out` (before a Close), and whether
/// AuthenticationOk came before it.
fn fatal_in(out: &[ClientOut]) -> (bool, Vec<(u8, Vec<u8>)>) {
    let bytes = common::sent_to_client(out);
    assert!(matches!(out.last(), Some(ClientOut::Close)), "{out:?}");
    let frames = frames_of(&bytes);
    let authenticated = frames.iter().any(|(t, b)| *t == b'R' && b == &[0, 0, 0, 0]);
    let (_, body) = frames.iter().find(|(t, _)| *t == b'E').expect("an error");
    let fields = ErrorFields::decode(body).expect("fields");
    let all = [b'S', b'C', b'M', b'D', b'H']
        .into_iter()
        .filter_map(|c| Some((c, fields.get(c)?.to_vec())))
        .collect();
    (authenticated, all)
}

#[test]
fn startup_packets_a_server_refuses_are_refused_in_its_words() {
    let with_params = |params: &[u8]| {
        let mut p = Vec::new();
        p.extend_from_slice(&(8 + params.len() as u32).to_be_bytes());
        p.extend_from_slice(&0x0003_0000u32.to_be_bytes());
        p.extend_from_slice(params);
        p
    };
    let layout = b"invalid startup packet layout: expected terminator as last byte".to_vec();
    for params in [&b"user\0postgres\0"[..], b"user\0", b"user\0postgres\0\0x"] {
        let mut s = common::session(PoolMode::Transaction);
        s.handle_client_bytes(T0, &with_params(params));
        let (authenticated, fields) = fatal_in(&outputs(&mut s));
        assert!(!authenticated);
        assert_eq!(
            fields,
            [
                (b'S', b"FATAL".to_vec()),
                (b'C', b"08P01".to_vec()),
                (b'M', layout.clone())
            ],
            "{params:?}"
        );
    }
    // `replication` a server cannot read: refused before the password, with its hint.
    let mut s = common::session(PoolMode::Transaction);
    s.handle_client_bytes(T0, &with_params(b"user\0postgres\0replication\0o\0\0"));
    let (authenticated, fields) = fatal_in(&outputs(&mut s));
    assert!(!authenticated);
    assert_eq!(fields[1], (b'C', b"22023".to_vec()));
    assert_eq!(
        fields[2].1,
        b"invalid value for parameter \"replication\": \"o\"".to_vec()
    );
    assert_eq!(
        fields[3].1,
        b"Valid values are: \"false\", 0, \"true\", 1, \"database\".".to_vec()
    );
    // `replication=off` is a plain session, which goes on to want a server.
    let mut s = common::session(PoolMode::Transaction);
    s.handle_client_bytes(T0, &with_params(b"user\0postgres\0replication\0off\0\0"));
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::Acquire(_)]));
}

/// The pool `options` puts a client in: the key of its first Acquire, and the session.
fn pool_options(options: &str) -> (String, pgyard_proxy::ClientSession) {
    pool_of(
        session(PoolMode::Transaction),
        &[(b"options", options.as_bytes())],
    )
}

/// The pool a StartupMessage with `extra` puts session `s` in (the options of the key of its
/// first Acquire), and the session.
fn pool_of(
    mut s: pgyard_proxy::ClientSession,
    extra: &[(&[u8], &[u8])],
) -> (String, pgyard_proxy::ClientSession) {
    let out = start(&mut s, extra);
    let [ClientOut::Acquire(key)] = &out[..] else {
        panic!("{extra:?}: {out:?}")
    };
    assert_eq!(key.options, s.server_options());
    (key.options.clone(), s)
}

#[test]
fn options_beyond_the_tracked_settings_choose_a_pool_whose_servers_log_in_with_them() {
    let text = r"-c search_path=x --statement-timeout=5s -c app.note=a\ b -S1MB -e";
    let (options, mut s) = pool_options(text);
    // Written again as a server reads them: `-c` for each setting, the switch and its
    // argument apart, the escaped space kept.
    assert_eq!(options, r"-c statement_timeout=5s -c app.note=a\ b -S 1MB");
    // The tracked ones still follow the client from server to server.
    let login = [
        ("search_path", "\"$user\", public"),
        ("DateStyle", "ISO, MDY"),
    ];
    s.handle_server(T0, server(1, &login));
    assert_eq!(
        the_query(&outputs(&mut s)),
        "SET DateStyle TO 'euro';SELECT pg_catalog.set_config('search_path', 'x', false);"
    );
    // Only tracked settings, or none: the one pool every such client shares.
    assert_eq!(pool_options("-c application_name=a -c TimeZone=UTC").0, "");
    assert_eq!(pool_options("").0, "");
    // Other switches than settings go to the server as they are, for it to take or refuse.
    assert_eq!(
        pool_options("-E -j -d 5 -c Bogus=1").0,
        "-E -j -d 5 -c Bogus=1"
    );
}

#[test]
fn a_server_refusing_the_clients_options_is_passed_on_whole_after_authentication_ok() {
    let (options, mut s) = pool_options("-c statement_timeout=5parsecs");
    assert_eq!(options, "-c statement_timeout=5parsecs");
    // What PostgreSQL 18 answers such a login, every field as it sends them.
    let fields: [(u8, &[u8]); 9] = [
        (b'S', b"FATAL"),
        (b'V', b"FATAL"),
        (b'C', b"22023"),
        (
            b'M',
            b"invalid value for parameter \"statement_timeout\": \"5parsecs\"",
        ),
        (
            b'H',
            b"Valid units for this parameter are \"us\", \"ms\", \"s\", \"min\", \"h\", and \"d\".",
        ),
        (b'D', b"a detail"),
        (b'F', b"guc.c"),
        (b'L', b"3291"),
        (b'R', b"parse_and_validate_value"),
    ];
    let mut e = BytesMut::new();
    encode_error_response(&fields, &mut e).expect("E");
    let body = e.clone().freeze().slice(5..);
    let answer = pgyard_wire::error_fields::OwnedErrorFields::decode(body).expect("fields");
    s.handle_refused_as(&answer);
    let out = outputs(&mut s);
    let Some(ClientOut::ToClient(sent)) = out.first() else {
        panic!("{out:?}")
    };
    let mut want = BytesMut::new();
    pgyard_wire::backend::Authentication::Ok
        .encode(&mut want)
        .expect("R");
    want.extend_from_slice(&e);
    assert_eq!(&sent[..], &want[..]);
    assert!(matches!(out.last(), Some(ClientOut::Close)), "{out:?}");
    assert!(s.is_closed());
}

#[test]
fn startup_settings_the_proxy_does_not_track_go_to_the_pools_servers_unless_ignored() {
    let startup: [(&[u8], &[u8]); 4] = [
        (b"statement_timeout", b"5s"),
        (b"extra_float_digits", b"3"),
        (b"Geqo", b"off"),
        (b"TimeZone", b"UTC"),
    ];
    let (options, _) = pool_of(session(PoolMode::Transaction), &startup);
    assert_eq!(options, "-c statement_timeout=5s -c Geqo=off");
    // A server reads the StartupMessage after `options`, so they come last and win.
    let mut both = vec![(&b"options"[..], &b"-c statement_timeout=1s -S 1MB"[..])];
    both.extend_from_slice(&startup[..1]);
    let (options, _) = pool_of(session(PoolMode::Transaction), &both);
    assert_eq!(
        options,
        "-c statement_timeout=1s -S 1MB -c statement_timeout=5s"
    );
    // Nothing ignored: pgJDBC's `extra_float_digits` too; a name any case.
    let config = ClientConfig {
        ignore_startup_parameters: Arc::new(["geqo".to_owned()].into()),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let (options, _) = pool_of(session_configured(config), &startup);
    assert_eq!(options, "-c statement_timeout=5s -c extra_float_digits=3");
}

#[test]
fn a_setting_named_with_an_equals_sign_is_refused_after_authentication_ok_as_a_server_does() {
    let refused = |extra: &[(&[u8], &[u8])]| {
        let mut s = session(PoolMode::Transaction);
        fatal_in(&start(&mut s, extra))
    };
    let unknown = "unrecognized configuration parameter \"a=b\"";
    assert_eq!(
        refused(&[(b"statement_timeout", b"5s"), (b"a=b", b"c")]),
        (
            true,
            vec![
                (b'S', b"FATAL".to_vec()),
                (b'C', b"42704".to_vec()),
                (b'M', unknown.as_bytes().to_vec()),
            ]
        )
    );
    // With a dot it is a custom name that is not one; the server says why.
    let (authenticated, fields) = refused(&[(b"my.x=y", b"c"), (b"a=b", b"c")]);
    assert!(authenticated);
    assert_eq!(fields[1], (b'C', b"42602".to_vec()));
    assert_eq!(
        fields[2].1,
        b"invalid configuration parameter name \"my.x=y\"".to_vec()
    );
    assert_eq!(
        fields[3],
        (
            b'D',
            b"Custom parameter names must be two or more simple identifiers separated by dots."
                .to_vec()
        )
    );
    // `options`, which a server reads first, speaks first.
    let (_, fields) = refused(&[(b"a=b", b"c"), (b"options", b"-c foo")]);
    assert_eq!(fields[2].1, b"-c foo requires a value".to_vec());
    // Ignored by the configuration: never looked at.
    let config = ClientConfig {
        ignore_startup_parameters: Arc::new(["a=b".to_owned()].into()),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let (options, _) = pool_of(session_configured(config), &[(b"a=b", b"c")]);
    assert_eq!(options, "");
}

#[test]
fn startup_values_that_are_not_utf8_are_refused_rather_than_changed() {
    let latin1: &[u8] = b"caf\xe9";
    for extra in [
        &[(&b"search_path"[..], latin1)][..],
        &[(b"statement_timeout", latin1)],
        &[(b"options", b"-c search_path=caf\xe9")],
        &[(b"database", latin1)],
        &[(b"app.caf\xe9", b"1")],
    ] {
        let mut s = common::session(PoolMode::Transaction);
        let mut packet = Vec::new();
        for (n, v) in [(&b"user"[..], &b"postgres"[..])].iter().chain(extra) {
            packet.extend_from_slice(n);
            packet.push(0);
            packet.extend_from_slice(v);
            packet.push(0);
        }
        packet.push(0);
        let mut p = ((8 + packet.len()) as u32).to_be_bytes().to_vec();
        p.extend_from_slice(&0x0003_0000u32.to_be_bytes());
        p.extend_from_slice(&packet);
        s.handle_client_bytes(T0, &p);
        let (authenticated, fields) = fatal_in(&outputs(&mut s));
        assert!(!authenticated, "{extra:?}");
        assert_eq!(fields[1], (b'C', b"22021".to_vec()), "{extra:?}");
        let name = String::from_utf8_lossy(extra[0].0);
        let want = format!("startup parameter \"{name}\" is not valid UTF-8");
        assert_eq!(fields[2].1, want.into_bytes());
        assert!(s.is_closed());
    }
    // application_name is cleaned byte by byte, as a server cleans it; an ignored name's
    // value is never read.
    let (_, mut s) = pool_of(
        session(PoolMode::Transaction),
        &[
            (b"application_name", latin1),
            (b"extra_float_digits", latin1),
        ],
    );
    s.handle_server(T0, server(1, &[("application_name", "")]));
    assert_eq!(
        the_query(&outputs(&mut s)),
        r"SET application_name TO E'caf\\xe9';"
    );
}
