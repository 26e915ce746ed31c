//! `pgyard slotsync plan` as a process: a new failover slot is created temporary, persisted
//! and listed as synced; a prerequisite failure exits non-zero with the server's text.

use std::process::Command;

fn plan(input: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["slotsync", "plan", "--input"])
        .arg(input)
        .output()
        .expect("pgyard runs")
}

fn data(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn a_new_failover_slot_becomes_a_persistent_synced_slot() {
    let out = plan(&data("slotsync_plan.json"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let kinds: Vec<&str> = v["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| a["action"].as_str().expect("action name"))
        .collect();
    assert_eq!(kinds.first(), Some(&"create"));
    assert!(kinds.contains(&"persist"), "{kinds:?}");
    let slots = v["slots_after"].as_array().expect("slots_after");
    // The physical slot is not a failover slot and is never synced.
    assert_eq!(slots.len(), 1);
    let s = &slots[0];
    assert_eq!(s["slot_name"], "sub1");
    assert_eq!(s["synced"], true);
    assert_eq!(s["temporary"], false);
    assert_eq!(s["failover"], true);
    assert_eq!(s["confirmed_flush_lsn"], "0/2000100");
    assert_eq!(s["restart_lsn"], "0/2000000");
}

#[test]
fn a_standby_without_logical_wal_is_refused_with_the_servers_error() {
    let text = std::fs::read_to_string(data("slotsync_plan.json")).expect("fixture");
    let dir = std::env::temp_dir().join(format!("pgyard-slotsync-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let input = dir.join("replica.json");
    std::fs::write(
        &input,
        text.replace("\"wal_level\":\"logical\"", "\"wal_level\":\"replica\""),
    )
    .expect("write");
    let out = plan(&input);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("replication slot synchronization requires \"wal_level\" >= \"logical\""),
        "{err}"
    );
}
