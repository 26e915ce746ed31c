//! Replays the committed fuzz corpora and crash regressions (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the same `pgyard_conninfo::fuzzing` functions the
//! cargo-fuzz targets call, so every saved input runs on stable in `cargo test`.

use pgyard_conninfo::fuzzing;
use pgyard_testkit::fuzz::replay;

#[test]
fn conninfo_any() {
    replay("conninfo_any", fuzzing::parse_any);
}

#[test]
fn conninfo_uri() {
    replay("conninfo_uri", fuzzing::parse_uri);
}

#[test]
fn conninfo_arrays() {
    replay("conninfo_arrays", fuzzing::parse_arrays);
}

#[test]
fn service_file() {
    replay("service_file", fuzzing::service_file);
}

#[test]
fn passfile() {
    replay("passfile", fuzzing::passfile);
}

#[test]
fn conninfo_proposal() {
    replay("conninfo_proposal", fuzzing::parse_proposal);
}
