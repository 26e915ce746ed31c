//! What a failover to a standby costs the subscriber: the transactions it applied that the new
//! primary never had, those it will never be sent, and those the promoted slot cannot decode —
//! because the WAL or the catalog rows decoding needs are gone, or because the slot cannot be
//! used at all.

use pgyard_slotsync::{promote, InvalidationCause, SlotRow};
use pgyard_types::{Lsn, Xid};

use super::cluster::Cluster;
use super::decode::span_of;
use super::horizon::{next_xid_at, replay_conflict};
use super::{SLOT, START};
use crate::publisher::{Fate, Publisher};

/// What a failover cost the subscriber.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LossWindow {
    /// Whether `synchronized_standby_slots` named the promoted standby.
    pub gate_on: bool,
    /// Whether the promoted standby had a sync-ready copy of the slot — synced, persistent and
    /// valid before promotion, what an operator checks (else the subscriber cannot resume at
    /// all and must be re-synchronized from scratch).
    pub slot_ready: bool,
    /// Transactions the subscriber applied that the new primary does not have.
    pub divergent: u64,
    /// Transactions of the new primary the subscriber will never receive.
    pub skipped: u64,
    /// Transactions the subscriber should receive whose WAL the slot no longer reserves.
    pub wal_missing: u64,
    /// Transactions the subscriber should receive whose catalog rows the new primary may
    /// vacuum before decoding reaches them (the slot's `catalog_xmin` does not hold them).
    pub catalog_missing: u64,
    /// Why the ready slot cannot decode at all after promotion, if it cannot.
    pub unusable: Option<Unusable>,
    /// Transactions the subscriber should receive that are lost because of `unusable`.
    pub undecodable: u64,
}

impl LossWindow {
    /// Transactions lost or diverged in all; a slot that cannot decode at all counts once
    /// more, because everything after it is lost too.
    pub fn total(&self) -> u64 {
        self.divergent
            + self.skipped
            + self.wal_missing
            + self.catalog_missing
            + self.undecodable
            + u64::from(self.unusable.is_some())
    }
}

/// Why a promoted synced slot cannot decode at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unusable {
    /// The slot was sync-ready, and promotion dropped it.
    DroppedAtPromotion,
    /// Promotion replayed the rest of the standby's WAL, and a catalog removal there passed
    /// the slot's `catalog_xmin` (or the slot was invalidated otherwise).
    Invalidated(InvalidationCause),
    /// The standby no longer has the WAL from the slot's `restart_lsn` on.
    WalRemoved {
        /// The slot's `restart_lsn`.
        restart_lsn: Lsn,
        /// The start of the oldest WAL the standby kept.
        oldest: Lsn,
    },
    /// Catalog rows the slot's `catalog_xmin` needs were already removed when the slot took it
    /// (a removal replayed earlier conflicts with nothing later).
    RowsRemoved {
        /// The slot's `catalog_xmin`.
        catalog_xmin: Xid,
        /// Row versions deleted by xids before this one are gone on the standby.
        vacuumed: Xid,
    },
}

/// What a failover to standby `p` now costs the subscriber, which has received the first
/// `received` commits; `new_commits` are the new primary's first transactions (first record,
/// commit).
pub(crate) fn loss_at(
    publ: &Publisher,
    cluster: &Cluster,
    local: &[SlotRow],
    p: usize,
    received: usize,
    new_commits: &[(Lsn, Lsn)],
) -> LossWindow {
    // The new primary's WAL ends where the standby's received WAL ends; promotion replays
    // all of it first, recovery conflicts included.
    let f = publ.standbys[p].receive_lsn;
    let vacuumed = cluster.catalog.replayed(f);
    let mut at_f = local.to_vec();
    let dec = &cluster.decoding[p];
    replay_conflict(&mut at_f, vacuumed, dec);
    let (_, after) = promote(&at_f);
    let slot_ready = local.iter().any(|s| {
        s.slot_name == SLOT && s.synced && !s.temporary && s.invalidation_reason.is_none()
    });
    let slot = after
        .iter()
        .find(|s| s.slot_name == SLOT)
        .filter(|_| slot_ready);
    let applied_end = received
        .checked_sub(1)
        .map_or(START, |i| publ.commits[i].end_lsn);
    let mut loss = LossWindow {
        slot_ready,
        ..LossWindow::default()
    };
    loss.divergent = publ.commits[..received]
        .iter()
        .filter(|c| c.end_lsn > f)
        .count() as u64;
    let Some(slot) = slot else {
        if slot_ready {
            // Sync-ready before promotion, and promotion dropped it: nothing to resume from.
            loss.unusable = Some(Unusable::DroppedAtPromotion);
        }
        return loss;
    };
    let s_conf = slot.confirmed_flush_lsn.unwrap_or(Lsn(0));
    let s_restart = slot.restart_lsn.unwrap_or(Lsn(0));
    // What holds the new primary's vacuum back is the slot's in-memory xmin, which a decoded
    // update leaves at the primary slot's even where decoding left the view's lower.
    let s_xmin = dec.effective_of(slot).unwrap_or(Xid(0));
    loss.unusable = unusable(slot, s_xmin, cluster.standby_wal[p].oldest, vacuumed);
    // The new primary may vacuum before its walsender decodes anything: up to the slot's
    // catalog_xmin, held back by the transactions still prepared there and its next xid.
    let held = held_at(publ, f).min(s_xmin.0);
    let vacuum_new = vacuumed.0.max(held);
    // The walsender starts at the later of the subscriber's origin and the slot.
    let start = applied_end.max(s_conf);
    let old = publ.commits[received..]
        .iter()
        .filter(|c| c.end_lsn <= f)
        .map(|c| (c.first_lsn, c.commit_lsn, Some(c.xid)));
    let new = new_commits
        .iter()
        .map(|&(first, commit)| (first, commit, None));
    for (first, commit, xid) in old.chain(new) {
        if commit < start {
            loss.skipped += 1;
        } else if loss.unusable.is_some() {
            loss.undecodable += 1;
        } else if xid.is_some_and(|x| !has_records(publ, x)) {
            // Only a PREPARE and its COMMIT PREPARED: nothing to decode, nothing to lose.
        } else if first < s_restart {
            loss.wal_missing += 1;
        } else if xid.is_some_and(|x| x.0 < vacuum_new) {
            loss.catalog_missing += 1;
        }
    }
    loss
}

/// Whether transaction `x` wrote a record decoding enters in its reorder buffer (see
/// `decode::span_of`; every transaction does where the WAL facts are not kept).
fn has_records(publ: &Publisher, x: Xid) -> bool {
    publ.wal_facts().is_none() || span_of(publ, x.0).is_some()
}

/// Why `slot` (after promotion; in-memory `catalog_xmin` `catalog_xmin`) cannot decode at all
/// on a standby that kept its WAL from `oldest` on and has removed catalog rows deleted
/// before `vacuumed`.
fn unusable(slot: &SlotRow, catalog_xmin: Xid, oldest: Lsn, vacuumed: Xid) -> Option<Unusable> {
    if let Some(cause) = slot.invalidation_reason {
        return Some(Unusable::Invalidated(cause));
    }
    let restart_lsn = slot.restart_lsn.unwrap_or(Lsn::INVALID);
    if restart_lsn < oldest {
        return Some(Unusable::WalRemoved {
            restart_lsn,
            oldest,
        });
    }
    (catalog_xmin.0 < vacuumed.0).then_some(Unusable::RowsRemoved {
        catalog_xmin,
        vacuumed,
    })
}

/// The oldest xid the new primary (the standby promoted with WAL through `f`) holds back
/// vacuum for besides its slots: its transactions still prepared, and its next xid. A
/// prepared transaction rolled back is taken as still prepared (the model keeps no LSN for
/// the rollback), which only holds vacuum back more.
fn held_at(publ: &Publisher, f: Lsn) -> u32 {
    let prepared = publ
        .txns
        .values()
        .filter(|t| t.prepare_end.is_some_and(|e| e <= f))
        .filter(|t| !matches!(t.fate, Fate::Committed { end_lsn, .. } if end_lsn <= f))
        .map(|t| t.xid.0)
        .min();
    let next = next_xid_at(publ, f).0;
    prepared.map_or(next, |x| x.min(next))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(restart: u64, xmin: u32) -> SlotRow {
        let mut s = SlotRow::logical(SLOT);
        s.restart_lsn = Some(Lsn(restart));
        s.catalog_xmin = Some(Xid(xmin));
        s
    }

    #[test]
    fn a_slot_is_unusable_without_its_wal_or_its_catalog_rows() {
        assert_eq!(
            unusable(&slot(0x5000, 1010), Xid(1010), Lsn(0x5000), Xid(1010)),
            None
        );
        assert_eq!(
            unusable(&slot(0x4ff0, 1010), Xid(1010), Lsn(0x5000), Xid(0)),
            Some(Unusable::WalRemoved {
                restart_lsn: Lsn(0x4ff0),
                oldest: Lsn(0x5000)
            })
        );
        assert_eq!(
            unusable(&slot(0x5000, 1009), Xid(1009), Lsn(0x5000), Xid(1010)),
            Some(Unusable::RowsRemoved {
                catalog_xmin: Xid(1009),
                vacuumed: Xid(1010)
            })
        );
        let mut gone = slot(0x5000, 1010);
        gone.invalidation_reason = Some(InvalidationCause::RowsRemoved);
        assert_eq!(
            unusable(&gone, Xid(1010), Lsn(0), Xid(0)),
            Some(Unusable::Invalidated(InvalidationCause::RowsRemoved))
        );
    }

    #[test]
    fn an_unusable_slot_counts_even_with_nothing_left_to_send() {
        let loss = LossWindow {
            unusable: Some(Unusable::Invalidated(InvalidationCause::WalRemoved)),
            ..LossWindow::default()
        };
        assert_eq!(loss.total(), 1);
    }
}
