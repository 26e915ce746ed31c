//! `sslcertmode=require` as libpq 18 applies it: at AuthenticationOk, before `require_auth`'s
//! checks, the login is refused unless the server asked for a client certificate in the TLS
//! handshake and the client had one to send; the refusal ends the whole connect, as every
//! failed authentication check of libpq's does (no further host is tried).

mod common;

use common::*;
use pgyard_connect::{ClientCert, FailureKind};

const P1: &str = "connection to server at \"127.0.0.1\", port 6001 failed: ";
const TWO: &str = "host=127.0.0.1,127.0.0.2 port=6001,6002";

fn world(first: Pg) -> World {
    World::new()
        .pg("127.0.0.1:6001", first)
        .pg("127.0.0.2:6002", Pg::new().ssl(Ssl::Yes))
}

#[test]
fn a_server_that_never_asked_is_refused_and_ends_the_connect() {
    for (first, mode) in [
        (Pg::new(), "prefer"),
        (Pg::new().ssl(Ssl::Yes), "require"),
        (Pg::new().ssl(Ssl::Yes), "prefer"),
    ] {
        let mut w = world(first);
        let e = connect(&mut w, &format!("{TWO} sslmode={mode} sslcertmode=require"))
            .expect_err("refused");
        assert_eq!(
            e.message(),
            format!("{P1}server did not request an SSL certificate\n"),
            "sslmode={mode}"
        );
        assert_eq!(e.kind(), FailureKind::Authentication);
    }
}

#[test]
fn a_server_that_asked_and_got_nothing_is_refused() {
    let mut w = world(Pg::new().ssl(Ssl::Yes).client_cert(ClientCert::NoneSent));
    let e = connect(
        &mut w,
        &format!("{TWO} sslmode=require sslcertmode=require"),
    )
    .expect_err("refused");
    assert_eq!(
        e.message(),
        format!("{P1}server accepted connection without a valid SSL certificate\n")
    );
}

#[test]
fn a_certificate_sent_passes_and_other_modes_never_check() {
    let sent = Pg::new().ssl(Ssl::Yes).client_cert(ClientCert::Sent);
    let mut w = world(sent);
    let est = connect(
        &mut w,
        &format!("{TWO} sslmode=require sslcertmode=require"),
    )
    .expect("a certificate was sent");
    assert_eq!(est.target, tcp("127.0.0.1:6001"));
    for (first, extra) in [
        (Pg::new(), "sslcertmode=allow"),
        (Pg::new(), "sslcertmode=disable"),
        (Pg::new(), ""),
        (
            Pg::new().ssl(Ssl::Yes).client_cert(ClientCert::NoneSent),
            "sslcertmode=allow",
        ),
    ] {
        let mut w = world(first);
        let est = connect(&mut w, &format!("{TWO} sslmode=prefer {extra}")).expect(extra);
        assert_eq!(est.target, tcp("127.0.0.1:6001"), "{extra}");
    }
}

#[test]
fn the_certificate_check_comes_before_require_auth() {
    let mut w = world(Pg::new());
    let e = connect(
        &mut w,
        &format!("{TWO} sslmode=prefer sslcertmode=require require_auth=password"),
    )
    .expect_err("refused");
    assert_eq!(
        e.message(),
        format!("{P1}server did not request an SSL certificate\n")
    );
}

#[test]
fn only_authentication_ok_is_checked() {
    // An md5 request goes on to the password exchange; the check waits for the OK.
    let mut pg = Pg::new().ssl(Ssl::Yes).client_cert(ClientCert::NoneSent);
    pg.auth = Auth::Md5;
    let mut w = world(pg);
    let e = connect(
        &mut w,
        &format!("{TWO} sslmode=require sslcertmode=require password=x"),
    )
    .expect_err("refused");
    assert_eq!(
        e.message(),
        format!("{P1}server accepted connection without a valid SSL certificate\n")
    );
}

#[test]
fn what_a_failed_handshake_saw_holds_for_the_plaintext_retry() {
    // sslmode=prefer: the handshake asks for a certificate, then fails (a chain that does
    // not verify, say); the retry without TLS is refused with what that handshake saw, as
    // libpq never clears its two flags during a connect.
    let asked = Pg::new().client_cert(ClientCert::NoneSent).tls_failure(
        "SSL error: certificate verify failed",
        FailureKind::Authentication,
    );
    let mut w = world(asked);
    let e =
        connect(&mut w, &format!("{TWO} sslmode=prefer sslcertmode=require")).expect_err("refused");
    assert_eq!(
        e.message(),
        format!(
            "{P1}SSL error: certificate verify failed\n\
             {P1}server accepted connection without a valid SSL certificate\n"
        )
    );
}
