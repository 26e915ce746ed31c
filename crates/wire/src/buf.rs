//! A bounds-checked reader over a borrowed message body, and the decode error every module
//! of this crate reports. Nothing here panics on short or hostile input.

/// Why bytes from a peer (or a capture) could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The message ended before a field did.
    #[error("unexpected end of message at offset {offset}: {needed} more byte(s) needed")]
    UnexpectedEnd {
        /// Offset (within the decoded unit) where the field started.
        offset: usize,
        /// How many more bytes the field needed.
        needed: usize,
    },
    /// A string field has no NUL terminator inside the message.
    #[error("string at offset {offset} has no NUL terminator")]
    MissingTerminator {
        /// Offset of the string's first byte.
        offset: usize,
    },
    /// A length field is impossible (below its minimum, negative, or beyond the message).
    #[error("invalid length {length} at offset {offset}")]
    InvalidLength {
        /// The length as read.
        length: i64,
        /// Offset of the length field.
        offset: usize,
    },
    /// A message claims more bytes than the configured maximum.
    #[error("message of {length} bytes exceeds the maximum of {max}")]
    TooLarge {
        /// The claimed length.
        length: usize,
        /// The configured maximum.
        max: usize,
    },
    /// A type byte this side of the protocol does not define.
    #[error("unknown message type {:?} (0x{tag:02x})", char::from(*.tag))]
    UnknownTag {
        /// The type byte.
        tag: u8,
    },
    /// Bytes left over after every field of a message was read.
    #[error("{count} unexpected trailing byte(s) at offset {offset}")]
    TrailingBytes {
        /// Offset of the first extra byte.
        offset: usize,
        /// How many.
        count: usize,
    },
    /// A count (fields, parameters, columns) that the message cannot hold or that is negative.
    #[error("invalid count {count} at offset {offset}")]
    InvalidCount {
        /// The count as read.
        count: i64,
        /// Offset of the count field.
        offset: usize,
    },
    /// Any other field whose value is not allowed.
    #[error("invalid {what} at offset {offset}")]
    Invalid {
        /// What was wrong.
        what: &'static str,
        /// Offset of the field.
        offset: usize,
    },
}

/// A cursor over a borrowed message body. Every getter checks the remaining length first.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Added to positions in errors, so offsets refer to the enclosing unit (frame, file).
    base: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` whose error offsets start at 0.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader {
            buf,
            pos: 0,
            base: 0,
        }
    }

    /// A reader over `buf` whose error offsets start at `base`.
    pub fn with_base(buf: &'a [u8], base: usize) -> Self {
        Reader { buf, pos: 0, base }
    }

    /// The current offset, as errors report it.
    #[inline]
    pub fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The unread bytes, without consuming them.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }

    /// Whether everything was read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Fails unless everything was read.
    #[inline]
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes {
                offset: self.offset(),
                count: self.remaining(),
            })
        }
    }

    /// The next `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.remaining() < n {
            return Err(DecodeError::UnexpectedEnd {
                offset: self.offset(),
                needed: n - self.remaining(),
            });
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    /// Everything that is left.
    #[inline]
    pub fn take_rest(&mut self) -> &'a [u8] {
        let out = &self.buf[self.pos..];
        self.pos = self.buf.len();
        out
    }

    /// One byte.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.bytes(1)?[0])
    }

    /// A big-endian `i16`.
    #[inline]
    pub fn i16(&mut self) -> Result<i16, DecodeError> {
        let b = self.bytes(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian `u16`.
    #[inline]
    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian `i32`.
    #[inline]
    pub fn i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.bytes(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian `u32`.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian `i64`.
    #[inline]
    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    /// A big-endian `u64`.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A NUL-terminated string, without its terminator (bytes: not checked for UTF-8).
    #[inline]
    pub fn cstr(&mut self) -> Result<&'a [u8], DecodeError> {
        let rest = self.rest();
        // Empty names (the unnamed statement and portal) are the common case: no search.
        let end = if rest.first() == Some(&0) {
            Some(0)
        } else {
            memchr::memchr(0, rest)
        };
        match end {
            Some(n) => {
                self.pos += n + 1;
                Ok(&rest[..n])
            }
            None => Err(DecodeError::MissingTerminator {
                offset: self.offset(),
            }),
        }
    }

    /// An `Int32` length followed by that many bytes, where -1 means NULL (`None`).
    #[inline]
    pub fn nullable_bytes(&mut self) -> Result<Option<&'a [u8]>, DecodeError> {
        let at = self.offset();
        let len = self.i32()?;
        if len == -1 {
            return Ok(None);
        }
        if len < 0 {
            return Err(DecodeError::InvalidLength {
                length: len.into(),
                offset: at,
            });
        }
        let n = len as usize;
        if n > self.remaining() {
            return Err(DecodeError::InvalidLength {
                length: len.into(),
                offset: at,
            });
        }
        self.bytes(n).map(Some)
    }

    /// A non-negative `Int16` count that cannot exceed what `min_item_bytes`-sized items could
    /// fill in the rest of the message (so no caller allocates by a hostile count).
    pub fn count16(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.offset();
        let n = self.i16()?;
        self.check_count(n.into(), at, min_item_bytes)
    }

    /// Like [`Reader::count16`] for an `Int32` count.
    pub fn count32(&mut self, min_item_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.offset();
        let n = self.i32()?;
        self.check_count(n.into(), at, min_item_bytes)
    }

    fn check_count(&self, n: i64, at: usize, min_item_bytes: usize) -> Result<usize, DecodeError> {
        if n < 0 || (n as usize).saturating_mul(min_item_bytes) > self.remaining() {
            return Err(DecodeError::InvalidCount {
                count: n,
                offset: at,
            });
        }
        Ok(n as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getters_check_lengths_and_report_offsets() {
        let mut r = Reader::with_base(&[0, 1, b'a', 0, 0xff], 10);
        assert_eq!(r.i16(), Ok(1));
        assert_eq!(r.cstr(), Ok(&b"a"[..]));
        assert_eq!(
            r.i32(),
            Err(DecodeError::UnexpectedEnd {
                offset: 14,
                needed: 3
            })
        );
        assert_eq!(r.u8(), Ok(0xff));
        assert_eq!(r.finish(), Ok(()));
        let mut r = Reader::new(b"abc");
        assert_eq!(r.cstr(), Err(DecodeError::MissingTerminator { offset: 0 }));
    }

    #[test]
    fn counts_and_lengths_cannot_overrun() {
        let mut r = Reader::new(&[0x7f, 0xff, 0, 0]);
        assert_eq!(
            r.count16(1),
            Err(DecodeError::InvalidCount {
                count: 32767,
                offset: 0
            })
        );
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(r.nullable_bytes(), Ok(None));
        let mut r = Reader::new(&[0, 0, 0, 9, 1]);
        assert_eq!(
            r.nullable_bytes(),
            Err(DecodeError::InvalidLength {
                length: 9,
                offset: 0
            })
        );
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xfe]);
        assert_eq!(
            r.nullable_bytes(),
            Err(DecodeError::InvalidLength {
                length: -2,
                offset: 0
            })
        );
    }
}
