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
//!
//! It is the simplest complete driver of the workspace (one thread per attempt, reporting to
//! the connecting thread), built on pgyard-driver's core; `pgyard connect` uses it. A failed
//! connect says what each attempt met, in libpq's words, and what the failure means. Here two
//! ports nobody listens on, and an environment given instead of the process's:
//!
//! ```
//! use pgyard_blocking::{connect_logged, ConnectOptions, ErrorKind, RealInputs};
//! use pgyard_conninfo::resolve::{Environment, MemFiles};
//!
//! // Ports that were free a moment ago: connecting to them is refused.
//! let free_port = || -> std::io::Result<u16> {
//!     Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
//! };
//! let (a, b) = (free_port()?, free_port()?);
//! let inputs = RealInputs { env: Environment::new().with_os_user("app"), files: MemFiles::new() };
//! let options = ConnectOptions::default().inputs(inputs);
//!
//! let mut attempts = Vec::new();
//! let conninfo = format!("host=127.0.0.1,127.0.0.1 port={a},{b} sslmode=disable");
//! let err = connect_logged(&conninfo, &options, &mut attempts).unwrap_err();
//! assert_eq!(attempts.len(), 2);
//! assert!(err.to_string().starts_with(&format!(
//!     "connection to server at \"127.0.0.1\", port {a} failed: Connection refused\n"
//! )));
//! assert_eq!(err.kind(), ErrorKind::Transient);
//! assert!(err.kind().is_retryable());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod driver;
mod inline;
mod session;
mod transport;

pub use pgyard_connect::{BackendKey, ConnectError, OpenTarget, ServerRole};
pub use pgyard_conninfo::Strategy;
pub use pgyard_driver::{
    os_seed, Attempt, ConnectOptions, Error, ErrorKind, RawFrame, RealInputs, Rows, SessionInfo,
};
pub use session::{PendingQuery, Session};

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
