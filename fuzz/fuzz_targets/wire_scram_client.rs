//! Fuzz target `wire_scram_client`: `pgyard_wire::fuzzing::scram_client` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::scram_client(data));
