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
use crate::frame::{
    count_u16, len_i32, put_cstr, put_frame, put_i16s, put_nullable, put_untyped, put_values,
    values_size, EncodeError, FormatCodes, Oids, ProtocolVersion, StartupKind, Values,
    CANCEL_REQUEST_CODE, GSSENC_REQUEST_CODE, MAX_CANCEL_KEY_BYTES, SSL_REQUEST_CODE,
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

// ---------------------------------------------------------------------------------------
// Startup phase.

/// StartupMessage parameters: `name\0value\0` pairs as on the wire (list terminator excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartupParams<'a> {
    raw: &'a [u8],
}

impl<'a> StartupParams<'a> {
    /// The (name, value) pairs in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        let mut parts = self.raw.split(|&b| b == 0);
        std::iter::from_fn(move || {
            let name = parts.next().filter(|n| !n.is_empty())?;
            let value = parts.next()?;
            Some((name, value))
        })
    }

    /// The value of the first parameter called `name`.
    pub fn get(&self, name: &[u8]) -> Option<&'a [u8]> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// `user`.
    pub fn user(&self) -> Option<&'a [u8]> {
        self.get(b"user")
    }

    /// `database`.
    pub fn database(&self) -> Option<&'a [u8]> {
        self.get(b"database")
    }

    /// `replication` (`true`, `false`, `database`).
    pub fn replication(&self) -> Option<&'a [u8]> {
        self.get(b"replication")
    }

    /// `options` (command-line style, deprecated).
    pub fn options(&self) -> Option<&'a [u8]> {
        self.get(b"options")
    }

    /// The `_pq_.` protocol options.
    pub fn protocol_options(&self) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.iter().filter(|(n, _)| is_protocol_option(n))
    }

    /// The wire bytes (pairs, without the list terminator).
    pub fn raw(&self) -> &'a [u8] {
        self.raw
    }
}

/// Whether a startup parameter name is a protocol option (`_pq_.` prefix) rather than a GUC.
pub fn is_protocol_option(name: &[u8]) -> bool {
    name.starts_with(b"_pq_.")
}

/// StartupMessage: protocol version and parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StartupMessage<'a> {
    /// The requested protocol version.
    pub version: ProtocolVersion,
    /// The parameters.
    pub params: StartupParams<'a>,
}

/// CancelRequest: sent on a fresh connection to cancel another backend's query.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CancelRequest<'a> {
    /// Process ID of the target backend.
    pub pid: i32,
    /// Secret key: 4 bytes under 3.0, 1 to 256 under 3.2 (the length says which).
    pub key: &'a [u8],
}

/// An untyped startup-phase packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartupPacket<'a> {
    /// StartupMessage.
    Startup(StartupMessage<'a>),
    /// SSLRequest.
    SslRequest,
    /// GSSENCRequest.
    GssEncRequest,
    /// CancelRequest.
    CancelRequest(CancelRequest<'a>),
}

impl<'a> StartupPacket<'a> {
    /// Decodes the bytes after the length word (request code or version first).
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let code = r.u32()?;
        let packet = match StartupKind::from_code(code) {
            StartupKind::SslRequest => StartupPacket::SslRequest,
            StartupKind::GssEncRequest => StartupPacket::GssEncRequest,
            StartupKind::CancelRequest => {
                let pid = r.i32()?;
                let at = r.offset();
                let key = r.take_rest();
                if key.is_empty() || key.len() > MAX_CANCEL_KEY_BYTES {
                    return Err(DecodeError::Invalid {
                        what: "cancel key length (must be 1 to 256 bytes)",
                        offset: at,
                    });
                }
                StartupPacket::CancelRequest(CancelRequest { pid, key })
            }
            StartupKind::Startup(version) => {
                let start = r.offset();
                let all = r.rest();
                loop {
                    let name_at = r.offset();
                    let name = r.cstr()?;
                    if name.is_empty() {
                        break;
                    }
                    r.cstr()
                        .map_err(|_| DecodeError::MissingTerminator { offset: name_at })?;
                }
                // The empty name is the list terminator and must be the last byte.
                let used = r.offset() - start - 1;
                StartupPacket::Startup(StartupMessage {
                    version,
                    params: StartupParams {
                        raw: all.get(..used).unwrap_or_default(),
                    },
                })
            }
        };
        r.finish()?;
        Ok(packet)
    }

    /// Re-encodes (length word included).
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match *self {
            StartupPacket::SslRequest => {
                encode_ssl_request(buf);
                Ok(())
            }
            StartupPacket::GssEncRequest => {
                encode_gssenc_request(buf);
                Ok(())
            }
            StartupPacket::CancelRequest(c) => encode_cancel_request(c.pid, c.key, buf),
            StartupPacket::Startup(s) => put_untyped(buf, 5 + s.params.raw.len(), |b| {
                b.put_u32(s.version.0);
                b.put_slice(s.params.raw);
                b.put_u8(0);
                Ok(())
            }),
        }
    }
}

/// Writes a StartupMessage. Names must be non-empty; neither names nor values may hold NULs.
pub fn encode_startup(
    version: ProtocolVersion,
    params: &[(&[u8], &[u8])],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = params
        .iter()
        .map(|(n, v)| n.len() + v.len() + 2)
        .sum::<usize>()
        + 5;
    put_untyped(buf, size, |b| {
        b.put_u32(version.0);
        for &(name, value) in params {
            if name.is_empty() {
                return Err(EncodeError::Invalid {
                    what: "empty startup parameter name",
                });
            }
            put_cstr(b, name, "startup parameter name")?;
            put_cstr(b, value, "startup parameter value")?;
        }
        b.put_u8(0);
        Ok(())
    })
}

/// Writes an SSLRequest.
pub fn encode_ssl_request(buf: &mut BytesMut) {
    buf.put_u32(8);
    buf.put_u32(SSL_REQUEST_CODE);
}

/// Writes a GSSENCRequest.
pub fn encode_gssenc_request(buf: &mut BytesMut) {
    buf.put_u32(8);
    buf.put_u32(GSSENC_REQUEST_CODE);
}

/// Writes a CancelRequest; `key` must be 1 to 256 bytes (4 for protocol 3.0).
pub fn encode_cancel_request(pid: i32, key: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    if key.is_empty() || key.len() > MAX_CANCEL_KEY_BYTES {
        return Err(EncodeError::Invalid {
            what: "cancel key length (must be 1 to 256 bytes)",
        });
    }
    buf.reserve(12 + key.len());
    buf.put_u32(12 + key.len() as u32);
    buf.put_u32(CANCEL_REQUEST_CODE);
    buf.put_i32(pid);
    buf.put_slice(key);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Typed message builders (the driver fast path).

/// Writes a Parse.
///
/// The hot builders (Parse, Bind, Describe, Execute, Sync) validate everything first, then
/// compute the exact length and write the header with it, so nothing is patched or undone
/// and fixed-size runs of fields go out in one copy.
#[inline]
pub fn encode_parse(
    name: &[u8],
    query: &[u8],
    param_types: &[u32],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    check_cstr(name, "statement name")?;
    check_cstr(query, "query")?;
    let n = count_u16(param_types.len(), "OID count")?;
    let len = 4 + name.len() + 1 + query.len() + 1 + 2 + 4 * param_types.len();
    let h = header(tag::PARSE, len)?;
    buf.reserve(len + 1);
    put_header_cstr(buf, h, name);
    buf.put_slice(query);
    let c = n.to_be_bytes();
    match *param_types {
        [] => buf.put_slice(&[0, c[0], c[1]]),
        [t] => {
            let t = t.to_be_bytes();
            buf.put_slice(&[0, c[0], c[1], t[0], t[1], t[2], t[3]]);
        }
        _ => {
            buf.put_slice(&[0, c[0], c[1]]);
            for &t in param_types {
                buf.put_u32(t);
            }
        }
    }
    Ok(())
}

/// Writes a Bind.
#[inline]
pub fn encode_bind(
    portal: &[u8],
    statement: &[u8],
    param_formats: &[i16],
    params: &[Option<&[u8]>],
    result_formats: &[i16],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    check_cstr(portal, "portal name")?;
    check_cstr(statement, "statement name")?;
    let npf = count_u16(param_formats.len(), "parameter format count")?;
    let nv = count_u16(params.len(), "value count")?;
    let nrf = count_u16(result_formats.len(), "result format count")?;
    let mut values_len = 0usize;
    for v in params.iter().flatten() {
        len_i32(v.len(), "value")?;
        values_len += v.len();
    }
    let len = 4
        + portal.len()
        + 1
        + statement.len()
        + 1
        + 2
        + 2 * param_formats.len()
        + 2
        + 4 * params.len()
        + values_len
        + 2
        + 2 * result_formats.len();
    let h = header(tag::BIND, len)?;
    buf.reserve(len + 1);
    let c = npf.to_be_bytes();
    let v = nv.to_be_bytes();
    if portal.is_empty() && statement.is_empty() {
        // The common case (unnamed portal and statement): one copy up to the value count.
        match *param_formats {
            [] => buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0, 0, c[0], c[1], v[0], v[1]]),
            [f] => {
                let f = f.to_be_bytes();
                buf.put_slice(&[
                    h[0], h[1], h[2], h[3], h[4], 0, 0, c[0], c[1], f[0], f[1], v[0], v[1],
                ]);
            }
            _ => {
                buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0, 0, c[0], c[1]]);
                for &f in param_formats {
                    buf.put_i16(f);
                }
                buf.put_slice(&v);
            }
        }
    } else {
        put_header_cstr(buf, h, portal);
        buf.put_slice(statement);
        buf.put_slice(&[0, c[0], c[1]]);
        for &f in param_formats {
            buf.put_i16(f);
        }
        buf.put_slice(&v);
    }
    for v in params {
        match v {
            None => buf.put_slice(&[0xff; 4]),
            Some(v) => {
                // Checked above to fit an Int32.
                buf.put_u32(v.len() as u32);
                buf.put_slice(v);
            }
        }
    }
    let c = nrf.to_be_bytes();
    match *result_formats {
        [] => buf.put_slice(&c),
        [f] => {
            let f = f.to_be_bytes();
            buf.put_slice(&[c[0], c[1], f[0], f[1]]);
        }
        _ => {
            buf.put_slice(&c);
            for &f in result_formats {
                buf.put_i16(f);
            }
        }
    }
    Ok(())
}

/// Writes a Describe.
#[inline]
pub fn encode_describe(target: Target, name: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    check_cstr(name, "name")?;
    let len = 4 + 1 + name.len() + 1;
    let h = header(tag::DESCRIBE, len)?;
    buf.reserve(len + 1);
    if name.is_empty() {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], target.byte(), 0]);
    } else {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], target.byte()]);
        buf.put_slice(name);
        buf.put_u8(0);
    }
    Ok(())
}

/// Writes a Close.
pub fn encode_close(target: Target, name: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::CLOSE, name.len() + 2, |b| {
        b.put_u8(target.byte());
        put_cstr(b, name, "name")
    })
}

/// Writes an Execute.
#[inline]
pub fn encode_execute(portal: &[u8], max_rows: i32, buf: &mut BytesMut) -> Result<(), EncodeError> {
    check_cstr(portal, "portal name")?;
    let len = 4 + portal.len() + 1 + 4;
    let h = header(tag::EXECUTE, len)?;
    let r = max_rows.to_be_bytes();
    buf.reserve(len + 1);
    if portal.is_empty() {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0, r[0], r[1], r[2], r[3]]);
    } else {
        buf.put_slice(&h);
        buf.put_slice(portal);
        buf.put_slice(&[0, r[0], r[1], r[2], r[3]]);
    }
    Ok(())
}

/// Writes a Sync.
#[inline]
pub fn encode_sync(buf: &mut BytesMut) {
    buf.put_slice(&[tag::SYNC, 0, 0, 0, 4]);
}

/// Writes a Flush.
#[inline]
pub fn encode_flush(buf: &mut BytesMut) {
    buf.put_slice(&[tag::FLUSH, 0, 0, 0, 4]);
}

/// Writes a Terminate.
pub fn encode_terminate(buf: &mut BytesMut) {
    buf.put_slice(&[tag::TERMINATE, 0, 0, 0, 4]);
}

/// Writes a CopyDone.
pub fn encode_copy_done(buf: &mut BytesMut) {
    buf.put_slice(&[tag::COPY_DONE, 0, 0, 0, 4]);
}

/// Writes a Query.
pub fn encode_query(sql: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::QUERY, sql.len() + 1, |b| {
        put_cstr(b, sql, "query")
    })
}

/// Writes a CopyData (also valid as a backend message: the layout is the same).
pub fn encode_copy_data(data: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    raw_frame(tag::COPY_DATA, data, buf)
}

/// Writes a CopyFail.
pub fn encode_copy_fail(message: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::COPY_FAIL, message.len() + 1, |b| {
        put_cstr(b, message, "CopyFail message")
    })
}

/// Writes a FunctionCall.
pub fn encode_function_call(
    function_oid: u32,
    arg_formats: &[i16],
    args: &[Option<&[u8]>],
    result_format: i16,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = 8 + 2 * arg_formats.len() + values_size(args);
    put_frame(buf, tag::FUNCTION_CALL, size, |b| {
        b.put_u32(function_oid);
        put_i16s(b, arg_formats, "argument format count")?;
        put_values(b, args)?;
        b.put_i16(result_format);
        Ok(())
    })
}

/// Writes a PasswordMessage (cleartext or `md5…`).
pub fn encode_password(password: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::AUTH_RESPONSE, password.len() + 1, |b| {
        put_cstr(b, password, "password")
    })
}

/// Writes a GSSResponse.
pub fn encode_gss_response(token: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    raw_frame(tag::AUTH_RESPONSE, token, buf)
}

/// Writes a SASLInitialResponse.
pub fn encode_sasl_initial_response(
    mechanism: &[u8],
    data: Option<&[u8]>,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = mechanism.len() + 5 + data.map_or(0, <[u8]>::len);
    put_frame(buf, tag::AUTH_RESPONSE, size, |b| {
        put_cstr(b, mechanism, "SASL mechanism")?;
        put_nullable(b, data)
    })
}

/// Writes a SASLResponse.
pub fn encode_sasl_response(data: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    raw_frame(tag::AUTH_RESPONSE, data, buf)
}

/// A typed header for a message whose length word will be `len`.
#[inline]
fn header(tag: u8, len: usize) -> Result<[u8; 5], EncodeError> {
    let l = len_i32(len, "message")?.to_be_bytes();
    Ok([tag, l[0], l[1], l[2], l[3]])
}

/// Writes a header followed by a C string (one copy when the string is empty).
#[inline]
fn put_header_cstr(buf: &mut BytesMut, h: [u8; 5], s: &[u8]) {
    if s.is_empty() {
        buf.put_slice(&[h[0], h[1], h[2], h[3], h[4], 0]);
    } else {
        buf.put_slice(&h);
        buf.put_slice(s);
        buf.put_u8(0);
    }
}

/// Refuses a C string with an embedded NUL.
#[inline]
fn check_cstr(s: &[u8], what: &'static str) -> Result<(), EncodeError> {
    if has_nul(s) {
        Err(EncodeError::NulInString { what })
    } else {
        Ok(())
    }
}

/// Whether `s` holds a zero byte. Statement texts are short to medium, where eight bytes at
/// a time beats both a byte loop and the set-up cost of a SIMD search.
#[inline]
fn has_nul(s: &[u8]) -> bool {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    let mut chunks = s.chunks_exact(8);
    for c in chunks.by_ref() {
        let x = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        // Non-zero exactly when some byte of `x` is zero.
        if x.wrapping_sub(LO) & !x & HI != 0 {
            return true;
        }
    }
    chunks.remainder().contains(&0)
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
mod nul_tests {
    use super::has_nul;

    #[test]
    fn word_at_a_time_nul_check_agrees_with_a_byte_search() {
        let alphabet = [0u8, 1, 0x7f, 0x80, 0x81, 0xff, b'a'];
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..40 {
            for _ in 0..200 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        state ^= state << 13;
                        state ^= state >> 7;
                        state ^= state << 17;
                        alphabet[(state % alphabet.len() as u64) as usize]
                    })
                    .collect();
                assert_eq!(has_nul(&v), v.contains(&0), "{v:?}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{decode_frame, Decoded};

    fn round_trip(m: FrontendMessage<'_>, auth: Option<AuthResponseKind>) -> Vec<u8> {
        let mut buf = BytesMut::new();
        m.encode(&mut buf).unwrap();
        let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
            panic!("frame")
        };
        assert_eq!(f.wire_len(), buf.len());
        let back = FrontendMessage::decode_with(f.tag, f.body, auth).unwrap();
        assert_eq!(back, m);
        buf.to_vec()
    }

    #[test]
    fn simple_messages_have_fixed_bytes() {
        assert_eq!(round_trip(FrontendMessage::Sync, None), b"S\0\0\0\x04");
        assert_eq!(round_trip(FrontendMessage::Flush, None), b"H\0\0\0\x04");
        assert_eq!(round_trip(FrontendMessage::Terminate, None), b"X\0\0\0\x04");
        assert_eq!(round_trip(FrontendMessage::CopyDone, None), b"c\0\0\0\x04");
        assert_eq!(
            round_trip(FrontendMessage::Query(b"select 1"), None),
            b"Q\0\0\0\x0dselect 1\0"
        );
        assert_eq!(
            round_trip(
                FrontendMessage::Execute(Execute {
                    portal: b"",
                    max_rows: 0
                }),
                None
            ),
            b"E\0\0\0\x09\0\0\0\0\0"
        );
        assert_eq!(
            round_trip(
                FrontendMessage::Describe(TargetName {
                    target: Target::Portal,
                    name: b""
                }),
                None
            ),
            b"D\0\0\0\x06P\0"
        );
    }

    #[test]
    fn bind_parse_function_call() {
        let mut buf = BytesMut::new();
        encode_bind(b"p", b"s", &[1], &[Some(b"42"), None], &[0, 1], &mut buf).unwrap();
        let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
            panic!()
        };
        let FrontendMessage::Bind(b) = FrontendMessage::decode(f.tag, f.body).unwrap() else {
            panic!()
        };
        assert_eq!((b.portal, b.statement), (&b"p"[..], &b"s"[..]));
        assert_eq!(b.param_formats.iter().collect::<Vec<_>>(), [1]);
        assert_eq!(
            b.params.iter().collect::<Vec<_>>(),
            [Some(&b"42"[..]), None]
        );
        assert_eq!(b.result_formats.iter().collect::<Vec<_>>(), [0, 1]);
        assert_eq!(b.result_formats.for_index(1), Some(1));
        round_trip(FrontendMessage::Bind(b), None);

        let mut buf = BytesMut::new();
        encode_parse(b"s1", b"select $1", &[23], &mut buf).unwrap();
        let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
            panic!()
        };
        let FrontendMessage::Parse(p) = FrontendMessage::decode(f.tag, f.body).unwrap() else {
            panic!()
        };
        assert_eq!(p.param_types.iter().collect::<Vec<_>>(), [23]);

        let mut buf = BytesMut::new();
        encode_function_call(1598, &[], &[None, Some(b"")], 1, &mut buf).unwrap();
        let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
            panic!()
        };
        let m = FrontendMessage::decode(f.tag, f.body).unwrap();
        round_trip(m, None);
    }

    #[test]
    fn auth_responses_need_context() {
        let mut buf = BytesMut::new();
        encode_sasl_initial_response(b"SCRAM-SHA-256", Some(b"n,,n=,r=abc"), &mut buf).unwrap();
        let body = &buf[5..];
        assert_eq!(
            FrontendMessage::decode(b'p', body),
            Ok(FrontendMessage::AuthResponse(body))
        );
        let m = decode_auth_response(AuthResponseKind::SaslInitial, body).unwrap();
        assert_eq!(
            m,
            FrontendMessage::SaslInitialResponse(SaslInitialResponse {
                mechanism: b"SCRAM-SHA-256",
                data: Some(b"n,,n=,r=abc")
            })
        );
        round_trip(m, Some(AuthResponseKind::SaslInitial));
        round_trip(
            FrontendMessage::SaslInitialResponse(SaslInitialResponse {
                mechanism: b"X",
                data: None,
            }),
            Some(AuthResponseKind::SaslInitial),
        );
        round_trip(
            FrontendMessage::PasswordMessage(b"md5abc"),
            Some(AuthResponseKind::Password),
        );
        round_trip(
            FrontendMessage::GssResponse(b"\0tok"),
            Some(AuthResponseKind::Gss),
        );
        round_trip(
            FrontendMessage::SaslResponse(b"c=biws"),
            Some(AuthResponseKind::Sasl),
        );
        // A password body without its terminator is malformed.
        assert!(decode_auth_response(AuthResponseKind::Password, b"abc").is_err());
    }

    #[test]
    fn startup_packets() {
        let mut buf = BytesMut::new();
        encode_startup(
            ProtocolVersion::V3_2,
            &[
                (b"user", b"alice"),
                (b"database", b"db"),
                (b"_pq_.opt", b"1"),
            ],
            &mut buf,
        )
        .unwrap();
        assert_eq!(&buf[..4], &(buf.len() as u32).to_be_bytes());
        let StartupPacket::Startup(s) = StartupPacket::decode(&buf[4..]).unwrap() else {
            panic!()
        };
        assert_eq!(s.version, ProtocolVersion::V3_2);
        assert_eq!(s.params.user(), Some(&b"alice"[..]));
        assert_eq!(s.params.database(), Some(&b"db"[..]));
        assert_eq!(
            s.params.protocol_options().collect::<Vec<_>>(),
            [(&b"_pq_.opt"[..], &b"1"[..])]
        );
        let mut again = BytesMut::new();
        StartupPacket::Startup(s).encode(&mut again).unwrap();
        assert_eq!(again, buf);

        // The terminator must be the last byte, and values must be terminated.
        let mut body = ProtocolVersion::V3_0.0.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0a\0\0x");
        assert!(matches!(
            StartupPacket::decode(&body),
            Err(DecodeError::TrailingBytes { .. })
        ));
        let mut body = ProtocolVersion::V3_0.0.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0a");
        assert!(StartupPacket::decode(&body).is_err());
        let mut body = ProtocolVersion::V3_0.0.to_be_bytes().to_vec();
        body.extend_from_slice(b"user\0a\0");
        assert!(matches!(
            StartupPacket::decode(&body),
            Err(DecodeError::MissingTerminator { .. })
        ));

        let mut buf = BytesMut::new();
        encode_ssl_request(&mut buf);
        assert_eq!(&buf[..], &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
        assert_eq!(
            StartupPacket::decode(&buf[4..]),
            Ok(StartupPacket::SslRequest)
        );
        let mut buf = BytesMut::new();
        encode_gssenc_request(&mut buf);
        assert_eq!(
            StartupPacket::decode(&buf[4..]),
            Ok(StartupPacket::GssEncRequest)
        );
        assert!(StartupPacket::decode(&[0x04, 0xd2, 0x16, 0x2f, 0]).is_err());
    }

    #[test]
    fn cancel_requests_3_0_and_3_2() {
        for key in [
            &[1u8, 2, 3, 4][..],
            &[7u8; 32][..],
            &[9u8; 256][..],
            &[1u8][..],
        ] {
            let mut buf = BytesMut::new();
            encode_cancel_request(1234, key, &mut buf).unwrap();
            assert_eq!(buf.len(), 12 + key.len());
            let p = StartupPacket::decode(&buf[4..]).unwrap();
            assert_eq!(
                p,
                StartupPacket::CancelRequest(CancelRequest { pid: 1234, key })
            );
        }
        let mut buf = BytesMut::new();
        assert!(encode_cancel_request(1, &[], &mut buf).is_err());
        assert!(encode_cancel_request(1, &[0; 257], &mut buf).is_err());
        let mut body = CANCEL_REQUEST_CODE.to_be_bytes().to_vec();
        body.extend_from_slice(&[0, 0, 0, 1]);
        assert!(StartupPacket::decode(&body).is_err());
        body.extend_from_slice(&[0; 257]);
        assert!(StartupPacket::decode(&body).is_err());
    }

    #[test]
    fn malformed_bodies_are_rejected() {
        // Close with a bad target byte.
        assert!(matches!(
            FrontendMessage::decode(b'C', b"X\0"),
            Err(DecodeError::Invalid { offset: 0, .. })
        ));
        // Sync with a body.
        assert!(FrontendMessage::decode(b'S', b"x").is_err());
        // Bind whose parameter count overruns the frame.
        assert!(matches!(
            FrontendMessage::decode(b'B', b"\0\0\0\0\xff\xff"),
            Err(DecodeError::InvalidCount { count: 65535, .. })
        ));
        // Bind whose value length overruns the frame.
        assert!(matches!(
            FrontendMessage::decode(b'B', b"\0\0\0\0\0\x01\0\0\0\x09ab\0\0"),
            Err(DecodeError::InvalidLength { length: 9, .. })
        ));
        // Query without its terminator.
        assert!(matches!(
            FrontendMessage::decode(b'Q', b"select"),
            Err(DecodeError::MissingTerminator { .. })
        ));
        assert_eq!(
            FrontendMessage::decode(b'M', b""),
            Err(DecodeError::UnknownTag { tag: b'M' })
        );
        // Encoders refuse embedded NULs and leave the buffer untouched.
        let mut buf = BytesMut::from(&b"keep"[..]);
        assert_eq!(
            encode_query(b"a\0b", &mut buf),
            Err(EncodeError::NulInString { what: "query" })
        );
        assert_eq!(&buf[..], b"keep");
        let many = vec![None; 70_000];
        assert!(encode_bind(b"", b"", &[], &many, &[], &mut buf).is_err());
        assert_eq!(&buf[..], b"keep");
    }

    #[test]
    fn sixty_five_thousand_parameters_are_allowed() {
        let params = vec![None; 65_535];
        let mut buf = BytesMut::new();
        encode_bind(b"", b"", &[], &params, &[], &mut buf).unwrap();
        let b = Bind::decode(&buf[5..]).unwrap();
        assert_eq!(b.params.len(), 65_535);
    }
}
