//! Phase 1 of libpq: the keyword/value grammar, the URI grammar and the keyword arrays.
//! No defaults, no validation of values: exactly what `PQconninfoParse` does.

use crate::{ConnInfo, Keyword, ParseError};

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

/// Index of the first non-whitespace byte at or after `from`, or `s.len()`.
#[inline]
fn skip_space(s: &[u8], from: usize) -> usize {
    let mut i = from;
    while i < s.len() && class(s[i]) & SPACE != 0 {
        i += 1;
    }
    i
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

fn parse_keyword_value(s: &[u8], out: &mut impl Sink) -> Result<(), ParseError> {
    let n = s.len();
    let nul_at = |i: usize| ParseError::NulByte { offset: i };
    // Unescaped values are built here; reused across values.
    let mut scratch: Vec<u8> = Vec::new();
    let mut i = 0;
    loop {
        i = skip_space(s, i);
        if i >= n {
            return Ok(());
        }
        let name_start = i;
        i = find_fast(s, i, 0x21, b'=', b'=', SPACE | EQUALS | NUL);
        let name = &s[name_start..i];
        i = skip_space(s, i);
        if i < n && s[i] == 0 {
            return Err(nul_at(i));
        }
        if i >= n || s[i] != b'=' {
            return Err(ParseError::MissingEquals {
                name: name.to_vec(),
            });
        }
        i += 1;
        i = skip_space(s, i);
        let value: &[u8];
        if i < n && s[i] == b'\'' {
            i += 1;
            let start = i;
            i = find_fast(s, i, 1, b'\'', b'\\', QUOTE | BACKSLASH | NUL);
            if i < n && s[i] == b'\'' {
                value = &s[start..i];
                i += 1;
            } else {
                scratch.clear();
                scratch.extend_from_slice(&s[start..i]);
                loop {
                    if i >= n {
                        return Err(ParseError::UnterminatedQuote);
                    }
                    match s[i] {
                        0 => return Err(nul_at(i)),
                        b'\\' => {
                            i += 1;
                            if i < n {
                                if s[i] == 0 {
                                    return Err(nul_at(i));
                                }
                                scratch.push(s[i]);
                                i += 1;
                            }
                        }
                        b'\'' => {
                            i += 1;
                            break;
                        }
                        _ => {
                            let run_end = find_class(s, i, QUOTE | BACKSLASH | NUL);
                            scratch.extend_from_slice(&s[i..run_end]);
                            i = run_end;
                        }
                    }
                }
                value = &scratch;
            }
        } else {
            let start = i;
            i = find_fast(s, i, 0x21, b'\\', b'\\', SPACE | BACKSLASH | NUL);
            if i < n && s[i] == 0 {
                return Err(nul_at(i));
            }
            if i < n && s[i] == b'\\' {
                scratch.clear();
                scratch.extend_from_slice(&s[start..i]);
                while i < n && class(s[i]) & SPACE == 0 {
                    match s[i] {
                        0 => return Err(nul_at(i)),
                        b'\\' => {
                            i += 1;
                            if i < n {
                                if s[i] == 0 {
                                    return Err(nul_at(i));
                                }
                                scratch.push(s[i]);
                                i += 1;
                            }
                        }
                        _ => {
                            let run_end = find_class(s, i, SPACE | BACKSLASH | NUL);
                            scratch.extend_from_slice(&s[i..run_end]);
                            i = run_end;
                        }
                    }
                }
                value = &scratch;
            } else {
                value = &s[start..i];
            }
            // The whitespace that ended the value is consumed with it.
            if i < n {
                i += 1;
            }
        }
        store(out, name, value).map_err(|_| ParseError::InvalidOption {
            name: name.to_vec(),
        })?;
    }
}

/// Percent-decodes one URI component (`conninfo_uri_decode`): surrounding spaces are dropped,
/// an inner unencoded space is an error, `%00` is forbidden, `+` stays `+`. Borrows `raw`
/// when there is nothing to decode.
fn uri_decode<'a>(raw: &'a [u8], scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ParseError> {
    let n = raw.len();
    let mut q = 0;
    while q < n && raw[q] == b' ' {
        q += 1;
    }
    let start = q;
    while q < n && raw[q] != b' ' && raw[q] != b'%' {
        q += 1;
    }
    if q == n || raw[q] == b' ' {
        let end = q;
        while q < n && raw[q] == b' ' {
            q += 1;
        }
        if q < n {
            return Err(ParseError::UnexpectedSpaces {
                component: raw.to_vec(),
            });
        }
        return Ok(&raw[start..end]);
    }
    scratch.clear();
    scratch.extend_from_slice(&raw[start..q]);
    while q < n && raw[q] != b' ' {
        if raw[q] == b'%' {
            let hi = raw.get(q + 1).and_then(|&c| hex(c));
            let lo = hi.and(raw.get(q + 2).and_then(|&c| hex(c)));
            let (Some(hi), Some(lo)) = (hi, lo) else {
                return Err(ParseError::InvalidPercentToken {
                    component: raw.to_vec(),
                });
            };
            let c = (hi << 4) | lo;
            if c == 0 {
                return Err(ParseError::ForbiddenPercentZero {
                    component: raw.to_vec(),
                });
            }
            scratch.push(c);
            q += 3;
        } else {
            scratch.push(raw[q]);
            q += 1;
        }
    }
    while q < n && raw[q] == b' ' {
        q += 1;
    }
    if q < n {
        return Err(ParseError::UnexpectedSpaces {
            component: raw.to_vec(),
        });
    }
    Ok(scratch)
}

/// Stores a pair whose keyword every sink knows (the URI's fixed components).
fn store_known(out: &mut impl Sink, keyword: &[u8], value: &[u8]) {
    // The URI grammar only names keywords from libpq's table here; a sink that rejects one of
    // them has nothing better to do than drop it.
    let _ = out.store(keyword, value);
}

#[inline]
fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
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

/// Position of the first byte of `s[from..]` in the stop set `mask` (or `s.len()`), and
/// whether a byte passed on the way needs decoding.
#[inline]
fn scan(s: &[u8], from: usize, mask: u16) -> (usize, bool) {
    let mut i = from;
    let mut seen = 0u16;
    while i < s.len() {
        let c = URI_CLASS[s[i] as usize];
        if c & mask != 0 {
            break;
        }
        seen |= c;
        i += 1;
    }
    (i, seen & U_DECODE != 0)
}

/// Decodes a component unless the scan that found it saw nothing to decode.
#[inline]
fn decode_if<'a>(
    raw: &'a [u8],
    needs: bool,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], ParseError> {
    if needs {
        uri_decode(raw, scratch)
    } else {
        Ok(raw)
    }
}

/// The joined host or port buffer of a URI: borrowed while it is one contiguous slice of the
/// input (one host), copied only when a list makes it discontiguous.
enum Joined<'a> {
    Empty,
    Slice(&'a [u8]),
    Owned(Vec<u8>),
}

impl<'a> Joined<'a> {
    fn push(&mut self, part: &'a [u8], room: usize) {
        match self {
            Joined::Empty => *self = Joined::Slice(part),
            Joined::Slice(prev) => {
                let mut v = Vec::with_capacity(room);
                v.extend_from_slice(prev);
                v.extend_from_slice(part);
                *self = Joined::Owned(v);
            }
            Joined::Owned(v) => v.extend_from_slice(part),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Joined::Empty => b"",
            Joined::Slice(s) => s,
            Joined::Owned(v) => v,
        }
    }
}

fn parse_uri(uri: &[u8], prefix: usize, out: &mut impl Sink) -> Result<(), ParseError> {
    let n = uri.len();
    let start = prefix;
    let mut scratch = Vec::new();

    // Credentials: only when an '@' comes before any '/'.
    let (mut p, _) = scan(uri, start, U_AT | U_SLASH);
    if p < n && uri[p] == b'@' {
        let (user_end, needs) = scan(uri, start, U_COLON | U_AT);
        let user = &uri[start..user_end];
        if !user.is_empty() {
            store_known(out, b"user", decode_if(user, needs, &mut scratch)?);
        }
        p = user_end;
        if uri[user_end] == b':' {
            let (pw_end, needs) = scan(uri, user_end + 1, U_AT);
            let password = &uri[user_end + 1..pw_end];
            if !password.is_empty() {
                store_known(out, b"password", decode_if(password, needs, &mut scratch)?);
            }
            p = pw_end;
        }
        p += 1;
    } else {
        p = start;
    }

    // Host list: host[:port] elements separated by commas, joined into two buffers.
    let mut hosts = Joined::Empty;
    let mut ports = Joined::Empty;
    let (mut hosts_need, mut ports_need) = (false, false);
    let room = n - p;
    let terminator: Option<u8>;
    loop {
        let host;
        if p < n && uri[p] == b'[' {
            let h = p + 1;
            let (close, needs) = scan(uri, h, U_CLOSE);
            if close >= n {
                return Err(ParseError::UriUnterminatedIpv6 { uri: uri.to_vec() });
            }
            if close == h {
                return Err(ParseError::UriEmptyIpv6 { uri: uri.to_vec() });
            }
            hosts_need |= needs;
            host = &uri[h..close];
            p = close + 1;
            if p < n && !matches!(uri[p], b':' | b'/' | b'?' | b',') {
                return Err(ParseError::UriUnexpectedCharacter {
                    byte: uri[p],
                    position: p + 1,
                    uri: uri.to_vec(),
                });
            }
        } else {
            let (end, needs) = scan(uri, p, U_COLON | U_SLASH | U_QUESTION | U_COMMA);
            hosts_need |= needs;
            host = &uri[p..end];
            p = end;
        }
        hosts.push(host, room);
        let mut term = uri.get(p).copied();
        if term == Some(b':') {
            let port_start = p + 1;
            let (port_end, needs) = scan(uri, port_start, U_SLASH | U_QUESTION | U_COMMA);
            ports_need |= needs;
            ports.push(&uri[port_start..port_end], room);
            p = port_end;
            term = uri.get(p).copied();
        }
        if term != Some(b',') {
            terminator = term;
            break;
        }
        p += 1;
        hosts.push(b",", room);
        ports.push(b",", room);
    }
    if !hosts.as_bytes().is_empty() {
        store_known(
            out,
            b"host",
            decode_if(hosts.as_bytes(), hosts_need, &mut scratch)?,
        );
    }
    if !ports.as_bytes().is_empty() {
        store_known(
            out,
            b"port",
            decode_if(ports.as_bytes(), ports_need, &mut scratch)?,
        );
    }

    let mut terminator = terminator;
    if terminator == Some(b'/') {
        let db_start = p + 1;
        let (db_end, needs) = scan(uri, db_start, U_QUESTION);
        let dbname = &uri[db_start..db_end];
        if !dbname.is_empty() {
            store_known(out, b"dbname", decode_if(dbname, needs, &mut scratch)?);
        }
        p = db_end;
        terminator = uri.get(p).copied();
    }
    if terminator.is_some() {
        parse_uri_params(&uri[p + 1..], out)?;
    }
    Ok(())
}

fn parse_uri_params(params: &[u8], out: &mut impl Sink) -> Result<(), ParseError> {
    let n = params.len();
    let mut p = 0;
    let mut kw_scratch = Vec::new();
    let mut value_scratch = Vec::new();
    while p < n {
        let kw_start = p;
        let (kw_end, kw_needs) = scan(params, p, U_EQUALS | U_AMP);
        if params.get(kw_end) != Some(&b'=') {
            return Err(ParseError::UriMissingSeparator {
                keyword: params[kw_start..kw_end].to_vec(),
            });
        }
        let (end, value_needs) = scan(params, kw_end + 1, U_EQUALS | U_AMP);
        if params.get(end) == Some(&b'=') {
            let keyword = params[kw_start..kw_end].to_vec();
            return Err(ParseError::UriExtraSeparator { keyword });
        }
        p = if end < n { end + 1 } else { end };
        let keyword = decode_if(&params[kw_start..kw_end], kw_needs, &mut kw_scratch)?;
        let value = decode_if(&params[kw_end + 1..end], value_needs, &mut value_scratch)?;
        if keyword == b"ssl" && value == b"true" {
            store_known(out, b"sslmode", b"require");
            continue;
        }
        if store(out, keyword, value).is_err() {
            return Err(ParseError::UriInvalidParameter {
                keyword: keyword.to_vec(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
