//! Fuzz target `wire_pgoutput`: `pgyard_wire::fuzzing::pgoutput_messages` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::pgoutput_messages(data));
