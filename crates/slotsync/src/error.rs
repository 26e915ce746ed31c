//! Errors: malformed input (`InputError`) and the server's own errors (`SyncError`,
//! `SlotOpError`), whose `Display` is PostgreSQL 18's primary message word for word.

use pgyard_types::Lsn;

/// Input that cannot be read (bad JSON, wrong column types, unknown settings values).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InputError(pub String);

impl InputError {
    pub(crate) fn new(text: &str) -> InputError {
        InputError(text.to_owned())
    }
}

/// An error PostgreSQL 18 raises from `pg_sync_replication_slots()` (or the worker).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// The server is not in recovery.
    #[error("replication slots can only be synchronized to a standby server")]
    NotInRecovery,
    /// `wal_level` below `logical`.
    #[error("replication slot synchronization requires \"wal_level\" >= \"logical\"")]
    WalLevelTooLow,
    /// `primary_slot_name` is empty.
    #[error("replication slot synchronization requires \"primary_slot_name\" to be set")]
    PrimarySlotNameUnset,
    /// `hot_standby_feedback` is off.
    #[error("replication slot synchronization requires \"hot_standby_feedback\" to be enabled")]
    HotStandbyFeedbackOff,
    /// `primary_conninfo` is empty.
    #[error("replication slot synchronization requires \"primary_conninfo\" to be set")]
    PrimaryConninfoUnset,
    /// `primary_conninfo` names no (non-empty) `dbname`.
    #[error(
        "replication slot synchronization requires \"dbname\" to be specified in \"primary_conninfo\""
    )]
    DbnameMissing,
    /// `primary_conninfo` does not parse (libpq's message follows).
    #[error("invalid connection string syntax: {0}")]
    ConninfoSyntax(String),
    /// The worker (or another call) is already syncing.
    #[error("cannot synchronize replication slots concurrently")]
    Concurrent,
    /// Promotion was signalled before the call.
    #[error("replication slot synchronization will not start because promotion was triggered")]
    PromotionTriggered,
    /// The server in `primary_conninfo` is itself a standby.
    #[error("cannot synchronize replication slots from a standby server")]
    RemoteIsStandby,
    /// `primary_slot_name` is not a physical slot on the primary.
    #[error(
        "replication slot \"{0}\" specified by \"primary_slot_name\" does not exist on primary server"
    )]
    PrimarySlotMissing(String),
    /// A non-synced local slot has the name of a remote failover slot.
    #[error(
        "exiting from slot synchronization because same name slot \"{0}\" already exists on the standby"
    )]
    SameNameSlot(String),
    /// The remote `confirmed_flush_lsn` is beyond what the standby has flushed.
    #[error(
        "skipping slot synchronization because the received slot sync LSN {remote} for slot \"{slot}\" is ahead of the standby position {standby}"
    )]
    AheadOfStandby {
        /// The slot.
        slot: String,
        /// Remote `confirmed_flush_lsn`.
        remote: Lsn,
        /// Standby flush position.
        standby: Lsn,
    },
    /// A persistent synced slot's `confirmed_flush` is ahead of the remote one (internal).
    #[error("cannot synchronize local slot \"{slot}\"")]
    LocalAhead {
        /// The slot.
        slot: String,
        /// Local `confirmed_flush_lsn`.
        local: Lsn,
        /// Remote `confirmed_flush_lsn`.
        remote: Lsn,
    },
    /// After decoding, the local `confirmed_flush` is not the remote one (internal; a
    /// temporary slot whose earlier decoding went past the remote position).
    #[error("synchronized confirmed_flush for slot \"{slot}\" differs from remote slot")]
    ConfirmedFlushDiffers {
        /// The slot.
        slot: String,
        /// Remote `confirmed_flush_lsn`.
        remote: Lsn,
        /// Local `confirmed_flush_lsn` after decoding.
        local: Lsn,
    },
    /// The slot to acquire is in use by another process.
    #[error("replication slot \"{slot}\" is active for PID {pid}")]
    SlotActive {
        /// The slot.
        slot: String,
        /// The process using it.
        pid: i64,
    },
    /// No free slot for a new synced slot (`max_replication_slots`).
    #[error("all replication slots are in use")]
    AllSlotsInUse,
    /// The WAL at the reservation point is gone.
    #[error("WAL required by replication slot {0} has been removed concurrently")]
    WalRemovedConcurrently(String),
}

impl SyncError {
    /// The `DETAIL` line, if the server sends one.
    pub fn detail(&self) -> Option<String> {
        match self {
            SyncError::LocalAhead {
                local, remote, ..
            } => Some(format!(
                "Local slot's start streaming location LSN({local}) is ahead of remote slot's LSN({remote})."
            )),
            SyncError::ConfirmedFlushDiffers { remote, local, .. } => Some(format!(
                "Remote slot has LSN {remote} but local slot has LSN {local}."
            )),
            _ => None,
        }
    }

    /// The `HINT` line, if the server sends one.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            SyncError::AllSlotsInUse => Some("Free one or increase \"max_replication_slots\"."),
            _ => None,
        }
    }

    /// The SQLSTATE.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            SyncError::NotInRecovery
            | SyncError::Concurrent
            | SyncError::PromotionTriggered
            | SyncError::SameNameSlot(_)
            | SyncError::AheadOfStandby { .. } => "55000",
            SyncError::RemoteIsStandby => "0A000",
            SyncError::ConninfoSyntax(_) => "42601",
            SyncError::SlotActive { .. } => "55006",
            SyncError::AllSlotsInUse => "53400",
            SyncError::LocalAhead { .. }
            | SyncError::ConfirmedFlushDiffers { .. }
            | SyncError::WalRemovedConcurrently(_) => "XX000",
            _ => "22023",
        }
    }

    /// The report as psql prints it: `ERROR:  …` and optional `DETAIL:`/`HINT:` lines.
    pub fn psql_text(&self) -> String {
        let mut s = format!("ERROR:  {self}");
        if let Some(d) = self.detail() {
            s.push_str(&format!("\nDETAIL:  {d}"));
        }
        if let Some(h) = self.hint() {
            s.push_str(&format!("\nHINT:  {h}"));
        }
        s
    }
}

/// An error PostgreSQL 18 raises for a user's slot operation on a standby.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SlotOpError {
    /// Decoding or advancing a synced slot in recovery.
    #[error("cannot use replication slot \"{0}\" for logical decoding")]
    CannotUseSynced(String),
    /// Dropping a synced slot in recovery.
    #[error("cannot drop replication slot \"{0}\"")]
    CannotDropSynced(String),
    /// Altering a synced slot in recovery.
    #[error("cannot alter replication slot \"{0}\"")]
    CannotAlterSynced(String),
    /// Creating a failover slot on a standby.
    #[error("cannot enable failover for a replication slot created on the standby")]
    FailoverOnStandby,
    /// Enabling failover on an existing slot on a standby.
    #[error("cannot enable failover for a replication slot on the standby")]
    AlterFailoverOnStandby,
    /// Creating a temporary failover slot.
    #[error("cannot enable failover for a temporary replication slot")]
    FailoverTemporary,
    /// No such slot.
    #[error("replication slot \"{0}\" does not exist")]
    NoSuchSlot(String),
    /// The slot exists already.
    #[error("replication slot \"{0}\" already exists")]
    AlreadyExists(String),
    /// The slot was invalidated.
    #[error("can no longer access replication slot \"{0}\"")]
    Invalidated(String, crate::row::InvalidationCause),
    /// The slot was invalidated: PostgreSQL 17's words, when decoding starts.
    #[error("can no longer get changes from replication slot \"{0}\"")]
    InvalidatedV17(String, crate::row::InvalidationCause),
}

impl SlotOpError {
    /// The `DETAIL` line, if any.
    pub fn detail(&self) -> Option<String> {
        match self {
            SlotOpError::CannotUseSynced(_)
            | SlotOpError::CannotDropSynced(_)
            | SlotOpError::CannotAlterSynced(_) => {
                Some("This replication slot is being synchronized from the primary server.".into())
            }
            SlotOpError::Invalidated(_, cause) => Some(format!(
                "This replication slot has been invalidated due to \"{cause}\"."
            )),
            SlotOpError::InvalidatedV17(_, crate::row::InvalidationCause::WalRemoved) => Some(
                "This slot has been invalidated because it exceeded the maximum reserved size."
                    .into(),
            ),
            SlotOpError::InvalidatedV17(..) => Some(
                "This slot has been invalidated because it was conflicting with recovery.".into(),
            ),
            _ => None,
        }
    }

    /// The `HINT` line, if any.
    pub fn hint(&self) -> Option<&'static str> {
        match self {
            SlotOpError::CannotUseSynced(_) => Some("Specify another replication slot."),
            _ => None,
        }
    }
}
