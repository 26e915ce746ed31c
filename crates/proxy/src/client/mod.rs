//! One client connection of the proxy, as a sans-IO machine: bytes from the client and from
//! the server it is lent go in with the time, and out come bytes for either side and requests
//! for the pool ([`ClientOut`]). It answers the startup packets itself, checks the client's
//! password against the auth file, consumes every middleware message (`M` never reaches a
//! server), keeps the client's session settings across servers, and says when the server can
//! go back to the pool: in transaction mode at ReadyForQuery `I` with nothing outstanding; in
//! session mode when the client leaves.

mod admin;
mod fast;
mod options;
mod params;
mod prepared;
mod relay;
mod startup;
#[cfg(feature = "arbitrary")]
pub(crate) use startup::MIDDLEWARE_OPTION;
mod tls;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgyard_types::{Instant, Lsn};
use pgyard_wire::auth::{LoginRandom, LoginSecret, ServerLogin};
use pgyard_wire::error_fields::encode_error_response;
use pgyard_wire::frame::{Limits, ProtocolVersion};
use pgyard_wire::middleware::Splitter;

pub use params::{alignment, alignment_queries, tracked, Settings, CARRIED, TRACKED};
pub use tls::{ClientCert, ClientTls, TlsMode, ALPN_POSTGRESQL};

pub use crate::admin::ClientStats;
use crate::admin::{Activity, AdminRequest, ClientState, Command};
use crate::auth_file::AuthFile;
use crate::classes::Route;
use crate::pool::{ClientId, PoolKey, ServerId};
use crate::scan::Scanner;

/// Most client bytes held while the client waits for a server; past it the adapter stops
/// reading from the client ([`ClientSession::wants_client_bytes`]).
pub const PENDING_MAX: usize = 1 << 20;

/// When a server goes back to the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolMode {
    /// When the client disconnects (after `DISCARD ALL`).
    Session,
    /// After each transaction.
    Transaction,
}

/// How clients prove who they are.
#[derive(Clone, Debug)]
pub enum ClientAuth {
    /// No check (only on loopback listeners; the adapter enforces that).
    Trust,
    /// Against a user list.
    File(Arc<AuthFile>),
    /// PostgreSQL's `peer`, for a client on a Unix socket: the operating-system user at the
    /// other end of the socket (the adapter reads it from the socket's credentials; `None`
    /// when it could not) must be the user the client asks for. No password is asked.
    Peer {
        /// The connecting process's user name.
        os_user: Option<String>,
    },
    /// PostgreSQL's `cert`: the client's certificate, verified against the proxy's CA during
    /// the TLS handshake, must have the user name as its Common Name. No password is asked;
    /// a client without TLS or without a certificate is refused.
    Cert,
}

/// Which database names clients may ask for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Databases {
    /// Any name (the proxy has a fallback backend for names it has no entry for).
    #[default]
    Any,
    /// Only these; any other gets FATAL 08P01 `no such database: NAME` after the password
    /// check, PgBouncer's answer (so the answer does not tell who may log in).
    Only(Arc<BTreeSet<String>>),
}

impl Databases {
    /// Whether a client may ask for `name`.
    pub fn allows(&self, name: &str) -> bool {
        match self {
            Databases::Any => true,
            Databases::Only(names) => names.contains(name),
        }
    }
}

/// What every client session of a listener shares.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The password check.
    pub auth: ClientAuth,
    /// When servers go back to the pool.
    pub pool_mode: PoolMode,
    /// The route of a client that never sends ROUTE.
    pub default_route: Route,
    /// How long a client may take from connecting to being logged in.
    pub login_timeout: Duration,
    /// The database names served.
    pub databases: Databases,
    /// The users who may open the admin console (database `pgyard`); under trust, every
    /// user may.
    pub admin_users: Arc<BTreeSet<String>>,
    /// Databases DISABLEd on the admin console when the client connected: a login to one
    /// gets FATAL 08P01 `database "NAME" is disabled` after the password check.
    pub disabled: Arc<BTreeSet<String>>,
    /// StartupMessage settings the proxy ignores (PgBouncer's `ignore_startup_parameters`;
    /// names in lower case). Every other setting of the StartupMessage that the proxy does
    /// not track goes to the servers of the client's pool, in its `options`.
    pub ignore_startup_parameters: Arc<BTreeSet<String>>,
}

/// The StartupMessage settings ignored unless the configuration says otherwise: pgJDBC sends
/// `extra_float_digits=3` unasked, and from PostgreSQL 12 on any value above 0 prints the
/// same shortest exact text, so honouring it would only split each JDBC client's pool off.
pub const IGNORED_BY_DEFAULT: &[&str] = &["extra_float_digits"];

impl ClientConfig {
    /// `auth` and `pool_mode` with the defaults of `pgyard proxy`: the `primary` route,
    /// PgBouncer's `client_login_timeout` of 60 s, every database, nothing disabled, no admin
    /// users (under trust every user may open the console), [`IGNORED_BY_DEFAULT`] ignored.
    pub fn new(auth: ClientAuth, pool_mode: PoolMode) -> Self {
        ClientConfig {
            auth,
            pool_mode,
            default_route: Route::Primary,
            login_timeout: Duration::from_secs(60),
            databases: Databases::Any,
            admin_users: Default::default(),
            disabled: Default::default(),
            ignore_startup_parameters: Arc::new(
                IGNORED_BY_DEFAULT.iter().map(|&n| n.to_owned()).collect(),
            ),
        }
    }
}

/// A server lent to the client, with the settings it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lent {
    /// The server.
    pub id: ServerId,
    /// Its reported settings, kept up to date while the client uses it.
    pub settings: Settings,
    /// The statements the proxy prepared on it (transaction mode), with their age.
    pub prepared: BTreeMap<String, u64>,
}

impl Lent {
    /// Whether it last reported being a standby (`in_hot_standby`), when it says.
    pub fn in_recovery(&self) -> Option<bool> {
        self.settings.in_hot_standby()
    }
}

/// What the client session asks of the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientOut {
    /// Write to the client.
    ToClient(Bytes),
    /// Write to the lent server.
    ToServer(Bytes),
    /// A server of this pool is needed; answer with [`ClientSession::handle_server`] (or
    /// [`ClientSession::handle_refused`]).
    /// (Shared: the session keeps one key per route and hands out a reference to it, so a
    /// transaction clones no names.)
    Acquire(Arc<PoolKey>),
    /// Give the server back: `reusable` when it stands idle, clean, and between transactions
    /// (in session mode the adapter runs `DISCARD ALL` first).
    Release {
        /// The server and its settings.
        server: Lent,
        /// Whether it may serve another client.
        reusable: bool,
    },
    /// An admin command needs the adapter: answer with [`ClientSession::handle_admin`].
    Admin(AdminRequest),
    /// A CancelRequest arrived on this connection: cancel the query of the client holding
    /// these keys (the proxy's own keys), then this connection closes.
    Cancel {
        /// The process id the proxy gave.
        pid: i32,
        /// The secret key the proxy gave.
        key: Vec<u8>,
    },
    /// Start TLS on the client connection once everything before this is written (the `S`
    /// answering an SSLRequest, or nothing for direct TLS), then report the outcome with
    /// [`ClientSession::handle_tls_established`] (a failed handshake:
    /// [`ClientSession::handle_client_gone`]). Until then no client bytes may be fed.
    StartTls {
        /// Bytes already read that belong to the handshake (direct TLS's first record), to
        /// be given to the TLS layer before anything read from the socket.
        early: Bytes,
    },
    /// Close the client connection once everything before this is written.
    Close,
}

/// Realistic bugs for the simulator to catch; compiled only with the `planted-bugs` feature
/// and off until switched on with [`ClientSession::with_planted_bug`].
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Give the server back at ReadyForQuery `T` (inside a transaction block) too.
    ReleaseInTransaction,
    /// Send middleware messages on to the server as well as acting on them.
    ForwardMiddleware,
    /// Rename a named statement on a server that lacks it without parsing it there first.
    ForgetStatementOnNewServer,
    /// Forget to ask the adapter for the replay position a MIN_LSN transaction needs, so it
    /// runs on whichever standby is offered, however far behind.
    IgnoreMinLsn,
    /// In session mode, give the server back at the ReadyForQuery that ends each transaction,
    /// as in transaction mode, so the session's state stays behind on a server others get.
    ReleaseSessionAtReady,
    /// Take a new client's settings from the welcome server's tracked settings as they are
    /// now, so what an earlier client `SET` there becomes the new client's (the bug fixed in
    /// session 32; since session 33 those settings are the welcome's alignment's target).
    WelcomeShowsCurrentSettings,
    /// Take a server found aligned once as aligned for good, though another client changed
    /// its settings since.
    TrustServerAlignedOnce,
    /// Show and compare a client's startup settings as it spelt them, not as the server
    /// spells them after taking them (the bug fixed in session 33: a client that sent
    /// `DateStyle=ISO` had it set again before every transaction).
    WelcomeShowsClientSpelling,
    /// Key a client's pool by its database, user and route only, so a server logged in with
    /// one client's `options` (say `-c work_mem=1MB`) serves another's transactions.
    PoolIgnoresOptions,
}

/// The planted bug in force (never anything without the `planted-bugs` feature).
#[cfg(feature = "planted-bugs")]
type Bug = Option<PlantedBug>;
#[cfg(not(feature = "planted-bugs"))]
type Bug = Option<std::convert::Infallible>;

/// The proxy's cancel keys for one client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelKey {
    /// The process id.
    pub pid: i32,
    /// The secret: 4 bytes under 3.0, 32 under 3.2.
    pub secret: Vec<u8>,
}

#[derive(Debug)]
enum Phase {
    /// Reading startup packets.
    Startup,
    /// Checking the password.
    Login(Box<ServerLogin>),
    /// Logged in, waiting for the first server, whose settings the client is shown.
    Welcome,
    /// Between transactions without a server (transaction mode).
    Idle,
    /// Waiting for a server, holding what the client sent.
    Waiting,
    /// Aligning the lent server's settings; its replies are not the client's.
    Aligning(Alignment),
    /// Relaying between the client and its server.
    Active,
    /// An admin console session, and the command whose answer the adapter owes.
    Admin { pending: Option<Command> },
    /// Done: nothing more is read.
    Closed,
}

/// An alignment under way.
#[derive(Debug, Default)]
struct Alignment {
    /// The welcome waits for it: it sets the client's startup values, which the server may
    /// refuse (as it would refuse them in a direct StartupMessage) or spell otherwise.
    welcome: bool,
    /// The server's ErrorResponse body: the `SET`s failed.
    failed: Option<Bytes>,
    /// ReadyForQuerys still to come (two when the encoding went in a query of its own).
    readies: u8,
}

/// Who the client is, from its StartupMessage.
#[derive(Clone, Debug, Default)]
struct Identity {
    user: String,
    database: String,
    version: Option<ProtocolVersion>,
    /// Whether it asked for middleware messages (`_pq_.middleware_messages=on`).
    middleware: bool,
    /// What its `options` asks of a server beyond the tracked settings, written out again
    /// (empty: nothing); its pool's servers log in with it.
    options: String,
}

/// One client connection.
#[derive(Debug)]
pub struct ClientSession {
    id: ClientId,
    config: ClientConfig,
    key: CancelKey,
    random: LoginRandom,
    phase: Phase,
    who: Identity,
    splitter: Splitter,
    client_scan: Scanner,
    server_scan: Scanner,
    /// The server scanner's frame list, handed back after each chunk (kept for its room).
    server_frames: Vec<crate::scan::Frame>,
    /// Whether the transaction-mode shortcuts (`fast.rs`) may be taken, and how often each
    /// was (requests, replies).
    shortcuts: bool,
    shortcuts_taken: (u64, u64),
    /// The client's pool keys, one per route asked for.
    keys: Vec<Arc<PoolKey>>,
    /// Servers found aligned with the client's settings (transaction mode).
    verified: params::Verified,
    /// The proxy's own notices, held while a server's reply to the client is mid-frame.
    held_notices: BytesMut,
    /// Why the StartupMessage's `options` end the login once the password is right, as a
    /// server ends it.
    options_refused: Option<options::OptionsError>,
    out: VecDeque<ClientOut>,
    /// Login buffer (password messages are read whole).
    login_buf: BytesMut,
    route: Route,
    min_lsn: Option<Lsn>,
    tag: Option<String>,
    /// What the client proved at login (its MD5 secret or SCRAM keys), for server logins.
    proven: Option<LoginSecret>,
    /// What the client should see of the tracked settings.
    wanted: Settings,
    server: Option<Lent>,
    /// Client bytes waiting for a server (or for the alignment to finish); whole frames in
    /// transaction mode.
    pending: BytesMut,
    /// Transaction mode: client bytes short of a whole frame.
    client_buf: BytesMut,
    /// Transaction mode: the client's named statements and the lent server's reply queue.
    prepared: prepared::Prepared,
    /// Ages of the statements prepared on servers.
    seq: u64,
    /// The route of the server asked for (its pool is this client's of that route).
    asked: Option<Route>,
    /// Queries and Syncs sent whose ReadyForQuery has not come back.
    outstanding: u32,
    /// Extended-protocol messages sent since the last Sync.
    unsynced: bool,
    /// The last transaction status the server reported.
    status: u8,
    deadline: Option<Instant>,
    stats: ClientStats,
    #[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
    bug: Bug,
    /// The proxy has `max_client_conn` clients already: refuse this one once it has said
    /// who it is.
    over_limit: bool,
    /// The proxy is shutting down: close at the next transaction boundary.
    draining: bool,
    /// The latest time given with an event (for the counters' timings).
    now: Instant,
    /// It passed the password check (and the database and admin checks).
    logged_in: bool,
    /// An admin console session.
    admin: bool,
    /// Bumped when the TAG or `application_name` changes, so the adapter copies them.
    labels: u32,
    /// The route of the pool last asked.
    at_route: Route,
    /// Since when it waits for a server.
    wait_since: Option<Instant>,
    /// When it last sent a message after login.
    last_request: Option<Instant>,
    /// When the running transaction, and the running query, began.
    xact_start: Option<Instant>,
    query_start: Option<Instant>,
    /// TLS to the client: the mode, the link, the requests answered.
    tls: tls::TlsSide,
}

/// The scanner of a server's bytes, at a frame boundary: it copies aside ReadyForQuery,
/// ParameterStatus and CommandComplete bodies.
fn server_scanner() -> Scanner {
    Scanner::new(Limits::libpq_client(), |t| matches!(t, b'Z' | b'S' | b'C'))
}

impl ClientSession {
    /// A new client connection at `now`, with the cancel key it will be given and the
    /// randomness its login draws.
    pub fn new(
        now: Instant,
        id: ClientId,
        config: ClientConfig,
        key: CancelKey,
        random: LoginRandom,
    ) -> Self {
        let limits = Limits::postgres_server();
        ClientSession {
            id,
            deadline: Some(now + config.login_timeout),
            route: config.default_route,
            config,
            key,
            random,
            phase: Phase::Startup,
            who: Identity::default(),
            splitter: Splitter::new(
                limits
                    .clone()
                    .with_tag_max(b'M', pgyard_wire::middleware::DEFAULT_MIDDLEWARE_LEN_MAX),
            ),
            // A Terminate is the proxy's (see `client_frames`): none of it may reach a server.
            client_scan: Scanner::new(limits, |_| false).holding(|t| t == b'X'),
            server_scan: server_scanner(),
            server_frames: Vec::new(),
            shortcuts: true,
            shortcuts_taken: (0, 0),
            keys: Vec::new(),
            verified: params::Verified::default(),
            held_notices: BytesMut::new(),
            options_refused: None,
            out: VecDeque::new(),
            login_buf: BytesMut::new(),
            min_lsn: None,
            tag: None,
            proven: None,
            wanted: Settings::new(),
            server: None,
            pending: BytesMut::new(),
            client_buf: BytesMut::new(),
            prepared: prepared::Prepared::default(),
            seq: 0,
            asked: None,
            outstanding: 0,
            unsynced: false,
            status: b'I',
            stats: ClientStats::default(),
            bug: None,
            over_limit: false,
            draining: false,
            now,
            logged_in: false,
            admin: false,
            labels: 0,
            at_route: Route::Primary,
            wait_since: None,
            last_request: None,
            xact_start: None,
            query_start: None,
            tls: tls::TlsSide::default(),
        }
    }

    /// A client beyond the proxy's `max_client_conn`: after its StartupMessage it gets FATAL
    /// 53300 `no more connections allowed (max_client_conn)` (PgBouncer's text) and is closed.
    pub fn over_limit(mut self) -> Self {
        self.over_limit = true;
        self
    }

    /// The same session that never takes the transaction-mode shortcuts: what it outputs
    /// must not differ (the structured session fuzzer runs both).
    #[doc(hidden)]
    pub fn without_shortcuts(mut self) -> Self {
        self.shortcuts = false;
        self
    }

    /// How many requests and replies took the transaction-mode shortcuts (for tests that
    /// they are reached).
    #[doc(hidden)]
    pub fn shortcuts_taken(&self) -> (u64, u64) {
        self.shortcuts_taken
    }

    /// The proxy is shutting down. A client that has not logged in, or stands between
    /// transactions holding no server, gets FATAL 08P01 `pooler is shutting down` (PgBouncer's
    /// text) now; in transaction mode any other is closed so at its next transaction
    /// boundary, after the ReadyForQuery that ends its transaction; in session mode a
    /// logged-in client is left to leave by itself (its session state lives on its server).
    pub fn handle_shutdown(&mut self) {
        self.draining = true;
        match self.phase {
            Phase::Startup | Phase::Login(_) | Phase::Welcome | Phase::Idle => self.shut(),
            Phase::Admin { .. } => self.shut(),
            Phase::Waiting | Phase::Aligning(_) | Phase::Active | Phase::Closed => {}
        }
    }

    /// KILL of the client's database on the admin console: FATAL 08P01 `database removed`
    /// (PgBouncer's text) now, whatever the client is doing; a server it holds goes back,
    /// reusable only between transactions (the pools close it: the database is paused).
    /// A console session is not a client of any database and is left alone.
    pub fn handle_kill(&mut self) {
        if !self.admin {
            self.fatal(b"08P01", crate::admin::KILLED);
        }
    }

    /// Whether [`ClientSession::handle_shutdown`] was called.
    pub fn is_draining(&self) -> bool {
        self.draining
    }

    /// Closes the client because the proxy is shutting down.
    fn shut(&mut self) {
        self.fatal(b"08P01", "pooler is shutting down");
    }

    /// Switches a planted bug on (simulator tests only).
    #[cfg(feature = "planted-bugs")]
    pub fn with_planted_bug(mut self, bug: PlantedBug) -> Self {
        self.bug = Some(bug);
        self
    }

    /// Whether `bug` is switched on.
    #[cfg(feature = "planted-bugs")]
    fn planted(&self, bug: PlantedBug) -> bool {
        self.bug == Some(bug)
    }

    /// The client's id.
    pub fn id(&self) -> ClientId {
        self.id
    }

    /// The user and database the client logged in as (empty before its StartupMessage).
    pub fn identity(&self) -> (&str, &str) {
        (&self.who.user, &self.who.database)
    }

    /// What the client's `options` asks of its servers beyond the tracked settings, as the
    /// `options` its pool's servers log in with (empty: nothing).
    pub fn server_options(&self) -> &str {
        &self.who.options
    }

    /// The cancel secret the client was given (4 bytes under protocol 3.0, all of it under
    /// 3.2), once its StartupMessage said which; a CancelRequest must carry exactly this.
    pub fn cancel_secret(&self) -> Option<&[u8]> {
        let version = self.who.version?;
        let secret = &self.key.secret[..];
        Some(if version.has_variable_cancel_key() {
            secret
        } else {
            &secret[..4.min(secret.len())]
        })
    }

    /// The process id in the client's cancel key.
    pub fn cancel_pid(&self) -> i32 {
        self.key.pid
    }

    /// The route its next transaction takes.
    pub fn route(&self) -> Route {
        self.route
    }

    /// Its TAG, if it sent one.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// What the client proved knowledge of at login: its auth-file entry's MD5 secret or the
    /// SCRAM keys of its verifier (none under trust). Servers of its pool log in with it
    /// when nothing better is at hand (pass-through; a plain-text entry's password is better).
    pub fn proven_secret(&self) -> Option<&LoginSecret> {
        self.proven.as_ref()
    }

    /// The server it holds.
    pub fn server(&self) -> Option<ServerId> {
        self.server.as_ref().map(|s| s.id)
    }

    /// Counters.
    pub fn stats(&self) -> &ClientStats {
        &self.stats
    }

    /// Whether it is finished (the adapter closes the connection after the output).
    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Whether the adapter should read from the client now (false while a server is awaited
    /// and [`PENDING_MAX`] bytes are held).
    pub fn wants_client_bytes(&self) -> bool {
        !self.is_closed() && self.pending.len() < PENDING_MAX
    }

    /// The next output.
    pub fn poll_output(&mut self) -> Option<ClientOut> {
        let out = self.out.pop_front();
        if let Some(ClientOut::ToClient(b)) = &out {
            self.stats.sent += b.len() as u64;
        }
        out
    }

    /// Where it stands, for the admin console.
    pub fn activity(&self) -> Activity {
        let state = match self.phase {
            Phase::Startup | Phase::Login(_) => ClientState::Login,
            Phase::Welcome | Phase::Waiting => ClientState::Waiting,
            Phase::Idle | Phase::Admin { pending: None } => ClientState::Idle,
            Phase::Aligning(_) | Phase::Active | Phase::Admin { pending: Some(_) } => {
                ClientState::Active
            }
            Phase::Closed => ClientState::Closed,
        };
        let route = match state {
            ClientState::Waiting | ClientState::Active => self.at_route,
            _ => self.route,
        };
        Activity {
            state,
            admin: self.admin,
            logged_in: self.logged_in,
            route,
            server: self.server(),
            wait_since: self.wait_since,
            last_request: self.last_request,
            draining: self.draining,
            prepared: self.prepared.count(),
            labels: self.labels,
            stats: self.stats,
        }
    }

    /// The `application_name` the client sees.
    pub fn application_name(&self) -> Option<&str> {
        self.wanted.get("application_name").map(String::as_str)
    }

    /// When [`ClientSession::handle_timeout`] is due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// The login timeout.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.now = self.now.max(now);
        if self.deadline.is_some_and(|d| d <= now) {
            self.deadline = None;
            self.fatal(b"08P01", "client_login_timeout");
        }
    }

    /// Bytes from the client.
    pub fn handle_client_bytes(&mut self, now: Instant, data: &[u8]) {
        if self.is_closed() || self.tls_takes(data) {
            return;
        }
        self.now = self.now.max(now);
        self.stats.received += data.len() as u64;
        if self.whole_request(data) {
            return;
        }
        self.splitter.feed(data);
        self.drain_client(now);
    }

    /// The client's connection ended (EOF or error).
    pub fn handle_client_gone(&mut self) {
        self.release_for_good();
        self.close();
    }

    /// Nothing more is read or timed.
    fn close(&mut self) {
        self.phase = Phase::Closed;
        self.deadline = None;
    }

    /// Writes an ErrorResponse to the client.
    fn error(&mut self, severity: &[u8], code: &[u8], message: &str) {
        self.error_hinted(severity, code, message, None);
    }

    /// An ErrorResponse with a hint when there is one.
    fn error_hinted(&mut self, severity: &[u8], code: &[u8], message: &str, hint: Option<&str>) {
        let mut buf = BytesMut::new();
        let mut fields: Vec<(u8, &[u8])> = vec![
            (b'S', severity),
            (b'V', severity),
            (b'C', code),
            (b'M', message.as_bytes()),
        ];
        if let Some(h) = hint {
            fields.push((b'H', h.as_bytes()));
        }
        if encode_error_response(&fields, &mut buf).is_ok() {
            self.out.push_back(ClientOut::ToClient(buf.freeze()));
        }
    }

    /// A FATAL error, then the connection closes (its server goes back unless mid-protocol).
    fn fatal(&mut self, code: &[u8], message: &str) {
        if self.is_closed() {
            return;
        }
        self.error(b"FATAL", code, message);
        self.fatal_sent();
    }

    /// The connection closes after a FATAL error already queued.
    fn fatal_sent(&mut self) {
        self.release_for_good();
        self.out.push_back(ClientOut::Close);
        self.close();
    }

    /// Gives the server back as the client leaves: reusable only between transactions with
    /// nothing outstanding.
    fn release_for_good(&mut self) {
        self.prepared.reset_queue();
        if let Some(server) = self.server.take() {
            // Session mode streams client frames as they come: a server that got part of
            // one would read the next client's bytes as its rest.
            let clean = self.outstanding == 0
                && !self.unsynced
                && self.status == b'I'
                && self.server_scan.at_boundary()
                && !self.client_scan.inside_frame()
                && !matches!(self.phase, Phase::Aligning(_));
            self.out.push_back(ClientOut::Release {
                server,
                reusable: clean,
            });
        }
        self.pending.clear();
    }

    /// Asks the pool for a server of the client's pool on `route`.
    fn acquire(&mut self, route: Route) {
        let key = self.key_for(route);
        self.wait_since.get_or_insert(self.now);
        self.at_route = key.route;
        self.asked = Some(key.route);
        self.out.push_back(ClientOut::Acquire(key));
    }

    /// The key of the client's pool on `route`, made once (the client's user and database
    /// never change after its StartupMessage).
    fn key_for(&mut self, route: Route) -> Arc<PoolKey> {
        if let Some(key) = self.keys.iter().find(|k| k.route == route) {
            return key.clone();
        }
        #[allow(unused_mut)]
        let mut options = self.who.options.clone();
        #[cfg(feature = "planted-bugs")]
        if self.planted(PlantedBug::PoolIgnoresOptions) {
            options.clear();
        }
        let key = Arc::new(PoolKey {
            database: self.who.database.clone(),
            user: self.who.user.clone(),
            route,
            options,
        });
        self.keys.push(key.clone());
        key
    }

    /// The position (MIN_LSN) the server about to be lent must have replayed, when the next
    /// transaction goes to a route other than `primary`; the adapter checks the server's
    /// replay position and calls [`ClientSession::fall_back`] when it is behind.
    pub fn needs_lsn(&self) -> Option<Lsn> {
        #[cfg(feature = "planted-bugs")]
        if self.planted(PlantedBug::IgnoreMinLsn) {
            return None;
        }
        self.min_lsn.filter(|_| self.route != Route::Primary)
    }

    /// The server offered for a MIN_LSN transaction has not replayed that far (it went back
    /// to the pool): the transaction runs on the primary, which has every write, instead of
    /// waiting for the standby (docs/proxy.md).
    pub fn fall_back(&mut self) {
        if matches!(self.phase, Phase::Waiting) && self.min_lsn.take().is_some() {
            self.acquire(Route::Primary);
        }
    }
}
