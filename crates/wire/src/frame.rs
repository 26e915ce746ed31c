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

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::buf::{DecodeError, Reader};

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

/// Maximum length words per type byte, plus the startup-packet cap.
///
/// A limit applies to the length word (which counts itself, not the type byte).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    per_tag: Table,
    startup_body_max: u32,
}

/// A per-tag table: the presets are shared statics, so a decoder stays small (it is created
/// for every connection a proxy or the simulator accepts); a customised table is boxed.
#[derive(Clone, Debug)]
enum Table {
    Shared(&'static [u32; 256]),
    Owned(Box<[u32; 256]>),
}

impl Table {
    #[inline]
    fn get(&self) -> &[u32; 256] {
        match self {
            Table::Shared(t) => t,
            Table::Owned(t) => t,
        }
    }

    fn make_mut(&mut self) -> &mut [u32; 256] {
        if let Table::Shared(t) = self {
            *self = Table::Owned(Box::new(**t));
        }
        match self {
            Table::Owned(t) => t,
            // Just replaced by an owned copy.
            Table::Shared(_) => unreachable!("table was made owned above"),
        }
    }
}

impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Table {}

/// `default` for every tag, `large_max` for the tags in `large`, and one more override.
const fn preset(default: u32, large: &[u8], large_max: u32, extra: (u8, u32)) -> [u32; 256] {
    let mut t = [default; 256];
    let mut i = 0;
    while i < large.len() {
        t[large[i] as usize] = large_max;
        i += 1;
    }
    t[extra.0 as usize] = extra.1;
    t
}

static UNIFORM_LARGE: [u32; 256] = [LARGE_MESSAGE_MAX; 256];
static POSTGRES_SERVER: [u32; 256] = preset(
    SMALL_MESSAGE_MAX,
    b"QPBFd",
    LARGE_MESSAGE_MAX,
    (b'p', AUTH_MESSAGE_MAX),
);
static LIBPQ_CLIENT: [u32; 256] = preset(
    LIBPQ_SMALL_MESSAGE_MAX,
    b"TDdVENA",
    LARGE_MESSAGE_MAX,
    (b'T', LARGE_MESSAGE_MAX),
);

impl Default for Limits {
    /// [`Limits::uniform`] at [`LARGE_MESSAGE_MAX`].
    fn default() -> Self {
        Limits::uniform(LARGE_MESSAGE_MAX)
    }
}

impl Limits {
    /// The same maximum for every type byte; startup packets keep the server's 10 000 bytes.
    pub fn uniform(len_max: u32) -> Self {
        let per_tag = if len_max == LARGE_MESSAGE_MAX {
            Table::Shared(&UNIFORM_LARGE)
        } else {
            Table::Owned(Box::new([len_max; 256]))
        };
        Limits {
            per_tag,
            startup_body_max: MAX_STARTUP_BODY_BYTES as u32,
        }
    }

    /// What a PostgreSQL 18 server enforces on frontend messages: 10 000 for small and
    /// unknown types, about 1 GiB for `Q P B F d`, 65 535 for `p`.
    pub fn postgres_server() -> Self {
        Limits {
            per_tag: Table::Shared(&POSTGRES_SERVER),
            startup_body_max: MAX_STARTUP_BODY_BYTES as u32,
        }
    }

    /// What libpq enforces on backend messages: 30 000 except `T D d V E N A` (about 1 GiB).
    pub fn libpq_client() -> Self {
        Limits {
            per_tag: Table::Shared(&LIBPQ_CLIENT),
            startup_body_max: MAX_STARTUP_BODY_BYTES as u32,
        }
    }

    /// Sets the maximum length word for one type byte.
    pub fn with_tag_max(mut self, tag: u8, len_max: u32) -> Self {
        self.per_tag.make_mut()[usize::from(tag)] = len_max;
        self
    }

    /// Sets the cap on a startup packet's bytes after its length word.
    pub fn with_startup_body_max(mut self, body_max: u32) -> Self {
        self.startup_body_max = body_max;
        self
    }

    /// The maximum length word for `tag`.
    #[inline]
    pub fn tag_max(&self, tag: u8) -> usize {
        self.per_tag.get()[usize::from(tag)] as usize
    }

    /// The cap on a startup packet's bytes after its length word.
    pub fn startup_body_max(&self) -> usize {
        self.startup_body_max as usize
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

/// Incremental, phase-aware decoder over an owned buffer; see the module documentation.
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    /// Bytes at the front of `buf` already handed out by `decode_ref`.
    pos: usize,
    phase: Phase,
    limits: Limits,
    error: Option<DecodeError>,
}

/// What `locate` found at the front of the unread bytes.
#[derive(Clone, Copy)]
enum Found {
    Typed(u8, usize),
    Startup(usize),
    Byte(u8),
}

impl FrameDecoder {
    /// Decodes what a frontend sends (server or middleware side): starts in the startup phase.
    pub fn frontend(limits: Limits) -> Self {
        Self::with_phase(Phase::Startup, limits)
    }

    /// Decodes what a backend sends (client side): starts with typed frames.
    pub fn backend(limits: Limits) -> Self {
        Self::with_phase(Phase::Typed, limits)
    }

    /// A decoder starting in `phase`.
    pub fn with_phase(phase: Phase, limits: Limits) -> Self {
        FrameDecoder {
            buf: BytesMut::new(),
            pos: 0,
            phase,
            limits,
            error: None,
        }
    }

    /// Appends received bytes. Ignored once the decoder has failed.
    pub fn feed(&mut self, data: &[u8]) {
        if self.error.is_some() {
            return;
        }
        self.compact();
        self.buf.extend_from_slice(data);
    }

    /// The buffer to read into directly (already compacted); unread bytes stay at its front.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        self.compact();
        &mut self.buf
    }

    /// Bytes received but not yet yielded.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Removes and returns every unread byte (e.g. to hand them to a TLS layer).
    pub fn take_buffered(&mut self) -> Bytes {
        self.compact();
        self.buf.split().freeze()
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Moves to `phase` (after installing TLS, or to skip the startup phase).
    pub fn set_phase(&mut self, phase: Phase) {
        self.phase = phase;
    }

    /// Client side, after sending SSLRequest or GSSENCRequest: the next unit is one byte.
    pub fn expect_encryption_response(&mut self, request: EncryptionRequest) {
        self.phase = Phase::EncryptionResponse(request);
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The sticky error, if the stream failed.
    pub fn error(&self) -> Option<&DecodeError> {
        self.error.as_ref()
    }

    /// The next unit as an owned value (`Bytes` slices of the buffer, no copy).
    pub fn decode(&mut self) -> Result<Decoded<Unit>, DecodeError> {
        let found = match self.locate()? {
            Decoded::Frame(f) => f,
            Decoded::NeedMore { at_least } => return Ok(Decoded::NeedMore { at_least }),
        };
        self.compact();
        Ok(Decoded::Frame(match found {
            Found::Typed(tag, total) => Unit::Typed(Frame {
                tag,
                wire: self.buf.split_to(total).freeze(),
            }),
            Found::Startup(total) => Unit::Startup(StartupFrame {
                wire: self.buf.split_to(total).freeze(),
            }),
            Found::Byte(b) => {
                self.buf.advance(1);
                Unit::Byte(b)
            }
        }))
    }

    /// The next unit borrowed from the buffer (no reference counting); the fastest path.
    #[inline]
    pub fn decode_ref(&mut self) -> Result<Decoded<UnitRef<'_>>, DecodeError> {
        let found = match self.locate()? {
            Decoded::Frame(f) => f,
            Decoded::NeedMore { at_least } => return Ok(Decoded::NeedMore { at_least }),
        };
        let start = self.pos;
        Ok(Decoded::Frame(match found {
            Found::Typed(tag, total) => {
                self.pos += total;
                UnitRef::Typed(FrameRef {
                    tag,
                    body: self
                        .buf
                        .get(start + HEADER_BYTES..start + total)
                        .unwrap_or_default(),
                })
            }
            Found::Startup(total) => {
                self.pos += total;
                UnitRef::Startup(self.buf.get(start + 4..start + total).unwrap_or_default())
            }
            Found::Byte(b) => {
                self.pos += 1;
                UnitRef::Byte(b)
            }
        }))
    }

    fn compact(&mut self) {
        if self.pos > 0 {
            self.buf.advance(self.pos);
            self.pos = 0;
        }
    }

    fn fail(&mut self, e: DecodeError) -> DecodeError {
        self.error = Some(e.clone());
        e
    }

    /// Finds the next unit in the unread bytes and applies its phase transition; consumes
    /// nothing.
    #[inline]
    fn locate(&mut self) -> Result<Decoded<Found>, DecodeError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let unread = self.buf.get(self.pos..).unwrap_or_default();
        match self.phase {
            Phase::Typed => {
                let Some(head) = unread.first_chunk::<HEADER_BYTES>() else {
                    return Ok(Decoded::NeedMore {
                        at_least: HEADER_BYTES - unread.len(),
                    });
                };
                let tag = head[0];
                let raw = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
                let len = match check_length(raw, 1, self.limits.tag_max(tag)) {
                    Ok(len) => len,
                    Err(e) => return Err(self.fail(e)),
                };
                let total = len + 1;
                if unread.len() < total {
                    return Ok(Decoded::NeedMore {
                        at_least: total - unread.len(),
                    });
                }
                Ok(Decoded::Frame(Found::Typed(tag, total)))
            }
            Phase::Startup => {
                if unread.first() == Some(&TLS_HANDSHAKE_BYTE) {
                    return Err(self.fail(DecodeError::Invalid {
                        what: "TLS handshake record (direct TLS) instead of a startup packet",
                        offset: 0,
                    }));
                }
                let Some(head) = unread.first_chunk::<4>() else {
                    return Ok(Decoded::NeedMore {
                        at_least: 4 - unread.len(),
                    });
                };
                let raw = i32::from_be_bytes(*head);
                let total = match check_startup_length(raw, self.limits.startup_body_max()) {
                    Ok(t) => t,
                    Err(e) => return Err(self.fail(e)),
                };
                if unread.len() < total {
                    return Ok(Decoded::NeedMore {
                        at_least: total - unread.len(),
                    });
                }
                let code = startup_code(unread.get(4..).unwrap_or_default());
                self.phase = match StartupKind::from_code(code) {
                    StartupKind::SslRequest | StartupKind::GssEncRequest => Phase::Startup,
                    StartupKind::CancelRequest => Phase::Finished,
                    StartupKind::Startup(_) => Phase::Typed,
                };
                Ok(Decoded::Frame(Found::Startup(total)))
            }
            Phase::EncryptionResponse(req) => {
                let Some(&b) = unread.first() else {
                    return Ok(Decoded::NeedMore { at_least: 1 });
                };
                let accepted = match (b, req) {
                    (b'S', EncryptionRequest::Ssl) | (b'G', EncryptionRequest::GssEnc) => true,
                    (b'N', _) => false,
                    (b'E', _) => {
                        // A server too old for the request answers with an ErrorResponse.
                        self.phase = Phase::Typed;
                        return self.locate();
                    }
                    _ => {
                        return Err(self.fail(DecodeError::Invalid {
                            what: "response to SSL/GSSENC negotiation",
                            offset: 0,
                        }))
                    }
                };
                if accepted && unread.len() > 1 {
                    // Buffer stuffing (CVE-2021-23222): nothing may precede the handshake.
                    return Err(self.fail(DecodeError::Invalid {
                        what: "unencrypted data after the encryption response",
                        offset: 1,
                    }));
                }
                self.phase = if accepted {
                    Phase::Encrypted
                } else {
                    Phase::Typed
                };
                Ok(Decoded::Frame(Found::Byte(b)))
            }
            Phase::Encrypted | Phase::Finished => {
                if unread.is_empty() {
                    return Ok(Decoded::NeedMore { at_least: 1 });
                }
                let what = if self.phase == Phase::Encrypted {
                    "unencrypted data after encryption was accepted"
                } else {
                    "data after a CancelRequest"
                };
                Err(self.fail(DecodeError::Invalid { what, offset: 0 }))
            }
        }
    }
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

/// Why a message could not be encoded; nothing is written to the buffer in that case.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// A C string field contains a NUL byte, which would cut it short on the wire.
    #[error("{what} contains a NUL byte")]
    NulInString {
        /// Which field.
        what: &'static str,
    },
    /// A length or count does not fit its wire field.
    #[error("{what}: value too large to transmit")]
    TooLarge {
        /// Which field.
        what: &'static str,
    },
    /// A value the protocol does not allow (an empty cancel key, a negative middleware class...).
    #[error("invalid {what}")]
    Invalid {
        /// What was wrong.
        what: &'static str,
    },
    /// A list or byte string is longer than its length or count field can say. pgoutput
    /// reports this one: its generated streams are checked against the exact limits.
    #[error("{what} has {count} entries or bytes, more than the maximum of {max}")]
    TooLong {
        /// Which field.
        what: &'static str,
        /// How many there are.
        count: usize,
        /// The most the field can say.
        max: usize,
    },
}

// ---------------------------------------------------------------------------------------
// Shared encode helpers.

/// Writes a typed frame: type byte, a length slot patched afterwards, and what `body`
/// writes. On error the buffer is restored to its previous length.
#[inline]
pub(crate) fn put_frame(
    buf: &mut BytesMut,
    tag: u8,
    size_hint: usize,
    body: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let start = buf.len();
    buf.reserve(HEADER_BYTES + size_hint);
    buf.put_u8(tag);
    buf.put_u32(0);
    if let Err(e) = body(buf) {
        buf.truncate(start);
        return Err(e);
    }
    patch_length(buf, start, start + 1, "message")
}

/// Writes an untyped packet (length word, then what `body` writes).
pub(crate) fn put_untyped(
    buf: &mut BytesMut,
    size_hint: usize,
    body: impl FnOnce(&mut BytesMut) -> Result<(), EncodeError>,
) -> Result<(), EncodeError> {
    let start = buf.len();
    buf.reserve(4 + size_hint);
    buf.put_u32(0);
    if let Err(e) = body(buf) {
        buf.truncate(start);
        return Err(e);
    }
    patch_length(buf, start, start, "startup packet")
}

/// Patches the length word at `at` to cover everything from `at` to the end; on overflow
/// truncates back to `start`.
#[inline]
fn patch_length(
    buf: &mut BytesMut,
    start: usize,
    at: usize,
    what: &'static str,
) -> Result<(), EncodeError> {
    let len = buf.len() - at;
    if len > i32::MAX as usize {
        buf.truncate(start);
        return Err(EncodeError::TooLarge { what });
    }
    if let Some(slot) = buf.get_mut(at..at + 4) {
        slot.copy_from_slice(&(len as u32).to_be_bytes());
    }
    Ok(())
}

/// Writes a NUL-terminated string, refusing embedded NULs.
#[inline]
pub(crate) fn put_cstr(
    buf: &mut BytesMut,
    s: &[u8],
    what: &'static str,
) -> Result<(), EncodeError> {
    if s.contains(&0) {
        return Err(EncodeError::NulInString { what });
    }
    buf.put_slice(s);
    buf.put_u8(0);
    Ok(())
}

/// Converts a count to the unsigned Int16 the protocol uses.
#[inline]
pub(crate) fn count_u16(n: usize, what: &'static str) -> Result<u16, EncodeError> {
    u16::try_from(n).map_err(|_| EncodeError::TooLarge { what })
}

/// Converts a byte length to an Int32 length field.
#[inline]
pub(crate) fn len_i32(n: usize, what: &'static str) -> Result<i32, EncodeError> {
    i32::try_from(n).map_err(|_| EncodeError::TooLarge { what })
}

/// Writes a nullable value: Int32 length (-1 for NULL) and the bytes.
#[inline]
pub(crate) fn put_nullable(buf: &mut BytesMut, v: Option<&[u8]>) -> Result<(), EncodeError> {
    match v {
        None => buf.put_i32(-1),
        Some(v) => {
            buf.put_i32(len_i32(v.len(), "value")?);
            buf.put_slice(v);
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Shared decode helpers and borrowed array views.

/// Reads an Int16 count as unsigned (as the server does) and checks that `min_item` bytes
/// per item fit in the rest of the message.
#[inline]
pub(crate) fn read_count_u16(r: &mut Reader<'_>, min_item: usize) -> Result<usize, DecodeError> {
    let at = r.offset();
    let n = usize::from(r.u16()?);
    if n.saturating_mul(min_item) > r.remaining() {
        return Err(DecodeError::InvalidCount {
            count: n as i64,
            offset: at,
        });
    }
    Ok(n)
}

/// An array of Int16 values (format codes) as it sits on the wire, after its count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FormatCodes<'a> {
    raw: &'a [u8],
}

impl<'a> FormatCodes<'a> {
    /// Reads an Int16 count and that many Int16 values.
    pub(crate) fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = read_count_u16(r, 2)?;
        Ok(FormatCodes {
            raw: r.bytes(n * 2)?,
        })
    }

    /// How many codes.
    pub fn len(&self) -> usize {
        self.raw.len() / 2
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The codes in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i16> + 'a {
        self.raw
            .chunks_exact(2)
            .map(|c| i16::from_be_bytes([c[0], c[1]]))
    }

    /// The format code that applies to column/parameter `i` of `n` under the 0/1/N rule.
    pub fn for_index(&self, i: usize) -> Option<i16> {
        match self.len() {
            0 => Some(0),
            1 => self.iter().next(),
            _ => self.iter().nth(i),
        }
    }

    /// The wire bytes (without the count).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    pub(crate) fn put(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u16(count_u16(self.len(), "format code count")?);
        buf.put_slice(self.raw);
        Ok(())
    }
}

/// Writes an Int16 count and Int16 values.
#[inline]
pub(crate) fn put_i16s(
    buf: &mut BytesMut,
    v: &[i16],
    what: &'static str,
) -> Result<(), EncodeError> {
    buf.put_u16(count_u16(v.len(), what)?);
    for &x in v {
        buf.put_i16(x);
    }
    Ok(())
}

/// An array of Int32 OIDs as it sits on the wire, after its Int16 count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Oids<'a> {
    raw: &'a [u8],
}

impl<'a> Oids<'a> {
    pub(crate) fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = read_count_u16(r, 4)?;
        Ok(Oids {
            raw: r.bytes(n * 4)?,
        })
    }

    /// How many OIDs.
    pub fn len(&self) -> usize {
        self.raw.len() / 4
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.raw.is_empty()
    }

    /// The OIDs in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = u32> + 'a {
        self.raw
            .chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// The wire bytes (without the count).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    pub(crate) fn put(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        buf.put_u16(count_u16(self.len(), "OID count")?);
        buf.put_slice(self.raw);
        Ok(())
    }
}

/// Writes an Int16 count and Int32 OIDs.
#[inline]
pub(crate) fn put_oids(buf: &mut BytesMut, v: &[u32]) -> Result<(), EncodeError> {
    buf.put_u16(count_u16(v.len(), "OID count")?);
    for &x in v {
        buf.put_u32(x);
    }
    Ok(())
}

/// A counted list of nullable values (`Int16 N`, N × (`Int32 len` or -1, bytes)) as it sits
/// on the wire: Bind parameters, FunctionCall arguments, DataRow fields. Validated once when
/// read, iterated without allocating.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Values<'a> {
    count: u16,
    raw: &'a [u8],
}

impl<'a> Values<'a> {
    /// Reads the count and walks every value once to check the lengths.
    #[inline]
    pub(crate) fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let n = read_count_u16(r, 4)?;
        let base = r.offset();
        let all = r.rest();
        // One index walk with a single range check per value: the hot loop of DataRow decode.
        let mut pos = 0usize;
        for _ in 0..n {
            let Some(head) = all.get(pos..pos + 4) else {
                return Err(DecodeError::UnexpectedEnd {
                    offset: base + pos,
                    needed: pos + 4 - all.len(),
                });
            };
            let len = i32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            // -1 (NULL) carries no bytes; any other negative length is invalid.
            let next = pos + 4 + (len.max(0) as usize);
            if len < -1 || next > all.len() {
                return Err(DecodeError::InvalidLength {
                    length: len.into(),
                    offset: base + pos,
                });
            }
            pos = next;
        }
        let raw = r.bytes(pos)?;
        Ok(Values {
            count: n as u16,
            raw,
        })
    }

    /// How many values.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The values in order, `None` for NULL.
    #[inline]
    pub fn iter(&self) -> ValuesIter<'a> {
        ValuesIter {
            rest: self.raw,
            left: self.count,
        }
    }

    /// The wire bytes after the count.
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    pub(crate) fn put(&self, buf: &mut BytesMut) {
        buf.put_u16(self.count);
        buf.put_slice(self.raw);
    }
}

/// Iterator over [`Values`]: yields `Some(bytes)` or `None` (SQL NULL) per value.
#[derive(Clone, Debug)]
pub struct ValuesIter<'a> {
    rest: &'a [u8],
    left: u16,
}

impl<'a> Iterator for ValuesIter<'a> {
    type Item = Option<&'a [u8]>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The lengths were validated when the list was read; the `?`s cannot trigger.
        let (head, tail) = self.rest.split_first_chunk::<4>()?;
        let len = i32::from_be_bytes(*head);
        if len < 0 {
            self.rest = tail;
            return Some(None);
        }
        let (v, rest) = tail.split_at_checked(len as usize)?;
        self.rest = rest;
        Some(Some(v))
    }

    #[inline]
    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(self.left), Some(usize::from(self.left)))
    }
}

impl ExactSizeIterator for ValuesIter<'_> {}

/// Total bytes `put_values` writes for `vals`, for reserving.
#[inline]
pub(crate) fn values_size(vals: &[Option<&[u8]>]) -> usize {
    vals.iter()
        .map(|v| 4 + v.map_or(0, <[u8]>::len))
        .fold(2, usize::saturating_add)
}

/// Writes an Int16 count and nullable values.
#[inline]
pub(crate) fn put_values(buf: &mut BytesMut, vals: &[Option<&[u8]>]) -> Result<(), EncodeError> {
    buf.put_u16(count_u16(vals.len(), "value count")?);
    for v in vals {
        put_nullable(buf, *v)?;
    }
    Ok(())
}

/// A list of NUL-terminated strings as it sits on the wire (each with its NUL, without a
/// list terminator).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CStrs<'a> {
    raw: &'a [u8],
    count: usize,
}

impl<'a> CStrs<'a> {
    /// Reads `n` strings.
    pub(crate) fn read_counted(r: &mut Reader<'a>, n: usize) -> Result<Self, DecodeError> {
        let start = r.rest();
        for _ in 0..n {
            r.cstr()?;
        }
        let used = start.len() - r.remaining();
        Ok(CStrs {
            raw: start.get(..used).unwrap_or_default(),
            count: n,
        })
    }

    /// Reads strings up to an empty one (the list terminator, consumed but not included).
    pub(crate) fn read_terminated(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let start = r.rest();
        let mut count = 0;
        loop {
            let used = start.len() - r.remaining();
            if r.cstr()?.is_empty() {
                return Ok(CStrs {
                    raw: start.get(..used).unwrap_or_default(),
                    count,
                });
            }
            count += 1;
        }
    }

    /// How many strings.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The strings in order, without their terminators.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let raw = self.raw.strip_suffix(&[0]).unwrap_or(self.raw);
        let n = self.count;
        raw.split(|&b| b == 0).take(n)
    }

    /// The wire bytes (each string with its NUL).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn decode_frame_needs_header_then_body() {
        let f = frame(b'Z', b"I");
        for cut in 0..5 {
            assert_eq!(
                decode_frame(&f[..cut], 100),
                Ok(Decoded::NeedMore { at_least: 5 - cut })
            );
        }
        assert_eq!(
            decode_frame(&f[..5], 100),
            Ok(Decoded::NeedMore { at_least: 1 })
        );
        assert_eq!(
            decode_frame(&f, 100),
            Ok(Decoded::Frame(FrameRef {
                tag: b'Z',
                body: b"I"
            }))
        );
    }

    #[test]
    fn lengths_are_checked_before_waiting() {
        assert_eq!(
            decode_frame(&[b'D', 0, 0, 0, 3], 100),
            Err(DecodeError::InvalidLength {
                length: 3,
                offset: 1
            })
        );
        assert_eq!(
            decode_frame(&[b'D', 0xff, 0xff, 0xff, 0xff], 100),
            Err(DecodeError::InvalidLength {
                length: -1,
                offset: 1
            })
        );
        assert_eq!(
            decode_frame(&[b'D', 0, 0, 0, 101], 100),
            Err(DecodeError::TooLarge {
                length: 101,
                max: 100
            })
        );
        let mut d = FrameDecoder::backend(Limits::uniform(1000));
        d.feed(&[b'D', 0x7f, 0xff, 0xff, 0xff]);
        assert!(matches!(d.decode(), Err(DecodeError::TooLarge { .. })));
        // Sticky, and the buffer never grew beyond what was fed.
        assert!(d.buffer_mut().capacity() < 1000);
        d.feed(&frame(b'Z', b"I"));
        assert!(matches!(d.decode(), Err(DecodeError::TooLarge { .. })));
    }

    #[test]
    fn frame_iter_stops_at_partial_frames() {
        let mut s = frame(b'1', b"");
        s.extend(frame(b'C', b"SELECT 1\0"));
        s.extend_from_slice(&frame(b'Z', b"I")[..3]);
        let mut it = frames(&s, 1000);
        assert_eq!(it.next().map(|f| f.map(|f| f.tag)), Some(Ok(b'1')));
        assert_eq!(it.next().map(|f| f.map(|f| f.tag)), Some(Ok(b'C')));
        assert_eq!(it.next(), None);
        assert_eq!(it.consumed(), 5 + 14);
        assert_eq!(it.need_more(), Some(2));
    }

    #[test]
    fn frontend_decoder_walks_startup_phase() {
        let mut d = FrameDecoder::frontend(Limits::postgres_server());
        let mut s = Vec::new();
        s.extend_from_slice(&8u32.to_be_bytes());
        s.extend_from_slice(&SSL_REQUEST_CODE.to_be_bytes());
        s.extend_from_slice(&9u32.to_be_bytes());
        s.extend_from_slice(&ProtocolVersion::V3_0.0.to_be_bytes());
        s.push(0);
        s.extend(frame(b'Q', b"select 1\0"));
        for &b in &s {
            d.feed(&[b]);
        }
        let Ok(Decoded::Frame(Unit::Startup(p))) = d.decode() else {
            panic!("ssl request")
        };
        assert_eq!(p.kind(), StartupKind::SslRequest);
        assert_eq!(d.phase(), Phase::Startup);
        let Ok(Decoded::Frame(Unit::Startup(p))) = d.decode() else {
            panic!("startup")
        };
        assert_eq!(p.kind(), StartupKind::Startup(ProtocolVersion::V3_0));
        assert_eq!(p.wire().len(), 9);
        let Ok(Decoded::Frame(Unit::Typed(f))) = d.decode() else {
            panic!("query")
        };
        assert_eq!((f.tag(), f.body()), (b'Q', &b"select 1\0"[..]));
        assert_eq!(d.decode(), Ok(Decoded::NeedMore { at_least: 5 }));
    }

    #[test]
    fn presets_equal_tables_built_by_hand() {
        let mut server = Limits::uniform(SMALL_MESSAGE_MAX);
        for &t in b"QPBFd" {
            server = server.with_tag_max(t, LARGE_MESSAGE_MAX);
        }
        server = server.with_tag_max(b'p', AUTH_MESSAGE_MAX);
        assert_eq!(server, Limits::postgres_server());
        let mut client = Limits::uniform(LIBPQ_SMALL_MESSAGE_MAX);
        for &t in b"TDdVENA" {
            client = client.with_tag_max(t, LARGE_MESSAGE_MAX);
        }
        assert_eq!(client, Limits::libpq_client());
        assert_ne!(client, Limits::postgres_server());
        // Customising a shared preset copies it; the preset itself stays as it was.
        let custom = Limits::postgres_server().with_tag_max(b'Q', 100);
        assert_eq!(custom.tag_max(b'Q'), 100);
        assert_eq!(
            Limits::postgres_server().tag_max(b'Q'),
            LARGE_MESSAGE_MAX as usize
        );
        assert_eq!(Limits::default().tag_max(b'x'), LARGE_MESSAGE_MAX as usize);
    }

    #[test]
    fn startup_limits_and_direct_tls() {
        let mut d = FrameDecoder::frontend(Limits::default());
        d.feed(&[0, 0, 0, 7]);
        assert_eq!(
            d.decode(),
            Err(DecodeError::InvalidLength {
                length: 7,
                offset: 0
            })
        );
        let mut d = FrameDecoder::frontend(Limits::default());
        d.feed(&10_005u32.to_be_bytes());
        assert_eq!(
            d.decode(),
            Err(DecodeError::TooLarge {
                length: 10_005,
                max: 10_004
            })
        );
        let mut d = FrameDecoder::frontend(Limits::default());
        d.feed(&[0x16, 3, 1]);
        assert!(matches!(d.decode(), Err(DecodeError::Invalid { .. })));
    }

    #[test]
    fn backend_decoder_reads_one_byte_after_ssl_request() {
        let mut d = FrameDecoder::backend(Limits::libpq_client());
        d.expect_encryption_response(EncryptionRequest::Ssl);
        d.feed(b"N");
        assert_eq!(d.decode(), Ok(Decoded::Frame(Unit::Byte(b'N'))));
        assert_eq!(d.phase(), Phase::Typed);

        let mut d = FrameDecoder::backend(Limits::libpq_client());
        d.expect_encryption_response(EncryptionRequest::Ssl);
        d.feed(b"S");
        assert_eq!(d.decode_ref(), Ok(Decoded::Frame(UnitRef::Byte(b'S'))));
        assert_eq!(d.phase(), Phase::Encrypted);
        d.feed(b"x");
        assert!(d.decode().is_err());

        // Buffer stuffing: bytes behind the `S`.
        let mut d = FrameDecoder::backend(Limits::libpq_client());
        d.expect_encryption_response(EncryptionRequest::Ssl);
        d.feed(b"Sxx");
        assert!(matches!(
            d.decode(),
            Err(DecodeError::Invalid { offset: 1, .. })
        ));

        // `G` is not an answer to SSLRequest.
        let mut d = FrameDecoder::backend(Limits::libpq_client());
        d.expect_encryption_response(EncryptionRequest::Ssl);
        d.feed(b"G");
        assert!(d.decode().is_err());

        // An old server's ErrorResponse is decoded as a typed frame.
        let mut d = FrameDecoder::backend(Limits::libpq_client());
        d.expect_encryption_response(EncryptionRequest::GssEnc);
        d.feed(&frame(b'E', b"\0"));
        assert!(matches!(
            d.decode(),
            Ok(Decoded::Frame(Unit::Typed(f))) if f.tag() == b'E'
        ));
    }

    #[test]
    fn cancel_request_finishes_the_stream() {
        let mut d = FrameDecoder::frontend(Limits::default());
        let mut s = 16u32.to_be_bytes().to_vec();
        s.extend_from_slice(&CANCEL_REQUEST_CODE.to_be_bytes());
        s.extend_from_slice(&[0, 0, 0, 1, 9, 9, 9, 9]);
        d.feed(&s);
        assert!(matches!(d.decode(), Ok(Decoded::Frame(Unit::Startup(_)))));
        assert_eq!(d.phase(), Phase::Finished);
        assert_eq!(d.decode(), Ok(Decoded::NeedMore { at_least: 1 }));
        d.feed(b"Q");
        assert!(d.decode().is_err());
    }

    #[test]
    fn owned_and_borrowed_paths_agree() {
        let mut s = frame(b'D', &[0, 1, 0, 0, 0, 1, b'x']);
        s.extend(frame(b'Z', b"I"));
        let mut a = FrameDecoder::backend(Limits::default());
        let mut b = FrameDecoder::backend(Limits::default());
        a.feed(&s);
        b.feed(&s);
        for _ in 0..2 {
            let Ok(Decoded::Frame(Unit::Typed(fa))) = a.decode() else {
                panic!()
            };
            let Ok(Decoded::Frame(UnitRef::Typed(fb))) = b.decode_ref() else {
                panic!()
            };
            assert_eq!(fa.as_ref(), fb);
            assert_eq!(Frame::from_wire(fa.wire().clone()), Ok(fa.clone()));
        }
    }

    #[test]
    fn limits_presets() {
        let s = Limits::postgres_server();
        assert_eq!(s.tag_max(b'S'), 10_000);
        assert_eq!(s.tag_max(b'B'), LARGE_MESSAGE_MAX as usize);
        assert_eq!(s.tag_max(b'p'), 65_535);
        let c = Limits::libpq_client();
        assert_eq!(c.tag_max(b'Z'), 30_000);
        assert_eq!(c.tag_max(b'D'), LARGE_MESSAGE_MAX as usize);
        assert_eq!(ProtocolVersion::V3_2.minor(), 2);
        assert!(ProtocolVersion::V3_2.has_variable_cancel_key());
        assert!(!ProtocolVersion::V3_0.has_variable_cancel_key());
    }
}
