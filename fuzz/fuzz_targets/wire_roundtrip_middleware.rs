//! Fuzz target `wire_roundtrip_middleware`: `pgyard_wire::fuzzing::roundtrip_middleware`, generated messages
//! encoded, decoded and re-encoded.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::roundtrip_middleware(data));
