//! The URI form: `postgresql://[user[:password]@][host[:port],…][/dbname][?keyword=value&…]`.
//!
//! libpq cuts the URI at raw structure bytes before decoding, so the well-formed generator
//! writes each component's bytes raw only where the cut cannot see them, and percent-encodes
//! the rest. It models what libpq stores: user, password and dbname only when their raw text
//! is non-empty (`postgresql://%20@h` stores `user=""`: the check comes before the decoding
//! trims the spaces); the hosts and the ports of all elements joined with `,` into two
//! buffers, each stored when non-empty; query parameters in order, last one winning.

use super::{mutate, percent_encode, push_escape, value, AdversarialUri, Src, Uri, PALETTE};
use crate::{ConnInfo, Keyword};

const PREFIXES: [&[u8]; 2] = [b"postgresql://", b"postgres://"];

/// Raw bytes (besides the unreserved ones) each component may hold without changing the
/// structure. `@` and `/` are never raw before the path: libpq looks for the credentials'
/// `@` up to the first `/`, anywhere in the URI.
const USER_RAW: &[u8] = b"!$'()*+;=,?&";
const PASSWORD_RAW: &[u8] = b"!$'()*+;=,?&:";
const DBNAME_RAW: &[u8] = b"!$'()*+;=,:@/[]";
/// A query value may not hold `@` either: without a path before it, it would end the
/// credentials.
const QUERY_RAW: &[u8] = b"!$'()*+;,:/?[]";

/// IPv6 literals as they appear between brackets (a zone's `%` is encoded as `%25`).
const IPV6: &[&[u8]] = &[
    b"::1",
    b"::",
    b"2001:db8::1234",
    b"fe80::1%25eth0",
    b"fe80::1%25en%30",
    b"::ffff:192.0.2.1",
    b"1:2:3:4:5:6:7:8",
    b"v1.x",
];

impl Uri {
    pub(super) fn generate(src: &mut Src<'_, '_>) -> Uri {
        let mut text = src.pick(&PREFIXES).to_vec();
        let mut expected = ConnInfo::new();
        if src.chance(40) {
            let user = value(src, 10);
            if component(src, &mut text, &user, USER_RAW) {
                expected.set(Keyword::User, &user);
            }
            if src.chance(60) {
                text.push(b':');
                let password = value(src, 10);
                if component(src, &mut text, &password, PASSWORD_RAW) {
                    expected.set(Keyword::Password, &password);
                }
            }
            text.push(b'@');
        }
        hosts(src, &mut text, &mut expected);
        // The path needs its `/` unless the URI ends here or a query follows.
        if src.chance(60) {
            text.push(b'/');
            let dbname = value(src, 10);
            if component(src, &mut text, &dbname, DBNAME_RAW) {
                expected.set(Keyword::Dbname, &dbname);
            }
        }
        if src.chance(60) {
            text.push(b'?');
            query(src, &mut text, &mut expected);
        }
        Uri { text, expected }
    }
}

/// Writes `v` as one component: encoded, maybe between raw spaces (which decoding drops).
/// Returns whether libpq stores it, which it does when the raw text is non-empty.
fn component(src: &mut Src<'_, '_>, text: &mut Vec<u8>, v: &[u8], raw: &[u8]) -> bool {
    let start = text.len();
    pad(src, text);
    let mut encoded = Vec::new();
    percent_encode(src, &mut encoded, v, raw);
    // A raw space inside would be an error, and at the edges it would vanish.
    for c in encoded {
        if c == b' ' {
            push_escape(text, c, false);
        } else {
            text.push(c);
        }
    }
    pad(src, text);
    text.len() > start
}

fn pad(src: &mut Src<'_, '_>, text: &mut Vec<u8>) {
    if src.chance(8) {
        let n = 1 + src.below(2);
        text.extend(std::iter::repeat_n(b' ', n));
    }
}

/// The host list, and what it stores.
fn hosts(src: &mut Src<'_, '_>, text: &mut Vec<u8>, expected: &mut ConnInfo) {
    let mut host_buf: Vec<u8> = Vec::new();
    let mut port_buf: Vec<u8> = Vec::new();
    let mut raw_host = false;
    let mut raw_port = false;
    let elements = src.below(5);
    for i in 0..elements {
        if i > 0 {
            text.push(b',');
            host_buf.push(b',');
            port_buf.push(b',');
            raw_host = true;
            raw_port = true;
        }
        let start = text.len();
        match src.below(10) {
            0 => {}
            1 | 2 => {
                let ip = src.pick(IPV6);
                text.push(b'[');
                text.extend_from_slice(ip);
                text.push(b']');
                host_buf.extend_from_slice(&decode(ip));
            }
            3 => {
                let dir: &[u8] = src.pick(&[&b"/tmp"[..], b"/var/run/postgresql", b"@abstract"]);
                percent_encode(src, text, dir, b"");
                host_buf.extend_from_slice(dir);
            }
            _ => {
                let h = host_name(src);
                percent_encode(src, text, &h, b"");
                host_buf.extend_from_slice(&h);
            }
        }
        raw_host |= text.len() > start;
        if src.chance(40) {
            text.push(b':');
            let start = text.len();
            let digits = 1 + src.below(5);
            let mut p: Vec<u8> = if src.chance(90) {
                (0..digits).map(|_| b'0' + src.below(10) as u8).collect()
            } else {
                Vec::new()
            };
            if src.chance(5) {
                // The port runs to the next `/`, `?` or `,`: a raw `:` is part of it.
                p.extend_from_slice(b":5433");
            }
            percent_encode(src, text, &p, b":");
            port_buf.extend_from_slice(&p);
            raw_port |= text.len() > start;
        }
    }
    if raw_host {
        expected.set(Keyword::Host, host_buf);
    }
    if raw_port {
        expected.set(Keyword::Port, port_buf);
    }
}

/// A host name: mostly DNS-like, sometimes any bytes (all of them encoded where needed).
fn host_name(src: &mut Src<'_, '_>) -> Vec<u8> {
    if src.chance(25) {
        return value(src, 10);
    }
    const NAME: &[u8] = b"abcdehostxyz0123456789-.";
    let len = 1 + src.below(12);
    (0..len).map(|_| src.pick(NAME)).collect()
}

/// Decodes a literal that is known to hold only valid escapes.
fn decode(raw: &[u8]) -> Vec<u8> {
    let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
    let mut out = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            out.push(hex(raw[i + 1]) << 4 | hex(raw[i + 2]));
            i += 3;
        } else {
            out.push(raw[i]);
            i += 1;
        }
    }
    out
}

/// Zero or more `keyword=value` parameters (an empty query is fine), maybe a trailing `&`.
fn query(src: &mut Src<'_, '_>, text: &mut Vec<u8>, expected: &mut ConnInfo) {
    let params = src.below(6);
    for i in 0..params {
        if i > 0 {
            text.push(b'&');
        }
        if src.chance(5) {
            // The URI-only alias: exactly `true` means sslmode=require.
            text.extend_from_slice(b"ssl=");
            percent_encode(src, text, b"true", b"");
            expected.set(Keyword::Sslmode, b"require");
            continue;
        }
        let kw = src.keyword();
        pad(src, text);
        percent_encode(src, text, kw.name().as_bytes(), b"");
        pad(src, text);
        text.push(b'=');
        let v = value(src, 12);
        component(src, text, &v, QUERY_RAW);
        // Unlike the authority, the query stores empty values too.
        expected.set(kw, v);
    }
    if params > 0 && src.chance(10) {
        text.push(b'&');
    }
}

/// Breakages for the URI generator, one of which is applied per fault.
const FAULTS: &[&[u8]] = &[
    b"[",
    b"]",
    b"[]",
    b"[::1",
    b"[::1]z",
    b"%",
    b"%0",
    b"%zz",
    b"%00",
    b"%g1",
    b" ",
    b"a b",
    b"@",
    b"@@",
    b":",
    b"::",
    b"/",
    b"?",
    b"&",
    b"&&",
    b"=",
    b"==",
    b"#frag",
    b",",
    b"\xff",
    b"\xc3",
    b"\t",
    b"ssl=false",
    b"ssl=TRUE",
    b"requiressl=1",
    b"foo=bar",
    b"Host=a",
    b"?=x",
    b"?x",
    b"+",
];

const BAD_PREFIXES: &[&[u8]] = &[
    b"postgresql:/",
    b"POSTGRESQL://",
    b" postgresql://",
    b"postgre://",
    b"postgresql:",
    b"postgres//",
];

impl AdversarialUri {
    pub(super) fn generate(src: &mut Src<'_, '_>) -> AdversarialUri {
        let mut s = Uri::generate(src).text;
        if src.chance(5) {
            let prefix_len = if s.starts_with(b"postgres://") {
                11
            } else {
                13
            };
            let mut fixed = src.pick(BAD_PREFIXES).to_vec();
            fixed.extend_from_slice(&s[prefix_len..]);
            s = fixed;
        }
        let faults = 1 + src.below(4);
        for _ in 0..faults {
            // Past the prefix, so most inputs stay URIs.
            let lo = 11.min(s.len());
            let at = lo + src.below(s.len() - lo + 1);
            match src.below(12) {
                0 => {
                    let end = (at + 1 + src.below(6)).min(s.len());
                    s.drain(at..end);
                }
                1 => {
                    // A very long run of one byte.
                    let c = src.pick(b"a%2 ,:[]@=&\xff");
                    let n = 256 + src.below(4096);
                    s.splice(at..at, std::iter::repeat_n(c, n));
                }
                2 => {
                    let c = src.pick(PALETTE);
                    s.insert(at, c);
                }
                3 => s = mutate(src, s),
                _ => {
                    let f = src.pick(FAULTS);
                    s.splice(at..at, f.iter().copied());
                }
            }
        }
        AdversarialUri(s)
    }
}
