//! Edges the rule-per-test suites leave open: each slot setting copied on its own, xids
//! across the wraparound and next to the permanent ones, sizes in every unit `SHOW` prints,
//! quoted names in `synchronized_standby_slots`, every sync error's SQLSTATE, and the JSON
//! forms of the inputs read back.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use pgyard_slotsync::check::check;
use pgyard_slotsync::decoding::RunningXacts;
use pgyard_slotsync::input::parse_size;
use pgyard_slotsync::row::{xid_follows, xid_precedes};
use pgyard_slotsync::snapshot::{PrimaryFacts, Snapshot};
use pgyard_slotsync::*;
use pgyard_types::{Lsn, Xid};
use serde_json::json;

use common::*;

fn physical(name: &str) -> SlotRow {
    let mut r = physical_named(name);
    r.active_pid = Some(42);
    r.active = true;
    r
}

fn standby() -> Standby {
    Standby {
        primary_conninfo: "host=127.0.0.1 port=5432 user=postgres dbname=postgres".into(),
        ..base_standby()
    }
}

#[test]
fn each_setting_is_copied_on_its_own_and_an_unchanged_slot_is_left_alone() {
    let local = vec![synced("a", "0/2000000", "0/2000100", 760)];
    let same = sync_function(
        &[physical("s1"), remote("a", "0/2000000", "0/2000100", 760)],
        &local,
        &standby(),
    );
    assert_eq!(same.error, None);
    assert!(!same.updated, "{:?}", same.actions);
    assert_eq!(same.slots_after, local);
    // The same with two_phase on since a position, on both sides.
    let mut two_phase = remote("a", "0/2000000", "0/2000100", 760);
    two_phase.two_phase = true;
    two_phase.two_phase_at = Some(lsn("0/2000080"));
    let mut ours = two_phase.clone();
    ours.synced = true;
    let same = sync_function(&[physical("s1"), two_phase], &[ours.clone()], &standby());
    assert_eq!(same.error, None);
    assert!(!same.updated, "{:?}", same.actions);
    assert_eq!(same.slots_after, vec![ours]);
    type Change = fn(&mut SlotRow);
    let changes: [(&str, Change); 3] = [
        ("database", |r| r.datoid = Some(6)),
        ("two_phase", |r| r.two_phase = true),
        ("plugin", |r| r.plugin = Some("pgoutput".into())),
    ];
    for (what, change) in changes {
        let mut r = remote("a", "0/2000000", "0/2000100", 760);
        change(&mut r);
        let out = sync_function(&[physical("s1"), r.clone()], &local, &standby());
        assert_eq!(out.error, None, "{what}");
        assert!(out.updated, "{what}: {:?}", out.actions);
        let a = &out.slots_after[0];
        assert_eq!(
            (a.datoid, a.two_phase, &a.plugin),
            (r.datoid, r.two_phase, &r.plugin),
            "{what}"
        );
    }
}

#[test]
fn xids_compare_circularly_except_the_permanent_ones() {
    let x = Xid;
    // Across the wraparound a normal xid just below 2^32 precedes a small normal one.
    assert!(xid_precedes(x(4_294_967_290), x(5)));
    assert!(xid_follows(x(5), x(4_294_967_290)));
    assert!(xid_precedes(x(4_294_967_290), x(3)));
    assert!(!xid_precedes(x(5), x(5)));
    assert!(!xid_follows(x(5), x(5)));
    // Permanent xids (0, 1, 2) precede every normal xid, however far around it is.
    assert!(xid_precedes(x(1), x(4_294_967_290)));
    assert!(xid_precedes(x(2), x(3)));
    assert!(!xid_precedes(x(3), x(2)));
    assert!(xid_follows(x(4_294_967_290), x(1)));
    assert!(!xid_follows(x(1), x(4_294_967_290)));
}

#[test]
fn sizes_are_read_in_every_unit_show_prints() {
    assert_eq!(parse_size("1000"), Some(1000));
    assert_eq!(parse_size("1000B"), Some(1000));
    assert_eq!(parse_size("8192kB"), Some(8 << 20));
    assert_eq!(parse_size("64MB"), Some(64 << 20));
    assert_eq!(parse_size("2GB"), Some(2 << 30));
    assert_eq!(parse_size("3TB"), Some(3 << 40));
    assert_eq!(parse_size("16777216TB"), None, "past 2^64 bytes");
}

#[test]
fn the_standby_input_reads_back_what_it_writes() {
    for (seg, text) in [
        (16 << 20, Some("16MB")),
        (1 << 30, None),
        (4096, Some("4096")),
    ] {
        let mut sb = standby();
        sb.wal_segment_size_bytes = seg;
        sb.max_replication_slots = Some(3);
        let v = sb.to_json();
        if let Some(text) = text {
            assert_eq!(v["wal_segment_size"], json!(text));
        }
        assert_eq!(Standby::from_json(&v).expect("reads back"), sb);
    }
}

#[test]
fn running_xacts_take_xids_as_numbers_or_as_text() {
    let v = json!({
        "start_lsn": "0/1000028", "oldest_running_xid": 7, "next_xid": "9",
        "xids": [7, " 8 "], "subxids": ["4294967295"],
    });
    let r = RunningXacts::from_json(&v).expect("reads");
    assert_eq!(r.xids, vec![Xid(7), Xid(8)]);
    assert_eq!(r.subxids, vec![Xid(u32::MAX)]);
    assert_eq!(r.next_xid, Xid(9));
    let bad =
        json!({"start_lsn": "0/1", "oldest_running_xid": 7, "next_xid": 9, "xids": ["4294967296"]});
    assert!(RunningXacts::from_json(&bad).is_err());
}

#[test]
fn quoted_names_in_the_standby_slot_list_keep_doubled_quotes() {
    let l = StandbySlotList::parse(r#""ab" , c,"d_1""#).expect("parses");
    assert_eq!(l.names(), ["ab", "c", "d_1"]);
    // A doubled quote inside a quoted name is one quote, which no slot name may hold.
    let e = StandbySlotList::parse(r#""ab""c", d"#).expect_err("a quote in a name");
    assert_eq!(
        e.detail,
        "replication slot name \"ab\"c\" contains invalid character"
    );
}

#[test]
fn a_physical_row_has_no_conflicting_column() {
    let p = SlotRow::physical("s1");
    assert_eq!(p.slot_type, SlotType::Physical);
    assert_eq!(p.conflicting, None);
    assert_eq!(SlotRow::logical("l").conflicting, Some(false));
}

#[test]
fn every_sync_error_carries_the_servers_sqlstate() {
    let l = Lsn(0x100);
    let cases = [
        (SyncError::NotInRecovery, "55000"),
        (SyncError::Concurrent, "55000"),
        (SyncError::PromotionTriggered, "55000"),
        (SyncError::SameNameSlot("a".into()), "55000"),
        (
            SyncError::AheadOfStandby {
                slot: "a".into(),
                remote: l,
                standby: l,
            },
            "55000",
        ),
        (SyncError::RemoteIsStandby, "0A000"),
        (SyncError::ConninfoSyntax("x".into()), "42601"),
        (
            SyncError::SlotActive {
                slot: "a".into(),
                pid: 7,
            },
            "55006",
        ),
        (SyncError::AllSlotsInUse, "53400"),
        (SyncError::WalRemovedConcurrently("a".into()), "XX000"),
        (SyncError::WalLevelTooLow, "22023"),
        (SyncError::PrimarySlotMissing("s".into()), "22023"),
    ];
    for (e, state) in cases {
        assert_eq!(e.sqlstate(), state, "{e:?}");
    }
    let full = SyncError::AllSlotsInUse;
    assert_eq!(
        full.hint(),
        Some("Free one or increase \"max_replication_slots\".")
    );
    assert_eq!(full.detail(), None);
    assert_eq!(
        full.psql_text(),
        "ERROR:  all replication slots are in use\nHINT:  Free one or increase \"max_replication_slots\"."
    );
}

#[test]
fn a_standby_without_a_slot_is_warned_about_that_and_nothing_else() {
    let mut standby = base_standby();
    standby.sync_replication_slots = true;
    standby.primary_slot_name = String::new();
    let s = Snapshot {
        input: PlanInput {
            remote_slots: vec![physical_named("s1")],
            local_slots: Vec::new(),
            standby,
        },
        primary: Some(PrimaryFacts {
            version: Version::V18,
            synchronized_standby_slots: "s1".into(),
            sent_lsn: BTreeMap::new(),
            sent_hidden: BTreeSet::new(),
        }),
        notes: Vec::new(),
    };
    let w = check(&s).warnings.join("\n");
    assert!(w.contains("streams without a slot"), "{w}");
    assert!(!w.contains("does not exist on primary"), "{w}");
}

#[test]
fn a_standby_whose_slot_is_missing_on_the_primary_is_warned_about_it() {
    let mut standby = base_standby();
    standby.sync_replication_slots = true;
    standby.primary_slot_name = "s2".into();
    let primary = PrimaryFacts {
        version: Version::V18,
        synchronized_standby_slots: "s2".into(),
        sent_lsn: BTreeMap::new(),
        sent_hidden: BTreeSet::new(),
    };
    // Another standby's physical slot, and a logical slot of the standby's slot's name, are
    // not its slot.
    let mut logical = remote("s2", "0/2000000", "0/2000100", 760);
    logical.failover = false;
    let s = Snapshot {
        input: PlanInput {
            remote_slots: vec![physical_named("s1"), logical],
            local_slots: Vec::new(),
            standby,
        },
        primary: Some(primary),
        notes: Vec::new(),
    };
    let w = check(&s).warnings.join("\n");
    assert!(
        w.contains("replication slot \"s2\" specified by \"primary_slot_name\" does not exist on primary server"),
        "{w}"
    );
}
