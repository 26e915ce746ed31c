//! `pg_replication_slots` rows as `row_to_json` gives them.

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use super::{boolean, int, lsn, oid, opt_boolean, text, xid};
use crate::error::InputError;
use crate::input::Version;
use crate::row::{InvalidationCause, SlotRow, SlotType};

impl SlotRow {
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
