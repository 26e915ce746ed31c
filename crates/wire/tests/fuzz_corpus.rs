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

#[test]
fn wire_roundtrip_frontend() {
    replay("wire_roundtrip_frontend", fuzzing::roundtrip_frontend);
}

#[test]
fn wire_roundtrip_backend() {
    replay("wire_roundtrip_backend", fuzzing::roundtrip_backend);
}

#[test]
fn wire_roundtrip_replication() {
    replay("wire_roundtrip_replication", fuzzing::roundtrip_replication);
}

#[test]
fn wire_roundtrip_pgoutput() {
    replay("wire_roundtrip_pgoutput", fuzzing::roundtrip_pgoutput);
}

#[test]
fn wire_roundtrip_middleware() {
    replay("wire_roundtrip_middleware", fuzzing::roundtrip_middleware);
}

#[test]
fn wire_roundtrip_scram() {
    replay("wire_roundtrip_scram", fuzzing::roundtrip_scram);
}
