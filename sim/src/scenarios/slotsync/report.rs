//! What the failover-readiness check must answer, judged from the snapshot it was given by
//! the rule PostgreSQL's "Logical Replication Failover" documentation states, not by the
//! check's own code: a failover slot is ready exactly when the standby's slot of that name is
//! synced, persistent and valid, the primary's is valid, and nothing its subscribers received
//! (the walsender's `sent_lsn`, or the slot's `confirmed_flush_lsn` when no walsender runs)
//! lies past the standby's replay position, and, with `hot_standby_feedback` off, nothing
//! received is left to replay. `ready-means-lossless` sees a check that says
//! ready too often; these rules also see one that says it too rarely, verdicts for slots that
//! are not failover slots, a wrong exit status, and warnings the world does not call for.

use pgyard_slotsync::check::Report;
use pgyard_slotsync::snapshot::Snapshot;
use pgyard_slotsync::SlotType;
use pgyard_types::Lsn;

use super::fail;
use super::reason;
use super::settings::{warning_key, Wrong};
use crate::Violation;

/// Judges `report`, the check of `snap` for standby `i`, whose setting `wrong` (if any) the
/// world set wrong; `listed`: the primary's `synchronized_standby_slots` names its slot
/// (the world knows which names it wrote, however it spelled them).
pub(super) fn judge(
    tick: u64,
    i: usize,
    snap: &Snapshot,
    report: &Report,
    (wrong, listed): (Option<Wrong>, bool),
) -> Result<(), Violation> {
    let bad = |what: String| {
        Err(fail(
            "check-report-true",
            format!("tick {tick}: the check of standby{}: {what}", i + 1),
        ))
    };
    let failover: Vec<&str> = snap
        .input
        .remote_slots
        .iter()
        .filter(|r| r.slot_type == SlotType::Logical && r.failover)
        .map(|r| r.slot_name.as_str())
        .collect();
    let named: Vec<&str> = report.slots.iter().map(|v| v.slot.as_str()).collect();
    if named != failover {
        return bad(format!(
            "verdicts for {named:?}, the primary's failover slots are {failover:?}"
        ));
    }
    for v in &report.slots {
        let expected = ready(snap, &v.slot);
        if v.ready != expected || v.reason.is_none() != v.ready {
            return bad(format!(
                "{} ready {} (reason {:?}), the rule says {expected}",
                v.slot, v.ready, v.reason
            ));
        }
        let text = v.reason.as_deref().unwrap_or("");
        let missing: Vec<String> = reason::must_name(snap, v)
            .into_iter()
            .filter(|w| !text.contains(w.as_str()))
            .collect();
        if !missing.is_empty() {
            return bad(format!(
                "{}'s reason {text:?} does not name {missing:?}",
                v.slot
            ));
        }
        if snap.primary.is_some() {
            let (caller, actions, out) = reason::planned(snap, &v.slot);
            let next = v.next_sync.as_ref();
            let same = next.is_some_and(|n| {
                n.caller == caller && n.actions == actions && n.error == out.error
            });
            if !same {
                return bad(format!(
                    "{}'s next sync {next:?}, the engine plans {caller:?} {actions:?} {:?}",
                    v.slot, out.error
                ));
            }
        }
    }
    let exit = u8::from(report.slots.iter().any(|v| !v.ready));
    if report.exit_code() != exit {
        return bad(format!("exit status {}, not {exit}", report.exit_code()));
    }
    let expected = expected_warnings(snap, wrong, listed);
    let got: Vec<&str> = report.warnings.iter().map(String::as_str).collect();
    // One warning per key, in the check's order (the standby's settings, then the
    // primary's), each naming its own key only.
    let matches = got.len() == expected.len()
        && got.iter().zip(&expected).all(|(w, key)| {
            w.contains(key) && expected.iter().filter(|k| w.contains(*k)).count() == 1
        });
    if !matches {
        return bad(format!(
            "warnings {got:?}, the world calls for {expected:?}"
        ));
    }
    Ok(())
}

/// The documented rule for slot `name` in `snap`.
fn ready(snap: &Snapshot, name: &str) -> bool {
    let remote = snap.input.remote_slots.iter().find(|r| r.slot_name == name);
    let local = snap.input.local_slots.iter().find(|l| l.slot_name == name);
    let (Some(r), Some(l)) = (remote, local) else {
        return false;
    };
    if r.invalidation_reason.is_some()
        || !l.synced
        || l.temporary
        || l.invalidation_reason.is_some()
    {
        return false;
    }
    let Some(primary) = &snap.primary else {
        return true;
    };
    let received = match primary.sent_lsn.get(name) {
        Some(sent) => Some(*sent),
        None if primary.sent_hidden.contains(name) => return false,
        None => r.confirmed_flush_lsn,
    };
    let sb = &snap.input.standby;
    let replay = sb.replay_lsn.unwrap_or(Lsn::INVALID);
    // Without hot_standby_feedback nothing keeps the slot's catalog rows on the primary, and
    // promotion replays what was received before the slot is used.
    let replayed_all = sb.receive_lsn.is_some_and(|r| r <= replay);
    (sb.hot_standby_feedback || replayed_all) && received.is_none_or(|at| at <= replay)
}

/// What each warning the world calls for must mention. The simulated standbys stream through
/// their own slot, and the primary has it: the only warnings due are the setting the world
/// set wrong (named as the server quotes it), that nothing syncs on its own
/// (`sync_replication_slots` off), and that the primary's `synchronized_standby_slots` does
/// not hold subscribers back for this standby.
fn expected_warnings(snap: &Snapshot, wrong: Option<Wrong>, listed: bool) -> Vec<&'static str> {
    let sb = &snap.input.standby;
    let mut keys: Vec<&'static str> = wrong.map(warning_key).into_iter().collect();
    if !sb.sync_replication_slots {
        keys.push("sync_replication_slots is off");
    }
    if snap.primary.is_some() && !listed {
        keys.push("synchronized_standby_slots");
    }
    keys
}
