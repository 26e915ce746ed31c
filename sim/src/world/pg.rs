//! Simulated PostgreSQL nodes speaking the real protocol through pgyard-wire's server side:
//! encryption requests, startup, trust/MD5/SCRAM authentication with real verifiers, the
//! parameters a server reports, the two session-check queries, and the refusals a server
//! gives while starting up, shutting down, or full. A node may run with
//! `default_transaction_read_only = on` (a primary in maintenance), and a role change may be
//! armed to land right after a login, between the ParameterStatus the server sent and the
//! check query the client asks next.

use bytes::BytesMut;
use pgyard_types::{Rng, RngCore};
use pgyard_wire::auth::{
    md5_secret, scram_secret, LoginRandom, LoginStep, ScramSecret, ServerLogin, StoredSecret,
};
use pgyard_wire::backend::{
    encode_command_complete, encode_data_row, encode_negotiate_protocol_version,
    encode_ready_for_query, encode_row_description, Authentication, BackendKeyData,
    FieldDescription, ParameterStatus, TransactionStatus,
};
use pgyard_wire::error_fields::{encode_error_response, encode_notice_response};
use pgyard_wire::frame::{Decoded, FrameDecoder, Limits, ProtocolVersion, UnitRef};
use pgyard_wire::frontend::{StartupMessage, StartupPacket};

use crate::trace::{write_pieces, Piece};

/// The user every simulated client logs in as.
pub const USER: &str = "sim";
/// The password every simulated server stores a verifier for.
pub const PASSWORD: &str = "sim-secret";

/// What a serving node is: the primary or a standby.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read-write, not in recovery.
    Primary,
    /// A hot standby, in recovery.
    Standby,
}

/// What a node currently is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Accepting sessions as a primary.
    Primary,
    /// Accepting sessions as a hot standby.
    Standby,
    /// A standby being promoted: still in recovery until the promotion completes.
    Promoting,
    /// Starting up: refuses sessions with 57P03 and serves as `then` afterwards.
    StartingUp {
        /// The role it comes up in.
        then: Role,
    },
    /// Shutting down: refuses sessions with 57P03.
    ShuttingDown,
    /// The process is gone: connections are refused.
    Crashed,
}

impl From<Role> for NodeState {
    fn from(role: Role) -> Self {
        match role {
            Role::Primary => NodeState::Primary,
            Role::Standby => NodeState::Standby,
        }
    }
}

impl std::fmt::Debug for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

impl NodeState {
    /// How traces print the state (its `Debug` text). The trace hash pins it: a starting
    /// node prints as it did when it carried a `standby` flag instead of a role.
    pub fn text(self) -> &'static str {
        match self {
            NodeState::Primary => "Primary",
            NodeState::Standby => "Standby",
            NodeState::Promoting => "Promoting",
            NodeState::StartingUp {
                then: Role::Standby,
            } => "StartingUp { standby: true }",
            NodeState::StartingUp {
                then: Role::Primary,
            } => "StartingUp { standby: false }",
            NodeState::ShuttingDown => "ShuttingDown",
            NodeState::Crashed => "Crashed",
        }
    }

    /// Whether `pg_is_in_recovery()` would say true.
    pub fn in_recovery(self) -> bool {
        matches!(self, NodeState::Standby | NodeState::Promoting)
    }

    /// Whether the node accepts sessions at all.
    pub fn serving(self) -> bool {
        matches!(
            self,
            NodeState::Primary | NodeState::Standby | NodeState::Promoting
        )
    }
}

/// A role change armed to land right after the node's next login has sent its
/// ParameterStatus and ReadyForQuery: the client's check query, if it asks one, already sees
/// the new role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flip {
    /// A standby's (or promoting node's) promotion completes.
    Promote,
    /// `default_transaction_read_only` is set (on) or reset (off) and reloaded.
    ReadOnly(bool),
}

impl Flip {
    /// How traces print it.
    pub fn text(self) -> &'static str {
        match self {
            Flip::Promote => "promote",
            Flip::ReadOnly(true) => "read-only on",
            Flip::ReadOnly(false) => "read-only off",
        }
    }
}

/// What a session's check reads of its server: the recovery state and
/// `default_transaction_read_only` as they were when the server last sent ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoleSeen {
    /// `pg_is_in_recovery()` (a 14+ server reports it as `in_hot_standby`).
    pub in_recovery: bool,
    /// `default_transaction_read_only`: with recovery it makes `transaction_read_only`.
    pub read_only: bool,
}

impl RoleSeen {
    /// What `SHOW transaction_read_only` says: on in recovery or when read-only by default.
    pub fn transaction_read_only(self) -> bool {
        self.in_recovery || self.read_only
    }
}

/// How a node authenticates.
#[derive(Clone, Debug)]
pub enum Auth {
    /// `trust`.
    Trust,
    /// `md5` with the stored `md5…` secret.
    Md5(String),
    /// `scram-sha-256` with the stored verifier.
    Scram(ScramSecret),
}

/// What a server does with a middleware (`M`) message that reaches it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MiddlewareStance {
    /// A real server: unknown message type, FATAL 08P01, connection closed.
    Reject,
    /// The proposal: ignore it.
    Ignore,
    /// The proposal with a debug NOTICE.
    Notice,
}

/// One simulated PostgreSQL server.
#[derive(Clone, Debug)]
pub struct Node {
    /// Display name (`pg0`).
    pub name: String,
    /// Current state.
    pub state: NodeState,
    /// Reports neither `in_hot_standby` nor `default_transaction_read_only` (pre-14).
    pub old_version: bool,
    /// What it reports as `server_version`; `None` for 18.1, or 13.2 when old.
    pub version: Option<&'static str>,
    /// `default_transaction_read_only = on`: a primary so configured is read-only but still
    /// a primary (libpq's `read-only` and `primary` both accept it).
    pub read_only: bool,
    /// A role change that lands right after the next login (see [`Flip`]).
    pub pending_flip: Option<Flip>,
    /// Answers SSLRequest with `S` (and takes direct TLS).
    pub tls: bool,
    /// A TLS front or a man in the middle that sends plaintext right after the `S`, in the
    /// same segment (CVE-2021-23222): bytes the client must refuse rather than read as if
    /// they came through TLS.
    pub stuffs_after_ssl: bool,
    /// What its TLS handshakes select by ALPN: `postgresql` from PostgreSQL 17 on, nothing from
    /// older servers or a TLS front that does not negotiate it, or another protocol entirely.
    pub alpn: Option<&'static [u8]>,
    /// Authentication method and stored secret.
    pub auth: Auth,
    /// `max_connections` (sessions past it get 53300).
    pub max_sessions: u32,
    /// Sessions currently past startup.
    pub sessions: u32,
    /// Half-open: accepts connections and never answers (fault).
    pub hang: bool,
    /// Replication lag of a standby: how long a promotion must replay first.
    pub lag_ms: u64,
    /// What an `M` message does here.
    pub middleware: MiddlewareStance,
    /// The `TimeZone` its logins report, as every real server's do. Only the `proxy` world's
    /// nodes report it (its clients change theirs); the other worlds never read it, and their
    /// traces stay as they were.
    pub zone: Option<&'static str>,
    /// The `search_path` its logins report (PostgreSQL 18 reports it); the `proxy` world's
    /// nodes only, as with `zone`.
    pub path: Option<&'static str>,
    /// `M` messages that reached this server (must stay 0 for `Reject` servers).
    pub middleware_seen: u64,
    next_pid: i32,
}

impl Node {
    /// A node with `auth_kind` 0 trust, 1 MD5, 2 SCRAM (`iterations` small, as a simulated
    /// server may store it, so a login costs microseconds).
    pub fn new(
        name: String,
        state: NodeState,
        auth_kind: u64,
        iterations: u32,
        rng: &mut Rng,
    ) -> Self {
        let auth = match auth_kind {
            0 => Auth::Trust,
            1 => Auth::Md5(md5_secret(USER, PASSWORD)),
            _ => {
                let mut salt = [0u8; 16];
                rng.fill_bytes(&mut salt);
                Auth::Scram(scram_secret(PASSWORD, &salt, iterations))
            }
        };
        Node {
            name,
            state,
            old_version: false,
            version: None,
            read_only: false,
            pending_flip: None,
            tls: false,
            stuffs_after_ssl: false,
            alpn: Some(b"postgresql"),
            auth,
            max_sessions: 100,
            sessions: 0,
            hang: false,
            lag_ms: 0,
            zone: None,
            path: None,
            middleware: MiddlewareStance::Reject,
            middleware_seen: 0,
            next_pid: 1000,
        }
    }

    /// What its logins report as `server_version`.
    pub fn server_version(&self) -> &'static str {
        let default = if self.old_version { "13.2" } else { "18.1" };
        self.version.unwrap_or(default)
    }

    /// The role a session's check would read now.
    pub fn seen(&self) -> RoleSeen {
        RoleSeen {
            in_recovery: self.state.in_recovery(),
            read_only: self.read_only,
        }
    }

    /// Applies a role change (a promotion of a node that is not in recovery does nothing).
    pub fn flip(&mut self, flip: Flip) {
        match flip {
            Flip::Promote if self.state.in_recovery() => self.state = NodeState::Primary,
            Flip::Promote => {}
            Flip::ReadOnly(on) => self.read_only = on,
        }
    }

    /// Short description for traces.
    pub fn describe(&self) -> impl std::fmt::Display + '_ {
        NodeText(self)
    }

    /// The trace line of the node, `prefix` first, as pieces (the text of
    /// [`Node::describe`]).
    pub fn describe_pieces<'a>(&'a self, prefix: &'a str) -> [Piece<'a>; 21] {
        let auth = match self.auth {
            Auth::Trust => "trust",
            Auth::Md5(_) => "md5",
            Auth::Scram(_) => "scram",
        };
        [
            Piece::Text(prefix),
            Piece::Text(&self.name),
            Piece::Text(" "),
            Piece::Text(self.state.text()),
            Piece::Text(" auth="),
            Piece::Text(auth),
            Piece::from(" tls="),
            Piece::from(self.tls),
            Piece::from(" stuff="),
            Piece::from(self.stuffs_after_ssl),
            Piece::from(" old="),
            Piece::from(self.old_version),
            Piece::Text(" v="),
            Piece::Text(self.server_version()),
            Piece::from(" ro="),
            Piece::from(self.read_only),
            Piece::from(" max="),
            Piece::from(self.max_sessions),
            Piece::from(" lag="),
            Piece::from(self.lag_ms),
            Piece::Text("ms"),
        ]
    }
}

/// Where a server-side session is.
#[derive(Debug)]
enum Phase {
    Startup,
    Login(Box<ServerLogin>),
    Ready,
    Gone,
}

/// The server side of one connection.
#[derive(Debug)]
pub struct Session {
    dec: FrameDecoder,
    phase: Phase,
    counted: bool,
    /// The node's role when it last answered ReadyForQuery (the moment a client's session
    /// check reads, from the login's ParameterStatus or from a check query): `None` before
    /// the first.
    pub seen_at_check: Option<RoleSeen>,
    /// The server sent 57P03.
    pub sent_cannot_connect_now: bool,
    /// The SQLSTATE of the FATAL error this session sent, if it sent one.
    pub fatal: Option<[u8; 5]>,
    /// Queries answered after startup.
    pub queries: u64,
    /// Whether the login reported `in_hot_standby` and `default_transaction_read_only`.
    reported_role: bool,
    /// Session-check queries received although the login reported what they ask (libpq
    /// sends none to a server that reports both settings).
    pub needless_checks: u64,
    /// Notices sent for middleware messages.
    pub notices: u64,
    /// The StartupMessage as received (version and parameters), until the world judges it.
    pub startup_seen: Option<StartupSeen>,
    /// The protocol version the session runs (the client's, or the server's newest when it
    /// negotiated down); set at the StartupMessage.
    pub protocol: Option<ProtocolVersion>,
    /// The version a NegotiateProtocolVersion offered, until the world passes it on.
    pub negotiated: Option<ProtocolVersion>,
    /// ReadyForQuery messages sent (the end of startup, then one per query).
    pub readies: u32,
    /// A well-formed Terminate (`X`, length 4) arrived.
    pub terminated: bool,
    /// The server's first authentication message (a request, or AuthenticationOk for trust)
    /// went out, until the world passes it on.
    pub auth_began: bool,
    /// Plaintext followed its `S`, until the world passes it on.
    pub stuffed: bool,
    /// What its login told the client: each ParameterStatus, then the backend key.
    pub told: Option<Told>,
}

/// What a login told the client about the session it opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Told {
    /// The ParameterStatus messages, in order.
    pub params: Vec<(&'static str, &'static str)>,
    /// BackendKeyData's process id.
    pub pid: i32,
    /// BackendKeyData's secret key.
    pub key: Vec<u8>,
}

/// A StartupMessage as a server received it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupSeen {
    /// The version word.
    pub version: ProtocolVersion,
    /// The parameters as sent, `name\0value\0` each (one buffer: every login keeps one).
    raw: Vec<u8>,
}

impl StartupSeen {
    /// The (name, value) pairs, in the order sent.
    pub fn params(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let mut parts = self.raw.split(|&b| b == 0);
        std::iter::from_fn(move || Some((parts.next()?, parts.next()?)))
    }
}

/// What a session answers to bytes.
#[derive(Debug, Default)]
pub struct Reply {
    /// Bytes to send back.
    pub bytes: Vec<u8>,
    /// Close the connection after sending.
    pub close: bool,
}

impl Default for Session {
    fn default() -> Self {
        Self::new()
    }
}

impl Session {
    /// A fresh connection, reading startup packets.
    pub fn new() -> Self {
        Session {
            dec: FrameDecoder::frontend(Limits::postgres_server()),
            phase: Phase::Startup,
            counted: false,
            seen_at_check: None,
            sent_cannot_connect_now: false,
            fatal: None,
            queries: 0,
            reported_role: false,
            needless_checks: 0,
            notices: 0,
            startup_seen: None,
            protocol: None,
            negotiated: None,
            readies: 0,
            terminated: false,
            auth_began: false,
            stuffed: false,
            told: None,
        }
    }

    /// The connection ends (either side): releases the node's session slot.
    pub fn end(&mut self, node: &mut Node) {
        if self.counted {
            node.sessions = node.sessions.saturating_sub(1);
            self.counted = false;
        }
        self.phase = Phase::Gone;
    }

    /// Ends the session with a FATAL error, remembering its code.
    fn refuse(&mut self, out: &mut BytesMut, code: &[u8; 5], message: &[u8]) {
        self.fatal = Some(*code);
        fatal(out, code, message);
    }

    /// Feeds bytes from the client; `rng` supplies salts and nonces.
    pub fn receive(&mut self, node: &mut Node, data: &[u8], rng: &mut Rng) -> Reply {
        let mut out = BytesMut::with_capacity(256);
        let mut close = false;
        // The decoder is taken out while its frames are read, so a frame's body can be
        // handled in place (the placeholder costs no allocation).
        let mut dec = std::mem::replace(
            &mut self.dec,
            FrameDecoder::frontend(Limits::postgres_server()),
        );
        dec.feed(data);
        while !close {
            let unit = match dec.decode_ref() {
                Ok(Decoded::Frame(u)) => u,
                Ok(Decoded::NeedMore { .. }) => break,
                Err(_) => {
                    self.refuse(&mut out, b"08P01", b"invalid frontend message");
                    close = true;
                    break;
                }
            };
            match unit {
                UnitRef::Startup(body) => match StartupPacket::decode(body) {
                    Ok(StartupPacket::SslRequest) => {
                        out.extend_from_slice(if node.tls { b"S" } else { b"N" });
                        if node.tls && node.stuffs_after_ssl {
                            // What an attacker would most like the client to believe.
                            put(&mut out, |b| Authentication::Ok.encode(b));
                            self.stuffed = true;
                        }
                    }
                    Ok(StartupPacket::GssEncRequest) => out.extend_from_slice(b"N"),
                    Ok(StartupPacket::Startup(msg)) => {
                        let (p, c) = start_session(self, node, &msg, &mut out, rng);
                        self.phase = p;
                        close = c;
                    }
                    Ok(StartupPacket::CancelRequest(_)) | Err(_) => close = true,
                },
                UnitRef::Byte(_) => close = true,
                UnitRef::Typed(f) => close = self.typed(node, f.tag, f.body, &mut out, rng),
            }
        }
        self.dec = dec;
        if close {
            self.end(node);
        }
        Reply {
            bytes: Vec::from(out),
            close,
        }
    }

    fn typed(
        &mut self,
        node: &mut Node,
        tag: u8,
        body: &[u8],
        out: &mut BytesMut,
        rng: &mut Rng,
    ) -> bool {
        if tag == b'X' {
            // PostgreSQL ends the backend on any `X`; the world notes whether it was the
            // 4-byte message libpq sends.
            self.terminated = body.is_empty();
            return true;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Gone);
        match (phase, tag) {
            (Phase::Login(mut login), b'p') => match login.password_message(body, out) {
                LoginStep::Continue => {
                    self.phase = Phase::Login(login);
                    false
                }
                LoginStep::Done => {
                    self.finish_startup(node, out);
                    false
                }
                LoginStep::Failed => {
                    self.refuse(
                        out,
                        b"28P01",
                        b"password authentication failed for user \"sim\"",
                    );
                    true
                }
            },
            (Phase::Ready, b'Q') => {
                self.phase = Phase::Ready;
                self.query(node, body, out);
                false
            }
            (Phase::Ready, b'M') => {
                self.phase = Phase::Ready;
                node.middleware_seen += 1;
                match node.middleware {
                    MiddlewareStance::Reject => {
                        self.refuse(out, b"08P01", b"invalid frontend message type 77");
                        true
                    }
                    MiddlewareStance::Ignore => false,
                    MiddlewareStance::Notice => {
                        self.notices += 1;
                        put(out, |b| {
                            encode_notice_response(
                                &[
                                    (b'S', b"DEBUG"),
                                    (b'C', b"00000"),
                                    (b'M', b"middleware message ignored"),
                                ],
                                b,
                            )
                        });
                        false
                    }
                }
            }
            (Phase::Ready, _) => {
                self.refuse(out, b"08P01", b"invalid frontend message type");
                true
            }
            _ => {
                self.refuse(out, b"08P01", b"unexpected message during authentication");
                let _ = rng;
                true
            }
        }
    }

    fn query(&mut self, node: &Node, body: &[u8], out: &mut BytesMut) {
        self.queries += 1;
        let sql = body.strip_suffix(&[0]).unwrap_or(body);
        let recovery = node.state.in_recovery();
        let read_only = node.seen().transaction_read_only();
        let check = matches!(
            sql,
            b"SHOW transaction_read_only" | b"SELECT pg_catalog.pg_is_in_recovery()"
        );
        if check && self.reported_role {
            self.needless_checks += 1;
        }
        let (column, value, command): (&[u8], &[u8], &[u8]) = match sql {
            b"SHOW transaction_read_only" => (
                b"transaction_read_only",
                if read_only { b"on" } else { b"off" },
                b"SHOW",
            ),
            b"SELECT pg_catalog.pg_is_in_recovery()" => (
                b"pg_is_in_recovery",
                if recovery { b"t" } else { b"f" },
                b"SELECT 1",
            ),
            _ => (b"?column?", b"1", b"SELECT 1"),
        };
        put(out, |b| {
            encode_row_description(&[FieldDescription::text(column)], b)
        });
        put(out, |b| encode_data_row(&[Some(value)], b));
        put(out, |b| encode_command_complete(command, b));
        self.ready(node, out);
    }

    fn ready(&mut self, node: &Node, out: &mut BytesMut) {
        self.seen_at_check = Some(node.seen());
        self.readies += 1;
        encode_ready_for_query(TransactionStatus::Idle, out);
    }

    fn finish_startup(&mut self, node: &mut Node, out: &mut BytesMut) {
        put(out, |b| Authentication::Ok.encode(b));
        let recovery = node.state.in_recovery();
        let version = node.server_version();
        let onoff = |v: bool| if v { "on" } else { "off" };
        let params: [(&'static str, &'static str); 5] = [
            ("server_version", version),
            ("client_encoding", "UTF8"),
            ("integer_datetimes", "on"),
            ("in_hot_standby", onoff(recovery)),
            // The setting itself: a standby reports off unless so configured, and libpq
            // counts it read-only by `in_hot_standby` alone.
            ("default_transaction_read_only", onoff(node.read_only)),
        ];
        // Servers before 14 report neither of the last two.
        let reported = if node.old_version { 3 } else { 5 };
        self.reported_role = !node.old_version;
        let mut told = Told::default();
        let zone = node.zone.map(|z| ("TimeZone", z));
        let path = node.path.map(|p| ("search_path", p));
        for &(name, value) in params[..reported].iter().chain(&zone).chain(&path) {
            let (name, value) = (name.as_bytes(), value.as_bytes());
            put(out, |b| ParameterStatus { name, value }.encode(b));
        }
        told.params
            .extend(params[..reported].iter().chain(&zone).chain(&path));
        node.next_pid += 1;
        let pid = node.next_pid;
        // Protocol 3.2 has PostgreSQL 18's 32-byte cancel key; 3.0 the 4-byte one.
        let mut key = [0u8; 32];
        let wide = self.protocol.is_some_and(|v| v >= ProtocolVersion::V3_2);
        let key_len = if wide { 32 } else { 4 };
        for (k, b) in key.iter_mut().zip(pid.to_be_bytes().iter().cycle()) {
            *k = *b;
        }
        put(out, |b| {
            BackendKeyData {
                pid,
                key: &key[..key_len],
            }
            .encode(b)
        });
        told.pid = pid;
        told.key = key[..key_len].to_vec();
        self.told = Some(told);
        self.phase = Phase::Ready;
        self.ready(node, out);
        if let Some(flip) = node.pending_flip.take() {
            node.flip(flip);
        }
    }
}

/// Startup checks in PostgreSQL's order, then the first authentication request.
fn start_session(
    s: &mut Session,
    node: &mut Node,
    msg: &StartupMessage<'_>,
    out: &mut BytesMut,
    rng: &mut Rng,
) -> (Phase, bool) {
    s.startup_seen = Some(StartupSeen {
        version: msg.version,
        raw: msg.params.iter().fold(Vec::new(), |mut raw, (k, v)| {
            for part in [k, v] {
                raw.extend_from_slice(part);
                raw.push(0);
            }
            raw
        }),
    });
    negotiate(s, node, msg, out);
    match node.state {
        NodeState::StartingUp { .. } => {
            s.sent_cannot_connect_now = true;
            s.refuse(out, b"57P03", b"the database system is starting up");
            return (Phase::Gone, true);
        }
        NodeState::ShuttingDown => {
            s.sent_cannot_connect_now = true;
            s.refuse(out, b"57P03", b"the database system is shutting down");
            return (Phase::Gone, true);
        }
        NodeState::Crashed => return (Phase::Gone, true),
        _ => {}
    }
    if node.sessions >= node.max_sessions {
        s.refuse(out, b"53300", b"sorry, too many clients already");
        return (Phase::Gone, true);
    }
    node.sessions += 1;
    s.counted = true;
    // Only the draws a method needs, in the order a server makes them.
    let mut random = LoginRandom {
        salt: [0; 4],
        nonce: [0; 18],
        mock_salt: [0; 16],
    };
    let secret = match &node.auth {
        Auth::Trust => StoredSecret::Trust,
        Auth::Md5(secret) => {
            rng.fill_bytes(&mut random.salt);
            StoredSecret::Md5(secret.clone())
        }
        Auth::Scram(secret) => {
            rng.fill_bytes(&mut random.nonce);
            StoredSecret::Scram(secret.clone())
        }
    };
    s.auth_began = true;
    match ServerLogin::start(secret, None, random, out) {
        (_, LoginStep::Done) => {
            s.finish_startup(node, out);
            (Phase::Ready, false)
        }
        (login, _) => (Phase::Login(Box::new(login)), false),
    }
}

/// What `ProcessStartupPacket` does with the version and the `_pq_.` options: a minor newer
/// than the server's newest, or any protocol option (PostgreSQL 18 knows none, nor did 13),
/// gets NegotiateProtocolVersion with the server's newest version not above the request and
/// every unrecognised option, before any other answer; the session runs that version.
fn negotiate(s: &mut Session, node: &Node, msg: &StartupMessage<'_>, out: &mut BytesMut) {
    let newest = if node.old_version {
        ProtocolVersion::V3_0
    } else {
        ProtocolVersion::V3_2
    };
    let unrecognized: Vec<&[u8]> = msg.params.protocol_options().map(|(n, _)| n).collect();
    let version = msg.version.min(newest);
    if msg.version.minor() > newest.minor() || !unrecognized.is_empty() {
        put(out, |b| {
            encode_negotiate_protocol_version(version, &unrecognized, b)
        });
        s.negotiated = Some(version);
    }
    s.protocol = Some(version);
}

fn fatal(out: &mut BytesMut, code: &[u8], message: &[u8]) {
    put(out, |b| {
        encode_error_response(
            &[
                (b'S', b"FATAL"),
                (b'V', b"FATAL"),
                (b'C', code),
                (b'M', message),
            ],
            b,
        )
    });
}

/// Encodes into `out`; the simulator only builds well-formed messages, so an encode error is
/// a bug in this file and dropping the message makes the client's invariants trip.
fn put<E>(out: &mut BytesMut, f: impl FnOnce(&mut BytesMut) -> Result<(), E>) {
    let _ = f(out);
}

/// The text of [`Node::describe`].
struct NodeText<'a>(&'a Node);

impl std::fmt::Display for NodeText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_pieces(f, &self.0.describe_pieces(""))
    }
}
