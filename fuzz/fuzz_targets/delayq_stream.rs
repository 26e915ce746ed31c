//! Fuzz target `delayq_stream`: `pgyard_delayq::fuzzing::stream_events` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_delayq::fuzzing::stream_events(data));
