//! Generators for backend messages ([`OwnedBackend`]), authentication requests included.

use arbitrary::{Arbitrary, Result, Unstructured};

use super::frontend::cancel_key;
use super::{
    at_limit, bytes, cstr, edge, edge_len, format_codes, nonempty_cstr, nullable, oids, RawValues,
};
use crate::backend::{
    Authentication, BackendKeyData, BackendMessage, CopyResponse, DataRow,
    NegotiateProtocolVersion, Notification, ParameterStatus, RowDescription, TransactionStatus,
};
use crate::error_fields::ErrorFields;
use crate::frame::{CStrs, FormatCodes, Oids};

/// CopyData and token payloads stay below this so a run stays fast.
const PAYLOAD_MAX: usize = 64 * 1024;
/// Names, tags and messages stay below this.
const TEXT_MAX: usize = 4 * 1024;
/// libpq's limit on the length word of the messages it expects to be short.
const LIBPQ_LIMIT: usize = crate::frame::LIBPQ_SMALL_MESSAGE_MAX as usize;

/// A generated backend message; [`OwnedBackend::message`] lends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedBackend(Be);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Auth {
    Ok,
    KerberosV5,
    Cleartext,
    Md5([u8; 4]),
    Scm,
    Gss,
    GssContinue(Vec<u8>),
    Sspi,
    /// Encoded non-empty names, each with its NUL, without the list's final NUL.
    Sasl(Vec<u8>, usize),
    SaslContinue(Vec<u8>),
    SaslFinal(Vec<u8>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Be {
    Auth(Auth),
    KeyData(i32, Vec<u8>),
    BindComplete,
    CloseComplete,
    CommandComplete(Vec<u8>),
    CopyData(Vec<u8>),
    CopyDone,
    /// Tag (`G`, `H`, `W`), overall format, encoded column formats.
    Copy(u8, u8, Vec<u8>),
    DataRow(RawValues),
    EmptyQuery,
    /// `E` or `N`, and the encoded fields with the final NUL.
    Fields(bool, Vec<u8>),
    FunctionCallResponse(Option<Vec<u8>>),
    /// Newest minor version, encoded option names (each with its NUL) and their count.
    Negotiate(u32, Vec<u8>, usize),
    NoData,
    Notification(i32, Vec<u8>, Vec<u8>),
    ParameterDescription(Vec<u8>),
    ParameterStatus(Vec<u8>, Vec<u8>),
    ParseComplete,
    PortalSuspended,
    ReadyForQuery(TransactionStatus),
    RowDescription(u16, Vec<u8>),
}

/// Pushes `s` and its terminating NUL.
fn push_cstr(raw: &mut Vec<u8>, s: &[u8]) {
    raw.extend_from_slice(s);
    raw.push(0);
}

fn auth(u: &mut Unstructured<'_>) -> Result<Auth> {
    Ok(match u.int_in_range(0u8..=10)? {
        0 => Auth::Ok,
        1 => Auth::KerberosV5,
        2 => Auth::Cleartext,
        3 => Auth::Md5(u.arbitrary()?),
        4 => Auth::Scm,
        5 => Auth::Gss,
        6 => Auth::GssContinue(bytes(u, PAYLOAD_MAX)?),
        7 => Auth::Sspi,
        8 => {
            let n = edge_len(u, 3, 64)?;
            let mut raw = Vec::new();
            for _ in 0..n {
                let name = match u.int_in_range(0u8..=3)? {
                    0 => crate::auth::SCRAM_SHA_256.as_bytes().to_vec(),
                    1 => crate::auth::SCRAM_SHA_256_PLUS.as_bytes().to_vec(),
                    _ => nonempty_cstr(u, 64)?,
                };
                push_cstr(&mut raw, &name);
            }
            Auth::Sasl(raw, n)
        }
        9 => Auth::SaslContinue(bytes(u, PAYLOAD_MAX)?),
        _ => Auth::SaslFinal(bytes(u, PAYLOAD_MAX)?),
    })
}

/// The field codes libpq knows, plus any other non-zero byte (a zero code ends the list).
const FIELD_CODES: &[u8] = b"SVCMDHPpqWstcdnFLR";

fn error_fields(u: &mut Unstructured<'_>) -> Result<Vec<u8>> {
    let n = edge_len(u, 6, 64)?;
    let mut raw = Vec::new();
    for _ in 0..n {
        let code = match u.int_in_range(0..=FIELD_CODES.len())? {
            i if i < FIELD_CODES.len() => FIELD_CODES[i],
            _ => u.int_in_range(1u8..=255)?,
        };
        raw.push(code);
        push_cstr(&mut raw, &cstr(u, 512)?);
    }
    raw.push(0);
    Ok(raw)
}

/// Up to the u16 limit of columns; past a few hundred the names stay empty.
fn row_description(u: &mut Unstructured<'_>) -> Result<(u16, Vec<u8>)> {
    let n = edge_len(u, 6, usize::from(u16::MAX))?;
    let mut raw = Vec::new();
    for _ in 0..n {
        let name = if n > 256 { Vec::new() } else { cstr(u, 128)? };
        push_cstr(&mut raw, &name);
        raw.extend_from_slice(&edge::<u32>(u)?.to_be_bytes());
        raw.extend_from_slice(&edge::<i16>(u)?.to_be_bytes());
        raw.extend_from_slice(&edge::<u32>(u)?.to_be_bytes());
        raw.extend_from_slice(&edge::<i16>(u)?.to_be_bytes());
        raw.extend_from_slice(&edge::<i32>(u)?.to_be_bytes());
        raw.extend_from_slice(&edge::<i16>(u)?.to_be_bytes());
    }
    Ok((n as u16, raw))
}

fn negotiate(u: &mut Unstructured<'_>) -> Result<Be> {
    let minor = match u.int_in_range(0u8..=3)? {
        0 => 0,
        1 => 2,
        _ => edge(u)?,
    };
    let n = edge_len(u, 3, 1024)?;
    let mut raw = Vec::new();
    for _ in 0..n {
        let name = if u.arbitrary()? {
            b"_pq_.".to_vec()
        } else {
            cstr(u, 64)?
        };
        push_cstr(&mut raw, &name);
    }
    Ok(Be::Negotiate(minor, raw, n))
}

impl<'a> Arbitrary<'a> for OwnedBackend {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let m = match u.int_in_range(0u8..=22)? {
            0 => Be::Auth(auth(u)?),
            1 => Be::KeyData(edge(u)?, cancel_key(u)?),
            2 => Be::BindComplete,
            3 => Be::CloseComplete,
            // libpq's limit on most messages, CommandComplete's length word being 4 + tag + 1.
            4 => Be::CommandComplete(match at_limit(u, LIBPQ_LIMIT - 5)? {
                Some(tag) => tag,
                None => cstr(u, TEXT_MAX)?,
            }),
            5 => Be::CopyData(bytes(u, PAYLOAD_MAX)?),
            6 => Be::CopyDone,
            7 => {
                let tag = [b'G', b'H', b'W'][u.choose_index(3)?];
                Be::Copy(tag, u.int_in_range(0u8..=2)? % 2, format_codes(u)?)
            }
            8 => Be::DataRow(RawValues::arbitrary(u)?),
            9 => Be::EmptyQuery,
            10 => Be::Fields(u.arbitrary()?, error_fields(u)?),
            11 => Be::FunctionCallResponse(nullable(u, PAYLOAD_MAX)?),
            12 => negotiate(u)?,
            13 => Be::NoData,
            14 => Be::Notification(edge(u)?, cstr(u, TEXT_MAX)?, cstr(u, TEXT_MAX)?),
            15 => Be::ParameterDescription(oids(u)?),
            16 => Be::ParameterStatus(cstr(u, 128)?, cstr(u, TEXT_MAX)?),
            17 => Be::ParseComplete,
            18 => Be::PortalSuspended,
            19 => Be::ReadyForQuery(
                [
                    TransactionStatus::Idle,
                    TransactionStatus::InTransaction,
                    TransactionStatus::Failed,
                ][u.choose_index(3)?],
            ),
            20 => {
                let (n, raw) = row_description(u)?;
                Be::RowDescription(n, raw)
            }
            // Authentication and rows twice as often: the richest messages.
            21 => Be::Auth(auth(u)?),
            _ => Be::DataRow(RawValues::arbitrary(u)?),
        };
        Ok(OwnedBackend(m))
    }
}

impl OwnedBackend {
    /// The generated message, borrowing from `self`.
    pub fn message(&self) -> BackendMessage<'_> {
        match &self.0 {
            Be::Auth(a) => BackendMessage::Authentication(match a {
                Auth::Ok => Authentication::Ok,
                Auth::KerberosV5 => Authentication::KerberosV5,
                Auth::Cleartext => Authentication::CleartextPassword,
                Auth::Md5(salt) => Authentication::Md5Password { salt: *salt },
                Auth::Scm => Authentication::ScmCredential,
                Auth::Gss => Authentication::Gss,
                Auth::GssContinue(d) => Authentication::GssContinue(d),
                Auth::Sspi => Authentication::Sspi,
                Auth::Sasl(raw, n) => Authentication::Sasl(CStrs::from_raw(raw, *n)),
                Auth::SaslContinue(d) => Authentication::SaslContinue(d),
                Auth::SaslFinal(d) => Authentication::SaslFinal(d),
            }),
            Be::KeyData(pid, key) => {
                BackendMessage::BackendKeyData(BackendKeyData { pid: *pid, key })
            }
            Be::BindComplete => BackendMessage::BindComplete,
            Be::CloseComplete => BackendMessage::CloseComplete,
            Be::CommandComplete(t) => BackendMessage::CommandComplete(t),
            Be::CopyData(d) => BackendMessage::CopyData(d),
            Be::CopyDone => BackendMessage::CopyDone,
            Be::Copy(tag, format, codes) => {
                let m = CopyResponse {
                    format: *format,
                    column_formats: FormatCodes::from_raw(codes),
                };
                match tag {
                    b'G' => BackendMessage::CopyInResponse(m),
                    b'H' => BackendMessage::CopyOutResponse(m),
                    _ => BackendMessage::CopyBothResponse(m),
                }
            }
            Be::DataRow(v) => BackendMessage::DataRow(DataRow::from_values(v.view())),
            Be::EmptyQuery => BackendMessage::EmptyQueryResponse,
            Be::Fields(error, raw) => {
                let f = ErrorFields::from_raw(raw);
                if *error {
                    BackendMessage::ErrorResponse(f)
                } else {
                    BackendMessage::NoticeResponse(f)
                }
            }
            Be::FunctionCallResponse(v) => BackendMessage::FunctionCallResponse(v.as_deref()),
            Be::Negotiate(minor, raw, n) => {
                BackendMessage::NegotiateProtocolVersion(NegotiateProtocolVersion {
                    newest_minor: *minor,
                    unrecognized: CStrs::from_raw(raw, *n),
                })
            }
            Be::NoData => BackendMessage::NoData,
            Be::Notification(pid, channel, payload) => {
                BackendMessage::NotificationResponse(Notification {
                    pid: *pid,
                    channel,
                    payload,
                })
            }
            Be::ParameterDescription(raw) => {
                BackendMessage::ParameterDescription(Oids::from_raw(raw))
            }
            Be::ParameterStatus(name, value) => {
                BackendMessage::ParameterStatus(ParameterStatus { name, value })
            }
            Be::ParseComplete => BackendMessage::ParseComplete,
            Be::PortalSuspended => BackendMessage::PortalSuspended,
            Be::ReadyForQuery(s) => BackendMessage::ReadyForQuery(*s),
            Be::RowDescription(n, raw) => {
                BackendMessage::RowDescription(RowDescription::from_raw(*n, raw))
            }
        }
    }
}
