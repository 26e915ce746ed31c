//! The authentication machines against real PostgreSQL 18 servers (`pgyard_testkit::cluster`):
//! SCRAM-SHA-256 with the right and a wrong password, the stored verifier recomputed with
//! `scram_secret`, and MD5. The few message encoders needed are written here on purpose: the
//! crate's message module is not what is under test.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use pgyard_testkit::cluster::{Auth, Options, Primary};
use pgyard_wire::auth::{
    md5_payload, md5_secret, md5_verify, AuthClient, AuthConfig, AuthRequest, AuthResponse,
    AuthStep, ChannelBinding, Mechanism, ScramClient, ScramError, ScramSecret,
};

const SCRAM_PASSWORD: &str = "scram-pässword";
const MD5_PASSWORD: &str = "md5-password";

/// A raw protocol connection: StartupMessage out, typed messages in.
struct Conn {
    stream: TcpStream,
}

impl Conn {
    fn connect(port: u16) -> io::Result<Conn> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(20)))?;
        stream.set_write_timeout(Some(Duration::from_secs(20)))?;
        let mut conn = Conn { stream };
        let mut body = 196_608i32.to_be_bytes().to_vec(); // protocol 3.0
        body.extend_from_slice(b"user\0postgres\0database\0postgres\0\0");
        let mut msg = (body.len() as i32 + 4).to_be_bytes().to_vec();
        msg.extend_from_slice(&body);
        conn.stream.write_all(&msg)?;
        Ok(conn)
    }

    /// Reads one message: its type byte and body.
    fn read(&mut self) -> io::Result<(u8, Vec<u8>)> {
        let mut header = [0u8; 5];
        self.stream.read_exact(&mut header)?;
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]);
        assert!((4..1 << 20).contains(&len), "implausible length {len}");
        let mut body = vec![0; len as usize - 4];
        self.stream.read_exact(&mut body)?;
        Ok((header[0], body))
    }

    /// Sends a `'p'` message with `body`.
    fn send_p(&mut self, body: &[u8]) -> io::Result<()> {
        let mut msg = vec![b'p'];
        msg.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        msg.extend_from_slice(body);
        self.stream.write_all(&msg)
    }

    /// Reads an `'R'` message, failing the test on anything else (printing an ErrorResponse).
    fn read_auth(&mut self) -> Vec<u8> {
        let (tag, body) = self.read().expect("read");
        assert_eq!(
            tag,
            b'R',
            "expected 'R', got {:?}: {:?}",
            char::from(tag),
            fields(&body)
        );
        body
    }

    /// After AuthenticationOk: reads until ReadyForQuery and returns the message types seen.
    fn until_ready(&mut self) -> Vec<u8> {
        let mut seen = Vec::new();
        loop {
            let (tag, body) = self.read().expect("read");
            seen.push(tag);
            match tag {
                b'Z' => return seen,
                b'S' | b'K' | b'N' => {}
                other => panic!("unexpected {:?}: {:?}", char::from(other), fields(&body)),
            }
        }
    }

    /// Reads the next message, which must be an ErrorResponse; returns its fields.
    fn expect_error(&mut self) -> Vec<(u8, String)> {
        let (tag, body) = self.read().expect("read");
        assert_eq!(
            tag,
            b'E',
            "expected ErrorResponse, got {:?}",
            char::from(tag)
        );
        fields(&body)
    }
}

/// ErrorResponse/NoticeResponse fields.
fn fields(body: &[u8]) -> Vec<(u8, String)> {
    body.split(|&b| b == 0)
        .filter(|f| !f.is_empty())
        .map(|f| (f[0], String::from_utf8_lossy(&f[1..]).into_owned()))
        .collect()
}

fn sqlstate(fields: &[(u8, String)]) -> &str {
    fields
        .iter()
        .find(|(code, _)| *code == b'C')
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

fn sasl_initial_response(mechanism: Mechanism, data: &[u8]) -> Vec<u8> {
    let mut body = mechanism.name().as_bytes().to_vec();
    body.push(0);
    body.extend_from_slice(&(data.len() as i32).to_be_bytes());
    body.extend_from_slice(data);
    body
}

/// Runs the SCRAM client machine over a fresh connection. `Ok(messages)` after ReadyForQuery,
/// `Err(ErrorResponse fields)` when the server refuses the proof.
fn scram_login(port: u16, password: &str, nonce: [u8; 18]) -> Result<Vec<u8>, Vec<(u8, String)>> {
    let mut conn = Conn::connect(port).expect("connect");
    let body = conn.read_auth();
    let AuthRequest::Sasl(mechanisms) = AuthRequest::decode(&body).expect("decodes") else {
        panic!("expected AuthenticationSASL, got {body:?}");
    };
    let offered: Vec<&[u8]> = mechanisms.iter().collect();
    assert_eq!(
        offered,
        [b"SCRAM-SHA-256".as_slice()],
        "plaintext: no -PLUS"
    );

    let mut client = ScramClient::new(password, ChannelBinding::Prefer, None, nonce);
    let first = client
        .client_first(mechanisms.iter())
        .expect("client-first");
    assert_eq!(first.mechanism, Mechanism::ScramSha256);
    assert!(first.message.starts_with(b"n,,n=,r="));
    conn.send_p(&sasl_initial_response(first.mechanism, &first.message))
        .expect("send");

    let body = conn.read_auth();
    let AuthRequest::SaslContinue(server_first) = AuthRequest::decode(&body).expect("decodes")
    else {
        panic!("expected AuthenticationSASLContinue");
    };
    let client_final = client
        .handle_server_first(server_first)
        .expect("server-first accepted");
    conn.send_p(&client_final).expect("send");

    let (tag, body) = conn.read().expect("read");
    if tag == b'E' {
        return Err(fields(&body));
    }
    assert_eq!(tag, b'R');
    let AuthRequest::SaslFinal(server_final) = AuthRequest::decode(&body).expect("decodes") else {
        panic!("expected AuthenticationSASLFinal");
    };
    client
        .handle_server_final(server_final)
        .expect("server signature verified");
    assert!(client.is_complete());
    assert!(!client.is_channel_bound());
    let body = conn.read_auth();
    assert_eq!(AuthRequest::decode(&body), Ok(AuthRequest::Ok));
    Ok(conn.until_ready())
}

/// Runs the whole-phase driver over a fresh connection until ReadyForQuery.
fn driver_login(port: u16, config: AuthConfig) -> Result<Vec<u8>, String> {
    let mut conn = Conn::connect(port).expect("connect");
    let mut driver = AuthClient::new(config, *b"pgyard-driver-test");
    loop {
        let (tag, body) = conn.read().expect("read");
        if tag == b'E' {
            return Err(format!("server: {}", sqlstate(&fields(&body))));
        }
        assert_eq!(tag, b'R');
        let request = AuthRequest::decode(&body).expect("decodes");
        match driver.handle_request(request).map_err(|e| e.to_string())? {
            AuthStep::Send(AuthResponse::Password(body)) => conn.send_p(&body),
            AuthStep::Send(AuthResponse::SaslInitial { mechanism, data }) => {
                conn.send_p(&sasl_initial_response(mechanism, &data))
            }
            AuthStep::Send(AuthResponse::Sasl(data)) => conn.send_p(&data),
            AuthStep::Wait => Ok(()),
            AuthStep::Authenticated => return Ok(conn.until_ready()),
        }
        .expect("send");
    }
}

#[test]
fn scram_sha_256_against_postgresql_18() {
    let primary = Primary::start(
        Options::default()
            .auth(Auth::ScramSha256)
            .password(SCRAM_PASSWORD),
    )
    .expect("primary starts");
    let port = primary.port();

    // The right password: AuthenticationOk, then ReadyForQuery.
    let seen = scram_login(port, SCRAM_PASSWORD, *b"eighteen-raw-bytes").expect("login");
    assert_eq!(seen.last(), Some(&b'Z'));
    assert!(
        seen.contains(&b'K'),
        "BackendKeyData before ReadyForQuery: {seen:?}"
    );

    // The same password in another Unicode form is the same password after SASLprep
    // ("a" + U+0308 composes to "ä").
    let decomposed = SCRAM_PASSWORD.replace('ä', "a\u{0308}");
    assert_ne!(decomposed, SCRAM_PASSWORD);
    scram_login(port, &decomposed, [1; 18]).expect("login with the decomposed form");

    // A wrong password: the server refuses the proof with 28P01.
    let error = scram_login(port, "not-the-password", [2; 18]).expect_err("refused");
    assert_eq!(sqlstate(&error), "28P01", "{error:?}");

    // The stored verifier is exactly what scram_secret computes from its salt and count.
    let stored = primary
        .psql("select rolpassword from pg_authid where rolname = 'postgres'")
        .expect("psql");
    let secret = ScramSecret::parse(&stored).expect("stored verifier parses");
    assert_eq!(secret.iterations, 4096);
    assert_eq!(secret.salt.len(), 16);
    let recomputed =
        pgyard_wire::auth::scram_secret(SCRAM_PASSWORD, &secret.salt, secret.iterations);
    assert_eq!(recomputed.to_string(), stored);

    // The driver does the same exchange; channel_binding=require refuses a plaintext server.
    let config = |channel_binding| AuthConfig {
        user: "postgres".into(),
        password: Some(SCRAM_PASSWORD.as_bytes().to_vec()),
        channel_binding,
        tls_end_point: None,
        max_iterations: None,
        secret: None,
    };
    let seen = driver_login(port, config(ChannelBinding::Prefer)).expect("driver login");
    assert_eq!(seen.last(), Some(&b'Z'));
    assert_eq!(
        driver_login(port, config(ChannelBinding::Require)),
        Err(ScramError::ChannelBindingSslNotInUse.to_string())
    );
    let mut wrong = config(ChannelBinding::Disable);
    wrong.password = Some(b"nope".to_vec());
    assert_eq!(driver_login(port, wrong), Err("server: 28P01".into()));
}

#[test]
fn md5_against_postgresql_18() {
    let primary = Primary::start(Options::default().auth(Auth::Md5).password(MD5_PASSWORD))
        .expect("primary starts");
    let port = primary.port();

    // The stored secret is md5(password || user).
    let stored = primary
        .psql("select rolpassword from pg_authid where rolname = 'postgres'")
        .expect("psql");
    assert_eq!(stored, md5_secret("postgres", MD5_PASSWORD));

    // The right hash: AuthenticationOk, then ReadyForQuery.
    let mut conn = Conn::connect(port).expect("connect");
    let body = conn.read_auth();
    let AuthRequest::Md5Password { salt } = AuthRequest::decode(&body).expect("decodes") else {
        panic!("expected AuthenticationMD5Password, got {body:?}");
    };
    let payload = md5_payload("postgres", MD5_PASSWORD, salt);
    assert!(
        md5_verify(&stored, salt, &payload),
        "our server-side check agrees"
    );
    conn.send_p(&payload).expect("send");
    let body = conn.read_auth();
    assert_eq!(AuthRequest::decode(&body), Ok(AuthRequest::Ok));
    assert_eq!(conn.until_ready().last(), Some(&b'Z'));

    // A wrong password: 28P01.
    let mut conn = Conn::connect(port).expect("connect");
    let body = conn.read_auth();
    let AuthRequest::Md5Password { salt } = AuthRequest::decode(&body).expect("decodes") else {
        panic!("expected AuthenticationMD5Password");
    };
    conn.send_p(&md5_payload("postgres", "wrong", salt))
        .expect("send");
    let error = conn.expect_error();
    assert_eq!(sqlstate(&error), "28P01", "{error:?}");

    // The driver answers MD5 too.
    let config = AuthConfig {
        user: "postgres".into(),
        password: Some(MD5_PASSWORD.as_bytes().to_vec()),
        channel_binding: ChannelBinding::Prefer,
        tls_end_point: None,
        max_iterations: None,
        secret: None,
    };
    let seen = driver_login(port, config).expect("driver login");
    assert_eq!(seen.last(), Some(&b'Z'));
}
