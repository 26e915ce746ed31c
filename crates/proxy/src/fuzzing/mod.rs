//! The entry point of the `proxy_client` fuzz target and its corpus replay: a client session
//! driven by arbitrary bytes from both sides, with its invariants checked after every step.
//!
//! Input: the first byte picks the pool mode (bit 0), the password check (bit 1: trust or
//! an auth file with an MD5 user), TLS (bits 2 and 3: off, offered, or required), whether a
//! handshake agrees on ALPN `postgresql` (bit 4 clear) or on none, whether the auth
//! file's user is an admin user (bit 5), and peer authentication instead (bit 6: the
//! socket's owner is `u` with bit 1 clear, unknown with it set). Bit 7 turns on client
//! certificates: bits 2 and 3 then give off, offered, `verify-ca` or `verify-full`, and bit 6
//! the `cert` method in place of peer authentication. Then a sequence of
//! `[op][len][len bytes]` steps:
//! op % 7 is 0 client bytes, 1 server bytes, 2 a server lent (its settings from the bytes) —
//! or, while an admin command awaits the adapter, the adapter's reply (made from the bytes) —
//! 3 the server lost, 4 the pool refusing, 5 the clock at the bytes' value, 6 the client gone
//! (or, with `op / 7` odd, a KILL of its database). The database `off` is DISABLEd: no login
//! to it may pass.
//! A step that starts a TLS handshake also says which certificate the client shows, by
//! `op / 7 % 4`: none, one without a Common Name, one naming `u`, or one naming `U`. A login
//! that passes must have kept the certificate rules (`Checks::login`).
//!
//! With the `fuzzing` feature, `structured_session` is the structure-aware counterpart
//! (target `proxy_session`): well-formed requests and replies, judged against a reference
//! backend.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pgyard_types::Instant;
use pgyard_wire::auth::LoginRandom;
use pgyard_wire::frame::{decode_frame, Decoded};

use crate::admin::{AdminError, AdminReply, ClientRow, Snapshot};
use crate::client::{
    ClientAuth, ClientCert, ClientConfig, ClientOut, ClientSession, ClientTls, Lent, PoolMode,
    TlsMode,
};
use crate::pool::{ClientId, PoolKey, ServerId};
use crate::{AuthFile, Route};

#[cfg(feature = "fuzzing")]
mod backend;
#[cfg(feature = "fuzzing")]
mod structured;

#[cfg(all(feature = "fuzzing", feature = "planted-bugs"))]
pub use structured::structured_session_with_bug;
#[cfg(feature = "fuzzing")]
pub use structured::{structured_session, structured_session_without_faults, SessionOutcome};

/// The database every fuzzed session has DISABLEd.
const DISABLED: &str = "off";

/// Drives a client session with `data`; panics only when an invariant breaks.
pub fn client_session(data: &[u8]) {
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let (mut s, rules) = session(first);
    let mut check = Checks {
        rules,
        ..Checks::default()
    };
    let mut now = Instant(0);
    let mut next_server = 1;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (bytes, after) = tail.split_at(n);
        rest = after;
        match op % 7 {
            0 => s.handle_client_bytes(now, bytes),
            1 => s.handle_server_bytes(now, Bytes::copy_from_slice(bytes)),
            2 if check.admin_pending => {
                check.admin_pending = false;
                s.handle_admin(admin_reply(&s, bytes));
            }
            2 if check.lent.is_none() && check.acquiring => {
                s.handle_server(now, lent(next_server, bytes));
                check.lent = Some(ServerId(next_server));
                check.acquiring = false;
                next_server += 1;
            }
            3 => s.handle_server_gone(),
            4 if check.acquiring => {
                check.acquiring = false;
                // The op's quotient by 7 picks a server's own refusal, when the bytes are an
                // ErrorResponse's fields.
                let body = Bytes::copy_from_slice(bytes);
                match pgyard_wire::error_fields::OwnedErrorFields::decode(body) {
                    Ok(answer) if op / 7 % 2 == 1 => s.handle_refused_as(&answer),
                    _ => s.handle_refused("query_wait_timeout"),
                }
            }
            5 => {
                let ms = bytes
                    .iter()
                    .take(6)
                    .fold(0u64, |a, &b| a * 256 + u64::from(b));
                now = Instant(now.0.max(ms.saturating_mul(1_000_000)));
                s.handle_timeout(now);
            }
            // The op's quotient by 7 (free for this op) picks a KILL of the client's database.
            6 if op / 7 % 2 == 1 => {
                s.handle_kill();
                check.outputs(&mut s);
                // (A console that never asked the adapter anything is one all the same.)
                assert!(
                    s.is_admin() || (s.is_closed() && check.lent.is_none()),
                    "a KILLed client stays open or keeps its server"
                );
            }
            6 => s.handle_client_gone(),
            _ => {}
        }
        check.outputs(&mut s);
        if std::mem::take(&mut check.handshake) {
            let alpn = (first & 16 == 0).then_some(crate::client::ALPN_POSTGRESQL);
            let cert = shown_cert(*op);
            check.cert.clone_from(&cert);
            s.handle_tls_established_with_cert(alpn, cert);
            check.outputs(&mut s);
        }
        check.login(&s);
    }
}

/// The certificate a client shows at its handshake, chosen by the step that led to it: the
/// op byte's quotient by 7 (which the op itself ignores) picks none, one without a Common
/// Name, one naming `u`, or one naming `U` (names are compared exactly, so not `u`).
fn shown_cert(op: u8) -> Option<ClientCert> {
    let common_name = match op / 7 % 4 {
        0 => return None,
        1 => None,
        2 => Some("u"),
        _ => Some("U"),
    };
    Some(ClientCert {
        common_name: common_name.map(str::to_owned),
    })
}

/// What the proxy's certificate rules demand of a login that passes.
#[derive(Default)]
struct CertRules {
    /// It ran over TLS (`require` and the `verify-*` modes).
    tls: bool,
    /// The client showed a certificate (the `verify-*` modes, the `cert` method).
    cert: bool,
    /// Its Common Name is the user name (`verify-full`, the `cert` method).
    named: bool,
}

fn session(first: u8) -> (ClientSession, CertRules) {
    let certs = first & 128 != 0;
    let pool_mode = if first & 1 == 0 {
        PoolMode::Transaction
    } else {
        PoolMode::Session
    };
    let auth = if certs && first & 64 != 0 {
        ClientAuth::Cert
    } else if first & 64 != 0 {
        ClientAuth::Peer {
            os_user: (first & 2 == 0).then(|| "u".to_owned()),
        }
    } else if first & 2 == 0 {
        ClientAuth::Trust
    } else {
        let text = "\"u\" \"md5aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"\n";
        let file = AuthFile::parse(text, &mut pgyard_types::rng_from_seed(1));
        ClientAuth::File(Arc::new(file.unwrap_or_default()))
    };
    let by_cert = matches!(auth, ClientAuth::Cert);
    let config = ClientConfig {
        auth,
        pool_mode,
        default_route: Route::Primary,
        login_timeout: Duration::from_secs(60),
        databases: crate::client::Databases::Any,
        // Logins to `off` are refused (DISABLE), whatever the input.
        disabled: Arc::new([DISABLED.to_owned()].into()),
        // Bit 5: the auth file's user may open the admin console.
        admin_users: Arc::new(
            (first & 32 != 0)
                .then(|| "u".to_owned())
                .into_iter()
                .collect(),
        ),
        // Bits 4 and 5 both: nothing ignored, so every untracked setting goes into the
        // pool's options.
        ignore_startup_parameters: Arc::new(
            (first & 48 != 48)
                .then(|| "extra_float_digits".to_owned())
                .into_iter()
                .collect(),
        ),
    };
    let (key, random) = fixed_key_and_random();
    let mode = match (first & 12, certs) {
        (0, _) => TlsMode::Disable,
        (4, _) => TlsMode::Prefer,
        (8, true) => TlsMode::VerifyCa,
        (_, true) => TlsMode::VerifyFull,
        _ => TlsMode::Require,
    };
    let rules = CertRules {
        tls: matches!(
            mode,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull
        ),
        cert: matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyFull) || by_cert,
        named: mode == TlsMode::VerifyFull || by_cert,
    };
    let tls = ClientTls {
        mode,
        end_point: Some(Arc::from(&[5u8; 32][..])),
    };
    let s = ClientSession::new(Instant(0), ClientId(1), config, key, random).with_tls(tls);
    (s, rules)
}

/// The cancel key and login randomness of every fuzzed session: fixed, so that an input
/// replays exactly.
fn fixed_key_and_random() -> (crate::CancelKey, LoginRandom) {
    let key = crate::CancelKey {
        pid: 1,
        secret: vec![7; 32],
    };
    let random = LoginRandom {
        salt: [1; 4],
        nonce: [2; 18],
        mock_salt: [3; 16],
    };
    (key, random)
}

/// A lent server whose settings come from `bytes` (pairs of short texts).
fn lent(id: u64, bytes: &[u8]) -> Lent {
    let mut settings = crate::client::Settings::new();
    let names = crate::client::TRACKED;
    for (i, chunk) in bytes.chunks(3).enumerate() {
        let name = names[i % names.len()].to_owned();
        settings.insert(name, String::from_utf8_lossy(chunk).into_owned());
    }
    Lent {
        id: ServerId(id),
        settings,
        prepared: Default::default(),
    }
}

/// An adapter's reply made from `bytes`: done, a failure with their text, or a snapshot
/// with this session and a pool named by them.
fn admin_reply(s: &ClientSession, bytes: &[u8]) -> AdminReply {
    let text = String::from_utf8_lossy(bytes.get(1..).unwrap_or_default()).into_owned();
    match bytes.first().map_or(0, |b| b % 3) {
        0 => AdminReply::Done,
        1 => AdminReply::Failed(AdminError::pooler(text)),
        _ => {
            let (user, database) = s.identity();
            let client = ClientRow {
                id: s.id(),
                user: user.to_owned(),
                database: database.to_owned(),
                activity: s.activity(),
                addr: None,
                local: None,
                connect_time: Some(u64::from(bytes.len() as u32) << 30),
                request_time: None,
                wait: Duration::from_micros(bytes.len() as u64),
                // What the adapter would show of a TLS session (its text is not the machine's
                // concern, only that it is rendered).
                tls: s
                    .is_tls()
                    .then(|| "TLSv1.3/TLS_AES_128_GCM_SHA256".to_owned()),
                application_name: text.clone(),
                tag: s.tag().map(str::to_owned),
                options: s.server_options().to_owned(),
            };
            let pool = PoolKey {
                database: text.clone(),
                user: text.clone(),
                route: Route::Any,
                options: text,
            };
            AdminReply::Snapshot(Box::new(Snapshot {
                pool_mode: PoolMode::Transaction,
                paused: bytes.len().is_multiple_of(2),
                pools: vec![pool],
                clients: vec![client],
                servers: Vec::new(),
                retired: Default::default(),
                config: Vec::new(),
                databases: Vec::new(),
            }))
        }
    }
}

/// What the outputs so far allow.
#[derive(Default)]
struct Checks {
    lent: Option<ServerId>,
    acquiring: bool,
    closed: bool,
    /// An admin command was asked of the adapter: this is an admin session.
    admin: bool,
    /// An admin command awaits the adapter's reply.
    admin_pending: bool,
    /// Bytes sent to servers, kept to check the frames they hold.
    to_server: Vec<u8>,
    /// A handshake was asked for and is to be reported done.
    handshake: bool,
    /// Whether a handshake was ever asked for (at most once a connection).
    tls_started: bool,
    /// What a login that passes must have kept.
    rules: CertRules,
    /// The certificate the client showed at its handshake.
    cert: Option<ClientCert>,
    /// A login that passed was judged (once: what it was judged on cannot change after).
    login_judged: bool,
}

impl Checks {
    fn outputs(&mut self, s: &mut ClientSession) {
        while let Some(out) = s.poll_output() {
            // After Close only a server lent late (to an acquire the close overtook) goes back.
            let late_release = matches!(out, ClientOut::Release { .. });
            assert!(!self.closed || late_release, "output after Close: {out:?}");
            match out {
                ClientOut::ToClient(_) | ClientOut::Cancel { .. } => {}
                ClientOut::ToServer(b) => {
                    assert!(self.lent.is_some(), "bytes for a server none lent");
                    self.to_server.extend_from_slice(&b);
                    self.frames_to_server();
                }
                ClientOut::Admin(_) => {
                    assert!(
                        !self.admin_pending,
                        "a second admin request before the reply"
                    );
                    assert!(
                        self.lent.is_none() && !self.acquiring,
                        "admin with a server"
                    );
                    self.admin = true;
                    self.admin_pending = true;
                }
                ClientOut::Acquire(_) => {
                    assert!(!self.admin, "an admin session asked for a server");
                    assert!(self.lent.is_none() && !self.acquiring, "acquire twice");
                    self.acquiring = true;
                }
                ClientOut::Release { server, .. } => {
                    assert_eq!(Some(server.id), self.lent, "released a server not lent");
                    self.lent = None;
                    self.to_server.clear();
                }
                ClientOut::StartTls { .. } => {
                    assert!(!self.tls_started, "a second TLS handshake");
                    self.tls_started = true;
                    self.handshake = true;
                }
                ClientOut::Close => self.closed = true,
            }
        }
    }

    /// A login that passed kept the certificate rules: TLS where it is required, a
    /// certificate where one is, and one naming the user where the name is checked.
    fn login(&mut self, s: &ClientSession) {
        if self.login_judged || !s.activity().logged_in {
            return;
        }
        self.login_judged = true;
        let (user, database) = s.identity();
        assert!(
            s.is_admin() || database != DISABLED,
            "{user:?} logged in to the DISABLEd database"
        );
        let r = &self.rules;
        assert!(!r.tls || s.is_tls(), "{user:?} logged in without TLS");
        assert!(
            !r.cert || self.cert.is_some(),
            "{user:?} logged in without a certificate"
        );
        let named = self.cert.as_ref().and_then(|c| c.common_name.as_deref()) == Some(user);
        assert!(
            !r.named || named,
            "{user:?} logged in with certificate {:?}",
            self.cert
        );
    }

    /// No middleware message and no Terminate ever reaches a server.
    fn frames_to_server(&mut self) {
        let mut at = 0;
        while let Ok(Decoded::Frame(f)) = decode_frame(&self.to_server[at..], usize::MAX) {
            assert!(
                !matches!(f.tag, b'M' | b'X'),
                "a {} frame reached the server",
                char::from(f.tag)
            );
            at += 5 + f.body.len();
        }
        self.to_server.drain(..at);
    }
}
