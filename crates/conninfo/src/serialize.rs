//! Serialization back to keyword/value and URI form.
//!
//! Both writers produce a string that libpq 18's grammar (and [`crate::parse`]) reads back to
//! exactly the same [`ConnInfo`]: the same keywords, the same bytes, empty values included.
//! Values never contain NUL (the parser rejects it), so every `ConnInfo` that came out of a
//! parse can be written. Keywords are written in libpq's table order, each exactly once, so the
//! output means the same under last-wins (libpq) and accumulating ([`crate::proposal`]) rules.
//!
//! # Keyword/value ([`to_keyword_value`])
//! `keyword=value` pairs separated by one space. A value is written bare unless it is empty,
//! starts with `'`, or contains whitespace (C `isspace`) or a backslash; then it is written as
//! `'…'` with only `'` and `\` backslash-escaped. Bare values may hold `=`, `'` (not first),
//! `"` and any other byte: the grammar reads a bare value up to whitespace. An empty value must
//! be quoted because libpq skips whitespace after `=` (`host= port=1` sets host to `port=1`).
//!
//! # URI ([`to_uri`])
//! `postgresql://[[user][:password]@][hosts][/dbname][?keyword=value&…]`. Every byte that is
//! not an unreserved character (`A-Z a-z 0-9 - . _ ~`) is percent-encoded (uppercase hex),
//! with three exceptions where a raw byte has no meaning: `:` inside a bracketed host and in
//! ports, and `/`, `:`, `,` in query values. So no space (which libpq trims at the edges of a
//! component and rejects inside it), `@` (which would start the credentials), `/`, `?`, `,`,
//! `[`, `%`, `&` or `=` is ever written raw where it could change the structure.
//!
//! The authority and path carry only what they can carry exactly:
//! - `user` and `password` when non-empty (the grammar does not store empty ones);
//! - `dbname` when non-empty (an empty path does not set it);
//! - `host` and `port` when non-empty. The grammar joins the hosts and the ports of the
//!   `host[:port]` elements into two buffers with one `,` per element separator, then
//!   percent-decodes each buffer as a whole. So when `host` and `port` have the same number of
//!   comma-separated elements they are written as a list (`h1:1,h2:2`; an element with an empty
//!   port is written without `:`). Otherwise (one port for several hosts, or only one of the
//!   two set) a single element is written whose commas are encoded as `%2C`: after decoding
//!   they become list separators again (`a%2Cb:5432` → host `a,b`, port `5432`), while a raw
//!   `,` would have added an element to the *other* buffer too.
//! - A host element containing `:` (an IPv6 literal) is written in brackets with its colons
//!   raw (`[fe80::1%25eth0]`); other elements never start with a raw `[`.
//!
//! Everything else, and the empty values of the five authority keywords, goes to the query.
//! `ssl`/`requiressl` are never written: they are aliases that the grammar has already turned
//! into `sslmode`.

use crate::{ConnInfo, Keyword};

/// Writes `info` as a keyword/value connection string that parses back to `info`.
pub fn to_keyword_value(info: &ConnInfo) -> Vec<u8> {
    let mut out = Vec::new();
    for (kw, value) in info.iter() {
        if !out.is_empty() {
            out.push(b' ');
        }
        out.extend_from_slice(kw.name().as_bytes());
        out.push(b'=');
        push_keyword_value_value(&mut out, value);
    }
    out
}

/// Writes `info` as a `postgresql://` URI that parses back to `info`.
pub fn to_uri(info: &ConnInfo) -> Vec<u8> {
    let mut out = b"postgresql://".to_vec();
    let non_empty = |kw| info.get(kw).filter(|v| !v.is_empty());

    let user = non_empty(Keyword::User);
    let password = non_empty(Keyword::Password);
    if user.is_some() || password.is_some() {
        if let Some(user) = user {
            percent_encode(&mut out, user, b"");
        }
        if let Some(password) = password {
            out.push(b':');
            percent_encode(&mut out, password, b"");
        }
        out.push(b'@');
    }

    push_host_list(&mut out, non_empty(Keyword::Host), non_empty(Keyword::Port));

    if let Some(dbname) = non_empty(Keyword::Dbname) {
        out.push(b'/');
        percent_encode(&mut out, dbname, b"");
    }

    let mut separator = b'?';
    for (kw, value) in info.iter() {
        if in_authority(kw) && !value.is_empty() {
            continue;
        }
        out.push(separator);
        separator = b'&';
        out.extend_from_slice(kw.name().as_bytes());
        out.push(b'=');
        percent_encode(&mut out, value, QUERY_RAW);
    }
    out
}

/// Keywords the URI authority and path can carry (when non-empty).
fn in_authority(kw: Keyword) -> bool {
    matches!(
        kw,
        Keyword::User | Keyword::Password | Keyword::Host | Keyword::Port | Keyword::Dbname
    )
}

/// Bytes besides the unreserved ones that query values keep raw: they only matter in the
/// authority, and the query is read after it.
const QUERY_RAW: &[u8] = b"/:,";

/// Bytes besides the unreserved ones that a bracketed host and a port keep raw.
const COLON_RAW: &[u8] = b":";

/// C `isspace` in the C locale, the grammar's separator set.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn push_keyword_value_value(out: &mut Vec<u8>, value: &[u8]) {
    let needs_quotes = matches!(value.first(), None | Some(b'\''))
        || value.iter().any(|&c| c == b'\\' || is_space(c));
    if !needs_quotes {
        out.extend_from_slice(value);
        return;
    }
    out.push(b'\'');
    for &c in value {
        if c == b'\'' || c == b'\\' {
            out.push(b'\\');
        }
        out.push(c);
    }
    out.push(b'\'');
}

/// Writes the authority's host list for the non-empty `host` and `port` values.
fn push_host_list(out: &mut Vec<u8>, host: Option<&[u8]>, port: Option<&[u8]>) {
    match (host, port) {
        (Some(host), Some(port)) => {
            let hosts: Vec<&[u8]> = host.split(|&c| c == b',').collect();
            let ports: Vec<&[u8]> = port.split(|&c| c == b',').collect();
            if hosts.len() == ports.len() {
                for (i, (h, p)) in hosts.iter().zip(&ports).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    push_host_element(out, h);
                    if !p.is_empty() {
                        out.push(b':');
                        percent_encode(out, p, COLON_RAW);
                    }
                }
            } else {
                push_host_element(out, host);
                out.push(b':');
                percent_encode(out, port, COLON_RAW);
            }
        }
        (Some(host), None) => push_host_element(out, host),
        (None, Some(port)) => {
            out.push(b':');
            percent_encode(out, port, COLON_RAW);
        }
        (None, None) => {}
    }
}

/// One host element; commas inside it are encoded, so it stays one element in the raw buffer.
fn push_host_element(out: &mut Vec<u8>, host: &[u8]) {
    if host.contains(&b':') {
        out.push(b'[');
        percent_encode(out, host, COLON_RAW);
        out.push(b']');
    } else {
        percent_encode(out, host, b"");
    }
}

/// Appends `value`, keeping unreserved bytes and `raw` as they are and encoding the rest.
fn percent_encode(out: &mut Vec<u8>, value: &[u8], raw: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &c in value {
        if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') || raw.contains(&c) {
            out.push(c);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(c >> 4)], HEX[usize::from(c & 15)]]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse;

    fn info(pairs: &[(Keyword, &[u8])]) -> ConnInfo {
        let mut ci = ConnInfo::new();
        for (kw, v) in pairs {
            ci.set(*kw, *v);
        }
        ci
    }

    /// Both forms give `kv` and `uri` exactly, and both parse back to `ci`.
    fn check(ci: &ConnInfo, kv: &str, uri: &str) {
        let got_kv = to_keyword_value(ci);
        let got_uri = to_uri(ci);
        assert_eq!(String::from_utf8_lossy(&got_kv), kv);
        assert_eq!(String::from_utf8_lossy(&got_uri), uri);
        assert_eq!(parse(&got_kv).as_ref(), Ok(ci), "{kv}");
        assert_eq!(parse(&got_uri).as_ref(), Ok(ci), "{uri}");
    }

    #[test]
    fn empty_table() {
        check(&ConnInfo::new(), "", "postgresql://");
    }

    #[test]
    fn plain_values() {
        let ci = info(&[
            (Keyword::User, b"alice"),
            (Keyword::Password, b"s3cret"),
            (Keyword::Dbname, b"app"),
            (Keyword::Host, b"db.example"),
            (Keyword::Port, b"5432"),
            (Keyword::Sslmode, b"require"),
        ]);
        check(
            &ci,
            "user=alice password=s3cret dbname=app host=db.example port=5432 sslmode=require",
            "postgresql://alice:s3cret@db.example:5432/app?sslmode=require",
        );
    }

    #[test]
    fn keyword_value_quoting() {
        let ci = info(&[
            (Keyword::Host, b""),
            (Keyword::Options, b"-c x=y"),
            (Keyword::Password, b"it's\\"),
            (Keyword::ApplicationName, b"'lead"),
            (Keyword::Sslcert, b"a'b=c\"d"),
            (Keyword::Sslkey, b"tab\there"),
        ]);
        assert_eq!(
            String::from_utf8_lossy(&to_keyword_value(&ci)),
            "password='it\\'s\\\\' host='' options='-c x=y' application_name='\\'lead' \
             sslcert=a'b=c\"d sslkey='tab\there'"
        );
        assert_eq!(parse(to_keyword_value(&ci)), Ok(ci));
    }

    #[test]
    fn non_utf8_bytes_stay_bare_in_keyword_value_and_encoded_in_uri() {
        let ci = info(&[(Keyword::ApplicationName, b"\xff\xfe")]);
        assert_eq!(to_keyword_value(&ci), b"application_name=\xff\xfe");
        assert_eq!(to_uri(&ci), b"postgresql://?application_name=%FF%FE");
        assert_eq!(parse(to_uri(&ci)), Ok(ci));
    }

    #[test]
    fn host_and_port_lists_of_equal_length() {
        check(
            &info(&[(Keyword::Host, b"h1,h2"), (Keyword::Port, b"5432,5433")]),
            "host=h1,h2 port=5432,5433",
            "postgresql://h1:5432,h2:5433",
        );
        check(
            &info(&[(Keyword::Host, b"h1,h2"), (Keyword::Port, b",5433")]),
            "host=h1,h2 port=,5433",
            "postgresql://h1,h2:5433",
        );
        check(
            &info(&[(Keyword::Host, b",,"), (Keyword::Port, b",,")]),
            "host=,, port=,,",
            "postgresql://,,",
        );
    }

    #[test]
    fn one_port_for_several_hosts_uses_encoded_commas() {
        check(
            &info(&[(Keyword::Host, b"a,b"), (Keyword::Port, b"5432")]),
            "host=a,b port=5432",
            "postgresql://a%2Cb:5432",
        );
        check(
            &info(&[(Keyword::Host, b"a,b")]),
            "host=a,b",
            "postgresql://a%2Cb",
        );
        check(
            &info(&[(Keyword::Port, b"1,2")]),
            "port=1,2",
            "postgresql://:1%2C2",
        );
    }

    #[test]
    fn ipv6_and_special_hosts() {
        check(
            &info(&[
                (Keyword::Dbname, b"db"),
                (Keyword::Host, b"::1,fe80::1%eth0"),
                (Keyword::Port, b"5432,"),
            ]),
            "dbname=db host=::1,fe80::1%eth0 port=5432,",
            "postgresql://[::1]:5432,[fe80::1%25eth0]/db",
        );
        check(
            &info(&[(Keyword::Host, b"/tmp/sock,@abstract,[x]")]),
            "host=/tmp/sock,@abstract,[x]",
            "postgresql://%2Ftmp%2Fsock%2C%40abstract%2C%5Bx%5D",
        );
    }

    #[test]
    fn empty_authority_values_go_to_the_query() {
        check(
            &info(&[
                (Keyword::User, b""),
                (Keyword::Password, b""),
                (Keyword::Dbname, b""),
                (Keyword::Host, b""),
                (Keyword::Port, b""),
            ]),
            "user='' password='' dbname='' host='' port=''",
            "postgresql://?user=&password=&dbname=&host=&port=",
        );
        check(
            &info(&[(Keyword::Host, b""), (Keyword::Port, b"5432")]),
            "host='' port=5432",
            "postgresql://:5432?host=",
        );
    }

    #[test]
    fn uri_structure_characters_are_encoded() {
        check(
            &info(&[
                (Keyword::User, b"us@er:x"),
                (Keyword::Password, b"p/w?@ "),
                (Keyword::Dbname, b" a?b/c "),
                (Keyword::Options, b"-c x=y&z %"),
                (Keyword::Sslrootcert, b"/etc/ssl/a,b:c@d"),
            ]),
            r"user=us@er:x password='p/w?@ ' dbname=' a?b/c ' options='-c x=y&z %' sslrootcert=/etc/ssl/a,b:c@d",
            "postgresql://us%40er%3Ax:p%2Fw%3F%40%20@/%20a%3Fb%2Fc%20\
             ?options=-c%20x%3Dy%26z%20%25&sslrootcert=/etc/ssl/a,b:c%40d",
        );
        check(
            &info(&[(Keyword::Password, b"pw"), (Keyword::Dbname, b"d")]),
            "password=pw dbname=d",
            "postgresql://:pw@/d",
        );
    }
}
