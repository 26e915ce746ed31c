//! The standby's side of the input: WAL positions and settings, as `SHOW` prints them.

use std::collections::BTreeMap;

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use crate::decoding::{lsns_json, opt_lsn_list, RunningXacts, SnapshotFile, XactRecords};
use crate::error::InputError;
use crate::row::{int, lsn, opt_boolean, text, xid};

/// `wal_level`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WalLevel {
    /// `minimal`.
    Minimal,
    /// `replica` (and the old names `archive`, `hot_standby`).
    Replica,
    /// `logical`.
    Logical,
}

impl WalLevel {
    /// Parses a `wal_level` value.
    pub fn parse(text: &str) -> Option<WalLevel> {
        match text.trim().to_ascii_lowercase().as_str() {
            "minimal" => Some(WalLevel::Minimal),
            "replica" | "archive" | "hot_standby" => Some(WalLevel::Replica),
            "logical" => Some(WalLevel::Logical),
            _ => None,
        }
    }
}

/// The PostgreSQL major version whose decisions (and texts) the engine reproduces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Version {
    /// PostgreSQL 17, where slot synchronization first shipped.
    V17,
    /// PostgreSQL 18 (the default).
    #[default]
    V18,
}

impl Version {
    /// Reads `SHOW server_version_num` (`170010`, `180004`); only 17 and 18 are modelled.
    pub fn from_server_version_num(text: &str) -> Result<Version, InputError> {
        let num: u32 = text
            .trim()
            .parse()
            .map_err(|_| InputError(format!("server_version_num: cannot read {text:?}")))?;
        match num / 10000 {
            17 => Ok(Version::V17),
            18 => Ok(Version::V18),
            major => Err(InputError(format!(
                "server_version_num {num}: PostgreSQL {major} is not modelled (17 and 18 are)"
            ))),
        }
    }

    /// The major version number.
    pub fn major(self) -> u32 {
        match self {
            Version::V17 => 17,
            Version::V18 => 18,
        }
    }

    /// A `server_version_num` of this major version (its `.0` release), for JSON output.
    pub fn server_version_num(self) -> String {
        format!("{}0000", self.major())
    }
}

/// The standby: positions, settings and state that the sync decisions read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standby {
    /// The standby's major version (`server_version_num`; 18 when absent).
    pub version: Version,
    /// `pg_last_wal_receive_lsn()`.
    pub receive_lsn: Option<Lsn>,
    /// `pg_last_wal_replay_lsn()`.
    pub replay_lsn: Option<Lsn>,
    /// `pg_is_in_recovery()`.
    pub in_recovery: bool,
    /// Start of the oldest WAL segment still in `pg_wal`.
    pub oldest_wal_lsn: Option<Lsn>,
    /// Redo pointer of the latest restartpoint (`pg_control_checkpoint()`).
    pub redo_lsn: Option<Lsn>,
    /// The standby's next xid (a new slot's initial `catalog_xmin` in recovery); with nothing
    /// running on the primary `pg_snapshot_xmin(pg_current_snapshot())`, otherwise higher.
    pub snapshot_xmin: Xid,
    /// `wal_level`.
    pub wal_level: WalLevel,
    /// `hot_standby_feedback`.
    pub hot_standby_feedback: bool,
    /// `primary_slot_name`.
    pub primary_slot_name: String,
    /// `primary_conninfo`.
    pub primary_conninfo: String,
    /// `sync_replication_slots` (when on, the worker owns syncing).
    pub sync_replication_slots: bool,
    /// `wal_segment_size` in bytes.
    pub wal_segment_size_bytes: u64,
    /// Whether the server in `primary_conninfo` is itself in recovery (cascading; default false).
    pub primary_in_recovery: bool,
    /// `max_replication_slots`, when known (creation fails when every slot is taken).
    pub max_replication_slots: Option<usize>,
    /// Whether promotion has been signalled (the function refuses to start).
    pub promotion_triggered: bool,
    /// LSNs of the `pg_logical/snapshots/*.snap` files; `None`: unknown, and every update is
    /// predicted as a copy of the remote positions (the behaviour before these inputs).
    pub serialized_snapshots: Option<Vec<Lsn>>,
    /// The contents of (some of) those files by LSN (builder xmin, catalog-change xids):
    /// restoring a file listed here is exact; others are approximated.
    pub snapshot_files: BTreeMap<Lsn, SnapshotFile>,
    /// The `RUNNING_XACTS` records of the standby's WAL from the oldest local slot's
    /// `restart_lsn` on, which decide decoded positions (absent: none).
    pub running_xacts: Vec<RunningXacts>,
    /// The records of the transactions running at one of those records.
    pub xacts: Vec<XactRecords>,
    /// The in-memory `effective_catalog_xmin` of local slots where it is not the view's
    /// `catalog_xmin` (not in `pg_replication_slots`). A sync update sets it to the remote's
    /// `catalog_xmin` even when decoding left the slot's own lower; a new slot's initial
    /// `catalog_xmin` reads it. [`crate::Outcome::effective_catalog_xmins`] gives it for the
    /// next call; a server restart resets it to the view's values (empty map).
    pub effective_catalog_xmins: BTreeMap<String, Xid>,
}

impl Default for Standby {
    fn default() -> Self {
        Standby {
            version: Version::V18,
            receive_lsn: None,
            replay_lsn: None,
            in_recovery: true,
            oldest_wal_lsn: None,
            redo_lsn: None,
            snapshot_xmin: Xid(3),
            wal_level: WalLevel::Logical,
            hot_standby_feedback: true,
            primary_slot_name: String::new(),
            primary_conninfo: String::new(),
            sync_replication_slots: false,
            wal_segment_size_bytes: 16 * 1024 * 1024,
            primary_in_recovery: false,
            max_replication_slots: None,
            promotion_triggered: false,
            serialized_snapshots: None,
            snapshot_files: BTreeMap::new(),
            running_xacts: Vec::new(),
            xacts: Vec::new(),
            effective_catalog_xmins: BTreeMap::new(),
        }
    }
}

impl Standby {
    /// The flushed position the sync compares against: the later of replay and receive.
    pub fn flush_lsn(&self) -> Lsn {
        self.receive_lsn
            .unwrap_or(Lsn::INVALID)
            .max(self.replay_lsn.unwrap_or(Lsn::INVALID))
    }

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

/// Parses a GUC boolean as PostgreSQL accepts it (`on`, `off`, `true`, `yes`, `1`, prefixes).
pub fn parse_guc_bool(text: &str) -> Option<bool> {
    let t = text.trim().to_ascii_lowercase();
    if t.is_empty() {
        return None;
    }
    match t.as_str() {
        "on" | "1" => return Some(true),
        "off" | "of" | "0" => return Some(false),
        _ => {}
    }
    let prefix = |word: &str| word.starts_with(&t);
    if prefix("true") || prefix("yes") {
        Some(true)
    } else if prefix("false") || prefix("no") {
        Some(false)
    } else {
        None
    }
}

/// Parses a size as `SHOW` prints it (`16MB`, `1GB`, `8192kB`, or plain bytes).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "kB" => 1024,
        "MB" => 1024 * 1024,
        "GB" => 1024 * 1024 * 1024,
        "TB" => 1024u64 * 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mult)
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
pub(crate) fn xid_map_json(map: &BTreeMap<String, Xid>) -> Value {
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
