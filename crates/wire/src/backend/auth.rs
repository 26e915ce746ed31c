//! The startup-phase backend messages: authentication requests, BackendKeyData and
//! NegotiateProtocolVersion.

use bytes::{BufMut, BytesMut};

use super::tag;
use crate::buf::{DecodeError, Reader};
use crate::frame::{
    put_cstr, put_frame, CStrs, EncodeError, ProtocolVersion, MAX_CANCEL_KEY_BYTES,
};

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
