//! What advancing a synced slot by decoding the standby's own WAL does to its positions:
//! `LogicalSlotAdvanceAndCheckSnapState` in fast-forward mode, reduced to the records that
//! move `restart_lsn` and `catalog_xmin` (`xl_running_xacts`, and the records of the
//! transactions still running at one of them). Pure: the WAL facts are inputs.

use std::collections::BTreeSet;

use pgyard_types::{Lsn, Xid};
use serde_json::{Map, Value};

use crate::error::InputError;
use crate::row::{lsn, xid, xid_follows, xid_precedes};

/// `XLOG_BLCKSZ`: WAL page size (a record right after a page header starts at `+24`).
const WAL_PAGE_BYTES: u64 = 8192;
/// `SizeOfXLogShortPHD`.
const SHORT_PAGE_HEADER_BYTES: u64 = 24;
/// `SizeOfXLogLongPHD` (first page of a segment).
const LONG_PAGE_HEADER_BYTES: u64 = 40;

/// One `XLOG_RUNNING_XACTS` record (`Standby/RUNNING_XACTS` in `pg_walinspect`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunningXacts {
    /// Start of the record: the LSN decoding acts and serializes snapshots at.
    pub start_lsn: Lsn,
    /// End of the record (informational; the model reads only `start_lsn`).
    pub end_lsn: Option<Lsn>,
    /// `oldestRunningXid`.
    pub oldest_running_xid: Xid,
    /// `nextXid`.
    pub next_xid: Xid,
    /// The running top-level xids.
    pub xids: Vec<Xid>,
    /// The running subtransaction xids (not modelled: their presence marks a result approximate).
    pub subxids: Vec<Xid>,
}

/// The records of one transaction that decoding tracks (top-level xid only).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XactRecords {
    /// The transaction id.
    pub xid: Xid,
    /// Start LSNs of its records other than `Transaction` ones (each enters it in the
    /// reorder buffer if it is not there).
    pub record_lsns: Vec<Lsn>,
    /// Start LSNs of its data-change records (heap insert/update/delete/truncate,
    /// multi-insert): the first one decoded in `FULL_SNAPSHOT` or later gives it a base
    /// snapshot.
    pub change_lsns: Vec<Lsn>,
    /// Start of its commit or abort record, if it ended.
    pub end_lsn: Option<Lsn>,
}

/// A slot's positions as the advance reads and writes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotPositions {
    /// `restart_lsn`.
    pub restart_lsn: Lsn,
    /// `confirmed_flush_lsn`.
    pub confirmed_flush_lsn: Lsn,
    /// `catalog_xmin`.
    pub catalog_xmin: Xid,
}

/// The result of one advance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Advance {
    /// The slot's positions afterwards.
    pub positions: SlotPositions,
    /// Whether decoding reached a consistent snapshot (`DecodingContextReady`).
    pub consistent: bool,
    /// Snapshot files this advance wrote (`SnapBuildSerialize` at running_xacts records).
    pub serialized: Vec<Lsn>,
    /// Whether an unmodelled case decided a value (restored snapshot's xmin used as a
    /// candidate, subtransactions running).
    pub approximate: bool,
}

/// Advances a slot to `moveto` by decoding the records described by `running` and `xacts`
/// (`LogicalSlotAdvanceAndCheckSnapState(moveto)`), with the serialized snapshots `snapshots`
/// (which it extends).
pub fn advance(
    start: SlotPositions,
    moveto: Lsn,
    running: &[RunningXacts],
    xacts: &[XactRecords],
    snapshots: &mut BTreeSet<Lsn>,
) -> Advance {
    let mut d = Decoder {
        slot: SlotState {
            pos: start,
            candidate_xmin: None,
            candidate_restart: None,
        },
        build: Build::Start,
        builder_xmin: Xid(0),
        snapshot_xmin: None,
        last_serialized: None,
        current_restart: None,
        txns: Vec::new(),
        serialized: Vec::new(),
        approximate: false,
    };
    for (at, event) in events(start.restart_lsn, moveto, running, xacts) {
        match event {
            Event::Running(i) => {
                if let Some(rec) = running.get(i) {
                    let prev_oldest = running
                        .iter()
                        .filter(|r| r.start_lsn < rec.start_lsn)
                        .max_by_key(|r| r.start_lsn)
                        .map(|r| r.oldest_running_xid);
                    d.running_xacts(at, rec, prev_oldest, snapshots);
                }
            }
            Event::Record(xid) => {
                d.txn_entry(xid);
            }
            Event::Change(xid) => d.change(xid, at),
            Event::End(xid) => d.end(xid),
        }
    }
    // LogicalConfirmReceivedLocation(moveto): always called, even when nothing was read.
    d.slot.confirm(moveto);
    Advance {
        positions: d.slot.pos,
        consistent: d.build == Build::Consistent,
        serialized: d.serialized,
        approximate: d.approximate,
    }
}

/// Whether the advance reads a record starting at `start` on its way to `moveto`: it reads
/// while the end of the previous record is before `moveto`, and a record right after a page
/// header had its predecessor end at the page boundary at the latest.
pub fn record_is_read(start: Lsn, moveto: Lsn) -> bool {
    start < moveto || (start == moveto && first_on_page(start))
}

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
    /// Reads `{"xid", "record_lsns", "change_lsns", "end_lsn"}`.
    pub fn from_json(value: &Value) -> Result<XactRecords, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("xacts: entry is not an object"))?;
        Ok(XactRecords {
            xid: xid(obj, "xid")?.ok_or_else(|| InputError::new("xacts: xid is required"))?,
            record_lsns: lsn_list(obj, "record_lsns")?,
            change_lsns: lsn_list(obj, "change_lsns")?,
            end_lsn: lsn(obj, "end_lsn")?,
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
        Value::Object(m)
    }
}

/// Parses a `pg_logical/snapshots` file name (`0-1766A20.snap`) into its LSN.
pub fn snapshot_file_lsn(name: &str) -> Option<Lsn> {
    let stem = name.strip_suffix(".snap")?;
    let (hi, lo) = stem.split_once('-')?;
    let hi = u32::from_str_radix(hi, 16).ok()?;
    let lo = u32::from_str_radix(lo, 16).ok()?;
    Some(Lsn((u64::from(hi) << 32) | u64::from(lo)))
}

/// Reads a `RUNNING_XACTS` description as `pg_walinspect` prints it (`nextXid 770
/// latestCompletedXid 768 oldestRunningXid 769; 1 xacts: 769`).
pub fn parse_running_xacts_description(text: &str) -> Option<(Xid, Xid, Vec<Xid>, Vec<Xid>)> {
    let mut next = None;
    let mut oldest = None;
    let mut xids = Vec::new();
    let mut subxids = Vec::new();
    for (i, part) in text.split(';').enumerate() {
        let words: Vec<&str> = part.split_whitespace().collect();
        if i == 0 {
            for pair in words.chunks(2) {
                if let [key, value] = pair {
                    let v = value.parse().ok().map(Xid);
                    match *key {
                        "nextXid" => next = v,
                        "oldestRunningXid" => oldest = v,
                        _ => {}
                    }
                }
            }
            continue;
        }
        let list = match words.get(1) {
            Some(&"xacts:") => &mut xids,
            Some(&"subxacts:") => &mut subxids,
            _ => continue,
        };
        for w in words.iter().skip(2) {
            list.push(Xid(w.parse().ok()?));
        }
    }
    Some((next?, oldest?, xids, subxids))
}

// ---------------------------------------------------------------------------------------------

fn first_on_page(l: Lsn) -> bool {
    let off = l.0 % WAL_PAGE_BYTES;
    off == SHORT_PAGE_HEADER_BYTES || off == LONG_PAGE_HEADER_BYTES
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Build {
    Start,
    /// `BUILDING_SNAPSHOT` with its `next_phase_at`.
    Building(Xid),
    /// `FULL_SNAPSHOT` with its `next_phase_at`.
    Full(Xid),
    Consistent,
}

enum Event {
    Running(usize),
    Record(Xid),
    Change(Xid),
    End(Xid),
}

/// The records the advance reads, in WAL order (a record's xid entry before its change).
fn events(
    from: Lsn,
    moveto: Lsn,
    running: &[RunningXacts],
    xacts: &[XactRecords],
) -> Vec<(Lsn, Event)> {
    let read = |l: Lsn| l >= from && record_is_read(l, moveto);
    let mut ev: Vec<(Lsn, u8, Event)> = Vec::new();
    for (i, r) in running.iter().enumerate() {
        if read(r.start_lsn) {
            ev.push((r.start_lsn, 0, Event::Running(i)));
        }
    }
    for x in xacts {
        for l in x.record_lsns.iter().copied().filter(|l| read(*l)) {
            ev.push((l, 1, Event::Record(x.xid)));
        }
        for l in x.change_lsns.iter().copied().filter(|l| read(*l)) {
            ev.push((l, 2, Event::Change(x.xid)));
        }
        if let Some(l) = x.end_lsn.filter(|l| read(*l)) {
            ev.push((l, 3, Event::End(x.xid)));
        }
    }
    ev.sort_by_key(|(l, k, _)| (*l, *k));
    ev.into_iter().map(|(l, _, e)| (l, e)).collect()
}

/// The slot's shared-memory state during the advance (`candidate_*` of `ReplicationSlot`).
struct SlotState {
    pos: SlotPositions,
    /// `candidate_xmin_lsn`, `candidate_catalog_xmin`.
    candidate_xmin: Option<(Lsn, Xid)>,
    /// `candidate_restart_valid`, `candidate_restart_lsn`.
    candidate_restart: Option<(Lsn, Lsn)>,
}

impl SlotState {
    /// `LogicalIncreaseXminForSlot`: a candidate waits for confirmation unless the slot has
    /// confirmed past it, and only the first pending one is kept.
    fn increase_xmin(&mut self, at: Lsn, xmin: Xid) {
        if !xid_follows(xmin, self.pos.catalog_xmin) {
            return;
        }
        if at <= self.pos.confirmed_flush_lsn {
            self.candidate_xmin = Some((at, xmin));
            self.confirm(self.pos.confirmed_flush_lsn);
        } else if self.candidate_xmin.is_none() {
            self.candidate_xmin = Some((at, xmin));
        }
    }

    /// `LogicalIncreaseRestartDecodingForSlot`.
    fn increase_restart(&mut self, at: Lsn, restart: Lsn) {
        if restart <= self.pos.restart_lsn {
            return;
        }
        if at <= self.pos.confirmed_flush_lsn {
            self.candidate_restart = Some((at, restart));
            self.confirm(self.pos.confirmed_flush_lsn);
        } else if self.candidate_restart.is_none() {
            self.candidate_restart = Some((at, restart));
        }
    }

    /// `LogicalConfirmReceivedLocation`.
    fn confirm(&mut self, lsn: Lsn) {
        if lsn > self.pos.confirmed_flush_lsn {
            self.pos.confirmed_flush_lsn = lsn;
        }
        if let Some((valid, xmin)) = self.candidate_xmin {
            if valid <= lsn && xmin.0 != 0 && xmin != self.pos.catalog_xmin {
                self.pos.catalog_xmin = xmin;
                self.candidate_xmin = None;
            }
        }
        if let Some((valid, restart)) = self.candidate_restart {
            if valid <= lsn {
                self.pos.restart_lsn = self.pos.restart_lsn.max(restart);
                self.candidate_restart = None;
            }
        }
    }
}

/// A reorder-buffer transaction (`ReorderBufferTXN`), in `toplevel_by_lsn` order.
struct Txn {
    xid: Xid,
    /// `restart_decoding_lsn`: the restart point current when it was first seen.
    restart_decoding_lsn: Option<Lsn>,
    /// When and with which xmin it got its base snapshot (and whether that xmin is a
    /// restored snapshot's, which the inputs do not carry).
    base: Option<(Lsn, Xid, bool)>,
}

struct Decoder {
    slot: SlotState,
    build: Build,
    /// `builder->xmin`.
    builder_xmin: Xid,
    /// `builder->snapshot->xmin`, once built (base snapshots share it until rebuilt), and
    /// whether it came from a restored snapshot file.
    snapshot_xmin: Option<(Xid, bool)>,
    /// `builder->last_serialized_snapshot`.
    last_serialized: Option<Lsn>,
    /// `reorder->current_restart_decoding_lsn`.
    current_restart: Option<Lsn>,
    txns: Vec<Txn>,
    serialized: Vec<Lsn>,
    approximate: bool,
}

impl Decoder {
    /// `SnapBuildProcessRunningXacts` followed by `ReorderBufferAbortOld`.
    fn running_xacts(
        &mut self,
        at: Lsn,
        rec: &RunningXacts,
        prev_oldest: Option<Xid>,
        snapshots: &mut BTreeSet<Lsn>,
    ) {
        if !rec.subxids.is_empty() {
            self.approximate = true;
        }
        if self.build == Build::Consistent {
            // SnapBuildSerialize: an existing file is reused, either way it is the new
            // restart point.
            if snapshots.insert(at) {
                self.serialized.push(at);
            }
            self.last_serialized = Some(at);
            self.current_restart = Some(at);
            self.after_find(at, rec);
        } else if self.find_snapshot(at, rec, prev_oldest, snapshots) {
            self.after_find(at, rec);
        }
        self.abort_old(rec.oldest_running_xid);
    }

    /// `SnapBuildFindSnapshot` (no initial xmin horizon: the advance passes none); returns
    /// whether the rest of the record's processing happens.
    fn find_snapshot(
        &mut self,
        at: Lsn,
        rec: &RunningXacts,
        prev_oldest: Option<Xid>,
        snapshots: &BTreeSet<Lsn>,
    ) -> bool {
        let (oldest, next) = (rec.oldest_running_xid, rec.next_xid);
        if oldest == next {
            self.builder_xmin = next;
            self.build = Build::Consistent;
            return false;
        }
        if snapshots.contains(&at) {
            // The file's xmin is the builder xmin of whoever wrote it: normally the
            // oldestRunningXid of the running_xacts record before this one.
            let xmin = prev_oldest.unwrap_or(oldest);
            self.builder_xmin = xmin;
            self.snapshot_xmin = Some((xmin, true));
            self.current_restart = Some(at);
            self.build = Build::Consistent;
            return false;
        }
        match self.build {
            Build::Start => {
                self.build = Build::Building(next);
                self.builder_xmin = next;
            }
            Build::Building(phase) if !xid_follows(phase, oldest) => {
                self.build = Build::Full(next);
            }
            Build::Full(phase) if !xid_follows(phase, oldest) => {
                self.build = Build::Consistent;
            }
            _ => {}
        }
        true
    }

    /// The part of `SnapBuildProcessRunningXacts` after the consistency search: candidate
    /// catalog_xmin always, candidate restart_lsn once consistent.
    fn after_find(&mut self, at: Lsn, rec: &RunningXacts) {
        self.builder_xmin = rec.oldest_running_xid;
        // ReorderBufferGetOldestXmin: the base snapshot set first.
        let xmin = match self.txns.iter().filter_map(|t| t.base).min_by_key(|b| b.0) {
            Some((_, xmin, restored)) => {
                self.approximate |= restored;
                xmin
            }
            None => rec.oldest_running_xid,
        };
        self.slot.increase_xmin(at, xmin);
        if self.build != Build::Consistent {
            return;
        }
        match self.txns.first() {
            Some(t) => {
                if let Some(r) = t.restart_decoding_lsn {
                    self.slot.increase_restart(at, r);
                }
            }
            None => {
                if let (Some(_), Some(last)) = (self.current_restart, self.last_serialized) {
                    self.slot.increase_restart(at, last);
                }
            }
        }
    }

    /// `ReorderBufferAbortOld`: forgets transactions older than `oldest`, in LSN order,
    /// stopping at the first that is not.
    fn abort_old(&mut self, oldest: Xid) {
        let keep_from = self
            .txns
            .iter()
            .position(|t| !xid_precedes(t.xid, oldest))
            .unwrap_or(self.txns.len());
        self.txns.drain(..keep_from);
    }

    /// `ReorderBufferProcessXid`: the transaction's entry, created at its first record.
    fn txn_entry(&mut self, xid: Xid) -> usize {
        match self.txns.iter().position(|t| t.xid == xid) {
            Some(i) => i,
            None => {
                self.txns.push(Txn {
                    xid,
                    restart_decoding_lsn: self.current_restart,
                    base: None,
                });
                self.txns.len() - 1
            }
        }
    }

    /// A data change: `SnapBuildProcessChange` gives the transaction a base snapshot.
    fn change(&mut self, xid: Xid, at: Lsn) {
        let i = self.txn_entry(xid);
        let usable = match self.build {
            Build::Start | Build::Building(_) => false,
            Build::Full(phase) => !xid_precedes(xid, phase),
            Build::Consistent => true,
        };
        if !usable {
            return;
        }
        let (xmin, restored) = *self.snapshot_xmin.get_or_insert((self.builder_xmin, false));
        if let Some(t) = self.txns.get_mut(i) {
            if t.base.is_none() {
                t.base = Some((at, xmin, restored));
            }
        }
    }

    /// A commit or abort: forgotten once the snapshot is full (before that decoding bails
    /// out and the entry waits for `ReorderBufferAbortOld`).
    fn end(&mut self, xid: Xid) {
        if matches!(self.build, Build::Full(_) | Build::Consistent) {
            self.txns.retain(|t| t.xid != xid);
        }
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
