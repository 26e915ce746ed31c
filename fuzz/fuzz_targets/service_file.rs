//! Fuzz target `service_file`: `pgyard_conninfo::fuzzing::service_file` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::service_file(data));
