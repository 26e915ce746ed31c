//! What `pgyard slotsync plan` prints for a sync, judged against the slots it leaves
//! (`plan-json-true`): every action names its kind and slot; an update's `set` holds each
//! changed column with the value the slot's `pg_replication_slots` row then shows; a skip names
//! its reason, and where the server logs one, the log line names the slot and its DETAIL (or
//! message) the positions and xids the skip is about, as `slotsync.c` words them.

use pgyard_slotsync::{Action, Change, Outcome, SkipReason, Version};
use serde_json::Value;

use super::fail;
use crate::Violation;

/// The texts the log line and DETAIL of skipping `slot` for `reason` must name together;
/// `None` when the server logs nothing for it.
fn logged(slot: &str, reason: &SkipReason) -> Option<Vec<String>> {
    let quoted = format!("\"{slot}\"");
    match reason {
        SkipReason::AheadOfStandby { remote, standby } => {
            Some(vec![quoted, remote.to_string(), standby.to_string()])
        }
        SkipReason::RemotePrecedes {
            remote_lsn,
            remote_xmin,
            local_lsn,
            local_xmin,
            ..
        } => Some(vec![
            quoted,
            remote_lsn.to_string(),
            remote_xmin.0.to_string(),
            local_lsn.to_string(),
            local_xmin.0.to_string(),
        ]),
        SkipReason::NoConsistentSnapshot { restart_lsn } => {
            Some(vec![quoted, restart_lsn.to_string()])
        }
        _ => None,
    }
}

/// Judges the plan JSON of `out`, a sync on standby `i`.
pub(super) fn judge(tick: u64, i: usize, out: &Outcome) -> Result<(), Violation> {
    let bad = |what: String| {
        Err(fail(
            "plan-json-true",
            format!("tick {tick}: a sync on standby{}: {what}", i + 1),
        ))
    };
    for a in &out.actions {
        let j = a.to_json();
        let slot = a.slot();
        let kind = j["action"].as_str().unwrap_or("");
        if kind.is_empty() || j["slot"].as_str() != Some(slot) {
            return bad(format!("{a:?} prints as {j}"));
        }
        match a {
            Action::Update { set, .. } => {
                let updates = out
                    .actions
                    .iter()
                    .filter(|b| matches!(b, Action::Update { slot: s, .. } if s == slot));
                let row = out.slots_after.iter().find(|s| s.slot_name == slot);
                let (Some(row), 1) = (row, updates.count()) else {
                    continue;
                };
                let shown = row.to_json_as(Version::V18);
                let printed = j["set"].as_object().cloned().unwrap_or_default();
                // A database change prints two columns (datoid and database).
                let database = set
                    .iter()
                    .filter(|c| matches!(c, Change::Database { .. }))
                    .count();
                let wrong = printed
                    .iter()
                    .filter(|(k, _)| !matches!(k.as_str(), "datoid" | "database"))
                    .find(|(k, v)| shown.get(k.as_str()) != Some(*v));
                if printed.len() != set.len() + database {
                    return bad(format!("{a:?} prints its set as {}", j["set"]));
                }
                if let Some((k, v)) = wrong {
                    return bad(format!(
                        "{a:?} prints {k} = {v}, the slot then shows {}",
                        shown.get(k.as_str()).unwrap_or(&Value::Null)
                    ));
                }
            }
            Action::Skip { reason, .. } => {
                let text = format!(
                    "{} {}",
                    j["log"].as_str().unwrap_or(""),
                    j["detail"].as_str().unwrap_or("")
                );
                let named = logged(slot, reason);
                let missing = named.iter().flatten().any(|w| !text.contains(w.as_str()));
                let reason_named = j["reason"].as_str().is_some_and(|r| !r.is_empty());
                if missing || !reason_named || named.is_some() != j["log"].is_string() {
                    return bad(format!("{a:?} prints as {j}"));
                }
            }
            _ => {}
        }
    }
    Ok(())
}
