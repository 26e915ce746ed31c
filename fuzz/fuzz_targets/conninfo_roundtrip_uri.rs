//! Fuzz target `conninfo_roundtrip_uri`: `pgyard_conninfo::fuzzing::roundtrip_uri` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::roundtrip_uri(data));
