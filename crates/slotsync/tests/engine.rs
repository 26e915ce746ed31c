//! Unit tests: one rule per test, exact actions and errors.

use pgyard_slotsync::engine::{check_user_op, promote, sync_cycle, UserOp};
use pgyard_slotsync::input::{parse_guc_bool, parse_size};
use pgyard_slotsync::*;
use pgyard_types::Xid;

mod common;
use common::*;

fn standby() -> Standby {
    Standby {
        primary_conninfo: "host=127.0.0.1 port=5432 user=postgres dbname=postgres".into(),
        ..base_standby()
    }
}

fn physical(name: &str) -> SlotRow {
    let mut r = physical_named(name);
    r.active_pid = Some(42);
    r.active = true;
    r
}

fn synced(name: &str, restart: &str, confirmed: &str, xmin: u32) -> SlotRow {
    let mut r = remote(name, restart, confirmed, xmin);
    r.synced = true;
    r
}

fn names(rows: &[SlotRow]) -> Vec<&str> {
    rows.iter().map(|r| r.slot_name.as_str()).collect()
}

#[test]
fn new_slot_is_created_persisted_and_copied() {
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000100", 760)];
    let out = sync_function(&remote_rows, &[], &standby());
    assert_eq!(out.error, None);
    assert!(
        matches!(&out.actions[0], Action::Create { slot, restart_lsn, catalog_xmin }
        if slot == "a" && *restart_lsn == lsn("0/2000000") && *catalog_xmin == Xid(750))
    );
    assert!(matches!(&out.actions[1], Action::Update { .. }));
    assert_eq!(out.actions[2], Action::Persist { slot: "a".into() });
    let a = &out.slots_after[0];
    assert!(a.synced && !a.temporary && a.failover);
    assert_eq!(a.restart_lsn, Some(lsn("0/2000000")));
    assert_eq!(a.confirmed_flush_lsn, Some(lsn("0/2000100")));
    assert_eq!(a.catalog_xmin, Some(Xid(760)));
    assert!(out.updated);
}

#[test]
fn reservation_is_the_later_of_remote_and_redo_and_remote_precedes() {
    let mut sb = standby();
    sb.redo_lsn = Some(lsn("0/3000000"));
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/3000100", 760)];
    let out = sync_function(&remote_rows, &[], &sb);
    assert!(
        matches!(&out.actions[0], Action::Create { restart_lsn, .. } if *restart_lsn == lsn("0/3000000"))
    );
    let Action::Skip { reason, .. } = &out.actions[1] else {
        panic!("{:?}", out.actions)
    };
    let (msg, detail) = reason.log("a").unwrap();
    assert_eq!(msg, "could not synchronize replication slot \"a\"");
    assert_eq!(detail.unwrap(), "Synchronization could lead to data loss, because the remote slot needs WAL at LSN 0/2000000 and catalog xmin 760, but the standby has LSN 0/3000000 and catalog xmin 750.");
    // The function drops the temporary slot when it returns.
    assert_eq!(
        out.actions.last().unwrap(),
        &Action::Drop {
            slot: "a".into(),
            datoid: None,
            reason: DropReason::NotSyncReady
        }
    );
    assert!(out.slots_after.is_empty());
}

#[test]
fn reservation_uses_an_older_local_slot_and_catalog_xmin_an_older_slot_xmin() {
    let mut sb = standby();
    sb.redo_lsn = Some(lsn("0/3000000"));
    let local = vec![synced("old", "0/1800000", "0/1800100", 700)];
    let remote_rows = vec![
        physical("s1"),
        remote("old", "0/1800000", "0/1800100", 700),
        remote("b", "0/1900000", "0/3000100", 760),
    ];
    let out = sync_function(&remote_rows, &local, &sb);
    assert!(out.actions.iter().any(
        |a| matches!(a, Action::Create { slot, restart_lsn, catalog_xmin }
        if slot == "b" && *restart_lsn == lsn("0/1900000") && *catalog_xmin == Xid(700))
    ));
    assert_eq!(names(&out.slots_after), ["old", "b"]);
}

#[test]
fn catalog_xmin_goal_post_keeps_slot_temporary() {
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000100", 749)];
    let out = sync_function(&remote_rows, &[], &standby());
    assert!(out.actions.iter().any(|a| matches!(
        a,
        Action::Skip {
            reason: SkipReason::RemotePrecedes {
                temporary: true,
                ..
            },
            ..
        }
    )));
    assert!(out.slots_after.is_empty());
}

#[test]
fn worker_keeps_temporary_slots() {
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000100", 749)];
    let out = sync_cycle(&remote_rows, &[], &standby(), Caller::Worker);
    assert_eq!(out.slots_after.len(), 1);
    assert!(out.slots_after[0].temporary && out.slots_after[0].synced);
    // Next cycle: the remote caught up, the slot is persisted.
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000200", 751)];
    let out2 = sync_cycle(&remote_rows, &out.slots_after, &standby(), Caller::Worker);
    assert!(out2.actions.contains(&Action::Persist { slot: "a".into() }));
    assert!(!out2.slots_after[0].temporary);
}

#[test]
fn non_failover_temporary_and_physical_remote_slots_are_not_synced() {
    let mut nf = remote("nf", "0/2000000", "0/2000100", 760);
    nf.failover = false;
    let mut tmp = remote("tmp", "0/2000000", "0/2000100", 760);
    tmp.temporary = true;
    let out = sync_function(&[physical("s1"), nf, tmp], &[], &standby());
    assert!(out.actions.is_empty(), "{:?}", out.actions);
    assert!(out.slots_after.is_empty());
}

#[test]
fn obsolete_synced_slots_are_dropped_with_reasons() {
    let local = vec![
        synced("gone", "0/2000000", "0/2000100", 760),
        synced("nofail", "0/2000000", "0/2000100", 760),
        synced("keep", "0/2000000", "0/2000100", 760),
    ];
    let mut nofail = remote("nofail", "0/2000000", "0/2000100", 760);
    nofail.failover = false;
    let remote_rows = vec![
        physical("s1"),
        nofail,
        remote("keep", "0/2000000", "0/2000100", 760),
    ];
    let out = sync_function(&remote_rows, &local, &standby());
    assert_eq!(
        out.actions[0],
        Action::Drop {
            slot: "gone".into(),
            datoid: Some(5),
            reason: DropReason::RemoteGone
        }
    );
    assert_eq!(
        out.actions[1],
        Action::Drop {
            slot: "nofail".into(),
            datoid: Some(5),
            reason: DropReason::RemoteNotFailover
        }
    );
    assert_eq!(
        out.actions.len(),
        2,
        "unchanged slot needs no action: {:?}",
        out.actions
    );
    assert_eq!(names(&out.slots_after), ["keep"]);
    assert!(!out.updated, "drops alone do not count as updates");
}

#[test]
fn remote_being_created_is_ignored_and_its_local_copy_dropped() {
    let mut eph = remote("e", "0/2000000", "0/2000100", 760);
    eph.confirmed_flush_lsn = None;
    let local = vec![synced("e", "0/2000000", "0/2000100", 760)];
    let out = sync_function(&[physical("s1"), eph], &local, &standby());
    assert_eq!(
        out.actions[0],
        Action::Skip {
            slot: "e".into(),
            reason: SkipReason::RemoteBeingCreated
        }
    );
    assert_eq!(
        out.actions[1],
        Action::Drop {
            slot: "e".into(),
            datoid: Some(5),
            reason: DropReason::RemoteBeingCreated
        }
    );
}

#[test]
fn remote_invalidation_is_copied_then_skipped() {
    let mut r = remote("a", "0/2000000", "0/2000100", 760);
    r.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let local = vec![synced("a", "0/2000000", "0/2000100", 760)];
    let out = sync_function(&[physical("s1"), r.clone()], &local, &standby());
    assert_eq!(
        out.actions,
        vec![Action::Invalidate {
            slot: "a".into(),
            cause: InvalidationCause::WalRemoved
        }]
    );
    let a = &out.slots_after[0];
    assert_eq!(a.invalidation_reason, Some(InvalidationCause::WalRemoved));
    assert_eq!(a.wal_status.as_deref(), Some("lost"));
    assert_eq!(a.restart_lsn, Some(lsn("0/2000000")), "LSNs are kept");
    let out2 = sync_function(&[physical("s1"), r.clone()], &out.slots_after, &standby());
    assert_eq!(
        out2.actions,
        vec![Action::Skip {
            slot: "a".into(),
            reason: SkipReason::Invalidated(InvalidationCause::WalRemoved)
        }]
    );
    // Absent locally: never created from an invalidated remote.
    let out3 = sync_function(&[physical("s1"), r], &[], &standby());
    assert_eq!(
        out3.actions,
        vec![Action::Skip {
            slot: "a".into(),
            reason: SkipReason::RemoteInvalidated
        }]
    );
}

#[test]
fn local_invalidation_with_valid_remote_drops_and_recreation_follows_next_call() {
    let mut l = synced("a", "0/2000000", "0/2000100", 760);
    l.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000100", 760)];
    let out = sync_function(&remote_rows, &[l], &standby());
    assert_eq!(
        out.actions[0],
        Action::Drop {
            slot: "a".into(),
            datoid: Some(5),
            reason: DropReason::LocallyInvalidated
        }
    );
    // Same cycle creates it again (the drop happens first).
    assert!(matches!(&out.actions[1], Action::Create { .. }));
    assert_eq!(out.slots_after[0].invalidation_reason, None);
}

#[test]
fn same_name_non_synced_slot_is_an_error() {
    let mut mine = SlotRow::logical("a");
    mine.restart_lsn = Some(lsn("0/2000000"));
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000100", 760)];
    let out = sync_function(&remote_rows, &[mine.clone()], &standby());
    let e = out.error.unwrap();
    assert_eq!(e.to_string(), "exiting from slot synchronization because same name slot \"a\" already exists on the standby");
    assert_eq!(out.slots_after, vec![mine]);
}

#[test]
fn ahead_of_standby_is_an_error_for_the_function_and_a_skip_for_the_worker() {
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/6000000", 760)];
    let out = sync_function(&remote_rows, &[], &standby());
    assert_eq!(out.error.unwrap().to_string(), "skipping slot synchronization because the received slot sync LSN 0/6000000 for slot \"a\" is ahead of the standby position 0/5000000");
    let w = sync_cycle(&remote_rows, &[], &standby(), Caller::Worker);
    assert_eq!(w.error, None);
    assert!(matches!(
        &w.actions[0],
        Action::Skip {
            reason: SkipReason::AheadOfStandby { .. },
            ..
        }
    ));
}

#[test]
fn ahead_check_comes_before_the_same_name_check() {
    let mine = SlotRow::logical("a");
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/6000000", 760)];
    let out = sync_function(&remote_rows, &[mine], &standby());
    assert!(matches!(out.error, Some(SyncError::AheadOfStandby { .. })));
}

#[test]
fn error_keeps_earlier_progress_and_drops_temporaries() {
    let remote_rows = vec![
        physical("s1"),
        remote("a", "0/2000000", "0/2000100", 760),
        remote("b", "0/2000000", "0/2000100", 700),
        remote("c", "0/2000000", "0/6000000", 760),
    ];
    let out = sync_function(&remote_rows, &[], &standby());
    assert!(matches!(out.error, Some(SyncError::AheadOfStandby { .. })));
    assert_eq!(
        names(&out.slots_after),
        ["a"],
        "b stayed temporary and was cleaned up"
    );
}

#[test]
fn persistent_slot_with_local_position_ahead_is_skipped_quietly() {
    let local = vec![synced("a", "0/2000200", "0/2000300", 765)];
    let remote_rows = vec![physical("s1"), remote("a", "0/2000100", "0/2000400", 765)];
    let out = sync_function(&remote_rows, &local, &standby());
    assert!(matches!(
        &out.actions[0],
        Action::Skip {
            reason: SkipReason::RemotePrecedes {
                temporary: false,
                ..
            },
            ..
        }
    ));
    assert_eq!(
        out.slots_after, local,
        "nothing copied, not even confirmed_flush"
    );
}

#[test]
fn persistent_slot_with_local_confirmed_ahead_is_an_internal_error() {
    let local = vec![synced("a", "0/2000000", "0/2000300", 765)];
    let remote_rows = vec![physical("s1"), remote("a", "0/2000000", "0/2000200", 765)];
    let e = sync_function(&remote_rows, &local, &standby())
        .error
        .unwrap();
    assert_eq!(e.to_string(), "cannot synchronize local slot \"a\"");
    assert_eq!(e.detail().unwrap(), "Local slot's start streaming location LSN(0/2000300) is ahead of remote slot's LSN(0/2000200).");
}

#[test]
fn two_phase_and_plugin_changes_are_copied() {
    let local = vec![synced("a", "0/2000000", "0/2000100", 760)];
    let mut r = remote("a", "0/2000000", "0/2000100", 760);
    r.two_phase = true;
    r.two_phase_at = Some(lsn("0/2000100"));
    r.plugin = Some("pgoutput".into());
    let out = sync_function(&[physical("s1"), r], &local, &standby());
    let a = &out.slots_after[0];
    assert!(a.two_phase);
    assert_eq!(a.two_phase_at, Some(lsn("0/2000100")));
    assert_eq!(a.plugin.as_deref(), Some("pgoutput"));
    assert!(out.updated);
}

#[test]
fn prerequisites_in_server_order() {
    let mut sb = standby();
    sb.in_recovery = false;
    sb.hot_standby_feedback = false;
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err().to_string(),
        "replication slots can only be synchronized to a standby server"
    );
    let mut sb = standby();
    sb.wal_level = WalLevel::Replica;
    sb.primary_slot_name.clear();
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err(),
        SyncError::WalLevelTooLow
    );
    let mut sb = standby();
    sb.primary_slot_name.clear();
    sb.hot_standby_feedback = false;
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err().to_string(),
        "replication slot synchronization requires \"primary_slot_name\" to be set"
    );
    let mut sb = standby();
    sb.hot_standby_feedback = false;
    sb.primary_conninfo.clear();
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err().to_string(),
        "replication slot synchronization requires \"hot_standby_feedback\" to be enabled"
    );
    let mut sb = standby();
    sb.primary_conninfo.clear();
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err().to_string(),
        "replication slot synchronization requires \"primary_conninfo\" to be set"
    );
    for conninfo in [
        "host=x port=5432",
        "host=x dbname=''",
        "postgresql://host:5432",
    ] {
        let mut sb = standby();
        sb.primary_conninfo = conninfo.into();
        assert_eq!(check_function_prerequisites(&sb).unwrap_err().to_string(), "replication slot synchronization requires \"dbname\" to be specified in \"primary_conninfo\"", "{conninfo}");
    }
    let mut sb = standby();
    sb.primary_conninfo = "postgresql://host:5432/mydb".into();
    assert_eq!(check_function_prerequisites(&sb).unwrap(), "mydb");
    let mut sb = standby();
    sb.primary_conninfo = "host=x dbname".into();
    assert!(matches!(
        check_function_prerequisites(&sb).unwrap_err(),
        SyncError::ConninfoSyntax(_)
    ));
    let mut sb = standby();
    sb.sync_replication_slots = true;
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err().to_string(),
        "cannot synchronize replication slots concurrently"
    );
    let mut sb = standby();
    sb.promotion_triggered = true;
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err().to_string(),
        "replication slot synchronization will not start because promotion was triggered"
    );
}

#[test]
fn remote_checks() {
    let sb = standby();
    let out = sync_function(&[remote("a", "0/2000000", "0/2000100", 760)], &[], &sb);
    assert_eq!(out.error.unwrap().to_string(), "replication slot \"s1\" specified by \"primary_slot_name\" does not exist on primary server");
    let mut sb = standby();
    sb.primary_in_recovery = true;
    let out = sync_function(&[physical("s1")], &[], &sb);
    assert_eq!(
        out.error.unwrap().to_string(),
        "cannot synchronize replication slots from a standby server"
    );
}

#[test]
fn all_slots_in_use() {
    let mut sb = standby();
    sb.max_replication_slots = Some(1);
    let local = vec![SlotRow::physical("casc")];
    let out = sync_function(
        &[physical("s1"), remote("a", "0/2000000", "0/2000100", 760)],
        &local,
        &sb,
    );
    assert_eq!(out.error, Some(SyncError::AllSlotsInUse));
}

#[test]
fn promotion_drops_temporaries_and_keeps_synced() {
    let mut t = synced("t", "0/2000000", "0/2000100", 760);
    t.temporary = true;
    let p = synced("p", "0/2000000", "0/2000100", 760);
    let (actions, after) = promote(&[t, p]);
    assert_eq!(
        actions,
        vec![Action::Drop {
            slot: "t".into(),
            datoid: None,
            reason: DropReason::NotSyncReady
        }]
    );
    assert_eq!(names(&after), ["p"]);
    assert!(after[0].synced);
    // After promotion the slot is usable and the function refuses to run.
    assert_eq!(
        check_user_op(Version::V18, &after, false, "p", &UserOp::Decode),
        Ok(())
    );
    let mut sb = standby();
    sb.in_recovery = false;
    assert_eq!(
        check_function_prerequisites(&sb).unwrap_err(),
        SyncError::NotInRecovery
    );
}

#[test]
fn user_ops_on_synced_slots_in_recovery() {
    let t = vec![
        synced("a", "0/2000000", "0/2000100", 760),
        SlotRow::logical("mine"),
    ];
    let e = check_user_op(Version::V18, &t, true, "a", &UserOp::Decode).unwrap_err();
    assert_eq!(
        e.to_string(),
        "cannot use replication slot \"a\" for logical decoding"
    );
    assert_eq!(
        e.detail().unwrap(),
        "This replication slot is being synchronized from the primary server."
    );
    assert_eq!(e.hint(), Some("Specify another replication slot."));
    assert_eq!(
        check_user_op(Version::V18, &t, true, "a", &UserOp::Drop)
            .unwrap_err()
            .to_string(),
        "cannot drop replication slot \"a\""
    );
    assert_eq!(
        check_user_op(
            Version::V18,
            &t,
            true,
            "a",
            &UserOp::Alter {
                failover: Some(false)
            }
        )
        .unwrap_err()
        .to_string(),
        "cannot alter replication slot \"a\""
    );
    assert_eq!(
        check_user_op(Version::V18, &t, true, "mine", &UserOp::Drop),
        Ok(())
    );
    assert_eq!(
        check_user_op(
            Version::V18,
            &t,
            true,
            "mine",
            &UserOp::Alter {
                failover: Some(true)
            }
        )
        .unwrap_err()
        .to_string(),
        "cannot enable failover for a replication slot on the standby"
    );
    assert_eq!(
        check_user_op(
            Version::V18,
            &t,
            true,
            "x",
            &UserOp::Create {
                temporary: false,
                failover: true
            }
        )
        .unwrap_err()
        .to_string(),
        "cannot enable failover for a replication slot created on the standby"
    );
    assert_eq!(
        check_user_op(
            Version::V18,
            &t,
            false,
            "x",
            &UserOp::Create {
                temporary: true,
                failover: true
            }
        )
        .unwrap_err()
        .to_string(),
        "cannot enable failover for a temporary replication slot"
    );
    assert_eq!(
        check_user_op(Version::V18, &t, true, "nope", &UserOp::Decode)
            .unwrap_err()
            .to_string(),
        "replication slot \"nope\" does not exist"
    );
}

#[test]
fn guc_values() {
    assert_eq!(parse_guc_bool("on"), Some(true));
    assert_eq!(parse_guc_bool("OFF"), Some(false));
    assert_eq!(parse_guc_bool("ye"), Some(true));
    assert_eq!(parse_guc_bool("maybe"), None);
    assert_eq!(parse_size("16MB"), Some(16 << 20));
    assert_eq!(parse_size("1GB"), Some(1 << 30));
    assert_eq!(parse_size("16 parsecs"), None);
}

#[test]
fn xid_order_wraps() {
    use pgyard_slotsync::row::{xid_follows, xid_precedes};
    assert!(xid_precedes(Xid(u32::MAX - 5), Xid(10)));
    assert!(xid_follows(Xid(10), Xid(u32::MAX - 5)));
    assert!(xid_precedes(Xid(0), Xid(5)));
}
