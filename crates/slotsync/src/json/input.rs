//! The plan input's `standby` object.

use std::collections::BTreeMap;

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use super::decoding::{lsns_json, opt_lsn_list};
use super::{int, lsn, opt_boolean, text, xid};
use crate::decoding::{RunningXacts, SnapshotFile, XactRecords};
use crate::error::InputError;
use crate::input::{parse_guc_bool, parse_size, Standby, Version, WalLevel};

impl Standby {
    /// Reads the `standby` object of the plan input.
    pub fn from_json(value: &Value) -> Result<Standby, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("standby is not a JSON object"))?;
        let d = Standby::default();
        let wal_level = match text(obj, "wal_level")? {
            None => d.wal_level,
            Some(t) => WalLevel::parse(&t)
                .ok_or_else(|| InputError(format!("wal_level: unknown value {t:?}")))?,
        };
        let snapshot_xmin = xid(obj, "snapshot_xmin")?
            .ok_or_else(|| InputError::new("standby.snapshot_xmin is required"))?;
        let wal_segment_size_bytes = match field_text(obj, "wal_segment_size")? {
            None => d.wal_segment_size_bytes,
            Some(t) => parse_size(&t)
                .ok_or_else(|| InputError(format!("wal_segment_size: cannot read {t:?}")))?,
        };
        let max_replication_slots = match int(obj, "max_replication_slots")? {
            None => None,
            Some(n) => Some(
                usize::try_from(n)
                    .map_err(|_| InputError(format!("max_replication_slots: {n}")))?,
            ),
        };
        let version = match field_text(obj, "server_version_num")? {
            None => d.version,
            Some(t) => Version::from_server_version_num(&t)?,
        };
        Ok(Standby {
            version,
            receive_lsn: lsn(obj, "receive_lsn")?,
            replay_lsn: lsn(obj, "replay_lsn")?,
            in_recovery: opt_boolean(obj, "in_recovery")?.unwrap_or(d.in_recovery),
            oldest_wal_lsn: lsn(obj, "oldest_wal_lsn")?,
            redo_lsn: lsn(obj, "redo_lsn")?,
            snapshot_xmin,
            wal_level,
            hot_standby_feedback: guc_bool(obj, "hot_standby_feedback", d.hot_standby_feedback)?,
            primary_slot_name: text(obj, "primary_slot_name")?.unwrap_or_default(),
            primary_conninfo: text(obj, "primary_conninfo")?.unwrap_or_default(),
            sync_replication_slots: guc_bool(obj, "sync_replication_slots", false)?,
            wal_segment_size_bytes,
            primary_in_recovery: opt_boolean(obj, "primary_in_recovery")?.unwrap_or(false),
            max_replication_slots,
            promotion_triggered: opt_boolean(obj, "promotion_triggered")?.unwrap_or(false),
            serialized_snapshots: opt_lsn_list(obj, "serialized_snapshots")?,
            snapshot_files: snapshot_files(obj)?,
            running_xacts: objects(obj, "running_xacts", RunningXacts::from_json)?,
            xacts: objects(obj, "xacts", XactRecords::from_json)?,
            effective_catalog_xmins: xid_map(obj, "effective_catalog_xmins")?,
        })
    }

    /// The `standby` object of the plan input.
    pub fn to_json(&self) -> Value {
        let l = |v: Option<Lsn>| v.map_or(Value::Null, |x| Value::String(x.to_string()));
        let onoff = |b: bool| Value::String(if b { "on" } else { "off" }.into());
        let mut m = Map::new();
        if self.version != Version::V18 {
            m.insert(
                "server_version_num".into(),
                self.version.server_version_num().into(),
            );
        }
        m.insert("receive_lsn".into(), l(self.receive_lsn));
        m.insert("replay_lsn".into(), l(self.replay_lsn));
        m.insert("in_recovery".into(), self.in_recovery.into());
        m.insert("oldest_wal_lsn".into(), l(self.oldest_wal_lsn));
        m.insert("redo_lsn".into(), l(self.redo_lsn));
        m.insert("snapshot_xmin".into(), self.snapshot_xmin.0.into());
        let level = match self.wal_level {
            WalLevel::Minimal => "minimal",
            WalLevel::Replica => "replica",
            WalLevel::Logical => "logical",
        };
        m.insert("wal_level".into(), level.into());
        m.insert(
            "hot_standby_feedback".into(),
            onoff(self.hot_standby_feedback),
        );
        m.insert(
            "primary_slot_name".into(),
            self.primary_slot_name.clone().into(),
        );
        m.insert(
            "primary_conninfo".into(),
            self.primary_conninfo.clone().into(),
        );
        m.insert(
            "sync_replication_slots".into(),
            onoff(self.sync_replication_slots),
        );
        let seg = self.wal_segment_size_bytes;
        let mb = seg / (1024 * 1024);
        let seg_text = if mb * 1024 * 1024 == seg {
            format!("{mb}MB")
        } else {
            seg.to_string()
        };
        m.insert("wal_segment_size".into(), seg_text.into());
        if self.primary_in_recovery {
            m.insert("primary_in_recovery".into(), true.into());
        }
        if let Some(max) = self.max_replication_slots {
            m.insert("max_replication_slots".into(), max.into());
        }
        if self.promotion_triggered {
            m.insert("promotion_triggered".into(), true.into());
        }
        if let Some(snaps) = &self.serialized_snapshots {
            m.insert("serialized_snapshots".into(), lsns_json(snaps));
        }
        if !self.snapshot_files.is_empty() {
            m.insert(
                "snapshot_files".into(),
                Value::Object(
                    self.snapshot_files
                        .iter()
                        .map(|(l, f)| (l.to_string(), f.to_json()))
                        .collect(),
                ),
            );
        }
        if !self.running_xacts.is_empty() {
            m.insert(
                "running_xacts".into(),
                Value::Array(self.running_xacts.iter().map(|r| r.to_json()).collect()),
            );
        }
        if !self.xacts.is_empty() {
            m.insert(
                "xacts".into(),
                Value::Array(self.xacts.iter().map(|x| x.to_json()).collect()),
            );
        }
        if !self.effective_catalog_xmins.is_empty() {
            m.insert(
                "effective_catalog_xmins".into(),
                xid_map_json(&self.effective_catalog_xmins),
            );
        }
        Value::Object(m)
    }
}

fn field_text(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Number(n)) => Ok(Some(n.to_string())),
        Some(other) => Err(InputError(format!("{key}: unexpected {other}"))),
    }
}

fn objects<T>(
    obj: &Map<String, Value>,
    key: &str,
    read: fn(&Value) -> Result<T, InputError>,
) -> Result<Vec<T>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a.iter().map(read).collect(),
        Some(other) => Err(InputError(format!("{key}: expected an array, got {other}"))),
    }
}

/// A JSON object of slot name → xid (string or number), as `effective_catalog_xmins` is.
pub(crate) fn xid_map(
    obj: &Map<String, Value>,
    key: &str,
) -> Result<BTreeMap<String, Xid>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => {
            let mut out = BTreeMap::new();
            for name in m.keys() {
                let x = xid(m, name)?
                    .ok_or_else(|| InputError(format!("{key}.{name}: xid expected")))?;
                out.insert(name.clone(), x);
            }
            Ok(out)
        }
        Some(other) => Err(InputError(format!(
            "{key}: expected an object of slot name to xid, got {other}"
        ))),
    }
}

fn snapshot_files(obj: &Map<String, Value>) -> Result<BTreeMap<Lsn, SnapshotFile>, InputError> {
    match obj.get("snapshot_files") {
        None | Some(Value::Null) => Ok(BTreeMap::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| {
                let l = k
                    .parse::<Lsn>()
                    .map_err(|_| InputError(format!("snapshot_files: not an LSN: {k}")))?;
                Ok((l, SnapshotFile::from_json(v)?))
            })
            .collect(),
        Some(other) => Err(InputError(format!(
            "snapshot_files: expected an object of LSN to file contents, got {other}"
        ))),
    }
}

/// The JSON form of a slot name → xid map (xids as strings, like the view's).
pub(super) fn xid_map_json(map: &BTreeMap<String, Xid>) -> Value {
    Value::Object(
        map.iter()
            .map(|(k, x)| (k.clone(), Value::String(x.0.to_string())))
            .collect(),
    )
}

fn guc_bool(obj: &Map<String, Value>, key: &str, default: bool) -> Result<bool, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(Value::String(s)) => {
            parse_guc_bool(s).ok_or_else(|| InputError(format!("{key}: not a boolean: {s:?}")))
        }
        Some(other) => Err(InputError(format!("{key}: not a boolean: {other}"))),
    }
}
