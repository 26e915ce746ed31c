//! Replays the committed fuzz corpora and crash regressions (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the same `pgyard_wire::fuzzing` functions the
//! cargo-fuzz targets call, so every saved input runs on stable in `cargo test`.

use pgyard_testkit::fuzz::replay;
use pgyard_wire::fuzzing;

#[test]
fn wire_frames() {
    replay("wire_frames", fuzzing::frames);
}

#[test]
fn wire_frontend() {
    replay("wire_frontend", fuzzing::frontend_messages);
}

#[test]
fn wire_backend() {
    replay("wire_backend", fuzzing::backend_messages);
}

#[test]
fn wire_middleware() {
    replay("wire_middleware", fuzzing::middleware_split);
}

#[test]
fn wire_replication() {
    replay("wire_replication", fuzzing::replication_messages);
}

#[test]
fn wire_pgoutput() {
    replay("wire_pgoutput", fuzzing::pgoutput_messages);
}

#[test]
fn wire_scram_client() {
    replay("wire_scram_client", fuzzing::scram_client);
}

#[test]
fn wire_scram_server() {
    replay("wire_scram_server", fuzzing::scram_server);
}
