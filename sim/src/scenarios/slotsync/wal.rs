//! WAL removal in the `slotsync` world, on both sides, as PostgreSQL does it.
//!
//! A checkpoint on the primary (a restartpoint on a standby) first invalidates, when
//! `max_slot_wal_keep_size` is set, every valid slot whose `restart_lsn` lies more than that
//! behind the insert (on a standby: replay) position (`wal_removed`), then removes whole
//! segments older than both its redo pointer and the oldest `restart_lsn` of the valid slots
//! (`KeepLogSeg`, `RemoveOldXlogFiles`). Segments are small here, because the model's WAL is:
//! a run writes tens to hundreds of KiB.

use pgyard_slotsync::{InvalidationCause, SlotRow};
use pgyard_types::Lsn;

use super::horizon::invalidate;

/// `wal_segment_size` of the model (PostgreSQL's is 1 MiB at the least; the model's WAL is a
/// few hundred bytes per record and a few hundred KiB per run).
pub(crate) const SEGMENT_BYTES: u64 = 0x1000;

/// The start of the segment holding `lsn`.
pub(crate) fn segment_start(lsn: Lsn) -> Lsn {
    Lsn(lsn.0 - lsn.0 % SEGMENT_BYTES)
}

/// The position below which `max_slot_wal_keep_size` lets WAL go whatever the slots say:
/// whole segments, `keep_bytes` behind the segment of `at`.
pub(crate) fn keep_cutoff(at: Lsn, keep_bytes: Option<u64>) -> Option<Lsn> {
    keep_bytes.map(|k| Lsn(segment_start(at).0.saturating_sub(k)))
}

/// What one checkpoint or restartpoint did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Removal {
    /// The start of the oldest segment kept from now on.
    pub oldest: Lsn,
    /// Slots it invalidated (`wal_removed`), by index into the slots given.
    pub invalidated: Vec<usize>,
}

/// One checkpoint (restartpoint) with redo pointer `redo`, over the node's slots given as
/// `restart_lsn`s (`None`: invalidated, or never reserved WAL): the slots that fall behind
/// `keep_cutoff` are invalidated, then the segments before both `redo` and every remaining
/// slot are removed. `oldest` is the node's oldest segment before; it never moves back.
pub(crate) fn checkpoint(
    oldest: Lsn,
    redo: Lsn,
    restarts: &[Option<Lsn>],
    cutoff: Option<Lsn>,
) -> Removal {
    let invalidated: Vec<usize> = restarts
        .iter()
        .enumerate()
        .filter(|(_, r)| matches!((r, cutoff), (Some(r), Some(c)) if *r < c))
        .map(|(i, _)| i)
        .collect();
    let keep = restarts
        .iter()
        .enumerate()
        .filter(|(i, _)| !invalidated.contains(i))
        .filter_map(|(_, r)| *r)
        .fold(redo, Lsn::min);
    Removal {
        oldest: oldest.max(segment_start(keep)),
        invalidated,
    }
}

/// A standby's own WAL: what its restartpoints have removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StandbyWal {
    /// Start of the oldest segment still in its `pg_wal`.
    pub oldest: Lsn,
    /// Redo pointer of its latest restartpoint.
    pub redo: Lsn,
}

impl StandbyWal {
    /// A standby whose WAL starts at `at` (where it was cloned).
    pub fn new(at: Lsn) -> StandbyWal {
        StandbyWal {
            oldest: segment_start(at),
            redo: at,
        }
    }

    /// A restartpoint at `replay` over the standby's slots (`CreateRestartPoint`): slots
    /// behind `max_slot_wal_keep_size` are invalidated, then its WAL before the redo pointer
    /// and every valid slot's `restart_lsn` is removed. Returns the names invalidated.
    pub fn restartpoint(
        &mut self,
        replay: Lsn,
        slots: &mut [SlotRow],
        keep_bytes: Option<u64>,
    ) -> Vec<String> {
        self.redo = self.redo.max(replay);
        let restarts: Vec<Option<Lsn>> = slots.iter().map(valid_restart).collect();
        let r = checkpoint(
            self.oldest,
            self.redo,
            &restarts,
            keep_cutoff(replay, keep_bytes),
        );
        self.oldest = r.oldest;
        r.invalidated
            .iter()
            .map(|&i| {
                invalidate(&mut slots[i], InvalidationCause::WalRemoved);
                slots[i].slot_name.clone()
            })
            .collect()
    }
}

/// A slot's `restart_lsn` if it is valid and holds WAL.
pub(crate) fn valid_restart(s: &SlotRow) -> Option<Lsn> {
    s.restart_lsn
        .filter(|l| *l != Lsn::INVALID && s.invalidation_reason.is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(name: &str, restart: u64) -> SlotRow {
        let mut s = SlotRow::logical(name);
        s.restart_lsn = Some(Lsn(restart));
        s
    }

    #[test]
    fn removal_keeps_every_slot_and_the_redo_segment() {
        let r = checkpoint(Lsn(0), Lsn(0x9000), &[Some(Lsn(0x5010)), None], None);
        assert_eq!(r.oldest, Lsn(0x5000));
        assert!(r.invalidated.is_empty());
        let r = checkpoint(Lsn(0), Lsn(0x3020), &[Some(Lsn(0x5010))], None);
        assert_eq!(r.oldest, Lsn(0x3000));
        // Never back, even when a slot older than what is gone turns up.
        let r = checkpoint(Lsn(0x6000), Lsn(0x9000), &[Some(Lsn(0x5010))], None);
        assert_eq!(r.oldest, Lsn(0x6000));
    }

    #[test]
    fn keep_size_invalidates_slots_too_far_behind_and_frees_their_wal() {
        let cutoff = keep_cutoff(Lsn(0x9010), Some(0x4000));
        assert_eq!(cutoff, Some(Lsn(0x5000)));
        let r = checkpoint(
            Lsn(0),
            Lsn(0x9010),
            &[Some(Lsn(0x4ff8)), Some(Lsn(0x5000))],
            cutoff,
        );
        assert_eq!(r.invalidated, vec![0]);
        assert_eq!(r.oldest, Lsn(0x5000));
    }

    #[test]
    fn a_restartpoint_removes_only_what_no_valid_slot_needs() {
        let mut w = StandbyWal::new(Lsn(0x1010));
        assert_eq!(w.oldest, Lsn(0x1000));
        let mut slots = vec![slot("a", 0x3800), slot("b", 0x7000)];
        assert!(w.restartpoint(Lsn(0x8000), &mut slots, None).is_empty());
        assert_eq!((w.oldest, w.redo), (Lsn(0x3000), Lsn(0x8000)));
        // With a keep size, "a" is too far behind: invalidated, and its WAL goes.
        let hit = w.restartpoint(Lsn(0x8100), &mut slots, Some(0x2000));
        assert_eq!(hit, vec!["a".to_owned()]);
        assert_eq!(
            slots[0].invalidation_reason,
            Some(InvalidationCause::WalRemoved)
        );
        assert_eq!(slots[0].restart_lsn, None);
        assert_eq!(w.oldest, Lsn(0x7000));
    }
}
