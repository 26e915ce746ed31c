//! Criterion benchmarks of pgyard beside its peers; the benchmarks live in `benches/`.
//!
//! This library holds what the benchmarks and their correctness tests share: the corpus of
//! connection strings and a small binding of Debian's libpq 15, linked at build time.

pub mod corpus;
pub mod libpq15;
