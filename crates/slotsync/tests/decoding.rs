//! Unit tests for the positions of an update: copied when the standby has a serialized
//! snapshot at the remote restart_lsn, otherwise what decoding the standby's WAL reaches.

use std::collections::BTreeSet;

use pgyard_slotsync::decoding::{
    self, advance, parse_running_xacts_description, record_is_read, snapshot_file_lsn,
    RunningXacts, SlotPositions, XactRecords,
};
use pgyard_slotsync::*;
use pgyard_types::{Lsn, Xid};

mod common;
use common::*;

/// PostgreSQL's default WAL segment size.
const SEG: u64 = 16 << 20;

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
        ..XactRecords::default()
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
        SEG,
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
        SEG,
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
        SEG,
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
        SEG,
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
        SEG,
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
    let read = |start: &str, moveto: &str| record_is_read(lsn(start), lsn(moveto), SEG);
    assert!(read("0/1000100", "0/1000101"));
    assert!(!read("0/1000100", "0/1000100"));
    assert!(read("0/1002018", "0/1002018"));
    // A segment's first page has the long header.
    assert!(read("0/2000028", "0/2000028"));
    assert!(!read("0/2000018", "0/2000018"));
    assert!(!read("0/1002018", "0/1002000"));
    // At the long header's offset on any other page, the record follows 16 bytes of its
    // predecessor's continuation, which ends at `moveto`: not read (session 37's failure,
    // a RUNNING_XACTS at 0/90A6028 with moveto 0/90A6028).
    assert!(!read("0/90A6028", "0/90A6028"));
    assert!(!read("0/1002028", "0/1002028"));
    // With 1 MiB segments, 0/1100000 starts one.
    assert!(record_is_read(lsn("0/1100028"), lsn("0/1100028"), 1 << 20));
    assert!(!record_is_read(lsn("0/1100018"), lsn("0/1100018"), 1 << 20));
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

fn records(xid: u32, recs: &[&str], changes: &[&str]) -> XactRecords {
    XactRecords {
        xid: Xid(xid),
        record_lsns: recs.iter().map(|s| lsn(s)).collect(),
        change_lsns: changes.iter().map(|s| lsn(s)).collect(),
        ..XactRecords::default()
    }
}

/// 800 builds the shared snapshot (xmin 800), 801 takes it as its base; at 0/1000300 the
/// builder's xmin is 801 while 801's base holds the candidate at 800. 802 commits catalog
/// changes; 803's base is then built from the builder's xmin 801, not the old shared one.
fn catalog_scenario(with_invalidation: bool) -> decoding::Advance {
    let running = vec![
        rx("0/1000100", 800, 800, &[]),
        rx("0/1000300", 801, 803, &[801, 802]),
        rx("0/1000600", 803, 804, &[803]),
    ];
    let mut x800 = records(800, &["0/1000150"], &["0/1000150"]);
    x800.end_lsn = Some(lsn("0/1000250"));
    let mut x801 = records(801, &["0/1000200"], &["0/1000200"]);
    x801.end_lsn = Some(lsn("0/1000550"));
    let mut x802 = records(802, &["0/1000350"], &[]);
    if with_invalidation {
        x802.invalidation_lsns = vec![lsn("0/1000380")];
    }
    x802.end_lsn = Some(lsn("0/1000400"));
    let x803 = records(803, &["0/1000500"], &["0/1000500"]);
    let mut snaps = BTreeSet::new();
    advance(
        pos("0/1000100", "0/1000700", 790),
        lsn("0/1000800"),
        SEG,
        &running,
        &[x800, x801, x802, x803],
        &mut snaps,
    )
}

#[test]
fn a_catalog_changing_commit_rebuilds_the_snapshot_later_base_snapshots_use() {
    let with = catalog_scenario(true);
    assert!(with.consistent && !with.approximate);
    assert_eq!(with.positions, pos("0/1000300", "0/1000800", 801));
    // Without the INVALIDATION record the old shared snapshot (xmin 800) is 803's base.
    let without = catalog_scenario(false);
    assert_eq!(without.positions, pos("0/1000300", "0/1000800", 800));
}

#[test]
fn an_aborted_catalog_change_does_not_rebuild_the_snapshot() {
    let running = vec![
        rx("0/1000100", 800, 800, &[]),
        rx("0/1000300", 801, 803, &[801, 802]),
        rx("0/1000600", 803, 804, &[803]),
    ];
    let mut x800 = records(800, &["0/1000150"], &["0/1000150"]);
    x800.end_lsn = Some(lsn("0/1000250"));
    let mut x801 = records(801, &["0/1000200"], &["0/1000200"]);
    x801.end_lsn = Some(lsn("0/1000550"));
    let mut x802 = records(802, &["0/1000350"], &[]);
    x802.invalidation_lsns = vec![lsn("0/1000380")];
    x802.end_lsn = Some(lsn("0/1000400"));
    x802.aborted = true;
    let x803 = records(803, &["0/1000500"], &["0/1000500"]);
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000700", 790),
        lsn("0/1000800"),
        SEG,
        &running,
        &[x800, x801, x802, x803],
        &mut snaps,
    );
    assert_eq!(adv.positions.catalog_xmin, Xid(800));
}

#[test]
fn a_catalog_change_in_a_known_subtransaction_flags_its_top_level_transaction() {
    // 802's DDL ran in subtransaction 805 (rolled back); the top-level commit still
    // rebuilds the snapshot because the flag went to the parent.
    let running = vec![
        rx("0/1000100", 800, 800, &[]),
        rx("0/1000300", 801, 803, &[801, 802]),
        rx("0/1000600", 803, 806, &[803]),
    ];
    let mut x800 = records(800, &["0/1000150"], &["0/1000150"]);
    x800.end_lsn = Some(lsn("0/1000250"));
    let mut x801 = records(801, &["0/1000200"], &["0/1000200"]);
    x801.end_lsn = Some(lsn("0/1000550"));
    let mut x802 = records(802, &["0/1000350"], &[]);
    x802.end_lsn = Some(lsn("0/1000400"));
    let mut x805 = records(805, &["0/1000360"], &[]);
    x805.top_xid = Some(Xid(802));
    x805.top_xid_lsn = Some(lsn("0/1000360"));
    x805.invalidation_lsns = vec![lsn("0/1000370")];
    x805.end_lsn = Some(lsn("0/1000390"));
    x805.aborted = true;
    let x803 = records(803, &["0/1000500"], &["0/1000500"]);
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000700", 790),
        lsn("0/1000800"),
        SEG,
        &running,
        &[x800, x801, x802, x805, x803],
        &mut snaps,
    );
    assert_eq!(adv.positions.catalog_xmin, Xid(801));
    // Unknown as a subtransaction (its first record not read as carrying 802), the flag
    // stays on 805 alone and is gone with its abort.
    let mut x805 = records(805, &["0/1000360"], &[]);
    x805.invalidation_lsns = vec![lsn("0/1000370")];
    x805.end_lsn = Some(lsn("0/1000390"));
    x805.aborted = true;
    let mut x800 = records(800, &["0/1000150"], &["0/1000150"]);
    x800.end_lsn = Some(lsn("0/1000250"));
    let mut x801 = records(801, &["0/1000200"], &["0/1000200"]);
    x801.end_lsn = Some(lsn("0/1000550"));
    let mut x802 = records(802, &["0/1000350"], &[]);
    x802.end_lsn = Some(lsn("0/1000400"));
    let x803 = records(803, &["0/1000500"], &["0/1000500"]);
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000700", 790),
        lsn("0/1000800"),
        SEG,
        &running,
        &[x800, x801, x802, x805, x803],
        &mut snaps,
    );
    assert_eq!(adv.positions.catalog_xmin, Xid(800));
}

/// Top-level 810 writes first in subtransaction 811 (rolled back), then itself.
fn subxact_scenario(mapped: bool) -> decoding::Advance {
    let running = vec![
        rx("0/1000100", 810, 810, &[]),
        rx("0/1000300", 810, 810, &[]),
        rx("0/1000450", 810, 812, &[810]),
        rx("0/1000600", 810, 812, &[810]),
    ];
    let mut sub = records(811, &["0/1000350"], &["0/1000350"]);
    if mapped {
        sub.top_xid = Some(Xid(810));
        sub.top_xid_lsn = Some(lsn("0/1000350"));
    }
    sub.end_lsn = Some(lsn("0/1000400"));
    sub.aborted = true;
    let mut top = records(810, &["0/1000500"], &["0/1000500"]);
    top.end_lsn = Some(lsn("0/1000700"));
    top.subxids = vec![];
    let mut snaps = BTreeSet::new();
    advance(
        pos("0/1000100", "0/1000650", 800),
        lsn("0/1000800"),
        SEG,
        &running,
        &[sub, top],
        &mut snaps,
    )
}

#[test]
fn a_subtransactions_first_record_enters_its_top_level_transaction() {
    // The record carrying the top-level xid creates 810's entry at 0/1000350 (restart point
    // 0/1000300); the subtransaction's abort leaves 810 in place.
    let mapped = subxact_scenario(true);
    assert!(!mapped.approximate);
    assert_eq!(mapped.positions, pos("0/1000300", "0/1000800", 810));
    // Read as a top-level transaction of its own, 811 goes with its abort and 810 only
    // enters at its own record, after the serialization at 0/1000450.
    let unmapped = subxact_scenario(false);
    assert_eq!(unmapped.positions, pos("0/1000450", "0/1000800", 810));
}

#[test]
fn a_subtransactions_base_snapshot_goes_to_its_top_level_transaction() {
    // 821's change gives 820 (already entered, no base yet) its base snapshot; 820 itself
    // is then the oldest base: the candidate catalog_xmin at 0/1000400 is its xmin.
    let running = vec![
        rx("0/1000100", 820, 820, &[]),
        rx("0/1000400", 820, 822, &[820]),
        rx("0/1000500", 822, 822, &[]),
    ];
    let top = XactRecords {
        end_lsn: Some(lsn("0/1000450")),
        subxids: vec![Xid(821)],
        ..records(820, &["0/1000200"], &[])
    };
    let sub = XactRecords {
        top_xid: Some(Xid(820)),
        top_xid_lsn: Some(lsn("0/1000300")),
        ..records(821, &["0/1000300"], &["0/1000300"])
    };
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000380", 810),
        lsn("0/1000600"),
        SEG,
        &running,
        &[top, sub],
        &mut snaps,
    );
    assert!(!adv.approximate);
    // 0/1000400 is past the old confirmed_flush: its xmin candidate (820, the base snapshot
    // 820 got through 821) waits and is applied at the end.
    assert_eq!(adv.positions.catalog_xmin, Xid(820));
}

#[test]
fn running_subtransactions_without_a_known_top_level_xid_are_approximate() {
    let mut r = rx("0/1000300", 830, 832, &[830]);
    r.subxids = vec![Xid(831)];
    let running = vec![rx("0/1000100", 830, 830, &[]), r.clone()];
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000100", 820),
        lsn("0/1000400"),
        SEG,
        &running,
        &[],
        &mut snaps,
    );
    assert!(adv.approximate);
    let sub = XactRecords {
        top_xid: Some(Xid(830)),
        ..records(831, &["0/1000200"], &[])
    };
    let mut snaps = BTreeSet::new();
    let adv = advance(
        pos("0/1000100", "0/1000100", 820),
        lsn("0/1000400"),
        SEG,
        &running,
        &[sub],
        &mut snaps,
    );
    assert!(!adv.approximate);
}

#[test]
fn a_prepare_record_enters_the_transaction_once_the_snapshot_is_full() {
    // Restored at 0/1000100 (restart point); 840's data records lie before the slot's
    // restart_lsn, its PREPARE after: the prepared transaction holds restart_lsn back
    // until COMMIT PREPARED.
    let running = vec![
        rx("0/1000100", 839, 841, &[839, 840]),
        rx("0/1000300", 840, 841, &[840]),
    ];
    let mut x840 = records(840, &["0/1000080"], &["0/1000080"]);
    x840.prepare_lsn = Some(lsn("0/1000200"));
    x840.end_lsn = Some(lsn("0/1000500"));
    let run = |x: Vec<XactRecords>| {
        let mut snaps: BTreeSet<Lsn> = [lsn("0/1000100")].into_iter().collect();
        advance(
            pos("0/1000100", "0/1000350", 830),
            lsn("0/1000400"),
            SEG,
            &running,
            &x,
            &mut snaps,
        )
    };
    let with = run(vec![x840.clone()]);
    assert!(with.consistent);
    assert_eq!(with.positions.restart_lsn, lsn("0/1000100"));
    x840.prepare_lsn = None;
    let without = run(vec![x840]);
    assert_eq!(without.positions.restart_lsn, lsn("0/1000300"));
}

#[test]
fn the_top_level_xid_is_read_from_a_records_raw_headers() {
    // XLogRecord (24 bytes), one block reference with data, then TOPLEVEL_XID, then the
    // short main-data header.
    let mut rec = vec![0u8; 24];
    rec.extend([0, 0x20, 4, 0]); // block 0, HAS_DATA, data_length 4
    rec.extend([0u8; 12]); // RelFileLocator
    rec.extend([0u8; 4]); // BlockNumber
    rec.extend([252, 0x2A, 0x03, 0, 0]); // toplevel xid 810
    rec.extend([255, 3]);
    assert_eq!(
        decoding::record_toplevel_xid(lsn("0/1000100"), &rec),
        Some(Xid(810))
    );
    // A full-page image (compressed, with a hole) and SAME_REL on a second block.
    let mut fpi = vec![0u8; 24];
    fpi.extend([0, 0x10 | 0x20, 0, 0, 0x10, 0, 0, 0, 0x05, 0, 0]);
    fpi.extend([0u8; 12]);
    fpi.extend([0u8; 4]);
    fpi.extend([1, 0x80 | 0x20, 2, 0]);
    fpi.extend([0u8; 4]);
    fpi.extend([252, 0x2B, 0x03, 0, 0]);
    assert_eq!(
        decoding::record_toplevel_xid(lsn("0/1000100"), &fpi),
        Some(Xid(811))
    );
    // No toplevel xid: the main data header comes first.
    let mut plain = vec![0u8; 24];
    plain.extend([255, 3]);
    assert_eq!(
        decoding::record_toplevel_xid(lsn("0/1000100"), &plain),
        None
    );
    // A page boundary 10 bytes into the record: the 24-byte page header is skipped.
    let start = Lsn(0x1002000 - 10);
    let mut crossing = rec[..10].to_vec();
    crossing.extend([0xEE; 24]);
    crossing.extend(&rec[10..]);
    assert_eq!(
        decoding::record_toplevel_xid(start, &crossing),
        Some(Xid(810))
    );
}

#[test]
fn the_new_transaction_fields_read_and_write_as_json() {
    let x = XactRecords {
        aborted: true,
        subxids: vec![Xid(5), Xid(6)],
        top_xid: Some(Xid(3)),
        top_xid_lsn: Some(lsn("0/10")),
        invalidation_lsns: vec![lsn("0/20")],
        prepare_lsn: Some(lsn("0/30")),
        ..records(4, &["0/8"], &[])
    };
    let back = XactRecords::from_json(&x.to_json()).expect("reads");
    assert_eq!(back, x);
    let old = serde_json::json!({"xid": 4, "record_lsns": [], "change_lsns": [], "end_lsn": null});
    assert_eq!(
        XactRecords::from_json(&old).expect("reads"),
        XactRecords {
            xid: Xid(4),
            ..XactRecords::default()
        }
    );
}

/// A `SnapBuildOnDisk` image: magic, checksum, version, length, then the 128-byte builder
/// with `xmin` at 32, `committed.xcnt` at 96, `catchange.xcnt` at 128, then the xids.
fn snap_file(xmin: u32, committed: &[u32], catchange: &[u32]) -> Vec<u8> {
    let mut b = vec![0u8; 144];
    b[0..4].copy_from_slice(&0x51A1_E001u32.to_le_bytes());
    b[32..36].copy_from_slice(&xmin.to_le_bytes());
    b[96..104].copy_from_slice(&(committed.len() as u64).to_le_bytes());
    b[128..136].copy_from_slice(&(catchange.len() as u64).to_le_bytes());
    for x in committed.iter().chain(catchange) {
        b.extend(x.to_le_bytes());
    }
    b
}

#[test]
fn snapshot_files_are_read_for_their_xmin_and_catalog_change_list() {
    let f = decoding::SnapshotFile::parse(&snap_file(790, &[780, 781], &[795])).expect("parses");
    assert_eq!(f.xmin, Xid(790));
    assert_eq!(f.catchange, vec![Xid(795)]);
    assert_eq!(decoding::SnapshotFile::parse(&[0u8; 10]), None);
    let back = decoding::SnapshotFile::from_json(&f.to_json()).expect("reads");
    assert_eq!(back, f);
}

#[test]
fn a_restored_file_with_known_contents_is_exact() {
    // Same as the approximate case above, but the file says its xmin is 795.
    let running = vec![
        rx("0/1000100", 800, 801, &[800]),
        rx("0/1000300", 801, 802, &[801]),
    ];
    let xacts = vec![xact(801, "0/1000200", "0/1000200", None)];
    let mut snaps: BTreeSet<Lsn> = [lsn("0/1000100")].into_iter().collect();
    let mut files = std::collections::BTreeMap::new();
    files.insert(
        lsn("0/1000100"),
        decoding::SnapshotFile {
            xmin: Xid(795),
            catchange: vec![],
        },
    );
    let adv = decoding::advance_with_files(
        pos("0/1000100", "0/1000100", 790),
        lsn("0/1000400"),
        SEG,
        &running,
        &xacts,
        &mut snaps,
        &mut files,
    );
    assert!(!adv.approximate);
    // 801's base snapshot is the restored one (xmin 795): the candidate at 0/1000300.
    assert_eq!(adv.positions.catalog_xmin, Xid(795));
    // The file written at 0/1000300 holds the builder xmin before that record (795).
    assert_eq!(files.get(&lsn("0/1000300")).map(|f| f.xmin), Some(Xid(795)));
}

#[test]
fn a_restored_catalog_change_list_makes_a_commit_with_invalidations_rebuild() {
    // Restored at 0/1000100 with 802 in the catalog-change list; 802's INVALIDATION came
    // before the restore point, its commit (with invalidations) after: the snapshot is
    // rebuilt with the builder's xmin 801 (from 0/1000300), so 803's base has 801.
    let running = vec![
        rx("0/1000100", 800, 803, &[800, 801, 802]),
        rx("0/1000300", 801, 803, &[801, 802]),
        rx("0/1000600", 803, 804, &[803]),
    ];
    let mut x801 = records(801, &["0/1000200"], &["0/1000200"]);
    x801.end_lsn = Some(lsn("0/1000550"));
    let mut x802 = records(802, &["0/1000050"], &[]);
    x802.invalidation_lsns = vec![lsn("0/1000060")];
    x802.end_lsn = Some(lsn("0/1000400"));
    x802.has_invals = true;
    let x803 = records(803, &["0/1000500"], &["0/1000500"]);
    let run = |catchange: Vec<Xid>| {
        let mut snaps: BTreeSet<Lsn> = [lsn("0/1000100")].into_iter().collect();
        let mut files = std::collections::BTreeMap::new();
        files.insert(
            lsn("0/1000100"),
            decoding::SnapshotFile {
                xmin: Xid(799),
                catchange,
            },
        );
        decoding::advance_with_files(
            pos("0/1000100", "0/1000700", 790),
            lsn("0/1000800"),
            SEG,
            &running,
            &[x801.clone(), x802.clone(), x803.clone()],
            &mut snaps,
            &mut files,
        )
    };
    let with = run(vec![Xid(802)]);
    assert!(!with.approximate);
    assert_eq!(with.positions.catalog_xmin, Xid(801));
    // Not in the list: 803 shares the restored snapshot (xmin 799); the candidate 799 is
    // not newer than what 0/1000300 already applied (799 via 801's base).
    let without = run(vec![]);
    assert!(!without.approximate);
    assert_eq!(without.positions.catalog_xmin, Xid(799));
}

#[test]
fn the_outcome_carries_the_snapshots_decoding_wrote_for_the_next_call() {
    // Consistent at the first record (nothing running); the file is written at the next.
    let running = vec![
        rx("0/2000000", 758, 758, &[]),
        rx("0/2000080", 758, 758, &[]),
    ];
    let sb = standby(&["0/1000000"], running);
    let remote_rows = [physical(), remote("a", "0/2000000", "0/2000100", 758)];
    let out = sync_function(&remote_rows, &[], &sb);
    assert_eq!(out.error, None);
    assert_eq!(
        out.serialized_snapshots,
        Some(vec![lsn("0/1000000"), lsn("0/2000080")]),
        "the input's file and the one written at the second running_xacts record"
    );
    // Fed back, the next update finds a snapshot at the remote restart_lsn and copies.
    let next = Standby {
        serialized_snapshots: out.serialized_snapshots.clone(),
        snapshot_files: out.snapshot_files.clone(),
        ..sb.clone()
    };
    let moved = [physical(), remote("a", "0/2000080", "0/2000200", 760)];
    let again = sync_function(&moved, &out.slots_after, &next);
    assert_eq!(positions_of(&again, "a"), Some(Positions::Copied));
    // Unknown snapshots stay unknown.
    let unknown = Standby {
        serialized_snapshots: None,
        ..sb
    };
    assert_eq!(
        sync_function(&remote_rows, &[], &unknown).serialized_snapshots,
        None
    );
}
