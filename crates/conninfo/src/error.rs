//! Parse errors, with libpq 18's message texts word for word.

use std::fmt;

/// Why a connection string (or keyword array) was rejected while parsing.
///
/// `Display` gives libpq's text without its trailing newline, with bytes that are not UTF-8
/// shown as U+FFFD; [`ParseError::libpq_message`] gives the exact bytes libpq puts in `errmsg`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The input holds a NUL byte; libpq, taking a C string, could never see past it.
    #[error("connection string contains a NUL byte at offset {offset}")]
    NulByte {
        /// Byte offset of the NUL.
        offset: usize,
    },
    /// A keyword is not followed by `=`.
    #[error("missing \"=\" after \"{}\" in connection info string", lossy(.name))]
    MissingEquals {
        /// The token as scanned.
        name: Vec<u8>,
    },
    /// A keyword libpq does not know.
    #[error("invalid connection option \"{}\"", lossy(.name))]
    InvalidOption {
        /// The keyword.
        name: Vec<u8>,
    },
    /// A single-quoted value runs to the end of the input.
    #[error("unterminated quoted string in connection info string")]
    UnterminatedQuote,
    /// `[` without its `]` in a URI.
    #[error("end of string reached when looking for matching \"]\" in IPv6 host address in URI: \"{}\"", lossy(.uri))]
    UriUnterminatedIpv6 {
        /// The whole URI.
        uri: Vec<u8>,
    },
    /// `[]` in a URI.
    #[error("IPv6 host address may not be empty in URI: \"{}\"", lossy(.uri))]
    UriEmptyIpv6 {
        /// The whole URI.
        uri: Vec<u8>,
    },
    /// Something other than `:`, `/`, `?`, `,` or the end after `]`.
    #[error("unexpected character \"{}\" at position {position} in URI (expected \":\" or \"/\"): \"{}\"", lossy(&[*.byte]), lossy(.uri))]
    UriUnexpectedCharacter {
        /// The offending byte.
        byte: u8,
        /// Its 1-based offset in the whole URI.
        position: usize,
        /// The whole URI.
        uri: Vec<u8>,
    },
    /// `%` not followed by two hex digits.
    #[error("invalid percent-encoded token: \"{}\"", lossy(.component))]
    InvalidPercentToken {
        /// The raw component.
        component: Vec<u8>,
    },
    /// `%00` in a URI component.
    #[error("forbidden value %00 in percent-encoded value: \"{}\"", lossy(.component))]
    ForbiddenPercentZero {
        /// The raw component.
        component: Vec<u8>,
    },
    /// An unencoded space inside a URI component.
    #[error("unexpected spaces found in \"{}\", use percent-encoded spaces (%20) instead", lossy(.component))]
    UnexpectedSpaces {
        /// The raw component.
        component: Vec<u8>,
    },
    /// A URI query parameter without `=`.
    #[error("missing key/value separator \"=\" in URI query parameter: \"{}\"", lossy(.keyword))]
    UriMissingSeparator {
        /// The raw keyword.
        keyword: Vec<u8>,
    },
    /// A URI query parameter with a second `=`.
    #[error("extra key/value separator \"=\" in URI query parameter: \"{}\"", lossy(.keyword))]
    UriExtraSeparator {
        /// The raw keyword.
        keyword: Vec<u8>,
    },
    /// A URI query parameter naming no keyword.
    #[error("invalid URI query parameter: \"{}\"", lossy(.keyword))]
    UriInvalidParameter {
        /// The decoded keyword.
        keyword: Vec<u8>,
    },
    /// A proposal-dialect boolean (`readonly`, `loadbalancing`) that is not a boolean.
    #[error("invalid value for boolean option \"{keyword}\": \"{}\"", lossy(.value))]
    InvalidBoolean {
        /// The option.
        keyword: &'static str,
        /// Its value.
        value: Vec<u8>,
    },
}

impl ParseError {
    /// The exact bytes libpq 18 leaves in `errmsg`, trailing newline included.
    pub fn libpq_message(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let q = |out: &mut Vec<u8>, b: &[u8]| {
            out.push(b'"');
            out.extend_from_slice(b);
            out.push(b'"');
        };
        match self {
            ParseError::MissingEquals { name } => {
                out.extend_from_slice(b"missing \"=\" after ");
                q(&mut out, name);
                out.extend_from_slice(b" in connection info string");
            }
            ParseError::InvalidOption { name } => {
                out.extend_from_slice(b"invalid connection option ");
                q(&mut out, name);
            }
            ParseError::UriUnterminatedIpv6 { uri } => {
                out.extend_from_slice(b"end of string reached when looking for matching \"]\" in IPv6 host address in URI: ");
                q(&mut out, uri);
            }
            ParseError::UriEmptyIpv6 { uri } => {
                out.extend_from_slice(b"IPv6 host address may not be empty in URI: ");
                q(&mut out, uri);
            }
            ParseError::UriUnexpectedCharacter {
                byte,
                position,
                uri,
            } => {
                out.extend_from_slice(b"unexpected character ");
                q(&mut out, &[*byte]);
                out.extend_from_slice(
                    format!(" at position {position} in URI (expected \":\" or \"/\"): ")
                        .as_bytes(),
                );
                q(&mut out, uri);
            }
            ParseError::InvalidPercentToken { component } => {
                out.extend_from_slice(b"invalid percent-encoded token: ");
                q(&mut out, component);
            }
            ParseError::ForbiddenPercentZero { component } => {
                out.extend_from_slice(b"forbidden value %00 in percent-encoded value: ");
                q(&mut out, component);
            }
            ParseError::UnexpectedSpaces { component } => {
                out.extend_from_slice(b"unexpected spaces found in ");
                q(&mut out, component);
                out.extend_from_slice(b", use percent-encoded spaces (%20) instead");
            }
            ParseError::UriMissingSeparator { keyword } => {
                out.extend_from_slice(
                    b"missing key/value separator \"=\" in URI query parameter: ",
                );
                q(&mut out, keyword);
            }
            ParseError::UriExtraSeparator { keyword } => {
                out.extend_from_slice(b"extra key/value separator \"=\" in URI query parameter: ");
                q(&mut out, keyword);
            }
            ParseError::UriInvalidParameter { keyword } => {
                out.extend_from_slice(b"invalid URI query parameter: ");
                q(&mut out, keyword);
            }
            other => out.extend_from_slice(other.to_string().as_bytes()),
        }
        out.push(b'\n');
        out
    }
}

/// Bytes as text for messages: invalid UTF-8 becomes U+FFFD.
pub(crate) fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

/// Wrapper that prints bytes lossily; handy in `format!`.
pub struct Lossy<'a>(pub &'a [u8]);

impl fmt::Display for Lossy<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.0))
    }
}
