//! The multi-host connect machine: libpq 18's connection sequencing reproduced exactly (host
//! slots, per-address attempts, failure classification, accumulated error text, encryption
//! fallback, `target_session_attrs`, `load_balance_hosts`, `connect_timeout`, protocol
//! negotiation, reset), plus pgyard's opt-in extensions (staggered racing, a failover wait
//! budget, `prefer-primary`, host-status memory). Pure and sans-IO: the driver performs the
//! [`Action`]s and feeds back [`Event`]s; time and randomness are inputs.
//!
//! Run loop: after [`Connector::new`], call [`Connector::poll_action`] until it returns
//! `None`, perform each action, feed results with [`Connector::handle_event`], and call
//! [`Connector::handle_timeout`] at [`Connector::poll_timeout`]. The machine ends with exactly
//! one [`Action::Done`].
//!
//! It sits between pgyard-conninfo (whose [`ConnectConfig`](pgyard_conninfo::typed::ConnectConfig)
//! it takes) and a driver that owns the sockets: pgyard-driver's core, the blocking and tokio
//! adapters, the simulator, or your own loop (`examples/poll_loop.rs` drives it over std
//! sockets in a page). Below, a scripted network plays the driver: `db1` refuses the
//! connection, `db2` lets the client in without a password.
//!
//! ```
//! use std::net::SocketAddr;
//! use bytes::BytesMut;
//! use pgyard_connect::{Action, Connector, Event, IoErrorKind, OpenTarget};
//! use pgyard_conninfo::resolve::{Environment, MemFiles};
//! use pgyard_types::Instant;
//! use pgyard_wire::backend::{self, Authentication, BackendKeyData, TransactionStatus};
//!
//! let info = pgyard_conninfo::parse("host=db1,db2 user=app dbname=shop sslmode=disable")?;
//! let config = pgyard_conninfo::configure(info, &Environment::new(), &MemFiles::new())?.config;
//! let mut machine = Connector::new(config, Instant::ZERO, 7);
//!
//! let addr_of = |host: &str, port: u16| -> SocketAddr {
//!     let ip = if host == "db1" { [10, 0, 0, 1] } else { [10, 0, 0, 2] };
//!     SocketAddr::from((ip, port))
//! };
//! // What a server that trusts the client sends after the startup packet.
//! let mut welcome = BytesMut::new();
//! Authentication::Ok.encode(&mut welcome)?;
//! BackendKeyData { pid: 42, key: &[1, 2, 3, 4] }.encode(&mut welcome)?;
//! backend::encode_ready_for_query(TransactionStatus::Idle, &mut welcome);
//!
//! let now = Instant::ZERO; // nothing here waits, so the clock never moves
//! let established = loop {
//!     // Every event below is answered at once, so an action is always pending.
//!     match machine.poll_action().expect("an action") {
//!         Action::Resolve { token, host, port } => {
//!             let addrs = vec![addr_of(&host, port)];
//!             machine.handle_event(now, Event::Resolved { token, addrs });
//!         }
//!         Action::Open { attempt, target, .. } => {
//!             let event = if target == OpenTarget::Tcp(addr_of("db1", 5432)) {
//!                 Event::OpenFailed { attempt, error: IoErrorKind::ConnectionRefused }
//!             } else {
//!                 Event::Opened { attempt }
//!             };
//!             machine.handle_event(now, event);
//!         }
//!         // The only bytes sent here are the startup packet.
//!         Action::Send { attempt, .. } => {
//!             let bytes = welcome.to_vec();
//!             machine.handle_event(now, Event::Received { attempt, bytes });
//!         }
//!         Action::Close { .. } => {}
//!         Action::StartTls { .. } => unreachable!("sslmode=disable"),
//!         Action::Done(result) => break result?,
//!     }
//! };
//! assert_eq!(established.host, "db2");
//! assert_eq!(established.backend_key.map(|k| k.pid), Some(42));
//! assert!(machine.is_done());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod conn;
mod connector;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod io;
mod kinds;
mod memory;
mod numeric;
mod parameters;
mod report;
mod verdict;

pub use conn::ServerRole;
pub use connector::Connector;
#[cfg(feature = "planted-bugs")]
pub use connector::PlantedBug;
pub use io::{
    Action, AttemptId, BackendKey, ClientCert, Established, Event, IoErrorKind, OpenTarget,
    ResolveToken, TcpOptions, TlsVerify,
};
pub use memory::{HostEntry, HostStatus, HostStatusMemory};
pub use numeric::{inet_aton, numeric_host, NumericHost};
pub use parameters::{Iter as ParameterIter, Parameters};
pub use report::{ip_text, AttemptReport, ConnectError, FailureKind};
pub use verdict::{alpn_refusal, resolver_text, ALPN_POSTGRESQL};
