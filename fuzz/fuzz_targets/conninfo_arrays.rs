//! Fuzz target `conninfo_arrays`: `pgyard_conninfo::fuzzing::parse_arrays` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::parse_arrays(data));
