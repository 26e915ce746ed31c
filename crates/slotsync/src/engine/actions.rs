//! What one cycle decides: its actions, skip and drop reasons (their JSON form is in
//! [`crate::json`]).

use std::collections::BTreeMap;

use pgyard_types::{Lsn, Xid};

use crate::decoding::SnapshotFile;
use crate::error::SyncError;
use crate::row::{InvalidationCause, SlotRow};

/// Who runs the cycle: the SQL function or the slot sync worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// `pg_sync_replication_slots()`: one cycle, errors abort it, temporary slots are dropped.
    Function,
    /// The `slotsync worker`: "ahead of the standby" is a LOG skip and temporary slots stay.
    Worker,
}

/// Why a local synced slot is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// No slot of that name on the primary.
    RemoteGone,
    /// The primary's slot has `failover = false`.
    RemoteNotFailover,
    /// The primary's slot is temporary (never fetched).
    RemoteTemporary,
    /// The primary's slot is still being created (invalid LSNs or xmin while valid).
    RemoteBeingCreated,
    /// Invalidated on the standby while valid on the primary (re-created next cycle).
    LocallyInvalidated,
    /// Still temporary when the SQL function returned (or the worker exited / promotion).
    NotSyncReady,
}

impl DropReason {
    /// A short machine name.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::RemoteGone => "remote_gone",
            DropReason::RemoteNotFailover => "remote_not_failover",
            DropReason::RemoteTemporary => "remote_temporary",
            DropReason::RemoteBeingCreated => "remote_being_created",
            DropReason::LocallyInvalidated => "locally_invalidated",
            DropReason::NotSyncReady => "not_sync_ready",
        }
    }
}

/// Why a remote slot was left alone this cycle.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// The remote row has invalid LSNs or xmin while valid: it is being created.
    RemoteBeingCreated,
    /// Invalidated on the primary and absent locally: never created.
    RemoteInvalidated,
    /// The local slot is invalidated: never synced again.
    Invalidated(InvalidationCause),
    /// Remote `confirmed_flush_lsn` beyond the standby's flush position (worker: LOG).
    AheadOfStandby {
        /// Remote `confirmed_flush_lsn`.
        remote: Lsn,
        /// Standby flush position.
        standby: Lsn,
    },
    /// The remote slot needs WAL or catalog rows older than the local slot holds
    /// (LOG for a temporary slot, DEBUG1 for a persistent one).
    RemotePrecedes {
        /// Remote `restart_lsn`.
        remote_lsn: Lsn,
        /// Remote `catalog_xmin`.
        remote_xmin: Xid,
        /// Local `restart_lsn`.
        local_lsn: Lsn,
        /// Local `catalog_xmin`.
        local_xmin: Xid,
        /// Whether the local slot is still temporary.
        temporary: bool,
    },
    /// A temporary slot with nothing to advance: no consistent snapshot was checked.
    NoConsistentSnapshot {
        /// Local `restart_lsn`.
        restart_lsn: Lsn,
    },
}

impl SkipReason {
    /// A short machine name.
    pub fn as_str(&self) -> &'static str {
        match self {
            SkipReason::RemoteBeingCreated => "remote_being_created",
            SkipReason::RemoteInvalidated => "remote_invalidated",
            SkipReason::Invalidated(_) => "invalidated",
            SkipReason::AheadOfStandby { .. } => "ahead_of_standby",
            SkipReason::RemotePrecedes { .. } => "remote_precedes",
            SkipReason::NoConsistentSnapshot { .. } => "no_consistent_snapshot",
        }
    }

    /// The server log line (message and detail) for this skip, if it logs one.
    pub fn log(&self, slot: &str) -> Option<(String, Option<String>)> {
        match self {
            SkipReason::AheadOfStandby { remote, standby } => Some((
                SyncError::AheadOfStandby {
                    slot: slot.to_owned(),
                    remote: *remote,
                    standby: *standby,
                }
                .to_string(),
                None,
            )),
            SkipReason::RemotePrecedes {
                remote_lsn,
                remote_xmin,
                local_lsn,
                local_xmin,
                ..
            } => Some((
                format!("could not synchronize replication slot \"{slot}\""),
                Some(format!(
                    "Synchronization could lead to data loss, because the remote slot needs WAL at LSN {remote_lsn} and catalog xmin {remote_xmin}, but the standby has LSN {local_lsn} and catalog xmin {local_xmin}."
                )),
            )),
            SkipReason::NoConsistentSnapshot { restart_lsn } => Some((
                format!("could not synchronize replication slot \"{slot}\""),
                Some(format!(
                    "Synchronization could lead to data loss, because the standby could not build a consistent snapshot to decode WALs at LSN {restart_lsn}."
                )),
            )),
            _ => None,
        }
    }
}

/// Where an update's `restart_lsn` and `catalog_xmin` came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Positions {
    /// Copied from the remote: the standby has a serialized snapshot at the remote
    /// `restart_lsn` (or the input lists no snapshots and a copy is assumed).
    Copied,
    /// Advanced by decoding the standby's WAL up to the remote `confirmed_flush_lsn`.
    Decoded {
        /// Whether decoding reached a consistent snapshot.
        consistent: bool,
        /// Whether a case the model does not cover decided a value (see [`crate::decoding`]).
        approximate: bool,
    },
}

impl Positions {
    /// `copied` or `decoded`.
    pub fn as_str(self) -> &'static str {
        match self {
            Positions::Copied => "copied",
            Positions::Decoded { .. } => "decoded",
        }
    }
}

/// One column an [`Action::Update`] changes, with its new value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// `restart_lsn`.
    RestartLsn(Lsn),
    /// `confirmed_flush_lsn`.
    ConfirmedFlushLsn(Lsn),
    /// `catalog_xmin`.
    CatalogXmin(Xid),
    /// `plugin` (NULL as `None`).
    Plugin(Option<String>),
    /// `datoid` and `database`, which change together.
    Database {
        /// `datoid`.
        datoid: Option<u32>,
        /// `database`.
        database: Option<String>,
    },
    /// `two_phase`.
    TwoPhase(bool),
    /// `two_phase_at` (NULL as `None`; 18 only).
    TwoPhaseAt(Option<Lsn>),
    /// `failover`.
    Failover(bool),
}

impl Change {
    /// The `pg_replication_slots` column changed (`datoid` for [`Change::Database`], which
    /// also sets `database`).
    pub fn column(&self) -> &'static str {
        match self {
            Change::RestartLsn(_) => "restart_lsn",
            Change::ConfirmedFlushLsn(_) => "confirmed_flush_lsn",
            Change::CatalogXmin(_) => "catalog_xmin",
            Change::Plugin(_) => "plugin",
            Change::Database { .. } => "datoid",
            Change::TwoPhase(_) => "two_phase",
            Change::TwoPhaseAt(_) => "two_phase_at",
            Change::Failover(_) => "failover",
        }
    }
}

/// One decision of a sync cycle, in the order the server takes them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// A local synced slot is dropped.
    Drop {
        /// Slot name.
        slot: String,
        /// Its database OID (as logged: `dropped replication slot "%s" of database with OID %u`).
        datoid: Option<u32>,
        /// Why.
        reason: DropReason,
    },
    /// A new temporary synced slot is created and reserves WAL and catalog rows.
    Create {
        /// Slot name.
        slot: String,
        /// Reserved `restart_lsn`: the later of the remote one and what the standby holds.
        restart_lsn: Lsn,
        /// Initial `catalog_xmin`: the standby's oldest safe decoding xid.
        catalog_xmin: Xid,
    },
    /// A local slot takes the remote's positions and/or settings.
    Update {
        /// Slot name.
        slot: String,
        /// Columns changed, with their new values, in the order the server's copy sets them.
        set: Vec<Change>,
        /// How the positions were synced, when they were (`None`: settings only).
        positions: Option<Positions>,
    },
    /// A temporary synced slot becomes persistent ("sync-ready").
    Persist {
        /// Slot name.
        slot: String,
    },
    /// The remote's invalidation is copied to the local slot.
    Invalidate {
        /// Slot name.
        slot: String,
        /// The cause copied.
        cause: InvalidationCause,
    },
    /// Nothing done for this slot this cycle.
    Skip {
        /// Slot name.
        slot: String,
        /// Why.
        reason: SkipReason,
    },
}

impl Action {
    /// The slot the action is about.
    pub fn slot(&self) -> &str {
        match self {
            Action::Drop { slot, .. }
            | Action::Create { slot, .. }
            | Action::Update { slot, .. }
            | Action::Persist { slot }
            | Action::Invalidate { slot, .. }
            | Action::Skip { slot, .. } => slot,
        }
    }
}

/// What one cycle decided and left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Decisions in order (for the function, the final drops of temporary slots included).
    pub actions: Vec<Action>,
    /// The standby's `pg_replication_slots` afterwards (also after an error: what survives).
    pub slots_after: Vec<SlotRow>,
    /// The error that ended the cycle, if any.
    pub error: Option<SyncError>,
    /// Whether any slot was created, updated or invalidated (drives the worker's naptime).
    pub updated: bool,
    /// The in-memory `effective_catalog_xmin` of the slots in `slots_after` where it is not
    /// their `catalog_xmin` (a decoded update leaves the slot's own lower than the remote's,
    /// which the server puts in memory). Pass it as the next call's
    /// [`crate::Standby::effective_catalog_xmins`].
    pub effective_catalog_xmins: BTreeMap<String, Xid>,
    /// The standby's serialized snapshots afterwards: the input's and those decoding wrote
    /// (`None` when the input's were unknown). Pass it as the next call's
    /// [`crate::Standby::serialized_snapshots`].
    pub serialized_snapshots: Option<Vec<Lsn>>,
    /// What is known of those files' contents afterwards, the ones decoding wrote included.
    /// Pass it as the next call's [`crate::Standby::snapshot_files`].
    pub snapshot_files: BTreeMap<Lsn, SnapshotFile>,
}
