//! The multi-host connect machine: libpq 18's connection sequencing reproduced exactly (host
//! slots, per-address attempts, failure classification, accumulated error text, encryption
//! fallback, `target_session_attrs`, `load_balance_hosts`, `connect_timeout`, protocol
//! negotiation, reset), plus pgyard's opt-in extensions (staggered racing, a failover wait
//! budget, `prefer-primary`, host-status memory). Pure and sans-IO: the driver performs the
//! [`Action`]s and feeds back [`Event`]s; time and randomness are inputs.
//!
//! Run loop: after [`Connector::new`], call [`Connector::poll_action`] until it returns
//! `None`, perform each action, feed results with [`Connector::handle_event`], and call
//! [`Connector::handle_timeout`] at [`Connector::poll_timeout`]. The machine ends with exactly
//! one [`Action::Done`].

mod conn;
mod kinds;
mod memory;
mod report;
mod verdict;

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pgyard_conninfo::typed::{
    ChannelBinding as CfgChannelBinding, ConnectConfig, LoadBalanceHosts, ProtocolVersion,
    SlotKind, SslMode, SslNegotiation, TargetSessionAttrs,
};
use pgyard_conninfo::Strategy;
use pgyard_types::{rng_from_seed, uniform_inclusive, Instant, Rng, RngCore};
use pgyard_wire::auth::{ChannelBinding, NONCE_RAW_LEN};
use pgyard_wire::frame::ProtocolVersion as WireVersion;

pub use conn::ServerRole;
use conn::StartupParams;
use conn::{Check, Conn, ConnParams, FailClass, Method, Out, Verdict};
pub use memory::{HostEntry, HostStatus, HostStatusMemory};
pub use report::{AttemptReport, ConnectError, FailureKind};
pub use verdict::{alpn_refusal, resolver_text, ALPN_POSTGRESQL};

/// Names one connection (one socket). Events about a closed attempt are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId(pub u64);

/// Names one host-name resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolveToken(pub u64);

/// Where a connection goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpenTarget {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix-domain socket path (`@…` is Linux's abstract namespace).
    Unix(Vec<u8>),
}

/// Socket options libpq sets on TCP sockets (spec §12.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpOptions {
    /// SO_KEEPALIVE.
    pub keepalives: bool,
    /// TCP_KEEPIDLE; `None` = OS default.
    pub keepalives_idle: Option<Duration>,
    /// TCP_KEEPINTVL; `None` = OS default.
    pub keepalives_interval: Option<Duration>,
    /// TCP_KEEPCNT; `None` = OS default.
    pub keepalives_count: Option<u32>,
    /// TCP_USER_TIMEOUT; `None` = OS default.
    pub tcp_user_timeout: Option<Duration>,
}

/// How the TLS peer must be verified (from `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVerify {
    /// No verification (`prefer`, `allow`, `require` without a root certificate).
    None,
    /// Chain only (`verify-ca`, or `require` when a root certificate exists).
    Ca,
    /// Chain and host name (`verify-full`).
    Full,
}

/// A socket error the driver saw, with glibc's `strerror` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoErrorKind {
    /// ECONNREFUSED.
    ConnectionRefused,
    /// ENOENT (a Unix socket that does not exist).
    NotFound,
    /// EHOSTUNREACH.
    HostUnreachable,
    /// ENETUNREACH.
    NetworkUnreachable,
    /// ETIMEDOUT.
    TimedOut,
    /// EACCES.
    PermissionDenied,
    /// EADDRNOTAVAIL.
    AddrNotAvailable,
    /// ECONNRESET.
    ConnectionReset,
    /// Anything else, with its text.
    Other(String),
}

impl IoErrorKind {
    /// The `strerror` text.
    pub fn strerror(&self) -> &str {
        match self {
            IoErrorKind::ConnectionRefused => "Connection refused",
            IoErrorKind::NotFound => "No such file or directory",
            IoErrorKind::HostUnreachable => "No route to host",
            IoErrorKind::NetworkUnreachable => "Network is unreachable",
            IoErrorKind::TimedOut => "Connection timed out",
            IoErrorKind::PermissionDenied => "Permission denied",
            IoErrorKind::AddrNotAvailable => "Cannot assign requested address",
            IoErrorKind::ConnectionReset => "Connection reset by peer",
            IoErrorKind::Other(s) => s,
        }
    }
}

/// An input from the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A host name resolved, addresses in resolver order.
    Resolved {
        /// The token of the [`Action::Resolve`].
        token: ResolveToken,
        /// The addresses.
        addrs: Vec<SocketAddr>,
    },
    /// A host name did not resolve. The machine words the error as libpq does.
    ResolveFailed {
        /// The token of the [`Action::Resolve`].
        token: ResolveToken,
        /// The resolver's error as the platform reported it: `gai_strerror`'s text (e.g.
        /// `Name or service not known`), or Rust's `io::Error` text for it, which puts
        /// `failed to lookup address information: ` in front.
        message: String,
    },
    /// The socket connected.
    Opened {
        /// The attempt.
        attempt: AttemptId,
    },
    /// socket()/connect() failed.
    OpenFailed {
        /// The attempt.
        attempt: AttemptId,
        /// What failed.
        error: IoErrorKind,
    },
    /// Bytes from the server (after decryption when TLS is up).
    Received {
        /// The attempt.
        attempt: AttemptId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The server closed the connection (EOF).
    Closed {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The TLS handshake of [`Action::StartTls`] completed. The machine still refuses the
    /// connection when the ALPN selection is not what libpq accepts.
    TlsEstablished {
        /// The attempt.
        attempt: AttemptId,
        /// `tls-server-end-point` channel-binding data, if the certificate allows it.
        server_end_point: Option<Vec<u8>>,
        /// The protocol the server selected by ALPN, if it selected one.
        alpn: Option<Vec<u8>>,
    },
    /// The TLS handshake failed (including certificate checks).
    TlsFailed {
        /// The attempt.
        attempt: AttemptId,
        /// libpq's text, e.g. `SSL error: certificate verify failed`.
        message: String,
        /// What the failure means, from the TLS library's error type: a certificate that did
        /// not verify is [`FailureKind::Authentication`], a setting that cannot work (a missing
        /// root file) [`FailureKind::Configuration`], an alert or a reset
        /// [`FailureKind::Transient`].
        kind: FailureKind,
    },
}

/// A side effect for the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Resolve a host name (getaddrinfo, AF_UNSPEC, SOCK_STREAM); answer with
    /// [`Event::Resolved`] or [`Event::ResolveFailed`].
    Resolve {
        /// Token for the answer.
        token: ResolveToken,
        /// The host name.
        host: String,
        /// The port.
        port: u16,
    },
    /// Create a socket and connect; answer with [`Event::Opened`] or [`Event::OpenFailed`].
    Open {
        /// The new attempt.
        attempt: AttemptId,
        /// Where to.
        target: OpenTarget,
        /// TCP options (`None` for Unix sockets).
        tcp: Option<TcpOptions>,
    },
    /// Write bytes (through TLS once it is up).
    Send {
        /// The attempt.
        attempt: AttemptId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Start a TLS handshake (ALPN `postgresql`); answer with [`Event::TlsEstablished`] or
    /// [`Event::TlsFailed`].
    StartTls {
        /// The attempt.
        attempt: AttemptId,
        /// The slot's `host` (SNI when `sslsni` and not an IP literal, and the name
        /// verify-full checks).
        server_name: Option<String>,
        /// Direct TLS (`sslnegotiation=direct`): the server must select ALPN `postgresql`.
        direct: bool,
        /// Verification required.
        verify: TlsVerify,
    },
    /// Close the socket. Every opened attempt is closed exactly once, except the winner.
    Close {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The end: the established connection, or every failure.
    Done(Result<Established, ConnectError>),
}

/// BackendKeyData: what a cancel request must quote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendKey {
    /// Backend process id.
    pub pid: i32,
    /// Secret key (4 bytes under 3.0, up to 256 under 3.2).
    pub key: Vec<u8>,
}

/// A connection that passed authentication and the session check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Established {
    /// The winning attempt (the driver keeps its socket).
    pub attempt: AttemptId,
    /// Index into the configuration's slot order.
    pub slot: usize,
    /// What libpq's `PQhost` reports.
    pub host: String,
    /// The address connected to.
    pub target: OpenTarget,
    /// ParameterStatus values in arrival order (a repeated name keeps its first position).
    pub parameters: Vec<(String, String)>,
    /// BackendKeyData, if sent.
    pub backend_key: Option<BackendKey>,
    /// The protocol version in use (major, minor).
    pub protocol_version: (u16, u16),
    /// Whether TLS is in use.
    pub tls: bool,
    /// The server role, if the check learned it.
    pub role: Option<ServerRole>,
    /// Bytes received after ReadyForQuery.
    pub leftover: Vec<u8>,
    /// Protocol options asked for (through extra startup parameters named `_pq_.…`) that
    /// the server said it does not support.
    pub refused_options: Vec<String>,
}

/// Realistic bugs for the simulator to catch; compiled only with the `planted-bugs` feature
/// and off until switched on with [`Connector::with_planted_bug`].
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Accept every server regardless of `target_session_attrs`.
    IgnoreTargetSessionAttrs,
    /// Never arm the per-address `connect_timeout`.
    DropAttemptTimeout,
    /// Reuse the closed attempt id for an encryption-fallback reconnect.
    ReuseClosedAttempt,
    /// Skip prefer-standby's (and prefer-primary's) second pass.
    SkipPreferSecondPass,
    /// Carry `in_hot_standby`/`default_transaction_read_only` over from the previous
    /// connection.
    TrustStaleParameterStatus,
    /// Treat 57P03 (cannot connect now) as a reason to try the slot's next address.
    StartupErrorNextAddress,
    /// Accept whatever the server selected by ALPN, or nothing, even for direct TLS.
    AcceptAnyAlpn,
}

/// Base delay between failover cycles; doubles per cycle.
const FAILOVER_BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Cap on the delay between failover cycles.
const FAILOVER_BACKOFF_CAP: Duration = Duration::from_secs(2);

/// The failover connect machine. See the crate documentation for the run loop.
pub struct Connector {
    config: ConnectConfig,
    order: Vec<usize>,
    rng: Rng,
    nonce_rng: Rng,
    start_now: Instant,
    started: bool,
    done: bool,
    actions: VecDeque<Action>,
    reports: Vec<AttemptReport>,
    next_id: u64,
    next_token: u64,
    cursor: Cursor,
    runs: Vec<Run>,
    timeout: Result<Option<Duration>, String>,
    first_open_done: bool,
    last_timer: Option<((usize, usize), Option<Instant>)>,
    race_next_at: Option<Instant>,
    backoff_until: Option<Instant>,
    failover_deadline: Option<Instant>,
    cycle: u32,
    memory: Option<HostStatusMemory>,
    extra_startup: Vec<(Vec<u8>, Vec<u8>)>,
    /// The startup parameters, built on first use and shared by every connection.
    startup: Option<StartupParams>,
    established: Option<AttemptId>,
    stale_role: Option<(conn::Tri, conn::Tri, i32)>,
    #[cfg(feature = "planted-bugs")]
    bugs: Vec<PlantedBug>,
}

#[derive(Default)]
struct Cursor {
    second_pass: bool,
    pos: Option<usize>,
    addrs: Vec<OpenTarget>,
    next_addr: usize,
    resolving: Option<(ResolveToken, usize)>,
}

struct Run {
    slot: usize,
    pos: usize,
    target: OpenTarget,
    second_pass: bool,
    methods: Vec<Method>,
    method_idx: usize,
    deadline: Option<Instant>,
    id: AttemptId,
    conn: Conn,
    report: usize,
}

enum Prep {
    Ready(Vec<OpenTarget>),
    Resolve { host: String, port: u16 },
    NextSlot(String),
    Abort(String),
}

enum Next {
    Started,
    Waiting,
    Exhausted,
    Aborted,
}

impl Connector {
    /// A machine for `config` starting at `now`; `seed` drives the load-balancing shuffles
    /// (and SCRAM nonces, from a separate stream). Nothing happens until the first call.
    pub fn new(config: ConnectConfig, now: Instant, seed: u64) -> Self {
        let timeout = config
            .connect_timeout()
            .map_err(|e| String::from_utf8_lossy(&e.libpq_message()).into_owned());
        let mut nonce_rng = rng_from_seed(seed);
        nonce_rng.set_stream(1);
        Connector {
            config,
            order: Vec::new(),
            rng: rng_from_seed(seed),
            nonce_rng,
            start_now: now,
            started: false,
            done: false,
            actions: VecDeque::new(),
            reports: Vec::new(),
            next_id: 1,
            next_token: 1,
            cursor: Cursor::default(),
            runs: Vec::new(),
            timeout,
            first_open_done: false,
            last_timer: None,
            race_next_at: None,
            backoff_until: None,
            failover_deadline: None,
            cycle: 0,
            memory: None,
            extra_startup: Vec::new(),
            startup: None,
            established: None,
            stale_role: None,
            #[cfg(feature = "planted-bugs")]
            bugs: Vec::new(),
        }
    }

    /// Builder: use (and update) host-status memory kept by the caller. Not libpq behaviour:
    /// recently failed or wrong-role hosts are tried last, and round-robin rotates the start.
    pub fn with_host_memory(mut self, memory: HostStatusMemory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Builder: extra startup parameters sent after `client_encoding` (libpq sends
    /// `datestyle`, `timezone`, `geqo` from PGDATESTYLE, PGTZ, PGGEQO unless `default`).
    pub fn with_extra_startup_params(mut self, params: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        self.extra_startup = params;
        self.startup = None;
        self
    }

    /// Builder: switch on one planted bug.
    #[cfg(feature = "planted-bugs")]
    pub fn with_planted_bug(mut self, bug: PlantedBug) -> Self {
        self.bugs.push(bug);
        self
    }

    /// The host memory, updated with what this connect saw.
    pub fn host_memory(&self) -> Option<&HostStatusMemory> {
        self.memory.as_ref()
    }

    /// Takes the host memory back out.
    pub fn take_host_memory(&mut self) -> Option<HostStatusMemory> {
        self.memory.take()
    }

    /// The configuration, with slots in connect order (shuffled when load balancing).
    pub fn config(&self) -> &ConnectConfig {
        &self.config
    }

    /// Whether [`Action::Done`] was emitted.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Feeds one event. Events for unknown or closed attempts and stale tokens are ignored.
    pub fn handle_event(&mut self, now: Instant, event: Event) {
        self.ensure_started();
        if self.done {
            return;
        }
        match event {
            Event::Resolved { token, addrs } => self.on_resolved(now, token, Ok(addrs)),
            Event::ResolveFailed { token, message } => self.on_resolved(now, token, Err(message)),
            Event::Opened { attempt } => self.with_run(now, attempt, |c, out| c.opened(out)),
            Event::OpenFailed { attempt, error } => {
                let Some(i) = self.run_index(attempt) else {
                    return;
                };
                if !self.runs[i].conn.is_connecting() {
                    return;
                }
                let tail = if matches!(self.runs[i].target, OpenTarget::Unix(_)) {
                    "\n\tIs the server running locally and accepting connections on that socket?\n"
                } else {
                    "\n\tIs the server running on that host and accepting TCP/IP connections?\n"
                };
                let msg = format!("{}{tail}", error.strerror());
                self.append(i, &msg);
                self.fail_run(now, i, FailClass::NextAddr, FailureKind::Transient);
            }
            Event::Received { attempt, bytes } => {
                self.with_run(now, attempt, |c, out| c.received(&bytes, out))
            }
            Event::Closed { attempt } => self.with_run(now, attempt, |c, _| c.closed()),
            Event::TlsEstablished {
                attempt,
                server_end_point,
                alpn,
            } => {
                let check_alpn = !self.bug(BugId::AnyAlpn);
                self.with_run(now, attempt, |c, out| {
                    c.tls_established(server_end_point.clone(), alpn.as_deref(), check_alpn, out)
                })
            }
            Event::TlsFailed {
                attempt,
                message,
                kind,
            } => self.with_run(now, attempt, |c, _| c.tls_failed(&message, kind)),
        }
    }

    /// Handles deadlines up to `now`; early calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.ensure_started();
        if self.done {
            return;
        }
        // Per-address connect_timeout.
        loop {
            let expired = self
                .runs
                .iter()
                .position(|r| r.deadline.is_some_and(|d| d <= now));
            let Some(i) = expired else { break };
            self.append(i, "timeout expired\n");
            self.fail_run(now, i, FailClass::NextAddr, FailureKind::Transient);
            if self.done {
                return;
            }
        }
        if self.backoff_until.is_some_and(|t| t <= now) {
            self.backoff_until = None;
            self.begin_cycle(now);
            self.pump(now, false);
            return;
        }
        if self.race_next_at.is_some_and(|t| t <= now) {
            self.race_next_at = None;
            self.pump(now, true);
        }
    }

    /// The next side effect, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.ensure_started();
        self.actions.pop_front()
    }

    /// When [`Connector::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.started {
            return Some(self.start_now);
        }
        if self.done {
            return None;
        }
        let runs = self.runs.iter().filter_map(|r| r.deadline);
        runs.chain(self.race_next_at)
            .chain(self.backoff_until)
            .min()
    }

    /// Starts over as `PQreset` does: the established connection (if any) gets Terminate
    /// and Close, the error buffer is cleared, and selection runs again over the same slot
    /// order (no reshuffle; addresses are re-resolved and reshuffled).
    pub fn reset(&mut self, now: Instant) {
        self.ensure_started();
        if let Some(id) = self.established.take() {
            self.actions.push_back(Action::Send {
                attempt: id,
                bytes: conn::terminate_bytes(),
            });
            self.actions.push_back(Action::Close { attempt: id });
        }
        let live: Vec<AttemptId> = self.runs.drain(..).map(|r| r.id).collect();
        for id in live {
            self.actions.push_back(Action::Close { attempt: id });
        }
        self.reports.clear();
        self.done = false;
        self.first_open_done = false;
        self.timeout = self
            .config
            .connect_timeout()
            .map_err(|e| String::from_utf8_lossy(&e.libpq_message()).into_owned());
        self.cycle = 0;
        self.backoff_until = None;
        self.failover_deadline = self.config.failover_timeout().map(|d| now + d);
        self.begin_cycle(now);
        self.pump(now, false);
    }

    // ---- internals ----

    fn bug(&self, _b: BugId) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            let want = match _b {
                BugId::IgnoreTsa => PlantedBug::IgnoreTargetSessionAttrs,
                BugId::NoTimeout => PlantedBug::DropAttemptTimeout,
                BugId::ReuseId => PlantedBug::ReuseClosedAttempt,
                BugId::NoPass2 => PlantedBug::SkipPreferSecondPass,
                BugId::StaleParams => PlantedBug::TrustStaleParameterStatus,
                BugId::StartupNextAddr => PlantedBug::StartupErrorNextAddress,
                BugId::AnyAlpn => PlantedBug::AcceptAnyAlpn,
            };
            self.bugs.contains(&want)
        }
        #[cfg(not(feature = "planted-bugs"))]
        false
    }

    fn race(&self) -> bool {
        self.config.strategy() == Strategy::Race
    }

    fn ensure_started(&mut self) {
        if self.started {
            return;
        }
        self.started = true;
        let now = self.start_now;
        if self.config.load_balance_hosts() == LoadBalanceHosts::Random {
            let rng = &mut self.rng;
            self.config
                .shuffle_slots(|i| uniform_inclusive(rng, i as u64) as usize);
        }
        self.failover_deadline = self.config.failover_timeout().map(|d| now + d);
        self.begin_cycle(now);
        self.pump(now, false);
    }

    /// Computes the slot order and resets the cursor for a new walk.
    fn begin_cycle(&mut self, now: Instant) {
        let n = self.config.slots().len();
        let mut order: Vec<usize> = (0..n).collect();
        if let Some(mem) = self.memory.as_mut() {
            if n > 0 {
                let start = (mem.take_start() % n as u64) as usize;
                order.rotate_left(start);
            }
            let check = Check::for_pass(self.config.target_session_attrs(), false);
            let slots = self.config.slots();
            let bad = |&s: &usize| -> bool {
                let slot = &slots[s];
                let status = mem.fresh_status(
                    slot.display_host(),
                    slot.port_raw().unwrap_or_default(),
                    now,
                );
                match status {
                    Some(HostStatus::Down) => true,
                    Some(HostStatus::Up(Some(role))) => !role_fits(check, role),
                    _ => false,
                }
            };
            let (good, worse): (Vec<usize>, Vec<usize>) = order.iter().partition(|s| !bad(s));
            order = good.into_iter().chain(worse).collect();
        }
        self.order = order;
        self.cursor = Cursor::default();
        self.last_timer = None;
        self.race_next_at = None;
    }

    fn run_index(&self, id: AttemptId) -> Option<usize> {
        self.runs.iter().position(|r| r.id == id)
    }

    fn append(&mut self, run: usize, msg: &str) {
        let r = self.runs[run].report;
        if let Some(rep) = self.reports.get_mut(r) {
            rep.text.push_str(msg);
        }
    }

    fn with_run(
        &mut self,
        now: Instant,
        id: AttemptId,
        f: impl FnOnce(&mut Conn, &mut Vec<Out>) -> Verdict,
    ) {
        let Some(i) = self.run_index(id) else { return };
        let mut out = Vec::new();
        let verdict = f(&mut self.runs[i].conn, &mut out);
        if self.runs[i].conn.fell_back_to_plain {
            self.runs[i].conn.fell_back_to_plain = false;
            self.runs[i].method_idx += 1;
        }
        for o in out {
            match o {
                Out::Send(bytes) => self.actions.push_back(Action::Send { attempt: id, bytes }),
                Out::StartTls { direct } => {
                    let slot = &self.config.slots()[self.runs[i].slot];
                    let server_name = slot
                        .host()
                        .filter(|h| !h.is_empty() && !slot.kind().is_unix_socket())
                        .map(|h| String::from_utf8_lossy(h).into_owned());
                    let verify = match self.config.sslmode() {
                        SslMode::VerifyFull => TlsVerify::Full,
                        SslMode::VerifyCa => TlsVerify::Ca,
                        _ => TlsVerify::None,
                    };
                    self.actions.push_back(Action::StartTls {
                        attempt: id,
                        server_name,
                        direct,
                        verify,
                    });
                }
            }
        }
        let msgs = std::mem::take(&mut self.runs[i].conn.messages);
        self.append(i, &msgs);
        match verdict {
            Verdict::Pending => {}
            Verdict::Qualified => self.win(now, i),
            Verdict::Failed { class, kind } => self.fail_run(now, i, class, kind),
        }
    }

    fn remember(&mut self, slot: usize, status: HostStatus, now: Instant) {
        if let Some(mem) = self.memory.as_mut() {
            let s = &self.config.slots()[slot];
            mem.record(
                s.display_host(),
                s.port_raw().unwrap_or_default(),
                status,
                now,
            );
        }
    }

    fn win(&mut self, now: Instant, i: usize) {
        let mut run = self.runs.remove(i);
        self.remember(run.slot, HostStatus::Up(run.conn.role), now);
        // Losers of a race: Terminate where the protocol is up, then Close.
        for other in self.runs.drain(..) {
            if other.conn.startup_sent && !other.conn.in_tls_handshake() {
                self.actions.push_back(Action::Send {
                    attempt: other.id,
                    bytes: conn::terminate_bytes(),
                });
            }
            self.actions.push_back(Action::Close { attempt: other.id });
            if let Some(rep) = self.reports.get_mut(other.report) {
                rep.cancelled = true;
            }
        }
        let slot = &self.config.slots()[run.slot];
        let est = Established {
            attempt: run.id,
            slot: run.slot,
            host: String::from_utf8_lossy(slot.display_host()).into_owned(),
            target: run.target.clone(),
            parameters: std::mem::take(&mut run.conn.parameters),
            backend_key: run.conn.backend_key.take(),
            protocol_version: (run.conn.protocol.major(), run.conn.protocol.minor()),
            tls: run.conn.tls,
            role: run.conn.role,
            leftover: std::mem::take(&mut run.conn.leftover),
            refused_options: std::mem::take(&mut run.conn.refused_options),
        };
        self.established = Some(run.id);
        self.reports.clear();
        self.finish(Ok(est));
    }

    fn finish(&mut self, result: Result<Established, ConnectError>) {
        self.done = true;
        self.race_next_at = None;
        self.backoff_until = None;
        self.actions.push_back(Action::Done(result));
    }

    fn abort(&mut self) {
        for other in self.runs.drain(..) {
            self.actions.push_back(Action::Close { attempt: other.id });
        }
        let reports = std::mem::take(&mut self.reports);
        self.finish(Err(ConnectError { reports }));
    }

    /// Ends connection `i` with `class`, its report marked `kind`, and moves on as libpq would.
    fn fail_run(&mut self, now: Instant, i: usize, class: FailClass, kind: FailureKind) {
        let mut run = self.runs.remove(i);
        if let Some(rep) = self.reports.get_mut(run.report) {
            rep.kind = kind;
        }
        self.actions.push_back(Action::Close { attempt: run.id });
        #[cfg(feature = "planted-bugs")]
        {
            self.stale_role = Some(run.conn.role_state());
        }
        let class = if class == FailClass::NextSlot && self.bug(BugId::StartupNextAddr) {
            FailClass::NextAddr
        } else {
            class
        };
        match class {
            FailClass::NextMethod => {
                if run.method_idx + 1 < run.methods.len() {
                    run.method_idx += 1;
                    let old = run.id;
                    if !self.open_conn(now, run, Some(old)) {
                        self.pump(now, true);
                    }
                    return;
                }
                if self.race() {
                    self.remember(run.slot, HostStatus::Down, now);
                    self.pump(now, true);
                } else {
                    self.abort();
                }
                return;
            }
            FailClass::NextAddr => self.remember(run.slot, HostStatus::Down, now),
            FailClass::NextSlot => {
                self.remember(run.slot, HostStatus::Down, now);
                self.skip_slot_of(&run);
            }
            FailClass::Mismatch => {
                self.remember(run.slot, HostStatus::Up(run.conn.role), now);
                if !self.config.keep_trying_addresses_after_mismatch() {
                    self.skip_slot_of(&run);
                }
            }
            FailClass::Abort => {
                if !self.race() {
                    self.abort();
                    return;
                }
            }
        }
        self.pump(now, true);
    }

    fn skip_slot_of(&mut self, run: &Run) {
        if self.cursor.pos == Some(run.pos) && self.cursor.second_pass == run.second_pass {
            self.cursor.next_addr = self.cursor.addrs.len();
        }
    }

    /// Starts work: in sequential mode one connection at a time; in race mode another one
    /// when `force` (a failure or the stagger) or nothing runs.
    fn pump(&mut self, now: Instant, force: bool) {
        if self.done || self.backoff_until.is_some() {
            return;
        }
        let may_add = self.runs.is_empty() || (self.race() && force);
        if !may_add {
            return;
        }
        match self.next_target(now) {
            Next::Started => {
                if self.race() {
                    self.race_next_at = Some(now + self.config.race_stagger());
                }
            }
            Next::Waiting => {}
            Next::Aborted => self.abort(),
            Next::Exhausted => {
                self.race_next_at = None;
                if self.runs.is_empty() {
                    self.end_of_walk(now);
                }
            }
        }
    }

    fn end_of_walk(&mut self, now: Instant) {
        match self.failover_deadline {
            Some(deadline) if deadline > now => {
                let factor = 1u32.checked_shl(self.cycle.min(16)).unwrap_or(u32::MAX);
                let wait = FAILOVER_BACKOFF_BASE
                    .saturating_mul(factor)
                    .min(FAILOVER_BACKOFF_CAP)
                    .min(deadline.saturating_duration_since(now));
                self.cycle = self.cycle.saturating_add(1);
                self.backoff_until = Some(now + wait);
            }
            _ => self.abort(),
        }
    }

    fn prefer_mode(&self) -> bool {
        matches!(
            self.config.target_session_attrs(),
            TargetSessionAttrs::PreferStandby | TargetSessionAttrs::PreferPrimary
        )
    }

    fn next_target(&mut self, now: Instant) -> Next {
        loop {
            if self.cursor.resolving.is_some() {
                return Next::Waiting;
            }
            if let Some(pos) = self.cursor.pos {
                if self.cursor.next_addr < self.cursor.addrs.len() {
                    let idx = self.cursor.next_addr;
                    self.cursor.next_addr += 1;
                    let target = self.cursor.addrs[idx].clone();
                    let opened = self.start_run(now, pos, idx, target);
                    if self.done {
                        return Next::Aborted;
                    }
                    if !opened {
                        // The address failed before connecting; try the next.
                        continue;
                    }
                    return Next::Started;
                }
            }
            let next = self.cursor.pos.map_or(0, |p| p + 1);
            if next < self.order.len() {
                self.cursor.pos = Some(next);
            } else if !self.cursor.second_pass && self.prefer_mode() && !self.bug(BugId::NoPass2) {
                self.cursor.second_pass = true;
                self.cursor.pos = Some(0);
            } else {
                return Next::Exhausted;
            }
            let Some(&slot) = self.cursor.pos.and_then(|p| self.order.get(p)) else {
                return Next::Exhausted;
            };
            self.cursor.addrs.clear();
            self.cursor.next_addr = 0;
            match self.prepare_slot(slot) {
                Prep::Ready(addrs) => self.set_addrs(addrs),
                Prep::Resolve { host, port } => {
                    let token = ResolveToken(self.next_token);
                    self.next_token += 1;
                    self.cursor.resolving = Some((token, slot));
                    self.actions
                        .push_back(Action::Resolve { token, host, port });
                    return Next::Waiting;
                }
                Prep::NextSlot(msg) => {
                    self.remember(slot, HostStatus::Down, now);
                    self.push_plain_report(slot, msg, FailureKind::Configuration);
                }
                Prep::Abort(msg) => {
                    self.push_plain_report(slot, msg, FailureKind::Configuration);
                    return Next::Aborted;
                }
            }
        }
    }

    fn push_plain_report(&mut self, slot: usize, text: String, kind: FailureKind) {
        self.reports.push(AttemptReport {
            attempt: None,
            slot: Some(slot),
            target: None,
            prefix: String::new(),
            text,
            cancelled: false,
            kind,
        });
    }

    fn set_addrs(&mut self, mut addrs: Vec<OpenTarget>) {
        if self.config.load_balance_hosts() == LoadBalanceHosts::Random {
            for i in 1..addrs.len() {
                let j = (uniform_inclusive(&mut self.rng, i as u64) as usize).min(i);
                addrs.swap(i, j);
            }
        }
        self.cursor.addrs = addrs;
        self.cursor.next_addr = 0;
    }

    fn on_resolved(
        &mut self,
        now: Instant,
        token: ResolveToken,
        result: Result<Vec<SocketAddr>, String>,
    ) {
        let Some((t, slot)) = self.cursor.resolving else {
            return;
        };
        if t != token {
            return;
        }
        self.cursor.resolving = None;
        let host = String::from_utf8_lossy(self.config.slots()[slot].host().unwrap_or_default())
            .into_owned();
        match result {
            Ok(addrs) if !addrs.is_empty() => {
                self.set_addrs(addrs.into_iter().map(OpenTarget::Tcp).collect())
            }
            Ok(_) => {
                self.remember(slot, HostStatus::Down, now);
                self.push_plain_report(
                    slot,
                    format!("could not translate host name \"{host}\" to address: Name or service not known\n"),
                    FailureKind::Transient,
                );
            }
            Err(message) => {
                self.remember(slot, HostStatus::Down, now);
                let text = resolver_text(&message);
                self.push_plain_report(
                    slot,
                    format!("could not translate host name \"{host}\" to address: {text}\n"),
                    FailureKind::Transient,
                );
            }
        }
        let force = self.race();
        self.pump(now, force);
    }

    fn prepare_slot(&self, slot: usize) -> Prep {
        let s = &self.config.slots()[slot];
        let msg = |e: &pgyard_conninfo::typed::SlotError| {
            String::from_utf8_lossy(&e.error().libpq_message()).into_owned()
        };
        let port = match s.port() {
            Ok(p) => p,
            Err(e) if e.aborts() => return Prep::Abort(msg(&e)),
            Err(e) => return Prep::NextSlot(msg(&e)),
        };
        match s.kind() {
            SlotKind::UnixSocket | SlotKind::DefaultUnixSocket => match s.unix_socket_path() {
                Some(Ok(p)) => Prep::Ready(vec![OpenTarget::Unix(p)]),
                Some(Err(e)) if e.aborts() => Prep::Abort(msg(&e)),
                Some(Err(e)) => Prep::NextSlot(msg(&e)),
                None => Prep::NextSlot(String::new()),
            },
            SlotKind::Address => {
                let text = String::from_utf8_lossy(s.hostaddr().unwrap_or_default()).into_owned();
                match text.parse::<IpAddr>() {
                    Ok(ip) => Prep::Ready(vec![OpenTarget::Tcp(SocketAddr::new(ip, port))]),
                    Err(_) => Prep::NextSlot(format!(
                        "could not parse network address \"{text}\": Name or service not known\n"
                    )),
                }
            }
            SlotKind::HostName => {
                let host = String::from_utf8_lossy(s.host().unwrap_or_default()).into_owned();
                // A numeric host needs no lookup (getaddrinfo returns it as is).
                match host.parse::<IpAddr>() {
                    Ok(ip) => Prep::Ready(vec![OpenTarget::Tcp(SocketAddr::new(ip, port))]),
                    Err(_) => Prep::Resolve { host, port },
                }
            }
        }
    }

    fn methods_for(&self, target: &OpenTarget) -> Vec<Method> {
        if matches!(target, OpenTarget::Unix(_)) {
            return vec![Method::Plain];
        }
        match self.config.sslmode() {
            SslMode::Disable => vec![Method::Plain],
            SslMode::Allow => vec![Method::Plain, Method::Ssl],
            SslMode::Prefer => vec![Method::Ssl, Method::Plain],
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => vec![Method::Ssl],
        }
    }

    fn start_run(&mut self, now: Instant, pos: usize, addr_idx: usize, target: OpenTarget) -> bool {
        let Some(&slot) = self.order.get(pos) else {
            return false;
        };
        let methods = self.methods_for(&target);
        // libpq re-arms the timer only when (host, address) changes; race runs each get one.
        let key = (pos, addr_idx);
        let timeout = self.timeout.clone().ok().flatten();
        let deadline = if self.bug(BugId::NoTimeout) {
            None
        } else {
            match self.last_timer {
                Some((k, d)) if k == key && !self.race() => d,
                _ => timeout.map(|t| now + t),
            }
        };
        self.last_timer = Some((key, deadline));
        let placeholder = AttemptId(0);
        let run = Run {
            slot,
            pos,
            target,
            second_pass: self.cursor.second_pass,
            methods,
            method_idx: 0,
            deadline,
            id: placeholder,
            conn: Conn::new(
                Method::Plain,
                false,
                self.conn_params(slot),
                [0; NONCE_RAW_LEN],
            ),
            report: 0,
        };
        self.open_conn(now, run, None)
    }

    /// The startup parameters every connection sends (the same for all of them).
    fn startup_params(&self) -> StartupParams {
        let c = &self.config;
        let mut startup: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        let mut put = |k: &str, v: Option<&[u8]>| {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                startup.push((k.as_bytes().to_vec(), v.to_vec()));
            }
        };
        put("user", Some(c.user()));
        put("database", Some(c.dbname()));
        put("replication", c.replication());
        put("options", Some(c.options()));
        put("application_name", c.startup_application_name());
        put("client_encoding", c.client_encoding());
        for (k, v) in &self.extra_startup {
            if !k.is_empty() && !v.is_empty() {
                startup.push((k.clone(), v.clone()));
            }
        }
        startup.into()
    }

    fn conn_params(&mut self, slot: usize) -> ConnParams {
        let startup = match &self.startup {
            Some(s) => s.clone(),
            None => {
                let s = self.startup_params();
                self.startup = Some(s.clone());
                s
            }
        };
        let c = &self.config;
        let slot_pw = c.slots().get(slot).and_then(|s| s.password());
        let password_from_file = match (slot_pw, c.passfile()) {
            (Some(_), Some(path)) => Some(path.to_vec()),
            _ => None,
        };
        let wire_version = |v: ProtocolVersion| WireVersion(v.code());
        ConnParams {
            user: c.user().to_vec(),
            startup,
            password: c.password_for(slot).map(<[u8]>::to_vec),
            password_from_file,
            require_auth: c.require_auth().clone(),
            channel_binding: match c.channel_binding() {
                CfgChannelBinding::Disable => ChannelBinding::Disable,
                CfgChannelBinding::Prefer => ChannelBinding::Prefer,
                CfgChannelBinding::Require => ChannelBinding::Require,
            },
            min_version: wire_version(c.min_protocol_version()),
            max_version: wire_version(c.max_protocol_version()),
            direct_ssl: c.sslnegotiation() == SslNegotiation::Direct,
            check: Check::for_pass(c.target_session_attrs(), self.cursor.second_pass),
        }
    }

    /// Opens a new connection for `run` with its current method (`old`: the id of the
    /// connection it replaces, for encryption fallback).
    fn open_conn(&mut self, now: Instant, mut run: Run, old: Option<AttemptId>) -> bool {
        let id = match old {
            Some(old) if self.bug(BugId::ReuseId) => old,
            _ => {
                let id = AttemptId(self.next_id);
                self.next_id += 1;
                id
            }
        };
        run.id = id;
        let method = run
            .methods
            .get(run.method_idx)
            .copied()
            .unwrap_or(Method::Plain);
        let plain_next = run.methods.get(run.method_idx + 1) == Some(&Method::Plain);
        let mut params = self.conn_params(run.slot);
        params.check = Check::for_pass(self.config.target_session_attrs(), run.second_pass);
        let mut nonce = [0u8; NONCE_RAW_LEN];
        self.nonce_rng.fill_bytes(&mut nonce);
        let mut conn = Conn::new(method, plain_next, params, nonce);
        conn.ignore_check = self.bug(BugId::IgnoreTsa);
        if self.bug(BugId::StaleParams) {
            #[cfg(feature = "planted-bugs")]
            if let Some((h, d, v)) = self.stale_role {
                conn.inherit_role_state(h, d, v);
            }
        }
        let _ = &self.stale_role;
        run.conn = conn;
        let slot = &self.config.slots()[run.slot];
        // The prefix names hostaddr for address slots, else host (spec §8.4).
        let shown = if slot.kind() == SlotKind::Address {
            slot.hostaddr().unwrap_or_default()
        } else {
            slot.host().unwrap_or_default()
        };
        let port = match slot.port_raw() {
            Some(p) if !p.is_empty() => p,
            _ => b"5432",
        };
        let prefix = report::prefix_for(
            slot.kind() == SlotKind::Address,
            &String::from_utf8_lossy(shown),
            &String::from_utf8_lossy(port),
            &run.target,
        );
        self.reports.push(AttemptReport {
            attempt: Some(id),
            slot: Some(run.slot),
            target: Some(run.target.clone()),
            prefix,
            text: String::new(),
            cancelled: false,
            kind: FailureKind::Transient,
        });
        run.report = self.reports.len() - 1;
        // TCP socket options are parsed when the socket is made; a bad one skips the address.
        let tcp = match &run.target {
            OpenTarget::Unix(_) => None,
            OpenTarget::Tcp(_) => match self.tcp_options() {
                Ok(o) => Some(o),
                Err(msg) => {
                    if let Some(rep) = self.reports.last_mut() {
                        rep.text.push_str(&msg);
                        rep.kind = FailureKind::Configuration;
                    }
                    self.remember(run.slot, HostStatus::Down, now);
                    return false;
                }
            },
        };
        if !self.first_open_done {
            self.first_open_done = true;
            if let Err(msg) = self.timeout.clone() {
                if let Some(rep) = self.reports.last_mut() {
                    rep.text.push_str(&msg);
                    rep.kind = FailureKind::Configuration;
                }
                self.abort();
                return false;
            }
        }
        self.actions.push_back(Action::Open {
            attempt: id,
            target: run.target.clone(),
            tcp,
        });
        self.runs.push(run);
        true
    }

    fn tcp_options(&self) -> Result<TcpOptions, String> {
        let c = &self.config;
        let m = |e: pgyard_conninfo::typed::ConfigError| {
            String::from_utf8_lossy(&e.libpq_message()).into_owned()
        };
        Ok(TcpOptions {
            keepalives: c.keepalives().map_err(m)?,
            keepalives_idle: c.keepalives_idle().map_err(m)?,
            keepalives_interval: c.keepalives_interval().map_err(m)?,
            keepalives_count: c.keepalives_count().map_err(m)?,
            tcp_user_timeout: c.tcp_user_timeout().map_err(m)?,
        })
    }
}

#[derive(Clone, Copy)]
enum BugId {
    IgnoreTsa,
    NoTimeout,
    ReuseId,
    NoPass2,
    StaleParams,
    StartupNextAddr,
    AnyAlpn,
}

fn role_fits(check: Check, role: ServerRole) -> bool {
    match check {
        Check::Any => true,
        Check::Primary | Check::ReadWrite => role == ServerRole::Primary,
        Check::Standby | Check::ReadOnly => role == ServerRole::Standby,
    }
}
