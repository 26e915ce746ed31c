//! [`arbitrary`] generators of valid messages, for structure-aware fuzzing and property tests
//! (feature `arbitrary`).
//!
//! # Design: owned generators that lend borrowed messages
//!
//! The wire types borrow (`FrontendMessage<'a>` …), and several of them are lazy views
//! ([`Values`](crate::frame::Values), [`CStrs`](crate::frame::CStrs), DataRow, RowDescription,
//! ErrorFields, startup parameters) whose bytes must already be a valid encoding. A fuzz input
//! almost never contains those bytes, so a borrowed `Arbitrary` impl could not point at them.
//! Each family therefore has one owned type that implements [`arbitrary::Arbitrary`], `Clone`
//! and `Debug`: it owns every field (the lazy views pre-encoded into its own buffers) and lends
//! the message with a `message()` method. It outlives the fuzz input, so it also serves as a
//! proptest strategy:
//!
//! ```
//! use arbitrary::{Arbitrary, Unstructured};
//! use pgyard_wire::arb::OwnedFrontend;
//! use proptest::prelude::*;
//!
//! let messages = proptest::collection::vec(any::<u8>(), 0..512)
//!     .prop_map(|b| OwnedFrontend::arbitrary(&mut Unstructured::new(&b)).expect("never fails"));
//! proptest!(|(m in messages)| {
//!     let mut wire = bytes::BytesMut::new();
//!     m.message().encode(&mut wire).expect("generated messages encode");
//!     prop_assert_eq!(wire[0], m.message().tag());
//! });
//! ```
//!
//! Every generated message is one the encoders accept and the decoders must read back
//! unchanged; `pgyard_wire::fuzzing::roundtrip_*` (feature `fuzzing`) check exactly that. The
//! generators lean toward the edges: empty and maximal lengths and counts at the limits of
//! their length/count fields, NULL (-1) values, odd counts, non-UTF-8 bytes, 3.2's long cancel
//! keys. An exhausted input yields the smallest message of the first variant, never an error.

use arbitrary::{Result, Unstructured};

mod backend;
mod frontend;
mod middleware;
mod pgoutput;
mod replication;
mod scram;

pub use backend::OwnedBackend;
pub use frontend::{OwnedFrontend, OwnedStartup};
pub use middleware::OwnedMiddleware;
pub use pgoutput::OwnedPgOutput;
pub use replication::OwnedReplication;
pub use scram::ScramExchange;

#[cfg(test)]
mod tests;

/// How often (one in N choices) a generator goes for a maximal size: rare, because a maximal
/// count can mean hundreds of kilobytes per message.
const HUGE_ONE_IN: u32 = 48;

/// Picks a length in `0..=max`, biased toward 0, 1, `max` and `max - 1`; otherwise small (an
/// arbitrary length limited to `typical`).
pub(super) fn edge_len(u: &mut Unstructured<'_>, typical: usize, max: usize) -> Result<usize> {
    let typical = typical.min(max);
    Ok(match u.int_in_range(0u32..=15)? {
        0 => 0,
        1 => 1.min(max),
        2 => max.saturating_sub(1),
        3 if u.ratio(1, HUGE_ONE_IN / 8)? => max,
        // Odd counts catch code that pairs items up.
        4 => (u.int_in_range(0..=typical / 2)? * 2 + 1).min(max),
        _ => u.int_in_range(0..=typical)?,
    })
}

/// Byte string for a field that carries raw bytes: often empty, often non-UTF-8, sometimes
/// long (up to `max`).
pub(super) fn bytes(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u8>> {
    let mut s = match u.int_in_range(0u32..=11)? {
        0 => Vec::new(),
        // Invalid UTF-8 alone and mixed into text.
        1 => vec![0xff],
        2 => b"\xc3\x28 caf\xe9 \xf0\x9f\x98".to_vec(),
        3 if u.ratio(1, HUGE_ONE_IN / 4)? => vec![0x80; max],
        4 => {
            let n = edge_len(u, 64, max)?;
            let fill: u8 = u.arbitrary()?;
            vec![fill; n]
        }
        _ => {
            let n = u.arbitrary_len::<u8>()?.min(max);
            u.bytes(n)?.to_vec()
        }
    };
    s.truncate(max);
    Ok(s)
}

/// A C string's content: like [`bytes`] with every NUL turned into a non-UTF-8 byte (a NUL
/// would end the string early), sometimes `\x01`-only text to sit next to the terminator.
pub(super) fn cstr(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u8>> {
    let mut s = bytes(u, max)?;
    for b in &mut s {
        if *b == 0 {
            *b = 0xfe;
        }
    }
    Ok(s)
}

/// A non-empty C string, for names in lists that an empty string would end (startup
/// parameters, SASL mechanisms).
pub(super) fn nonempty_cstr(u: &mut Unstructured<'_>, max: usize) -> Result<Vec<u8>> {
    let mut s = cstr(u, max.max(1))?;
    if s.is_empty() {
        s.push(u.int_in_range(1u8..=255)?);
    }
    Ok(s)
}

/// Now and then (one in 24) a field of exactly `len` or `len + 1` bytes: sized so that its
/// message's length word lands on a receiver's limit or one past it.
pub(super) fn at_limit(u: &mut Unstructured<'_>, len: usize) -> Result<Option<Vec<u8>>> {
    Ok(if u.ratio(1, 24)? {
        let n = len + usize::from(u.arbitrary::<bool>()?);
        Some(vec![b'x'; n])
    } else {
        None
    })
}

/// A NULL (`None`) or a byte string, NULL about one time in four.
pub(super) fn nullable(u: &mut Unstructured<'_>, max: usize) -> Result<Option<Vec<u8>>> {
    Ok(if u.ratio(1, 4)? {
        None
    } else {
        Some(bytes(u, max)?)
    })
}

/// Integers biased toward their edges (0, ±1, MIN, MAX) and otherwise arbitrary.
pub(super) trait Edge: Sized {
    /// One edge-biased value.
    fn edge(u: &mut Unstructured<'_>) -> Result<Self>;
}

macro_rules! edge_ints {
    ($($t:ty),*) => {$(
        impl Edge for $t {
            fn edge(u: &mut Unstructured<'_>) -> Result<Self> {
                // -1 for the signed types (a NULL length, "no limit"), MAX again for the others.
                let minus_one = <$t>::MIN.wrapping_add(<$t>::MAX);
                Ok(match u.int_in_range(0u32..=7)? {
                    0 => 0,
                    1 => 1,
                    2 => <$t>::MAX,
                    3 => <$t>::MIN,
                    4 => minus_one,
                    _ => u.arbitrary()?,
                })
            }
        }
    )*};
}

edge_ints!(i16, u16, i32, u32, i64, u64);

/// An edge-biased integer.
pub(super) fn edge<T: Edge>(u: &mut Unstructured<'_>) -> Result<T> {
    T::edge(u)
}

/// Encoded values for a [`Values`](crate::frame::Values) view: a u16 count, each value NULL or
/// length-prefixed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct RawValues {
    pub(super) count: u16,
    pub(super) raw: Vec<u8>,
}

impl RawValues {
    /// Up to 65,535 values; past a few hundred they stay NULL or tiny to bound the size.
    pub(super) fn arbitrary(u: &mut Unstructured<'_>) -> Result<Self> {
        let count = edge_len(u, 8, usize::from(u16::MAX))?;
        let each = if count > 256 { 2 } else { 512 };
        let mut raw = Vec::new();
        for _ in 0..count {
            match nullable(u, each)? {
                None => raw.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(v) => {
                    raw.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    raw.extend_from_slice(&v);
                }
            }
        }
        Ok(RawValues {
            count: count as u16,
            raw,
        })
    }

    /// The borrowed view.
    pub(super) fn view(&self) -> crate::frame::Values<'_> {
        crate::frame::Values::from_raw(self.count, &self.raw)
    }
}

/// Encoded format codes (a u16 count of i16s), mostly 0 (text) and 1 (binary).
pub(super) fn format_codes(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let n = edge_len(u, 4, usize::from(u16::MAX))?;
    let mut raw = Vec::with_capacity(2 * n);
    for _ in 0..n {
        let code: i16 = match u.int_in_range(0u8..=3)? {
            0 | 1 => 0,
            2 => 1,
            _ => edge(u)?,
        };
        raw.extend_from_slice(&code.to_be_bytes());
    }
    Ok(raw)
}

/// Encoded OIDs (a u16 count of u32s).
pub(super) fn oids(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let n = edge_len(u, 4, usize::from(u16::MAX))?;
    let mut raw = Vec::with_capacity(4 * n);
    for _ in 0..n {
        raw.extend_from_slice(&edge::<u32>(u)?.to_be_bytes());
    }
    Ok(raw)
}
