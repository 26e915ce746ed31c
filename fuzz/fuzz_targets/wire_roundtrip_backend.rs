//! Fuzz target `wire_roundtrip_backend`: `pgyard_wire::fuzzing::roundtrip_backend`, generated messages
//! encoded, decoded and re-encoded.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::roundtrip_backend(data));
