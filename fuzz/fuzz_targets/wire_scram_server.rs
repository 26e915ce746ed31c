//! Fuzz target `wire_scram_server`: `pgyard_wire::fuzzing::scram_server` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::scram_server(data));
