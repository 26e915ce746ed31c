//! Fuzz target `conninfo_roundtrip_arrays`: `pgyard_conninfo::fuzzing::roundtrip_arrays` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::roundtrip_arrays(data));
