//! The catalog horizon of the `slotsync` world: which catalog row versions the primary's
//! vacuum may remove, the prune records that carry each removal through the WAL to the
//! standbys, and what replaying one does to a standby's logical slots.
//!
//! As in PostgreSQL, the primary removes a catalog row version once the xid that deleted it
//! precedes every slot's `catalog_xmin` (its logical slot's, and each physical slot's, which
//! carries the standby's `hot_standby_feedback` for its synced slots) and every running or
//! prepared transaction. A standby replaying the prune record invalidates each of its valid
//! logical slots whose `catalog_xmin` the removal passed (`rows_removed`), as
//! `InvalidateObsoleteReplicationSlots(RS_INVAL_HORIZON)` does during recovery conflicts.

use pgyard_slotsync::{InvalidationCause, SlotRow};
use pgyard_types::{Lsn, Xid};

use super::decode::StandbyDecoding;
use crate::publisher::{Fate, Publisher};

/// One catalog prune record: from `end` on, row versions deleted by xids before `horizon` are
/// gone (its snapshot conflict horizon is the xid just before `horizon`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Prune {
    /// End LSN of the record; a standby has replayed it once its replay position reaches it.
    pub end: Lsn,
    /// Row versions deleted by xids before this one are removed.
    pub horizon: Xid,
}

/// The bytes a prune record takes in the WAL.
pub(crate) const PRUNE_BYTES: u64 = 0x40;

/// The primary's catalog: how far vacuum has removed row versions, and its prune records.
#[derive(Clone, Debug, Default)]
pub(crate) struct Catalog {
    /// Every prune record so far, in LSN order (their horizons increase).
    pub prunes: Vec<Prune>,
}

impl Catalog {
    /// Row versions deleted by xids before this are gone on the primary.
    pub fn vacuumed(&self) -> Xid {
        self.prunes.last().map_or(Xid(0), |p| p.horizon)
    }

    /// What a standby (or the promoted one) has removed once it replayed through `lsn`.
    pub fn replayed(&self, lsn: Lsn) -> Xid {
        let n = self.prunes.partition_point(|p| p.end <= lsn);
        n.checked_sub(1).map_or(Xid(0), |i| self.prunes[i].horizon)
    }

    /// A vacuum of the catalog up to `horizon`, whose prune record would end at `end`: it
    /// writes the record only when it removes something new. Returns the record written.
    pub fn vacuum(&mut self, horizon: Xid, end: Lsn) -> Option<Prune> {
        if horizon.0 <= self.vacuumed().0 {
            return None;
        }
        let p = Prune { end, horizon };
        self.prunes.push(p);
        Some(p)
    }
}

/// The oldest xid whose deleted catalog rows the primary must keep: the oldest `catalog_xmin`
/// over its valid slots (`slot_xmins`, the logical slot's and the physical slots' feedback),
/// the oldest running or prepared transaction, and the next xid.
pub(crate) fn primary_horizon(publ: &Publisher, slot_xmins: &[Option<Xid>]) -> Xid {
    let running = publ
        .txns
        .values()
        .filter(|t| matches!(t.fate, Fate::InProgress | Fate::Prepared))
        .map(|t| t.xid.0)
        .min();
    let slots = slot_xmins.iter().flatten().map(|x| x.0).min();
    let mut h = publ.next_xid().0;
    for x in [running, slots].into_iter().flatten() {
        h = h.min(x);
    }
    Xid(h)
}

/// The next xid as of WAL position `lsn`: that of the first transaction begun at or after it.
pub(crate) fn next_xid_at(publ: &Publisher, lsn: Lsn) -> Xid {
    publ.txns
        .values()
        .rev()
        .take_while(|t| t.first_lsn >= lsn)
        .last()
        .map_or(publ.next_xid(), |t| t.xid)
}

/// The `catalog_xmin` a standby's `hot_standby_feedback` reports: the oldest in-memory
/// `effective_catalog_xmin` over its valid slots (`replication_slot_catalog_xmin`), or none
/// without one.
pub(crate) fn feedback_catalog_xmin(slots: &[SlotRow], dec: &StandbyDecoding) -> Option<Xid> {
    slots
        .iter()
        .filter(|s| s.invalidation_reason.is_none())
        .filter_map(|s| dec.effective_of(s))
        .filter(|x| x.0 != 0)
        .min_by_key(|x| x.0)
}

/// Replaying a removal up to `horizon`: every valid logical slot whose in-memory
/// `effective_catalog_xmin` the removal passed is invalidated (`rows_removed`, as
/// `InvalidatePossiblyObsoleteSlot` compares). Returns the names of the slots it hit.
pub(crate) fn replay_conflict(
    slots: &mut [SlotRow],
    horizon: Xid,
    dec: &StandbyDecoding,
) -> Vec<String> {
    let mut hit = Vec::new();
    for s in slots.iter_mut() {
        let passed = dec
            .effective_of(s)
            .is_some_and(|x| x.0 != 0 && x.0 < horizon.0);
        if s.invalidation_reason.is_none() && passed {
            invalidate(s, InvalidationCause::RowsRemoved);
            hit.push(s.slot_name.clone());
        }
    }
    hit
}

/// Marks `s` invalidated by `cause` as `pg_replication_slots` then shows it.
pub(crate) fn invalidate(s: &mut SlotRow, cause: InvalidationCause) {
    s.invalidation_reason = Some(cause);
    s.wal_status = Some("lost".into());
    s.conflicting = Some(cause.is_conflict());
    if cause == InvalidationCause::WalRemoved {
        // InvalidatePossiblyObsoleteSlot clears the restart_lsn of a slot whose WAL went.
        s.restart_lsn = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publisher::Workload;
    use pgyard_types::{rng_from_seed, UnixTime};

    fn slot(name: &str, xmin: u32) -> SlotRow {
        let mut s = SlotRow::logical(name);
        s.catalog_xmin = Some(Xid(xmin));
        s
    }

    #[test]
    fn vacuum_writes_a_record_only_when_it_removes_more() {
        let mut c = Catalog::default();
        assert_eq!(
            c.vacuum(Xid(1005), Lsn(0x100)).map(|p| p.horizon),
            Some(Xid(1005))
        );
        assert_eq!(c.vacuum(Xid(1005), Lsn(0x200)), None);
        assert_eq!(c.vacuum(Xid(1003), Lsn(0x200)), None);
        assert!(c.vacuum(Xid(1010), Lsn(0x300)).is_some());
        assert_eq!(c.vacuumed(), Xid(1010));
        assert_eq!(c.replayed(Lsn(0xff)), Xid(0));
        assert_eq!(c.replayed(Lsn(0x100)), Xid(1005));
        assert_eq!(c.replayed(Lsn(0x2ff)), Xid(1005));
        assert_eq!(c.replayed(Lsn(0x300)), Xid(1010));
    }

    #[test]
    fn the_horizon_stays_below_every_slot_and_running_transaction() {
        let mut rng = rng_from_seed(7);
        let mut w = Workload::draw(&mut rng);
        (w.plain, w.streamed, w.two_phase, w.messages) = (0, 1, 0, 0);
        let mut p = Publisher::new(w, Lsn(0x1000));
        p.step(&mut rng, UnixTime(0));
        // A stream is open: its xid holds the horizon whatever the slots say.
        let open = p.txns.values().next().map(|t| t.xid).unwrap_or(Xid(0));
        assert_eq!(primary_horizon(&p, &[Some(Xid(5000))]), open);
        assert_eq!(primary_horizon(&p, &[Some(Xid(10)), None]), Xid(10));
        let fresh = Publisher::new(Workload::draw(&mut rng), Lsn(0x1000));
        assert_eq!(primary_horizon(&fresh, &[None]), fresh.next_xid());
    }

    #[test]
    fn replay_invalidates_only_slots_the_removal_passed() {
        let mut slots = vec![slot("a", 1004), slot("b", 1005), slot("c", 1010)];
        let none = StandbyDecoding::default();
        assert_eq!(
            replay_conflict(&mut slots, Xid(1005), &none),
            vec!["a".to_owned()]
        );
        assert_eq!(
            slots[0].invalidation_reason,
            Some(InvalidationCause::RowsRemoved)
        );
        assert_eq!(slots[1].invalidation_reason, None);
        // An invalidated slot is not hit twice, and no longer holds the feedback back.
        assert_eq!(
            replay_conflict(&mut slots, Xid(1006), &none),
            vec!["b".to_owned()]
        );
        assert_eq!(feedback_catalog_xmin(&slots, &none), Some(Xid(1010)));
        assert_eq!(feedback_catalog_xmin(&[], &none), None);
        // The in-memory xmin decides, where it differs from the view's.
        let mut mem = StandbyDecoding::default();
        mem.effective.insert("c".into(), Xid(1020));
        assert_eq!(feedback_catalog_xmin(&slots, &mem), Some(Xid(1020)));
        assert!(replay_conflict(&mut slots, Xid(1015), &mem).is_empty());
        assert_eq!(
            replay_conflict(&mut slots, Xid(1021), &mem),
            vec!["c".to_owned()]
        );
    }
}
