//! A tokio adapter: drives the pure pgyard-connect machine over async sockets (TCP and Unix)
//! and rustls (tokio-rustls), and gives back a [`Session`]. It is the async twin of
//! pgyard-blocking and shares its inputs (environment, service and password files), its TLS
//! configuration builder, its error type and its texts; it makes no connect decision of its
//! own.
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
//! [`follow`] streams a publisher's logical slot into a durable delay queue.

mod driver;
pub mod follow;
mod session;

use std::time::Duration;

pub use pgyard_blocking::{
    Attempt, ConnectOptions, Error, RawFrame, RealInputs, SessionInfo, Strategy,
};
pub use pgyard_connect::{BackendKey, ConnectError, OpenTarget, ServerRole};
pub use session::{CancelToken, Session};

use pgyard_types::Instant;

/// Connects with `conninfo` (keyword/value or URI), honouring the environment, the service
/// file and the password file as libpq does, with an OS-random seed.
pub async fn connect(conninfo: &str) -> Result<Session, Error> {
    connect_with(conninfo, &ConnectOptions::default()).await
}

/// Connects with `conninfo` and explicit adapter options (seed, strategy, inputs).
pub async fn connect_with(conninfo: &str, options: &ConnectOptions) -> Result<Session, Error> {
    Session::connect(conninfo, options, &mut Vec::new()).await
}

/// [`connect_with`], also appending every attempt to `log`, whether the connect succeeds or
/// fails.
pub async fn connect_logged(
    conninfo: &str,
    options: &ConnectOptions,
    log: &mut Vec<Attempt>,
) -> Result<Session, Error> {
    Session::connect(conninfo, options, log).await
}

/// Converts tokio time to the machine's virtual clock from a fixed origin.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    origin: tokio::time::Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Clock {
            origin: tokio::time::Instant::now(),
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

    /// The tokio instant of a machine deadline.
    pub(crate) fn deadline(&self, t: Instant) -> tokio::time::Instant {
        self.origin + Duration::from_nanos(t.as_nanos())
    }
}
