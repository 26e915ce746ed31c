//! Frontend (client → server) messages: typed decode borrowing from the frame, encode into `BytesMut`.
//!
//! Decoding takes a frame body (for untyped startup packets: the bytes after the length
//! word) and borrows every string and value from it; error offsets are relative to that
//! body. Strings are raw bytes: the protocol does not promise UTF-8. Lists (parameter
//! values, format codes, OIDs, startup parameters) are validated once and iterated without
//! allocating.
//!
//! Encoding comes in two shapes that produce identical bytes: `encode` on a decoded message
//! (so a proxy or the simulator can re-emit what it parsed) and `encode_*` functions that
//! take plain slices (the fast path for drivers: one reservation per message, lengths
//! written directly, the frame length patched at the end). Encoders reject NUL bytes inside
//! C strings and counts or lengths that do not fit their fields, leaving the buffer as it
//! was on error.
//!
//! A `p` message means one of four things depending on the authentication exchange, so
//! [`FrontendMessage::decode`] yields [`FrontendMessage::AuthResponse`] with the raw body and
//! [`FrontendMessage::decode_with`] / [`decode_auth_response`] apply the interpretation the
//! caller's state says is due.

use bytes::{BufMut, BytesMut};

use crate::buf::{DecodeError, Reader};
use crate::frame::{len_i32, put_cstr, put_frame, EncodeError, FormatCodes, Oids, Values};

mod builders;
mod startup;

pub use builders::{
    encode_bind, encode_close, encode_copy_data, encode_copy_done, encode_copy_fail,
    encode_describe, encode_execute, encode_flush, encode_function_call, encode_gss_response,
    encode_parse, encode_password, encode_query, encode_sasl_initial_response,
    encode_sasl_response, encode_sync, encode_terminate,
};
pub use startup::{
    encode_cancel_request, encode_gssenc_request, encode_ssl_request, encode_startup,
    is_protocol_option, CancelRequest, StartupMessage, StartupPacket, StartupParams,
};

/// Type bytes of frontend messages.
pub mod tag {
    /// Bind.
    pub const BIND: u8 = b'B';
    /// Close.
    pub const CLOSE: u8 = b'C';
    /// CopyData.
    pub const COPY_DATA: u8 = b'd';
    /// CopyDone.
    pub const COPY_DONE: u8 = b'c';
    /// CopyFail.
    pub const COPY_FAIL: u8 = b'f';
    /// Describe.
    pub const DESCRIBE: u8 = b'D';
    /// Execute.
    pub const EXECUTE: u8 = b'E';
    /// Flush.
    pub const FLUSH: u8 = b'H';
    /// FunctionCall.
    pub const FUNCTION_CALL: u8 = b'F';
    /// PasswordMessage, GSSResponse, SASLInitialResponse, SASLResponse.
    pub const AUTH_RESPONSE: u8 = b'p';
    /// Parse.
    pub const PARSE: u8 = b'P';
    /// Query.
    pub const QUERY: u8 = b'Q';
    /// Sync.
    pub const SYNC: u8 = b'S';
    /// Terminate.
    pub const TERMINATE: u8 = b'X';
}

/// What a Close or Describe addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// `S`: a prepared statement.
    Statement,
    /// `P`: a portal.
    Portal,
}

impl Target {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            Target::Statement => b'S',
            Target::Portal => b'P',
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let at = r.offset();
        match r.u8()? {
            b'S' => Ok(Target::Statement),
            b'P' => Ok(Target::Portal),
            _ => Err(DecodeError::Invalid {
                what: "Close/Describe target (expected 'S' or 'P')",
                offset: at,
            }),
        }
    }
}

/// Bind: a portal from a prepared statement and parameter values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bind<'a> {
    /// Destination portal (empty = unnamed).
    pub portal: &'a [u8],
    /// Source statement (empty = unnamed).
    pub statement: &'a [u8],
    /// Parameter format codes (0, 1 or one per parameter).
    pub param_formats: FormatCodes<'a>,
    /// Parameter values.
    pub params: Values<'a>,
    /// Result column format codes (0, 1 or one per column).
    pub result_formats: FormatCodes<'a>,
}

impl<'a> Bind<'a> {
    /// Decodes a body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = Bind {
            portal: r.cstr()?,
            statement: r.cstr()?,
            param_formats: FormatCodes::read(&mut r)?,
            params: Values::read(&mut r)?,
            result_formats: FormatCodes::read(&mut r)?,
        };
        r.finish()?;
        Ok(m)
    }

    /// Re-encodes.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let size = self.portal.len()
            + self.statement.len()
            + 8
            + self.param_formats.raw().len()
            + self.params.raw().len()
            + self.result_formats.raw().len();
        put_frame(buf, tag::BIND, size, |b| {
            put_cstr(b, self.portal, "portal name")?;
            put_cstr(b, self.statement, "statement name")?;
            self.param_formats.put(b)?;
            self.params.put(b);
            self.result_formats.put(b)
        })
    }
}

/// Close or Describe: a target kind and name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TargetName<'a> {
    /// Statement or portal.
    pub target: Target,
    /// Its name (empty = unnamed).
    pub name: &'a [u8],
}

impl<'a> TargetName<'a> {
    /// Decodes a Close or Describe body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = TargetName {
            target: Target::read(&mut r)?,
            name: r.cstr()?,
        };
        r.finish()?;
        Ok(m)
    }
}

/// Execute: run a portal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Execute<'a> {
    /// The portal (empty = unnamed).
    pub portal: &'a [u8],
    /// Row limit (0 = none).
    pub max_rows: i32,
}

impl<'a> Execute<'a> {
    /// Decodes a body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = Execute {
            portal: r.cstr()?,
            max_rows: r.i32()?,
        };
        r.finish()?;
        Ok(m)
    }
}

/// FunctionCall (legacy fast-path interface).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FunctionCall<'a> {
    /// OID of the function.
    pub function_oid: u32,
    /// Argument format codes.
    pub arg_formats: FormatCodes<'a>,
    /// Arguments.
    pub args: Values<'a>,
    /// Result format code.
    pub result_format: i16,
}

impl<'a> FunctionCall<'a> {
    /// Decodes a body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = FunctionCall {
            function_oid: r.u32()?,
            arg_formats: FormatCodes::read(&mut r)?,
            args: Values::read(&mut r)?,
            result_format: r.i16()?,
        };
        r.finish()?;
        Ok(m)
    }

    /// Re-encodes.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let size = 10 + self.arg_formats.raw().len() + self.args.raw().len();
        put_frame(buf, tag::FUNCTION_CALL, size, |b| {
            b.put_u32(self.function_oid);
            self.arg_formats.put(b)?;
            self.args.put(b);
            b.put_i16(self.result_format);
            Ok(())
        })
    }
}

/// Parse: prepare a statement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Parse<'a> {
    /// Statement name (empty = unnamed).
    pub name: &'a [u8],
    /// The query text (one statement).
    pub query: &'a [u8],
    /// Parameter type OIDs (0 = unspecified; may be fewer than the parameters used).
    pub param_types: Oids<'a>,
}

impl<'a> Parse<'a> {
    /// Decodes a body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = Parse {
            name: r.cstr()?,
            query: r.cstr()?,
            param_types: Oids::read(&mut r)?,
        };
        r.finish()?;
        Ok(m)
    }

    /// Re-encodes.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let size = self.name.len() + self.query.len() + 4 + self.param_types.raw().len();
        put_frame(buf, tag::PARSE, size, |b| {
            put_cstr(b, self.name, "statement name")?;
            put_cstr(b, self.query, "query")?;
            self.param_types.put(b)
        })
    }
}

/// SASLInitialResponse: chosen mechanism and optional client-first message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaslInitialResponse<'a> {
    /// The mechanism name, e.g. `SCRAM-SHA-256`.
    pub mechanism: &'a [u8],
    /// The initial response (`None` is sent as length -1).
    pub data: Option<&'a [u8]>,
}

impl<'a> SaslInitialResponse<'a> {
    /// Decodes a `p` body as SASLInitialResponse.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = SaslInitialResponse {
            mechanism: r.cstr()?,
            data: r.nullable_bytes()?,
        };
        r.finish()?;
        Ok(m)
    }
}

/// Which meaning a `p` message has at this point of the authentication exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthResponseKind {
    /// PasswordMessage (after a cleartext or MD5 request).
    Password,
    /// GSSResponse (after GSS, GSSContinue or SSPI).
    Gss,
    /// SASLInitialResponse (after AuthenticationSASL).
    SaslInitial,
    /// SASLResponse (after AuthenticationSASLContinue).
    Sasl,
}

/// Decodes a `p` body under the interpretation `kind`.
pub fn decode_auth_response(
    kind: AuthResponseKind,
    body: &[u8],
) -> Result<FrontendMessage<'_>, DecodeError> {
    Ok(match kind {
        AuthResponseKind::Password => FrontendMessage::PasswordMessage(single_cstr(body)?),
        AuthResponseKind::Gss => FrontendMessage::GssResponse(body),
        AuthResponseKind::SaslInitial => {
            FrontendMessage::SaslInitialResponse(SaslInitialResponse::decode(body)?)
        }
        AuthResponseKind::Sasl => FrontendMessage::SaslResponse(body),
    })
}

/// Every typed frontend message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrontendMessage<'a> {
    /// `B` Bind.
    Bind(Bind<'a>),
    /// `C` Close.
    Close(TargetName<'a>),
    /// `d` CopyData.
    CopyData(&'a [u8]),
    /// `c` CopyDone.
    CopyDone,
    /// `f` CopyFail with its error message.
    CopyFail(&'a [u8]),
    /// `D` Describe.
    Describe(TargetName<'a>),
    /// `E` Execute.
    Execute(Execute<'a>),
    /// `H` Flush.
    Flush,
    /// `F` FunctionCall.
    FunctionCall(FunctionCall<'a>),
    /// `P` Parse.
    Parse(Parse<'a>),
    /// `Q` Query with its SQL text.
    Query(&'a [u8]),
    /// `S` Sync.
    Sync,
    /// `X` Terminate.
    Terminate,
    /// `p` PasswordMessage: cleartext or `md5…` password.
    PasswordMessage(&'a [u8]),
    /// `p` GSSResponse: a GSSAPI/SSPI token.
    GssResponse(&'a [u8]),
    /// `p` SASLInitialResponse.
    SaslInitialResponse(SaslInitialResponse<'a>),
    /// `p` SASLResponse: mechanism data.
    SaslResponse(&'a [u8]),
    /// `p` not yet interpreted: the raw body (see [`decode_auth_response`]).
    AuthResponse(&'a [u8]),
}

impl<'a> FrontendMessage<'a> {
    /// Decodes a typed frame; a `p` becomes [`FrontendMessage::AuthResponse`].
    #[inline]
    pub fn decode(tag: u8, body: &'a [u8]) -> Result<Self, DecodeError> {
        Self::decode_with(tag, body, None)
    }

    /// Decodes a typed frame, interpreting `p` as `auth` says (raw if `None`).
    pub fn decode_with(
        tag: u8,
        body: &'a [u8],
        auth: Option<AuthResponseKind>,
    ) -> Result<Self, DecodeError> {
        Ok(match tag {
            tag::BIND => FrontendMessage::Bind(Bind::decode(body)?),
            tag::CLOSE => FrontendMessage::Close(TargetName::decode(body)?),
            tag::COPY_DATA => FrontendMessage::CopyData(body),
            tag::COPY_DONE => empty(body, FrontendMessage::CopyDone)?,
            tag::COPY_FAIL => FrontendMessage::CopyFail(single_cstr(body)?),
            tag::DESCRIBE => FrontendMessage::Describe(TargetName::decode(body)?),
            tag::EXECUTE => FrontendMessage::Execute(Execute::decode(body)?),
            tag::FLUSH => empty(body, FrontendMessage::Flush)?,
            tag::FUNCTION_CALL => FrontendMessage::FunctionCall(FunctionCall::decode(body)?),
            tag::PARSE => FrontendMessage::Parse(Parse::decode(body)?),
            tag::QUERY => FrontendMessage::Query(single_cstr(body)?),
            tag::SYNC => empty(body, FrontendMessage::Sync)?,
            tag::TERMINATE => empty(body, FrontendMessage::Terminate)?,
            tag::AUTH_RESPONSE => match auth {
                Some(kind) => decode_auth_response(kind, body)?,
                None => FrontendMessage::AuthResponse(body),
            },
            other => return Err(DecodeError::UnknownTag { tag: other }),
        })
    }

    /// The type byte.
    pub fn tag(&self) -> u8 {
        match self {
            FrontendMessage::Bind(_) => tag::BIND,
            FrontendMessage::Close(_) => tag::CLOSE,
            FrontendMessage::CopyData(_) => tag::COPY_DATA,
            FrontendMessage::CopyDone => tag::COPY_DONE,
            FrontendMessage::CopyFail(_) => tag::COPY_FAIL,
            FrontendMessage::Describe(_) => tag::DESCRIBE,
            FrontendMessage::Execute(_) => tag::EXECUTE,
            FrontendMessage::Flush => tag::FLUSH,
            FrontendMessage::FunctionCall(_) => tag::FUNCTION_CALL,
            FrontendMessage::Parse(_) => tag::PARSE,
            FrontendMessage::Query(_) => tag::QUERY,
            FrontendMessage::Sync => tag::SYNC,
            FrontendMessage::Terminate => tag::TERMINATE,
            FrontendMessage::PasswordMessage(_)
            | FrontendMessage::GssResponse(_)
            | FrontendMessage::SaslInitialResponse(_)
            | FrontendMessage::SaslResponse(_)
            | FrontendMessage::AuthResponse(_) => tag::AUTH_RESPONSE,
        }
    }

    /// Encodes the message (identical bytes to what it was decoded from).
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match *self {
            FrontendMessage::Bind(ref m) => m.encode(buf),
            FrontendMessage::Close(m) => encode_close(m.target, m.name, buf),
            FrontendMessage::CopyData(d) => encode_copy_data(d, buf),
            FrontendMessage::CopyDone => {
                encode_copy_done(buf);
                Ok(())
            }
            FrontendMessage::CopyFail(m) => encode_copy_fail(m, buf),
            FrontendMessage::Describe(m) => encode_describe(m.target, m.name, buf),
            FrontendMessage::Execute(m) => encode_execute(m.portal, m.max_rows, buf),
            FrontendMessage::Flush => {
                encode_flush(buf);
                Ok(())
            }
            FrontendMessage::FunctionCall(ref m) => m.encode(buf),
            FrontendMessage::Parse(ref m) => m.encode(buf),
            FrontendMessage::Query(q) => encode_query(q, buf),
            FrontendMessage::Sync => {
                encode_sync(buf);
                Ok(())
            }
            FrontendMessage::Terminate => {
                encode_terminate(buf);
                Ok(())
            }
            FrontendMessage::PasswordMessage(p) => encode_password(p, buf),
            FrontendMessage::GssResponse(t) => encode_gss_response(t, buf),
            FrontendMessage::SaslInitialResponse(m) => {
                encode_sasl_initial_response(m.mechanism, m.data, buf)
            }
            FrontendMessage::SaslResponse(d) => encode_sasl_response(d, buf),
            FrontendMessage::AuthResponse(d) => raw_frame(tag::AUTH_RESPONSE, d, buf),
        }
    }
}

/// Writes a frame whose body is `body` verbatim.
pub(crate) fn raw_frame(tag: u8, body: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    len_i32(body.len().saturating_add(4), "message")?;
    put_frame(buf, tag, body.len(), |b| {
        b.put_slice(body);
        Ok(())
    })
}

/// Requires an empty body and returns `m`.
pub(crate) fn empty<T>(body: &[u8], m: T) -> Result<T, DecodeError> {
    Reader::new(body).finish().map(|()| m)
}

/// A body that is exactly one NUL-terminated string.
pub(crate) fn single_cstr(body: &[u8]) -> Result<&[u8], DecodeError> {
    let mut r = Reader::new(body);
    let s = r.cstr()?;
    r.finish()?;
    Ok(s)
}

#[cfg(test)]
mod tests;
