//! The readiness check's verdicts on hand-made snapshots: each reason, the warnings, the
//! standby-alone form, the JSON and text forms and the exit status. (The same verdicts are
//! checked against real promotions in `crates/cli/tests/slotsync_check.rs`.)

mod common;

use std::collections::{BTreeMap, BTreeSet};

use pgyard_slotsync::check::check;
use pgyard_slotsync::snapshot::{PrimaryFacts, Snapshot};
use pgyard_slotsync::*;
use pgyard_types::{Lsn, Xid};

use common::*;

fn primary(sent: &[(&str, &str)], list: &str) -> PrimaryFacts {
    PrimaryFacts {
        version: Version::V18,
        synchronized_standby_slots: list.into(),
        sent_lsn: sent
            .iter()
            .map(|(s, l)| (s.to_string(), lsn(l)))
            .collect::<BTreeMap<_, _>>(),
        sent_hidden: BTreeSet::new(),
    }
}

fn snap(remote: Vec<SlotRow>, local: Vec<SlotRow>, p: Option<PrimaryFacts>) -> Snapshot {
    let mut standby = base_standby();
    standby.sync_replication_slots = true;
    Snapshot {
        input: PlanInput {
            remote_slots: [vec![physical_named("s1")], remote].concat(),
            local_slots: local,
            standby,
        },
        primary: p,
        notes: Vec::new(),
    }
}

fn reason_of(s: &Snapshot, slot: &str) -> Option<String> {
    let r = check(s);
    let v = r.slots.iter().find(|v| v.slot == slot).expect("verdict");
    assert_eq!(v.ready, v.reason.is_none());
    v.reason.clone()
}

#[test]
fn a_synced_persistent_valid_slot_with_the_standby_caught_up_is_ready() {
    let s = snap(
        vec![remote("a", "0/2000000", "0/2000100", 760)],
        vec![synced("a", "0/2000000", "0/2000100", 760)],
        Some(primary(&[("a", "0/4000000")], "s1")),
    );
    let report = check(&s);
    assert_eq!(report.exit_code(), 0);
    assert!(report.slots[0].ready);
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let next = report.slots[0].next_sync.as_ref().expect("next sync");
    assert_eq!(next.caller, Caller::Worker);
    let json = report.to_json();
    assert_eq!(json["ready"], true);
    assert_eq!(json["slots"][0]["slot"], "a");
    assert_eq!(json["slots"][0]["next_sync"]["caller"], "worker");
    assert_eq!(report.to_text(), "a: ready\n");
}

#[test]
fn each_reason_in_order() {
    let r = remote("a", "0/2000000", "0/2000100", 760);
    let sent = |l| Some(primary(&[("a", l)], "s1"));
    // never synced
    let s = snap(vec![r.clone()], vec![], sent("0/2000100"));
    assert!(reason_of(&s, "a").unwrap().starts_with("not synced yet"));
    // a slot of the standby's own
    let mut own = synced("a", "0/2000000", "0/2000100", 760);
    own.synced = false;
    let s = snap(vec![r.clone()], vec![own], sent("0/2000100"));
    assert!(reason_of(&s, "a").unwrap().contains("synced = false"));
    // invalidated on the standby
    let mut inv = synced("a", "0/2000000", "0/2000100", 760);
    inv.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let s = snap(vec![r.clone()], vec![inv], sent("0/2000100"));
    let why = reason_of(&s, "a").unwrap();
    assert!(
        why.starts_with("invalidated on the standby (wal_removed"),
        "{why}"
    );
    // invalidated on the primary wins over everything
    let mut rinv = r.clone();
    rinv.invalidation_reason = Some(InvalidationCause::RowsRemoved);
    let s = snap(vec![rinv], vec![], sent("0/2000100"));
    assert!(reason_of(&s, "a")
        .unwrap()
        .starts_with("invalidated on the primary (rows_removed)"));
    // temporary, preceded by the remote, both positions named
    let mut tmp = synced("a", "0/2000000", "0/2000100", 765);
    tmp.temporary = true;
    let s = snap(vec![r.clone()], vec![tmp.clone()], sent("0/2000100"));
    let why = reason_of(&s, "a").unwrap();
    assert!(
        why.contains("catalog xmin 760") && why.contains("catalog xmin 765"),
        "{why}"
    );
    // temporary, not preceded: waiting for consistency
    tmp.catalog_xmin = Some(Xid(760));
    let s = snap(vec![r.clone()], vec![tmp], sent("0/2000100"));
    assert!(reason_of(&s, "a").unwrap().contains("consistent point"));
    // the standby is behind what was sent (replay is 0/5000000)
    let ok = synced("a", "0/2000000", "0/2000100", 760);
    let s = snap(vec![r.clone()], vec![ok.clone()], sent("0/5000010"));
    let why = reason_of(&s, "a").unwrap();
    assert!(why.contains("(16 bytes behind)"), "{why}");
    // no walsender: the slot's confirmed_flush_lsn is what subscribers have
    let mut ahead = r.clone();
    ahead.confirmed_flush_lsn = Some(lsn("0/5000020"));
    let s = snap(vec![ahead], vec![ok.clone()], Some(primary(&[], "s1")));
    assert!(reason_of(&s, "a")
        .unwrap()
        .contains("confirmed WAL up to 0/5000020"));
    // a walsender the role may not see: no guess
    let mut hidden = primary(&[], "s1");
    hidden.sent_hidden.insert("a".into());
    let s = snap(vec![r], vec![ok], Some(hidden));
    assert!(reason_of(&s, "a").unwrap().starts_with("cannot tell"));
}

#[test]
fn warnings_do_not_change_the_verdict() {
    let mut s = snap(
        vec![remote("a", "0/2000000", "0/2000100", 760)],
        vec![synced("a", "0/2000000", "0/2000100", 760)],
        Some(primary(&[("a", "0/2000100")], "")),
    );
    s.input.standby.hot_standby_feedback = false;
    s.input.standby.sync_replication_slots = false;
    s.input.standby.primary_conninfo = "host=p".into();
    let report = check(&s);
    assert!(report.slots[0].ready);
    assert_eq!(report.exit_code(), 0);
    let w = report.warnings.join("\n");
    assert!(
        w.contains("requires \"hot_standby_feedback\" to be enabled"),
        "{w}"
    );
    assert!(w.contains("requires \"dbname\" to be specified"), "{w}");
    assert!(w.contains("sync_replication_slots is off"), "{w}");
    assert!(
        w.contains("not in the primary's synchronized_standby_slots"),
        "{w}"
    );
    assert_eq!(report.slots[0].warnings, report.warnings);
    assert_eq!(
        report.slots[0].next_sync.as_ref().unwrap().caller,
        Caller::Function
    );
    // An unreadable primary_conninfo is a note, not a missing setting.
    s.input.standby.primary_conninfo = String::new();
    s.notes
        .push("standby: primary_conninfo is not readable".into());
    let w = check(&s).warnings.join("\n");
    assert!(!w.contains("primary_conninfo\" to be set"), "{w}");
}

#[test]
fn the_standby_alone_judges_its_synced_slots_and_says_what_it_could_not() {
    let mut tmp = synced("b", "0/2000000", "0/2000100", 760);
    tmp.temporary = true;
    let mut mine = synced("c", "0/2000000", "0/2000100", 760);
    mine.synced = false;
    let s = snap(
        vec![],
        vec![synced("a", "0/2000000", "0/2000100", 760), tmp, mine],
        None,
    );
    let report = check(&s);
    let names: Vec<&str> = report.slots.iter().map(|v| v.slot.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert!(report.slots[0].ready);
    assert!(report.slots[0].next_sync.is_none());
    assert!(!report.slots[1].ready);
    assert_eq!(report.exit_code(), 1);
    assert!(report.unchecked.iter().any(|u| u.contains("no primary")));
    assert!(report.to_text().contains("not checked:"));
}

#[test]
fn no_failover_slots_is_ready_and_snapshots_round_trip() {
    let mut s = snap(vec![], vec![], Some(primary(&[("x", "0/1")], "s1")));
    s.primary.as_mut().unwrap().sent_hidden.insert("y".into());
    s.notes.push("a note".into());
    let report = check(&s);
    assert!(report.slots.is_empty());
    assert_eq!(report.exit_code(), 0);
    assert_eq!(report.to_text(), "no failover slots\nnot checked: a note\n");
    let back = Snapshot::from_json(&s.to_json()).expect("reads its own JSON");
    assert_eq!(back, s);
    assert_eq!(Lsn(1), lsn("0/1"));
}

/// Without `hot_standby_feedback` the primary keeps no catalog rows for the standby's synced
/// slots, so WAL received and not yet replayed may hold a removal that invalidates the slot
/// when promotion replays it: ready only once everything received is replayed (the
/// simulator's `slotsync` world found the failover this loses).
#[test]
fn without_feedback_everything_received_must_be_replayed() {
    let mut s = snap(
        vec![remote("a", "0/2000000", "0/2000100", 760)],
        vec![synced("a", "0/2000000", "0/2000100", 760)],
        Some(primary(&[("a", "0/2000100")], "s1")),
    );
    s.input.standby.hot_standby_feedback = false;
    s.input.standby.replay_lsn = Some(lsn("0/3000000"));
    s.input.standby.receive_lsn = Some(lsn("0/3000040"));
    let why = reason_of(&s, "a").expect("not ready");
    assert!(
        why.starts_with("hot_standby_feedback is off and the standby has received 64 bytes"),
        "{why}"
    );
    assert_eq!(check(&s).exit_code(), 1);
    s.input.standby.receive_lsn = None;
    let why = reason_of(&s, "a").expect("not ready");
    assert!(why.contains("receive position is unknown"), "{why}");
    s.input.standby.receive_lsn = Some(lsn("0/3000000"));
    assert_eq!(reason_of(&s, "a"), None);
    // With feedback on, the same unreplayed WAL holds no removal the slot needs.
    s.input.standby.hot_standby_feedback = true;
    s.input.standby.receive_lsn = Some(lsn("0/3000040"));
    assert_eq!(reason_of(&s, "a"), None);
}
