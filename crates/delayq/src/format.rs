//! Byte layouts of segment headers and records (pure; no I/O). See `docs/delayq.md`.

use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};

/// Magic at the start of every segment file.
pub(crate) const SEGMENT_MAGIC: &[u8; 8] = b"PGYDQSEG";
/// On-disk format version written by this crate. Version 1 files (no CARRY records, MSG flags
/// always 0) are read as well: every version 1 record means the same in version 2.
pub(crate) const FORMAT_VERSION: u16 = 2;
/// Oldest format version still read.
const FORMAT_VERSION_MIN: u16 = 1;
/// Size of the segment header.
pub(crate) const SEGMENT_HEADER_BYTES: u64 = 72;
/// Size of the fixed record header.
pub(crate) const RECORD_HEADER_BYTES: u64 = 32;
/// Segment file name prefix and suffix: `dq-<seq:020>.seg`.
const NAME_PREFIX: &str = "dq-";
const NAME_SUFFIX: &str = ".seg";

/// File name of segment `seq`.
pub(crate) fn segment_name(seq: u64) -> String {
    format!("{NAME_PREFIX}{seq:020}{NAME_SUFFIX}")
}

/// Sequence number of a segment file name, `None` for any other file.
pub(crate) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(NAME_PREFIX)?.strip_suffix(NAME_SUFFIX)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The fixed header at offset 0 of every segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentHeader {
    pub seq: u64,
    pub capacity: u64,
    pub created: UnixTime,
    pub horizon: Lsn,
    pub apply_lsn: Lsn,
    pub next_id: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES as usize] {
        let mut b = [0u8; SEGMENT_HEADER_BYTES as usize];
        b[0..8].copy_from_slice(SEGMENT_MAGIC);
        b[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        // 10..12 flags, 12..16 reserved: zero.
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.capacity.to_le_bytes());
        b[32..40].copy_from_slice(&self.created.0.to_le_bytes());
        b[40..48].copy_from_slice(&self.horizon.0.to_le_bytes());
        b[48..56].copy_from_slice(&self.apply_lsn.0.to_le_bytes());
        b[56..64].copy_from_slice(&self.next_id.to_le_bytes());
        // 64..68 reserved: zero.
        let crc = crc32c::crc32c(&b[0..68]);
        b[68..72].copy_from_slice(&crc.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Self, &'static str> {
        if b.len() < SEGMENT_HEADER_BYTES as usize {
            return Err("segment header is incomplete");
        }
        if &b[0..8] != SEGMENT_MAGIC {
            return Err("bad segment magic");
        }
        if crc32c::crc32c(&b[0..68]) != u32_at(b, 68) {
            return Err("segment header checksum mismatch");
        }
        let version = u16::from_le_bytes([b[8], b[9]]);
        if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
            return Err("unsupported segment format version");
        }
        let h = SegmentHeader {
            seq: u64_at(b, 16),
            capacity: u64_at(b, 24),
            created: UnixTime(u64_at(b, 32) as i64),
            horizon: Lsn(u64_at(b, 40)),
            apply_lsn: Lsn(u64_at(b, 48)),
            next_id: u64_at(b, 56),
        };
        if h.capacity < SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES {
            return Err("segment capacity in header is too small");
        }
        Ok(h)
    }
}

/// Record kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Begin = 1,
    Msg = 2,
    Seal = 3,
    Decide = 4,
    Abort = 5,
    Schema = 6,
    Note = 7,
    Applied = 8,
    Carry = 9,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Begin,
            2 => Kind::Msg,
            3 => Kind::Seal,
            4 => Kind::Decide,
            5 => Kind::Abort,
            6 => Kind::Schema,
            7 => Kind::Note,
            8 => Kind::Applied,
            9 => Kind::Carry,
            _ => return None,
        })
    }
}

/// How a queued unit began (the BEGIN record's flavour byte).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flavor {
    Plain = 0,
    TwoPhase = 1,
    Streamed = 2,
}

/// What a SEAL record completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SealKind {
    Commit = 1,
    Prepare = 2,
    StreamCommit = 3,
    StreamPrepare = 4,
}

/// A record's structured content; `raw` is the stored pgoutput message (may be empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Body<'a> {
    Begin {
        flavor: Flavor,
        raw: &'a [u8],
    },
    Msg {
        /// `(tag, OID)` of a Relation/Type message inside a stream block (MSG flags 2).
        schema: Option<(u8, u32)>,
        raw: &'a [u8],
    },
    Seal {
        kind: SealKind,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        raw: &'a [u8],
    },
    Decide {
        commit: bool,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        raw: &'a [u8],
    },
    Abort {
        sub_xid: u32,
        raw: &'a [u8],
    },
    Schema {
        tag: u8,
        oid: u32,
        raw: &'a [u8],
    },
    Note {
        raw: &'a [u8],
    },
    Applied,
}

/// MSG flag: an in-stream Relation/Type message; `u8 tag, u32 OID` precede the raw message.
pub(crate) const MSG_SCHEMA: u8 = 2;
/// CARRY flag: the last record of a carry-forward set.
pub(crate) const CARRY_LAST: u8 = 1;

/// Whether a record is an original or a carried-forward copy (kind CARRY).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carry {
    /// An ordinary record.
    No,
    /// A copy inside a carry-forward set.
    Copy,
    /// The copy that completes the set: only now does the item move.
    Last,
}

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rec<'a> {
    /// The flags of the (inner) record; for MSG, derived from `schema` when encoding.
    pub flags: u8,
    pub carry: Carry,
    /// Transaction id (for MSG: the subtransaction's xid, 0 if none).
    pub xid: Xid,
    /// DQ-local item id, 0 when the record belongs to none.
    pub item: u64,
    /// WAL position (NOTE: the message LSN; APPLIED: the applied end LSN).
    pub lsn: Lsn,
    pub body: Body<'a>,
}

impl<'a> Rec<'a> {
    /// The kind of the record (of the copied record, for CARRY).
    fn inner_kind(&self) -> Kind {
        match self.body {
            Body::Begin { .. } => Kind::Begin,
            Body::Msg { .. } => Kind::Msg,
            Body::Seal { .. } => Kind::Seal,
            Body::Decide { .. } => Kind::Decide,
            Body::Abort { .. } => Kind::Abort,
            Body::Schema { .. } => Kind::Schema,
            Body::Note { .. } => Kind::Note,
            Body::Applied => Kind::Applied,
        }
    }

    /// Whether the index keeps this record's raw message (a description): recovery reads
    /// such a record whole even when it is large.
    pub fn indexed_raw(&self) -> bool {
        matches!(
            self.body,
            Body::Schema { .. }
                | Body::Msg {
                    schema: Some(_),
                    ..
                }
        )
    }

    /// Whether this is a segment-start snapshot copy of a description (SCHEMA, flags 1).
    pub fn is_snapshot(&self) -> bool {
        self.carry == Carry::No && self.flags & 1 != 0 && matches!(self.body, Body::Schema { .. })
    }

    fn inner_flags(&self) -> u8 {
        match self.body {
            Body::Msg {
                schema: Some(_), ..
            } => self.flags | MSG_SCHEMA,
            Body::Msg { schema: None, .. } => self.flags & !MSG_SCHEMA,
            _ => self.flags,
        }
    }

    /// Appends the framed record to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len() as usize);
        let start = out.len();
        let raw = self.put_head(out);
        out.extend_from_slice(raw);
        let len = (out.len() - start) as u32;
        out[start..start + 4].copy_from_slice(&len.to_le_bytes());
        let crc = crc_start(&out[start..]);
        out[start + 4..start + 8].copy_from_slice(&crc.to_le_bytes());
    }

    /// The record's bytes up to its raw message, length and checksum filled in, and the raw
    /// message itself: a large record is written as this head followed by the caller's bytes,
    /// which are checksummed where they lie and never copied. The caller has checked that
    /// the record's length fits its 32-bit field.
    pub fn encode_head(&self) -> (Vec<u8>, &'a [u8]) {
        let mut head = Vec::with_capacity(RECORD_HEADER_BYTES as usize + 27);
        let raw = self.put_head(&mut head);
        let len = self.encoded_len() as u32;
        head[0..4].copy_from_slice(&len.to_le_bytes());
        let crc = crc32c::crc32c_append(crc_start(&head), raw);
        head[4..8].copy_from_slice(&crc.to_le_bytes());
        (head, raw)
    }

    /// Appends everything before the raw message (length and checksum left zero) and returns
    /// the raw message.
    fn put_head(&self, out: &mut Vec<u8>) -> &'a [u8] {
        out.extend_from_slice(&[0u8; 8]); // len and crc, filled by the caller
        match self.carry {
            Carry::No => {
                out.push(self.inner_kind() as u8);
                out.push(self.inner_flags());
            }
            Carry::Copy | Carry::Last => {
                out.push(Kind::Carry as u8);
                out.push(if self.carry == Carry::Last {
                    CARRY_LAST
                } else {
                    0
                });
            }
        }
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.xid.0.to_le_bytes());
        out.extend_from_slice(&self.item.to_le_bytes());
        out.extend_from_slice(&self.lsn.0.to_le_bytes());
        if self.carry != Carry::No {
            out.push(self.inner_kind() as u8);
            out.push(self.inner_flags());
        }
        match self.body {
            Body::Begin { flavor, raw } => {
                out.push(flavor as u8);
                raw
            }
            Body::Msg { schema, raw } => {
                if let Some((tag, oid)) = schema {
                    out.push(tag);
                    out.extend_from_slice(&oid.to_le_bytes());
                }
                raw
            }
            Body::Note { raw } => raw,
            Body::Seal {
                kind,
                commit_lsn,
                end_lsn,
                ts,
                raw,
            } => {
                out.push(kind as u8);
                put_lsns(out, commit_lsn, end_lsn, ts);
                raw
            }
            Body::Decide {
                commit,
                commit_lsn,
                end_lsn,
                ts,
                raw,
            } => {
                out.push(if commit { 1 } else { 2 });
                put_lsns(out, commit_lsn, end_lsn, ts);
                raw
            }
            Body::Abort { sub_xid, raw } => {
                out.extend_from_slice(&sub_xid.to_le_bytes());
                raw
            }
            Body::Schema { tag, oid, raw } => {
                out.push(tag);
                out.extend_from_slice(&oid.to_le_bytes());
                raw
            }
            Body::Applied => &[],
        }
    }

    /// Encoded size of this record.
    pub fn encoded_len(&self) -> u64 {
        let meta = match self.body {
            Body::Begin { raw, .. } => 1 + raw.len(),
            Body::Msg {
                schema: Some(_),
                raw,
            } => 5 + raw.len(),
            Body::Msg { raw, .. } | Body::Note { raw } => raw.len(),
            Body::Seal { raw, .. } | Body::Decide { raw, .. } => 25 + raw.len(),
            Body::Abort { raw, .. } => 4 + raw.len(),
            Body::Schema { raw, .. } => 5 + raw.len(),
            Body::Applied => 0,
        };
        let carried = if self.carry == Carry::No { 0 } else { 2 };
        RECORD_HEADER_BYTES + meta as u64 + carried
    }
}

fn put_lsns(out: &mut Vec<u8>, a: Lsn, b: Lsn, ts: PgTimestamp) {
    out.extend_from_slice(&a.0.to_le_bytes());
    out.extend_from_slice(&b.0.to_le_bytes());
    out.extend_from_slice(&ts.0.to_le_bytes());
}

/// CRC32C over the length field and everything after the CRC field, of a whole record or of
/// its first bytes (at least the length and checksum fields): continue it with `crc32c::crc32c_append` over the bytes that follow them, so a
/// large record is checked piece by piece.
pub(crate) fn crc_start(rec: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c_4([rec[0], rec[1], rec[2], rec[3]]), &rec[8..])
}

/// The checksum stored in a record header (at least 8 bytes).
pub(crate) fn stored_crc(head: &[u8]) -> u32 {
    u32_at(head, 4)
}

/// CRC32C of four bytes, by table: the same value as `crc32c::crc32c`, whose fixed cost per
/// call was a third of a record's checksum (every record is checksummed when written, read
/// back and recovered).
fn crc32c_4(bytes: [u8; 4]) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc = CRC32C_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// The byte-at-a-time table of the reflected CRC32C polynomial.
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// Checks a record header against the bytes available; returns the record length.
///
/// `available` is how many bytes of the file (and of the segment's capacity) remain from the
/// record's offset. Nothing is allocated before this check passes.
pub(crate) fn check_head(head: &[u8], available: u64) -> Result<u64, &'static str> {
    if head.len() < RECORD_HEADER_BYTES as usize {
        return Err("record header is incomplete");
    }
    let len = u64::from(u32_at(head, 0));
    if len < RECORD_HEADER_BYTES {
        return Err("record length is smaller than a record header");
    }
    if Kind::from_u8(head[8]).is_none() {
        return Err("unknown record kind");
    }
    if head[10] != 0 || head[11] != 0 {
        return Err("reserved record bytes are not zero");
    }
    if len > available {
        return Err("record extends past the end of the segment");
    }
    Ok(len)
}

/// Verifies the checksum of one whole record and decodes it.
pub(crate) fn decode_record(rec: &[u8]) -> Result<Rec<'_>, &'static str> {
    let len = check_head(rec, rec.len() as u64)? as usize;
    if len != rec.len() {
        return Err("record length mismatch");
    }
    if crc_start(rec) != u32_at(rec, 4) {
        return Err("record checksum mismatch");
    }
    decode_fields(rec)
}

/// Decodes a record whose length and checksum were checked by the caller, from its first
/// bytes: its raw message is whatever of it `rec` holds. Recovery checks a large record's
/// checksum piece by piece and decodes it from a prefix, without holding it whole.
pub(crate) fn decode_fields(rec: &[u8]) -> Result<Rec<'_>, &'static str> {
    if rec.len() < RECORD_HEADER_BYTES as usize {
        return Err("record header is incomplete");
    }
    let kind = Kind::from_u8(rec[8]).ok_or("unknown record kind")?;
    let xid = Xid(u32_at(rec, 12));
    let item = u64_at(rec, 16);
    let lsn = Lsn(u64_at(rec, 24));
    let p = &rec[RECORD_HEADER_BYTES as usize..];
    let (carry, kind, flags, p) = if kind == Kind::Carry {
        if p.len() < 2 {
            return Err("record payload is too short for its kind");
        }
        let carry = match rec[9] {
            0 => Carry::Copy,
            CARRY_LAST => Carry::Last,
            _ => return Err("unknown carry flags"),
        };
        let inner = Kind::from_u8(p[0]).ok_or("unknown carried record kind")?;
        if !matches!(inner, Kind::Begin | Kind::Msg | Kind::Seal) {
            return Err("record kind that is never carried forward");
        }
        (carry, inner, p[1], &p[2..])
    } else {
        (Carry::No, kind, rec[9], p)
    };
    let body = decode_body(kind, flags, p)?;
    Ok(Rec {
        flags,
        carry,
        xid,
        item,
        lsn,
        body,
    })
}

fn decode_body(kind: Kind, flags: u8, p: &[u8]) -> Result<Body<'_>, &'static str> {
    let need = |n: usize| {
        if p.len() < n {
            Err("record payload is too short for its kind")
        } else {
            Ok(())
        }
    };
    Ok(match kind {
        Kind::Begin => {
            need(1)?;
            let flavor = match p[0] {
                0 => Flavor::Plain,
                1 => Flavor::TwoPhase,
                2 => Flavor::Streamed,
                _ => return Err("unknown transaction flavour"),
            };
            Body::Begin {
                flavor,
                raw: &p[1..],
            }
        }
        Kind::Msg if flags & MSG_SCHEMA != 0 => {
            need(5)?;
            Body::Msg {
                schema: Some((p[0], u32_at(p, 1))),
                raw: &p[5..],
            }
        }
        Kind::Msg => Body::Msg {
            schema: None,
            raw: p,
        },
        Kind::Note => Body::Note { raw: p },
        Kind::Seal => {
            need(25)?;
            let kind = match p[0] {
                1 => SealKind::Commit,
                2 => SealKind::Prepare,
                3 => SealKind::StreamCommit,
                4 => SealKind::StreamPrepare,
                _ => return Err("unknown seal kind"),
            };
            Body::Seal {
                kind,
                commit_lsn: Lsn(u64_at(p, 1)),
                end_lsn: Lsn(u64_at(p, 9)),
                ts: PgTimestamp(u64_at(p, 17) as i64),
                raw: &p[25..],
            }
        }
        Kind::Decide => {
            need(25)?;
            let commit = match p[0] {
                1 => true,
                2 => false,
                _ => return Err("unknown decision"),
            };
            Body::Decide {
                commit,
                commit_lsn: Lsn(u64_at(p, 1)),
                end_lsn: Lsn(u64_at(p, 9)),
                ts: PgTimestamp(u64_at(p, 17) as i64),
                raw: &p[25..],
            }
        }
        Kind::Abort => {
            need(4)?;
            Body::Abort {
                sub_xid: u32_at(p, 0),
                raw: &p[4..],
            }
        }
        Kind::Schema => {
            need(5)?;
            Body::Schema {
                tag: p[0],
                oid: u32_at(p, 1),
                raw: &p[5..],
            }
        }
        Kind::Applied => Body::Applied,
        Kind::Carry => return Err("a carried record cannot itself be carried"),
    })
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_byte_crc_matches_the_crate() {
        let mut x = 0x9E37_79B9u32;
        for _ in 0..10_000 {
            x = x.wrapping_mul(0x0100_0193) ^ (x >> 13);
            let b = x.to_le_bytes();
            assert_eq!(crc32c_4(b), crc32c::crc32c(&b), "{b:?}");
        }
        assert_eq!(crc32c_4([0; 4]), crc32c::crc32c(&[0; 4]));
        assert_eq!(crc32c_4([0xff; 4]), crc32c::crc32c(&[0xff; 4]));
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_name(7), "dq-00000000000000000007.seg");
        assert_eq!(parse_segment_name(&segment_name(7)), Some(7));
        assert_eq!(parse_segment_name("dq-7.seg"), None);
        assert_eq!(parse_segment_name("other"), None);
    }

    #[test]
    fn version_1_headers_are_read() {
        let h = SegmentHeader {
            seq: 1,
            capacity: 4096,
            created: UnixTime(0),
            horizon: Lsn(0),
            apply_lsn: Lsn(0),
            next_id: 1,
        };
        let mut b = h.encode();
        for (v, ok) in [(0u16, false), (1, true), (2, true), (3, false)] {
            b[8..10].copy_from_slice(&v.to_le_bytes());
            let crc = crc32c::crc32c(&b[0..68]);
            b[68..72].copy_from_slice(&crc.to_le_bytes());
            assert_eq!(SegmentHeader::decode(&b).is_ok(), ok, "version {v}");
        }
    }

    #[test]
    fn header_round_trip_and_damage() {
        let h = SegmentHeader {
            seq: 3,
            capacity: 4096,
            created: UnixTime(5),
            horizon: Lsn(9),
            apply_lsn: Lsn(8),
            next_id: 11,
        };
        let mut b = h.encode();
        assert_eq!(SegmentHeader::decode(&b), Ok(h));
        b[20] ^= 1;
        assert!(SegmentHeader::decode(&b).is_err());
    }

    #[test]
    fn record_round_trip_every_kind_and_every_flip_detected() {
        let bodies = [
            Body::Begin {
                flavor: Flavor::Streamed,
                raw: b"B",
            },
            Body::Msg {
                schema: None,
                raw: b"I...",
            },
            Body::Msg {
                schema: Some((b'R', 16385)),
                raw: b"R...",
            },
            Body::Seal {
                kind: SealKind::StreamPrepare,
                commit_lsn: Lsn(1),
                end_lsn: Lsn(2),
                ts: PgTimestamp(-3),
                raw: b"p",
            },
            Body::Decide {
                commit: false,
                commit_lsn: Lsn(4),
                end_lsn: Lsn(5),
                ts: PgTimestamp(6),
                raw: b"r",
            },
            Body::Abort {
                sub_xid: 77,
                raw: b"A",
            },
            Body::Schema {
                tag: b'R',
                oid: 16384,
                raw: b"R",
            },
            Body::Note { raw: b"M" },
            Body::Applied,
        ];
        let carriable =
            |b: &Body<'_>| matches!(b, Body::Begin { .. } | Body::Msg { .. } | Body::Seal { .. });
        for body in bodies {
            for carry in [Carry::No, Carry::Copy, Carry::Last] {
                if carry != Carry::No && !carriable(&body) {
                    continue;
                }
                let flags = match body {
                    Body::Msg {
                        schema: Some(_), ..
                    } => MSG_SCHEMA,
                    _ => 0,
                };
                let rec = Rec {
                    flags,
                    carry,
                    xid: Xid(42),
                    item: 9,
                    lsn: Lsn(0x1234),
                    body,
                };
                let mut out = Vec::new();
                rec.encode(&mut out);
                assert_eq!(out.len() as u64, rec.encoded_len());
                assert_eq!(decode_record(&out), Ok(rec));
                for i in 0..out.len() {
                    let mut bad = out.clone();
                    bad[i] ^= 0x10;
                    assert!(decode_record(&bad).is_err(), "flip at {i} undetected");
                }
            }
        }
    }
}
