//! The SCRAM message grammar: the attribute cursor, the parsers of server-first and
//! client-first, and the small checks both machines share.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;

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
    !nonce.is_empty()
        && nonce
            .iter()
            .all(|&b| (0x21..=0x7e).contains(&b) && b != b',')
}

pub(super) fn parse_decimal(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let start = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    let significant = &digits[start..];
    if significant.len() > 10 {
        return None;
    }
    let value = significant
        .iter()
        .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
    u32::try_from(value).ok()
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
    if iterations.is_empty()
        || !iterations.iter().all(u8::is_ascii_digit)
        || iterations.iter().all(|&d| d == b'0')
    {
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
    let mut pos;
    match message[0] {
        flag @ (b'n' | b'y') => {
            if plus {
                return Err(Malformed(
                    "the client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include channel binding data",
                ));
            }
            if flag == b'y' && tls {
                return Err(ScramServerError::ChannelBindingNegotiation);
            }
            pos = 1;
        }
        b'p' => {
            if !plus {
                return Err(Malformed(
                    "the client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data",
                ));
            }
            if message.get(1) != Some(&b'=') {
                return Err(Malformed("expected \"=\" after channel-binding flag \"p\""));
            }
            let rest = &message[2..];
            let end = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
            let name = &rest[..end];
            if name != CHANNEL_BINDING_TYPE.as_bytes() {
                return Err(ScramServerError::UnsupportedChannelBindingType(
                    String::from_utf8_lossy(name).into_owned(),
                ));
            }
            pos = 2 + end;
        }
        _ => return Err(Malformed("unexpected channel-binding flag")),
    }
    if message.get(pos) != Some(&b',') {
        return Err(Malformed("comma expected after channel-binding flag"));
    }
    pos += 1;
    if message.get(pos) == Some(&b'a') {
        return Err(ScramServerError::AuthzidUnsupported);
    }
    if message.get(pos) != Some(&b',') {
        return Err(Malformed("unexpected attribute in client-first-message"));
    }
    pos += 1;
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
    fn begin(&mut self) -> Option<u8> {
        if self.started {
            // The previous value ended at a ',' (or at the end, in which case rest is empty).
            self.rest = self.rest.get(1..).unwrap_or_default();
        }
        self.started = true;
        self.rest.first().copied()
    }

    fn value(&mut self, name: u8) -> Result<&'a [u8], AttrError> {
        if self.rest.get(1) != Some(&b'=') {
            return Err(AttrError::NoEquals(name));
        }
        let body = &self.rest[2..];
        let end = body.iter().position(|&b| b == b',').unwrap_or(body.len());
        let (value, rest) = body.split_at(end);
        self.rest = rest;
        Ok(value)
    }

    pub(super) fn attr(&mut self, name: u8) -> Result<&'a [u8], AttrError> {
        match self.begin() {
            Some(found) if found == name => self.value(name),
            _ => Err(AttrError::Expected(name)),
        }
    }

    pub(super) fn any(&mut self) -> Result<(u8, &'a [u8]), AttrError> {
        match self.begin() {
            Some(name) if name.is_ascii_alphabetic() => Ok((name, self.value(name)?)),
            _ => Err(AttrError::Expected(b'?')),
        }
    }
}
