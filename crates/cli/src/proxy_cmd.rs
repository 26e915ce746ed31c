//! `pgyard proxy`: the connection pooler that honours the middleware message, over the tokio
//! adapter. Reads its auth file and flags here; every decision is `pgyard-proxy`'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::{ClientAuth, ClientConfig, PoolMode, PoolSettings, Route};
use pgyard_tokio::proxy::{self, ProxyConfig};

/// Arguments of `pgyard proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// Address to accept clients on.
    #[arg(long, default_value = "127.0.0.1:6432")]
    pub listen: SocketAddr,
    /// The backend's connection string (its hosts, port, TLS and password settings); each
    /// pool adds the client's user and database and its route's `target_session_attrs`.
    #[arg(long)]
    pub backend: String,
    /// When a server goes back to the pool.
    #[arg(long, value_enum, default_value = "transaction")]
    pub pool_mode: ModeArg,
    /// Server connections per (database, user, route).
    #[arg(long, default_value_t = 20)]
    pub pool_size: usize,
    /// The route of clients that never send ROUTE.
    #[arg(long, value_enum, default_value = "primary")]
    pub default_route: RouteArg,
    /// Users and passwords in PgBouncer's auth_file format.
    #[arg(long, conflicts_with = "auth")]
    pub auth_file: Option<PathBuf>,
    /// `trust`: no password check (only on a loopback listen address).
    #[arg(long)]
    pub auth: Option<AuthArg>,
    /// Seconds a client waits for a server before it gets `query_wait_timeout`.
    #[arg(long, default_value_t = 30)]
    pub wait_timeout: u64,
    /// Clients connected at once; more get FATAL 53300 (PgBouncer's `max_client_conn`).
    #[arg(long, default_value_t = 100)]
    pub max_client_conn: usize,
}

/// `--pool-mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum ModeArg {
    /// After each transaction.
    Transaction,
    /// When the client disconnects.
    Session,
}

/// `--default-route`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum RouteArg {
    /// A server that accepts writes.
    Primary,
    /// A standby, else the primary.
    Standby,
    /// Any server.
    Any,
}

/// `--auth`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum AuthArg {
    /// No password check.
    Trust,
}

/// Runs the proxy until interrupted.
pub fn run(args: ProxyArgs) -> ExitCode {
    let config = match config(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("pgyard proxy: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pgyard proxy: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match tokio::net::TcpListener::bind(args.listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("pgyard proxy: cannot listen on {}: {e}", args.listen);
                return ExitCode::FAILURE;
            }
        };
        let addr = listener.local_addr().unwrap_or(args.listen);
        eprintln!("pgyard proxy: listening on {addr}");
        tokio::select! {
            r = proxy::serve(config, listener) => {
                if let Err(e) = r {
                    eprintln!("pgyard proxy: {e}");
                    return ExitCode::FAILURE;
                }
                ExitCode::SUCCESS
            }
            _ = tokio::signal::ctrl_c() => ExitCode::SUCCESS,
        }
    })
}

fn config(args: &ProxyArgs) -> Result<ProxyConfig, String> {
    let auth = match (&args.auth_file, args.auth) {
        (Some(path), _) => ClientAuth::File(Arc::new(proxy::read_auth_file(path)?)),
        (None, Some(AuthArg::Trust)) if args.listen.ip().is_loopback() => ClientAuth::Trust,
        (None, Some(AuthArg::Trust)) => {
            return Err("--auth trust is allowed only on a loopback --listen address".into())
        }
        (None, None) => return Err("give --auth-file FILE or --auth trust".into()),
    };
    let pool_mode = match args.pool_mode {
        ModeArg::Transaction => PoolMode::Transaction,
        ModeArg::Session => PoolMode::Session,
    };
    let default_route = match args.default_route {
        RouteArg::Primary => Route::Primary,
        RouteArg::Standby => Route::Standby,
        RouteArg::Any => Route::Any,
    };
    if args.pool_size == 0 {
        return Err("--pool-size must be at least 1".into());
    }
    Ok(ProxyConfig {
        backend: args.backend.clone(),
        client: ClientConfig {
            auth,
            pool_mode,
            default_route,
            login_timeout: Duration::from_secs(60),
        },
        pool: PoolSettings {
            size: args.pool_size,
            wait_timeout: Duration::from_secs(args.wait_timeout),
            ..PoolSettings::default()
        },
        seed: None,
        max_client_conn: args.max_client_conn,
    })
}
