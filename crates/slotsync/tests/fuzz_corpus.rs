//! Replays the committed corpus and crash regressions of the cargo-fuzz target `slotsync_plan`
//! (`fuzz/corpus/slotsync_plan/`, `fuzz/regressions/slotsync_plan/`) through
//! `pgyard_slotsync::run_plan_text`, the function the target calls, so every saved input runs
//! on stable in `cargo test`.

use pgyard_testkit::fuzz::replay;

/// As the target: the CLI reads its input as UTF-8 text, so other bytes never reach the plan.
fn plan_json(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = pgyard_slotsync::run_plan_text(text);
    }
}

#[test]
fn slotsync_plan() {
    replay("slotsync_plan", plan_json);
}
