//! What a sync's action list must say, judged against the slots before and after it: an
//! `Update` names exactly the positions and settings that changed, with their new values;
//! the `updated` flag (which sets the worker's naptime) is true exactly when a slot was
//! created, persisted or invalidated, or a persistent one updated (`synchronize_one_slot`'s
//! `slot_updated`); and a `pg_sync_replication_slots()` call leaves no
//! temporary synced slot behind (it drops the ones it could not persist).

use pgyard_slotsync::{Action, Change, DropReason, Outcome, SlotRow};

use super::fail;
use crate::Violation;

/// Judges the actions of a sync on standby `i` (`worker`: a worker cycle).
pub(super) fn judge(
    tick: u64,
    i: usize,
    worker: bool,
    before: &[SlotRow],
    out: &Outcome,
) -> Result<(), Violation> {
    let bad = |invariant: &'static str, what: String| {
        Err(fail(
            invariant,
            format!("tick {tick}: a sync on standby{}: {what}", i + 1),
        ))
    };
    // A temporary slot's update counts only once it is persisted (`Persist`).
    let was_persistent =
        |slot: &String| before.iter().any(|s| &s.slot_name == slot && !s.temporary);
    let changed_something = out.actions.iter().any(|a| match a {
        Action::Create { .. } | Action::Persist { .. } | Action::Invalidate { .. } => true,
        Action::Update { slot, .. } => was_persistent(slot),
        _ => false,
    });
    if out.updated != changed_something {
        return bad(
            "sync-updated-flag-true",
            format!(
                "updated is {}, its actions are {:?}",
                out.updated, out.actions
            ),
        );
    }
    if !worker {
        if let Some(s) = out.slots_after.iter().find(|s| s.synced && s.temporary) {
            return bad(
                "function-leaves-no-temporary-slot",
                format!("the function left {} temporary", s.slot_name),
            );
        }
    }
    // Only a slot that is still temporary is dropped as not sync-ready: one persistent
    // before the call, or persisted in it, stays (unless it was dropped and made again).
    let mut temporary: Vec<(&str, bool)> = before
        .iter()
        .filter(|s| s.synced)
        .map(|s| (s.slot_name.as_str(), s.temporary))
        .collect();
    for a in &out.actions {
        let state = |t: &mut Vec<(&str, bool)>, slot: &str| t.retain(|(n, _)| *n != slot);
        match a {
            Action::Create { slot, .. } => {
                state(&mut temporary, slot);
                temporary.push((slot, true));
            }
            Action::Persist { slot } => {
                state(&mut temporary, slot);
                temporary.push((slot, false));
            }
            Action::Drop { slot, reason, .. } => {
                let was_temporary = temporary.iter().any(|(n, t)| n == slot && *t);
                if *reason == DropReason::NotSyncReady && !was_temporary {
                    return bad(
                        "function-leaves-no-temporary-slot",
                        format!(
                            "{slot} was dropped as not sync-ready, but it is persistent: {a:?}"
                        ),
                    );
                }
                state(&mut temporary, slot);
            }
            _ => {}
        }
    }
    for a in &out.actions {
        let Action::Update { slot, set, .. } = a else {
            continue;
        };
        let remade = out.actions.iter().any(|b| match b {
            Action::Create { slot: s, .. } | Action::Drop { slot: s, .. } => s == slot,
            _ => false,
        });
        let updates = out
            .actions
            .iter()
            .filter(|b| matches!(b, Action::Update { slot: s, .. } if s == slot))
            .count();
        let old = before.iter().find(|s| &s.slot_name == slot);
        let new = out.slots_after.iter().find(|s| &s.slot_name == slot);
        let (Some(old), Some(new)) = (old, new) else {
            continue;
        };
        if remade || updates != 1 {
            continue;
        }
        let expected = differences(old, new);
        if !same_changes(set, &expected) {
            return bad(
                "update-says-what-changed",
                format!("the update of {slot} says {set:?}; the slot changed {expected:?}"),
            );
        }
    }
    Ok(())
}

/// The columns that differ between `old` and `new`, with their new values.
fn differences(old: &SlotRow, new: &SlotRow) -> Vec<Change> {
    let mut d = Vec::new();
    if old.restart_lsn != new.restart_lsn {
        d.extend(new.restart_lsn.map(Change::RestartLsn));
    }
    if old.confirmed_flush_lsn != new.confirmed_flush_lsn {
        d.extend(new.confirmed_flush_lsn.map(Change::ConfirmedFlushLsn));
    }
    if old.catalog_xmin != new.catalog_xmin {
        d.extend(new.catalog_xmin.map(Change::CatalogXmin));
    }
    if old.plugin != new.plugin {
        d.push(Change::Plugin(new.plugin.clone()));
    }
    if old.datoid != new.datoid || old.database != new.database {
        d.push(Change::Database {
            datoid: new.datoid,
            database: new.database.clone(),
        });
    }
    if old.two_phase != new.two_phase {
        d.push(Change::TwoPhase(new.two_phase));
    }
    if old.two_phase_at != new.two_phase_at {
        d.push(Change::TwoPhaseAt(new.two_phase_at));
    }
    if old.failover != new.failover {
        d.push(Change::Failover(new.failover));
    }
    d
}

/// The same changes, in any order.
fn same_changes(said: &[Change], expected: &[Change]) -> bool {
    said.len() == expected.len() && said.iter().all(|c| expected.contains(c))
}
