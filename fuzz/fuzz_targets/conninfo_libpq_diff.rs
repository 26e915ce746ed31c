//! Fuzz target `conninfo_libpq_diff`: `pgyard_conninfo::fuzzing::libpq_diff` against libpq 18
//! (`pgyard_testkit::libpq`, from the PostgreSQL 18 cache); any disagreement is a crash.
#![no_main]

fn libpq(input: &[u8]) -> Result<Vec<(String, Vec<u8>)>, Vec<u8>> {
    match pgyard_testkit::libpq::Libpq::shared() {
        Ok(lib) => lib.conninfo_parse(input),
        Err(e) => panic!("libpq 18 could not be provided: {e}"),
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| pgyard_conninfo::fuzzing::libpq_diff(data, libpq));
