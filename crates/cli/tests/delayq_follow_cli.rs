//! `pgyard delayq follow` as a process against a real PostgreSQL 18: a missing slot is refused
//! with the server's own error, and nothing is written to the queue directory.

use std::process::Command;

use pgyard_testkit::cluster::{Options, Primary};

#[test]
fn a_missing_slot_is_refused_with_the_servers_error() {
    let primary = Primary::start(Options::default()).expect("a primary starts");
    let dir = std::env::temp_dir().join(format!("pgyard-follow-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args([
            "delayq",
            "follow",
            &primary.conninfo(),
            "--slot",
            "nope",
            "--delay",
            "1h",
        ])
        .arg(&dir)
        .output()
        .expect("pgyard runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("replication slot \"nope\" does not exist"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
