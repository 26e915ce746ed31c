//! Replays the committed corpora and crash regressions of the cargo-fuzz targets
//! `tls_certificates` and `tls_key_file` (`fuzz/corpus/<target>/`, `fuzz/regressions/<target>/`)
//! through the same `pgyard_driver::fuzzing` functions the targets call.

use pgyard_driver::fuzzing;
use pgyard_testkit::fuzz::replay;

#[test]
fn tls_certificates() {
    replay("tls_certificates", fuzzing::certificates);
}

#[test]
fn tls_key_file() {
    replay("tls_key_file", fuzzing::key_file);
}

/// The differential is not empty: x509-cert reads every test certificate of the driver, so
/// each is compared field by field (one that x509-cert stopped reading would fail here rather
/// than silently skip the comparison).
#[test]
fn the_certificate_differential_compares_the_test_certificates() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/v1chain");
    let mut compared = 0;
    for entry in std::fs::read_dir(&dir).expect("the test certificates") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "der") {
            let der = std::fs::read(&path).expect("a certificate");
            assert!(
                fuzzing::certificate(&der),
                "{} not compared",
                path.display()
            );
            compared += 1;
        }
    }
    assert!(compared >= 20, "only {compared} certificates compared");
}
