//! Recovery: rebuilding the index from the segment files alone.

use crate::format::{
    check_head, crc_start, decode_fields, decode_record, parse_segment_name, stored_crc, Rec,
    SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES,
};
use crate::model::{Loc, Model};
use crate::storage::Storage;
use crate::Error;

/// What recovery found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Segment files read.
    pub segments: usize,
    /// Valid records read.
    pub records: u64,
    /// The incomplete last write that was (or, for [`verify`], would be) cut off.
    pub torn_tail: Option<TornTail>,
}

/// An incomplete last write at the end of the newest segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TornTail {
    /// Segment file name.
    pub file: String,
    /// Where the valid data ends (0: the segment header itself is incomplete and the file is
    /// removed).
    pub offset: u64,
    /// Bytes after `offset`.
    pub dropped_bytes: u64,
    /// Why the data at `offset` is not a whole record.
    pub reason: String,
}

/// A segment as recovery left it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SegState {
    pub seq: u64,
    pub name: String,
    pub capacity: u64,
    /// Bytes of whole records (including the header); for the active segment, including
    /// records still buffered in memory.
    pub len: u64,
    /// Bytes of the header and the schema snapshot that opens the segment.
    pub prefix: u64,
    pub records: u64,
}

pub(crate) struct Scanned {
    pub segs: Vec<SegState>,
    pub model: Model,
    pub recovery: Recovery,
}

/// Checks every record of the queue in `storage` without changing anything.
///
/// A torn tail is reported in the result, not as an error; anything else that is not a valid
/// queue is an [`Error::Corrupt`] naming the file and byte offset.
pub fn verify<S: Storage>(storage: &S) -> Result<Recovery, Error> {
    Ok(scan(storage, 0)?.recovery)
}

/// Reads all segments in order, applying every record to a fresh model.
pub(crate) fn scan<S: Storage>(storage: &S, delay_micros: i64) -> Result<Scanned, Error> {
    let mut names: Vec<(u64, String)> = storage
        .list()
        .map_err(Error::Storage)?
        .into_iter()
        .filter_map(|n| parse_segment_name(&n).map(|s| (s, n)))
        .collect();
    names.sort();
    let mut model = Model::new(delay_micros);
    let mut segs = Vec::new();
    let mut recovery = Recovery::default();
    let count = names.len();
    // One read window for all segments: it is zeroed only when it grows.
    let mut window = Vec::new();
    // How many records of its segment precede the carry-forward set being read: a set cut
    // short is cut off with everything after it, so the segment's count must drop them too
    // (or a second recovery of the truncated file counts fewer).
    let mut carry_from: Option<u64> = None;
    for (i, (seq, name)) in names.into_iter().enumerate() {
        let last = i + 1 == count;
        let corrupt = |offset: u64, reason: &str| Error::Corrupt {
            file: name.clone(),
            offset,
            reason: reason.to_owned(),
        };
        if let Some(prev) = segs.last().map(|s: &SegState| s.seq) {
            if seq != prev + 1 {
                return Err(corrupt(0, &format!("segment {} is missing", prev + 1)));
            }
        }
        let size = storage.size(&name).map_err(Error::Storage)?;
        let mut rd = Chunked::new(storage, &name, size, std::mem::take(&mut window));
        let head = rd.get(0, SEGMENT_HEADER_BYTES)?.to_vec();
        if (head.len() as u64) < SEGMENT_HEADER_BYTES {
            if last {
                recovery.torn_tail = Some(TornTail {
                    file: name.clone(),
                    offset: 0,
                    dropped_bytes: size,
                    reason: "segment header is incomplete".into(),
                });
                break;
            }
            return Err(corrupt(0, "segment header is incomplete"));
        }
        let header = SegmentHeader::decode(&head).map_err(|r| corrupt(0, r))?;
        if header.seq != seq {
            return Err(corrupt(0, "segment header names another segment"));
        }
        if segs.is_empty() {
            model.floor_id = header.next_id;
        }
        model.horizon = model.horizon.max(header.horizon);
        model.apply_lsn = model.apply_lsn.max(header.apply_lsn);
        model.next_id = model.next_id.max(header.next_id);
        let end = size.min(header.capacity);
        let mut off = SEGMENT_HEADER_BYTES;
        let mut records = 0;
        let mut stop: Option<&'static str> = None;
        // Where the records after the schema snapshot begin (see `SegState::prefix`).
        let mut prefix = None;
        while off < end {
            let h = rd.get(off, RECORD_HEADER_BYTES)?;
            let len = match check_head(h, end - off) {
                Ok(len) => len,
                Err(r) => {
                    stop = Some(r);
                    break;
                }
            };
            let rec = match rd.record(off, len)? {
                Ok(rec) => rec,
                Err(r) => {
                    stop = Some(r);
                    break;
                }
            };
            if prefix.is_none() && !rec.is_snapshot() {
                prefix = Some(off);
            }
            let was_carrying = model.carrying.is_some();
            model
                .apply(&rec, Loc { seg: seq, off, len })
                .map_err(|r| corrupt(off, r))?;
            if !was_carrying && model.carrying.is_some() {
                carry_from = Some(records);
            }
            off += len;
            records += 1;
        }
        if off < size {
            let reason = stop.unwrap_or("data past the segment's capacity");
            if !last {
                return Err(corrupt(off, reason));
            }
            if let Some(at) = rd.valid_record_after(off, end)? {
                return Err(corrupt(
                    off,
                    &format!("{reason}, but a valid record follows at offset {at}"),
                ));
            }
            recovery.torn_tail = Some(TornTail {
                file: name.clone(),
                offset: off,
                dropped_bytes: size - off,
                reason: reason.to_owned(),
            });
        }
        window = rd.into_window();
        recovery.records += records;
        segs.push(SegState {
            seq,
            name,
            capacity: header.capacity,
            len: off,
            prefix: prefix.unwrap_or(off),
            records,
        });
    }
    cut_carry_forward(storage, &mut model, &mut segs, &mut recovery, carry_from)?;
    recovery.segments = segs.len();
    Ok(Scanned {
        segs,
        model,
        recovery,
    })
}

/// A carry-forward set cut short by a crash: its originals are still there (segments are
/// removed only after the set is durable), so the copies are cut off like a torn tail
/// (`carry_from`: how many records of the newest segment precede the set).
fn cut_carry_forward<S: Storage>(
    storage: &S,
    model: &mut Model,
    segs: &mut [SegState],
    recovery: &mut Recovery,
    carry_from: Option<u64>,
) -> Result<(), Error> {
    let Some((c, start)) = model.carrying.take() else {
        return Ok(());
    };
    let Some(last) = segs.last_mut().filter(|s| s.seq == start.seg) else {
        return Err(Error::Corrupt {
            file: crate::format::segment_name(start.seg),
            offset: start.off,
            reason: "incomplete carry-forward set in a segment that is not the newest".into(),
        });
    };
    if !model.items.contains_key(&c.id) {
        return Err(Error::Corrupt {
            file: last.name.clone(),
            offset: start.off,
            reason: format!(
                "incomplete carry-forward set of item {}, whose original records are gone",
                c.id
            ),
        });
    }
    let size = storage.size(&last.name).map_err(Error::Storage)?;
    recovery.torn_tail = Some(TornTail {
        file: last.name.clone(),
        offset: start.off,
        dropped_bytes: size - start.off,
        reason: "incomplete carry-forward set".into(),
    });
    last.len = start.off;
    // The set's copies were counted as they were read; they go with the tail.
    let kept = carry_from.unwrap_or(last.records).min(last.records);
    recovery.records -= last.records - kept;
    last.records = kept;
    Ok(())
}

const CHUNK: u64 = 64 << 10;

/// Enough of a record to decode everything but its raw message: the header and the longest
/// kind-specific fields (a carried SEAL: 2 + 25 bytes).
const DECODE_PREFIX: u64 = RECORD_HEADER_BYTES + 32;

/// Reads a file through a window so that a scan does not make a call per record.
struct Chunked<'a, S> {
    storage: &'a S,
    name: &'a str,
    size: u64,
    start: u64,
    buf: Vec<u8>,
    /// The file's first `size` bytes where the storage lends them ([`Storage::contents`]):
    /// read in place, without the window.
    whole: Option<&'a [u8]>,
}

impl<'a, S: Storage> Chunked<'a, S> {
    /// A reader of file `name` (`size` bytes) through `window`, a buffer of any contents.
    fn new(storage: &'a S, name: &'a str, size: u64, mut window: Vec<u8>) -> Self {
        window.clear();
        let whole = storage.contents(name).map(|all| {
            let n = usize::try_from(size).unwrap_or(usize::MAX).min(all.len());
            &all[..n]
        });
        Chunked {
            storage,
            name,
            size,
            start: 0,
            buf: window,
            whole,
        }
    }

    /// The window, for the next file.
    fn into_window(self) -> Vec<u8> {
        self.buf
    }

    /// Up to `len` bytes at `off` (fewer only at the end of the file). `len` must already be
    /// bounded by the file size; the window never exceeds what is left of the file.
    #[inline]
    fn get(&mut self, off: u64, len: u64) -> Result<&[u8], Error> {
        if let Some(w) = self.whole {
            let from = usize::try_from(off).unwrap_or(usize::MAX).min(w.len());
            let to = from.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
            return Ok(&w[from..to.min(w.len())]);
        }
        let have = off >= self.start && off + len <= self.start + self.buf.len() as u64;
        if !have {
            self.load(off, len)?;
        }
        let from = (off - self.start) as usize;
        let to = (from + len as usize).min(self.buf.len());
        Ok(&self.buf[from.min(to)..to])
    }

    /// Moves the window to start at `off`.
    #[inline(never)]
    fn load(&mut self, off: u64, len: u64) -> Result<(), Error> {
        let want = len.max(CHUNK).min(self.size.saturating_sub(off)) as usize;
        self.storage
            .read_into(self.name, off, want, &mut self.buf)
            .map_err(Error::Storage)?;
        self.start = off;
        Ok(())
    }

    /// The record of `len` bytes (its header checked) at `off`, checksum verified and decoded.
    /// A record longer than the window is checked piece by piece and decoded from its first
    /// bytes (its raw message cut short: the index does not keep it), so recovery never holds
    /// a large record whole; only descriptions, whose raw message the index keeps, are read
    /// whole (bounded by the file).
    fn record(&mut self, off: u64, len: u64) -> Result<Result<Rec<'_>, &'static str>, Error> {
        if len <= CHUNK {
            // Both callers checked the header against the bytes left (`check_head`), so only
            // the checksum and the fields remain of `decode_record`'s checks.
            let rec = self.get(off, len)?;
            if rec.len() as u64 != len {
                return Ok(Err("record length mismatch"));
            }
            if crc_start(rec) != stored_crc(rec) {
                return Ok(Err("record checksum mismatch"));
            }
            return Ok(decode_fields(rec));
        }
        let head = self.get(off, RECORD_HEADER_BYTES)?;
        let stored = stored_crc(head);
        let mut crc = crc_start(head);
        let mut at = off + RECORD_HEADER_BYTES;
        while at < off + len {
            let n = CHUNK.min(off + len - at);
            crc = crc32c::crc32c_append(crc, self.get(at, n)?);
            at += n;
        }
        if crc != stored {
            return Ok(Err("record checksum mismatch"));
        }
        let whole = match decode_fields(self.get(off, DECODE_PREFIX)?) {
            Ok(rec) => rec.indexed_raw(),
            Err(r) => return Ok(Err(r)),
        };
        if whole {
            return Ok(decode_record(self.get(off, len)?));
        }
        Ok(decode_fields(self.get(off, DECODE_PREFIX)?))
    }

    /// The offset of the first whole, checksum-valid record starting after `off`, if any.
    fn valid_record_after(&mut self, off: u64, end: u64) -> Result<Option<u64>, Error> {
        let mut p = off + 1;
        while p + RECORD_HEADER_BYTES <= end {
            let h = self.get(p, RECORD_HEADER_BYTES)?;
            if let Ok(len) = check_head(h, end - p) {
                if self.record(p, len)?.is_ok() {
                    return Ok(Some(p));
                }
            }
            p += 1;
        }
        Ok(None)
    }
}
