//! `pgyard slotsync plan` as a process: a new failover slot is created temporary, persisted
//! and listed as synced; with the standby's snapshot files and WAL facts an update is decoded
//! rather than copied, and the slot's in-memory catalog_xmin carried to the next call decides
//! a new slot's initial one; a prerequisite failure exits non-zero with the server's text.

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

#[test]
fn without_a_snapshot_at_the_remote_restart_lsn_positions_are_decoded() {
    let text = std::fs::read_to_string(data("slotsync_plan.json")).expect("fixture");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("fixture JSON");
    v["local_slots"] = serde_json::json!([{
        "slot_name": "sub1", "plugin": "pgoutput", "slot_type": "logical", "datoid": 5,
        "database": "postgres", "catalog_xmin": "750", "restart_lsn": "0/1800000",
        "confirmed_flush_lsn": "0/1800100", "wal_status": "reserved", "conflicting": false,
        "failover": true, "synced": true
    }]);
    // A snapshot file elsewhere, and two idle running_xacts records on the way: consistent
    // at the first, the second (after the old confirmed_flush) becomes the restart point.
    v["standby"]["serialized_snapshots"] = serde_json::json!(["0/1700000"]);
    v["standby"]["running_xacts"] = serde_json::json!([
        {"start_lsn": "0/1800000", "oldest_running_xid": 752, "next_xid": 752},
        {"start_lsn": "0/1900000", "oldest_running_xid": 754, "next_xid": 754}
    ]);
    let dir = std::env::temp_dir().join(format!("pgyard-slotsync-dec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let input = dir.join("decoded.json");
    std::fs::write(&input, v.to_string()).expect("write");
    let out = plan(&input);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let update = &first["actions"][0];
    assert_eq!(update["action"], "update");
    assert_eq!(update["positions"], "decoded");
    let s = &first["slots_after"][0];
    assert_eq!(s["restart_lsn"], "0/1900000");
    assert_eq!(s["catalog_xmin"], "754");
    assert_eq!(s["confirmed_flush_lsn"], "0/2000100");
    // In memory the slot holds the remote's catalog_xmin; the output carries it.
    assert_eq!(
        first["effective_catalog_xmins"],
        serde_json::json!({"sub1": "755"})
    );

    // Next call: a new remote slot (listed first) at the snapshot the decoding wrote, with
    // catalog_xmin 754. Its initial catalog_xmin is 755 (sub1's in-memory value), so the
    // remote precedes and it is not persisted; without the carried value it would be.
    let mut next = v.clone();
    next["local_slots"] = first["slots_after"].clone();
    next["standby"]["snapshot_xmin"] = serde_json::json!(760);
    next["standby"]["serialized_snapshots"] = serde_json::json!(["0/1700000", "0/1900000"]);
    let remote_sub1 = v["remote_slots"][1].clone();
    let mut sub2 = remote_sub1.clone();
    sub2["slot_name"] = "sub2".into();
    sub2["restart_lsn"] = "0/1900000".into();
    sub2["confirmed_flush_lsn"] = "0/1900100".into();
    sub2["catalog_xmin"] = "754".into();
    next["remote_slots"] = serde_json::json!([v["remote_slots"][0], sub2, remote_sub1]);
    let run = |input_value: &serde_json::Value, file: &str| {
        let path = dir.join(file);
        std::fs::write(&path, input_value.to_string()).expect("write");
        let out = plan(&path);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let kinds: Vec<(String, String)> = v["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .map(|a| {
                (
                    a["action"].as_str().unwrap_or("").to_owned(),
                    a["slot"].as_str().unwrap_or("").to_owned(),
                )
            })
            .collect();
        (v, kinds)
    };
    let persist_sub2 = ("persist".to_owned(), "sub2".to_owned());
    let (plain, kinds) = run(&next, "plain.json");
    assert_eq!(plain["actions"][0]["catalog_xmin"], "754");
    assert!(kinds.contains(&persist_sub2), "{kinds:?}");
    next["standby"]["effective_catalog_xmins"] = first["effective_catalog_xmins"].clone();
    let (carried, kinds) = run(&next, "carried.json");
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(carried["actions"][0]["action"], "create");
    assert_eq!(carried["actions"][0]["catalog_xmin"], "755");
    assert_eq!(carried["actions"][1]["reason"], "remote_precedes");
    assert!(!kinds.contains(&persist_sub2), "{kinds:?}");
}
