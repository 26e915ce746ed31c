//! TLS to clients, the client-session machine's half: the answer to SSLRequest, the request
//! for a handshake, bytes stuffed in before it, direct TLS, the required mode, SCRAM
//! channel binding over the certificate's hash, and client certificates (the texts are a
//! real PostgreSQL 18's for the same `hostssl` rules).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_proxy::admin::AdminRequest;
use pgyard_proxy::{
    AuthFile, CancelKey, ClientAuth, ClientCert, ClientConfig, ClientId, ClientOut, ClientSession,
    ClientTls, PoolMode, TlsMode,
};
use pgyard_types::Instant;
use pgyard_wire::auth::{
    AuthClient, AuthConfig, AuthRequest, AuthResponse, AuthStep, ChannelBinding, LoginRandom,
};
use pgyard_wire::frame::{frames, ProtocolVersion};
use pgyard_wire::frontend;

const T0: Instant = Instant(0);

/// The certificate hash both sides agree on (the machine never sees the certificate).
const END_POINT: [u8; 32] = [0x42; 32];

fn session(mode: TlsMode, auth: ClientAuth) -> ClientSession {
    let config = ClientConfig {
        login_timeout: Duration::from_secs(5),
        databases: pgyard_proxy::Databases::Any,
        ..ClientConfig::new(auth, PoolMode::Transaction)
    };
    let key = CancelKey {
        pid: 77,
        secret: vec![9; 32],
    };
    let random = LoginRandom {
        salt: [1; 4],
        nonce: [2; 18],
        mock_salt: [3; 16],
    };
    let tls = ClientTls {
        mode,
        end_point: Some(Arc::from(&END_POINT[..])),
    };
    ClientSession::new(T0, ClientId(1), config, key, random).with_tls(tls)
}

fn trusting(mode: TlsMode) -> ClientSession {
    session(mode, ClientAuth::Trust)
}

fn ssl_request() -> Vec<u8> {
    let mut b = BytesMut::new();
    frontend::encode_ssl_request(&mut b);
    b.to_vec()
}

fn gss_request() -> Vec<u8> {
    // GSSENCRequest: length 8, code 1234.5680.
    [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30].to_vec()
}

fn startup() -> Vec<u8> {
    let params: [(&[u8], &[u8]); 2] = [(b"user", b"alice"), (b"database", b"app")];
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    b.to_vec()
}

/// The start of a TLS ClientHello record, as a direct-TLS client sends it first.
const CLIENT_HELLO: &[u8] = &[0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00];

fn outputs(s: &mut ClientSession) -> Vec<ClientOut> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

/// The text of the one ErrorResponse in `out`, which must end with Close.
fn fatal(out: &[ClientOut]) -> String {
    assert!(matches!(out.last(), Some(ClientOut::Close)), "{out:?}");
    let errors: Vec<String> = out
        .iter()
        .filter_map(|o| match o {
            ClientOut::ToClient(b) if b.first() == Some(&b'E') => {
                Some(String::from_utf8_lossy(b).into_owned())
            }
            _ => None,
        })
        .collect();
    assert_eq!(errors.len(), 1, "{out:?}");
    errors[0].clone()
}

/// `S` and the request for a handshake, with nothing read ahead.
fn answered_s(out: &[ClientOut]) -> bool {
    matches!(out, [ClientOut::ToClient(s), ClientOut::StartTls { early }]
        if &s[..] == b"S" && early.is_empty())
}

#[test]
fn ssl_request_is_answered_s_with_tls_and_n_without() {
    for mode in [TlsMode::Allow, TlsMode::Prefer, TlsMode::Require] {
        let mut s = trusting(mode);
        s.handle_client_bytes(T0, &ssl_request());
        assert!(answered_s(&outputs(&mut s)), "{mode:?}");
        assert!(!s.is_tls(), "not before the handshake is done");
        s.handle_tls_established(Some(b"postgresql"));
        assert!(s.is_tls());
        s.handle_client_bytes(T0, &startup());
        let out = outputs(&mut s);
        assert!(
            matches!(&out[..], [ClientOut::Acquire(k)] if k.user == "alice"),
            "{mode:?}: {out:?}"
        );
    }
    let mut s = trusting(TlsMode::Disable);
    s.handle_client_bytes(T0, &ssl_request());
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::ToClient(n)] if &n[..] == b"N"),
        "{out:?}"
    );
    s.handle_client_bytes(T0, &startup());
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::Acquire(_)]));
    assert!(!s.is_tls());
}

#[test]
fn a_request_cut_in_two_reads_is_still_a_request() {
    let mut s = trusting(TlsMode::Prefer);
    let req = ssl_request();
    s.handle_client_bytes(T0, &req[..3]);
    assert!(outputs(&mut s).is_empty());
    s.handle_client_bytes(T0, &req[3..]);
    assert!(answered_s(&outputs(&mut s)));
}

#[test]
fn bytes_sent_with_the_request_are_refused_as_stuffing() {
    let stuffing = "received unencrypted data after SSL request";
    for mode in [TlsMode::Disable, TlsMode::Prefer, TlsMode::Require] {
        // A whole StartupMessage behind the SSLRequest, in the same read.
        let mut s = trusting(mode);
        s.handle_client_bytes(T0, &[ssl_request(), startup()].concat());
        let out = outputs(&mut s);
        let text = fatal(&out);
        assert!(text.contains("C08P01") && text.contains(stuffing), "{text}");
        assert!(
            !out.iter().any(|o| matches!(o, ClientOut::StartTls { .. })),
            "no handshake after stuffing: {out:?}"
        );
        assert!(
            !out.iter()
                .any(|o| matches!(o, ClientOut::ToClient(b) if &b[..] == b"S")),
            "{out:?}"
        );
        assert!(s.is_closed());

        // Three bytes of anything (not even a whole packet) are enough.
        let mut s = trusting(mode);
        s.handle_client_bytes(T0, &[&ssl_request()[..], b"abc"].concat());
        assert!(fatal(&outputs(&mut s)).contains(stuffing), "{mode:?}");
    }
    // An SSLRequest whose length word leaves room for more is still only its length.
    let mut s = trusting(TlsMode::Prefer);
    let mut long = ssl_request();
    long.extend_from_slice(b"xy");
    s.handle_client_bytes(T0, &long);
    assert!(fatal(&outputs(&mut s)).contains(stuffing));

    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, &[gss_request(), startup()].concat());
    let text = fatal(&outputs(&mut s));
    assert!(
        text.contains("received unencrypted data after GSSAPI encryption request"),
        "{text}"
    );
}

#[test]
fn plaintext_during_the_handshake_is_refused() {
    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, &ssl_request());
    assert!(answered_s(&outputs(&mut s)));
    s.handle_client_bytes(T0, &startup());
    let text = fatal(&outputs(&mut s));
    assert!(
        text.contains("received unencrypted data after SSL request"),
        "{text}"
    );
}

#[test]
fn direct_tls_starts_the_handshake_with_the_bytes_read() {
    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, CLIENT_HELLO);
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::StartTls { early }] if &early[..] == CLIENT_HELLO),
        "nothing is written first, and the record goes to the TLS layer: {out:?}"
    );
    s.handle_tls_established(Some(b"postgresql"));
    assert!(s.is_tls());
    s.handle_client_bytes(T0, &startup());
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::Acquire(_)]));

    // Inside direct TLS there is nothing left to negotiate.
    for (request, code) in [(ssl_request(), "1234.5679"), (gss_request(), "1234.5680")] {
        let mut s = trusting(TlsMode::Require);
        s.handle_client_bytes(T0, CLIENT_HELLO);
        outputs(&mut s);
        s.handle_tls_established(Some(b"postgresql"));
        s.handle_client_bytes(T0, &request);
        let text = fatal(&outputs(&mut s));
        assert!(
            text.contains("C0A000")
                && text.contains(&format!("unsupported frontend protocol {code}")),
            "{text}"
        );
    }
}

#[test]
fn direct_tls_needs_the_postgresql_alpn() {
    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, CLIENT_HELLO);
    outputs(&mut s);
    s.handle_tls_established(None);
    let text = fatal(&outputs(&mut s));
    assert!(
        text.contains("C08P01")
            && text.contains("direct SSL connection request without ALPN protocol negotiation"),
        "{text}"
    );

    // After SSLRequest a client without ALPN (libpq before 17) is welcome.
    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, &ssl_request());
    outputs(&mut s);
    s.handle_tls_established(None);
    assert!(s.is_tls() && !s.is_closed());
    assert!(outputs(&mut s).is_empty());
}

#[test]
fn direct_tls_without_tls_configured_is_refused_in_words() {
    let mut s = trusting(TlsMode::Disable);
    s.handle_client_bytes(T0, CLIENT_HELLO);
    let out = outputs(&mut s);
    let text = fatal(&out);
    assert!(
        text.contains("C08P01") && text.contains("direct SSL connection request received"),
        "{text}"
    );
    assert!(!out.iter().any(|o| matches!(o, ClientOut::StartTls { .. })));

    // Only the very first byte can start TLS: later a 0x16 is just a broken packet.
    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, &gss_request());
    assert!(matches!(&outputs(&mut s)[..], [ClientOut::ToClient(n)] if &n[..] == b"N"));
    s.handle_client_bytes(T0, CLIENT_HELLO);
    let out = outputs(&mut s);
    assert!(!out.iter().any(|o| matches!(o, ClientOut::StartTls { .. })));
    fatal(&out);
}

#[test]
fn require_refuses_a_plaintext_login_but_not_a_cancel() {
    let mut s = trusting(TlsMode::Require);
    s.handle_client_bytes(T0, &startup());
    let text = fatal(&outputs(&mut s));
    assert!(
        text.contains("C08P01") && text.contains("SSL required"),
        "{text}"
    );

    // After `N`... there is no `N` in require mode; a client that gave up on TLS is refused.
    let mut s = trusting(TlsMode::Require);
    s.handle_client_bytes(T0, &gss_request());
    outputs(&mut s);
    s.handle_client_bytes(T0, &startup());
    assert!(fatal(&outputs(&mut s)).contains("SSL required"));

    let mut cancel = BytesMut::new();
    frontend::encode_cancel_request(77, &[9; 4], &mut cancel).expect("cancel");
    let mut s = trusting(TlsMode::Require);
    s.handle_client_bytes(T0, &cancel);
    let out = outputs(&mut s);
    assert!(
        matches!(
            &out[..],
            [ClientOut::Cancel { pid: 77, .. }, ClientOut::Close]
        ),
        "a cancel carries no data worth protecting: {out:?}"
    );
}

/// A StartupMessage for `alice` asking for the admin console.
fn console_startup() -> Vec<u8> {
    let params: [(&[u8], &[u8]); 2] = [(b"user", b"alice"), (b"database", b"pgyard")];
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    b.to_vec()
}

#[test]
fn the_admin_console_is_held_to_the_tls_mode_too() {
    // Under `require` the console is no exception: its login over plaintext is refused
    // before any password is asked, as PgBouncer refuses it.
    let mut s = trusting(TlsMode::Require);
    s.handle_client_bytes(T0, &console_startup());
    assert!(fatal(&outputs(&mut s)).contains("SSL required"));

    // Over TLS it opens, and a command goes to the adapter (never a server).
    let mut s = trusting(TlsMode::Require);
    s.handle_client_bytes(T0, &ssl_request());
    assert!(answered_s(&outputs(&mut s)));
    s.handle_tls_established(Some(b"postgresql"));
    s.handle_client_bytes(T0, &console_startup());
    let out = outputs(&mut s);
    assert!(
        out.iter().all(|o| matches!(o, ClientOut::ToClient(_))),
        "a welcome only: {out:?}"
    );
    let mut query = BytesMut::new();
    frontend::encode_query(b"SHOW CLIENTS", &mut query).expect("query");
    s.handle_client_bytes(T0, &query);
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::Admin(AdminRequest::Snapshot)]),
        "{out:?}"
    );
    assert!(s.is_tls() && s.activity().admin);
}

#[test]
fn each_request_is_answered_once_as_postgresql_does() {
    // A second SSLRequest after `N`.
    let mut s = trusting(TlsMode::Disable);
    s.handle_client_bytes(T0, &ssl_request());
    outputs(&mut s);
    s.handle_client_bytes(T0, &ssl_request());
    let text = fatal(&outputs(&mut s));
    assert!(
        text.contains("unsupported frontend protocol 1234.5679: server supports 3.0 to 3.2"),
        "{text}"
    );

    // GSSENCRequest then SSLRequest (either order is allowed), each `N` once.
    let mut s = trusting(TlsMode::Disable);
    s.handle_client_bytes(T0, &gss_request());
    s.handle_client_bytes(T0, &ssl_request());
    let out = outputs(&mut s);
    let answers: Vec<&[u8]> = out
        .iter()
        .filter_map(|o| match o {
            ClientOut::ToClient(b) => Some(&b[..]),
            _ => None,
        })
        .collect();
    assert_eq!(answers, [b"N", b"N"], "{out:?}");
    assert_eq!(out.len(), 2, "{out:?}");
    s.handle_client_bytes(T0, &gss_request());
    assert!(fatal(&outputs(&mut s)).contains("1234.5680"));

    // GSSENCRequest `N`, then TLS.
    let mut s = trusting(TlsMode::Prefer);
    s.handle_client_bytes(T0, &gss_request());
    outputs(&mut s);
    s.handle_client_bytes(T0, &ssl_request());
    assert!(answered_s(&outputs(&mut s)));
}

/// Runs a SCRAM login of `alice` (password `secret`) over the session, the client holding
/// `end_point` as its TLS channel-binding data; returns the mechanism offers and whether the
/// login reached the pool.
fn scram_login(
    s: &mut ClientSession,
    binding: ChannelBinding,
    end_point: Option<Vec<u8>>,
) -> (Vec<String>, bool) {
    let (offered, last) = scram_exchange(s, binding, end_point);
    let ok = last.iter().any(|o| matches!(o, ClientOut::Acquire(_)));
    (offered, ok)
}

/// A StartupMessage for alice and her SCRAM exchange (password `secret`) until the session
/// asks for a server or closes: the mechanisms offered and the session's last outputs.
fn scram_exchange(
    s: &mut ClientSession,
    binding: ChannelBinding,
    end_point: Option<Vec<u8>>,
) -> (Vec<String>, Vec<ClientOut>) {
    s.handle_client_bytes(T0, &startup());
    let mut client = AuthClient::new(
        AuthConfig {
            user: "alice".into(),
            password: Some(b"secret".to_vec()),
            channel_binding: binding,
            tls_end_point: end_point,
            max_iterations: None,
            secret: None,
        },
        [4; 18],
    );
    let mut offered = Vec::new();
    for _ in 0..4 {
        let out = outputs(s);
        if out
            .iter()
            .any(|o| matches!(o, ClientOut::Acquire(_) | ClientOut::Close))
        {
            return (offered, out);
        }
        let bytes: Vec<u8> = out
            .iter()
            .filter_map(|o| match o {
                ClientOut::ToClient(b) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        let mut reply = BytesMut::new();
        for frame in frames(&bytes, 1 << 20) {
            let frame = frame.expect("a frame");
            let request = AuthRequest::decode(frame.body).expect("an auth request");
            if let AuthRequest::Sasl(mechs) = request {
                offered = mechs
                    .iter()
                    .map(|m| String::from_utf8_lossy(m).into_owned())
                    .collect();
            }
            match client.handle_request(request) {
                Ok(AuthStep::Send(AuthResponse::SaslInitial { mechanism, data })) => {
                    frontend::encode_sasl_initial_response(
                        mechanism.name().as_bytes(),
                        Some(&data),
                        &mut reply,
                    )
                    .expect("initial");
                }
                Ok(AuthStep::Send(AuthResponse::Sasl(data))) => {
                    frontend::encode_sasl_response(&data, &mut reply).expect("response")
                }
                Ok(_) => {}
                Err(e) => panic!("client gave up: {e}"),
            }
        }
        s.handle_client_bytes(T0, &reply);
    }
    panic!("the login did not end")
}

fn scram_session(mode: TlsMode) -> ClientSession {
    let file = AuthFile::parse(
        "\"alice\" \"secret\"\n",
        &mut pgyard_types::rng_from_seed(3),
    );
    session(mode, ClientAuth::File(Arc::new(file.expect("auth file"))))
}

#[test]
fn scram_is_channel_bound_over_tls_only() {
    // Over TLS: -PLUS is offered first, and a client bound to the same hash logs in.
    let mut s = scram_session(TlsMode::Prefer);
    s.handle_client_bytes(T0, &ssl_request());
    outputs(&mut s);
    s.handle_tls_established(Some(b"postgresql"));
    let (offered, ok) = scram_login(&mut s, ChannelBinding::Require, Some(END_POINT.to_vec()));
    assert_eq!(offered, ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"]);
    assert!(ok, "channel-bound login");

    // A client that saw another certificate (a man in the middle's) fails the binding.
    let mut s = scram_session(TlsMode::Prefer);
    s.handle_client_bytes(T0, &ssl_request());
    outputs(&mut s);
    s.handle_tls_established(Some(b"postgresql"));
    let (_, ok) = scram_login(&mut s, ChannelBinding::Require, Some(vec![0x13; 32]));
    assert!(!ok, "a different certificate hash must not log in");
    assert!(s.is_closed());

    // Over plaintext the same proxy offers SCRAM-SHA-256 alone.
    let mut s = scram_session(TlsMode::Prefer);
    let (offered, ok) = scram_login(&mut s, ChannelBinding::Prefer, None);
    assert_eq!(offered, ["SCRAM-SHA-256"]);
    assert!(ok);
}

#[test]
fn start_tls_bytes_are_never_read_ahead() {
    // The early bytes are exactly what was read: a cut ClientHello stays whole for TLS.
    let mut s = trusting(TlsMode::Allow);
    s.handle_client_bytes(T0, &CLIENT_HELLO[..1]);
    let out = outputs(&mut s);
    assert!(
        matches!(&out[..], [ClientOut::StartTls { early }] if early[..] == [0x16]),
        "{out:?}"
    );
}

/// SSLRequest, `S`, and a handshake that showed `cert` (`None`: no certificate).
fn over_tls_with(s: &mut ClientSession, cert: Option<&str>) {
    s.handle_client_bytes(T0, &ssl_request());
    assert!(answered_s(&outputs(s)));
    let cert = cert.map(|cn| ClientCert {
        common_name: (!cn.is_empty()).then(|| cn.to_owned()),
    });
    s.handle_tls_established_with_cert(Some(b"postgresql"), cert);
}

/// Whether the login went through to asking for a server, with no password asked.
fn admitted_without_password(out: &[ClientOut]) -> bool {
    let asked = out
        .iter()
        .any(|o| matches!(o, ClientOut::ToClient(b) if b.first() == Some(&b'R')));
    !asked && out.iter().any(|o| matches!(o, ClientOut::Acquire(_)))
}

#[test]
fn the_verify_modes_need_a_certificate_before_anything_else() {
    for mode in [TlsMode::VerifyCa, TlsMode::VerifyFull] {
        // Over TLS without a certificate: PostgreSQL's FATAL, before any password.
        let mut s = scram_session(mode);
        over_tls_with(&mut s, None);
        s.handle_client_bytes(T0, &startup());
        let text = fatal(&outputs(&mut s));
        assert!(
            text.contains("C28000")
                && text.contains("connection requires a valid client certificate"),
            "{mode:?}: {text}"
        );
        // Over plaintext: refused as `require` refuses it.
        let mut s = trusting(mode);
        s.handle_client_bytes(T0, &startup());
        assert!(fatal(&outputs(&mut s)).contains("SSL required"), "{mode:?}");
    }
}

#[test]
fn verify_ca_takes_any_certificate_and_verify_full_only_the_users_own() {
    // verify-ca: the CA vouched for it; whose name it bears does not matter.
    let mut s = trusting(TlsMode::VerifyCa);
    over_tls_with(&mut s, Some("bob"));
    s.handle_client_bytes(T0, &startup());
    assert!(admitted_without_password(&outputs(&mut s)));

    // verify-full with trust: the name is checked after the method, whose words are used.
    let mut s = trusting(TlsMode::VerifyFull);
    over_tls_with(&mut s, Some("alice"));
    s.handle_client_bytes(T0, &startup());
    assert!(admitted_without_password(&outputs(&mut s)));
    for other in ["bob", "", "alice "] {
        let mut s = trusting(TlsMode::VerifyFull);
        over_tls_with(&mut s, Some(other));
        s.handle_client_bytes(T0, &startup());
        let text = fatal(&outputs(&mut s));
        assert!(
            text.contains("C28000")
                && text.contains("\"trust\" authentication failed for user \"alice\""),
            "CN {other:?}: {text}"
        );
    }
}

#[test]
fn verify_full_asks_for_the_password_first_and_then_refuses_another_name() {
    // The right password with another's certificate: the exchange runs to its end, then
    // PostgreSQL's password failure (28P01), as a real server answers it.
    let mut s = scram_session(TlsMode::VerifyFull);
    over_tls_with(&mut s, Some("bob"));
    let (offered, ok) = scram_login(&mut s, ChannelBinding::Prefer, Some(END_POINT.to_vec()));
    assert!(!ok && s.is_closed());
    assert_eq!(
        offered,
        ["SCRAM-SHA-256-PLUS", "SCRAM-SHA-256"],
        "the password was asked"
    );

    let mut s = scram_session(TlsMode::VerifyFull);
    over_tls_with(&mut s, Some("alice"));
    let (_, ok) = scram_login(&mut s, ChannelBinding::Prefer, Some(END_POINT.to_vec()));
    assert!(ok, "the user's own certificate and password");
}

#[test]
fn verify_full_refusal_after_the_password_uses_postgresql_words() {
    let mut s = scram_session(TlsMode::VerifyFull);
    over_tls_with(&mut s, Some("bob"));
    let (_, last) = scram_exchange(&mut s, ChannelBinding::Prefer, Some(END_POINT.to_vec()));
    let text = fatal(&last);
    assert!(
        text.contains("C28P01")
            && text.contains("password authentication failed for user \"alice\""),
        "{text}"
    );
}

#[test]
fn cert_auth_lets_in_the_named_user_only_and_asks_no_password() {
    for mode in [
        TlsMode::Prefer,
        TlsMode::Require,
        TlsMode::VerifyCa,
        TlsMode::VerifyFull,
    ] {
        let mut s = session(mode, ClientAuth::Cert);
        over_tls_with(&mut s, Some("alice"));
        s.handle_client_bytes(T0, &startup());
        assert!(admitted_without_password(&outputs(&mut s)), "{mode:?}");

        for other in ["bob", ""] {
            let mut s = session(mode, ClientAuth::Cert);
            over_tls_with(&mut s, Some(other));
            s.handle_client_bytes(T0, &startup());
            let text = fatal(&outputs(&mut s));
            assert!(
                text.contains("C28000")
                    && text.contains("certificate authentication failed for user \"alice\""),
                "{mode:?}, CN {other:?}: {text}"
            );
        }

        let mut s = session(mode, ClientAuth::Cert);
        over_tls_with(&mut s, None);
        s.handle_client_bytes(T0, &startup());
        let text = fatal(&outputs(&mut s));
        assert!(
            text.contains("connection requires a valid client certificate"),
            "{text}"
        );
    }
    // Over plaintext where TLS is optional there is no certificate either.
    let mut s = session(TlsMode::Prefer, ClientAuth::Cert);
    s.handle_client_bytes(T0, &startup());
    let text = fatal(&outputs(&mut s));
    assert!(
        text.contains("connection requires a valid client certificate"),
        "{text}"
    );
}

#[test]
fn a_certificate_changes_nothing_where_none_is_asked_for() {
    let mut s = trusting(TlsMode::Prefer);
    over_tls_with(&mut s, Some("bob"));
    s.handle_client_bytes(T0, &startup());
    assert!(admitted_without_password(&outputs(&mut s)));
}

#[test]
fn the_admin_console_is_held_to_the_certificate_rules_too() {
    let mut s = trusting(TlsMode::VerifyFull);
    over_tls_with(&mut s, Some("bob"));
    s.handle_client_bytes(T0, &console_startup());
    assert!(fatal(&outputs(&mut s)).contains("\"trust\" authentication failed for user \"alice\""));

    let mut s = trusting(TlsMode::VerifyFull);
    over_tls_with(&mut s, Some("alice"));
    s.handle_client_bytes(T0, &console_startup());
    let out = outputs(&mut s);
    assert!(
        out.iter().all(|o| matches!(o, ClientOut::ToClient(_))) && s.activity().admin,
        "{out:?}"
    );
}
