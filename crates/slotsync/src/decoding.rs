//! What advancing a synced slot by decoding the standby's own WAL does to its positions:
//! `LogicalSlotAdvanceAndCheckSnapState` in fast-forward mode, reduced to the records that
//! move `restart_lsn` and `catalog_xmin` (`xl_running_xacts`, and the records of the
//! transactions still running at one of them). Pure: the WAL facts are inputs.

use std::collections::{BTreeMap, BTreeSet};

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

/// The records of one transaction (or subtransaction) that decoding reads, by the xid
/// `pg_walinspect` shows for them (a subtransaction's records carry its own xid).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// Start of its commit or abort record (`COMMIT_PREPARED`/`ABORT_PREPARED` for a prepared
    /// transaction; a subtransaction's own `ABORT` for `ROLLBACK TO`), if it ended.
    pub end_lsn: Option<Lsn>,
    /// Whether that record is an abort (an abort never rebuilds the builder's snapshot).
    pub aborted: bool,
    /// Whether that commit record carries invalidation messages (`XACT_XINFO_HAS_INVALS`).
    pub has_invals: bool,
    /// The subtransactions its commit/abort/prepare record lists.
    pub subxids: Vec<Xid>,
    /// For a subtransaction: its top-level xid (`XLR_BLOCK_ID_TOPLEVEL_XID` of its first
    /// record, or its top-level commit record's subxact list).
    pub top_xid: Option<Xid>,
    /// Start of the record that carries `top_xid` (its first record): decoding that reads it
    /// makes it a known subtransaction (`ReorderBufferAssignChild`).
    pub top_xid_lsn: Option<Lsn>,
    /// Start LSNs of its `Transaction/INVALIDATION` records (catalog changes; read only once
    /// the snapshot is FULL).
    pub invalidation_lsns: Vec<Lsn>,
    /// Start of its `Transaction/PREPARE` record (read only once the snapshot is FULL).
    pub prepare_lsn: Option<Lsn>,
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
    /// candidate or rebuilt after a catalog change, a restored snapshot's catalog-change
    /// list needed, a running subtransaction whose top-level xid is unknown).
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
    advance_with_files(
        start,
        moveto,
        running,
        xacts,
        snapshots,
        &mut BTreeMap::new(),
    )
}

/// [`advance`] with the contents of (some of) the snapshot files, by LSN: a restored file's
/// `xmin` and catalog-change list are then exact. Files this advance writes are added with
/// what it wrote (unless its own builder xmin was an approximation).
pub fn advance_with_files(
    start: SlotPositions,
    moveto: Lsn,
    running: &[RunningXacts],
    xacts: &[XactRecords],
    snapshots: &mut BTreeSet<Lsn>,
    files: &mut BTreeMap<Lsn, SnapshotFile>,
) -> Advance {
    let mut d = Decoder {
        slot: SlotState {
            pos: start,
            candidate_xmin: None,
            candidate_restart: None,
        },
        build: Build::Start,
        builder_xmin: Xid(0),
        builder_xmin_restored: false,
        restored_at: None,
        catchange: Vec::new(),
        snapshot_xmin: None,
        last_serialized: None,
        current_restart: None,
        txns: Vec::new(),
        sub_of: BTreeMap::new(),
        catalog: BTreeSet::new(),
        serialized: Vec::new(),
        approximate: false,
    };
    let mapped_subs: BTreeSet<Xid> = xacts
        .iter()
        .filter(|x| x.top_xid.is_some())
        .map(|x| x.xid)
        .collect();
    for (at, event) in events(start.restart_lsn, moveto, running, xacts) {
        match event {
            Event::Running(i) => {
                if let Some(rec) = running.get(i) {
                    if rec.subxids.iter().any(|s| !mapped_subs.contains(s)) {
                        d.approximate = true;
                    }
                    let prev_oldest = running
                        .iter()
                        .filter(|r| r.start_lsn < rec.start_lsn)
                        .max_by_key(|r| r.start_lsn)
                        .map(|r| r.oldest_running_xid);
                    d.running_xacts(at, rec, prev_oldest, snapshots, files);
                }
            }
            Event::Assign { sub, top } => d.assign_child(top, sub),
            Event::Record(xid) => d.process_xid(xid),
            Event::Change(xid) => d.change(xid, at),
            Event::Invalidation(xid) => d.invalidation(xid),
            Event::Prepare(xid) => {
                if d.build_at_least_full() {
                    d.process_xid(xid);
                }
            }
            Event::End(i) => {
                if let Some(x) = xacts.get(i) {
                    d.end(x);
                }
            }
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
    /// Reads `{"xid", "record_lsns", "change_lsns", "end_lsn"}` and the optional `"aborted"`,
    /// `"has_invals"`,
    /// `"subxids"`, `"top_xid"`, `"top_xid_lsn"`, `"invalidation_lsns"`, `"prepare_lsn"`.
    pub fn from_json(value: &Value) -> Result<XactRecords, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("xacts: entry is not an object"))?;
        Ok(XactRecords {
            xid: xid(obj, "xid")?.ok_or_else(|| InputError::new("xacts: xid is required"))?,
            record_lsns: lsn_list(obj, "record_lsns")?,
            change_lsns: lsn_list(obj, "change_lsns")?,
            end_lsn: lsn(obj, "end_lsn")?,
            aborted: matches!(obj.get("aborted"), Some(Value::Bool(true))),
            has_invals: matches!(obj.get("has_invals"), Some(Value::Bool(true))),
            subxids: xid_list(obj, "subxids")?,
            top_xid: xid(obj, "top_xid")?,
            top_xid_lsn: lsn(obj, "top_xid_lsn")?,
            invalidation_lsns: lsn_list(obj, "invalidation_lsns")?,
            prepare_lsn: lsn(obj, "prepare_lsn")?,
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
        if self.aborted {
            m.insert("aborted".into(), true.into());
        }
        if self.has_invals {
            m.insert("has_invals".into(), true.into());
        }
        if !self.subxids.is_empty() {
            m.insert("subxids".into(), xids_json(&self.subxids));
        }
        if let Some(t) = self.top_xid {
            m.insert("top_xid".into(), t.0.into());
        }
        if let Some(l) = self.top_xid_lsn {
            m.insert("top_xid_lsn".into(), l.to_string().into());
        }
        if !self.invalidation_lsns.is_empty() {
            m.insert(
                "invalidation_lsns".into(),
                lsns_json(&self.invalidation_lsns),
            );
        }
        if let Some(l) = self.prepare_lsn {
            m.insert("prepare_lsn".into(), l.to_string().into());
        }
        Value::Object(m)
    }
}

/// The top-level xid a WAL record carries (`XLR_BLOCK_ID_TOPLEVEL_XID`, written into the
/// first record of a subtransaction at `wal_level = logical`), read from the record's raw
/// bytes starting at `start` (at least its headers; a page header inside them, at an 8 kB
/// boundary, is skipped). `None` when the record has none or the bytes are too short.
pub fn record_toplevel_xid(start: Lsn, raw: &[u8]) -> Option<Xid> {
    // Remove short page headers at page boundaries inside the bytes.
    let mut bytes = Vec::with_capacity(raw.len());
    let mut pos = start.0;
    let mut i = 0usize;
    while i < raw.len() {
        if pos.is_multiple_of(WAL_PAGE_BYTES) && i > 0 {
            i += SHORT_PAGE_HEADER_BYTES as usize;
            pos += SHORT_PAGE_HEADER_BYTES;
            continue;
        }
        bytes.push(raw[i]);
        i += 1;
        pos += 1;
    }
    let u16_at = |o: usize| -> Option<u16> {
        Some(u16::from_le_bytes([*bytes.get(o)?, *bytes.get(o + 1)?]))
    };
    // XLogRecord: xl_tot_len, xl_xid, xl_prev, xl_info, xl_rmid, padding, xl_crc.
    let mut o = 24usize;
    loop {
        let id = *bytes.get(o)?;
        match id {
            // XLR_BLOCK_ID_DATA_SHORT / _LONG: the main data header comes last.
            255 | 254 => return None,
            // XLR_BLOCK_ID_ORIGIN
            253 => o += 3,
            // XLR_BLOCK_ID_TOPLEVEL_XID
            252 => {
                let b = bytes.get(o + 1..o + 5)?;
                return Some(Xid(u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            }
            0..=32 => {
                let fork_flags = *bytes.get(o + 1)?;
                o += 4; // id, fork_flags, data_length
                if fork_flags & 0x10 != 0 {
                    // XLogRecordBlockImageHeader: length, hole_offset, bimg_info.
                    let bimg_info = *bytes.get(o + 4)?;
                    u16_at(o)?;
                    o += 5;
                    if bimg_info & 0x01 != 0 && bimg_info & (0x04 | 0x08 | 0x10) != 0 {
                        o += 2; // XLogRecordBlockCompressHeader
                    }
                }
                if fork_flags & 0x80 == 0 {
                    o += 12; // RelFileLocator
                }
                o += 4; // BlockNumber
            }
            _ => return None,
        }
    }
}

/// What decoding reads from a serialized snapshot file when it restores it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The builder's `xmin` (the restored snapshot's xmin).
    pub xmin: Xid,
    /// `catchange.xip`: transactions with catalog changes running when it was written.
    pub catchange: Vec<Xid>,
}

impl SnapshotFile {
    /// Reads a `pg_logical/snapshots/*.snap` file (`SnapBuildOnDisk`, PostgreSQL 18 on a
    /// 64-bit little-endian server): `xmin` at byte 32, `committed.xcnt` at 96,
    /// `catchange.xcnt` at 128, then the committed and the catalog-change xids from 144.
    pub fn parse(bytes: &[u8]) -> Option<SnapshotFile> {
        let u32_at = |o: usize| -> Option<u32> {
            let b = bytes.get(o..o + 4)?;
            Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let u64_at = |o: usize| -> Option<u64> {
            let b = bytes.get(o..o + 8)?;
            let mut a = [0u8; 8];
            a.copy_from_slice(b);
            Some(u64::from_le_bytes(a))
        };
        // SNAPBUILD_MAGIC
        if u32_at(0)? != 0x51A1_E001 {
            return None;
        }
        let xmin = Xid(u32_at(32)?);
        let committed = usize::try_from(u64_at(96)?).ok()?;
        let catchange = usize::try_from(u64_at(128)?).ok()?;
        let from = 144usize.checked_add(committed.checked_mul(4)?)?;
        let catchange = (0..catchange)
            .map(|i| u32_at(from + 4 * i).map(Xid))
            .collect::<Option<Vec<Xid>>>()?;
        Some(SnapshotFile { xmin, catchange })
    }
}

impl SnapshotFile {
    /// Reads `{"xmin", "catchange"}`.
    pub fn from_json(value: &Value) -> Result<SnapshotFile, InputError> {
        let obj = value
            .as_object()
            .ok_or_else(|| InputError::new("snapshot_files: entry is not an object"))?;
        Ok(SnapshotFile {
            xmin: xid(obj, "xmin")?
                .ok_or_else(|| InputError::new("snapshot_files: xmin is required"))?,
            catchange: xid_list(obj, "catchange")?,
        })
    }

    /// The JSON object [`SnapshotFile::from_json`] reads.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("xmin".into(), self.xmin.0.to_string().into());
        m.insert("catchange".into(), xids_json(&self.catchange));
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
    /// `ReorderBufferAssignChild` at a record carrying its top-level xid.
    Assign {
        sub: Xid,
        top: Xid,
    },
    Record(Xid),
    Change(Xid),
    Invalidation(Xid),
    Prepare(Xid),
    /// Commit/abort record of `xacts[i]`.
    End(usize),
}

/// The records the advance reads, in WAL order (at one LSN: the child assignment, the xid
/// entry, then the change).
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
    for (i, x) in xacts.iter().enumerate() {
        if let (Some(top), Some(l)) = (x.top_xid, x.top_xid_lsn) {
            if read(l) && top != x.xid {
                ev.push((l, 1, Event::Assign { sub: x.xid, top }));
            }
        }
        for l in x.record_lsns.iter().copied().filter(|l| read(*l)) {
            ev.push((l, 2, Event::Record(x.xid)));
        }
        for l in x.change_lsns.iter().copied().filter(|l| read(*l)) {
            ev.push((l, 3, Event::Change(x.xid)));
        }
        for l in x.invalidation_lsns.iter().copied().filter(|l| read(*l)) {
            ev.push((l, 4, Event::Invalidation(x.xid)));
        }
        if let Some(l) = x.prepare_lsn.filter(|l| read(*l)) {
            ev.push((l, 4, Event::Prepare(x.xid)));
        }
        if let Some(l) = x.end_lsn.filter(|l| read(*l)) {
            ev.push((l, 5, Event::End(i)));
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
    /// Whether `builder_xmin` is a restored snapshot's (not in the inputs, approximated).
    builder_xmin_restored: bool,
    /// Where a snapshot file whose contents are not in the inputs was restored (its
    /// catalog-change list is unknown).
    restored_at: Option<Lsn>,
    /// `builder->catchange.xip` (from a restored file).
    catchange: Vec<Xid>,
    /// `builder->snapshot->xmin`, once built (base snapshots share it until rebuilt), and
    /// whether it came from a restored snapshot file.
    snapshot_xmin: Option<(Xid, bool)>,
    /// `builder->last_serialized_snapshot`.
    last_serialized: Option<Lsn>,
    /// `reorder->current_restart_decoding_lsn`.
    current_restart: Option<Lsn>,
    txns: Vec<Txn>,
    /// Known subtransactions (`RBTXN_IS_SUBXACT`) and their top-level xid.
    sub_of: BTreeMap<Xid, Xid>,
    /// Entries with `RBTXN_HAS_CATALOG_CHANGES`.
    catalog: BTreeSet<Xid>,
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
        files: &mut BTreeMap<Lsn, SnapshotFile>,
    ) {
        if self.build == Build::Consistent {
            // SnapBuildSerialize: an existing file is reused, either way it is the new
            // restart point. A new file holds the builder's xmin before this record and the
            // transactions flagged with catalog changes.
            if snapshots.insert(at) {
                self.serialized.push(at);
                if !self.builder_xmin_restored && self.restored_at.is_none() {
                    let catchange: Vec<Xid> = self.catalog.iter().copied().collect();
                    files.insert(
                        at,
                        SnapshotFile {
                            xmin: self.builder_xmin,
                            catchange,
                        },
                    );
                }
            }
            self.last_serialized = Some(at);
            self.current_restart = Some(at);
            self.after_find(at, rec);
        } else if self.find_snapshot(at, rec, prev_oldest, snapshots, files) {
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
        files: &BTreeMap<Lsn, SnapshotFile>,
    ) -> bool {
        let (oldest, next) = (rec.oldest_running_xid, rec.next_xid);
        if oldest == next {
            self.builder_xmin = next;
            self.builder_xmin_restored = false;
            self.build = Build::Consistent;
            return false;
        }
        if snapshots.contains(&at) {
            if let Some(file) = files.get(&at) {
                self.builder_xmin = file.xmin;
                self.catchange = file.catchange.clone();
                self.snapshot_xmin = Some((file.xmin, false));
                self.current_restart = Some(at);
                self.build = Build::Consistent;
                return false;
            }
            // Contents unknown: the file's xmin is the builder xmin of whoever wrote it,
            // normally the oldestRunningXid of the running_xacts record before this one.
            let xmin = prev_oldest.unwrap_or(oldest);
            self.builder_xmin = xmin;
            self.builder_xmin_restored = true;
            self.restored_at = Some(at);
            self.snapshot_xmin = Some((xmin, true));
            self.current_restart = Some(at);
            self.build = Build::Consistent;
            return false;
        }
        match self.build {
            Build::Start => {
                self.build = Build::Building(next);
                self.builder_xmin = next;
                self.builder_xmin_restored = false;
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
        self.builder_xmin_restored = false;
        // SnapBuildPurgeOlderTxn
        let xmin = self.builder_xmin;
        self.catchange.retain(|x| !xid_precedes(*x, xmin));
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
    /// stopping at the first that is not (with their known subtransactions).
    fn abort_old(&mut self, oldest: Xid) {
        while let Some(t) = self.txns.first() {
            if !xid_precedes(t.xid, oldest) {
                break;
            }
            let xid = t.xid;
            self.cleanup(xid);
        }
    }

    fn build_at_least_full(&self) -> bool {
        matches!(self.build, Build::Full(_) | Build::Consistent)
    }

    /// `ReorderBufferCleanupTXN`: a top-level entry goes with its known subtransactions; a
    /// known subtransaction just leaves its parent.
    fn cleanup(&mut self, xid: Xid) {
        if self.sub_of.remove(&xid).is_some() {
            self.catalog.remove(&xid);
            return;
        }
        if let Some(i) = self.txns.iter().position(|t| t.xid == xid) {
            self.txns.remove(i);
            self.catalog.remove(&xid);
            let subs: Vec<Xid> = self
                .sub_of
                .iter()
                .filter(|(_, top)| **top == xid)
                .map(|(s, _)| *s)
                .collect();
            for s in subs {
                self.sub_of.remove(&s);
                self.catalog.remove(&s);
            }
        }
    }

    /// `ReorderBufferTXNByXid(create, as top-level)`: the transaction's entry, created at its
    /// first record with the restart point current then.
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

    /// `ReorderBufferProcessXid`: a known subtransaction is already there; anything else gets
    /// a top-level entry.
    fn process_xid(&mut self, xid: Xid) {
        if !self.sub_of.contains_key(&xid) {
            self.txn_entry(xid);
        }
    }

    /// `ReorderBufferAssignChild`: the top-level entry is created if needed; a subtransaction
    /// seen before as top-level leaves that list and hands an earlier base snapshot to its
    /// parent (`ReorderBufferTransferSnapToParent`).
    fn assign_child(&mut self, top: Xid, sub: Xid) {
        if self.sub_of.contains_key(&top) {
            return;
        }
        self.txn_entry(top);
        if self.sub_of.contains_key(&sub) {
            return;
        }
        if let Some(i) = self.txns.iter().position(|t| t.xid == sub) {
            let moved = self.txns.remove(i);
            if let Some(b) = moved.base {
                if let Some(t) = self.txns.iter_mut().find(|t| t.xid == top) {
                    if t.base.is_none_or(|tb| b.0 < tb.0) {
                        t.base = Some(b);
                    }
                }
            }
        }
        self.sub_of.insert(sub, top);
    }

    /// A data change: `SnapBuildProcessChange` gives the transaction (the top-level one of a
    /// known subtransaction) a base snapshot.
    fn change(&mut self, xid: Xid, at: Lsn) {
        self.process_xid(xid);
        let usable = match self.build {
            Build::Start | Build::Building(_) => false,
            Build::Full(phase) => !xid_precedes(xid, phase),
            Build::Consistent => true,
        };
        if !usable {
            return;
        }
        let target = self.sub_of.get(&xid).copied().unwrap_or(xid);
        let has_base = self
            .txns
            .iter()
            .any(|t| t.xid == target && t.base.is_some());
        if has_base {
            return;
        }
        let (xmin, restored) = *self.snapshot_xmin.get_or_insert((self.builder_xmin, false));
        let i = self.txn_entry(target);
        if let Some(t) = self.txns.get_mut(i) {
            t.base = Some((at, xmin, restored));
        }
    }

    /// `XLOG_XACT_INVALIDATIONS` (FULL or later): `ReorderBufferXidSetCatalogChanges`, which
    /// also flags the top-level transaction of a known subtransaction.
    fn invalidation(&mut self, xid: Xid) {
        if !self.build_at_least_full() {
            return;
        }
        self.process_xid(xid);
        self.catalog.insert(xid);
        if let Some(top) = self.sub_of.get(&xid).copied() {
            self.catalog.insert(top);
        }
    }

    /// A commit or abort record (FULL or later; before that `xact_decode` bails out and the
    /// entry waits for `ReorderBufferAbortOld`). A commit of a transaction with catalog
    /// changes (its own or a listed subtransaction's flag) rebuilds the builder's snapshot
    /// from the builder's xmin (`SnapBuildCommitTxn`); then the transaction and its listed
    /// subtransactions are forgotten.
    fn end(&mut self, x: &XactRecords) {
        if !self.build_at_least_full() {
            return;
        }
        if !x.aborted {
            let flagged = |d: &Decoder, xid: Xid| {
                d.catalog.contains(&xid)
                    && (d.sub_of.contains_key(&xid) || d.txns.iter().any(|t| t.xid == xid))
            };
            // SnapBuildXidHasCatalogChanges: the reorder buffer's flag, or a restored
            // file's catalog-change list for a commit record with invalidations.
            let in_catchange = |d: &Decoder, xid: Xid| x.has_invals && d.catchange.contains(&xid);
            let catalog = flagged(self, x.xid)
                || in_catchange(self, x.xid)
                || x.subxids
                    .iter()
                    .any(|s| flagged(self, *s) || in_catchange(self, *s));
            if !catalog {
                if let Some(r) = self.restored_at {
                    // The restored file's catalog-change list is not in the inputs.
                    if x.invalidation_lsns.iter().any(|l| *l < r) {
                        self.approximate = true;
                    }
                }
            }
            if catalog {
                self.snapshot_xmin = Some((self.builder_xmin, self.builder_xmin_restored));
            }
        }
        for s in &x.subxids {
            self.cleanup(*s);
        }
        self.cleanup(x.xid);
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
