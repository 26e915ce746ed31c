//! The keyword arrays of `PQconnectdbParams`: entries with a NULL or empty value are skipped
//! (whatever their keyword), the rest must name a keyword (no aliases here), the last one
//! wins; with `expand_dbname` the first `dbname` entry with a non-NULL value is parsed as a
//! connection string when it looks like one, and its settings land where that entry stands.

use super::{
    value, AdversarialKeywordValue, AdversarialParams, AdversarialUri, Entry, KeywordValue, Params,
    Src, Uri,
};
use crate::{is_uri, recognized_connection_string, ConnInfo, Keyword};

const MAX_ENTRIES: usize = 8;

/// Keywords that are not in libpq 18's table, harmless next to a NULL or empty value.
const UNKNOWN: &[&[u8]] = &[b"foo", b"requiressl", b"ssl", b"Host", b"", b"tty"];

impl Params {
    pub(super) fn generate(src: &mut Src<'_, '_>) -> Params {
        let expand_dbname = src.chance(50);
        let n = src.below(MAX_ENTRIES + 1);
        let mut entries: Vec<Entry> = Vec::with_capacity(n + 1);
        for _ in 0..n {
            let v = match src.below(10) {
                0 => None,
                1 => Some(Vec::new()),
                _ => Some(value(src, 12)),
            };
            let known = v.as_ref().is_some_and(|v| !v.is_empty()) || src.chance(80);
            let k = if known {
                src.keyword().name().as_bytes().to_vec()
            } else {
                src.pick(UNKNOWN).to_vec()
            };
            entries.push((k, v));
        }
        let mut nested: Option<(usize, ConnInfo)> = None;
        if expand_dbname && src.chance(60) {
            let (text, expected) = if src.chance(50) {
                let g = KeywordValue::generate(src);
                (g.text, g.expected)
            } else {
                let g = Uri::generate(src);
                (g.text, g.expected)
            };
            let at = src.below(entries.len() + 1);
            if recognized_connection_string(&text) {
                nested = Some((at, expected));
            }
            entries.insert(at, (b"dbname".to_vec(), Some(text)));
        }
        if expand_dbname {
            keep_first_dbname_plain(&mut entries, nested.as_ref().map(|n| n.0));
        }
        let mut expected = ConnInfo::new();
        for (i, (k, v)) in entries.iter().enumerate() {
            let Some(v) = v.as_ref().filter(|v| !v.is_empty()) else {
                continue;
            };
            match &nested {
                Some((at, exp)) if *at == i => {
                    for (kw, v) in exp.iter() {
                        expected.set(kw, v);
                    }
                }
                _ => {
                    if let Some(kw) = Keyword::from_name(k) {
                        expected.set(kw, v);
                    }
                }
            }
        }
        Params {
            entries,
            expand_dbname,
            expected,
        }
    }
}

/// Makes sure the expansion is only the nested string at `nested` (if any): the `dbname`
/// entries before it lose their values, and the first one with a value otherwise stops looking
/// like a connection string.
fn keep_first_dbname_plain(entries: &mut [Entry], nested: Option<usize>) {
    for (i, (k, v)) in entries.iter_mut().enumerate() {
        if k.as_slice() != b"dbname" || v.is_none() {
            continue;
        }
        match nested {
            Some(at) if i == at => return,
            Some(_) => *v = None,
            None => {
                if let Some(v) = v.as_mut() {
                    v.retain(|&c| c != b'=');
                    if is_uri(v) {
                        v.remove(0);
                    }
                }
                return;
            }
        }
    }
}

impl AdversarialParams {
    pub(super) fn generate(src: &mut Src<'_, '_>) -> AdversarialParams {
        let expand_dbname = src.chance(60);
        let n = src.below(MAX_ENTRIES + 1);
        let mut entries = Vec::with_capacity(n);
        for _ in 0..n {
            let k = match src.below(10) {
                0..=4 => src.keyword().name().as_bytes().to_vec(),
                5 | 6 => b"dbname".to_vec(),
                7 => src.pick(UNKNOWN).to_vec(),
                8 => b"ho\0st".to_vec(),
                _ => value(src, 8),
            };
            let v = match src.below(10) {
                0 => None,
                1 => Some(Vec::new()),
                2 => Some(AdversarialKeywordValue::generate(src).0),
                3 => Some(AdversarialUri::generate(src).0),
                4 => {
                    let mut v = value(src, 8);
                    v.insert(src.below(v.len() + 1), 0);
                    Some(v)
                }
                _ => Some(value(src, 12)),
            };
            entries.push((k, v));
        }
        AdversarialParams {
            entries,
            expand_dbname,
        }
    }
}
