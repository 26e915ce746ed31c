//! [`arbitrary`] generators of connection strings in both of libpq's forms and of the keyword
//! arrays of `PQconnectdbParams`, for fuzz targets and property tests.
//!
//! Each form comes in two modes:
//! - **well-formed** ([`KeywordValue`], [`Uri`], [`Params`]): only what libpq 18 accepts, built
//!   from known keywords with correct quoting, escaping and percent-encoding (IPv6 brackets,
//!   host and port lists, empty values, `?` parameters, duplicates included). Each value
//!   carries the table libpq reads from it, worked out while generating, independently of the
//!   parser, so a parse that disagrees is a bug on one side or the other;
//! - **adversarial** ([`AdversarialKeywordValue`], [`AdversarialUri`], [`AdversarialParams`]):
//!   biased towards the edges of the grammars (unknown and duplicate keywords, unterminated
//!   quotes, stray `=`, bad percent escapes, non-UTF-8 bytes, every kind of whitespace, very
//!   long values); libpq may accept or reject them.
//!
//! [`ConnString`] picks any of the string generators, plus raw and mutated bytes.
//!
//! Every generator is total: it never fails and never panics, whatever the bytes; when the
//! bytes run out each choice falls back to its simplest option. So besides
//! [`arbitrary::Arbitrary`], each type has `from_bytes`, which also makes it a proptest
//! strategy:
//!
//! ```
//! # #[cfg(feature = "arbitrary")] {
//! use pgyard_conninfo::arb::Uri;
//! let uri = Uri::from_bytes(b"\x05\x01\x02postgres");
//! assert_eq!(pgyard_conninfo::parse(&uri.text).as_ref(), Ok(&uri.expected));
//! // With proptest: `proptest::collection::vec(any::<u8>(), 0..256)
//! //     .prop_map(|bytes| Uri::from_bytes(&bytes))`.
//! # }
//! ```

mod kv;
mod params;
mod uri;

#[cfg(test)]
mod tests;

use arbitrary::{Arbitrary, Unstructured};

use crate::keywords::ALL;
use crate::{ConnInfo, Keyword};

/// A keyword/value connection string that libpq accepts, and the table it parses to.
#[derive(Clone, Debug)]
pub struct KeywordValue {
    /// The connection string.
    pub text: Vec<u8>,
    /// What `PQconninfoParse` makes of it.
    pub expected: ConnInfo,
}

/// A `postgresql://` or `postgres://` URI that libpq accepts, and the table it parses to.
#[derive(Clone, Debug)]
pub struct Uri {
    /// The connection string.
    pub text: Vec<u8>,
    /// What `PQconninfoParse` makes of it.
    pub expected: ConnInfo,
}

/// One keyword array entry: the keyword and its value (`None` is a NULL pointer).
pub type Entry = (Vec<u8>, Option<Vec<u8>>);

/// Keyword arrays that `PQconnectdbParams` accepts, and the table they give (before defaults).
#[derive(Clone, Debug)]
pub struct Params {
    /// The `keywords`/`values` pairs, in order.
    pub entries: Vec<Entry>,
    /// The `expand_dbname` flag.
    pub expand_dbname: bool,
    /// What [`crate::parse_params`] (and libpq's `conninfo_array_parse`) makes of them.
    pub expected: ConnInfo,
}

/// A keyword/value string biased towards the grammar's edges; libpq may reject it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdversarialKeywordValue(pub Vec<u8>);

/// A URI (usually with a valid prefix) biased towards the grammar's edges.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdversarialUri(pub Vec<u8>);

/// Keyword arrays biased towards the edges: unknown keywords, NULLs, NULs, bad expansions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdversarialParams {
    /// The `keywords`/`values` pairs, in order.
    pub entries: Vec<Entry>,
    /// The `expand_dbname` flag.
    pub expand_dbname: bool,
}

/// Any generated connection string, for differential fuzzing of [`crate::parse`].
#[derive(Clone, Debug)]
pub enum ConnString {
    /// A well-formed keyword/value string.
    KeywordValue(KeywordValue),
    /// A well-formed URI.
    Uri(Uri),
    /// An adversarial keyword/value string.
    AdversarialKeywordValue(AdversarialKeywordValue),
    /// An adversarial URI.
    AdversarialUri(AdversarialUri),
    /// A well-formed string of either form after one to eight byte-level edits.
    Mutated(Vec<u8>),
    /// The bytes themselves, unstructured.
    Raw(Vec<u8>),
}

impl ConnString {
    /// The bytes to parse.
    pub fn text(&self) -> &[u8] {
        match self {
            ConnString::KeywordValue(g) => &g.text,
            ConnString::Uri(g) => &g.text,
            ConnString::AdversarialKeywordValue(g) => &g.0,
            ConnString::AdversarialUri(g) => &g.0,
            ConnString::Mutated(b) | ConnString::Raw(b) => b,
        }
    }

    /// The table libpq must give, when the string is well-formed.
    pub fn expected(&self) -> Option<&ConnInfo> {
        match self {
            ConnString::KeywordValue(g) => Some(&g.expected),
            ConnString::Uri(g) => Some(&g.expected),
            _ => None,
        }
    }

    fn generate(src: &mut Src<'_, '_>) -> ConnString {
        match src.below(8) {
            0 => ConnString::Raw(src.rest()),
            1 | 2 => ConnString::KeywordValue(KeywordValue::generate(src)),
            3 | 4 => ConnString::Uri(Uri::generate(src)),
            5 => ConnString::AdversarialKeywordValue(AdversarialKeywordValue::generate(src)),
            6 => ConnString::AdversarialUri(AdversarialUri::generate(src)),
            _ => {
                let base = if src.chance(50) {
                    KeywordValue::generate(src).text
                } else {
                    Uri::generate(src).text
                };
                ConnString::Mutated(mutate(src, base))
            }
        }
    }
}

/// The `from_bytes` constructor and the [`Arbitrary`] impl of a total generator.
macro_rules! generator {
    ($($ty:ty),*) => {$(
        impl $ty {
            /// Generates a value from `data` (any bytes; never fails).
            pub fn from_bytes(data: &[u8]) -> Self {
                let mut u = Unstructured::new(data);
                Self::generate(&mut Src(&mut u))
            }
        }

        impl<'a> Arbitrary<'a> for $ty {
            fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
                Ok(Self::generate(&mut Src(u)))
            }
        }
    )*};
}

generator!(
    KeywordValue,
    Uri,
    Params,
    AdversarialKeywordValue,
    AdversarialUri,
    AdversarialParams,
    ConnString
);

/// An infallible view of [`Unstructured`]: once the bytes run out every choice is 0, so the
/// generators put their simplest (and terminating) option first.
struct Src<'u, 'a>(&'u mut Unstructured<'a>);

impl Src<'_, '_> {
    /// A number in `0..n` (0 when `n` is 0).
    fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        self.0.int_in_range(0..=n - 1).unwrap_or(0)
    }

    /// True with probability `percent`/100; false once the bytes run out.
    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) >= 100 - percent.min(100)
    }

    /// One element of `xs` (which is never empty).
    fn pick<T: Copy>(&mut self, xs: &[T]) -> T {
        xs[self.below(xs.len())]
    }

    fn byte(&mut self) -> u8 {
        u8::arbitrary(self.0).unwrap_or(0)
    }

    /// Whatever bytes are left.
    fn rest(&mut self) -> Vec<u8> {
        let n = self.0.len();
        self.0.bytes(n).map(<[u8]>::to_vec).unwrap_or_default()
    }

    fn keyword(&mut self) -> Keyword {
        self.pick(ALL)
    }
}

/// C `isspace` in the C locale: what the keyword/value grammar skips.
const WHITESPACE: &[u8] = b" \t\n\x0b\x0c\r";

/// Bytes the grammars care about, a few that are not UTF-8, and plain ones.
const PALETTE: &[u8] =
    b"aaabcxyzAZ09_-.~,:;/@?&=%+#[]{}()!*$'\"\\ \t\n\x0b\x0c\r\x01\x1f\x7f\x80\x85\xa0\xc3\xa9\xff";

/// Whole values worth having as tokens.
const TOKENS: &[&[u8]] = &[
    b"1",
    b"0",
    b"require",
    b"verify-full",
    b"5432",
    b"h1,h2",
    b"/tmp",
    b"::1",
    b"postgresql://x",
    b"a b",
    b"x=y",
    b"-c search_path=x",
    b"caf\xc3\xa9",
    b"\xff\xfe",
    b"''",
    b"\\",
];

/// A value of up to `max` bytes, never NUL (no C string can carry one).
fn value(src: &mut Src<'_, '_>, max: usize) -> Vec<u8> {
    match src.below(10) {
        0 => Vec::new(),
        1 | 2 => src.pick(TOKENS).to_vec(),
        3 => {
            let b = src.byte();
            vec![b.max(1); 1 + src.below(max)]
        }
        _ => {
            let len = 1 + src.below(max);
            (0..len)
                .map(|_| {
                    if src.chance(80) {
                        src.pick(PALETTE)
                    } else {
                        src.byte().max(1)
                    }
                })
                .collect()
        }
    }
}

/// `base` after one to eight byte edits: insert, delete, replace, duplicate a range.
fn mutate(src: &mut Src<'_, '_>, mut s: Vec<u8>) -> Vec<u8> {
    let edits = 1 + src.below(8);
    for _ in 0..edits {
        let n = s.len();
        let byte = if src.chance(70) {
            src.pick(PALETTE)
        } else {
            src.byte()
        };
        match src.below(4) {
            0 => s.insert(src.below(n + 1), byte),
            1 if n > 0 => {
                s.remove(src.below(n));
            }
            2 if n > 0 => {
                let at = src.below(n);
                s[at] = byte;
            }
            _ if n > 0 => {
                let a = src.below(n);
                let b = (a + 1 + src.below(8)).min(n);
                let chunk = s[a..b].to_vec();
                let at = src.below(n + 1);
                s.splice(at..at, chunk);
            }
            _ => s.push(byte),
        }
    }
    s
}

/// Appends `v` percent-encoded: every byte outside the unreserved set and `raw` is encoded,
/// and, at random, some that need not be, in either hex case.
fn percent_encode(src: &mut Src<'_, '_>, out: &mut Vec<u8>, v: &[u8], raw: &[u8]) {
    for &c in v {
        let unreserved = c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~');
        if (unreserved || raw.contains(&c)) && !src.chance(10) {
            out.push(c);
        } else {
            push_escape(out, c, src.chance(30));
        }
    }
}

fn push_escape(out: &mut Vec<u8>, c: u8, lower: bool) {
    let hex: &[u8; 16] = if lower {
        b"0123456789abcdef"
    } else {
        b"0123456789ABCDEF"
    };
    out.extend_from_slice(&[b'%', hex[usize::from(c >> 4)], hex[usize::from(c & 15)]]);
}
