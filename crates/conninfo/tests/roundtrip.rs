//! Round trips through the serializers, and the proposal dialect against libpq mode.
//!
//! Properties:
//! - any table → keyword/value or URI → the same table;
//! - any string that parses → table → either form → the same table;
//! - the proposal dialect never panics, agrees with libpq mode wherever the two are defined to
//!   agree, and reads the serializers' output (each keyword once) back to the same result.

use pgyard_conninfo::keywords::ALL;
use pgyard_conninfo::serialize::{to_keyword_value, to_uri};
use pgyard_conninfo::{parse, proposal, ConnInfo, Keyword, ParseError};
use proptest::prelude::*;
use proptest::sample::select;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRunner};

/// Bytes that mean something to one of the two grammars, plus a few that are not UTF-8.
const ADVERSARIAL: &[u8] = b" \t\n\x0b\x0c\r'\\\"=&%,@/?[]:#+a1Z.-_~\x7f\x80\xc3\xa9\xff";

fn value() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![4 => select(ADVERSARIAL), 1 => 1u8..=255];
    prop::collection::vec(byte, 0..10)
}

/// A keyword, biased towards the five the URI authority can carry.
fn keyword() -> impl Strategy<Value = Keyword> {
    prop_oneof![
        1 => select(vec![
            Keyword::User,
            Keyword::Password,
            Keyword::Host,
            Keyword::Port,
            Keyword::Dbname,
        ]),
        1 => select(ALL),
    ]
}

fn conninfo() -> impl Strategy<Value = ConnInfo> {
    prop::collection::vec((keyword(), value()), 0..8).prop_map(|pairs| {
        let mut ci = ConnInfo::new();
        for (kw, v) in pairs {
            ci.set(kw, v);
        }
        ci
    })
}

/// Keyword/value strings built from pieces that usually, but not always, parse.
fn keyword_value_string() -> impl Strategy<Value = Vec<u8>> {
    let name = select(vec![
        "host",
        "port",
        "hostaddr",
        "user",
        "password",
        "dbname",
        "options",
        "requiressl",
        "sslmode",
        "target_session_attrs",
    ]);
    let sep = select(vec!["=", " = ", "=\t", " ="]);
    let pair = (name, sep, any::<bool>(), value()).prop_map(|(name, sep, quoted, v)| {
        let mut s = name.as_bytes().to_vec();
        s.extend_from_slice(sep.as_bytes());
        if quoted {
            s.push(b'\'');
        }
        s.extend_from_slice(&v);
        if quoted {
            s.push(b'\'');
        }
        s
    });
    prop::collection::vec(pair, 0..6).prop_map(|pairs| pairs.join(&b' '))
}

/// URIs built from fragments of every part of the URI grammar.
fn uri_string() -> impl Strategy<Value = Vec<u8>> {
    let fragment = select(vec![
        "u",
        "h",
        "db",
        "5432",
        ":",
        "@",
        "/",
        "?",
        ",",
        "[",
        "]",
        "[::1]",
        "[fe80::1%25e]",
        "%2C",
        "%3A",
        "%40",
        "%2F",
        "%20",
        "%25",
        "%FF",
        "%c3%a9",
        " ",
        "+",
        "#",
        "=",
        "&",
        "host=",
        "port=",
        "hostaddr=",
        "user=",
        "dbname=",
        "options=",
        "ssl=true",
        "requiressl=",
        "sslmode=",
        "\u{e9}",
        "\t",
    ]);
    (
        select(vec!["postgresql://", "postgres://"]),
        prop::collection::vec(fragment, 0..14),
    )
        .prop_map(|(prefix, parts)| {
            let mut s = prefix.as_bytes().to_vec();
            for p in parts {
                s.extend_from_slice(p.as_bytes());
            }
            s
        })
}

fn any_string() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![keyword_value_string(), uri_string()]
}

/// Strings for the dialect: the above, with its keywords and repeated hosts mixed in.
fn dialect_string() -> impl Strategy<Value = Vec<u8>> {
    let extra = select(vec![
        " readonly=true",
        " readonly=of",
        " readonly=o",
        " loadbalancing=1",
        " loadbalancing=",
        " host=x",
        " port=1",
        " hostaddr=1.2.3.4",
        " load_balance_hosts=random",
        " target_session_attrs=any",
        "&readonly=yes",
        "&loadBalanceHosts=true",
        "&loadBalanceHosts=nope",
        "&host=y",
        "&port=2",
        "&load_balance_hosts=disable",
    ]);
    (any_string(), prop::collection::vec(extra, 0..4)).prop_map(|(mut s, extras)| {
        for e in extras {
            s.extend_from_slice(e.as_bytes());
        }
        s
    })
}

fn is_dialect_keyword(name: &[u8]) -> bool {
    matches!(name, b"readonly" | b"loadbalancing" | b"loadBalanceHosts")
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `x` with the dialect's defaults for the two keywords it always sets.
fn with_dialect_defaults(x: &ConnInfo) -> ConnInfo {
    let mut x = x.clone();
    if !x.is_set(Keyword::TargetSessionAttrs) {
        x.set(Keyword::TargetSessionAttrs, "read-write");
    }
    if !x.is_set(Keyword::LoadBalanceHosts) {
        x.set(Keyword::LoadBalanceHosts, "disable");
    }
    x
}

proptest! {
    #![proptest_config(Config { cases: 2048, ..Config::default() })]

    #[test]
    fn keyword_value_round_trips(x in conninfo()) {
        let s = to_keyword_value(&x);
        prop_assert_eq!(parse(&s), Ok(x), "{}", lossy(&s));
    }

    #[test]
    fn uri_round_trips(x in conninfo()) {
        let s = to_uri(&x);
        prop_assert_eq!(parse(&s), Ok(x), "{}", lossy(&s));
    }

    #[test]
    fn parsed_strings_round_trip(s in any_string()) {
        if let Ok(x) = parse(&s) {
            let kv = to_keyword_value(&x);
            prop_assert_eq!(parse(&kv), Ok(x.clone()), "{} -> {}", lossy(&s), lossy(&kv));
            let uri = to_uri(&x);
            prop_assert_eq!(parse(&uri), Ok(x.clone()), "{} -> {}", lossy(&s), lossy(&uri));
        }
    }

    #[test]
    fn serialized_tables_read_the_same_in_the_dialect(x in conninfo()) {
        // Each keyword is written once, so accumulation changes nothing.
        let expected = with_dialect_defaults(&x);
        for s in [to_keyword_value(&x), to_uri(&x)] {
            let p = proposal::parse(&s);
            prop_assert_eq!(p.map(|p| p.conninfo), Ok(expected.clone()), "{}", lossy(&s));
        }
    }

    #[test]
    fn dialect_never_panics_on_bytes(s in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = proposal::parse(&s);
        let mut uri = b"postgresql://".to_vec();
        uri.extend_from_slice(&s);
        let _ = proposal::parse(&uri);
    }

    #[test]
    fn dialect_agrees_with_libpq_where_defined(s in dialect_string()) {
        let dialect = proposal::parse(&s);
        match parse(&s) {
            Ok(libpq) => {
                // libpq accepted it, so it holds no dialect keyword: the dialect accepts it too.
                let p = dialect.map_err(|e| TestCaseError::fail(format!("{e}")))?;
                for kw in ALL.iter().copied() {
                    let (d, l) = (p.conninfo.get(kw), libpq.get(kw));
                    match kw {
                        // Accumulated: libpq kept the last occurrence, a suffix of the list.
                        Keyword::Host | Keyword::Hostaddr | Keyword::Port => {
                            prop_assert_eq!(d.is_some(), l.is_some(), "{:?}", kw);
                            if let (Some(d), Some(l)) = (d, l) {
                                prop_assert!(d.ends_with(l), "{:?} {}", kw, lossy(&s));
                            }
                        }
                        Keyword::TargetSessionAttrs => {
                            prop_assert_eq!(d, Some(l.unwrap_or(b"read-write".as_slice())));
                        }
                        Keyword::LoadBalanceHosts => {
                            prop_assert_eq!(d, Some(l.unwrap_or(b"disable".as_slice())));
                        }
                        _ => prop_assert_eq!(d, l, "{:?}", kw),
                    }
                }
            }
            Err(libpq_error) => {
                let names_dialect_keyword = match &libpq_error {
                    ParseError::InvalidOption { name } => is_dialect_keyword(name),
                    ParseError::UriInvalidParameter { keyword } => is_dialect_keyword(keyword),
                    _ => false,
                };
                // Unless libpq stopped at a keyword the dialect knows, the dialect stops at the
                // same error, or earlier at one of its booleans.
                if !names_dialect_keyword {
                    match dialect {
                        Ok(_) => prop_assert!(false, "dialect accepted {}", lossy(&s)),
                        Err(e) => prop_assert!(
                            matches!(e, ParseError::InvalidBoolean { .. }) || e == libpq_error,
                            "{} vs {} for {}", e, libpq_error, lossy(&s)
                        ),
                    }
                }
            }
        }
    }

    #[test]
    fn dialect_results_survive_serialization(s in dialect_string()) {
        if let Ok(p) = proposal::parse(&s) {
            for out in [to_keyword_value(&p.conninfo), to_uri(&p.conninfo)] {
                prop_assert_eq!(proposal::parse(&out), Ok(p.clone()), "{}", lossy(&out));
            }
        }
    }
}

/// The string generators must mostly produce strings that parse, or the properties above
/// would hold vacuously.
#[test]
fn generators_mostly_produce_parseable_strings() {
    fn share_ok(strategy: impl Strategy<Value = Vec<u8>>, ok: impl Fn(&[u8]) -> bool) -> f64 {
        let mut runner = TestRunner::deterministic();
        let mut hits = 0u32;
        let total = 1000u32;
        for _ in 0..total {
            // A deterministic runner over an infallible strategy cannot fail to generate.
            let s = strategy
                .new_tree(&mut runner)
                .expect("value strategies do not reject")
                .current();
            hits += u32::from(ok(&s));
        }
        f64::from(hits) / f64::from(total)
    }
    let kv = share_ok(keyword_value_string(), |s| parse(s).is_ok());
    let uri = share_ok(uri_string(), |s| parse(s).is_ok());
    let dialect = share_ok(dialect_string(), |s| proposal::parse(s).is_ok());
    assert!(kv > 0.3, "keyword/value share {kv}");
    assert!(uri > 0.3, "URI share {uri}");
    assert!(dialect > 0.2, "dialect share {dialect}");
}

#[test]
fn libpq_vectors_round_trip() {
    // A selection of the spec's §19.1 inputs that parse, through both serializers.
    for input in [
        "host = a   port= 5432 dbname =x",
        "host='it\\'s'",
        "host=a\\ b",
        "host=a'b",
        "host=''",
        "host= port=5432",
        "password='p@ss:w\\\\d'",
        "host=a,b,,c port=1,,3",
        "dbname=postgresql://x",
        "postgres://u:p@h:1/db?sslmode=require",
        "postgresql://h1:5432,h2/db",
        "postgresql://h1,h2:5433/db",
        "postgresql://,/db",
        "postgresql://h1,[::1],/d",
        "postgresql://[::1]:5432,[fe80::1%25eth0]/db",
        "postgresql://%2Ftmp%2Fsock/db",
        "postgresql://a%2Cb/db",
        "postgresql://h%3A1/db",
        "postgresql://h1:1,h2:2/db?host=x",
        "postgresql://h?user=a@b",
        "postgresql://u@h@x/db",
        "postgresql://h:5432:5433",
        "postgresql://h/a%3Fb?user=x",
        "postgresql://h/db?host=",
        "postgresql://u:p/w@h/db",
        "postgresql://:1,:2/",
        "postgresql://h/%2520",
    ] {
        // Each vector parses; `expect` documents it.
        let x = parse(input).expect("spec vector parses");
        assert_eq!(parse(to_keyword_value(&x)), Ok(x.clone()), "{input}");
        assert_eq!(parse(to_uri(&x)), Ok(x), "{input}");
    }
}

#[test]
fn representative_uris() {
    let cases: &[(&str, &str)] = &[
        (
            "host=h1,h2 port=5432,5433 dbname=app user=me",
            "postgresql://me@h1:5432,h2:5433/app",
        ),
        ("postgresql://h1,h2/db", "postgresql://h1,h2/db"),
        (
            "postgresql://h1:1,h2:2/db?host=x",
            "postgresql://x:1%2C2/db",
        ),
        (
            "host=/var/run/postgresql",
            "postgresql://%2Fvar%2Frun%2Fpostgresql",
        ),
        ("postgresql://h/db?host=", "postgresql:///db?host="),
        (
            "options='-c search_path=a,b' application_name=x",
            "postgresql://?options=-c%20search_path%3Da,b&application_name=x",
        ),
        ("requiressl=1", "postgresql://?sslmode=require"),
    ];
    for (input, expected) in cases {
        // Each case is a valid connection string; `expect` documents it.
        let x = parse(input).expect("case parses");
        assert_eq!(lossy(&to_uri(&x)), *expected, "{input}");
    }
}
