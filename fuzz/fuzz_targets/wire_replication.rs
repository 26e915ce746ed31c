//! Fuzz target `wire_replication`: `pgyard_wire::fuzzing::replication_messages` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_wire::fuzzing::replication_messages(data));
