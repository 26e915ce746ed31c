//! Replays the committed fuzz corpora and crash regressions (`fuzz/corpus/<target>/`,
//! `fuzz/regressions/<target>/`) through the same `pgyard_wire::fuzzing` functions the
//! cargo-fuzz targets call, so every saved input runs on stable in `cargo test`.

use std::panic;
use std::path::{Path, PathBuf};

use pgyard_wire::fuzzing;

/// The repository's `fuzz/` directory.
fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// Feeds every file of the target's corpus and regressions to `entry`; fails naming each input
/// that panicked, and fails if there was nothing to replay (a vanished corpus is a bug too).
fn replay(target: &str, entry: fn(&[u8])) {
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
