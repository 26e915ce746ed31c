//! What one sync call must leave behind, judged from the world alone (PostgreSQL's
//! `synchronize_slots` as its documentation and source describe it), not from the engine's
//! own reasoning. The loss invariants see only what a failover would lose; a sync that does
//! nothing at all loses nothing, since the check then never says ready. These rules see it.

use pgyard_slotsync::{Outcome, SlotRow, Standby};
use pgyard_types::Lsn;

use super::fail;
use crate::Violation;

/// Judges `out`, the result of a sync on standby `i` (`worker`: a worker cycle, else a
/// `pg_sync_replication_slots()` call) given the primary's `remote` rows and the standby's
/// `input`.
pub(super) fn sync_call(
    tick: u64,
    i: usize,
    worker: bool,
    remote: &[SlotRow],
    input: &Standby,
    out: &Outcome,
) -> Result<(), Violation> {
    let flush = input.flush_lsn();
    for local in out.slots_after.iter().filter(|s| s.synced) {
        let confirmed = local.confirmed_flush_lsn.unwrap_or(Lsn::INVALID);
        // Positions are copied from the primary's slot, and only once the standby has the
        // WAL up to them; both only ever move forward, so a synced slot is never ahead of
        // either.
        if confirmed > flush {
            return Err(fail(
                "synced-slot-within-standby-wal",
                format!(
                    "tick {tick}: standby{}'s synced slot {} has confirmed_flush {confirmed}, \
                     past the WAL it has flushed ({flush})",
                    i + 1,
                    local.slot_name
                ),
            ));
        }
        let theirs = remote.iter().find(|r| r.slot_name == local.slot_name);
        if let Some(r) = theirs.and_then(|r| r.confirmed_flush_lsn) {
            if confirmed > r {
                return Err(fail(
                    "synced-slot-behind-primary",
                    format!(
                        "tick {tick}: standby{}'s synced slot {} has confirmed_flush \
                         {confirmed}, ahead of the primary's ({r})",
                        i + 1,
                        local.slot_name
                    ),
                ));
            }
        }
    }
    if worker && out.error.is_none() {
        present_after_cycle(tick, i, remote, flush, out)?;
    }
    Ok(())
}

/// A worker cycle that ended without an error leaves a synced slot for every failover slot
/// of the primary that is complete, valid and within the WAL the standby has flushed: it
/// existed, or was created (temporary until the primary's slot passes what the standby can
/// reserve; the worker keeps a temporary slot, unlike the function, which drops it).
fn present_after_cycle(
    tick: u64,
    i: usize,
    remote: &[SlotRow],
    flush: Lsn,
    out: &Outcome,
) -> Result<(), Violation> {
    for r in remote {
        let complete = r.restart_lsn.is_some_and(|l| l != Lsn::INVALID)
            && r.catalog_xmin.is_some_and(|x| x.0 != 0);
        let Some(confirmed) = r.confirmed_flush_lsn.filter(|l| *l != Lsn::INVALID) else {
            continue;
        };
        let syncable = r.failover
            && !r.temporary
            && complete
            && r.invalidation_reason.is_none()
            && confirmed <= flush;
        if !syncable {
            continue;
        }
        let present = out
            .slots_after
            .iter()
            .any(|s| s.slot_name == r.slot_name && s.synced);
        if !present {
            return Err(fail(
                "synced-slot-present",
                format!(
                    "tick {tick}: a worker cycle on standby{} ended without error and without a \
                     synced slot {} (the primary's is valid, confirmed through {confirmed}, and \
                     the standby has flushed {flush})",
                    i + 1,
                    r.slot_name
                ),
            ));
        }
    }
    Ok(())
}
