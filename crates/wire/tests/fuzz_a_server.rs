//! The `fuzz_a_server` example against a real PostgreSQL 18: hundreds of bursts of generated
//! frontend messages, and the server answers all of them readably and keeps taking
//! connections. It shows the generators drive a real peer through many states, not only that
//! they round-trip.

#[allow(dead_code)]
#[path = "../examples/fuzz_a_server.rs"]
mod fuzz_a_server;

use pgyard_testkit::cluster::{Options, Primary};

#[test]
fn postgresql_answers_generated_bursts_readably_and_stays_up() {
    let primary = Primary::start(Options::default()).expect("a primary starts");
    let addr = format!("127.0.0.1:{}", primary.port());
    let (mut sent, mut replies, mut closed, mut reached_marker) = (0, 0, 0, 0);
    for seed in 0..300u64 {
        let data = fuzz_a_server::seeded_input(seed, 64 + (seed as usize * 37) % 2048);
        let o = fuzz_a_server::probe(&addr, "postgres", &data)
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        sent += o.sent;
        replies += o.replies;
        if o.closed {
            closed += 1;
        } else {
            reached_marker += 1;
        }
    }
    // Both ends of a burst happen: PostgreSQL closes on some messages (a password message
    // after the login, say) and serves through the others.
    assert!(closed > 10, "bursts the server ended: {closed}");
    assert!(
        reached_marker > 10,
        "bursts that reached the marker: {reached_marker}"
    );
    assert!(
        sent > 2_000 && replies > 300,
        "{sent} sent, {replies} replies"
    );
}
