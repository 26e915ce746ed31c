//! The observed libpq 18.4 vectors of the shared spec (§19.1, §4.5, §5), as unit tests.

use super::*;

fn render(r: &Result<ConnInfo, ParseError>) -> String {
    match r {
        Ok(ci) => ci
            .iter()
            .map(|(k, v)| format!("{}={:?}", k.name(), String::from_utf8_lossy(v)))
            .collect::<Vec<_>>()
            .join(" "),
        Err(e) => format!("ERROR: {:?}", String::from_utf8_lossy(&e.libpq_message())),
    }
}

fn check(input: &str, expected: &str) {
    assert_eq!(render(&parse(input)), expected, "input {input:?}");
}

#[test]
fn keyword_value_vectors() {
    let cases: &[(&str, &str)] = &[
        ("", ""),
        ("   ", ""),
        ("host=a host=b", r#"host="b""#),
        (
            "host = a   port= 5432 dbname =x",
            r#"dbname="x" host="a" port="5432""#,
        ),
        (
            "host",
            r#"ERROR: "missing \"=\" after \"host\" in connection info string\n""#,
        ),
        (
            "host a",
            r#"ERROR: "missing \"=\" after \"host\" in connection info string\n""#,
        ),
        ("=a", r#"ERROR: "invalid connection option \"\"\n""#),
        ("foo=bar", r#"ERROR: "invalid connection option \"foo\"\n""#),
        ("Host=a", r#"ERROR: "invalid connection option \"Host\"\n""#),
        ("host='a b'", r#"host="a b""#),
        ("host='it\\'s'", r#"host="it's""#),
        (
            "host='unterminated",
            r#"ERROR: "unterminated quoted string in connection info string\n""#,
        ),
        ("host=a\\ b", r#"host="a b""#),
        ("host=a'b", r#"host="a'b""#),
        ("host=''", r#"host="""#),
        ("host=", r#"host="""#),
        ("host= port=5432", r#"host="port=5432""#),
        ("host='a'port=5432", r#"host="a" port="5432""#),
        ("host=a\\", r#"host="a""#),
        (
            "dbname=\"x y\"",
            r#"ERROR: "missing \"=\" after \"y\"\" in connection info string\n""#,
        ),
        (
            "host='a''b'",
            r#"ERROR: "missing \"=\" after \"'b'\" in connection info string\n""#,
        ),
        ("requiressl=1", r#"sslmode="require""#),
        ("requiressl=yes", r#"sslmode="prefer""#),
        ("sslmode=disable requiressl=1", r#"sslmode="require""#),
        ("requiressl=1 sslmode=disable", r#"sslmode="disable""#),
        ("tty=x", r#"ERROR: "invalid connection option \"tty\"\n""#),
        ("host=a\tport=1\r\n", r#"host="a" port="1""#),
        ("dbname=postgresql://x", r#"dbname="postgresql://x""#),
        ("sslmode=bogus port=abc", r#"port="abc" sslmode="bogus""#),
        ("password='p@ss:w\\\\d'", r#"password="p@ss:w\\d""#),
        ("host=a,b,,c port=1,,3", r#"host="a,b,,c" port="1,,3""#),
    ];
    for (input, expected) in cases {
        check(input, expected);
    }
}

/// The URI vectors, kept outside [`uri_vectors`] so the test stays short as rows are added.
const URI_CASES: &[(&str, &str)] = &[
    ("postgresql://", ""),
    (
        "postgres://u:p@h:1/db?sslmode=require",
        r#"user="u" password="p" dbname="db" host="h" port="1" sslmode="require""#,
    ),
    (
        "POSTGRESQL://h",
        r#"ERROR: "missing \"=\" after \"POSTGRESQL://h\" in connection info string\n""#,
    ),
    (
        " postgresql://h",
        r#"ERROR: "missing \"=\" after \"postgresql://h\" in connection info string\n""#,
    ),
    (
        "postgresql:/h",
        r#"ERROR: "missing \"=\" after \"postgresql:/h\" in connection info string\n""#,
    ),
    (
        "postgresql://h1:5432,h2/db",
        r#"dbname="db" host="h1,h2" port="5432,""#,
    ),
    (
        "postgresql://h1,h2:5433/db",
        r#"dbname="db" host="h1,h2" port=",5433""#,
    ),
    (
        "postgresql://h1,h2/db",
        r#"dbname="db" host="h1,h2" port=",""#,
    ),
    ("postgresql://,/db", r#"dbname="db" host="," port=",""#),
    (
        "postgresql://h1,[::1],/d",
        r#"dbname="d" host="h1,::1," port=",,""#,
    ),
    (
        "postgresql://[::1]:5432,[fe80::1%25eth0]/db",
        r#"dbname="db" host="::1,fe80::1%eth0" port="5432,""#,
    ),
    (
        "postgresql://[::1",
        r#"ERROR: "end of string reached when looking for matching \"]\" in IPv6 host address in URI: \"postgresql://[::1\"\n""#,
    ),
    (
        "postgresql://[]",
        r#"ERROR: "IPv6 host address may not be empty in URI: \"postgresql://[]\"\n""#,
    ),
    (
        "postgresql://[::1]z",
        r#"ERROR: "unexpected character \"z\" at position 19 in URI (expected \":\" or \"/\"): \"postgresql://[::1]z\"\n""#,
    ),
    (
        "postgresql://%2Ftmp%2Fsock/db",
        r#"dbname="db" host="/tmp/sock""#,
    ),
    (
        "postgresql://%40abstract/db",
        r#"dbname="db" host="@abstract""#,
    ),
    ("postgresql://a%2Cb/db", r#"dbname="db" host="a,b""#),
    ("postgresql://h%3A1/db", r#"dbname="db" host="h:1""#),
    (
        "postgresql://h1:1,h2:2/db?host=x",
        r#"dbname="db" host="x" port="1,2""#,
    ),
    (
        "postgresql://h/db?ssl=true",
        r#"dbname="db" host="h" sslmode="require""#,
    ),
    (
        "postgresql://h/db?ssl=false",
        r#"ERROR: "invalid URI query parameter: \"ssl\"\n""#,
    ),
    (
        "postgresql://h/db?requiressl=1",
        r#"dbname="db" host="h" sslmode="require""#,
    ),
    (
        "postgresql://h/db?foo=bar",
        r#"ERROR: "invalid URI query parameter: \"foo\"\n""#,
    ),
    (
        "postgresql://h/db?tty=x",
        r#"ERROR: "invalid URI query parameter: \"tty\"\n""#,
    ),
    (
        "postgresql://h/db?application_name=a+b",
        r#"dbname="db" host="h" application_name="a+b""#,
    ),
    (
        "postgresql://h/db?application_name=a%20b",
        r#"dbname="db" host="h" application_name="a b""#,
    ),
    (
        "postgresql://h/db%00",
        r#"ERROR: "forbidden value %00 in percent-encoded value: \"db%00\"\n""#,
    ),
    (
        "postgresql://h/db name",
        r#"ERROR: "unexpected spaces found in \"db name\", use percent-encoded spaces (%20) instead\n""#,
    ),
    ("postgresql://h/ db", r#"dbname="db" host="h""#),
    (
        "postgresql://h/db?user= a ",
        r#"user="a" dbname="db" host="h""#,
    ),
    ("postgresql://h?user=a@b", r#"user="h?user=a" host="b""#),
    (
        "postgresql://user:pa:ss@h",
        r#"user="user" password="pa:ss" host="h""#,
    ),
    (
        "postgresql://us%40er:p%40ss@h",
        r#"user="us@er" password="p@ss" host="h""#,
    ),
    (
        "postgresql://u@h@x/db",
        r#"user="u" dbname="db" host="h@x""#,
    ),
    (
        "postgresql://h:port/db",
        r#"dbname="db" host="h" port="port""#,
    ),
    ("postgresql://h:5432:5433", r#"host="h" port="5432:5433""#),
    ("postgresql://h/db/extra", r#"dbname="db/extra" host="h""#),
    (
        "postgresql://h/a%3Fb?user=x",
        r#"user="x" dbname="a?b" host="h""#,
    ),
    ("postgresql://h#frag", r#"host="h#frag""#),
    (
        "postgresql://h/db?&",
        r#"ERROR: "missing key/value separator \"=\" in URI query parameter: \"\"\n""#,
    ),
    (
        "postgresql://h/db?port=1&",
        r#"dbname="db" host="h" port="1""#,
    ),
    (
        "postgresql://h/db?=x",
        r#"ERROR: "invalid URI query parameter: \"\"\n""#,
    ),
    (
        "postgresql://h/db?options=a=b",
        r#"ERROR: "extra key/value separator \"=\" in URI query parameter: \"options\"\n""#,
    ),
    (
        "postgresql://h/db?options=-c%20x%3Dy",
        r#"dbname="db" host="h" options="-c x=y""#,
    ),
    (
        "postgresql://h/db?%75ser=x",
        r#"user="x" dbname="db" host="h""#,
    ),
    (
        "postgresql://h/db?x=%",
        r#"ERROR: "invalid percent-encoded token: \"%\"\n""#,
    ),
    ("postgresql://h/db?host=", r#"dbname="db" host="""#),
    (
        "postgresql://h/?dbname=postgresql://x",
        r#"dbname="postgresql://x" host="h""#,
    ),
    (
        "postgresql://h/db?port=5432&port=5433",
        r#"dbname="db" host="h" port="5433""#,
    ),
    // Additional observed rows and the quirk table.
    (
        "postgresql://u:p/w@h/db",
        r#"dbname="w@h/db" host="u" port="p""#,
    ),
    (
        "postgresql://u:p?w@h",
        r#"user="u" password="p?w" host="h""#,
    ),
    ("postgresql://:1,:2/", r#"host="," port="1,2""#),
    (
        "postgresql://h?sslmode=require&sslmode=",
        r#"host="h" sslmode="""#,
    ),
    ("postgresql://h/%2520", r#"dbname="%20" host="h""#),
    (
        "postgresql://host?  user = uri-user & port  = 12345 ",
        r#"user="uri-user" host="host" port="12345""#,
    ),
    (
        "postgresql://h/db?application_name=a%2",
        r#"ERROR: "invalid percent-encoded token: \"a%2\"\n""#,
    ),
    ("postgres://@host", r#"host="host""#),
    ("postgres://host:/", r#"host="host""#),
    ("postgres://:12345/", r#"port="12345""#),
    ("postgresql://u:@h", r#"user="u" host="h""#),
    ("postgresql://:p@h", r#"password="p" host="h""#),
    (
        "postgresql://h/db?port=1&&user=2",
        r#"ERROR: "missing key/value separator \"=\" in URI query parameter: \"\"\n""#,
    ),
    (
        "postgresql://h/db?port",
        r#"ERROR: "missing key/value separator \"=\" in URI query parameter: \"port\"\n""#,
    ),
];

#[test]
fn uri_vectors() {
    for (input, expected) in URI_CASES {
        check(input, expected);
    }
}

#[test]
fn nul_bytes_are_rejected_with_their_offset() {
    assert_eq!(parse(b"host=a\0b"), Err(ParseError::NulByte { offset: 6 }));
}

#[test]
fn non_utf8_values_are_kept_as_bytes() {
    let ci = parse(b"host=\xff\xfe").unwrap();
    assert_eq!(ci.get(Keyword::Host), Some(&b"\xff\xfe"[..]));
    let ci = parse(b"postgresql://h/%FF").unwrap();
    assert_eq!(ci.get(Keyword::Dbname), Some(&b"\xff"[..]));
}

fn params(pairs: &[(&str, Option<&str>)], expand: bool) -> String {
    render(&parse_params(pairs, expand))
}

#[test]
fn keyword_arrays() {
    // Empty and missing values are skipped, even for unknown keywords.
    assert_eq!(
        params(
            &[("bogus", Some("")), ("host", None), ("port", Some("1"))],
            false
        ),
        r#"port="1""#
    );
    assert_eq!(
        params(&[("requiressl", Some("1"))], false),
        r#"ERROR: "invalid connection option \"requiressl\"\n""#
    );
    // Observed: the expansion overrides earlier entries, later entries override it, and the
    // expanded dbname entry is not stored literally.
    assert_eq!(
        params(
            &[
                ("host", Some("127.0.0.1")),
                ("port", Some("6099")),
                (
                    "dbname",
                    Some("host=10.0.0.1 port=1 user=x application_name=a")
                ),
                ("user", Some("u")),
            ],
            true
        ),
        r#"user="u" host="10.0.0.1" port="1" application_name="a""#
    );
    assert_eq!(
        params(
            &[
                ("dbname", Some("postgresql://h9:9/realdb?sslmode=disable")),
                ("host", Some("127.0.0.1"))
            ],
            true
        ),
        r#"dbname="realdb" host="127.0.0.1" port="9" sslmode="disable""#
    );
    // A second dbname is taken literally.
    assert_eq!(
        params(
            &[("dbname", Some("port=7")), ("dbname", Some("port=8"))],
            true
        ),
        r#"dbname="port=8" port="7""#
    );
    // Without expansion the dbname is literal; an expansion may alias requiressl.
    assert_eq!(
        params(&[("dbname", Some("port=7"))], false),
        r#"dbname="port=7""#
    );
    assert_eq!(
        params(&[("dbname", Some("requiressl=1"))], true),
        r#"sslmode="require""#
    );
    // Expansion parse errors abort.
    assert_eq!(
        params(&[("dbname", Some("foo=1"))], true),
        r#"ERROR: "invalid connection option \"foo\"\n""#
    );
    // An empty first dbname stops the search for an expansion.
    assert_eq!(
        params(&[("dbname", Some("")), ("dbname", Some("port=8"))], true),
        r#"dbname="port=8""#
    );
}

#[test]
fn word_at_a_time_nul_search_agrees_with_a_byte_loop() {
    let alphabet = [0u8, 1, 0x7f, 0x80, 0x81, 0xff, b'a'];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for len in 0..40 {
        for _ in 0..200 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(memchr0(&v), v.iter().position(|&b| b == 0), "{v:?}");
        }
    }
}

#[test]
fn word_at_a_time_scans_agree_with_byte_scans() {
    let alphabet = [
        0u8, 1, b' ', b'\t', 0x0b, b'=', b'\\', b'\'', 0x7f, 0x80, 0xa0, 0xff, b'a', b'Z',
    ];
    let masks = [
        (0x21u8, b'=', b'=', SPACE | EQUALS | NUL),
        (0x21, b'\\', b'\\', SPACE | BACKSLASH | NUL),
        (1, b'\'', b'\\', QUOTE | BACKSLASH | NUL),
    ];
    let mut state = 0x2545_F491_4F6C_DD1Du64;
    for len in 0..48 {
        for _ in 0..150 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize]
                })
                .collect();
            for (below, a, b, mask) in masks {
                for from in [0, len / 3] {
                    assert_eq!(
                        find_fast(&v, from, below, a, b, mask),
                        find_class(&v, from, mask),
                        "{v:?} from {from}"
                    );
                }
            }
        }
    }
}
