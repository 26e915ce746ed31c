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

mod driver;
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
