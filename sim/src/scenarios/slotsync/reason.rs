//! What a not-ready verdict's reason must name, worked out from the snapshot alone: the first
//! thing that stops a subscriber of the slot after promotion (in the order the readiness
//! check documents), and the positions, xids, causes or byte counts that show it. The words
//! around them are the check's own; the facts are the world's. And the next sync the verdict
//! announces must be the one the engine plans for that slot.

use pgyard_slotsync::check::Verdict;
use pgyard_slotsync::snapshot::Snapshot;
use pgyard_slotsync::{sync_cycle, sync_function, Action, Caller, Outcome};
use pgyard_types::{Lsn, Xid};

/// The texts the reason of `v` must contain (empty for a ready slot).
pub(super) fn must_name(snap: &Snapshot, v: &Verdict) -> Vec<String> {
    let name = v.slot.as_str();
    let remote = snap.input.remote_slots.iter().find(|r| r.slot_name == name);
    let local = snap.input.local_slots.iter().find(|l| l.slot_name == name);
    if let Some(cause) = remote.and_then(|r| r.invalidation_reason) {
        return vec![cause.as_str().to_owned(), "primary".into()];
    }
    let Some(l) = local else {
        return vec!["no slot".into()];
    };
    if let Some(cause) = l.invalidation_reason {
        return vec![cause.as_str().to_owned(), "standby".into()];
    }
    let lsn = |x: Option<Lsn>| x.unwrap_or(Lsn::INVALID).to_string();
    let xid = |x: Option<Xid>| x.map_or(0, |x| x.0).to_string();
    if l.temporary {
        let Some(r) = remote else {
            return vec![lsn(l.restart_lsn), "temporary".into()];
        };
        let (rr, lr) = (r.restart_lsn.unwrap_or(Lsn::INVALID), l.restart_lsn);
        let (rx, lx) = (
            r.catalog_xmin.map_or(0, |x| x.0),
            l.catalog_xmin.map_or(0, |x| x.0),
        );
        // Xids of this world never wrap: plain comparison is the modular one here.
        return if rr < lr.unwrap_or(Lsn::INVALID) || rx < lx {
            vec![
                lsn(r.restart_lsn),
                lsn(lr),
                xid(r.catalog_xmin),
                xid(l.catalog_xmin),
            ]
        } else {
            vec![lsn(lr), "consistent".into()]
        };
    }
    let Some(primary) = &snap.primary else {
        return Vec::new();
    };
    if !primary.sent_lsn.contains_key(name) && primary.sent_hidden.contains(name) {
        return vec!["sent_lsn".into()];
    }
    let sb = &snap.input.standby;
    let replay = sb.replay_lsn.unwrap_or(Lsn::INVALID);
    if !sb.hot_standby_feedback {
        if let Some(receive) = sb.receive_lsn.filter(|r| *r > replay) {
            return vec![format!("{} bytes", receive.0 - replay.0)];
        }
    }
    let received = primary
        .sent_lsn
        .get(name)
        .copied()
        .or_else(|| remote.and_then(|r| r.confirmed_flush_lsn));
    match received.filter(|at| *at > replay) {
        Some(at) => vec![
            at.to_string(),
            replay.to_string(),
            format!("{} bytes", at.0 - replay.0),
        ],
        None => Vec::new(),
    }
}

/// The engine's actions for slot `name` and its error, planned as the standby's syncing runs
/// (the worker when `sync_replication_slots` is on, else the function).
pub(super) fn planned(snap: &Snapshot, name: &str) -> (Caller, Vec<Action>, Outcome) {
    let input = &snap.input;
    let sb = &input.standby;
    let (caller, out) = if sb.sync_replication_slots {
        let out = sync_cycle(&input.remote_slots, &input.local_slots, sb, Caller::Worker);
        (Caller::Worker, out)
    } else {
        let out = sync_function(&input.remote_slots, &input.local_slots, sb);
        (Caller::Function, out)
    };
    let mine = out
        .actions
        .iter()
        .filter(|a| a.slot() == name)
        .cloned()
        .collect();
    (caller, mine, out)
}
