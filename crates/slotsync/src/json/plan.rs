//! The `pgyard slotsync plan` format: read `{"remote_slots", "local_slots", "standby"}`, run
//! one `pg_sync_replication_slots()` call, print `{"actions", "slots_after"}`.

use serde_json::{Map, Value};

use super::input::xid_map_json;
use crate::engine::Outcome;
use crate::error::InputError;
use crate::input::{Standby, Version};
use crate::plan::PlanInput;
use crate::row::SlotRow;

impl PlanInput {
    /// Reads the plan input from JSON text.
    pub fn from_json_str(text: &str) -> Result<PlanInput, InputError> {
        let value: Value =
            serde_json::from_str(text).map_err(|e| InputError(format!("invalid JSON: {e}")))?;
        PlanInput::from_json(&value)
    }

    /// Reads the plan input from a JSON value.
    pub fn from_json(value: &Value) -> Result<PlanInput, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("the input is not a JSON object"))?;
        let rows = |key: &str| -> Result<Vec<SlotRow>, InputError> {
            match obj.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(a)) => a.iter().map(SlotRow::from_json).collect(),
                Some(_) => Err(InputError(format!("{key} is not an array"))),
            }
        };
        let standby = obj
            .get("standby")
            .ok_or_else(|| InputError::new("standby is missing"))?;
        Ok(PlanInput {
            remote_slots: rows("remote_slots")?,
            local_slots: rows("local_slots")?,
            standby: Standby::from_json(standby)?,
        })
    }

    /// The input as JSON.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let v = self.standby.version;
        let rows = |r: &[SlotRow]| Value::Array(r.iter().map(|x| x.to_json_as(v)).collect());
        m.insert("remote_slots".into(), rows(&self.remote_slots));
        m.insert("local_slots".into(), rows(&self.local_slots));
        m.insert("standby".into(), self.standby.to_json());
        Value::Object(m)
    }
}

/// The plan output: `{"actions": [...], "slots_after": [...]}`, plus
/// `"effective_catalog_xmins"` (slot → xid, when some slot's in-memory value is not its
/// `catalog_xmin`; feed it to the next call's `standby`) and `"error"` (message, detail,
/// sqlstate) when the server would raise one. Rows have `version`'s columns.
pub fn outcome_to_json(outcome: &Outcome, version: Version) -> Value {
    let mut m = Map::new();
    m.insert(
        "actions".into(),
        Value::Array(outcome.actions.iter().map(|a| a.to_json()).collect()),
    );
    m.insert(
        "slots_after".into(),
        Value::Array(
            outcome
                .slots_after
                .iter()
                .map(|r| r.to_json_as(version))
                .collect(),
        ),
    );
    if !outcome.effective_catalog_xmins.is_empty() {
        m.insert(
            "effective_catalog_xmins".into(),
            xid_map_json(&outcome.effective_catalog_xmins),
        );
    }
    if let Some(e) = &outcome.error {
        let mut err = Map::new();
        err.insert("message".into(), e.to_string().into());
        err.insert(
            "detail".into(),
            e.detail().map_or(Value::Null, Value::String),
        );
        err.insert("sqlstate".into(), e.sqlstate().into());
        m.insert("error".into(), Value::Object(err));
    }
    Value::Object(m)
}

/// What the CLI prints and returns for one input text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanRun {
    /// Standard output (the plan JSON; empty for unreadable input).
    pub stdout: String,
    /// Standard error: the server's error as psql shows it, or the input problem.
    pub stderr: String,
    /// 0: no error; 1: the server would raise an error; 2: unreadable input.
    pub exit_code: u8,
}

/// Runs the plan for the JSON `text` as `pgyard slotsync plan` does.
pub fn run_plan_text(text: &str) -> PlanRun {
    let input = match PlanInput::from_json_str(text) {
        Ok(i) => i,
        Err(e) => {
            return PlanRun {
                stdout: String::new(),
                stderr: format!("pgyard slotsync plan: {e}\n"),
                exit_code: 2,
            }
        }
    };
    let outcome = input.plan();
    let stdout = serde_json::to_string_pretty(&outcome_to_json(&outcome, input.standby.version))
        .unwrap_or_default()
        + "\n";
    match &outcome.error {
        None => PlanRun {
            stdout,
            stderr: String::new(),
            exit_code: 0,
        },
        Some(e) => PlanRun {
            stdout,
            stderr: e.psql_text() + "\n",
            exit_code: 1,
        },
    }
}
