//! The proposed middleware message (`M`), its class ranges, and the middleware-side splitter.
//!
//! Layout (frontend → middleware, never forwarded to a server):
//!
//! ```text
//! Byte1('M')  Int32 length (counts itself)  Int64 class  Byte[length - 12] payload
//! ```
//!
//! Classes 0 ..= 2^31-1 are reserved for allocation by the PostgreSQL project, larger
//! values are open for external allocation, negative values are invalid. See
//! `docs/middleware-message.md` for the full specification and examples; the idea comes
//! from Simon Riggs' pgsql-hackers proposal "Middleware Messages for FE/BE" (2021).
//!
//! [`Splitter`] runs inside a middleware on the client's byte stream. It passes the startup
//! phase through untouched, then separates `M` messages (surfaced parsed, consumed) from
//! everything else (surfaced as the exact original byte ranges, zero-copy `Bytes`, never
//! re-encoded). Server-bound frames are cut through: once a frame's header has been checked
//! its bytes are handed out as they arrive, so a large CopyData is never buffered whole.

use bytes::{BufMut, Bytes, BytesMut};

use crate::buf::{DecodeError, Reader};
use crate::frame::{
    put_frame, Decoded, EncodeError, Limits, StartupKind, HEADER_BYTES, MIN_LENGTH,
    TLS_HANDSHAKE_BYTE,
};

/// Type byte of the middleware message.
pub const MIDDLEWARE_TAG: u8 = b'M';
/// Smallest length word of a middleware message (length + class, empty payload).
pub const MIDDLEWARE_MIN_LENGTH: usize = 12;
/// Largest class reserved for the PostgreSQL project (2^31 - 1).
pub const POSTGRES_CLASS_MAX: i64 = (1 << 31) - 1;
/// Default cap on a middleware message's length word.
pub const DEFAULT_MIDDLEWARE_LEN_MAX: u32 = 65_536;

/// Who allocates a class value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClassRange {
    /// 0 ..= 2^31-1: allocated by the PostgreSQL project.
    PostgresProject,
    /// 2^31 ..= 2^63-1: open for external allocation.
    External,
}

/// A valid (non-negative) routing/class identifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MiddlewareClass(i64);

impl MiddlewareClass {
    /// `None` for negative values.
    pub const fn new(class: i64) -> Option<Self> {
        if class < 0 {
            None
        } else {
            Some(MiddlewareClass(class))
        }
    }

    /// The value.
    pub const fn get(self) -> i64 {
        self.0
    }

    /// Which allocation range it lies in.
    pub const fn range(self) -> ClassRange {
        if self.0 <= POSTGRES_CLASS_MAX {
            ClassRange::PostgresProject
        } else {
            ClassRange::External
        }
    }
}

/// A middleware message borrowed from a frame body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MiddlewareMessage<'a> {
    /// The routing/class identifier.
    pub class: MiddlewareClass,
    /// The payload (opaque to this crate).
    pub payload: &'a [u8],
}

impl<'a> MiddlewareMessage<'a> {
    /// Decodes an `M` body: Int64 class (must be non-negative), then the payload.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let class = r.i64()?;
        let class = MiddlewareClass::new(class).ok_or(DecodeError::Invalid {
            what: "negative middleware message class",
            offset: 0,
        })?;
        Ok(MiddlewareMessage {
            class,
            payload: r.take_rest(),
        })
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        encode_middleware(self.class.get(), self.payload, buf)
    }
}

/// Writes a middleware message (client side). A negative class is refused.
pub fn encode_middleware(
    class: i64,
    payload: &[u8],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    if class < 0 {
        return Err(EncodeError::Invalid {
            what: "negative middleware message class",
        });
    }
    crate::frame::len_i32(
        payload.len().saturating_add(MIDDLEWARE_MIN_LENGTH),
        "message",
    )?;
    put_frame(buf, MIDDLEWARE_TAG, 8 + payload.len(), |b| {
        b.put_i64(class);
        b.put_slice(payload);
        Ok(())
    })
}

/// A middleware message the splitter took out of the stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedMiddlewareMessage {
    class: MiddlewareClass,
    wire: Bytes,
}

impl OwnedMiddlewareMessage {
    /// The class.
    pub fn class(&self) -> MiddlewareClass {
        self.class
    }

    /// The payload (a slice of the frame, no copy).
    pub fn payload(&self) -> Bytes {
        self.wire.slice((HEADER_BYTES + 8).min(self.wire.len())..)
    }

    /// The whole frame as received.
    pub fn wire(&self) -> &Bytes {
        &self.wire
    }

    /// The borrowed view.
    pub fn as_message(&self) -> MiddlewareMessage<'_> {
        MiddlewareMessage {
            class: self.class,
            payload: self.wire.get(HEADER_BYTES + 8..).unwrap_or_default(),
        }
    }
}

/// What the splitter hands out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitItem {
    /// Bytes for the server, exactly as the client sent them (possibly several frames, or
    /// part of one frame whose header was already checked).
    Forward(Bytes),
    /// A middleware message; it must not be forwarded.
    Middleware(OwnedMiddlewareMessage),
}

/// How the splitter reads the client's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitPhase {
    /// Untyped startup packets, forwarded whole. A StartupMessage moves to
    /// [`SplitPhase::Typed`], a CancelRequest to [`SplitPhase::Finished`]; SSL/GSSENC requests
    /// stay here (the driver switches to [`SplitPhase::Opaque`] if it relays encryption it
    /// does not terminate).
    Startup,
    /// Typed frames: `M` is consumed, everything else forwarded.
    Typed,
    /// Everything is forwarded unexamined (e.g. a TLS session relayed end to end).
    Opaque,
    /// Nothing more may arrive (after a CancelRequest).
    Finished,
}

/// Separates middleware messages from server-bound bytes; see the module documentation.
#[derive(Debug)]
pub struct Splitter {
    buf: BytesMut,
    phase: SplitPhase,
    /// Bytes of a forwarded frame that have not arrived yet (cut-through).
    pending: usize,
    limits: Limits,
    /// Sticky error, or one found behind bytes that were forwarded first.
    error: Option<DecodeError>,
}

impl Default for Splitter {
    fn default() -> Self {
        Self::new(
            Limits::postgres_server().with_tag_max(MIDDLEWARE_TAG, DEFAULT_MIDDLEWARE_LEN_MAX),
        )
    }
}

enum Stop {
    Need(usize),
    Fail(DecodeError),
    Middleware(MiddlewareClass, usize),
}

impl Splitter {
    /// A splitter at the start of a client connection; `limits` apply to every frame
    /// (the `M` entry to middleware messages).
    pub fn new(limits: Limits) -> Self {
        Self::with_phase(SplitPhase::Startup, limits)
    }

    /// A splitter starting in `phase`.
    pub fn with_phase(phase: SplitPhase, limits: Limits) -> Self {
        Splitter {
            buf: BytesMut::new(),
            phase,
            pending: 0,
            limits,
            error: None,
        }
    }

    /// Appends bytes from the client. Ignored once the splitter has failed.
    pub fn feed(&mut self, data: &[u8]) {
        if self.error.is_none() {
            self.buf.extend_from_slice(data);
        }
    }

    /// The buffer to read into directly; unread bytes stay at its front.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Whether the splitter stands between typed frames with nothing buffered, pending or
    /// failed: bytes fed now are read from their first byte as a frame header.
    pub fn at_typed_boundary(&self) -> bool {
        self.phase == SplitPhase::Typed
            && self.buf.is_empty()
            && self.pending == 0
            && self.error.is_none()
    }

    /// Whether a typed frame of `tag` whose length word is `len` passes the splitter's
    /// checks and is forwarded (a middleware message is not). With
    /// [`Splitter::at_typed_boundary`], a caller that finds every frame of a read whole and
    /// forwarded may take the read as it is instead of feeding it: the splitter would hand
    /// the same bytes back in one run and be left as it was.
    pub fn forwards_frame(&self, tag: u8, len: i32) -> bool {
        tag != MIDDLEWARE_TAG
            && len >= MIN_LENGTH as i32
            && len as usize <= self.limits.tag_max(tag)
    }

    /// The current phase.
    pub fn phase(&self) -> SplitPhase {
        self.phase
    }

    /// Changes the phase (e.g. to [`SplitPhase::Opaque`] after the server accepted TLS).
    pub fn set_phase(&mut self, phase: SplitPhase) {
        self.phase = phase;
    }

    /// Bytes held back (an incomplete header, startup packet or middleware message).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The next item. Forwarded bytes found before an error are handed out first; the
    /// error then comes on the next call and is sticky.
    pub fn split(&mut self) -> Result<Decoded<SplitItem>, DecodeError> {
        let (pos, stop) = self.scan();
        if pos > 0 {
            if let Stop::Fail(e) = stop {
                self.error = Some(e);
            }
            return Ok(Decoded::Frame(SplitItem::Forward(
                self.buf.split_to(pos).freeze(),
            )));
        }
        match stop {
            Stop::Need(at_least) => Ok(Decoded::NeedMore { at_least }),
            Stop::Fail(e) => {
                self.error = Some(e.clone());
                Err(e)
            }
            Stop::Middleware(class, total) => Ok(Decoded::Frame(SplitItem::Middleware(
                OwnedMiddlewareMessage {
                    class,
                    wire: self.buf.split_to(total).freeze(),
                },
            ))),
        }
    }

    /// Finds how many leading bytes can be forwarded and what stops the run. Updates the
    /// phase and the cut-through counter for the bytes it accounts for.
    fn scan(&mut self) -> (usize, Stop) {
        if let Some(e) = &self.error {
            return (0, Stop::Fail(e.clone()));
        }
        let data = &self.buf[..];
        let mut pos = self.pending.min(data.len());
        self.pending -= pos;
        if self.pending > 0 {
            return (pos, Stop::Need(self.pending));
        }
        loop {
            let rest = &data[pos..];
            match self.phase {
                SplitPhase::Opaque => return (data.len(), Stop::Need(1)),
                SplitPhase::Finished => {
                    if rest.is_empty() {
                        return (pos, Stop::Need(1));
                    }
                    let e = DecodeError::Invalid {
                        what: "data after a CancelRequest",
                        offset: 0,
                    };
                    return (pos, Stop::Fail(e));
                }
                SplitPhase::Startup => {
                    if rest.first() == Some(&TLS_HANDSHAKE_BYTE) {
                        let e = DecodeError::Invalid {
                            what: "TLS handshake record (direct TLS) instead of a startup packet",
                            offset: 0,
                        };
                        return (pos, Stop::Fail(e));
                    }
                    let Some(head) = rest.first_chunk::<4>() else {
                        return (pos, Stop::Need(4 - rest.len()));
                    };
                    let raw = i32::from_be_bytes(*head);
                    let body_max = self.limits.startup_body_max();
                    if raw < 8 {
                        let e = DecodeError::InvalidLength {
                            length: raw.into(),
                            offset: 0,
                        };
                        return (pos, Stop::Fail(e));
                    }
                    let total = raw as usize;
                    if total - 4 > body_max {
                        let e = DecodeError::TooLarge {
                            length: total,
                            max: body_max.saturating_add(4),
                        };
                        return (pos, Stop::Fail(e));
                    }
                    if rest.len() < total {
                        return (pos, Stop::Need(total - rest.len()));
                    }
                    let code = u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]);
                    self.phase = match StartupKind::from_code(code) {
                        StartupKind::SslRequest | StartupKind::GssEncRequest => SplitPhase::Startup,
                        StartupKind::CancelRequest => SplitPhase::Finished,
                        StartupKind::Startup(_) => SplitPhase::Typed,
                    };
                    pos += total;
                }
                SplitPhase::Typed => {
                    let Some(head) = rest.first_chunk::<HEADER_BYTES>() else {
                        return (pos, Stop::Need(HEADER_BYTES - rest.len()));
                    };
                    let tag = head[0];
                    let raw = i32::from_be_bytes([head[1], head[2], head[3], head[4]]);
                    let min = if tag == MIDDLEWARE_TAG {
                        MIDDLEWARE_MIN_LENGTH
                    } else {
                        MIN_LENGTH
                    };
                    if raw < min as i32 {
                        let e = DecodeError::InvalidLength {
                            length: raw.into(),
                            offset: 1,
                        };
                        return (pos, Stop::Fail(e));
                    }
                    let len = raw as usize;
                    let max = self.limits.tag_max(tag);
                    if len > max {
                        return (pos, Stop::Fail(DecodeError::TooLarge { length: len, max }));
                    }
                    let total = len + 1;
                    if tag == MIDDLEWARE_TAG {
                        if pos > 0 {
                            // Hand out what precedes it first.
                            return (pos, Stop::Need(0));
                        }
                        if rest.len() < total {
                            return (pos, Stop::Need(total - rest.len()));
                        }
                        let class = i64::from_be_bytes([
                            rest[5], rest[6], rest[7], rest[8], rest[9], rest[10], rest[11],
                            rest[12],
                        ]);
                        return match MiddlewareClass::new(class) {
                            Some(c) => (0, Stop::Middleware(c, total)),
                            None => (
                                0,
                                Stop::Fail(DecodeError::Invalid {
                                    what: "negative middleware message class",
                                    offset: HEADER_BYTES,
                                }),
                            ),
                        };
                    }
                    if rest.len() < total {
                        // Cut through: forward what is here, remember the rest.
                        self.pending = total - rest.len();
                        return (data.len(), Stop::Need(self.pending));
                    }
                    pos += total;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::ProtocolVersion;
    use crate::frontend::{encode_query, encode_ssl_request, encode_startup, encode_sync};

    type Drained = (Vec<u8>, Vec<(i64, Vec<u8>)>, Option<DecodeError>);

    fn drain(s: &mut Splitter) -> Drained {
        let mut fwd = Vec::new();
        let mut mw = Vec::new();
        loop {
            match s.split() {
                Ok(Decoded::Frame(SplitItem::Forward(b))) => fwd.extend_from_slice(&b),
                Ok(Decoded::Frame(SplitItem::Middleware(m))) => {
                    mw.push((m.class().get(), m.payload().to_vec()))
                }
                Ok(Decoded::NeedMore { .. }) => return (fwd, mw, None),
                Err(e) => return (fwd, mw, Some(e)),
            }
        }
    }

    #[test]
    fn encodes_the_documented_bytes() {
        let mut buf = BytesMut::new();
        encode_middleware(1, b"hi", &mut buf).unwrap();
        assert_eq!(
            &buf[..],
            b"M\x00\x00\x00\x0e\x00\x00\x00\x00\x00\x00\x00\x01hi"
        );
        let m = MiddlewareMessage::decode(&buf[5..]).unwrap();
        assert_eq!(m.class.range(), ClassRange::PostgresProject);
        assert_eq!(m.payload, b"hi");
        assert!(encode_middleware(-1, b"", &mut buf).is_err());
        assert_eq!(
            MiddlewareClass::new(1 << 31).map(MiddlewareClass::range),
            Some(ClassRange::External)
        );
        assert_eq!(
            MiddlewareClass::new(POSTGRES_CLASS_MAX).map(MiddlewareClass::range),
            Some(ClassRange::PostgresProject)
        );
        assert!(MiddlewareMessage::decode(&[0xff; 8]).is_err());
        assert!(MiddlewareMessage::decode(&[0; 7]).is_err());
    }

    #[test]
    fn splits_startup_then_typed_stream() {
        let mut input = BytesMut::new();
        encode_ssl_request(&mut input);
        encode_startup(ProtocolVersion::V3_0, &[(b"user", b"u")], &mut input).unwrap();
        encode_query(b"select 1", &mut input).unwrap();
        let mut expected = input.clone();
        encode_middleware(1 << 40, b"route=primary", &mut input).unwrap();
        encode_sync(&mut input);
        encode_sync(&mut expected);

        for chunk in [1, 2, 3, 7, input.len()] {
            let mut s = Splitter::default();
            let mut fwd = Vec::new();
            let mut mw = Vec::new();
            for c in input.chunks(chunk) {
                s.feed(c);
                let (f, m, e) = drain(&mut s);
                assert_eq!(e, None);
                fwd.extend(f);
                mw.extend(m);
            }
            assert_eq!(fwd, &expected[..], "chunk {chunk}");
            assert_eq!(mw, [(1 << 40, b"route=primary".to_vec())]);
            assert_eq!(s.buffered(), 0);
        }
    }

    #[test]
    fn documented_trace() {
        let mut input = BytesMut::new();
        encode_query(b"select 1", &mut input).unwrap();
        encode_middleware(1, b"hi", &mut input).unwrap();
        encode_sync(&mut input);
        let input = input.freeze();
        let mut s = Splitter::with_phase(SplitPhase::Typed, Limits::postgres_server());
        s.feed(&input);
        assert_eq!(
            s.split(),
            Ok(Decoded::Frame(SplitItem::Forward(input.slice(0..14))))
        );
        let Ok(Decoded::Frame(SplitItem::Middleware(m))) = s.split() else {
            panic!("middleware message")
        };
        assert_eq!((m.class().get(), &m.payload()[..]), (1, &b"hi"[..]));
        assert_eq!(m.wire(), &input.slice(14..29));
        assert_eq!(
            s.split(),
            Ok(Decoded::Frame(SplitItem::Forward(input.slice(29..34))))
        );
        assert_eq!(s.split(), Ok(Decoded::NeedMore { at_least: 5 }));

        // One byte at a time: the header goes out whole, then byte by byte.
        let mut s = Splitter::with_phase(SplitPhase::Typed, Limits::postgres_server());
        let mut sizes = Vec::new();
        for b in input.iter() {
            s.feed(&[*b]);
            while let Ok(Decoded::Frame(item)) = s.split() {
                sizes.push(match item {
                    SplitItem::Forward(b) => b.len(),
                    SplitItem::Middleware(_) => 0,
                });
            }
        }
        assert_eq!(sizes, [5, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 5]);
    }

    #[test]
    fn large_frames_are_cut_through() {
        let mut s = Splitter::with_phase(SplitPhase::Typed, Limits::default());
        let mut input = BytesMut::new();
        crate::frontend::encode_copy_data(&[7; 1000], &mut input).unwrap();
        s.feed(&input[..100]);
        let Ok(Decoded::Frame(SplitItem::Forward(b))) = s.split() else {
            panic!()
        };
        assert_eq!(b.len(), 100);
        assert_eq!(s.split(), Ok(Decoded::NeedMore { at_least: 905 }));
        s.feed(&input[100..]);
        let (fwd, _, e) = drain(&mut s);
        assert_eq!((fwd.len(), e), (905, None));
    }

    #[test]
    fn bad_middleware_messages_are_errors() {
        // Negative class.
        let mut s = Splitter::with_phase(SplitPhase::Typed, Limits::default());
        let mut input = BytesMut::new();
        encode_sync(&mut input);
        input.put_slice(b"M\0\0\0\x0c\xff\xff\xff\xff\xff\xff\xff\xff");
        s.feed(&input);
        let (fwd, mw, e) = drain(&mut s);
        assert_eq!(fwd, b"S\0\0\0\x04");
        assert!(mw.is_empty());
        assert!(matches!(e, Some(DecodeError::Invalid { offset: 5, .. })));
        assert!(s.split().is_err(), "sticky");

        // Too short to hold a class.
        let mut s = Splitter::with_phase(SplitPhase::Typed, Limits::default());
        s.feed(b"M\0\0\0\x08\0\0\0\0");
        assert_eq!(
            s.split(),
            Err(DecodeError::InvalidLength {
                length: 8,
                offset: 1
            })
        );

        // Over the limit: rejected on the header alone.
        let mut s = Splitter::default();
        s.set_phase(SplitPhase::Typed);
        s.feed(b"M\0\x10\0\0");
        assert!(matches!(s.split(), Err(DecodeError::TooLarge { .. })));

        // Ordinary frame with a bad length.
        let mut s = Splitter::with_phase(SplitPhase::Typed, Limits::default());
        s.feed(b"Q\0\0\0\x02");
        assert!(matches!(s.split(), Err(DecodeError::InvalidLength { .. })));
    }

    #[test]
    fn opaque_and_cancel_phases() {
        let mut s = Splitter::default();
        let mut input = BytesMut::new();
        encode_ssl_request(&mut input);
        s.feed(&input);
        let (fwd, _, _) = drain(&mut s);
        assert_eq!(fwd.len(), 8);
        s.set_phase(SplitPhase::Opaque);
        s.feed(b"\x16\x03\x01M\0\0\0\0");
        let (fwd, mw, e) = drain(&mut s);
        assert_eq!((fwd.len(), mw.len(), e), (8, 0, None));

        let mut s = Splitter::default();
        let mut input = BytesMut::new();
        crate::frontend::encode_cancel_request(5, &[1, 2, 3, 4], &mut input).unwrap();
        input.put_u8(b'Q');
        s.feed(&input);
        let (fwd, _, e) = drain(&mut s);
        assert_eq!(fwd.len(), 16);
        assert!(e.is_some());
    }
}
