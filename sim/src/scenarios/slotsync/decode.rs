//! What a standby's own decoding works from, and what it must leave. In three seeds of four
//! the primary writes `RUNNING_XACTS` records (now and then, and at every checkpoint) and the
//! standbys' serialized snapshots are known to the sync engine, which then advances a synced
//! slot by decoding the standby's WAL instead of copying the primary slot's positions
//! (`LogicalSlotAdvanceAndCheckSnapState`, as PostgreSQL does whenever it has no snapshot
//! file at the remote `restart_lsn`). The engine's outcome carries the files decoding wrote and
//! the slots' in-memory `effective_catalog_xmin` to the next call; a restartpoint removes the
//! files no slot needs (`CheckPointSnapBuild`); a base backup starts with none.
//!
//! `decoded-slot-safe` judges every sync: a persistent, valid synced slot whose
//! `confirmed_flush_lsn` is `C` must be able to decode every transaction still unfinished at
//! `C` — its `restart_lsn` at or before that transaction's first record and its
//! `catalog_xmin` (the view's and the in-memory one) at or before its xid. That is what the
//! subscriber needs after a failover; the loss invariants see it only at the failover and only
//! when the check said ready, this rule at every call.

use std::collections::BTreeMap;

use pgyard_slotsync::decoding::{record_is_read, SnapshotFile, XactRecords};
use pgyard_slotsync::{Action, Outcome, Positions, SlotRow, Standby};
use pgyard_types::{Lsn, Xid};

use super::fail;
use super::wal::valid_restart;
use crate::publisher::{Fate, Publisher};
use crate::Violation;

/// One standby's decoding state between sync calls.
#[derive(Clone, Debug, Default)]
pub(crate) struct StandbyDecoding {
    /// LSNs of its `pg_logical/snapshots` files (`None`: unknown to the engine, which copies).
    pub snapshots: Option<Vec<Lsn>>,
    /// Their contents, where decoding wrote them.
    pub files: BTreeMap<Lsn, SnapshotFile>,
    /// Its slots' in-memory `effective_catalog_xmin` where not the view's `catalog_xmin`.
    pub effective: BTreeMap<String, Xid>,
}

impl StandbyDecoding {
    /// A standby whose snapshot files the engine knows (none yet).
    pub fn known() -> StandbyDecoding {
        StandbyDecoding {
            snapshots: Some(Vec::new()),
            ..StandbyDecoding::default()
        }
    }

    /// The same standby after a fresh base backup: no files, no slots.
    pub fn rebuilt(&self) -> StandbyDecoding {
        StandbyDecoding {
            snapshots: self.snapshots.as_ref().map(|_| Vec::new()),
            ..StandbyDecoding::default()
        }
    }

    /// What a sync call left: the files it wrote and the in-memory xmins (taken from `out`).
    pub fn after(&mut self, out: &mut Outcome) {
        self.snapshots = out.serialized_snapshots.take();
        self.files = std::mem::take(&mut out.snapshot_files);
        self.effective = std::mem::take(&mut out.effective_catalog_xmins);
    }

    /// `CheckPointSnapBuild` at a restartpoint with redo `redo`: files before both it and
    /// every valid slot's `restart_lsn` are removed.
    pub fn restartpoint(&mut self, redo: Lsn, slots: &[SlotRow]) {
        let cutoff = slots
            .iter()
            .filter(|s| s.invalidation_reason.is_none())
            .filter_map(|s| s.restart_lsn)
            .filter(|l| *l != Lsn::INVALID)
            .fold(redo, Lsn::min);
        if let Some(snaps) = &mut self.snapshots {
            snaps.retain(|l| *l >= cutoff);
        }
        self.files.retain(|l, _| *l >= cutoff);
    }

    /// A slot's in-memory `effective_catalog_xmin`.
    pub fn effective_of(&self, s: &SlotRow) -> Option<Xid> {
        self.effective.get(&s.slot_name).copied().or(s.catalog_xmin)
    }

    /// Fills the engine's decoding inputs of `sb`: the files, the in-memory xmins, and the WAL
    /// the standby has (from its oldest segment `oldest` to what it received) that a decoding
    /// of its slots `local` can read: from the oldest `restart_lsn` among them and the
    /// primary's slot (where a new synced slot reserves WAL) on.
    pub fn fill(&self, sb: &mut Standby, publ: &Publisher, oldest: Lsn, local: &[SlotRow]) {
        sb.serialized_snapshots.clone_from(&self.snapshots);
        sb.snapshot_files.clone_from(&self.files);
        sb.effective_catalog_xmins.clone_from(&self.effective);
        let (Some(facts), Some(_)) = (publ.wal_facts(), &self.snapshots) else {
            return;
        };
        let from = local
            .iter()
            .filter_map(valid_restart)
            .fold(publ.slot.restart_lsn, Lsn::min)
            .max(oldest);
        let oldest = from;
        let received = sb.receive_lsn.unwrap_or(Lsn::INVALID);
        let on_standby = |l: &Lsn| *l >= oldest && *l < received;
        // The records are in LSN order.
        let at = facts.running.partition_point(|r| r.start_lsn < oldest);
        sb.running_xacts = facts.running[at..]
            .iter()
            .take_while(|r| on_standby(&r.start_lsn))
            .cloned()
            .collect();
        sb.xacts = facts
            .xacts
            .values()
            .filter_map(|x| received_part(x, oldest, received))
            .collect();
    }
}

/// The part of `x`'s records a standby that kept WAL from `oldest` and received up to
/// `received` has, if it has any and the transaction had not ended before `oldest`.
fn received_part(x: &XactRecords, oldest: Lsn, received: Lsn) -> Option<XactRecords> {
    if x.end_lsn.is_some_and(|e| e < oldest) {
        return None;
    }
    let first = x.record_lsns.first().copied().or(x.end_lsn)?;
    if first >= received {
        return None;
    }
    let before = |l: &Lsn| *l < received;
    let mut y = x.clone();
    y.record_lsns.retain(before);
    y.change_lsns.retain(before);
    y.invalidation_lsns.retain(before);
    y.prepare_lsn = y.prepare_lsn.filter(before);
    if y.end_lsn.is_some_and(|e| e >= received) {
        y.end_lsn = None;
        y.aborted = false;
        y.has_invals = false;
        y.subxids.clear();
    }
    if y.top_xid_lsn.is_some_and(|l| l >= received) {
        y.top_xid = None;
        y.top_xid_lsn = None;
    }
    Some(y)
}

/// Top-level transaction `xid`'s first record and, if it has ended, the start of its commit
/// or abort record (for a prepared one, the decision's); `None` for one without a record
/// decoding enters in its reorder buffer — a two-phase transaction that changed nothing has
/// only its PREPARE, which decoding skips before its snapshot is full, and nothing to send.
pub(super) fn span_of(publ: &Publisher, xid: u32) -> Option<(Lsn, Option<Lsn>)> {
    if let Some(x) = publ.wal_facts().and_then(|f| f.xacts.get(&xid)) {
        return Some((*x.record_lsns.first()?, x.end_lsn));
    }
    let t = publ.txns.get(&xid)?;
    match t.fate {
        Fate::Committed { commit_lsn, .. } => Some((t.first_lsn, Some(commit_lsn))),
        // Tracked kinds are in the facts when tracked; untracked, only a plain transaction
        // has a fate here, and it is written whole.
        _ => None,
    }
}

/// `decoded-slot-safe` (see the module docs) for the slots standby `i` has after a sync.
pub(super) fn judge(
    tick: u64,
    i: usize,
    publ: &Publisher,
    dec: &StandbyDecoding,
    slots: &[SlotRow],
) -> Result<(), Violation> {
    let steady = slots
        .iter()
        .filter(|s| s.synced && !s.temporary && s.invalidation_reason.is_none());
    for s in steady {
        let (Some(c), Some(r)) = (s.confirmed_flush_lsn, s.restart_lsn) else {
            continue;
        };
        let x = s.catalog_xmin.map_or(0, |x| x.0);
        let xe = dec.effective_of(s).map_or(0, |x| x.0);
        let pending = publ.txns.keys().filter_map(|&xid| {
            let (first, end) = span_of(publ, xid)?;
            (first < c && end.is_none_or(|e| e >= c)).then_some((xid, first))
        });
        for (xid, first) in pending {
            if first < r || xid < x || xid < xe {
                return Err(fail(
                    "decoded-slot-safe",
                    format!(
                        "tick {tick}: standby{}'s synced slot {} (restart {r}, confirmed {c}, \
                         catalog_xmin {x}, in memory {xe}) cannot decode transaction {} \
                         (first record {}), unfinished at {c}",
                        i + 1,
                        s.slot_name,
                        xid,
                        first
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// `decoded-slot-advances`: a decoded update of a slot that existed before the call, whose
/// decoding read two running-xacts records with nothing running (at or after its old
/// `restart_lsn`, before the `confirmed_flush_lsn` it moved to), leaves the slot consistent,
/// its `restart_lsn` past the old one and, when the second record's next xid is past the old
/// `catalog_xmin`, its `catalog_xmin` too. The first such record makes the snapshot
/// consistent and clears what was read before; at the second nothing is in progress, so
/// decoding proposes that record as the restart point and its next xid as the catalog
/// horizon (`SnapBuildProcessRunningXacts`), and the confirmation at the end applies the
/// first proposal still pending, which is past the old positions as well.
pub(super) fn advances(
    tick: u64,
    i: usize,
    input: &Standby,
    before: &[SlotRow],
    out: &Outcome,
) -> Result<(), Violation> {
    for action in &out.actions {
        let Action::Update {
            slot,
            positions: Some(Positions::Decoded { consistent, .. }),
            ..
        } = action
        else {
            continue;
        };
        let old = before.iter().find(|s| &s.slot_name == slot);
        let new = out.slots_after.iter().find(|s| &s.slot_name == slot);
        let (Some(old), Some(new)) = (old, new) else {
            continue;
        };
        let (Some(r0), Some(c)) = (old.restart_lsn, new.confirmed_flush_lsn) else {
            continue;
        };
        let x0 = old.catalog_xmin.map_or(0, |x| x.0);
        let mut idle = input.running_xacts.iter().filter(|r| {
            r.start_lsn >= r0
                && record_is_read(r.start_lsn, c, input.wal_segment_size_bytes)
                && r.xids.is_empty()
                && r.subxids.is_empty()
        });
        let Some(second) = idle.nth(1) else {
            continue;
        };
        let r1 = new.restart_lsn.unwrap_or(Lsn::INVALID);
        let x1 = new.catalog_xmin.map_or(0, |x| x.0);
        let xmin_due = second.next_xid.0 > x0;
        if !consistent || r1 <= r0 || (xmin_due && x1 <= x0) {
            return Err(fail(
                "decoded-slot-advances",
                format!(
                    "tick {tick}: standby{}'s decoded update of {slot} read idle running-xacts \
                     records up to {} (next xid {}) but left it at restart {r1}, catalog_xmin \
                     {x1}, consistent {consistent} (was restart {r0}, catalog_xmin {x0})",
                    i + 1,
                    second.start_lsn,
                    second.next_xid.0
                ),
            ));
        }
    }
    Ok(())
}

/// `memory-holds-primarys-xmin`: once a sync has synced a slot's positions (an update that
/// copied or decoded them), the slot's in-memory `effective_catalog_xmin` is the primary
/// slot's `catalog_xmin`, whatever decoding left in the view (`update_local_synced_slot`);
/// that is what the standby's feedback and its recovery conflicts then go by.
pub(super) fn memory_holds(
    tick: u64,
    i: usize,
    remote: &[SlotRow],
    out: &Outcome,
) -> Result<(), Violation> {
    if out.error.is_some() {
        return Ok(());
    }
    for a in &out.actions {
        let Action::Update {
            slot,
            positions: Some(_),
            ..
        } = a
        else {
            continue;
        };
        let r = remote.iter().find(|r| &r.slot_name == slot);
        let s = out.slots_after.iter().find(|s| &s.slot_name == slot);
        let (Some(r), Some(s)) = (r, s) else {
            continue;
        };
        let memory = out
            .effective_catalog_xmins
            .get(slot)
            .copied()
            .or(s.catalog_xmin);
        if s.invalidation_reason.is_none() && memory != r.catalog_xmin {
            return Err(fail(
                "memory-holds-primarys-xmin",
                format!(
                    "tick {tick}: after an update of {slot} on standby{} its in-memory \
                     catalog_xmin is {memory:?} (the view's {:?}), the primary slot's {:?}",
                    i + 1,
                    s.catalog_xmin,
                    r.catalog_xmin
                ),
            ));
        }
    }
    Ok(())
}
