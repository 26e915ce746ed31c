//! The pure machines of `pgyard proxy`, a connection pooler that honours the middleware
//! message: [`client::ClientSession`] (one client connection: startup, password check,
//! middleware messages, relaying, when a server goes back) and [`pool::Pools`] (which server
//! connections exist, which are lent, who waits). Both take time as an argument and do no
//! I/O; `pgyard-tokio`'s proxy module drives them over sockets and opens the server
//! connections through `pgyard-connect` and the shared driver core. See `docs/proxy.md`.

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
    CancelKey, ClientAuth, ClientConfig, ClientOut, ClientSession, ClientTls, Databases, Lent,
    PoolMode, TlsMode,
};
pub use pool::{ClientId, PoolKey, PoolOut, PoolSettings, Pools, ServerId};
