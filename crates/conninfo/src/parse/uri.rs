//! The URI form of a connection string (`conninfo_uri_parse_options`), in nom.

use nom::bytes::complete::{tag, take, take_till, take_while};
use nom::combinator::{opt, peek};
use nom::error::{ErrorKind, ParseError as NomParseError};
use nom::sequence::preceded;
use nom::{IResult, Parser};

use super::{
    store, Sink, URI_CLASS, U_AMP, U_AT, U_CLOSE, U_COLON, U_COMMA, U_DECODE, U_EQUALS, U_QUESTION,
    U_SLASH,
};
use crate::ParseError;

/// How the URI grammar failed, with the input left where it did.
#[derive(Debug)]
enum Fail<'a> {
    UnterminatedIpv6,
    EmptyIpv6,
    /// The byte after `]` that is none of `:/?,`, which starts the remaining input.
    UnexpectedCharacter(&'a [u8]),
    /// The raw keyword of a query parameter without `=`.
    MissingSeparator(&'a [u8]),
    /// The raw keyword of a query parameter with a second `=`.
    ExtraSeparator(&'a [u8]),
    /// A plain nom mismatch; every optional part of this grammar is wrapped in `opt`, so it
    /// never reaches the caller.
    Mismatch,
}

super::mismatch_only_nom_error!(Fail);

type Res<'a, T> = IResult<&'a [u8], T, Fail<'a>>;

/// A component as the URI holds it, and whether it has a space or `%` to decode.
#[derive(Clone, Copy)]
struct Part<'a> {
    raw: &'a [u8],
    needs_decoding: bool,
}

/// The bytes up to one in the stop set `mask` (one class-table lookup per byte, which also
/// tells whether a byte needing decoding went by).
fn part<'a>(mask: u16) -> impl Fn(&'a [u8]) -> Res<'a, Part<'a>> {
    move |input| {
        let mut seen = 0u16;
        let end = input
            .iter()
            .position(|&c| {
                let class = URI_CLASS[c as usize];
                seen |= class;
                class & mask != 0
            })
            .unwrap_or(input.len());
        let part = Part {
            raw: &input[..end],
            needs_decoding: seen & U_DECODE != 0,
        };
        Ok((&input[end..], part))
    }
}

fn byte<'a>(b: &'static [u8]) -> impl Parser<&'a [u8], Output = &'a [u8], Error = Fail<'a>> {
    tag(b)
}

/// `user[:password]@`, only when an `@` comes before any `/`.
fn credentials(input: &[u8]) -> Res<'_, Option<(Part<'_>, Option<Part<'_>>)>> {
    let (_, before) = peek(part(U_AT | U_SLASH)).parse(input)?;
    if input.get(before.raw.len()) != Some(&b'@') {
        return Ok((input, None));
    }
    let (rest, user) = part(U_COLON | U_AT)(input)?;
    let (rest, password) = opt(preceded(byte(b":"), part(U_AT))).parse(rest)?;
    let (rest, _) = byte(b"@").parse(rest)?;
    Ok((rest, Some((user, password))))
}

/// `[address]`, which must be followed by `:`, `/`, `?`, `,` or the end.
fn ipv6_host(input: &[u8]) -> Res<'_, Part<'_>> {
    let (rest, _) = byte(b"[").parse(input)?;
    let (rest, host) = part(U_CLOSE)(rest)?;
    let fail = |f| Err(nom::Err::Failure(f));
    if rest.is_empty() {
        return fail(Fail::UnterminatedIpv6);
    }
    if host.raw.is_empty() {
        return fail(Fail::EmptyIpv6);
    }
    let (rest, _) = byte(b"]").parse(rest)?;
    match rest.first() {
        None | Some(b':' | b'/' | b'?' | b',') => Ok((rest, host)),
        Some(_) => fail(Fail::UnexpectedCharacter(rest)),
    }
}

/// One element of the host list: a host (bracketed or not) and an optional `:port`.
fn host_and_port(input: &[u8]) -> Res<'_, (Part<'_>, Option<Part<'_>>)> {
    let (rest, host) = match input.first() {
        Some(b'[') => ipv6_host(input)?,
        _ => part(U_COLON | U_SLASH | U_QUESTION | U_COMMA)(input)?,
    };
    let port = preceded(byte(b":"), part(U_SLASH | U_QUESTION | U_COMMA));
    let (rest, port) = opt(port).parse(rest)?;
    Ok((rest, (host, port)))
}

/// One query parameter `keyword=value`, with the `&` after it.
fn query_parameter(input: &[u8]) -> Res<'_, (Part<'_>, Part<'_>)> {
    let (rest, keyword) = part(U_EQUALS | U_AMP)(input)?;
    let missing = |_| nom::Err::Failure(Fail::MissingSeparator(keyword.raw));
    let (rest, _) = byte(b"=").parse(rest).map_err(missing)?;
    let (rest, value) = part(U_EQUALS | U_AMP)(rest)?;
    if rest.first() == Some(&b'=') {
        return Err(nom::Err::Failure(Fail::ExtraSeparator(keyword.raw)));
    }
    let (rest, _) = opt(byte(b"&")).parse(rest)?;
    Ok((rest, (keyword, value)))
}

/// The host or port list joined with commas: borrowed while it is one contiguous slice of
/// the input (one host), copied only when a list makes it discontiguous.
enum Joined<'a> {
    Empty,
    Slice(&'a [u8]),
    Owned(Vec<u8>),
}

impl<'a> Joined<'a> {
    fn push(&mut self, part: &'a [u8], room: usize) {
        match self {
            Joined::Empty => *self = Joined::Slice(part),
            Joined::Slice(prev) => {
                let mut v = Vec::with_capacity(room);
                v.extend_from_slice(prev);
                v.extend_from_slice(part);
                *self = Joined::Owned(v);
            }
            Joined::Owned(v) => v.extend_from_slice(part),
        }
    }

    fn as_bytes(&self) -> &[u8] {
        match self {
            Joined::Empty => b"",
            Joined::Slice(s) => s,
            Joined::Owned(v) => v,
        }
    }
}

/// Parses the URI `uri`, whose scheme prefix is `prefix` bytes long, into `out`.
pub(super) fn parse_uri(uri: &[u8], prefix: usize, out: &mut impl Sink) -> Result<(), ParseError> {
    let error = |e| uri_error(uri, e);
    let mut scratch = Vec::new();
    let (rest, credentials) = credentials(&uri[prefix..]).map_err(error)?;
    if let Some((user, password)) = credentials {
        store_part(out, b"user", user, &mut scratch)?;
        if let Some(password) = password {
            store_part(out, b"password", password, &mut scratch)?;
        }
    }

    let room = rest.len();
    let (mut hosts, mut ports) = (Joined::Empty, Joined::Empty);
    let (mut hosts_need, mut ports_need) = (false, false);
    let mut rest = rest;
    loop {
        let (after, (host, port)) = host_and_port(rest).map_err(error)?;
        hosts.push(host.raw, room);
        hosts_need |= host.needs_decoding;
        if let Some(port) = port {
            ports.push(port.raw, room);
            ports_need |= port.needs_decoding;
        }
        let comma: Res<'_, _> = byte(b",").parse(after);
        let Ok((after, _)) = comma else {
            rest = after;
            break;
        };
        hosts.push(b",", room);
        ports.push(b",", room);
        rest = after;
    }
    for (keyword, joined, needs_decoding) in [
        (&b"host"[..], &hosts, hosts_need),
        (b"port", &ports, ports_need),
    ] {
        let raw = joined.as_bytes();
        store_part(
            out,
            keyword,
            Part {
                raw,
                needs_decoding,
            },
            &mut scratch,
        )?;
    }

    let dbname = preceded(byte(b"/"), part(U_QUESTION));
    let (rest, dbname) = opt(dbname).parse(rest).map_err(error)?;
    if let Some(dbname) = dbname {
        store_part(out, b"dbname", dbname, &mut scratch)?;
    }
    // What is left starts with `?` (or is empty): the query.
    let query: Res<'_, _> = take(1usize).parse(rest);
    if let Ok((mut params, _)) = query {
        let mut kw_scratch = Vec::new();
        while !params.is_empty() {
            let (after, (keyword, value)) = query_parameter(params).map_err(error)?;
            let keyword = decode(keyword, &mut kw_scratch)?;
            let value = decode(value, &mut scratch)?;
            if keyword == b"ssl" && value == b"true" {
                let _ = out.store(b"sslmode", b"require");
            } else if store(out, keyword, value).is_err() {
                return Err(ParseError::UriInvalidParameter {
                    keyword: keyword.to_vec(),
                });
            }
            params = after;
        }
    }
    Ok(())
}

/// Stores a non-empty fixed component, decoded.
fn store_part(
    out: &mut impl Sink,
    keyword: &[u8],
    part: Part<'_>,
    scratch: &mut Vec<u8>,
) -> Result<(), ParseError> {
    if part.raw.is_empty() {
        return Ok(());
    }
    let value = decode(part, scratch)?;
    // The URI grammar only names keywords from libpq's table here; a sink that rejects one of
    // them has nothing better to do than drop it.
    let _ = out.store(keyword, value);
    Ok(())
}

/// The libpq error for a failure of the grammar over `uri`.
fn uri_error(uri: &[u8], e: nom::Err<Fail<'_>>) -> ParseError {
    let fail = match e {
        nom::Err::Error(f) | nom::Err::Failure(f) => f,
        nom::Err::Incomplete(_) => Fail::Mismatch,
    };
    match fail {
        Fail::UnterminatedIpv6 | Fail::Mismatch => {
            ParseError::UriUnterminatedIpv6 { uri: uri.to_vec() }
        }
        Fail::EmptyIpv6 => ParseError::UriEmptyIpv6 { uri: uri.to_vec() },
        Fail::UnexpectedCharacter(at) => ParseError::UriUnexpectedCharacter {
            byte: at[0],
            position: uri.len() - at.len() + 1,
            uri: uri.to_vec(),
        },
        Fail::MissingSeparator(keyword) => ParseError::UriMissingSeparator {
            keyword: keyword.to_vec(),
        },
        Fail::ExtraSeparator(keyword) => ParseError::UriExtraSeparator {
            keyword: keyword.to_vec(),
        },
    }
}

/// How percent-decoding a component failed.
#[derive(Debug)]
enum DecodeFail {
    InvalidPercent,
    PercentZero,
    Mismatch,
}

impl<'a> NomParseError<&'a [u8]> for DecodeFail {
    fn from_error_kind(_: &'a [u8], _: ErrorKind) -> Self {
        DecodeFail::Mismatch
    }

    fn append(_: &'a [u8], _: ErrorKind, other: Self) -> Self {
        other
    }
}

/// Leading spaces.
fn spaces(input: &[u8]) -> (&[u8], &[u8]) {
    let parsed: IResult<_, _, DecodeFail> = take_while(|c| c == b' ').parse(input);
    parsed.unwrap_or((input, &[]))
}

/// Bytes that decode as themselves: up to a space or `%`.
fn plain(input: &[u8]) -> (&[u8], &[u8]) {
    let parsed: IResult<_, _, DecodeFail> = take_till(|c| c == b' ' || c == b'%').parse(input);
    parsed.unwrap_or((input, &[]))
}

/// `%XX` with two hex digits and not `%00`.
fn percent_escape(input: &[u8]) -> IResult<&[u8], u8, DecodeFail> {
    let (rest, _) = tag(&b"%"[..]).parse(input)?;
    let invalid = nom::Err::Failure(DecodeFail::InvalidPercent);
    let Ok((rest, digits)) = take::<_, _, DecodeFail>(2usize).parse(rest) else {
        return Err(invalid);
    };
    let (Some(hi), Some(lo)) = (hex(digits[0]), hex(digits[1])) else {
        return Err(invalid);
    };
    match (hi << 4) | lo {
        0 => Err(nom::Err::Failure(DecodeFail::PercentZero)),
        c => Ok((rest, c)),
    }
}

#[inline]
fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Percent-decodes one component (`conninfo_uri_decode`) unless its scan saw nothing to
/// decode: surrounding spaces are dropped, an inner unencoded space is an error, `%00` is
/// forbidden, `+` stays `+`. Borrows the input when there is nothing to decode.
fn decode<'a>(part: Part<'a>, scratch: &'a mut Vec<u8>) -> Result<&'a [u8], ParseError> {
    let raw = part.raw;
    if !part.needs_decoding {
        return Ok(raw);
    }
    let component = || raw.to_vec();
    let trailing_spaces_only = |rest: &[u8]| match spaces(rest) {
        ([], _) => Ok(()),
        _ => Err(ParseError::UnexpectedSpaces {
            component: component(),
        }),
    };
    let (rest, _) = spaces(raw);
    let (mut rest, run) = plain(rest);
    if rest.first() != Some(&b'%') {
        trailing_spaces_only(rest)?;
        return Ok(run);
    }
    scratch.clear();
    scratch.extend_from_slice(run);
    loop {
        match percent_escape(rest) {
            Ok((after, c)) => {
                scratch.push(c);
                rest = after;
            }
            Err(nom::Err::Failure(DecodeFail::PercentZero)) => {
                return Err(ParseError::ForbiddenPercentZero {
                    component: component(),
                })
            }
            Err(nom::Err::Failure(_)) => {
                return Err(ParseError::InvalidPercentToken {
                    component: component(),
                })
            }
            Err(_) => {}
        }
        let (after, run) = plain(rest);
        scratch.extend_from_slice(run);
        rest = after;
        if rest.first() != Some(&b'%') {
            break;
        }
    }
    trailing_spaces_only(rest)?;
    Ok(scratch)
}
