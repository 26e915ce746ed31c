//! Reading the plan input (and what the readiness check needs besides) from live servers.
//!
//! Pure: the SQL texts, and (in [`crate::json`]) how their answers become a [`Snapshot`]; the
//! caller runs the queries through a [`Source`] (the CLI over pgyard's blocking driver, the
//! tests over `psql`). Every query returns one text value (JSON built by the server), so one
//! reader serves all.
//!
//! What needs privileges is read separately and left out, with a note, when refused: the
//! snapshot files and the WAL facts (`pg_read_server_files`, `pg_monitor`, and the
//! `pg_walinspect` extension) only sharpen position predictions, and without them every
//! update is predicted as a copy (see docs/slotsync.md, "Privileges").

use std::collections::{BTreeMap, BTreeSet};

use pgyard_types::Lsn;

use crate::error::InputError;
use crate::input::Version;
use crate::plan::PlanInput;

/// A server's refusal or failure for one query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryError {
    /// The SQLSTATE, when the server sent one (none for a lost connection).
    pub sqlstate: Option<String>,
    /// The server's primary message (or the connection error).
    pub message: String,
}

/// One server to read from.
pub trait Source {
    /// Runs `sql` and returns the first column of its first row (`None` for NULL or no row).
    fn value(&mut self, sql: &str) -> Result<Option<String>, QueryError>;
}

/// Why a snapshot could not be taken.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    /// A query every snapshot needs failed.
    #[error("{server}: {what}: {}", .error.message)]
    Query {
        /// `primary` or `standby`.
        server: &'static str,
        /// What was being read.
        what: &'static str,
        /// The failure.
        error: QueryError,
    },
    /// A server answered something the engine cannot read.
    #[error("{server}: {0}", .error.0)]
    Input {
        /// `primary` or `standby`.
        server: &'static str,
        /// The problem.
        error: InputError,
    },
}

/// What the primary adds for the readiness check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrimaryFacts {
    /// The primary's major version.
    pub version: Version,
    /// `synchronized_standby_slots` (empty when unset).
    pub synchronized_standby_slots: String,
    /// The WAL each active logical walsender has sent, by slot (`pg_stat_replication.sent_lsn`).
    pub sent_lsn: BTreeMap<String, Lsn>,
    /// Slots with an active walsender whose `sent_lsn` the role may not see.
    pub sent_hidden: BTreeSet<String>,
}

/// Everything read from the servers: the plan input, the primary's facts (absent when only
/// the standby was asked) and notes on what could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The input of one sync call (remote slots empty without a primary).
    pub input: PlanInput,
    /// The primary's side, when it was reachable.
    pub primary: Option<PrimaryFacts>,
    /// What was left out and why, in words.
    pub notes: Vec<String>,
}

/// The rows of `pg_replication_slots` as a JSON array.
pub const SLOTS_SQL: &str =
    "select coalesce(json_agg(row_to_json(r)), '[]') from pg_catalog.pg_replication_slots r";

/// The standby's positions and settings everyone may read.
pub(crate) const STANDBY_SQL: &str = "select json_build_object(\
    'server_version_num', current_setting('server_version_num'), \
    'receive_lsn', pg_last_wal_receive_lsn(), \
    'replay_lsn', pg_last_wal_replay_lsn(), \
    'in_recovery', pg_is_in_recovery(), \
    'snapshot_xmin', pg_snapshot_xmin(pg_current_snapshot())::text::bigint, \
    'snapshot_xmax', pg_snapshot_xmax(pg_current_snapshot())::text::bigint, \
    'wal_level', current_setting('wal_level'), \
    'hot_standby_feedback', current_setting('hot_standby_feedback'), \
    'primary_slot_name', current_setting('primary_slot_name'), \
    'sync_replication_slots', current_setting('sync_replication_slots'), \
    'wal_segment_size', current_setting('wal_segment_size'), \
    'max_replication_slots', current_setting('max_replication_slots')::int)";

/// `primary_conninfo` is readable only with `pg_read_all_settings`; `pg_settings` hides the
/// row instead of raising an error.
pub(crate) const CONNINFO_SQL: &str =
    "select setting from pg_catalog.pg_settings where name = 'primary_conninfo'";

pub(crate) const CHECKPOINT_SQL: &str = "select json_build_object(\
    'redo_lsn', redo_lsn, 'tli', timeline_id) from pg_catalog.pg_control_checkpoint()";

pub(crate) const OLDEST_WAL_SQL: &str =
    "select min(name) from pg_catalog.pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'";

pub(crate) const SNAPSHOT_FILES_SQL: &str =
    "select coalesce(json_agg(json_build_object('name', name, \
    'hex', encode(pg_catalog.pg_read_binary_file('pg_logical/snapshots/' || name), 'hex')) \
    order by name), '[]') from pg_catalog.pg_ls_logicalsnapdir()";

pub(crate) const PRIMARY_SQL: &str = "select json_build_object(\
    'server_version_num', current_setting('server_version_num'), \
    'in_recovery', pg_is_in_recovery(), \
    'synchronized_standby_slots', current_setting('synchronized_standby_slots'), \
    'sent', (select coalesce(json_object_agg(s.slot_name, r.sent_lsn), '{}') \
        from pg_catalog.pg_replication_slots s join pg_catalog.pg_stat_replication r \
        on r.pid = s.active_pid where s.slot_type = 'logical' and r.sent_lsn is not null), \
    'hidden', (select coalesce(json_agg(s.slot_name), '[]') from pg_catalog.pg_replication_slots s \
        left join pg_catalog.pg_stat_replication r on r.pid = s.active_pid \
        where s.slot_type = 'logical' and s.active_pid is not null and r.sent_lsn is null))";

/// Reads a snapshot: the primary first (as a sync call reads the remote slots before it
/// compares them with the standby's position), then the standby.
pub fn collect(
    primary: Option<&mut dyn Source>,
    standby: &mut dyn Source,
) -> Result<Snapshot, SnapshotError> {
    crate::json::collect(primary, standby)
}

/// Decodes hex text (as `encode(..., 'hex')` prints it).
pub fn hex_bytes(s: &str) -> Option<Vec<u8>> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok())
        .collect()
}

/// The start of the WAL segment a file name (`TTTTTTTTXXXXXXXXYYYYYYYY`) holds.
pub fn wal_file_lsn(name: &str, seg_bytes: u64) -> Option<Lsn> {
    if name.len() != 24 || seg_bytes == 0 {
        return None;
    }
    let log = u64::from_str_radix(name.get(8..16)?, 16).ok()?;
    let seg = u64::from_str_radix(name.get(16..24)?, 16).ok()?;
    let per_log = 0x1_0000_0000 / seg_bytes;
    if seg >= per_log {
        return None;
    }
    Some(Lsn(log.checked_mul(0x1_0000_0000)? + seg * seg_bytes))
}

pub(crate) fn running_xacts_sql(from: Lsn, end: Lsn) -> String {
    format!(
        "select coalesce(json_agg(json_build_object('start_lsn', start_lsn, 'end_lsn', end_lsn, \
         'description', description) order by start_lsn), '[]') \
         from pg_get_wal_records_info('{from}', '{end}') \
         where resource_manager = 'Standby' and record_type = 'RUNNING_XACTS'"
    )
}

/// One row per xid with records in `[from, end)`: its record, change, invalidation, PREPARE
/// and end positions, listed subtransactions, and the raw bytes at its first record.
pub(crate) fn xacts_sql(from: Lsn, end: Lsn, tli: u64, seg: u64) -> String {
    format!(
        "with r as (select start_lsn, xid::text::bigint as rxid, resource_manager as rm, \
           record_type as rt, description as d from pg_get_wal_records_info('{from}', '{end}')), \
         e as (select *, case when rm = 'Transaction' and rt in ('COMMIT_PREPARED', 'ABORT_PREPARED') \
           then substring(d from '^([0-9]+):')::bigint else rxid end as x from r), \
         g as (select x as xid, \
           array_agg(start_lsn order by start_lsn) filter (where rm <> 'Transaction') as record_lsns, \
           array_agg(start_lsn order by start_lsn) filter (where rm in ('Heap', 'Heap2') \
             and rt ~ '^(INSERT|UPDATE|HOT_UPDATE|DELETE|TRUNCATE|MULTI_INSERT|CONFIRM)') as change_lsns, \
           array_agg(start_lsn order by start_lsn) filter (where rm = 'Transaction' and rt = 'INVALIDATION') as invalidation_lsns, \
           min(start_lsn) filter (where rm = 'Transaction' and rt = 'PREPARE') as prepare_lsn, \
           min(start_lsn) filter (where rm = 'Transaction' and rt ~ '^(COMMIT|ABORT)') as end_lsn, \
           coalesce(bool_or(rm = 'Transaction' and rt ~ '^ABORT'), false) as aborted, \
           coalesce(bool_or(rm = 'Transaction' and rt ~ '^COMMIT' and d ~ 'inval msgs'), false) as has_invals, \
           string_agg(substring(d from 'subxacts:([0-9 ]+)'), ' ') filter (where rm = 'Transaction' \
             and rt ~ '^(COMMIT|ABORT|PREPARE)') as subxids, \
           min(start_lsn) filter (where rxid = x) as first_lsn \
           from e where x is not null and x <> 0 group by x) \
         select coalesce(json_agg(json_build_object('xid', xid, 'record_lsns', record_lsns, \
           'change_lsns', change_lsns, 'invalidation_lsns', invalidation_lsns, \
           'prepare_lsn', prepare_lsn, 'end_lsn', end_lsn, 'aborted', aborted, 'has_invals', has_invals, \
           'subxids', subxids, \
           'first_lsn', first_lsn, 'raw', case when first_lsn is null then null else \
           encode(pg_read_binary_file('pg_wal/' || upper(lpad(to_hex({tli}), 8, '0') \
             || lpad(to_hex(div(first_lsn - '0/0'::pg_lsn, 4294967296)::bigint), 8, '0') \
             || lpad(to_hex(mod(div(first_lsn - '0/0'::pg_lsn, {seg}), 4294967296 / {seg})::bigint), 8, '0')), \
             mod(first_lsn - '0/0'::pg_lsn, {seg})::bigint, 160, true), 'hex') end)), '[]') from g"
    )
}

pub use crate::json::rows_from_json;
