//! Fuzz target `proxy_session`: `pgyard_proxy::fuzzing::structured_session`, a client
//! session fed well-formed requests and replies, judged against a reference backend.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    pgyard_proxy::fuzzing::structured_session(data);
});
