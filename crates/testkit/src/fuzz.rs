//! Replaying the committed fuzz corpora as ordinary tests, so every saved input runs on stable
//! in `cargo test` through the same entry point its cargo-fuzz target calls.

use std::panic;
use std::path::{Path, PathBuf};

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Feeds every file of `fuzz/corpus/<target>/` and `fuzz/regressions/<target>/` to `entry`;
/// fails naming each input that panicked, and fails if there was nothing to replay (a vanished
/// corpus is a bug too).
pub fn replay(target: &str, entry: fn(&[u8])) {
    let mut files = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir().join(kind).join(target);
        let Ok(read) = std::fs::read_dir(&dir) else {
            continue;
        };
        for item in read {
            let path = item
                .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
                .path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort();
    assert!(
        !files.is_empty(),
        "no inputs to replay for fuzz target {target} under {}",
        fuzz_dir().display()
    );
    let mut panicked = Vec::new();
    for path in &files {
        let data =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if panic::catch_unwind(|| entry(&data)).is_err() {
            panicked.push(path.display().to_string());
        }
    }
    assert!(
        panicked.is_empty(),
        "fuzz target {target}: {} of {} inputs panicked:\n{}",
        panicked.len(),
        files.len(),
        panicked.join("\n")
    );
}
