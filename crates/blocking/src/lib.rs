//! A blocking adapter: drives the pure pgyard-connect machine over std sockets (TCP and Unix)
//! and rustls, and gives back a [`Session`]. It reads the process environment, the service
//! and password files and the operating system's randomness, performs the machine's actions,
//! and makes no connect decision of its own.
//!
//! ```no_run
//! let mut s = pgyard_blocking::connect("host=db1,db2 target_session_attrs=read-write")?;
//! for row in s.simple_query("select 1")? {
//!     println!("{:?}", row);
//! }
//! # Ok::<(), pgyard_blocking::Error>(())
//! ```

pub mod attempts;
mod driver;
mod env;
mod info;
mod session;
pub mod tls;

use std::time::Duration;

pub use driver::{io_kind, set_tcp_options};
pub use env::RealInputs;
pub use info::SessionInfo;
pub use pgyard_connect::{BackendKey, ConnectError, OpenTarget, ServerRole};
pub use pgyard_conninfo::Strategy;
pub use session::{prepare, take_frame, Prepared, RawFrame, Session, SERVER_CLOSED};

use pgyard_types::Instant;

/// Connects with `conninfo` (keyword/value or URI), honouring the environment, the service
/// file and the password file as libpq does, with an OS-random seed.
pub fn connect(conninfo: &str) -> Result<Session, Error> {
    connect_with(conninfo, &ConnectOptions::default())
}

/// Connects with `conninfo` and explicit adapter options.
pub fn connect_with(conninfo: &str, options: &ConnectOptions) -> Result<Session, Error> {
    Session::connect(conninfo, options, &mut Vec::new())
}

/// [`connect_with`], also appending every attempt to `log`, whether the connect succeeds or
/// fails (what `pgyard connect --explain` prints).
pub fn connect_logged(
    conninfo: &str,
    options: &ConnectOptions,
    log: &mut Vec<Attempt>,
) -> Result<Session, Error> {
    Session::connect(conninfo, options, log)
}

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
}

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
}

/// Why a connect or a query failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The connection string did not parse (libpq's text).
    #[error("{0}")]
    Parse(String),
    /// The connection string parsed but cannot be used (libpq's text).
    #[error("{0}")]
    Config(String),
    /// Every attempt failed; `Display` is libpq's `PQerrorMessage` text.
    #[error(transparent)]
    Connect(ConnectError),
    /// The server answered a query with an ErrorResponse (libpq's rendering).
    #[error("{0}")]
    Server(String),
    /// The connection broke or sent bytes that do not decode.
    #[error("{0}")]
    Io(String),
    /// A fault in this adapter (should not happen).
    #[error("pgyard-blocking: {0}")]
    Internal(String),
}

impl Error {
    /// The text libpq would print, ending in exactly one newline.
    pub fn libpq_message(&self) -> String {
        let mut s = self.to_string();
        while s.ends_with('\n') {
            s.pop();
        }
        s.push('\n');
        s
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

/// Converts real time to the machine's virtual clock from a fixed origin.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: std::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: std::time::Instant::now(),
        }
    }

    /// Now on the machine's clock (the origin is `Instant(0)`).
    pub(crate) fn now(&self) -> Instant {
        Instant(u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Real time since the origin.
    pub(crate) fn elapsed(&self) -> Duration {
        self.origin.elapsed()
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
