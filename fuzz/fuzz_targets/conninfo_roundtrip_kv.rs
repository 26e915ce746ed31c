//! Fuzz target `conninfo_roundtrip_kv`: `pgyard_conninfo::fuzzing::roundtrip_kv` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::roundtrip_kv(data));
