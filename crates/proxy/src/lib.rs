//! The pure machines of `pgyard proxy`, a connection pooler that honours the middleware
//! message: [`client::ClientSession`] (one client connection: startup, password check,
//! middleware messages, relaying, when a server goes back) and [`pool::Pools`] (which server
//! connections exist, which are lent, who waits). Both take time as an argument and do no
//! I/O; `pgyard-tokio`'s proxy module drives them over sockets and opens the server
//! connections through `pgyard-connect` and the shared driver core. [`admin`] is the admin
//! console's command language and result sets. See `docs/proxy.md`.
//!
//! Another pooler can embed either machine on its own runtime: each hands out what to do
//! next (`poll_output`) and says when it next needs the clock (`poll_timeout`). The pools
//! below have room for one server connection; the second client waits for it, the third
//! gives up:
//!
//! ```
//! use std::time::Duration;
//! use pgyard_proxy::{ClientId, PoolKey, PoolOut, PoolSettings, Pools, Route, ServerId};
//! use pgyard_types::Instant;
//!
//! let wait_timeout = Duration::from_secs(5);
//! let mut pools = Pools::new(PoolSettings { size: 1, wait_timeout, ..Default::default() });
//! let key = PoolKey { database: "shop".into(), user: "app".into(), route: Route::Primary,
//!                     options: String::new() };
//! let t0 = Instant::ZERO;
//!
//! let (one, two, three) = (ClientId(1), ClientId(2), ClientId(3));
//! let server = ServerId(1);
//!
//! pools.acquire(t0, one, &key);
//! // No server yet: the adapter is asked to open one, and reports back.
//! assert_eq!(pools.poll_output(), Some(PoolOut::Open { server, key: key.clone() }));
//! pools.opened(t0, server, Ok(()));
//! assert_eq!(pools.poll_output(), Some(PoolOut::Grant { client: one, server }));
//!
//! // The pool is full: client 2 waits until client 1's transaction ends.
//! pools.acquire(t0, two, &key);
//! assert_eq!(pools.poll_output(), None);
//! pools.release(t0 + Duration::from_secs(1), server, true);
//! assert_eq!(pools.poll_output(), Some(PoolOut::Grant { client: two, server }));
//!
//! // Client 3 waits past `wait_timeout` and is refused with PgBouncer's words.
//! pools.acquire(t0, three, &key);
//! assert_eq!(pools.poll_timeout(), Some(t0 + wait_timeout));
//! pools.handle_timeout(t0 + wait_timeout);
//! let Some(PoolOut::Refuse { client, message, .. }) = pools.poll_output() else { panic!() };
//! assert_eq!((client, message.as_str()), (three, "query_wait_timeout"));
//! ```

pub mod admin;
#[cfg(feature = "arbitrary")]
pub mod arb;
pub mod auth_file;
pub mod classes;
pub mod client;
pub mod fuzzing;
pub mod pool;
pub mod scan;

pub use auth_file::{AuthFile, AuthFileError, Password};
pub use classes::{Directive, Route};
#[cfg(feature = "planted-bugs")]
pub use client::PlantedBug;
pub use client::{
    CancelKey, ClientAuth, ClientCert, ClientConfig, ClientOut, ClientSession, ClientTls,
    Databases, Lent, PoolMode, TlsMode,
};
pub use pool::{
    ClientId, PoolKey, PoolOut, PoolSettings, Pools, Returned, ServerId, ServerUse, ServerView,
};
