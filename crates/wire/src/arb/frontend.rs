//! Generators for frontend messages: the typed ones ([`OwnedFrontend`]) and the startup-phase
//! packets ([`OwnedStartup`]).

use arbitrary::{Arbitrary, Result, Unstructured};

use super::{
    at_limit, bytes, cstr, edge, edge_len, format_codes, nonempty_cstr, nullable, oids, RawValues,
};
use crate::frame::{FormatCodes, Oids, ProtocolVersion, MAX_CANCEL_KEY_BYTES};
use crate::frontend::{
    AuthResponseKind, Bind, CancelRequest, Execute, FrontendMessage, FunctionCall, Parse,
    SaslInitialResponse, StartupMessage, StartupPacket, StartupParams, Target, TargetName,
};

/// Payloads of CopyData, GSS and SASL tokens stay below this so a run stays fast.
const PAYLOAD_MAX: usize = 64 * 1024;
/// Names and SQL text stay below this.
const TEXT_MAX: usize = 4 * 1024;

/// A generated frontend (typed) message; [`OwnedFrontend::message`] lends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedFrontend(Fe);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Fe {
    Bind {
        portal: Vec<u8>,
        statement: Vec<u8>,
        param_formats: Vec<u8>,
        params: RawValues,
        result_formats: Vec<u8>,
    },
    Close(Target, Vec<u8>),
    CopyData(Vec<u8>),
    CopyDone,
    CopyFail(Vec<u8>),
    Describe(Target, Vec<u8>),
    Execute(Vec<u8>, i32),
    Flush,
    FunctionCall {
        oid: u32,
        arg_formats: Vec<u8>,
        args: RawValues,
        result_format: i16,
    },
    Parse {
        name: Vec<u8>,
        query: Vec<u8>,
        param_types: Vec<u8>,
    },
    Query(Vec<u8>),
    Sync,
    Terminate,
    Password(Vec<u8>),
    Gss(Vec<u8>),
    SaslInitial(Vec<u8>, Option<Vec<u8>>),
    Sasl(Vec<u8>),
    AuthResponse(Vec<u8>),
}

fn target(u: &mut Unstructured<'_>) -> Result<Target> {
    Ok(if u.arbitrary()? {
        Target::Portal
    } else {
        Target::Statement
    })
}

/// A server's limit on the length word of the small messages (Close, Describe, Execute …).
const SMALL_LIMIT: usize = crate::frame::SMALL_MESSAGE_MAX as usize;
/// A server's limit on the length word of an authentication response (`p`).
const AUTH_LIMIT: usize = crate::frame::AUTH_MESSAGE_MAX as usize;

/// Statement and portal names: mostly the unnamed one (empty), else short text, rarely the
/// length that puts a Close or Describe (4 + 1 + name + 1) at the server's limit or past it.
fn name(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    if let Some(n) = at_limit(u, SMALL_LIMIT - 6)? {
        return Ok(n);
    }
    if u.ratio(1, 2)? {
        Ok(Vec::new())
    } else {
        cstr(u, TEXT_MAX)
    }
}

/// An authentication payload, rarely sized to put its `p` message (4 + payload) at the limit.
fn auth_payload(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    match at_limit(u, AUTH_LIMIT - 4)? {
        Some(p) => Ok(p),
        None => bytes(u, PAYLOAD_MAX),
    }
}

impl<'a> Arbitrary<'a> for OwnedFrontend {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let m = match u.int_in_range(0u8..=17)? {
            0 => Fe::Bind {
                portal: name(u)?,
                statement: name(u)?,
                param_formats: format_codes(u)?,
                params: RawValues::arbitrary(u)?,
                result_formats: format_codes(u)?,
            },
            1 => Fe::Close(target(u)?, name(u)?),
            2 => Fe::CopyData(bytes(u, PAYLOAD_MAX)?),
            3 => Fe::CopyDone,
            4 => Fe::CopyFail(cstr(u, TEXT_MAX)?),
            5 => Fe::Describe(target(u)?, name(u)?),
            6 => Fe::Execute(name(u)?, edge(u)?),
            7 => Fe::Flush,
            8 => Fe::FunctionCall {
                oid: edge(u)?,
                arg_formats: format_codes(u)?,
                args: RawValues::arbitrary(u)?,
                result_format: edge(u)?,
            },
            9 => Fe::Parse {
                name: name(u)?,
                query: cstr(u, TEXT_MAX)?,
                param_types: oids(u)?,
            },
            10 => Fe::Query(cstr(u, TEXT_MAX)?),
            11 => Fe::Sync,
            12 => Fe::Terminate,
            13 => Fe::Password(cstr(u, TEXT_MAX)?),
            14 => Fe::Gss(auth_payload(u)?),
            15 => Fe::SaslInitial(sasl_mechanism(u)?, nullable(u, PAYLOAD_MAX)?),
            16 => Fe::Sasl(auth_payload(u)?),
            _ => Fe::AuthResponse(auth_payload(u)?),
        };
        Ok(OwnedFrontend(m))
    }
}

/// The SCRAM names (what servers offer) or any C string (what a hostile client sends).
fn sasl_mechanism(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    Ok(match u.int_in_range(0u8..=3)? {
        0 => crate::auth::SCRAM_SHA_256.as_bytes().to_vec(),
        1 => crate::auth::SCRAM_SHA_256_PLUS.as_bytes().to_vec(),
        _ => cstr(u, TEXT_MAX)?,
    })
}

impl OwnedFrontend {
    /// The generated message, borrowing from `self`.
    pub fn message(&self) -> FrontendMessage<'_> {
        match &self.0 {
            Fe::Bind {
                portal,
                statement,
                param_formats,
                params,
                result_formats,
            } => FrontendMessage::Bind(Bind {
                portal,
                statement,
                param_formats: FormatCodes::from_raw(param_formats),
                params: params.view(),
                result_formats: FormatCodes::from_raw(result_formats),
            }),
            Fe::Close(target, name) => FrontendMessage::Close(TargetName {
                target: *target,
                name,
            }),
            Fe::CopyData(d) => FrontendMessage::CopyData(d),
            Fe::CopyDone => FrontendMessage::CopyDone,
            Fe::CopyFail(m) => FrontendMessage::CopyFail(m),
            Fe::Describe(target, name) => FrontendMessage::Describe(TargetName {
                target: *target,
                name,
            }),
            Fe::Execute(portal, max_rows) => FrontendMessage::Execute(Execute {
                portal,
                max_rows: *max_rows,
            }),
            Fe::Flush => FrontendMessage::Flush,
            Fe::FunctionCall {
                oid,
                arg_formats,
                args,
                result_format,
            } => FrontendMessage::FunctionCall(FunctionCall {
                function_oid: *oid,
                arg_formats: FormatCodes::from_raw(arg_formats),
                args: args.view(),
                result_format: *result_format,
            }),
            Fe::Parse {
                name,
                query,
                param_types,
            } => FrontendMessage::Parse(Parse {
                name,
                query,
                param_types: Oids::from_raw(param_types),
            }),
            Fe::Query(q) => FrontendMessage::Query(q),
            Fe::Sync => FrontendMessage::Sync,
            Fe::Terminate => FrontendMessage::Terminate,
            Fe::Password(p) => FrontendMessage::PasswordMessage(p),
            Fe::Gss(t) => FrontendMessage::GssResponse(t),
            Fe::SaslInitial(mechanism, data) => {
                FrontendMessage::SaslInitialResponse(SaslInitialResponse {
                    mechanism,
                    data: data.as_deref(),
                })
            }
            Fe::Sasl(d) => FrontendMessage::SaslResponse(d),
            Fe::AuthResponse(d) => FrontendMessage::AuthResponse(d),
        }
    }

    /// What a receiver must know to decode a `p` message back into this variant (`None` for
    /// the other messages and for the undecided [`FrontendMessage::AuthResponse`]).
    pub fn auth_kind(&self) -> Option<AuthResponseKind> {
        match self.0 {
            Fe::Password(_) => Some(AuthResponseKind::Password),
            Fe::Gss(_) => Some(AuthResponseKind::Gss),
            Fe::SaslInitial(..) => Some(AuthResponseKind::SaslInitial),
            Fe::Sasl(_) => Some(AuthResponseKind::Sasl),
            _ => None,
        }
    }
}

/// A generated startup-phase packet (startup 3.0/3.2 and others, SSLRequest, GSSENCRequest,
/// CancelRequest with 3.0's and 3.2's key lengths); [`OwnedStartup::message`] lends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedStartup(St);

#[derive(Clone, Debug, PartialEq, Eq)]
enum St {
    Startup {
        version: ProtocolVersion,
        /// `name\0value\0` pairs, without the list's final NUL.
        params: Vec<u8>,
    },
    Ssl,
    GssEnc,
    Cancel {
        pid: i32,
        key: Vec<u8>,
    },
}

/// Parameter names a server looks at, then protocol options (3.2's `_pq_.` names).
const KNOWN_PARAMS: [&str; 7] = [
    "user",
    "database",
    "replication",
    "options",
    "application_name",
    "client_encoding",
    "_pq_.test_protocol_option",
];

fn startup_params(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    // One `options` parameter sized so the body (version, pairs, final NUL) is at the
    // server's cap or one past it.
    if let Some(value) = at_limit(u, crate::frame::MAX_STARTUP_BODY_BYTES - 4 - 8 - 1 - 1)? {
        let mut raw = b"options\0".to_vec();
        raw.extend_from_slice(&value);
        raw.push(0);
        return Ok(raw);
    }
    let n = edge_len(u, 6, 64)?;
    let mut raw = Vec::new();
    for _ in 0..n {
        let name = match u.int_in_range(0..=KNOWN_PARAMS.len())? {
            i if i < KNOWN_PARAMS.len() => KNOWN_PARAMS[i].as_bytes().to_vec(),
            _ => nonempty_cstr(u, 64)?,
        };
        raw.extend_from_slice(&name);
        raw.push(0);
        raw.extend_from_slice(&cstr(u, 128)?);
        raw.push(0);
    }
    Ok(raw)
}

fn startup_version(u: &mut Unstructured<'_>) -> Result<ProtocolVersion> {
    Ok(match u.int_in_range(0u8..=5)? {
        0 | 1 => ProtocolVersion::V3_0,
        2 | 3 => ProtocolVersion::V3_2,
        4 => ProtocolVersion::GREASE,
        _ => {
            let v = ProtocolVersion(u.arbitrary()?);
            // The three request codes are not versions.
            match crate::frame::StartupKind::from_code(v.0) {
                crate::frame::StartupKind::Startup(v) => v,
                _ => ProtocolVersion::V3_0,
            }
        }
    })
}

/// 3.0's four bytes, 3.2's 32 (what PostgreSQL 18 sends) and its bounds, or any legal length.
pub(super) fn cancel_key(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let n = match u.int_in_range(0u8..=5)? {
        0 => 4,
        1 => 32,
        2 => MAX_CANCEL_KEY_BYTES,
        3 => 1,
        _ => u.int_in_range(1..=MAX_CANCEL_KEY_BYTES)?,
    };
    let mut key = u.bytes(n.min(u.len()))?.to_vec();
    key.resize(n, 0xa5);
    Ok(key)
}

impl<'a> Arbitrary<'a> for OwnedStartup {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(OwnedStartup(match u.int_in_range(0u8..=5)? {
            0 | 1 => St::Startup {
                version: startup_version(u)?,
                params: startup_params(u)?,
            },
            2 => St::Ssl,
            3 => St::GssEnc,
            _ => St::Cancel {
                pid: edge(u)?,
                key: cancel_key(u)?,
            },
        }))
    }
}

impl OwnedStartup {
    /// The generated packet, borrowing from `self`.
    pub fn message(&self) -> StartupPacket<'_> {
        match &self.0 {
            St::Startup { version, params } => StartupPacket::Startup(StartupMessage {
                version: *version,
                params: StartupParams::from_raw(params),
            }),
            St::Ssl => StartupPacket::SslRequest,
            St::GssEnc => StartupPacket::GssEncRequest,
            St::Cancel { pid, key } => {
                StartupPacket::CancelRequest(CancelRequest { pid: *pid, key })
            }
        }
    }
}
