//! Encoding pgoutput messages: a decoded message re-encodes to the exact bytes it came from.

use bytes::{BufMut, BytesMut};
use pgyard_types::Xid;

use super::{
    EncodeError, PgOutputMessage, Prepare, TupleData, TRUNCATE_CASCADE, TRUNCATE_RESTART_IDENTITY,
};
use crate::frame::put_cstr;

impl PgOutputMessage<'_> {
    /// Appends the message's bytes to `out` (the xid prefix of changes is written when
    /// their `xid` is `Some`). On error `out` is left as it was.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let start = out.len();
        let result = self.encode_inner(out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    /// The message's bytes in a new buffer.
    pub fn to_bytes(&self) -> Result<BytesMut, EncodeError> {
        let mut out = BytesMut::new();
        self.encode(&mut out)?;
        Ok(out)
    }

    fn encode_inner(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u8(self.tag());
        let put_xid = |out: &mut BytesMut, xid: Option<Xid>| {
            if let Some(x) = xid {
                out.put_u32(x.0);
            }
        };
        match self {
            PgOutputMessage::Begin(m) => {
                out.put_u64(m.final_lsn.0);
                out.put_i64(m.commit_time.0);
                out.put_u32(m.xid.0);
            }
            PgOutputMessage::Commit(m) => {
                out.put_u8(0);
                out.put_u64(m.commit_lsn.0);
                out.put_u64(m.end_lsn.0);
                out.put_i64(m.commit_time.0);
            }
            PgOutputMessage::Origin(m) => {
                out.put_u64(m.commit_lsn.0);
                put_cstr(out, m.name, "origin name")?;
            }
            PgOutputMessage::Relation(m) => {
                put_xid(out, m.xid);
                out.put_u32(m.oid);
                put_cstr(out, m.namespace, "relation namespace")?;
                put_cstr(out, m.name, "relation name")?;
                out.put_u8(m.replica_identity.byte());
                put_count16(out, m.columns.len(), "relation columns")?;
                m.columns.write_items(out)?;
            }
            PgOutputMessage::Type(m) => {
                put_xid(out, m.xid);
                out.put_u32(m.oid);
                put_cstr(out, m.namespace, "type namespace")?;
                put_cstr(out, m.name, "type name")?;
            }
            PgOutputMessage::Insert(m) => {
                put_xid(out, m.xid);
                out.put_u32(m.relation);
                out.put_u8(b'N');
                put_tuple(out, &m.new)?;
            }
            PgOutputMessage::Update(m) => {
                put_xid(out, m.xid);
                out.put_u32(m.relation);
                if let Some(old) = &m.old {
                    out.put_u8(old.marker());
                    put_tuple(out, old.tuple())?;
                }
                out.put_u8(b'N');
                put_tuple(out, &m.new)?;
            }
            PgOutputMessage::Delete(m) => {
                put_xid(out, m.xid);
                out.put_u32(m.relation);
                out.put_u8(m.old.marker());
                put_tuple(out, m.old.tuple())?;
            }
            PgOutputMessage::Truncate(m) => {
                put_xid(out, m.xid);
                let n = m.relations.len();
                let count = i32::try_from(n).map_err(|_| EncodeError::TooLong {
                    what: "truncated relations",
                    count: n,
                    max: i32::MAX as usize,
                })?;
                out.put_i32(count);
                let mut options = 0;
                if m.cascade {
                    options |= TRUNCATE_CASCADE;
                }
                if m.restart_identity {
                    options |= TRUNCATE_RESTART_IDENTITY;
                }
                out.put_u8(options);
                m.relations.write_items(out)?;
            }
            PgOutputMessage::Message(m) => {
                put_xid(out, m.xid);
                out.put_u8(m.transactional.into());
                out.put_u64(m.lsn.0);
                put_cstr(out, m.prefix, "message prefix")?;
                put_sized(out, m.content, "message content")?;
            }
            PgOutputMessage::StreamStart(m) => {
                out.put_u32(m.xid.0);
                out.put_u8(m.first_segment.into());
            }
            PgOutputMessage::StreamStop => {}
            PgOutputMessage::StreamCommit(m) => {
                out.put_u32(m.xid.0);
                out.put_u8(0);
                out.put_u64(m.commit_lsn.0);
                out.put_u64(m.end_lsn.0);
                out.put_i64(m.commit_time.0);
            }
            PgOutputMessage::StreamAbort(m) => {
                out.put_u32(m.xid.0);
                out.put_u32(m.subxid.0);
                if let Some(a) = m.abort {
                    out.put_u64(a.lsn.0);
                    out.put_i64(a.time.0);
                }
            }
            PgOutputMessage::BeginPrepare(m) => put_prepare(out, m)?,
            PgOutputMessage::Prepare(m) | PgOutputMessage::StreamPrepare(m) => {
                out.put_u8(0);
                put_prepare(out, m)?;
            }
            PgOutputMessage::CommitPrepared(m) => {
                out.put_u8(0);
                out.put_u64(m.commit_lsn.0);
                out.put_u64(m.end_lsn.0);
                out.put_i64(m.commit_time.0);
                out.put_u32(m.xid.0);
                put_cstr(out, m.gid, "gid")?;
            }
            PgOutputMessage::RollbackPrepared(m) => {
                out.put_u8(0);
                out.put_u64(m.prepare_end_lsn.0);
                out.put_u64(m.rollback_end_lsn.0);
                out.put_i64(m.prepare_time.0);
                out.put_i64(m.rollback_time.0);
                out.put_u32(m.xid.0);
                put_cstr(out, m.gid, "gid")?;
            }
        }
        Ok(())
    }
}

fn put_prepare(out: &mut BytesMut, m: &Prepare<'_>) -> Result<(), EncodeError> {
    out.put_u64(m.prepare_lsn.0);
    out.put_u64(m.end_lsn.0);
    out.put_i64(m.prepare_time.0);
    out.put_u32(m.xid.0);
    put_cstr(out, m.gid, "gid")
}

pub(super) fn put_sized(
    out: &mut BytesMut,
    v: &[u8],
    what: &'static str,
) -> Result<(), EncodeError> {
    let len = i32::try_from(v.len()).map_err(|_| EncodeError::TooLong {
        what,
        count: v.len(),
        max: i32::MAX as usize,
    })?;
    out.put_i32(len);
    out.extend_from_slice(v);
    Ok(())
}

fn put_count16(out: &mut BytesMut, n: usize, what: &'static str) -> Result<(), EncodeError> {
    let count = i16::try_from(n).map_err(|_| EncodeError::TooLong {
        what,
        count: n,
        max: i16::MAX as usize,
    })?;
    out.put_i16(count);
    Ok(())
}

fn put_tuple(out: &mut BytesMut, t: &TupleData<'_>) -> Result<(), EncodeError> {
    put_count16(out, t.len(), "tuple columns")?;
    t.write_items(out)
}
