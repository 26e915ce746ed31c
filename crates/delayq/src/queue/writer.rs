//! The writing side of the queue: records buffered into the active segment, segment
//! roll-over, and the group-commit flush.

use pgyard_types::{Lsn, Xid};

use super::DelayQueue;
use crate::format::{segment_name, Body, Carry, Rec, SegmentHeader, SEGMENT_HEADER_BYTES};
use crate::model::Loc;
use crate::recover::SegState;
use crate::storage::{Storage, StorageErrorKind};
use crate::Error;

impl<S: Storage> DelayQueue<S> {
    /// Writes buffered records and fsyncs (group commit): afterwards everything accepted so
    /// far is durable. Returns the new [`DelayQueue::flush_lsn`].
    pub fn flush(&mut self) -> Result<Lsn, Error> {
        self.check()?;
        self.write_out()?;
        if self.unsynced {
            if let Some(name) = self.segs.last().map(|s| s.name.clone()) {
                let r = self.storage.sync(&name);
                r.map_err(|e| self.fail(Error::Storage(e)))?;
            }
            self.unsynced = false;
            self.synced = self.written;
        }
        if self.dir_dirty {
            let r = self.storage.sync_dir();
            r.map_err(|e| self.fail(Error::Storage(e)))?;
            self.dir_dirty = false;
        }
        self.unsynced_seal = false;
        self.carry_unsynced_from = None;
        self.durable_horizon = self.durable_horizon.max(self.model.horizon);
        self.flushed = self.flushed.max(self.durable_horizon).max(self.received);
        Ok(self.flush_lsn())
    }

    /// True when records were accepted since the last flush.
    pub fn needs_flush(&self) -> bool {
        self.unsynced || self.dir_dirty
    }

    pub(super) fn push_applied(&mut self, id: u64) -> Result<(), Error> {
        let it = &self.model.items[&id];
        let lsn = match it.commit {
            Some(c) if !it.note => c.end,
            _ => Lsn::INVALID,
        };
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid: it.xid,
            item: id,
            lsn,
            body: Body::Applied,
        })?;
        Ok(())
    }

    /// Whether the record at `loc` survives a crash: older segments were synced before the
    /// active one was created.
    pub(super) fn is_durable(&self, loc: Loc) -> bool {
        match self.segs.last() {
            Some(active) if active.seq == loc.seg => loc.off + loc.len <= self.synced,
            _ => true,
        }
    }

    /// Appends one record: rolls over when needed (retryable failures change nothing), buffers
    /// it and applies it to the model.
    pub(super) fn push(&mut self, rec: Rec<'_>) -> Result<Loc, Error> {
        let len = rec.encoded_len();
        self.ensure_room(len)?;
        let Some(seg) = self.segs.last_mut() else {
            return Err(self.fail(Error::Misuse("no active segment".into())));
        };
        let loc = Loc {
            seg: seg.seq,
            off: seg.len,
            len,
        };
        rec.encode(&mut self.buf);
        seg.len += len;
        seg.records += 1;
        self.unsynced = true;
        if let Err(reason) = self.model.apply(&rec, loc) {
            let name = seg.name.clone();
            return Err(self.fail(Error::Corrupt {
                file: name,
                offset: loc.off,
                reason: format!("internal: record rejected by the index: {reason}"),
            }));
        }
        if self.buf.len() >= self.config.write_buffer_bytes {
            match self.write_out() {
                Ok(()) => {}
                // Kept in the buffer; the next flush retries.
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(loc)
    }

    pub(super) fn ensure_room(&mut self, len: u64) -> Result<(), Error> {
        if let Some(seg) = self.segs.last() {
            if seg.len + len <= seg.capacity {
                return Ok(());
            }
        }
        let capacity = self.config.segment_bytes_max;
        let seq = match self.segs.last() {
            None => 1,
            Some(s) => s.seq.checked_add(1).ok_or_else(|| {
                Error::Misuse("segment sequence numbers are used up; start a new directory".into())
            })?,
        };
        let mut snap = Vec::new();
        let mut snap_records = 0;
        for (key, (tag, raw)) in &self.model.schema.current {
            let lsn = self.model.schema.current_lsn.get(key).copied();
            let mut rec = schema_rec(*tag, key.1, raw);
            rec.lsn = lsn.unwrap_or(Lsn::INVALID);
            rec.encode(&mut snap);
            snap_records += 1;
        }
        let need = SEGMENT_HEADER_BYTES + snap.len() as u64 + len;
        if need > capacity {
            return Err(Error::RecordTooLarge {
                len: need,
                capacity,
            });
        }
        // The old segment becomes immutable and durable before the next one exists, so only
        // the newest segment can ever have a torn tail.
        if let Some(old) = self.segs.last().map(|s| s.name.clone()) {
            self.write_out()?;
            if self.unsynced {
                let r = self.storage.sync(&old);
                r.map_err(|e| self.fail(Error::Storage(e)))?;
                self.unsynced = false;
            }
        }
        let name = segment_name(seq);
        if let Err(e) = self.storage.create(&name) {
            let e = Error::Storage(e);
            return Err(if e.is_retryable() { e } else { self.fail(e) });
        }
        let header = SegmentHeader {
            seq,
            capacity,
            created: self.now,
            horizon: self.model.horizon,
            apply_lsn: self.model.apply_lsn,
            next_id: self.model.next_id,
        };
        self.buf.clear();
        self.buf.extend_from_slice(&header.encode());
        self.buf.extend_from_slice(&snap);
        self.written = 0;
        self.synced = 0;
        self.segs.push(SegState {
            seq,
            name,
            capacity,
            len: SEGMENT_HEADER_BYTES + snap.len() as u64,
            records: snap_records,
        });
        self.dir_dirty = true;
        self.unsynced = true;
        Ok(())
    }

    /// Writes the buffer to the active segment. On ENOSPC the file is cut back to what was
    /// written before and the buffer kept (retryable); other failures are fatal.
    fn write_out(&mut self) -> Result<(), Error> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(name) = self.segs.last().map(|s| s.name.clone()) else {
            return Ok(());
        };
        match self.storage.append(&name, &self.buf) {
            Ok(()) => {
                self.written += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(e) if e.kind == StorageErrorKind::NoSpace => {
                if let Err(t) = self.storage.truncate(&name, self.written) {
                    return Err(self.fail(Error::Storage(t)));
                }
                Err(Error::Storage(e))
            }
            Err(e) => Err(self.fail(Error::Storage(e))),
        }
    }
}

/// A segment-start snapshot copy of one Relation/Type description.
pub(super) fn schema_rec(tag: u8, oid: u32, raw: &[u8]) -> Rec<'_> {
    Rec {
        flags: 1,
        carry: Carry::No,
        xid: Xid(0),
        item: 0,
        lsn: Lsn::INVALID,
        body: Body::Schema { tag, oid, raw },
    }
}
