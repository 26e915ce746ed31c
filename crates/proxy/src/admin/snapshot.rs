//! What the admin console shows, as plain data: the adapter fills a [`Snapshot`] from the
//! pools, its server connections and what each client session reports ([`Activity`]), and
//! the console turns it into rows. The per-pool and per-database sums are computed here, so
//! they are tested without sockets.

use std::collections::BTreeMap;
use std::time::Duration;

use pgyard_types::Instant;

use crate::classes::Route;
use crate::client::PoolMode;
use crate::pool::{ClientId, PoolKey, ServerId};

/// One end of a client connection, as SHOW CLIENTS names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientAddr {
    /// A TCP address.
    Tcp(std::net::SocketAddr),
    /// A Unix-domain socket: PgBouncer shows `unix` and the port its socket file is named
    /// after (`.s.PGSQL.PORT`), for both ends.
    Unix {
        /// The port in the socket file's name.
        port: u16,
    },
}

impl ClientAddr {
    /// The `addr` column: the IP address, or `unix`.
    pub fn host(&self) -> String {
        match self {
            ClientAddr::Tcp(a) => a.ip().to_string(),
            ClientAddr::Unix { .. } => "unix".to_owned(),
        }
    }

    /// The `port` column.
    pub fn port(&self) -> u16 {
        match self {
            ClientAddr::Tcp(a) => a.port(),
            ClientAddr::Unix { port } => *port,
        }
    }
}

impl std::fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientAddr::Tcp(a) => a.fmt(f),
            ClientAddr::Unix { port } => write!(f, "unix:{port}"),
        }
    }
}

impl From<std::net::SocketAddr> for ClientAddr {
    fn from(a: std::net::SocketAddr) -> Self {
        ClientAddr::Tcp(a)
    }
}

/// Where a client connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientState {
    /// Startup packets or the password check.
    Login,
    /// Logged in, holding no server and asking for none.
    Idle,
    /// Waiting for a server.
    Waiting,
    /// Holding a server (an admin session: running a command).
    Active,
    /// Finished.
    Closed,
}

impl ClientState {
    /// The word SHOW CLIENTS uses (PgBouncer's, plus `login`).
    pub fn word(self) -> &'static str {
        match self {
            ClientState::Login => "login",
            ClientState::Idle => "idle",
            ClientState::Waiting => "waiting",
            ClientState::Active => "active",
            ClientState::Closed => "closed",
        }
    }
}

/// Counters of one client connection, summed per database by SHOW STATS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Middleware messages consumed.
    pub middleware: u64,
    /// Of which of an unknown class.
    pub unknown_classes: u64,
    /// Servers given back between transactions (transaction mode).
    pub transactions: u64,
    /// Servers lent to it.
    pub assignments: u64,
    /// Transactions ended (a ReadyForQuery `I` after its messages).
    pub xacts: u64,
    /// Queries answered (each ReadyForQuery).
    pub queries: u64,
    /// Bytes read from the client.
    pub received: u64,
    /// Bytes written to the client.
    pub sent: u64,
    /// Microseconds from a transaction's first message to its end.
    pub xact_us: u64,
    /// Microseconds from a query's first message to its ReadyForQuery.
    pub query_us: u64,
    /// Microseconds spent waiting for servers.
    pub wait_us: u64,
}

impl ClientStats {
    /// Adds `other` to these counters (saturating: totals over a long run stay defined).
    pub fn add(&mut self, other: &ClientStats) {
        self.middleware = self.middleware.saturating_add(other.middleware);
        self.unknown_classes = self.unknown_classes.saturating_add(other.unknown_classes);
        self.transactions = self.transactions.saturating_add(other.transactions);
        self.assignments = self.assignments.saturating_add(other.assignments);
        self.xacts = self.xacts.saturating_add(other.xacts);
        self.queries = self.queries.saturating_add(other.queries);
        self.received = self.received.saturating_add(other.received);
        self.sent = self.sent.saturating_add(other.sent);
        self.xact_us = self.xact_us.saturating_add(other.xact_us);
        self.query_us = self.query_us.saturating_add(other.query_us);
        self.wait_us = self.wait_us.saturating_add(other.wait_us);
    }
}

/// What a client session reports about itself ([`crate::ClientSession::activity`]): small
/// and `Copy`, so that the adapter can compare it with what it last published and publish
/// only changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Activity {
    /// Where it stands.
    pub state: ClientState,
    /// An admin console session.
    pub admin: bool,
    /// It passed the password check (its counters belong to its database).
    pub logged_in: bool,
    /// The route of the pool it uses, waits for or would use next.
    pub route: Route,
    /// The server it holds.
    pub server: Option<ServerId>,
    /// Since when it waits for a server.
    pub wait_since: Option<Instant>,
    /// When it last sent a message after logging in.
    pub last_request: Option<Instant>,
    /// It will be closed at its next transaction boundary (the proxy drains).
    pub draining: bool,
    /// Named statements it has prepared.
    pub prepared: usize,
    /// Changes whenever its TAG or `application_name` changes.
    pub labels: u32,
    /// Its counters.
    pub stats: ClientStats,
}

impl Activity {
    /// Whether its counters count in SHOW STATS (a logged-in client of a database).
    pub fn counted(&self) -> bool {
        self.logged_in && !self.admin
    }
}

/// One client connection in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRow {
    /// The proxy's id for it.
    pub id: ClientId,
    /// Its user (empty before its StartupMessage).
    pub user: String,
    /// Its database.
    pub database: String,
    /// Where it stands, with its counters.
    pub activity: Activity,
    /// Its address.
    pub addr: Option<ClientAddr>,
    /// The proxy's address it connected to.
    pub local: Option<ClientAddr>,
    /// When it connected (seconds since the Unix epoch).
    pub connect_time: Option<u64>,
    /// When it last sent a message (seconds since the Unix epoch).
    pub request_time: Option<u64>,
    /// How long it has waited for a server so far.
    pub wait: Duration,
    /// A description of its TLS session (`None`: plain).
    pub tls: Option<String>,
    /// Its `application_name`.
    pub application_name: String,
    /// Its TAG.
    pub tag: Option<String>,
    /// What its `options` asks of its servers beyond the tracked settings (its pool's
    /// `options`).
    pub options: String,
}

impl ClientRow {
    /// The pool it belongs to (`None` before login, and for admin sessions).
    pub fn pool(&self) -> Option<PoolKey> {
        let a = &self.activity;
        (a.logged_in && !a.admin).then(|| PoolKey {
            database: self.database.clone(),
            user: self.user.clone(),
            route: a.route,
            options: self.options.clone(),
        })
    }
}

/// Where a server connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerState {
    /// Being opened (PgBouncer's `sv_login`, shown as `new`).
    New,
    /// Pooled.
    Idle,
    /// Lent to a client.
    Active,
    /// Running `DISCARD ALL` before it is pooled again (session mode).
    Tested,
}

impl ServerState {
    /// The word SHOW SERVERS uses (PgBouncer's).
    pub fn word(self) -> &'static str {
        match self {
            ServerState::New => "new",
            ServerState::Idle => "idle",
            ServerState::Active => "active",
            ServerState::Tested => "tested",
        }
    }
}

/// One server connection in a snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerRow {
    /// The proxy's id for it.
    pub id: ServerId,
    /// Its pool.
    pub key: PoolKey,
    /// Where it stands.
    pub state: ServerState,
    /// The client holding it.
    pub client: Option<ClientId>,
    /// The address it is connected to (an IP, or a Unix socket path).
    pub addr: Option<String>,
    /// Its port.
    pub port: Option<u16>,
    /// When it was opened (seconds since the Unix epoch).
    pub connect_time: Option<u64>,
    /// When it was last lent (seconds since the Unix epoch).
    pub request_time: Option<u64>,
    /// It will be closed when it comes back (its database's backend changed).
    pub close_needed: bool,
    /// The server's process id.
    pub pid: Option<i32>,
    /// Whether the connection uses TLS.
    pub tls: bool,
    /// Its `application_name` as last reported.
    pub application_name: String,
    /// Statements the proxy prepared on it, as of when it was last pooled.
    pub prepared: usize,
}

/// One `key`/`value` setting of SHOW CONFIG.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRow {
    /// The configuration file's key.
    pub key: String,
    /// The value in force.
    pub value: String,
    /// The default.
    pub default: String,
    /// Whether a reload changes it.
    pub changeable: bool,
}

/// One database as SHOW DATABASES shows it: a `[databases.NAME]` entry, or a name clients
/// use that the fallback backend serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DatabaseRow {
    /// The name clients ask for.
    pub name: String,
    /// The connection string's host list as written (`None`: libpq's default, a Unix socket).
    pub host: Option<String>,
    /// The connection string's first port (`None`: 5432).
    pub port: Option<u16>,
    /// The database's name on the servers.
    pub database: String,
    /// Server connections per (database, user, route) pool.
    pub pool_size: usize,
    /// Whether it is paused by name (PAUSE db, KILL db); PAUSE of every database shows
    /// as [`Snapshot::paused`].
    pub paused: bool,
    /// Whether DISABLE refuses new logins to it.
    pub disabled: bool,
}

/// Everything the admin console shows, taken at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The pool mode.
    pub pool_mode: PoolMode,
    /// Whether PAUSE is in force.
    pub paused: bool,
    /// Every pool the proxy has had.
    pub pools: Vec<PoolKey>,
    /// Every client connection.
    pub clients: Vec<ClientRow>,
    /// Every server connection.
    pub servers: Vec<ServerRow>,
    /// The counters of clients that have left, per database.
    pub retired: BTreeMap<String, ClientStats>,
    /// The configuration in force.
    pub config: Vec<ConfigRow>,
    /// The databases, by name.
    pub databases: Vec<DatabaseRow>,
}

/// One pool's counts (SHOW POOLS).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolRow {
    /// Clients holding a server or idle between transactions.
    pub cl_active: usize,
    /// Clients waiting for a server.
    pub cl_waiting: usize,
    /// Servers lent.
    pub sv_active: usize,
    /// Servers pooled.
    pub sv_idle: usize,
    /// Servers running `DISCARD ALL`.
    pub sv_tested: usize,
    /// Servers being opened.
    pub sv_login: usize,
    /// How long the longest-waiting client has waited.
    pub maxwait: Duration,
}

impl Snapshot {
    /// The counts of every pool, by key: the pools the proxy has, and those its clients
    /// stand in.
    pub fn pool_rows(&self) -> BTreeMap<PoolKey, PoolRow> {
        let mut rows: BTreeMap<PoolKey, PoolRow> = self
            .pools
            .iter()
            .map(|k| (k.clone(), PoolRow::default()))
            .collect();
        for c in &self.clients {
            let Some(key) = c.pool() else { continue };
            let row = rows.entry(key).or_default();
            match c.activity.state {
                ClientState::Waiting => {
                    row.cl_waiting += 1;
                    row.maxwait = row.maxwait.max(c.wait);
                }
                ClientState::Idle | ClientState::Active => row.cl_active += 1,
                ClientState::Login | ClientState::Closed => {}
            }
        }
        for s in &self.servers {
            let row = rows.entry(s.key.clone()).or_default();
            match s.state {
                ServerState::New => row.sv_login += 1,
                ServerState::Idle => row.sv_idle += 1,
                ServerState::Active => row.sv_active += 1,
                ServerState::Tested => row.sv_tested += 1,
            }
        }
        rows
    }

    /// SHOW LISTS's counts, in PgBouncer's order. pgyard keeps no free lists of client or
    /// server structures, and resolves names through the connect machine, not a DNS cache of
    /// its own, so those counts are 0; `users` are the distinct users of the pools SHOW POOLS
    /// lists (PgBouncer counts the users it has loaded).
    pub fn lists(&self) -> [(&'static str, usize); 12] {
        let pools = self.pool_rows();
        let users = self.users();
        let login = self
            .clients
            .iter()
            .filter(|c| c.activity.state == ClientState::Login)
            .count();
        [
            ("databases", self.databases.len()),
            ("users", users.len()),
            ("pools", pools.len()),
            ("free_clients", 0),
            ("used_clients", self.clients.len()),
            ("login_clients", login),
            ("free_servers", 0),
            ("used_servers", self.servers.len()),
            ("dns_names", 0),
            ("dns_zones", 0),
            ("dns_queries", 0),
            ("dns_pending", 0),
        ]
    }

    /// The distinct users of the pools SHOW POOLS lists, in order (SHOW USERS's rows).
    pub fn users(&self) -> std::collections::BTreeSet<String> {
        self.pool_rows().into_keys().map(|k| k.user).collect()
    }

    /// Every database's counters added up (SHOW TOTALS).
    pub fn totals(&self) -> ClientStats {
        let mut all = ClientStats::default();
        for t in self.stats().values() {
            all.add(t);
        }
        all
    }

    /// Server connections per database name (SHOW DATABASES's `current_connections`).
    pub fn connections(&self, database: &str) -> usize {
        self.servers
            .iter()
            .filter(|s| s.key.database == database)
            .count()
    }

    /// The counters per database: those of clients that left, plus those of clients here.
    pub fn stats(&self) -> BTreeMap<String, ClientStats> {
        let mut out = self.retired.clone();
        for c in self.clients.iter().filter(|c| c.activity.counted()) {
            out.entry(c.database.clone())
                .or_default()
                .add(&c.activity.stats);
        }
        out
    }
}
