//! Generators for streaming-replication CopyData messages ([`OwnedReplication`]).

use arbitrary::{Arbitrary, Result, Unstructured};
use pgyard_types::{Lsn, PgTimestamp, Xid};

use super::{bytes, edge};
use crate::replication::{
    HotStandbyFeedback, PrimaryKeepalive, ReplicationMessage, StandbyStatusUpdate, XLogData,
};

/// WAL payloads stay below this (a real server sends up to about 128 kB per message).
const WAL_MAX: usize = 128 * 1024;

/// A generated replication message: XLogData, primary keepalive, standby status update or hot
/// standby feedback; [`OwnedReplication::message`] lends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedReplication {
    /// The message with an empty WAL payload; `data` is lent in its place.
    shape: ReplicationMessage<'static>,
    data: Vec<u8>,
}

fn lsn(u: &mut Unstructured<'_>) -> Result<Lsn> {
    edge(u).map(Lsn)
}

fn ts(u: &mut Unstructured<'_>) -> Result<PgTimestamp> {
    edge(u).map(PgTimestamp)
}

fn xid(u: &mut Unstructured<'_>) -> Result<Xid> {
    edge(u).map(Xid)
}

impl<'a> Arbitrary<'a> for OwnedReplication {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        let mut data = Vec::new();
        let shape = match u.int_in_range(0u8..=3)? {
            0 => {
                data = bytes(u, WAL_MAX)?;
                ReplicationMessage::XLogData(XLogData {
                    start: lsn(u)?,
                    end: lsn(u)?,
                    send_time: ts(u)?,
                    data: &[],
                })
            }
            1 => ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: lsn(u)?,
                send_time: ts(u)?,
                reply_requested: u.arbitrary()?,
            }),
            2 => ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                write: lsn(u)?,
                flush: lsn(u)?,
                apply: lsn(u)?,
                send_time: ts(u)?,
                reply_requested: u.arbitrary()?,
            }),
            _ => ReplicationMessage::HotStandbyFeedback(HotStandbyFeedback {
                send_time: ts(u)?,
                xmin: xid(u)?,
                xmin_epoch: edge(u)?,
                catalog_xmin: xid(u)?,
                catalog_xmin_epoch: edge(u)?,
            }),
        };
        Ok(OwnedReplication { shape, data })
    }
}

impl OwnedReplication {
    /// The generated message, borrowing from `self`.
    pub fn message(&self) -> ReplicationMessage<'_> {
        match self.shape {
            ReplicationMessage::XLogData(x) => ReplicationMessage::XLogData(XLogData {
                data: &self.data,
                ..x
            }),
            other => other,
        }
    }
}
