//! A tokio adapter: drives the pure pgyard-connect machine over async sockets (TCP and Unix)
//! and rustls (tokio-rustls), and gives back a [`Session`]. It is the async twin of
//! pgyard-blocking: both drive pgyard-driver's core and share its inputs (environment, service
//! and password files), TLS configuration, error type and texts; it makes no connect decision
//! of its own.
//!
//! ```no_run
//! # async fn demo() -> Result<(), pgyard_tokio::Error> {
//! let mut s = pgyard_tokio::connect("host=db1,db2 target_session_attrs=read-write").await?;
//! for row in s.simple_query("select 1").await? {
//!     println!("{:?}", row);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! [`follow`] streams a publisher's logical slot into a durable delay queue; [`proxy`] runs
//! `pgyard proxy`, the pooler that honours the middleware message.
//!
//! A sequential walk runs on the caller's task; racing attempts are tasks of their own, so
//! racing hosts costs no threads. A failed connect
//! keeps libpq's text and says what it means; here a port nobody listens on, and an
//! environment given instead of the process's:
//!
//! ```
//! use pgyard_conninfo::resolve::{Environment, MemFiles};
//! use pgyard_tokio::{connect_with, ConnectOptions, ErrorKind, RealInputs};
//!
//! let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
//! let inputs = RealInputs { env: Environment::new().with_os_user("app"), files: MemFiles::new() };
//! let options = ConnectOptions::default().inputs(inputs);
//! let conninfo = format!("host=127.0.0.1 port={port} sslmode=disable connect_timeout=5");
//!
//! let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
//! let err = runtime.block_on(connect_with(&conninfo, &options)).unwrap_err();
//! assert!(err.to_string().contains("Connection refused"));
//! assert_eq!(err.kind(), ErrorKind::Transient);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod driver;
pub mod follow;
mod inline;
pub mod proxy;
mod session;
mod transport;

pub use pgyard_connect::{BackendKey, ConnectError, OpenTarget, ServerRole};
pub use pgyard_driver::{
    Attempt, ConnectOptions, Error, ErrorKind, RawFrame, RealInputs, SessionInfo, Strategy,
};

use pgyard_driver::Machine;
pub use session::{CancelToken, Session};

/// Connects with `conninfo` (keyword/value or URI), honouring the environment, the service
/// file and the password file as libpq does, with an OS-random seed.
pub async fn connect(conninfo: &str) -> Result<Session, Error> {
    connect_with(conninfo, &ConnectOptions::default()).await
}

/// Connects with `conninfo` and explicit adapter options (seed, strategy, inputs).
pub async fn connect_with(conninfo: &str, options: &ConnectOptions) -> Result<Session, Error> {
    connect_logged(conninfo, options, &mut Vec::new()).await
}

/// [`connect_with`], also appending every attempt to `log`, whether the connect succeeds or
/// fails.
pub async fn connect_logged(
    conninfo: &str,
    options: &ConnectOptions,
    log: &mut Vec<Attempt>,
) -> Result<Session, Error> {
    Session::connect(Machine::prepare(conninfo, options)?, log).await
}
