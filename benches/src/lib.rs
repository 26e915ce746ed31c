//! Criterion benchmarks of pgyard beside its peers; the benchmarks live in `benches/`.
//!
//! This library holds what the benchmarks and their correctness tests share: the corpus of
//! connection strings and a small binding of Debian's libpq 15, linked at build time.
//! The `wire` module holds the `wire` benchmark's backend stream, frontend batch and the
//! timed routines of pgyard and postgres-protocol. `libpq18` opens connections with libpq 18,
//! loaded at run time, for the `connect` benchmark.

pub mod corpus;
pub mod libpq15;
pub mod libpq18;
pub mod wire;
