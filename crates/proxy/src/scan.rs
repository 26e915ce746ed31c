//! A cut-through frame scanner: it finds the frames in a byte stream without holding their
//! bodies back, so a relay forwards each chunk as it arrives (a large DataRow or CopyData is
//! never buffered whole). Only a frame header split across reads is held, until its fifth
//! byte arrives, so every forwarded chunk starts on a known frame boundary or inside a body;
//! and the frames of the few types a caller must not let through in part (a client's
//! Terminate, which the proxy keeps) are held until whole. The bodies of a few small message
//! types the proxy must read (ReadyForQuery, ParameterStatus) are copied aside as they pass.

use bytes::{Bytes, BytesMut};
use pgyard_wire::frame::Limits;
use pgyard_wire::DecodeError;

/// Longest body the scanner copies aside.
pub const CAPTURE_MAX: usize = 64 * 1024;

/// A frame that ended within a scanned chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The type byte.
    pub tag: u8,
    /// Where the frame starts in the chunk (`None`: in an earlier chunk).
    pub start: Option<usize>,
    /// Where it ends in the chunk (exclusive).
    pub end: usize,
    /// The body, for the captured types: a slice of the chunk when the frame came whole.
    pub body: Option<Bytes>,
}

/// What one call hands out: bytes safe to forward, and the frames that ended in them.
#[derive(Debug, Default)]
pub struct Scanned {
    /// The bytes, in stream order (the held header bytes of the last call first).
    pub bytes: Bytes,
    /// The frames that ended in `bytes`, in order.
    pub frames: Vec<Frame>,
}

/// The scanner's position in the stream.
#[derive(Debug)]
pub struct Scanner {
    limits: Limits,
    capture: fn(u8) -> bool,
    /// The types whose frames are held until whole (see [`Scanner::holding`]).
    hold: fn(u8) -> bool,
    /// Header bytes of the next frame held from the last chunk (or all of a held type's
    /// frame so far).
    held: Vec<u8>,
    /// The frame under way: its tag, body bytes still to come, and its captured body.
    tag: u8,
    left: usize,
    body: Option<Vec<u8>>,
    /// Sticky error.
    error: Option<DecodeError>,
}

impl Scanner {
    /// A scanner at a frame boundary, checking lengths against `limits` and copying the
    /// bodies of the types `capture` selects.
    pub fn new(limits: Limits, capture: fn(u8) -> bool) -> Self {
        Scanner {
            limits,
            capture,
            hold: |_| false,
            held: Vec::new(),
            tag: 0,
            left: 0,
            body: None,
            error: None,
        }
    }

    /// The same scanner, handing out no byte of a frame of the types `hold` selects until the
    /// whole frame has come (bounded by the type's limit), so a caller that keeps such frames
    /// never forwards part of one.
    pub fn holding(mut self, hold: fn(u8) -> bool) -> Self {
        self.hold = hold;
        self
    }

    /// Whether the scanner stands between frames with nothing held.
    pub fn at_boundary(&self) -> bool {
        self.left == 0 && self.held.is_empty() && self.body.is_none()
    }

    /// Whether part of a frame has been handed out (its header, maybe some of its body) and
    /// the rest is still to come; header bytes held back do not count.
    pub fn inside_frame(&self) -> bool {
        self.left > 0
    }

    /// Whether a frame of `tag` whose length word is `len` passes the checks of
    /// [`Scanner::scan`].
    pub fn accepts(&self, tag: u8, len: i32) -> bool {
        self.check(tag, len, (self.capture)(tag), 0).is_ok()
    }

    /// Scans the next chunk. An error (a length below 4 or over the type's limit) is sticky.
    pub fn scan(&mut self, data: Bytes) -> Result<Scanned, DecodeError> {
        // A reply to one extended-protocol query has about six frames: room for them at once.
        self.scan_reusing(data, Vec::with_capacity(8))
    }

    /// [`Scanner::scan`], listing the frames in `frames` (cleared first): a relay that hands
    /// the list back each time allocates none per chunk.
    pub fn scan_reusing(
        &mut self,
        data: Bytes,
        mut frames: Vec<Frame>,
    ) -> Result<Scanned, DecodeError> {
        frames.clear();
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let bytes = if self.held.is_empty() {
            data
        } else {
            let mut joined = BytesMut::with_capacity(self.held.len() + data.len());
            joined.extend_from_slice(&self.held);
            joined.extend_from_slice(&data);
            self.held.clear();
            joined.freeze()
        };
        let mut pos = 0;
        let mut start = None;
        loop {
            if self.left > 0 || self.body.is_some() {
                let take = self.left.min(bytes.len() - pos);
                if let Some(b) = &mut self.body {
                    b.extend_from_slice(&bytes[pos..pos + take]);
                }
                pos += take;
                self.left -= take;
                if self.left > 0 {
                    break;
                }
                frames.push(Frame {
                    tag: self.tag,
                    start: start.take(),
                    end: pos,
                    body: self.body.take().map(Bytes::from),
                });
            }
            let rest = &bytes[pos..];
            if rest.len() < 5 {
                self.held.extend_from_slice(rest);
                break;
            }
            let (tag, len) = (
                rest[0],
                i32::from_be_bytes([rest[1], rest[2], rest[3], rest[4]]),
            );
            let captured = (self.capture)(tag);
            if let Err(e) = self.check(tag, len, captured, pos) {
                self.error = Some(e.clone());
                return Err(e);
            }
            self.tag = tag;
            let left = len as usize - 4;
            let (from, end) = (pos, pos + 5 + left);
            if end <= bytes.len() {
                // The whole frame is in this chunk: its body is a slice of it, not a copy.
                frames.push(Frame {
                    tag,
                    start: Some(from),
                    end,
                    body: captured.then(|| bytes.slice(from + 5..end)),
                });
                pos = end;
                continue;
            }
            if (self.hold)(tag) {
                self.held.extend_from_slice(rest);
                break;
            }
            self.left = left;
            self.body = captured.then(|| Vec::with_capacity(left));
            start = Some(pos);
            pos += 5;
        }
        let safe = bytes.len() - self.held.len();
        Ok(Scanned {
            bytes: bytes.slice(..safe),
            frames,
        })
    }

    fn check(&self, tag: u8, len: i32, captured: bool, offset: usize) -> Result<(), DecodeError> {
        let too_long = usize::try_from(len).is_ok_and(|l| l > self.limits.tag_max(tag));
        if len < 4 || too_long {
            return Err(DecodeError::InvalidLength {
                length: len.into(),
                offset,
            });
        }
        if captured && len as usize - 4 > CAPTURE_MAX {
            return Err(DecodeError::Invalid {
                what: "message body too long for its type",
                offset,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![tag];
        v.extend_from_slice(&(body.len() as i32 + 4).to_be_bytes());
        v.extend_from_slice(body);
        v
    }

    fn stream() -> Vec<u8> {
        let mut s = frame(b'T', b"rowdesc");
        s.extend(frame(b'D', &[7; 300]));
        s.extend(frame(b'S', b"TimeZone\0UTC\0"));
        s.extend(frame(b'C', b"SELECT 1\0"));
        s.extend(frame(b'Z', b"I"));
        s
    }

    /// A frame seen: tag, absolute end, captured body.
    type Seen = (u8, usize, Option<Vec<u8>>);

    /// Scans `data` cut at `cuts`; the forwarded bytes and the frames.
    fn scan_cut(data: &[u8], cuts: &[usize]) -> (Vec<u8>, Vec<Seen>) {
        let mut s = Scanner::new(Limits::libpq_client(), |t| matches!(t, b'S' | b'Z'));
        let (mut out, mut seen) = (Vec::new(), Vec::new());
        let mut prev = 0;
        for &c in cuts.iter().chain(std::iter::once(&data.len())) {
            let got = s
                .scan(Bytes::copy_from_slice(&data[prev..c]))
                .expect("valid");
            for f in got.frames {
                seen.push((f.tag, out.len() + f.end, f.body.map(|b| b.to_vec())));
            }
            out.extend_from_slice(&got.bytes);
            prev = c;
        }
        assert!(s.at_boundary());
        (out, seen)
    }

    #[test]
    fn whole_stream_in_one_chunk() {
        let data = stream();
        let (out, seen) = scan_cut(&data, &[]);
        assert_eq!(out, data);
        let tags: Vec<u8> = seen.iter().map(|f| f.0).collect();
        assert_eq!(tags, b"TDSCZ");
        assert_eq!(seen[2].2.as_deref(), Some(&b"TimeZone\0UTC\0"[..]));
        assert_eq!(seen[4].2.as_deref(), Some(&b"I"[..]));
        assert_eq!(seen[4].1, data.len());
    }

    #[test]
    fn a_bad_length_is_an_error_and_sticks() {
        let mut s = Scanner::new(Limits::libpq_client(), |_| false);
        let bad = Bytes::from_static(&[b'Z', 0, 0, 0, 3]);
        assert!(s.scan(bad).is_err());
        assert!(s.scan(Bytes::from_static(b"x")).is_err());
        let mut s = Scanner::new(Limits::libpq_client(), |t| t == b'S');
        let long = Bytes::from_static(&[b'S', 0, 2, 0, 0]);
        assert!(s.scan(long).is_err(), "a captured body over CAPTURE_MAX");
    }

    #[test]
    fn a_captured_body_may_be_capture_max_long_and_no_longer() {
        let header = |body: usize| {
            let mut h = vec![b'S'];
            h.extend_from_slice(&(body as i32 + 4).to_be_bytes());
            Bytes::from(h)
        };
        // A type whose own limit is far above the capture's.
        let limits = || Limits::libpq_client().with_tag_max(b'S', 1 << 20);
        let mut s = Scanner::new(limits(), |t| t == b'S');
        assert!(s.scan(header(CAPTURE_MAX)).is_ok(), "exactly CAPTURE_MAX");
        let mut s = Scanner::new(limits(), |t| t == b'S');
        assert!(s.scan(header(CAPTURE_MAX + 1)).is_err(), "one byte more");
        // Not captured: only the type's own limit applies.
        let mut s = Scanner::new(limits(), |_| false);
        assert!(s.scan(header(CAPTURE_MAX + 1)).is_ok());
    }

    #[test]
    fn inside_a_frame_once_its_header_went_out() {
        let data = frame(b'E', b"SFATAL\0");
        let mut s = Scanner::new(Limits::libpq_client(), |_| false);
        let held = s.scan(Bytes::copy_from_slice(&data[..3])).expect("valid");
        assert!(held.bytes.is_empty() && !s.inside_frame() && !s.at_boundary());
        let part = s.scan(Bytes::copy_from_slice(&data[3..7])).expect("valid");
        assert_eq!(part.bytes.len(), 7);
        assert!(s.inside_frame());
        s.scan(Bytes::copy_from_slice(&data[7..])).expect("valid");
        assert!(!s.inside_frame() && s.at_boundary());
    }

    #[test]
    fn a_held_type_comes_out_whole_at_any_cut() {
        let mut data = frame(b'P', b"\0select 1\0\0\0");
        let x = data.len();
        data.extend(frame(b'X', &[9; 20]));
        for cut in 0..=data.len() {
            let mut s = Scanner::new(Limits::postgres_server(), |_| false).holding(|t| t == b'X');
            let first = s.scan(Bytes::copy_from_slice(&data[..cut])).expect("valid");
            // Nothing of the Terminate goes out before all of it has come (a cut inside the
            // Parse's header holds that header too).
            if cut < data.len() {
                assert!(first.bytes.len() <= cut.min(x), "cut at {cut}");
            }
            if (x..data.len()).contains(&cut) {
                assert_eq!(first.bytes.len(), x, "cut at {cut}");
            }
            let second = s.scan(Bytes::copy_from_slice(&data[cut..])).expect("valid");
            assert!(s.at_boundary());
            let mut out = first.bytes.to_vec();
            out.extend_from_slice(&second.bytes);
            assert_eq!(out, data);
            // Each chunk's bytes begin where the last one's ended.
            let mut seen = first.frames.iter().map(|f| (0, f));
            let mut then = second.frames.iter().map(|f| (first.bytes.len(), f));
            let (offset, terminate) = seen
                .find(|(_, f)| f.tag == b'X')
                .or_else(|| then.find(|(_, f)| f.tag == b'X'))
                .expect("the Terminate");
            assert_eq!(terminate.start.map(|s| s + offset), Some(x), "cut at {cut}");
        }
    }

    proptest! {
        #[test]
        fn any_cuts_give_the_same_bytes_and_frames(mut cuts in proptest::collection::vec(0usize..345, 0..12)) {
            let data = stream();
            cuts.retain(|&c| c <= data.len());
            cuts.sort_unstable();
            let whole = scan_cut(&data, &[]);
            prop_assert_eq!(scan_cut(&data, &cuts), whole);
        }
    }
}
