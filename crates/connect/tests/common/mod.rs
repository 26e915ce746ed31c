//! A tiny in-memory world for driving the connector: fake servers speaking bytes through
//! pgyard-wire encoders, a fake resolver, and a virtual clock.

#![allow(dead_code, clippy::large_enum_variant)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_connect::{
    Action, AttemptId, ConnectError, Connector, Established, Event, IoErrorKind, OpenTarget,
};
use pgyard_conninfo::typed::{ConnectConfig, Context};
use pgyard_types::Instant;
use pgyard_wire::backend;
use pgyard_wire::error_fields::encode_error_response;
use pgyard_wire::frame::ProtocolVersion;

/// Builds a config from a connection string with libpq's phase 3 (OS user `u`).
pub fn config(s: &str) -> ConnectConfig {
    let info = pgyard_conninfo::parse(s).expect("test conninfo parses");
    ConnectConfig::from_resolved(&info, &Context::new().with_os_user("u")).expect("valid config")
}

pub fn tcp(s: &str) -> OpenTarget {
    OpenTarget::Tcp(s.parse().expect("socket address"))
}

/// How the server answers SSLRequest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ssl {
    /// `N`.
    No,
    /// `S`, then the handshake works.
    Yes,
    /// `S`, then the handshake fails.
    YesButFails,
    /// `E`.
    Error,
}

/// How the server authenticates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    Trust,
    Cleartext(String),
    Md5,
}

/// A fake PostgreSQL server.
#[derive(Clone, Debug)]
pub struct Pg {
    pub ssl: Ssl,
    /// Per connection number (0-based): an ErrorResponse (sqlstate, message) right after the
    /// startup packet; the last entry repeats.
    pub startup_errors: Vec<Option<(String, String)>>,
    /// Reject plaintext startups with this error (hba hostssl-only), per method.
    pub plain_error: Option<(String, String)>,
    pub ssl_error: Option<(String, String)>,
    pub auth: Auth,
    pub post_auth_error: Option<(String, String)>,
    pub params: Vec<(String, String)>,
    pub npv: Option<(u32, Vec<String>)>,
    pub close_after_startup: bool,
    /// Answer for SHOW transaction_read_only / pg_is_in_recovery (`None`: error).
    pub show_ro: Option<String>,
    pub in_recovery: Option<String>,
    pub key: Vec<u8>,
    /// Never answer the startup packet.
    pub hang_after_startup: bool,
    /// What the TLS handshake reports the server selected by ALPN.
    pub alpn: Option<Vec<u8>>,
    /// The driver's text for a failed handshake (`Ssl::YesButFails`); `None`: an EOF.
    pub tls_failure: Option<(String, pgyard_connect::FailureKind)>,
    /// What the TLS handshake reports of client certificates.
    pub client_cert: pgyard_connect::ClientCert,
    /// Who owns its Unix socket, reported when the machine asks (`None`: nothing reported).
    pub peer: Option<Result<String, String>>,
}

impl Pg {
    pub fn new() -> Pg {
        Pg {
            ssl: Ssl::No,
            startup_errors: vec![],
            plain_error: None,
            ssl_error: None,
            auth: Auth::Trust,
            post_auth_error: None,
            params: vec![
                ("server_version".into(), "18.4".into()),
                ("in_hot_standby".into(), "off".into()),
                ("default_transaction_read_only".into(), "off".into()),
            ],
            npv: None,
            close_after_startup: false,
            show_ro: Some("off".into()),
            in_recovery: Some("f".into()),
            key: vec![1, 2, 3, 4],
            hang_after_startup: false,
            alpn: Some(pgyard_connect::ALPN_POSTGRESQL.to_vec()),
            tls_failure: None,
            client_cert: pgyard_connect::ClientCert::NotRequested,
            peer: Some(Ok("postgres".into())),
        }
    }
    pub fn primary() -> Pg {
        Pg::new()
    }
    pub fn standby() -> Pg {
        let mut p = Pg::new();
        set(&mut p.params, "in_hot_standby", "on");
        set(&mut p.params, "default_transaction_read_only", "on");
        p.show_ro = Some("on".into());
        p.in_recovery = Some("t".into());
        p
    }
    /// A pre-14 server: no in_hot_standby / default_transaction_read_only reports.
    pub fn old(standby: bool) -> Pg {
        let mut p = if standby {
            Pg::standby()
        } else {
            Pg::primary()
        };
        p.params = vec![("server_version".into(), "13.2".into())];
        p
    }
    pub fn dtro_on() -> Pg {
        let mut p = Pg::new();
        set(&mut p.params, "default_transaction_read_only", "on");
        p.show_ro = Some("on".into());
        p
    }
    pub fn error(sqlstate: &str, msg: &str) -> Pg {
        let mut p = Pg::new();
        p.startup_errors = vec![Some((sqlstate.into(), msg.into()))];
        p
    }
    pub fn ssl(mut self, ssl: Ssl) -> Pg {
        self.ssl = ssl;
        self
    }

    pub fn alpn(mut self, alpn: Option<&[u8]>) -> Pg {
        self.alpn = alpn.map(<[u8]>::to_vec);
        self
    }

    /// Reports `client_cert` from every TLS handshake.
    pub fn client_cert(mut self, client_cert: pgyard_connect::ClientCert) -> Pg {
        self.client_cert = client_cert;
        self
    }

    /// Fails the TLS handshake with the driver's `message`.
    pub fn tls_failure(mut self, message: &str, kind: pgyard_connect::FailureKind) -> Pg {
        self.ssl = Ssl::YesButFails;
        self.tls_failure = Some((message.into(), kind));
        self
    }
}

impl Default for Pg {
    fn default() -> Self {
        Pg::new()
    }
}

fn set(params: &mut [(String, String)], name: &str, value: &str) {
    for p in params.iter_mut() {
        if p.0 == name {
            p.1 = value.into();
        }
    }
}

/// What lives at an address.
#[derive(Clone, Debug)]
pub enum Node {
    Refused,
    /// connect() never completes.
    Blackhole,
    Pg(Pg),
    /// Answers anything with these bytes, then closes.
    Garbage(Vec<u8>),
}

#[derive(Debug, PartialEq, Eq)]
enum Phase {
    Initial,
    Tls,
    Auth,
    Ready,
    Gone,
}

struct Session {
    target: OpenTarget,
    phase: Phase,
    ssl: bool,
    conn_no: usize,
}

/// The world: nodes by address, DNS, a log of what servers saw.
pub struct World {
    pub nodes: BTreeMap<String, Node>,
    pub dns: BTreeMap<String, Result<Vec<SocketAddr>, String>>,
    pub log: Vec<String>,
    pub now: Instant,
    sessions: BTreeMap<AttemptId, Session>,
    conn_counts: BTreeMap<String, usize>,
    pub actions: Vec<Action>,
    pub opened: Vec<AttemptId>,
    pub closed: Vec<AttemptId>,
    /// Events to deliver with a delay (the world's own latency), (due, event).
    pending: Vec<(Instant, Event)>,
    pub latency: BTreeMap<String, Duration>,
}

fn key(t: &OpenTarget) -> String {
    match t {
        OpenTarget::Tcp(a) => a.to_string(),
        OpenTarget::Unix(p) => String::from_utf8_lossy(p).into_owned(),
    }
}

impl World {
    pub fn new() -> World {
        World {
            nodes: BTreeMap::new(),
            dns: BTreeMap::new(),
            log: vec![],
            now: Instant::ZERO,
            sessions: BTreeMap::new(),
            conn_counts: BTreeMap::new(),
            actions: vec![],
            opened: vec![],
            closed: vec![],
            pending: vec![],
            latency: BTreeMap::new(),
        }
    }
    pub fn node(mut self, addr: &str, node: Node) -> World {
        self.nodes.insert(addr.into(), node);
        self
    }
    pub fn pg(self, addr: &str, pg: Pg) -> World {
        self.node(addr, Node::Pg(pg))
    }
    pub fn dns(mut self, host: &str, addrs: &[&str]) -> World {
        self.dns.insert(
            host.into(),
            Ok(addrs.iter().map(|a| a.parse().expect("addr")).collect()),
        );
        self
    }

    fn emit(&mut self, delay_key: &str, ev: Event) {
        let d = self
            .latency
            .get(delay_key)
            .copied()
            .unwrap_or(Duration::ZERO);
        self.pending.push((self.now + d, ev));
    }

    /// Runs the connector until Done; returns the result. Panics after too many steps, or
    /// when the machine emits anything after its Done.
    pub fn run(&mut self, c: &mut Connector) -> Result<Established, ConnectError> {
        for _ in 0..100_000 {
            while let Some(a) = c.poll_action() {
                self.actions.push(a.clone());
                if let Action::Done(r) = a {
                    // Drivers stop at Done, so anything the machine emits later is lost.
                    let after: Vec<Action> = std::iter::from_fn(|| c.poll_action()).collect();
                    assert!(after.is_empty(), "actions after Done: {after:?}");
                    assert!(c.is_done(), "Done emitted but the machine is not done");
                    assert_eq!(c.poll_timeout(), None, "a timer armed after Done");
                    return r.map(|est| *est);
                }
                self.perform(a);
            }
            // Deliver due events in order, else advance time.
            if let Some(i) = self
                .pending
                .iter()
                .enumerate()
                .filter(|(_, (t, _))| *t <= self.now)
                .map(|(i, _)| i)
                .next()
            {
                let (_, ev) = self.pending.remove(i);
                c.handle_event(self.now, ev);
                continue;
            }
            let next_ev = self.pending.iter().map(|(t, _)| *t).min();
            let next_to = c.poll_timeout();
            let next = match (next_ev, next_to) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).expect("machine stalled: no events, no timeout"),
            };
            if next > self.now {
                self.now = next;
            }
            c.handle_timeout(self.now);
        }
        panic!("connector did not finish");
    }

    fn perform(&mut self, a: Action) {
        match a {
            Action::Resolve { token, host, .. } => {
                let ev = match self.dns.get(&host) {
                    Some(Ok(addrs)) => Event::Resolved {
                        token,
                        addrs: addrs.clone(),
                    },
                    Some(Err(m)) => Event::ResolveFailed {
                        token,
                        message: m.clone(),
                    },
                    None => Event::ResolveFailed {
                        token,
                        message: "Name or service not known".into(),
                    },
                };
                self.emit("dns", ev);
            }
            Action::Open {
                attempt,
                target,
                peer_user,
                ..
            } => {
                self.opened.push(attempt);
                let k = key(&target);
                match self.nodes.get(&k).cloned() {
                    None | Some(Node::Refused) => {
                        let error = if matches!(target, OpenTarget::Unix(_)) {
                            IoErrorKind::NotFound
                        } else {
                            IoErrorKind::ConnectionRefused
                        };
                        self.emit(&k, Event::OpenFailed { attempt, error });
                    }
                    Some(Node::Blackhole) => {}
                    Some(Node::Garbage(_)) => {
                        self.sessions.insert(
                            attempt,
                            Session {
                                target,
                                phase: Phase::Gone,
                                ssl: false,
                                conn_no: 0,
                            },
                        );
                        self.emit(&k, Event::Opened { attempt });
                    }
                    Some(Node::Pg(pg)) => {
                        if let (true, Some(user)) = (peer_user, pg.peer.clone()) {
                            self.emit(&k, Event::PeerUser { attempt, user });
                        }
                        let n = self.conn_counts.entry(k.clone()).or_insert(0);
                        let conn_no = *n;
                        *n += 1;
                        self.sessions.insert(
                            attempt,
                            Session {
                                target,
                                phase: Phase::Initial,
                                ssl: false,
                                conn_no,
                            },
                        );
                        self.emit(&k, Event::Opened { attempt });
                    }
                }
            }
            Action::Send { attempt, bytes } => self.server_recv(attempt, &bytes),
            Action::StartTls { attempt, .. } => {
                let Some(s) = self.sessions.get_mut(&attempt) else {
                    return;
                };
                let k = key(&s.target);
                let Some(Node::Pg(pg)) = self.nodes.get(&k) else {
                    return;
                };
                if pg.ssl == Ssl::Yes {
                    s.ssl = true;
                    s.phase = Phase::Initial;
                    self.log.push(format!("{k} tls"));
                    self.emit(
                        &k,
                        Event::TlsEstablished {
                            attempt,
                            server_end_point: None,
                            alpn: pg.alpn.clone(),
                            client_cert: pg.client_cert,
                        },
                    );
                } else {
                    s.phase = Phase::Gone;
                    self.emit(&k, {
                        let (message, kind) = pg.tls_failure.clone().unwrap_or_else(|| {
                            (
                                "SSL SYSCALL error: EOF detected".into(),
                                pgyard_connect::FailureKind::Transient,
                            )
                        });
                        Event::TlsFailed {
                            attempt,
                            message,
                            kind,
                            client_cert: pg.client_cert,
                        }
                    });
                }
            }
            Action::Close { attempt } => {
                self.closed.push(attempt);
                if let Some(s) = self.sessions.get_mut(&attempt) {
                    s.phase = Phase::Gone;
                }
            }
            Action::Done(_) => {}
        }
    }

    fn server_recv(&mut self, attempt: AttemptId, bytes: &[u8]) {
        let Some(s) = self.sessions.get_mut(&attempt) else {
            return;
        };
        let k = key(&s.target);
        if let Some(Node::Garbage(g)) = self.nodes.get(&k).cloned() {
            if s.phase == Phase::Gone && s.conn_no == 0 {
                s.conn_no = 1;
                self.emit(&k, Event::Received { attempt, bytes: g });
                self.emit(&k, Event::Closed { attempt });
            }
            return;
        }
        let Some(Node::Pg(pg)) = self.nodes.get(&k).cloned() else {
            return;
        };
        let mut out = BytesMut::new();
        let close = match s.phase {
            Phase::Initial => self.initial_recv(attempt, &k, &pg, bytes, &mut out),
            Phase::Auth => self.password_recv(attempt, &pg, bytes, &mut out),
            Phase::Ready => {
                self.queries_recv(&k, &pg, bytes, &mut out);
                false
            }
            Phase::Tls | Phase::Gone => false,
        };
        if !out.is_empty() {
            self.emit(
                &k,
                Event::Received {
                    attempt,
                    bytes: out.to_vec(),
                },
            );
        }
        if close {
            self.emit(&k, Event::Closed { attempt });
        }
    }

    /// Scripted refusals, hangs and startup errors all act on the first packet; returns close.
    fn initial_recv(
        &mut self,
        attempt: AttemptId,
        k: &str,
        pg: &Pg,
        bytes: &[u8],
        out: &mut BytesMut,
    ) -> bool {
        if bytes.len() < 8 {
            return false;
        }
        let Some(s) = self.sessions.get_mut(&attempt) else {
            return false;
        };
        let code = u32::from_be_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]);
        if code == 80_877_103 {
            self.log.push(format!("{k} sslrequest"));
            match pg.ssl {
                Ssl::No => out.extend_from_slice(b"N"),
                Ssl::Yes | Ssl::YesButFails => {
                    out.extend_from_slice(b"S");
                    s.phase = Phase::Tls;
                }
                Ssl::Error => out.extend_from_slice(b"E"),
            }
            return false;
        }
        self.log.push(format!(
            "{k} startup {}",
            if s.ssl { "ssl" } else { "plain" }
        ));
        let version = code;
        if pg.close_after_startup {
            return true;
        }
        if pg.hang_after_startup {
            return false;
        }
        let err = pg
            .startup_errors
            .get(s.conn_no)
            .or(pg.startup_errors.last())
            .cloned()
            .flatten()
            .or(if s.ssl {
                pg.ssl_error.clone()
            } else {
                pg.plain_error.clone()
            });
        if let Some((state, msg)) = err {
            fatal(out, &state, &msg);
            return true;
        }
        self.startup_accepted(attempt, pg, version, out)
    }

    /// Trust finishes at once and passwords wait, so the next phase is settled here; returns close.
    fn startup_accepted(
        &mut self,
        attempt: AttemptId,
        pg: &Pg,
        version: u32,
        out: &mut BytesMut,
    ) -> bool {
        let mut close = false;
        if let Some((v, names)) = &pg.npv {
            let names: Vec<&[u8]> = names.iter().map(|n| n.as_bytes()).collect();
            backend::encode_negotiate_protocol_version(ProtocolVersion(*v), &names, out).unwrap();
        }
        let asks_password = match &pg.auth {
            Auth::Trust => {
                self.auth_ok(pg, version, out, &mut close);
                false
            }
            Auth::Cleartext(_) => {
                backend::Authentication::CleartextPassword
                    .encode(out)
                    .unwrap();
                true
            }
            Auth::Md5 => {
                backend::Authentication::Md5Password { salt: [1, 2, 3, 4] }
                    .encode(out)
                    .unwrap();
                true
            }
        };
        if let Some(s) = self.sessions.get_mut(&attempt) {
            if asks_password {
                s.phase = Phase::Auth;
            }
            if s.phase == Phase::Initial && !close {
                s.phase = Phase::Ready;
            }
        }
        close
    }

    /// Only cleartext is checked: enough to provoke a wrong-password failure; returns close.
    fn password_recv(
        &mut self,
        attempt: AttemptId,
        pg: &Pg,
        bytes: &[u8],
        out: &mut BytesMut,
    ) -> bool {
        // PasswordMessage (anything else, e.g. Terminate, is ignored).
        if bytes.len() < 6 || bytes[0] != b'p' {
            return false;
        }
        let body = &bytes[5..bytes.len() - 1];
        let ok = match &pg.auth {
            Auth::Cleartext(p) => body == p.as_bytes(),
            _ => true,
        };
        if !ok {
            fatal(
                out,
                "28P01",
                "password authentication failed for user \"u\"",
            );
            return true;
        }
        let mut close = false;
        self.auth_ok(pg, 196608, out, &mut close);
        if let Some(s) = self.sessions.get_mut(&attempt) {
            s.phase = Phase::Ready;
        }
        close
    }

    /// Scripted answers to the session checks let target_session_attrs run without a server.
    fn queries_recv(&mut self, k: &str, pg: &Pg, bytes: &[u8], out: &mut BytesMut) {
        let mut rest = bytes;
        while rest.len() >= 5 {
            let len = u32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]) as usize;
            let (msg, r) = rest.split_at((len + 1).min(rest.len()));
            rest = r;
            match msg[0] {
                b'X' => self.log.push(format!("{k} terminate")),
                b'Q' => {
                    let sql = String::from_utf8_lossy(&msg[5..msg.len() - 1]).into_owned();
                    self.log.push(format!("{k} query {sql}"));
                    let answer = if sql.starts_with("SHOW") {
                        pg.show_ro.clone()
                    } else {
                        pg.in_recovery.clone()
                    };
                    match answer {
                        Some(v) => {
                            backend::encode_data_row(&[Some(v.as_bytes())], out).unwrap();
                            backend::encode_command_complete(b"SHOW", out).unwrap();
                        }
                        None => {
                            encode_error_response(
                                &[(b'S', b"ERROR"), (b'C', b"XX000"), (b'M', b"boom")],
                                out,
                            )
                            .unwrap();
                        }
                    }
                    backend::encode_ready_for_query(backend::TransactionStatus::Idle, out);
                }
                _ => {}
            }
        }
    }

    fn auth_ok(&mut self, pg: &Pg, _version: u32, out: &mut BytesMut, close: &mut bool) {
        backend::Authentication::Ok.encode(out).unwrap();
        for (n, v) in &pg.params {
            backend::ParameterStatus {
                name: n.as_bytes(),
                value: v.as_bytes(),
            }
            .encode(out)
            .unwrap();
        }
        if let Some((state, msg)) = &pg.post_auth_error {
            fatal(out, state, msg);
            *close = true;
            return;
        }
        backend::BackendKeyData {
            pid: 42,
            key: &pg.key,
        }
        .encode(out)
        .unwrap();
        backend::encode_ready_for_query(backend::TransactionStatus::Idle, out);
    }

    /// What the servers saw, one line per event.
    pub fn log(&self) -> Vec<String> {
        self.log.clone()
    }
}

impl Default for World {
    fn default() -> Self {
        World::new()
    }
}

pub fn fatal(out: &mut BytesMut, state: &str, msg: &str) {
    encode_error_response(
        &[
            (b'S', b"FATAL"),
            (b'V', b"FATAL"),
            (b'C', state.as_bytes()),
            (b'M', msg.as_bytes()),
        ],
        out,
    )
    .unwrap();
}

/// Connects with `conninfo` against `world`; returns (result, world).
pub fn connect(world: &mut World, conninfo: &str) -> Result<Established, ConnectError> {
    let mut c = Connector::new(config(conninfo), Instant::ZERO, 7);
    world.run(&mut c)
}

pub const REFUSED_TCP: &str =
    "Connection refused\n\tIs the server running on that host and accepting TCP/IP connections?\n";
