//! What the `wire` benchmark and its correctness test share: a seeded backend stream (a
//! `SELECT` result: RowDescription, DataRows of mixed widths, CommandComplete, ReadyForQuery),
//! a frontend batch (libpq's `PQexecParams` pipeline, repeated), and the per-implementation
//! routines the benchmark times, each counting every DataRow field (and, in the touching form,
//! reading its first and last byte).
//!
//! The routines are `#[inline(never)]` so that a profiler (callgrind) can attribute one call
//! to one benchmark iteration.

use bytes::{BufMut, BytesMut};
use fallible_iterator::FallibleIterator;
use pgyard_wire::backend::{
    self, BackendMessage, DataRow, DataRowFields, FieldDescription, TransactionStatus,
};
use pgyard_wire::frame::{self, Decoded, FrameDecoder, Limits, UnitRef};
use pgyard_wire::frontend::{self, Target};
use postgres_protocol::message::backend::Message;
use postgres_protocol::IsNull;

/// Number of DataRows in [`backend_stream`].
pub const ROWS: usize = 4_000;

/// Seed of the stream's generator.
pub const SEED: u64 = 0x5eed_0f9a_7d00;

/// The length-word bound the borrowing pgyard path uses (libpq's bound for DataRow).
pub const LEN_MAX: usize = frame::LARGE_MESSAGE_MAX as usize;

/// SplitMix64: a small, seeded, platform-independent generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (the slight modulo bias does not matter here).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `percent`/100.
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    /// `len` bytes of lowercase letters, digits and spaces.
    fn text(&mut self, len: usize, out: &mut Vec<u8>) {
        const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789 ";
        out.extend((0..len).map(|_| ALPHABET[(self.next() % ALPHABET.len() as u64) as usize]));
    }
}

/// The eight columns of the benchmark result: name and type OID.
pub const COLUMNS: [(&str, u32); 8] = [
    ("id", 23),           // int4
    ("name", 25),         // text
    ("email", 1043),      // varchar
    ("score", 23),        // int4, sometimes NULL
    ("amount", 1700),     // numeric
    ("created_at", 1184), // timestamptz
    ("active", 16),       // bool
    ("notes", 25),        // text: NULL, short, or 200–1,000 bytes
];

/// The benchmark's backend stream: RowDescription (8 text-format columns), [`ROWS`] DataRows
/// generated from [`SEED`], `CommandComplete("SELECT n")` and `ReadyForQuery(Idle)`; about
/// 1 MiB, identical on every call and every platform.
pub fn backend_stream() -> Vec<u8> {
    let mut rng = Rng(SEED);
    let mut out = BytesMut::with_capacity(1 << 20);
    let columns: Vec<FieldDescription<'_>> = COLUMNS
        .iter()
        .zip(1..)
        .map(|(&(name, type_oid), column_id)| FieldDescription {
            name: name.as_bytes(),
            table_oid: 16_384,
            column_id,
            type_oid,
            type_size: match type_oid {
                23 => 4,
                16 => 1,
                1184 => 8,
                _ => -1,
            },
            type_modifier: -1,
            format: 0,
        })
        .collect();
    backend::encode_row_description(&columns, &mut out).expect("valid RowDescription");

    let mut cells: [Vec<u8>; 8] = Default::default();
    for id in 1..=ROWS as u64 {
        for c in &mut cells {
            c.clear();
        }
        let [id_, name, email, score, amount, created, active, notes] = &mut cells;
        id_.extend_from_slice(id.to_string().as_bytes());
        let name_len = rng.range(4, 16) as usize;
        rng.text(name_len, name);
        let email_len = rng.range(4, 20) as usize;
        rng.text(email_len, email);
        email.extend_from_slice(b"@example.com");
        let score_null = rng.chance(25);
        let s = rng.range(0, 199_998) as i64 - 99_999;
        score.extend_from_slice(s.to_string().as_bytes());
        let cents = rng.range(0, 10_000_000);
        amount.extend_from_slice(format!("{}.{:02}", cents / 100, cents % 100).as_bytes());
        let t = rng.next();
        created.extend_from_slice(
            format!(
                "2024-{:02}-{:02} {:02}:{:02}:{:02}.{:06}+00",
                t % 12 + 1,
                (t >> 4) % 28 + 1,
                (t >> 9) % 24,
                (t >> 14) % 60,
                (t >> 20) % 60,
                (t >> 26) % 1_000_000
            )
            .as_bytes(),
        );
        active.push(if rng.chance(50) { b't' } else { b'f' });
        let notes_kind = rng.range(0, 99);
        let notes_null = notes_kind < 30;
        if (30..80).contains(&notes_kind) {
            let n = rng.range(0, 40) as usize;
            rng.text(n, notes);
        } else if notes_kind >= 80 {
            let n = rng.range(200, 1_000) as usize;
            rng.text(n, notes);
        }
        let fields: [Option<&[u8]>; 8] = [
            Some(id_),
            Some(name),
            Some(email),
            (!score_null).then_some(&score[..]),
            Some(amount),
            Some(created),
            Some(active),
            (!notes_null).then_some(&notes[..]),
        ];
        backend::encode_data_row(&fields, &mut out).expect("valid DataRow");
    }
    backend::encode_command_complete(format!("SELECT {ROWS}").as_bytes(), &mut out)
        .expect("valid CommandComplete");
    backend::encode_ready_for_query(TransactionStatus::Idle, &mut out);
    out.to_vec()
}

/// What a decoder saw; both decoders must produce equal tallies for the same stream.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Messages decoded.
    pub messages: u64,
    /// Non-NULL DataRow fields.
    pub fields: u64,
    /// NULL DataRow fields.
    pub nulls: u64,
    /// Sum of the non-NULL fields' lengths.
    pub field_bytes: u64,
    /// XOR of every non-empty field's first byte and (shifted) last byte.
    pub field_mix: u64,
    /// RowDescription columns seen.
    pub columns: u64,
    /// Sum of the column names' lengths and type OIDs.
    pub column_mix: u64,
    /// Bytes of the CommandComplete tags.
    pub command_bytes: u64,
    /// XOR of the ReadyForQuery status bytes.
    pub status_mix: u64,
    /// Messages of any other type.
    pub other: u64,
}

impl Tally {
    /// Records one DataRow field (`None` for NULL): its presence and length, and with
    /// `TOUCH` its first and last byte too (`field_mix`), as a consumer reading it would.
    #[inline(always)]
    pub fn field<const TOUCH: bool>(&mut self, value: Option<&[u8]>) {
        match value {
            None => self.nulls += 1,
            Some(v) => {
                self.fields += 1;
                self.field_bytes += v.len() as u64;
                if TOUCH {
                    if let (Some(&a), Some(&z)) = (v.first(), v.last()) {
                        self.field_mix ^= u64::from(a) ^ (u64::from(z) << 8);
                    }
                }
            }
        }
    }

    /// Adds another tally's counts to this one (`messages` excluded: the caller counts those).
    pub fn absorb(&mut self, o: Tally) {
        self.fields += o.fields;
        self.nulls += o.nulls;
        self.field_bytes += o.field_bytes;
        self.field_mix ^= o.field_mix;
        self.columns += o.columns;
        self.column_mix += o.column_mix;
        self.command_bytes += o.command_bytes;
        self.status_mix ^= o.status_mix;
        self.other += o.other;
    }

    /// Records one RowDescription column.
    pub fn column(&mut self, name: &[u8], type_oid: u32) {
        self.columns += 1;
        self.column_mix += name.len() as u64 + u64::from(type_oid);
    }
}

/// pgyard, borrowing: `frame::frames` over the stream, the one-pass `DataRowFields` for rows
/// (every length checked as it is reached, as postgres-protocol's `ranges()` does),
/// `BackendMessage::decode` for the rest. Nothing is copied or allocated.
#[inline(never)]
pub fn pgyard_visit<const TOUCH: bool>(stream: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut it = frame::frames(stream, LEN_MAX);
    for f in &mut it {
        let f = f.expect("the stream frames");
        t.messages += 1;
        if f.tag == backend::tag::DATA_ROW {
            for v in DataRowFields::new(f.body).expect("a valid column count") {
                t.field::<TOUCH>(v.expect("a valid DataRow"));
            }
        } else {
            t.absorb(pgyard_other(f.tag, f.body));
        }
    }
    assert!(it.remainder().is_empty(), "the stream ends on a frame");
    t
}

/// pgyard through its owning, phase-aware decoder: `FrameDecoder::decode_ref` over a
/// `BytesMut` filled beforehand (as a driver reading from a socket would), same visiting.
#[inline(never)]
pub fn pgyard_decoder_visit<const TOUCH: bool>(decoder: &mut FrameDecoder) -> Tally {
    let mut t = Tally::default();
    while let Decoded::Frame(unit) = decoder.decode_ref().expect("the stream frames") {
        let UnitRef::Typed(f) = unit else {
            panic!("a backend stream holds typed frames only");
        };
        t.messages += 1;
        if f.tag == backend::tag::DATA_ROW {
            let row = DataRow::decode(f.body).expect("a valid DataRow");
            for v in row.fields() {
                t.field::<TOUCH>(v);
            }
        } else {
            t.absorb(pgyard_other(f.tag, f.body));
        }
    }
    t
}

/// A decoder holding `stream`, for [`pgyard_decoder_visit`].
pub fn pgyard_decoder(stream: &[u8]) -> FrameDecoder {
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.feed(stream);
    d
}

/// The messages other than DataRow, through the general decoder. It returns its own tally
/// (rather than updating the caller's through a reference) so that the caller's stays in
/// registers across the DataRow loop, as it does in the postgres-protocol routine.
#[cold]
fn pgyard_other(tag: u8, body: &[u8]) -> Tally {
    let mut t = Tally::default();
    match BackendMessage::decode(tag, body).expect("a valid backend message") {
        BackendMessage::RowDescription(d) => {
            for c in d.fields() {
                t.column(c.name, c.type_oid);
            }
        }
        BackendMessage::CommandComplete(tag) => t.command_bytes += tag.len() as u64,
        BackendMessage::ReadyForQuery(s) => t.status_mix ^= u64::from(s.byte()),
        _ => t.other += 1,
    }
    t
}

/// postgres-protocol: `Message::parse` until the buffer is empty (it splits each message off
/// `buf`), `DataRowBody::ranges()` sliced into `buffer()` for rows.
#[inline(never)]
pub fn postgres_protocol_visit<const TOUCH: bool>(buf: &mut BytesMut) -> Tally {
    let mut t = Tally::default();
    while !buf.is_empty() {
        let m = Message::parse(buf)
            .expect("the stream parses")
            .expect("the stream ends on a message");
        t.messages += 1;
        match m {
            Message::DataRow(row) => {
                let data = row.buffer();
                let mut ranges = row.ranges();
                while let Some(r) = ranges.next().expect("a valid DataRow") {
                    t.field::<TOUCH>(r.map(|r| &data[r]));
                }
            }
            Message::RowDescription(d) => {
                let mut fields = d.fields();
                while let Some(c) = fields.next().expect("a valid RowDescription") {
                    t.column(c.name().as_bytes(), c.type_oid());
                }
            }
            Message::CommandComplete(c) => {
                t.command_bytes += c.tag().expect("a UTF-8 command tag").len() as u64
            }
            Message::ReadyForQuery(z) => t.status_mix ^= u64::from(z.status()),
            _ => t.other += 1,
        }
    }
    t
}

/// The floor any decoder of this format pays: follows each frame's length word and each
/// DataRow field's length word and nothing else (no tag, count or length is checked, so only
/// a well-formed stream may be given). Its tally fills `messages` and the row fields only.
#[inline(never)]
pub fn walk_visit<const TOUCH: bool>(stream: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut at = 0;
    while at < stream.len() {
        let len = u32::from_be_bytes(word(stream, at + 1)) as usize;
        t.messages += 1;
        if stream[at] == backend::tag::DATA_ROW {
            let body = &stream[at + 5..at + 1 + len];
            let n = u16::from_be_bytes([body[0], body[1]]);
            let mut p = 2;
            for _ in 0..n {
                walk_field::<TOUCH>(&mut t, body, &mut p);
            }
        }
        at += 1 + len;
    }
    t
}

/// The walk with two chains instead of one: where two DataRows follow each other, their
/// fields are walked in step, so that the load of one row's next length word does not wait
/// for the other's. Same tally and same assumptions as [`walk_visit`]; it shows how far the
/// single chain, not the work, sets the sequential walk's pace (docs/wire-decode.md).
#[inline(never)]
pub fn walk_pairs_visit<const TOUCH: bool>(stream: &[u8]) -> Tally {
    let mut t = Tally::default();
    let mut u = Tally::default();
    let is_row = |at: usize| stream.get(at) == Some(&backend::tag::DATA_ROW);
    let mut at = 0;
    while at < stream.len() {
        let next = at + 1 + u32::from_be_bytes(word(stream, at + 1)) as usize;
        if is_row(at) && is_row(next) {
            let after = next + 1 + u32::from_be_bytes(word(stream, next + 1)) as usize;
            let (a, b) = (&stream[at + 5..next], &stream[next + 5..after]);
            let (na, nb) = (
                u16::from_be_bytes([a[0], a[1]]),
                u16::from_be_bytes([b[0], b[1]]),
            );
            let (mut pa, mut pb) = (2, 2);
            let both = na.min(nb);
            for _ in 0..both {
                walk_field::<TOUCH>(&mut t, a, &mut pa);
                walk_field::<TOUCH>(&mut u, b, &mut pb);
            }
            for _ in both..na {
                walk_field::<TOUCH>(&mut t, a, &mut pa);
            }
            for _ in both..nb {
                walk_field::<TOUCH>(&mut u, b, &mut pb);
            }
            t.messages += 2;
            at = after;
            continue;
        }
        t.messages += 1;
        if is_row(at) {
            let body = &stream[at + 5..next];
            let mut p = 2;
            for _ in 0..u16::from_be_bytes([body[0], body[1]]) {
                walk_field::<TOUCH>(&mut t, body, &mut p);
            }
        }
        at = next;
    }
    t.absorb(u);
    t
}

/// One field of the walks: its length word at `*p`, then its bytes.
#[inline(always)]
fn walk_field<const TOUCH: bool>(t: &mut Tally, body: &[u8], p: &mut usize) {
    let l = i32::from_be_bytes(word(body, *p));
    *p += 4;
    if l < 0 {
        t.field::<TOUCH>(None);
    } else {
        t.field::<TOUCH>(Some(&body[*p..*p + l as usize]));
        *p += l as usize;
    }
}

#[inline(always)]
fn word(bytes: &[u8], at: usize) -> [u8; 4] {
    let mut w = [0; 4];
    w.copy_from_slice(&bytes[at..at + 4]);
    w
}

/// The physical floor: one copy of the stream into a preallocated buffer of its size.
#[inline(never)]
pub fn memcpy(dst: &mut [u8], src: &[u8]) {
    dst.copy_from_slice(src);
}

/// Statements in [`FrontendBatch`].
pub const BATCH_STATEMENTS: usize = 100;

/// The query every batch item prepares.
pub const BATCH_QUERY: &str =
    "SELECT id, name, email FROM users WHERE id = $1 AND name = $2 AND created_at > $3";

/// The parameter types every Parse declares: int4, text, timestamptz.
pub const BATCH_PARAM_TYPES: [u32; 3] = [23, 25, 1184];

/// [`BATCH_STATEMENTS`] × what libpq's `PQexecParams` pipelines: Parse (unnamed, 3 parameter
/// types), Bind (unnamed portal and statement, 3 text parameters, one result format code),
/// Describe portal, Execute (no row limit), Sync.
pub struct FrontendBatch {
    /// The three text parameters of each item (distinct per item, prepared beforehand).
    pub params: Vec<[Vec<u8>; 3]>,
}

impl FrontendBatch {
    /// The benchmark's batch.
    pub fn new() -> Self {
        let mut rng = Rng(SEED ^ 0xba7c4);
        let params = (0..BATCH_STATEMENTS)
            .map(|i| {
                let mut name = Vec::new();
                let n = rng.range(4, 16) as usize;
                rng.text(n, &mut name);
                let t = rng.next();
                let ts = format!(
                    "2024-{:02}-{:02} {:02}:{:02}:00+00",
                    t % 12 + 1,
                    (t >> 4) % 28 + 1,
                    (t >> 9) % 24,
                    (t >> 14) % 60
                );
                [
                    (1_000 + i * 37).to_string().into_bytes(),
                    name,
                    ts.into_bytes(),
                ]
            })
            .collect();
        FrontendBatch { params }
    }
}

impl Default for FrontendBatch {
    fn default() -> Self {
        Self::new()
    }
}

/// pgyard's typed builders: `encode_parse/bind/describe/execute/sync`, appending to `buf`.
#[inline(never)]
pub fn pgyard_encode(batch: &FrontendBatch, buf: &mut BytesMut) {
    for [a, b, c] in &batch.params {
        frontend::encode_parse(b"", BATCH_QUERY.as_bytes(), &BATCH_PARAM_TYPES, buf)
            .expect("valid Parse");
        frontend::encode_bind(
            b"",
            b"",
            &[],
            &[Some(&a[..]), Some(&b[..]), Some(&c[..])],
            &[0],
            buf,
        )
        .expect("valid Bind");
        frontend::encode_describe(Target::Portal, b"", buf).expect("valid Describe");
        frontend::encode_execute(b"", 0, buf).expect("valid Execute");
        frontend::encode_sync(buf);
    }
}

/// postgres-protocol's `message::frontend` writers, the same messages appended to `buf`.
#[inline(never)]
pub fn postgres_protocol_encode(batch: &FrontendBatch, buf: &mut BytesMut) {
    use postgres_protocol::message::frontend as pp;
    for params in &batch.params {
        pp::parse("", BATCH_QUERY, BATCH_PARAM_TYPES, buf).expect("valid Parse");
        let bound = pp::bind(
            "",
            "",
            std::iter::empty::<i16>(),
            params,
            |v, buf| {
                buf.put_slice(v);
                Ok(IsNull::No)
            },
            [0],
            buf,
        );
        assert!(bound.is_ok(), "valid Bind");
        pp::describe(b'P', "", buf).expect("valid Describe");
        pp::execute("", 0, buf).expect("valid Execute");
        pp::sync(buf);
    }
}
