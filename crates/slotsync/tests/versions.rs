//! Where PostgreSQL 17 decides or words things differently from 18 (docs/slotsync.md,
//! "PostgreSQL 17"): the engine follows the standby's `server_version_num`.

mod common;

use pgyard_slotsync::engine::{check_user_op, sync_cycle, UserOp};
use pgyard_slotsync::*;
use pgyard_types::Xid;

use common::*;

fn standby(version: Version) -> Standby {
    Standby {
        version,
        ..base_standby()
    }
}

/// A persistent synced slot whose own restart_lsn is past the primary's (decoding found a
/// later restart point), while the primary's slot changed plugin and two_phase.
fn preceded_with_new_settings() -> (Vec<SlotRow>, Vec<SlotRow>) {
    let mut r = remote("a", "0/2000000", "0/2000100", 760);
    r.plugin = Some("pgoutput".into());
    r.two_phase = true;
    let local = synced("a", "0/2000080", "0/2000100", 760);
    (vec![physical_named("s1"), r], vec![local])
}

#[test]
fn a_preceded_remote_changes_nothing_on_18() {
    let (remote, local) = preceded_with_new_settings();
    let out = sync_cycle(&remote, &local, &standby(Version::V18), Caller::Worker);
    assert_eq!(out.error, None);
    assert!(matches!(
        &out.actions[..],
        [Action::Skip {
            reason: SkipReason::RemotePrecedes { .. },
            ..
        }]
    ));
    assert_eq!(out.slots_after, local);
    assert!(!out.updated);
}

#[test]
fn a_preceded_remote_still_copies_settings_on_17() {
    let (remote, local) = preceded_with_new_settings();
    let out = sync_cycle(&remote, &local, &standby(Version::V17), Caller::Worker);
    assert_eq!(out.error, None);
    let [Action::Skip {
        reason: SkipReason::RemotePrecedes { .. },
        ..
    }, Action::Update {
        slot,
        set,
        positions: None,
    }] = &out.actions[..]
    else {
        panic!(
            "expected a skip, then a settings-only update: {:?}",
            out.actions
        );
    };
    assert_eq!(slot, "a");
    let cols: Vec<&str> = set.iter().map(|c| c.column()).collect();
    assert_eq!(cols, ["plugin", "two_phase"]);
    let after = &out.slots_after[0];
    assert_eq!(after.plugin.as_deref(), Some("pgoutput"));
    assert!(after.two_phase);
    // The positions stay the standby's own.
    assert_eq!(after.restart_lsn, local[0].restart_lsn);
    assert_eq!(after.catalog_xmin, Some(Xid(760)));
    assert!(out.updated);
}

#[test]
fn seventeen_never_syncs_two_phase_at() {
    let mut r = remote("a", "0/2000000", "0/2000200", 760);
    r.two_phase = true;
    r.two_phase_at = Some(lsn("0/2000150"));
    let mut local = synced("a", "0/2000000", "0/2000100", 760);
    local.two_phase = true;
    let rows = vec![physical_named("s1"), r];
    let v18 = sync_cycle(
        &rows,
        &[local.clone()],
        &standby(Version::V18),
        Caller::Worker,
    );
    assert_eq!(v18.slots_after[0].two_phase_at, Some(lsn("0/2000150")));
    let v17 = sync_cycle(&rows, &[local], &standby(Version::V17), Caller::Worker);
    assert_eq!(v17.slots_after[0].two_phase_at, None);
    assert_eq!(
        v17.slots_after[0].confirmed_flush_lsn,
        Some(lsn("0/2000200"))
    );
    // And the 17 view has no such column.
    let row = v17.slots_after[0].to_json_as(Version::V17);
    assert!(row.get("two_phase_at").is_none());
    assert!(v18.slots_after[0].to_json().get("two_phase_at").is_some());
}

#[test]
fn an_invalidated_synced_slot_is_refused_in_each_versions_words() {
    let mut s = synced("a", "0/2000000", "0/2000100", 760);
    s.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let rows = vec![s];
    let e18 = check_user_op(Version::V18, &rows, true, "a", &UserOp::Decode).unwrap_err();
    assert_eq!(
        e18.to_string(),
        "can no longer access replication slot \"a\""
    );
    let e17 = check_user_op(Version::V17, &rows, true, "a", &UserOp::Decode).unwrap_err();
    assert_eq!(
        e17.to_string(),
        "cannot use replication slot \"a\" for logical decoding"
    );
    // Once promoted (not in recovery) 17 reaches the invalidation, in its own words.
    let e17 = check_user_op(Version::V17, &rows, false, "a", &UserOp::Decode).unwrap_err();
    assert_eq!(
        e17.to_string(),
        "can no longer get changes from replication slot \"a\""
    );
    assert_eq!(
        e17.detail().as_deref(),
        Some("This slot has been invalidated because it exceeded the maximum reserved size.")
    );
    let mut c = rows[0].clone();
    c.invalidation_reason = Some(InvalidationCause::RowsRemoved);
    let e = check_user_op(Version::V17, &[c], false, "a", &UserOp::Decode).unwrap_err();
    assert_eq!(
        e.detail().as_deref(),
        Some("This slot has been invalidated because it was conflicting with recovery.")
    );
}

#[test]
fn the_version_comes_from_server_version_num() {
    assert_eq!(Version::from_server_version_num("170010"), Ok(Version::V17));
    assert_eq!(Version::from_server_version_num("180004"), Ok(Version::V18));
    let e = Version::from_server_version_num("160004").unwrap_err();
    assert!(
        e.to_string().contains("PostgreSQL 16 is not modelled"),
        "{e}"
    );
    assert!(Version::from_server_version_num("x").is_err());
    let mut input = PlanInput {
        remote_slots: vec![],
        local_slots: vec![],
        standby: standby(Version::V17),
    };
    let json = input.to_json();
    assert_eq!(json["standby"]["server_version_num"], "170000");
    assert_eq!(PlanInput::from_json(&json).unwrap(), input);
    // Absent: decided as 18.
    input.standby.version = Version::V18;
    let json = input.to_json();
    assert!(json["standby"].get("server_version_num").is_none());
    assert_eq!(
        PlanInput::from_json(&json).unwrap().standby.version,
        Version::V18
    );
}
