//! The server's own formats that decoding facts are read from: WAL record bytes, snapshot
//! files and their names, and `pg_walinspect`'s description of a running-xacts record.

use nom::bytes::complete::{tag, take_till1, take_while};
use nom::character::complete::hex_digit1;
use nom::combinator::{all_consuming, map_res, opt, recognize};
use nom::multi::{many0, separated_list1};
use nom::sequence::{preceded, terminated};
use nom::{IResult, Parser};
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
    let name_parts = (hex_u32, tag("-"), hex_u32, tag(".snap"));
    let parsed: IResult<_, _, ()> = all_consuming(name_parts).parse(name);
    let (_, (hi, _, lo, _)) = parsed.ok()?;
    Some(Lsn((u64::from(hi) << 32) | u64::from(lo)))
}

/// Hex digits that fit a `u32`, as `u32::from_str_radix(_, 16)` reads them (a `+` may lead).
fn hex_u32(input: &str) -> IResult<&str, u32, ()> {
    let digits = recognize(preceded(opt(tag("+")), hex_digit1));
    map_res(digits, |h| u32::from_str_radix(h, 16)).parse(input)
}

/// Reads a `RUNNING_XACTS` description as `pg_walinspect` prints it (`nextXid 770
/// latestCompletedXid 768 oldestRunningXid 769; 1 xacts: 769`).
///
/// The first `;`-separated section is read as `key value` word pairs (the last of a key
/// wins, an odd word at the end is ignored); every later section whose second word is
/// `xacts:` or `subxacts:` adds its further words, each of which must be an xid.
pub fn parse_running_xacts_description(text: &str) -> Option<(Xid, Xid, Vec<Xid>, Vec<Xid>)> {
    let parsed: IResult<_, _, ()> = separated_list1(tag(";"), section).parse(text);
    let (_, sections) = parsed.ok()?;
    let (header, lists) = sections.split_first()?;
    let mut next = None;
    let mut oldest = None;
    for pair in header.chunks(2) {
        if let [key, value] = pair {
            match *key {
                "nextXid" => next = xid(value),
                "oldestRunningXid" => oldest = xid(value),
                _ => {}
            }
        }
    }
    let mut xids = Vec::new();
    let mut subxids = Vec::new();
    for words in lists {
        let list = match words.get(1) {
            Some(&"xacts:") => &mut xids,
            Some(&"subxacts:") => &mut subxids,
            _ => continue,
        };
        for w in words.iter().skip(2) {
            list.push(xid(w)?);
        }
    }
    Some((next?, oldest?, xids, subxids))
}

/// The whitespace-separated words of one `;`-separated section (Unicode whitespace, as
/// `str::split_whitespace`).
fn section(input: &str) -> IResult<&str, Vec<&str>, ()> {
    let space = |i| take_while(char::is_whitespace).parse(i);
    let word = take_till1(|c: char| c.is_whitespace() || c == ';');
    terminated(many0(preceded(space, word)), space).parse(input)
}

/// A decimal xid, as `u32::from_str` reads it (a `+` may lead).
fn xid(word: &str) -> Option<Xid> {
    let digits = preceded(opt(tag("+")), nom::character::complete::u32);
    let parsed: IResult<_, _, ()> = all_consuming(digits).parse(word);
    parsed.ok().map(|(_, x)| Xid(x))
}

/// Whether `l` is where the first record of a page starts, right after its header: the long
/// header on a segment's first page, the short one on every other. (A record right after a
/// short header plus 16 bytes of its predecessor's continuation is not first, though it
/// starts at the long header's offset: the differential test met one in session 37.)
pub(super) fn first_on_page(l: Lsn, segment_bytes: u64) -> bool {
    let segment_start = l.0 % segment_bytes.max(WAL_PAGE_BYTES) < WAL_PAGE_BYTES;
    let header = if segment_start {
        LONG_PAGE_HEADER_BYTES
    } else {
        SHORT_PAGE_HEADER_BYTES
    };
    l.0 % WAL_PAGE_BYTES == header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_names_take_what_from_str_radix_takes() {
        let at = |hi: u64, lo: u64| Some(Lsn((hi << 32) | lo));
        assert_eq!(
            snapshot_file_lsn("ffffffff-FFFFFFFF.snap"),
            at(0xffff_ffff, 0xffff_ffff)
        );
        assert_eq!(snapshot_file_lsn("+1-+a.snap"), at(1, 10));
        assert_eq!(snapshot_file_lsn("0000000001-0.snap"), at(1, 0));
        for bad in [
            "100000000-0.snap",
            "-0.snap",
            "0-.snap",
            "0--1.snap",
            "0-1.snap.snap",
            "0-1.SNAP",
            " 0-1.snap",
            "0x1-0.snap",
        ] {
            assert_eq!(snapshot_file_lsn(bad), None, "{bad}");
        }
    }

    #[test]
    fn running_xacts_descriptions_keep_their_loose_reading() {
        let p = parse_running_xacts_description;
        // Unicode whitespace separates words, and a `+` may lead an xid.
        assert_eq!(
            p("nextXid\u{a0}+5 oldestRunningXid 4;\t2 xacts:\u{3000}4 +6;;x y;1 subxacts: 7"),
            Some((Xid(5), Xid(4), vec![Xid(4), Xid(6)], vec![Xid(7)]))
        );
        // The last value of a key wins, even an unreadable one; an odd word at the end of the
        // header is ignored.
        assert_eq!(p("nextXid 1 oldestRunningXid 2 nextXid x"), None);
        assert_eq!(
            p("nextXid x oldestRunningXid 2 nextXid 3 odd"),
            Some((Xid(3), Xid(2), vec![], vec![]))
        );
        // Word pairs are positional: a key in a value's place is a value.
        assert_eq!(p("junk nextXid 1 oldestRunningXid 2"), None);
        // Lists append across sections; one bad xid in a list rejects the whole text.
        assert_eq!(
            p("nextXid 1 oldestRunningXid 2; 1 xacts: 3; 1 xacts: 4"),
            Some((Xid(1), Xid(2), vec![Xid(3), Xid(4)], vec![]))
        );
        assert_eq!(p("nextXid 1 oldestRunningXid 2; 1 xacts: 3 -4"), None);
        assert_eq!(p("nextXid 1 oldestRunningXid 2; 1 xacts: 4294967296"), None);
        assert_eq!(
            p("nextXid 1 oldestRunningXid 2; subxid overflowed").map(|r| r.0),
            Some(Xid(1))
        );
        assert_eq!(p(""), None);
    }
}
