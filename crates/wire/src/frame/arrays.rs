//! Borrowed array views as lists sit on the wire (format codes, OIDs, nullable values, C
//! strings), validated once when read, and the writers of the same shapes.

use bytes::{BufMut, BytesMut};

use super::{count_u16, put_nullable, EncodeError};
use crate::buf::{DecodeError, Reader};

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
    /// Wraps already-encoded codes (two bytes each); the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(raw: &'a [u8]) -> Self {
        FormatCodes { raw }
    }

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
    /// Wraps already-encoded OIDs (four bytes each); the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(raw: &'a [u8]) -> Self {
        Oids { raw }
    }

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
    /// Wraps `count` already-encoded length-prefixed values; the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(count: u16, raw: &'a [u8]) -> Self {
        Values { count, raw }
    }

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
    /// Wraps `count` already-encoded C strings (each with its NUL); the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(raw: &'a [u8], count: usize) -> Self {
        CStrs { raw, count }
    }

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
