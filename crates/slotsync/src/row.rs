//! Rows of `pg_replication_slots`, typed (their JSON form is in [`crate::json`]).

use std::fmt;

use pgyard_types::{Lsn, Xid};

/// `slot_type`: physical or logical.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotType {
    /// A physical slot (streaming replication).
    Physical,
    /// A logical slot (logical decoding).
    Logical,
}

impl SlotType {
    /// The text `pg_replication_slots` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            SlotType::Physical => "physical",
            SlotType::Logical => "logical",
        }
    }
}

/// Why a slot was invalidated (`invalidation_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum InvalidationCause {
    /// `wal_removed`: required WAL was removed.
    WalRemoved,
    /// `rows_removed`: required catalog rows were removed.
    RowsRemoved,
    /// `wal_level_insufficient`: the primary's `wal_level` went below logical.
    WalLevelInsufficient,
    /// `idle_timeout`: idle longer than `idle_replication_slot_timeout` (PG18).
    IdleTimeout,
}

impl InvalidationCause {
    /// The name PostgreSQL shows in `invalidation_reason`.
    pub fn as_str(self) -> &'static str {
        match self {
            InvalidationCause::WalRemoved => "wal_removed",
            InvalidationCause::RowsRemoved => "rows_removed",
            InvalidationCause::WalLevelInsufficient => "wal_level_insufficient",
            InvalidationCause::IdleTimeout => "idle_timeout",
        }
    }

    /// Parses the name shown in `invalidation_reason`.
    pub fn from_name(name: &str) -> Option<InvalidationCause> {
        Some(match name {
            "wal_removed" => InvalidationCause::WalRemoved,
            "rows_removed" => InvalidationCause::RowsRemoved,
            "wal_level_insufficient" => InvalidationCause::WalLevelInsufficient,
            "idle_timeout" => InvalidationCause::IdleTimeout,
            _ => return None,
        })
    }

    /// Whether `conflicting` is true for a logical slot invalidated this way.
    pub fn is_conflict(self) -> bool {
        matches!(
            self,
            InvalidationCause::RowsRemoved | InvalidationCause::WalLevelInsufficient
        )
    }
}

impl fmt::Display for InvalidationCause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One row of `pg_replication_slots` (PostgreSQL 18 columns, in view order; 17 lacks
/// `two_phase_at`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRow {
    /// `slot_name`.
    pub slot_name: String,
    /// `plugin` (logical slots).
    pub plugin: Option<String>,
    /// `slot_type`.
    pub slot_type: SlotType,
    /// `datoid` (logical slots).
    pub datoid: Option<u32>,
    /// `database` name (logical slots).
    pub database: Option<String>,
    /// `temporary`.
    pub temporary: bool,
    /// `active`.
    pub active: bool,
    /// `active_pid`.
    pub active_pid: Option<i64>,
    /// `xmin`.
    pub xmin: Option<Xid>,
    /// `catalog_xmin`.
    pub catalog_xmin: Option<Xid>,
    /// `restart_lsn`.
    pub restart_lsn: Option<Lsn>,
    /// `confirmed_flush_lsn`.
    pub confirmed_flush_lsn: Option<Lsn>,
    /// `wal_status` (`reserved`, `extended`, `unreserved`, `lost`).
    pub wal_status: Option<String>,
    /// `safe_wal_size` in bytes.
    pub safe_wal_size: Option<i64>,
    /// `two_phase`.
    pub two_phase: bool,
    /// `two_phase_at`.
    pub two_phase_at: Option<Lsn>,
    /// `inactive_since`, as the text `row_to_json` gives (not predicted for touched slots).
    pub inactive_since: Option<String>,
    /// `conflicting` (logical slots).
    pub conflicting: Option<bool>,
    /// `invalidation_reason`.
    pub invalidation_reason: Option<InvalidationCause>,
    /// `failover`.
    pub failover: bool,
    /// `synced`.
    pub synced: bool,
}

/// The column names of `pg_replication_slots` in PostgreSQL 18, in order.
pub const COLUMNS: [&str; 21] = [
    "slot_name",
    "plugin",
    "slot_type",
    "datoid",
    "database",
    "temporary",
    "active",
    "active_pid",
    "xmin",
    "catalog_xmin",
    "restart_lsn",
    "confirmed_flush_lsn",
    "wal_status",
    "safe_wal_size",
    "two_phase",
    "two_phase_at",
    "inactive_since",
    "conflicting",
    "invalidation_reason",
    "failover",
    "synced",
];

impl SlotRow {
    /// A logical slot row with the given name and everything else empty or false.
    pub fn logical(name: impl Into<String>) -> SlotRow {
        SlotRow {
            slot_name: name.into(),
            plugin: None,
            slot_type: SlotType::Logical,
            datoid: None,
            database: None,
            temporary: false,
            active: false,
            active_pid: None,
            xmin: None,
            catalog_xmin: None,
            restart_lsn: None,
            confirmed_flush_lsn: None,
            wal_status: None,
            safe_wal_size: None,
            two_phase: false,
            two_phase_at: None,
            inactive_since: None,
            conflicting: Some(false),
            invalidation_reason: None,
            failover: false,
            synced: false,
        }
    }

    /// A physical slot row with the given name.
    pub fn physical(name: impl Into<String>) -> SlotRow {
        SlotRow {
            slot_type: SlotType::Physical,
            conflicting: None,
            ..SlotRow::logical(name)
        }
    }
}

/// Whether `a` comes before `b` in PostgreSQL's circular xid order (`TransactionIdPrecedes`).
pub fn xid_precedes(a: Xid, b: Xid) -> bool {
    // Permanent xids (0, 1, 2) compare as plain integers.
    if a.0 < 3 || b.0 < 3 {
        return a.0 < b.0;
    }
    (a.0.wrapping_sub(b.0) as i32) < 0
}

/// Whether `a` comes after `b` in circular xid order (`TransactionIdFollows`).
pub fn xid_follows(a: Xid, b: Xid) -> bool {
    if a.0 < 3 || b.0 < 3 {
        return a.0 > b.0;
    }
    (a.0.wrapping_sub(b.0) as i32) > 0
}
