//! Fuzz target `wire_frontend`: `pgyard_wire::fuzzing::frontend_messages` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::frontend_messages(data));
