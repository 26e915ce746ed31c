//! Fuzz target `passfile`: `pgyard_conninfo::fuzzing::passfile` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::passfile(data));
