//! What the blocking and the tokio adapters share, so that neither holds a decision or a copy
//! of the other: the driver core that turns the connect machine's actions into I/O requests
//! and keeps the bookkeeping around them ([`core`]), the TLS settings and texts ([`tls`]),
//! typed errors, the attempt log, reading libpq's inputs, and the simple-query reply. It does
//! no socket I/O and keeps no clock: time comes in as an argument, as for the machine.
//!
//! It sits on pgyard-connect and under the two adapters and the simulator. A third adapter
//! (another runtime, an event loop of its own) would start where they start: [`prepare`]
//! reads a connection string as `PQconnectdb` does, with the process's environment and files
//! or, as here, ones given in [`ConnectOptions::inputs`]; then [`core::Core`] runs the machine.
//!
//! ```
//! use pgyard_conninfo::resolve::{Environment, MemFile, MemFiles};
//! use pgyard_driver::{prepare, ConnectOptions, ErrorKind, Keyword, RealInputs, Strategy};
//!
//! let inputs = RealInputs {
//!     env: Environment::new()
//!         .with_var("PGSERVICEFILE", "/etc/pg_service.conf")
//!         .with_var("PGTZ", "UTC")
//!         .with_os_user("app"),
//!     files: MemFiles::new()
//!         .with("/etc/pg_service.conf", MemFile::regular("[shop]\nhost=db1,db2\n")),
//! };
//! let options = ConnectOptions::default()
//!     .inputs(inputs.clone())
//!     .seed(1)
//!     .strategy(Strategy::Race)
//!     .set(Keyword::ApplicationName, "billing");
//! let prepared = prepare("service=shop", &options)?;
//! assert_eq!(prepared.config.slots().len(), 2);
//! assert_eq!(prepared.config.strategy(), Strategy::Race);
//! assert_eq!(prepared.config.application_name(), Some(&b"billing"[..]));
//! // libpq sends PGTZ as the `timezone` startup parameter.
//! assert!(prepared.extra_startup_params.contains(&(b"timezone".to_vec(), b"UTC".to_vec())));
//!
//! // Errors keep libpq's text and say what they mean: retrying a bad string cannot help.
//! let options = ConnectOptions::default().inputs(inputs);
//! let err = prepare("host=db1 port=5432,5433", &options).unwrap_err();
//! assert_eq!(err.to_string(), "could not match 2 port numbers to 1 hosts");
//! assert_eq!(err.kind(), ErrorKind::Configuration);
//! assert!(!err.kind().is_retryable());
//! # Ok::<(), pgyard_driver::Error>(())
//! ```

pub mod attempts;
mod certnames;
mod client_cert;
mod client_chain;
pub mod core;
mod crl;
mod env;
mod environ;
mod error;
mod frames;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod info;
mod keyfile;
mod keylog;
mod net;
mod prepare;
mod roots;
mod session;
pub mod tls;
mod v1chain;

use std::time::Duration;

pub use certnames::{CertificateNames, HostNameMismatch};
pub use env::{user_name, RealInputs};
pub use error::{Error, ErrorKind};
pub use frames::{
    cancel_request, decode, take_frame, RawFrame, Reply, Rows, SimpleQuery, SERVER_CLOSED,
};
pub use info::SessionInfo;
pub use net::{io_kind, open_event, peer_event, set_tcp_options, unix_address, UnixAddress};
pub use pgyard_connect::{BackendKey, ConnectError, OpenTarget, Parameters, ServerRole};
pub use pgyard_conninfo::{Keyword, Strategy};
pub use prepare::{prepare, DriverConfig, Prepared};
pub use session::{receive_error, send_error, Driving, Machine, SessionCore};

/// Adapter-level choices that are not part of a connection string.
#[derive(Clone, Debug, Default)]
pub struct ConnectOptions {
    /// Seed for the machine's random source (load-balancing shuffles, SCRAM nonces);
    /// `None` draws one from the operating system.
    pub seed: Option<u64>,
    /// Overrides the connection string's strategy (`Sequential` is libpq's).
    pub strategy: Option<Strategy>,
    /// Environment and files to use instead of reading the real ones.
    pub inputs: Option<RealInputs>,
    /// Ask for middleware messages (`_pq_.middleware_messages=on`): a middleware that
    /// consumes them answers ParameterStatus `middleware_messages` = `on`; a server reached
    /// directly answers NegotiateProtocolVersion, and the connect goes on without them.
    pub middleware: bool,
    /// Keywords set on the parsed connection string before it is resolved, replacing what
    /// the string said (as a later `keyword=value` does in libpq): how a program sets what it
    /// must have, such as `replication=database` for a replication session, without editing
    /// the user's string.
    pub overrides: Vec<(Keyword, Vec<u8>)>,
    /// How long the machine walks the host list again after every address failed (its
    /// failover budget); `None` walks it once, as libpq.
    pub failover_timeout: Option<Duration>,
    /// What answers the servers' MD5 or SCRAM requests when the connection string names no
    /// password: what a proxy proved its client knows (see
    /// [`LoginSecret`](pgyard_wire::auth::LoginSecret)). A password from the string, the
    /// environment or the password file wins.
    pub login_secret: Option<pgyard_wire::auth::LoginSecret>,
}

/// The protocol option that asks for middleware messages.
pub const MIDDLEWARE_OPTION: &str = "_pq_.middleware_messages";

impl ConnectOptions {
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Sets the strategy.
    pub fn strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = Some(strategy);
        self
    }

    /// Uses these inputs instead of the process environment and files.
    pub fn inputs(mut self, inputs: RealInputs) -> Self {
        self.inputs = Some(inputs);
        self
    }

    /// Asks for middleware messages (see [`ConnectOptions::middleware`]).
    pub fn middleware(mut self, on: bool) -> Self {
        self.middleware = on;
        self
    }

    /// Sets the failover budget (see [`ConnectOptions::failover_timeout`]).
    pub fn failover_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Sets the login secret (see [`ConnectOptions::login_secret`]).
    pub fn login_secret(mut self, secret: Option<pgyard_wire::auth::LoginSecret>) -> Self {
        self.login_secret = secret;
        self
    }

    /// Sets `keyword` to `value` over whatever the connection string says (see
    /// [`ConnectOptions::overrides`]).
    pub fn set(mut self, keyword: Keyword, value: impl Into<Vec<u8>>) -> Self {
        self.overrides.retain(|(k, _)| *k != keyword);
        self.overrides.push((keyword, value.into()));
        self
    }
}

/// One connection attempt as the driver saw it (for `--explain`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// The host name (or address, or socket path) the attempt was for.
    pub host: String,
    /// The address or socket connected to.
    pub target: OpenTarget,
    /// When the attempt started, from the start of the connect (or reset).
    pub started: Duration,
    /// When it ended (failed, was closed or won).
    pub ended: Option<Duration>,
    /// `connected`, the error text, or `closed` when the machine dropped it.
    pub outcome: String,
}

impl Attempt {
    /// The address as text: `ip:port` or the socket path.
    pub fn address(&self) -> String {
        match &self.target {
            OpenTarget::Tcp(a) => a.to_string(),
            OpenTarget::Unix(p) => String::from_utf8_lossy(p).into_owned(),
        }
    }

    /// How long the attempt ran.
    pub fn elapsed(&self) -> Duration {
        self.ended
            .unwrap_or(self.started)
            .saturating_sub(self.started)
    }
}

/// Real time mapped onto the machine's clock from a fixed origin (the connect's start).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        Clock {
            origin: std::time::Instant::now(),
        }
    }

    /// Now on the machine's clock (the origin is `Instant(0)`).
    pub fn now(&self) -> pgyard_types::Instant {
        pgyard_types::Instant(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The wall-clock instant of `at` on this clock (for timers).
    pub fn deadline(&self, at: pgyard_types::Instant) -> std::time::Instant {
        self.origin + std::time::Duration::from_nanos(at.as_nanos())
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// A seed from the operating system's randomness.
pub fn os_seed() -> u64 {
    // getrandom only fails on platforms without an entropy source; fall back to the clock.
    getrandom::u64().unwrap_or_else(|_| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0)
            ^ u64::from(std::process::id())
    })
}
