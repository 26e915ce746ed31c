//! Property tests: the engine never panics on any input table and keeps its invariants;
//! the walsender gate and the scheduler behave on arbitrary inputs.

use std::time::Duration;

use std::collections::BTreeSet;

use pgyard_slotsync::cadence::{LaunchGate, WorkerSchedule, NAPTIME_MAX, NAPTIME_MIN};
use pgyard_slotsync::decoding::{advance, RunningXacts, SlotPositions, XactRecords};
use pgyard_slotsync::engine::{promote, sync_cycle};
use pgyard_slotsync::standby_slots::StandbySlotProblem;
use pgyard_slotsync::*;
use pgyard_types::{Instant, Lsn, UnixTime, Xid};
use proptest::prelude::*;

fn arb_row() -> impl Strategy<Value = SlotRow> {
    (
        (
            0u8..5,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
        ),
        (
            proptest::option::of(0u64..0x3000),
            proptest::option::of(0u64..0x3000),
            proptest::option::of(0u32..40),
            proptest::option::of(0u8..4),
            proptest::option::of(0i64..3),
        ),
    )
        .prop_map(
            |((n, phys, failover, synced, temporary, two_phase), (r, c, x, inv, pid))| {
                let name = format!("s{n}");
                let mut row = if phys {
                    SlotRow::physical(name)
                } else {
                    SlotRow::logical(name)
                };
                row.failover = failover;
                row.synced = synced;
                row.temporary = temporary;
                row.two_phase = two_phase;
                row.restart_lsn = r.map(Lsn);
                row.confirmed_flush_lsn = c.map(Lsn);
                row.catalog_xmin = x.map(Xid);
                row.invalidation_reason = inv.map(|i| {
                    [
                        InvalidationCause::WalRemoved,
                        InvalidationCause::RowsRemoved,
                        InvalidationCause::WalLevelInsufficient,
                        InvalidationCause::IdleTimeout,
                    ][i as usize]
                });
                row.active_pid = pid.filter(|p| *p > 1);
                row.datoid = Some(5);
                row.plugin = Some("test_decoding".into());
                row
            },
        )
}

fn arb_running() -> impl Strategy<Value = RunningXacts> {
    (
        0u64..0x3000,
        0u32..40,
        0u32..4,
        proptest::collection::vec(0u32..40, 0..3),
        proptest::collection::vec(0u32..40, 0..2),
    )
        .prop_map(|(at, oldest, span, xids, subxids)| RunningXacts {
            start_lsn: Lsn(at),
            end_lsn: Some(Lsn(at + 0x20)),
            oldest_running_xid: Xid(oldest),
            next_xid: Xid(oldest.wrapping_add(span)),
            xids: xids.into_iter().map(Xid).collect(),
            subxids: subxids.into_iter().map(Xid).collect(),
        })
}

fn arb_xact() -> impl Strategy<Value = XactRecords> {
    (
        0u32..40,
        proptest::collection::vec(0u64..0x3000, 0..3),
        proptest::collection::vec(0u64..0x3000, 0..3),
        proptest::option::of(0u64..0x3000),
    )
        .prop_map(|(xid, records, changes, end)| XactRecords {
            xid: Xid(xid),
            record_lsns: records.into_iter().map(Lsn).collect(),
            change_lsns: changes.into_iter().map(Lsn).collect(),
            end_lsn: end.map(Lsn),
            ..XactRecords::default()
        })
}

fn arb_standby() -> impl Strategy<Value = Standby> {
    (
        (
            0u64..0x3000,
            0u64..0x3000,
            0u32..40,
            any::<bool>(),
            proptest::option::of(0usize..6),
        ),
        (
            proptest::option::of(proptest::collection::vec(0u64..0x3000, 0..4)),
            proptest::collection::vec(arb_running(), 0..5),
            proptest::collection::vec(arb_xact(), 0..4),
        ),
    )
        .prop_map(
            |((flush, redo, xmin, recovery, max), (snaps, running, xacts))| Standby {
                receive_lsn: Some(Lsn(flush)),
                replay_lsn: Some(Lsn(flush / 2)),
                redo_lsn: Some(Lsn(redo)),
                oldest_wal_lsn: Some(Lsn(0)),
                snapshot_xmin: Xid(xmin),
                in_recovery: recovery,
                primary_slot_name: "s0".into(),
                primary_conninfo: "dbname=postgres".into(),
                wal_segment_size_bytes: 0x1000,
                max_replication_slots: max,
                serialized_snapshots: snaps.map(|v| v.into_iter().map(Lsn).collect()),
                running_xacts: running,
                xacts,
                ..Standby::default()
            },
        )
}

fn unique(mut rows: Vec<SlotRow>) -> Vec<SlotRow> {
    let mut seen = std::collections::BTreeSet::new();
    rows.retain(|r| seen.insert(r.slot_name.clone()));
    rows
}

proptest! {
    #[test]
    fn cycle_never_panics_and_keeps_invariants(
        remote in proptest::collection::vec(arb_row(), 0..8),
        local in proptest::collection::vec(arb_row(), 0..8),
        standby in arb_standby(),
        worker in any::<bool>(),
    ) {
        let remote = unique(remote);
        let local = unique(local);
        let out = if worker {
            sync_cycle(&remote, &local, &standby, Caller::Worker)
        } else {
            sync_function(&remote, &local, &standby)
        };
        // Names stay unique.
        let mut names: Vec<_> = out.slots_after.iter().map(|r| &r.slot_name).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        prop_assert_eq!(names.len(), n);
        // Non-synced slots are never touched.
        for l in local.iter().filter(|l| !l.synced) {
            prop_assert!(out.slots_after.contains(l));
        }
        for s in &out.slots_after {
            let before = local.iter().find(|l| l.slot_name == s.slot_name && l.synced);
            // The function leaves no temporary synced slot behind.
            if !worker {
                prop_assert!(!(s.synced && s.temporary && !before.is_some_and(|b| b.temporary)));
            }
            // A persistent synced slot never goes backwards.
            if let Some(b) = before.filter(|b| !b.temporary && b.invalidation_reason.is_none()) {
                prop_assert!(s.confirmed_flush_lsn >= b.confirmed_flush_lsn);
                prop_assert!(s.restart_lsn >= b.restart_lsn);
            }
            // A synced slot created or updated by this cycle is not ahead of the standby
            // (the function rejects it; the worker skips it).
            if s.synced && before.is_none() && !s.temporary {
                prop_assert!(s.confirmed_flush_lsn.unwrap_or(Lsn(0)) <= standby.flush_lsn());
            }
        }
        // Promotion afterwards: nothing temporary and synced survives.
        let (_, promoted) = promote(&out.slots_after);
        prop_assert!(promoted.iter().all(|r| !(r.synced && r.temporary)));
        // The JSON form reads back to the same rows.
        for s in &out.slots_after {
            prop_assert_eq!(&SlotRow::from_json(&s.to_json()).unwrap(), s);
        }
    }

    #[test]
    fn advance_never_panics_and_only_moves_forward(
        restart in 0u64..0x3000,
        confirmed in 0u64..0x3000,
        xmin in 0u32..40,
        moveto in 0u64..0x3000,
        running in proptest::collection::vec(arb_running(), 0..6),
        xacts in proptest::collection::vec(arb_xact(), 0..4),
        snaps in proptest::collection::vec(0u64..0x3000, 0..4),
    ) {
        let start = SlotPositions {
            restart_lsn: Lsn(restart),
            confirmed_flush_lsn: Lsn(confirmed),
            catalog_xmin: Xid(xmin),
        };
        let mut set: BTreeSet<Lsn> = snaps.into_iter().map(Lsn).collect();
        let before = set.clone();
        let adv = advance(start, Lsn(moveto), 16 << 20, &running, &xacts, &mut set);
        let p = adv.positions;
        prop_assert_eq!(p.confirmed_flush_lsn, Lsn(confirmed.max(moveto)));
        prop_assert!(p.restart_lsn >= start.restart_lsn);
        prop_assert!(p.restart_lsn <= start.restart_lsn.max(Lsn(moveto)));
        prop_assert!(!pgyard_slotsync::row::xid_precedes(p.catalog_xmin, start.catalog_xmin));
        // Snapshots are written only at running_xacts records the advance read.
        for l in &adv.serialized {
            prop_assert!(!before.contains(l) && set.contains(l));
            prop_assert!(running.iter().any(|r| r.start_lsn == *l));
            prop_assert!(*l >= start.restart_lsn);
        }
        // Same input, same answer.
        let mut again: BTreeSet<Lsn> = before.clone();
        prop_assert_eq!(advance(start, Lsn(moveto), 16 << 20, &running, &xacts, &mut again), adv);
    }

    #[test]
    fn standby_json_round_trips(standby in arb_standby()) {
        let back = Standby::from_json(&standby.to_json()).unwrap();
        prop_assert_eq!(back, standby);
    }

    #[test]
    fn plan_text_never_panics(text in ".{0,200}") {
        let run = run_plan_text(&text);
        prop_assert!(run.exit_code <= 2);
    }

    #[test]
    fn standby_slot_parse_never_panics(value in "[a-zA-Z0-9_,\" *-]{0,40}") {
        if let Ok(list) = StandbySlotList::parse(&value) {
            prop_assert!(list.names().iter().all(|n| !n.is_empty()));
        }
    }

    #[test]
    fn send_bound_never_exceeds_listed_flush(
        slots in proptest::collection::vec(arb_row(), 0..6),
        flush in 0u64..0x4000,
    ) {
        let slots = unique(slots);
        let list = StandbySlotList::parse("s0, s1").unwrap();
        let b = list.send_bound(&slots, Lsn(flush), true, false, false);
        if let Some(upto) = b.upto {
            prop_assert!(upto <= Lsn(flush));
            for n in list.names() {
                let s = slots.iter().find(|s| &s.slot_name == n).unwrap();
                prop_assert!(s.restart_lsn.unwrap() >= upto);
            }
        }
        prop_assert_eq!(b.report.is_none(), list.caught_up(&slots, Lsn(flush), false).is_ok());
    }

    #[test]
    fn naptime_stays_in_range(updates in proptest::collection::vec(any::<bool>(), 1..40)) {
        let mut s = WorkerSchedule::new(Instant::ZERO);
        let mut now = Instant::ZERO;
        for u in updates {
            prop_assert!(s.handle_timeout(now));
            s.handle_cycle_done(now, u);
            prop_assert!(s.naptime() >= NAPTIME_MIN && s.naptime() <= NAPTIME_MAX);
            let due = s.poll_timeout().unwrap();
            prop_assert!(due > now);
            prop_assert!(!s.handle_timeout(now));
            now = due;
        }
    }
}

#[test]
fn naptime_doubles_to_the_cap_and_resets() {
    let mut s = WorkerSchedule::new(Instant::ZERO);
    let mut seen = Vec::new();
    for _ in 0..9 {
        s.handle_cycle_done(Instant::ZERO, false);
        seen.push(s.naptime().as_millis());
    }
    assert_eq!(
        seen,
        [400, 800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]
    );
    s.handle_cycle_done(Instant::ZERO, true);
    assert_eq!(s.naptime(), Duration::from_millis(200));
    s.handle_wakeup(Instant(5));
    assert_eq!(s.poll_timeout(), Some(Instant(5)));
}

#[test]
fn launch_gate_waits_ten_seconds_allows_backwards_clock_and_resets() {
    let sec = |s: i64| UnixTime(s * 1_000_000);
    let mut g = LaunchGate::new();
    assert!(g.try_launch(sec(100)));
    assert!(!g.try_launch(sec(109)));
    assert!(g.try_launch(sec(110)));
    assert!(g.try_launch(sec(50)), "clock went backwards");
    g.reset();
    assert!(g.try_launch(sec(51)));
}

#[test]
fn standby_slots_guc_texts() {
    let e = StandbySlotList::parse("a,,b").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid value for parameter \"synchronized_standby_slots\": \"a,,b\""
    );
    assert_eq!(e.detail, "List syntax is invalid.");
    let e = StandbySlotList::parse("Bad-Name").unwrap_err();
    assert_eq!(
        e.detail,
        "replication slot name \"bad-name\" contains invalid character"
    );
    assert_eq!(e.hint.as_deref(), Some("Replication slot names may only contain lower case letters, numbers, and the underscore character."));
    assert!(StandbySlotList::parse("*").is_err());
    assert_eq!(
        StandbySlotList::parse(" sb1 , \"sb2\"").unwrap().names(),
        ["sb1", "sb2"]
    );
    assert!(StandbySlotList::parse("").unwrap().names().is_empty());
}

#[test]
fn standby_slots_wait_reports_in_list_order() {
    let mut sb1 = SlotRow::physical("sb1");
    sb1.restart_lsn = Some(Lsn(100));
    let list = StandbySlotList::parse("sb1,missing").unwrap();
    let r = list.caught_up(&[sb1.clone()], Lsn(50), false).unwrap_err();
    assert_eq!(r.problem, StandbySlotProblem::Missing);
    assert_eq!(r.message().unwrap(), "replication slot \"missing\" specified in parameter \"synchronized_standby_slots\" does not exist");
    let r = list.caught_up(&[sb1.clone()], Lsn(150), true).unwrap_err();
    assert_eq!(
        (r.slot.as_str(), r.problem, r.is_error),
        ("sb1", StandbySlotProblem::NoActivePid, true)
    );
    assert_eq!(r.hint().unwrap(), "Start the standby associated with the replication slot \"sb1\", or amend parameter \"synchronized_standby_slots\".");
    sb1.active_pid = Some(7);
    let r = list.caught_up(&[sb1.clone()], Lsn(150), false).unwrap_err();
    assert_eq!(r.problem, StandbySlotProblem::Behind);
    assert_eq!(r.message(), None);
    let mut lg = SlotRow::logical("sb1");
    lg.restart_lsn = Some(Lsn(100));
    assert_eq!(
        list.caught_up(&[lg], Lsn(1), false).unwrap_err().problem,
        StandbySlotProblem::Logical
    );
    let one = StandbySlotList::parse("sb1").unwrap();
    assert_eq!(
        one.send_bound(&[sb1.clone()], Lsn(300), true, false, false)
            .upto,
        Some(Lsn(100))
    );
    assert_eq!(
        one.send_bound(&[sb1.clone()], Lsn(300), false, false, false)
            .upto,
        Some(Lsn(300)),
        "non-failover slots never wait"
    );
    assert_eq!(
        one.send_bound(&[sb1.clone()], Lsn(300), true, true, false)
            .upto,
        Some(Lsn(300)),
        "no waiting in recovery"
    );
    sb1.invalidation_reason = Some(InvalidationCause::WalRemoved);
    let b = one.send_bound(&[sb1], Lsn(300), true, false, false);
    assert_eq!(b.upto, None);
    assert_eq!(b.report.unwrap().problem, StandbySlotProblem::Invalidated);
}

#[test]
fn plan_round_trip_and_error_exit() {
    let input = r#"{"remote_slots": [], "local_slots": [], "standby": {"snapshot_xmin": 5, "in_recovery": false}}"#;
    let run = run_plan_text(input);
    assert_eq!(run.exit_code, 1);
    assert_eq!(
        run.stderr,
        "ERROR:  replication slots can only be synchronized to a standby server\n"
    );
    let run = run_plan_text("{");
    assert_eq!(run.exit_code, 2);
}
