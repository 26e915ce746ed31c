//! Tests for the authentication machines: RFC 7677's vector, client⇄server round trips over the
//! channel-binding matrix, hostile input, SASLprep, MD5, certificate hashes and the driver.

use proptest::prelude::*;

use super::*;

const RFC_CLIENT_NONCE: &str = "rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
const RFC_SALT: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
const RFC_CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
const RFC_SERVER_FIRST: &str =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
const RFC_CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
const RFC_SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

const CB_A: &[u8] = &[0xaa; 32];
const CB_B: &[u8] = &[0xbb; 32];

fn b64(s: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("test constant is valid base64")
}

fn rfc_client() -> ScramClient {
    ScramClient::new("pencil", ChannelBinding::Disable, None, [0; NONCE_RAW_LEN])
        .with_nonce_text(RFC_CLIENT_NONCE)
        .expect("valid nonce")
        .with_username("user")
}

#[test]
fn rfc7677_client_vector() {
    let mut client = rfc_client();
    let first = client.client_first([SCRAM_SHA_256]).expect("client-first");
    assert_eq!(first.mechanism, Mechanism::ScramSha256);
    assert_eq!(first.message, RFC_CLIENT_FIRST.as_bytes());
    let fin = client
        .handle_server_first(RFC_SERVER_FIRST.as_bytes())
        .expect("server-first accepted");
    assert_eq!(String::from_utf8(fin).unwrap(), RFC_CLIENT_FINAL);
    client
        .handle_server_final(RFC_SERVER_FINAL.as_bytes())
        .expect("server signature verified");
    assert!(client.is_complete());
    assert!(!client.is_channel_bound());
}

#[test]
fn rfc7677_server_vector() {
    let secret = scram_secret("pencil", &b64(RFC_SALT), 4096);
    let mut server = ScramServer::new(secret, None, [0; NONCE_RAW_LEN])
        .with_nonce_text(RFC_SERVER_NONCE)
        .expect("valid nonce");
    assert_eq!(server.mechanisms(), &[SCRAM_SHA_256]);
    let server_first = server
        .handle_client_first(b"SCRAM-SHA-256", RFC_CLIENT_FIRST.as_bytes())
        .expect("client-first accepted");
    assert_eq!(server_first, RFC_SERVER_FIRST.as_bytes());
    let server_final = server
        .handle_client_final(RFC_CLIENT_FINAL.as_bytes())
        .expect("proof accepted");
    assert_eq!(server_final, RFC_SERVER_FINAL.as_bytes());
    assert!(server.is_complete());
}

#[test]
fn libpq_style_client_first_has_empty_user_and_base64_nonce() {
    let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [7; NONCE_RAW_LEN]);
    let first = client.client_first([SCRAM_SHA_256]).unwrap();
    let text = String::from_utf8(first.message).unwrap();
    assert_eq!(text, "n,,n=,r=BwcHBwcHBwcHBwcHBwcHBwcH");
    assert_eq!(client.client_nonce().len(), 24);
}

/// Runs a full exchange; returns the client's and the server's outcome.
struct Run {
    client: ScramClient,
    server: ScramServer,
    result: Result<Mechanism, String>,
}

fn run(
    password: &str,
    server_password: &str,
    channel_binding: ChannelBinding,
    client_tls: Option<&[u8]>,
    server_tls: Option<&[u8]>,
    offered: Option<&[&str]>,
) -> Run {
    let secret = scram_secret(server_password, b"0123456789abcdef", 2);
    let mut server = ScramServer::new(secret, server_tls, [9; NONCE_RAW_LEN]);
    let mut client = ScramClient::new(password, channel_binding, client_tls, [3; NONCE_RAW_LEN]);
    let offered: Vec<&str> = offered.map_or_else(|| server.mechanisms().to_vec(), <[_]>::to_vec);
    let result = (|| {
        let first = client.client_first(offered).map_err(|e| e.to_string())?;
        let sf = server
            .handle_client_first(first.mechanism.name().as_bytes(), &first.message)
            .map_err(|e| format!("server: {e}"))?;
        let cf = client.handle_server_first(&sf).map_err(|e| e.to_string())?;
        let fin = server
            .handle_client_final(&cf)
            .map_err(|e| format!("server: {e}"))?;
        client
            .handle_server_final(&fin)
            .map_err(|e| e.to_string())?;
        Ok(first.mechanism)
    })();
    Run {
        client,
        server,
        result,
    }
}

#[test]
fn round_trip_channel_binding_matrix() {
    use ChannelBinding::*;
    type Case = (
        ChannelBinding,
        Option<&'static [u8]>,
        Option<&'static [u8]>,
        Result<(Mechanism, bool), &'static str>,
    );
    let cases: &[Case] = &[
        // Plaintext connections.
        (Disable, None, None, Ok((Mechanism::ScramSha256, false))),
        (Prefer, None, None, Ok((Mechanism::ScramSha256, false))),
        (Require, None, None, Err("channel binding required, but SSL not in use")),
        // TLS, the server offers -PLUS.
        (Disable, Some(CB_A), Some(CB_A), Ok((Mechanism::ScramSha256, false))),
        (Prefer, Some(CB_A), Some(CB_A), Ok((Mechanism::ScramSha256Plus, true))),
        (Require, Some(CB_A), Some(CB_A), Ok((Mechanism::ScramSha256Plus, true))),
        // TLS on the client, but the server cannot bind (offers plain SCRAM only): `y` flag.
        (Prefer, Some(CB_A), None, Ok((Mechanism::ScramSha256, false))),
        (Disable, Some(CB_A), None, Ok((Mechanism::ScramSha256, false))),
        (
            Require,
            Some(CB_A),
            None,
            Err("channel binding is required, but server did not offer an authentication method that supports channel binding"),
        ),
        // A man in the middle with another certificate: the binding check fails.
        (Prefer, Some(CB_B), Some(CB_A), Err("server: SCRAM channel binding check failed")),
        (Require, Some(CB_B), Some(CB_A), Err("server: SCRAM channel binding check failed")),
    ];
    for (i, &(cb, client_tls, server_tls, expected)) in cases.iter().enumerate() {
        let r = run("secret", "secret", cb, client_tls, server_tls, None);
        match expected {
            Ok((mechanism, bound)) => {
                assert_eq!(r.result, Ok(mechanism), "case {i}");
                assert_eq!(r.client.is_channel_bound(), bound, "case {i}");
                assert_eq!(r.server.is_channel_bound(), bound, "case {i}");
                assert!(r.server.is_complete() && r.client.is_complete(), "case {i}");
            }
            Err(text) => assert_eq!(r.result, Err(text.to_owned()), "case {i}"),
        }
    }
}

#[test]
fn gs2_flags_follow_libpq() {
    let flag = |cb, tls: Option<&[u8]>, offered: &[&str]| {
        let mut c = ScramClient::new("pw", cb, tls, [1; NONCE_RAW_LEN]);
        let first = c.client_first(offered).unwrap();
        let text = String::from_utf8(first.message).unwrap();
        text.split(",,").next().unwrap().to_owned()
    };
    use ChannelBinding::*;
    assert_eq!(flag(Prefer, None, &[SCRAM_SHA_256]), "n");
    assert_eq!(flag(Prefer, Some(CB_A), &[SCRAM_SHA_256]), "y");
    assert_eq!(
        flag(Disable, Some(CB_A), &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]),
        "n"
    );
    assert_eq!(
        flag(Prefer, Some(CB_A), &[SCRAM_SHA_256, SCRAM_SHA_256_PLUS]),
        "p=tls-server-end-point"
    );
}

#[test]
fn stripped_plus_is_a_downgrade_the_server_rejects() {
    // The server has TLS and offers -PLUS, a MITM removes it from the list: the client says `y`.
    let r = run(
        "pw",
        "pw",
        ChannelBinding::Prefer,
        Some(CB_A),
        Some(CB_A),
        Some(&[SCRAM_SHA_256]),
    );
    assert_eq!(
        r.result,
        Err("server: SCRAM channel binding negotiation error".to_owned())
    );
}

#[test]
fn mechanism_selection_errors() {
    use ChannelBinding::*;
    assert_eq!(
        select_mechanism([SCRAM_SHA_256_PLUS, SCRAM_SHA_256], Prefer, false),
        Err(ScramError::PlusOverPlaintext)
    );
    assert_eq!(
        select_mechanism(["OAUTHBEARER"], Prefer, false),
        Err(ScramError::NoSupportedMechanism)
    );
    assert_eq!(
        select_mechanism(Vec::<&str>::new(), Disable, true),
        Err(ScramError::NoSupportedMechanism)
    );
    assert_eq!(
        select_mechanism([SCRAM_SHA_256_PLUS], Disable, true),
        Err(ScramError::NoSupportedMechanism)
    );
    assert_eq!(
        select_mechanism(["OAUTHBEARER", SCRAM_SHA_256], Prefer, false),
        Ok(Mechanism::ScramSha256)
    );
}

#[test]
fn wrong_password_is_rejected_by_the_server() {
    let r = run("wrong", "right", ChannelBinding::Prefer, None, None, None);
    assert_eq!(
        r.result,
        Err("server: password authentication failed".into())
    );
    assert_eq!(r.server.error(), Some(&ScramServerError::InvalidProof));
    assert_eq!(ScramServerError::InvalidProof.sqlstate(), "28P01");
}

#[test]
fn mock_server_always_fails_at_the_proof() {
    let mut server = ScramServer::mock(b"salt", 2, None, [5; NONCE_RAW_LEN]);
    let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [6; NONCE_RAW_LEN]);
    let first = client.client_first(server.mechanisms()).unwrap();
    let sf = server
        .handle_client_first(b"SCRAM-SHA-256", &first.message)
        .unwrap();
    let cf = client.handle_server_first(&sf).unwrap();
    assert_eq!(
        server.handle_client_final(&cf),
        Err(ScramServerError::InvalidProof)
    );
}

/// A client that has sent client-first and received a valid server-first from a real server
/// machine; returns (client, server, client-final).
fn mid_exchange() -> (ScramClient, ScramServer, Vec<u8>) {
    let secret = scram_secret("pw", b"salty", 2);
    let mut server = ScramServer::new(secret, None, [9; NONCE_RAW_LEN]);
    let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [3; NONCE_RAW_LEN]);
    let first = client.client_first([SCRAM_SHA_256]).unwrap();
    let sf = server
        .handle_client_first(b"SCRAM-SHA-256", &first.message)
        .unwrap();
    let cf = client.handle_server_first(&sf).unwrap();
    (client, server, cf)
}

#[test]
fn tampered_server_signature_is_detected_and_sticky() {
    let (mut client, mut server, cf) = mid_exchange();
    let mut fin = server.handle_client_final(&cf).unwrap();
    // Flip one base64 character of the signature.
    fin[5] = if fin[5] == b'A' { b'B' } else { b'A' };
    assert_eq!(
        client.handle_server_final(&fin),
        Err(ScramError::ServerSignatureMismatch)
    );
    assert_eq!(
        client.handle_server_final(b"v=anything"),
        Err(ScramError::ServerSignatureMismatch)
    );
    assert!(!client.is_complete());
}

#[test]
fn server_final_errors() {
    let cases: &[(&[u8], ScramError)] = &[
        (b"", ScramError::EmptyMessage),
        (b"v=\0", ScramError::LengthMismatch),
        (
            b"e=invalid-proof",
            ScramError::ServerError("invalid-proof".into()),
        ),
        (b"x=abc", ScramError::AttributeExpected('v')),
        (b"vabc", ScramError::EqualsExpected('v')),
        (b"v=!!!", ScramError::InvalidServerSignature),
        (b"v=AAAA", ScramError::InvalidServerSignature),
        (
            b"v=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=,x=1",
            ScramError::GarbageAfterServerFinal,
        ),
    ];
    for (input, expected) in cases {
        let (mut client, _, _) = mid_exchange();
        assert_eq!(
            client.handle_server_final(input).as_ref(),
            Err(expected),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    assert_eq!(
        ScramError::ServerError("invalid-proof".into()).to_string(),
        "error received from server in SCRAM exchange: invalid-proof"
    );
}

#[test]
fn server_first_errors() {
    let nonce = "AwMDAwMDAwMDAwMDAwMDAwMD"; // base64 of [3; 18]
    let case = |text: String| {
        let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [3; NONCE_RAW_LEN])
            .with_max_iterations(10_000);
        client.client_first([SCRAM_SHA_256]).unwrap();
        client.handle_server_first(text.as_bytes()).unwrap_err()
    };
    use ScramError::*;
    assert_eq!(case(String::new()), EmptyMessage);
    assert_eq!(case(format!("r={nonce}x\0,s=AAAA,i=1")), LengthMismatch);
    assert_eq!(case(format!("r={nonce},s=AAAA,i=1")), NonceMismatch);
    assert_eq!(case("r=somebodyelse,s=AAAA,i=1".into()), NonceMismatch);
    assert_eq!(case(format!("r={nonce}\x7f,s=AAAA,i=1")), InvalidNonce);
    assert_eq!(case(format!("r={nonce}x,s=A!AA,i=1")), InvalidSalt);
    assert_eq!(case(format!("r={nonce}x,s=,i=1")), InvalidSalt);
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=0")),
        InvalidIterationCount
    );
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=-1")),
        InvalidIterationCount
    );
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=1e3")),
        InvalidIterationCount
    );
    assert_eq!(case(format!("r={nonce}x,s=AAAA,i=")), InvalidIterationCount);
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=10001")),
        TooManyIterations {
            count: 10_001,
            max: 10_000
        }
    );
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=99999999999999999999")),
        TooManyIterations {
            count: u32::MAX,
            max: 10_000
        }
    );
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=1,")),
        GarbageAfterServerFirst
    );
    assert_eq!(
        case(format!("r={nonce}x,s=AAAA,i=1,x=y")),
        GarbageAfterServerFirst
    );
    assert_eq!(case(format!("r={nonce}x,i=1")), AttributeExpected('s'));
    assert_eq!(case(format!("r={nonce}x,s")), EqualsExpected('s'));
    assert_eq!(
        case(format!("m=ext,r={nonce}x,s=AAAA,i=1")),
        MandatoryExtension
    );
    assert_eq!(
        AttributeExpected('s').to_string(),
        "malformed SCRAM message (attribute \"s\" expected)"
    );
}

#[test]
fn out_of_order_calls_fail_and_stick() {
    let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [3; NONCE_RAW_LEN]);
    assert_eq!(
        client.handle_server_final(b"v=x"),
        Err(ScramError::InvalidState)
    );
    assert_eq!(
        client.client_first([SCRAM_SHA_256]),
        Err(ScramError::InvalidState)
    );
    let (mut client, mut server, cf) = mid_exchange();
    assert_eq!(
        client.client_first([SCRAM_SHA_256]),
        Err(ScramError::InvalidState)
    );
    assert_eq!(
        server.handle_client_first(b"SCRAM-SHA-256", b"n,,n=,r=x"),
        Err(ScramServerError::InvalidState)
    );
    let _ = cf;
}

#[test]
fn server_rejects_bad_client_first() {
    let server_for =
        |tls: Option<&[u8]>| ScramServer::new(scram_secret("pw", b"s", 1), tls, [1; NONCE_RAW_LEN]);
    use ScramServerError::*;
    let cases: &[(Option<&[u8]>, &str, &str, ScramServerError)] = &[
        (
            None,
            "SCRAM-SHA-256-PLUS",
            "p=tls-server-end-point,,n=,r=abc",
            InvalidMechanism,
        ),
        (None, "PLAIN", "n,,n=,r=abc", InvalidMechanism),
        (
            Some(CB_A),
            "SCRAM-SHA-256",
            "y,,n=,r=abc",
            ChannelBindingNegotiation,
        ),
        (
            Some(CB_A),
            "SCRAM-SHA-256",
            "n,a=admin,n=,r=abc",
            AuthzidUnsupported,
        ),
        (
            None,
            "SCRAM-SHA-256",
            "n,,m=ext,n=,r=abc",
            UnsupportedExtension,
        ),
        (
            Some(CB_A),
            "SCRAM-SHA-256-PLUS",
            "p=tls-unique,,n=,r=abc",
            UnsupportedChannelBindingType("tls-unique".into()),
        ),
    ];
    for (tls, mechanism, message, expected) in cases {
        let mut server = server_for(*tls);
        assert_eq!(
            server.handle_client_first(mechanism.as_bytes(), message.as_bytes()),
            Err(expected.clone()),
            "{message}"
        );
    }
    let malformed = [
        (None, "SCRAM-SHA-256", ""),
        (None, "SCRAM-SHA-256", "x,,n=,r=abc"),
        (None, "SCRAM-SHA-256", "n,,n=,r=a\x01c"),
        (None, "SCRAM-SHA-256", "n,,r=abc"),
        (None, "SCRAM-SHA-256", "n,,n=,r="),
        (Some(CB_A), "SCRAM-SHA-256-PLUS", "n,,n=,r=abc"),
        (
            Some(CB_A),
            "SCRAM-SHA-256",
            "p=tls-server-end-point,,n=,r=abc",
        ),
    ];
    for (tls, mechanism, message) in malformed {
        let mut server = server_for(tls);
        let err = server
            .handle_client_first(mechanism.as_bytes(), message.as_bytes())
            .unwrap_err();
        assert!(matches!(err, Malformed(_)), "{message:?}: {err:?}");
        assert_eq!(err.sqlstate(), "08P01");
    }
}

#[test]
fn server_rejects_bad_client_final() {
    let fresh = || {
        let mut server = ScramServer::new(scram_secret("pw", b"s", 1), None, [1; NONCE_RAW_LEN]);
        let sf = server
            .handle_client_first(b"SCRAM-SHA-256", b"n,,n=,r=abc")
            .unwrap();
        let sf = String::from_utf8(sf).unwrap();
        let nonce = sf[2..sf.find(',').unwrap()].to_owned();
        (server, nonce)
    };
    let proof = "p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    use ScramServerError::*;
    let (mut s, nonce) = fresh();
    assert_eq!(
        s.handle_client_final(format!("c=eSws,r={nonce},{proof}").as_bytes()),
        Err(UnexpectedChannelBindingAttribute)
    );
    let (mut s, _) = fresh();
    assert_eq!(
        s.handle_client_final(format!("c=biws,r=abcXYZ,{proof}").as_bytes()),
        Err(NonceMismatch)
    );
    let (mut s, nonce) = fresh();
    assert_eq!(
        s.handle_client_final(format!("c=biws,r={nonce},{proof}").as_bytes()),
        Err(InvalidProof)
    );
    let (mut s, nonce) = fresh();
    assert_eq!(
        s.handle_client_final(format!("c=biws,r={nonce},x=ext,{proof}").as_bytes()),
        Err(InvalidProof),
        "extensions before the proof are skipped"
    );
    for bad in [
        format!("c=biws,r={nonce},p=AAAA"),
        format!("c=biws,r={nonce},{proof},x=1"),
        format!("c=biws,r={nonce}"),
        format!("c=!!,r={nonce},{proof}"),
        format!("r={nonce},{proof}"),
        String::new(),
    ] {
        let (mut s, _) = fresh();
        let err = s.handle_client_final(bad.as_bytes()).unwrap_err();
        assert!(matches!(err, Malformed(_)), "{bad:?}: {err:?}");
    }
}

#[test]
fn secret_text_round_trip_and_errors() {
    let secret = scram_secret("pencil", &b64(RFC_SALT), 4096);
    let text = secret.to_string();
    assert!(
        text.starts_with("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"),
        "{text}"
    );
    assert_eq!(ScramSecret::parse(&text), Ok(secret.clone()));
    assert_eq!(text.parse::<ScramSecret>(), Ok(secret.clone()));
    assert!(
        !format!("{secret:?}").contains(&text[40..]),
        "Debug hides keys"
    );
    let key = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    for bad in [
        "md5abc".to_owned(),
        format!("SCRAM-SHA-256$0:AAAA${key}:{key}"),
        format!("SCRAM-SHA-256$x:AAAA${key}:{key}"),
        format!("SCRAM-SHA-256$1:A!AA${key}:{key}"),
        format!("SCRAM-SHA-256$1:AAAA${key}"),
        format!("SCRAM-SHA-256$1:AAAA$AAAA:{key}"),
        format!("SCRAM-SHA-256$1AAAA${key}:{key}"),
        "SCRAM-SHA-256$".to_owned(),
    ] {
        assert!(ScramSecret::parse(&bad).is_err(), "{bad}");
    }
    assert_eq!(scram_secret("x", b"s", 0).iterations, 1);
}

#[test]
fn saslprep_cases() {
    let prep = |s: &[u8]| saslprep_password(s).into_owned();
    // ASCII passes unchanged, control characters included (PostgreSQL's shortcut).
    assert_eq!(prep(b"pencil"), b"pencil");
    assert_eq!(prep(b"tab\there"), b"tab\there");
    assert_eq!(prep(b""), b"");
    // RFC 4013 §3 examples.
    assert_eq!(prep("I\u{00AD}X".as_bytes()), b"IX");
    assert_eq!(prep("\u{00AA}".as_bytes()), b"a");
    assert_eq!(prep("\u{2168}".as_bytes()), b"IX");
    // Non-ASCII space maps to SPACE; NFKC composes.
    assert_eq!(prep("a\u{00A0}b".as_bytes()), b"a b");
    assert_eq!(prep("e\u{0301}".as_bytes()), "\u{00E9}".as_bytes());
    // Failures fall back to the raw bytes.
    let raw = |s: &[u8]| assert_eq!(prep(s), s, "{s:?}");
    raw("\u{00E9}\u{0007}".as_bytes()); // prohibited control character
    raw("\u{00AD}".as_bytes()); // maps to nothing
    raw("\u{0627}1".as_bytes()); // RandALCat not at both ends
    raw("\u{E000}\u{00E9}".as_bytes()); // private use
    raw(b"\xff\xfe caf\xc3"); // not UTF-8
                              // The secret is computed from the prepared password.
    assert_eq!(
        scram_secret("I\u{00AD}X", b"s", 1),
        scram_secret("IX", b"s", 1)
    );
    // And the client prepares too: a client with "I\u{AD}X" logs in against a secret for "IX".
    let r = run("I\u{00AD}X", "IX", ChannelBinding::Prefer, None, None, None);
    assert_eq!(r.result, Ok(Mechanism::ScramSha256));
}

#[test]
fn md5_vectors() {
    // Computed independently (Python hashlib).
    assert_eq!(
        md5_secret("postgres", "pgyard-secret"),
        "md5279a75b1c32d0e1bb43fe6787e86efa0"
    );
    assert_eq!(
        md5_password("postgres", "pgyard-secret", [1, 2, 3, 4]),
        "md53a30823ca939edd050e51f03afa2ce54"
    );
    assert_eq!(
        md5_secret("user", "pencil"),
        "md520c46e3762c864548e296b33c3406aa9"
    );
    assert_eq!(
        md5_password("user", "pencil", [0xde, 0xad, 0xbe, 0xef]),
        "md50f5b636d891e9860623ac8ca91fc9dfc"
    );
    let payload = md5_payload("user", "pencil", [0xde, 0xad, 0xbe, 0xef]);
    assert_eq!(payload.len(), MD5_PASSWORD_LEN + 1);
    assert_eq!(payload.last(), Some(&0));
    // Server side.
    let stored = md5_secret("user", "pencil");
    assert!(md5_verify(&stored, [0xde, 0xad, 0xbe, 0xef], &payload));
    assert!(md5_verify(
        &stored,
        [0xde, 0xad, 0xbe, 0xef],
        b"md50f5b636d891e9860623ac8ca91fc9dfc"
    ));
    assert!(!md5_verify(&stored, [0, 0, 0, 0], &payload));
    assert!(!md5_verify(
        "SCRAM-SHA-256$...",
        [0xde, 0xad, 0xbe, 0xef],
        &payload
    ));
    assert!(!md5_verify(&stored, [0xde, 0xad, 0xbe, 0xef], b""));
    assert!(is_md5_secret(&stored));
    assert!(!is_md5_secret("md5XYZ"));
    assert_eq!(cleartext_payload("pw"), b"pw\0");
    assert_eq!(cleartext_payload(b"p\0w"), b"p\0");
}

#[allow(non_upper_case_globals)]
const CERT_rsa256: &str = "MIIB9DCCAV2gAwIBAgIUSeYmnWMdsD5aK1R+d3ZExwVBzS4wDQYJKoZIhvcNAQELBQAwDDEKMAgGA1UEAwwBYTAeFw0yNjExMzAwNTUwMDFaFw0yNjEyMDEwNTUwMDFaMAwxCjAIBgNVBAMMAWEwgZ8wDQYJKoZIhvcNAQEBBQADgY0AMIGJAoGBAOCFmBiLS2IYf8H8oj9w6odKn32ba1UWwnWkpQ0Zdu+gi4QuOLRgZVwArIDrjTYO8GVQG/C5CZf3m7a/xxK3kDvKrt9u2f2keNSKECub+N0hfdI7XJD+9JRRiZ56N1bFMTWAzvi2dumTS84e0OIezBDCZ5iHvvxb6uT+PdcE09EnAgMBAAGjUzBRMB0GA1UdDgQWBBQ7le57CSkC+TGkTkCpWfv61RW/kjAfBgNVHSMEGDAWgBQ7le57CSkC+TGkTkCpWfv61RW/kjAPBgNVHRMBAf8EBTADAQH/MA0GCSqGSIb3DQEBCwUAA4GBADIjvE/RZbszbDVouEI/HCecsXgKul4vF/uTR5NnQBb9yGTjReBVuWlCAXzudYv2+w8zN12Z4jBPn2auIR271QTTtop55KSRt4w5g5THucEm4NtYiDyZ+lAgKjgSluf6FLXyWpymF+AgNlmJcQ5+SdK1UwaoRiH6m4dCRapTzgIg";
#[allow(non_upper_case_globals)]
const CERT_rsa1: &str = "MIIB9DCCAV2gAwIBAgIUWjDmHMWyEyIyf4Kp2oMQO8WNRyUwDQYJKoZIhvcNAQEFBQAwDDEKMAgGA1UEAwwBYTAeFw0yNjExMzAwNTUwMDFaFw0yNjEyMDEwNTUwMDFaMAwxCjAIBgNVBAMMAWEwgZ8wDQYJKoZIhvcNAQEBBQADgY0AMIGJAoGBAMZlRP3Ev5EBsmDvD9KxjG8+Us05XijN1bb5flUhwftniviXfUgxFMkLbJJUG76OCx585k5jOb/l0QXcRTwwo3ggEy/XVojm7KAk52TdhTGcumQNUrijBROHSmPTvwGZl4swzTTr3EHhp3Uy5l1ubC4+Zm5N4LR5fBOB1ITemMW3AgMBAAGjUzBRMB0GA1UdDgQWBBRB+uxeI6P7jK0BwxfMQFQ9yXbhbjAfBgNVHSMEGDAWgBRB+uxeI6P7jK0BwxfMQFQ9yXbhbjAPBgNVHRMBAf8EBTADAQH/MA0GCSqGSIb3DQEBBQUAA4GBAMQ5KRLQTu8kI8jJ/mK3+OnTh2RHDwdJY7S+EYjUBLD8O16uR83RKT/3eYX6096lTsUxaOL2hDPK5x63GId6RSc3T4YsWaPyxLGeomMy8rcfg0hGf0f/wzthtgL7D8M450RAiLjaB5Hxji7nCne+zajysfQGMivLQJosxfpPLyy0";
#[allow(non_upper_case_globals)]
const CERT_ec384: &str = "MIIBbTCCAROgAwIBAgIUCvQuUEJdZA0MuZ1mSE0VkzUORgIwCgYIKoZIzj0EAwMwDDEKMAgGA1UEAwwBYTAeFw0yNjExMzAwNTUwMDFaFw0yNjEyMDEwNTUwMDFaMAwxCjAIBgNVBAMMAWEwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAASkAt2TWS+V/DSfo+W40epOmLloLaS21n5ibxXnZHR/97rZ5EvEqwIxs78+Xkf9Rh5bFtCngn/6Hr1jNrU9fBIqo1MwUTAdBgNVHQ4EFgQUgsipcYySSr9PatqVkdJOdoVVNw8wHwYDVR0jBBgwFoAUgsipcYySSr9PatqVkdJOdoVVNw8wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAwNIADBFAiEA92ta/yxNS/p0yVVH2Va/jNSUSmNUo9//7gXSpvLrYcYCIGvbOBQQiuTFf94XFh5foKbZ51bAS7gcsqdLZ1YYYs8N";
#[allow(non_upper_case_globals)]
const CERT_pss512: &str = "MIICXDCCAZGgAwIBAgIUFx5Z0yM1WsfvaaHB8zkcnksow7cwQQYJKoZIhvcNAQEKMDSgDzANBglghkgBZQMEAgMFAKEcMBoGCSqGSIb3DQEBCDANBglghkgBZQMEAgMFAKIDAgE+MAwxCjAIBgNVBAMMAWEwHhcNMjYxMTMwMDU1MDAxWhcNMjYxMjAxMDU1MDAxWjAMMQowCAYDVQQDDAFhMIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQDXKhOyHh/y1Vsrt8nycF0Nxq2NIBk8KYClKjXTuDLro5tcYCLccVmFIciIgDWvQW0mO43QbogsuL6kjtr5cwv08Z2CwI2VmH6/iyzfFYcJFbHxLyVnd1PAqGz/XHL5laBp2iXQBgvKr3rvjE9kNKl2iIlonSLKM2zmuvASIjJPdQIDAQABo1MwUTAdBgNVHQ4EFgQUFqORjVgH9TheTfzaMBeHQTYlRtQwHwYDVR0jBBgwFoAUFqORjVgH9TheTfzaMBeHQTYlRtQwDwYDVR0TAQH/BAUwAwEB/zBBBgkqhkiG9w0BAQowNKAPMA0GCWCGSAFlAwQCAwUAoRwwGgYJKoZIhvcNAQEIMA0GCWCGSAFlAwQCAwUAogMCAT4DgYEAbVc0jVCk1TMQft02tQdpSa4LoY4e7vOIApfa6kackdbEw7IOsWsV0dkqdz7mKWqG5Go5KEU/MwEfhyoY7bT8xSH0nqrihtlqa1fvvTWxsdYlGy2I42lS1cF8DbkFwEVAoxrimk9OH06OYkhX/3xjUZ8ZP/eCrJynubvgXNbFzqk=";
#[allow(non_upper_case_globals)]
const CERT_ed: &str = "MIIBLDCB36ADAgECAhQ/JAJANiKJSb+gmpEk3bAEWvdUEjAFBgMrZXAwDDEKMAgGA1UEAwwBYTAeFw0yNjExMzAwNTUwMDFaFw0yNjEyMDEwNTUwMDFaMAwxCjAIBgNVBAMMAWEwKjAFBgMrZXADIQA2RBX5Grp8qSgLOOq2Eb4ijZMKs26Wdm6k2dg3uJjWtqNTMFEwHQYDVR0OBBYEFLFrXVS91csYo4ismxk2YYCmj7B6MB8GA1UdIwQYMBaAFLFrXVS91csYo4ismxk2YYCmj7B6MA8GA1UdEwEB/wQFMAMBAf8wBQYDK2VwA0EAmKoB5K3rELc028X+t5a2VcdYv0YyjMWIi/FnyUTRcnT5LEkaBXx1WIBq08rJ7myV/DLbAr62Dv8d24OZxqqpAA==";

#[test]
fn tls_server_end_point_hashes() {
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    // Expected values from `openssl dgst` over the same DER files.
    let cases = [
        (CERT_rsa256, EndPointHash::Sha256, "a5ad73fce40a144214f089b1478c257853495d12b2c3b257afe959010f9e8f7c"),
        (CERT_rsa1, EndPointHash::Sha256, "b868310b75500c6b3ac3c498fcb2d396bf71f3f496231617e8fc55090551f5fc"),
        (CERT_ec384, EndPointHash::Sha384, "5c6b86d21b86126b59cb8c9f5b54389433c4e4add6046b19697d1941214384b5645fa868c8fb3f48ba9c8a5f1e881e55"),
        (CERT_pss512, EndPointHash::Sha512, "05c18a3c78940828deb79b8355f30be2c5c69c6c6259ad511b5c7641cf993ec87f72190f7b51ee6a26238cf0c2f9043f8b79bec73ce2a187924f582a278f03a8"),
    ];
    for (cert, hash, expected) in cases {
        let der = b64(cert);
        assert_eq!(end_point_hash(&der), Ok(hash));
        assert_eq!(hex(&tls_server_end_point(&der).unwrap()), expected);
    }
    let ed = b64(CERT_ed);
    assert_eq!(tls_server_end_point(&ed), Err(CertHashError::NoDigest));
    assert_eq!(
        CertHashError::NoDigest.to_string(),
        "could not find digest for NID UNDEF"
    );
    // Truncations and garbage never panic and are reported as malformed or undigestable.
    let der = b64(CERT_rsa256);
    for len in 0..der.len() {
        let _ = tls_server_end_point(&der[..len]);
    }
    assert!(matches!(
        tls_server_end_point(b"\x30\x84\xff\xff\xff\xff"),
        Err(CertHashError::Malformed(_))
    ));
}

#[test]
fn synthetic_certificates_pick_the_hash_from_the_oid() {
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.push(0x82);
            out.extend_from_slice(&(content.len() as u16).to_be_bytes());
        }
        out.extend_from_slice(content);
        out
    }
    fn cert(algorithm: &[u8]) -> Vec<u8> {
        let tbs = der(0x30, &[0x02, 0x01, 0x01]);
        let sig = der(0x03, &[0x00, 0x01]);
        der(0x30, &[tbs, der(0x30, algorithm), sig].concat())
    }
    let oid = |bytes: &[u8]| der(0x06, bytes);
    let rsa = |last: u8| oid(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, last]);
    assert_eq!(end_point_hash(&cert(&rsa(0x04))), Ok(EndPointHash::Sha256)); // MD5
    assert_eq!(end_point_hash(&cert(&rsa(0x0e))), Ok(EndPointHash::Sha224));
    assert_eq!(end_point_hash(&cert(&rsa(0x0c))), Ok(EndPointHash::Sha384));
    // PSS without parameters: SHA-1 by default, upgraded.
    assert_eq!(end_point_hash(&cert(&rsa(0x0a))), Ok(EndPointHash::Sha256));
    // PSS with an explicit SHA-384.
    let sha384 = der(
        0x30,
        &oid(&[0x60, 0x86, 0x48, 0x01, 0x65, 0x03, 0x04, 0x02, 0x02]),
    );
    let params = der(0x30, &der(0xa0, &sha384));
    assert_eq!(
        end_point_hash(&cert(&[rsa(0x0a), params].concat())),
        Ok(EndPointHash::Sha384)
    );
    let dsa = oid(&[0x2a, 0x86, 0x48, 0xce, 0x38, 0x04, 0x03]);
    assert_eq!(end_point_hash(&cert(&dsa)), Ok(EndPointHash::Sha256));
    let ed448 = oid(&[0x2b, 0x65, 0x71]);
    assert_eq!(end_point_hash(&cert(&ed448)), Err(CertHashError::NoDigest));
    let long_tbs = der(
        0x30,
        &[
            der(0x04, &[0u8; 300]),
            der(0x30, &rsa(0x0d)),
            der(0x03, &[0]),
        ]
        .concat(),
    );
    assert_eq!(end_point_hash(&long_tbs), Ok(EndPointHash::Sha512));
}

// ---------------------------------------------------------------------------------------------
// The driver.

fn config(cb: ChannelBinding, tls: Option<&[u8]>) -> AuthConfig {
    AuthConfig {
        user: "postgres".into(),
        password: Some(b"pw".to_vec()),
        channel_binding: cb,
        tls_end_point: tls.map(<[u8]>::to_vec),
        max_iterations: None,
        secret: None,
    }
}

fn sasl_body(names: &[&str]) -> Vec<u8> {
    let mut body = 10i32.to_be_bytes().to_vec();
    for n in names {
        body.extend_from_slice(n.as_bytes());
        body.push(0);
    }
    body.push(0);
    body
}

#[test]
fn auth_request_decoding() {
    assert_eq!(AuthRequest::decode(&[0, 0, 0, 0]), Ok(AuthRequest::Ok));
    assert_eq!(
        AuthRequest::decode(&[0, 0, 0, 3]),
        Ok(AuthRequest::CleartextPassword)
    );
    assert_eq!(
        AuthRequest::decode(&[0, 0, 0, 5, 1, 2, 3, 4]),
        Ok(AuthRequest::Md5Password { salt: [1, 2, 3, 4] })
    );
    assert!(AuthRequest::decode(&[0, 0, 0, 5, 1, 2, 3]).is_err());
    assert!(AuthRequest::decode(&[0, 0, 0, 0, 9]).is_err());
    let body = sasl_body(&[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]);
    let AuthRequest::Sasl(list) = AuthRequest::decode(&body).unwrap() else {
        panic!("not SASL");
    };
    let names: Vec<&[u8]> = list.iter().collect();
    assert_eq!(
        names,
        [SCRAM_SHA_256_PLUS.as_bytes(), SCRAM_SHA_256.as_bytes()]
    );
    assert!(AuthRequest::decode(&[0, 0, 0, 10, b'x']).is_err());
    assert!(AuthRequest::decode(&[0, 0, 0, 10, b'x', 0]).is_err());
    assert_eq!(
        AuthRequest::decode(b"\0\0\0\x0br=abc"),
        Ok(AuthRequest::SaslContinue(b"r=abc"))
    );
    assert_eq!(
        AuthRequest::decode(b"\0\0\0\x0cv=abc"),
        Ok(AuthRequest::SaslFinal(b"v=abc"))
    );
    assert_eq!(
        AuthRequest::decode(&[0, 0, 0, 7, 1]),
        Ok(AuthRequest::Other { code: 7 })
    );
    assert!(AuthRequest::decode(&[0, 0]).is_err());
    assert_eq!(AuthRequest::Md5Password { salt: [0; 4] }.code(), 5);
}

/// Drives an [`AuthClient`] against a [`ScramServer`] and returns the client's last result.
fn drive_scram(
    cb: ChannelBinding,
    client_tls: Option<&[u8]>,
    server_tls: Option<&[u8]>,
) -> (AuthClient, Result<AuthStep, AuthError>) {
    let mut server = ScramServer::new(scram_secret("pw", b"salt", 2), server_tls, [2; 18]);
    let mut client = AuthClient::new(config(cb, client_tls), [1; 18]);
    let body = sasl_body(server.mechanisms());
    let step = client.handle_request(AuthRequest::decode(&body).unwrap());
    let Ok(AuthStep::Send(AuthResponse::SaslInitial { mechanism, data })) = step else {
        return (client, step);
    };
    let sf = server
        .handle_client_first(mechanism.name().as_bytes(), &data)
        .unwrap();
    let step = client.handle_request(AuthRequest::SaslContinue(&sf));
    let Ok(AuthStep::Send(AuthResponse::Sasl(cf))) = step else {
        return (client, step);
    };
    let fin = server.handle_client_final(&cf).unwrap();
    assert_eq!(
        client.handle_request(AuthRequest::SaslFinal(&fin)),
        Ok(AuthStep::Wait)
    );
    let step = client.handle_request(AuthRequest::Ok);
    (client, step)
}

#[test]
fn driver_scram_flows() {
    use ChannelBinding::*;
    let (client, step) = drive_scram(Prefer, None, None);
    assert_eq!(step, Ok(AuthStep::Authenticated));
    assert!(client.is_authenticated());
    let (client, step) = drive_scram(Require, Some(CB_A), Some(CB_A));
    assert_eq!(step, Ok(AuthStep::Authenticated));
    assert!(client.is_authenticated());
    let (_, step) = drive_scram(Require, None, None);
    assert_eq!(
        step,
        Err(AuthError::Scram(ScramError::ChannelBindingSslNotInUse))
    );
    // After a successful Ok, more requests are errors.
    let (mut client, _) = drive_scram(Prefer, None, None);
    assert_eq!(
        client.handle_request(AuthRequest::Ok),
        Err(AuthError::AfterAuthenticated)
    );
}

#[test]
fn driver_refuses_ok_before_the_server_proved_itself() {
    let mut client = AuthClient::new(config(ChannelBinding::Prefer, None), [1; 18]);
    let body = sasl_body(&[SCRAM_SHA_256]);
    client
        .handle_request(AuthRequest::decode(&body).unwrap())
        .unwrap();
    assert_eq!(
        client.handle_request(AuthRequest::Ok),
        Err(AuthError::IncompleteSasl)
    );
    // Sticky.
    assert_eq!(
        client.handle_request(AuthRequest::CleartextPassword),
        Err(AuthError::IncompleteSasl)
    );
}

#[test]
fn driver_channel_binding_require_rules() {
    let require = || AuthClient::new(config(ChannelBinding::Require, Some(CB_A)), [1; 18]);
    assert_eq!(
        require().handle_request(AuthRequest::Ok),
        Err(AuthError::ChannelBindingNotUsed)
    );
    assert_eq!(
        AuthError::ChannelBindingNotUsed.to_string(),
        "channel binding required, but server authenticated client without channel binding"
    );
    for request in [
        AuthRequest::CleartextPassword,
        AuthRequest::Md5Password { salt: [0; 4] },
        AuthRequest::Other { code: 7 },
    ] {
        assert_eq!(
            require().handle_request(request),
            Err(AuthError::ChannelBindingUnsupportedRequest)
        );
    }
}

#[test]
fn driver_password_flows_and_errors() {
    let mut client = AuthClient::new(config(ChannelBinding::Prefer, None), [1; 18]);
    assert_eq!(
        client.handle_request(AuthRequest::Md5Password { salt: [1, 2, 3, 4] }),
        Ok(AuthStep::Send(AuthResponse::Password(md5_payload(
            "postgres",
            "pw",
            [1, 2, 3, 4]
        ))))
    );
    assert_eq!(
        client.handle_request(AuthRequest::Ok),
        Ok(AuthStep::Authenticated)
    );
    let mut client = AuthClient::new(config(ChannelBinding::Prefer, None), [1; 18]);
    assert_eq!(
        client.handle_request(AuthRequest::CleartextPassword),
        Ok(AuthStep::Send(AuthResponse::Password(b"pw\0".to_vec())))
    );
    let mut no_password = config(ChannelBinding::Prefer, None);
    no_password.password = None;
    let mut client = AuthClient::new(no_password.clone(), [1; 18]);
    assert_eq!(
        client.handle_request(AuthRequest::CleartextPassword),
        Err(AuthError::NoPasswordSupplied)
    );
    no_password.password = Some(Vec::new());
    let body = sasl_body(&[SCRAM_SHA_256]);
    let mut client = AuthClient::new(no_password, [1; 18]);
    assert_eq!(
        client.handle_request(AuthRequest::decode(&body).unwrap()),
        Err(AuthError::NoPasswordSupplied)
    );
    let fresh = || AuthClient::new(config(ChannelBinding::Prefer, None), [1; 18]);
    assert_eq!(
        fresh().handle_request(AuthRequest::SaslContinue(b"r=x")),
        Err(AuthError::SaslContinueWithoutSasl)
    );
    assert_eq!(
        fresh().handle_request(AuthRequest::SaslFinal(b"v=x")),
        Err(AuthError::SaslFinalWithoutSasl)
    );
    assert_eq!(
        fresh().handle_request(AuthRequest::Other { code: 2 }),
        Err(AuthError::KerberosV5)
    );
    assert_eq!(
        fresh().handle_request(AuthRequest::Other { code: 99 }),
        Err(AuthError::Unsupported(99))
    );
    let mut client = fresh();
    client
        .handle_request(AuthRequest::decode(&body).unwrap())
        .unwrap();
    assert_eq!(
        client.handle_request(AuthRequest::decode(&body).unwrap()),
        Err(AuthError::DuplicateSasl)
    );
    let mut client = fresh();
    client
        .handle_request(AuthRequest::decode(&body).unwrap())
        .unwrap();
    assert_eq!(
        client.handle_request(AuthRequest::SaslFinal(b"v=x")),
        Err(AuthError::SaslFinalTooEarly)
    );
    assert!(!format!("{:?}", config(ChannelBinding::Prefer, None)).contains("pw"));
}

// ---------------------------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn client_never_panics(
        server_first in proptest::collection::vec(any::<u8>(), 0..200),
        server_final in proptest::collection::vec(any::<u8>(), 0..120),
        prefix in any::<bool>(),
    ) {
        let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [3; NONCE_RAW_LEN])
            .with_max_iterations(8);
        client.client_first([SCRAM_SHA_256]).unwrap();
        let mut sf = if prefix { format!("r={}", client.client_nonce()).into_bytes() } else { Vec::new() };
        sf.extend_from_slice(&server_first);
        let _ = client.handle_server_first(&sf);
        let _ = client.handle_server_final(&server_final);
    }

    #[test]
    fn client_never_panics_on_near_valid_server_first(
        extra in "[ -~]{0,12}",
        salt in "[A-Za-z0-9+/=]{0,12}",
        iterations in "[0-9]{0,12}",
        tail in "(,[a-z]=[ -+.-~]{0,5})?",
    ) {
        let mut client = ScramClient::new("pw", ChannelBinding::Prefer, None, [3; NONCE_RAW_LEN])
            .with_max_iterations(8);
        client.client_first([SCRAM_SHA_256]).unwrap();
        let sf = format!("r={}{extra},s={salt},i={iterations}{tail}", client.client_nonce());
        if let Ok(cf) = client.handle_server_first(sf.as_bytes()) {
            prop_assert!(cf.starts_with(b"c=biws,r="));
            prop_assert!(client.handle_server_final(b"v=AAAA").is_err());
        }
    }

    #[test]
    fn server_never_panics(
        mechanism in prop_oneof![Just(b"SCRAM-SHA-256".to_vec()), Just(b"SCRAM-SHA-256-PLUS".to_vec()), proptest::collection::vec(any::<u8>(), 0..20)],
        client_first in proptest::collection::vec(any::<u8>(), 0..120),
        client_final in proptest::collection::vec(any::<u8>(), 0..160),
        tls in any::<bool>(),
        prefix in any::<bool>(),
    ) {
        let mut server = ScramServer::new(scram_secret("pw", b"s", 1), tls.then_some(CB_A), [1; NONCE_RAW_LEN]);
        let mut cf = if prefix { b"n,,n=,r=".to_vec() } else { Vec::new() };
        cf.extend_from_slice(&client_first);
        let _ = server.handle_client_first(&mechanism, &cf);
        let _ = server.handle_client_final(&client_final);
    }

    #[test]
    fn round_trip_any_password_and_nonce(
        password in proptest::collection::vec(any::<u8>(), 1..40),
        client_nonce in any::<[u8; 18]>(),
        server_nonce in any::<[u8; 18]>(),
        salt in proptest::collection::vec(any::<u8>(), 1..24),
        iterations in 1u32..4,
        tls in any::<bool>(),
        wrong in any::<bool>(),
    ) {
        let secret = scram_secret(&password, &salt, iterations);
        prop_assert_eq!(ScramSecret::parse(&secret.to_string()), Ok(secret.clone()));
        let mut server = ScramServer::new(secret, tls.then_some(CB_A), server_nonce);
        let mut attempt = password.clone();
        if wrong {
            attempt.push(b'!');
        }
        let mut client = ScramClient::new(&attempt, ChannelBinding::Prefer, tls.then_some(CB_A), client_nonce);
        let first = client.client_first(server.mechanisms()).unwrap();
        let sf = server.handle_client_first(first.mechanism.name().as_bytes(), &first.message).unwrap();
        let cf = client.handle_server_first(&sf).unwrap();
        match server.handle_client_final(&cf) {
            Ok(fin) => {
                prop_assert!(!wrong);
                prop_assert_eq!(client.handle_server_final(&fin), Ok(()));
                prop_assert_eq!(client.is_channel_bound(), tls);
            }
            Err(e) => {
                prop_assert!(wrong);
                prop_assert_eq!(e, ScramServerError::InvalidProof);
            }
        }
    }

    #[test]
    fn auth_request_decode_never_panics(body in proptest::collection::vec(any::<u8>(), 0..64)) {
        if let Ok(request) = AuthRequest::decode(&body) {
            let mut client = AuthClient::new(config(ChannelBinding::Prefer, None), [1; 18]);
            let _ = client.handle_request(request);
        }
    }

    #[test]
    fn saslprep_never_panics(password in proptest::collection::vec(any::<u8>(), 0..40), text in "\\PC{0,12}") {
        let _ = saslprep_password(&password);
        let _ = saslprep_password(text.as_bytes());
    }

    #[test]
    fn cert_parser_never_panics(der in proptest::collection::vec(any::<u8>(), 0..80)) {
        let _ = tls_server_end_point(&der);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn fuzz_entry_points_never_panic(data in proptest::collection::vec(any::<u8>(), 0..160)) {
        crate::fuzzing::scram_client(&data);
        crate::fuzzing::scram_server(&data);
    }
}

#[test]
fn fuzz_entry_points_reach_deep_paths() {
    // Client: right nonce prefix, valid salt and count, then a bogus signature.
    crate::fuzzing::scram_client(b"\x09x,s=AAAA,i=2\xffv=AAAA");
    // Server: well-formed prefixes, so the proof check runs (and fails).
    crate::fuzzing::scram_server(b"\x0cabc\xff,p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
    crate::fuzzing::scram_server(b"\x0fabc\xff,p=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
}
