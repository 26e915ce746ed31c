//! What the client-session tests share: a trusting session, its outputs, and the bytes and
//! servers among them.

use std::time::Duration;

use pgyard_proxy::{
    CancelKey, ClientAuth, ClientConfig, ClientId, ClientOut, ClientSession, Lent, PoolMode,
};
use pgyard_types::Instant;
use pgyard_wire::auth::LoginRandom;

/// The clock of every test: nothing here waits.
pub const T0: Instant = Instant(0);

/// A trusting client session in `mode`, before its startup packet.
pub fn session(mode: PoolMode) -> ClientSession {
    session_with(mode, ClientAuth::Trust)
}

/// A client session in `mode` that checks passwords with `auth`, before its startup packet.
pub fn session_with(mode: PoolMode, auth: ClientAuth) -> ClientSession {
    session_configured(ClientConfig {
        login_timeout: Duration::from_secs(5),
        databases: pgyard_proxy::Databases::Any,
        ..ClientConfig::new(auth, mode)
    })
}

/// A client session under `config`, before its startup packet.
pub fn session_configured(config: ClientConfig) -> ClientSession {
    let key = CancelKey {
        pid: 77,
        secret: vec![9; 32],
    };
    let random = LoginRandom {
        salt: [1; 4],
        nonce: [2; 18],
        mock_salt: [3; 16],
    };
    ClientSession::new(T0, ClientId(1), config, key, random)
}

/// Everything the session asks for now.
pub fn outputs(s: &mut ClientSession) -> Vec<ClientOut> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

/// The bytes `out` sends to the server, joined.
#[allow(dead_code)] // not every test binary reads them
pub fn sent_to_server(out: &[ClientOut]) -> Vec<u8> {
    joined(out, |o| match o {
        ClientOut::ToServer(b) => Some(b),
        _ => None,
    })
}

/// The bytes `out` sends to the client, joined.
#[allow(dead_code)] // not every test binary reads them
pub fn sent_to_client(out: &[ClientOut]) -> Vec<u8> {
    joined(out, |o| match o {
        ClientOut::ToClient(b) => Some(b),
        _ => None,
    })
}

#[allow(dead_code)] // not every test binary reads them
fn joined(out: &[ClientOut], pick: impl Fn(&ClientOut) -> Option<&bytes::Bytes>) -> Vec<u8> {
    out.iter()
        .filter_map(pick)
        .flat_map(|b| b.iter().copied())
        .collect()
}

/// The server `out` gives back, if any.
#[allow(dead_code)] // not every test binary reads it
pub fn released(out: Vec<ClientOut>) -> Option<Lent> {
    out.into_iter().find_map(|o| match o {
        ClientOut::Release { server, .. } => Some(server),
        _ => None,
    })
}

/// A server lent with `pairs` as its reported settings.
#[allow(dead_code)] // not every test binary lends by hand
pub fn server(id: u64, pairs: &[(&str, &str)]) -> Lent {
    Lent {
        id: pgyard_proxy::ServerId(id),
        settings: pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<pgyard_proxy::client::Settings>(),
        prepared: Default::default(),
    }
}

/// A simple Query message.
#[allow(dead_code)] // not every test binary sends one
pub fn query(sql: &str) -> Vec<u8> {
    let mut b = bytes::BytesMut::new();
    pgyard_wire::frontend::encode_query(sql.as_bytes(), &mut b).expect("query");
    b.to_vec()
}

/// What a server answers to the proxy's alignment (a Query of `SET name TO 'value';`
/// statements): a `SET` tag each, a ParameterStatus for each value as `spell` writes it (a
/// server reports its own spelling), and ReadyForQuery `I`.
#[allow(dead_code)] // not every test binary aligns
pub fn answer_alignment(query: &[u8], spell: impl Fn(&str, &str) -> String) -> bytes::Bytes {
    use pgyard_wire::backend;
    let sql = String::from_utf8_lossy(&query[5..query.len() - 1]).into_owned();
    let mut b = bytes::BytesMut::new();
    let mut reports = Vec::new();
    for statement in sql.split(';').filter(|s| !s.is_empty()) {
        let (name, literal) = statement
            .strip_prefix("SET ")
            .and_then(|s| s.split_once(" TO "))
            .expect("an alignment statement");
        let value = literal.trim_matches('\'').replace("''", "'");
        backend::encode_command_complete(b"SET", &mut b).expect("C");
        reports.push((name.to_owned(), spell(name, &value)));
    }
    for (name, value) in reports {
        backend::ParameterStatus {
            name: name.as_bytes(),
            value: value.as_bytes(),
        }
        .encode(&mut b)
        .expect("S");
    }
    backend::encode_ready_for_query(backend::TransactionStatus::Idle, &mut b);
    b.freeze()
}

/// A client of `mode` that sent `extra` beside user `alice` and database `app` in its
/// StartupMessage, waiting for its welcome server.
#[allow(dead_code)] // not every test binary logs in by hand
pub fn starting(mode: PoolMode, extra: &[(&[u8], &[u8])]) -> ClientSession {
    let mut s = session(mode);
    let out = start(&mut s, extra);
    assert!(matches!(&out[..], [ClientOut::Acquire(_)]), "{out:?}");
    s
}

/// Sends `s` alice's StartupMessage for `app` with `extra` beside; what it asks for then.
#[allow(dead_code)] // not every test binary logs in by hand
pub fn start(s: &mut ClientSession, extra: &[(&[u8], &[u8])]) -> Vec<ClientOut> {
    let mut params: Vec<(&[u8], &[u8])> = vec![(b"user", b"alice"), (b"database", b"app")];
    params.extend_from_slice(extra);
    let mut b = bytes::BytesMut::new();
    pgyard_wire::frontend::encode_startup(
        pgyard_wire::frame::ProtocolVersion::V3_0,
        &params,
        &mut b,
    )
    .expect("startup");
    s.handle_client_bytes(T0, &b);
    outputs(s)
}

/// What PostgreSQL answers a query string of `sets` statements: a CommandComplete each, then
/// (before ReadyForQuery, where it reports what changed) each changed setting's new value.
#[allow(dead_code)] // not every test binary answers SETs
pub fn set_reply(sets: usize, changed: &[(&[u8], &[u8])]) -> bytes::Bytes {
    use pgyard_wire::backend;
    let mut b = bytes::BytesMut::new();
    for _ in 0..sets {
        backend::encode_command_complete(b"SET", &mut b).expect("C");
    }
    for &(name, value) in changed {
        backend::ParameterStatus { name, value }
            .encode(&mut b)
            .expect("S");
    }
    backend::encode_ready_for_query(backend::TransactionStatus::Idle, &mut b);
    b.freeze()
}

/// The session's outputs once a server was lent for its welcome, the server's answer given
/// first to the alignment the welcome waits for when the server's settings differ from what
/// the client will be shown.
#[allow(dead_code)] // not every test binary welcomes by hand
pub fn welcome_outputs(s: &mut ClientSession) -> Vec<ClientOut> {
    let out = outputs(s);
    if let [ClientOut::ToServer(set)] = &out[..] {
        s.handle_server_bytes(T0, answer_alignment(set, |_, v| v.to_owned()));
        return outputs(s);
    }
    out
}
