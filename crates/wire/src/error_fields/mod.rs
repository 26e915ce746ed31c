//! ErrorResponse/NoticeResponse fields, SQLSTATE constants and the failover classification.
//!
//! [`ErrorFields`] is a validated, borrowed view of an ErrorResponse or NoticeResponse body:
//! field values stay bytes (they may not be UTF-8 when `client_encoding` and `lc_messages`
//! disagree), unknown field codes are preserved, and when a code appears twice the last one
//! wins, as in libpq. [`ErrorFields::render`] reproduces libpq's message text.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::buf::{DecodeError, Reader};
use crate::frame::{put_cstr, put_frame, EncodeError};

mod sqlstate;

pub use sqlstate::{connect_disposition, ConnectDisposition, ConnectStage, SqlState};

/// Type byte of ErrorResponse.
pub const ERROR_RESPONSE_TAG: u8 = b'E';
/// Type byte of NoticeResponse.
pub const NOTICE_RESPONSE_TAG: u8 = b'N';

/// An error/notice field code; unknown codes are kept as [`FieldCode::Unknown`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldCode {
    /// `S`: severity, possibly localized.
    Severity,
    /// `V`: severity, never localized (9.6+).
    SeverityNonLocalized,
    /// `C`: SQLSTATE.
    Code,
    /// `M`: primary message.
    Message,
    /// `D`: detail.
    Detail,
    /// `H`: hint.
    Hint,
    /// `P`: position in the client's query (1-based, characters).
    Position,
    /// `p`: position in an internally generated query.
    InternalPosition,
    /// `q`: text of that internal query.
    InternalQuery,
    /// `W`: context ("where"), one line per call level.
    Where,
    /// `s`: schema name.
    Schema,
    /// `t`: table name.
    Table,
    /// `c`: column name.
    Column,
    /// `d`: data type name.
    DataType,
    /// `n`: constraint name.
    Constraint,
    /// `F`: source file.
    File,
    /// `L`: source line.
    Line,
    /// `R`: source routine.
    Routine,
    /// Any other non-zero code (future additions must be ignored, not rejected).
    Unknown(u8),
}

impl FieldCode {
    /// Classifies a code byte.
    pub fn from_byte(b: u8) -> Self {
        match b {
            b'S' => FieldCode::Severity,
            b'V' => FieldCode::SeverityNonLocalized,
            b'C' => FieldCode::Code,
            b'M' => FieldCode::Message,
            b'D' => FieldCode::Detail,
            b'H' => FieldCode::Hint,
            b'P' => FieldCode::Position,
            b'p' => FieldCode::InternalPosition,
            b'q' => FieldCode::InternalQuery,
            b'W' => FieldCode::Where,
            b's' => FieldCode::Schema,
            b't' => FieldCode::Table,
            b'c' => FieldCode::Column,
            b'd' => FieldCode::DataType,
            b'n' => FieldCode::Constraint,
            b'F' => FieldCode::File,
            b'L' => FieldCode::Line,
            b'R' => FieldCode::Routine,
            other => FieldCode::Unknown(other),
        }
    }

    /// The code byte.
    pub fn byte(self) -> u8 {
        match self {
            FieldCode::Severity => b'S',
            FieldCode::SeverityNonLocalized => b'V',
            FieldCode::Code => b'C',
            FieldCode::Message => b'M',
            FieldCode::Detail => b'D',
            FieldCode::Hint => b'H',
            FieldCode::Position => b'P',
            FieldCode::InternalPosition => b'p',
            FieldCode::InternalQuery => b'q',
            FieldCode::Where => b'W',
            FieldCode::Schema => b's',
            FieldCode::Table => b't',
            FieldCode::Column => b'c',
            FieldCode::DataType => b'd',
            FieldCode::Constraint => b'n',
            FieldCode::File => b'F',
            FieldCode::Line => b'L',
            FieldCode::Routine => b'R',
            FieldCode::Unknown(b) => b,
        }
    }
}

/// The fields of an ErrorResponse or NoticeResponse body, borrowed and validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorFields<'a> {
    /// The body, final terminator included.
    raw: &'a [u8],
}

impl<'a> ErrorFields<'a> {
    /// Wraps an encoded body, final terminator included; the generators build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(raw: &'a [u8]) -> Self {
        ErrorFields { raw }
    }

    /// Validates a body: (code, string) pairs ended by a zero byte that must be the last byte.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        loop {
            if r.u8()? == 0 {
                r.finish()?;
                return Ok(ErrorFields { raw: body });
            }
            r.cstr()?;
        }
    }

    /// Every field in wire order, unknown codes included.
    pub fn iter(&self) -> ErrorFieldIter<'a> {
        ErrorFieldIter { rest: self.raw }
    }

    /// The value of the last field with code byte `code`.
    pub fn get(&self, code: u8) -> Option<&'a [u8]> {
        self.iter()
            .filter(|(c, _)| c.byte() == code)
            .last()
            .map(|(_, v)| v)
    }

    /// Severity: the non-localized `V` if present, else `S`.
    pub fn severity(&self) -> Option<&'a [u8]> {
        self.get(b'V').or_else(|| self.get(b'S'))
    }

    /// `S`: the possibly localized severity (what libpq prints).
    pub fn severity_localized(&self) -> Option<&'a [u8]> {
        self.get(b'S')
    }

    /// `C` as raw bytes.
    pub fn code(&self) -> Option<&'a [u8]> {
        self.get(b'C')
    }

    /// `C` parsed; `None` when absent or malformed.
    pub fn sqlstate(&self) -> Option<SqlState> {
        self.code().and_then(SqlState::from_bytes)
    }

    /// `M`: the primary message.
    pub fn message(&self) -> Option<&'a [u8]> {
        self.get(b'M')
    }

    /// `D`: detail.
    pub fn detail(&self) -> Option<&'a [u8]> {
        self.get(b'D')
    }

    /// `H`: hint.
    pub fn hint(&self) -> Option<&'a [u8]> {
        self.get(b'H')
    }

    /// `P`: position in the client query.
    pub fn position(&self) -> Option<&'a [u8]> {
        self.get(b'P')
    }

    /// `p`: position in the internal query.
    pub fn internal_position(&self) -> Option<&'a [u8]> {
        self.get(b'p')
    }

    /// `q`: the internal query.
    pub fn internal_query(&self) -> Option<&'a [u8]> {
        self.get(b'q')
    }

    /// `W`: context.
    pub fn where_(&self) -> Option<&'a [u8]> {
        self.get(b'W')
    }

    /// `s`: schema name.
    pub fn schema(&self) -> Option<&'a [u8]> {
        self.get(b's')
    }

    /// `t`: table name.
    pub fn table(&self) -> Option<&'a [u8]> {
        self.get(b't')
    }

    /// `c`: column name.
    pub fn column(&self) -> Option<&'a [u8]> {
        self.get(b'c')
    }

    /// `d`: data type name.
    pub fn data_type(&self) -> Option<&'a [u8]> {
        self.get(b'd')
    }

    /// `n`: constraint name.
    pub fn constraint(&self) -> Option<&'a [u8]> {
        self.get(b'n')
    }

    /// `F`: source file.
    pub fn file(&self) -> Option<&'a [u8]> {
        self.get(b'F')
    }

    /// `L`: source line.
    pub fn line(&self) -> Option<&'a [u8]> {
        self.get(b'L')
    }

    /// `R`: source routine.
    pub fn routine(&self) -> Option<&'a [u8]> {
        self.get(b'R')
    }

    /// The body as received (final terminator included).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }

    /// Writes these fields as a message with type byte `tag` (`E` or `N`).
    pub fn encode(&self, tag: u8, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag, self.raw.len(), |b| {
            b.put_slice(self.raw);
            Ok(())
        })
    }

    /// libpq's text for this error or notice, with `verbosity` and whether CONTEXT is shown
    /// (libpq's default shows it for errors only). Non-UTF-8 bytes are replaced. The query
    /// text is not known here, so a position is always rendered as " at character N".
    pub fn render(&self, verbosity: Verbosity, show_context: bool) -> String {
        fn push_line(out: &mut String, label: &str, v: Option<&[u8]>) {
            if let Some(v) = v {
                out.push_str(label);
                out.push_str(&String::from_utf8_lossy(v));
                out.push('\n');
            }
        }
        let mut out = String::new();
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        if let Some(v) = self.severity_localized() {
            out.push_str(&text(v));
            out.push_str(":  ");
        }
        let mut verbosity = verbosity;
        if verbosity == Verbosity::Sqlstate {
            if let Some(c) = self.code() {
                out.push_str(&text(c));
                out.push('\n');
                return out;
            }
            verbosity = Verbosity::Terse;
        }
        if verbosity == Verbosity::Verbose {
            if let Some(c) = self.code() {
                out.push_str(&text(c));
                out.push_str(": ");
            }
        }
        if let Some(m) = self.message() {
            out.push_str(&text(m));
        }
        if let Some(p) = self.position() {
            out.push_str(" at character ");
            out.push_str(&text(p));
        } else if let Some(p) = self.internal_position() {
            // With the internal query at hand (and not terse) libpq draws a cursor instead.
            if verbosity == Verbosity::Terse || self.internal_query().is_none() {
                out.push_str(" at character ");
                out.push_str(&text(p));
            }
        }
        out.push('\n');
        if verbosity != Verbosity::Terse {
            push_line(&mut out, "DETAIL:  ", self.detail());
            push_line(&mut out, "HINT:  ", self.hint());
            push_line(&mut out, "QUERY:  ", self.internal_query());
            if show_context {
                push_line(&mut out, "CONTEXT:  ", self.where_());
            }
        }
        if verbosity == Verbosity::Verbose {
            push_line(&mut out, "SCHEMA NAME:  ", self.schema());
            push_line(&mut out, "TABLE NAME:  ", self.table());
            push_line(&mut out, "COLUMN NAME:  ", self.column());
            push_line(&mut out, "DATATYPE NAME:  ", self.data_type());
            push_line(&mut out, "CONSTRAINT NAME:  ", self.constraint());
            let (f, l, r) = (self.file(), self.line(), self.routine());
            if f.is_some() || l.is_some() || r.is_some() {
                out.push_str("LOCATION:  ");
                if let Some(r) = r {
                    out.push_str(&text(r));
                    out.push_str(", ");
                }
                if let (Some(f), Some(l)) = (f, l) {
                    out.push_str(&text(f));
                    out.push(':');
                    out.push_str(&text(l));
                }
                out.push('\n');
            }
        }
        out
    }

    /// An owned copy.
    pub fn to_owned_fields(&self) -> OwnedErrorFields {
        OwnedErrorFields {
            raw: Bytes::copy_from_slice(self.raw),
        }
    }
}

impl fmt::Display for ErrorFields<'_> {
    /// libpq's default rendering of an error (CONTEXT shown), without the final newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.render(Verbosity::Default, true);
        f.write_str(s.strip_suffix('\n').unwrap_or(&s))
    }
}

/// Iterator over (code, value) pairs of [`ErrorFields`].
#[derive(Clone, Debug)]
pub struct ErrorFieldIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for ErrorFieldIter<'a> {
    type Item = (FieldCode, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // Validated on decode: a non-zero code is always followed by a terminated string.
        let (&code, tail) = self.rest.split_first()?;
        if code == 0 {
            self.rest = &[];
            return None;
        }
        let end = tail.iter().position(|&b| b == 0)?;
        let (value, rest) = tail.split_at(end);
        self.rest = rest.get(1..).unwrap_or_default();
        Some((FieldCode::from_byte(code), value))
    }
}

/// Owned error fields (for keeping an error after the receive buffer is reused).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedErrorFields {
    raw: Bytes,
}

impl OwnedErrorFields {
    /// Validates and keeps a body.
    pub fn decode(body: Bytes) -> Result<Self, DecodeError> {
        ErrorFields::decode(&body)?;
        Ok(OwnedErrorFields { raw: body })
    }

    /// The borrowed view.
    pub fn fields(&self) -> ErrorFields<'_> {
        ErrorFields { raw: &self.raw }
    }
}

impl fmt::Display for OwnedErrorFields {
    /// Same as [`ErrorFields`]'s `Display`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fields().fmt(f)
    }
}

/// libpq's error verbosity (`PQsetErrorVerbosity`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    /// Severity, message and position only.
    Terse,
    /// Adds DETAIL, HINT, QUERY and CONTEXT lines (libpq's default).
    Default,
    /// Adds the SQLSTATE, the name fields and LOCATION.
    Verbose,
    /// Severity and SQLSTATE only.
    Sqlstate,
}

/// Writes an ErrorResponse with `fields` in the given order.
pub fn encode_error_response(
    fields: &[(u8, &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    encode_fields(ERROR_RESPONSE_TAG, fields, buf)
}

/// Writes a NoticeResponse with `fields` in the given order.
pub fn encode_notice_response(
    fields: &[(u8, &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    encode_fields(NOTICE_RESPONSE_TAG, fields, buf)
}

/// Writes an error-or-notice layout under any type byte.
pub fn encode_fields(
    tag: u8,
    fields: &[(u8, &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = fields.iter().map(|(_, v)| v.len() + 2).sum::<usize>() + 1;
    put_frame(buf, tag, size, |b| {
        for &(code, value) in fields {
            if code == 0 {
                return Err(EncodeError::Invalid {
                    what: "error field code 0",
                });
            }
            b.put_u8(code);
            put_cstr(b, value, "error field")?;
        }
        b.put_u8(0);
        Ok(())
    })
}

#[cfg(test)]
mod tests;
