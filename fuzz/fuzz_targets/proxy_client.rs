//! Fuzz target `proxy_client`: `pgyard_proxy::fuzzing::client_session` on arbitrary bytes.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_proxy::fuzzing::client_session(data));
