//! Fuzz target `conninfo_any`: `pgyard_conninfo::fuzzing::parse_any` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::parse_any(data));
