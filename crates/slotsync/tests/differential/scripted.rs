//! The scripted steps of the differential test: each case the issue names, synced after
//! every step, then promotion and the walsender gate.

use super::*;

/// Slot creation, catch-up and persistence, synced after each step.
pub(super) fn scripted_catch_up(h: &mut Harness) {
    h.create_remote("fa", "test_decoding", false, true);
    h.create_remote("fb", "pgoutput", true, true);
    h.create_remote("nf", "test_decoding", false, false);
    h.wait_replay();
    h.sync("first call: remote behind the standby's redo");
    for round in 0..4 {
        h.p("insert into t values (1)");
        h.catch_up("fa");
        h.catch_up("fb");
        h.wait_replay();
        h.sync(&format!("catch-up round {round}"));
    }
    // Consumption and plain advancing.
    h.p("insert into t select generate_series(1, 10)");
    h.p("select count(*) from pg_logical_slot_get_changes('fa', null, null)");
    h.catch_up("fb");
    h.wait_replay();
    h.sync("after consumption");
}

/// User operations on synced slots, which the standby refuses.
pub(super) fn user_ops_on_synced(h: &mut Harness) {
    h.check_user_op(
        "select pg_logical_slot_get_changes('fa', null, null)",
        "fa",
        UserOp::Decode,
    );
    h.check_user_op(
        "select pg_replication_slot_advance('fa', pg_last_wal_replay_lsn())",
        "fa",
        UserOp::Decode,
    );
    h.check_user_op("select pg_drop_replication_slot('fa')", "fa", UserOp::Drop);
    h.check_user_op(
        "select pg_create_logical_replication_slot('sf', 'test_decoding', false, false, true)",
        "sf",
        UserOp::Create {
            temporary: false,
            failover: true,
        },
    );
    h.check_user_op(
        "select pg_create_logical_replication_slot('st', 'test_decoding', true, false, true)",
        "st",
        UserOp::Create {
            temporary: true,
            failover: true,
        },
    );
}

/// Failover turned off on the primary, then on again.
pub(super) fn failover_toggled(h: &mut Harness) {
    h.replication_cmd("ALTER_REPLICATION_SLOT fb (FAILOVER false)")
        .expect("alter failover off");
    h.wait_replay();
    h.sync("remote failover off");
    h.replication_cmd("ALTER_REPLICATION_SLOT fb (FAILOVER true)")
        .expect("alter failover on");
    h.catch_up("fb");
    h.wait_replay();
    h.sync("remote failover on again");
    h.p("insert into t values (2)");
    h.catch_up("fb");
    h.wait_replay();
    h.sync("fb catches up");
}

/// A non-synced slot of the same name on the standby.
pub(super) fn same_name_local_slot(h: &mut Harness) {
    let sock = h.standby().socket_conninfo();
    let creating = thread::spawn(move || {
        cluster::psql(
            &sock,
            "select pg_create_logical_replication_slot('dup', 'test_decoding')",
        )
    });
    while !creating.is_finished() {
        h.p("select pg_log_standby_snapshot()");
        thread::sleep(Duration::from_millis(100));
    }
    creating
        .join()
        .expect("thread")
        .expect("create slot on standby");
    h.create_remote("dup", "test_decoding", false, true);
    h.wait_replay();
    h.sync("same-name local slot");
    h.check_user_op(
        "select pg_drop_replication_slot('dup')",
        "dup",
        UserOp::Drop,
    );
    h.catch_up("dup");
    h.wait_replay();
    h.sync("after dropping the local same-name slot");
}

/// Standby lag: the remote confirmed_flush is ahead of the standby.
pub(super) fn standby_lag(h: &mut Harness) {
    h.set_lag(true);
    h.p("insert into t values (3)");
    h.catch_up("fa");
    h.sync("standby lagging behind fa");
    h.set_lag(false);
    h.wait_replay();
    h.sync("standby caught up again");
}

/// A remote drop.
pub(super) fn remote_drop(h: &mut Harness) {
    h.p("select pg_drop_replication_slot('dup')");
    h.wait_replay();
    h.sync("remote slot dropped");
}

/// Remote invalidation (primary max_slot_wal_keep_size), copied to the standby.
pub(super) fn remote_invalidation(h: &mut Harness) {
    h.create_remote("inv", "test_decoding", false, true);
    for _ in 0..3 {
        h.p("insert into t values (4)");
        h.catch_up("inv");
    }
    h.wait_replay();
    h.sync("inv created");
    h.sync("inv again");
    h.p("alter system set max_slot_wal_keep_size = '1MB'");
    h.p("select pg_reload_conf()");
    for _ in 0..4 {
        h.p("insert into t values (5)");
        h.p("select pg_switch_wal()");
    }
    // Everything but "inv" moves into the current segment before the checkpoint.
    for _ in 0..2 {
        h.p("insert into t values (5)");
        h.catch_up("fa");
        h.catch_up("fb");
    }
    h.p("checkpoint");
    h.p("alter system reset max_slot_wal_keep_size");
    h.p("select pg_reload_conf()");
    h.wait_replay();
    h.sync("remote invalidated");
    h.sync("remote invalidated, again");
    h.check_user_op(
        "select pg_logical_slot_get_changes('inv', null, null)",
        "inv",
        UserOp::Decode,
    );
    // Not synced on the primary, so decoding reaches the invalidation (17 and 18 word it
    // differently).
    h.check_user_op_on(
        true,
        "select pg_logical_slot_get_changes('inv', null, null)",
        "inv",
        UserOp::Decode,
    );
    h.p("select pg_drop_replication_slot('inv')");
    h.wait_replay();
    h.sync("invalidated remote dropped");
}

/// Local invalidation (standby max_slot_wal_keep_size), then drop and re-create.
pub(super) fn local_invalidation(h: &mut Harness) {
    h.create_remote("loc", "test_decoding", false, true);
    for _ in 0..3 {
        h.p("insert into t values (6)");
        h.catch_up("loc");
        h.catch_up("fa");
        h.catch_up("fb");
    }
    h.wait_replay();
    h.sync("loc created");
    h.s("alter system set max_slot_wal_keep_size = '1MB'");
    h.s("select pg_reload_conf()");
    for _ in 0..4 {
        h.p("insert into t values (7)");
        h.catch_up("fa");
        h.catch_up("fb");
        h.p("select pg_switch_wal()");
    }
    h.p("checkpoint");
    h.wait_replay();
    h.s("checkpoint");
    h.s("alter system reset max_slot_wal_keep_size");
    h.s("select pg_reload_conf()");
    h.wait_replay();
    h.sync("loc invalidated on the standby");
    h.sync("loc re-created");
}

/// Promotion: the predicted slot table against the server's.
pub(super) fn promotion(h: &mut Harness) {
    h.wait_replay();
    let before: Vec<SlotRow> = Harness::rows(h.standby())
        .iter()
        .map(|r| SlotRow::from_json(r).expect("row"))
        .collect();
    let (_, predicted) = promote(&before);
    h.primary
        .standby_mut("s1")
        .expect("standby")
        .promote()
        .expect("promote");
    let after = Harness::rows(h.standby());
    let predicted: Vec<Value> = predicted.iter().map(|r| r.to_json_as(h.version)).collect();
    if normalized(&predicted) != normalized(&after) {
        h.mismatches.push(format!(
            "promotion: predicted {}, server {}",
            Value::Array(predicted),
            Value::Array(after)
        ));
    }
    h.sync("function after promotion");
    if let Some(row) = before.iter().find(|r| {
        // pgoutput would refuse the call for its missing options instead.
        r.synced && r.invalidation_reason.is_none() && r.plugin.as_deref() == Some("test_decoding")
    }) {
        let name = row.slot_name.clone();
        h.check_user_op(
            &format!("select count(*) from pg_logical_slot_peek_changes('{name}', null, null)"),
            &name,
            UserOp::Decode,
        );
    }
}

/// The walsender gate against the primary's real slot table (caught_up/send_bound).
pub(super) fn walsender_gate(h: &Harness) {
    let list = StandbySlotList::parse("s1").expect("parse");
    let remote: Vec<SlotRow> = Harness::rows(&h.primary)
        .iter()
        .map(|r| SlotRow::from_json(r).expect("row"))
        .collect();
    let bound = list.send_bound(&remote, Lsn(u64::MAX), true, false, false);
    assert_eq!(
        bound.report.map(|r| r.problem),
        Some(pgyard_slotsync::standby_slots::StandbySlotProblem::NoActivePid),
        "s1's standby was promoted, so its slot has no walsender"
    );
}
