//! What one sync call must leave behind, judged from the world alone (PostgreSQL's
//! `synchronize_slots` as its documentation and source describe it), not from the engine's
//! own reasoning. The loss invariants see only what a failover would lose; a sync that does
//! nothing at all loses nothing, since the check then never says ready. These rules see it.

use pgyard_slotsync::{Action, Outcome, SlotRow, SlotType, Standby, SyncError};
use pgyard_types::Lsn;

use super::{fail, settings};
use crate::Violation;

/// One sync call as the rules see it.
struct Call<'a> {
    tick: u64,
    /// The standby (from 0).
    i: usize,
    /// The primary's slots.
    remote: &'a [SlotRow],
    /// The standby as the engine read it.
    input: &'a Standby,
    /// Its slots before the call.
    before: &'a [SlotRow],
    out: &'a Outcome,
}

/// Judges `out`, the result of a sync on standby `i` (`worker`: a worker cycle, else a
/// `pg_sync_replication_slots()` call) given the primary's `remote` rows, the standby's
/// `input` and its slots `before` the call.
pub(super) fn sync_call(
    tick: u64,
    i: usize,
    worker: bool,
    remote: &[SlotRow],
    input: &Standby,
    before: &[SlotRow],
    out: &Outcome,
) -> Result<(), Violation> {
    let flush = input.flush_lsn();
    let call = Call {
        tick,
        i,
        remote,
        input,
        before,
        out,
    };
    wal_kept(tick, i, input, out)?;
    forward_only(tick, i, before, out)?;
    error_is_true(&call)?;
    catches_up(&call)?;
    settings_follow(&call)?;
    temporary_only_while_ahead(&call)?;
    drops_only_obsolete(&call)?;
    for local in out.slots_after.iter().filter(|s| s.synced) {
        // Only the primary's logical failover slots are synced (and this world never drops
        // one, so no synced slot is left over from one either).
        let source = remote.iter().find(|r| r.slot_name == local.slot_name);
        if !source.is_some_and(|r| r.failover && r.slot_type == SlotType::Logical) {
            return Err(fail(
                "synced-only-failover-slots",
                format!(
                    "tick {tick}: standby{} has a synced slot {}, and the primary's slot of \
                     that name is {source:?}",
                    i + 1,
                    local.slot_name
                ),
            ));
        }
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

/// A valid synced slot's `restart_lsn` lies in WAL the standby still has: a new slot reserves
/// only WAL that is there, and restartpoints keep what valid slots need (or invalidate them).
fn wal_kept(tick: u64, i: usize, input: &Standby, out: &Outcome) -> Result<(), Violation> {
    let Some(oldest) = input.oldest_wal_lsn else {
        return Ok(());
    };
    let seg = input.wal_segment_size_bytes.max(1);
    for local in &out.slots_after {
        let restart = local.restart_lsn.filter(|l| *l != Lsn::INVALID);
        let Some(restart) = restart.filter(|_| local.synced && local.invalidation_reason.is_none())
        else {
            continue;
        };
        if restart.0 / seg < oldest.0 / seg {
            return Err(fail(
                "synced-slot-wal-kept",
                format!(
                    "tick {tick}: standby{}'s valid synced slot {} has restart_lsn {restart}, in \
                     a segment before its oldest WAL ({oldest})",
                    i + 1,
                    local.slot_name
                ),
            ));
        }
    }
    Ok(())
}

/// A persistent, valid synced slot that the call neither dropped nor created keeps or
/// advances its `restart_lsn` and `confirmed_flush_lsn`: an update never takes the primary's
/// positions when they precede the slot's own.
fn forward_only(tick: u64, i: usize, before: &[SlotRow], out: &Outcome) -> Result<(), Violation> {
    let steady = |s: &&SlotRow| s.synced && !s.temporary && s.invalidation_reason.is_none();
    for old in before.iter().filter(steady) {
        let name = &old.slot_name;
        let remade = out.actions.iter().any(|a| match a {
            Action::Drop { slot, .. } | Action::Create { slot, .. } => slot == name,
            _ => false,
        });
        let now = out
            .slots_after
            .iter()
            .filter(steady)
            .find(|s| &s.slot_name == name);
        let Some(now) = now.filter(|_| !remade) else {
            continue;
        };
        let back = |a: Option<Lsn>, b: Option<Lsn>| matches!((a, b), (Some(a), Some(b)) if b < a && b != Lsn::INVALID);
        if back(old.restart_lsn, now.restart_lsn)
            || back(old.confirmed_flush_lsn, now.confirmed_flush_lsn)
        {
            return Err(fail(
                "synced-slot-positions-forward",
                format!(
                    "tick {tick}: standby{}'s synced slot {name} went back from restart_lsn \
                     {:?} / confirmed_flush {:?} to {:?} / {:?}",
                    i + 1,
                    old.restart_lsn,
                    old.confirmed_flush_lsn,
                    now.restart_lsn,
                    now.confirmed_flush_lsn
                ),
            ));
        }
    }
    Ok(())
}

/// An error that ends a sync says something about the slots and the WAL; what it says must
/// be so in the world (a sync that fails for no reason syncs nothing, and no loss invariant
/// sees that).
fn error_is_true(c: &Call) -> Result<(), Violation> {
    let (tick, i, remote, input, before, out) = (c.tick, c.i, c.remote, c.input, c.before, c.out);
    let Some(e) = &out.error else {
        return Ok(());
    };
    let theirs = |name: &str| {
        remote
            .iter()
            .find(|r| r.slot_name == name)
            .and_then(|r| r.confirmed_flush_lsn)
    };
    let true_ = match e {
        // The primary's slot is confirmed behind the synced slot.
        SyncError::LocalAhead {
            slot,
            local,
            remote,
        } => {
            let ours = before.iter().find(|s| &s.slot_name == slot);
            remote < local
                && theirs(slot) == Some(*remote)
                && ours.and_then(|s| s.confirmed_flush_lsn) == Some(*local)
        }
        // The primary's slot is confirmed past what the standby has flushed.
        SyncError::AheadOfStandby {
            slot,
            remote,
            standby,
        } => remote > standby && theirs(slot) == Some(*remote) && *standby == input.flush_lsn(),
        // The WAL a new slot needs is gone: it needs at least the primary's `restart_lsn`
        // onwards, so that segment must precede the standby's oldest.
        SyncError::WalRemovedConcurrently(slot) => {
            let seg = input.wal_segment_size_bytes.max(1);
            let restart = remote
                .iter()
                .find(|r| &r.slot_name == slot)
                .and_then(|r| r.restart_lsn);
            match (restart, input.oldest_wal_lsn) {
                (Some(r), Some(o)) => r.0 / seg < o.0 / seg,
                _ => true,
            }
        }
        // The standby's slots fill `max_replication_slots`.
        SyncError::AllSlotsInUse => input
            .max_replication_slots
            .is_some_and(|m| out.slots_after.len() >= m),
        _ => true,
    };
    if true_ && worded(e) {
        return Ok(());
    }
    Err(fail(
        "sync-errors-are-true",
        format!(
            "tick {tick}: a sync on standby{} failed with {e:?} (SQLSTATE {}, DETAIL {:?}, \
             HINT {:?}), which the world or the server's wording contradicts",
            i + 1,
            e.sqlstate(),
            e.detail(),
            e.hint()
        ),
    ))
}

/// Whether a sync error is reported as slotsync.c and slot.c report it: the SQLSTATE of its
/// kind, a DETAIL only where the server gives one (the two positions of a slot confirmed
/// ahead of the primary's, or of a decoding that ended elsewhere), and a HINT only for a
/// server out of replication slots.
fn worded(e: &SyncError) -> bool {
    let condition = match e {
        SyncError::SlotActive { .. } => "object_in_use",
        SyncError::AllSlotsInUse => "configuration_limit_exceeded",
        SyncError::RemoteIsStandby => "feature_not_supported",
        SyncError::ConninfoSyntax(_) => "syntax_error",
        SyncError::LocalAhead { .. }
        | SyncError::ConfirmedFlushDiffers { .. }
        | SyncError::WalRemovedConcurrently(_) => "internal_error",
        SyncError::NotInRecovery | SyncError::PromotionTriggered | SyncError::Concurrent => {
            "object_not_in_prerequisite_state"
        }
        e if settings::is_setting_error(e) => "invalid_parameter_value",
        _ => "object_not_in_prerequisite_state",
    };
    // errcodes.txt: the condition names and their codes.
    let sqlstate = [
        ("object_in_use", "55006"),
        ("configuration_limit_exceeded", "53400"),
        ("feature_not_supported", "0A000"),
        ("syntax_error", "42601"),
        ("internal_error", "XX000"),
        ("invalid_parameter_value", "22023"),
        ("object_not_in_prerequisite_state", "55000"),
    ]
    .iter()
    .find(|(name, _)| *name == condition)
    .map(|(_, code)| *code);
    let detail_ok = match e {
        SyncError::LocalAhead { local, remote, .. }
        | SyncError::ConfirmedFlushDiffers { local, remote, .. } => e
            .detail()
            .is_some_and(|d| d.contains(&local.to_string()) && d.contains(&remote.to_string())),
        _ => e.detail().is_none(),
    };
    let hint_ok = match e {
        SyncError::AllSlotsInUse => e
            .hint()
            .is_some_and(|h| h.contains("max_replication_slots")),
        _ => e.hint().is_none(),
    };
    Some(e.sqlstate()) == sqlstate && detail_ok && hint_ok
}

/// A sync that ended without an error leaves each persistent, valid synced slot at its
/// primary slot's positions, unless the primary's precede it (a restart LSN or catalog xmin
/// behind the synced slot's, which the server skips): `update_local_synced_slot` copies
/// them. The world gives the engine no serialized snapshots, so it copies rather than
/// decodes; the rule holds only then.
fn catches_up(c: &Call) -> Result<(), Violation> {
    let (tick, i, input, out) = (c.tick, c.i, c.input, c.out);
    if out.error.is_some() || input.serialized_snapshots.is_some() {
        return Ok(());
    }
    for (old, r) in followed(c) {
        let name = &old.slot_name;
        let want = (r.restart_lsn, r.confirmed_flush_lsn, r.catalog_xmin);
        let Some(now) = out.slots_after.iter().find(|s| &s.slot_name == name) else {
            continue;
        };
        let at = (now.restart_lsn, now.confirmed_flush_lsn, now.catalog_xmin);
        if at != want {
            return Err(fail(
                "synced-slot-catches-up",
                format!(
                    "tick {tick}: after a sync without error standby{}'s synced slot {name} is \
                     at restart/confirmed/catalog_xmin {at:?}, the primary's at {want:?} (none \
                     behind the synced slot's {:?}/{:?})",
                    i + 1,
                    old.restart_lsn,
                    old.catalog_xmin
                ),
            ));
        }
    }
    Ok(())
}

/// The persistent, valid synced slots before the call whose primary slot the sync follows:
/// a usable failover slot (valid, positions set, confirmed no further than the standby
/// flushed) that is not behind the synced slot (`restart_lsn` or `catalog_xmin`).
fn followed<'a>(c: &Call<'a>) -> impl Iterator<Item = (&'a SlotRow, &'a SlotRow)> + 'a {
    let (remote, before) = (c.remote, c.before);
    let flush = c.input.flush_lsn();
    let steady = |s: &&SlotRow| s.synced && !s.temporary && s.invalidation_reason.is_none();
    before.iter().filter(steady).filter_map(move |old| {
        let r = remote.iter().find(|r| r.slot_name == old.slot_name)?;
        let (rr, rc, rx) = (r.restart_lsn?, r.confirmed_flush_lsn?, r.catalog_xmin?);
        let usable = r.failover
            && !r.temporary
            && r.invalidation_reason.is_none()
            && rr != Lsn::INVALID
            && rx.0 != 0
            && rc <= flush;
        let behind = rr < old.restart_lsn.unwrap_or(Lsn::INVALID)
            || rx.0 < old.catalog_xmin.map_or(0, |x| x.0);
        (usable && !behind).then_some((old, r))
    })
}

/// `settings-follow`: a sync without error leaves each persistent, valid synced slot with its
/// primary slot's `plugin`, `two_phase` and `two_phase_at` (PostgreSQL 18 syncs all three),
/// whether its positions were copied or decoded, unless the sync skipped the slot: its primary
/// slot unusable, confirmed past the standby's flush, or behind the synced slot (18 then
/// returns before it compares the settings).
fn settings_follow(c: &Call) -> Result<(), Violation> {
    let (tick, i, out) = (c.tick, c.i, c.out);
    if out.error.is_some() {
        return Ok(());
    }
    let steady = |s: &&SlotRow| s.synced && !s.temporary && s.invalidation_reason.is_none();
    for (old, r) in followed(c) {
        let name = &old.slot_name;
        let Some(now) = out
            .slots_after
            .iter()
            .filter(steady)
            .find(|s| &s.slot_name == name)
        else {
            continue;
        };
        let want = (&r.plugin, r.two_phase, r.two_phase_at);
        let got = (&now.plugin, now.two_phase, now.two_phase_at);
        if got != want {
            return Err(fail(
                "settings-follow",
                format!(
                    "tick {tick}: after a sync without error standby{}'s synced slot {name} has \
                     plugin/two_phase/two_phase_at {got:?}, the primary's {want:?}",
                    i + 1
                ),
            ));
        }
    }
    Ok(())
}

/// A synced slot stays temporary only while its reserved positions are ahead of its primary
/// slot's (a `restart_lsn` or `catalog_xmin` the primary's has not reached) or the primary's
/// is confirmed past what the standby flushed: otherwise the update copies the positions
/// and, with a consistent snapshot (always, when positions are copied), persists the slot in
/// the same sync.
fn temporary_only_while_ahead(c: &Call) -> Result<(), Violation> {
    let (tick, i, remote, input, out) = (c.tick, c.i, c.remote, c.input, c.out);
    if out.error.is_some() || input.serialized_snapshots.is_some() {
        return Ok(());
    }
    let pending = out
        .slots_after
        .iter()
        .filter(|s| s.synced && s.temporary && s.invalidation_reason.is_none());
    for now in pending {
        let Some(r) = remote.iter().find(|r| r.slot_name == now.slot_name) else {
            continue;
        };
        // A worker skips (with a LOG line) a slot confirmed past what the standby flushed.
        if r.confirmed_flush_lsn.is_none_or(|c| c > input.flush_lsn()) {
            continue;
        }
        let ahead_lsn = match (now.restart_lsn, r.restart_lsn) {
            (Some(l), Some(p)) => l > p,
            _ => true,
        };
        let ahead_xmin = match (now.catalog_xmin, r.catalog_xmin) {
            (Some(l), Some(p)) => l.0 > p.0,
            _ => true,
        };
        if !ahead_lsn && !ahead_xmin {
            return Err(fail(
                "synced-slot-persisted-once-caught-up",
                format!(
                    "tick {tick}: after a sync without error standby{}'s synced slot {} is \
                     still temporary at restart {:?} / catalog_xmin {:?}, which the primary's \
                     slot ({:?} / {:?}) has reached",
                    i + 1,
                    now.slot_name,
                    now.restart_lsn,
                    now.catalog_xmin,
                    r.restart_lsn,
                    r.catalog_xmin
                ),
            ));
        }
    }
    Ok(())
}

/// A sync drops a persistent synced slot only when its primary slot is gone, is not (or not
/// yet) a complete persistent failover slot, or is valid while the synced slot was
/// invalidated on the standby (the sync then re-creates it).
fn drops_only_obsolete(c: &Call) -> Result<(), Violation> {
    let (tick, i, remote, before, out) = (c.tick, c.i, c.remote, c.before, c.out);
    for a in &out.actions {
        let Action::Drop { slot, .. } = a else {
            continue;
        };
        let Some(r) = remote.iter().find(|r| &r.slot_name == slot) else {
            continue;
        };
        let complete = r.restart_lsn.is_some_and(|l| l != Lsn::INVALID)
            && r.confirmed_flush_lsn.is_some_and(|l| l != Lsn::INVALID)
            && r.catalog_xmin.is_some_and(|x| x.0 != 0);
        if !r.failover || r.temporary || !complete {
            continue;
        }
        // The function drops the temporary synced slots it leaves (they are not judged here).
        let Some(ours) = before
            .iter()
            .find(|s| &s.slot_name == slot && s.synced && !s.temporary)
        else {
            continue;
        };
        if !(ours.invalidation_reason.is_some() && r.invalidation_reason.is_none()) {
            return Err(fail(
                "synced-slot-dropped-only-when-obsolete",
                format!(
                    "tick {tick}: a sync on standby{} dropped {slot}, whose primary slot is a \
                     complete failover slot (invalidated: {:?}) and whose synced slot was \
                     {:?}",
                    i + 1,
                    r.invalidation_reason,
                    ours.invalidation_reason
                ),
            ));
        }
    }
    Ok(())
}
