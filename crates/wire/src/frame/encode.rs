//! The encode error every message module reports, and the encode helpers they share.

use bytes::{BufMut, BytesMut};

use super::HEADER_BYTES;

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
