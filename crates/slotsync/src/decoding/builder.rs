//! The snapshot builder and reorder buffer as far as the advance needs them
//! (`SnapBuild*`, `ReorderBuffer*`), and the slot's candidate positions they move.

use std::collections::{BTreeMap, BTreeSet};

use pgyard_types::{Lsn, Xid};

use super::{RunningXacts, SlotPositions, SnapshotFile, XactRecords};
use crate::row::{xid_follows, xid_precedes};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Build {
    Start,
    /// `BUILDING_SNAPSHOT` with its `next_phase_at`.
    Building(Xid),
    /// `FULL_SNAPSHOT` with its `next_phase_at`.
    Full(Xid),
    Consistent,
}

/// The slot's shared-memory state during the advance (`candidate_*` of `ReplicationSlot`).
pub(super) struct SlotState {
    pub(super) pos: SlotPositions,
    /// `candidate_xmin_lsn`, `candidate_catalog_xmin`.
    candidate_xmin: Option<(Lsn, Xid)>,
    /// `candidate_restart_valid`, `candidate_restart_lsn`.
    candidate_restart: Option<(Lsn, Lsn)>,
}

impl SlotState {
    /// `LogicalIncreaseXminForSlot`: a candidate waits for confirmation unless the slot has
    /// confirmed past it, and only the first pending one is kept.
    fn increase_xmin(&mut self, at: Lsn, xmin: Xid) {
        if !xid_follows(xmin, self.pos.catalog_xmin) {
            return;
        }
        if at <= self.pos.confirmed_flush_lsn {
            self.candidate_xmin = Some((at, xmin));
            self.confirm(self.pos.confirmed_flush_lsn);
        } else if self.candidate_xmin.is_none() {
            self.candidate_xmin = Some((at, xmin));
        }
    }

    /// `LogicalIncreaseRestartDecodingForSlot`.
    fn increase_restart(&mut self, at: Lsn, restart: Lsn) {
        if restart <= self.pos.restart_lsn {
            return;
        }
        if at <= self.pos.confirmed_flush_lsn {
            self.candidate_restart = Some((at, restart));
            self.confirm(self.pos.confirmed_flush_lsn);
        } else if self.candidate_restart.is_none() {
            self.candidate_restart = Some((at, restart));
        }
    }

    /// `LogicalConfirmReceivedLocation`.
    pub(super) fn confirm(&mut self, lsn: Lsn) {
        if lsn > self.pos.confirmed_flush_lsn {
            self.pos.confirmed_flush_lsn = lsn;
        }
        if let Some((valid, xmin)) = self.candidate_xmin {
            if valid <= lsn && xmin.0 != 0 && xmin != self.pos.catalog_xmin {
                self.pos.catalog_xmin = xmin;
                self.candidate_xmin = None;
            }
        }
        if let Some((valid, restart)) = self.candidate_restart {
            if valid <= lsn {
                self.pos.restart_lsn = self.pos.restart_lsn.max(restart);
                self.candidate_restart = None;
            }
        }
    }
}

/// A reorder-buffer transaction (`ReorderBufferTXN`), in `toplevel_by_lsn` order.
struct Txn {
    xid: Xid,
    /// `restart_decoding_lsn`: the restart point current when it was first seen.
    restart_decoding_lsn: Option<Lsn>,
    /// When and with which xmin it got its base snapshot (and whether that xmin is a
    /// restored snapshot's, which the inputs do not carry).
    base: Option<(Lsn, Xid, bool)>,
}

pub(super) struct Decoder {
    pub(super) slot: SlotState,
    pub(super) build: Build,
    /// `builder->xmin`.
    builder_xmin: Xid,
    /// Whether `builder_xmin` is a restored snapshot's (not in the inputs, approximated).
    builder_xmin_restored: bool,
    /// Where a snapshot file whose contents are not in the inputs was restored (its
    /// catalog-change list is unknown).
    restored_at: Option<Lsn>,
    /// `builder->catchange.xip` (from a restored file).
    catchange: Vec<Xid>,
    /// `builder->snapshot->xmin`, once built (base snapshots share it until rebuilt), and
    /// whether it came from a restored snapshot file.
    snapshot_xmin: Option<(Xid, bool)>,
    /// `builder->last_serialized_snapshot`.
    last_serialized: Option<Lsn>,
    /// `reorder->current_restart_decoding_lsn`.
    current_restart: Option<Lsn>,
    txns: Vec<Txn>,
    /// Known subtransactions (`RBTXN_IS_SUBXACT`) and their top-level xid.
    sub_of: BTreeMap<Xid, Xid>,
    /// Entries with `RBTXN_HAS_CATALOG_CHANGES`.
    catalog: BTreeSet<Xid>,
    pub(super) serialized: Vec<Lsn>,
    pub(super) approximate: bool,
}

impl Decoder {
    /// A decoder that has read nothing yet, for a slot at `start`.
    pub(super) fn new(start: SlotPositions) -> Decoder {
        Decoder {
            slot: SlotState {
                pos: start,
                candidate_xmin: None,
                candidate_restart: None,
            },
            build: Build::Start,
            builder_xmin: Xid(0),
            builder_xmin_restored: false,
            restored_at: None,
            catchange: Vec::new(),
            snapshot_xmin: None,
            last_serialized: None,
            current_restart: None,
            txns: Vec::new(),
            sub_of: BTreeMap::new(),
            catalog: BTreeSet::new(),
            serialized: Vec::new(),
            approximate: false,
        }
    }

    /// `SnapBuildProcessRunningXacts` followed by `ReorderBufferAbortOld`.
    pub(super) fn running_xacts(
        &mut self,
        at: Lsn,
        rec: &RunningXacts,
        prev_oldest: Option<Xid>,
        snapshots: &mut BTreeSet<Lsn>,
        files: &mut BTreeMap<Lsn, SnapshotFile>,
    ) {
        if self.build == Build::Consistent {
            // SnapBuildSerialize: an existing file is reused, either way it is the new
            // restart point. A new file holds the builder's xmin before this record and the
            // transactions flagged with catalog changes.
            if snapshots.insert(at) {
                self.serialized.push(at);
                if !self.builder_xmin_restored && self.restored_at.is_none() {
                    let catchange: Vec<Xid> = self.catalog.iter().copied().collect();
                    files.insert(
                        at,
                        SnapshotFile {
                            xmin: self.builder_xmin,
                            catchange,
                        },
                    );
                }
            }
            self.last_serialized = Some(at);
            self.current_restart = Some(at);
            self.after_find(at, rec);
        } else if self.find_snapshot(at, rec, prev_oldest, snapshots, files) {
            self.after_find(at, rec);
        }
        self.abort_old(rec.oldest_running_xid);
    }

    /// `SnapBuildFindSnapshot` (no initial xmin horizon: the advance passes none); returns
    /// whether the rest of the record's processing happens.
    fn find_snapshot(
        &mut self,
        at: Lsn,
        rec: &RunningXacts,
        prev_oldest: Option<Xid>,
        snapshots: &BTreeSet<Lsn>,
        files: &BTreeMap<Lsn, SnapshotFile>,
    ) -> bool {
        let (oldest, next) = (rec.oldest_running_xid, rec.next_xid);
        if oldest == next {
            self.builder_xmin = next;
            self.builder_xmin_restored = false;
            self.build = Build::Consistent;
            return false;
        }
        if snapshots.contains(&at) {
            if let Some(file) = files.get(&at) {
                self.builder_xmin = file.xmin;
                self.catchange = file.catchange.clone();
                self.snapshot_xmin = Some((file.xmin, false));
                self.current_restart = Some(at);
                self.build = Build::Consistent;
                return false;
            }
            // Contents unknown: the file's xmin is the builder xmin of whoever wrote it,
            // normally the oldestRunningXid of the running_xacts record before this one.
            let xmin = prev_oldest.unwrap_or(oldest);
            self.builder_xmin = xmin;
            self.builder_xmin_restored = true;
            self.restored_at = Some(at);
            self.snapshot_xmin = Some((xmin, true));
            self.current_restart = Some(at);
            self.build = Build::Consistent;
            return false;
        }
        match self.build {
            Build::Start => {
                self.build = Build::Building(next);
                self.builder_xmin = next;
                self.builder_xmin_restored = false;
            }
            Build::Building(phase) if !xid_follows(phase, oldest) => {
                self.build = Build::Full(next);
            }
            Build::Full(phase) if !xid_follows(phase, oldest) => {
                self.build = Build::Consistent;
            }
            _ => {}
        }
        true
    }

    /// The part of `SnapBuildProcessRunningXacts` after the consistency search: candidate
    /// catalog_xmin always, candidate restart_lsn once consistent.
    fn after_find(&mut self, at: Lsn, rec: &RunningXacts) {
        self.builder_xmin = rec.oldest_running_xid;
        self.builder_xmin_restored = false;
        // SnapBuildPurgeOlderTxn
        let xmin = self.builder_xmin;
        self.catchange.retain(|x| !xid_precedes(*x, xmin));
        // ReorderBufferGetOldestXmin: the base snapshot set first.
        let xmin = match self.txns.iter().filter_map(|t| t.base).min_by_key(|b| b.0) {
            Some((_, xmin, restored)) => {
                self.approximate |= restored;
                xmin
            }
            None => rec.oldest_running_xid,
        };
        self.slot.increase_xmin(at, xmin);
        if self.build != Build::Consistent {
            return;
        }
        match self.txns.first() {
            Some(t) => {
                if let Some(r) = t.restart_decoding_lsn {
                    self.slot.increase_restart(at, r);
                }
            }
            None => {
                if let (Some(_), Some(last)) = (self.current_restart, self.last_serialized) {
                    self.slot.increase_restart(at, last);
                }
            }
        }
    }

    /// `ReorderBufferAbortOld`: forgets transactions older than `oldest`, in LSN order,
    /// stopping at the first that is not (with their known subtransactions).
    fn abort_old(&mut self, oldest: Xid) {
        while let Some(t) = self.txns.first() {
            if !xid_precedes(t.xid, oldest) {
                break;
            }
            let xid = t.xid;
            self.cleanup(xid);
        }
    }

    pub(super) fn build_at_least_full(&self) -> bool {
        matches!(self.build, Build::Full(_) | Build::Consistent)
    }

    /// `ReorderBufferCleanupTXN`: a top-level entry goes with its known subtransactions; a
    /// known subtransaction just leaves its parent.
    fn cleanup(&mut self, xid: Xid) {
        if self.sub_of.remove(&xid).is_some() {
            self.catalog.remove(&xid);
            return;
        }
        if let Some(i) = self.txns.iter().position(|t| t.xid == xid) {
            self.txns.remove(i);
            self.catalog.remove(&xid);
            let subs: Vec<Xid> = self
                .sub_of
                .iter()
                .filter(|(_, top)| **top == xid)
                .map(|(s, _)| *s)
                .collect();
            for s in subs {
                self.sub_of.remove(&s);
                self.catalog.remove(&s);
            }
        }
    }

    /// `ReorderBufferTXNByXid(create, as top-level)`: the transaction's entry, created at its
    /// first record with the restart point current then.
    fn txn_entry(&mut self, xid: Xid) -> usize {
        match self.txns.iter().position(|t| t.xid == xid) {
            Some(i) => i,
            None => {
                self.txns.push(Txn {
                    xid,
                    restart_decoding_lsn: self.current_restart,
                    base: None,
                });
                self.txns.len() - 1
            }
        }
    }

    /// `ReorderBufferProcessXid`: a known subtransaction is already there; anything else gets
    /// a top-level entry.
    pub(super) fn process_xid(&mut self, xid: Xid) {
        if !self.sub_of.contains_key(&xid) {
            self.txn_entry(xid);
        }
    }

    /// `ReorderBufferAssignChild`: the top-level entry is created if needed; a subtransaction
    /// seen before as top-level leaves that list and hands an earlier base snapshot to its
    /// parent (`ReorderBufferTransferSnapToParent`).
    pub(super) fn assign_child(&mut self, top: Xid, sub: Xid) {
        if self.sub_of.contains_key(&top) {
            return;
        }
        self.txn_entry(top);
        if self.sub_of.contains_key(&sub) {
            return;
        }
        if let Some(i) = self.txns.iter().position(|t| t.xid == sub) {
            let moved = self.txns.remove(i);
            if let Some(b) = moved.base {
                if let Some(t) = self.txns.iter_mut().find(|t| t.xid == top) {
                    if t.base.is_none_or(|tb| b.0 < tb.0) {
                        t.base = Some(b);
                    }
                }
            }
        }
        self.sub_of.insert(sub, top);
    }

    /// A data change: `SnapBuildProcessChange` gives the transaction (the top-level one of a
    /// known subtransaction) a base snapshot.
    pub(super) fn change(&mut self, xid: Xid, at: Lsn) {
        self.process_xid(xid);
        let usable = match self.build {
            Build::Start | Build::Building(_) => false,
            Build::Full(phase) => !xid_precedes(xid, phase),
            Build::Consistent => true,
        };
        if !usable {
            return;
        }
        let target = self.sub_of.get(&xid).copied().unwrap_or(xid);
        let has_base = self
            .txns
            .iter()
            .any(|t| t.xid == target && t.base.is_some());
        if has_base {
            return;
        }
        let (xmin, restored) = *self.snapshot_xmin.get_or_insert((self.builder_xmin, false));
        let i = self.txn_entry(target);
        if let Some(t) = self.txns.get_mut(i) {
            t.base = Some((at, xmin, restored));
        }
    }

    /// `XLOG_XACT_INVALIDATIONS` (FULL or later): `ReorderBufferXidSetCatalogChanges`, which
    /// also flags the top-level transaction of a known subtransaction.
    pub(super) fn invalidation(&mut self, xid: Xid) {
        if !self.build_at_least_full() {
            return;
        }
        self.process_xid(xid);
        self.catalog.insert(xid);
        if let Some(top) = self.sub_of.get(&xid).copied() {
            self.catalog.insert(top);
        }
    }

    /// A commit or abort record (FULL or later; before that `xact_decode` bails out and the
    /// entry waits for `ReorderBufferAbortOld`). A commit of a transaction with catalog
    /// changes (its own or a listed subtransaction's flag) rebuilds the builder's snapshot
    /// from the builder's xmin (`SnapBuildCommitTxn`); then the transaction and its listed
    /// subtransactions are forgotten.
    pub(super) fn end(&mut self, x: &XactRecords) {
        if !self.build_at_least_full() {
            return;
        }
        if !x.aborted {
            let flagged = |d: &Decoder, xid: Xid| {
                d.catalog.contains(&xid)
                    && (d.sub_of.contains_key(&xid) || d.txns.iter().any(|t| t.xid == xid))
            };
            // SnapBuildXidHasCatalogChanges: the reorder buffer's flag, or a restored
            // file's catalog-change list for a commit record with invalidations.
            let in_catchange = |d: &Decoder, xid: Xid| x.has_invals && d.catchange.contains(&xid);
            let catalog = flagged(self, x.xid)
                || in_catchange(self, x.xid)
                || x.subxids
                    .iter()
                    .any(|s| flagged(self, *s) || in_catchange(self, *s));
            if !catalog {
                if let Some(r) = self.restored_at {
                    // The restored file's catalog-change list is not in the inputs.
                    if x.invalidation_lsns.iter().any(|l| *l < r) {
                        self.approximate = true;
                    }
                }
            }
            if catalog {
                self.snapshot_xmin = Some((self.builder_xmin, self.builder_xmin_restored));
            }
        }
        for s in &x.subxids {
            self.cleanup(*s);
        }
        self.cleanup(x.xid);
    }
}
