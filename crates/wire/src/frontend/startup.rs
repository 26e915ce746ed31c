//! The startup phase: StartupMessage, SSLRequest, GSSENCRequest and CancelRequest, which
//! have no type byte.

use bytes::{BufMut, BytesMut};

use crate::buf::{DecodeError, Reader};
use crate::frame::{
    put_cstr, put_untyped, EncodeError, ProtocolVersion, StartupKind, CANCEL_REQUEST_CODE,
    GSSENC_REQUEST_CODE, MAX_CANCEL_KEY_BYTES, SSL_REQUEST_CODE,
};

/// StartupMessage parameters: `name\0value\0` pairs as on the wire (list terminator excluded).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StartupParams<'a> {
    raw: &'a [u8],
}

impl<'a> StartupParams<'a> {
    /// Wraps encoded `name\0value\0` pairs without the list's final NUL; the generators
    /// build them.
    #[cfg(feature = "arbitrary")]
    pub(crate) fn from_raw(raw: &'a [u8]) -> Self {
        StartupParams { raw }
    }

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
