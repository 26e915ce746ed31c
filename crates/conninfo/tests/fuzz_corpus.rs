//! Replays the committed fuzz corpora and crash regressions (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the same `pgyard_conninfo::fuzzing` functions the
//! cargo-fuzz targets call, so every saved input runs on stable in `cargo test`.

use pgyard_conninfo::fuzzing;
use pgyard_testkit::fuzz::replay;
use pgyard_testkit::libpq::Libpq;

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

#[test]
fn conninfo_roundtrip_kv() {
    replay("conninfo_roundtrip_kv", fuzzing::roundtrip_kv);
}

#[test]
fn conninfo_roundtrip_uri() {
    replay("conninfo_roundtrip_uri", fuzzing::roundtrip_uri);
}

#[test]
fn conninfo_roundtrip_arrays() {
    replay("conninfo_roundtrip_arrays", fuzzing::roundtrip_arrays);
}

/// libpq 18 through FFI, as the fuzz target `conninfo_libpq_diff` asks it.
fn libpq(input: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Vec<u8>> {
    match Libpq::shared() {
        Ok(lib) => lib.conninfo_parse(input),
        Err(e) => panic!("libpq 18 is required for the differential replay: {e}"),
    }
}

#[test]
fn conninfo_libpq_diff() {
    replay("conninfo_libpq_diff", |data| {
        fuzzing::libpq_diff(data, libpq)
    });
}

/// Seeded inputs through the differential entry point, so the generators meet libpq on every
/// `cargo test` and not only under cargo-fuzz.
#[test]
fn conninfo_libpq_diff_seeded() {
    let mut state: u64 = 0x6172_6200;
    let mut next = move || {
        // SplitMix64.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    for _ in 0..20_000 {
        let len = (next() % 400) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        fuzzing::libpq_diff(&data, libpq);
    }
}
