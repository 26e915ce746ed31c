//! Fuzz target `wire_middleware`: `pgyard_wire::fuzzing::middleware_split` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::middleware_split(data));
