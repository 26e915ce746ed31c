//! The server's own formats that decoding facts are read from: WAL record bytes, snapshot
//! files and their names, and `pg_walinspect`'s description of a running-xacts record.

use pgyard_types::{Lsn, Xid};

use super::SnapshotFile;

/// `XLOG_BLCKSZ`: WAL page size (a record right after a page header starts at `+24`).
const WAL_PAGE_BYTES: u64 = 8192;
/// `SizeOfXLogShortPHD`.
const SHORT_PAGE_HEADER_BYTES: u64 = 24;
/// `SizeOfXLogLongPHD` (first page of a segment).
const LONG_PAGE_HEADER_BYTES: u64 = 40;

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

/// Whether `l` is where the first record of a page starts, right after its header.
pub(super) fn first_on_page(l: Lsn) -> bool {
    let off = l.0 % WAL_PAGE_BYTES;
    off == SHORT_PAGE_HEADER_BYTES || off == LONG_PAGE_HEADER_BYTES
}
