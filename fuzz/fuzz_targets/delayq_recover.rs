//! Fuzz target `delayq_recover`: `pgyard_delayq::fuzzing::recover_segments` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_delayq::fuzzing::recover_segments(data));
