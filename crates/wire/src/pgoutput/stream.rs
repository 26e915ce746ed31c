//! Stream tracking: [`PgOutputDecoder`] follows Stream Start / Stream Stop blocks and the
//! negotiated version, so each message is decoded in the right context.

use pgyard_types::Xid;

use super::{PgOutputMessage, ProtoVersion};
use crate::buf::DecodeError;

/// Decodes a pgoutput stream message by message, tracking Stream Start / Stream Stop so it
/// knows which changes carry an xid.
///
/// It also rejects what cannot happen on a well-formed stream: a message newer than the
/// negotiated version, Stream Start inside a block, Stream Stop outside one, and transaction
/// framing (Begin, Commit, Stream Commit, …) inside a block. A rejected message leaves the
/// state unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PgOutputDecoder {
    version: ProtoVersion,
    stream: Option<Xid>,
}

impl PgOutputDecoder {
    /// A decoder for a stream that starts outside any stream block.
    pub fn new(version: ProtoVersion) -> Self {
        PgOutputDecoder {
            version,
            stream: None,
        }
    }

    /// A decoder that resumes inside the block of `stream` (or outside any, with `None`).
    pub fn resume(version: ProtoVersion, stream: Option<Xid>) -> Self {
        PgOutputDecoder { version, stream }
    }

    /// The negotiated protocol version.
    pub fn version(&self) -> ProtoVersion {
        self.version
    }

    /// Whether the next message is inside a Stream Start … Stream Stop block.
    pub fn in_stream(&self) -> bool {
        self.stream.is_some()
    }

    /// The top-level xid of the current stream block.
    pub fn stream_xid(&self) -> Option<Xid> {
        self.stream
    }

    /// Decodes the next message of the stream and updates the stream-block state.
    pub fn decode<'a>(&mut self, payload: &'a [u8]) -> Result<PgOutputMessage<'a>, DecodeError> {
        let msg = PgOutputMessage::decode(payload, self.in_stream())?;
        let invalid = |what| Err(DecodeError::Invalid { what, offset: 0 });
        if msg.min_proto_version() > self.version {
            return invalid("message not defined by the negotiated pgoutput protocol version");
        }
        match (&msg, self.stream) {
            (PgOutputMessage::StreamStart(_), Some(_)) => {
                return invalid("duplicate STREAM START message")
            }
            (PgOutputMessage::StreamStart(s), None) => self.stream = Some(s.xid),
            (PgOutputMessage::StreamStop, None) => {
                return invalid("STREAM STOP message without STREAM START")
            }
            (PgOutputMessage::StreamStop, Some(_)) => self.stream = None,
            (m, Some(_)) if !m.allowed_in_stream() => {
                return invalid("message not allowed inside a stream block")
            }
            _ => {}
        }
        Ok(msg)
    }
}
