//! Fuzz target `slotsync_plan`: `pgyard_slotsync::run_plan_text`, what `pgyard slotsync plan`
//! runs, on arbitrary bytes. The corpus replay in `crates/slotsync/tests/fuzz_corpus.rs` calls
//! the same function.
#![no_main]

/// The CLI reads its input with `read_to_string`, so bytes that are not UTF-8 never reach the
/// plan; everything else must give a plan or an input error, never a panic.
fn plan_json(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pgyard_slotsync::run_plan_text(text);
    }
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| plan_json(data));
