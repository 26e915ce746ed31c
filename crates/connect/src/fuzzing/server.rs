//! The servers of the session fuzzer: each host is a well-formed PostgreSQL whose character
//! (role, version, authentication, refusals, encryption, protocol 3.2) the fuzzer's input
//! chooses, and every connection remembers what it told the client, so the checks can judge
//! the machine's verdict from the facts it was given.

use arbitrary::Unstructured;
use bytes::BytesMut;
use pgyard_wire::auth::{
    md5_secret, scram_secret, LoginRandom, LoginStep, ServerLogin, StoredSecret,
};
use pgyard_wire::backend::{
    encode_command_complete, encode_data_row, encode_ready_for_query, encode_row_description,
    Authentication, BackendKeyData, FieldDescription, ParameterStatus, TransactionStatus,
};
use pgyard_wire::error_fields::{encode_error_response, encode_notice_response};
use pgyard_wire::frame::{Decoded, FrameDecoder, Limits, ProtocolVersion, UnitRef};
use pgyard_wire::frontend::StartupPacket;

use super::pick;

/// The user and password in every generated connection string.
pub(super) const USER: &str = "u";
pub(super) const PASSWORD: &str = "pw";

/// What a server is when the client's startup reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Role {
    Primary,
    Standby,
    /// A primary with `default_transaction_read_only = on` (in maintenance).
    ReadOnlyPrimary,
}

impl Role {
    fn in_recovery(self) -> bool {
        self == Role::Standby
    }

    fn read_only(self) -> bool {
        self != Role::Primary
    }

    /// The role after a switchover or a maintenance flag change.
    fn flipped(self) -> Role {
        match self {
            Role::Primary => Role::Standby,
            Role::Standby | Role::ReadOnlyPrimary => Role::Primary,
        }
    }
}

/// How a server checks the password.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Auth {
    Trust,
    Md5,
    Scram,
    /// MD5 against another password's secret: the login fails with 28P01.
    WrongPassword,
}

/// A refusal at startup, before authentication.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    StartingUp,
    TooManyClients,
}

/// One host's server.
#[derive(Clone, Debug)]
pub(super) struct Persona {
    pub role: Role,
    /// The role changes between the reported parameters and the check query's answer.
    pub flips: bool,
    /// Older than 14: reports neither `in_hot_standby` nor `default_transaction_read_only`.
    pub old_version: bool,
    pub auth: Auth,
    pub refusal: Option<Refusal>,
    /// Answers SSLRequest with `S`.
    pub tls: bool,
    /// Accepts protocol 3.2 (else answers NegotiateProtocolVersion with 3.0).
    pub v32: bool,
    /// Sends a NOTICE before its first ReadyForQuery.
    pub notice: bool,
    /// Accepts connections and never answers.
    pub hangs: bool,
    /// What its TLS handshakes select by ALPN: `postgresql` (17 and later), nothing (older
    /// servers, TLS fronts), or another protocol.
    pub alpn: Option<&'static [u8]>,
    /// What its TLS handshakes report of client certificates.
    pub client_cert: crate::ClientCert,
}

impl Persona {
    /// Every choice's first option is the plain primary that lets the client in, so an
    /// exhausted input leaves healthy servers behind.
    /// A server may hang (accept and never answer) only where `connect_timeout` ends the wait.
    pub fn arbitrary(u: &mut Unstructured<'_>, may_hang: bool) -> Persona {
        let role = [Role::Primary, Role::Standby, Role::ReadOnlyPrimary][pick(u, 3)];
        let auth = [Auth::Trust, Auth::Md5, Auth::Scram, Auth::WrongPassword][pick(u, 4)];
        let refusal = [
            None,
            Some(Refusal::StartingUp),
            Some(Refusal::TooManyClients),
        ][pick(u, 3)];
        let flags = pick(u, 64);
        let alpn = [Some(&b"postgresql"[..]), None, Some(&b"http/1.1"[..])][pick(u, 3)];
        let client_cert = [
            crate::ClientCert::NotRequested,
            crate::ClientCert::NoneSent,
            crate::ClientCert::Sent,
        ][pick(u, 3)];
        Persona {
            role,
            flips: flags & 1 != 0,
            old_version: flags & 2 != 0,
            auth,
            refusal,
            tls: flags & 4 == 0,
            v32: flags & 8 == 0,
            notice: flags & 16 != 0,
            hangs: may_hang && flags & 32 != 0,
            alpn,
            client_cert,
        }
    }

    /// Whether a connection gets past startup and authentication.
    pub fn admits(&self) -> bool {
        self.refusal.is_none() && self.auth != Auth::WrongPassword && !self.hangs
    }

    /// Whether its refusal ends the whole connect, as libpq's does: every startup error but
    /// 57P03 (and a failed password) leaves the remaining hosts untried.
    pub fn aborts(&self) -> bool {
        let refused = match self.refusal {
            Some(Refusal::TooManyClients) => true,
            Some(Refusal::StartingUp) => false,
            None => self.auth == Auth::WrongPassword,
        };
        refused && !self.hangs
    }

    /// The role the check query sees.
    fn role_at_check(&self) -> Role {
        if self.flips {
            self.role.flipped()
        } else {
            self.role
        }
    }

    /// What the session check would learn, as [`Told`] would record it on a full login.
    pub fn facts(&self) -> Told {
        let reported = !self.old_version;
        let at_check = self.role_at_check();
        Told {
            hot_standby: reported.then_some(self.role.in_recovery()),
            default_read_only: reported.then_some(self.role == Role::ReadOnlyPrimary),
            show_read_only: Some(at_check.read_only()),
            in_recovery: Some(at_check.in_recovery()),
            ..Told::default()
        }
    }
}

/// What one connection told the client.
#[derive(Clone, Debug, Default)]
pub(super) struct Told {
    pub hot_standby: Option<bool>,
    pub default_read_only: Option<bool>,
    /// The answer to `SHOW transaction_read_only`, if asked.
    pub show_read_only: Option<bool>,
    /// The answer to `pg_is_in_recovery()`, if asked.
    pub in_recovery: Option<bool>,
    /// ParameterStatus sent, in order.
    pub params: Vec<(String, String)>,
    pub key: Option<(i32, Vec<u8>)>,
    pub version: Option<(u16, u16)>,
}

/// Bytes a connection answers with, and whether it closes after them.
#[derive(Default)]
pub(super) struct Reply {
    pub bytes: Vec<u8>,
    pub close: bool,
}

enum Phase {
    Startup,
    Login(Box<ServerLogin>),
    Ready,
}

/// The server side of one connection.
pub(super) struct Session {
    dec: FrameDecoder,
    phase: Phase,
    pid: i32,
    pub told: Told,
    /// A startup packet arrived.
    pub started: bool,
    /// An SSLRequest was answered `N`.
    pub refused_tls: bool,
}

impl Session {
    /// A connection to a server whose backends get process ids from `pid` on.
    pub fn new(pid: i32) -> Session {
        Session {
            dec: FrameDecoder::frontend(Limits::postgres_server()),
            phase: Phase::Startup,
            pid,
            told: Told::default(),
            started: false,
            refused_tls: false,
        }
    }

    /// Takes the client's bytes; anything a server would not accept ends the connection
    /// with the error a server sends.
    pub fn receive(&mut self, p: &Persona, data: &[u8]) -> Reply {
        let mut out = BytesMut::new();
        if p.hangs {
            return Reply::default();
        }
        self.dec.feed(data);
        let mut close = false;
        while !close {
            let step = match self.dec.decode_ref() {
                Ok(Decoded::Frame(UnitRef::Startup(body))) => Step::Startup(body.to_vec()),
                Ok(Decoded::Frame(UnitRef::Typed(f))) => Step::Typed(f.tag, f.body.to_vec()),
                Ok(Decoded::Frame(UnitRef::Byte(_))) | Err(_) => Step::Bad,
                Ok(Decoded::NeedMore { .. }) => break,
            };
            close = match step {
                Step::Startup(body) => self.startup(p, &body, &mut out),
                Step::Typed(tag, body) => self.typed(p, tag, &body, &mut out),
                Step::Bad => {
                    fatal(&mut out, b"08P01", b"invalid frontend message");
                    true
                }
            };
        }
        Reply {
            bytes: out.to_vec(),
            close,
        }
    }

    fn startup(&mut self, p: &Persona, body: &[u8], out: &mut BytesMut) -> bool {
        let version = match StartupPacket::decode(body) {
            Ok(StartupPacket::SslRequest) => {
                out.extend_from_slice(if p.tls { b"S" } else { b"N" });
                self.refused_tls |= !p.tls;
                return false;
            }
            Ok(StartupPacket::GssEncRequest) => {
                out.extend_from_slice(b"N");
                return false;
            }
            Ok(StartupPacket::Startup(m)) => m.version,
            Ok(StartupPacket::CancelRequest(_)) | Err(_) => return true,
        };
        self.started = true;
        match p.refusal {
            Some(Refusal::StartingUp) => {
                fatal(out, b"57P03", b"the database system is starting up");
                return true;
            }
            Some(Refusal::TooManyClients) => {
                fatal(out, b"53300", b"sorry, too many clients already");
                return true;
            }
            None => {}
        }
        let minor = if version == ProtocolVersion::V3_2 && p.v32 {
            2
        } else {
            if version != ProtocolVersion::V3_0 {
                negotiate_3_0(out);
            }
            0
        };
        self.told.version = Some((3, minor));
        let random = LoginRandom {
            salt: [9, 8, 7, 6],
            nonce: [5; 18],
            mock_salt: [4; 16],
        };
        let secret = match p.auth {
            Auth::Trust => StoredSecret::Trust,
            Auth::Md5 => StoredSecret::Md5(md5_secret(USER, PASSWORD)),
            Auth::WrongPassword => StoredSecret::Md5(md5_secret(USER, "another")),
            // Few iterations: a login costs microseconds, and the exchange is the same.
            Auth::Scram => StoredSecret::Scram(scram_secret(PASSWORD, &[3; 16], 16)),
        };
        match ServerLogin::start(secret, None, random, out) {
            (_, LoginStep::Done) => self.welcome(p, out),
            (login, _) => self.phase = Phase::Login(Box::new(login)),
        }
        false
    }

    fn typed(&mut self, p: &Persona, tag: u8, body: &[u8], out: &mut BytesMut) -> bool {
        match (&mut self.phase, tag) {
            (_, b'X') => true,
            (Phase::Login(login), b'p') => match login.password_message(body, out) {
                LoginStep::Continue => false,
                LoginStep::Done => {
                    self.welcome(p, out);
                    false
                }
                LoginStep::Failed => {
                    let text = format!("password authentication failed for user \"{USER}\"");
                    fatal(out, b"28P01", text.as_bytes());
                    true
                }
            },
            (Phase::Ready, b'Q') => {
                self.query(p, body, out);
                false
            }
            _ => {
                fatal(out, b"08P01", b"unexpected message");
                true
            }
        }
    }

    fn welcome(&mut self, p: &Persona, out: &mut BytesMut) {
        put(out, |b| Authentication::Ok.encode(b));
        let onoff = |v: bool| if v { "on" } else { "off" };
        let mut params = vec![
            (
                "server_version",
                if p.old_version { "13.2" } else { "18.1" },
            ),
            ("client_encoding", "UTF8"),
        ];
        if !p.old_version {
            params.push(("in_hot_standby", onoff(p.role.in_recovery())));
            let read_only = p.role == Role::ReadOnlyPrimary;
            params.push(("default_transaction_read_only", onoff(read_only)));
            self.told.hot_standby = Some(p.role.in_recovery());
            self.told.default_read_only = Some(read_only);
        }
        for (name, value) in params {
            let (name, value) = (name.as_bytes(), value.as_bytes());
            put(out, |b| ParameterStatus { name, value }.encode(b));
            let pair = (lossy(name), lossy(value));
            self.told.params.push(pair);
        }
        let key: Vec<u8> = match self.told.version {
            Some((3, 2)) => (0..32).map(|i| i as u8 ^ self.pid as u8).collect(),
            _ => self.pid.to_be_bytes().to_vec(),
        };
        let pid = self.pid;
        put(out, |b| BackendKeyData { pid, key: &key }.encode(b));
        self.told.key = Some((pid, key));
        if p.notice {
            let fields: [(u8, &[u8]); 3] = [(b'S', b"NOTICE"), (b'C', b"00000"), (b'M', b"hello")];
            put(out, |b| encode_notice_response(&fields, b));
        }
        self.phase = Phase::Ready;
        encode_ready_for_query(TransactionStatus::Idle, out);
    }

    fn query(&mut self, p: &Persona, body: &[u8], out: &mut BytesMut) {
        let sql = body.strip_suffix(&[0]).unwrap_or(body);
        let role = p.role_at_check();
        let (column, value, command): (&[u8], &[u8], &[u8]) = match sql {
            b"SHOW transaction_read_only" => {
                self.told.show_read_only = Some(role.read_only());
                let v: &[u8] = if role.read_only() { b"on" } else { b"off" };
                (b"transaction_read_only", v, b"SHOW")
            }
            b"SELECT pg_catalog.pg_is_in_recovery()" => {
                self.told.in_recovery = Some(role.in_recovery());
                let v: &[u8] = if role.in_recovery() { b"t" } else { b"f" };
                (b"pg_is_in_recovery", v, b"SELECT 1")
            }
            _ => (b"?column?", b"1", b"SELECT 1"),
        };
        let field = FieldDescription::text(column);
        put(out, |b| encode_row_description(&[field], b));
        put(out, |b| encode_data_row(&[Some(value)], b));
        put(out, |b| encode_command_complete(command, b));
        encode_ready_for_query(TransactionStatus::Idle, out);
    }
}

enum Step {
    Startup(Vec<u8>),
    Typed(u8, Vec<u8>),
    Bad,
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// NegotiateProtocolVersion naming 3.0 and no unrecognised options.
fn negotiate_3_0(out: &mut BytesMut) {
    out.extend_from_slice(b"v");
    out.extend_from_slice(&12u32.to_be_bytes());
    out.extend_from_slice(&ProtocolVersion::V3_0.0.to_be_bytes());
    out.extend_from_slice(&0u32.to_be_bytes());
}

fn fatal(out: &mut BytesMut, code: &[u8], message: &[u8]) {
    let fields: [(u8, &[u8]); 4] = [
        (b'S', b"FATAL"),
        (b'V', b"FATAL"),
        (b'C', code),
        (b'M', message),
    ];
    put(out, |b| encode_error_response(&fields, b));
}

/// Encodes a message the server builds itself; these are all well-formed, so an error here
/// is a bug in the codec and must stop the run.
fn put<E: std::fmt::Debug>(out: &mut BytesMut, f: impl FnOnce(&mut BytesMut) -> Result<(), E>) {
    if let Err(e) = f(out) {
        panic!("a well-formed server message failed to encode: {e:?}");
    }
}
