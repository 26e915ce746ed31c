//! One synchronization cycle (`synchronize_slots` in PostgreSQL 18), its prerequisite checks,
//! promotion, and the user operations a standby refuses on synced slots.

use std::collections::{BTreeMap, BTreeSet};

use pgyard_types::{Lsn, Xid};

use crate::decoding::{self, SlotPositions};
use crate::error::SyncError;
use crate::input::{Standby, Version, WalLevel};
use crate::row::{xid_follows, xid_precedes, InvalidationCause, SlotRow, SlotType};

mod actions;
mod planted;
mod settings;
mod user_ops;

pub use actions::{Action, Caller, Change, DropReason, Outcome, Positions, SkipReason};
#[cfg(feature = "planted-bugs")]
pub use planted::PlantedBug;
use planted::{takes_preceding_remote, Bug};
use settings::{config_differs, copy_config, copy_settings};
pub use user_ops::{check_user_op, promote, UserOp};

/// The checks `pg_sync_replication_slots()` makes before touching any slot, in the server's
/// order; returns the `dbname` from `primary_conninfo`.
pub fn check_function_prerequisites(standby: &Standby) -> Result<String, SyncError> {
    if !standby.in_recovery {
        return Err(SyncError::NotInRecovery);
    }
    validate_params(standby)?;
    let dbname = dbname_from_conninfo(&standby.primary_conninfo)?;
    if standby.promotion_triggered {
        return Err(SyncError::PromotionTriggered);
    }
    if standby.sync_replication_slots {
        return Err(SyncError::Concurrent);
    }
    Ok(dbname)
}

/// `ValidateSlotSyncParams`: the four local settings, first failure wins.
pub fn validate_params(standby: &Standby) -> Result<(), SyncError> {
    if standby.wal_level < WalLevel::Logical {
        return Err(SyncError::WalLevelTooLow);
    }
    if standby.primary_slot_name.is_empty() {
        return Err(SyncError::PrimarySlotNameUnset);
    }
    if !standby.hot_standby_feedback {
        return Err(SyncError::HotStandbyFeedbackOff);
    }
    if standby.primary_conninfo.is_empty() {
        return Err(SyncError::PrimaryConninfoUnset);
    }
    Ok(())
}

/// The `dbname` of a `primary_conninfo`, read as libpq's `PQconninfoParse` reads it (no
/// expansion); an empty value counts as missing.
pub fn dbname_from_conninfo(conninfo: &str) -> Result<String, SyncError> {
    let info = pgyard_conninfo::parse(conninfo.as_bytes()).map_err(|e| {
        SyncError::ConninfoSyntax(String::from_utf8_lossy(&e.libpq_message()).into_owned())
    })?;
    match info.get_str(pgyard_conninfo::Keyword::Dbname) {
        Some(db) if !db.is_empty() => Ok(db.into_owned()),
        _ => Err(SyncError::DbnameMissing),
    }
}

/// `validate_remote_info`: the primary must not be in recovery and must have the physical
/// slot named by `primary_slot_name` (`remote_slots` is every row of its view).
pub fn validate_remote(standby: &Standby, remote_slots: &[SlotRow]) -> Result<(), SyncError> {
    if standby.primary_in_recovery {
        return Err(SyncError::RemoteIsStandby);
    }
    let found = remote_slots
        .iter()
        .filter(|r| r.slot_type == SlotType::Physical && r.slot_name == standby.primary_slot_name)
        .count();
    if found != 1 {
        return Err(SyncError::PrimarySlotMissing(
            standby.primary_slot_name.clone(),
        ));
    }
    Ok(())
}

/// What the worker does at launch with these settings: `Ok` if it starts, or the LOG line the
/// postmaster writes instead (the worker is then not started).
pub fn worker_launch_check(standby: &Standby) -> Result<(), SyncError> {
    if !standby.in_recovery || !standby.sync_replication_slots {
        return Err(SyncError::NotInRecovery);
    }
    validate_params(standby)
}

/// One `pg_sync_replication_slots()` call: prerequisite checks, then [`sync_cycle`].
pub fn sync_function(
    remote_slots: &[SlotRow],
    local_slots: &[SlotRow],
    standby: &Standby,
) -> Outcome {
    function(remote_slots, local_slots, standby, None)
}

/// [`sync_function`] with a planted bug switched on (simulator tests only).
#[cfg(feature = "planted-bugs")]
pub fn sync_function_planted(
    remote_slots: &[SlotRow],
    local_slots: &[SlotRow],
    standby: &Standby,
    bug: PlantedBug,
) -> Outcome {
    function(remote_slots, local_slots, standby, Some(bug))
}

/// [`sync_cycle`] with a planted bug switched on (simulator tests only).
#[cfg(feature = "planted-bugs")]
pub fn sync_cycle_planted(
    remote_slots: &[SlotRow],
    local_slots: &[SlotRow],
    standby: &Standby,
    caller: Caller,
    bug: PlantedBug,
) -> Outcome {
    cycle(remote_slots, local_slots, standby, caller, Some(bug))
}

fn function(
    remote_slots: &[SlotRow],
    local_slots: &[SlotRow],
    standby: &Standby,
    bug: Bug,
) -> Outcome {
    let checked =
        check_function_prerequisites(standby).and_then(|_| validate_remote(standby, remote_slots));
    if let Err(e) = checked {
        return Outcome {
            actions: Vec::new(),
            slots_after: local_slots.to_vec(),
            error: Some(e),
            updated: false,
            effective_catalog_xmins: initial_effective(local_slots, standby)
                .into_iter()
                .filter(|(name, x)| {
                    local_slots
                        .iter()
                        .any(|r| &r.slot_name == name && r.catalog_xmin != Some(*x))
                })
                .collect(),
            serialized_snapshots: standby.serialized_snapshots.clone(),
            snapshot_files: standby.snapshot_files.clone(),
        };
    }
    cycle(remote_slots, local_slots, standby, Caller::Function, bug)
}

/// One synchronization cycle without the prerequisite checks (`synchronize_slots`).
pub fn sync_cycle(
    remote_slots: &[SlotRow],
    local_slots: &[SlotRow],
    standby: &Standby,
    caller: Caller,
) -> Outcome {
    cycle(remote_slots, local_slots, standby, caller, None)
}

fn cycle(
    remote_slots: &[SlotRow],
    local_slots: &[SlotRow],
    standby: &Standby,
    caller: Caller,
    bug: Bug,
) -> Outcome {
    let mut cycle = Cycle {
        bug,
        table: local_slots.iter().cloned().map(Some).collect(),
        actions: Vec::new(),
        updated: false,
        standby,
        caller,
        snapshots: standby
            .serialized_snapshots
            .as_ref()
            .map(|v| v.iter().copied().collect()),
        files: standby.snapshot_files.clone(),
        effective: initial_effective(local_slots, standby),
        required: (None, None),
    };
    // Assumes the last computation came after any invalidation (see docs/slotsync.md).
    cycle.compute_required_xmin();
    let error = cycle.run(remote_slots).err();
    if caller == Caller::Function {
        cycle.drop_temporary_synced();
    }
    let slots_after: Vec<SlotRow> = cycle.table.into_iter().flatten().collect();
    let effective_catalog_xmins = slots_after
        .iter()
        .filter_map(|r| {
            let x = cycle.effective.get(&r.slot_name)?;
            (r.catalog_xmin != Some(*x)).then(|| (r.slot_name.clone(), *x))
        })
        .collect();
    Outcome {
        actions: cycle.actions,
        slots_after,
        error,
        updated: cycle.updated,
        effective_catalog_xmins,
        serialized_snapshots: cycle.snapshots.map(|s| s.into_iter().collect()),
        snapshot_files: cycle.files,
    }
}

/// Each local slot's in-memory `effective_catalog_xmin` when the call starts: the input's
/// value where given, else the view's `catalog_xmin` (what a server start restores).
fn initial_effective(local_slots: &[SlotRow], standby: &Standby) -> BTreeMap<String, Xid> {
    local_slots
        .iter()
        .filter_map(|r| {
            let x = standby
                .effective_catalog_xmins
                .get(&r.slot_name)
                .copied()
                .or(r.catalog_xmin)?;
            (x.0 != 0).then(|| (r.slot_name.clone(), x))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// the cycle

/// A remote row admitted to the sync list, with NULLs read as invalid.
struct Remote<'a> {
    row: &'a SlotRow,
    restart: Lsn,
    confirmed: Lsn,
    catalog_xmin: Xid,
    /// The standby's version, which decides what an update copies.
    version: Version,
    /// The planted bug in force, if any.
    bug: Bug,
}

struct Cycle<'a> {
    /// Local slots in array order; `None` is a free entry (dropped this cycle).
    table: Vec<Option<SlotRow>>,
    actions: Vec<Action>,
    updated: bool,
    standby: &'a Standby,
    caller: Caller,
    /// The standby's serialized snapshots, growing as decoding writes more (`None`: unknown).
    snapshots: Option<BTreeSet<Lsn>>,
    /// What is known of the snapshot files' contents, growing with the files decoding writes.
    files: BTreeMap<Lsn, decoding::SnapshotFile>,
    /// Each slot's in-memory `effective_catalog_xmin` (not always the view's `catalog_xmin`).
    effective: BTreeMap<String, Xid>,
    /// The ProcArray's `replication_slot_xmin` and `replication_slot_catalog_xmin` as last
    /// computed (`ReplicationSlotsComputeRequiredXmin`); invalid as `None`.
    required: (Option<Xid>, Option<Xid>),
    /// The planted bug in force, if any.
    bug: Bug,
}

impl Cycle<'_> {
    fn run(&mut self, remote_rows: &[SlotRow]) -> Result<(), SyncError> {
        let mut list = Vec::new();
        for row in remote_rows {
            if !row.failover || row.temporary {
                continue;
            }
            let r = Remote {
                row,
                restart: row.restart_lsn.unwrap_or(Lsn::INVALID),
                confirmed: row.confirmed_flush_lsn.unwrap_or(Lsn::INVALID),
                catalog_xmin: row.catalog_xmin.unwrap_or(Xid(0)),
                version: self.standby.version,
                bug: self.bug,
            };
            let incomplete =
                r.restart == Lsn::INVALID || r.confirmed == Lsn::INVALID || r.catalog_xmin.0 == 0;
            if incomplete && row.invalidation_reason.is_none() {
                self.actions.push(Action::Skip {
                    slot: row.slot_name.clone(),
                    reason: SkipReason::RemoteBeingCreated,
                });
                continue;
            }
            list.push(r);
        }
        self.drop_obsolete(remote_rows, &list)?;
        for r in &list {
            self.sync_one(r)?;
        }
        Ok(())
    }

    fn drop_obsolete(&mut self, remote_rows: &[SlotRow], list: &[Remote]) -> Result<(), SyncError> {
        for i in 0..self.table.len() {
            let Some(local) = self.table[i].as_ref() else {
                continue;
            };
            if !local.synced {
                continue;
            }
            let remote = list.iter().find(|r| r.row.slot_name == local.slot_name);
            let reason = match remote {
                Some(r) => {
                    if r.row.invalidation_reason.is_none() && local.invalidation_reason.is_some() {
                        DropReason::LocallyInvalidated
                    } else {
                        continue;
                    }
                }
                None => match remote_rows.iter().find(|r| r.slot_name == local.slot_name) {
                    None => DropReason::RemoteGone,
                    Some(r) if !r.failover => DropReason::RemoteNotFailover,
                    Some(r) if r.temporary => DropReason::RemoteTemporary,
                    Some(_) => DropReason::RemoteBeingCreated,
                },
            };
            if let Some(pid) = local.active_pid {
                return Err(SyncError::SlotActive {
                    slot: local.slot_name.clone(),
                    pid,
                });
            }
            self.actions.push(Action::Drop {
                slot: local.slot_name.clone(),
                datoid: local.datoid,
                reason,
            });
            let name = local.slot_name.clone();
            self.table[i] = None;
            self.effective.remove(&name);
            // ReplicationSlotDropPtr recomputes the horizons.
            self.compute_required_xmin();
        }
        Ok(())
    }

    fn sync_one(&mut self, r: &Remote) -> Result<(), SyncError> {
        let name = &r.row.slot_name;
        let flush = self.standby.flush_lsn();
        // PostgreSQL 18.4 checks this first, before looking at the local slot at all.
        if r.confirmed > flush {
            match self.caller {
                Caller::Function => {
                    return Err(SyncError::AheadOfStandby {
                        slot: name.clone(),
                        remote: r.confirmed,
                        standby: flush,
                    })
                }
                Caller::Worker => {
                    self.actions.push(Action::Skip {
                        slot: name.clone(),
                        reason: SkipReason::AheadOfStandby {
                            remote: r.confirmed,
                            standby: flush,
                        },
                    });
                    return Ok(());
                }
            }
        }
        let Some(idx) = self.position(name) else {
            return self.create(r);
        };
        let Some(local) = self.table[idx].as_mut() else {
            return Ok(());
        };
        if !local.synced {
            return Err(SyncError::SameNameSlot(name.clone()));
        }
        if let Some(pid) = local.active_pid {
            return Err(SyncError::SlotActive {
                slot: name.clone(),
                pid,
            });
        }
        let mut changed = false;
        if local.invalidation_reason.is_none() {
            if let Some(cause) = r.row.invalidation_reason {
                mark_invalidated(local, cause);
                self.actions.push(Action::Invalidate {
                    slot: name.clone(),
                    cause,
                });
                changed = true;
            }
        }
        if let Some(cause) = local.invalidation_reason {
            if !changed {
                self.actions.push(Action::Skip {
                    slot: name.clone(),
                    reason: SkipReason::Invalidated(cause),
                });
            }
            self.updated |= changed;
            return Ok(());
        }
        let mut wal = Wal {
            standby: self.standby,
            snapshots: &mut self.snapshots,
            files: &mut self.files,
        };
        let synced_positions = if local.temporary {
            let res = update_and_persist(local, r, &mut wal, &mut self.actions)?;
            self.updated |= res.persisted;
            res.positions_synced
        } else {
            let local_confirmed = local.confirmed_flush_lsn.unwrap_or(Lsn::INVALID);
            if r.confirmed < local_confirmed {
                return Err(SyncError::LocalAhead {
                    slot: name.clone(),
                    local: local_confirmed,
                    remote: r.confirmed,
                });
            }
            let res = update_local(local, r, &mut wal, &mut self.actions)?;
            self.updated |= res.changed;
            res.positions_synced
        };
        if synced_positions {
            self.positions_synced(name, r.catalog_xmin);
        }
        Ok(())
    }

    /// After `update_local_synced_slot` synced the positions: the in-memory
    /// `effective_catalog_xmin` becomes the **remote's** `catalog_xmin` (whatever decoding left
    /// in the slot), and the horizons are recomputed.
    fn positions_synced(&mut self, name: &str, remote_catalog_xmin: Xid) {
        self.effective.insert(name.to_owned(), remote_catalog_xmin);
        self.compute_required_xmin();
    }

    /// `ReplicationSlotsComputeRequiredXmin`: the oldest data xmin (`effective_xmin`, the view's
    /// `xmin`) and catalog xmin (`effective_catalog_xmin`) over the valid slots.
    fn compute_required_xmin(&mut self) {
        let mut xmin: Option<Xid> = None;
        let mut catalog: Option<Xid> = None;
        let older = |acc: &mut Option<Xid>, x: Option<Xid>| {
            if let Some(x) = x.filter(|x| x.0 != 0) {
                if acc.is_none_or(|a| xid_precedes(x, a)) {
                    *acc = Some(x);
                }
            }
        };
        for s in self.table.iter().flatten() {
            if s.invalidation_reason.is_some() {
                continue;
            }
            older(&mut xmin, s.xmin);
            older(&mut catalog, self.effective.get(&s.slot_name).copied());
        }
        self.required = (xmin, catalog);
    }

    fn create(&mut self, r: &Remote) -> Result<(), SyncError> {
        let name = &r.row.slot_name;
        if r.row.invalidation_reason.is_some() {
            self.actions.push(Action::Skip {
                slot: name.clone(),
                reason: SkipReason::RemoteInvalidated,
            });
            return Ok(());
        }
        let in_use = self.table.iter().flatten().count();
        if let Some(max) = self.standby.max_replication_slots {
            if in_use >= max {
                return Err(SyncError::AllSlotsInUse);
            }
        }
        let restart = self.reserve_wal(r.restart);
        let seg = self.standby.wal_segment_size_bytes.max(1);
        if let Some(oldest) = self.standby.oldest_wal_lsn {
            if restart.0 / seg < oldest.0 / seg {
                return Err(SyncError::WalRemovedConcurrently(name.clone()));
            }
        }
        let catalog_xmin = self.oldest_safe_xid();
        let mut row = SlotRow::logical(name.clone());
        row.plugin = r.row.plugin.clone();
        row.datoid = r.row.datoid;
        row.database = r.row.database.clone();
        row.temporary = true;
        row.synced = true;
        row.two_phase = r.row.two_phase;
        row.failover = r.row.failover;
        row.restart_lsn = Some(restart);
        row.catalog_xmin = Some(catalog_xmin);
        row.wal_status = Some("reserved".into());
        self.actions.push(Action::Create {
            slot: name.clone(),
            restart_lsn: restart,
            catalog_xmin,
        });
        let idx = match self.table.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                self.table.push(None);
                self.table.len() - 1
            }
        };
        self.table[idx] = Some(row);
        // effective_catalog_xmin = the initial catalog_xmin, then the horizons are recomputed.
        self.effective.insert(name.clone(), catalog_xmin);
        self.compute_required_xmin();
        self.updated = true;
        let mut wal = Wal {
            standby: self.standby,
            snapshots: &mut self.snapshots,
            files: &mut self.files,
        };
        let Some(row) = self.table[idx].as_mut() else {
            return Ok(());
        };
        let res = update_and_persist(row, r, &mut wal, &mut self.actions)?;
        if res.positions_synced {
            self.positions_synced(name, r.catalog_xmin);
        }
        Ok(())
    }

    /// The later of the remote `restart_lsn` and the oldest WAL the standby surely keeps: the
    /// earlier of its restartpoint's redo and the minimum `restart_lsn` of its valid slots.
    fn reserve_wal(&self, remote_restart: Lsn) -> Lsn {
        let slot_min = self
            .table
            .iter()
            .flatten()
            .filter(|s| s.invalidation_reason.is_none())
            .filter_map(|s| s.restart_lsn)
            .filter(|l| *l != Lsn::INVALID)
            .min();
        let min_safe = match (self.standby.redo_lsn, slot_min) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        remote_restart.max(min_safe.unwrap_or(Lsn::INVALID))
    }

    /// `GetOldestSafeDecodingTransactionId(true)` in recovery: the next xid, lowered by the
    /// ProcArray's slot horizons as last computed — the in-memory `effective_catalog_xmin`
    /// values, not the view's `catalog_xmin` (after a decoded update they differ).
    fn oldest_safe_xid(&self) -> Xid {
        let mut oldest = self.standby.snapshot_xmin;
        for x in [self.required.0, self.required.1].into_iter().flatten() {
            if xid_precedes(x, oldest) {
                oldest = x;
            }
        }
        oldest
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.table
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| s.slot_name == name))
    }

    fn drop_temporary_synced(&mut self) {
        let mut dropped = false;
        for entry in self.table.iter_mut() {
            if let Some(s) = entry {
                if s.synced && s.temporary {
                    self.actions.push(Action::Drop {
                        slot: s.slot_name.clone(),
                        datoid: None,
                        reason: DropReason::NotSyncReady,
                    });
                    self.effective.remove(&s.slot_name);
                    *entry = None;
                    dropped = true;
                }
            }
        }
        if dropped {
            self.compute_required_xmin();
        }
    }
}

fn mark_invalidated(local: &mut SlotRow, cause: InvalidationCause) {
    local.invalidation_reason = Some(cause);
    local.wal_status = Some("lost".into());
    local.safe_wal_size = None;
    local.conflicting = Some(cause.is_conflict());
    local.inactive_since = None;
}

/// What the WAL-dependent part of an update reads: the standby's WAL facts and its
/// serialized snapshots.
struct Wal<'a, 'b> {
    standby: &'a Standby,
    snapshots: &'b mut Option<BTreeSet<Lsn>>,
    files: &'b mut BTreeMap<Lsn, decoding::SnapshotFile>,
}

/// What `update_local_synced_slot` reports.
struct UpdateResult {
    changed: bool,
    precedes: bool,
    /// `found_consistent_snapshot`: positions synced and a consistent snapshot reachable.
    consistent: bool,
    /// `updated_xmin_or_lsn`: the positions were synced (copied or decoded).
    positions_synced: bool,
}

/// What `update_and_persist_local_synced_slot` did.
struct PersistResult {
    persisted: bool,
    positions_synced: bool,
}

/// `update_local_synced_slot`.
fn update_local(
    local: &mut SlotRow,
    r: &Remote,
    wal: &mut Wal,
    actions: &mut Vec<Action>,
) -> Result<UpdateResult, SyncError> {
    let name = &r.row.slot_name;
    let l_restart = local.restart_lsn.unwrap_or(Lsn::INVALID);
    let l_xmin = local.catalog_xmin.unwrap_or(Xid(0));
    let l_confirmed = local.confirmed_flush_lsn.unwrap_or(Lsn::INVALID);
    let precedes = r.restart < l_restart || xid_precedes(r.catalog_xmin, l_xmin);
    if precedes && !takes_preceding_remote(r.bug) {
        actions.push(Action::Skip {
            slot: name.clone(),
            reason: SkipReason::RemotePrecedes {
                remote_lsn: r.restart,
                remote_xmin: r.catalog_xmin,
                local_lsn: l_restart,
                local_xmin: l_xmin,
                temporary: local.temporary,
            },
        });
        // 17 goes on to copy the settings (not the positions); 18 returns here.
        let changed = r.version == Version::V17 && copy_config(local, r, actions);
        return Ok(UpdateResult {
            changed,
            precedes: true,
            consistent: false,
            positions_synced: false,
        });
    }
    let mut set: Vec<Change> = Vec::new();
    let mut positions = None;
    let mut consistent = false;
    if r.confirmed > l_confirmed || r.restart > l_restart || xid_follows(r.catalog_xmin, l_xmin) {
        let copy = wal
            .snapshots
            .as_ref()
            .is_none_or(|snaps| snaps.contains(&r.restart));
        let after = if copy {
            positions = Some(Positions::Copied);
            consistent = true;
            SlotPositions {
                restart_lsn: r.restart,
                confirmed_flush_lsn: r.confirmed,
                catalog_xmin: r.catalog_xmin,
            }
        } else {
            let start = SlotPositions {
                restart_lsn: l_restart,
                confirmed_flush_lsn: l_confirmed,
                catalog_xmin: l_xmin,
            };
            let snaps = wal.snapshots.get_or_insert_with(BTreeSet::new);
            let adv = decoding::advance_with_files(
                start,
                r.confirmed,
                wal.standby.wal_segment_size_bytes,
                &wal.standby.running_xacts,
                &wal.standby.xacts,
                snaps,
                wal.files,
            );
            positions = Some(Positions::Decoded {
                consistent: adv.consistent,
                approximate: adv.approximate,
            });
            consistent = adv.consistent;
            adv.positions
        };
        if after.restart_lsn != l_restart {
            set.push(Change::RestartLsn(after.restart_lsn));
        }
        if after.confirmed_flush_lsn != l_confirmed {
            set.push(Change::ConfirmedFlushLsn(after.confirmed_flush_lsn));
        }
        if after.catalog_xmin != l_xmin {
            set.push(Change::CatalogXmin(after.catalog_xmin));
        }
        local.restart_lsn = Some(after.restart_lsn);
        local.confirmed_flush_lsn = Some(after.confirmed_flush_lsn);
        local.catalog_xmin = Some(after.catalog_xmin);
        if after.confirmed_flush_lsn != r.confirmed {
            return Err(SyncError::ConfirmedFlushDiffers {
                slot: name.clone(),
                remote: r.confirmed,
                local: after.confirmed_flush_lsn,
            });
        }
    }
    let config = config_differs(local, r);
    if config {
        copy_settings(local, r, &mut set);
    }
    let changed = positions.is_some() || config;
    if changed {
        local.inactive_since = None;
        actions.push(Action::Update {
            slot: name.clone(),
            set,
            positions,
        });
    }
    Ok(UpdateResult {
        changed,
        precedes: false,
        consistent,
        positions_synced: positions.is_some(),
    })
}

/// `update_and_persist_local_synced_slot`: whether the slot became persistent.
fn update_and_persist(
    local: &mut SlotRow,
    r: &Remote,
    wal: &mut Wal,
    actions: &mut Vec<Action>,
) -> Result<PersistResult, SyncError> {
    let res = update_local(local, r, wal, actions)?;
    let mut out = PersistResult {
        persisted: false,
        positions_synced: res.positions_synced,
    };
    if res.precedes {
        return Ok(out);
    }
    if !res.consistent {
        actions.push(Action::Skip {
            slot: r.row.slot_name.clone(),
            reason: SkipReason::NoConsistentSnapshot {
                restart_lsn: local.restart_lsn.unwrap_or(Lsn::INVALID),
            },
        });
        return Ok(out);
    }
    local.temporary = false;
    actions.push(Action::Persist {
        slot: r.row.slot_name.clone(),
    });
    out.persisted = true;
    Ok(out)
}
