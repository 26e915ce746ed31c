//! What `pgyard slotsync snapshot` writes and `check --input` reads.

use std::collections::{BTreeMap, BTreeSet};

use pgyard_types::Lsn;
use serde_json::{json, Map, Value};

use crate::error::InputError;
use crate::input::Version;
use crate::plan::PlanInput;
use crate::row::SlotRow;
use crate::snapshot::{PrimaryFacts, Snapshot};

impl Snapshot {
    /// The snapshot as JSON: the plan input's keys (so `plan --input` reads it as it is),
    /// plus `primary` and `notes`.
    pub fn to_json(&self) -> Value {
        let mut v = self.input.to_json();
        if let Some(map) = v.as_object_mut() {
            if let Some(p) = &self.primary {
                map.insert(
                    "primary".into(),
                    json!({
                        "server_version_num": p.version.server_version_num(),
                        "synchronized_standby_slots": p.synchronized_standby_slots,
                        "sent_lsn": p.sent_lsn.iter()
                            .map(|(k, l)| (k.clone(), Value::String(l.to_string())))
                            .collect::<Map<String, Value>>(),
                        "sent_hidden": p.sent_hidden,
                    }),
                );
            }
            map.insert("notes".into(), json!(self.notes));
        }
        v
    }

    /// Reads what [`Snapshot::to_json`] wrote (also a bare plan input: no primary facts).
    pub fn from_json(value: &Value) -> Result<Snapshot, InputError> {
        let input = PlanInput::from_json(value)?;
        let primary = match value.get("primary") {
            None | Some(Value::Null) => None,
            Some(p) => Some(primary_from_json(p)?),
        };
        let notes = match value.get("notes") {
            Some(Value::Array(a)) => a
                .iter()
                .map(|n| n.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| InputError::new("notes: expected strings"))?,
            None | Some(Value::Null) => Vec::new(),
            Some(_) => return Err(InputError::new("notes: expected an array")),
        };
        Ok(Snapshot {
            input,
            primary,
            notes,
        })
    }
}

fn primary_from_json(p: &Value) -> Result<PrimaryFacts, InputError> {
    let version = match &p["server_version_num"] {
        Value::Null => Version::V18,
        Value::String(s) => Version::from_server_version_num(s)?,
        Value::Number(n) => Version::from_server_version_num(&n.to_string())?,
        other => return Err(InputError(format!("primary.server_version_num: {other}"))),
    };
    let mut sent_lsn = BTreeMap::new();
    match &p["sent_lsn"] {
        Value::Null => {}
        Value::Object(m) => {
            for (slot, l) in m {
                let l = l
                    .as_str()
                    .and_then(|s| s.parse::<Lsn>().ok())
                    .ok_or_else(|| InputError(format!("primary.sent_lsn.{slot}: {l}")))?;
                sent_lsn.insert(slot.clone(), l);
            }
        }
        other => return Err(InputError(format!("primary.sent_lsn: {other}"))),
    }
    let sent_hidden = match &p["sent_hidden"] {
        Value::Null => BTreeSet::new(),
        Value::Array(a) => a
            .iter()
            .map(|n| n.as_str().map(str::to_owned))
            .collect::<Option<BTreeSet<String>>>()
            .ok_or_else(|| InputError::new("primary.sent_hidden: expected slot names"))?,
        other => return Err(InputError(format!("primary.sent_hidden: {other}"))),
    };
    Ok(PrimaryFacts {
        version,
        synchronized_standby_slots: p["synchronized_standby_slots"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        sent_lsn,
        sent_hidden,
    })
}

/// Reads rows of `pg_replication_slots` from the JSON [`crate::snapshot::SLOTS_SQL`] returns.
pub fn rows_from_json(text: &str) -> Result<Vec<SlotRow>, InputError> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(a)) => a.iter().map(SlotRow::from_json).collect(),
        Ok(other) => Err(InputError(format!(
            "expected an array of rows, got {other}"
        ))),
        Err(e) => Err(InputError(format!("invalid JSON: {e}"))),
    }
}
