//! Query results: RowDescription and DataRow, the hot path of a result set.

use bytes::{BufMut, BytesMut};

use super::tag;
use crate::buf::{DecodeError, Reader};
use crate::frame::{
    count_u16, put_cstr, put_frame, put_values, values_size, EncodeError, Values, ValuesIter,
};

/// DataRow: one row's column values, validated on decode and iterated without allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataRow<'a> {
    values: Values<'a>,
}

impl<'a> DataRow<'a> {
    /// Wraps already-encoded values; the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_values(values: Values<'a>) -> Self {
        DataRow { values }
    }

    /// Decodes a `D` body: reads the count and checks every length once.
    #[inline]
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let values = Values::read(&mut r)?;
        r.finish()?;
        Ok(DataRow { values })
    }

    /// Number of columns.
    #[inline]
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the row has no columns.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The column values in order: `Some(bytes)` or `None` for SQL NULL.
    #[inline]
    pub fn fields(&self) -> ValuesIter<'a> {
        self.values.iter()
    }

    /// The values as a [`Values`] view.
    pub fn values(&self) -> Values<'a> {
        self.values
    }

    /// Encodes the row.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag::DATA_ROW, 2 + self.values.raw().len(), |b| {
            self.values.put(b);
            Ok(())
        })
    }
}

/// A DataRow read in one pass: only the column count is checked up front, and each value's
/// length is checked as [`DataRowFields`] reaches it. For callers that visit every field
/// anyway (drivers turning rows into values), this halves the work of [`DataRow::decode`]
/// followed by [`DataRow::fields`]; a malformed row still ends in a [`DecodeError`].
#[derive(Clone, Debug)]
pub struct DataRowFields<'a> {
    rest: &'a [u8],
    left: u16,
    /// The body's length: `rest` starts at `body_len - rest.len()`, worked out only for an
    /// error's position (an offset kept up to date cost an add and a store per field).
    body_len: usize,
}

impl<'a> DataRowFields<'a> {
    /// Starts reading a `D` body.
    #[inline]
    pub fn new(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let n = crate::frame::read_count_u16(&mut r, 4)?;
        Ok(DataRowFields {
            rest: r.rest(),
            left: n as u16,
            body_len: body.len(),
        })
    }

    /// Number of columns the row claims.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.left)
    }

    /// Whether no columns are left to read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl<'a> Iterator for DataRowFields<'a> {
    type Item = Result<Option<&'a [u8]>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        if self.left == 0 {
            if rest.is_empty() {
                return None;
            }
            // Report the leftover bytes once, then stop.
            self.rest = &[];
            return Some(Err(DecodeError::TrailingBytes {
                offset: self.body_len - rest.len(),
                count: rest.len(),
            }));
        }
        self.left -= 1;
        let Some(head) = rest.first_chunk::<4>() else {
            self.left = 0;
            self.rest = &[];
            return Some(Err(DecodeError::UnexpectedEnd {
                offset: self.body_len - rest.len(),
                needed: 4 - rest.len(),
            }));
        };
        let len = i32::from_be_bytes(*head);
        let after_len = &rest[4..];
        // A negative length turns into a huge one here, so one comparison covers both bounds.
        if let Some((value, next)) = after_len.split_at_checked(len as u32 as usize) {
            self.rest = next;
            return Some(Ok(Some(value)));
        }
        if len == -1 {
            self.rest = after_len;
            return Some(Ok(None));
        }
        let offset = self.body_len - rest.len();
        self.left = 0;
        self.rest = &[];
        Some(Err(DecodeError::InvalidLength {
            length: len.into(),
            offset,
        }))
    }
}

/// Writes a DataRow.
#[inline]
pub fn encode_data_row(fields: &[Option<&[u8]>], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::DATA_ROW, values_size(fields), |b| {
        put_values(b, fields)
    })
}

/// One column of a RowDescription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDescription<'a> {
    /// Column name.
    pub name: &'a [u8],
    /// Table OID, or 0.
    pub table_oid: u32,
    /// Attribute number in that table, or 0.
    pub column_id: i16,
    /// Data type OID.
    pub type_oid: u32,
    /// `pg_type.typlen` (negative for variable width).
    pub type_size: i16,
    /// Type modifier.
    pub type_modifier: i32,
    /// Format code (0 text, 1 binary).
    pub format: i16,
}

impl<'a> FieldDescription<'a> {
    /// A `text` column of no table, in text format: how a server describes a computed
    /// column such as `SELECT set_config(…)` or `SHOW …`.
    pub fn text(name: &'a [u8]) -> Self {
        FieldDescription {
            name,
            table_oid: 0,
            column_id: 0,
            type_oid: 25,
            type_size: -1,
            type_modifier: -1,
            format: 0,
        }
    }
}

/// Fixed bytes after a RowDescription field's name.
const FIELD_FIXED_BYTES: usize = 18;

/// RowDescription: validated on decode, fields iterated without allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowDescription<'a> {
    count: u16,
    raw: &'a [u8],
}

impl<'a> RowDescription<'a> {
    /// Wraps `count` already-encoded field descriptions; the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(count: u16, raw: &'a [u8]) -> Self {
        RowDescription { count, raw }
    }

    /// Decodes a `T` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let n = crate::frame::read_count_u16(&mut r, FIELD_FIXED_BYTES + 1)?;
        let raw = r.rest();
        for _ in 0..n {
            r.cstr()?;
            r.bytes(FIELD_FIXED_BYTES)?;
        }
        r.finish()?;
        Ok(RowDescription {
            count: n as u16,
            raw,
        })
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether there are no columns.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The column descriptions in order.
    pub fn fields(&self) -> RowDescriptionIter<'a> {
        RowDescriptionIter {
            r: Reader::new(self.raw),
            left: self.count,
        }
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag::ROW_DESCRIPTION, 2 + self.raw.len(), |b| {
            b.put_u16(self.count);
            b.put_slice(self.raw);
            Ok(())
        })
    }
}

/// Iterator over [`RowDescription`] fields.
#[derive(Clone, Debug)]
pub struct RowDescriptionIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for RowDescriptionIter<'a> {
    type Item = FieldDescription<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated on decode; the `ok()?`s cannot trigger.
        let r = &mut self.r;
        Some(FieldDescription {
            name: r.cstr().ok()?,
            table_oid: r.u32().ok()?,
            column_id: r.i16().ok()?,
            type_oid: r.u32().ok()?,
            type_size: r.i16().ok()?,
            type_modifier: r.i32().ok()?,
            format: r.i16().ok()?,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(self.left), Some(usize::from(self.left)))
    }
}

/// Writes a RowDescription.
pub fn encode_row_description(
    fields: &[FieldDescription<'_>],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = 2 + fields
        .iter()
        .map(|f| f.name.len() + 1 + FIELD_FIXED_BYTES)
        .sum::<usize>();
    put_frame(buf, tag::ROW_DESCRIPTION, size, |b| {
        b.put_u16(count_u16(fields.len(), "column count")?);
        for f in fields {
            put_cstr(b, f.name, "column name")?;
            b.put_u32(f.table_oid);
            b.put_i16(f.column_id);
            b.put_u32(f.type_oid);
            b.put_i16(f.type_size);
            b.put_i32(f.type_modifier);
            b.put_i16(f.format);
        }
        Ok(())
    })
}
