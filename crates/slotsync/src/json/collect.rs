//! Live servers' answers (JSON built by the server) assembled into a [`Snapshot`].

use std::collections::{BTreeMap, BTreeSet};

use pgyard_types::Lsn;
use serde_json::{json, Map, Value};

use crate::decoding::{
    parse_running_xacts_description, record_toplevel_xid, snapshot_file_lsn, SnapshotFile,
};
use crate::error::InputError;
use crate::input::{parse_size, Version};
use crate::plan::PlanInput;
use crate::snapshot::{
    hex_bytes, running_xacts_sql, wal_file_lsn, xacts_sql, PrimaryFacts, QueryError, Snapshot,
    SnapshotError, Source, CHECKPOINT_SQL, CONNINFO_SQL, OLDEST_WAL_SQL, PRIMARY_SQL, SLOTS_SQL,
    SNAPSHOT_FILES_SQL, STANDBY_SQL,
};

/// [`crate::snapshot::collect`]: the servers answer in JSON, which becomes the plan input.
pub(crate) fn collect(
    primary: Option<&mut dyn Source>,
    standby: &mut dyn Source,
) -> Result<Snapshot, SnapshotError> {
    let mut notes = Vec::new();
    let (remote, facts, primary_in_recovery) = match primary {
        Some(p) => {
            let (rows, facts, in_recovery) = read_primary(p, &mut notes)?;
            (rows, Some(facts), in_recovery)
        }
        None => {
            notes.push(
                "no primary: the primary's slots, what its walsenders have sent and \
                 synchronized_standby_slots were not read"
                    .to_owned(),
            );
            (Vec::new(), None, false)
        }
    };
    let local = json_rows(standby, "standby", "pg_replication_slots")?;
    let mut sb = json_value(standby, "standby", "positions and settings", STANDBY_SQL)?;
    sb["primary_in_recovery"] = primary_in_recovery.into();
    match standby.value(CONNINFO_SQL) {
        Ok(Some(c)) => sb["primary_conninfo"] = c.into(),
        Ok(None) => notes.push(
            "standby: primary_conninfo is not readable (needs pg_read_all_settings); the dbname \
             prerequisite was not checked"
                .to_owned(),
        ),
        Err(e) => return Err(query_error("standby", "primary_conninfo", e)),
    }
    let seg = sb["wal_segment_size"]
        .as_str()
        .and_then(parse_size)
        .unwrap_or(16 << 20);
    let checkpoint = optional(
        standby,
        CHECKPOINT_SQL,
        "pg_control_checkpoint()",
        &mut notes,
    );
    let checkpoint: Value = checkpoint
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    sb["redo_lsn"] = checkpoint["redo_lsn"].clone();
    let oldest = optional(standby, OLDEST_WAL_SQL, "pg_ls_waldir()", &mut notes)
        .and_then(|n| wal_file_lsn(&n, seg))
        .map_or(Value::Null, |l| Value::String(l.to_string()));
    sb["oldest_wal_lsn"] = oldest.clone();
    let tli = checkpoint["tli"].as_u64();
    if let Some(tli) = tli {
        decoding_inputs(standby, &remote, &local, &mut sb, (tli, seg), &mut notes);
    }
    let mut input = json!({ "remote_slots": remote, "local_slots": local, "standby": sb });
    if let Some(map) = input.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    let input = PlanInput::from_json(&input).map_err(|error| SnapshotError::Input {
        server: "standby",
        error,
    })?;
    Ok(Snapshot {
        input,
        primary: facts,
        notes,
    })
}

fn read_primary(
    p: &mut dyn Source,
    notes: &mut Vec<String>,
) -> Result<(Vec<Value>, PrimaryFacts, bool), SnapshotError> {
    let rows = json_rows(p, "primary", "pg_replication_slots")?;
    let v = json_value(p, "primary", "settings and walsenders", PRIMARY_SQL)?;
    let sent_hidden: BTreeSet<String> = v["hidden"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if !sent_hidden.is_empty() {
        notes.push(
            "primary: what the active logical walsenders have sent is hidden (needs \
             pg_read_all_stats); their slots cannot be judged ready"
                .to_owned(),
        );
    }
    let version = Version::from_server_version_num(v["server_version_num"].as_str().unwrap_or(""))
        .map_err(|error| SnapshotError::Input {
            server: "primary",
            error,
        })?;
    let mut sent = BTreeMap::new();
    if let Some(m) = v["sent"].as_object() {
        for (slot, l) in m {
            if let Some(l) = l.as_str().and_then(|s| s.parse::<Lsn>().ok()) {
                sent.insert(slot.clone(), l);
            }
        }
    }
    let facts = PrimaryFacts {
        version,
        synchronized_standby_slots: v["synchronized_standby_slots"]
            .as_str()
            .unwrap_or("")
            .to_owned(),
        sent_lsn: sent,
        sent_hidden,
    };
    Ok((rows, facts, v["in_recovery"].as_bool().unwrap_or(false)))
}

fn query_error(server: &'static str, what: &'static str, error: QueryError) -> SnapshotError {
    SnapshotError::Query {
        server,
        what,
        error,
    }
}

fn json_value(
    s: &mut dyn Source,
    server: &'static str,
    what: &'static str,
    sql: &str,
) -> Result<Value, SnapshotError> {
    let text = s
        .value(sql)
        .map_err(|e| query_error(server, what, e))?
        .unwrap_or_default();
    serde_json::from_str(&text).map_err(|e| SnapshotError::Input {
        server,
        error: InputError(format!("{what}: not JSON: {e}")),
    })
}

fn json_rows(
    s: &mut dyn Source,
    server: &'static str,
    what: &'static str,
) -> Result<Vec<Value>, SnapshotError> {
    match json_value(s, server, what, SLOTS_SQL)? {
        Value::Array(a) => Ok(a),
        other => Err(SnapshotError::Input {
            server,
            error: InputError(format!("{what}: expected an array, got {other}")),
        }),
    }
}

/// Runs an optional query; a refusal becomes a note naming what was lost.
fn optional(s: &mut dyn Source, sql: &str, what: &str, notes: &mut Vec<String>) -> Option<String> {
    match s.value(sql) {
        Ok(v) => v,
        Err(e) => {
            notes.push(format!("standby: {what} not read: {}", e.message));
            None
        }
    }
}

/// The snapshot files and the WAL facts that decide decoded positions. All or nothing: with
/// snapshot names but no `RUNNING_XACTS` records, decoding would never look consistent, so
/// a partial read is dropped and positions are predicted as copies.
fn decoding_inputs(
    standby: &mut dyn Source,
    remote: &[Value],
    local: &[Value],
    sb: &mut Value,
    (tli, seg): (u64, u64),
    notes: &mut Vec<String>,
) {
    let files = match standby.value(SNAPSHOT_FILES_SQL) {
        Ok(t) => t.and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok()),
        Err(e) => {
            notes.push(format!(
                "standby: pg_logical/snapshots not read ({}); positions are predicted as copies",
                e.message
            ));
            return;
        }
    };
    let wal = match wal_facts(standby, remote, local, sb, (tli, seg)) {
        Ok(w) => w,
        Err(e) => {
            notes.push(format!(
                "standby: WAL records not read with pg_walinspect ({}); positions are predicted \
                 as copies",
                e.message
            ));
            return;
        }
    };
    let mut names = Vec::new();
    let mut contents = Map::new();
    for f in files.unwrap_or_default() {
        let Some(l) = f["name"].as_str().and_then(snapshot_file_lsn) else {
            continue;
        };
        names.push(Value::String(l.to_string()));
        if let Some(file) = f["hex"]
            .as_str()
            .and_then(hex_bytes)
            .and_then(|b| SnapshotFile::parse(&b))
        {
            contents.insert(l.to_string(), file.to_json());
        }
    }
    sb["serialized_snapshots"] = Value::Array(names);
    sb["snapshot_files"] = Value::Object(contents);
    let (running, xacts, next) = wal;
    sb["running_xacts"] = running;
    sb["xacts"] = xacts;
    // The standby's next xid (a new slot's catalog_xmin starts there): its snapshot's xmin is
    // lower while transactions (or prepared ones) are open on the primary.
    let next = next
        .max(sb["snapshot_xmax"].as_u64().unwrap_or(0))
        .max(sb["snapshot_xmin"].as_u64().unwrap_or(0));
    sb["snapshot_xmin"] = next.into();
}

type WalFacts = (Value, Value, u64);

/// The standby's `RUNNING_XACTS` records from the oldest position any logical slot may decode
/// from, and the records of every transaction in that range (`pg_walinspect`; the top-level
/// xid a subtransaction's first record carries is read from the raw WAL). Also returns the
/// next xid they show.
fn wal_facts(
    standby: &mut dyn Source,
    remote: &[Value],
    local: &[Value],
    sb: &Value,
    (tli, seg): (u64, u64),
) -> Result<WalFacts, QueryError> {
    let lsn_of = |v: &Value| v.as_str().and_then(|s| s.parse::<Lsn>().ok());
    let none = (Value::Array(vec![]), Value::Array(vec![]), 0);
    let from = remote
        .iter()
        .chain(local.iter())
        .filter(|r| r["slot_type"] == "logical")
        .filter_map(|r| lsn_of(&r["restart_lsn"]))
        .min();
    let end = [&sb["replay_lsn"], &sb["receive_lsn"]]
        .into_iter()
        .filter_map(lsn_of)
        .max();
    let (Some(from), Some(end)) = (from, end) else {
        return Ok(none);
    };
    let from = from.max(lsn_of(&sb["oldest_wal_lsn"]).unwrap_or(from));
    let end = end.min(lsn_of(&sb["replay_lsn"]).unwrap_or(end));
    if from >= end {
        return Ok(none);
    }
    let text = standby
        .value(&running_xacts_sql(from, end))?
        .unwrap_or_default();
    let recs: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
    let mut running = Vec::new();
    let mut next: u64 = 0;
    for r in &recs {
        let desc = r["description"].as_str().unwrap_or("");
        let Some((nx, oldest, top, sub)) = parse_running_xacts_description(desc) else {
            return Err(QueryError {
                sqlstate: None,
                message: format!("cannot read RUNNING_XACTS description {desc:?}"),
            });
        };
        next = next.max(u64::from(nx.0));
        running.push(json!({
            "start_lsn": r["start_lsn"], "end_lsn": r["end_lsn"],
            "oldest_running_xid": oldest.0, "next_xid": nx.0,
            "xids": top.iter().map(|x| x.0).collect::<Vec<_>>(),
            "subxids": sub.iter().map(|x| x.0).collect::<Vec<_>>(),
        }));
    }
    let text = standby
        .value(&xacts_sql(from, end, tli, seg))?
        .unwrap_or_default();
    let rows: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
    let (xacts, next) = xacts_json(&rows, next);
    Ok((Value::Array(running), Value::Array(xacts), next))
}

/// The engine's `xacts` from the rows of `xacts_sql`, and the next xid they show.
fn xacts_json(rows: &[Value], mut next: u64) -> (Vec<Value>, u64) {
    let lsn_of = |v: &Value| v.as_str().and_then(|s| s.parse::<Lsn>().ok());
    let mut xacts: Vec<Value> = Vec::new();
    let mut parent: BTreeMap<u64, u64> = BTreeMap::new();
    for row in rows {
        let xid = row["xid"].as_u64().unwrap_or(0);
        next = next.max(xid + 1);
        let subs: Vec<u64> = row["subxids"]
            .as_str()
            .unwrap_or("")
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        for s in &subs {
            next = next.max(s + 1);
            parent.insert(*s, xid);
        }
        let mut x = json!({
            "xid": xid,
            "record_lsns": row["record_lsns"], "change_lsns": row["change_lsns"],
            "invalidation_lsns": row["invalidation_lsns"], "prepare_lsn": row["prepare_lsn"],
            "end_lsn": row["end_lsn"], "aborted": row["aborted"],
            "has_invals": row["has_invals"], "subxids": subs,
        });
        let first = lsn_of(&row["first_lsn"]);
        let raw = row["raw"].as_str().and_then(hex_bytes);
        if let (Some(first), Some(raw)) = (first, raw) {
            if let Some(top) = record_toplevel_xid(first, &raw) {
                x["top_xid"] = top.0.into();
                x["top_xid_lsn"] = first.to_string().into();
            }
        }
        xacts.push(x);
    }
    for x in &mut xacts {
        if x.get("top_xid").is_none() {
            if let Some(p) = x["xid"].as_u64().and_then(|id| parent.get(&id)) {
                x["top_xid"] = (*p).into();
            }
        }
    }
    (xacts, next)
}
