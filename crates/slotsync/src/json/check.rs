//! The `pgyard slotsync check --json` report.

use serde_json::{json, Map, Value};

use crate::check::{NextSync, Report};
use crate::engine::Caller;

impl Report {
    /// The `--json` form: `{"slots": [...], "warnings": [...], "unchecked": [...], "ready"}`.
    pub fn to_json(&self) -> Value {
        let slots: Vec<Value> = self
            .slots
            .iter()
            .map(|v| {
                json!({
                    "slot": v.slot,
                    "ready": v.ready,
                    "reason": v.reason,
                    "warnings": v.warnings,
                    "next_sync": v.next_sync.as_ref().map(next_sync_json),
                })
            })
            .collect();
        json!({
            "slots": slots,
            "ready": self.exit_code() == 0,
            "warnings": self.warnings,
            "unchecked": self.unchecked,
        })
    }
}

/// `{"caller", "actions", "error"}`.
fn next_sync_json(n: &NextSync) -> Value {
    let mut m = Map::new();
    let who = match n.caller {
        Caller::Worker => "worker",
        Caller::Function => "function",
    };
    m.insert("caller".into(), who.into());
    m.insert(
        "actions".into(),
        Value::Array(n.actions.iter().map(|a| a.to_json()).collect()),
    );
    m.insert(
        "error".into(),
        n.error
            .as_ref()
            .map_or(Value::Null, |e| e.to_string().into()),
    );
    Value::Object(m)
}
