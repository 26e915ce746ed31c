//! Fuzz target `wire_backend`: `pgyard_wire::fuzzing::backend_messages` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::backend_messages(data));
