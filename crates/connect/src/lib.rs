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

mod conn;
mod connector;
mod io;
mod kinds;
mod memory;
mod report;
mod verdict;

pub use conn::ServerRole;
pub use connector::Connector;
#[cfg(feature = "planted-bugs")]
pub use connector::PlantedBug;
pub use io::{
    Action, AttemptId, BackendKey, Established, Event, IoErrorKind, OpenTarget, ResolveToken,
    TcpOptions, TlsVerify,
};
pub use memory::{HostEntry, HostStatus, HostStatusMemory};
pub use report::{AttemptReport, ConnectError, FailureKind};
pub use verdict::{alpn_refusal, resolver_text, ALPN_POSTGRESQL};
