//! Fuzz target `conninfo_uri`: `pgyard_conninfo::fuzzing::parse_uri` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::parse_uri(data));
