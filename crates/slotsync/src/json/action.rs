//! Actions as `pgyard slotsync plan` prints them.

use pgyard_types::Lsn;
use serde_json::{Map, Value};

use crate::engine::{Action, Change, Positions};

impl Action {
    /// The action as a JSON object (`{"action": "...", "slot": "...", ...}`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        let lsn = |l: &Lsn| Value::String(l.to_string());
        match self {
            Action::Drop {
                slot,
                datoid,
                reason,
            } => {
                m.insert("action".into(), "drop".into());
                m.insert("slot".into(), slot.clone().into());
                m.insert("reason".into(), reason.as_str().into());
                if let Some(oid) = datoid {
                    m.insert(
                        "log".into(),
                        format!("dropped replication slot \"{slot}\" of database with OID {oid}")
                            .into(),
                    );
                }
            }
            Action::Create {
                slot,
                restart_lsn,
                catalog_xmin,
            } => {
                m.insert("action".into(), "create".into());
                m.insert("slot".into(), slot.clone().into());
                m.insert("temporary".into(), true.into());
                m.insert("restart_lsn".into(), lsn(restart_lsn));
                m.insert("catalog_xmin".into(), catalog_xmin.0.to_string().into());
            }
            Action::Update {
                slot,
                set,
                positions,
            } => {
                m.insert("action".into(), "update".into());
                m.insert("slot".into(), slot.clone().into());
                let mut s = Map::new();
                for c in set {
                    change_json(c, &mut s);
                }
                m.insert("set".into(), Value::Object(s));
                if let Some(p) = positions {
                    m.insert("positions".into(), p.as_str().into());
                    if let Positions::Decoded {
                        approximate: true, ..
                    } = p
                    {
                        m.insert("approximate".into(), true.into());
                    }
                }
            }
            Action::Persist { slot } => {
                m.insert("action".into(), "persist".into());
                m.insert("slot".into(), slot.clone().into());
                m.insert(
                    "log".into(),
                    format!("newly created replication slot \"{slot}\" is sync-ready now").into(),
                );
            }
            Action::Invalidate { slot, cause } => {
                m.insert("action".into(), "invalidate".into());
                m.insert("slot".into(), slot.clone().into());
                m.insert("cause".into(), cause.as_str().into());
            }
            Action::Skip { slot, reason } => {
                m.insert("action".into(), "skip".into());
                m.insert("slot".into(), slot.clone().into());
                m.insert("reason".into(), reason.as_str().into());
                if let Some((msg, detail)) = reason.log(slot) {
                    m.insert("log".into(), msg.into());
                    if let Some(d) = detail {
                        m.insert("detail".into(), d.into());
                    }
                }
            }
        }
        Value::Object(m)
    }
}

/// Adds a change's columns to an update's `set` object, valued as `row_to_json` gives them.
fn change_json(c: &Change, s: &mut Map<String, Value>) {
    let text = |v: Option<String>| v.map_or(Value::Null, Value::String);
    let value = match c {
        Change::RestartLsn(l) | Change::ConfirmedFlushLsn(l) => l.to_string().into(),
        Change::CatalogXmin(x) => x.0.to_string().into(),
        Change::Plugin(p) => text(p.clone()),
        Change::Database { datoid, database } => {
            s.insert("datoid".into(), text(datoid.map(|o| o.to_string())));
            s.insert("database".into(), text(database.clone()));
            return;
        }
        Change::TwoPhase(b) | Change::Failover(b) => (*b).into(),
        Change::TwoPhaseAt(l) => text(l.map(|l| l.to_string())),
    };
    s.insert(c.column().into(), value);
}
