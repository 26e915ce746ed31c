//! Unit tests for the positions of an update: copied when the standby has a serialized
//! snapshot at the remote restart_lsn, otherwise what decoding the standby's WAL reaches.

use std::collections::BTreeSet;

use pgyard_slotsync::decoding::{
    advance, parse_running_xacts_description, record_is_read, snapshot_file_lsn, RunningXacts,
    SlotPositions, XactRecords,
};
use pgyard_slotsync::*;
use pgyard_types::{Lsn, Xid};

mod common;
use common::*;

fn rx(at: &str, oldest: u32, next: u32, xids: &[u32]) -> RunningXacts {
    RunningXacts {
        start_lsn: lsn(at),
        end_lsn: None,
        oldest_running_xid: Xid(oldest),
        next_xid: Xid(next),
        xids: xids.iter().copied().map(Xid).collect(),
        subxids: Vec::new(),
    }
}

fn xact(xid: u32, first: &str, change: &str, end: Option<&str>) -> XactRecords {
    XactRecords {
        xid: Xid(xid),
        record_lsns: vec![lsn(first)],
        change_lsns: vec![lsn(change)],
        end_lsn: end.map(lsn),
    }
}

fn pos(restart: &str, confirmed: &str, xmin: u32) -> SlotPositions {
    SlotPositions {
        restart_lsn: lsn(restart),
        confirmed_flush_lsn: lsn(confirmed),
        catalog_xmin: Xid(xmin),
    }
}

fn standby(snapshots: &[&str], running: Vec<RunningXacts>) -> Standby {
    Standby {
        serialized_snapshots: Some(snapshots.iter().map(|s| lsn(s)).collect()),
        running_xacts: running,
        ..base_standby()
    }
}

fn physical() -> SlotRow {
    physical_named("s1")
}

fn positions_of(out: &Outcome, slot: &str) -> Option<Positions> {
    out.actions.iter().find_map(|a| match a {
        Action::Update {
            slot: s, positions, ..
        } if s == slot => *positions,
        _ => None,
    })
}

#[test]
fn copied_when_a_snapshot_exists_at_the_remote_restart_lsn() {
    let sb = standby(&["0/2000000"], vec![]);
    let local = vec![synced("a", "0/1800000", "0/1800100", 750)];
    let out = sync_function(
        &[physical(), remote("a", "0/2000000", "0/2000100", 760)],
        &local,
        &sb,
    );
    assert_eq!(out.error, None);
    assert_eq!(positions_of(&out, "a"), Some(Positions::Copied));
    let a = &out.slots_after[0];
    assert_eq!(a.restart_lsn, Some(lsn("0/2000000")));
    assert_eq!(a.catalog_xmin, Some(Xid(760)));
}

#[test]
fn without_snapshot_nor_running_xacts_only_confirmed_flush_moves() {
    let sb = standby(&[], vec![]);
    let local = vec![synced("a", "0/1766A20", "0/1800100", 750)];
    let out = sync_function(
        &[physical(), remote("a", "0/4000000", "0/4000100", 760)],
        &local,
        &sb,
    );
    assert_eq!(out.error, None);
    assert_eq!(
        positions_of(&out, "a"),
        Some(Positions::Decoded {
            consistent: false,
            approximate: false
        })
    );
    let a = &out.slots_after[0];
    assert_eq!(a.restart_lsn, Some(lsn("0/1766A20")));
    assert_eq!(a.confirmed_flush_lsn, Some(lsn("0/4000100")));
    assert_eq!(a.catalog_xmin, Some(Xid(750)));
    assert!(!a.temporary, "a persistent slot stays persistent");
}

#[test]
fn new_slot_consistent_at_an_idle_running_xacts_keeps_its_initial_xmin_and_persists() {
    // Consistency is reached at the first record: no candidate comes from it.
    let sb = standby(&[], vec![rx("0/2000000", 758, 758, &[])]);
    let out = sync_function(
        &[physical(), remote("a", "0/2000000", "0/2000100", 758)],
        &[],
        &sb,
    );
    assert_eq!(out.error, None);
    assert!(out.actions.contains(&Action::Persist { slot: "a".into() }));
    let a = &out.slots_after[0];
    assert_eq!(a.catalog_xmin, Some(Xid(750)), "the initial xmin stays");
    assert_eq!(a.restart_lsn, Some(lsn("0/2000000")));
    assert_eq!(a.confirmed_flush_lsn, Some(lsn("0/2000100")));
}

#[test]
fn new_slot_without_a_consistent_point_is_not_persisted() {
    let sb = standby(&[], vec![rx("0/2000000", 758, 759, &[758])]);
    let out = sync_function(
        &[physical(), remote("a", "0/2000000", "0/2000100", 758)],
        &[],
        &sb,
    );
    assert_eq!(out.error, None);
    assert!(out.actions.iter().any(|a| matches!(
        a,
        Action::Skip {
            reason: SkipReason::NoConsistentSnapshot { .. },
            ..
        }
    )));
    assert!(
        out.slots_after.is_empty(),
        "dropped when the function returns"
    );
}

#[test]
fn restart_and_xmin_come_from_the_first_running_xacts_after_consistency() {
    let sb = standby(
        &[],
        vec![
            rx("0/1000100", 755, 755, &[]),
            rx("0/1000500", 757, 757, &[]),
            rx("0/1000900", 759, 759, &[]),
        ],
    );
    let local = vec![synced("a", "0/1000100", "0/1000200", 750)];
    let out = sync_function(
        &[physical(), remote("a", "0/1000900", "0/1000A00", 759)],
        &local,
        &sb,
    );
    assert_eq!(out.error, None);
    let a = &out.slots_after[0];
    // 0/1000500 is past the old confirmed_flush: it waits as the candidate, and the later
    // record cannot replace it.
    assert_eq!(a.restart_lsn, Some(lsn("0/1000500")));
    assert_eq!(a.catalog_xmin, Some(Xid(757)));
    assert_eq!(a.confirmed_flush_lsn, Some(lsn("0/1000A00")));
}

#[test]
fn candidates_before_the_old_confirmed_flush_apply_at_once() {
    let running = vec![
        rx("0/1000100", 755, 755, &[]),
        rx("0/1000500", 757, 757, &[]),
        rx("0/1000900", 759, 759, &[]),
    ];
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000600", 750),
        lsn("0/1000A00"),
        &running,
        &[],
        &mut snaps,
    );
    assert!(adv.consistent);
    assert_eq!(adv.positions, pos("0/1000900", "0/1000A00", 759));
    assert_eq!(adv.serialized, vec![lsn("0/1000500"), lsn("0/1000900")]);
    assert_eq!(snaps.len(), 2);
}

#[test]
fn a_snapshot_written_by_decoding_lets_a_later_slot_copy_in_the_same_call() {
    let sb = standby(
        &[],
        vec![
            rx("0/1000100", 755, 755, &[]),
            rx("0/1000500", 757, 757, &[]),
        ],
    );
    let local = vec![
        synced("a", "0/1000100", "0/1000200", 750),
        synced("b", "0/1000100", "0/1000200", 750),
    ];
    let out = sync_function(
        &[
            physical(),
            remote("a", "0/1000500", "0/1000600", 757),
            remote("b", "0/1000500", "0/1000600", 758),
        ],
        &local,
        &sb,
    );
    assert_eq!(out.error, None);
    assert!(matches!(
        positions_of(&out, "a"),
        Some(Positions::Decoded { .. })
    ));
    assert_eq!(positions_of(&out, "b"), Some(Positions::Copied));
    assert_eq!(out.slots_after[1].catalog_xmin, Some(Xid(758)));
}

#[test]
fn running_transactions_hold_back_xmin_and_restart() {
    // 800 runs at the first record (building), ends; consistency at an idle record; 802
    // runs across the third, with a base snapshot built from xmin 801.
    let running = vec![
        rx("0/1000100", 800, 801, &[800]),
        rx("0/1000300", 801, 801, &[]),
        rx("0/1000600", 802, 803, &[802]),
        rx("0/1000900", 803, 803, &[]),
    ];
    let xacts = vec![
        xact(800, "0/1000080", "0/1000080", Some("0/1000200")),
        xact(802, "0/1000400", "0/1000400", Some("0/1000800")),
    ];
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000500", 790),
        lsn("0/1000A00"),
        &running,
        &xacts,
        &mut snaps,
    );
    assert!(adv.consistent);
    // 0/1000600: xmin candidate 801 (802's base snapshot), no restart candidate (802 began
    // before any snapshot was serialized); 0/1000900: the xmin candidate is still pending,
    // the restart candidate is its own serialization point.
    assert_eq!(adv.positions, pos("0/1000900", "0/1000A00", 801));
    assert!(!adv.approximate);
}

#[test]
fn a_serialized_snapshot_at_a_busy_running_xacts_gives_consistency() {
    let running = vec![rx("0/1000100", 800, 801, &[800])];
    let mut snaps: BTreeSet<Lsn> = [lsn("0/1000100")].into_iter().collect();
    let adv = advance(
        pos("0/1000100", "0/1000100", 790),
        lsn("0/1000200"),
        &running,
        &[],
        &mut snaps,
    );
    assert!(adv.consistent);
    assert_eq!(adv.positions, pos("0/1000100", "0/1000200", 790));
    let mut none = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000100", 790),
        lsn("0/1000200"),
        &running,
        &[],
        &mut none,
    );
    assert!(!adv.consistent);
    // While building, the record still proposes its oldest running xid.
    assert_eq!(adv.positions.catalog_xmin, Xid(800));
}

#[test]
fn a_restored_snapshot_xmin_used_as_candidate_is_marked_approximate() {
    let running = vec![
        rx("0/1000100", 800, 801, &[800]),
        rx("0/1000300", 801, 802, &[801]),
    ];
    let xacts = vec![xact(801, "0/1000200", "0/1000200", None)];
    let mut snaps: BTreeSet<Lsn> = [lsn("0/1000100")].into_iter().collect();
    let adv = advance(
        pos("0/1000100", "0/1000100", 790),
        lsn("0/1000400"),
        &running,
        &xacts,
        &mut snaps,
    );
    assert!(adv.approximate);
}

#[test]
fn decoding_past_the_remote_confirmed_flush_is_the_servers_internal_error() {
    let sb = standby(&[], vec![]);
    let mut local = synced("a", "0/1000100", "0/1000900", 750);
    local.temporary = true;
    let out = sync_function(
        &[physical(), remote("a", "0/1000200", "0/1000800", 750)],
        &[local],
        &sb,
    );
    let err = out.error.expect("error");
    assert_eq!(
        err.to_string(),
        "synchronized confirmed_flush for slot \"a\" differs from remote slot"
    );
    assert_eq!(
        err.detail().as_deref(),
        Some("Remote slot has LSN 0/1000800 but local slot has LSN 0/1000900.")
    );
    assert_eq!(err.sqlstate(), "XX000");
}

#[test]
fn without_the_snapshot_list_updates_are_copies_as_before() {
    let sb = Standby {
        serialized_snapshots: None,
        ..standby(&[], vec![])
    };
    let local = vec![synced("a", "0/1800000", "0/1800100", 750)];
    let out = sync_function(
        &[physical(), remote("a", "0/2000000", "0/2000100", 760)],
        &local,
        &sb,
    );
    assert_eq!(positions_of(&out, "a"), Some(Positions::Copied));
    assert_eq!(out.slots_after[0].restart_lsn, Some(lsn("0/2000000")));
}

#[test]
fn records_read_stop_at_moveto_except_right_after_a_page_header() {
    assert!(record_is_read(lsn("0/1000100"), lsn("0/1000101")));
    assert!(!record_is_read(lsn("0/1000100"), lsn("0/1000100")));
    assert!(record_is_read(lsn("0/1002018"), lsn("0/1002018")));
    assert!(record_is_read(lsn("0/2000028"), lsn("0/2000028")));
    assert!(!record_is_read(lsn("0/1002018"), lsn("0/1002000")));
}

#[test]
fn walinspect_texts_and_snapshot_file_names() {
    assert_eq!(snapshot_file_lsn("0-1766A20.snap"), Some(lsn("0/1766A20")));
    assert_eq!(snapshot_file_lsn("1-0.snap"), Some(lsn("1/0")));
    assert_eq!(snapshot_file_lsn("0-1766A20.snap.123.tmp"), None);
    assert_eq!(
        parse_running_xacts_description("nextXid 770 latestCompletedXid 769 oldestRunningXid 770"),
        Some((Xid(770), Xid(770), vec![], vec![]))
    );
    assert_eq!(
        parse_running_xacts_description(
            "nextXid 772 latestCompletedXid 769 oldestRunningXid 770; 2 xacts: 770 771; 1 subxacts: 773"
        ),
        Some((Xid(772), Xid(770), vec![Xid(770), Xid(771)], vec![Xid(773)]))
    );
    assert_eq!(parse_running_xacts_description("garbage"), None);
}

#[test]
fn the_plan_format_reads_and_writes_the_new_standby_fields() {
    let sb = Standby {
        xacts: vec![xact(802, "0/1000400", "0/1000400", None)],
        ..standby(&["0/1766A20"], vec![rx("0/1000600", 802, 803, &[802])])
    };
    let back = Standby::from_json(&sb.to_json()).unwrap();
    assert_eq!(back, sb);
    let input = PlanInput {
        remote_slots: vec![physical(), remote("a", "0/1766A20", "0/1766B00", 760)],
        local_slots: vec![synced("a", "0/1000000", "0/1000100", 750)],
        standby: sb,
    };
    let run = run_plan_text(&input.to_json().to_string());
    assert_eq!(run.exit_code, 0, "{}", run.stderr);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(v["actions"][0]["positions"], "copied");
}
