//! Fuzz target `tls_certificates`: `pgyard_driver::fuzzing::certificates` (the version 1 chain
//! check and the host-name check on arbitrary certificates, against x509-cert).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_driver::fuzzing::certificates(data));
