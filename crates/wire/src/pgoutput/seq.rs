//! Lists inside pgoutput messages ([`Seq`]): validated once on decode, then iterated lazily;
//! also built from slices to encode generated streams.

use std::fmt;

use bytes::{BufMut, BytesMut};

use super::decode::{flag, sized_bytes};
use super::encode::put_sized;
use super::{EncodeError, Oid, RelationColumn, TupleValue};
use crate::buf::{DecodeError, Reader};
use crate::frame::put_cstr;

/// The element types of [`Seq`]: how one element is read and written.
pub trait SeqItem<'a>: Copy + PartialEq + fmt::Debug {
    /// The fewest bytes one element takes on the wire (bounds counts read from a peer).
    const MIN_BYTES: usize;
    /// Reads one element.
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError>;
    /// Writes one element.
    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError>;
}

/// A list inside a message: tuple values, relation columns or relation OIDs.
///
/// A decoded list borrows its validated bytes and decodes elements as it is iterated; a list
/// built for encoding borrows a slice. Equality compares elements, whatever the source.
#[derive(Clone, Copy)]
pub struct Seq<'a, T> {
    repr: Repr<'a, T>,
}

#[derive(Clone, Copy)]
enum Repr<'a, T> {
    Wire {
        count: usize,
        bytes: &'a [u8],
        base: usize,
    },
    Slice(&'a [T]),
}

/// The columns of a row change (`TupleData`).
pub type TupleData<'a> = Seq<'a, TupleValue<'a>>;

/// Iterator over a [`Seq`].
#[derive(Clone, Debug)]
pub struct SeqIter<'a, T> {
    inner: IterRepr<'a, T>,
}

#[derive(Clone, Debug)]
enum IterRepr<'a, T> {
    Wire { r: Reader<'a>, left: usize },
    Slice(std::slice::Iter<'a, T>),
}

impl<'a, T: SeqItem<'a>> Seq<'a, T> {
    /// A list of the given elements, for encoding.
    pub fn from_slice(items: &'a [T]) -> Self {
        Seq {
            repr: Repr::Slice(items),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self.repr {
            Repr::Wire { count, .. } => count,
            Repr::Slice(s) => s.len(),
        }
    }

    /// Whether the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in order.
    pub fn iter(&self) -> SeqIter<'a, T> {
        let inner = match self.repr {
            Repr::Wire { count, bytes, base } => IterRepr::Wire {
                r: Reader::with_base(bytes, base),
                left: count,
            },
            Repr::Slice(s) => IterRepr::Slice(s.iter()),
        };
        SeqIter { inner }
    }

    /// Reads `count` elements (already checked against the remaining bytes) and keeps their
    /// bytes.
    /// Wraps `count` already-encoded items; the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_wire(count: usize, bytes: &'a [u8]) -> Self {
        Seq {
            repr: Repr::Wire {
                count,
                bytes,
                base: 0,
            },
        }
    }

    pub(super) fn read(r: &mut Reader<'a>, count: usize) -> Result<Self, DecodeError> {
        let base = r.offset();
        let start = r.rest();
        for _ in 0..count {
            T::read(r)?;
        }
        let used = start.len() - r.remaining();
        Ok(Seq {
            repr: Repr::Wire {
                count,
                bytes: &start[..used],
                base,
            },
        })
    }

    pub(super) fn write_items(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        match self.repr {
            Repr::Wire { bytes, .. } => out.extend_from_slice(bytes),
            Repr::Slice(items) => {
                for item in items {
                    item.write(out)?;
                }
            }
        }
        Ok(())
    }
}

impl<'a, T: SeqItem<'a>> Iterator for SeqIter<'a, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match &mut self.inner {
            IterRepr::Wire { r, left } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // The bytes were validated when the list was decoded, so this read succeeds;
                // should it not, the iteration just ends.
                match T::read(r) {
                    Ok(item) => Some(item),
                    Err(_) => {
                        *left = 0;
                        None
                    }
                }
            }
            IterRepr::Slice(it) => it.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            IterRepr::Wire { left, .. } => (0, Some(*left)),
            IterRepr::Slice(it) => it.size_hint(),
        }
    }
}

impl<'a, T: SeqItem<'a>> IntoIterator for Seq<'a, T> {
    type Item = T;
    type IntoIter = SeqIter<'a, T>;
    fn into_iter(self) -> SeqIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: SeqItem<'a>> IntoIterator for &Seq<'a, T> {
    type Item = T;
    type IntoIter = SeqIter<'a, T>;
    fn into_iter(self) -> SeqIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: SeqItem<'a>> PartialEq for Seq<'a, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<'a, T: SeqItem<'a>> Eq for Seq<'a, T> {}

impl<'a, T: SeqItem<'a>> fmt::Debug for Seq<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> SeqItem<'a> for TupleValue<'a> {
    const MIN_BYTES: usize = 1;

    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let at = r.offset();
        match r.u8()? {
            b'n' => Ok(TupleValue::Null),
            b'u' => Ok(TupleValue::UnchangedToast),
            b't' => Ok(TupleValue::Text(sized_bytes(r)?)),
            b'b' => Ok(TupleValue::Binary(sized_bytes(r)?)),
            _ => Err(DecodeError::Invalid {
                what: "tuple column kind (expected 'n', 'u', 't' or 'b')",
                offset: at,
            }),
        }
    }

    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            TupleValue::Null => out.put_u8(b'n'),
            TupleValue::UnchangedToast => out.put_u8(b'u'),
            TupleValue::Text(v) => {
                out.put_u8(b't');
                put_sized(out, v, "tuple value")?;
            }
            TupleValue::Binary(v) => {
                out.put_u8(b'b');
                put_sized(out, v, "tuple value")?;
            }
        }
        Ok(())
    }
}

impl<'a> SeqItem<'a> for RelationColumn<'a> {
    // flags, an empty name's NUL, type OID, type modifier
    const MIN_BYTES: usize = 1 + 1 + 4 + 4;

    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let key = flag(r, "relation column flags")?;
        Ok(RelationColumn {
            key,
            name: r.cstr()?,
            type_oid: r.u32()?,
            type_modifier: r.i32()?,
        })
    }

    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u8(self.key.into());
        put_cstr(out, self.name, "column name")?;
        out.put_u32(self.type_oid);
        out.put_i32(self.type_modifier);
        Ok(())
    }
}

impl<'a> SeqItem<'a> for Oid {
    const MIN_BYTES: usize = 4;

    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        r.u32()
    }

    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u32(*self);
        Ok(())
    }
}
