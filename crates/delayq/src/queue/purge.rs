//! Freeing disk space: removing segments that hold nothing pending, after copying the
//! undecided transactions that pin old segments forward.

use super::writer::schema_rec;
use super::DelayQueue;
use crate::format::{segment_name, Carry, Flavor, Rec, SEGMENT_HEADER_BYTES};
use crate::model::{Loc, TxnState};
use crate::storage::{Storage, StorageErrorKind};
use crate::Error;

impl<S: Storage> DelayQueue<S> {
    /// Flushes, then removes the oldest segments that hold nothing pending (never the active
    /// one), fsyncing the directory after each removal. Returns the removed file names.
    ///
    /// "Applied" is taken from [`DelayQueue::mark_applied`] even before its record is durable:
    /// the subscriber's replication origin is the durable truth (pass it to
    /// [`DelayQueue::skip_applied_through`] after a restart). This is what lets a queue that
    /// ran out of space free segments although it cannot write.
    pub fn purge(&mut self) -> Result<Vec<String>, Error> {
        let flushed = match self.flush() {
            Ok(_) => true,
            // Out of space: still free what is durably finished.
            Err(e) if e.is_retryable() => false,
            Err(e) => return Err(e),
        };
        if flushed && self.carry_forward()? {
            match self.flush() {
                Ok(_) => {}
                // The copies wait in the buffer; the originals stay until they are durable.
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e),
            }
        }
        let Some(active) = self.segs.last().map(|s| s.seq) else {
            return Ok(Vec::new());
        };
        let floor = self
            .model
            .pinned_from()
            .unwrap_or(active)
            .min(active)
            .min(self.carry_unsynced_from.unwrap_or(active));
        let mut removed = Vec::new();
        while self.segs.first().is_some_and(|s| s.seq < floor) {
            let name = self.segs[0].name.clone();
            match self.storage.remove(&name) {
                Ok(()) => {}
                Err(e) if e.kind == StorageErrorKind::NotFound => {}
                Err(e) => return Err(Error::Storage(e)),
            }
            let r = self.storage.sync_dir();
            r.map_err(|e| self.fail(Error::Storage(e)))?;
            self.segs.remove(0);
            removed.push(name);
        }
        if let Some(first) = self.segs.first().map(|s| s.seq) {
            self.model.forget_before(first);
        }
        self.refresh_flow();
        Ok(removed)
    }

    /// Copies the records of undecided items (prepared, or streamed and in progress) that keep
    /// old segments alive into the newest segment, one set per item ending with a CARRY record
    /// flagged last, when that frees more than it writes. A set larger than a segment gets a
    /// segment of its own. Returns whether anything was copied; the caller flushes before
    /// removing the old segments.
    pub(crate) fn carry_forward(&mut self) -> Result<bool, Error> {
        let Some(active) = self.segs.last().map(|s| s.seq) else {
            return Ok(false);
        };
        // Segments below `floor` become removable once the sets below are copied.
        let mut floor = self.model.committed_from().unwrap_or(active).min(active);
        if self.model.pinned_from().is_none_or(|p| p >= floor) {
            // No unfinished item begins below the floor: there is nothing to carry. (Purge
            // runs often; this saves a walk over every item.)
            return Ok(false);
        }
        let snapshot: u64 = self
            .model
            .schema
            .current
            .iter()
            .map(|(&(_, oid), (tag, raw))| schema_rec(*tag, oid, raw).encoded_len())
            .sum();
        // What a set fits in after an ordinary segment's header and snapshot.
        let room = self
            .config
            .segment_bytes_max
            .saturating_sub(SEGMENT_HEADER_BYTES + snapshot);
        let carriable = |it: &crate::model::Item| {
            it.state == TxnState::Prepared
                || (it.state == TxnState::InProgress && it.flavor == Flavor::Streamed)
        };
        for it in self.model.items.values() {
            if !it.state.finished() && it.first_seg < floor && !carriable(it) {
                floor = it.first_seg;
            }
        }
        let mut sets: Vec<(u64, u64)> = self
            .model
            .items
            .values()
            .filter(|it| !it.state.finished() && it.first_seg < floor)
            .map(|it| (it.id, set_bytes(it)))
            .collect();
        if sets.is_empty() {
            return Ok(false);
        }
        let freed: u64 = self
            .segs
            .iter()
            .filter(|s| s.seq < floor)
            .map(|s| s.len)
            .sum();
        let copied: u64 = sets.iter().map(|s| s.1).sum();
        // Each set larger than a segment takes one of its own, and the set after it starts
        // another: at most one more header and snapshot for either.
        let large = sets.iter().filter(|s| s.1 > room).count() as u64;
        let opened = (1 + 2 * large) * (SEGMENT_HEADER_BYTES + snapshot);
        if copied + opened >= freed {
            return Ok(false);
        }
        sets.sort_unstable();
        let mut carried = false;
        for (id, bytes) in sets {
            match self.ensure_room(bytes) {
                Ok(()) => {}
                Err(e) if e.is_retryable() => {
                    return Ok(carried || self.carry_unsynced_from.is_some())
                }
                Err(e) => return Err(e),
            }
            let Some((len, records)) = self.segs.last().map(|s| (s.len, s.records)) else {
                return Ok(carried);
            };
            let before = self.carry_unsynced_from;
            let from = self.model.items[&id].first_seg;
            self.carry_unsynced_from = Some(before.unwrap_or(from).min(from));
            match self.copy_set(id) {
                Ok(()) => carried = true,
                // The file is not to be trusted (nor written) again: reopening recovers.
                Err(e) if self.fatal.is_some() => return Err(e),
                Err(e) => {
                    // Take the set back out: the queue is as it was before it.
                    self.model.carrying = None;
                    self.cut_back(len, records)?;
                    self.carry_unsynced_from = before;
                    if e.is_retryable() {
                        return Ok(carried || before.is_some());
                    }
                    return Err(e);
                }
            }
        }
        Ok(carried)
    }

    /// Copies the records of item `id` into the active segment (which has room for all of
    /// them), each read and checked just before its copy is written: only one record is in
    /// memory at a time, however large the set.
    fn copy_set(&mut self, id: u64) -> Result<(), Error> {
        let locs: Vec<Loc> = {
            let it = &self.model.items[&id];
            std::iter::once(it.start)
                .chain(it.body.iter().map(|(l, _)| *l))
                .chain(it.seal)
                .collect()
        };
        let n = locs.len();
        for (i, loc) in locs.into_iter().enumerate() {
            // `read_record` verified the checksum: only the fields are decoded again.
            let bytes = self.read_record(loc)?;
            let rec = crate::format::decode_fields(&bytes).map_err(|r| Error::Corrupt {
                file: segment_name(loc.seg),
                offset: loc.off,
                reason: r.to_owned(),
            })?;
            let carry = if i + 1 == n { Carry::Last } else { Carry::Copy };
            self.push(Rec { carry, ..rec })?;
        }
        Ok(())
    }
}

/// The bytes of an item's carry-forward set: each copy is its original plus two bytes.
fn set_bytes(it: &crate::model::Item) -> u64 {
    std::iter::once(it.start)
        .chain(it.body.iter().map(|(l, _)| *l))
        .chain(it.seal)
        .map(|l| l.len + 2)
        .sum()
}
