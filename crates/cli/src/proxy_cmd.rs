//! `pgyard proxy`: the connection pooler that honours the middleware message, over the tokio
//! adapter. Reads its flags or configuration file and answers signals here; every decision
//! is `pgyard-proxy`'s.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::{ClientAuth, ClientConfig, PoolMode, PoolSettings, Route, TlsMode};
use pgyard_tokio::proxy::{self, Proxy, ProxyConfig, ProxyTls, TlsFile};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The shortcut flags, which `--config` replaces.
const FLAGS: [&str; 18] = [
    "listen",
    "unix_socket_dir",
    "unix_auth",
    "backend",
    "pool_mode",
    "pool_size",
    "default_route",
    "auth_file",
    "auth",
    "wait_timeout",
    "max_client_conn",
    "server_reset_query_always",
    "admin_user",
    "ignore_startup_parameters",
    "tls_cert",
    "tls_key",
    "tls_mode",
    "tls_ca",
];

/// Arguments of `pgyard proxy`.
#[derive(clap::Args, Debug)]
pub struct ProxyArgs {
    /// A configuration file (TOML, every key in docs/proxy.md), re-read on SIGHUP; instead of
    /// the flags below.
    #[arg(long, conflicts_with_all = FLAGS)]
    pub config: Option<PathBuf>,
    /// Address to accept clients on.
    #[arg(long, default_value = "127.0.0.1:6432")]
    pub listen: SocketAddr,
    /// A folder to accept clients on a Unix socket in as well: `DIR/.s.PGSQL.PORT`, PORT the
    /// `--listen` port, which libpq opens for `host=DIR port=PORT`.
    #[arg(long, value_name = "DIR")]
    pub unix_socket_dir: Option<PathBuf>,
    /// `peer`: clients on the Unix socket log in as the operating-system user they run as
    /// (PostgreSQL's `peer`), with no password; TCP clients keep `--auth`/`--auth-file`.
    #[arg(long, value_enum, requires = "unix_socket_dir")]
    pub unix_auth: Option<UnixAuthArg>,
    /// The backend's connection string (its hosts, port, TLS and password settings); each
    /// pool adds the client's user and database and its route's `target_session_attrs`.
    #[arg(long, required_unless_present = "config")]
    pub backend: Option<String>,
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
    /// `trust`: no password check (only on a loopback listen address); `cert`: the client's
    /// certificate (verified against `--tls-ca`) must name the user as its Common Name.
    #[arg(long)]
    pub auth: Option<AuthArg>,
    /// Seconds a client waits for a server before it gets `query_wait_timeout`.
    #[arg(long, default_value_t = 30)]
    pub wait_timeout: u64,
    /// Clients connected at once; more get FATAL 53300 (PgBouncer's `max_client_conn`).
    #[arg(long, default_value_t = 100)]
    pub max_client_conn: usize,
    /// In transaction mode too, `DISCARD ALL` on every server a client gives back, before
    /// anyone else may use it (PgBouncer's `server_reset_query_always`).
    #[arg(long)]
    pub server_reset_query_always: bool,
    /// A user who may open the admin console (database `pgyard`); repeatable. Under
    /// `--auth trust` every user may.
    #[arg(long = "admin-user", value_name = "NAME")]
    pub admin_user: Vec<String>,
    /// StartupMessage settings to ignore, comma-separated (PgBouncer's
    /// `ignore_startup_parameters`); every other one the proxy does not track reaches the
    /// client's servers. Empty: none ignored.
    #[arg(long, value_name = "NAMES", default_value = "extra_float_digits")]
    pub ignore_startup_parameters: String,
    /// TLS to clients: the proxy's certificate chain (PEM, its own certificate first).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The certificate's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// When clients use TLS (PgBouncer's `client_tls_sslmode`); `prefer` with a certificate.
    #[arg(long, value_enum, requires = "tls_cert")]
    pub tls_mode: Option<TlsModeArg>,
    /// The CA (PEM) client certificates are verified against; clients are then asked for one.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
}

/// `--tls-mode`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum TlsModeArg {
    /// No TLS: SSLRequest is answered `N`.
    Disable,
    /// TLS when the client asks for it.
    Allow,
    /// The same as `allow` (the client is the one that prefers).
    Prefer,
    /// TLS when the client asks for it; a plaintext login is refused.
    Require,
    /// As `require`, with a client certificate signed by `--tls-ca`.
    VerifyCa,
    /// As `verify-ca`, and the certificate's Common Name is the user name.
    VerifyFull,
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

/// `--unix-auth`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum UnixAuthArg {
    /// The socket's other end must run as the user it asks for.
    Peer,
}

/// `--auth`.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub enum AuthArg {
    /// No password check.
    Trust,
    /// The client certificate's Common Name is the user name; no password.
    Cert,
}

/// Runs the proxy until a signal stops it: SIGHUP re-reads the configuration file, SIGTERM
/// drains (clients finish their transactions, up to `shutdown_timeout`), SIGINT stops at once,
/// and so does SHUTDOWN on the admin console.
pub fn run(args: ProxyArgs) -> ExitCode {
    crate::logging::init();
    let loaded = match &args.config {
        Some(path) => proxy::load_config(path).map(|f| (f.listen, f.unix_socket_dir, f.proxy)),
        None => config(&args).map(|c| (vec![args.listen], args.unix_socket_dir.clone(), c)),
    };
    let checked = loaded.and_then(|(listen, unix, c)| Ok((listen, unix, c.checked()?)));
    let (listen, unix_socket_dir, config) = match checked {
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
        let signals = match Signals::new() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("pgyard proxy: cannot watch signals: {e}");
                return ExitCode::FAILURE;
            }
        };
        let unix = unix_socket_dir.as_deref();
        let running = match proxy::spawn_listening(config, &listen, unix).await {
            Ok(p) => p,
            Err(e) => {
                eprintln!("pgyard proxy: {e}");
                return ExitCode::FAILURE;
            }
        };
        signals.serve(running, args.config).await
    })
}

/// The signals the proxy answers.
struct Signals {
    hup: Signal,
    term: Signal,
    int: Signal,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            hup: signal(SignalKind::hangup())?,
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Answers signals until one ends the proxy.
    async fn serve(mut self, running: Proxy, path: Option<PathBuf>) -> ExitCode {
        loop {
            tokio::select! {
                _ = self.hup.recv() => reload(&running, path.as_deref()),
                _ = self.term.recv() => break,
                _ = self.int.recv() => {
                    tracing::info!("SIGINT: stopping now");
                    running.stop();
                    return ExitCode::SUCCESS;
                }
                // SHUTDOWN on the admin console.
                _ = running.stopped() => return ExitCode::SUCCESS,
            }
        }
        let bound = running.config().shutdown_timeout;
        tracing::info!(
            ?bound,
            "SIGTERM: no new clients; the others finish their transactions"
        );
        tokio::select! {
            left = running.shutdown(bound) => {
                tracing::info!(every_client_left = left, "shut down");
            }
            // A second SIGTERM, or SIGINT, while draining: stop at once.
            _ = self.term.recv() => running.stop(),
            _ = self.int.recv() => running.stop(),
        }
        ExitCode::SUCCESS
    }
}

/// SIGHUP: re-reads the configuration file and applies it, as the admin console's RELOAD
/// does; a file that does not load keeps the running configuration (the failure is logged).
fn reload(running: &Proxy, path: Option<&Path>) {
    if path.is_none() {
        tracing::info!("SIGHUP: no configuration file to re-read (started with flags)");
        return;
    }
    tracing::info!("SIGHUP");
    // Every outcome is logged where it is decided.
    let _ = running.reload_file();
}

fn config(args: &ProxyArgs) -> Result<ProxyConfig, String> {
    let auth = match (&args.auth_file, args.auth) {
        (Some(path), _) => ClientAuth::File(Arc::new(proxy::read_auth_file(path)?)),
        (None, Some(AuthArg::Trust)) if args.listen.ip().is_loopback() => ClientAuth::Trust,
        (None, Some(AuthArg::Trust)) => {
            return Err("--auth trust is allowed only on a loopback --listen address".into())
        }
        (None, Some(AuthArg::Cert)) if args.tls_ca.is_some() => ClientAuth::Cert,
        (None, Some(AuthArg::Cert)) => {
            return Err("--auth cert needs client certificates: --tls-ca FILE".into())
        }
        (None, None) => return Err("give --auth-file FILE, --auth trust or --auth cert".into()),
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
    let backend = args.backend.clone().unwrap_or_default();
    let client = ClientConfig {
        default_route,
        admin_users: Arc::new(args.admin_user.iter().cloned().collect()),
        ignore_startup_parameters: Arc::new(
            args.ignore_startup_parameters
                .split(',')
                .map(|n| n.trim().to_ascii_lowercase())
                .filter(|n| !n.is_empty())
                .collect(),
        ),
        ..ClientConfig::new(auth, pool_mode)
    };
    let mut config = ProxyConfig::new(backend, client);
    config.pool = PoolSettings {
        size: args.pool_size,
        wait_timeout: Duration::from_secs(args.wait_timeout),
        ..PoolSettings::default()
    };
    config.max_client_conn = args.max_client_conn;
    config.server_reset_query_always = args.server_reset_query_always;
    if let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) {
        let mode = match args.tls_mode.unwrap_or(TlsModeArg::Prefer) {
            TlsModeArg::Disable => TlsMode::Disable,
            TlsModeArg::Allow => TlsMode::Allow,
            TlsModeArg::Prefer => TlsMode::Prefer,
            TlsModeArg::Require => TlsMode::Require,
            TlsModeArg::VerifyCa => TlsMode::VerifyCa,
            TlsModeArg::VerifyFull => TlsMode::VerifyFull,
        };
        let ca = args.tls_ca.as_deref();
        let tls = ProxyTls::from_files_with_ca(mode, cert, key, ca).map_err(|e| {
            let flag = match e.file {
                TlsFile::Cert => "--tls-cert",
                TlsFile::Key => "--tls-key",
                TlsFile::Ca => "--tls-ca",
            };
            format!("{flag}: {}", e.message)
        })?;
        config.tls = Some(tls);
    }
    config.unix_peer = matches!(args.unix_auth, Some(UnixAuthArg::Peer));
    Ok(config)
}
