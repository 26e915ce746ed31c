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
    let mut out = ConnInfo::new();
    parse_into(input.as_ref(), &mut out)?;
    Ok(out)
}

/// Where the grammar delivers each keyword/value pair it reads, in input order.
///
/// libpq's own sink ([`ConnInfo`]) lets the last occurrence win; a dialect may accumulate.
pub trait Sink {
    /// Takes one pair; `Err(())` means the keyword is unknown. Aliases (`requiressl`, the URI
    /// `ssl=true`) are already applied.
    #[allow(clippy::result_unit_err)]
    fn store(&mut self, keyword: &[u8], value: Vec<u8>) -> Result<(), ()>;
}

impl Sink for ConnInfo {
    #[inline]
    fn store(&mut self, keyword: &[u8], value: Vec<u8>) -> Result<(), ()> {
        let kw = Keyword::from_name(keyword).ok_or(())?;
        self.set(kw, value);
        Ok(())
    }
}

/// Runs the libpq grammar (URI or keyword/value) over `input`, handing each pair to `sink`.
pub fn parse_into(input: &[u8], sink: &mut impl Sink) -> Result<(), ParseError> {
    if let Some(offset) = memchr0(input) {
        return Err(ParseError::NulByte { offset });
    }
    let prefix = uri_prefix_length(input);
    if prefix != 0 {
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

fn memchr0(b: &[u8]) -> Option<usize> {
    b.iter().position(|&c| c == 0)
}

/// C `isspace` in the C locale.
#[inline]
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

/// Stores one keyword/value pair with libpq's `requiressl` alias (`conninfo_storeval`).
#[inline]
fn store(out: &mut impl Sink, name: &[u8], value: Vec<u8>) -> Result<(), ()> {
    if name == b"requiressl" {
        let v: &[u8] = if value.first() == Some(&b'1') {
            b"require"
        } else {
            b"prefer"
        };
        return out.store(b"sslmode", v.to_vec());
    }
    out.store(name, value)
}

fn parse_keyword_value(s: &[u8], out: &mut impl Sink) -> Result<(), ParseError> {
    let n = s.len();
    let mut i = 0;
    while i < n {
        if is_space(s[i]) {
            i += 1;
            continue;
        }
        let name_start = i;
        while i < n && s[i] != b'=' && !is_space(s[i]) {
            i += 1;
        }
        let name = &s[name_start..i];
        while i < n && is_space(s[i]) {
            i += 1;
        }
        if i >= n || s[i] != b'=' {
            return Err(ParseError::MissingEquals {
                name: name.to_vec(),
            });
        }
        i += 1;
        while i < n && is_space(s[i]) {
            i += 1;
        }
        let value;
        if i < n && s[i] == b'\'' {
            i += 1;
            let mut v = Vec::new();
            loop {
                if i >= n {
                    return Err(ParseError::UnterminatedQuote);
                }
                match s[i] {
                    b'\\' => {
                        i += 1;
                        if i < n {
                            v.push(s[i]);
                            i += 1;
                        }
                    }
                    b'\'' => {
                        i += 1;
                        break;
                    }
                    c => {
                        // Copy the run up to the next quote or backslash in one go.
                        let run_end = s[i..]
                            .iter()
                            .position(|&c| c == b'\'' || c == b'\\')
                            .map_or(n, |p| i + p);
                        let _ = c;
                        v.extend_from_slice(&s[i..run_end]);
                        i = run_end;
                    }
                }
            }
            value = v;
        } else {
            let start = i;
            while i < n && !is_space(s[i]) && s[i] != b'\\' {
                i += 1;
            }
            if i < n && s[i] == b'\\' {
                let mut v = s[start..i].to_vec();
                while i < n && !is_space(s[i]) {
                    if s[i] == b'\\' {
                        i += 1;
                        if i < n {
                            v.push(s[i]);
                            i += 1;
                        }
                    } else {
                        v.push(s[i]);
                        i += 1;
                    }
                }
                value = v;
            } else {
                value = s[start..i].to_vec();
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
    Ok(())
}

/// Percent-decodes one URI component (`conninfo_uri_decode`): surrounding spaces are dropped,
/// an inner unencoded space is an error, `%00` is forbidden, `+` stays `+`.
fn uri_decode(raw: &[u8]) -> Result<Vec<u8>, ParseError> {
    let n = raw.len();
    let mut q = 0;
    while q < n && raw[q] == b' ' {
        q += 1;
    }
    let mut out = Vec::with_capacity(n - q);
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
            out.push(c);
            q += 3;
        } else {
            out.push(raw[q]);
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
    Ok(out)
}

/// Stores a pair whose keyword every sink knows (the URI's fixed components).
fn store_known(out: &mut impl Sink, keyword: &[u8], value: Vec<u8>) {
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

/// Position of the first byte of `s[from..]` that is in `stops`, or `s.len()`.
#[inline]
fn scan(s: &[u8], from: usize, stops: &[u8]) -> usize {
    s[from..]
        .iter()
        .position(|c| stops.contains(c))
        .map_or(s.len(), |p| from + p)
}

fn parse_uri(uri: &[u8], prefix: usize, out: &mut impl Sink) -> Result<(), ParseError> {
    let n = uri.len();
    let start = prefix;

    // Credentials: only when an '@' comes before any '/'.
    let mut p = scan(uri, start, b"@/");
    if p < n && uri[p] == b'@' {
        let user_end = scan(uri, start, b":@");
        let user = &uri[start..user_end];
        if !user.is_empty() {
            store_known(out, b"user", uri_decode(user)?);
        }
        p = user_end;
        if uri[user_end] == b':' {
            let pw_end = scan(uri, user_end + 1, b"@");
            let password = &uri[user_end + 1..pw_end];
            if !password.is_empty() {
                store_known(out, b"password", uri_decode(password)?);
            }
            p = pw_end;
        }
        p += 1;
    } else {
        p = start;
    }

    // Host list: host[:port] elements separated by commas, joined into two buffers.
    let mut hosts: Vec<u8> = Vec::new();
    let mut ports: Vec<u8> = Vec::new();
    let terminator: Option<u8>;
    loop {
        let host;
        if p < n && uri[p] == b'[' {
            let h = p + 1;
            let close = scan(uri, h, b"]");
            if close >= n {
                return Err(ParseError::UriUnterminatedIpv6 { uri: uri.to_vec() });
            }
            if close == h {
                return Err(ParseError::UriEmptyIpv6 { uri: uri.to_vec() });
            }
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
            let end = scan(uri, p, b":/?,");
            host = &uri[p..end];
            p = end;
        }
        hosts.extend_from_slice(host);
        let mut term = uri.get(p).copied();
        if term == Some(b':') {
            let port_start = p + 1;
            let port_end = scan(uri, port_start, b"/?,");
            ports.extend_from_slice(&uri[port_start..port_end]);
            p = port_end;
            term = uri.get(p).copied();
        }
        if term != Some(b',') {
            terminator = term;
            break;
        }
        p += 1;
        hosts.push(b',');
        ports.push(b',');
    }
    if !hosts.is_empty() {
        store_known(out, b"host", uri_decode(&hosts)?);
    }
    if !ports.is_empty() {
        store_known(out, b"port", uri_decode(&ports)?);
    }

    let mut terminator = terminator;
    if terminator == Some(b'/') {
        let db_start = p + 1;
        let db_end = scan(uri, db_start, b"?");
        let dbname = &uri[db_start..db_end];
        if !dbname.is_empty() {
            store_known(out, b"dbname", uri_decode(dbname)?);
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
    while p < n {
        let kw_start = p;
        let mut eq: Option<usize> = None;
        loop {
            match params.get(p) {
                Some(b'=') => {
                    if eq.is_some() {
                        let keyword = params[kw_start..eq.unwrap_or(p)].to_vec();
                        return Err(ParseError::UriExtraSeparator { keyword });
                    }
                    eq = Some(p);
                    p += 1;
                }
                Some(b'&') | None => break,
                Some(_) => p += 1,
            }
        }
        let end = p;
        if p < n {
            p += 1;
        }
        let Some(eq) = eq else {
            return Err(ParseError::UriMissingSeparator {
                keyword: params[kw_start..end].to_vec(),
            });
        };
        let keyword = uri_decode(&params[kw_start..eq])?;
        let value = uri_decode(&params[eq + 1..end])?;
        if keyword == b"ssl" && value == b"true" {
            store_known(out, b"sslmode", b"require".to_vec());
            continue;
        }
        if store(out, &keyword, value).is_err() {
            return Err(ParseError::UriInvalidParameter { keyword });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
