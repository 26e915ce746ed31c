//! Fuzz target `wire_frames`: `pgyard_wire::fuzzing::frames` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::frames(data));
