//! The failover-readiness check (`pgyard slotsync check`): for each failover slot of the
//! primary, would a subscriber carry on without losing or repeating anything if the standby
//! were promoted now, and if not, why not.
//!
//! A slot is ready exactly when, on the standby, it is synced, persistent (not temporary) and
//! valid, and no WAL a subscriber has received from the primary (the slot's walsender
//! `sent_lsn`, else its `confirmed_flush_lsn`) lies beyond the standby's replay position —
//! the condition of PostgreSQL's "Logical Replication Failover" documentation — and, when the
//! standby runs with `hot_standby_feedback` off, it has replayed everything it received
//! (promotion replays the rest first, and without feedback a catalog removal in it would
//! invalidate the slot: the simulator's world found this). Warnings name what may make a
//! ready slot unready later; they change neither `ready` nor the exit status.

use pgyard_types::{Lsn, Xid};

use crate::engine::{sync_cycle, sync_function, Action, Caller, Outcome};
use crate::error::SyncError;
use crate::input::{Standby, WalLevel};
use crate::row::{xid_precedes, SlotRow, SlotType};
use crate::snapshot::Snapshot;
use crate::standby_slots::StandbySlotList;

/// The verdict on one slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// The slot's name.
    pub slot: String,
    /// Whether a subscriber of this slot survives promoting the standby now.
    pub ready: bool,
    /// Why not, in words (`None` when ready).
    pub reason: Option<String>,
    /// What does not change `ready` but should be fixed.
    pub warnings: Vec<String>,
    /// What the next sync would do to this slot (`None` without the primary's slots).
    pub next_sync: Option<NextSync>,
}

/// The engine's plan for one slot: what the next sync would do to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NextSync {
    /// Who syncs: the worker when `sync_replication_slots` is on, else the SQL function.
    pub caller: Caller,
    /// The cycle's actions on this slot, in order.
    pub actions: Vec<Action>,
    /// The error that would end the cycle (it may concern another slot).
    pub error: Option<SyncError>,
}

/// The whole answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// One verdict per failover slot, in the primary's view order.
    pub slots: Vec<Verdict>,
    /// Warnings that concern every slot (also repeated in each verdict).
    pub warnings: Vec<String>,
    /// What could not be checked (no primary, unreadable settings).
    pub unchecked: Vec<String>,
}

impl Report {
    /// `pg_isready`'s convention: 0 when every slot is ready, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.slots.iter().any(|v| !v.ready))
    }

    /// The text form: a line per slot, its reason and warnings indented below.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if self.slots.is_empty() {
            out.push_str("no failover slots\n");
        }
        for v in &self.slots {
            match &v.reason {
                None => out.push_str(&format!("{}: ready\n", v.slot)),
                Some(r) => out.push_str(&format!("{}: NOT READY: {r}\n", v.slot)),
            }
            for w in v.warnings.iter().filter(|w| !self.warnings.contains(w)) {
                out.push_str(&format!("  warning: {w}\n"));
            }
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        for u in &self.unchecked {
            out.push_str(&format!("not checked: {u}\n"));
        }
        out
    }
}

/// The verdicts for a snapshot (with or without the primary's side).
pub fn check(snap: &Snapshot) -> Report {
    let sb = &snap.input.standby;
    let conninfo_readable = !snap.notes.iter().any(|n| n.contains("primary_conninfo"));
    let mut warnings = prerequisite_warnings(sb, conninfo_readable);
    let mut unchecked: Vec<String> = snap.notes.clone();
    let local = &snap.input.local_slots;
    let Some(primary) = &snap.primary else {
        unchecked.push(
            "whether subscribers received WAL the standby has not replayed, and whether the \
             primary has failover slots the standby lacks (no primary)"
                .to_owned(),
        );
        let slots = local
            .iter()
            .filter(|l| l.synced && l.slot_type == SlotType::Logical)
            .map(|l| {
                verdict(
                    &l.slot_name,
                    None,
                    Some(l),
                    Sent::Unknown,
                    sb,
                    &warnings,
                    None,
                )
            })
            .collect();
        return Report {
            slots,
            warnings,
            unchecked,
        };
    };
    warnings.extend(primary_warnings(snap, &primary.synchronized_standby_slots));
    let remote = &snap.input.remote_slots;
    let caller = if sb.sync_replication_slots {
        Caller::Worker
    } else {
        Caller::Function
    };
    let outcome = match caller {
        Caller::Worker => sync_cycle(remote, local, sb, caller),
        Caller::Function => sync_function(remote, local, sb),
    };
    let slots = remote
        .iter()
        .filter(|r| r.slot_type == SlotType::Logical && r.failover)
        .map(|r| {
            let name = &r.slot_name;
            let l = local.iter().find(|l| &l.slot_name == name);
            let next = next_sync(name, &outcome, caller);
            let sent = match primary.sent_lsn.get(name) {
                Some(l) => Sent::At(*l),
                None if primary.sent_hidden.contains(name) => Sent::Hidden,
                None => Sent::NoWalsender,
            };
            verdict(name, Some(r), l, sent, sb, &warnings, Some(next))
        })
        .collect();
    Report {
        slots,
        warnings,
        unchecked,
    }
}

/// What the slot's walsender has sent, as far as the snapshot tells.
#[derive(Clone, Copy, Debug)]
enum Sent {
    /// Its `sent_lsn`.
    At(Lsn),
    /// No walsender is active: the slot's `confirmed_flush_lsn` is what subscribers have.
    NoWalsender,
    /// A walsender is active but the role may not see its `sent_lsn`.
    Hidden,
    /// No primary was asked.
    Unknown,
}

fn verdict(
    name: &str,
    remote: Option<&SlotRow>,
    local: Option<&SlotRow>,
    sent: Sent,
    sb: &Standby,
    warnings: &[String],
    next_sync: Option<NextSync>,
) -> Verdict {
    let reason = not_ready_reason(remote, local, sent, sb);
    Verdict {
        slot: name.to_owned(),
        ready: reason.is_none(),
        reason,
        warnings: warnings.to_vec(),
        next_sync,
    }
}

/// The first thing that stops a subscriber of this slot from carrying on after promotion.
fn not_ready_reason(
    remote: Option<&SlotRow>,
    local: Option<&SlotRow>,
    sent: Sent,
    sb: &Standby,
) -> Option<String> {
    if let Some(cause) = remote.and_then(|r| r.invalidation_reason) {
        return Some(format!(
            "invalidated on the primary ({cause}): no subscriber can use it, before or after \
             promotion"
        ));
    }
    let Some(l) = local else {
        return Some("not synced yet: the standby has no slot of this name".to_owned());
    };
    if !l.synced {
        return Some(
            "the standby's slot of this name was created on the standby (synced = false); \
             slot synchronization stops at it instead of replacing it"
                .to_owned(),
        );
    }
    if let Some(cause) = l.invalidation_reason {
        return Some(format!(
            "invalidated on the standby ({cause}: {}); the next sync drops and re-creates it, \
             starting over as a temporary slot",
            cause_words(cause)
        ));
    }
    if l.temporary {
        return Some(temporary_reason(remote, l));
    }
    let received =
        match (sent, remote) {
            (Sent::At(s), _) => Some(("sent", s)),
            (Sent::NoWalsender, Some(r)) => r.confirmed_flush_lsn.map(|c| ("confirmed", c)),
            (Sent::Hidden, _) => return Some(
                "cannot tell what the slot's walsender has sent subscribers (its sent_lsn needs \
                 pg_read_all_stats), so not whether the standby has it"
                    .to_owned(),
            ),
            _ => None,
        };
    let replay = sb.replay_lsn.unwrap_or(Lsn::INVALID);
    if let Some(reason) = unprotected_replay(sb, replay) {
        return Some(reason);
    }
    if let Some((how, at)) = received.filter(|(_, at)| *at > replay) {
        let what = if how == "sent" {
            "the primary has sent subscribers of this slot WAL up to"
        } else {
            "subscribers of this slot have confirmed WAL up to"
        };
        return Some(format!(
            "the standby is behind what subscribers received: {what} {at}, the standby has \
             replayed up to {replay} ({} bytes behind); those changes would be missing after \
             promotion",
            at.0 - replay.0
        ));
    }
    None
}

/// Promotion first replays everything the standby received. With `hot_standby_feedback` on,
/// the primary keeps the catalog rows the standby's synced slots need, so nothing in that WAL
/// conflicts with them; with it off, a catalog removal in it would invalidate the slot during
/// promotion, and the snapshot cannot show whether one is there.
fn unprotected_replay(sb: &Standby, replay: Lsn) -> Option<String> {
    if sb.hot_standby_feedback {
        return None;
    }
    match sb.receive_lsn {
        Some(receive) if receive <= replay => None,
        Some(receive) => Some(format!(
            "hot_standby_feedback is off and the standby has received {} bytes of WAL it has \
             not replayed: promotion replays them first, and a catalog removal among them \
             (which nothing held back for this slot) would invalidate it",
            receive.0 - replay.0
        )),
        None => Some(
            "hot_standby_feedback is off and the standby's receive position is unknown: \
             promotion may replay WAL whose catalog removals invalidate this slot"
                .to_owned(),
        ),
    }
}

fn temporary_reason(remote: Option<&SlotRow>, l: &SlotRow) -> String {
    let l_restart = l.restart_lsn.unwrap_or(Lsn::INVALID);
    let l_xmin = l.catalog_xmin.unwrap_or(Xid(0));
    let Some(r) = remote else {
        return format!(
            "temporary: not yet persisted (restart_lsn {l_restart}, catalog_xmin {}); a \
             temporary synced slot is dropped at promotion",
            l_xmin.0
        );
    };
    let r_restart = r.restart_lsn.unwrap_or(Lsn::INVALID);
    let r_xmin = r.catalog_xmin.unwrap_or(Xid(0));
    if r_restart < l_restart || xid_precedes(r_xmin, l_xmin) {
        format!(
            "temporary: the primary's slot needs WAL from {r_restart} and catalog xmin {} \
             that the standby has already passed (its synced slot holds {l_restart} and \
             catalog xmin {}); it is persisted once the primary's slot moves past them, and \
             dropped at promotion until then",
            r_xmin.0, l_xmin.0
        )
    } else {
        format!(
            "temporary: decoding the standby's WAL has not yet reached a consistent point \
             (restart_lsn {l_restart}); a temporary synced slot is dropped at promotion"
        )
    }
}

fn cause_words(cause: crate::row::InvalidationCause) -> &'static str {
    use crate::row::InvalidationCause as C;
    match cause {
        C::WalRemoved => "the WAL it needed was removed (max_slot_wal_keep_size)",
        C::RowsRemoved => "catalog rows it needed were removed (is hot_standby_feedback on?)",
        C::WalLevelInsufficient => "the primary's wal_level went below logical",
        C::IdleTimeout => "idle longer than idle_replication_slot_timeout",
    }
}

/// The standby settings slot synchronization needs, each failing one in the server's words.
fn prerequisite_warnings(sb: &Standby, conninfo_readable: bool) -> Vec<String> {
    let mut w = Vec::new();
    if !sb.in_recovery {
        w.push(SyncError::NotInRecovery.to_string());
    }
    let checks = [
        (sb.wal_level < WalLevel::Logical, SyncError::WalLevelTooLow),
        (
            sb.primary_slot_name.is_empty(),
            SyncError::PrimarySlotNameUnset,
        ),
        (!sb.hot_standby_feedback, SyncError::HotStandbyFeedbackOff),
    ];
    w.extend(
        checks
            .into_iter()
            .filter(|(bad, _)| *bad)
            .map(|(_, e)| e.to_string()),
    );
    // An unreadable primary_conninfo (no pg_read_all_settings) reads as empty; the snapshot's
    // notes say so instead.
    if sb.primary_conninfo.is_empty() {
        if conninfo_readable {
            w.push(SyncError::PrimaryConninfoUnset.to_string());
        }
    } else {
        if let Err(e) = crate::engine::dbname_from_conninfo(&sb.primary_conninfo) {
            w.push(e.to_string());
        }
    }
    if !sb.sync_replication_slots {
        w.push(
            "sync_replication_slots is off on the standby: nothing syncs unless someone calls \
             pg_sync_replication_slots()"
                .to_owned(),
        );
    }
    w
}

fn primary_warnings(snap: &Snapshot, list: &str) -> Vec<String> {
    let sb = &snap.input.standby;
    let mut w = Vec::new();
    if sb.primary_in_recovery {
        w.push(SyncError::RemoteIsStandby.to_string());
    }
    let own = &sb.primary_slot_name;
    if !own.is_empty()
        && !snap
            .input
            .remote_slots
            .iter()
            .any(|r| r.slot_type == SlotType::Physical && &r.slot_name == own)
    {
        w.push(SyncError::PrimarySlotMissing(own.clone()).to_string());
    }
    let listed = StandbySlotList::parse(list)
        .map(|l| l.names().iter().any(|n| n == own))
        .unwrap_or(false);
    if own.is_empty() {
        w.push(
            "the standby streams without a slot (primary_slot_name is empty), so the primary's \
             synchronized_standby_slots cannot hold subscribers back for it"
                .to_owned(),
        );
    } else if !listed {
        w.push(format!(
            "the standby's slot \"{own}\" is not in the primary's synchronized_standby_slots, \
             so subscribers may receive changes before the standby does"
        ));
    }
    w
}

/// The engine's plan for one slot.
fn next_sync(name: &str, outcome: &Outcome, caller: Caller) -> NextSync {
    NextSync {
        caller,
        actions: outcome
            .actions
            .iter()
            .filter(|a| a.slot() == name)
            .cloned()
            .collect(),
        error: outcome.error.clone(),
    }
}
