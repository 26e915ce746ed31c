//! The keyword/value form: `keyword = value` pairs, values bare (with backslash escapes) or in
//! single quotes.

use super::{mutate, value, AdversarialKeywordValue, KeywordValue, Src, PALETTE, WHITESPACE};
use crate::{ConnInfo, Keyword};

/// At most this many pairs per string; duplicates come from repeating keywords.
const MAX_PAIRS: usize = 8;

impl KeywordValue {
    pub(super) fn generate(src: &mut Src<'_, '_>) -> KeywordValue {
        let mut text = Vec::new();
        let mut expected = ConnInfo::new();
        whitespace(src, &mut text, 30);
        let pairs = src.below(MAX_PAIRS + 1);
        let mut used: Vec<Keyword> = Vec::new();
        let mut after_quote = false;
        for i in 0..pairs {
            // libpq needs no separator after a closing quote (`host='a'port=1`).
            if i > 0 && !(after_quote && src.chance(20)) {
                push_whitespace(src, &mut text);
            }
            let kw = if !used.is_empty() && src.chance(15) {
                src.pick(&used)
            } else {
                src.keyword()
            };
            used.push(kw);
            if src.chance(5) {
                // The alias libpq turns into sslmode on the spot.
                let v: &[u8] = src.pick(&[&b"1"[..], b"0", b"1x", b"yes", b"' 1'", b"''"]);
                text.extend_from_slice(b"requiressl");
                push_equals(src, &mut text);
                text.extend_from_slice(v);
                let starts_with_one = v.first() == Some(&b'1');
                let mode: &[u8] = if starts_with_one {
                    b"require"
                } else {
                    b"prefer"
                };
                expected.set(Keyword::Sslmode, mode);
                after_quote = v.ends_with(b"'");
                continue;
            }
            text.extend_from_slice(kw.name().as_bytes());
            push_equals(src, &mut text);
            let v = value(src, 12);
            after_quote = push_value(src, &mut text, &v);
            expected.set(kw, v);
        }
        whitespace(src, &mut text, 30);
        KeywordValue { text, expected }
    }
}

/// Optional whitespace around `=`, which libpq skips on both sides.
fn push_equals(src: &mut Src<'_, '_>, text: &mut Vec<u8>) {
    whitespace(src, text, 15);
    text.push(b'=');
    whitespace(src, text, 15);
}

/// With probability `percent`, one to three whitespace bytes of any kind.
fn whitespace(src: &mut Src<'_, '_>, text: &mut Vec<u8>, percent: usize) {
    if src.chance(percent) {
        push_whitespace(src, text);
    }
}

fn push_whitespace(src: &mut Src<'_, '_>, text: &mut Vec<u8>) {
    let n = 1 + src.below(3);
    for _ in 0..n {
        // Mostly a space; 0 (what an exhausted source gives) must be a separator too.
        let c = if src.chance(60) {
            src.pick(WHITESPACE)
        } else {
            b' '
        };
        text.push(c);
    }
}

fn is_space(c: u8) -> bool {
    WHITESPACE.contains(&c)
}

/// Writes `v` so that libpq reads it back exactly; returns whether it ended with a quote.
fn push_value(src: &mut Src<'_, '_>, text: &mut Vec<u8>, v: &[u8]) -> bool {
    // An empty bare value would swallow what follows (`host= port=1` sets host to "port=1").
    if v.is_empty() || src.chance(50) {
        text.push(b'\'');
        for &c in v {
            // Inside quotes a backslash before any byte stands for that byte.
            if c == b'\'' || c == b'\\' || src.chance(5) {
                text.push(b'\\');
            }
            text.push(c);
        }
        text.push(b'\'');
        return true;
    }
    for (i, &c) in v.iter().enumerate() {
        let must = c == b'\\' || is_space(c) || (i == 0 && c == b'\'');
        if must || src.chance(5) {
            text.push(b'\\');
        }
        text.push(c);
    }
    false
}

/// Keywords that libpq 18 does not know, or only in another spelling.
const NOT_KEYWORDS: &[&[u8]] = &[
    b"foo",
    b"tty",
    b"authtype",
    b"servicefile",
    b"ssl",
    b"Host",
    b"SSLMODE",
    b"requireSSL",
    b"h\xc3\xb6st",
    b"host\xff",
    b"postgresql://h",
    b"'user'",
    b"user\\",
    b"",
];

impl AdversarialKeywordValue {
    pub(super) fn generate(src: &mut Src<'_, '_>) -> AdversarialKeywordValue {
        if src.chance(10) {
            let base = KeywordValue::generate(src).text;
            return AdversarialKeywordValue(mutate(src, base));
        }
        let mut s = Vec::new();
        whitespace(src, &mut s, 30);
        let pairs = src.below(MAX_PAIRS + 1);
        let mut used: Vec<Vec<u8>> = Vec::new();
        for i in 0..pairs {
            if i > 0 && !src.chance(10) {
                push_whitespace(src, &mut s);
            }
            let kw = adversarial_keyword(src, &used);
            s.extend_from_slice(&kw);
            used.push(kw);
            whitespace(src, &mut s, 20);
            match src.below(20) {
                0 => {}                            // no `=`: "missing \"=\" after"
                1 => s.extend_from_slice(b"=="),   // the second `=` starts the value
                2 => s.extend_from_slice(b"= = "), // spaces, then a value that is `=`
                _ => s.push(b'='),
            }
            whitespace(src, &mut s, 20);
            adversarial_value(src, &mut s);
        }
        whitespace(src, &mut s, 20);
        AdversarialKeywordValue(s)
    }
}

fn adversarial_keyword(src: &mut Src<'_, '_>, used: &[Vec<u8>]) -> Vec<u8> {
    match src.below(20) {
        0..=10 => src.keyword().name().as_bytes().to_vec(),
        11 | 12 if !used.is_empty() => used[src.below(used.len())].clone(),
        13 => b"requiressl".to_vec(),
        14 | 15 => src.pick(NOT_KEYWORDS).to_vec(),
        16 => {
            // A real keyword with one letter's case flipped.
            let mut k = src.keyword().name().as_bytes().to_vec();
            let i = src.below(k.len());
            k[i] ^= 0x20;
            k
        }
        _ => {
            let len = 1 + src.below(6);
            (0..len).map(|_| src.pick(PALETTE)).collect()
        }
    }
}

/// A value written with little or no care: quotes left open, escapes at the end, raw bytes,
/// or very long.
fn adversarial_value(src: &mut Src<'_, '_>, s: &mut Vec<u8>) {
    match src.below(12) {
        0 => {
            // Unterminated quote, possibly with an escaped closing quote.
            s.push(b'\'');
            s.extend_from_slice(&value(src, 8));
            if src.chance(50) {
                s.extend_from_slice(b"\\'");
            }
        }
        1 => {
            s.extend_from_slice(&value(src, 8));
            s.push(b'\\');
        }
        2 => {
            // Very long, so buffer growth and error positions past 255 are exercised.
            let len = 256 + src.below(8192);
            let c = src.pick(b"ax'\\ =\xff");
            s.push(b'\'');
            s.extend(std::iter::repeat_n(c, len));
            if src.chance(50) {
                s.push(b'\'');
            }
        }
        3 => s.extend_from_slice(b"''"),
        4 => s.extend_from_slice(b"'a''b'"),
        5..=7 => s.extend_from_slice(&value(src, 12)),
        _ => {
            let v = value(src, 12);
            push_value(src, s, &v);
        }
    }
}
