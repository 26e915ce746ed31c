//! Shared pieces of the libpq differential tests: a seeded random source, grammar-aware
//! generators for both connection-string forms, a byte-level mutator, the comparison of
//! pgyard against libpq 18 and a shrinker that makes each disagreement small.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pgyard_testkit::draw::Draw;
use pgyard_testkit::libpq::Libpq;

/// The testkit's SplitMix64 (fully determined by its seed on every platform), with the
/// `usize` and generic helpers these generators use.
pub struct Rng(Draw);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(Draw(seed))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (`n > 0`); the tiny modulo bias does not matter for test generation.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < percent as usize
    }

    /// One element of `xs`.
    pub fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }
}

/// What one parser made of one input: the set keywords with values, or the error bytes.
pub type Outcome = Result<Vec<(String, Vec<u8>)>, Vec<u8>>;

/// pgyard's answer, in libpq's shape.
pub fn pgyard(input: &[u8]) -> Outcome {
    match pgyard_conninfo::parse(input) {
        Ok(ci) => Ok(ci
            .iter()
            .map(|(kw, v)| (kw.name().to_owned(), v.to_vec()))
            .collect()),
        Err(e) => Err(e.libpq_message()),
    }
}

/// The process-wide libpq 18; a failure to install or load it fails the calling test.
pub fn libpq() -> &'static Libpq {
    match Libpq::shared() {
        Ok(lib) => lib,
        Err(e) => panic!(
            "libpq 18 is required for the differential tests and could not be provided \
             (pgyard_testkit::postgres::ensure_installed needs npm and network access or a \
             populated $PGYARD_CACHE): {e}"
        ),
    }
}

/// Bytes as a Rust byte-string literal, e.g. `b"host=\xff"`.
pub fn esc(b: &[u8]) -> String {
    let mut s = String::from("b\"");
    for &c in b {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\t' => s.push_str("\\t"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            0x20..=0x7e => s.push(c as char),
            _ => {
                let _ = write!(s, "\\x{c:02x}");
            }
        }
    }
    s.push('"');
    s
}

/// An outcome in one readable line.
pub fn show(o: &Outcome) -> String {
    match o {
        Ok(kv) if kv.is_empty() => "Ok (no values)".to_owned(),
        Ok(kv) => {
            let parts: Vec<String> = kv.iter().map(|(k, v)| format!("{k}={}", esc(v))).collect();
            format!("Ok {}", parts.join(" "))
        }
        Err(m) => format!("Err {}", esc(m)),
    }
}

/// A parser under test, in libpq's shape.
pub type Parser = fn(&[u8]) -> Outcome;

/// libpq's and `ours`' answers for `input`, when they differ; `None` for agreement or for
/// input libpq cannot take (a NUL byte).
pub fn disagreement(input: &[u8], ours: Parser) -> Option<(Outcome, Outcome)> {
    if input.contains(&0) {
        return None;
    }
    let theirs = libpq().conninfo_parse(input);
    let mine = ours(input);
    (theirs != mine).then_some((theirs, mine))
}

/// The smallest input found by deleting bytes (halving chunks down to single bytes) from
/// `input` while libpq and `ours` still disagree. Deterministic.
pub fn shrink(input: &[u8], ours: Parser) -> Vec<u8> {
    let mut cur = input.to_vec();
    let mut chunk = (cur.len() / 2).max(1);
    loop {
        let mut progressed = false;
        let mut i = 0;
        while i + chunk <= cur.len() {
            let mut cand = cur.clone();
            cand.drain(i..i + chunk);
            if disagreement(&cand, ours).is_some() {
                cur = cand;
                progressed = true;
            } else {
                i += 1;
            }
        }
        if !progressed {
            if chunk == 1 {
                break;
            }
            chunk = (chunk / 2).max(1);
        }
    }
    cur
}

/// The kind of an outcome, for coverage counts: `ok` or libpq's message up to its first quote.
pub fn kind(o: &Outcome) -> String {
    match o {
        Ok(_) => "ok".to_owned(),
        Err(m) => {
            let end = m.iter().position(|&c| c == b'"').unwrap_or(m.len());
            String::from_utf8_lossy(&m[..end]).trim_end().to_owned()
        }
    }
}

/// Every disagreement a run found (minimized and deduplicated), and what the run covered.
pub struct Report {
    ours: Parser,
    found: Vec<Found>,
    /// How often libpq gave each kind of outcome (see [`kind`]).
    pub kinds: BTreeMap<String, usize>,
    /// Cases compared.
    pub cases: usize,
    /// Cases skipped because they contain NUL.
    pub skipped_nul: usize,
}

impl Default for Report {
    fn default() -> Self {
        Report::with_parser(pgyard)
    }
}

struct Found {
    origin: String,
    input: Vec<u8>,
    minimal: Vec<u8>,
}

/// At most this many disagreements are spelled out in a failure message.
const SHOWN: usize = 25;

impl Report {
    /// A report comparing `ours` (instead of pgyard) with libpq; for testing the harness.
    pub fn with_parser(ours: Parser) -> Report {
        Report {
            ours,
            found: Vec::new(),
            kinds: BTreeMap::new(),
            cases: 0,
            skipped_nul: 0,
        }
    }

    /// Compares one case; `origin` says how to reproduce it (seed, index, generator).
    pub fn check(&mut self, origin: impl FnOnce() -> String, input: &[u8]) {
        if input.contains(&0) {
            self.skipped_nul += 1;
            return;
        }
        self.cases += 1;
        let theirs = libpq().conninfo_parse(input);
        *self.kinds.entry(kind(&theirs)).or_default() += 1;
        if theirs == (self.ours)(input) {
            return;
        }
        // Shrinking costs many parses; the first, not too long disagreements are enough.
        let minimal = if self.found.len() < 4 * SHOWN && input.len() <= 4096 {
            shrink(input, self.ours)
        } else {
            input.to_vec()
        };
        self.found.push(Found {
            origin: origin(),
            input: input.to_vec(),
            minimal,
        });
    }

    /// Fails unless libpq produced each of `kinds` at least once: the generator's reach.
    pub fn assert_covers(&self, what: &str, kinds: &[&str]) {
        let missing: Vec<&&str> = kinds
            .iter()
            .filter(|k| !self.kinds.contains_key(**k))
            .collect();
        assert!(
            missing.is_empty(),
            "{what}: the generated inputs never made libpq answer {missing:?}; seen: {:#?}",
            self.kinds
        );
    }

    /// The failure message listing the disagreements, if there are any.
    pub fn failure(&self, what: &str) -> Option<String> {
        if self.found.is_empty() {
            return None;
        }
        let mut seen = std::collections::HashSet::new();
        let mut msg = format!(
            "{what}: pgyard disagrees with libpq 18 on {} of {} inputs\n",
            self.found.len(),
            self.cases
        );
        let mut shown = 0;
        for f in &self.found {
            if !seen.insert(f.minimal.clone()) {
                continue;
            }
            shown += 1;
            if shown > SHOWN {
                continue;
            }
            let (theirs, ours) =
                disagreement(&f.minimal, self.ours).expect("minimized inputs still disagree");
            let _ = writeln!(msg, "\n#{shown} {}", f.origin);
            if f.minimal != f.input {
                let _ = writeln!(msg, "  original: {}", esc(&f.input));
            }
            let _ = writeln!(msg, "  input:    {}", esc(&f.minimal));
            let _ = writeln!(msg, "  libpq:    {}", show(&theirs));
            let _ = writeln!(msg, "  pgyard:   {}", show(&ours));
        }
        if shown > SHOWN {
            let _ = writeln!(
                msg,
                "\n… and {} more distinct minimal inputs",
                shown - SHOWN
            );
        }
        Some(msg)
    }

    /// Prints what was covered, then panics with the disagreements, if there are any.
    pub fn finish(&self, what: &str) {
        eprintln!(
            "{what}: {} cases compared with libpq, {} skipped (NUL), {} disagreements; \
             libpq outcomes: {:?}",
            self.cases,
            self.skipped_nul,
            self.found.len(),
            self.kinds
        );
        if let Some(msg) = self.failure(what) {
            panic!("{msg}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Generators

/// Every libpq 18 keyword (taken from pgyard's table; the table itself is checked separately).
fn known_keyword(rng: &mut Rng) -> Vec<u8> {
    let all = pgyard_conninfo::keywords::ALL;
    rng.pick(all).name().as_bytes().to_vec()
}

/// Keywords that are not libpq 18 keywords, or only almost.
const NOT_KEYWORDS: &[&[u8]] = &[
    b"foo",
    b"tty",
    b"authtype",
    b"servicefile",
    b"Host",
    b"HOST",
    b"hosT",
    b"Dbname",
    b"SSLMODE",
    b"requireSSL",
    b"RequireSSL",
    b"ssl",
    b"host ",
    b" host",
    b"ho st",
    b"host\xff",
    b"h\xc3\xb6st",
    b"postgresql://h",
    b"user'",
    b"'user'",
    b"\"user\"",
    b"user\\",
    b"host:",
    b"host&",
    b"",
];

/// The keyword of one pair: usually a real one, sometimes `requiressl` or a near miss.
fn keyword(rng: &mut Rng) -> Vec<u8> {
    match rng.below(100) {
        0..=64 => known_keyword(rng),
        65..=76 => b"requiressl".to_vec(),
        77..=94 => rng.pick(NOT_KEYWORDS).to_vec(),
        _ => {
            // A known keyword with one letter's case flipped.
            let mut k = known_keyword(rng);
            let i = rng.below(k.len());
            k[i] = if k[i].is_ascii_lowercase() {
                k[i].to_ascii_uppercase()
            } else {
                k[i].to_ascii_lowercase()
            };
            k
        }
    }
}

const WHITESPACE: &[&[u8]] = &[
    b" ", b" ", b" ", b"  ", b"\t", b"\n", b"\x0b", b"\x0c", b"\r", b"\r\n", b" \t ",
];

fn whitespace(rng: &mut Rng) -> &'static [u8] {
    rng.pick(WHITESPACE)
}

/// Bytes that may appear in a value, weighted towards the ones the grammars care about.
const VALUE_BYTES: &[u8] =
    b"aaaabcxyzAZ0123456789_-.,:;/@?&=%+#[]{}()!*~$<>|^`'\"\\ \t\x0b\x0c\r\n\x01\x1f\x7f\x80\x85\xa0\xc3\xa9\xff";

/// Well-known values worth having as whole tokens.
const VALUES: &[&[u8]] = &[
    b"1",
    b"0",
    b"",
    b"yes",
    b"true",
    b"false",
    b"require",
    b"disable",
    b"prefer",
    b"verify-full",
    b"5432",
    b"5432,5433",
    b"h1,h2",
    b"/tmp",
    b"::1",
    b"postgresql://x",
    b"a b",
    b"x=y",
    b"-c search_path=x",
    b"caf\xc3\xa9",
    b"\xff\xfe",
    b"1abc",
];

fn raw_value(rng: &mut Rng) -> Vec<u8> {
    if rng.chance(30) {
        return rng.pick(VALUES).to_vec();
    }
    let len = rng.below(9);
    (0..len).map(|_| rng.pick(VALUE_BYTES)).collect()
}

/// One value written in keyword/value syntax (unquoted with escapes, or quoted).
fn kv_value(rng: &mut Rng) -> Vec<u8> {
    let raw = raw_value(rng);
    let mut out = Vec::new();
    match rng.below(10) {
        // Unquoted, escaping what needs it (mostly correct, sometimes not).
        0..=4 => {
            for &c in &raw {
                let special = c == b'\\' || c.is_ascii_whitespace() || c == 0x0b;
                if (special && rng.chance(85)) || rng.chance(4) {
                    out.push(b'\\');
                }
                out.push(c);
            }
            if rng.chance(5) {
                out.push(b'\\');
            }
        }
        // Quoted, escaping quotes and backslashes (mostly).
        5..=8 => {
            out.push(b'\'');
            for &c in &raw {
                if ((c == b'\'' || c == b'\\') && rng.chance(90)) || rng.chance(3) {
                    out.push(b'\\');
                }
                out.push(c);
            }
            match rng.below(40) {
                0 => {}                            // unterminated
                1 => out.extend_from_slice(b"\\"), // escaped end, then unterminated
                2 => out.extend_from_slice(b"''"), // SQL-style doubling, not libpq's
                _ => out.push(b'\''),
            }
        }
        // Raw bytes, no care taken.
        _ => out = raw,
    }
    out
}

/// A connection string in keyword/value form.
pub fn gen_keyword_value(rng: &mut Rng) -> Vec<u8> {
    let mut s = Vec::new();
    if rng.chance(20) {
        s.extend_from_slice(whitespace(rng));
    }
    let pairs = rng.below(6);
    for i in 0..pairs {
        if i > 0 {
            // The separator may be missing (only harmless after a quoted value).
            if !rng.chance(8) {
                s.extend_from_slice(whitespace(rng));
            }
        }
        let kw = keyword(rng);
        s.extend_from_slice(&kw);
        if rng.chance(15) {
            s.extend_from_slice(whitespace(rng));
        }
        if rng.chance(96) {
            s.push(b'=');
        }
        if rng.chance(15) {
            s.extend_from_slice(whitespace(rng));
        }
        if kw == b"requiressl" && rng.chance(50) {
            s.extend_from_slice(rng.pick(&[&b"1"[..], b"0", b"", b"1x", b"yes", b"'1'", b"' 1'"]));
        } else {
            s.extend_from_slice(&kv_value(rng));
        }
    }
    if rng.chance(15) {
        s.extend_from_slice(whitespace(rng));
    }
    s
}

const HEX: &[u8] = b"0123456789abcdefABCDEF";

/// A percent escape: usually valid, sometimes `%00`, malformed or cut short.
fn percent(rng: &mut Rng, out: &mut Vec<u8>) {
    match rng.below(20) {
        0 => out.extend_from_slice(b"%00"),
        1 => out.push(b'%'),
        2 => out.extend_from_slice(&[b'%', rng.pick(HEX)]),
        3 => out.extend_from_slice(b"%zz"),
        4 => out.extend_from_slice(&[b'%', b'g', rng.pick(HEX)]),
        5 => out.extend_from_slice(&[b'%', rng.pick(HEX), b'x']),
        6 => out.extend_from_slice(b"%20"),
        7 => out.extend_from_slice(b"%2C"),
        8 => out.extend_from_slice(b"%3A"),
        9 => out.extend_from_slice(b"%40"),
        10 => out.extend_from_slice(b"%2F"),
        11 => out.extend_from_slice(b"%3d"),
        12 => out.extend_from_slice(b"%26"),
        13 => out.extend_from_slice(b"%ff"),
        14 => out.extend_from_slice(b"%C3%A9"),
        15 => out.extend_from_slice(b"%2520"),
        _ => {
            let _ = write!(
                Bytes(out),
                "%{}{}",
                rng.pick(HEX) as char,
                rng.pick(HEX) as char
            );
        }
    }
}

/// `Vec<u8>` as a `fmt::Write` target.
struct Bytes<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

/// A URI component made of `plain` bytes, percent escapes, spaces and stray `extra` bytes.
fn component(rng: &mut Rng, plain: &[u8], extra: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    if rng.chance(8) {
        out.extend_from_slice(if rng.chance(50) { b" " } else { b"  " });
    }
    let len = rng.below(7);
    for _ in 0..len {
        match rng.below(100) {
            0..=71 => out.push(rng.pick(plain)),
            72..=83 => percent(rng, &mut out),
            84..=87 => out.push(b' '),
            88..=91 => out.push(rng.pick(b"\t\x80\xff\xc3+~")),
            _ => {
                if !extra.is_empty() {
                    out.push(rng.pick(extra));
                }
            }
        }
    }
    if rng.chance(8) {
        out.extend_from_slice(if rng.chance(50) { b" " } else { b"  " });
    }
    out
}

const NAME: &[u8] = b"abcdhostxyz0123456789-._";
const DIGITS: &[u8] = b"0123456789";

fn host(rng: &mut Rng) -> Vec<u8> {
    match rng.below(20) {
        0 => Vec::new(),
        1 => b"[]".to_vec(),
        2 => b"[::1".to_vec(),
        3 => {
            let mut h = b"[::1]".to_vec();
            h.push(rng.pick(b"z@#]x[ %\t\xff\x01"));
            h
        }
        4..=7 => {
            let mut h = b"[".to_vec();
            h.extend_from_slice(rng.pick(&[
                &b"::1"[..],
                b"2001:db8::1234",
                b"fe80::1%25eth0",
                b"v1.x",
                b"200z:db8::1",
                b"1:2",
                b"a b",
                b"::%41",
            ]));
            h.push(b']');
            h
        }
        8 => b"%2Ftmp%2Fsock".to_vec(),
        9 => b"%40abstract".to_vec(),
        _ => component(rng, NAME, b"@[]#&=;"),
    }
}

fn port(rng: &mut Rng) -> Vec<u8> {
    match rng.below(10) {
        0 => Vec::new(),
        1 => b"port".to_vec(),
        2 => b"5432:5433".to_vec(),
        3 => component(rng, DIGITS, b":@[]"),
        _ => {
            let len = 1 + rng.below(5);
            (0..len).map(|_| rng.pick(DIGITS)).collect()
        }
    }
}

/// A URI query parameter keyword.
fn query_keyword(rng: &mut Rng) -> Vec<u8> {
    match rng.below(20) {
        0 => b"ssl".to_vec(),
        1 => b"requiressl".to_vec(),
        2 => b"%75ser".to_vec(),
        3 => b"u%7aer".to_vec(),
        4 => b"host%3D".to_vec(),
        5 => {
            let mut k = b" ".to_vec();
            k.extend_from_slice(&known_keyword(rng));
            k.push(b' ');
            k
        }
        6 => component(rng, NAME, b""),
        7..=9 => keyword(rng),
        _ => known_keyword(rng),
    }
}

fn query_value(rng: &mut Rng, key: &[u8]) -> Vec<u8> {
    if key == b"ssl" {
        return rng
            .pick(&[&b"true"[..], b"false", b"TRUE", b"tru%65", b" true ", b""])
            .to_vec();
    }
    if key == b"requiressl" && rng.chance(50) {
        return rng.pick(&[&b"1"[..], b"0", b"", b"%31", b" 1"]).to_vec();
    }
    if rng.chance(15) {
        return rng
            .pick(VALUES)
            .iter()
            .map(|&c| if c == b' ' { b'+' } else { c })
            .collect();
    }
    component(rng, b"abcxyz0123456789-._/:@,", b"=?/:@[]#")
}

/// A connection string in URI form (occasionally with a broken prefix).
pub fn gen_uri(rng: &mut Rng) -> Vec<u8> {
    let mut s: Vec<u8> = match rng.below(40) {
        0 => b"postgresql:/".to_vec(),
        1 => b"POSTGRESQL://".to_vec(),
        2 => b" postgresql://".to_vec(),
        3 => b"postgre://".to_vec(),
        4..=20 => b"postgresql://".to_vec(),
        _ => b"postgres://".to_vec(),
    };
    if rng.chance(35) {
        s.extend_from_slice(&component(rng, NAME, b":@/?,[]"));
        if rng.chance(50) {
            s.push(b':');
            s.extend_from_slice(&component(rng, b"abcxyz0123456789!$", b":@/?,"));
        }
        s.push(b'@');
        if rng.chance(5) {
            s.push(b'@');
        }
    }
    let hosts = rng.below(4);
    for i in 0..hosts {
        if i > 0 {
            s.push(b',');
        }
        s.extend_from_slice(&host(rng));
        if rng.chance(40) {
            s.push(b':');
            s.extend_from_slice(&port(rng));
        }
    }
    if rng.chance(60) {
        s.push(b'/');
        s.extend_from_slice(&component(rng, NAME, b"/@:,[]#"));
    }
    if rng.chance(55) {
        s.push(b'?');
        let params = rng.below(4);
        for i in 0..params {
            if i > 0 {
                s.push(b'&');
            }
            match rng.below(30) {
                0 => {}                                        // empty piece
                1 => s.extend_from_slice(&query_keyword(rng)), // no '='
                2 => {
                    s.extend_from_slice(&query_keyword(rng));
                    s.extend_from_slice(b"=a=b");
                }
                _ => {
                    let k = query_keyword(rng);
                    s.extend_from_slice(&k);
                    s.push(b'=');
                    s.extend_from_slice(&query_value(rng, &k));
                }
            }
        }
        if rng.chance(10) {
            s.push(b'&');
        }
    }
    if rng.chance(4) {
        s.extend_from_slice(b"#frag");
    }
    s
}

/// Bytes that matter to one of the grammars, for mutations.
const INTERESTING: &[u8] =
    b"=' \\\"\t\n\x0b\x0c\r:/@?&,[]%0129aAfFgz#+-_.\x01\x7f\x80\x85\xa0\xc3\xff";

/// `base` with one to four random byte-level edits: insert, delete, replace, duplicate a range.
pub fn mutate(rng: &mut Rng, base: &[u8]) -> Vec<u8> {
    let mut s = base.to_vec();
    let edits = 1 + rng.below(4);
    for _ in 0..edits {
        let n = s.len();
        match rng.below(4) {
            0 => {
                let at = rng.below(n + 1);
                s.insert(at, rng.pick(INTERESTING));
            }
            1 if n > 0 => {
                s.remove(rng.below(n));
            }
            2 if n > 0 => {
                let at = rng.below(n);
                s[at] = rng.pick(INTERESTING);
            }
            _ if n > 0 => {
                let a = rng.below(n);
                let b = (a + 1 + rng.below(6)).min(n);
                let chunk = s[a..b].to_vec();
                let at = rng.below(n + 1);
                s.splice(at..at, chunk);
            }
            _ => s.push(rng.pick(INTERESTING)),
        }
    }
    s
}
