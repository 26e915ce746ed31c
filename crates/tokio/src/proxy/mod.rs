//! `pgyard proxy` over tokio: a listener whose client connections each run a
//! [`pgyard_proxy::ClientSession`] in a task, and one task that owns the
//! [`pgyard_proxy::Pools`] and the idle server connections. Server connections are opened by
//! [`crate::connect`] (the connect machine through the shared driver core) with the backend's
//! hosts and the route's `target_session_attrs`. Decisions are the machines'; this module
//! only moves bytes, time and connections. See `docs/proxy.md`.

mod client_task;
mod shared;

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use pgyard_proxy::{AuthFile, ClientConfig, PoolSettings};
use tokio::net::TcpListener;

pub use shared::server_conninfo;

/// Everything a running proxy needs.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    /// The backend's connection string (keyword/value form; its hosts, port, TLS and password
    /// settings), to which each pool adds `user`, `dbname` and the route's settings.
    pub backend: String,
    /// The client side.
    pub client: ClientConfig,
    /// The pools.
    pub pool: PoolSettings,
    /// Seed for the proxy's cancel keys and login nonces (`None`: from the OS).
    pub seed: Option<u64>,
    /// Clients connected at once; more are refused with 53300 (PgBouncer's `max_client_conn`).
    pub max_client_conn: usize,
}

/// A running proxy's handle: where it listens.
#[derive(Debug)]
pub struct Proxy {
    /// The address it accepts clients on.
    pub addr: SocketAddr,
}

/// Accepts clients on `listener` until the task is dropped or aborted.
pub async fn serve(config: ProxyConfig, listener: TcpListener) -> io::Result<()> {
    let config = Arc::new(config);
    let pools = shared::Shared::start(config.clone());
    let next = AtomicU64::new(1);
    let connected = Arc::new(AtomicUsize::new(0));
    let seed = config.seed.unwrap_or_else(pgyard_driver::os_seed);
    loop {
        let (sock, _peer) = listener.accept().await?;
        let _ = sock.set_nodelay(true);
        let id = next.fetch_add(1, Ordering::Relaxed);
        let over = connected.fetch_add(1, Ordering::Relaxed) >= config.max_client_conn;
        let task = client_task::ClientTask::new(id, seed, over, config.clone(), pools.clone());
        let count = connected.clone();
        tokio::spawn(async move {
            task.run(sock).await;
            count.fetch_sub(1, Ordering::Relaxed);
        });
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

/// Binds `addr` and serves on a task of its own; the handle says where it listens.
pub async fn spawn(config: ProxyConfig, addr: SocketAddr) -> io::Result<Proxy> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(serve(config, listener));
    Ok(Proxy { addr })
}
