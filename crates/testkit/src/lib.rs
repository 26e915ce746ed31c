//! Test tooling for pgyard (not published): provisions the real peers that pgyard is measured
//! against. It installs PostgreSQL 18 (server binaries and `libpq.so.5.18`) once into a
//! world-readable cache outside the checkout, loads libpq 18 through FFI as the oracle for
//! parsing, and starts primaries and streaming standbys on free loopback ports as an
//! unprivileged user.

pub mod client_chain;
pub mod cluster;
pub mod draw;
pub mod fixtures;
pub mod fuzz;
pub mod libpq;
pub mod postgres;
pub mod proxy;
