//! The benchmark corpus is valid and agreed on: pgyard and libpq 15 accept every string and
//! give the same value for every keyword both know; tokio-postgres accepts every string too.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::str::FromStr;

use pgyard_benches::{corpus::CONNINFO, libpq15};
use pgyard_conninfo::Keyword;

/// libpq 15's view of `s`: keyword to value, for the keywords the string set.
fn libpq(s: &str) -> BTreeMap<String, Vec<u8>> {
    let c = CString::new(s).expect("corpus strings hold no NUL byte");
    let opts = libpq15::conninfo_parse(&c)
        .unwrap_or_else(|e| panic!("libpq 15 rejects {s:?}: {}", e.trim_end()));
    opts.iter()
        .filter_map(|(k, v)| Some((k.to_str().ok()?.to_owned(), v?.to_bytes().to_vec())))
        .collect()
}

#[test]
fn corpus_is_not_trivial() {
    assert!(
        CONNINFO.len() >= 30,
        "corpus has {} strings",
        CONNINFO.len()
    );
    assert!(CONNINFO.iter().any(|s| s.starts_with("postgresql://")));
    assert!(CONNINFO.iter().any(|s| !s.contains("://")));
}

#[test]
fn libpq15_binding_reads_values() {
    let v = libpq("postgresql://user%40corp:p%40ss%3Aword@db.example.com/prod");
    assert_eq!(v.get("user").map(Vec::as_slice), Some(&b"user@corp"[..]));
    assert_eq!(
        v.get("password").map(Vec::as_slice),
        Some(&b"p@ss:word"[..])
    );
    assert_eq!(v.get("dbname").map(Vec::as_slice), Some(&b"prod"[..]));
    let c = CString::new("host=a bogus=1").expect("no NUL");
    let err = libpq15::conninfo_parse(&c)
        .err()
        .expect("libpq rejects an unknown keyword");
    assert_eq!(err, "invalid connection option \"bogus\"\n");
}

#[test]
fn libpq15_knows_what_pgyard_reports_and_agrees() {
    let libpq_keywords: Vec<String> = {
        let c = CString::new("").expect("no NUL");
        let opts = libpq15::conninfo_parse(&c).expect("libpq parses the empty string");
        opts.iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    };
    for s in CONNINFO {
        let ours = pgyard_conninfo::parse(s.as_bytes())
            .unwrap_or_else(|e| panic!("pgyard rejects {s:?}: {e}"));
        let theirs = libpq(s);
        for (kw, v) in ours.iter() {
            assert!(
                libpq_keywords.iter().any(|k| k == kw.name()),
                "{s:?} sets {}, which libpq 15 does not know",
                kw.name()
            );
            assert_eq!(
                theirs.get(kw.name()).map(Vec::as_slice),
                Some(v),
                "{s:?}: value of {}",
                kw.name()
            );
        }
        for (k, v) in &theirs {
            let kw = Keyword::from_name(k.as_bytes())
                .unwrap_or_else(|| panic!("libpq 15 keyword {k} unknown to pgyard"));
            assert_eq!(ours.get(kw), Some(v.as_slice()), "{s:?}: value of {k}");
        }
    }
}

#[test]
fn tokio_postgres_accepts_the_corpus() {
    for s in CONNINFO {
        if let Err(e) = tokio_postgres::Config::from_str(s) {
            panic!("tokio-postgres rejects {s:?}: {e}");
        }
    }
}
