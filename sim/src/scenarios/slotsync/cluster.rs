//! The parts of the `slotsync` cluster the slot positions are about, beside the publisher
//! model's WAL and logical slot: the primary's catalog horizon and vacuum (`horizon`), WAL
//! removal and `max_slot_wal_keep_size` on both sides (`wal`), the physical slots' feedback,
//! and the invalidations all of these cause.

use pgyard_slotsync::{InvalidationCause, SlotRow};
use pgyard_types::{uniform_inclusive, Lsn, Rng, Xid};

use super::decode::StandbyDecoding;
use super::horizon::{
    feedback_catalog_xmin, primary_horizon, replay_conflict, Catalog, PRUNE_BYTES,
};
use super::wal::{checkpoint, keep_cutoff, StandbyWal};
use super::Mix;
use crate::publisher::Publisher;
use crate::{trace, Trace};

/// A standby's physical slot on the primary, beyond the `restart_lsn` the publisher model
/// keeps (its `feedback_lsn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Physical {
    /// The `catalog_xmin` of the standby's last `hot_standby_feedback`.
    pub catalog_xmin: Option<Xid>,
    /// Why it is invalidated, if it is.
    pub invalid: Option<InvalidationCause>,
}

/// The cluster state around the publisher model.
#[derive(Clone, Debug)]
pub(crate) struct Cluster {
    /// The primary's catalog and its prune records.
    pub catalog: Catalog,
    /// Start of the oldest segment in the primary's `pg_wal`.
    pub primary_oldest: Lsn,
    /// Why the primary's logical slot is invalidated, if it is.
    pub logical_invalid: Option<InvalidationCause>,
    /// Each standby's physical slot on the primary.
    pub physical: Vec<Physical>,
    /// Each standby's own WAL.
    pub standby_wal: Vec<StandbyWal>,
    /// The removal horizon each standby has replayed.
    replayed: Vec<Xid>,
    /// `max_slot_wal_keep_size` (bytes) on every node, if set.
    pub keep_bytes: Option<u64>,
    /// Each standby's snapshot files and in-memory slot xmins.
    pub decoding: Vec<StandbyDecoding>,
    /// The primary's failover slot has `two_phase` on since this position (`two_phase_at`),
    /// once the subscription enabled it.
    pub two_phase_at: Option<Lsn>,
    /// Each standby's `max_replication_slots`, when the world sets one (unlimited otherwise).
    pub slots_max: Vec<Option<usize>>,
}

impl Cluster {
    /// The cluster of `publ` (standbys already added), nothing vacuumed or removed yet.
    pub fn new(publ: &Publisher, keep_bytes: Option<u64>) -> Cluster {
        let n = publ.standbys.len();
        Cluster {
            catalog: Catalog::default(),
            primary_oldest: super::wal::segment_start(publ.slot.restart_lsn),
            logical_invalid: None,
            physical: vec![Physical::default(); n],
            standby_wal: publ
                .standbys
                .iter()
                .map(|s| StandbyWal::new(s.replay_lsn))
                .collect(),
            replayed: vec![Xid(0); n],
            keep_bytes,
            decoding: vec![StandbyDecoding::default(); n],
            two_phase_at: None,
            slots_max: vec![None; n],
        }
    }

    /// Standby `k` rebuilt from a fresh base backup of the primary (`pg_basebackup`, which
    /// copies no slots): its WAL starts now, its data files already carry every catalog
    /// removal so far, it has no synced slot, and its physical slot on the primary is
    /// (re)created at the backup's start. `stall_percent` is its link's usual stall rate.
    pub fn rebuild(&mut self, publ: &mut Publisher, k: usize, stall_percent: u64) {
        let at = publ.flush_lsn();
        let s = &mut publ.standbys[k];
        (s.receive_lsn, s.replay_lsn, s.feedback_lsn) = (at, at, at);
        s.stall_percent = stall_percent;
        self.standby_wal[k] = StandbyWal::new(at);
        self.replayed[k] = self.catalog.replayed(at);
        self.physical[k] = Physical::default();
        self.decoding[k] = self.decoding[k].rebuilt();
    }

    /// After the standbys advanced: each replays the prune records it reached (recovery
    /// conflicts invalidate the synced slots whose `catalog_xmin` they pass), and now and then
    /// takes a restartpoint.
    #[allow(clippy::too_many_arguments)]
    pub fn standbys_step(
        &mut self,
        rng: &mut Rng,
        t: &mut Trace,
        tick: u64,
        mix: &Mix,
        publ: &Publisher,
        locals: &mut [Vec<SlotRow>],
    ) {
        for (i, slots) in locals.iter_mut().enumerate() {
            let replay = publ.standbys[i].replay_lsn;
            let h = self.catalog.replayed(replay);
            if h.0 > self.replayed[i].0 {
                self.replayed[i] = h;
                for name in replay_conflict(slots, h, &self.decoding[i]) {
                    trace!(t, "tick {tick}: standby{} replays removal below xid {}: {name} invalidated (rows_removed)", i + 1, h.0);
                }
            }
            if uniform_inclusive(rng, 99) < mix.restartpoint_percent {
                let hit = self.standby_wal[i].restartpoint(replay, slots, self.keep_bytes);
                self.decoding[i].restartpoint(self.standby_wal[i].redo, slots);
                for name in hit {
                    trace!(
                        t,
                        "tick {tick}: standby{} restartpoint: {name} invalidated (wal_removed)",
                        i + 1
                    );
                }
            }
        }
    }

    /// After the sync: each standby's feedback reports its slots' `catalog_xmin`; then the
    /// primary may vacuum its catalog and may take a checkpoint. The standby `feedback_off`
    /// runs with `hot_standby_feedback = off`: its walreceiver's last feedback cleared the
    /// slot's `catalog_xmin`, so it holds nothing back.
    pub fn primary_step(
        &mut self,
        rng: &mut Rng,
        t: &mut Trace,
        (tick, mix): (u64, &Mix),
        publ: &mut Publisher,
        locals: &[Vec<SlotRow>],
        feedback_off: Option<usize>,
    ) {
        for (i, (p, slots)) in self.physical.iter_mut().zip(locals).enumerate() {
            if p.invalid.is_none() {
                p.catalog_xmin = if feedback_off == Some(i) {
                    None
                } else {
                    feedback_catalog_xmin(slots, &self.decoding[i])
                };
            }
        }
        if uniform_inclusive(rng, 99) < mix.vacuum_percent {
            let h = primary_horizon(publ, &self.slot_xmins(publ));
            if h.0 > self.catalog.vacuumed().0 {
                let (_, end) = publ.append_wal(PRUNE_BYTES);
                self.catalog.vacuum(h, end);
                trace!(
                    t,
                    "tick {tick}: primary vacuums catalog rows below xid {} (record ends {end})",
                    h.0
                );
            }
        }
        if uniform_inclusive(rng, 99) < mix.checkpoint_percent {
            self.checkpoint(t, tick, publ);
        }
    }

    /// The `catalog_xmin`s that hold the primary's vacuum: its logical slot's and the
    /// standbys' feedback, each while its slot is valid.
    fn slot_xmins(&self, publ: &Publisher) -> Vec<Option<Xid>> {
        let logical = self
            .logical_invalid
            .is_none()
            .then_some(publ.slot.catalog_xmin);
        let physical = self
            .physical
            .iter()
            .map(|p| p.catalog_xmin.filter(|_| p.invalid.is_none()));
        std::iter::once(logical).chain(physical).collect()
    }

    /// A checkpoint on the primary: `max_slot_wal_keep_size` invalidations, WAL removal, and a
    /// standby that needs removed WAL stops streaming for good.
    fn checkpoint(&mut self, t: &mut Trace, tick: u64, publ: &mut Publisher) {
        // LogStandbySnapshot, when the WAL facts are kept.
        publ.log_running_xacts();
        let flush = publ.flush_lsn();
        let logical = (self.logical_invalid.is_none()).then_some(publ.slot.restart_lsn);
        let restarts: Vec<Option<Lsn>> = std::iter::once(logical)
            .chain(
                self.physical
                    .iter()
                    .zip(&publ.standbys)
                    .map(|(p, s)| p.invalid.is_none().then_some(s.feedback_lsn)),
            )
            .collect();
        let r = checkpoint(
            self.primary_oldest,
            flush,
            &restarts,
            keep_cutoff(flush, self.keep_bytes),
        );
        for &i in &r.invalidated {
            if i == 0 {
                self.logical_invalid = Some(InvalidationCause::WalRemoved);
                trace!(
                    t,
                    "tick {tick}: primary checkpoint: logical slot invalidated (wal_removed)"
                );
            } else {
                self.physical[i - 1].invalid = Some(InvalidationCause::WalRemoved);
                trace!(
                    t,
                    "tick {tick}: primary checkpoint: {} invalidated (wal_removed)",
                    publ.standbys[i - 1].slot
                );
            }
        }
        if r.oldest > self.primary_oldest {
            self.primary_oldest = r.oldest;
            for s in &mut publ.standbys {
                // It needs WAL the primary no longer has ("requested WAL segment has already
                // been removed"): it never receives again.
                if s.receive_lsn < r.oldest && s.stall_percent < 100 {
                    s.stall_percent = 100;
                    trace!(
                        t,
                        "tick {tick}: {} can no longer stream: WAL before {} removed",
                        s.slot,
                        r.oldest
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publisher::Workload;
    use crate::scenarios::slotsync::wal::{segment_start, SEGMENT_BYTES};
    use crate::scenarios::slotsync::{draw_mix, START};
    use pgyard_types::{rng_from_seed, UnixTime};

    fn world(seed: u64) -> (Rng, Mix, Publisher, Cluster) {
        let mut rng = rng_from_seed(seed);
        let mut mix = draw_mix(&mut rng);
        (mix.vacuum_percent, mix.checkpoint_percent) = (100, 100);
        let mut w = Workload::draw(&mut rng);
        (w.plain, w.streamed, w.two_phase, w.messages) = (1, 0, 0, 0);
        let mut publ = Publisher::new(w, START);
        publ.add_standby("standby1", 0);
        let cluster = Cluster::new(&publ, None);
        (rng, mix, publ, cluster)
    }

    #[test]
    fn a_standbys_feedback_holds_the_primarys_vacuum() {
        let (mut rng, mix, mut publ, mut cluster) = world(3);
        for _ in 0..5 {
            publ.step(&mut rng, UnixTime(0));
        }
        publ.confirm(publ.flush_lsn());
        let mut synced = SlotRow::logical("sub_slot");
        synced.catalog_xmin = Some(Xid(1001));
        let mut t = Trace::hashing();
        let locals = [vec![synced.clone()]];
        cluster.primary_step(&mut rng, &mut t, (0, &mix), &mut publ, &locals, None);
        assert_eq!(cluster.physical[0].catalog_xmin, Some(Xid(1001)));
        assert_eq!(cluster.catalog.vacuumed(), Xid(1001));
        // With hot_standby_feedback off the valid synced slot holds nothing back either.
        let mut off = cluster.clone();
        off.primary_step(
            &mut rng.clone(),
            &mut t,
            (1, &mix),
            &mut publ,
            &locals,
            Some(0),
        );
        assert_eq!(off.physical[0].catalog_xmin, None);
        assert!(publ.slot.catalog_xmin.0 > 1001);
        assert_eq!(off.catalog.vacuumed(), publ.slot.catalog_xmin);
        // Once the standby's slot is gone, the logical slot alone holds it.
        synced.invalidation_reason = Some(InvalidationCause::RowsRemoved);
        let locals = [vec![synced]];
        cluster.primary_step(&mut rng, &mut t, (1, &mix), &mut publ, &locals, None);
        assert_eq!(cluster.catalog.vacuumed(), publ.slot.catalog_xmin);
    }

    #[test]
    fn keep_size_invalidates_the_laggards_and_a_standby_without_wal_stops() {
        let (mut rng, mix, mut publ, mut cluster) = world(4);
        cluster.keep_bytes = Some(2 * SEGMENT_BYTES);
        publ.append_wal(8 * SEGMENT_BYTES);
        let mut t = Trace::hashing();
        cluster.primary_step(&mut rng, &mut t, (0, &mix), &mut publ, &[Vec::new()], None);
        assert_eq!(cluster.logical_invalid, Some(InvalidationCause::WalRemoved));
        assert_eq!(
            cluster.physical[0].invalid,
            Some(InvalidationCause::WalRemoved)
        );
        assert!(cluster.primary_oldest > publ.standbys[0].receive_lsn);
        assert_eq!(publ.standbys[0].stall_percent, 100);
        // A rebuild brings it back, with a fresh physical slot.
        cluster.rebuild(&mut publ, 0, 0);
        assert_eq!(publ.standbys[0].receive_lsn, publ.flush_lsn());
        assert_eq!(cluster.physical[0], Physical::default());
        assert_eq!(
            cluster.standby_wal[0].oldest,
            segment_start(publ.flush_lsn())
        );
    }
}
