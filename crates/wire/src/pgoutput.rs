//! Logical replication's pgoutput protocol, versions 1 to 4.
//!
//! Each message is the payload of one XLogData (`'w'`) CopyData message, or one row of
//! `pg_logical_slot_peek_binary_changes`. Decoding borrows every string, tuple value and list
//! from the payload and allocates nothing: lists ([`Seq`]) are validated once and then iterated
//! lazily. Encoding writes into a `BytesMut`; a decoded message re-encodes to the exact bytes it
//! came from, and lists can also be built from slices ([`Seq::from_slice`]) to generate streams.
//!
//! Inside a Stream Start … Stream Stop block, Relation, Type, Insert, Update, Delete, Truncate
//! and Message carry the (sub)transaction id after the type byte. [`decode`] takes that context
//! as a flag; [`PgOutputDecoder`] tracks it by watching Stream Start and Stream Stop.

use std::fmt;

use bytes::{BufMut, BytesMut};
use pgyard_types::{Lsn, PgTimestamp, Xid};

use crate::buf::{DecodeError, Reader};
use crate::frame::put_cstr;
pub use crate::frame::EncodeError;

/// A PostgreSQL object id (relation, type).
pub type Oid = u32;

/// The type bytes of pgoutput messages.
pub mod tag {
    /// Begin.
    pub const BEGIN: u8 = b'B';
    /// Commit.
    pub const COMMIT: u8 = b'C';
    /// Origin.
    pub const ORIGIN: u8 = b'O';
    /// Relation.
    pub const RELATION: u8 = b'R';
    /// Type.
    pub const TYPE: u8 = b'Y';
    /// Insert.
    pub const INSERT: u8 = b'I';
    /// Update.
    pub const UPDATE: u8 = b'U';
    /// Delete.
    pub const DELETE: u8 = b'D';
    /// Truncate.
    pub const TRUNCATE: u8 = b'T';
    /// Logical decoding message (`pg_logical_emit_message`).
    pub const MESSAGE: u8 = b'M';
    /// Stream Start (v2).
    pub const STREAM_START: u8 = b'S';
    /// Stream Stop (v2).
    pub const STREAM_STOP: u8 = b'E';
    /// Stream Commit (v2).
    pub const STREAM_COMMIT: u8 = b'c';
    /// Stream Abort (v2; abort LSN and time from v4 with parallel streaming).
    pub const STREAM_ABORT: u8 = b'A';
    /// Begin Prepare (v3).
    pub const BEGIN_PREPARE: u8 = b'b';
    /// Prepare (v3).
    pub const PREPARE: u8 = b'P';
    /// Commit Prepared (v3).
    pub const COMMIT_PREPARED: u8 = b'K';
    /// Rollback Prepared (v3).
    pub const ROLLBACK_PREPARED: u8 = b'r';
    /// Stream Prepare (v3).
    pub const STREAM_PREPARE: u8 = b'p';
}

/// A pgoutput protocol version (the `proto_version` option).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtoVersion {
    /// PostgreSQL 10: transactions, relations, types, row changes (truncate, messages later).
    V1 = 1,
    /// PostgreSQL 14: streaming of in-progress transactions.
    V2 = 2,
    /// PostgreSQL 15: two-phase commit.
    V3 = 3,
    /// PostgreSQL 16: parallel streaming (abort LSN and time in Stream Abort).
    V4 = 4,
}

impl ProtoVersion {
    /// Every version, oldest first.
    pub const ALL: [ProtoVersion; 4] = [
        ProtoVersion::V1,
        ProtoVersion::V2,
        ProtoVersion::V3,
        ProtoVersion::V4,
    ];

    /// The highest version PostgreSQL 16 to 18 speak.
    pub const MAX: ProtoVersion = ProtoVersion::V4;

    /// The number sent as `proto_version`.
    pub fn number(self) -> u32 {
        self as u32
    }

    /// The version with that number, if it exists.
    pub fn from_number(n: u32) -> Option<ProtoVersion> {
        ProtoVersion::ALL.into_iter().find(|v| v.number() == n)
    }
}

/// One column value of a TupleData.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TupleValue<'a> {
    /// `'n'`: SQL NULL.
    Null,
    /// `'u'`: an unchanged TOASTed value that was not sent (keep the existing one).
    UnchangedToast,
    /// `'t'`: the value in the type's text output form.
    Text(&'a [u8]),
    /// `'b'`: the value in the type's binary send form (`binary` option).
    Binary(&'a [u8]),
}

/// One column of a Relation message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RelationColumn<'a> {
    /// Whether the column is part of the replica identity (flag 1).
    pub key: bool,
    /// Column name.
    pub name: &'a [u8],
    /// OID of the column's type.
    pub type_oid: Oid,
    /// Type modifier (`atttypmod`; -1 when none).
    pub type_modifier: i32,
}

/// The element types of [`Seq`]: how one element is read and written.
pub trait SeqItem<'a>: Copy + PartialEq + fmt::Debug {
    /// The fewest bytes one element takes on the wire (bounds counts read from a peer).
    const MIN_BYTES: usize;
    /// Reads one element.
    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError>;
    /// Writes one element.
    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError>;
}

/// A list inside a message: tuple values, relation columns or relation OIDs.
///
/// A decoded list borrows its validated bytes and decodes elements as it is iterated; a list
/// built for encoding borrows a slice. Equality compares elements, whatever the source.
#[derive(Clone, Copy)]
pub struct Seq<'a, T> {
    repr: Repr<'a, T>,
}

#[derive(Clone, Copy)]
enum Repr<'a, T> {
    Wire {
        count: usize,
        bytes: &'a [u8],
        base: usize,
    },
    Slice(&'a [T]),
}

/// The columns of a row change (`TupleData`).
pub type TupleData<'a> = Seq<'a, TupleValue<'a>>;

/// Iterator over a [`Seq`].
#[derive(Clone, Debug)]
pub struct SeqIter<'a, T> {
    inner: IterRepr<'a, T>,
}

#[derive(Clone, Debug)]
enum IterRepr<'a, T> {
    Wire { r: Reader<'a>, left: usize },
    Slice(std::slice::Iter<'a, T>),
}

impl<'a, T: SeqItem<'a>> Seq<'a, T> {
    /// A list of the given elements, for encoding.
    pub fn from_slice(items: &'a [T]) -> Self {
        Seq {
            repr: Repr::Slice(items),
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self.repr {
            Repr::Wire { count, .. } => count,
            Repr::Slice(s) => s.len(),
        }
    }

    /// Whether the list has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements in order.
    pub fn iter(&self) -> SeqIter<'a, T> {
        let inner = match self.repr {
            Repr::Wire { count, bytes, base } => IterRepr::Wire {
                r: Reader::with_base(bytes, base),
                left: count,
            },
            Repr::Slice(s) => IterRepr::Slice(s.iter()),
        };
        SeqIter { inner }
    }

    /// Reads `count` elements (already checked against the remaining bytes) and keeps their
    /// bytes.
    fn read(r: &mut Reader<'a>, count: usize) -> Result<Self, DecodeError> {
        let base = r.offset();
        let start = r.rest();
        for _ in 0..count {
            T::read(r)?;
        }
        let used = start.len() - r.remaining();
        Ok(Seq {
            repr: Repr::Wire {
                count,
                bytes: &start[..used],
                base,
            },
        })
    }

    fn write_items(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        match self.repr {
            Repr::Wire { bytes, .. } => out.extend_from_slice(bytes),
            Repr::Slice(items) => {
                for item in items {
                    item.write(out)?;
                }
            }
        }
        Ok(())
    }
}

impl<'a, T: SeqItem<'a>> Iterator for SeqIter<'a, T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match &mut self.inner {
            IterRepr::Wire { r, left } => {
                if *left == 0 {
                    return None;
                }
                *left -= 1;
                // The bytes were validated when the list was decoded, so this read succeeds;
                // should it not, the iteration just ends.
                match T::read(r) {
                    Ok(item) => Some(item),
                    Err(_) => {
                        *left = 0;
                        None
                    }
                }
            }
            IterRepr::Slice(it) => it.next().copied(),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match &self.inner {
            IterRepr::Wire { left, .. } => (0, Some(*left)),
            IterRepr::Slice(it) => it.size_hint(),
        }
    }
}

impl<'a, T: SeqItem<'a>> IntoIterator for Seq<'a, T> {
    type Item = T;
    type IntoIter = SeqIter<'a, T>;
    fn into_iter(self) -> SeqIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: SeqItem<'a>> IntoIterator for &Seq<'a, T> {
    type Item = T;
    type IntoIter = SeqIter<'a, T>;
    fn into_iter(self) -> SeqIter<'a, T> {
        self.iter()
    }
}

impl<'a, T: SeqItem<'a>> PartialEq for Seq<'a, T> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl<'a, T: SeqItem<'a>> Eq for Seq<'a, T> {}

impl<'a, T: SeqItem<'a>> fmt::Debug for Seq<'a, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> SeqItem<'a> for TupleValue<'a> {
    const MIN_BYTES: usize = 1;

    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let at = r.offset();
        match r.u8()? {
            b'n' => Ok(TupleValue::Null),
            b'u' => Ok(TupleValue::UnchangedToast),
            b't' => Ok(TupleValue::Text(sized_bytes(r)?)),
            b'b' => Ok(TupleValue::Binary(sized_bytes(r)?)),
            _ => Err(DecodeError::Invalid {
                what: "tuple column kind (expected 'n', 'u', 't' or 'b')",
                offset: at,
            }),
        }
    }

    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        match self {
            TupleValue::Null => out.put_u8(b'n'),
            TupleValue::UnchangedToast => out.put_u8(b'u'),
            TupleValue::Text(v) => {
                out.put_u8(b't');
                put_sized(out, v, "tuple value")?;
            }
            TupleValue::Binary(v) => {
                out.put_u8(b'b');
                put_sized(out, v, "tuple value")?;
            }
        }
        Ok(())
    }
}

impl<'a> SeqItem<'a> for RelationColumn<'a> {
    // flags, an empty name's NUL, type OID, type modifier
    const MIN_BYTES: usize = 1 + 1 + 4 + 4;

    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        let key = flag(r, "relation column flags")?;
        Ok(RelationColumn {
            key,
            name: r.cstr()?,
            type_oid: r.u32()?,
            type_modifier: r.i32()?,
        })
    }

    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u8(self.key.into());
        put_cstr(out, self.name, "column name")?;
        out.put_u32(self.type_oid);
        out.put_i32(self.type_modifier);
        Ok(())
    }
}

impl<'a> SeqItem<'a> for Oid {
    const MIN_BYTES: usize = 4;

    fn read(r: &mut Reader<'a>) -> Result<Self, DecodeError> {
        r.u32()
    }

    fn write(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        out.put_u32(*self);
        Ok(())
    }
}

/// A relation's replica identity setting (`relreplident`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplicaIdentity {
    /// `'d'`: the primary key.
    Default,
    /// `'n'`: nothing.
    Nothing,
    /// `'f'`: the whole row.
    Full,
    /// `'i'`: a chosen unique index.
    Index,
}

impl ReplicaIdentity {
    /// The byte on the wire.
    pub fn byte(self) -> u8 {
        match self {
            ReplicaIdentity::Default => b'd',
            ReplicaIdentity::Nothing => b'n',
            ReplicaIdentity::Full => b'f',
            ReplicaIdentity::Index => b'i',
        }
    }

    /// The setting a wire byte stands for.
    pub fn from_byte(b: u8) -> Option<ReplicaIdentity> {
        match b {
            b'd' => Some(ReplicaIdentity::Default),
            b'n' => Some(ReplicaIdentity::Nothing),
            b'f' => Some(ReplicaIdentity::Full),
            b'i' => Some(ReplicaIdentity::Index),
            _ => None,
        }
    }
}

/// Begin (`'B'`): a transaction's changes follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Begin {
    /// LSN of the transaction's commit record (its start).
    pub final_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
}

/// Commit (`'C'`): the end of a transaction (flags are always 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Commit {
    /// LSN of the commit record (its start; equals Begin's final LSN).
    pub commit_lsn: Lsn,
    /// End of the commit record.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
}

/// Origin (`'O'`): the transaction was replayed from another node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin<'a> {
    /// The commit LSN on the origin server.
    pub commit_lsn: Lsn,
    /// The replication origin's name.
    pub name: &'a [u8],
}

/// Relation (`'R'`): describes a table before its first change.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Relation<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// Relation OID.
    pub oid: Oid,
    /// Schema name (empty for `pg_catalog`).
    pub namespace: &'a [u8],
    /// Relation name.
    pub name: &'a [u8],
    /// Replica identity setting.
    pub replica_identity: ReplicaIdentity,
    /// The published columns.
    pub columns: Seq<'a, RelationColumn<'a>>,
}

/// Type (`'Y'`): describes a non-built-in column type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Type<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// Type OID.
    pub oid: Oid,
    /// Schema name (empty for `pg_catalog`).
    pub namespace: &'a [u8],
    /// Type name.
    pub name: &'a [u8],
}

/// Insert (`'I'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insert<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// Relation OID.
    pub relation: Oid,
    /// The new row (`'N'`).
    pub new: TupleData<'a>,
}

/// The old row an Update or Delete carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OldTuple<'a> {
    /// `'K'`: the old key (non-key columns are null).
    Key(TupleData<'a>),
    /// `'O'`: the whole old row (replica identity full).
    Full(TupleData<'a>),
}

impl<'a> OldTuple<'a> {
    /// The tuple, whichever kind.
    pub fn tuple(&self) -> &TupleData<'a> {
        match self {
            OldTuple::Key(t) | OldTuple::Full(t) => t,
        }
    }

    fn marker(&self) -> u8 {
        match self {
            OldTuple::Key(_) => b'K',
            OldTuple::Full(_) => b'O',
        }
    }
}

/// Update (`'U'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// Relation OID.
    pub relation: Oid,
    /// The old key or row, when the key changed or the identity is full.
    pub old: Option<OldTuple<'a>>,
    /// The new row (`'N'`).
    pub new: TupleData<'a>,
}

/// Delete (`'D'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delete<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// Relation OID.
    pub relation: Oid,
    /// The old key or row.
    pub old: OldTuple<'a>,
}

/// Truncate (`'T'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncate<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// `CASCADE` (option bit 1).
    pub cascade: bool,
    /// `RESTART IDENTITY` (option bit 2).
    pub restart_identity: bool,
    /// The truncated relations' OIDs.
    pub relations: Seq<'a, Oid>,
}

/// Message (`'M'`): a logical decoding message from `pg_logical_emit_message`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LogicalMessage<'a> {
    /// The (sub)transaction id, present inside a stream block.
    pub xid: Option<Xid>,
    /// Whether it was emitted as part of its transaction (flag 1) or immediately (flag 0).
    pub transactional: bool,
    /// LSN of the message.
    pub lsn: Lsn,
    /// The prefix.
    pub prefix: &'a [u8],
    /// The content.
    pub content: &'a [u8],
}

/// Stream Start (`'S'`): a block of an in-progress transaction's changes follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamStart {
    /// Top-level transaction id.
    pub xid: Xid,
    /// Whether this is the transaction's first block.
    pub first_segment: bool,
}

/// Stream Commit (`'c'`): a streamed transaction committed (flags are always 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamCommit {
    /// Top-level transaction id.
    pub xid: Xid,
    /// LSN of the commit record (its start).
    pub commit_lsn: Lsn,
    /// End of the commit record.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
}

/// Where and when a streamed (sub)transaction aborted (v4, parallel streaming).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AbortInfo {
    /// LSN of the abort record.
    pub lsn: Lsn,
    /// Abort time.
    pub time: PgTimestamp,
}

/// Stream Abort (`'A'`): a streamed transaction or one of its subtransactions aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamAbort {
    /// Top-level transaction id.
    pub xid: Xid,
    /// The aborted subtransaction (equals `xid` when the whole transaction aborted).
    pub subxid: Xid,
    /// Abort LSN and time, sent by v4 with `streaming = parallel` (told apart by length).
    pub abort: Option<AbortInfo>,
}

/// Begin Prepare, Prepare and Stream Prepare (`'b'`, `'P'`, `'p'`; flags are always 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Prepare<'a> {
    /// LSN of the prepare record (its start).
    pub prepare_lsn: Lsn,
    /// End of the prepare record.
    pub end_lsn: Lsn,
    /// Prepare time.
    pub prepare_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global transaction identifier given to `PREPARE TRANSACTION`.
    pub gid: &'a [u8],
}

/// Commit Prepared (`'K'`; flags are always 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CommitPrepared<'a> {
    /// LSN of the commit-prepared record (its start).
    pub commit_lsn: Lsn,
    /// End of the commit-prepared record.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global transaction identifier.
    pub gid: &'a [u8],
}

/// Rollback Prepared (`'r'`; flags are always 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RollbackPrepared<'a> {
    /// End of the prepared transaction's prepare record.
    pub prepare_end_lsn: Lsn,
    /// End of the rollback record.
    pub rollback_end_lsn: Lsn,
    /// Prepare time.
    pub prepare_time: PgTimestamp,
    /// Rollback time.
    pub rollback_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global transaction identifier.
    pub gid: &'a [u8],
}

/// Any pgoutput message, borrowing from its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PgOutputMessage<'a> {
    /// `'B'`.
    Begin(Begin),
    /// `'C'`.
    Commit(Commit),
    /// `'O'`.
    Origin(Origin<'a>),
    /// `'R'`.
    Relation(Relation<'a>),
    /// `'Y'`.
    Type(Type<'a>),
    /// `'I'`.
    Insert(Insert<'a>),
    /// `'U'`.
    Update(Update<'a>),
    /// `'D'`.
    Delete(Delete<'a>),
    /// `'T'`.
    Truncate(Truncate<'a>),
    /// `'M'`.
    Message(LogicalMessage<'a>),
    /// `'S'`.
    StreamStart(StreamStart),
    /// `'E'`.
    StreamStop,
    /// `'c'`.
    StreamCommit(StreamCommit),
    /// `'A'`.
    StreamAbort(StreamAbort),
    /// `'b'`.
    BeginPrepare(Prepare<'a>),
    /// `'P'`.
    Prepare(Prepare<'a>),
    /// `'K'`.
    CommitPrepared(CommitPrepared<'a>),
    /// `'r'`.
    RollbackPrepared(RollbackPrepared<'a>),
    /// `'p'`.
    StreamPrepare(Prepare<'a>),
}

/// Decodes one pgoutput message; `in_stream` says whether it was sent inside a Stream Start …
/// Stream Stop block (where changes carry an xid).
pub fn decode(payload: &[u8], in_stream: bool) -> Result<PgOutputMessage<'_>, DecodeError> {
    PgOutputMessage::decode(payload, in_stream)
}

impl<'a> PgOutputMessage<'a> {
    /// Decodes one pgoutput message; `in_stream` says whether it was sent inside a stream
    /// block. The whole payload must be used.
    pub fn decode(payload: &'a [u8], in_stream: bool) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let t = r.u8()?;
        let xid = |r: &mut Reader<'a>| -> Result<Option<Xid>, DecodeError> {
            if in_stream {
                Ok(Some(Xid(r.u32()?)))
            } else {
                Ok(None)
            }
        };
        let msg = match t {
            tag::BEGIN => PgOutputMessage::Begin(Begin {
                final_lsn: lsn(&mut r)?,
                commit_time: ts(&mut r)?,
                xid: Xid(r.u32()?),
            }),
            tag::COMMIT => {
                zero_flags(&mut r, "commit flags")?;
                PgOutputMessage::Commit(Commit {
                    commit_lsn: lsn(&mut r)?,
                    end_lsn: lsn(&mut r)?,
                    commit_time: ts(&mut r)?,
                })
            }
            tag::ORIGIN => PgOutputMessage::Origin(Origin {
                commit_lsn: lsn(&mut r)?,
                name: r.cstr()?,
            }),
            tag::RELATION => {
                let xid = xid(&mut r)?;
                let oid = r.u32()?;
                let namespace = r.cstr()?;
                let name = r.cstr()?;
                let at = r.offset();
                let replica_identity =
                    ReplicaIdentity::from_byte(r.u8()?).ok_or(DecodeError::Invalid {
                        what: "replica identity (expected 'd', 'n', 'f' or 'i')",
                        offset: at,
                    })?;
                let n = r.count16(RelationColumn::MIN_BYTES)?;
                PgOutputMessage::Relation(Relation {
                    xid,
                    oid,
                    namespace,
                    name,
                    replica_identity,
                    columns: Seq::read(&mut r, n)?,
                })
            }
            tag::TYPE => PgOutputMessage::Type(Type {
                xid: xid(&mut r)?,
                oid: r.u32()?,
                namespace: r.cstr()?,
                name: r.cstr()?,
            }),
            tag::INSERT => {
                let xid = xid(&mut r)?;
                let relation = r.u32()?;
                expect_marker(&mut r, b'N', "new tuple marker (expected 'N')")?;
                PgOutputMessage::Insert(Insert {
                    xid,
                    relation,
                    new: tuple(&mut r)?,
                })
            }
            tag::UPDATE => {
                let xid = xid(&mut r)?;
                let relation = r.u32()?;
                let at = r.offset();
                let old = match r.u8()? {
                    b'N' => None,
                    b'K' => Some(OldTuple::Key(tuple(&mut r)?)),
                    b'O' => Some(OldTuple::Full(tuple(&mut r)?)),
                    _ => {
                        return Err(DecodeError::Invalid {
                            what: "update tuple marker (expected 'N', 'O' or 'K')",
                            offset: at,
                        })
                    }
                };
                if old.is_some() {
                    expect_marker(&mut r, b'N', "new tuple marker (expected 'N')")?;
                }
                PgOutputMessage::Update(Update {
                    xid,
                    relation,
                    old,
                    new: tuple(&mut r)?,
                })
            }
            tag::DELETE => {
                let xid = xid(&mut r)?;
                let relation = r.u32()?;
                let at = r.offset();
                let old = match r.u8()? {
                    b'K' => OldTuple::Key(tuple(&mut r)?),
                    b'O' => OldTuple::Full(tuple(&mut r)?),
                    _ => {
                        return Err(DecodeError::Invalid {
                            what: "delete tuple marker (expected 'O' or 'K')",
                            offset: at,
                        })
                    }
                };
                PgOutputMessage::Delete(Delete { xid, relation, old })
            }
            tag::TRUNCATE => {
                let xid = xid(&mut r)?;
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
                PgOutputMessage::Truncate(Truncate {
                    xid,
                    cascade: options & TRUNCATE_CASCADE != 0,
                    restart_identity: options & TRUNCATE_RESTART_IDENTITY != 0,
                    relations: Seq::read(&mut r, n as usize)?,
                })
            }
            tag::MESSAGE => PgOutputMessage::Message(LogicalMessage {
                xid: xid(&mut r)?,
                transactional: flag(&mut r, "message flags")?,
                lsn: lsn(&mut r)?,
                prefix: r.cstr()?,
                content: sized_bytes(&mut r)?,
            }),
            tag::STREAM_START => PgOutputMessage::StreamStart(StreamStart {
                xid: Xid(r.u32()?),
                first_segment: flag(&mut r, "stream start first-segment flag")?,
            }),
            tag::STREAM_STOP => PgOutputMessage::StreamStop,
            tag::STREAM_COMMIT => {
                let xid = Xid(r.u32()?);
                zero_flags(&mut r, "stream commit flags")?;
                PgOutputMessage::StreamCommit(StreamCommit {
                    xid,
                    commit_lsn: lsn(&mut r)?,
                    end_lsn: lsn(&mut r)?,
                    commit_time: ts(&mut r)?,
                })
            }
            tag::STREAM_ABORT => {
                let xid = Xid(r.u32()?);
                let subxid = Xid(r.u32()?);
                // Told apart by length: v4 with parallel streaming appends LSN and time.
                let abort = if r.is_empty() {
                    None
                } else {
                    Some(AbortInfo {
                        lsn: lsn(&mut r)?,
                        time: ts(&mut r)?,
                    })
                };
                PgOutputMessage::StreamAbort(StreamAbort { xid, subxid, abort })
            }
            tag::BEGIN_PREPARE => PgOutputMessage::BeginPrepare(prepare(&mut r)?),
            tag::PREPARE => {
                zero_flags(&mut r, "prepare flags")?;
                PgOutputMessage::Prepare(prepare(&mut r)?)
            }
            tag::STREAM_PREPARE => {
                zero_flags(&mut r, "stream prepare flags")?;
                PgOutputMessage::StreamPrepare(prepare(&mut r)?)
            }
            tag::COMMIT_PREPARED => {
                zero_flags(&mut r, "commit prepared flags")?;
                PgOutputMessage::CommitPrepared(CommitPrepared {
                    commit_lsn: lsn(&mut r)?,
                    end_lsn: lsn(&mut r)?,
                    commit_time: ts(&mut r)?,
                    xid: Xid(r.u32()?),
                    gid: r.cstr()?,
                })
            }
            tag::ROLLBACK_PREPARED => {
                zero_flags(&mut r, "rollback prepared flags")?;
                PgOutputMessage::RollbackPrepared(RollbackPrepared {
                    prepare_end_lsn: lsn(&mut r)?,
                    rollback_end_lsn: lsn(&mut r)?,
                    prepare_time: ts(&mut r)?,
                    rollback_time: ts(&mut r)?,
                    xid: Xid(r.u32()?),
                    gid: r.cstr()?,
                })
            }
            other => return Err(DecodeError::UnknownTag { tag: other }),
        };
        r.finish()?;
        Ok(msg)
    }

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

    /// The type byte.
    pub fn tag(&self) -> u8 {
        match self {
            PgOutputMessage::Begin(_) => tag::BEGIN,
            PgOutputMessage::Commit(_) => tag::COMMIT,
            PgOutputMessage::Origin(_) => tag::ORIGIN,
            PgOutputMessage::Relation(_) => tag::RELATION,
            PgOutputMessage::Type(_) => tag::TYPE,
            PgOutputMessage::Insert(_) => tag::INSERT,
            PgOutputMessage::Update(_) => tag::UPDATE,
            PgOutputMessage::Delete(_) => tag::DELETE,
            PgOutputMessage::Truncate(_) => tag::TRUNCATE,
            PgOutputMessage::Message(_) => tag::MESSAGE,
            PgOutputMessage::StreamStart(_) => tag::STREAM_START,
            PgOutputMessage::StreamStop => tag::STREAM_STOP,
            PgOutputMessage::StreamCommit(_) => tag::STREAM_COMMIT,
            PgOutputMessage::StreamAbort(_) => tag::STREAM_ABORT,
            PgOutputMessage::BeginPrepare(_) => tag::BEGIN_PREPARE,
            PgOutputMessage::Prepare(_) => tag::PREPARE,
            PgOutputMessage::CommitPrepared(_) => tag::COMMIT_PREPARED,
            PgOutputMessage::RollbackPrepared(_) => tag::ROLLBACK_PREPARED,
            PgOutputMessage::StreamPrepare(_) => tag::STREAM_PREPARE,
        }
    }

    /// The xid prefix of a change sent inside a stream block (Relation, Type, Insert, Update,
    /// Delete, Truncate, Message); `None` for every other message.
    pub fn stream_xid(&self) -> Option<Xid> {
        match self {
            PgOutputMessage::Relation(m) => m.xid,
            PgOutputMessage::Type(m) => m.xid,
            PgOutputMessage::Insert(m) => m.xid,
            PgOutputMessage::Update(m) => m.xid,
            PgOutputMessage::Delete(m) => m.xid,
            PgOutputMessage::Truncate(m) => m.xid,
            PgOutputMessage::Message(m) => m.xid,
            _ => None,
        }
    }

    /// Whether the message may appear inside a Stream Start … Stream Stop block (changes,
    /// Origin and Stream Stop).
    pub fn allowed_in_stream(&self) -> bool {
        matches!(
            self,
            PgOutputMessage::Relation(_)
                | PgOutputMessage::Type(_)
                | PgOutputMessage::Insert(_)
                | PgOutputMessage::Update(_)
                | PgOutputMessage::Delete(_)
                | PgOutputMessage::Truncate(_)
                | PgOutputMessage::Message(_)
                | PgOutputMessage::Origin(_)
                | PgOutputMessage::StreamStop
        )
    }

    /// The oldest protocol version that can carry this message as it is.
    pub fn min_proto_version(&self) -> ProtoVersion {
        match self {
            PgOutputMessage::StreamAbort(StreamAbort { abort: Some(_), .. }) => ProtoVersion::V4,
            PgOutputMessage::BeginPrepare(_)
            | PgOutputMessage::Prepare(_)
            | PgOutputMessage::CommitPrepared(_)
            | PgOutputMessage::RollbackPrepared(_)
            | PgOutputMessage::StreamPrepare(_) => ProtoVersion::V3,
            PgOutputMessage::StreamStart(_)
            | PgOutputMessage::StreamStop
            | PgOutputMessage::StreamCommit(_)
            | PgOutputMessage::StreamAbort(_) => ProtoVersion::V2,
            m if m.stream_xid().is_some() => ProtoVersion::V2,
            _ => ProtoVersion::V1,
        }
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

// ---------------------------------------------------------------------------------------------
// helpers

const TRUNCATE_CASCADE: u8 = 1;
const TRUNCATE_RESTART_IDENTITY: u8 = 2;

fn lsn(r: &mut Reader<'_>) -> Result<Lsn, DecodeError> {
    r.u64().map(Lsn)
}

fn ts(r: &mut Reader<'_>) -> Result<PgTimestamp, DecodeError> {
    r.i64().map(PgTimestamp)
}

/// A byte that must be 0 or 1.
fn flag(r: &mut Reader<'_>, what: &'static str) -> Result<bool, DecodeError> {
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
fn sized_bytes<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
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

fn prepare<'a>(r: &mut Reader<'a>) -> Result<Prepare<'a>, DecodeError> {
    Ok(Prepare {
        prepare_lsn: lsn(r)?,
        end_lsn: lsn(r)?,
        prepare_time: ts(r)?,
        xid: Xid(r.u32()?),
        gid: r.cstr()?,
    })
}

fn put_prepare(out: &mut BytesMut, m: &Prepare<'_>) -> Result<(), EncodeError> {
    out.put_u64(m.prepare_lsn.0);
    out.put_u64(m.end_lsn.0);
    out.put_i64(m.prepare_time.0);
    out.put_u32(m.xid.0);
    put_cstr(out, m.gid, "gid")
}

fn put_sized(out: &mut BytesMut, v: &[u8], what: &'static str) -> Result<(), EncodeError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses spaced hex as the spec writes it; `"quoted"` parts are taken as ASCII.
    fn hex(s: &str) -> Vec<u8> {
        let mut out = Vec::new();
        for part in s.split_whitespace() {
            if let Some(text) = part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
                out.extend_from_slice(text.as_bytes());
                continue;
            }
            assert!(part.len() % 2 == 0, "odd hex {part}");
            for i in (0..part.len()).step_by(2) {
                out.push(u8::from_str_radix(&part[i..i + 2], 16).expect("test hex"));
            }
        }
        out
    }

    /// Decodes, checks the expected message, and checks that re-encoding gives the bytes back.
    fn check(bytes: &[u8], in_stream: bool, want: PgOutputMessage<'_>) {
        let got = decode(bytes, in_stream).expect("decodes");
        assert_eq!(got, want);
        assert_eq!(&got.to_bytes().expect("encodes")[..], bytes);
        assert_eq!(&want.to_bytes().expect("encodes")[..], bytes);
    }

    #[test]
    fn begin_commit_origin_from_captures() {
        check(
            &hex("42 0000000005028310 00030475702ebe9c 000002fe"),
            false,
            PgOutputMessage::Begin(Begin {
                final_lsn: Lsn(0x5028310),
                commit_time: PgTimestamp(0x30475702ebe9c),
                xid: Xid(0x2fe),
            }),
        );
        check(
            &hex("43 00 0000000005028310 0000000005028340 00030475702ebe9c"),
            false,
            PgOutputMessage::Commit(Commit {
                commit_lsn: Lsn(0x5028310),
                end_lsn: Lsn(0x5028340),
                commit_time: PgTimestamp(0x30475702ebe9c),
            }),
        );
        check(
            &hex("4f 0000000000abcdef 6f7269673100"),
            false,
            PgOutputMessage::Origin(Origin {
                commit_lsn: Lsn(0xabcdef),
                name: b"orig1",
            }),
        );
    }

    #[test]
    fn commit_flags_must_be_zero() {
        let bytes = hex("43 01 0000000005028310 0000000005028340 00030475702ebe9c");
        assert_eq!(
            decode(&bytes, false),
            Err(DecodeError::Invalid {
                what: "commit flags",
                offset: 1
            })
        );
    }

    #[test]
    fn relation_and_type_from_captures() {
        let cols = [
            RelationColumn {
                key: true,
                name: b"a",
                type_oid: 23,
                type_modifier: -1,
            },
            RelationColumn {
                key: false,
                name: b"b",
                type_oid: 25,
                type_modifier: -1,
            },
        ];
        let rel = Relation {
            xid: None,
            oid: 0x4000,
            namespace: b"public",
            name: b"t",
            replica_identity: ReplicaIdentity::Default,
            columns: Seq::from_slice(&cols),
        };
        let wire = "52 00004000 7075626c696300 7400 64 0002 01 6100 00000017 ffffffff \
                    00 6200 00000019 ffffffff";
        check(&hex(wire), false, PgOutputMessage::Relation(rel));
        let streamed = format!("52 00000309 {}", &wire[3..]);
        check(
            &hex(&streamed),
            true,
            PgOutputMessage::Relation(Relation {
                xid: Some(Xid(0x309)),
                ..rel
            }),
        );
        let wire_bytes = hex(wire);
        let decoded = decode(&wire_bytes, false).expect("decodes");
        let PgOutputMessage::Relation(r) = decoded else {
            panic!("not a relation: {decoded:?}")
        };
        let names: Vec<&[u8]> = r.columns.iter().map(|c| c.name).collect();
        assert_eq!(names, [&b"a"[..], b"b"]);
        check(
            &hex("59 0000400d 7075626c696300 6d6f6f6400"),
            false,
            PgOutputMessage::Type(Type {
                xid: None,
                oid: 0x400d,
                namespace: b"public",
                name: b"mood",
            }),
        );
    }

    #[test]
    fn relation_with_bad_identity_or_column_flag() {
        let bad_identity = hex("52 00004000 7000 7400 78 0000");
        assert!(matches!(
            decode(&bad_identity, false),
            Err(DecodeError::Invalid { offset: 9, .. })
        ));
        let bad_flag = hex("52 00004000 7000 7400 64 0001 02 6100 00000017 ffffffff");
        assert_eq!(
            decode(&bad_flag, false),
            Err(DecodeError::Invalid {
                what: "relation column flags",
                offset: 12
            })
        );
    }

    #[test]
    fn insert_update_delete_from_captures() {
        let vals = [TupleValue::Text(b"1000"), TupleValue::Text(b"hello")];
        check(
            &hex("49 00004000 4e 0002 74 00000004 31303030 74 00000005 68656c6c6f"),
            false,
            PgOutputMessage::Insert(Insert {
                xid: None,
                relation: 0x4000,
                new: Seq::from_slice(&vals),
            }),
        );
        let key = [TupleValue::Text(b"1000"), TupleValue::Null];
        check(
            &hex("44 00004000 4b 0002 74 00000004 31303030 6e"),
            false,
            PgOutputMessage::Delete(Delete {
                xid: None,
                relation: 0x4000,
                old: OldTuple::Key(Seq::from_slice(&key)),
            }),
        );
        let old = [
            TupleValue::Text(b"1"),
            TupleValue::Text(b"happy"),
            TupleValue::Text(b"n1"),
        ];
        let new = [
            TupleValue::Text(b"1"),
            TupleValue::UnchangedToast,
            TupleValue::Binary(b"n2"),
        ];
        check(
            &hex(
                "55 0000030a 00004013 4f 0003 74 00000001 \"1\" 74 00000005 \"happy\" \
                 74 00000002 \"n1\" 4e 0003 74 00000001 \"1\" 75 62 00000002 \"n2\"",
            ),
            true,
            PgOutputMessage::Update(Update {
                xid: Some(Xid(0x30a)),
                relation: 0x4013,
                old: Some(OldTuple::Full(Seq::from_slice(&old))),
                new: Seq::from_slice(&new),
            }),
        );
        check(
            &hex("55 00004013 4e 0001 6e"),
            false,
            PgOutputMessage::Update(Update {
                xid: None,
                relation: 0x4013,
                old: None,
                new: Seq::from_slice(&[TupleValue::Null]),
            }),
        );
    }

    #[test]
    fn tuple_errors_are_specific() {
        // Unknown column kind.
        assert_eq!(
            decode(&hex("49 00004000 4e 0001 78"), false),
            Err(DecodeError::Invalid {
                what: "tuple column kind (expected 'n', 'u', 't' or 'b')",
                offset: 8
            })
        );
        // Count larger than the bytes left.
        assert_eq!(
            decode(&hex("49 00004000 4e 0003 6e 6e"), false),
            Err(DecodeError::InvalidCount {
                count: 3,
                offset: 6
            })
        );
        // Value length beyond the message.
        assert_eq!(
            decode(&hex("49 00004000 4e 0001 74 00000009 31"), false),
            Err(DecodeError::InvalidLength {
                length: 9,
                offset: 9
            })
        );
        // Negative value length.
        assert!(matches!(
            decode(&hex("49 00004000 4e 0001 74 ffffffff"), false),
            Err(DecodeError::InvalidLength { length: -1, .. })
        ));
        // Missing 'N'.
        assert!(matches!(
            decode(&hex("49 00004000 4b 0000"), false),
            Err(DecodeError::Invalid { offset: 5, .. })
        ));
        // Update with an old tuple but no new one.
        assert!(matches!(
            decode(&hex("55 00004000 4b 0001 6e"), false),
            Err(DecodeError::UnexpectedEnd { .. })
        ));
        // Delete needs 'K' or 'O'.
        assert!(matches!(
            decode(&hex("44 00004000 4e 0000"), false),
            Err(DecodeError::Invalid { offset: 5, .. })
        ));
        // Trailing bytes.
        assert_eq!(
            decode(&hex("49 00004000 4e 0001 6e 00"), false),
            Err(DecodeError::TrailingBytes {
                offset: 9,
                count: 1
            })
        );
    }

    #[test]
    fn truncate_and_messages_from_captures() {
        check(
            &hex("54 00000001 00 00004013"),
            false,
            PgOutputMessage::Truncate(Truncate {
                xid: None,
                cascade: false,
                restart_identity: false,
                relations: Seq::from_slice(&[0x4013]),
            }),
        );
        check(
            &hex("54 00000309 00000002 03 00004013 00004000"),
            true,
            PgOutputMessage::Truncate(Truncate {
                xid: Some(Xid(0x309)),
                cascade: true,
                restart_identity: true,
                relations: Seq::from_slice(&[0x4013, 0x4000]),
            }),
        );
        assert_eq!(
            decode(&hex("54 00000002 00 00004013"), false),
            Err(DecodeError::InvalidCount {
                count: 2,
                offset: 1
            })
        );
        assert!(matches!(
            decode(&hex("54 00000000 04"), false),
            Err(DecodeError::Invalid { offset: 5, .. })
        ));
        check(
            &hex("4d 01 0000000005028748 70667800 00000006 74782d6d7367"),
            false,
            PgOutputMessage::Message(LogicalMessage {
                xid: None,
                transactional: true,
                lsn: Lsn(0x5028748),
                prefix: b"pfx",
                content: b"tx-msg",
            }),
        );
        check(
            &hex("4d 00 00000000050287b8 70667800 00000005 6e6f6e7478"),
            false,
            PgOutputMessage::Message(LogicalMessage {
                xid: None,
                transactional: false,
                lsn: Lsn(0x50287b8),
                prefix: b"pfx",
                content: b"nontx",
            }),
        );
    }

    #[test]
    fn two_phase_from_captures() {
        let gid1 = Prepare {
            prepare_lsn: Lsn(0x5029528),
            end_lsn: Lsn(0x5029620),
            prepare_time: PgTimestamp(0x30475702ee814),
            xid: Xid(0x306),
            gid: b"gid1",
        };
        check(
            &hex("62 0000000005029528 0000000005029620 00030475702ee814 00000306 6769643100"),
            false,
            PgOutputMessage::BeginPrepare(gid1),
        );
        check(
            &hex("50 00 0000000005029528 0000000005029620 00030475702ee814 00000306 6769643100"),
            false,
            PgOutputMessage::Prepare(gid1),
        );
        check(
            &hex("4b 00 0000000005029620 0000000005029658 00030475702ee9e1 00000306 6769643100"),
            false,
            PgOutputMessage::CommitPrepared(CommitPrepared {
                commit_lsn: Lsn(0x5029620),
                end_lsn: Lsn(0x5029658),
                commit_time: PgTimestamp(0x30475702ee9e1),
                xid: Xid(0x306),
                gid: b"gid1",
            }),
        );
        check(
            &hex(
                "72 00 00000000050297d8 0000000005029810 00030475702eec88 00030475702eedbf \
                 00000307 6769643200",
            ),
            false,
            PgOutputMessage::RollbackPrepared(RollbackPrepared {
                prepare_end_lsn: Lsn(0x50297d8),
                rollback_end_lsn: Lsn(0x5029810),
                prepare_time: PgTimestamp(0x30475702eec88),
                rollback_time: PgTimestamp(0x30475702eedbf),
                xid: Xid(0x307),
                gid: b"gid2",
            }),
        );
        check(
            &hex("70 00 0000000005029c88 0000000005029d80 0003047571fac18c 0000030d 6769643300"),
            false,
            PgOutputMessage::StreamPrepare(Prepare {
                prepare_lsn: Lsn(0x5029c88),
                end_lsn: Lsn(0x5029d80),
                prepare_time: PgTimestamp(0x3047571fac18c),
                xid: Xid(0x30d),
                gid: b"gid3",
            }),
        );
        // A GID without its terminator.
        assert!(matches!(
            decode(
                &hex("4b 00 0000000005029620 0000000005029658 00030475702ee9e1 00000306 67"),
                false
            ),
            Err(DecodeError::MissingTerminator { offset: 30 })
        ));
    }

    #[test]
    fn streaming_from_captures() {
        check(
            &hex("53 00000309 01"),
            false,
            PgOutputMessage::StreamStart(StreamStart {
                xid: Xid(0x309),
                first_segment: true,
            }),
        );
        check(&hex("45"), true, PgOutputMessage::StreamStop);
        check(
            &hex("49 00000309 00004000 4e 0002 74 00000004 32303030 74 00000002 7331"),
            true,
            PgOutputMessage::Insert(Insert {
                xid: Some(Xid(0x309)),
                relation: 0x4000,
                new: Seq::from_slice(&[TupleValue::Text(b"2000"), TupleValue::Text(b"s1")]),
            }),
        );
        check(
            &hex("41 00000309 0000030a 0000000005029a90 0003047571fabbeb"),
            false,
            PgOutputMessage::StreamAbort(StreamAbort {
                xid: Xid(0x309),
                subxid: Xid(0x30a),
                abort: Some(AbortInfo {
                    lsn: Lsn(0x5029a90),
                    time: PgTimestamp(0x3047571fabbeb),
                }),
            }),
        );
        check(
            &hex("41 0000030e 0000030f"),
            false,
            PgOutputMessage::StreamAbort(StreamAbort {
                xid: Xid(0x30e),
                subxid: Xid(0x30f),
                abort: None,
            }),
        );
        // Neither 9 nor 25 bytes.
        assert!(matches!(
            decode(&hex("41 0000030e 0000030f 00"), false),
            Err(DecodeError::UnexpectedEnd { offset: 9, .. })
        ));
        check(
            &hex("63 00000309 00 0000000005029b18 0000000005029b50 0003047571fabccd"),
            false,
            PgOutputMessage::StreamCommit(StreamCommit {
                xid: Xid(0x309),
                commit_lsn: Lsn(0x5029b18),
                end_lsn: Lsn(0x5029b50),
                commit_time: PgTimestamp(0x3047571fabccd),
            }),
        );
    }

    #[test]
    fn decoder_tracks_stream_blocks() {
        let mut d = PgOutputDecoder::new(ProtoVersion::V4);
        let start = hex("53 00000309 01");
        let insert = hex("49 00000309 00004000 4e 0001 6e");
        let stop = hex("45");
        assert!(matches!(
            d.decode(&stop),
            Err(DecodeError::Invalid { offset: 0, .. })
        ));
        d.decode(&start).expect("stream start");
        assert_eq!(d.stream_xid(), Some(Xid(0x309)));
        assert!(matches!(d.decode(&start), Err(DecodeError::Invalid { .. })));
        let m = d.decode(&insert).expect("insert in stream");
        assert_eq!(m.stream_xid(), Some(Xid(0x309)));
        let begin = hex("42 0000000005028310 00030475702ebe9c 000002fe");
        assert!(d.decode(&begin).is_err());
        d.decode(&stop).expect("stream stop");
        assert!(!d.in_stream());
        d.decode(&begin).expect("begin outside a block");

        let mut v1 = PgOutputDecoder::new(ProtoVersion::V1);
        assert!(v1.decode(&start).is_err());
        let mut v3 = PgOutputDecoder::new(ProtoVersion::V3);
        assert!(v3
            .decode(&hex(
                "41 00000309 0000030a 0000000005029a90 0003047571fabbeb"
            ))
            .is_err());
        assert!(v3.decode(&hex("41 00000309 0000030a")).is_ok());
    }

    #[test]
    fn encode_rejects_unrepresentable_values() {
        let mut out = BytesMut::from(&b"keep"[..]);
        let m = PgOutputMessage::Origin(Origin {
            commit_lsn: Lsn(1),
            name: b"a\0b",
        });
        assert_eq!(
            m.encode(&mut out),
            Err(EncodeError::NulInString {
                what: "origin name"
            })
        );
        assert_eq!(&out[..], b"keep");
        let many = vec![TupleValue::Null; 40_000];
        let m = PgOutputMessage::Insert(Insert {
            xid: None,
            relation: 1,
            new: Seq::from_slice(&many),
        });
        assert!(matches!(
            m.encode(&mut out),
            Err(EncodeError::TooLong { max: 32767, .. })
        ));
        assert_eq!(&out[..], b"keep");
    }

    #[test]
    fn unknown_tag_and_empty_payload() {
        assert_eq!(
            decode(b"Z", false),
            Err(DecodeError::UnknownTag { tag: b'Z' })
        );
        assert!(matches!(
            decode(b"", false),
            Err(DecodeError::UnexpectedEnd { offset: 0, .. })
        ));
    }
}
