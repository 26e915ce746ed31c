//! Unit tests for a new synced slot's initial `catalog_xmin`: the standby's oldest safe
//! decoding xid, computed from the slots' in-memory `effective_catalog_xmin` (which a sync
//! update sets to the remote's `catalog_xmin`), not from the view's `catalog_xmin`.

use std::collections::BTreeMap;

use pgyard_slotsync::decoding::RunningXacts;
use pgyard_slotsync::*;
use pgyard_types::Xid;

mod common;
use common::*;

fn rx(at: &str, xid: u32) -> RunningXacts {
    RunningXacts {
        start_lsn: lsn(at),
        end_lsn: None,
        oldest_running_xid: Xid(xid),
        next_xid: Xid(xid),
        xids: Vec::new(),
        subxids: Vec::new(),
    }
}

/// Next xid 760; idle `RUNNING_XACTS` at 0/1000100 (755) and 0/1000500 (757); no snapshot
/// files unless given.
fn standby(snapshots: &[&str]) -> Standby {
    Standby {
        snapshot_xmin: Xid(760),
        serialized_snapshots: Some(snapshots.iter().map(|s| lsn(s)).collect()),
        running_xacts: vec![rx("0/1000100", 755), rx("0/1000500", 757)],
        ..base_standby()
    }
}

fn physical() -> SlotRow {
    physical_named("s1")
}

fn created_xmin(out: &Outcome, slot: &str) -> Option<Xid> {
    out.actions.iter().find_map(|a| match a {
        Action::Create {
            slot: s,
            catalog_xmin,
            ..
        } if s == slot => Some(*catalog_xmin),
        _ => None,
    })
}

fn precedes(out: &Outcome, slot: &str) -> bool {
    out.actions.iter().any(|a| {
        matches!(a, Action::Skip { slot: s, reason: SkipReason::RemotePrecedes { .. } } if s == slot)
    })
}

fn names(rows: &[SlotRow]) -> Vec<&str> {
    rows.iter().map(|r| r.slot_name.as_str()).collect()
}

/// `a` decodes (no snapshot at its remote restart_lsn 0/1000580): its view keeps 757 from
/// the `RUNNING_XACTS` at 0/1000500, while its in-memory value becomes the remote's 759.
fn decoded_a() -> (SlotRow, SlotRow) {
    (
        synced("a", "0/1000100", "0/1000200", 750),
        remote("a", "0/1000580", "0/1000600", 759),
    )
}

#[test]
fn a_new_slot_after_a_decoded_update_starts_from_the_remotes_catalog_xmin() {
    let (local_a, remote_a) = decoded_a();
    // b's restart_lsn gets a snapshot file from a's decoding, so b could copy; but its
    // remote catalog_xmin 758 precedes the initial 759 (a's in-memory value).
    let out = sync_function(
        &[
            physical(),
            remote_a,
            remote("b", "0/1000500", "0/1000600", 758),
        ],
        &[local_a],
        &standby(&[]),
    );
    assert_eq!(out.error, None);
    assert_eq!(out.slots_after[0].catalog_xmin, Some(Xid(757)), "decoded");
    assert_eq!(created_xmin(&out, "b"), Some(Xid(759)));
    assert!(precedes(&out, "b"));
    assert!(!out.actions.contains(&Action::Persist { slot: "b".into() }));
    assert_eq!(
        names(&out.slots_after),
        ["a"],
        "b stayed temporary: dropped"
    );
    assert_eq!(
        out.effective_catalog_xmins,
        BTreeMap::from([("a".to_owned(), Xid(759))])
    );
}

#[test]
fn a_new_slot_before_the_update_in_view_order_sees_the_old_value() {
    let (local_a, remote_a) = decoded_a();
    let out = sync_function(
        &[
            physical(),
            remote("b", "0/1000500", "0/1000600", 758),
            remote_a,
        ],
        std::slice::from_ref(&local_a),
        &standby(&[]),
    );
    assert_eq!(out.error, None);
    assert_eq!(created_xmin(&out, "b"), Some(Xid(750)), "a's view value");
    assert!(out.actions.contains(&Action::Persist { slot: "b".into() }));

    // Carried over from an earlier call, the in-memory value is what counts.
    let mut sb = standby(&[]);
    sb.effective_catalog_xmins.insert("a".into(), Xid(756));
    let out = sync_function(
        &[
            physical(),
            remote("b", "0/1000500", "0/1000600", 758),
            remote("a", "0/1000100", "0/1000200", 750),
        ],
        &[local_a],
        &sb,
    );
    assert_eq!(out.error, None);
    assert_eq!(created_xmin(&out, "b"), Some(Xid(756)));
    assert_eq!(
        out.effective_catalog_xmins.get("a"),
        Some(&Xid(756)),
        "not updated: the carried value stays"
    );
}

#[test]
fn a_carried_in_memory_value_decides_whether_the_remote_precedes() {
    let local = vec![synced("a", "0/1000500", "0/1000600", 750)];
    let remote_rows = vec![
        physical(),
        remote("a", "0/1000500", "0/1000600", 750),
        remote("b", "0/1000500", "0/1000600", 755),
    ];
    let sb = standby(&["0/1000500"]);
    let plain = sync_function(&remote_rows, &local, &sb);
    assert_eq!(created_xmin(&plain, "b"), Some(Xid(750)));
    assert!(plain
        .actions
        .contains(&Action::Persist { slot: "b".into() }));
    assert!(plain.effective_catalog_xmins.is_empty());

    let mut sb = sb;
    sb.effective_catalog_xmins.insert("a".into(), Xid(756));
    let carried = sync_function(&remote_rows, &local, &sb);
    assert_eq!(created_xmin(&carried, "b"), Some(Xid(756)));
    assert!(precedes(&carried, "b"));
    assert_eq!(names(&carried.slots_after), ["a"]);
}

#[test]
fn a_copied_invalidation_does_not_recompute_the_horizon() {
    // x is valid locally with 740 and gets the remote's invalidation copied: the server
    // does not recompute the horizons there, so b's initial catalog_xmin still sees 740.
    let mut remote_x = remote("x", "0/1000100", "0/1000200", 740);
    remote_x.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let local = vec![synced("x", "0/1000100", "0/1000200", 740)];
    let remote_b = remote("b", "0/1000500", "0/1000600", 745);
    let sb = standby(&["0/1000500"]);
    let out = sync_function(
        &[physical(), remote_x.clone(), remote_b.clone()],
        &local,
        &sb,
    );
    assert_eq!(out.error, None);
    assert_eq!(created_xmin(&out, "b"), Some(Xid(740)));
    assert!(out.actions.contains(&Action::Persist { slot: "b".into() }));

    // Invalidated before the call (the invalidation recomputed the horizons): not counted.
    let mut invalid = local[0].clone();
    invalid.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let out = sync_function(&[physical(), remote_x, remote_b], &[invalid], &sb);
    assert_eq!(created_xmin(&out, "b"), Some(Xid(760)));
    assert!(precedes(&out, "b"));
}

#[test]
fn the_plan_format_carries_the_in_memory_values() {
    let (local_a, remote_a) = decoded_a();
    let mut sb = standby(&[]);
    sb.effective_catalog_xmins.insert("z".into(), Xid(751));
    let back = Standby::from_json(&sb.to_json()).unwrap();
    assert_eq!(back, sb);
    let input = PlanInput {
        remote_slots: vec![physical(), remote_a],
        local_slots: vec![local_a],
        standby: sb,
    };
    let run = run_plan_text(&input.to_json().to_string());
    assert_eq!(run.exit_code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        v["effective_catalog_xmins"],
        serde_json::json!({"a": "759"})
    );
    let bad = r#"{"standby": {"snapshot_xmin": 5, "effective_catalog_xmins": ["a"]}}"#;
    assert_eq!(run_plan_text(bad).exit_code, 2);
}

/// The input of a real PostgreSQL 18 run: `fa` decodes (view catalog_xmin 771, in-memory
/// 773), `fb` copies (773), then the new `loc` starts at 773 — after its remote 772 — so
/// the server left it temporary and dropped it. Predicting 771 from the view had it copied
/// and persisted.
#[test]
fn server_run_new_slot_after_a_decoded_update() {
    let text = include_str!("data/new_slot_after_decoded_update.json");
    let input = PlanInput::from_json_str(text).unwrap();
    let out = input.plan();
    assert_eq!(out.error, None);
    assert_eq!(created_xmin(&out, "loc"), Some(Xid(773)));
    assert!(precedes(&out, "loc"));
    assert_eq!(names(&out.slots_after), ["fa", "fb"]);
    let fa = &out.slots_after[0];
    assert_eq!(fa.restart_lsn, Some(lsn("0/50001B0")));
    assert_eq!(fa.catalog_xmin, Some(Xid(771)));
    let fb = &out.slots_after[1];
    assert_eq!(fb.restart_lsn, Some(lsn("0/50008E0")));
    assert_eq!(fb.catalog_xmin, Some(Xid(773)));
    assert_eq!(
        out.effective_catalog_xmins,
        BTreeMap::from([("fa".to_owned(), Xid(773))])
    );
}
