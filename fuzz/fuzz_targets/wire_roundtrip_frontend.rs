//! Fuzz target `wire_roundtrip_frontend`: `pgyard_wire::fuzzing::roundtrip_frontend`, generated messages
//! encoded, decoded and re-encoded.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::roundtrip_frontend(data));
