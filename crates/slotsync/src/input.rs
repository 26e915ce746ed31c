//! The standby's side of the input: WAL positions and settings, as `SHOW` prints them.

use std::collections::BTreeMap;

use pgyard_types::{Lsn, Xid};

use crate::decoding::{RunningXacts, SnapshotFile, XactRecords};
use crate::error::InputError;

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
