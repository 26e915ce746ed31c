//! Streaming replication: CopyBoth sub-messages and the replication commands' result rows.
//!
//! After `START_REPLICATION` both sides exchange CopyData messages whose payload starts with a
//! type byte: XLogData (`'w'`) and primary keepalive (`'k'`) from the server, standby status
//! update (`'r'`) and hot standby feedback (`'h'`) from the client. [`ReplicationMessage`]
//! decodes such a payload (borrowing the WAL or pgoutput data) and encodes one into a
//! `BytesMut`. The typed result rows of `IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT` and
//! `READ_REPLICATION_SLOT` are parsed from DataRow text fields, and the commands' SQL text is
//! built with every name and value quoted.

use bytes::{BufMut, BytesMut};
use pgyard_types::{Lsn, PgTimestamp, Xid};

use crate::buf::{DecodeError, Reader};

mod commands;
mod rows;

pub use commands::{
    create_replication_slot, drop_replication_slot, quote_identifier, quote_literal,
    read_replication_slot, start_replication_logical, start_replication_pgoutput,
    start_replication_physical, OriginFilter, PgOutputOptions, SlotKind, SnapshotAction, Streaming,
    IDENTIFY_SYSTEM,
};
pub use rows::{CreatedSlot, IdentifySystem, ReadSlot};

/// The type bytes of the CopyData sub-messages.
pub mod tag {
    /// XLogData (server → client).
    pub const XLOG_DATA: u8 = b'w';
    /// Primary keepalive (server → client).
    pub const PRIMARY_KEEPALIVE: u8 = b'k';
    /// Standby status update (client → server).
    pub const STANDBY_STATUS_UPDATE: u8 = b'r';
    /// Hot standby feedback (client → server).
    pub const HOT_STANDBY_FEEDBACK: u8 = b'h';
}

/// XLogData (`'w'`): WAL (physical) or one pgoutput message (logical).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct XLogData<'a> {
    /// LSN of the first byte of `data` (logical: of the write, or 0).
    pub start: Lsn,
    /// The server's current end of WAL (logical: as `start`).
    pub end: Lsn,
    /// When the server sent it.
    pub send_time: PgTimestamp,
    /// The WAL bytes or the pgoutput message.
    pub data: &'a [u8],
}

/// Primary keepalive (`'k'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrimaryKeepalive {
    /// The server's current end of WAL (logical: the decoder's sent position).
    pub wal_end: Lsn,
    /// When the server sent it.
    pub send_time: PgTimestamp,
    /// Whether the client should answer with a status update at once.
    pub reply_requested: bool,
}

/// Standby status update (`'r'`): positions are "last byte + 1".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StandbyStatusUpdate {
    /// Received and written.
    pub write: Lsn,
    /// Flushed to durable storage.
    pub flush: Lsn,
    /// Applied (replayed).
    pub apply: Lsn,
    /// When the client sent it.
    pub send_time: PgTimestamp,
    /// Whether the server should answer with a keepalive at once.
    pub reply_requested: bool,
}

/// Hot standby feedback (`'h'`); an xid of 0 means "none", and both 0 stops feedback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HotStandbyFeedback {
    /// When the client sent it.
    pub send_time: PgTimestamp,
    /// The standby's oldest running xmin.
    pub xmin: Xid,
    /// Epoch of `xmin`.
    pub xmin_epoch: u32,
    /// The oldest catalog xmin of the standby's slots.
    pub catalog_xmin: Xid,
    /// Epoch of `catalog_xmin`.
    pub catalog_xmin_epoch: u32,
}

/// Any CopyData payload of a replication connection, borrowing from the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplicationMessage<'a> {
    /// `'w'`.
    XLogData(XLogData<'a>),
    /// `'k'`.
    PrimaryKeepalive(PrimaryKeepalive),
    /// `'r'`.
    StandbyStatusUpdate(StandbyStatusUpdate),
    /// `'h'`.
    HotStandbyFeedback(HotStandbyFeedback),
}

impl<'a> ReplicationMessage<'a> {
    /// Decodes a CopyData payload of either direction.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let msg = match r.u8()? {
            tag::XLOG_DATA => ReplicationMessage::XLogData(XLogData {
                start: Lsn(r.u64()?),
                end: Lsn(r.u64()?),
                send_time: PgTimestamp(r.i64()?),
                data: r.take_rest(),
            }),
            tag::PRIMARY_KEEPALIVE => ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: Lsn(r.u64()?),
                send_time: PgTimestamp(r.i64()?),
                reply_requested: reply_flag(&mut r)?,
            }),
            tag::STANDBY_STATUS_UPDATE => {
                ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                    write: Lsn(r.u64()?),
                    flush: Lsn(r.u64()?),
                    apply: Lsn(r.u64()?),
                    send_time: PgTimestamp(r.i64()?),
                    reply_requested: reply_flag(&mut r)?,
                })
            }
            tag::HOT_STANDBY_FEEDBACK => {
                ReplicationMessage::HotStandbyFeedback(HotStandbyFeedback {
                    send_time: PgTimestamp(r.i64()?),
                    xmin: Xid(r.u32()?),
                    xmin_epoch: r.u32()?,
                    catalog_xmin: Xid(r.u32()?),
                    catalog_xmin_epoch: r.u32()?,
                })
            }
            other => return Err(DecodeError::UnknownTag { tag: other }),
        };
        r.finish()?;
        Ok(msg)
    }

    /// Decodes a payload the server sent (`'w'` or `'k'`); client types are unknown tags.
    pub fn decode_from_server(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let msg = Self::decode(payload)?;
        if msg.is_from_server() {
            Ok(msg)
        } else {
            Err(DecodeError::UnknownTag { tag: msg.tag() })
        }
    }

    /// Decodes a payload a client sent (`'r'` or `'h'`); server types are unknown tags.
    pub fn decode_from_client(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let msg = Self::decode(payload)?;
        if msg.is_from_server() {
            Err(DecodeError::UnknownTag { tag: msg.tag() })
        } else {
            Ok(msg)
        }
    }

    /// Whether the server sends this kind of message.
    pub fn is_from_server(&self) -> bool {
        matches!(
            self,
            ReplicationMessage::XLogData(_) | ReplicationMessage::PrimaryKeepalive(_)
        )
    }

    /// The type byte.
    pub fn tag(&self) -> u8 {
        match self {
            ReplicationMessage::XLogData(_) => tag::XLOG_DATA,
            ReplicationMessage::PrimaryKeepalive(_) => tag::PRIMARY_KEEPALIVE,
            ReplicationMessage::StandbyStatusUpdate(_) => tag::STANDBY_STATUS_UPDATE,
            ReplicationMessage::HotStandbyFeedback(_) => tag::HOT_STANDBY_FEEDBACK,
        }
    }

    /// The payload's length in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            ReplicationMessage::XLogData(m) => 25 + m.data.len(),
            ReplicationMessage::PrimaryKeepalive(_) => 18,
            ReplicationMessage::StandbyStatusUpdate(_) => 34,
            ReplicationMessage::HotStandbyFeedback(_) => 25,
        }
    }

    /// Appends the CopyData payload (type byte included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        out.put_u8(self.tag());
        match self {
            ReplicationMessage::XLogData(m) => {
                out.put_u64(m.start.0);
                out.put_u64(m.end.0);
                out.put_i64(m.send_time.0);
                out.extend_from_slice(m.data);
            }
            ReplicationMessage::PrimaryKeepalive(m) => {
                out.put_u64(m.wal_end.0);
                out.put_i64(m.send_time.0);
                out.put_u8(m.reply_requested.into());
            }
            ReplicationMessage::StandbyStatusUpdate(m) => {
                out.put_u64(m.write.0);
                out.put_u64(m.flush.0);
                out.put_u64(m.apply.0);
                out.put_i64(m.send_time.0);
                out.put_u8(m.reply_requested.into());
            }
            ReplicationMessage::HotStandbyFeedback(m) => {
                out.put_i64(m.send_time.0);
                out.put_u32(m.xmin.0);
                out.put_u32(m.xmin_epoch);
                out.put_u32(m.catalog_xmin.0);
                out.put_u32(m.catalog_xmin_epoch);
            }
        }
    }

    /// The payload in a new buffer.
    pub fn to_bytes(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }
}

fn reply_flag(r: &mut Reader<'_>) -> Result<bool, DecodeError> {
    let at = r.offset();
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Invalid {
            what: "reply-requested flag",
            offset: at,
        }),
    }
}

#[cfg(test)]
mod tests;
