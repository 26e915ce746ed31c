//! Framing: the incremental frame decoder, startup-phase messages and size limits, plus the
//! wire primitives every message module shares (encode helpers and borrowed array views).
//!
//! Two decoding layers exist, both zero-copy:
//!
//! * [`decode_frame`] / [`frames`] work on a borrowed `&[u8]` and hand out [`FrameRef`]s that
//!   point into it. Nothing is reference-counted or moved, which makes this the fastest path
//!   for a DataRow-heavy stream: frame, then [`crate::backend::DataRow::decode`] on the body.
//! * [`FrameDecoder`] owns a `BytesMut`, accepts bytes as they arrive in any split, knows the
//!   connection phase (untyped startup packets, the one-byte answer to SSLRequest and
//!   GSSENCRequest, typed frames) and yields either owned [`Frame`]s (a `Bytes` slice of its
//!   buffer, via `split_to(..).freeze()`) with [`FrameDecoder::decode`], or borrowed
//!   [`UnitRef`]s with [`FrameDecoder::decode_ref`] (no atomics at all; the borrow ends before
//!   the next call).
//!
//! Every length is checked against the configured maximum as soon as its header is
//! complete, before any waiting; the decoder never reserves memory sized by a length the
//! peer claims. Decoder errors are sticky: once a stream lost synchronisation every later
//! call returns the same error.

use bytes::Bytes;

use crate::buf::DecodeError;

mod arrays;
mod decoder;
mod encode;
mod limits;

pub(crate) use arrays::{put_i16s, put_oids, put_values, read_count_u16, values_size};
pub use arrays::{CStrs, FormatCodes, Oids, Values, ValuesIter};
pub use decoder::FrameDecoder;
pub use encode::EncodeError;
pub(crate) use encode::{count_u16, len_i32, put_cstr, put_frame, put_nullable, put_untyped};
pub use limits::Limits;

/// Bytes in a typed frame header: the type byte and the Int32 length.
pub const HEADER_BYTES: usize = 5;
/// The smallest legal value of a length word (it counts itself).
pub const MIN_LENGTH: usize = 4;
/// Request code of SSLRequest (1234 << 16 | 5679).
pub const SSL_REQUEST_CODE: u32 = 80_877_103;
/// Request code of GSSENCRequest (1234 << 16 | 5680).
pub const GSSENC_REQUEST_CODE: u32 = 80_877_104;
/// Request code of CancelRequest (1234 << 16 | 5678).
pub const CANCEL_REQUEST_CODE: u32 = 80_877_102;
/// Longest cancel key protocol 3.2 allows (BackendKeyData and CancelRequest).
pub const MAX_CANCEL_KEY_BYTES: usize = 256;
/// The server's cap on a startup packet's bytes after its length word.
pub const MAX_STARTUP_BODY_BYTES: usize = 10_000;
/// The server's limit for "small" frontend messages (`PQ_SMALL_MESSAGE_LIMIT`).
pub const SMALL_MESSAGE_MAX: u32 = 10_000;
/// The server's limit for "large" frontend messages (`PQ_LARGE_MESSAGE_LIMIT`, `MaxAllocSize - 1`).
pub const LARGE_MESSAGE_MAX: u32 = 0x3FFF_FFFE;
/// The server's limit for authentication responses (`PG_MAX_AUTH_TOKEN_LENGTH`).
pub const AUTH_MESSAGE_MAX: u32 = 65_535;
/// libpq's limit for backend messages other than `T D d V E N A`.
pub const LIBPQ_SMALL_MESSAGE_MAX: u32 = 30_000;
/// The longest length word a PostgreSQL server can send: it builds every message in a
/// `StringInfo`, which holds at most `MaxAllocSize - 2` (0x3FFF_FFFE) bytes (`enlargeStringInfo`
/// refuses to grow further, one byte being kept for the terminating zero), and the length word
/// counts itself. The largest messages are a row (`D`) and a walsender's CopyData (`d`, whose
/// `'w'` header shares the buffer with the pgoutput message): a change reaches a client whole
/// when its message fits in 1 GiB - 27 bytes, and the server fails to build a longer one.
pub const BACKEND_MESSAGE_MAX: u32 = 0x4000_0002;
/// First byte of a TLS handshake record: what a direct-TLS client sends instead of a packet.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// A protocol version word as sent in StartupMessage and NegotiateProtocolVersion.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProtocolVersion(pub u32);

impl ProtocolVersion {
    /// Protocol 3.0 (196608).
    pub const V3_0: ProtocolVersion = ProtocolVersion(0x0003_0000);
    /// 3.1: reserved and never used.
    pub const V3_1_RESERVED: ProtocolVersion = ProtocolVersion(0x0003_0001);
    /// Protocol 3.2 (196610), PostgreSQL 18: variable-length cancel keys.
    pub const V3_2: ProtocolVersion = ProtocolVersion(0x0003_0002);
    /// 3.9999, the "GREASE" value PG19 beta libpq sends to flush out non-negotiating peers.
    pub const GREASE: ProtocolVersion = ProtocolVersion(0x0003_270F);

    /// A version from its major and minor numbers.
    pub const fn new(major: u16, minor: u16) -> Self {
        ProtocolVersion(((major as u32) << 16) | minor as u32)
    }

    /// The major number (high 16 bits).
    pub const fn major(self) -> u16 {
        (self.0 >> 16) as u16
    }

    /// The minor number (low 16 bits).
    pub const fn minor(self) -> u16 {
        self.0 as u16
    }

    /// Whether cancel keys are variable-length (3.2 and later minors of major 3).
    pub const fn has_variable_cancel_key(self) -> bool {
        self.major() == 3 && self.minor() >= 2
    }
}

/// The outcome of an incremental decode step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// A complete unit.
    Frame(T),
    /// Not enough bytes yet; at least this many more are needed before trying again.
    NeedMore {
        /// Lower bound of the missing byte count (exact once the header is complete).
        at_least: usize,
    },
}

/// A typed frame borrowed from a buffer: type byte and body (the bytes after the length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameRef<'a> {
    /// The type byte.
    pub tag: u8,
    /// The body, without the type byte and the length word.
    pub body: &'a [u8],
}

impl FrameRef<'_> {
    /// Bytes the frame occupies on the wire (header included).
    #[inline]
    pub fn wire_len(&self) -> usize {
        HEADER_BYTES + self.body.len()
    }
}

/// Decodes one typed frame at the start of `buf` without copying.
///
/// `len_max` bounds the length word (which counts itself but not the type byte); it is
/// checked as soon as the five header bytes are present, before waiting for the body.
#[inline]
pub fn decode_frame(buf: &[u8], len_max: usize) -> Result<Decoded<FrameRef<'_>>, DecodeError> {
    let Some((head, rest)) = buf.split_first_chunk::<HEADER_BYTES>() else {
        return Ok(Decoded::NeedMore {
            at_least: HEADER_BYTES - buf.len(),
        });
    };
    let raw = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
    let body_len = check_length(raw, 1, len_max)? - MIN_LENGTH;
    match rest.get(..body_len) {
        Some(body) => Ok(Decoded::Frame(FrameRef { tag: head[0], body })),
        None => Ok(Decoded::NeedMore {
            at_least: body_len - rest.len(),
        }),
    }
}

/// Iterates over the complete typed frames at the start of `buf` (see [`FrameIter`]).
#[inline]
pub fn frames(buf: &[u8], len_max: usize) -> FrameIter<'_> {
    FrameIter {
        buf,
        pos: 0,
        len_max,
        state: IterState::Running,
    }
}

/// Borrowing iterator over typed frames; stops at the first incomplete frame, or after
/// yielding one error. [`FrameIter::consumed`] tells how many bytes the frames used.
#[derive(Clone, Debug)]
pub struct FrameIter<'a> {
    buf: &'a [u8],
    pos: usize,
    len_max: usize,
    state: IterState,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum IterState {
    Running,
    NeedMore(usize),
    Failed,
}

impl<'a> FrameIter<'a> {
    /// Bytes taken by the frames yielded so far.
    pub fn consumed(&self) -> usize {
        self.pos
    }

    /// The bytes after the frames yielded so far.
    pub fn remainder(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// After the iterator stopped at an incomplete frame: how many more bytes it needs.
    pub fn need_more(&self) -> Option<usize> {
        match self.state {
            IterState::NeedMore(n) => Some(n),
            _ => None,
        }
    }
}

impl<'a> Iterator for FrameIter<'a> {
    type Item = Result<FrameRef<'a>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.state != IterState::Running {
            return None;
        }
        match decode_frame(self.remainder(), self.len_max) {
            Ok(Decoded::Frame(f)) => {
                self.pos += f.wire_len();
                Some(Ok(f))
            }
            Ok(Decoded::NeedMore { at_least }) => {
                self.state = IterState::NeedMore(at_least);
                None
            }
            Err(e) => {
                self.state = IterState::Failed;
                Some(Err(e))
            }
        }
    }
}

/// An owned typed frame: a `Bytes` slice of the decoder's buffer (header included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    tag: u8,
    wire: Bytes,
}

impl Frame {
    /// The type byte.
    #[inline]
    pub fn tag(&self) -> u8 {
        self.tag
    }

    /// The body (after the type byte and length word).
    #[inline]
    pub fn body(&self) -> &[u8] {
        self.wire.get(HEADER_BYTES..).unwrap_or_default()
    }

    /// The body as a shared `Bytes` (no copy).
    pub fn body_bytes(&self) -> Bytes {
        self.wire.slice(HEADER_BYTES.min(self.wire.len())..)
    }

    /// The frame exactly as it was received.
    pub fn wire(&self) -> &Bytes {
        &self.wire
    }

    /// The frame exactly as it was received, by value.
    pub fn into_wire(self) -> Bytes {
        self.wire
    }

    /// A borrowed view.
    #[inline]
    pub fn as_ref(&self) -> FrameRef<'_> {
        FrameRef {
            tag: self.tag,
            body: self.body(),
        }
    }

    /// Checks `wire` (one whole typed frame, header included) and wraps it.
    pub fn from_wire(wire: Bytes) -> Result<Frame, DecodeError> {
        match decode_frame(&wire, usize::MAX)? {
            Decoded::Frame(f) if f.wire_len() == wire.len() => Ok(Frame { tag: f.tag, wire }),
            Decoded::Frame(f) => Err(DecodeError::TrailingBytes {
                offset: f.wire_len(),
                count: wire.len() - f.wire_len(),
            }),
            Decoded::NeedMore { at_least } => Err(DecodeError::UnexpectedEnd {
                offset: wire.len(),
                needed: at_least,
            }),
        }
    }
}

/// What the request code of an untyped startup-phase packet says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupKind {
    /// A StartupMessage with this protocol version.
    Startup(ProtocolVersion),
    /// SSLRequest.
    SslRequest,
    /// GSSENCRequest.
    GssEncRequest,
    /// CancelRequest.
    CancelRequest,
}

impl StartupKind {
    /// Classifies a request code / version word.
    pub fn from_code(code: u32) -> Self {
        match code {
            SSL_REQUEST_CODE => StartupKind::SslRequest,
            GSSENC_REQUEST_CODE => StartupKind::GssEncRequest,
            CANCEL_REQUEST_CODE => StartupKind::CancelRequest,
            v => StartupKind::Startup(ProtocolVersion(v)),
        }
    }
}

/// An owned untyped startup-phase packet (length word included in [`StartupFrame::wire`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupFrame {
    wire: Bytes,
}

impl StartupFrame {
    /// The bytes after the length word: request code / version, then the rest.
    pub fn body(&self) -> &[u8] {
        self.wire.get(4..).unwrap_or_default()
    }

    /// The request code or protocol version word.
    pub fn code(&self) -> u32 {
        startup_code(self.body())
    }

    /// What kind of packet this is.
    pub fn kind(&self) -> StartupKind {
        StartupKind::from_code(self.code())
    }

    /// The packet exactly as it was received.
    pub fn wire(&self) -> &Bytes {
        &self.wire
    }

    /// The packet exactly as it was received, by value.
    pub fn into_wire(self) -> Bytes {
        self.wire
    }
}

/// One unit the phase-aware decoder yields (owned).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A typed frame.
    Typed(Frame),
    /// An untyped startup-phase packet (frontend side only).
    Startup(StartupFrame),
    /// The single-byte answer to SSLRequest (`S`/`N`) or GSSENCRequest (`G`/`N`).
    Byte(u8),
}

/// One unit the phase-aware decoder yields (borrowed from its buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitRef<'a> {
    /// A typed frame.
    Typed(FrameRef<'a>),
    /// An untyped startup-phase packet: the bytes after its length word.
    Startup(&'a [u8]),
    /// The single-byte answer to an encryption request.
    Byte(u8),
}

/// Which encryption request the client sent (and so which answers are legal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncryptionRequest {
    /// SSLRequest: `S` or `N` (or an ErrorResponse from a very old server).
    Ssl,
    /// GSSENCRequest: `G` or `N` (or an ErrorResponse).
    GssEnc,
}

/// Where in the connection the decoder is; decides how the next bytes are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Untyped packets (frontend side): StartupMessage, SSLRequest, GSSENCRequest,
    /// CancelRequest. An SSL/GSSENC request keeps this phase, a StartupMessage moves to
    /// [`Phase::Typed`], a CancelRequest to [`Phase::Finished`].
    Startup,
    /// One byte answering an encryption request (backend side). `N` moves to
    /// [`Phase::Typed`], `S`/`G` to [`Phase::Encrypted`], an `E` is decoded as a typed frame.
    EncryptionResponse(EncryptionRequest),
    /// Encryption was accepted: the driver must install TLS/GSS and then call
    /// [`FrameDecoder::set_phase`]; plaintext bytes in this phase are an error.
    Encrypted,
    /// Typed frames.
    Typed,
    /// Nothing more may arrive (after a CancelRequest); any byte is an error.
    Finished,
}

/// Validates a typed length word read at `offset`; returns it as `usize`.
#[inline]
fn check_length(raw: i32, offset: usize, max: usize) -> Result<usize, DecodeError> {
    if raw < MIN_LENGTH as i32 {
        return Err(DecodeError::InvalidLength {
            length: raw.into(),
            offset,
        });
    }
    let len = raw as usize;
    if len > max {
        return Err(DecodeError::TooLarge { length: len, max });
    }
    Ok(len)
}

/// Validates a startup packet's length word; returns the packet's total size.
fn check_startup_length(raw: i32, body_max: usize) -> Result<usize, DecodeError> {
    if raw < 8 {
        return Err(DecodeError::InvalidLength {
            length: raw.into(),
            offset: 0,
        });
    }
    let len = raw as usize;
    if len - 4 > body_max {
        return Err(DecodeError::TooLarge {
            length: len,
            max: body_max.saturating_add(4),
        });
    }
    Ok(len)
}

fn startup_code(body: &[u8]) -> u32 {
    match body.first_chunk::<4>() {
        Some(c) => u32::from_be_bytes(*c),
        None => 0,
    }
}

#[cfg(test)]
mod tests;
