//! What advancing a synced slot by decoding the standby's own WAL does to its positions:
//! `LogicalSlotAdvanceAndCheckSnapState` in fast-forward mode, reduced to the records that
//! move `restart_lsn` and `catalog_xmin` (`xl_running_xacts`, and the records of the
//! transactions still running at one of them). Pure: the WAL facts are inputs.
//!
//! The snapshot builder and reorder buffer are modelled in `builder`; `wal` reads the
//! server's own formats (record bytes, snapshot files); the inputs' JSON form is in
//! [`crate::json`].

use std::collections::{BTreeMap, BTreeSet};

use pgyard_types::{Lsn, Xid};

use builder::{Build, Decoder};
use wal::first_on_page;

mod builder;
mod wal;

pub use wal::{parse_running_xacts_description, record_toplevel_xid, snapshot_file_lsn};

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
/// (`LogicalSlotAdvanceAndCheckSnapState(moveto)`) in WAL of `segment_bytes` segments, with
/// the serialized snapshots `snapshots` (which it extends).
pub fn advance(
    start: SlotPositions,
    moveto: Lsn,
    segment_bytes: u64,
    running: &[RunningXacts],
    xacts: &[XactRecords],
    snapshots: &mut BTreeSet<Lsn>,
) -> Advance {
    advance_with_files(
        start,
        moveto,
        segment_bytes,
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
    segment_bytes: u64,
    running: &[RunningXacts],
    xacts: &[XactRecords],
    snapshots: &mut BTreeSet<Lsn>,
    files: &mut BTreeMap<Lsn, SnapshotFile>,
) -> Advance {
    let mut d = Decoder::new(start);
    let mapped_subs: BTreeSet<Xid> = xacts
        .iter()
        .filter(|x| x.top_xid.is_some())
        .map(|x| x.xid)
        .collect();
    for (at, event) in events(start.restart_lsn, (moveto, segment_bytes), running, xacts) {
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

/// Whether the advance reads a record starting at `start` on its way to `moveto`, in WAL of
/// `segment_bytes` segments: it reads while the end of the previous record is before
/// `moveto`, and a record right after a page header had its predecessor end at the page
/// boundary at the latest.
pub fn record_is_read(start: Lsn, moveto: Lsn, segment_bytes: u64) -> bool {
    start < moveto || (start == moveto && first_on_page(start, segment_bytes))
}

/// What decoding reads from a serialized snapshot file when it restores it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotFile {
    /// The builder's `xmin` (the restored snapshot's xmin).
    pub xmin: Xid,
    /// `catchange.xip`: transactions with catalog changes running when it was written.
    pub catchange: Vec<Xid>,
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
    (moveto, segment_bytes): (Lsn, u64),
    running: &[RunningXacts],
    xacts: &[XactRecords],
) -> Vec<(Lsn, Event)> {
    let read = |l: Lsn| l >= from && record_is_read(l, moveto, segment_bytes);
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
