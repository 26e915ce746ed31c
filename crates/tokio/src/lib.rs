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

mod driver;
pub mod follow;
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
