//! Fuzz target `conninfo_proposal`: `pgyard_conninfo::fuzzing::parse_proposal` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::parse_proposal(data));
