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
    count_u16, put_cstr, put_frame, put_i16s, put_nullable, put_oids, put_values, values_size,
    CStrs, EncodeError, FormatCodes, Oids, ProtocolVersion, Values, ValuesIter,
    MAX_CANCEL_KEY_BYTES,
};
use crate::frontend::{empty, raw_frame, single_cstr};

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

/// Authentication request subtype codes (the first Int32 of an `R` body).
pub mod auth_code {
    /// AuthenticationOk.
    pub const OK: i32 = 0;
    /// AuthenticationKerberosV5.
    pub const KERBEROS_V5: i32 = 2;
    /// AuthenticationCleartextPassword.
    pub const CLEARTEXT_PASSWORD: i32 = 3;
    /// AuthenticationMD5Password.
    pub const MD5_PASSWORD: i32 = 5;
    /// SCM credentials (obsolete).
    pub const SCM_CREDENTIAL: i32 = 6;
    /// AuthenticationGSS.
    pub const GSS: i32 = 7;
    /// AuthenticationGSSContinue.
    pub const GSS_CONTINUE: i32 = 8;
    /// AuthenticationSSPI.
    pub const SSPI: i32 = 9;
    /// AuthenticationSASL.
    pub const SASL: i32 = 10;
    /// AuthenticationSASLContinue.
    pub const SASL_CONTINUE: i32 = 11;
    /// AuthenticationSASLFinal.
    pub const SASL_FINAL: i32 = 12;
}

/// An authentication request (`R`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Authentication<'a> {
    /// 0: authentication succeeded.
    Ok,
    /// 2: Kerberos V5 (unsupported by modern servers).
    KerberosV5,
    /// 3: send the password in cleartext.
    CleartextPassword,
    /// 5: send the MD5 hash salted with these bytes.
    Md5Password {
        /// The salt.
        salt: [u8; 4],
    },
    /// 6: SCM credentials (obsolete).
    ScmCredential,
    /// 7: start GSSAPI.
    Gss,
    /// 8: more GSSAPI/SSPI data.
    GssContinue(&'a [u8]),
    /// 9: start SSPI.
    Sspi,
    /// 10: SASL with these mechanisms, in the server's order of preference.
    Sasl(CStrs<'a>),
    /// 11: a SASL challenge.
    SaslContinue(&'a [u8]),
    /// 12: SASL outcome data ("additional data" of the final server message).
    SaslFinal(&'a [u8]),
}

impl<'a> Authentication<'a> {
    /// Decodes an `R` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let m = match r.i32()? {
            auth_code::OK => Authentication::Ok,
            auth_code::KERBEROS_V5 => Authentication::KerberosV5,
            auth_code::CLEARTEXT_PASSWORD => Authentication::CleartextPassword,
            auth_code::MD5_PASSWORD => {
                let s = r.bytes(4)?;
                Authentication::Md5Password {
                    salt: [s[0], s[1], s[2], s[3]],
                }
            }
            auth_code::SCM_CREDENTIAL => Authentication::ScmCredential,
            auth_code::GSS => Authentication::Gss,
            auth_code::GSS_CONTINUE => Authentication::GssContinue(r.take_rest()),
            auth_code::SSPI => Authentication::Sspi,
            auth_code::SASL => Authentication::Sasl(CStrs::read_terminated(&mut r)?),
            auth_code::SASL_CONTINUE => Authentication::SaslContinue(r.take_rest()),
            auth_code::SASL_FINAL => Authentication::SaslFinal(r.take_rest()),
            _ => {
                return Err(DecodeError::Invalid {
                    what: "authentication request type",
                    offset: 0,
                })
            }
        };
        r.finish()?;
        Ok(m)
    }

    /// The subtype code.
    pub fn code(&self) -> i32 {
        match self {
            Authentication::Ok => auth_code::OK,
            Authentication::KerberosV5 => auth_code::KERBEROS_V5,
            Authentication::CleartextPassword => auth_code::CLEARTEXT_PASSWORD,
            Authentication::Md5Password { .. } => auth_code::MD5_PASSWORD,
            Authentication::ScmCredential => auth_code::SCM_CREDENTIAL,
            Authentication::Gss => auth_code::GSS,
            Authentication::GssContinue(_) => auth_code::GSS_CONTINUE,
            Authentication::Sspi => auth_code::SSPI,
            Authentication::Sasl(_) => auth_code::SASL,
            Authentication::SaslContinue(_) => auth_code::SASL_CONTINUE,
            Authentication::SaslFinal(_) => auth_code::SASL_FINAL,
        }
    }

    /// Encodes the request.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let (data, trailer): (&[u8], bool) = match self {
            Authentication::Md5Password { salt } => (&salt[..], false),
            Authentication::GssContinue(d)
            | Authentication::SaslContinue(d)
            | Authentication::SaslFinal(d) => (d, false),
            Authentication::Sasl(m) => (m.raw(), true),
            _ => (&[], false),
        };
        put_frame(buf, tag::AUTHENTICATION, 5 + data.len(), |b| {
            b.put_i32(self.code());
            b.put_slice(data);
            if trailer {
                b.put_u8(0);
            }
            Ok(())
        })
    }
}

/// Writes an AuthenticationSASL listing `mechanisms`.
pub fn encode_auth_sasl(mechanisms: &[&[u8]], buf: &mut BytesMut) -> Result<(), EncodeError> {
    let size = 5 + mechanisms.iter().map(|m| m.len() + 1).sum::<usize>();
    put_frame(buf, tag::AUTHENTICATION, size, |b| {
        b.put_i32(auth_code::SASL);
        for m in mechanisms {
            if m.is_empty() {
                return Err(EncodeError::Invalid {
                    what: "empty SASL mechanism name",
                });
            }
            put_cstr(b, m, "SASL mechanism")?;
        }
        b.put_u8(0);
        Ok(())
    })
}

/// BackendKeyData: what a CancelRequest must quote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendKeyData<'a> {
    /// Backend process ID.
    pub pid: i32,
    /// Secret key: 4 bytes under 3.0, up to 256 under 3.2 (PG18 sends 32).
    pub key: &'a [u8],
}

impl<'a> BackendKeyData<'a> {
    /// Decodes a `K` body; an empty or longer-than-256-byte key is an error.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let pid = r.i32()?;
        let key = r.take_rest();
        if key.is_empty() || key.len() > MAX_CANCEL_KEY_BYTES {
            return Err(DecodeError::Invalid {
                what: "cancel key length (must be 1 to 256 bytes)",
                offset: 4,
            });
        }
        Ok(BackendKeyData { pid, key })
    }

    /// Whether the key length is what `version` prescribes (4 bytes before 3.2).
    pub fn fits_version(&self, version: ProtocolVersion) -> bool {
        version.has_variable_cancel_key() || self.key.len() == 4
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        if self.key.is_empty() || self.key.len() > MAX_CANCEL_KEY_BYTES {
            return Err(EncodeError::Invalid {
                what: "cancel key length (must be 1 to 256 bytes)",
            });
        }
        put_frame(buf, tag::BACKEND_KEY_DATA, 4 + self.key.len(), |b| {
            b.put_i32(self.pid);
            b.put_slice(self.key);
            Ok(())
        })
    }
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

/// DataRow: one row's column values, validated on decode and iterated without allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DataRow<'a> {
    values: Values<'a>,
}

impl<'a> DataRow<'a> {
    /// Decodes a `D` body: reads the count and checks every length once.
    #[inline]
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let values = Values::read(&mut r)?;
        r.finish()?;
        Ok(DataRow { values })
    }

    /// Number of columns.
    #[inline]
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether the row has no columns.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// The column values in order: `Some(bytes)` or `None` for SQL NULL.
    #[inline]
    pub fn fields(&self) -> ValuesIter<'a> {
        self.values.iter()
    }

    /// The values as a [`Values`] view.
    pub fn values(&self) -> Values<'a> {
        self.values
    }

    /// Encodes the row.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag::DATA_ROW, 2 + self.values.raw().len(), |b| {
            self.values.put(b);
            Ok(())
        })
    }
}

/// A DataRow read in one pass: only the column count is checked up front, and each value's
/// length is checked as [`DataRowFields`] reaches it. For callers that visit every field
/// anyway (drivers turning rows into values), this halves the work of [`DataRow::decode`]
/// followed by [`DataRow::fields`]; a malformed row still ends in a [`DecodeError`].
#[derive(Clone, Debug)]
pub struct DataRowFields<'a> {
    rest: &'a [u8],
    left: u16,
    /// Offset of `rest` within the body, for error positions.
    at: usize,
}

impl<'a> DataRowFields<'a> {
    /// Starts reading a `D` body.
    #[inline]
    pub fn new(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let n = crate::frame::read_count_u16(&mut r, 4)?;
        Ok(DataRowFields {
            rest: r.rest(),
            left: n as u16,
            at: 2,
        })
    }

    /// Number of columns the row claims.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.left)
    }

    /// Whether no columns are left to read.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.left == 0
    }
}

impl<'a> Iterator for DataRowFields<'a> {
    type Item = Result<Option<&'a [u8]>, DecodeError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.rest;
        if self.left == 0 {
            if rest.is_empty() {
                return None;
            }
            // Report the leftover bytes once, then stop.
            self.rest = &[];
            return Some(Err(DecodeError::TrailingBytes {
                offset: self.at,
                count: rest.len(),
            }));
        }
        self.left -= 1;
        let Some(head) = rest.first_chunk::<4>() else {
            self.left = 0;
            self.rest = &[];
            return Some(Err(DecodeError::UnexpectedEnd {
                offset: self.at,
                needed: 4 - rest.len(),
            }));
        };
        let len = i32::from_be_bytes(*head);
        if len >= 0 && (len as usize) <= rest.len() - 4 {
            let end = 4 + len as usize;
            self.rest = &rest[end..];
            self.at += end;
            return Some(Ok(Some(&rest[4..end])));
        }
        if len == -1 {
            self.rest = &rest[4..];
            self.at += 4;
            return Some(Ok(None));
        }
        let offset = self.at;
        self.left = 0;
        self.rest = &[];
        Some(Err(DecodeError::InvalidLength {
            length: len.into(),
            offset,
        }))
    }
}

/// Writes a DataRow.
#[inline]
pub fn encode_data_row(fields: &[Option<&[u8]>], buf: &mut BytesMut) -> Result<(), EncodeError> {
    put_frame(buf, tag::DATA_ROW, values_size(fields), |b| {
        put_values(b, fields)
    })
}

/// NegotiateProtocolVersion: the newest version the server supports and the `_pq_.`
/// options it did not recognise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NegotiateProtocolVersion<'a> {
    /// The version word as sent (PostgreSQL sends the full version, e.g. 196610).
    pub newest_minor: u32,
    /// Unrecognised option names.
    pub unrecognized: CStrs<'a>,
}

impl<'a> NegotiateProtocolVersion<'a> {
    /// Decodes a `v` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let newest_minor = r.u32()?;
        let n = r.count32(1)?;
        let unrecognized = CStrs::read_counted(&mut r, n)?;
        r.finish()?;
        Ok(NegotiateProtocolVersion {
            newest_minor,
            unrecognized,
        })
    }

    /// The offered version, accepting both the full word and a bare minor number.
    pub fn version(&self) -> ProtocolVersion {
        if self.newest_minor < 0x1_0000 {
            ProtocolVersion::new(3, self.newest_minor as u16)
        } else {
            ProtocolVersion(self.newest_minor)
        }
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        let count = i32::try_from(self.unrecognized.len()).map_err(|_| EncodeError::TooLarge {
            what: "option count",
        })?;
        put_frame(
            buf,
            tag::NEGOTIATE_PROTOCOL_VERSION,
            8 + self.unrecognized.raw().len(),
            |b| {
                b.put_u32(self.newest_minor);
                b.put_i32(count);
                b.put_slice(self.unrecognized.raw());
                Ok(())
            },
        )
    }
}

/// Writes a NegotiateProtocolVersion.
pub fn encode_negotiate_protocol_version(
    newest: ProtocolVersion,
    unrecognized: &[&[u8]],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let count = i32::try_from(unrecognized.len()).map_err(|_| EncodeError::TooLarge {
        what: "option count",
    })?;
    let size = 8 + unrecognized.iter().map(|o| o.len() + 1).sum::<usize>();
    put_frame(buf, tag::NEGOTIATE_PROTOCOL_VERSION, size, |b| {
        b.put_u32(newest.0);
        b.put_i32(count);
        for o in unrecognized {
            put_cstr(b, o, "protocol option name")?;
        }
        Ok(())
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

/// One column of a RowDescription.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldDescription<'a> {
    /// Column name.
    pub name: &'a [u8],
    /// Table OID, or 0.
    pub table_oid: u32,
    /// Attribute number in that table, or 0.
    pub column_id: i16,
    /// Data type OID.
    pub type_oid: u32,
    /// `pg_type.typlen` (negative for variable width).
    pub type_size: i16,
    /// Type modifier.
    pub type_modifier: i32,
    /// Format code (0 text, 1 binary).
    pub format: i16,
}

/// Fixed bytes after a RowDescription field's name.
const FIELD_FIXED_BYTES: usize = 18;

/// RowDescription: validated on decode, fields iterated without allocation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowDescription<'a> {
    count: u16,
    raw: &'a [u8],
}

impl<'a> RowDescription<'a> {
    /// Decodes a `T` body.
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let n = crate::frame::read_count_u16(&mut r, FIELD_FIXED_BYTES + 1)?;
        let raw = r.rest();
        for _ in 0..n {
            r.cstr()?;
            r.bytes(FIELD_FIXED_BYTES)?;
        }
        r.finish()?;
        Ok(RowDescription {
            count: n as u16,
            raw,
        })
    }

    /// Number of columns.
    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// Whether there are no columns.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The column descriptions in order.
    pub fn fields(&self) -> RowDescriptionIter<'a> {
        RowDescriptionIter {
            r: Reader::new(self.raw),
            left: self.count,
        }
    }

    /// Encodes the message.
    pub fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_frame(buf, tag::ROW_DESCRIPTION, 2 + self.raw.len(), |b| {
            b.put_u16(self.count);
            b.put_slice(self.raw);
            Ok(())
        })
    }
}

/// Iterator over [`RowDescription`] fields.
#[derive(Clone, Debug)]
pub struct RowDescriptionIter<'a> {
    r: Reader<'a>,
    left: u16,
}

impl<'a> Iterator for RowDescriptionIter<'a> {
    type Item = FieldDescription<'a>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // Validated on decode; the `ok()?`s cannot trigger.
        let r = &mut self.r;
        Some(FieldDescription {
            name: r.cstr().ok()?,
            table_oid: r.u32().ok()?,
            column_id: r.i16().ok()?,
            type_oid: r.u32().ok()?,
            type_size: r.i16().ok()?,
            type_modifier: r.i32().ok()?,
            format: r.i16().ok()?,
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (usize::from(self.left), Some(usize::from(self.left)))
    }
}

/// Writes a RowDescription.
pub fn encode_row_description(
    fields: &[FieldDescription<'_>],
    buf: &mut BytesMut,
) -> Result<(), EncodeError> {
    let size = 2 + fields
        .iter()
        .map(|f| f.name.len() + 1 + FIELD_FIXED_BYTES)
        .sum::<usize>();
    put_frame(buf, tag::ROW_DESCRIPTION, size, |b| {
        b.put_u16(count_u16(fields.len(), "column count")?);
        for f in fields {
            put_cstr(b, f.name, "column name")?;
            b.put_u32(f.table_oid);
            b.put_i16(f.column_id);
            b.put_u32(f.type_oid);
            b.put_i16(f.type_size);
            b.put_i32(f.type_modifier);
            b.put_i16(f.format);
        }
        Ok(())
    })
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
mod tests {
    use super::*;
    use crate::frame::{decode_frame, Decoded};

    fn decode_one(buf: &[u8]) -> BackendMessage<'_> {
        let Ok(Decoded::Frame(f)) = decode_frame(buf, usize::MAX) else {
            panic!("frame")
        };
        assert_eq!(f.wire_len(), buf.len());
        let m = BackendMessage::decode(f.tag, f.body).unwrap();
        let mut again = BytesMut::new();
        m.encode(&mut again).unwrap();
        assert_eq!(&again[..], buf);
        m
    }

    #[test]
    fn data_row_fields() {
        let mut buf = BytesMut::new();
        encode_data_row(&[Some(b"1"), None, Some(b"")], &mut buf).unwrap();
        assert_eq!(
            &buf[..],
            b"D\0\0\0\x13\0\x03\0\0\0\x011\xff\xff\xff\xff\0\0\0\0"
        );
        let BackendMessage::DataRow(row) = decode_one(&buf) else {
            panic!()
        };
        assert_eq!(row.len(), 3);
        assert_eq!(
            row.fields().collect::<Vec<_>>(),
            [Some(&b"1"[..]), None, Some(&b""[..])]
        );
        assert_eq!(row.fields().len(), 3);
    }

    #[test]
    fn data_row_rejects_lies() {
        // Count says 2, one value present.
        assert!(DataRow::decode(b"\0\x02\0\0\0\x01x").is_err());
        // Length -2.
        assert!(matches!(
            DataRow::decode(b"\0\x01\xff\xff\xff\xfe"),
            Err(DecodeError::InvalidLength {
                length: -2,
                offset: 2
            })
        ));
        // Value overruns.
        assert!(matches!(
            DataRow::decode(b"\0\x01\0\0\0\x05abc"),
            Err(DecodeError::InvalidLength {
                length: 5,
                offset: 2
            })
        ));
        // Trailing byte.
        assert!(matches!(
            DataRow::decode(b"\0\x01\0\0\0\x01ab"),
            Err(DecodeError::TrailingBytes {
                offset: 7,
                count: 1
            })
        ));
        // Huge count with a tiny body.
        assert!(matches!(
            DataRow::decode(b"\xff\xff\0\0"),
            Err(DecodeError::InvalidCount { count: 65535, .. })
        ));
    }

    #[test]
    fn authentication_subtypes() {
        let cases: Vec<Authentication<'_>> = vec![
            Authentication::Ok,
            Authentication::KerberosV5,
            Authentication::CleartextPassword,
            Authentication::Md5Password { salt: [1, 2, 3, 4] },
            Authentication::ScmCredential,
            Authentication::Gss,
            Authentication::GssContinue(b"tok"),
            Authentication::Sspi,
            Authentication::SaslContinue(b"r=abc,s=xyz,i=4096"),
            Authentication::SaslFinal(b"v=sig"),
        ];
        for a in cases {
            let mut buf = BytesMut::new();
            a.encode(&mut buf).unwrap();
            assert_eq!(decode_one(&buf), BackendMessage::Authentication(a));
        }
        let mut buf = BytesMut::new();
        encode_auth_sasl(&[b"SCRAM-SHA-256-PLUS", b"SCRAM-SHA-256"], &mut buf).unwrap();
        let BackendMessage::Authentication(Authentication::Sasl(m)) = decode_one(&buf) else {
            panic!()
        };
        assert_eq!(
            m.iter().collect::<Vec<_>>(),
            [&b"SCRAM-SHA-256-PLUS"[..], &b"SCRAM-SHA-256"[..]]
        );
        // AuthenticationOk with trailing bytes, MD5 with a short salt, unknown subtype.
        assert!(Authentication::decode(b"\0\0\0\0x").is_err());
        assert!(Authentication::decode(b"\0\0\0\x05ab").is_err());
        assert!(Authentication::decode(b"\0\0\0\x0d").is_err());
        // SASL list without its terminator.
        assert!(Authentication::decode(b"\0\0\0\x0aSCRAM\0").is_err());
    }

    #[test]
    fn backend_key_data_both_versions() {
        for key in [&[1u8, 2, 3, 4][..], &[5u8; 32][..], &[6u8; 256][..]] {
            let mut buf = BytesMut::new();
            BackendKeyData { pid: 77, key }.encode(&mut buf).unwrap();
            let BackendMessage::BackendKeyData(k) = decode_one(&buf) else {
                panic!()
            };
            assert_eq!((k.pid, k.key), (77, key));
            assert!(k.fits_version(ProtocolVersion::V3_2));
            assert_eq!(k.fits_version(ProtocolVersion::V3_0), key.len() == 4);
        }
        assert!(BackendKeyData::decode(b"\0\0\0\x01").is_err());
        assert!(BackendKeyData::decode(&[0; 4 + 257]).is_err());
    }

    #[test]
    fn negotiate_protocol_version() {
        let mut buf = BytesMut::new();
        encode_negotiate_protocol_version(ProtocolVersion::V3_0, &[b"_pq_.a", b"_pq_.b"], &mut buf)
            .unwrap();
        let BackendMessage::NegotiateProtocolVersion(n) = decode_one(&buf) else {
            panic!()
        };
        assert_eq!(n.version(), ProtocolVersion::V3_0);
        assert_eq!(
            n.unrecognized.iter().collect::<Vec<_>>(),
            [&b"_pq_.a"[..], b"_pq_.b"]
        );
        let minor_only = NegotiateProtocolVersion {
            newest_minor: 2,
            unrecognized: CStrs::default(),
        };
        assert_eq!(minor_only.version(), ProtocolVersion::V3_2);
        // Count larger than the strings present.
        assert!(NegotiateProtocolVersion::decode(b"\0\x03\0\0\0\0\0\x02a\0").is_err());
        assert!(NegotiateProtocolVersion::decode(b"\0\x03\0\0\xff\xff\xff\xff").is_err());
    }

    #[test]
    fn row_description_and_others() {
        let f = FieldDescription {
            name: b"id",
            table_oid: 16384,
            column_id: 1,
            type_oid: 23,
            type_size: 4,
            type_modifier: -1,
            format: 0,
        };
        let mut buf = BytesMut::new();
        encode_row_description(&[f, FieldDescription { name: b"", ..f }], &mut buf).unwrap();
        let BackendMessage::RowDescription(rd) = decode_one(&buf) else {
            panic!()
        };
        assert_eq!(
            rd.fields().collect::<Vec<_>>(),
            [f, FieldDescription { name: b"", ..f }]
        );
        assert!(RowDescription::decode(b"\0\x01id\0").is_err());

        let mut buf = BytesMut::new();
        encode_ready_for_query(TransactionStatus::Failed, &mut buf);
        assert_eq!(
            decode_one(&buf),
            BackendMessage::ReadyForQuery(TransactionStatus::Failed)
        );
        assert!(TransactionStatus::decode(b"X").is_err());

        for t in *b"123cIns" {
            let mut buf = BytesMut::new();
            encode_empty(t, &mut buf);
            assert_eq!(decode_one(&buf).tag(), t);
        }
        let mut buf = BytesMut::new();
        encode_copy_response(b'W', 1, &[1, 1], &mut buf).unwrap();
        assert!(matches!(decode_one(&buf), BackendMessage::CopyBothResponse(c) if c.format == 1));
        let mut buf = BytesMut::new();
        encode_function_call_response(None, &mut buf).unwrap();
        assert_eq!(decode_one(&buf), BackendMessage::FunctionCallResponse(None));
        let mut buf = BytesMut::new();
        encode_parameter_description(&[23, 25], &mut buf).unwrap();
        let BackendMessage::ParameterDescription(o) = decode_one(&buf) else {
            panic!()
        };
        assert_eq!(o.iter().collect::<Vec<_>>(), [23, 25]);
        let mut buf = BytesMut::new();
        Notification {
            pid: 1,
            channel: b"ch",
            payload: b"",
        }
        .encode(&mut buf)
        .unwrap();
        decode_one(&buf);
        assert_eq!(command_tag_rows(b"INSERT 0 5"), Some(5));
        assert_eq!(command_tag_rows(b"SELECT 12"), Some(12));
        assert_eq!(command_tag_rows(b"BEGIN"), None);
        assert_eq!(
            BackendMessage::decode(b'?', b""),
            Err(DecodeError::UnknownTag { tag: b'?' })
        );
    }
}
