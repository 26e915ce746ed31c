//! What the primary's walsender says while `synchronized_standby_slots` holds it back
//! (`walsender-report-true`): the first listed standby slot, in the setting's order, that is
//! missing, logical, invalidated or has not flushed the WAL to send decides; each is reported
//! as PostgreSQL words it (message, DETAIL and HINT naming the slot), except one merely
//! behind with its walsender attached, which is waited for in silence; with every listed slot
//! caught up there is nothing to report. The same list with a missing name, or with the
//! primary's failover slot (a logical one), put first — an operator's mistake — is judged too,
//! and every report carries its problem's SQLSTATE.

use pgyard_slotsync::standby_slots::{StandbySlotProblem, StandbySlotReport};
use pgyard_slotsync::{SlotRow, SlotType, StandbySlotList};
use pgyard_types::Lsn;

use super::{fail, SLOT};
use crate::Violation;

/// The world's list as an operator might mistype it: with a slot name that does not exist, or
/// with the primary's failover (logical) slot, put first. Parsed once per seed.
pub(super) fn mistakes(list: &StandbySlotList) -> Result<Vec<StandbySlotList>, Violation> {
    ["no_such_standby_slot", SLOT]
        .iter()
        .map(|first| {
            let spelled: Vec<String> = std::iter::once(*first)
                .chain(list.names().iter().map(String::as_str))
                .map(|n| format!("\"{n}\""))
                .collect();
            StandbySlotList::parse(&spelled.join(", "))
                .map_err(|e| fail("walsender-report-true", format!("{spelled:?}: {e:?}")))
        })
        .collect()
}

/// Judges the walsender's report for sending up to `flush` with `list` over the primary's
/// slots `rows`, and for each of its `mistyped` forms (see [`mistakes`]).
pub(super) fn judge(
    tick: u64,
    list: &StandbySlotList,
    mistyped: &[StandbySlotList],
    rows: &[SlotRow],
    flush: Lsn,
) -> Result<(), Violation> {
    judge_list(tick, list, rows, flush)?;
    for l in mistyped {
        judge_list(tick, l, rows, flush)?;
    }
    Ok(())
}

fn judge_list(
    tick: u64,
    list: &StandbySlotList,
    rows: &[SlotRow],
    flush: Lsn,
) -> Result<(), Violation> {
    let first = list.names().iter().find_map(|name| {
        let Some(slot) = rows.iter().find(|r| &r.slot_name == name) else {
            return Some((name, StandbySlotProblem::Missing));
        };
        if slot.slot_type == SlotType::Logical {
            return Some((name, StandbySlotProblem::Logical));
        }
        if slot.invalidation_reason.is_some() {
            return Some((name, StandbySlotProblem::Invalidated));
        }
        let flushed = slot
            .restart_lsn
            .is_some_and(|l| l != Lsn::INVALID && l >= flush);
        let waiting = match slot.active_pid {
            Some(_) => StandbySlotProblem::Behind,
            None => StandbySlotProblem::NoActivePid,
        };
        (!flushed).then_some((name, waiting))
    });
    let got = list.caught_up(rows, flush, false);
    let as_postgres = match (&got, first) {
        (Ok(()), None) => true,
        (Err(r), Some((name, problem))) if &r.slot == name && r.problem == problem => {
            worded(r, name, problem)
        }
        _ => false,
    };
    if !as_postgres {
        let texts = got
            .as_ref()
            .err()
            .map(|r| (r.message(), r.detail(), r.hint(), r.sqlstate()));
        return Err(fail(
            "walsender-report-true",
            format!(
                "tick {tick}: sending up to {flush} with {:?} the walsender reports {got:?} \
                 {texts:?}; the world's first unflushed listed slot is {first:?}",
                list.names()
            ),
        ));
    }
    Ok(())
}

/// Whether report `r` about `name` is worded as `StandbySlotsHaveCaughtup` in slot.c words
/// it: the words of each problem in message, DETAIL and HINT, each naming the slot, and the
/// problem's SQLSTATE (a setting naming what is not a usable physical slot is an invalid
/// parameter value; a slot that exists but cannot serve is not in the prerequisite state);
/// a slot merely behind, with its walsender attached, is waited for without a word.
fn worded(r: &StandbySlotReport, name: &str, problem: StandbySlotProblem) -> bool {
    let (message, detail, hint, sqlstate) = match problem {
        StandbySlotProblem::Behind => {
            return r.message().is_none() && r.detail().is_none() && r.hint().is_none();
        }
        StandbySlotProblem::Missing => (
            "does not exist",
            "waiting on the standby",
            "Create",
            "22023",
        ),
        StandbySlotProblem::Logical => (
            "cannot specify logical",
            "waiting for correction",
            "Remove the logical",
            "22023",
        ),
        StandbySlotProblem::Invalidated => (
            "has been invalidated",
            "waiting on the standby",
            "Drop and recreate",
            "55000",
        ),
        StandbySlotProblem::NoActivePid => (
            "does not have active_pid",
            "waiting on the standby",
            "Start the standby",
            "55000",
        ),
    };
    let quoted = format!("\"{name}\"");
    let says = |t: Option<String>, words: &str| {
        t.is_some_and(|t| t.contains(words) && t.contains(&quoted))
    };
    says(r.message(), message)
        && says(r.detail(), detail)
        && says(r.hint(), hint)
        && r.sqlstate() == sqlstate
}
