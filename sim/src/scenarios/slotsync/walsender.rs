//! What the primary's walsender says while `synchronized_standby_slots` holds it back
//! (`walsender-report-true`): the first listed standby slot, in the setting's order, that is
//! missing, logical, invalidated or has not flushed the WAL to send decides; each is reported
//! as PostgreSQL words it (message, DETAIL and HINT naming the slot), except one merely
//! behind with its walsender attached, which is waited for in silence; with every listed slot
//! caught up there is nothing to report.

use pgyard_slotsync::standby_slots::StandbySlotProblem;
use pgyard_slotsync::{SlotRow, SlotType, StandbySlotList};
use pgyard_types::Lsn;

use super::fail;
use crate::Violation;

/// Judges the walsender's report for sending up to `flush` with `list` over the primary's
/// slots `rows`.
pub(super) fn judge(
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
    let worded = match (&got, first) {
        (Ok(()), None) => true,
        (Err(r), Some((name, problem))) if &r.slot == name && r.problem == problem => {
            let quoted = format!("\"{name}\"");
            let names = |t: Option<String>| t.is_some_and(|t| t.contains(&quoted));
            match problem {
                StandbySlotProblem::Behind => {
                    r.message().is_none() && r.detail().is_none() && r.hint().is_none()
                }
                _ => {
                    let word = match problem {
                        StandbySlotProblem::Missing => "does not exist",
                        StandbySlotProblem::Logical => "logical",
                        StandbySlotProblem::Invalidated => "invalidated",
                        _ => "active_pid",
                    };
                    r.message().is_some_and(|m| m.contains(word))
                        && names(r.message())
                        && names(r.detail())
                        && names(r.hint())
                }
            }
        }
        _ => false,
    };
    if !worded {
        let texts = got
            .as_ref()
            .err()
            .map(|r| (r.message(), r.detail(), r.hint()));
        return Err(fail(
            "walsender-report-true",
            format!(
                "tick {tick}: sending up to {flush} the walsender reports {got:?} {texts:?}; \
                 the world's first unflushed listed slot is {first:?}"
            ),
        ));
    }
    Ok(())
}
