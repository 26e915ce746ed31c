//! Replays the `proxy_client` fuzz corpus and its regressions through the target's entry point.

#[test]
fn proxy_client_corpus_replays_cleanly() {
    pgyard_testkit::fuzz::replay("proxy_client", pgyard_proxy::fuzzing::client_session);
}
