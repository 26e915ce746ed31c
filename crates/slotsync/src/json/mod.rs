//! Every JSON form the crate reads or writes: slot rows as `row_to_json` gives them, the plan
//! input and output, snapshots (also as assembled from the servers' answers), the check report
//! and the actions. The engine's types carry no JSON; this module is where they meet it, so a
//! format change touches nothing else.
//!
//! The field readers below treat null and missing alike; wrong types are errors, never panics.

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use crate::error::InputError;

mod action;
mod check;
mod collect;
mod decoding;
mod input;
mod plan;
mod row;
mod snapshot;

pub(crate) use collect::collect;
pub use plan::{outcome_to_json, run_plan_text, PlanRun};
pub use snapshot::rows_from_json;

fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

fn text(obj: &Map<String, Value>, key: &str) -> Result<Option<String>, InputError> {
    match field(obj, key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(InputError(format!("{key}: expected a string, got {other}"))),
    }
}

fn opt_boolean(obj: &Map<String, Value>, key: &str) -> Result<Option<bool>, InputError> {
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

fn int(obj: &Map<String, Value>, key: &str) -> Result<Option<i64>, InputError> {
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

fn xid(obj: &Map<String, Value>, key: &str) -> Result<Option<Xid>, InputError> {
    Ok(oid(obj, key)?.map(Xid))
}

fn lsn(obj: &Map<String, Value>, key: &str) -> Result<Option<Lsn>, InputError> {
    match text(obj, key)? {
        None => Ok(None),
        Some(s) => s
            .parse::<Lsn>()
            .map(Some)
            .map_err(|e| InputError(format!("{key}: {e}"))),
    }
}
