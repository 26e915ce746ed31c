//! Reading records back from the segments (or the write buffer), checksums verified.

use super::DelayQueue;
use crate::format::{segment_name, Body, Rec};
use crate::model::Loc;
use crate::storage::Storage;
use crate::Error;

use super::writer::DIRECT_RECORD_BYTES;

/// How far past a record asked for a read from a segment goes.
const READ_AHEAD: u64 = 64 << 10;

impl<S: Storage> DelayQueue<S> {
    /// The stored pgoutput bytes of one record, checked again.
    pub(super) fn read_raw(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        if loc.len >= DIRECT_RECORD_BYTES && !self.buffered(loc) {
            // Read into the vector that is handed out, and the record's head cut off in place
            // (its raw message is the record's tail): one allocation, one copy in memory.
            let (mut v, raw_len) = self.read_large(loc)?;
            v.drain(..v.len() - raw_len);
            return Ok(v);
        }
        self.with_record(loc, |_, rec| raw_of(&rec).to_vec())
    }

    /// The bytes of one whole record, with its checksum verified. A large record is read
    /// into a vector of its own, not through the reused buffer, which would otherwise keep
    /// its size (and a second copy) for good.
    pub(super) fn read_record(&mut self, loc: Loc) -> Result<Vec<u8>, Error> {
        if loc.len < DIRECT_RECORD_BYTES || self.buffered(loc) {
            return self.with_record(loc, |bytes, _| bytes.to_vec());
        }
        Ok(self.read_large(loc)?.0)
    }

    /// A large record read from its segment into a vector of its own, checked once, with the
    /// length of its raw message (the record's tail).
    fn read_large(&mut self, loc: Loc) -> Result<(Vec<u8>, usize), Error> {
        let name = self.segment_of(loc)?.name.clone();
        let len = usize::try_from(loc.len).map_err(|_| self.corrupt(loc, "record too large"))?;
        let mut v = Vec::new();
        self.storage
            .read_into(&name, loc.off, len, &mut v)
            .map_err(Error::Storage)?;
        let raw_len = match crate::format::decode_record(&v) {
            Ok(rec) => raw_of(&rec).len(),
            Err(r) => return Err(self.corrupt(loc, r)),
        };
        Ok((v, raw_len))
    }

    /// Whether the record at `loc` is still in the write buffer.
    fn buffered(&self, loc: Loc) -> bool {
        self.segs.last().is_some_and(|s| s.seq == loc.seg) && loc.off >= self.written
    }

    /// The segment a pending record lies in (gone is corruption: nothing pending is purged).
    fn segment_of(&self, loc: Loc) -> Result<&crate::recover::SegState, Error> {
        self.segs
            .iter()
            .find(|s| s.seq == loc.seg)
            .ok_or_else(|| self.corrupt(loc, "segment of a pending record is gone"))
    }

    /// The error for a record at `loc` that does not read back as written.
    fn corrupt(&self, loc: Loc, reason: &str) -> Error {
        Error::Corrupt {
            file: segment_name(loc.seg),
            offset: loc.off,
            reason: reason.to_owned(),
        }
    }

    /// Reads the record at `loc` (from the write buffer when it is not written yet), verifies
    /// and decodes it once, and hands both to `f`. Records on disk are read in place where
    /// the storage lends its files ([`Storage::contents`]), else into a buffer kept for the
    /// next read, so a hand-out of many records allocates only what it returns.
    fn with_record<T>(
        &mut self,
        loc: Loc,
        f: impl FnOnce(&[u8], Rec<'_>) -> T,
    ) -> Result<T, Error> {
        let buffered = self.buffered(loc);
        // Found field by field (not through `segment_of`): the read below fills `rbuf`.
        let Some(seg) = self.segs.iter().find(|s| s.seq == loc.seg) else {
            return Err(self.corrupt(loc, "segment of a pending record is gone"));
        };
        let end = loc.off + loc.len;
        let lent = if buffered {
            None
        } else {
            self.storage.contents(&seg.name)
        };
        let bytes: &[u8] = if buffered {
            let from = (loc.off - self.written) as usize;
            self.buf
                .get(from..from + loc.len as usize)
                .unwrap_or_default()
        } else if let Some(all) = lent {
            // A disk in memory lends the file: read in place, as a fresh read would.
            let from = usize::try_from(loc.off)
                .unwrap_or(usize::MAX)
                .min(all.len());
            let to = usize::try_from(end).unwrap_or(usize::MAX).min(all.len());
            &all[from..to.max(from)]
        } else {
            let held = self.rwin.filter(|&(seq, start)| {
                seq == loc.seg && start <= loc.off && end <= start + self.rbuf.len() as u64
            });
            let start = match held {
                Some((_, start)) => start,
                None => {
                    // Only durable bytes are kept for later records: every older segment's,
                    // the active one's up to `synced`. Those never change; the active
                    // segment's tail may still be cut back after a failed write.
                    // Nothing is read past the segment's whole records either: segments are
                    // often far smaller than READ_AHEAD, and a read may zero the buffer up
                    // to `want` first (zeroing 64 KiB was a seventh of the simulator's time).
                    let active = self.segs.last().is_some_and(|s| s.seq == loc.seg);
                    let durable = if active { self.synced } else { u64::MAX };
                    let ahead = READ_AHEAD.min(durable.min(seg.len).saturating_sub(loc.off));
                    let want = ahead.max(loc.len);
                    let n = self
                        .storage
                        .read_into(&seg.name, loc.off, want as usize, &mut self.rbuf)
                        .map_err(Error::Storage)?;
                    let kept = loc.off.saturating_add(n as u64) <= durable;
                    self.rwin = kept.then_some((loc.seg, loc.off));
                    loc.off
                }
            };
            let from = (loc.off - start) as usize;
            self.rbuf
                .get(from..from + loc.len as usize)
                .unwrap_or_else(|| self.rbuf.get(from..).unwrap_or_default())
        };
        match crate::format::decode_record(bytes) {
            Ok(rec) => Ok(f(bytes, rec)),
            Err(reason) => Err(Error::Corrupt {
                file: seg.name.clone(),
                offset: loc.off,
                reason: reason.to_owned(),
            }),
        }
    }
}

/// The raw pgoutput message a record stores (empty for APPLIED).
fn raw_of<'a>(rec: &Rec<'a>) -> &'a [u8] {
    match rec.body {
        Body::Begin { raw, .. }
        | Body::Msg { raw, .. }
        | Body::Note { raw }
        | Body::Seal { raw, .. }
        | Body::Decide { raw, .. }
        | Body::Abort { raw, .. }
        | Body::Schema { raw, .. } => raw,
        Body::Applied => &[],
    }
}
