//! The server's password check against the client machines of the same crate: every method
//! succeeds with the right password and fails (as a wrong password) otherwise.

use bytes::BytesMut;
use pgyard_wire::auth::{
    md5_payload, md5_secret, scram_secret, ChannelBinding, LoginRandom, LoginStep, ScramClient,
    ServerLogin, StoredSecret,
};
use pgyard_wire::backend::{Authentication, BackendMessage};
use pgyard_wire::frame::{decode_frame, Decoded};

const RANDOM: LoginRandom = LoginRandom {
    salt: [1, 2, 3, 4],
    nonce: [7; 18],
    mock_salt: [9; 16],
};

/// The authentication request in `out` (one frame).
fn request(out: &BytesMut) -> Authentication<'_> {
    let Ok(Decoded::Frame(f)) = decode_frame(out, 1 << 20) else {
        panic!("one whole frame expected, got {out:?}")
    };
    assert_eq!(f.wire_len(), out.len(), "exactly one frame");
    match BackendMessage::decode(f.tag, f.body) {
        Ok(BackendMessage::Authentication(a)) => a,
        other => panic!("an authentication request expected, got {other:?}"),
    }
}

fn sasl_initial(mechanism: &str, message: &[u8]) -> Vec<u8> {
    let mut body = mechanism.as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&(message.len() as i32).to_be_bytes());
    body.extend_from_slice(message);
    body
}

/// Runs a SCRAM login with `password` against `secret`; the verdict of the last message.
fn scram_login(secret: StoredSecret, password: &str) -> LoginStep {
    let mut out = BytesMut::new();
    let (mut login, step) = ServerLogin::start(secret, None, RANDOM, &mut out);
    assert_eq!(step, LoginStep::Continue);
    let Authentication::Sasl(mechs) = request(&out) else {
        panic!("SCRAM starts with AuthenticationSASL")
    };
    let mechs: Vec<Vec<u8>> = mechs.iter().map(<[u8]>::to_vec).collect();
    let mut client = ScramClient::new(password, ChannelBinding::Prefer, None, [3; 18]);
    let first = client
        .client_first(mechs.iter().map(Vec::as_slice))
        .expect("client-first");
    out.clear();
    let body = sasl_initial(first.mechanism.name(), &first.message);
    if login.password_message(&body, &mut out) != LoginStep::Continue {
        return LoginStep::Failed;
    }
    let Authentication::SaslContinue(server_first) = request(&out) else {
        panic!("server-first expected")
    };
    let client_final = client
        .handle_server_first(server_first)
        .expect("client-final");
    out.clear();
    let step = login.password_message(&client_final, &mut out);
    if step == LoginStep::Done {
        let Authentication::SaslFinal(server_final) = request(&out) else {
            panic!("server-final expected")
        };
        client
            .handle_server_final(server_final)
            .expect("the client accepts the server's signature");
    }
    step
}

#[test]
fn trust_needs_no_message() {
    let mut out = BytesMut::new();
    let (_, step) = ServerLogin::start(StoredSecret::Trust, None, RANDOM, &mut out);
    assert_eq!(step, LoginStep::Done);
    assert!(out.is_empty());
}

#[test]
fn md5_accepts_the_password_and_refuses_another() {
    for (password, expected) in [("s3cret", LoginStep::Done), ("wrong", LoginStep::Failed)] {
        let secret = StoredSecret::Md5(md5_secret("alice", "s3cret"));
        let mut out = BytesMut::new();
        let (mut login, _) = ServerLogin::start(secret, None, RANDOM, &mut out);
        let Authentication::Md5Password { salt } = request(&out) else {
            panic!("MD5 request expected")
        };
        assert_eq!(salt, RANDOM.salt);
        let body = md5_payload("alice", password, salt);
        assert_eq!(
            login.password_message(&body, &mut BytesMut::new()),
            expected
        );
    }
}

#[test]
fn scram_accepts_the_password_and_refuses_another() {
    let secret = || StoredSecret::Scram(scram_secret("s3cret", b"0123456789abcdef", 4));
    assert_eq!(scram_login(secret(), "s3cret"), LoginStep::Done);
    assert_eq!(scram_login(secret(), "wrong"), LoginStep::Failed);
}

#[test]
fn an_unknown_user_runs_the_whole_exchange_and_fails() {
    assert_eq!(scram_login(StoredSecret::Unknown, ""), LoginStep::Failed);
    assert_eq!(
        scram_login(StoredSecret::Unknown, "anything"),
        LoginStep::Failed
    );
}

#[test]
fn garbage_fails_and_the_login_stays_failed() {
    let secret = StoredSecret::Scram(scram_secret("pw", b"salt", 4));
    let mut out = BytesMut::new();
    let (mut login, _) = ServerLogin::start(secret, None, RANDOM, &mut out);
    assert_eq!(
        login.password_message(b"\xff\x00\x00", &mut out),
        LoginStep::Failed
    );
    assert_eq!(login.password_message(b"", &mut out), LoginStep::Failed);
}
