//! The SCRAM message grammar: the attribute cursor, the parsers of server-first and
//! client-first, and the small checks both machines share.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

use nom::branch::alt;
use nom::bytes::complete::{tag, take, take_till, take_while1};
use nom::character::complete::digit1;
use nom::combinator::{all_consuming, map, opt, value, verify};
use nom::sequence::preceded;
use nom::{IResult, Parser};

use super::{Mechanism, ScramError, ScramServerError, CHANNEL_BINDING_TYPE};

/// Length of the trailing `,p=…` of a client-final message whose last attribute is `p`.
pub(super) fn proof_attr_len(message: &[u8]) -> usize {
    match message.iter().rposition(|&b| b == b',') {
        Some(comma) => message.len() - comma,
        None => message.len(),
    }
}

/// A nonce is non-empty printable ASCII other than `,`.
pub(super) fn valid_nonce(nonce: &[u8]) -> bool {
    let printable = take_while1(|b: u8| (0x21..=0x7e).contains(&b) && b != b',');
    let parsed: IResult<_, _, ()> = all_consuming(printable).parse(nonce);
    parsed.is_ok()
}

/// Unsigned decimal digits that fit a `u32`, leading zeros allowed; no sign, no space.
pub(super) fn parse_decimal(digits: &[u8]) -> Option<u32> {
    let parsed: IResult<_, _, ()> = all_consuming(nom::character::complete::u32).parse(digits);
    parsed.ok().map(|(_, value)| value)
}

pub(super) fn check_text(message: &[u8]) -> Result<(), ScramError> {
    if message.is_empty() {
        return Err(ScramError::EmptyMessage);
    }
    if message.contains(&0) {
        return Err(ScramError::LengthMismatch);
    }
    Ok(())
}

pub(super) struct ServerFirst {
    pub(super) nonce: String,
    pub(super) salt: Vec<u8>,
    pub(super) iterations: u32,
}

pub(super) fn parse_server_first(
    message: &[u8],
    client_nonce: &str,
    max_iterations: u32,
) -> Result<ServerFirst, ScramError> {
    check_text(message)?;
    if message.starts_with(b"m=") {
        return Err(ScramError::MandatoryExtension);
    }
    let mut attrs = Attrs::new(message);
    let nonce = attrs.attr(b'r').map_err(client_attr_error)?;
    if !valid_nonce(nonce) {
        return Err(ScramError::InvalidNonce);
    }
    if nonce.len() <= client_nonce.len() || !nonce.starts_with(client_nonce.as_bytes()) {
        return Err(ScramError::NonceMismatch);
    }
    let salt = attrs.attr(b's').map_err(client_attr_error)?;
    let salt = BASE64.decode(salt).map_err(|_| ScramError::InvalidSalt)?;
    if salt.is_empty() {
        return Err(ScramError::InvalidSalt);
    }
    let iterations = attrs.attr(b'i').map_err(client_attr_error)?;
    let count: IResult<_, _, ()> = all_consuming(digit1).parse(iterations);
    if count.is_err() || iterations.iter().all(|&d| d == b'0') {
        return Err(ScramError::InvalidIterationCount);
    }
    // All digits and not zero: only a count beyond u32 fails to parse.
    let iterations = parse_decimal(iterations).ok_or(ScramError::TooManyIterations {
        count: u32::MAX,
        max: max_iterations,
    })?;
    if iterations > max_iterations {
        return Err(ScramError::TooManyIterations {
            count: iterations,
            max: max_iterations,
        });
    }
    if !attrs.at_end() {
        return Err(ScramError::GarbageAfterServerFirst);
    }
    Ok(ServerFirst {
        // Checked above: printable ASCII.
        nonce: String::from_utf8_lossy(nonce).into_owned(),
        salt,
        iterations,
    })
}

pub(super) struct ClientFirstParts<'a> {
    pub(super) gs2_header: &'a [u8],
    pub(super) bare: &'a [u8],
    pub(super) client_nonce: &'a str,
}

pub(super) fn parse_client_first(
    message: &[u8],
    mechanism: Mechanism,
    tls: bool,
) -> Result<ClientFirstParts<'_>, ScramServerError> {
    use ScramServerError::Malformed;
    if message.is_empty() || message.contains(&0) {
        return Err(Malformed("invalid client-first-message"));
    }
    let plus = mechanism == Mechanism::ScramSha256Plus;
    let (rest, flag) = gs2_flag(message);
    match flag {
        Gs2Flag::Unbound { supported } => {
            if plus {
                return Err(Malformed(
                    "the client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include channel binding data",
                ));
            }
            if supported && tls {
                return Err(ScramServerError::ChannelBindingNegotiation);
            }
        }
        Gs2Flag::Bound(name) => {
            if !plus {
                return Err(Malformed(
                    "the client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data",
                ));
            }
            match name {
                None => return Err(Malformed("expected \"=\" after channel-binding flag \"p\"")),
                Some(name) if name != CHANNEL_BINDING_TYPE.as_bytes() => {
                    return Err(ScramServerError::UnsupportedChannelBindingType(
                        String::from_utf8_lossy(name).into_owned(),
                    ));
                }
                Some(_) => {}
            }
        }
        Gs2Flag::Unknown => return Err(Malformed("unexpected channel-binding flag")),
    }
    let rest = byte(b',', rest).ok_or(Malformed("comma expected after channel-binding flag"))?;
    if rest.first() == Some(&b'a') {
        return Err(ScramServerError::AuthzidUnsupported);
    }
    let rest = byte(b',', rest).ok_or(Malformed("unexpected attribute in client-first-message"))?;
    let pos = message.len() - rest.len();
    let (gs2_header, bare) = message.split_at(pos);
    if bare.first() == Some(&b'm') {
        return Err(ScramServerError::UnsupportedExtension);
    }
    let mut attrs = Attrs::new(bare);
    attrs.attr(b'n').map_err(server_attr_error)?; // user name: ignored, as PostgreSQL does
    let nonce = attrs.attr(b'r').map_err(server_attr_error)?;
    if !valid_nonce(nonce) {
        return Err(Malformed("non-printable characters in SCRAM nonce"));
    }
    while !attrs.at_end() {
        attrs.any().map_err(server_attr_error)?; // extensions are ignored
    }
    Ok(ClientFirstParts {
        gs2_header,
        bare,
        // Checked above: printable ASCII.
        client_nonce: std::str::from_utf8(nonce).unwrap_or_default(),
    })
}

/// The channel-binding flag that opens a GS2 header.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Gs2Flag<'a> {
    /// `n` (client does not support binding) or `y` (supports it, thinks the server does not).
    Unbound {
        supported: bool,
    },
    /// `p=name`; `None` for a `p` not followed by `=`.
    Bound(Option<&'a [u8]>),
    Unknown,
}

/// Reads the channel-binding flag; the rest starts where the `,` after it should be.
fn gs2_flag(message: &[u8]) -> (&[u8], Gs2Flag<'_>) {
    let unbound = alt((
        value(Gs2Flag::Unbound { supported: false }, tag(&b"n"[..])),
        value(Gs2Flag::Unbound { supported: true }, tag(&b"y"[..])),
    ));
    let bound = map(
        preceded(tag(&b"p"[..]), opt(preceded(tag(&b"="[..]), till_comma))),
        Gs2Flag::Bound,
    );
    let parsed: IResult<_, _, ()> = alt((unbound, bound)).parse(message);
    parsed.unwrap_or((message, Gs2Flag::Unknown))
}

/// A value: everything up to the next `,` or the end.
fn till_comma(input: &[u8]) -> IResult<&[u8], &[u8], ()> {
    take_till(|b| b == b',').parse(input)
}

/// `input` after a leading `b`, if it starts with one.
fn byte(b: u8, input: &[u8]) -> Option<&[u8]> {
    let parsed: IResult<_, _, ()> = tag(&[b][..]).parse(input);
    parsed.ok().map(|(rest, _)| rest)
}

/// Attribute-parse failure, mapped to each side's error type.
pub(super) enum AttrError {
    Expected(u8),
    NoEquals(u8),
}

pub(super) fn client_attr_error(e: AttrError) -> ScramError {
    match e {
        AttrError::Expected(a) => ScramError::AttributeExpected(char::from(a)),
        AttrError::NoEquals(a) => ScramError::EqualsExpected(char::from(a)),
    }
}

pub(super) fn server_attr_error(e: AttrError) -> ScramServerError {
    match e {
        AttrError::Expected(_) => ScramServerError::Malformed("expected attribute missing"),
        AttrError::NoEquals(_) => ScramServerError::Malformed("expected \"=\" after attribute"),
    }
}

/// A cursor over `name=value` attributes separated by `,`.
pub(super) struct Attrs<'a> {
    rest: &'a [u8],
    started: bool,
}

impl<'a> Attrs<'a> {
    pub(super) fn new(message: &'a [u8]) -> Self {
        Attrs {
            rest: message,
            started: false,
        }
    }

    /// True when nothing (not even a separator) is left.
    pub(super) fn at_end(&self) -> bool {
        self.rest.is_empty()
    }

    /// Skips the separator before every attribute but the first.
    fn begin(&mut self) -> &'a [u8] {
        if self.started {
            // The previous value ended at a `,` or at the end.
            self.rest = byte(b',', self.rest).unwrap_or(self.rest);
        }
        self.started = true;
        self.rest
    }

    /// The `=value` after an attribute name, with `input` just past the name.
    fn value(&mut self, name: u8, input: &'a [u8]) -> Result<&'a [u8], AttrError> {
        let (rest, value) = preceded(tag(&b"="[..]), till_comma)
            .parse(input)
            .map_err(|_| AttrError::NoEquals(name))?;
        self.rest = rest;
        Ok(value)
    }

    pub(super) fn attr(&mut self, name: u8) -> Result<&'a [u8], AttrError> {
        let input = self.begin();
        let after = byte(name, input).ok_or(AttrError::Expected(name))?;
        self.value(name, after)
    }

    pub(super) fn any(&mut self) -> Result<(u8, &'a [u8]), AttrError> {
        let input = self.begin();
        let mut letter = verify(take(1usize), |n: &[u8]| n[0].is_ascii_alphabetic());
        let parsed: IResult<_, _, ()> = letter.parse(input);
        let (after, name) = parsed.map_err(|_| AttrError::Expected(b'?'))?;
        Ok((name[0], self.value(name[0], after)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_take_leading_zeros_but_no_sign_or_overflow() {
        assert_eq!(parse_decimal(b"0004096"), Some(4096));
        assert_eq!(parse_decimal(b"000000000004294967295"), Some(u32::MAX));
        assert_eq!(parse_decimal(b"4294967296"), None);
        assert_eq!(parse_decimal(b"0"), Some(0));
        for bad in [&b""[..], b"+1", b"-1", b" 1", b"1 ", b"1a", b"0x1"] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn nonces_are_printable_ascii_without_commas() {
        assert!(valid_nonce(b"!~abc"));
        for bad in [&b""[..], b"a,b", b"a b", b"\x7f", b"\xc3\xa9"] {
            assert!(!valid_nonce(bad), "{bad:?}");
        }
    }

    #[test]
    fn gs2_flags() {
        assert_eq!(
            gs2_flag(b"n,,"),
            (&b",,"[..], Gs2Flag::Unbound { supported: false })
        );
        assert_eq!(
            gs2_flag(b"y,"),
            (&b","[..], Gs2Flag::Unbound { supported: true })
        );
        assert_eq!(gs2_flag(b"p=x,y"), (&b",y"[..], Gs2Flag::Bound(Some(b"x"))));
        assert_eq!(gs2_flag(b"p="), (&b""[..], Gs2Flag::Bound(Some(b""))));
        assert_eq!(gs2_flag(b"p,"), (&b","[..], Gs2Flag::Bound(None)));
        assert_eq!(gs2_flag(b"q,"), (&b"q,"[..], Gs2Flag::Unknown));
    }

    #[test]
    fn attribute_cursor_reports_each_failure() {
        let mut a = Attrs::new(b"r=a=b,s=,x=1,");
        assert_eq!(a.attr(b'r').ok(), Some(&b"a=b"[..]), "`=` inside a value");
        assert_eq!(a.attr(b's').ok(), Some(&b""[..]));
        assert_eq!(a.any().ok(), Some((b'x', &b"1"[..])));
        assert!(!a.at_end(), "a trailing comma is left over");
        assert!(matches!(a.any(), Err(AttrError::Expected(b'?'))));

        assert!(matches!(
            Attrs::new(b"r").attr(b'r'),
            Err(AttrError::NoEquals(b'r'))
        ));
        assert!(matches!(
            Attrs::new(b"s=1").attr(b'r'),
            Err(AttrError::Expected(b'r'))
        ));
        assert!(matches!(
            Attrs::new(b",r=1").attr(b'r'),
            Err(AttrError::Expected(b'r'))
        ));
        assert!(matches!(
            Attrs::new(b"1=2").any(),
            Err(AttrError::Expected(b'?'))
        ));
        let mut a = Attrs::new(b"r=1");
        a.attr(b'r').ok();
        assert!(a.at_end());
        assert!(matches!(a.attr(b's'), Err(AttrError::Expected(b's'))));
    }

    #[test]
    fn client_first_header_errors_come_in_libpq_order() {
        let first = |m: &'static [u8], mech, tls| parse_client_first(m, mech, tls).err();
        let plain = Mechanism::ScramSha256;
        let plus = Mechanism::ScramSha256Plus;
        assert!(matches!(
            first(b"p,,n=,r=x", plain, true),
            Some(ScramServerError::Malformed(m)) if m.contains("without channel binding")
        ));
        assert!(matches!(
            first(b"p,,n=,r=x", plus, true),
            Some(ScramServerError::Malformed(m)) if m.contains("after channel-binding flag")
        ));
        assert!(matches!(
            first(b"p=other,,n=,r=x", plus, true),
            Some(ScramServerError::UnsupportedChannelBindingType(t)) if t == "other"
        ));
        assert!(matches!(
            first(b"y,,n=,r=x", plain, true),
            Some(ScramServerError::ChannelBindingNegotiation)
        ));
        assert!(matches!(
            first(b"n,a=u,n=,r=x", plain, false),
            Some(ScramServerError::AuthzidUnsupported)
        ));
        assert!(matches!(
            first(b"n,,m=1,n=,r=x", plain, false),
            Some(ScramServerError::UnsupportedExtension)
        ));
        let ok = parse_client_first(b"p=tls-server-end-point,,n=u,r=x,z=ext", plus, true)
            .ok()
            .map(|p| (p.gs2_header, p.bare, p.client_nonce));
        assert_eq!(
            ok,
            Some((&b"p=tls-server-end-point,,"[..], &b"n=u,r=x,z=ext"[..], "x"))
        );
    }
}
