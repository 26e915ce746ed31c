//! Rows of `pg_replication_slots`, typed, and their JSON form (`row_to_json` types).

use std::fmt;

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use crate::error::InputError;
use crate::input::Version;

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

    /// Reads a row from a JSON object keyed by column name (`row_to_json` types); missing
    /// columns are null or false.
    pub fn from_json(value: &Value) -> Result<SlotRow, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("a slot row is not a JSON object"))?;
        let slot_name = text(obj, "slot_name")?
            .ok_or_else(|| InputError::new("a slot row has no slot_name"))?;
        let ctx = |e: InputError| InputError(format!("slot {slot_name:?}: {}", e.0));
        let slot_type = match text(obj, "slot_type").map_err(ctx)?.as_deref() {
            Some("physical") => SlotType::Physical,
            Some("logical") | None => SlotType::Logical,
            Some(other) => return Err(ctx(InputError(format!("unknown slot_type {other:?}")))),
        };
        let invalidation_reason =
            match text(obj, "invalidation_reason").map_err(ctx)? {
                None => None,
                Some(name) => Some(InvalidationCause::from_name(&name).ok_or_else(|| {
                    ctx(InputError(format!("unknown invalidation_reason {name:?}")))
                })?),
            };
        Ok(SlotRow {
            plugin: text(obj, "plugin").map_err(ctx)?,
            slot_type,
            datoid: oid(obj, "datoid").map_err(ctx)?,
            database: text(obj, "database").map_err(ctx)?,
            temporary: boolean(obj, "temporary").map_err(ctx)?,
            active: boolean(obj, "active").map_err(ctx)?,
            active_pid: int(obj, "active_pid").map_err(ctx)?,
            xmin: xid(obj, "xmin").map_err(ctx)?,
            catalog_xmin: xid(obj, "catalog_xmin").map_err(ctx)?,
            restart_lsn: lsn(obj, "restart_lsn").map_err(ctx)?,
            confirmed_flush_lsn: lsn(obj, "confirmed_flush_lsn").map_err(ctx)?,
            wal_status: text(obj, "wal_status").map_err(ctx)?,
            safe_wal_size: int(obj, "safe_wal_size").map_err(ctx)?,
            two_phase: boolean(obj, "two_phase").map_err(ctx)?,
            two_phase_at: lsn(obj, "two_phase_at").map_err(ctx)?,
            inactive_since: text(obj, "inactive_since").map_err(ctx)?,
            conflicting: opt_boolean(obj, "conflicting").map_err(ctx)?,
            invalidation_reason,
            failover: boolean(obj, "failover").map_err(ctx)?,
            synced: boolean(obj, "synced").map_err(ctx)?,
            slot_name,
        })
    }

    /// The row as a JSON object with `row_to_json`'s column names, order and types
    /// (PostgreSQL 18's view).
    pub fn to_json(&self) -> Value {
        self.to_json_as(Version::V18)
    }

    /// The row as that version's `pg_replication_slots` shows it (17 has no `two_phase_at`).
    pub fn to_json_as(&self, version: Version) -> Value {
        let mut m = Map::new();
        let s = |v: &Option<String>| v.clone().map_or(Value::Null, Value::String);
        let l = |v: Option<Lsn>| v.map_or(Value::Null, |x| Value::String(x.to_string()));
        let x = |v: Option<Xid>| v.map_or(Value::Null, |x| Value::String(x.0.to_string()));
        m.insert("slot_name".into(), Value::String(self.slot_name.clone()));
        m.insert("plugin".into(), s(&self.plugin));
        m.insert("slot_type".into(), self.slot_type.as_str().into());
        m.insert(
            "datoid".into(),
            self.datoid
                .map_or(Value::Null, |o| Value::String(o.to_string())),
        );
        m.insert("database".into(), s(&self.database));
        m.insert("temporary".into(), self.temporary.into());
        m.insert("active".into(), self.active.into());
        m.insert(
            "active_pid".into(),
            self.active_pid.map_or(Value::Null, Value::from),
        );
        m.insert("xmin".into(), x(self.xmin));
        m.insert("catalog_xmin".into(), x(self.catalog_xmin));
        m.insert("restart_lsn".into(), l(self.restart_lsn));
        m.insert("confirmed_flush_lsn".into(), l(self.confirmed_flush_lsn));
        m.insert("wal_status".into(), s(&self.wal_status));
        m.insert(
            "safe_wal_size".into(),
            self.safe_wal_size.map_or(Value::Null, Value::from),
        );
        m.insert("two_phase".into(), self.two_phase.into());
        if version >= Version::V18 {
            m.insert("two_phase_at".into(), l(self.two_phase_at));
        }
        m.insert("inactive_since".into(), s(&self.inactive_since));
        m.insert(
            "conflicting".into(),
            self.conflicting.map_or(Value::Null, Value::Bool),
        );
        m.insert(
            "invalidation_reason".into(),
            self.invalidation_reason
                .map_or(Value::Null, |c| Value::String(c.as_str().into())),
        );
        m.insert("failover".into(), self.failover.into());
        m.insert("synced".into(), self.synced.into());
        Value::Object(m)
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

// ---------------------------------------------------------------------------------------------
// JSON field readers: null and missing are the same; wrong types are errors, never panics.

fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn text(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(InputError(format!("{key}: expected a string, got {other}"))),
    }
}

pub(crate) fn opt_boolean(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(InputError(format!(
            "{key}: expected a boolean, got {other}"
        ))),
    }
}

fn boolean(obj: &Map<String, Value>, key: &str) -> Result<bool, InputError> {
    Ok(opt_boolean(obj, key)?.unwrap_or(false))
}

pub(crate) fn int(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::Number(n)) => n
            .as_i64()
            .map(Some)
            .ok_or_else(|| InputError(format!("{key}: {n} is not a 64-bit integer"))),
        Some(Value::String(s)) => s
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| InputError(format!("{key}: {s:?} is not an integer"))),
        Some(other) => Err(InputError(format!(
            "{key}: expected an integer, got {other}"
        ))),
    }
}

fn oid(obj: &Map<String, Value>, key: &str) -> Result<Option<u32>, InputError> {
    match int(obj, key)? {
        None => Ok(None),
        Some(v) => u32::try_from(v)
            .map(Some)
            .map_err(|_| InputError(format!("{key}: {v} is out of range"))),
    }
}

pub(crate) fn xid(obj: &Map<String, Value>, key: &str) -> Result<Option<Xid>, InputError> {
    Ok(oid(obj, key)?.map(Xid))
}

pub(crate) fn lsn(obj: &Map<String, Value>, key: &str) -> Result<Option<Lsn>, InputError> {
    match text(obj, key)? {
        None => Ok(None),
        Some(s) => s
            .parse::<Lsn>()
            .map(Some)
            .map_err(|e| InputError(format!("{key}: {e}"))),
    }
}
