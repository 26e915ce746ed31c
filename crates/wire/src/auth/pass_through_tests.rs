//! Logging in with what a server-side login proved instead of the password: SCRAM keys
//! (PgBouncer's pass-through) and MD5 secrets.

use bytes::BytesMut;

use super::*;

const SALT: &[u8] = b"0123456789abcdef";

/// A client proves `password` to a [`ServerLogin`] over `secret`; returns what it proved.
fn prove(secret: StoredSecret, password: &str) -> Option<LoginSecret> {
    let random = LoginRandom {
        nonce: [4; NONCE_RAW_LEN],
        salt: [1, 2, 3, 4],
        mock_salt: [5; DEFAULT_SALT_LEN],
    };
    let mut out = BytesMut::new();
    let (mut login, mut step) = ServerLogin::start(secret, None, random, &mut out);
    let mut client = AuthClient::new(
        AuthConfig {
            user: "alice".into(),
            password: Some(password.as_bytes().to_vec()),
            ..AuthConfig::default()
        },
        [6; NONCE_RAW_LEN],
    );
    while step == LoginStep::Continue {
        let frame = out.split();
        // Each request the login writes is an 'R' frame: tag, length, body.
        let request = AuthRequest::decode(&frame[5..]).expect("a request");
        let AuthStep::Send(response) = client.handle_request(request).expect("client step") else {
            panic!("the client has nothing to send");
        };
        let body = match response {
            AuthResponse::Password(p) | AuthResponse::Sasl(p) => p,
            AuthResponse::SaslInitial { mechanism, data } => {
                let mut b = mechanism.name().as_bytes().to_vec();
                b.push(0);
                b.extend_from_slice(&(data.len() as i32).to_be_bytes());
                b.extend_from_slice(&data);
                b
            }
        };
        step = login.password_message(&body, &mut out);
    }
    assert_eq!(step, LoginStep::Done, "the password is right");
    login.proven().cloned()
}

/// An [`AuthClient`] holding only `secret` logs in to a SCRAM server storing `stored`.
fn scram_login(secret: LoginSecret, stored: ScramSecret) -> Result<AuthStep, AuthError> {
    let mut server = ScramServer::new(stored, None, [2; NONCE_RAW_LEN]);
    let config = AuthConfig {
        user: "alice".into(),
        secret: Some(secret),
        ..AuthConfig::default()
    };
    let mut client = AuthClient::new(config, [1; NONCE_RAW_LEN]);
    let mut body = 10i32.to_be_bytes().to_vec();
    for m in server.mechanisms() {
        body.extend_from_slice(m.as_bytes());
        body.push(0);
    }
    body.push(0);
    let AuthStep::Send(AuthResponse::SaslInitial { mechanism, data }) =
        client.handle_request(AuthRequest::decode(&body).expect("SASL"))?
    else {
        panic!("no initial response");
    };
    let sf = server
        .handle_client_first(mechanism.name().as_bytes(), &data)
        .expect("server-first");
    let AuthStep::Send(AuthResponse::Sasl(cf)) =
        client.handle_request(AuthRequest::SaslContinue(&sf))?
    else {
        panic!("no client-final");
    };
    let fin = server
        .handle_client_final(&cf)
        .map_err(|_| AuthError::NoPasswordSupplied)?;
    client.handle_request(AuthRequest::SaslFinal(&fin))?;
    client.handle_request(AuthRequest::Ok)
}

#[test]
fn a_scram_login_proves_the_keys_the_password_derives() {
    let stored = scram_secret("wonderland", SALT, 4096);
    let Some(LoginSecret::Scram(keys)) = prove(StoredSecret::Scram(stored.clone()), "wonderland")
    else {
        panic!("a SCRAM login proves SCRAM keys");
    };
    assert_eq!((keys.iterations, keys.salt.as_slice()), (4096, SALT));
    assert_eq!(keys.server_key, stored.server_key);
    let stored_key: [u8; KEY_LEN] = {
        use sha2::Digest;
        sha2::Sha256::digest(keys.client_key).into()
    };
    assert_eq!(
        stored_key, stored.stored_key,
        "H(ClientKey) is the StoredKey"
    );
    // The keys stay out of logs.
    let shown = format!("{keys:?}");
    assert!(
        !shown.contains(&format!("{:?}", keys.client_key)),
        "{shown}"
    );
}

#[test]
fn proven_keys_log_in_to_a_server_with_the_same_verifier_and_no_other() {
    let stored = scram_secret("wonderland", SALT, 4096);
    let proven = prove(StoredSecret::Scram(stored.clone()), "wonderland").expect("proved");
    assert_eq!(
        scram_login(proven.clone(), stored),
        Ok(AuthStep::Authenticated)
    );
    // The same password under another salt, or another iteration count, is another verifier.
    for other in [
        scram_secret("wonderland", b"another salt....", 4096),
        scram_secret("wonderland", SALT, 4097),
    ] {
        assert_eq!(
            scram_login(proven.clone(), other),
            Err(AuthError::Scram(ScramError::ForeignVerifier))
        );
    }
}

#[test]
fn an_md5_login_proves_the_secret_and_the_secret_answers_md5() {
    let secret = md5_secret("alice", "pw");
    let proven = prove(StoredSecret::Md5(secret.clone()), "pw");
    assert_eq!(proven, Some(LoginSecret::Md5(secret.clone())));
    let mut client = AuthClient::new(
        AuthConfig {
            user: "alice".into(),
            secret: proven,
            ..AuthConfig::default()
        },
        [0; NONCE_RAW_LEN],
    );
    let salt = [9, 8, 7, 6];
    let Ok(AuthStep::Send(AuthResponse::Password(payload))) =
        client.handle_request(AuthRequest::Md5Password { salt })
    else {
        panic!("an MD5 answer");
    };
    assert!(md5_verify(&secret, salt, &payload));
    assert_eq!(payload, md5_payload("alice", "pw", salt));
    // A secret never answers a cleartext request: that needs the password itself.
    let mut client = AuthClient::new(
        AuthConfig {
            secret: Some(LoginSecret::Md5(secret)),
            ..AuthConfig::default()
        },
        [0; NONCE_RAW_LEN],
    );
    assert_eq!(
        client.handle_request(AuthRequest::CleartextPassword),
        Err(AuthError::NoPasswordSupplied)
    );
}

#[test]
fn a_secret_of_the_other_kind_does_not_answer_and_a_password_wins() {
    let stored = scram_secret("pw", SALT, 2);
    assert_eq!(
        scram_login(LoginSecret::Md5(md5_secret("alice", "pw")), stored.clone()),
        Err(AuthError::NoPasswordSupplied)
    );
    let keys = ScramKeys {
        iterations: 2,
        salt: SALT.to_vec(),
        client_key: [0; KEY_LEN],
        server_key: [0; KEY_LEN],
    };
    let mut client = AuthClient::new(
        AuthConfig {
            secret: Some(LoginSecret::Scram(keys)),
            ..AuthConfig::default()
        },
        [0; NONCE_RAW_LEN],
    );
    assert_eq!(
        client.handle_request(AuthRequest::Md5Password { salt: [0; 4] }),
        Err(AuthError::NoPasswordSupplied)
    );
    // With both, the password answers (wrong keys would fail the proof otherwise).
    let mut server = ScramServer::new(stored, None, [2; NONCE_RAW_LEN]);
    let config = AuthConfig {
        user: "alice".into(),
        password: Some(b"pw".to_vec()),
        secret: Some(LoginSecret::Scram(ScramKeys {
            iterations: 2,
            salt: SALT.to_vec(),
            client_key: [7; KEY_LEN],
            server_key: [7; KEY_LEN],
        })),
        ..AuthConfig::default()
    };
    let mut client = AuthClient::new(config, [1; NONCE_RAW_LEN]);
    let body = {
        let mut b = 10i32.to_be_bytes().to_vec();
        b.extend_from_slice(SCRAM_SHA_256.as_bytes());
        b.extend_from_slice(&[0, 0]);
        b
    };
    let Ok(AuthStep::Send(AuthResponse::SaslInitial { data, .. })) =
        client.handle_request(AuthRequest::decode(&body).expect("SASL"))
    else {
        panic!("no initial response");
    };
    let sf = server
        .handle_client_first(SCRAM_SHA_256.as_bytes(), &data)
        .expect("server-first");
    let Ok(AuthStep::Send(AuthResponse::Sasl(cf))) =
        client.handle_request(AuthRequest::SaslContinue(&sf))
    else {
        panic!("no client-final");
    };
    assert!(
        server.handle_client_final(&cf).is_ok(),
        "the password proved it"
    );
}
