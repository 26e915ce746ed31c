//! Criterion benchmarks of pgyard beside its peers; the benchmarks live in `benches/`.
