//! Differential tests: pgyard's `parse` against libpq 18's `PQconninfoParse`, loaded through
//! FFI from the PostgreSQL 18 cache (`pgyard_testkit::libpq`).
//!
//! No expected output is written down here: libpq answers every input, and pgyard must give
//! the same keyword→value map or the same error bytes. Inputs come from the shared spec
//! (§19.1, §4.5), the inputs of upstream's `src/interfaces/libpq/t/001_uri.pl`, seeded
//! grammar-aware generators of both forms, and byte-level mutations. Every disagreement is
//! minimized and reported with its seed and case index; `PGYARD_DIFF_SEED` replaces the
//! fixed seeds and `PGYARD_DIFF_SCALE` multiplies the case counts, for longer hunts.
//!
//! If libpq 18 cannot be installed or loaded, the tests fail; they never skip.

mod support;

use pgyard_conninfo::keywords::{self, Display};
use support::{esc, libpq, Report, Rng};

/// Cases per generator at scale 1 (the default); tuned to finish in seconds in debug builds.
const KV_CASES: usize = 25_000;
const URI_CASES: usize = 30_000;
const MUTATION_CASES: usize = 25_000;

fn seed(default: u64) -> u64 {
    match std::env::var("PGYARD_DIFF_SEED") {
        Ok(s) => {
            let s = s.trim();
            let parsed = match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => s.parse(),
            };
            parsed.unwrap_or_else(|_| panic!("PGYARD_DIFF_SEED={s:?} is not a number"))
        }
        Err(_) => default,
    }
}

fn cases(n: usize) -> usize {
    let scale = std::env::var("PGYARD_DIFF_SCALE")
        .ok()
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(1);
    n * scale.max(1)
}

/// The generator state for case `index` of a run with `seed`: each case is reproducible alone.
fn case_rng(seed: u64, index: usize) -> Rng {
    let mut mix = Rng::new(seed ^ (index as u64).wrapping_mul(0xa076_1d64_78bd_642f));
    Rng::new(mix.next_u64())
}

/// Outcome kinds (see `support::kind`) the keyword/value generator must make libpq produce.
const KV_KINDS: &[&str] = &[
    "ok",
    "missing",
    "invalid connection option",
    "unterminated quoted string in connection info string",
];

/// Outcome kinds the URI generator must make libpq produce: every URI error libpq has.
const URI_KINDS: &[&str] = &[
    "ok",
    "missing",
    "end of string reached when looking for matching",
    "IPv6 host address may not be empty in URI:",
    "unexpected character",
    "invalid percent-encoded token:",
    "forbidden value %00 in percent-encoded value:",
    "unexpected spaces found in",
    "missing key/value separator",
    "extra key/value separator",
    "invalid URI query parameter:",
];

/// Outcome kinds the byte mutations must make libpq produce.
const MUTATION_KINDS: &[&str] = &[
    "ok",
    "missing",
    "invalid connection option",
    "unterminated quoted string in connection info string",
    "unexpected character",
    "invalid percent-encoded token:",
    "unexpected spaces found in",
    "missing key/value separator",
    "extra key/value separator",
    "invalid URI query parameter:",
];

/// Inputs of the shared spec's §19.1 table (rows 1–80), its extra observed rows, and the
/// §3/§4 examples.
const SPEC_INPUTS: &[&[u8]] = &[
    b"",
    b"   ",
    b"host=a host=b",
    b"host = a   port= 5432 dbname =x",
    b"host",
    b"host a",
    b"=a",
    b"foo=bar",
    b"Host=a",
    b"host='a b'",
    br"host='it\'s'",
    b"host='unterminated",
    br"host=a\ b",
    b"host=a'b",
    b"host=''",
    b"host=",
    b"host= port=5432",
    b"host='a'port=5432",
    br"host=a\",
    br#"dbname="x y""#,
    b"host='a''b'",
    b"requiressl=1",
    b"requiressl=yes",
    b"sslmode=disable requiressl=1",
    b"requiressl=1 sslmode=disable",
    b"tty=x",
    b"host=a\tport=1\r\n",
    b"dbname=postgresql://x",
    b"sslmode=bogus port=abc",
    br"password='p@ss:w\\d'",
    b"host=a,b,,c port=1,,3",
    b"postgresql://",
    b"postgres://u:p@h:1/db?sslmode=require",
    b"POSTGRESQL://h",
    b" postgresql://h",
    b"postgresql:/h",
    b"postgresql://h1:5432,h2/db",
    b"postgresql://h1,h2:5433/db",
    b"postgresql://h1,h2/db",
    b"postgresql://,/db",
    b"postgresql://h1,[::1],/d",
    b"postgresql://[::1]:5432,[fe80::1%25eth0]/db",
    b"postgresql://[::1",
    b"postgresql://[]",
    b"postgresql://[::1]z",
    b"postgresql://%2Ftmp%2Fsock/db",
    b"postgresql://%40abstract/db",
    b"postgresql://a%2Cb/db",
    b"postgresql://h%3A1/db",
    b"postgresql://h1:1,h2:2/db?host=x",
    b"postgresql://h/db?ssl=true",
    b"postgresql://h/db?ssl=false",
    b"postgresql://h/db?requiressl=1",
    b"postgresql://h/db?foo=bar",
    b"postgresql://h/db?tty=x",
    b"postgresql://h/db?application_name=a+b",
    b"postgresql://h/db?application_name=a%20b",
    b"postgresql://h/db%00",
    b"postgresql://h/db name",
    b"postgresql://h/ db",
    b"postgresql://h/db?user= a ",
    b"postgresql://h?user=a@b",
    b"postgresql://user:pa:ss@h",
    b"postgresql://us%40er:p%40ss@h",
    b"postgresql://u@h@x/db",
    b"postgresql://h:port/db",
    b"postgresql://h:5432:5433",
    b"postgresql://h/db/extra",
    b"postgresql://h/a%3Fb?user=x",
    b"postgresql://h#frag",
    b"postgresql://h/db?&",
    b"postgresql://h/db?port=1&",
    b"postgresql://h/db?=x",
    b"postgresql://h/db?options=a=b",
    b"postgresql://h/db?options=-c%20x%3Dy",
    b"postgresql://h/db?%75ser=x",
    b"postgresql://h/db?x=%",
    b"postgresql://h/db?host=",
    b"postgresql://h/?dbname=postgresql://x",
    b"postgresql://h/db?port=5432&port=5433",
    // Additional observed rows of §19.1.
    b"postgresql://u:p/w@h/db",
    b"postgresql://u:p?w@h",
    b"postgresql://:1,:2/",
    b"postgresql://h?sslmode=require&sslmode=",
    b"postgresql://h/%2520",
    b"postgresql://host?  user = uri-user & port  = 12345 ",
    b"postgresql://h/db?application_name=a%2",
    // §4.5 quirk table and other §3/§4 examples.
    b"postgres://@host",
    b"postgres://host:/",
    b"postgres://:12345/",
    b"postgresql://u:@h",
    b"postgresql://:p@h",
    b"postgresql://h/%20db%20",
    b"postgresql://h?port=1&&user=2",
    b"postgresql://h/db?ssl=TRUE",
    b"postgresql://h/db?dbname=",
    b"postgresql://%2Fvar%2Flib%2Fpostgresql/db",
    b"postgresql://%40name",
    b"postgresql://[v1.x]",
    b"servicefile=x",
    b"authtype=x",
    b"service=nosuch",
];

/// The inputs (only) of upstream PostgreSQL's `src/interfaces/libpq/t/001_uri.pl`.
const UPSTREAM_001_URI_INPUTS: &[&[u8]] = &[
    b"postgresql://uri-user:secret@host:12345/db",
    b"postgresql://uri-user@host:12345/db",
    b"postgresql://uri-user@host/db",
    b"postgresql://host:12345/db",
    b"postgresql://host/db",
    b"postgresql://uri-user@host:12345/",
    b"postgresql://uri-user@host/",
    b"postgresql://uri-user@",
    b"postgresql://host:12345/",
    b"postgresql://host:12345",
    b"postgresql://host/",
    b"postgresql://host",
    b"postgresql://?hostaddr=127.0.0.1",
    b"postgresql://example.com?hostaddr=63.1.2.4",
    b"postgresql://%68ost/",
    b"postgresql://host/db?user=uri-user",
    b"postgresql://host/db?user=uri-user&port=12345",
    b"postgresql://host/db?u%73er=someotheruser&port=12345",
    b"postgresql://host/db?u%7aer=someotheruser&port=12345",
    b"postgresql://host:12345?user=uri-user",
    b"postgresql://host?user=uri-user",
    b"postgresql://host?",
    b"postgresql://[::1]:12345/db",
    b"postgresql://[::1]/db",
    b"postgresql://[2001:db8::1234]/",
    b"postgresql://[200z:db8::1234]/",
    b"postgresql://[::1]",
    b"postgres://",
    b"postgres:///",
    b"postgres:///db",
    b"postgres://uri-user@/db",
    b"postgres://?host=/path/to/socket/dir",
    b"postgresql://host?uzer=",
    b"postgre://",
    b"postgres://[::1",
    b"postgres://[]",
    b"postgres://[::1]z",
    b"postgresql://host?zzz",
    b"postgresql://host?value1&value2",
    b"postgresql://host?key=key=value",
    b"postgres://host?dbname=%XXfoo",
    b"postgresql://a%00b",
    b"postgresql://%zz",
    b"postgresql://%1",
    b"postgresql://%",
    b"postgres://@host",
    b"postgres://host:/",
    b"postgres://:12345/",
    b"postgres://otheruser@?host=/no/such/directory",
    b"postgres://otheruser@/?host=/no/such/directory",
    b"postgres://otheruser@:12345?host=/no/such/socket/path",
    b"postgres://otheruser@:12345/db?host=/path/to/socket",
    b"postgres://:12345/db?host=/path/to/socket",
    b"postgres://:12345?host=/path/to/socket",
    b"postgres://%2Fvar%2Flib%2Fpostgresql/dbname",
    b"postgresql://host?sslmode=disable",
    b"postgresql://host?sslmode=prefer",
    b"postgresql://host?sslmode=verify-full",
];

/// Inputs on which the generators once caught pgyard disagreeing with libpq; kept as a
/// standing check (libpq supplies the expected answers here too).
const FOUND_BY_GENERATORS: &[&[u8]] = &[];

fn check_list(what: &str, inputs: &[&[u8]]) {
    let mut report = Report::default();
    for (i, input) in inputs.iter().enumerate() {
        report.check(|| format!("{what}[{i}]"), input);
    }
    report.finish(what);
}

#[test]
fn libpq_is_version_18() {
    let v = libpq().lib_version();
    assert!(
        (180000..190000).contains(&v),
        "the oracle must be libpq 18, but PQlibVersion() = {v} ({})",
        libpq().path().display()
    );
}

#[test]
fn spec_vectors_agree_with_libpq() {
    check_list("spec §19.1/§4.5 inputs", SPEC_INPUTS);
}

#[test]
fn upstream_001_uri_inputs_agree_with_libpq() {
    check_list("upstream 001_uri.pl inputs", UPSTREAM_001_URI_INPUTS);
}

#[test]
fn inputs_found_by_generators_agree_with_libpq() {
    check_list("inputs found by generators", FOUND_BY_GENERATORS);
}

/// Long inputs: big values, many pairs, long host lists, error positions past 255.
#[test]
fn long_inputs_agree_with_libpq() {
    let mut inputs: Vec<Vec<u8>> = Vec::new();
    let big = "x".repeat(70_000);
    inputs.push(format!("host={big} port=1").into_bytes());
    inputs.push(format!("host='{big}\\' port=1").into_bytes());
    inputs.push(format!("{big}=1").into_bytes());
    inputs.push(format!("application_name='{big}").into_bytes());
    inputs.push("host=a ".repeat(5_000).into_bytes());
    inputs.push(
        format!("postgresql://{big}:{big}@{big}:{big}/{big}?application_name={big}").into_bytes(),
    );
    inputs.push(format!("postgresql://u{big}@[::1]z").into_bytes());
    let mut bracket = format!("postgresql://[{big}]").into_bytes();
    bracket.push(0xff);
    inputs.push(bracket);
    inputs.push(format!("postgresql://h/{}", "%41".repeat(20_000)).into_bytes());
    inputs.push(format!("postgresql://h/{} ", "%41".repeat(20_000)).into_bytes());
    inputs.push(format!("postgresql://h/{}x y", "%41".repeat(20_000)).into_bytes());
    let hosts: Vec<String> = (0..3_000).map(|i| format!("h{i}:{i}")).collect();
    inputs.push(format!("postgresql://{}/db", hosts.join(",")).into_bytes());
    let v6: Vec<String> = (0..3_000).map(|i| format!("[::{i}]")).collect();
    inputs.push(format!("postgresql://{}/db", v6.join(",")).into_bytes());
    inputs.push(format!("postgresql://h/db?{}", "port=1&".repeat(5_000)).into_bytes());
    let mut report = Report::default();
    for (i, input) in inputs.iter().enumerate() {
        report.check(|| format!("long input {i}"), input);
    }
    report.finish("long inputs");
}

#[test]
fn generated_keyword_value_strings_agree_with_libpq() {
    let seed = seed(0x6b76_0001);
    let mut report = Report::default();
    for i in 0..cases(KV_CASES) {
        let input = support::gen_keyword_value(&mut case_rng(seed, i));
        report.check(
            || format!("keyword/value generator, seed {seed:#x}, case {i}"),
            &input,
        );
    }
    let what = format!("keyword/value generator (seed {seed:#x})");
    report.finish(&what);
    report.assert_covers(&what, KV_KINDS);
}

#[test]
fn generated_uris_agree_with_libpq() {
    let seed = seed(0x7572_0001);
    let mut report = Report::default();
    for i in 0..cases(URI_CASES) {
        let input = support::gen_uri(&mut case_rng(seed, i));
        report.check(
            || format!("URI generator, seed {seed:#x}, case {i}"),
            &input,
        );
    }
    let what = format!("URI generator (seed {seed:#x})");
    report.finish(&what);
    report.assert_covers(&what, URI_KINDS);
}

#[test]
fn mutated_strings_agree_with_libpq() {
    let seed = seed(0x6d75_0001);
    let lib = libpq();
    let mut report = Report::default();
    for i in 0..cases(MUTATION_CASES) {
        let mut rng = case_rng(seed, i);
        // Start from a string libpq accepts: a listed vector or a fresh generated one.
        let base: Vec<u8> = loop {
            let candidate = match rng.below(4) {
                0 => rng.pick(SPEC_INPUTS).to_vec(),
                1 => rng.pick(UPSTREAM_001_URI_INPUTS).to_vec(),
                2 => support::gen_keyword_value(&mut rng),
                _ => support::gen_uri(&mut rng),
            };
            if lib.conninfo_parse(&candidate).is_ok() {
                break candidate;
            }
        };
        let input = support::mutate(&mut rng, &base);
        report.check(
            || {
                format!(
                    "mutation, seed {seed:#x}, case {i}, mutated from {}",
                    esc(&base)
                )
            },
            &input,
        );
    }
    let what = format!("byte mutations (seed {seed:#x})");
    report.finish(&what);
    report.assert_covers(&what, MUTATION_KINDS);
}

/// The harness itself: a parser that is wrong about one byte is caught, and the report
/// shrinks the disagreement to that byte.
#[test]
fn harness_catches_and_minimizes_a_planted_bug() {
    fn treats_vt_as_text(input: &[u8]) -> support::Outcome {
        let planted: Vec<u8> = input
            .iter()
            .map(|&c| if c == 0x0b { b'x' } else { c })
            .collect();
        support::pgyard(&planted)
    }
    let mut report = Report::with_parser(treats_vt_as_text);
    report.check(|| "planted".to_owned(), b"host=a\x0bport=1 dbname='b c'");
    report.check(|| "agreeing".to_owned(), b"host=a port=1");
    let msg = report
        .failure("planted bug")
        .expect("the planted bug is reported");
    assert!(msg.contains("on 1 of 2 inputs"), "{msg}");
    assert!(msg.contains("input:    b\"\\x0b\""), "{msg}");
    assert!(msg.contains("libpq:    Ok (no values)"), "{msg}");
}

#[test]
fn keyword_table_matches_pqconndefaults() {
    let theirs = libpq().conndefaults();
    let names: Vec<&str> = theirs.iter().map(|d| d.keyword.as_str()).collect();
    let ours: Vec<&str> = keywords::TABLE.iter().map(|k| k.name).collect();
    assert_eq!(
        ours, names,
        "pgyard's keyword table (left) differs from PQconndefaults() (right) in names or order"
    );
    assert_eq!(names, libpq().conndefaults_keywords());
    let mut problems = Vec::new();
    for (row, info) in theirs.iter().zip(keywords::TABLE) {
        if row.envvar.as_deref() != info.env {
            problems.push(format!(
                "{}: env var libpq {:?}, pgyard {:?}",
                info.name, row.envvar, info.env
            ));
        }
        if row.compiled.as_deref() != info.compiled {
            problems.push(format!(
                "{}: compiled default libpq {:?}, pgyard {:?}",
                info.name, row.compiled, info.compiled
            ));
        }
        let disp = match info.display {
            Display::Normal => "",
            Display::Secret => "*",
            Display::Debug => "D",
        };
        if row.dispchar != disp {
            problems.push(format!(
                "{}: dispchar libpq {:?}, pgyard {:?} ({:?})",
                info.name, row.dispchar, disp, info.display
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "keyword table disagrees with PQconndefaults():\n  {}",
        problems.join("\n  ")
    );
}
