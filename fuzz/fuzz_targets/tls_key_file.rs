//! Fuzz target `tls_key_file`: `pgyard_driver::fuzzing::key_file` (a client key file, clear or
//! encrypted, with or without a pass phrase).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_driver::fuzzing::key_file(data));
