//! libpq 18 sequencing: the spec's §19.3 scenarios that need no real TLS or DNS, compared as
//! full error strings, plus the rules of §8.3, §9, §10, §12.2, §13 and reset.

mod common;

use std::time::Duration;

use common::*;
use pgyard_connect::{Action, ConnectError, Connector, FailureKind, OpenTarget, TcpOptions};
use pgyard_types::Instant;

const P1: &str = "connection to server at \"127.0.0.1\", port 6001 failed: ";
const P2: &str = "connection to server at \"127.0.0.2\", port 6002 failed: ";
const TWO: &str = "host=127.0.0.1,127.0.0.2 port=6001,6002";

fn err(world: &mut World, conninfo: &str) -> String {
    connect(world, conninfo).expect_err("should fail").message()
}

#[test]
fn s1_refused_then_ok() {
    let mut w = World::new().pg("127.0.0.2:6002", Pg::new());
    let est = connect(&mut w, TWO).unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    assert_eq!(est.host, "127.0.0.2");
    assert_eq!(est.protocol_version, (3, 0));
    assert_eq!(est.backend_key.unwrap().key, vec![1, 2, 3, 4]);
    assert_eq!(
        est.parameters.iter().next(),
        Some(("server_version", "18.4"))
    );
}

#[test]
fn s2_57p03_moves_to_next_slot() {
    let mut w = World::new()
        .pg(
            "127.0.0.2:6002",
            Pg::error("57P03", "the database system is starting up"),
        )
        .pg("127.0.0.3:6003", Pg::new());
    let est = connect(
        &mut w,
        "host=127.0.0.1,127.0.0.2,127.0.0.3 port=6001,6002,6003",
    )
    .unwrap();
    assert_eq!(est.target, tcp("127.0.0.3:6003"));
    assert_eq!(
        w.log()[..2],
        ["127.0.0.2:6002 sslrequest", "127.0.0.2:6002 startup plain"]
    );
}

#[test]
fn s3_too_many_clients_aborts() {
    let mut w = World::new()
        .pg(
            "127.0.0.1:6004",
            Pg::error("53300", "sorry_too_many_clients_already"),
        )
        .pg("127.0.0.2:6002", Pg::new());
    let e = err(&mut w, "host=127.0.0.1,127.0.0.2 port=6004,6002");
    assert_eq!(
        e,
        "connection to server at \"127.0.0.1\", port 6004 failed: FATAL:  sorry_too_many_clients_already\n"
    );
    assert!(w.log().iter().all(|l| !l.starts_with("127.0.0.2")));
}

#[test]
fn s4_bad_password_aborts() {
    let mut pg = Pg::new();
    pg.auth = Auth::Cleartext("right".into());
    let mut w = World::new()
        .pg("127.0.0.1:6001", pg)
        .pg("127.0.0.2:6002", Pg::new());
    let e = err(&mut w, &format!("{TWO} password=secret sslmode=disable"));
    assert_eq!(
        e,
        format!("{P1}FATAL:  password authentication failed for user \"u\"\n")
    );
    assert!(w.log().iter().all(|l| !l.starts_with("127.0.0.2")));
}

#[test]
fn cleartext_password_success_and_require_auth() {
    let mut pg = Pg::new();
    pg.auth = Auth::Cleartext("secret".into());
    let mut w = World::new().pg("127.0.0.1:6001", pg.clone());
    connect(&mut w, "host=127.0.0.1 port=6001 password=secret").unwrap();
    // require_auth=md5 rejects a cleartext request.
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    let e = err(
        &mut w,
        "host=127.0.0.1 port=6001 password=secret require_auth=md5",
    );
    assert_eq!(
        e,
        format!("{P1}authentication method requirement \"md5\" failed: server requested a cleartext password\n")
    );
    // require_auth=password against a trust server.
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    let e = err(&mut w, "host=127.0.0.1 port=6001 require_auth=password");
    assert_eq!(
        e,
        format!("{P1}authentication method requirement \"password\" failed: server did not complete authentication\n")
    );
    // No password at all.
    let mut pg = Pg::new();
    pg.auth = Auth::Md5;
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    let e = err(&mut w, "host=127.0.0.1 port=6001");
    assert_eq!(e, format!("{P1}fe_sendauth: no password supplied\n"));
}

#[test]
fn channel_binding_require_over_plaintext_trust() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    let e = err(
        &mut w,
        "host=127.0.0.1 port=6001 channel_binding=require sslmode=disable",
    );
    assert_eq!(
        e,
        format!("{P1}channel binding required, but server authenticated client without channel binding\n")
    );
}

#[test]
fn s6_three_addresses_refused_in_resolver_order() {
    let mut w = World::new().dns(
        "pgmulti",
        &["127.0.0.1:6099", "127.0.0.2:6099", "127.0.0.3:6099"],
    );
    let e = err(&mut w, "host=pgmulti port=6099");
    let expect: String = (1..=3)
        .map(|i| {
            format!("connection to server at \"pgmulti\" (127.0.0.{i}), port 6099 failed: {REFUSED_TCP}")
        })
        .collect();
    assert_eq!(e, expect);
}

#[test]
fn s7_57p03_skips_remaining_addresses() {
    let mut w = World::new()
        .dns("pgmulti", &["127.0.0.1:6003", "127.0.0.2:6003"])
        .pg("127.0.0.1:6003", Pg::error("57P03", "starting"))
        .pg("127.0.0.2:6003", Pg::new());
    let e = err(&mut w, "host=pgmulti port=6003");
    assert_eq!(
        e,
        "connection to server at \"pgmulti\" (127.0.0.1), port 6003 failed: FATAL:  starting\n"
    );
}

#[test]
fn s8_ssl_error_response_aborts() {
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::new().ssl(Ssl::Error))
        .pg("127.0.0.2:6002", Pg::new());
    assert_eq!(
        err(&mut w, TWO),
        format!("{P1}server sent an error response during SSL exchange\n")
    );
}

#[test]
fn s9_tls_failure_falls_back_to_plaintext_same_address() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new().ssl(Ssl::YesButFails));
    let est = connect(&mut w, "host=127.0.0.1 port=6001").unwrap();
    assert!(!est.tls);
    assert_eq!(
        w.log(),
        ["127.0.0.1:6001 sslrequest", "127.0.0.1:6001 startup plain"]
    );
    // Two sockets were opened, the first closed.
    assert_eq!(w.opened.len(), 2);
    assert_eq!(w.closed, vec![w.opened[0]]);
}

#[test]
fn tls_success_and_sslmode_require_tls_failure_aborts() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new().ssl(Ssl::Yes));
    let est = connect(&mut w, "host=127.0.0.1 port=6001").unwrap();
    assert!(est.tls);
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::new().ssl(Ssl::YesButFails))
        .pg("127.0.0.2:6002", Pg::new());
    assert_eq!(
        err(&mut w, &format!("{TWO} sslmode=require")),
        format!("{P1}SSL SYSCALL error: EOF detected\n")
    );
}

#[test]
fn s10_eof_after_startup_aborts() {
    let mut pg = Pg::new();
    pg.close_after_startup = true;
    let mut w = World::new()
        .pg("127.0.0.1:6001", pg)
        .pg("127.0.0.2:6002", Pg::new());
    assert_eq!(
        err(&mut w, TWO),
        format!("{P1}server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request.\n")
    );
}

#[test]
fn s11_require_but_server_says_no() {
    let mut w = World::new().pg("127.0.0.2:6002", Pg::new());
    assert_eq!(
        err(&mut w, &format!("{TWO} sslmode=require")),
        format!("{P1}{REFUSED_TCP}{P2}server does not support SSL, but SSL was required\n")
    );
}

#[test]
fn s12_s13_connect_timeout_per_address() {
    let mut w = World::new()
        .node("127.0.0.1:6001", Node::Blackhole)
        .pg("127.0.0.2:6002", Pg::new());
    connect(&mut w, &format!("{TWO} connect_timeout=1")).unwrap();
    assert_eq!(w.now, Instant(1_000_000_000));

    let mut w = World::new()
        .node("127.0.0.1:6001", Node::Blackhole)
        .node("127.0.0.2:6002", Node::Blackhole);
    let e = err(&mut w, &format!("{TWO} connect_timeout=1"));
    assert_eq!(e, format!("{P1}timeout expired\n{P2}timeout expired\n"));
    assert_eq!(w.now, Instant(2_000_000_000));
}

#[test]
fn connect_timeout_covers_auth_and_is_shared_by_fallback() {
    // Server accepts TLS, handshake fails, then the plaintext attempt hangs after startup:
    // the deadline armed at the first connect still applies (1 s total, not 2).
    let mut pg = Pg::new().ssl(Ssl::YesButFails);
    pg.hang_after_startup = true;
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    w.latency
        .insert("127.0.0.1:6001".into(), Duration::from_millis(300));
    let e = err(&mut w, "host=127.0.0.1 port=6001 connect_timeout=1");
    assert_eq!(
        e,
        format!("{P1}SSL SYSCALL error: EOF detected\n{P1}timeout expired\n")
    );
    assert_eq!(w.now, Instant(1_000_000_000));
}

#[test]
fn connect_timeout_parse_error_follows_first_prefix() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    let e = err(&mut w, "host=127.0.0.1 port=6001 connect_timeout=1.5");
    assert_eq!(
        e,
        format!("{P1}invalid integer value \"1.5\" for connection option \"connect_timeout\"\n")
    );
}

/// Runs `c` in `w` to its first Done, then drains whatever the machine still emits: the
/// Done actions among everything it ever emitted, and the result of the first.
fn dones(w: &mut World, c: &mut Connector) -> (usize, ConnectError) {
    let e = w.run(c).expect_err("should fail");
    while let Some(a) = c.poll_action() {
        w.actions.push(a);
    }
    let n = w
        .actions
        .iter()
        .filter(|a| matches!(a, Action::Done(_)))
        .count();
    (n, e)
}

#[test]
fn bad_connect_timeout_ends_with_exactly_one_done() {
    const BAD: &str = "invalid integer value \"1.5\" for connection option \"connect_timeout\"\n";
    // Texts from libpq 18 (PQconnectdb, then PQerrorMessage) where the conninfo is given.
    let cases: [(&str, Option<String>); 4] = [
        (
            "host=127.0.0.1,127.0.0.2 port=6001,6002 connect_timeout=1.5",
            Some(format!("{P1}{BAD}")),
        ),
        (
            "host=a,b port=6001 connect_timeout=1.5",
            Some(format!(
                "connection to server at \"a\" (127.0.0.1), port 6001 failed: {BAD}"
            )),
        ),
        (
            "host=127.0.0.1,127.0.0.2 port=99999,6002 connect_timeout=1.5",
            Some(format!("invalid port number: \"99999\"\n{P2}{BAD}")),
        ),
        // libpq reports this one at the TCP address when the socket file is missing (its
        // Unix connect fails synchronously); the machine cannot tell, so only the count and
        // the kind are checked.
        ("host=/tmp,127.0.0.2 port=6001 connect_timeout=1.5", None),
    ];
    for (conninfo, text) in cases {
        for race in [false, true] {
            let mut w = World::new().dns("a", &["127.0.0.1:6001"]);
            let mut cfg = config(conninfo);
            if race {
                cfg = cfg.with_strategy(pgyard_conninfo::Strategy::Race);
            }
            let mut c = Connector::new(cfg, Instant::ZERO, 7);
            let (n, e) = dones(&mut w, &mut c);
            assert_eq!(n, 1, "{conninfo} (race: {race}): {:?}", w.actions);
            let last = e.reports.last().expect("a report");
            assert_eq!(last.kind, FailureKind::Configuration, "{conninfo}");
            assert!(last.text.ends_with(BAD), "{conninfo}: {:?}", last.text);
            if let Some(text) = &text {
                assert_eq!(&e.message(), text, "{conninfo} (race: {race})");
            }
            assert!(w.opened.is_empty(), "{conninfo}: nothing may be opened");

            // A reset reads connect_timeout again and fails the same way, once.
            c.reset(w.now);
            w.actions.clear();
            let (n, again) = dones(&mut w, &mut c);
            assert_eq!(n, 1, "{conninfo} after reset: {:?}", w.actions);
            assert_eq!(again.message(), e.message());
        }
    }
}

#[test]
fn tsa_scenarios_14_to_21() {
    // 14: standby, primary; read-write.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::standby())
        .pg("127.0.0.2:6002", Pg::primary());
    let est = connect(&mut w, &format!("{TWO} target_session_attrs=read-write")).unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    assert!(w.log().contains(&"127.0.0.1:6001 terminate".to_string()));
    // 15: standby, standby; read-write.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::standby())
        .pg("127.0.0.2:6002", Pg::standby());
    assert_eq!(
        err(&mut w, &format!("{TWO} target_session_attrs=read-write")),
        format!("{P1}session is read-only\n{P2}session is read-only\n")
    );
    // 16: primary, primary; read-only.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::primary())
        .pg("127.0.0.2:6002", Pg::primary());
    assert_eq!(
        err(&mut w, &format!("{TWO} target_session_attrs=read-only")),
        format!("{P1}session is not read-only\n{P2}session is not read-only\n")
    );
    // 17: primary(dtro=on), standby; primary → first.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::dtro_on())
        .pg("127.0.0.2:6002", Pg::standby());
    let est = connect(&mut w, &format!("{TWO} target_session_attrs=primary")).unwrap();
    assert_eq!(est.target, tcp("127.0.0.1:6001"));
    // 18: primary, primary(dtro=on); standby.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::primary())
        .pg("127.0.0.2:6002", Pg::dtro_on());
    assert_eq!(
        err(&mut w, &format!("{TWO} target_session_attrs=standby")),
        format!("{P1}server is not in hot standby mode\n{P2}server is not in hot standby mode\n")
    );
    // 19: primary, primary(dtro=on); prefer-standby → first, sequence 1 → 2 → 1.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::primary())
        .pg("127.0.0.2:6002", Pg::dtro_on());
    let est = connect(
        &mut w,
        &format!("{TWO} target_session_attrs=prefer-standby"),
    )
    .unwrap();
    assert_eq!(est.target, tcp("127.0.0.1:6001"));
    let starts: Vec<String> = w
        .log()
        .into_iter()
        .filter(|l| l.contains("startup"))
        .collect();
    assert_eq!(
        starts,
        [
            "127.0.0.1:6001 startup plain",
            "127.0.0.2:6002 startup plain",
            "127.0.0.1:6001 startup plain"
        ]
    );
    // 20: primary, standby; prefer-standby → standby.
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::primary())
        .pg("127.0.0.2:6002", Pg::standby());
    let est = connect(
        &mut w,
        &format!("{TWO} target_session_attrs=prefer-standby"),
    )
    .unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    // 21: refused, refused; prefer-standby → four lines.
    let mut w = World::new();
    assert_eq!(
        err(
            &mut w,
            &format!("{TWO} target_session_attrs=prefer-standby")
        ),
        format!("{P1}{REFUSED_TCP}{P2}{REFUSED_TCP}{P1}{REFUSED_TCP}{P2}{REFUSED_TCP}")
    );
}

#[test]
fn tsa_old_servers_query_22_23() {
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::old(true))
        .pg("127.0.0.2:6002", Pg::old(false));
    let est = connect(&mut w, &format!("{TWO} target_session_attrs=read-write")).unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    let q: Vec<String> = w
        .log()
        .into_iter()
        .filter(|l| l.contains("query"))
        .collect();
    assert_eq!(
        q,
        [
            "127.0.0.1:6001 query SHOW transaction_read_only",
            "127.0.0.2:6002 query SHOW transaction_read_only"
        ]
    );
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::old(false))
        .pg("127.0.0.2:6002", Pg::old(true));
    let est = connect(&mut w, &format!("{TWO} target_session_attrs=standby")).unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    let q: Vec<String> = w
        .log()
        .into_iter()
        .filter(|l| l.contains("query"))
        .collect();
    assert_eq!(
        q,
        [
            "127.0.0.1:6001 query SELECT pg_catalog.pg_is_in_recovery()",
            "127.0.0.2:6002 query SELECT pg_catalog.pg_is_in_recovery()"
        ]
    );
    // A PG14+ server reporting both parameters is never queried (35).
    let mut w = World::new().pg("127.0.0.1:6001", Pg::primary());
    connect(
        &mut w,
        "host=127.0.0.1 port=6001 target_session_attrs=read-write",
    )
    .unwrap();
    assert!(w.log().iter().all(|l| !l.contains("query")));
}

#[test]
fn tsa_check_query_failure() {
    let mut old = Pg::old(false);
    old.show_ro = None;
    let mut w = World::new()
        .pg("127.0.0.1:6001", old)
        .pg("127.0.0.2:6002", Pg::primary());
    let est = connect(&mut w, &format!("{TWO} target_session_attrs=read-write")).unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    let mut old = Pg::old(false);
    old.in_recovery = None;
    let mut w = World::new().pg("127.0.0.1:6001", old);
    assert_eq!(
        err(
            &mut w,
            "host=127.0.0.1 port=6001 target_session_attrs=primary"
        ),
        format!("{P1}ERROR:  boom\n\"SELECT pg_is_in_recovery()\" failed\n")
    );
}

#[test]
fn s24_mismatch_skips_remaining_addresses() {
    let mut w = World::new()
        .dns("pgmulti", &["127.0.0.1:6001", "127.0.0.3:6001"])
        .pg("127.0.0.1:6001", Pg::primary())
        .pg("127.0.0.3:6001", Pg::standby());
    let e = err(
        &mut w,
        "host=pgmulti port=6001 target_session_attrs=standby",
    );
    assert_eq!(
        e,
        "connection to server at \"pgmulti\" (127.0.0.1), port 6001 failed: server is not in hot standby mode\n"
    );
}

#[test]
fn protocol_negotiation_25_to_27() {
    let mut pg = Pg::new();
    pg.npv = Some((0x0003_0000, vec![]));
    let mut w = World::new().pg("127.0.0.1:6001", pg.clone());
    assert_eq!(
        err(&mut w, "host=127.0.0.1 port=6001"),
        format!("{P1}received invalid protocol negotiation message: server negotiated but asks for no changes\n")
    );
    let mut w = World::new().pg("127.0.0.1:6001", pg.clone());
    let est = connect(
        &mut w,
        "host=127.0.0.1 port=6001 max_protocol_version=latest",
    )
    .unwrap();
    assert_eq!(est.protocol_version, (3, 0));
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    assert_eq!(
        err(&mut w, "host=127.0.0.1 port=6001 min_protocol_version=3.2"),
        format!("{P1}server only supports protocol version 3.0, but \"min_protocol_version\" was set to 3.2\n")
    );
    // Other NPV failures.
    for (v, names, text) in [
        (
            0x0003_0003u32,
            vec![],
            "server requested downgrade to a higher-numbered version",
        ),
        (
            0x0002_0000,
            vec![],
            "server requested downgrade to pre-3.0 protocol version",
        ),
        (
            0x0003_0001,
            vec![],
            "server requested downgrade to non-existent 3.1 protocol version",
        ),
        (
            0x0003_0000,
            vec!["_pq_.x".to_string()],
            "server reported an unsupported parameter that was not requested (\"_pq_.x\")",
        ),
    ] {
        let mut pg = Pg::new();
        pg.npv = Some((v, names));
        let mut w = World::new().pg("127.0.0.1:6001", pg);
        assert_eq!(
            err(&mut w, "host=127.0.0.1 port=6001 max_protocol_version=3.2"),
            format!("{P1}received invalid protocol negotiation message: {text}\n")
        );
    }
    // 3.2 requested and granted.
    let mut pg = Pg::new();
    pg.key = vec![9; 32];
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    let est = connect(&mut w, "host=127.0.0.1 port=6001 max_protocol_version=3.2").unwrap();
    assert_eq!(est.protocol_version, (3, 2));
    assert_eq!(est.backend_key.unwrap().key.len(), 32);
}

#[test]
fn s28_allow_retries_with_ssl_after_error() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::error("53300", "too many"));
    let e = err(&mut w, "host=127.0.0.1 port=6001 sslmode=allow");
    assert_eq!(
        e,
        format!("{P1}FATAL:  too many\n{P1}server does not support SSL, but SSL was required\n")
    );
    assert_eq!(
        w.log(),
        ["127.0.0.1:6001 startup plain", "127.0.0.1:6001 sslrequest"]
    );
}

#[test]
fn s29_s31_prefer_retries_plaintext_after_pre_auth_error() {
    // hba rejects SSL, allows plain: OK on the second connection.
    let mut pg = Pg::new().ssl(Ssl::Yes);
    pg.ssl_error = Some(("28000".into(), "pg_hba.conf rejects connection".into()));
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    let est = connect(&mut w, "host=127.0.0.1 port=6001").unwrap();
    assert!(!est.tls);
    // Same rejection under require: abort.
    let mut pg = Pg::new().ssl(Ssl::Yes);
    pg.ssl_error = Some(("28000".into(), "pg_hba.conf rejects connection".into()));
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    assert_eq!(
        err(&mut w, "host=127.0.0.1 port=6001 sslmode=require"),
        format!("{P1}FATAL:  pg_hba.conf rejects connection\n")
    );
    // Wrong password under prefer with SSL: two identical lines.
    let mut pg = Pg::new().ssl(Ssl::Yes);
    pg.auth = Auth::Cleartext("right".into());
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    let line = format!("{P1}FATAL:  password authentication failed for user \"u\"\n");
    assert_eq!(
        err(&mut w, "host=127.0.0.1 port=6001 password=wrong"),
        format!("{line}{line}")
    );
}

#[test]
fn s33_post_auth_error_aborts_without_fallback() {
    let mut pg = Pg::new().ssl(Ssl::Yes);
    pg.post_auth_error = Some((
        "3D000".into(),
        "database \"nosuchdb\" does not exist".into(),
    ));
    let mut w = World::new()
        .pg("127.0.0.1:6001", pg)
        .pg("127.0.0.2:6002", Pg::new());
    assert_eq!(
        err(&mut w, TWO),
        format!("{P1}FATAL:  database \"nosuchdb\" does not exist\n")
    );
    assert_eq!(w.opened.len(), 1);
}

#[test]
fn s36_s37_lazy_port_errors() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    connect(&mut w, "host=127.0.0.1,127.0.0.2 port=6001,abc").unwrap();
    let mut w = World::new().pg("127.0.0.2:6001", Pg::new());
    assert_eq!(
        err(&mut w, "host=127.0.0.1,127.0.0.2 port=abc,6001"),
        "invalid integer value \"abc\" for connection option \"port\"\n"
    );
    let mut w = World::new();
    assert_eq!(
        err(&mut w, "host=127.0.0.1,127.0.0.2 port=99999,6001"),
        format!(
            "invalid port number: \"99999\"\nconnection to server at \"127.0.0.2\", port 6001 failed: {REFUSED_TCP}"
        )
    );
}

#[test]
fn s38_bad_keepalives_skip_each_tcp_address() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    assert_eq!(
        err(&mut w, &format!("{TWO} keepalives_idle=x")),
        format!("{P1}invalid integer value \"x\" for connection option \"keepalives_idle\"\n{P2}invalid integer value \"x\" for connection option \"keepalives_idle\"\n")
    );
    assert!(w.opened.is_empty());
}

/// A server that refuses a startup setting as unknown (42704) after AuthenticationOk gets a
/// second connection without `application_name` when either name keyword is set (even
/// empty): libpq's retry for servers older than 9.0, which also shows a misspelt `options`
/// setting twice. Without either keyword there is no retry.
#[test]
fn unknown_setting_after_auth_retries_without_application_name() {
    let refusal = "unrecognized configuration parameter \"x\"";
    let server = || {
        let mut pg = Pg::new();
        pg.post_auth_error = Some(("42704".into(), refusal.into()));
        World::new().pg("127.0.0.1:6001", pg)
    };
    let sent_names = |w: &World| -> Vec<bool> {
        w.actions
            .iter()
            .filter_map(|a| match a {
                Action::Send { bytes, .. } if bytes.get(4..8) == Some(&[0, 3, 0, 0]) => Some(
                    bytes
                        .windows(b"application_name".len())
                        .any(|w| w == b"application_name"),
                ),
                _ => None,
            })
            .collect()
    };
    let once = format!("{P1}FATAL:  {refusal}\n");
    for (extra, retried, names) in [
        ("application_name=app", true, vec![true, false]),
        ("fallback_application_name=fb", true, vec![true, false]),
        ("application_name=''", true, vec![false, false]),
        ("", false, vec![false]),
    ] {
        let mut w = server();
        let e = err(&mut w, &format!("host=127.0.0.1 port=6001 {extra}"));
        let want = if retried {
            once.repeat(2)
        } else {
            once.clone()
        };
        assert_eq!(e, want, "{extra}");
        assert_eq!(w.opened.len(), if retried { 2 } else { 1 }, "{extra}");
        assert_eq!(sent_names(&w), names, "{extra}");
    }
    // Any other post-authentication error ends the connect at once.
    let mut pg = Pg::new();
    pg.post_auth_error = Some(("22023".into(), "invalid value".into()));
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    err(&mut w, "host=127.0.0.1 port=6001 application_name=app");
    assert_eq!(w.opened.len(), 1);
}

/// libpq reads the keepalive timings and `tcp_user_timeout` only with keepalives on: with
/// `keepalives=0` invalid values there are never seen, and no timeout is set (found by the
/// randomized differential against libpq 18 in the blocking adapter's tests).
#[test]
fn keepalives_off_reads_no_timing_and_no_user_timeout() {
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    let tuned = "keepalives_idle=x keepalives_interval=y keepalives_count=z tcp_user_timeout=t";
    connect(&mut w, &format!("{TWO} keepalives=0 {tuned}")).unwrap();
    let tcp: Vec<_> = w
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Open { tcp, .. } => Some(tcp.clone()),
            _ => None,
        })
        .collect();
    let off = TcpOptions {
        keepalives: false,
        ..TcpOptions::default()
    };
    assert_eq!(tcp, vec![Some(off)]);
    // With keepalives on, the same values fail each address, in libpq's order.
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    assert_eq!(
        err(&mut w, &format!("{TWO} keepalives=1 {tuned}")),
        format!("{P1}invalid integer value \"x\" for connection option \"keepalives_idle\"\n{P2}invalid integer value \"x\" for connection option \"keepalives_idle\"\n")
    );
    let mut w = World::new().pg("127.0.0.1:6001", Pg::new());
    let e = err(&mut w, "host=127.0.0.1 port=6001 tcp_user_timeout=t");
    assert!(e.contains("\"tcp_user_timeout\""), "{e}");
}

#[test]
fn composite_error_text_of_spec_8_4() {
    let mut w = World::new().pg(
        "127.0.0.1:6003",
        Pg::error("57P03", "the_database_system_is_starting_up"),
    );
    let e = err(
        &mut w,
        "host=127.0.0.1,127.0.0.1,nonexistent.invalid,/tmp/nosock port=6099,6003,5432,5432",
    );
    assert_eq!(
        e,
        "connection to server at \"127.0.0.1\", port 6099 failed: Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n\
connection to server at \"127.0.0.1\", port 6003 failed: FATAL:  the_database_system_is_starting_up\n\
could not translate host name \"nonexistent.invalid\" to address: Name or service not known\n\
connection to server on socket \"/tmp/nosock/.s.PGSQL.5432\" failed: No such file or directory\n\tIs the server running locally and accepting connections on that socket?\n"
    );
}

#[test]
fn hostaddr_prefix_and_unix_default() {
    let mut w = World::new();
    let e = err(&mut w, "host=db.example hostaddr=127.0.0.9 port=6001");
    assert_eq!(
        e,
        format!("connection to server at \"127.0.0.9\", port 6001 failed: {REFUSED_TCP}")
    );
    let mut w = World::new();
    assert_eq!(
        err(&mut w, "user=u"),
        "connection to server on socket \"/tmp/.s.PGSQL.5432\" failed: No such file or directory\n\tIs the server running locally and accepting connections on that socket?\n"
    );
    let mut w = World::new();
    assert_eq!(
        err(&mut w, "hostaddr=localhost"),
        "could not parse network address \"localhost\": Name or service not known\n"
    );
}

#[test]
fn startup_packet_contents_in_order() {
    let cfg = config(
        "host=127.0.0.1 port=6001 user=alice dbname=db options=-cx=1 application_name=app client_encoding=UTF8 sslmode=disable",
    );
    let mut c = Connector::new(cfg, Instant::ZERO, 1)
        .with_extra_startup_params(vec![(b"datestyle".to_vec(), b"ISO".to_vec())]);
    let Some(Action::Open { attempt, .. }) = c.poll_action() else {
        panic!("expected open")
    };
    c.handle_event(Instant::ZERO, pgyard_connect::Event::Opened { attempt });
    let Some(Action::Send { bytes, .. }) = c.poll_action() else {
        panic!("expected startup")
    };
    let mut expect = vec![0, 3, 0, 0];
    for (k, v) in [
        ("user", "alice"),
        ("database", "db"),
        ("options", "-cx=1"),
        ("application_name", "app"),
        ("client_encoding", "UTF8"),
        ("datestyle", "ISO"),
    ] {
        expect.extend_from_slice(k.as_bytes());
        expect.push(0);
        expect.extend_from_slice(v.as_bytes());
        expect.push(0);
    }
    expect.push(0);
    assert_eq!(&bytes[4..], &expect[..]);
}

#[test]
fn s39_reset_reuses_slot_order_and_starts_over() {
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::new())
        .pg("127.0.0.2:6002", Pg::new())
        .pg("127.0.0.3:6003", Pg::new());
    for seed in 0..20u64 {
        let cfg = config(
            "host=127.0.0.1,127.0.0.2,127.0.0.3 port=6001,6002,6003 load_balance_hosts=random sslmode=disable",
        );
        let mut c = Connector::new(cfg, Instant::ZERO, seed);
        let first = w.run(&mut c).unwrap();
        c.reset(w.now);
        let again = w.run(&mut c).unwrap();
        assert_eq!(first.target, again.target);
        assert_ne!(first.attempt, again.attempt);
        // The reset terminated and closed the first connection.
        assert!(w.closed.contains(&first.attempt));
    }
}

#[test]
fn reset_clears_the_error_buffer() {
    let mut w = World::new();
    let mut c = Connector::new(config("host=127.0.0.1 port=6001"), Instant::ZERO, 0);
    let e1 = w.run(&mut c).unwrap_err().message();
    c.reset(w.now);
    let e2 = w.run(&mut c).unwrap_err().message();
    assert_eq!(e1, e2);
    assert_eq!(e1, format!("{P1}{REFUSED_TCP}"));
}

#[test]
fn random_shuffles_slots_and_addresses_deterministically() {
    let run = |seed: u64| {
        let mut w = World::new().dns(
            "pgmulti",
            &["127.0.0.1:6001", "127.0.0.2:6001", "127.0.0.3:6001"],
        );
        let cfg = config("host=pgmulti,127.0.0.9 port=6001 load_balance_hosts=random");
        let mut c = Connector::new(cfg, Instant::ZERO, seed);
        let _ = w.run(&mut c);
        w.actions
            .iter()
            .filter_map(|a| match a {
                Action::Open { target, .. } => Some(target.clone()),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let mut firsts = std::collections::BTreeSet::new();
    for seed in 0..40 {
        let a = run(seed);
        assert_eq!(a, run(seed));
        assert_eq!(a.len(), 4);
        firsts.insert(a[0].clone());
    }
    // Every address and the second slot appear first for some seed.
    assert_eq!(firsts.len(), 4);
    assert!(firsts.contains(&OpenTarget::Tcp("127.0.0.9:6001".parse().unwrap())));
}
