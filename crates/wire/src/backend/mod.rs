//! Backend (server → client) messages: typed decode borrowing from the frame, encode into `BytesMut`.
//!
//! Conventions are those of [`crate::frontend`]: decode borrows from the body (error offsets
//! relative to it), lists are validated once and iterated without allocating, and every
//! message can be re-encoded to exactly the bytes it came from. Builders (`encode_*`) take
//! plain slices; they exist because the simulator plays servers.
//!
//! The hot path is [`DataRow`]: `DataRow::decode` reads the column count and walks the
//! value lengths once (no allocation), after which [`DataRow::fields`] yields
//! `Option<&[u8]>` per column with no further error handling.

use bytes::{BufMut, BytesMut};

use crate::buf::{DecodeError, Reader};
use crate::error_fields::{ErrorFields, ERROR_RESPONSE_TAG, NOTICE_RESPONSE_TAG};
use crate::frame::{
    put_cstr, put_frame, put_i16s, put_nullable, put_oids, EncodeError, FormatCodes, Oids,
};
use crate::frontend::{empty, raw_frame, single_cstr};

mod auth;
mod rows;

pub use auth::{
    auth_code, encode_auth_sasl, encode_negotiate_protocol_version, Authentication, BackendKeyData,
    NegotiateProtocolVersion,
};
pub use rows::{
    encode_data_row, encode_row_description, DataRow, DataRowFields, FieldDescription,
    RowDescription, RowDescriptionIter,
};

/// Type bytes of backend messages.
pub mod tag {
    /// Authentication* requests.
    pub const AUTHENTICATION: u8 = b'R';
    /// BackendKeyData.
    pub const BACKEND_KEY_DATA: u8 = b'K';
    /// BindComplete.
    pub const BIND_COMPLETE: u8 = b'2';
    /// CloseComplete.
    pub const CLOSE_COMPLETE: u8 = b'3';
    /// CommandComplete.
    pub const COMMAND_COMPLETE: u8 = b'C';
    /// CopyData.
    pub const COPY_DATA: u8 = b'd';
    /// CopyDone.
    pub const COPY_DONE: u8 = b'c';
    /// CopyInResponse.
    pub const COPY_IN_RESPONSE: u8 = b'G';
    /// CopyOutResponse.
    pub const COPY_OUT_RESPONSE: u8 = b'H';
    /// CopyBothResponse.
    pub const COPY_BOTH_RESPONSE: u8 = b'W';
    /// DataRow.
    pub const DATA_ROW: u8 = b'D';
    /// EmptyQueryResponse.
    pub const EMPTY_QUERY_RESPONSE: u8 = b'I';
    /// ErrorResponse.
    pub const ERROR_RESPONSE: u8 = b'E';
    /// FunctionCallResponse.
    pub const FUNCTION_CALL_RESPONSE: u8 = b'V';
    /// NegotiateProtocolVersion.
    pub const NEGOTIATE_PROTOCOL_VERSION: u8 = b'v';
    /// NoData.
    pub const NO_DATA: u8 = b'n';
    /// NoticeResponse.
    pub const NOTICE_RESPONSE: u8 = b'N';
    /// NotificationResponse.
    pub const NOTIFICATION_RESPONSE: u8 = b'A';
    /// ParameterDescription.
    pub const PARAMETER_DESCRIPTION: u8 = b't';
    /// ParameterStatus.
    pub const PARAMETER_STATUS: u8 = b'S';
    /// ParseComplete.
    pub const PARSE_COMPLETE: u8 = b'1';
    /// PortalSuspended.
    pub const PORTAL_SUSPENDED: u8 = b's';
    /// ReadyForQuery.
    pub const READY_FOR_QUERY: u8 = b'Z';
    /// RowDescription.
    pub const ROW_DESCRIPTION: u8 = b'T';
}

/// CopyInResponse / CopyOutResponse / CopyBothResponse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopyResponse<'a> {
    /// Overall format: 0 text, 1 binary (kept as sent).
    pub format: u8,
    /// Per-column format codes.
    pub column_formats: FormatCodes<'a>,
}

impl<'a> CopyResponse<'a> {
    /// Decodes a `G`, `H` or `W` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = CopyResponse {
            format: r.u8()?,
            column_formats: FormatCodes::read(&mut r)?,
        };
        r.finish()?;
        Ok(m)
    }

    fn encode(&self, tag: u8, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag, 3 + self.column_formats.raw().len(), |b| {
            b.put_u8(self.format);
            self.column_formats.put(b)
        })
    }
}

/// Writes a CopyInResponse (`G`), CopyOutResponse (`H`) or CopyBothResponse (`W`).
pub fn encode_copy_response(
    tag: u8,
    format: u8,
    column_formats: &[i16],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    put_frame(buf, tag, 3 + 2 * column_formats.len(), |b| {
        b.put_u8(format);
        put_i16s(b, column_formats, "column format count")
    })
}

/// NotificationResponse: a NOTIFY delivered to this session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Notification<'a> {
    /// PID of the notifying backend.
    pub pid: i32,
    /// Channel name.
    pub channel: &'a [u8],
    /// Payload.
    pub payload: &'a [u8],
}

impl<'a> Notification<'a> {
    /// Decodes an `A` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = Notification {
            pid: r.i32()?,
            channel: r.cstr()?,
            payload: r.cstr()?,
        };
        r.finish()?;
        Ok(m)
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let size = 6 + self.channel.len() + self.payload.len();
        put_frame(buf, tag::NOTIFICATION_RESPONSE, size, |b| {
            b.put_i32(self.pid);
            put_cstr(b, self.channel, "channel")?;
            put_cstr(b, self.payload, "payload")
        })
    }
}

/// ParameterStatus: a reported run-time parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParameterStatus<'a> {
    /// Parameter name.
    pub name: &'a [u8],
    /// Its current value.
    pub value: &'a [u8],
}

impl<'a> ParameterStatus<'a> {
    /// Decodes an `S` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = ParameterStatus {
            name: r.cstr()?,
            value: r.cstr()?,
        };
        r.finish()?;
        Ok(m)
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let size = 2 + self.name.len() + self.value.len();
        put_frame(buf, tag::PARAMETER_STATUS, size, |b| {
            put_cstr(b, self.name, "parameter name")?;
            put_cstr(b, self.value, "parameter value")
        })
    }
}

/// The transaction status in ReadyForQuery.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransactionStatus {
    /// `I`: not in a transaction block.
    Idle,
    /// `T`: in a transaction block.
    InTransaction,
    /// `E`: in a failed transaction block.
    Failed,
}

impl TransactionStatus {
    /// The wire byte.
    pub fn byte(self) -> u8 {
        match self {
            TransactionStatus::Idle => b'I',
            TransactionStatus::InTransaction => b'T',
            TransactionStatus::Failed => b'E',
        }
    }

    /// Decodes a `Z` body.
    pub fn decode(body: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let s = match r.u8()? {
            b'I' => TransactionStatus::Idle,
            b'T' => TransactionStatus::InTransaction,
            b'E' => TransactionStatus::Failed,
            _ => {
                return Err(DecodeError::Invalid {
                    what: "transaction status (expected 'I', 'T' or 'E')",
                    offset: 0,
                })
            }
        };
        r.finish()?;
        Ok(s)
    }
}

/// Writes a ReadyForQuery.
#[inline]
pub fn encode_ready_for_query(status: TransactionStatus, buf: &mut BytesMut) {
    buf.put_slice(&[tag::READY_FOR_QUERY, 0, 0, 0, 5, status.byte()]);
}

/// Writes a ParameterDescription.
pub fn encode_parameter_description(types: &[u32], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::PARAMETER_DESCRIPTION, 2 + 4 * types.len(), |b| {
        put_oids(b, types)
    })
}

/// Writes a CommandComplete.
pub fn encode_command_complete(command_tag: &[u8], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::COMMAND_COMPLETE, command_tag.len() + 1, |b| {
        put_cstr(b, command_tag, "command tag")
    })
}

/// The row count at the end of a command tag (`INSERT 0 5` → 5, `SELECT 3` → 3), if any.
pub fn command_tag_rows(command_tag: &[u8]) -> Option<u64> {
    let space = command_tag.iter().rposition(|&b| b == b' ')?;
    let last = command_tag.get(space + 1..)?;
    if last.is_empty() || !last.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(last).ok()?.parse().ok()
}

/// Writes a FunctionCallResponse.
pub fn encode_function_call_response(
    result: Option<&[u8]>,
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = 4 + result.map_or(0, <[u8]>::len);
    put_frame(buf, tag::FUNCTION_CALL_RESPONSE, size, |b| {
        put_nullable(b, result)
    })
}

/// Writes a body-less message (`1 2 3 c I n s`).
#[inline]
pub fn encode_empty(tag: u8, buf: &mut BytesMut) {
    buf.put_slice(&[tag, 0, 0, 0, 4]);
}

/// Every backend message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendMessage<'a> {
    /// `R`.
    Authentication(Authentication<'a>),
    /// `K`.
    BackendKeyData(BackendKeyData<'a>),
    /// `2`.
    BindComplete,
    /// `3`.
    CloseComplete,
    /// `C` with its command tag.
    CommandComplete(&'a [u8]),
    /// `d`.
    CopyData(&'a [u8]),
    /// `c`.
    CopyDone,
    /// `G`.
    CopyInResponse(CopyResponse<'a>),
    /// `H`.
    CopyOutResponse(CopyResponse<'a>),
    /// `W`.
    CopyBothResponse(CopyResponse<'a>),
    /// `D`.
    DataRow(DataRow<'a>),
    /// `I`.
    EmptyQueryResponse,
    /// `E`.
    ErrorResponse(ErrorFields<'a>),
    /// `V` with the result (`None` = NULL).
    FunctionCallResponse(Option<&'a [u8]>),
    /// `v`.
    NegotiateProtocolVersion(NegotiateProtocolVersion<'a>),
    /// `n`.
    NoData,
    /// `N`.
    NoticeResponse(ErrorFields<'a>),
    /// `A`.
    NotificationResponse(Notification<'a>),
    /// `t` with the parameter type OIDs.
    ParameterDescription(Oids<'a>),
    /// `S`.
    ParameterStatus(ParameterStatus<'a>),
    /// `1`.
    ParseComplete,
    /// `s`.
    PortalSuspended,
    /// `Z`.
    ReadyForQuery(TransactionStatus),
    /// `T`.
    RowDescription(RowDescription<'a>),
}

impl<'a> BackendMessage<'a> {
    /// Decodes a typed frame.
    #[inline]
    pub fn decode(tag: u8, body: &'a [u8]) -> Result<Self, DecodeError> {
        Ok(match tag {
            tag::DATA_ROW => BackendMessage::DataRow(DataRow::decode(body)?),
            tag::AUTHENTICATION => BackendMessage::Authentication(Authentication::decode(body)?),
            tag::BACKEND_KEY_DATA => BackendMessage::BackendKeyData(BackendKeyData::decode(body)?),
            tag::BIND_COMPLETE => empty(body, BackendMessage::BindComplete)?,
            tag::CLOSE_COMPLETE => empty(body, BackendMessage::CloseComplete)?,
            tag::COMMAND_COMPLETE => BackendMessage::CommandComplete(single_cstr(body)?),
            tag::COPY_DATA => BackendMessage::CopyData(body),
            tag::COPY_DONE => empty(body, BackendMessage::CopyDone)?,
            tag::COPY_IN_RESPONSE => BackendMessage::CopyInResponse(CopyResponse::decode(body)?),
            tag::COPY_OUT_RESPONSE => BackendMessage::CopyOutResponse(CopyResponse::decode(body)?),
            tag::COPY_BOTH_RESPONSE => {
                BackendMessage::CopyBothResponse(CopyResponse::decode(body)?)
            }
            tag::EMPTY_QUERY_RESPONSE => empty(body, BackendMessage::EmptyQueryResponse)?,
            tag::ERROR_RESPONSE => BackendMessage::ErrorResponse(ErrorFields::decode(body)?),
            tag::FUNCTION_CALL_RESPONSE => {
                let mut r = Reader::new(body);
                let v = r.nullable_bytes()?;
                r.finish()?;
                BackendMessage::FunctionCallResponse(v)
            }
            tag::NEGOTIATE_PROTOCOL_VERSION => {
                BackendMessage::NegotiateProtocolVersion(NegotiateProtocolVersion::decode(body)?)
            }
            tag::NO_DATA => empty(body, BackendMessage::NoData)?,
            tag::NOTICE_RESPONSE => BackendMessage::NoticeResponse(ErrorFields::decode(body)?),
            tag::NOTIFICATION_RESPONSE => {
                BackendMessage::NotificationResponse(Notification::decode(body)?)
            }
            tag::PARAMETER_DESCRIPTION => {
                let mut r = Reader::new(body);
                let oids = Oids::read(&mut r)?;
                r.finish()?;
                BackendMessage::ParameterDescription(oids)
            }
            tag::PARAMETER_STATUS => {
                BackendMessage::ParameterStatus(ParameterStatus::decode(body)?)
            }
            tag::PARSE_COMPLETE => empty(body, BackendMessage::ParseComplete)?,
            tag::PORTAL_SUSPENDED => empty(body, BackendMessage::PortalSuspended)?,
            tag::READY_FOR_QUERY => BackendMessage::ReadyForQuery(TransactionStatus::decode(body)?),
            tag::ROW_DESCRIPTION => BackendMessage::RowDescription(RowDescription::decode(body)?),
            other => return Err(DecodeError::UnknownTag { tag: other }),
        })
    }

    /// The type byte.
    pub fn tag(&self) -> u8 {
        match self {
            BackendMessage::Authentication(_) => tag::AUTHENTICATION,
            BackendMessage::BackendKeyData(_) => tag::BACKEND_KEY_DATA,
            BackendMessage::BindComplete => tag::BIND_COMPLETE,
            BackendMessage::CloseComplete => tag::CLOSE_COMPLETE,
            BackendMessage::CommandComplete(_) => tag::COMMAND_COMPLETE,
            BackendMessage::CopyData(_) => tag::COPY_DATA,
            BackendMessage::CopyDone => tag::COPY_DONE,
            BackendMessage::CopyInResponse(_) => tag::COPY_IN_RESPONSE,
            BackendMessage::CopyOutResponse(_) => tag::COPY_OUT_RESPONSE,
            BackendMessage::CopyBothResponse(_) => tag::COPY_BOTH_RESPONSE,
            BackendMessage::DataRow(_) => tag::DATA_ROW,
            BackendMessage::EmptyQueryResponse => tag::EMPTY_QUERY_RESPONSE,
            BackendMessage::ErrorResponse(_) => ERROR_RESPONSE_TAG,
            BackendMessage::FunctionCallResponse(_) => tag::FUNCTION_CALL_RESPONSE,
            BackendMessage::NegotiateProtocolVersion(_) => tag::NEGOTIATE_PROTOCOL_VERSION,
            BackendMessage::NoData => tag::NO_DATA,
            BackendMessage::NoticeResponse(_) => NOTICE_RESPONSE_TAG,
            BackendMessage::NotificationResponse(_) => tag::NOTIFICATION_RESPONSE,
            BackendMessage::ParameterDescription(_) => tag::PARAMETER_DESCRIPTION,
            BackendMessage::ParameterStatus(_) => tag::PARAMETER_STATUS,
            BackendMessage::ParseComplete => tag::PARSE_COMPLETE,
            BackendMessage::PortalSuspended => tag::PORTAL_SUSPENDED,
            BackendMessage::ReadyForQuery(_) => tag::READY_FOR_QUERY,
            BackendMessage::RowDescription(_) => tag::ROW_DESCRIPTION,
        }
    }

    /// Encodes the message (identical bytes to what it was decoded from).
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            BackendMessage::Authentication(m) => m.encode(buf),
            BackendMessage::BackendKeyData(m) => m.encode(buf),
            BackendMessage::CommandComplete(t) => encode_command_complete(t, buf),
            BackendMessage::CopyData(d) => raw_frame(tag::COPY_DATA, d, buf),
            BackendMessage::CopyInResponse(m)
            | BackendMessage::CopyOutResponse(m)
            | BackendMessage::CopyBothResponse(m) => m.encode(self.tag(), buf),
            BackendMessage::DataRow(m) => m.encode(buf),
            BackendMessage::ErrorResponse(f) | BackendMessage::NoticeResponse(f) => {
                f.encode(self.tag(), buf)
            }
            BackendMessage::FunctionCallResponse(v) => encode_function_call_response(*v, buf),
            BackendMessage::NegotiateProtocolVersion(m) => m.encode(buf),
            BackendMessage::NotificationResponse(m) => m.encode(buf),
            BackendMessage::ParameterDescription(o) => {
                put_frame(buf, tag::PARAMETER_DESCRIPTION, 2 + o.raw().len(), |b| {
                    o.put(b)
                })
            }
            BackendMessage::ParameterStatus(m) => m.encode(buf),
            BackendMessage::ReadyForQuery(s) => {
                encode_ready_for_query(*s, buf);
                Ok(())
            }
            BackendMessage::RowDescription(m) => m.encode(buf),
            BackendMessage::BindComplete
            | BackendMessage::CloseComplete
            | BackendMessage::CopyDone
            | BackendMessage::EmptyQueryResponse
            | BackendMessage::NoData
            | BackendMessage::ParseComplete
            | BackendMessage::PortalSuspended => {
                encode_empty(self.tag(), buf);
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
