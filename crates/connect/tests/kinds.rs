//! Every failure carries what it means (`FailureKind`), so callers decide on retrying without
//! reading libpq's texts; the texts themselves are checked in sequencing.rs and stay as they were.

mod common;

use std::time::Duration;

use common::*;
use pgyard_connect::{ConnectError, FailureKind};
use pgyard_wire::error_fields::SqlState;

const ONE: &str = "host=127.0.0.1 port=6001";
const P1: &str = "connection to server at \"127.0.0.1\", port 6001 failed: ";

fn fails(world: &mut World, options: &str) -> ConnectError {
    connect(world, &format!("{ONE} {options}")).expect_err("the connect should fail")
}

fn one(pg: Pg) -> World {
    World::new().pg("127.0.0.1:6001", pg)
}

fn refused(code: &[u8; 5]) -> FailureKind {
    FailureKind::Refused(SqlState::from_bytes(code).expect("valid SQLSTATE"))
}

/// The connect's kind, its retryability, and the kind of every rendered entry.
fn assert_kinds(e: &ConnectError, last: FailureKind, retryable: bool, each: &[FailureKind]) {
    assert_eq!(e.kind(), last, "{}", e.message());
    assert_eq!(e.kind().is_retryable(), retryable, "{}", e.message());
    let got: Vec<FailureKind> = e.reports.iter().map(|r| r.kind).collect();
    assert_eq!(got, each, "{}", e.message());
}

#[test]
fn connection_refused_is_transient() {
    let e = fails(&mut World::new(), "");
    assert_eq!(e.message(), format!("{P1}{REFUSED_TCP}"));
    assert_kinds(&e, FailureKind::Transient, true, &[FailureKind::Transient]);
}

#[test]
fn connect_timeout_expiry_is_transient() {
    let mut w = World::new().node("127.0.0.1:6001", Node::Blackhole);
    let e = fails(&mut w, "connect_timeout=1");
    assert_eq!(e.message(), format!("{P1}timeout expired\n"));
    assert_kinds(&e, FailureKind::Transient, true, &[FailureKind::Transient]);
}

#[test]
fn a_timeout_during_authentication_is_transient_too() {
    let mut pg = Pg::new();
    pg.hang_after_startup = true;
    let mut w = one(pg);
    w.latency
        .insert("127.0.0.1:6001".into(), Duration::from_millis(300));
    let e = fails(&mut w, "connect_timeout=1 sslmode=disable");
    assert_eq!(e.message(), format!("{P1}timeout expired\n"));
    assert_kinds(&e, FailureKind::Transient, true, &[FailureKind::Transient]);
}

#[test]
fn dns_failure_is_transient() {
    let mut w = World::new();
    let e = connect(&mut w, "host=nosuch.invalid port=6001").expect_err("no address");
    assert_eq!(
        e.message(),
        "could not translate host name \"nosuch.invalid\" to address: Name or service not known\n"
    );
    assert_kinds(&e, FailureKind::Transient, true, &[FailureKind::Transient]);
}

#[test]
fn wrong_password_is_authentication() {
    let mut pg = Pg::new();
    pg.auth = Auth::Cleartext("right".into());
    let e = fails(&mut one(pg), "password=wrong");
    assert_eq!(
        e.message(),
        format!("{P1}FATAL:  password authentication failed for user \"u\"\n")
    );
    let auth = FailureKind::Authentication;
    assert_kinds(&e, auth, false, &[auth]);
}

#[test]
fn hba_rejection_is_authentication_on_every_method() {
    // prefer: TLS is refused by pg_hba.conf, then plaintext is too; both entries say why.
    let hba = "no pg_hba.conf entry for host \"127.0.0.1\", user \"u\", database \"u\"";
    let e = fails(&mut one(Pg::error("28000", hba).ssl(Ssl::Yes)), "");
    assert_eq!(
        e.message(),
        format!("{P1}FATAL:  {hba}\n{P1}FATAL:  {hba}\n")
    );
    let auth = FailureKind::Authentication;
    assert_kinds(&e, auth, false, &[auth, auth]);
}

#[test]
fn missing_password_is_authentication() {
    let mut pg = Pg::new();
    pg.auth = Auth::Md5;
    let e = fails(&mut one(pg), "");
    assert_eq!(
        e.message(),
        format!("{P1}fe_sendauth: no password supplied\n")
    );
    let auth = FailureKind::Authentication;
    assert_kinds(&e, auth, false, &[auth]);
}

#[test]
fn client_side_authentication_refusals_are_authentication() {
    let auth = FailureKind::Authentication;
    let mut pg = Pg::new();
    pg.auth = Auth::Cleartext("secret".into());
    let e = fails(&mut one(pg), "password=secret require_auth=md5");
    assert_eq!(
        e.message(),
        format!("{P1}authentication method requirement \"md5\" failed: server requested a cleartext password\n")
    );
    assert_kinds(&e, auth, false, &[auth]);

    let e = fails(&mut one(Pg::new()), "require_auth=password");
    assert_kinds(&e, auth, false, &[auth]);

    let e = fails(
        &mut one(Pg::new()),
        "channel_binding=require sslmode=disable",
    );
    assert_eq!(
        e.message(),
        format!("{P1}channel binding required, but server authenticated client without channel binding\n")
    );
    assert_kinds(&e, auth, false, &[auth]);
    assert!(e.kind().is_refusal_for_good());
    assert_eq!(
        e.server_error(),
        None,
        "the client gave up, no server said it"
    );
    assert_eq!(e.server_fields(), None);
}

#[test]
fn too_many_clients_is_a_retryable_refusal() {
    let e = fails(
        &mut one(Pg::error("53300", "sorry, too many clients already")),
        "",
    );
    assert_eq!(
        e.message(),
        format!("{P1}FATAL:  sorry, too many clients already\n")
    );
    assert_kinds(&e, refused(b"53300"), true, &[refused(b"53300")]);
    assert!(!e.kind().is_refusal_for_good(), "a pooler waits this out");
    let code = SqlState::from_bytes(b"53300").expect("code");
    let said = "sorry, too many clients already".to_owned();
    assert_eq!(
        e.server_error(),
        Some((code, said)),
        "before authentication too"
    );
}

#[test]
fn starting_up_is_a_retryable_refusal() {
    let e = fails(
        &mut one(Pg::error("57P03", "the database system is starting up")),
        "",
    );
    assert_eq!(
        e.message(),
        format!("{P1}FATAL:  the database system is starting up\n")
    );
    assert_kinds(&e, refused(b"57P03"), true, &[refused(b"57P03")]);
}

#[test]
fn missing_database_after_authentication_is_a_final_refusal() {
    let mut pg = Pg::new();
    pg.post_auth_error = Some(("3D000".into(), "database \"shop\" does not exist".into()));
    let e = fails(&mut one(pg), "dbname=shop");
    assert_eq!(
        e.message(),
        format!("{P1}FATAL:  database \"shop\" does not exist\n")
    );
    assert_kinds(&e, refused(b"3D000"), false, &[refused(b"3D000")]);
    assert!(e.kind().is_refusal_for_good());
    let code = SqlState::INVALID_CATALOG_NAME;
    let said = "database \"shop\" does not exist".to_owned();
    assert_eq!(
        e.server_error(),
        Some((code, said.clone())),
        "the server's own words"
    );
    // The whole response, for a pooler to pass on as the server sent it.
    let fields = e.server_fields().expect("the server's response").fields();
    assert_eq!(fields.sqlstate(), Some(code));
    assert_eq!(fields.message(), Some(said.as_bytes()));
    assert_eq!(fields.severity(), Some(&b"FATAL"[..]));
}

#[test]
fn a_post_authentication_class_28_error_is_authentication() {
    let mut pg = Pg::new();
    pg.post_auth_error = Some((
        "28000".into(),
        "role \"u\" is not permitted to log in".into(),
    ));
    let e = fails(&mut one(pg), "");
    let auth = FailureKind::Authentication;
    assert_kinds(&e, auth, false, &[auth]);
}

#[test]
fn wrong_role_is_transient() {
    let t = FailureKind::Transient;
    let e = fails(&mut one(Pg::standby()), "target_session_attrs=read-write");
    assert_eq!(e.message(), format!("{P1}session is read-only\n"));
    assert_kinds(&e, t, true, &[t]);

    let e = fails(&mut one(Pg::standby()), "target_session_attrs=primary");
    assert_eq!(e.message(), format!("{P1}server is in hot standby mode\n"));
    assert_kinds(&e, t, true, &[t]);

    // A pre-14 server is asked; its answer decides the same way.
    let e = fails(&mut one(Pg::old(true)), "target_session_attrs=read-write");
    assert_eq!(e.message(), format!("{P1}session is read-only\n"));
    assert_kinds(&e, t, true, &[t]);
}

#[test]
fn a_failed_role_check_query_carries_its_sqlstate() {
    let mut pg = Pg::old(false);
    pg.show_ro = None;
    let e = fails(&mut one(pg), "target_session_attrs=read-write");
    assert_eq!(
        e.message(),
        format!("{P1}ERROR:  boom\n\"SHOW transaction_read_only\" failed\n")
    );
    assert_kinds(&e, refused(b"XX000"), false, &[refused(b"XX000")]);
}

#[test]
fn tls_required_but_refused_is_configuration() {
    let e = fails(&mut one(Pg::new()), "sslmode=require");
    assert_eq!(
        e.message(),
        format!("{P1}server does not support SSL, but SSL was required\n")
    );
    let c = FailureKind::Configuration;
    assert_kinds(&e, c, false, &[c]);
}

#[test]
fn alpn_refusals_are_protocol() {
    let p = FailureKind::Protocol;
    let e = fails(
        &mut one(Pg::new().ssl(Ssl::Yes).alpn(None)),
        "sslmode=require sslnegotiation=direct",
    );
    assert_eq!(
        e.message(),
        format!("{P1}direct SSL connection was established without ALPN protocol negotiation extension\n")
    );
    assert_kinds(&e, p, false, &[p]);

    let e = fails(
        &mut one(Pg::new().ssl(Ssl::Yes).alpn(Some(b"http/1.1"))),
        "sslmode=require",
    );
    assert_eq!(
        e.message(),
        format!("{P1}SSL connection was established with unexpected ALPN protocol\n")
    );
    assert_kinds(&e, p, false, &[p]);
}

#[test]
fn garbage_from_the_server_is_protocol() {
    let p = FailureKind::Protocol;
    let garbage = || World::new().node("127.0.0.1:6001", Node::Garbage(b"garbage!".to_vec()));
    let e = fails(&mut garbage(), "sslmode=disable");
    assert_eq!(
        e.message(),
        format!("{P1}expected authentication request from server, but received g\n")
    );
    assert_kinds(&e, p, false, &[p]);

    let e = fails(&mut garbage(), "");
    assert_eq!(
        e.message(),
        format!("{P1}received invalid response to SSL negotiation: g\n")
    );
    assert_kinds(&e, p, false, &[p]);
}

#[test]
fn protocol_negotiation_errors_are_protocol_unless_the_setting_forbids() {
    let mut pg = Pg::new();
    pg.npv = Some((0x0003_0000, vec![]));
    let e = fails(&mut one(pg.clone()), "");
    assert_eq!(
        e.message(),
        format!("{P1}received invalid protocol negotiation message: server negotiated but asks for no changes\n")
    );
    let p = FailureKind::Protocol;
    assert_kinds(&e, p, false, &[p]);

    let e = fails(&mut one(pg), "min_protocol_version=3.2");
    let c = FailureKind::Configuration;
    assert_kinds(&e, c, false, &[c]);
}

#[test]
fn certificate_verification_failures_are_authentication() {
    let auth = FailureKind::Authentication;
    for text in [
        "SSL error: certificate verify failed",
        "server certificate for \"other.example\" does not match host name \"127.0.0.1\"",
        "could not get server's host name from server certificate",
    ] {
        let e = fails(
            &mut one(Pg::new().tls_failure(text, auth)),
            "sslmode=verify-full",
        );
        assert_eq!(e.message(), format!("{P1}{text}\n"));
        assert_kinds(&e, auth, false, &[auth]);
    }
}

#[test]
fn other_tls_failures_are_transient_or_configuration() {
    let t = FailureKind::Transient;
    for text in [
        "SSL SYSCALL error: EOF detected",
        "SSL error: received fatal alert: HandshakeFailure",
    ] {
        let e = fails(&mut one(Pg::new().tls_failure(text, t)), "sslmode=require");
        assert_eq!(e.message(), format!("{P1}{text}\n"));
        assert_kinds(&e, t, true, &[t]);
    }
    let missing = "root certificate file \"/h/.postgresql/root.crt\" does not exist\n\
                   Either provide the file, use the system's trusted roots with sslrootcert=system, \
                   or change sslmode to disable server certificate verification.";
    let c = FailureKind::Configuration;
    let e = fails(
        &mut one(Pg::new().tls_failure(missing, c)),
        "sslmode=verify-ca",
    );
    assert_eq!(e.message(), format!("{P1}{missing}\n"));
    assert_kinds(&e, c, false, &[c]);
}

#[test]
fn a_tls_failure_then_a_plaintext_refusal_ends_as_the_refusal() {
    // prefer: the failed handshake is one entry, the plaintext retry's 53300 is the last.
    let pg = Pg::error("53300", "sorry, too many clients already").tls_failure(
        "SSL error: certificate verify failed",
        FailureKind::Authentication,
    );
    let e = fails(&mut one(pg), "");
    assert_kinds(
        &e,
        refused(b"53300"),
        true,
        &[FailureKind::Authentication, refused(b"53300")],
    );
}

#[test]
fn option_errors_met_at_connect_time_are_configuration() {
    let c = FailureKind::Configuration;
    let t = FailureKind::Transient;
    let mut w = World::new();
    let e = connect(&mut w, "host=127.0.0.1,127.0.0.2 port=99999,6001").expect_err("fails");
    assert_kinds(&e, t, true, &[c, t]);
    assert_eq!(e.reports[0].text, "invalid port number: \"99999\"\n");

    let e = connect(&mut World::new(), "host=127.0.0.1 port=abc").expect_err("fails");
    assert_kinds(&e, c, false, &[c]);

    let e = fails(&mut one(Pg::new()), "keepalives_idle=x");
    assert_kinds(&e, c, false, &[c]);

    let e = fails(&mut one(Pg::new()), "connect_timeout=1.5");
    assert_kinds(&e, c, false, &[c]);
}

#[test]
fn the_last_rendered_entry_decides() {
    let mut pg = Pg::new();
    pg.auth = Auth::Md5;
    let mut w = World::new().pg("127.0.0.2:6002", pg);
    let e = connect(&mut w, "host=127.0.0.1,127.0.0.2 port=6001,6002").expect_err("fails");
    let auth = FailureKind::Authentication;
    assert_kinds(&e, auth, false, &[FailureKind::Transient, auth]);

    // Wrong roles everywhere after a refusal: still worth retrying.
    let mut w = World::new().pg("127.0.0.2:6002", Pg::standby());
    let e = connect(
        &mut w,
        "host=127.0.0.1,127.0.0.2 port=6001,6002 target_session_attrs=primary",
    )
    .expect_err("fails");
    let t = FailureKind::Transient;
    assert_kinds(&e, t, true, &[t, t]);
}
