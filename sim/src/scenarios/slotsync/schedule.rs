//! The changes a seed schedules for a tick of their own: the subscription turning
//! `two_phase` on (`Mix::two_phase_tick`) and a standby rebuilt from a fresh base backup
//! (`Mix::rebuild`).

use super::cluster::Cluster;
use super::worker::Worker;
use super::{Mix, Standbys};
use crate::publisher::Publisher;
use crate::{trace, Trace};

/// Makes the changes scheduled for `tick`, before anything else happens in it.
pub(super) fn at_tick(
    t: &mut Trace,
    tick: u64,
    mix: &Mix,
    publ: &mut Publisher,
    cluster: &mut Cluster,
    standbys: &mut Standbys,
) {
    if mix.two_phase_tick == Some(tick) && cluster.logical_invalid.is_none() {
        // Decoding restarts with two-phase on: it applies from what was confirmed.
        cluster.two_phase_at = Some(publ.slot.confirmed_flush_lsn);
        trace!(
            t,
            "tick {tick}: sub_slot two_phase on at {}",
            publ.slot.confirmed_flush_lsn
        );
    }
    if let Some((_, k)) = mix.rebuild.filter(|&(at, _)| at == tick) {
        let k = k % publ.standbys.len();
        cluster.rebuild(publ, k, mix.stall_percent[k]);
        standbys.locals[k].clear();
        standbys.workers[k] = Worker::new();
        trace!(
            t,
            "tick {tick}: standby{} rebuilt from a base backup at {}",
            k + 1,
            publ.flush_lsn()
        );
    }
}
