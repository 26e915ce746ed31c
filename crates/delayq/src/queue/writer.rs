//! The writing side of the queue: records buffered into the active segment, segment
//! roll-over, and the group-commit flush.

use pgyard_types::{Lsn, Xid};

use super::DelayQueue;
use crate::format::{segment_name, Body, Carry, Rec, SegmentHeader, SEGMENT_HEADER_BYTES};
use crate::model::Loc;
use crate::recover::SegState;
use crate::storage::{Storage, StorageErrorKind};
use crate::Error;

/// Records at least this long (or at least a segment long) skip the write buffer: they are
/// written from the caller's bytes at once, so a large message is in memory once (where the
/// caller holds it) and never a second time in the buffer.
pub(crate) const DIRECT_RECORD_BYTES: u64 = 1 << 20;

impl<S: Storage> DelayQueue<S> {
    /// Writes buffered records and fsyncs (group commit): afterwards everything accepted so
    /// far is durable. Returns the new [`DelayQueue::flush_lsn`].
    pub fn flush(&mut self) -> Result<Lsn, Error> {
        self.check()?;
        self.write_out()?;
        if self.unsynced {
            // The name borrowed, not copied: this runs at every flush point.
            if let Some(seg) = self.segs.last() {
                let r = self.storage.sync(&seg.name);
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
    /// it (or, when large, writes it at once) and applies it to the model.
    pub(super) fn push(&mut self, rec: Rec<'_>) -> Result<Loc, Error> {
        let len = rec.encoded_len();
        if len > u64::from(u32::MAX) {
            return Err(Error::RecordTooLarge {
                len,
                capacity: u64::from(u32::MAX),
            });
        }
        self.ensure_room(len)?;
        if len >= self.config.segment_bytes_max.min(DIRECT_RECORD_BYTES) {
            return self.push_direct(&rec, len);
        }
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
        self.index(&rec, loc)?;
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

    /// Writes one large record straight to the active segment, after whatever is buffered:
    /// its head, then the caller's raw bytes as they lie, so the message is never copied into
    /// the buffer. Unlike a buffered record, a retryable failure (ENOSPC) refuses it: the file
    /// is cut back and the queue is unchanged, and the caller submits it again later.
    fn push_direct(&mut self, rec: &Rec<'_>, len: u64) -> Result<Loc, Error> {
        self.write_out()?;
        let Some((name, seq, off)) = self.segs.last().map(|s| (s.name.clone(), s.seq, s.len))
        else {
            return Err(self.fail(Error::Misuse("no active segment".into())));
        };
        let (head, raw) = rec.encode_head();
        let written = self
            .storage
            .append(&name, &head)
            .and_then(|()| self.storage.append(&name, raw));
        if let Err(e) = written {
            if e.kind != StorageErrorKind::NoSpace {
                return Err(self.fail(Error::Storage(e)));
            }
            if let Err(t) = self.storage.truncate(&name, self.written) {
                return Err(self.fail(Error::Storage(t)));
            }
            return Err(Error::Storage(e));
        }
        self.written += len;
        if let Some(seg) = self.segs.last_mut() {
            seg.len += len;
            seg.records += 1;
        }
        self.unsynced = true;
        let loc = Loc { seg: seq, off, len };
        self.index(rec, loc)?;
        Ok(loc)
    }

    /// Applies a record just appended to the model; a refusal is a bug in the writer.
    fn index(&mut self, rec: &Rec<'_>, loc: Loc) -> Result<(), Error> {
        if let Err(reason) = self.model.apply(rec, loc) {
            let name = crate::format::segment_name(loc.seg);
            return Err(self.fail(Error::Corrupt {
                file: name,
                offset: loc.off,
                reason: format!("internal: record rejected by the index: {reason}"),
            }));
        }
        Ok(())
    }

    /// Cuts the active segment back to `len` bytes holding `records` records: takes a
    /// carry-forward set that could not be finished back out (all of it lies after `len`, and
    /// none of it was synced: a set is written without an fsync in between).
    pub(super) fn cut_back(&mut self, len: u64, records: u64) -> Result<(), Error> {
        let Some(name) = self.segs.last().map(|s| s.name.clone()) else {
            return Ok(());
        };
        if len >= self.written {
            self.buf.truncate((len - self.written) as usize);
        } else {
            if let Err(e) = self.storage.truncate(&name, len) {
                return Err(self.fail(Error::Storage(e)));
            }
            self.written = len;
            self.synced = self.synced.min(len);
            self.buf.clear();
        }
        if let Some(seg) = self.segs.last_mut() {
            seg.len = len;
            seg.records = records;
        }
        Ok(())
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
        // A record (or carry-forward set) larger than a segment gets a segment of its own,
        // sized to it: records never span segments, so recovery reads it like any other.
        let capacity = capacity.max(SEGMENT_HEADER_BYTES + snap.len() as u64 + len);
        // The old segment becomes immutable and durable before the next one exists, so only
        // the newest segment can ever have a torn tail. Its name too, if no flush has made
        // it durable yet: `poll_ready` trusts every record of an older segment to survive a
        // crash, and a name that does not survive takes them all (found by `delayq_stream`
        // once large payloads filled segments between two flushes). It also keeps names
        // durable in the order of their sequence numbers, so a crash never leaves a gap.
        if let Some(old) = self.segs.last().map(|s| s.name.clone()) {
            self.write_out()?;
            if self.unsynced {
                let r = self.storage.sync(&old);
                r.map_err(|e| self.fail(Error::Storage(e)))?;
                self.unsynced = false;
            }
            if self.dir_dirty {
                let r = self.storage.sync_dir();
                r.map_err(|e| self.fail(Error::Storage(e)))?;
                self.dir_dirty = false;
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
            prefix: SEGMENT_HEADER_BYTES + snap.len() as u64,
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
        // The segment's name borrowed field by field, not copied: this runs at every flush.
        let Some(seg) = self.segs.last() else {
            return Ok(());
        };
        let appended = self.storage.append(&seg.name, &self.buf);
        let cut = match &appended {
            Err(e) if e.kind == StorageErrorKind::NoSpace => {
                self.storage.truncate(&seg.name, self.written)
            }
            _ => Ok(()),
        };
        match appended {
            Ok(()) => {
                self.written += self.buf.len() as u64;
                self.buf.clear();
                Ok(())
            }
            Err(e) if e.kind == StorageErrorKind::NoSpace => {
                if let Err(t) = cut {
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
