//! `pgyard proxy` over tokio: listeners whose client connections each run a
//! [`pgyard_proxy::ClientSession`] in a task, and the [`pgyard_proxy::Pools`] with the idle
//! server connections, shared under one lock. Server connections are opened by
//! [`crate::connect`] (the connect machine through the shared driver core) with the
//! database's hosts and the route's `target_session_attrs`. Decisions are the machines'; this
//! module only moves bytes, time and connections, and swaps the configuration on a reload.
//! See `docs/proxy.md`.

mod client_io;
mod client_task;
mod config_file;
mod kick;
mod refusal;
mod shared;
#[cfg(test)]
mod stand_in;
mod tls;
mod unix;

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::admin::ADMIN_DATABASE;
use pgyard_proxy::{AuthFile, ClientAuth, ClientConfig, Databases, PoolSettings};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use config_file::{load_config, parse_config, FileConfig, CONFIG_MAX};
pub use shared::server_conninfo;
pub use tls::{ProxyTls, TlsFile, TlsFileError};
pub use unix::socket_path;

/// Everything a running proxy needs.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The connection string (keyword/value or URI: hosts, port, TLS and password settings)
    /// of every database without an entry in [`ProxyConfig::databases`], to which each pool
    /// adds `user`, `dbname` and the route's settings; `None`: such a database is refused.
    pub backend: Option<String>,
    /// Databases with a backend of their own: the name a client asks for, and the connection
    /// string its servers use (a `dbname` in it names the database on the server).
    pub databases: BTreeMap<String, String>,
    /// The client side (its `databases` is set from the two fields above when the proxy
    /// starts or reloads).
    pub client: ClientConfig,
    /// The pools.
    pub pool: PoolSettings,
    /// Seed for the proxy's cancel keys and login nonces (`None`: from the OS).
    pub seed: Option<u64>,
    /// Clients connected at once; more are refused with 53300 (PgBouncer's `max_client_conn`).
    pub max_client_conn: usize,
    /// How long a server connect walks the host list again after every host failed (the
    /// connect machine's failover budget); `None`: once.
    pub failover_timeout: Option<Duration>,
    /// How long a graceful shutdown waits for clients to finish.
    pub shutdown_timeout: Duration,
    /// The configuration file this was read from, which RELOAD (and SIGHUP) re-read; `None`
    /// when it was built otherwise (flags), so there is nothing to re-read. A reload with a
    /// configuration that names no file keeps the file in force.
    pub file: Option<PathBuf>,
    /// TLS to clients (`None`: every SSLRequest is answered `N`). Read when a client
    /// connects, so a reload with new certificate files applies to new connections.
    pub tls: Option<ProxyTls>,
    /// Clients on the Unix socket log in by peer authentication (PostgreSQL's `peer`: the
    /// socket's other end must run as the user it asks for) instead of `client.auth`, which
    /// TCP clients keep. Read when a client connects.
    pub unix_peer: bool,
    /// PgBouncer's `server_reset_query_always`: in transaction mode too, a server runs
    /// `DISCARD ALL` after every lending before anyone else may use it, so that what a
    /// client changed beyond the tracked settings (`SET ROLE`, other settings, temporary
    /// tables, advisory locks, LISTEN) never reaches the next one. Session mode always does.
    pub server_reset_query_always: bool,
}

impl ProxyConfig {
    /// A configuration with one backend for every database, and the defaults of
    /// `docs/proxy.md` for the rest.
    pub fn new(backend: impl Into<String>, client: ClientConfig) -> ProxyConfig {
        ProxyConfig {
            backend: Some(backend.into()),
            databases: BTreeMap::new(),
            client,
            pool: PoolSettings::default(),
            seed: None,
            max_client_conn: 100,
            failover_timeout: None,
            shutdown_timeout: Duration::from_secs(30),
            file: None,
            tls: None,
            unix_peer: false,
            server_reset_query_always: false,
        }
    }

    /// The connection string the servers of `database` are opened with, and whether it is
    /// the database's own (whose `dbname` then wins over the client's).
    pub fn backend_of(&self, database: &str) -> Option<(&str, bool)> {
        match self.databases.get(database) {
            Some(conninfo) => Some((conninfo, true)),
            None => self.backend.as_deref().map(|b| (b, false)),
        }
    }

    /// Checks what a proxy cannot run with, and sets `client.databases` from `backend` and
    /// `databases`.
    pub fn checked(mut self) -> Result<ProxyConfig, String> {
        if self.pool.size == 0 {
            return Err("pool_size must be at least 1".into());
        }
        if matches!(self.client.auth, ClientAuth::Peer { .. }) {
            return Err(
                "peer authentication is for the Unix socket only (unix_auth = \"peer\"); \
                 the auth for TCP clients is auth_file or trust"
                    .into(),
            );
        }
        let verifies = self.tls.as_ref().is_some_and(ProxyTls::verifies_clients);
        if matches!(self.client.auth, ClientAuth::Cert) && !verifies {
            return Err("auth = \"cert\" needs client certificates: TLS with a CA file".into());
        }
        if self.databases.contains_key(ADMIN_DATABASE) {
            return Err(format!(
                "databases.{ADMIN_DATABASE}: the name {ADMIN_DATABASE} is the admin console's; \
                 give the database another name (its conninfo's dbname can still be {ADMIN_DATABASE})"
            ));
        }
        if self.backend.is_none() && self.databases.is_empty() {
            return Err("no backend and no [databases.NAME] entry: nothing to serve".into());
        }
        if let Some(b) = &self.backend {
            check_conninfo(b).map_err(|e| format!("backend: {e}"))?;
        }
        for (name, conninfo) in &self.databases {
            let info = check_conninfo(conninfo).map_err(|e| format!("databases.{name}: {e}"))?;
            if info.get(pgyard_conninfo::Keyword::User).is_some() {
                return Err(format!(
                    "databases.{name}: the connection string names a user; each client's own \
                     user logs in to the server, so leave `user` out"
                ));
            }
        }
        self.client.databases = match self.backend {
            Some(_) => Databases::Any,
            None => Databases::Only(Arc::new(self.databases.keys().cloned().collect())),
        };
        Ok(self)
    }
}

/// Parses a connection string as the connect machine will, with libpq's message on error.
fn check_conninfo(conninfo: &str) -> Result<pgyard_conninfo::ConnInfo, String> {
    pgyard_conninfo::parse(conninfo.as_bytes()).map_err(|e| {
        String::from_utf8_lossy(&e.libpq_message())
            .trim_end()
            .to_owned()
    })
}

/// Where a proxy stands: serving, draining (no new clients, the others finish), stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Running,
    Draining,
    Stopped,
}

/// A running proxy's handle: where it listens, and how to reload or stop it.
#[derive(Debug)]
pub struct Proxy {
    /// The first address it accepts clients on.
    pub addr: SocketAddr,
    /// Every address it accepts clients on.
    pub addrs: Vec<SocketAddr>,
    /// The Unix socket it accepts clients on, if any (`DIR/.s.PGSQL.PORT`).
    pub unix_socket: Option<PathBuf>,
    shared: Arc<shared::Shared>,
}

impl Proxy {
    /// Applies a new configuration to the running proxy: new clients get the new client
    /// settings (auth file, default route, login timeout, databases), the pools the new
    /// sizes and timeouts, and servers opened from now on the new backends; idle servers of
    /// a database whose backend changed are closed, busy ones when they come back. The pool
    /// mode and the seed stay as they are until a restart (logged). A configuration that
    /// does not pass [`ProxyConfig::checked`] changes nothing and is returned as the error.
    pub fn reload(&self, new: ProxyConfig) -> Result<(), String> {
        self.shared.reload(new)
    }

    /// Re-reads the configuration file the proxy was started with ([`ProxyConfig::file`])
    /// and applies it with [`Proxy::reload`], as the admin console's RELOAD does; the error
    /// says why nothing changed (no file, a file that does not load or check).
    pub fn reload_file(&self) -> Result<(), String> {
        self.shared.reload_file()
    }

    /// The configuration in force.
    pub fn config(&self) -> Arc<ProxyConfig> {
        self.shared.config()
    }

    /// Clients connected now.
    pub fn clients(&self) -> usize {
        self.shared.clients()
    }

    /// Graceful shutdown: stops accepting (the listening sockets close, so new connections
    /// are refused), closes each transaction-mode client at its next transaction boundary
    /// and lets session-mode clients leave by themselves, for at most `bound`; then stops.
    /// True when every client had left within the bound.
    pub async fn shutdown(&self, bound: Duration) -> bool {
        tracing::info!(clients = self.clients(), ?bound, "draining");
        self.shared.set_phase(Phase::Draining);
        let left = self.shared.all_gone(bound).await;
        if !left {
            tracing::info!(
                clients = self.clients(),
                "shutdown bound reached; closing the clients left"
            );
        }
        self.stop();
        left
    }

    /// Stops at once: no more clients are accepted, every client connection is closed
    /// (a transaction in flight is cut off) and the idle server connections are closed.
    pub fn stop(&self) {
        self.shared.set_phase(Phase::Stopped);
        self.shared.close_idle();
    }

    /// Resolves once the proxy has stopped: [`Proxy::stop`], the end of
    /// [`Proxy::shutdown`], or SHUTDOWN on its admin console.
    pub async fn stopped(&self) {
        let mut phase = self.shared.phase();
        let _ = phase.wait_for(|p| *p == Phase::Stopped).await;
    }
}

/// Reads an auth file (PgBouncer's format), salting the verifiers of plain passwords with
/// the operating system's randomness; the error says which file and line.
pub fn read_auth_file(path: &std::path::Path) -> Result<AuthFile, String> {
    let limit = pgyard_proxy::auth_file::AUTH_FILE_MAX as u64;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    if size > limit {
        return Err(format!("{}: larger than {limit} bytes", path.display()));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut rng = pgyard_types::rng_from_seed(pgyard_driver::os_seed());
    AuthFile::parse(&text, &mut rng).map_err(|e| format!("{}: {e}", path.display()))
}

/// Binds `addr` and serves on tasks of its own; the handle says where it listens.
pub async fn spawn(config: ProxyConfig, addr: SocketAddr) -> io::Result<Proxy> {
    spawn_all(config, &[addr]).await
}

/// Binds every address of `addrs` and serves on all of them.
pub async fn spawn_all(config: ProxyConfig, addrs: &[SocketAddr]) -> io::Result<Proxy> {
    spawn_listening(config, addrs, None).await
}

/// Binds every address of `addrs` and, with `unix_socket_dir`, a Unix socket in that folder
/// named as PostgreSQL names its own (`.s.PGSQL.PORT`, PORT the first address's port once
/// bound), and serves on all of them.
pub async fn spawn_listening(
    config: ProxyConfig,
    addrs: &[SocketAddr],
    unix_socket_dir: Option<&Path>,
) -> io::Result<Proxy> {
    let mut listeners = Vec::with_capacity(addrs.len());
    for addr in addrs {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))?;
        listeners.push(listener);
    }
    start_listening(config, listeners, unix_socket_dir)
}

/// Serves on listeners already bound (at least one).
pub fn start(config: ProxyConfig, listeners: Vec<TcpListener>) -> io::Result<Proxy> {
    start_listening(config, listeners, None)
}

/// Serves on TCP listeners already bound (at least one) and, with `unix_socket_dir`, on a
/// Unix socket there named after the first one's port.
pub fn start_listening(
    config: ProxyConfig,
    listeners: Vec<TcpListener>,
    unix_socket_dir: Option<&Path>,
) -> io::Result<Proxy> {
    let config = config.checked().map_err(io::Error::other)?;
    let addrs = listeners
        .iter()
        .map(TcpListener::local_addr)
        .collect::<io::Result<Vec<_>>>()?;
    let Some(&addr) = addrs.first() else {
        return Err(io::Error::other("no address to listen on"));
    };
    let unix = unix_socket_dir
        .map(|dir| unix::UnixSocket::bind(dir, addr.port()))
        .transpose()?;
    let unix_socket = unix.as_ref().map(|u| u.path().to_path_buf());
    let databases: BTreeSet<&String> = config.databases.keys().collect();
    tracing::info!(
        listen = ?addrs,
        unix_socket = ?unix_socket,
        ?databases,
        fallback = config.backend.is_some(),
        pool_mode = ?config.client.pool_mode,
        pool_size = config.pool.size,
        tls = ?config.tls.as_ref().map(|t| t.mode),
        "pgyard proxy started"
    );
    let dir = unix_socket_dir.map(Path::to_path_buf);
    let shared = shared::Shared::start(Arc::new(config), addrs.clone(), dir);
    for listener in listeners {
        tokio::spawn(accept(
            Listener::Tcp(listener),
            shared.clone(),
            shared.phase(),
        ));
    }
    if let Some(u) = unix {
        tokio::spawn(accept(Listener::Unix(u), shared.clone(), shared.phase()));
    }
    Ok(Proxy {
        addr,
        addrs,
        unix_socket,
        shared,
    })
}

/// A socket clients connect to.
enum Listener {
    Tcp(TcpListener),
    Unix(unix::UnixSocket),
}

impl Listener {
    async fn accept(&self) -> io::Result<shared::Accepted> {
        match self {
            Listener::Tcp(l) => {
                let (sock, peer) = l.accept().await?;
                Ok(shared::Accepted::tcp(sock, peer))
            }
            Listener::Unix(u) => Ok(shared::Accepted::unix(u.accept().await?, u.port())),
        }
    }
}

/// Accepts clients until the proxy drains or stops (the listener is dropped then, so the
/// port refuses connections and the Unix socket's file goes).
async fn accept(
    listener: Listener,
    shared: Arc<shared::Shared>,
    mut phase: watch::Receiver<Phase>,
) {
    loop {
        tokio::select! {
            r = listener.accept() => match r {
                Ok(client) => shared.admit(client),
                Err(e) => {
                    // Out of file descriptors and the like: the next accept may work.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            _ = async { phase.wait_for(|p| *p != Phase::Running).await.is_ok() } => return,
        }
    }
}
