//! Replays the committed fuzz corpora and crash regressions (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the same `pgyard_delayq::fuzzing` functions the
//! cargo-fuzz targets call, so every saved input runs on stable in `cargo test`.

use pgyard_delayq::fuzzing;
use pgyard_testkit::fuzz::replay;

#[test]
fn delayq_recover() {
    replay("delayq_recover", fuzzing::recover_segments);
}

#[test]
fn delayq_stream() {
    replay("delayq_stream", fuzzing::stream_events);
}
