//! The keyword/value form of a connection string (`conninfo_parse`), in nom.

use nom::bytes::complete::{tag, take, take_till, take_while};
use nom::combinator::opt;
use nom::{IResult, Parser};

use super::{class, find_fast, store, Sink, BACKSLASH, EQUALS, NUL, QUOTE, SPACE};
use crate::ParseError;

/// How the grammar failed, with the input left at the failing byte.
#[derive(Debug)]
enum Fail<'a> {
    /// A NUL byte starts the remaining input.
    Nul(&'a [u8]),
    /// The keyword that no `=` follows.
    MissingEquals(&'a [u8]),
    UnterminatedQuote,
    /// A plain nom mismatch; every alternative of this grammar has a fallback, so it never
    /// reaches the caller.
    Mismatch,
}

super::mismatch_only_nom_error!(Fail);

type Res<'a, T> = IResult<&'a [u8], T, Fail<'a>>;

/// Bytes whose class is none of `mask`.
fn run<'a>(mask: u8) -> impl Parser<&'a [u8], Output = &'a [u8], Error = Fail<'a>> {
    take_till(move |c| class(c) & mask != 0)
}

/// [`run`] for the first run of a keyword or value, where most of the text is: `below`, `a`
/// and `b` let [`find_fast`] skip eight bytes at a time.
fn fast_run<'a>(below: u8, a: u8, b: u8, mask: u8) -> impl Fn(&'a [u8]) -> Res<'a, &'a [u8]> {
    move |input| {
        let end = find_fast(input, 0, below, a, b, mask);
        Ok((&input[end..], &input[..end]))
    }
}

fn spaces(input: &[u8]) -> Res<'_, &[u8]> {
    take_while(|c| class(c) & SPACE != 0).parse(input)
}

/// Fails for good when the input starts with a NUL byte.
fn no_nul(input: &[u8]) -> Res<'_, ()> {
    match input.first() {
        Some(0) => Err(nom::Err::Failure(Fail::Nul(input))),
        _ => Ok((input, ())),
    }
}

/// `\x` read as `x` (a NUL is an error); a `\` at the very end reads as nothing.
fn escape(input: &[u8]) -> Res<'_, Option<u8>> {
    let (rest, _) = tag(&b"\\"[..]).parse(input)?;
    let (rest, _) = no_nul(rest)?;
    let (rest, byte) = opt(take(1usize)).parse(rest)?;
    Ok((rest, byte.map(|b: &[u8]| b[0])))
}

/// The rest of a value once a `\` makes it need copying: runs and escapes into `scratch`
/// until a byte of `stop` (not consumed) or the end.
fn unescape<'a>(mut input: &'a [u8], stop: u8, scratch: &mut Vec<u8>) -> Res<'a, ()> {
    loop {
        let (rest, plain) = run(stop | BACKSLASH | NUL).parse(input)?;
        scratch.extend_from_slice(plain);
        let (rest, _) = no_nul(rest)?;
        match escape(rest) {
            Ok((rest, byte)) => {
                scratch.extend(byte);
                input = rest;
            }
            Err(nom::Err::Error(_)) => return Ok((rest, ())),
            Err(e) => return Err(e),
        }
    }
}

fn quote(input: &[u8]) -> Res<'_, &[u8]> {
    tag(&b"'"[..]).parse(input)
}

/// `'…'` with `\` escapes; the value borrows the input when it holds no escape.
fn quoted<'a>(input: &'a [u8], scratch: &mut Vec<u8>) -> Res<'a, Value<'a>> {
    let (rest, _) = quote(input)?;
    let (rest, plain) = fast_run(1, b'\'', b'\\', QUOTE | BACKSLASH | NUL)(rest)?;
    let closing = || nom::Err::Failure(Fail::UnterminatedQuote);
    if let Ok((rest, _)) = quote(rest) {
        return Ok((rest, Value::Borrowed(plain)));
    }
    scratch.clear();
    scratch.extend_from_slice(plain);
    let (rest, ()) = unescape(rest, QUOTE, scratch)?;
    let (rest, _) = quote(rest).map_err(|_| closing())?;
    Ok((rest, Value::Scratch))
}

/// An unquoted value up to whitespace (which is consumed with it) or the end.
fn unquoted<'a>(input: &'a [u8], scratch: &mut Vec<u8>) -> Res<'a, Value<'a>> {
    let (rest, plain) = fast_run(0x21, b'\\', b'\\', SPACE | BACKSLASH | NUL)(input)?;
    let (rest, _) = no_nul(rest)?;
    let (rest, value) = if rest.first() == Some(&b'\\') {
        scratch.clear();
        scratch.extend_from_slice(plain);
        let (rest, ()) = unescape(rest, SPACE, scratch)?;
        (rest, Value::Scratch)
    } else {
        (rest, Value::Borrowed(plain))
    };
    let (rest, _) = opt(take(1usize)).parse(rest)?;
    Ok((rest, value))
}

/// A value: a slice of the input, or the caller's scratch buffer.
enum Value<'a> {
    Borrowed(&'a [u8]),
    Scratch,
}

/// `name =`: the keyword up to whitespace, `=` or NUL, then `=` after optional whitespace.
fn keyword(input: &[u8]) -> Res<'_, &[u8]> {
    let (rest, name) = fast_run(0x21, b'=', b'=', SPACE | EQUALS | NUL)(input)?;
    let (rest, _) = spaces(rest)?;
    let (rest, _) = no_nul(rest)?;
    let equals: Res<'_, _> = tag(&b"="[..]).parse(rest);
    let (rest, _) = equals.map_err(|_| nom::Err::Failure(Fail::MissingEquals(name)))?;
    Ok((rest, name))
}

/// Parses the keyword/value form of `s` into `out`.
pub(super) fn parse_keyword_value(s: &[u8], out: &mut impl Sink) -> Result<(), ParseError> {
    // Unescaped values are built here; reused across values.
    let mut scratch: Vec<u8> = Vec::new();
    let mut input = s;
    loop {
        let (rest, _) = spaces(input).map_err(|e| error(s, e))?;
        if rest.is_empty() {
            return Ok(());
        }
        let (rest, name) = keyword(rest).map_err(|e| error(s, e))?;
        let (rest, _) = spaces(rest).map_err(|e| error(s, e))?;
        let (rest, value) = if rest.first() == Some(&b'\'') {
            quoted(rest, &mut scratch)
        } else {
            unquoted(rest, &mut scratch)
        }
        .map_err(|e| error(s, e))?;
        let value = match value {
            Value::Borrowed(v) => v,
            Value::Scratch => &scratch[..],
        };
        store(out, name, value).map_err(|_| ParseError::InvalidOption {
            name: name.to_vec(),
        })?;
        input = rest;
    }
}

/// The libpq error for a failure of the grammar over `s`.
fn error(s: &[u8], e: nom::Err<Fail<'_>>) -> ParseError {
    let fail = match e {
        nom::Err::Error(f) | nom::Err::Failure(f) => f,
        nom::Err::Incomplete(_) => Fail::Mismatch,
    };
    match fail {
        Fail::Nul(at) => ParseError::NulByte {
            offset: s.len() - at.len(),
        },
        Fail::MissingEquals(name) => ParseError::MissingEquals {
            name: name.to_vec(),
        },
        Fail::UnterminatedQuote | Fail::Mismatch => ParseError::UnterminatedQuote,
    }
}
