//! Phase-3 rules, the P3 rows of spec table 19.2, the §7.1 pairing examples and the §16
//! validation order, plus a never-panics property over arbitrary option tables.

use std::cell::RefCell;
use std::time::Duration;

use proptest::prelude::{any, prop_assert, prop_assert_eq, prop_oneof, proptest, ProptestConfig};
use proptest::strategy::Strategy as _;

use super::*;
use crate::{parse, ConnInfo, Keyword, Strategy};

fn table(s: &str) -> ConnInfo {
    // Test inputs are valid connection strings; a parse failure is a broken test.
    parse(s).expect("test connection string parses")
}

fn ctx() -> Context<'static> {
    Context::new().with_os_user("osuser")
}

fn build(s: &str) -> Result<ConnectConfig, ConfigError> {
    ConnectConfig::from_resolved(&table(s), &ctx())
}

fn ok(s: &str) -> ConnectConfig {
    match build(s) {
        Ok(c) => c,
        Err(e) => panic!("{s:?} failed: {e}"),
    }
}

fn err(s: &str) -> String {
    match build(s) {
        Ok(c) => panic!("{s:?} unexpectedly valid: {c:?}"),
        Err(e) => e.to_string(),
    }
}

fn text(b: Option<&[u8]>) -> Option<String> {
    b.map(|b| String::from_utf8_lossy(b).into_owned())
}

/// (kind, host, hostaddr, raw port) of every slot.
/// A slot as (kind, host, hostaddr, raw port), for compact comparisons.
type SlotView = (SlotKind, Option<String>, Option<String>, Option<String>);

fn slots(c: &ConnectConfig) -> Vec<SlotView> {
    c.slots()
        .iter()
        .map(|s| {
            (
                s.kind(),
                text(s.host()),
                text(s.hostaddr()),
                text(s.port_raw()),
            )
        })
        .collect()
}

fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

// ---- spec table 19.2, P3 rows (and the lazily reported P4 ones that are ours) ----

#[test]
fn table_19_2_p3_rows() {
    let rejected: &[(&str, &str)] = &[
        ("sslmode=bogus", r#"invalid sslmode value: "bogus""#),
        ("sslmode=''", r#"invalid sslmode value: """#),
        (
            "channel_binding=maybe",
            r#"invalid channel_binding value: "maybe""#,
        ),
        (
            "sslrootcert=system sslmode=require",
            r#"weak sslmode "require" may not be used with sslrootcert=system (use "verify-full")"#,
        ),
        (
            "sslnegotiation=direct",
            r#"weak sslmode "prefer" may not be used with sslnegotiation=direct (use "require", "verify-ca", or "verify-full")"#,
        ),
        (
            "sslnegotiation=Direct",
            r#"invalid sslnegotiation value: "Direct""#,
        ),
        (
            "ssl_min_protocol_version=TLSv1.4",
            r#"invalid "ssl_min_protocol_version" value: "TLSv1.4""#,
        ),
        (
            "ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=tlsv1.2",
            "invalid SSL protocol version range",
        ),
        (
            "min_protocol_version=3.2 max_protocol_version=3.0",
            r#""min_protocol_version" is greater than "max_protocol_version""#,
        ),
        (
            "target_session_attrs=read_write",
            r#"invalid target_session_attrs value: "read_write""#,
        ),
        (
            "target_session_attrs=ANY",
            r#"invalid target_session_attrs value: "ANY""#,
        ),
        (
            "target_session_attrs=''",
            r#"invalid target_session_attrs value: """#,
        ),
        (
            "load_balance_hosts=Random",
            r#"invalid load_balance_hosts value: "Random""#,
        ),
        (
            "load_balance_hosts=''",
            r#"invalid load_balance_hosts value: """#,
        ),
        (
            "gssencmode=require",
            r#"gssencmode value "require" invalid when GSSAPI support is not compiled in"#,
        ),
        ("scram_client_key=abc", "invalid SCRAM client key"),
    ];
    for (input, expected) in rejected {
        assert_eq!(err(input), *expected, "input {input:?}");
    }

    // `sslrootcert=system` without sslmode: phase 2 turns the compiled default into
    // verify-full, so phase 3 sees that and accepts it.
    let c = ok("sslrootcert=system sslmode=verify-full");
    assert_eq!(c.sslmode(), SslMode::VerifyFull);

    let c = ok("ssl_min_protocol_version=''");
    assert_eq!(c.ssl_min_protocol_version(), None);

    for accepted in [
        "require_auth=''",
        "require_auth=!none",
        "require_auth=password,md5,gss,sspi,scram-sha-256,oauth,none",
    ] {
        ok(accepted);
    }

    // port=0: accepted here, reported when the slot is reached, next slot tried.
    let c = ok("port=0");
    let e = c.slots()[0].port().unwrap_err();
    assert!(!e.aborts());
    assert_eq!(e.to_string(), r#"invalid port number: "0""#);

    // A socket path too long for sun_path.
    let long = format!("/tmp/{}", "x".repeat(120));
    let c = ok(&format!("host={long}"));
    let e = c.slots()[0].unix_socket_path().unwrap().unwrap_err();
    assert!(!e.aborts());
    assert_eq!(
        e.to_string(),
        format!("Unix-domain socket path \"{long}/.s.PGSQL.5432\" is too long (maximum 107 bytes)")
    );

    // hostaddr=localhost is a numeric-parse failure at connect time, not a P3 error.
    let c = ok("hostaddr=localhost");
    assert_eq!(c.slots()[0].kind(), SlotKind::Address);

    // user=u with no host or port: the default socket.
    let c = ok("user=u");
    assert_eq!(c.slots()[0].kind(), SlotKind::DefaultUnixSocket);
    assert_eq!(
        c.slots()[0].unix_socket_path(),
        Some(Ok(b"/tmp/.s.PGSQL.5432".to_vec()))
    );

    // An abstract-namespace socket.
    let c = ok("host=@abstractsock port=6098");
    assert_eq!(c.slots()[0].kind(), SlotKind::UnixSocket);
    assert_eq!(
        c.slots()[0].unix_socket_path(),
        Some(Ok(b"@abstractsock/.s.PGSQL.6098".to_vec()))
    );
}

// ---- §7: host list ----

#[test]
fn pairing_examples_of_7_1() {
    assert_eq!(
        err("host=127.0.0.1 port=6001,6099"),
        "could not match 2 port numbers to 1 hosts"
    );
    assert_eq!(
        err("hostaddr=127.0.0.1,127.0.0.1 host=x"),
        "could not match 1 host names to 2 hostaddr values"
    );
    // The same mismatch from a URI host/port list.
    assert_eq!(
        err("postgresql://a:1,b/?port=1,2,3"),
        "could not match 3 port numbers to 2 hosts"
    );
    assert_eq!(
        err("hostaddr=1.1.1.1 host=a,b"),
        "could not match 2 host names to 1 hostaddr values"
    );
    assert_eq!(
        err("host=a,b,c port=1,2"),
        "could not match 2 port numbers to 3 hosts"
    );
    assert_eq!(
        err("hostaddr=1.1.1.1,2.2.2.2 port=1,2,3"),
        "could not match 3 port numbers to 2 hosts"
    );
}

#[test]
fn counting_is_naive_and_n_comes_from_hostaddr_then_host() {
    // hostaddr decides N; host must match it; a single port goes to every slot.
    let c = ok("hostaddr=1.1.1.1,,2.2.2.2 host=a,b,/sock port=7");
    assert_eq!(
        slots(&c),
        vec![
            (SlotKind::Address, s("a"), s("1.1.1.1"), s("7")),
            (SlotKind::HostName, s("b"), s(""), s("7")),
            (SlotKind::Address, s("/sock"), s("2.2.2.2"), s("7")),
        ]
    );
    // Empty host elements fall back to the default socket directory, which becomes the
    // slot's host.
    let c = ok("host=a,,@x port=1,,3");
    assert_eq!(
        slots(&c),
        vec![
            (SlotKind::HostName, s("a"), None, s("1")),
            (SlotKind::DefaultUnixSocket, s("/tmp"), None, s("")),
            (SlotKind::UnixSocket, s("@x"), None, s("3")),
        ]
    );
    // Only commas: 1 + commas elements, all default.
    let c = ok("host=,");
    assert_eq!(c.slots().len(), 2);
    assert!(c
        .slots()
        .iter()
        .all(|s| s.kind() == SlotKind::DefaultUnixSocket));
    // hostaddr alone: host stays unset.
    let c = ok("hostaddr=::1");
    assert_eq!(slots(&c), vec![(SlotKind::Address, None, s("::1"), None)]);
    // Empty host/hostaddr/port count as absent.
    let c = ok("host='' hostaddr='' port=''");
    assert_eq!(
        slots(&c),
        vec![(SlotKind::DefaultUnixSocket, s("/tmp"), None, None)]
    );
    assert_eq!(c.slots()[0].port(), Ok(DEFAULT_PORT));
    // A relative path is a host name.
    let c = ok("host=relative/dir");
    assert_eq!(c.slots()[0].kind(), SlotKind::HostName);
    assert_eq!(c.slots()[0].unix_socket_path(), None);
}

#[test]
fn default_socket_dir_and_windows_style_default() {
    let ctx = ctx().with_default_socket_dir("/var/run/postgresql");
    let c = ConnectConfig::from_resolved(&table("port=5433"), &ctx).unwrap();
    assert_eq!(
        c.slots()[0].unix_socket_path(),
        Some(Ok(b"/var/run/postgresql/.s.PGSQL.5433".to_vec()))
    );
    let ctx = ctx.with_default_socket_dir("");
    let c = ConnectConfig::from_resolved(&table(""), &ctx).unwrap();
    assert_eq!(
        slots(&c),
        vec![(SlotKind::HostName, s("localhost"), None, None)]
    );
}

#[test]
fn ports_are_parsed_lazily_per_slot() {
    // ports 6001,abc: the bad port only matters when its slot is reached, and aborts.
    let c = ok("host=a,b port=6001,abc");
    assert_eq!(c.slots()[0].port(), Ok(6001));
    let e = c.slots()[1].port().unwrap_err();
    assert!(e.aborts());
    assert_eq!(
        e.to_string(),
        r#"invalid integer value "abc" for connection option "port""#
    );
    // ports 99999,6001: out of range moves on.
    let c = ok("host=a,b port=99999,6001");
    let e = c.slots()[0].port().unwrap_err();
    assert!(!e.aborts());
    assert_eq!(
        e.error(),
        &ConfigError::InvalidPortNumber {
            value: b"99999".to_vec()
        }
    );
    assert_eq!(c.slots()[1].port(), Ok(6001));
    // The integer rule applies; the raw text is kept (the password file matches it raw).
    let c = ok("port=' 6001 '");
    assert_eq!(c.slots()[0].port(), Ok(6001));
    assert_eq!(c.slots()[0].port_raw(), Some(&b" 6001 "[..]));
    for (raw, good) in [
        ("65535", true),
        ("65536", false),
        ("-1", false),
        ("1", true),
    ] {
        let c = ok(&format!("port={raw}"));
        assert_eq!(c.slots()[0].port().is_ok(), good, "{raw}");
    }
    // A port error comes before the socket path is built.
    let c = ok("host=/tmp port=x");
    assert!(c.slots()[0]
        .unix_socket_path()
        .unwrap()
        .unwrap_err()
        .aborts());
}

#[test]
fn socket_path_limit_is_107_bytes() {
    // "/.s.PGSQL.5432" is 14 bytes: a 93-byte dir gives exactly 107.
    let dir93 = format!("/{}", "d".repeat(92));
    let c = ok(&format!("host={dir93}"));
    assert_eq!(
        c.slots()[0].unix_socket_path().unwrap().unwrap().len(),
        SOCKET_PATH_MAX
    );
    let dir94 = format!("/{}", "d".repeat(93));
    let c = ok(&format!("host={dir94}"));
    assert!(c.slots()[0].unix_socket_path().unwrap().is_err());
    // libpq formats into a 1024-byte buffer: the reported path is cut at 1023 bytes.
    let huge = format!("/{}", "h".repeat(2000));
    let c = ok(&format!("host={huge}"));
    match c.slots()[0]
        .unix_socket_path()
        .unwrap()
        .unwrap_err()
        .error()
    {
        ConfigError::SocketPathTooLong { path, max } => {
            assert_eq!(path.len(), 1023);
            assert_eq!(*max, 107);
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn display_host_is_pqhost() {
    let c = ok("hostaddr=10.0.0.1,10.0.0.2 host=,named");
    assert_eq!(c.slots()[0].display_host(), b"10.0.0.1");
    assert_eq!(c.slots()[1].display_host(), b"named");
}

// ---- user, dbname, passwords ----

#[test]
fn user_and_dbname_defaults() {
    let c = ok("");
    assert_eq!(c.user(), b"osuser");
    assert_eq!(c.dbname(), b"osuser");
    let c = ok("user='' dbname=''");
    assert_eq!(c.user(), b"osuser");
    assert_eq!(c.dbname(), b"osuser");
    let c = ok("user=alice");
    assert_eq!(c.dbname(), b"alice");
    let c = ok("user=alice dbname=db");
    assert_eq!((c.user(), c.dbname()), (&b"alice"[..], &b"db"[..]));

    let no_user = Context::new().with_os_user_error("local user with ID 4242 does not exist");
    let e = ConnectConfig::from_resolved(&table("user=''"), &no_user).unwrap_err();
    assert_eq!(e.to_string(), "local user with ID 4242 does not exist");
    // With an explicit user the OS user is not needed.
    assert!(ConnectConfig::from_resolved(&table("user=bob"), &no_user).is_ok());
}

#[test]
fn password_lookup_runs_per_slot_only_without_a_password() {
    let calls: RefCell<Vec<String>> = RefCell::new(Vec::new());
    let lookup = |key: &HostSlotKey<'_>| {
        let line = format!(
            "{:?}|{:?}|{:?}|{}|{}|{}",
            text(key.host),
            text(key.hostaddr),
            text(key.port),
            String::from_utf8_lossy(key.dbname),
            String::from_utf8_lossy(key.user),
            String::from_utf8_lossy(key.lookup_host()),
        );
        calls.borrow_mut().push(line);
        (key.lookup_host() == b"b").then(|| b"pw_b".to_vec())
    };
    let ctx = ctx().with_password_lookup(&lookup);

    let c =
        ConnectConfig::from_resolved(&table("host=a,b,,x hostaddr=,,,9.9.9.9 port=5,6,,8"), &ctx)
            .unwrap();
    assert_eq!(
        *calls.borrow(),
        vec![
            r#"Some("a")|Some("")|Some("5")|osuser|osuser|a"#,
            r#"Some("b")|Some("")|Some("6")|osuser|osuser|b"#,
            r#"Some("/tmp")|Some("")|Some("")|osuser|osuser|/tmp"#,
            r#"Some("x")|Some("9.9.9.9")|Some("8")|osuser|osuser|x"#,
        ]
    );
    assert_eq!(c.slots()[1].password(), Some(&b"pw_b"[..]));
    assert_eq!(c.password_for(1), Some(&b"pw_b"[..]));
    assert_eq!(c.password_for(0), None);
    assert_eq!(c.password_for(9), None);

    // An empty password still consults the file; the slot's password wins.
    calls.borrow_mut().clear();
    let c = ConnectConfig::from_resolved(&table("host=b password=''"), &ctx).unwrap();
    assert_eq!(calls.borrow().len(), 1);
    assert_eq!(c.password_for(0), Some(&b"pw_b"[..]));

    // A hostaddr-only slot is looked up by hostaddr; an unset port is passed as None.
    calls.borrow_mut().clear();
    ConnectConfig::from_resolved(&table("hostaddr=127.0.0.1 dbname=d user=u"), &ctx).unwrap();
    assert_eq!(
        *calls.borrow(),
        vec![r#"None|Some("127.0.0.1")|None|d|u|127.0.0.1"#]
    );

    // An explicit password: no lookup at all.
    calls.borrow_mut().clear();
    let c = ConnectConfig::from_resolved(&table("host=b,c password=secret"), &ctx).unwrap();
    assert!(calls.borrow().is_empty());
    assert_eq!(c.password_for(0), Some(&b"secret"[..]));
    assert_eq!(c.password_for(1), Some(&b"secret"[..]));

    // No lookup happens when host pairing fails (it comes first).
    calls.borrow_mut().clear();
    assert!(ConnectConfig::from_resolved(&table("host=a port=1,2"), &ctx).is_err());
    assert!(calls.borrow().is_empty());
}

#[test]
fn secrets_are_masked_in_debug() {
    let lookup = |_: &HostSlotKey<'_>| Some(b"hunter2".to_vec());
    let ctx = ctx().with_password_lookup(&lookup);
    let key = "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE=";
    let c = ConnectConfig::from_resolved(&table(&format!("host=a scram_client_key={key}")), &ctx)
        .unwrap();
    let dbg = format!("{c:?}");
    assert!(!dbg.contains("hunter2"), "{dbg}");
    assert!(!dbg.contains(key), "{dbg}");
    assert!(!format!("{ctx:?}").contains("hunter2"));
}

// ---- require_auth (§9.5) ----

#[test]
fn require_auth_errors() {
    let cases: &[(&str, &str)] = &[
        (
            "password,!md5",
            r#"negative require_auth method "!md5" cannot be mixed with non-negative methods"#,
        ),
        (
            "!password,md5",
            r#"require_auth method "md5" cannot be mixed with negative methods"#,
        ),
        (
            "md5,md5",
            r#"require_auth method "md5" is specified more than once"#,
        ),
        (
            "none,none",
            r#"require_auth method "none" is specified more than once"#,
        ),
        (
            "!md5,!md5",
            r#"require_auth method "!md5" is specified more than once"#,
        ),
        (
            "!none,!none",
            r#"require_auth method "!none" is specified more than once"#,
        ),
        (
            "scram-sha-256,scram-sha-256",
            r#"require_auth method "scram-sha-256" is specified more than once"#,
        ),
        (
            "!oauth,!oauth",
            r#"require_auth method "!oauth" is specified more than once"#,
        ),
        (
            "gss,gss",
            r#"require_auth method "gss" is specified more than once"#,
        ),
        ("kerberos", r#"invalid require_auth value: "kerberos""#),
        ("!kerberos", r#"invalid require_auth value: "kerberos""#),
        ("MD5", r#"invalid require_auth value: "MD5""#),
        ("md5,", r#"invalid require_auth value: """#),
        (",md5", r#"invalid require_auth value: """#),
        (
            "md5, password",
            r#"invalid require_auth value: " password""#,
        ),
    ];
    for (value, expected) in cases {
        assert_eq!(
            RequireAuth::parse(Some(value.as_bytes()))
                .unwrap_err()
                .to_string(),
            *expected,
            "require_auth={value}"
        );
        assert_eq!(err(&format!("require_auth='{value}'")), *expected);
    }
}

#[test]
fn require_auth_semantics() {
    let parse = |v: &str| RequireAuth::parse(Some(v.as_bytes())).unwrap();

    let unset = RequireAuth::parse(None).unwrap();
    assert!(!unset.is_enforced());
    assert!(!unset.auth_required());
    assert!(AuthMethod::ALL.iter().all(|&m| unset.allows(m)));
    assert!(unset.allows_request(99));

    let plain = parse("password,md5");
    assert!(plain.is_enforced() && plain.auth_required());
    assert!(plain.allows(AuthMethod::Password) && plain.allows(AuthMethod::Md5));
    assert!(!plain.allows(AuthMethod::Gss) && !plain.allows(AuthMethod::ScramSha256));
    assert!(!plain.allows(AuthMethod::None));
    assert!(plain.allows_request(auth_request::PASSWORD));
    assert!(!plain.allows_request(auth_request::SASL));
    assert!(
        !plain.allows_request(4),
        "crypt is never allowed when enforced"
    );

    let scram = parse("scram-sha-256");
    assert!(scram.allows(AuthMethod::ScramSha256) && !scram.allows(AuthMethod::OAuth));
    assert!(scram.allows_request(auth_request::SASL));
    assert!(scram.allows_request(auth_request::SASL_FIN));

    let trust = parse("none");
    assert!(!trust.auth_required() && trust.allows(AuthMethod::None));
    assert!(!trust.allows(AuthMethod::Password));

    let negated = parse("!password");
    assert!(!negated.auth_required());
    assert!(!negated.allows(AuthMethod::Password));
    assert!(negated.allows(AuthMethod::Md5) && negated.allows(AuthMethod::OAuth));
    assert!(negated.allows_request(auth_request::SASL));

    let no_sasl = parse("!scram-sha-256,!oauth");
    assert!(!no_sasl.allows_request(auth_request::SASL));
    assert!(no_sasl.allows(AuthMethod::Md5));
    let one_sasl = parse("!scram-sha-256");
    assert!(one_sasl.allows_request(auth_request::SASL));
    assert!(!one_sasl.allows(AuthMethod::ScramSha256));

    let no_none = parse("!none");
    assert!(no_none.auth_required());
    assert!(no_none.allows(AuthMethod::Password));

    // gss and sspi share the continuation code: both may be listed, and removing gss also
    // takes away what sspi needs to continue.
    let both = parse("gss,sspi");
    assert!(both.allows(AuthMethod::Gss) && both.allows(AuthMethod::Sspi));
    let no_gss = parse("!gss");
    assert!(!no_gss.allows(AuthMethod::Gss));
    assert!(!no_gss.allows_request(auth_request::GSS_CONT));
    assert!(no_gss.allows_request(auth_request::SSPI));

    // Explicitly empty: accepted, checks armed with nothing but "no exchange" allowed.
    let empty = parse("");
    assert!(empty.is_enforced() && !empty.auth_required());
    assert!(empty.allows(AuthMethod::None));
    assert!(!empty.allows_request(auth_request::PASSWORD));

    assert_eq!(ok("require_auth=md5").require_auth(), &parse("md5"));
}

// ---- enums ----

#[test]
fn enum_spellings_round_trip() {
    fn check<T: Copy + PartialEq + std::fmt::Debug + std::fmt::Display>(
        values: &[T],
        as_str: fn(T) -> &'static str,
        parse: fn(&[u8]) -> Result<T, ConfigError>,
        spellings: &[&str],
    ) {
        let got: Vec<&str> = values.iter().map(|&v| as_str(v)).collect();
        assert_eq!(got, spellings);
        for &v in values {
            assert_eq!(parse(as_str(v).as_bytes()), Ok(v));
            assert_eq!(v.to_string(), as_str(v));
            assert!(parse(as_str(v).to_uppercase().as_bytes()).is_err());
        }
    }
    check(
        SslMode::LIBPQ_VALUES,
        SslMode::as_str,
        SslMode::parse,
        &[
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
        ],
    );
    check(
        TargetSessionAttrs::LIBPQ_VALUES,
        TargetSessionAttrs::as_str,
        TargetSessionAttrs::parse,
        &[
            "any",
            "read-write",
            "read-only",
            "primary",
            "standby",
            "prefer-standby",
        ],
    );
    check(
        LoadBalanceHosts::LIBPQ_VALUES,
        LoadBalanceHosts::as_str,
        LoadBalanceHosts::parse,
        &["disable", "random"],
    );
    check(
        SslNegotiation::LIBPQ_VALUES,
        SslNegotiation::as_str,
        SslNegotiation::parse,
        &["postgres", "direct"],
    );
    check(
        GssEncMode::LIBPQ_VALUES,
        GssEncMode::as_str,
        GssEncMode::parse,
        &["disable", "prefer", "require"],
    );
    check(
        ChannelBinding::LIBPQ_VALUES,
        ChannelBinding::as_str,
        ChannelBinding::parse,
        &["disable", "prefer", "require"],
    );
    check(
        SslCertMode::LIBPQ_VALUES,
        SslCertMode::as_str,
        SslCertMode::parse,
        &["disable", "allow", "require"],
    );
}

#[test]
fn unset_enums_take_libpq_phase_3_defaults() {
    let c = ok("");
    assert_eq!(c.sslmode(), SslMode::Prefer);
    assert_eq!(c.channel_binding(), ChannelBinding::Prefer);
    assert_eq!(c.sslnegotiation(), SslNegotiation::Postgres);
    assert_eq!(c.sslcertmode(), SslCertMode::Allow);
    assert_eq!(c.gssencmode(), GssEncMode::Disable);
    assert_eq!(c.target_session_attrs(), TargetSessionAttrs::Any);
    assert_eq!(c.load_balance_hosts(), LoadBalanceHosts::Disable);
    assert_eq!(c.min_protocol_version(), ProtocolVersion::V3_0);
    assert_eq!(c.max_protocol_version(), ProtocolVersion::V3_0);
    assert_eq!(c.ssl_min_protocol_version(), None);
    assert_eq!(c.ssl_max_protocol_version(), None);
    assert!(!c.require_auth().is_enforced());
    assert_eq!(c.scram_client_key(), None);
    assert_eq!(c.client_encoding(), None);
    assert_eq!(c.options(), b"");
    // An unset sslmode is prefer in phase 3, so sslrootcert=system alone is weak here (phase
    // 2 would have made it verify-full).
    assert_eq!(
        err("sslrootcert=system"),
        r#"weak sslmode "prefer" may not be used with sslrootcert=system (use "verify-full")"#
    );
}

#[test]
fn every_valid_enum_value_is_accepted_and_typed() {
    let c = ok(
        "sslmode=verify-ca channel_binding=require sslnegotiation=direct \
                sslcertmode=require gssencmode=prefer target_session_attrs=prefer-standby \
                load_balance_hosts=random",
    );
    assert_eq!(c.sslmode(), SslMode::VerifyCa);
    assert_eq!(c.channel_binding(), ChannelBinding::Require);
    assert_eq!(c.sslnegotiation(), SslNegotiation::Direct);
    assert_eq!(c.sslcertmode(), SslCertMode::Require);
    assert_eq!(c.gssencmode(), GssEncMode::Prefer);
    assert_eq!(c.target_session_attrs(), TargetSessionAttrs::PreferStandby);
    assert_eq!(c.load_balance_hosts(), LoadBalanceHosts::Random);
}

#[test]
fn direct_negotiation_needs_a_tls_only_sslmode() {
    for mode in SslMode::LIBPQ_VALUES {
        let r = build(&format!("sslnegotiation=direct sslmode={mode}"));
        if mode.allows_plaintext() {
            assert_eq!(
                r.unwrap_err(),
                ConfigError::WeakSslModeForDirect { sslmode: *mode }
            );
        } else {
            assert!(r.is_ok(), "{mode}");
        }
    }
    assert_eq!(
        err("sslnegotiation=direct sslmode=disable"),
        r#"weak sslmode "disable" may not be used with sslnegotiation=direct (use "require", "verify-ca", or "verify-full")"#
    );
}

#[test]
fn sslrootcert_system_needs_verify_full() {
    for mode in SslMode::LIBPQ_VALUES {
        let r = build(&format!("sslrootcert=system sslmode={mode}"));
        assert_eq!(r.is_ok(), *mode == SslMode::VerifyFull, "{mode}");
    }
    // Only the exact word counts.
    ok("sslrootcert=System sslmode=require");
}

#[test]
fn prefer_primary_is_pgyard_only() {
    assert_eq!(
        err("target_session_attrs=prefer-primary"),
        r#"invalid target_session_attrs value: "prefer-primary""#
    );
    assert_eq!(TargetSessionAttrs::PreferPrimary.as_str(), "prefer-primary");
    assert!(!TargetSessionAttrs::LIBPQ_VALUES.contains(&TargetSessionAttrs::PreferPrimary));
    let mut c = ok("target_session_attrs=standby");
    c.set_target_session_attrs(TargetSessionAttrs::PreferPrimary);
    assert_eq!(c.target_session_attrs(), TargetSessionAttrs::PreferPrimary);
    let c = ok("").with_target_session_attrs(TargetSessionAttrs::ReadOnly);
    assert_eq!(c.target_session_attrs(), TargetSessionAttrs::ReadOnly);
}

// ---- protocol versions (§13) ----

#[test]
fn protocol_versions() {
    let c = ok("min_protocol_version=3.2");
    assert_eq!(c.min_protocol_version(), ProtocolVersion::V3_2);
    assert_eq!(c.max_protocol_version(), ProtocolVersion::LATEST);
    let c = ok("max_protocol_version=latest");
    assert_eq!(c.min_protocol_version(), ProtocolVersion::V3_0);
    assert_eq!(c.max_protocol_version(), ProtocolVersion::V3_2);
    let c = ok("min_protocol_version=latest max_protocol_version=3.2");
    assert_eq!(c.min_protocol_version(), ProtocolVersion::V3_2);
    let c = ok("min_protocol_version=3.0 max_protocol_version=3.0");
    assert_eq!(c.max_protocol_version().code(), 0x0003_0000);
    assert_eq!(ProtocolVersion::V3_2.code(), 0x0003_0002);
    assert_eq!(ProtocolVersion::V3_2.to_string(), "3.2");

    assert_eq!(
        err("max_protocol_version=3.1"),
        r#"invalid max_protocol_version value: "3.1""#
    );
    assert_eq!(
        err("min_protocol_version=''"),
        r#"invalid min_protocol_version value: """#
    );
    assert_eq!(
        err("min_protocol_version=Latest"),
        r#"invalid min_protocol_version value: "Latest""#
    );
    assert_eq!(
        err("min_protocol_version=latest max_protocol_version=3.0"),
        r#""min_protocol_version" is greater than "max_protocol_version""#
    );
}

// ---- TLS versions (§16 step 9) ----

#[test]
fn tls_versions() {
    let c = ok("ssl_min_protocol_version=tlsv1.1 ssl_max_protocol_version=TLSV1.3");
    assert_eq!(c.ssl_min_protocol_version(), Some(TlsVersion::Tls1_1));
    assert_eq!(c.ssl_max_protocol_version(), Some(TlsVersion::Tls1_3));
    ok("ssl_min_protocol_version=TLSv1 ssl_max_protocol_version=TLSv1");
    ok("ssl_min_protocol_version=TLSv1 ssl_max_protocol_version=TLSv1.2");
    ok("ssl_min_protocol_version=TLSv1.2 ssl_max_protocol_version=TLSv1.2");
    ok("ssl_min_protocol_version=TLSv1.3 ssl_max_protocol_version=''");
    assert_eq!(
        err("ssl_min_protocol_version=TLSv1.1 ssl_max_protocol_version=TLSv1"),
        "invalid SSL protocol version range"
    );
    assert_eq!(
        err("ssl_max_protocol_version=SSLv3"),
        r#"invalid "ssl_max_protocol_version" value: "SSLv3""#
    );
    assert_eq!(
        err("ssl_min_protocol_version=' TLSv1.2'"),
        r#"invalid "ssl_min_protocol_version" value: " TLSv1.2""#
    );
}

// ---- SCRAM keys (§16 step 13) ----

#[test]
fn scram_keys() {
    let key32 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    let c = ok(&format!(
        "scram_client_key={key32} scram_server_key={key32}"
    ));
    let expected: Vec<u8> = (0u8..32).collect();
    assert_eq!(&c.scram_client_key().unwrap().as_bytes()[..], &expected[..]);
    assert_eq!(&c.scram_server_key().unwrap().as_bytes()[..], &expected[..]);

    let key16 = "AAECAwQFBgcICQoLDA0ODw==";
    assert_eq!(
        err(&format!("scram_client_key={key16}")),
        "invalid SCRAM client key length: 16"
    );
    assert_eq!(
        err("scram_client_key=''"),
        "invalid SCRAM client key length: 0"
    );
    assert_eq!(err("scram_server_key=abc"), "invalid SCRAM server key");
    assert_eq!(
        err("scram_server_key=AAAA"),
        "invalid SCRAM server key length: 3"
    );
    assert_eq!(
        err(&format!("scram_client_key='{key32} '")),
        "invalid SCRAM client key"
    );
}

// ---- client_encoding, flags, raw values ----

#[test]
fn client_encoding_auto_and_flags() {
    assert_eq!(
        ok("client_encoding=auto").client_encoding(),
        Some(&b"SQL_ASCII"[..])
    );
    let utf8 = ctx().with_locale_encoding("UTF8");
    let c = ConnectConfig::from_resolved(&table("client_encoding=auto"), &utf8).unwrap();
    assert_eq!(c.client_encoding(), Some(&b"UTF8"[..]));
    assert_eq!(
        ok("client_encoding=AUTO").client_encoding(),
        Some(&b"AUTO"[..])
    );
    assert_eq!(
        ok("client_encoding=LATIN1").client_encoding(),
        Some(&b"LATIN1"[..])
    );

    assert!(ok("sslsni=1").sslsni());
    assert!(ok("sslsni=1yes").sslsni());
    assert!(!ok("sslsni=0").sslsni());
    assert!(!ok("").sslsni());
    assert!(ok("sslcompression=1").sslcompression());
    assert!(!ok("sslcompression=yes").sslcompression());
    assert!(ok("gssdelegation=1").gssdelegation());

    let c = ok(
        "application_name='' fallback_application_name=fb options='-c x=1' \
                replication=database requirepeer=postgres passfile=/p service=s",
    );
    assert_eq!(c.application_name(), Some(&b""[..]));
    assert_eq!(c.startup_application_name(), Some(&b"fb"[..]));
    assert_eq!(c.options(), b"-c x=1");
    assert_eq!(c.replication(), Some(&b"database"[..]));
    assert_eq!(c.requirepeer(), Some(&b"postgres"[..]));
    assert_eq!(c.passfile(), Some(&b"/p"[..]));
    assert_eq!(c.raw(Keyword::Service), Some(&b"s"[..]));
    assert_eq!(c.conninfo().get(Keyword::Service), Some(&b"s"[..]));
    let c = ok("application_name=app fallback_application_name=fb");
    assert_eq!(c.startup_application_name(), Some(&b"app"[..]));
    assert_eq!(ok("").startup_application_name(), None);
}

// ---- §12: integers, timeouts, keepalives ----

#[test]
fn integer_rule_of_12_1() {
    let good: &[(&str, i32)] = &[
        (" 2 ", 2),
        ("-3", -3),
        ("+5", 5),
        ("\t\n\x0b\x0c\r7\r\n", 7),
        ("007", 7),
        ("2147483647", i32::MAX),
        ("-2147483648", i32::MIN),
        ("-0", 0),
    ];
    for (v, n) in good {
        assert_eq!(parse_int_param("x", v.as_bytes()), Ok(*n), "{v:?}");
    }
    let bad = [
        "1.5",
        "",
        "yes",
        "99999999999",
        "2147483648",
        "-2147483649",
        "99999999999999999999999999",
        " ",
        "-",
        "+",
        "- 5",
        "0x10",
        "1 2",
        "5\0",
        "\u{a0}5",
    ];
    for v in bad {
        assert!(parse_int_param("x", v.as_bytes()).is_err(), "{v:?}");
    }
    assert_eq!(
        parse_int_param("keepalives_idle", b"x")
            .unwrap_err()
            .to_string(),
        r#"invalid integer value "x" for connection option "keepalives_idle""#
    );
}

#[test]
fn connect_timeout_values() {
    assert_eq!(ok("").connect_timeout(), Ok(None));
    assert_eq!(ok("connect_timeout=0").connect_timeout(), Ok(None));
    assert_eq!(ok("connect_timeout=-5").connect_timeout(), Ok(None));
    assert_eq!(
        ok("connect_timeout=1").connect_timeout(),
        Ok(Some(Duration::from_secs(1)))
    );
    assert_eq!(
        ok("connect_timeout=' 10 '").connect_timeout(),
        Ok(Some(Duration::from_secs(10)))
    );
    // An empty value (e.g. PGCONNECT_TIMEOUT=) is an error when the blocking path parses it.
    assert_eq!(
        ok("connect_timeout=''")
            .connect_timeout()
            .unwrap_err()
            .to_string(),
        r#"invalid integer value "" for connection option "connect_timeout""#
    );
}

#[test]
fn keepalive_and_tcp_values() {
    let c = ok("");
    assert_eq!(c.keepalives(), Ok(true));
    assert_eq!(c.keepalives_idle(), Ok(None));
    assert_eq!(c.keepalives_interval(), Ok(None));
    assert_eq!(c.keepalives_count(), Ok(None));
    assert_eq!(c.tcp_user_timeout(), Ok(None));

    assert_eq!(ok("keepalives=0").keepalives(), Ok(false));
    assert_eq!(ok("keepalives=-7").keepalives(), Ok(true));
    assert_eq!(
        ok("keepalives=yes").keepalives().unwrap_err().to_string(),
        r#"invalid integer value "yes" for connection option "keepalives""#
    );
    let c = ok("keepalives_idle=-3 keepalives_interval=5 keepalives_count=9 tcp_user_timeout=1500");
    assert_eq!(c.keepalives_idle(), Ok(Some(Duration::ZERO)));
    assert_eq!(c.keepalives_interval(), Ok(Some(Duration::from_secs(5))));
    assert_eq!(c.keepalives_count(), Ok(Some(9)));
    assert_eq!(c.tcp_user_timeout(), Ok(Some(Duration::from_millis(1500))));
    assert_eq!(
        ok("tcp_user_timeout=-1").tcp_user_timeout(),
        Ok(Some(Duration::ZERO))
    );
    // Unparsable values do not stop phase 3 (libpq parses them per TCP attempt).
    let c = ok("keepalives_idle=x keepalives_interval=1.5 keepalives_count=y tcp_user_timeout=z");
    assert_eq!(
        c.keepalives_idle().unwrap_err().to_string(),
        r#"invalid integer value "x" for connection option "keepalives_idle""#
    );
    assert_eq!(
        c.keepalives_interval().unwrap_err().to_string(),
        r#"invalid integer value "1.5" for connection option "keepalives_interval""#
    );
    assert_eq!(
        c.keepalives_count().unwrap_err().to_string(),
        r#"invalid integer value "y" for connection option "keepalives_count""#
    );
    assert_eq!(
        c.tcp_user_timeout().unwrap_err().to_string(),
        r#"invalid integer value "z" for connection option "tcp_user_timeout""#
    );
}

// ---- §16: validation order ----

const KEY32_CLIENT: &str = "scram_client_key=AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
const KEY32_SERVER: &str = "scram_server_key=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

/// Every step of §16 made to fail at once; fixing them one by one must walk through the
/// messages in libpq's order.
#[test]
fn validation_order_of_16() {
    let steps: &[(&str, &str, &str)] = &[
        // (invalid fragment, its fix, the message while it is the first failure)
        (
            "host=a,b hostaddr=1.1.1.1",
            "host=a hostaddr=1.1.1.1",
            "could not match 2 host names to 1 hostaddr values",
        ),
        (
            "port=1,2",
            "port=1",
            "could not match 2 port numbers to 1 hosts",
        ),
        ("user=''", "user=u", "no os user"),
        (
            "require_auth=md5,md5",
            "require_auth=md5",
            r#"require_auth method "md5" is specified more than once"#,
        ),
        (
            "channel_binding=x",
            "channel_binding=require",
            r#"invalid channel_binding value: "x""#,
        ),
        (
            "sslmode=x",
            "sslmode=prefer",
            r#"invalid sslmode value: "x""#,
        ),
        (
            "sslnegotiation=x",
            "sslnegotiation=direct",
            r#"invalid sslnegotiation value: "x""#,
        ),
        (
            "",
            "",
            r#"weak sslmode "prefer" may not be used with sslnegotiation=direct (use "require", "verify-ca", or "verify-full")"#,
        ),
    ];
    let no_user = Context::new().with_os_user_error("no os user");
    let mut invalid: Vec<&str> = steps.iter().map(|s| s.0).collect();
    // Steps after the direct/weak check need the sslmode fixed to verify-full instead.
    let tail = "sslrootcert=system ssl_min_protocol_version=x ssl_max_protocol_version=y \
                sslcertmode=x gssencmode=x target_session_attrs=x scram_client_key=! \
                scram_server_key=! load_balance_hosts=x min_protocol_version=x \
                max_protocol_version=y";
    for (i, step) in steps.iter().enumerate() {
        let input = format!("{} {tail}", invalid.join(" "));
        let e = ConnectConfig::from_resolved(&table(&input), &no_user).unwrap_err();
        assert_eq!(e.to_string(), step.2, "step {i}: {input}");
        invalid[i] = step.1;
    }

    // Continue from a config whose earlier steps are all valid, with sslmode=require.
    let tail_steps: &[(&str, &str, &str)] = &[
        (
            "sslrootcert=system",
            "sslrootcert=/ca.pem",
            r#"weak sslmode "require" may not be used with sslrootcert=system (use "verify-full")"#,
        ),
        (
            "ssl_min_protocol_version=x",
            "ssl_min_protocol_version=TLSv1.3",
            r#"invalid "ssl_min_protocol_version" value: "x""#,
        ),
        (
            "ssl_max_protocol_version=y",
            "ssl_max_protocol_version=TLSv1.2",
            r#"invalid "ssl_max_protocol_version" value: "y""#,
        ),
        (
            "",
            "ssl_max_protocol_version=TLSv1.3",
            "invalid SSL protocol version range",
        ),
        (
            "sslcertmode=x",
            "sslcertmode=allow",
            r#"invalid sslcertmode value: "x""#,
        ),
        (
            "gssencmode=x",
            "gssencmode=require",
            r#"invalid gssencmode value: "x""#,
        ),
        (
            "",
            "gssencmode=prefer",
            r#"gssencmode value "require" invalid when GSSAPI support is not compiled in"#,
        ),
        (
            "target_session_attrs=x",
            "target_session_attrs=any",
            r#"invalid target_session_attrs value: "x""#,
        ),
        (
            "scram_client_key=!",
            "scram_client_key=AAAA",
            "invalid SCRAM client key",
        ),
        ("", KEY32_CLIENT, "invalid SCRAM client key length: 3"),
        (
            "scram_server_key=!",
            KEY32_SERVER,
            "invalid SCRAM server key",
        ),
        (
            "load_balance_hosts=x",
            "load_balance_hosts=random",
            r#"invalid load_balance_hosts value: "x""#,
        ),
        (
            "min_protocol_version=x",
            "min_protocol_version=3.2",
            r#"invalid min_protocol_version value: "x""#,
        ),
        (
            "max_protocol_version=y",
            "max_protocol_version=3.0",
            r#"invalid max_protocol_version value: "y""#,
        ),
        (
            "",
            "",
            r#""min_protocol_version" is greater than "max_protocol_version""#,
        ),
    ];
    let head = "host=a hostaddr=1.1.1.1 port=1 user=u require_auth=md5 channel_binding=require \
                sslmode=require sslnegotiation=direct";
    // Fragments that fix a step may be replaced later by a different fix of the same keyword
    // (later occurrences win), so build the string from the current list each time.
    let mut current: Vec<String> = tail_steps.iter().map(|s| s.0.to_owned()).collect();
    for (i, step) in tail_steps.iter().enumerate() {
        let input = format!("{head} {}", current.join(" "));
        let e = ConnectConfig::from_resolved(&table(&input), &ctx()).unwrap_err();
        assert_eq!(e.to_string(), step.2, "tail step {i}: {input}");
        if !step.1.is_empty() {
            current.push(step.1.to_owned());
        }
    }
    // Finally, all valid.
    current.push("max_protocol_version=latest".to_owned());
    let input = format!("{head} {}", current.join(" "));
    assert!(build(&input).is_ok(), "{input}");
}

#[test]
fn validation_order_pairs() {
    // Two invalid values: the earlier step in §16 is reported, whatever the input order.
    let pairs: &[(&str, &str, &str)] = &[
        ("sslmode=x", "channel_binding=y", "channel_binding"),
        ("sslnegotiation=x", "sslmode=y", "sslmode"),
        ("require_auth=x", "channel_binding=y", "require_auth"),
        ("gssencmode=x", "sslcertmode=y", "sslcertmode"),
        ("target_session_attrs=x", "gssencmode=y", "gssencmode"),
        (
            "load_balance_hosts=x",
            "target_session_attrs=y",
            "target_session_attrs",
        ),
        (
            "min_protocol_version=x",
            "load_balance_hosts=y",
            "load_balance_hosts",
        ),
        (
            "max_protocol_version=x",
            "min_protocol_version=y",
            "min_protocol_version",
        ),
        ("scram_server_key=x", "scram_client_key=y", "client"),
        (
            "sslcertmode=x",
            "ssl_max_protocol_version=y",
            "ssl_max_protocol_version",
        ),
        ("require_auth=x", "port=1,2", "port numbers"),
    ];
    for (later, earlier, needle) in pairs {
        for input in [format!("{later} {earlier}"), format!("{earlier} {later}")] {
            let e = err(&input);
            assert!(e.contains(needle), "{input}: {e}");
        }
    }
}

// ---- load balancing, pgyard extensions, messages ----

#[test]
fn shuffle_slots_is_inside_out_fisher_yates() {
    let names = |c: &ConnectConfig| -> Vec<String> {
        c.slots()
            .iter()
            .map(|s| String::from_utf8_lossy(s.host().unwrap()).into_owned())
            .collect()
    };
    let mut c = ok("host=a,b,c,d load_balance_hosts=random");
    let mut asked = Vec::new();
    // j = 0 for every i: a,b,c,d → b,a,c,d → c,a,b,d → d,a,b,c.
    c.shuffle_slots(|i| {
        asked.push(i);
        0
    });
    assert_eq!(asked, vec![1, 2, 3]);
    assert_eq!(names(&c), ["d", "a", "b", "c"]);
    // j = i keeps the order; out-of-range picks are clamped.
    let mut c = ok("host=a,b,c load_balance_hosts=random");
    c.shuffle_slots(|i| i + 10);
    assert_eq!(names(&c), ["a", "b", "c"]);
    // Disabled: untouched, the picker is never consulted.
    let mut c = ok("host=a,b,c");
    c.shuffle_slots(|_| panic!("not called when load balancing is off"));
    assert_eq!(names(&c), ["a", "b", "c"]);
}

#[test]
fn pgyard_extensions_default_to_libpq_behaviour() {
    let c = ok("");
    assert_eq!(c.strategy(), Strategy::Sequential);
    assert_eq!(c.race_stagger(), Duration::from_millis(250));
    assert_eq!(c.failover_timeout(), None);
    assert!(!c.keep_trying_addresses_after_mismatch());

    let c = c
        .with_strategy(Strategy::Race)
        .with_race_stagger(Duration::from_millis(50))
        .with_failover_timeout(Some(Duration::from_secs(30)))
        .with_keep_trying_addresses_after_mismatch(true);
    assert_eq!(c.strategy(), Strategy::Race);
    assert_eq!(c.race_stagger(), Duration::from_millis(50));
    assert_eq!(c.failover_timeout(), Some(Duration::from_secs(30)));
    assert!(c.keep_trying_addresses_after_mismatch());

    let mut d = c.clone();
    d.set_strategy(Strategy::Sequential);
    d.set_race_stagger(DEFAULT_RACE_STAGGER);
    d.set_failover_timeout(None);
    d.set_keep_trying_addresses_after_mismatch(false);
    assert_eq!(d, ok(""));
    assert_ne!(c, d);
}

#[test]
fn libpq_message_keeps_raw_bytes_and_adds_newline() {
    let mut info = ConnInfo::new();
    info.set(Keyword::Sslmode, b"\xffbad");
    let e = ConnectConfig::from_resolved(&info, &ctx()).unwrap_err();
    assert_eq!(e.libpq_message(), b"invalid sslmode value: \"\xffbad\"\n");
    assert_eq!(e.to_string(), "invalid sslmode value: \"\u{fffd}bad\"");

    let samples = [
        ConfigError::InvalidTlsVersion {
            keyword: Keyword::SslMinProtocolVersion,
            value: b"v".to_vec(),
        },
        ConfigError::RequireAuthNegativeMixed {
            method: b"!md5".to_vec(),
        },
        ConfigError::RequireAuthPositiveMixed {
            method: b"md5".to_vec(),
        },
        ConfigError::RequireAuthDuplicate {
            method: b"md5".to_vec(),
        },
        ConfigError::GssNotCompiledIn {
            value: b"require".to_vec(),
        },
        ConfigError::InvalidInteger {
            name: "port".into(),
            value: b"x".to_vec(),
        },
        ConfigError::InvalidPortNumber {
            value: b"0".to_vec(),
        },
        ConfigError::SocketPathTooLong {
            path: b"/p".to_vec(),
            max: 107,
        },
        ConfigError::ProtocolVersionRange,
        ConfigError::HostCountMismatch {
            hosts: 1,
            hostaddrs: 2,
        },
        ConfigError::InvalidScramKeyLength {
            which: ScramKeyKind::Server,
            length: 7,
        },
    ];
    for e in samples {
        // For UTF-8 values the raw bytes and the Display text agree.
        assert_eq!(e.libpq_message(), format!("{e}\n").into_bytes(), "{e:?}");
    }
}

// ---- property: never panics ----

fn value_strategy() -> impl proptest::strategy::Strategy<Value = Option<Vec<u8>>> {
    let interesting: Vec<&'static [u8]> = vec![
        b"",
        b",",
        b",,",
        b"a,b",
        b"/tmp",
        b"@s",
        b"1.2.3.4,5.6.7.8",
        b"5432",
        b"0",
        b"-1",
        b"99999",
        b"abc",
        b" 7 ",
        b"disable",
        b"allow",
        b"prefer",
        b"require",
        b"verify-ca",
        b"verify-full",
        b"direct",
        b"postgres",
        b"system",
        b"TLSv1",
        b"tlsv1.3",
        b"3.0",
        b"3.2",
        b"latest",
        b"random",
        b"any",
        b"standby",
        b"!none",
        b"md5,!md5",
        b"none,none",
        b"auto",
        b"AAAA",
        b"TQ==TQ==",
        b"2147483648",
    ];
    proptest::option::of(prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..24),
        proptest::sample::select(interesting).prop_map(<[u8]>::to_vec),
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn building_never_panics(values in proptest::collection::vec(value_strategy(), crate::keywords::COUNT),
                             with_user in any::<bool>(),
                             socket_dir in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut info = ConnInfo::new();
        for (kw, v) in crate::keywords::ALL.iter().zip(values) {
            if let Some(v) = v {
                info.set(*kw, v);
            }
        }
        let lookup = |k: &HostSlotKey<'_>| Some(k.lookup_host().to_vec());
        let mut ctx = Context::new().with_default_socket_dir(socket_dir).with_password_lookup(&lookup);
        if with_user {
            ctx = ctx.with_os_user("u");
        }
        match ConnectConfig::from_resolved(&info, &ctx) {
            Ok(c) => {
                prop_assert!(!c.slots().is_empty());
                prop_assert!(!c.user().is_empty() && !c.dbname().is_empty());
                for (i, slot) in c.slots().iter().enumerate() {
                    let _ = slot.port();
                    if let Some(Err(e)) = slot.unix_socket_path() {
                        let _ = e.to_string();
                    }
                    let _ = c.password_for(i);
                    let _ = slot.display_host();
                    let _ = format!("{slot:?}");
                }
                let _ = (c.connect_timeout(), c.keepalives(), c.keepalives_idle());
                let _ = (c.keepalives_interval(), c.keepalives_count(), c.tcp_user_timeout());
                let mut c = c;
                c.shuffle_slots(|i| i / 2);
                prop_assert!(c.min_protocol_version() <= c.max_protocol_version());
            }
            Err(e) => {
                let msg = e.libpq_message();
                prop_assert_eq!(msg.last(), Some(&b'\n'));
                prop_assert!(!e.to_string().ends_with('\n'));
            }
        }
    }
}
