//! [`FrameDecoder`]: the incremental, phase-aware decoder over an owned buffer.

use bytes::{Buf, Bytes, BytesMut};

use super::{
    check_length, check_startup_length, startup_code, Decoded, EncryptionRequest, Frame, FrameRef,
    Limits, Phase, StartupFrame, StartupKind, Unit, UnitRef, HEADER_BYTES, TLS_HANDSHAKE_BYTE,
};
use crate::buf::DecodeError;

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
