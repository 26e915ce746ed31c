//! The PostgreSQL frontend/backend protocol (3.0 and 3.2) as a pure, zero-copy codec: an
//! incremental frame decoder, every message of both directions (decode borrows from the
//! frame, encode writes into `BytesMut`), error fields and SQLSTATEs, the authentication
//! exchanges as sans-IO state machines, the streaming-replication sub-protocol, logical
//! replication's pgoutput, and the proposed middleware message with its splitter.

pub mod buf;

pub use buf::{DecodeError, Reader};
pub mod auth;
pub mod backend;
pub mod der;
pub mod describe;
pub mod error_fields;
pub mod frame;
pub mod frontend;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod middleware;
pub mod pgoutput;
pub mod replication;
