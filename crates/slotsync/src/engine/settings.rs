//! The settings a synced slot copies from the remote one besides its positions: plugin,
//! database, `two_phase` (and, on 18, `two_phase_at`) and `failover`.

use pgyard_types::Lsn;

use super::{Action, Change, Remote};
use crate::input::Version;
use crate::row::SlotRow;

/// The remote's two_phase_at, where the version syncs it (17 neither reads nor shows it).
fn remote_two_phase_at(local: &SlotRow, r: &Remote, version: Version) -> Option<Lsn> {
    match version {
        Version::V17 => local.two_phase_at,
        Version::V18 => r.row.two_phase_at.filter(|l| *l != Lsn::INVALID),
    }
}

/// Whether plugin, database, two_phase, two_phase_at or failover differ from the remote's.
pub(super) fn config_differs(local: &SlotRow, r: &Remote) -> bool {
    let remote_tpa = remote_two_phase_at(local, r, r.version);
    let local_tpa = local.two_phase_at.filter(|l| *l != Lsn::INVALID);
    r.row.datoid != local.datoid
        || r.row.two_phase != local.two_phase
        || r.row.failover != local.failover
        || r.row.plugin != local.plugin
        || remote_tpa != local_tpa
}

/// Copies the remote's settings into `local`, recording each changed column in `set`.
pub(super) fn copy_settings(local: &mut SlotRow, r: &Remote, set: &mut Vec<Change>) {
    let remote_tpa = remote_two_phase_at(local, r, r.version);
    let local_tpa = local.two_phase_at.filter(|l| *l != Lsn::INVALID);
    if r.row.plugin != local.plugin {
        set.push(Change::Plugin(r.row.plugin.clone()));
    }
    if r.row.datoid != local.datoid {
        set.push(Change::Database {
            datoid: r.row.datoid,
            database: r.row.database.clone(),
        });
    }
    if r.row.two_phase != local.two_phase {
        set.push(Change::TwoPhase(r.row.two_phase));
    }
    if remote_tpa != local_tpa {
        set.push(Change::TwoPhaseAt(remote_tpa));
    }
    if r.row.failover != local.failover {
        set.push(Change::Failover(r.row.failover));
    }
    local.plugin = r.row.plugin.clone();
    local.datoid = r.row.datoid;
    local.database = r.row.database.clone();
    local.two_phase = r.row.two_phase;
    local.two_phase_at = remote_tpa;
    local.failover = r.row.failover;
}

/// 17's settings copy for a preceded remote: an `Update` of settings only, when any differ.
pub(super) fn copy_config(local: &mut SlotRow, r: &Remote, actions: &mut Vec<Action>) -> bool {
    if !config_differs(local, r) {
        return false;
    }
    let mut set = Vec::new();
    copy_settings(local, r, &mut set);
    local.inactive_since = None;
    actions.push(Action::Update {
        slot: r.row.slot_name.clone(),
        set,
        positions: None,
    });
    true
}
