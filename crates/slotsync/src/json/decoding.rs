//! The JSON form of the decoding inputs, as plan files carry them.

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use super::{lsn, xid};
use crate::decoding::{RunningXacts, SnapshotFile, XactRecords};
use crate::error::InputError;

impl RunningXacts {
    /// Reads `{"start_lsn", "end_lsn", "oldest_running_xid", "next_xid", "xids", "subxids"}`.
    pub fn from_json(value: &Value) -> Result<RunningXacts, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("running_xacts: entry is not an object"))?;
        let need_lsn = |k: &str| {
            lsn(obj, k)?.ok_or_else(|| InputError(format!("running_xacts: {k} is required")))
        };
        let need_xid = |k: &str| {
            xid(obj, k)?.ok_or_else(|| InputError(format!("running_xacts: {k} is required")))
        };
        Ok(RunningXacts {
            start_lsn: need_lsn("start_lsn")?,
            end_lsn: lsn(obj, "end_lsn")?,
            oldest_running_xid: need_xid("oldest_running_xid")?,
            next_xid: need_xid("next_xid")?,
            xids: xid_list(obj, "xids")?,
            subxids: xid_list(obj, "subxids")?,
        })
    }

    /// The JSON object [`RunningXacts::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("start_lsn".into(), self.start_lsn.to_string().into());
        m.insert(
            "end_lsn".into(),
            self.end_lsn
                .map_or(Value::Null, |l| Value::String(l.to_string())),
        );
        m.insert(
            "oldest_running_xid".into(),
            self.oldest_running_xid.0.into(),
        );
        m.insert("next_xid".into(), self.next_xid.0.into());
        m.insert("xids".into(), xids_json(&self.xids));
        m.insert("subxids".into(), xids_json(&self.subxids));
        Value::Object(m)
    }
}

impl XactRecords {
    /// Reads `{"xid", "record_lsns", "change_lsns", "end_lsn"}` and the optional `"aborted"`,
    /// `"has_invals"`,
    /// `"subxids"`, `"top_xid"`, `"top_xid_lsn"`, `"invalidation_lsns"`, `"prepare_lsn"`.
    pub fn from_json(value: &Value) -> Result<XactRecords, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("xacts: entry is not an object"))?;
        Ok(XactRecords {
            xid: xid(obj, "xid")?.ok_or_else(|| InputError::new("xacts: xid is required"))?,
            record_lsns: lsn_list(obj, "record_lsns")?,
            change_lsns: lsn_list(obj, "change_lsns")?,
            end_lsn: lsn(obj, "end_lsn")?,
            aborted: matches!(obj.get("aborted"), Some(Value::Bool(true))),
            has_invals: matches!(obj.get("has_invals"), Some(Value::Bool(true))),
            subxids: xid_list(obj, "subxids")?,
            top_xid: xid(obj, "top_xid")?,
            top_xid_lsn: lsn(obj, "top_xid_lsn")?,
            invalidation_lsns: lsn_list(obj, "invalidation_lsns")?,
            prepare_lsn: lsn(obj, "prepare_lsn")?,
        })
    }

    /// The JSON object [`XactRecords::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("xid".into(), self.xid.0.into());
        m.insert("record_lsns".into(), lsns_json(&self.record_lsns));
        m.insert("change_lsns".into(), lsns_json(&self.change_lsns));
        m.insert(
            "end_lsn".into(),
            self.end_lsn
                .map_or(Value::Null, |l| Value::String(l.to_string())),
        );
        if self.aborted {
            m.insert("aborted".into(), true.into());
        }
        if self.has_invals {
            m.insert("has_invals".into(), true.into());
        }
        if !self.subxids.is_empty() {
            m.insert("subxids".into(), xids_json(&self.subxids));
        }
        if let Some(t) = self.top_xid {
            m.insert("top_xid".into(), t.0.into());
        }
        if let Some(l) = self.top_xid_lsn {
            m.insert("top_xid_lsn".into(), l.to_string().into());
        }
        if !self.invalidation_lsns.is_empty() {
            m.insert(
                "invalidation_lsns".into(),
                lsns_json(&self.invalidation_lsns),
            );
        }
        if let Some(l) = self.prepare_lsn {
            m.insert("prepare_lsn".into(), l.to_string().into());
        }
        Value::Object(m)
    }
}

impl SnapshotFile {
    /// Reads `{"xmin", "catchange"}`.
    pub fn from_json(value: &Value) -> Result<SnapshotFile, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("snapshot_files: entry is not an object"))?;
        Ok(SnapshotFile {
            xmin: xid(obj, "xmin")?
                .ok_or_else(|| InputError::new("snapshot_files: xmin is required"))?,
            catchange: xid_list(obj, "catchange")?,
        })
    }

    /// The JSON object [`SnapshotFile::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("xmin".into(), self.xmin.0.to_string().into());
        m.insert("catchange".into(), xids_json(&self.catchange));
        Value::Object(m)
    }
}

fn xid_list(obj: &Map<String, Value>, key: &str) -> Result<Vec<Xid>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                let n = match v {
                    Value::Number(n) => n.as_u64(),
                    Value::String(s) => s.trim().parse().ok(),
                    _ => None,
                };
                n.and_then(|n| u32::try_from(n).ok())
                    .map(Xid)
                    .ok_or_else(|| InputError(format!("{key}: not an xid: {v}")))
            })
            .collect(),
        Some(other) => Err(InputError(format!("{key}: expected an array, got {other}"))),
    }
}

fn lsn_list(obj: &Map<String, Value>, key: &str) -> Result<Vec<Lsn>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .and_then(|s| s.parse::<Lsn>().ok())
                    .ok_or_else(|| InputError(format!("{key}: not an LSN: {v}")))
            })
            .collect(),
        Some(other) => Err(InputError(format!("{key}: expected an array, got {other}"))),
    }
}

/// Reads an optional array of LSN strings.
pub(crate) fn opt_lsn_list(
    obj: &Map<String, Value>,
    key: &str,
) -> Result<Option<Vec<Lsn>>, InputError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => lsn_list(obj, key).map(Some),
    }
}

fn xids_json(xids: &[Xid]) -> Value {
    Value::Array(xids.iter().map(|x| Value::from(x.0)).collect())
}

pub(crate) fn lsns_json(lsns: &[Lsn]) -> Value {
    Value::Array(lsns.iter().map(|l| Value::String(l.to_string())).collect())
}
