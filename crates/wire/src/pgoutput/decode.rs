//! Decoding pgoutput messages: one reader per message type, each taking the bytes after the
//! type byte, plus the field readers they share.

use pgyard_types::{Lsn, PgTimestamp, Xid};

use super::{
    tag, AbortInfo, Begin, Commit, CommitPrepared, Delete, Insert, LogicalMessage, OldTuple,
    Origin, PgOutputMessage, Prepare, Relation, RelationColumn, ReplicaIdentity, RollbackPrepared,
    Seq, SeqItem, StreamAbort, StreamCommit, StreamStart, Truncate, TupleData, TupleValue, Type,
    Update, TRUNCATE_CASCADE, TRUNCATE_RESTART_IDENTITY,
};
use crate::buf::{DecodeError, Reader};

impl<'a> PgOutputMessage<'a> {
    /// Decodes one pgoutput message; `in_stream` says whether it was sent inside a stream
    /// block. The whole payload must be used.
    pub fn decode(payload: &'a [u8], in_stream: bool) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let t = r.u8()?;
        let r = &mut r;
        let msg = match t {
            tag::BEGIN => PgOutputMessage::Begin(begin(r)?),
            tag::COMMIT => PgOutputMessage::Commit(commit(r)?),
            tag::ORIGIN => PgOutputMessage::Origin(origin(r)?),
            tag::RELATION => PgOutputMessage::Relation(relation(r, in_stream)?),
            tag::TYPE => PgOutputMessage::Type(type_(r, in_stream)?),
            tag::INSERT => PgOutputMessage::Insert(insert(r, in_stream)?),
            tag::UPDATE => PgOutputMessage::Update(update(r, in_stream)?),
            tag::DELETE => PgOutputMessage::Delete(delete(r, in_stream)?),
            tag::TRUNCATE => PgOutputMessage::Truncate(truncate(r, in_stream)?),
            tag::MESSAGE => PgOutputMessage::Message(message(r, in_stream)?),
            tag::STREAM_START => PgOutputMessage::StreamStart(stream_start(r)?),
            tag::STREAM_STOP => PgOutputMessage::StreamStop,
            tag::STREAM_COMMIT => PgOutputMessage::StreamCommit(stream_commit(r)?),
            tag::STREAM_ABORT => PgOutputMessage::StreamAbort(stream_abort(r)?),
            tag::BEGIN_PREPARE => PgOutputMessage::BeginPrepare(prepare(r)?),
            tag::PREPARE => {
                zero_flags(r, "prepare flags")?;
                PgOutputMessage::Prepare(prepare(r)?)
            }
            tag::STREAM_PREPARE => {
                zero_flags(r, "stream prepare flags")?;
                PgOutputMessage::StreamPrepare(prepare(r)?)
            }
            tag::COMMIT_PREPARED => PgOutputMessage::CommitPrepared(commit_prepared(r)?),
            tag::ROLLBACK_PREPARED => PgOutputMessage::RollbackPrepared(rollback_prepared(r)?),
            other => return Err(DecodeError::UnknownTag { tag: other }),
        };
        r.finish()?;
        Ok(msg)
    }
}

// ---------------------------------------------------------------------------------------------
// one reader per message (the type byte is already read)

/// The (sub)transaction id a change carries right after its type byte inside a stream block.
fn stream_xid(r: &mut Reader<'_>, in_stream: bool) -> Result<Option<Xid>, DecodeError> {
    if in_stream {
        Ok(Some(Xid(r.u32()?)))
    } else {
        Ok(None)
    }
}

fn begin(r: &mut Reader<'_>) -> Result<Begin, DecodeError> {
    Ok(Begin {
        final_lsn: lsn(r)?,
        commit_time: ts(r)?,
        xid: Xid(r.u32()?),
    })
}

fn commit(r: &mut Reader<'_>) -> Result<Commit, DecodeError> {
    zero_flags(r, "commit flags")?;
    Ok(Commit {
        commit_lsn: lsn(r)?,
        end_lsn: lsn(r)?,
        commit_time: ts(r)?,
    })
}

fn origin<'a>(r: &mut Reader<'a>) -> Result<Origin<'a>, DecodeError> {
    Ok(Origin {
        commit_lsn: lsn(r)?,
        name: r.cstr()?,
    })
}

fn relation<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Relation<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let oid = r.u32()?;
    let namespace = r.cstr()?;
    let name = r.cstr()?;
    let at = r.offset();
    let replica_identity = ReplicaIdentity::from_byte(r.u8()?).ok_or(DecodeError::Invalid {
        what: "replica identity (expected 'd', 'n', 'f' or 'i')",
        offset: at,
    })?;
    let n = r.count16(RelationColumn::MIN_BYTES)?;
    Ok(Relation {
        xid,
        oid,
        namespace,
        name,
        replica_identity,
        columns: Seq::read(r, n)?,
    })
}

fn type_<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Type<'a>, DecodeError> {
    Ok(Type {
        xid: stream_xid(r, in_stream)?,
        oid: r.u32()?,
        namespace: r.cstr()?,
        name: r.cstr()?,
    })
}

fn insert<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Insert<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let relation = r.u32()?;
    expect_marker(r, b'N', "new tuple marker (expected 'N')")?;
    Ok(Insert {
        xid,
        relation,
        new: tuple(r)?,
    })
}

fn update<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Update<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let relation = r.u32()?;
    let at = r.offset();
    let old = match r.u8()? {
        b'N' => None,
        b'K' => Some(OldTuple::Key(tuple(r)?)),
        b'O' => Some(OldTuple::Full(tuple(r)?)),
        _ => {
            return Err(DecodeError::Invalid {
                what: "update tuple marker (expected 'N', 'O' or 'K')",
                offset: at,
            })
        }
    };
    if old.is_some() {
        expect_marker(r, b'N', "new tuple marker (expected 'N')")?;
    }
    Ok(Update {
        xid,
        relation,
        old,
        new: tuple(r)?,
    })
}

fn delete<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Delete<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let relation = r.u32()?;
    let at = r.offset();
    let old = match r.u8()? {
        b'K' => OldTuple::Key(tuple(r)?),
        b'O' => OldTuple::Full(tuple(r)?),
        _ => {
            return Err(DecodeError::Invalid {
                what: "delete tuple marker (expected 'O' or 'K')",
                offset: at,
            })
        }
    };
    Ok(Delete { xid, relation, old })
}

fn truncate<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<Truncate<'a>, DecodeError> {
    let xid = stream_xid(r, in_stream)?;
    let count_at = r.offset();
    let n = r.i32()?;
    let at = r.offset();
    let options = r.u8()?;
    if options & !(TRUNCATE_CASCADE | TRUNCATE_RESTART_IDENTITY) != 0 {
        return Err(DecodeError::Invalid {
            what: "truncate options",
            offset: at,
        });
    }
    // The count precedes the options byte, so check it against what follows them.
    if n < 0 || (n as usize).saturating_mul(4) > r.remaining() {
        return Err(DecodeError::InvalidCount {
            count: n.into(),
            offset: count_at,
        });
    }
    Ok(Truncate {
        xid,
        cascade: options & TRUNCATE_CASCADE != 0,
        restart_identity: options & TRUNCATE_RESTART_IDENTITY != 0,
        relations: Seq::read(r, n as usize)?,
    })
}

fn message<'a>(r: &mut Reader<'a>, in_stream: bool) -> Result<LogicalMessage<'a>, DecodeError> {
    Ok(LogicalMessage {
        xid: stream_xid(r, in_stream)?,
        transactional: flag(r, "message flags")?,
        lsn: lsn(r)?,
        prefix: r.cstr()?,
        content: sized_bytes(r)?,
    })
}

fn stream_start(r: &mut Reader<'_>) -> Result<StreamStart, DecodeError> {
    Ok(StreamStart {
        xid: Xid(r.u32()?),
        first_segment: flag(r, "stream start first-segment flag")?,
    })
}

fn stream_commit(r: &mut Reader<'_>) -> Result<StreamCommit, DecodeError> {
    let xid = Xid(r.u32()?);
    zero_flags(r, "stream commit flags")?;
    Ok(StreamCommit {
        xid,
        commit_lsn: lsn(r)?,
        end_lsn: lsn(r)?,
        commit_time: ts(r)?,
    })
}

fn stream_abort(r: &mut Reader<'_>) -> Result<StreamAbort, DecodeError> {
    let xid = Xid(r.u32()?);
    let subxid = Xid(r.u32()?);
    // Told apart by length: v4 with parallel streaming appends LSN and time.
    let abort = if r.is_empty() {
        None
    } else {
        Some(AbortInfo {
            lsn: lsn(r)?,
            time: ts(r)?,
        })
    };
    Ok(StreamAbort { xid, subxid, abort })
}

/// The body Begin Prepare, Prepare and Stream Prepare share (after the flags of the latter
/// two).
fn prepare<'a>(r: &mut Reader<'a>) -> Result<Prepare<'a>, DecodeError> {
    Ok(Prepare {
        prepare_lsn: lsn(r)?,
        end_lsn: lsn(r)?,
        prepare_time: ts(r)?,
        xid: Xid(r.u32()?),
        gid: r.cstr()?,
    })
}

fn commit_prepared<'a>(r: &mut Reader<'a>) -> Result<CommitPrepared<'a>, DecodeError> {
    zero_flags(r, "commit prepared flags")?;
    Ok(CommitPrepared {
        commit_lsn: lsn(r)?,
        end_lsn: lsn(r)?,
        commit_time: ts(r)?,
        xid: Xid(r.u32()?),
        gid: r.cstr()?,
    })
}

fn rollback_prepared<'a>(r: &mut Reader<'a>) -> Result<RollbackPrepared<'a>, DecodeError> {
    zero_flags(r, "rollback prepared flags")?;
    Ok(RollbackPrepared {
        prepare_end_lsn: lsn(r)?,
        rollback_end_lsn: lsn(r)?,
        prepare_time: ts(r)?,
        rollback_time: ts(r)?,
        xid: Xid(r.u32()?),
        gid: r.cstr()?,
    })
}

// ---------------------------------------------------------------------------------------------
// field readers

fn lsn(r: &mut Reader<'_>) -> Result<Lsn, DecodeError> {
    r.u64().map(Lsn)
}

fn ts(r: &mut Reader<'_>) -> Result<PgTimestamp, DecodeError> {
    r.i64().map(PgTimestamp)
}

/// A byte that must be 0 or 1.
pub(super) fn flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, DecodeError> {
    let at = r.offset();
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Invalid { what, offset: at }),
    }
}

/// A flags byte that must be 0.
fn zero_flags(r: &mut Reader<'_>, what: &'static str) -> Result<(), DecodeError> {
    let at = r.offset();
    match r.u8()? {
        0 => Ok(()),
        _ => Err(DecodeError::Invalid { what, offset: at }),
    }
}

fn expect_marker(r: &mut Reader<'_>, want: u8, what: &'static str) -> Result<(), DecodeError> {
    let at = r.offset();
    if r.u8()? == want {
        Ok(())
    } else {
        Err(DecodeError::Invalid { what, offset: at })
    }
}

/// An `Int32` length (never negative) and that many bytes.
pub(super) fn sized_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    let at = r.offset();
    let len = r.i32()?;
    if len < 0 || len as usize > r.remaining() {
        return Err(DecodeError::InvalidLength {
            length: len.into(),
            offset: at,
        });
    }
    r.bytes(len as usize)
}

fn tuple<'a>(r: &mut Reader<'a>) -> Result<TupleData<'a>, DecodeError> {
    let n = r.count16(TupleValue::MIN_BYTES)?;
    Seq::read(r, n)
}
