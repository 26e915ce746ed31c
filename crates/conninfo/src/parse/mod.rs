//! Phase 1 of libpq: the keyword/value grammar, the URI grammar and the keyword arrays.
//! No defaults, no validation of values: exactly what `PQconninfoParse` does.

use crate::{ConnInfo, Keyword, ParseError};

/// Makes `$fail` the nom error of a grammar whose own errors are variants of `$fail`: a plain
/// nom mismatch becomes `$fail::Mismatch`, and context is not accumulated (each failure
/// already names what broke).
macro_rules! mismatch_only_nom_error {
    ($fail:ident) => {
        impl<'a> nom::error::ParseError<&'a [u8]> for $fail<'a> {
            fn from_error_kind(_: &'a [u8], _: nom::error::ErrorKind) -> Self {
                $fail::Mismatch
            }

            fn append(_: &'a [u8], _: nom::error::ErrorKind, other: Self) -> Self {
                other
            }
        }
    };
}
use mismatch_only_nom_error;

mod keyword_value;
mod uri;
use keyword_value::parse_keyword_value;
use uri::parse_uri;

const URI_PREFIXES: [&[u8]; 2] = [b"postgresql://", b"postgres://"];

/// Length of the URI prefix `input` starts with, or 0 (libpq's `uri_prefix_length`).
fn uri_prefix_length(input: &[u8]) -> usize {
    URI_PREFIXES
        .iter()
        .find(|p| input.starts_with(p))
        .map_or(0, |p| p.len())
}

/// Whether libpq treats `input` as a URI: it starts with `postgresql://` or `postgres://`.
pub fn is_uri(input: &[u8]) -> bool {
    uri_prefix_length(input) != 0
}

/// Whether libpq treats `input` as a connection string when it appears as a `dbname`
/// (a URI, or anything containing `=`).
pub fn recognized_connection_string(input: &[u8]) -> bool {
    is_uri(input) || input.contains(&b'=')
}

/// Parses a connection string as `PQconninfoParse` does: URI form when it starts with a URI
/// prefix, keyword/value form otherwise.
pub fn parse(input: impl AsRef<[u8]>) -> Result<ConnInfo, ParseError> {
    let input = input.as_ref();
    let mut out = ConnInfo::with_capacity(input.len());
    parse_into(input, &mut out)?;
    Ok(out)
}

/// Where the grammar delivers each keyword/value pair it reads, in input order.
///
/// libpq's own sink ([`ConnInfo`]) lets the last occurrence win; a dialect may accumulate.
pub trait Sink {
    /// Takes one pair; `Err(())` means the keyword is unknown. Aliases (`requiressl`, the URI
    /// `ssl=true`) are already applied. The value is borrowed: copy what you keep.
    #[allow(clippy::result_unit_err)]
    fn store(&mut self, keyword: &[u8], value: &[u8]) -> Result<(), ()>;
}

impl Sink for ConnInfo {
    #[inline]
    fn store(&mut self, keyword: &[u8], value: &[u8]) -> Result<(), ()> {
        let kw = Keyword::from_name(keyword).ok_or(())?;
        self.set(kw, value);
        Ok(())
    }
}

/// Runs the libpq grammar (URI or keyword/value) over `input`, handing each pair to `sink`.
pub fn parse_into(input: &[u8], sink: &mut impl Sink) -> Result<(), ParseError> {
    let prefix = uri_prefix_length(input);
    if prefix != 0 {
        // The keyword/value scanner meets every byte anyway and spots NULs as it goes; the URI
        // scanner jumps around, so it checks up front.
        if let Some(offset) = memchr0(input) {
            return Err(ParseError::NulByte { offset });
        }
        parse_uri(input, prefix, sink)
    } else {
        parse_keyword_value(input, sink)
    }
}

/// Parses the keyword/value arrays of `PQconnectdbParams` (without defaults).
///
/// Entries whose value is `None` or empty are skipped entirely, unknown keywords included.
/// With `expand_dbname`, the first `dbname` entry whose value is a recognized connection string
/// is parsed and its settings override everything before it; later entries override it.
pub fn parse_params<K, V>(
    params: &[(K, Option<V>)],
    expand_dbname: bool,
) -> Result<ConnInfo, ParseError>
where
    K: AsRef<[u8]>,
    V: AsRef<[u8]>,
{
    for (k, v) in params {
        let nul = memchr0(k.as_ref()).or_else(|| v.as_ref().and_then(|v| memchr0(v.as_ref())));
        if let Some(offset) = nul {
            return Err(ParseError::NulByte { offset });
        }
    }
    let mut expansion = None;
    if expand_dbname {
        let first_dbname = params
            .iter()
            .find_map(|(k, v)| (k.as_ref() == b"dbname").then_some(v.as_ref()).flatten());
        if let Some(v) = first_dbname {
            if recognized_connection_string(v.as_ref()) {
                expansion = Some(parse(v.as_ref())?);
            }
        }
    }
    let mut out = ConnInfo::new();
    for (k, v) in params {
        let Some(v) = v.as_ref().map(AsRef::as_ref).filter(|v| !v.is_empty()) else {
            continue;
        };
        let k = k.as_ref();
        let kw =
            Keyword::from_name(k).ok_or_else(|| ParseError::InvalidOption { name: k.to_vec() })?;
        if kw == Keyword::Dbname {
            if let Some(exp) = expansion.take() {
                for (kw, v) in exp.iter() {
                    out.set(kw, v);
                }
                continue;
            }
        }
        out.set(kw, v);
    }
    Ok(out)
}

/// Position of the first NUL byte. Connection strings are short, so a word-at-a-time scan
/// beats both a byte loop and a SIMD routine's set-up cost.
fn memchr0(b: &[u8]) -> Option<usize> {
    let mut chunks = b.chunks_exact(8);
    let mut base = 0;
    for c in chunks.by_ref() {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let x = u64::from_le_bytes(w);
        // Sets the high bit of every zero byte (and possibly of a 0x80 byte after a zero).
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return c.iter().position(|&v| v == 0).map(|p| base + p);
        }
        base += 8;
    }
    chunks
        .remainder()
        .iter()
        .position(|&v| v == 0)
        .map(|p| base + p)
}

// Byte classes for the scanners: one table lookup per byte instead of a chain of compares.
const SPACE: u8 = 1; // C isspace in the C locale
const EQUALS: u8 = 2;
const BACKSLASH: u8 = 4;
const QUOTE: u8 = 8;
const NUL: u8 = 16;

static CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    t[b' ' as usize] = SPACE;
    t[b'\t' as usize] = SPACE;
    t[b'\n' as usize] = SPACE;
    t[0x0b] = SPACE;
    t[0x0c] = SPACE;
    t[b'\r' as usize] = SPACE;
    t[b'=' as usize] = EQUALS;
    t[b'\\' as usize] = BACKSLASH;
    t[b'\'' as usize] = QUOTE;
    t[0] = NUL;
    t
};

#[inline]
fn class(c: u8) -> u8 {
    CLASS[c as usize]
}

/// Index of the first byte at or after `from` whose class is in `mask`, or `s.len()`.
#[inline]
fn find_class(s: &[u8], from: usize, mask: u8) -> usize {
    let mut i = from;
    while i < s.len() && class(s[i]) & mask == 0 {
        i += 1;
    }
    i
}

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// Whether some byte of `x` is below `n` (`n` ≤ 128); never a false negative.
#[inline]
fn has_below(x: u64, n: u8) -> bool {
    x.wrapping_sub(LO.wrapping_mul(u64::from(n))) & !x & HI != 0
}

/// Whether some byte of `x` equals `b`.
#[inline]
fn has_byte(x: u64, b: u8) -> bool {
    let y = x ^ LO.wrapping_mul(u64::from(b));
    y.wrapping_sub(LO) & !y & HI != 0
}

#[inline]
fn word(s: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&s[i..i + 8]);
    u64::from_le_bytes(w)
}

/// Like [`find_class`] for a stop set made of control bytes and whitespace (everything below
/// `below`) plus the bytes `a` and `b`: skips eight bytes at a time while none can stop, then
/// finds the exact stop byte by byte. Most keyword/value text is long runs of plain bytes.
#[inline]
fn find_fast(s: &[u8], from: usize, below: u8, a: u8, b: u8, mask: u8) -> usize {
    let mut i = from;
    while i + 8 <= s.len() {
        let x = word(s, i);
        if has_below(x, below) || has_byte(x, a) || has_byte(x, b) {
            break;
        }
        i += 8;
    }
    find_class(s, i, mask)
}

/// Stores one keyword/value pair with libpq's `requiressl` alias (`conninfo_storeval`).
#[inline]
fn store(out: &mut impl Sink, name: &[u8], value: &[u8]) -> Result<(), ()> {
    if name == b"requiressl" {
        let v: &[u8] = if value.first() == Some(&b'1') {
            b"require"
        } else {
            b"prefer"
        };
        return out.store(b"sslmode", v);
    }
    out.store(name, value)
}

// Stop sets of the URI scanner, as bit masks over a second class table. The two "needs
// decoding" bits never stop a scan; the scanner ORs every class it passes, so a component
// that holds neither a space nor a `%` is stored without a second pass.
const U_AT: u16 = 1;
const U_SLASH: u16 = 2;
const U_COLON: u16 = 4;
const U_QUESTION: u16 = 8;
const U_COMMA: u16 = 16;
const U_CLOSE: u16 = 32;
const U_EQUALS: u16 = 64;
const U_AMP: u16 = 128;
const U_DECODE: u16 = 256;

static URI_CLASS: [u16; 256] = {
    let mut t = [0u16; 256];
    t[b'@' as usize] = U_AT;
    t[b'/' as usize] = U_SLASH;
    t[b':' as usize] = U_COLON;
    t[b'?' as usize] = U_QUESTION;
    t[b',' as usize] = U_COMMA;
    t[b']' as usize] = U_CLOSE;
    t[b'=' as usize] = U_EQUALS;
    t[b'&' as usize] = U_AMP;
    t[b' ' as usize] = U_DECODE;
    t[b'%' as usize] = U_DECODE;
    t
};

#[cfg(test)]
mod tests;
