//! The generators reach their edges over seeded inputs, stay total on any bytes, and the
//! well-formed ones parse to the tables they promise.

use super::*;
use crate::{parse, parse_params, ParseError};

/// Deterministic pseudo-random input buffers (SplitMix64), `count` of them.
fn inputs(seed: u64, count: usize) -> impl Iterator<Item = Vec<u8>> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    (0..count).map(move |_| {
        let len = (next() % 512) as usize;
        (0..len).map(|_| next() as u8).collect()
    })
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// A named property of a generated string.
type Feature = (&'static str, fn(&[u8]) -> bool);

/// Fails naming each feature that none of `texts` shows.
fn assert_reaches(what: &str, texts: &[Vec<u8>], features: &[Feature]) {
    let missing: Vec<&str> = features
        .iter()
        .filter(|(_, seen)| !texts.iter().any(|t| seen(t)))
        .map(|(name, _)| *name)
        .collect();
    assert!(
        missing.is_empty(),
        "{what}: {} inputs never showed {missing:?}",
        texts.len()
    );
}

#[test]
fn exhausted_input_gives_the_simplest_values() {
    assert_eq!(KeywordValue::from_bytes(b"").text, b"");
    assert!(KeywordValue::from_bytes(b"").expected.is_empty());
    assert_eq!(Uri::from_bytes(b"").text, b"postgresql://");
    assert!(Params::from_bytes(b"").entries.is_empty());
    assert!(matches!(ConnString::from_bytes(b""), ConnString::Raw(r) if r.is_empty()));
}

#[test]
fn well_formed_keyword_values_parse_to_their_tables_and_reach_the_edges() {
    let mut texts = Vec::new();
    for data in inputs(1, 3000) {
        let g = KeywordValue::from_bytes(&data);
        assert_eq!(parse(&g.text).as_ref(), Ok(&g.expected), "{:?}", g.text);
        texts.push(g.text);
    }
    assert_reaches(
        "well-formed keyword/value",
        &texts,
        &[
            ("quoted value", |t| contains(t, b"='")),
            ("empty value", |t| contains(t, b"''")),
            ("escaped quote", |t| contains(t, b"\\'")),
            ("escaped backslash", |t| contains(t, b"\\\\")),
            ("space before =", |t| contains(t, b" =")),
            ("no separator after a quote", |t| {
                t.windows(2)
                    .any(|w| w[0] == b'\'' && w[1].is_ascii_lowercase())
            }),
            ("vertical tab", |t| t.contains(&0x0b)),
            ("form feed", |t| t.contains(&0x0c)),
            ("non-UTF-8", |t| std::str::from_utf8(t).is_err()),
            ("requiressl", |t| contains(t, b"requiressl")),
            ("multi-host", |t| contains(t, b"h1,h2")),
        ],
    );
    let duplicate = inputs(2, 3000).any(|data| {
        let g = KeywordValue::from_bytes(&data);
        let kws: Vec<&[u8]> = g
            .text
            .split(|c| WHITESPACE.contains(c))
            .filter_map(|p| p.split(|&c| c == b'=').next())
            .filter(|k| crate::Keyword::from_name(k).is_some())
            .collect();
        (1..kws.len()).any(|i| kws[..i].contains(&kws[i]))
    });
    assert!(duplicate, "no duplicate keyword in 3000 strings");
}

#[test]
fn well_formed_uris_parse_to_their_tables_and_reach_the_edges() {
    let mut texts = Vec::new();
    for data in inputs(3, 3000) {
        let g = Uri::from_bytes(&data);
        assert_eq!(parse(&g.text).as_ref(), Ok(&g.expected), "{:?}", g.text);
        texts.push(g.text);
    }
    assert_reaches(
        "well-formed URI",
        &texts,
        &[
            ("postgresql://", |t| t.starts_with(b"postgresql://")),
            ("postgres://", |t| t.starts_with(b"postgres://")),
            ("IPv6 host", |t| contains(t, b"[::1]")),
            ("IPv6 zone", |t| contains(t, b"%25eth0]")),
            ("port", |t| {
                t.windows(2).any(|w| w[0] == b':' && w[1].is_ascii_digit())
            }),
            ("multi-host", |t| {
                let authority = t.splitn(3, |&c| c == b'/').nth(2).unwrap_or_default();
                let netloc = authority.split(|&c| c == b'/' || c == b'?').next();
                netloc.is_some_and(|n| n.contains(&b','))
            }),
            ("credentials", |t| t.contains(&b'@')),
            ("colon in a port", |t| contains(t, b":5433")),
            ("percent escape", |t| t.contains(&b'%')),
            ("lower-case escape", |t| {
                t.windows(3)
                    .any(|w| w[0] == b'%' && w[2].is_ascii_lowercase())
            }),
            ("query", |t| t.contains(&b'?')),
            ("empty query value", |t| contains(t, b"=&")),
            ("ssl alias", |t| contains(t, b"ssl=")),
            ("socket path", |t| {
                contains(t, b"%2Ftmp") || contains(t, b"%2ftmp")
            }),
            ("padding space", |t| contains(t, b" ")),
        ],
    );
}

#[test]
fn well_formed_arrays_parse_to_their_tables_and_reach_the_edges() {
    let (mut expanded, mut plain, mut null, mut empty, mut nested_uri) = (0, 0, 0, 0, 0);
    for data in inputs(4, 3000) {
        let g = Params::from_bytes(&data);
        let got = parse_params(&g.entries, g.expand_dbname);
        assert_eq!(got.as_ref(), Ok(&g.expected), "{g:?}");
        if g.expand_dbname {
            expanded += 1;
        } else {
            plain += 1;
        }
        null += g.entries.iter().filter(|e| e.1.is_none()).count();
        empty += g
            .entries
            .iter()
            .filter(|e| e.1.as_deref() == Some(b""))
            .count();
        nested_uri += usize::from(
            g.expand_dbname
                && g.entries.iter().any(|(k, v)| {
                    k.as_slice() == b"dbname" && v.as_deref().is_some_and(crate::is_uri)
                }),
        );
    }
    assert!(
        expanded > 100 && plain > 100,
        "{expanded} expanded, {plain} plain"
    );
    assert!(
        null > 100 && empty > 100,
        "{null} NULL values, {empty} empty ones"
    );
    assert!(nested_uri > 50, "{nested_uri} URIs expanded from dbname");
}

#[test]
fn adversarial_keyword_values_reach_the_errors() {
    let mut errors = std::collections::HashSet::new();
    let mut texts = Vec::new();
    for data in inputs(5, 3000) {
        let g = AdversarialKeywordValue::from_bytes(&data);
        if let Err(e) = parse(&g.0) {
            errors.insert(std::mem::discriminant(&e));
        }
        texts.push(g.0);
    }
    for e in [
        ParseError::UnterminatedQuote,
        ParseError::MissingEquals { name: Vec::new() },
        ParseError::InvalidOption { name: Vec::new() },
    ] {
        assert!(
            errors.contains(&std::mem::discriminant(&e)),
            "never produced {e:?}"
        );
    }
    assert_reaches(
        "adversarial keyword/value",
        &texts,
        &[
            ("very long value", |t| t.len() > 4096),
            ("trailing backslash", |t| t.ends_with(b"\\")),
            ("stray ==", |t| contains(t, b"==")),
            ("non-UTF-8", |t| std::str::from_utf8(t).is_err()),
            ("carriage return", |t| t.contains(&b'\r')),
        ],
    );
}

#[test]
fn adversarial_uris_reach_the_errors() {
    let mut messages = std::collections::BTreeSet::new();
    for data in inputs(6, 4000) {
        let g = AdversarialUri::from_bytes(&data);
        if let Err(e) = parse(&g.0) {
            let m = e.to_string();
            let end = m.find('"').unwrap_or(m.len());
            messages.insert(m[..end].trim_end().to_owned());
        }
    }
    for kind in [
        "end of string reached when looking for matching",
        "IPv6 host address may not be empty in URI:",
        "unexpected character",
        "invalid percent-encoded token:",
        "forbidden value %00 in percent-encoded value:",
        "unexpected spaces found in",
        "missing key/value separator",
        "extra key/value separator",
        "invalid URI query parameter:",
        "invalid connection option",
    ] {
        assert!(messages.contains(kind), "never {kind:?}; saw {messages:#?}");
    }
}

#[test]
fn adversarial_arrays_reach_nul_unknown_keywords_and_bad_expansions() {
    let (mut nul, mut unknown, mut ok, mut nested_err) = (0, 0, 0, 0);
    for data in inputs(7, 3000) {
        let g = AdversarialParams::from_bytes(&data);
        match parse_params(&g.entries, g.expand_dbname) {
            Ok(_) => ok += 1,
            Err(ParseError::NulByte { .. }) => nul += 1,
            Err(ParseError::InvalidOption { .. }) => unknown += 1,
            Err(_) => nested_err += 1,
        }
    }
    assert!(
        nul > 50 && unknown > 50 && ok > 50 && nested_err > 20,
        "ok {ok}, NUL {nul}, unknown {unknown}, expansion errors {nested_err}"
    );
}

#[test]
fn conn_string_picks_every_kind() {
    let mut seen = [0usize; 6];
    for data in inputs(8, 600) {
        let i = match ConnString::from_bytes(&data) {
            ConnString::KeywordValue(_) => 0,
            ConnString::Uri(_) => 1,
            ConnString::AdversarialKeywordValue(_) => 2,
            ConnString::AdversarialUri(_) => 3,
            ConnString::Mutated(_) => 4,
            ConnString::Raw(_) => 5,
        };
        seen[i] += 1;
    }
    assert!(seen.iter().all(|&n| n > 20), "{seen:?}");
}

#[test]
fn generators_are_arbitrary_impls_and_deterministic() {
    let data: Vec<u8> = (0..=255).collect();
    let mut u = Unstructured::new(&data);
    let a = Uri::arbitrary(&mut u).map(|g| g.text);
    assert_eq!(a.ok(), Some(Uri::from_bytes(&data).text));
    assert_eq!(
        AdversarialUri::from_bytes(&data),
        AdversarialUri::from_bytes(&data)
    );
}
