//! `disk-as-documented`: the queue's files read by a decoder of the simulator's own, written
//! from the format tables of docs/delayq.md (checksums by the `crc32c` crate and a table of its
//! own, not the queue's code), and each recovery judged against it: what it kept, what it
//! cut and what it counted.

use pgyard_delayq::{DelayQueue, SimStorage, Storage};

use super::fail;
use crate::Violation;

const SEGMENT_HEADER: usize = 72;
const RECORD_HEADER: usize = 32;
const MAGIC: &[u8; 8] = b"PGYDQSEG";
const KIND_MSG: u8 = 2;
const KIND_SCHEMA: u8 = 6;
const KIND_CARRY: u8 = 9;

/// One segment file as the format describes it.
#[derive(Debug)]
pub(super) struct Segment<'a> {
    name: String,
    bytes: &'a [u8],
    /// `None`: the header is incomplete (only the newest segment may be).
    capacity: Option<u64>,
    /// Whole, valid records from the first on, and where the last of them ends.
    records: u64,
    valid_end: usize,
    /// The first invalid record's offset, when one is found before the end.
    invalid_at: Option<usize>,
    /// A carry-forward set still open after the valid records: its first record's offset
    /// and how many records precede it.
    open_carry: Option<(usize, u64)>,
}

/// What the disk holds before a recovery: every segment file, in sequence order.
#[derive(Debug)]
pub(super) struct Disk<'a> {
    segments: Vec<Segment<'a>>,
}

/// What [`Segment::read`] found in one file, apart from the bytes themselves.
#[derive(Clone, Copy, Debug)]
struct Scan {
    capacity: Option<u64>,
    records: u64,
    valid_end: usize,
    invalid_at: Option<usize>,
    open_carry: Option<(usize, u64)>,
}

/// The disk the last restart read (kept as it was), and what each of its segments held. A
/// segment is a pure function of its bytes, so one whose bytes the next restart finds still
/// shared with this copy ([`SimStorage::shares_file`]: the very same bytes) is not decoded
/// and checksummed again; most segments never change after they are full.
#[derive(Debug, Default)]
pub(super) struct Memo {
    disk: Option<SimStorage>,
    scans: Vec<(String, Scan)>,
}

/// What a [`Disk`] found in each segment, to be kept with the disk in a [`Memo`].
#[derive(Debug)]
pub(super) struct Scans(Vec<(String, Scan)>);

impl Memo {
    /// Keeps `disk` for the next restart, with `scans`, what reading it found.
    pub(super) fn keep(disk: SimStorage, scans: Scans) -> Memo {
        Memo {
            disk: Some(disk),
            scans: scans.0,
        }
    }

    /// What file `name` of `storage` held when it was read last, if its bytes are unchanged.
    fn scan_of(&self, storage: &SimStorage, name: &str) -> Option<Scan> {
        let disk = self.disk.as_ref()?;
        let (_, scan) = self.scans.iter().find(|(n, _)| n == name)?;
        storage.shares_file(disk, name).then_some(*scan)
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("four bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("eight bytes"))
}

/// The sequence number a segment file's name carries (`dq-<20 digits>.seg`).
fn seq_of(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("dq-")?.strip_suffix(".seg")?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

impl<'a> Disk<'a> {
    /// Reads every segment of `storage`; a record whose checksum holds but whose fields the
    /// format does not allow is a violation (no crash writes such a record).
    /// Segments `memo` saw with the same bytes are taken from it.
    pub(super) fn read(storage: &'a SimStorage, memo: &Memo) -> Result<Disk<'a>, Violation> {
        let mut names: Vec<(u64, String)> = storage
            .list()
            .map_err(|e| fail("disk-as-documented", format!("list: {e}")))?
            .into_iter()
            .filter_map(|n| seq_of(&n).map(|s| (s, n)))
            .collect();
        names.sort();
        let mut segments = Vec::with_capacity(names.len());
        for (seq, name) in names {
            let bytes = storage.file(&name).unwrap_or_default();
            let segment = match memo.scan_of(storage, &name) {
                Some(scan) => Segment::scanned(name, bytes, scan),
                None => Segment::read(seq, name, bytes)?,
            };
            segments.push(segment);
        }
        Ok(Disk { segments })
    }

    /// What each segment was found to hold.
    pub(super) fn scans(&self) -> Scans {
        Scans(
            self.segments
                .iter()
                .map(|s| (s.name.clone(), s.scan()))
                .collect(),
        )
    }
}

impl<'a> Segment<'a> {
    fn scan(&self) -> Scan {
        Scan {
            capacity: self.capacity,
            records: self.records,
            valid_end: self.valid_end,
            invalid_at: self.invalid_at,
            open_carry: self.open_carry,
        }
    }

    /// The segment of `bytes`, found before to be `scan`.
    fn scanned(name: String, bytes: &'a [u8], scan: Scan) -> Segment<'a> {
        Segment {
            name,
            bytes,
            capacity: scan.capacity,
            records: scan.records,
            valid_end: scan.valid_end,
            invalid_at: scan.invalid_at,
            open_carry: scan.open_carry,
        }
    }

    fn read(seq: u64, name: String, bytes: &'a [u8]) -> Result<Segment<'a>, Violation> {
        let bad = |what: String| fail("disk-as-documented", format!("{name}: {what}"));
        let mut s = Segment {
            name: name.clone(),
            bytes,
            capacity: None,
            records: 0,
            valid_end: 0,
            invalid_at: None,
            open_carry: None,
        };
        let b = s.bytes;
        if b.len() < SEGMENT_HEADER {
            return Ok(s);
        }
        if &b[0..8] != MAGIC || crc32c::crc32c(&b[0..68]) != u32_at(b, 68) {
            return Err(bad("the header's magic or checksum is wrong".into()));
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if version != 2 || b[10..16] != [0; 6] || b[64..68] != [0; 4] {
            return Err(bad(format!("header version {version} or reserved bytes")));
        }
        if u64_at(b, 16) != seq {
            return Err(bad(format!("the header names segment {}", u64_at(b, 16))));
        }
        let capacity = u64_at(b, 24);
        if capacity < (SEGMENT_HEADER + RECORD_HEADER) as u64 {
            return Err(bad(format!("capacity {capacity}")));
        }
        s.capacity = Some(capacity);
        let end = b.len().min(usize::try_from(capacity).unwrap_or(usize::MAX));
        let mut off = SEGMENT_HEADER;
        let mut past_snapshot = false;
        while off < end {
            let Some(len) = valid_record(&b[off..end]) else {
                s.invalid_at = Some(off);
                break;
            };
            let rec = &b[off..off + len];
            let (kind, flags) = (rec[8], rec[9]);
            if !(1..=9).contains(&kind) || rec[10..12] != [0, 0] {
                return Err(bad(format!("record at {off}: kind {kind}, reserved bytes")));
            }
            if let Err(what) = flags_as_documented(rec) {
                return Err(bad(format!("record at {off} (kind {kind}): {what}")));
            }
            let snapshot = kind == KIND_SCHEMA && flags & 1 != 0;
            if snapshot && past_snapshot {
                return Err(bad(format!(
                    "snapshot description at {off} after the segment's first change"
                )));
            }
            past_snapshot |= !snapshot;
            if kind == KIND_CARRY {
                if s.open_carry.is_none() {
                    s.open_carry = Some((off, s.records));
                }
                if flags & 1 != 0 {
                    s.open_carry = None;
                }
            }
            s.records += 1;
            off += len;
        }
        if s.invalid_at.is_none() && off < b.len() {
            s.invalid_at = Some(off);
        }
        s.valid_end = off;
        Ok(s)
    }
}

/// The flag bits a kind may carry (every other bit is zero): a segment-start snapshot copy of
/// a description (SCHEMA 1), a description inside a stream block (MSG 2, its tag `R` or `Y`
/// first, the raw message opening with the same tag), the last record of a carry-forward set
/// (CARRY 1), whose copied record (BEGIN, MSG or SEAL) keeps its own kind's rule.
fn flags_as_documented(rec: &[u8]) -> Result<(), String> {
    let allowed = |kind: u8| match kind {
        KIND_MSG => 2,
        KIND_SCHEMA | KIND_CARRY => 1,
        _ => 0,
    };
    let (kind, flags) = (rec[8], rec[9]);
    if flags & !allowed(kind) != 0 {
        return Err(format!("flags {flags:#04x}"));
    }
    // The fields after the header: a carried record's kind and flags come first.
    let (inner, inner_flags, fields) = if kind == KIND_CARRY {
        let (Some(&k), Some(&f)) = (rec.get(32), rec.get(33)) else {
            return Err("a carry record without the copied record's kind".into());
        };
        if !(1..=3).contains(&k) || f & !allowed(k) != 0 {
            return Err(format!("carries kind {k} with flags {f:#04x}"));
        }
        (k, f, &rec[34..])
    } else {
        (kind, flags, &rec[32..])
    };
    if inner == KIND_MSG && inner_flags & 2 != 0 {
        let tag = fields.first().copied();
        let ok = matches!(tag, Some(b'R' | b'Y')) && fields.get(5).copied() == tag;
        if !ok {
            return Err(format!("a stream description tagged {tag:?}"));
        }
    }
    Ok(())
}

/// The length of the record at the start of `b` if it is whole and its checksum (over its
/// length word and everything after the checksum field) holds.
fn valid_record(b: &[u8]) -> Option<usize> {
    if b.len() < RECORD_HEADER {
        return None;
    }
    let len = u32_at(b, 0) as usize;
    if len < RECORD_HEADER || len > b.len() {
        return None;
    }
    let crc = crc32c::crc32c_append(crc_of_four([b[0], b[1], b[2], b[3]]), &b[8..len]);
    (crc == u32_at(b, 4)).then_some(len)
}

/// CRC32C's table (Castagnoli polynomial, reflected), from the polynomial itself.
const CRC_TABLE: [u32; 256] = crc_table();

const fn crc_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82F6_3B78
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

/// `crc32c::crc32c` of a record's length word, by table: the crate's fixed cost per call
/// was most of what four bytes cost, once per record at every restart.
fn crc_of_four(bytes: [u8; 4]) -> u32 {
    let mut c = !0u32;
    for b in bytes {
        c = CRC_TABLE[((c ^ u32::from(b)) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

/// The recovery of `before` as the format's rules give it: every segment but the newest is
/// whole; the newest is cut at its first invalid record, or at a carry-forward set left open,
/// and removed if even its header is incomplete.
pub(super) fn judge_recovery(
    before: &Disk<'_>,
    q: &DelayQueue<SimStorage>,
) -> Result<(), Violation> {
    let bad = |what: String| Err(fail("disk-as-documented", what));
    let n = before.segments.len();
    let mut kept: Vec<(&Segment<'_>, usize, u64)> = Vec::with_capacity(n);
    let mut cut = None;
    for (i, s) in before.segments.iter().enumerate() {
        let newest = i + 1 == n;
        let whole = s.capacity.is_some() && s.invalid_at.is_none() && s.open_carry.is_none();
        if !whole && !newest {
            return bad(format!(
                "{} is not whole but is not the newest segment",
                s.name
            ));
        }
        if s.capacity.is_none() {
            cut = Some((s.name.as_str(), 0, s.bytes.len()));
            continue;
        }
        let (len, records) = s.open_carry.unwrap_or((s.valid_end, s.records));
        if len < s.bytes.len() {
            cut = Some((s.name.as_str(), len, s.bytes.len() - len));
        }
        kept.push((s, len, records));
    }
    let r = q.recovery();
    let records: u64 = kept.iter().map(|k| k.2).sum();
    if r.segments != kept.len() || r.records != records {
        return bad(format!(
            "recovery counted {} segments and {} records; the files hold {} and {records}",
            r.segments,
            r.records,
            kept.len()
        ));
    }
    let torn = r
        .torn_tail
        .as_ref()
        .map(|t| (t.file.as_str(), t.offset as usize, t.dropped_bytes as usize));
    if torn != cut {
        return bad(format!("recovery cut {torn:?}; the files call for {cut:?}"));
    }
    let infos: Vec<_> = q.segments().collect();
    for ((s, len, records), info) in kept.iter().zip(&infos) {
        let same = info.file == s.name
            && info.valid_bytes == *len as u64
            && info.records == *records
            && Some(info.capacity) == s.capacity;
        if !same {
            return bad(format!(
                "recovery reports {info:?}; {} holds {len} valid bytes in {records} records, \
                 capacity {:?}",
                s.name, s.capacity
            ));
        }
        if q.storage().file(&s.name) != Some(&s.bytes[..*len]) {
            return bad(format!(
                "after recovery {} is not its first {len} bytes",
                s.name
            ));
        }
    }
    if infos.len() != kept.len() {
        return bad(format!(
            "recovery knows {} segments, kept {}",
            infos.len(),
            kept.len()
        ));
    }
    Ok(())
}

/// After a purge, each segment but the active one is complete on disk: the queue's count of
/// its records and valid bytes must be what a walk over the records' length words finds
/// (no checksums: the restarts check those).
pub(super) fn judge_segments(q: &DelayQueue<SimStorage>) -> Result<(), Violation> {
    let n = q.segments().len();
    for info in q.segments().take(n.saturating_sub(1)) {
        let bytes = q.storage().file(&info.file).unwrap_or_default();
        let mut off = SEGMENT_HEADER.min(bytes.len());
        let mut records = 0u64;
        while off + RECORD_HEADER <= bytes.len() {
            let len = u32_at(bytes, off) as usize;
            if len < RECORD_HEADER || off + len > bytes.len() {
                break;
            }
            off += len;
            records += 1;
        }
        if (info.records, info.valid_bytes) != (records, off as u64) || off != bytes.len() {
            return Err(fail(
                "disk-as-documented",
                format!(
                    "the queue counts {} records in {} valid bytes of {}; its {} bytes hold \
                     {records} records in {off}",
                    info.records,
                    info.valid_bytes,
                    info.file,
                    bytes.len()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn four_byte_crc_is_the_crates() {
        let mut x = 0x9e37_79b9u32;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(0x0101_0101)
                .wrapping_add(0x6b43_a9b5)
                .rotate_left(7);
            let b = x.to_le_bytes();
            assert_eq!(super::crc_of_four(b), crc32c::crc32c(&b), "{b:?}");
        }
        for b in [[0u8; 4], [0xff; 4], [1, 2, 3, 4]] {
            assert_eq!(super::crc_of_four(b), crc32c::crc32c(&b), "{b:?}");
        }
    }
}
