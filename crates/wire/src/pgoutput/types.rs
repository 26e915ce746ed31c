//! The pgoutput messages as borrowed structs, one per message type, and their parts.

use pgyard_types::{Lsn, PgTimestamp, Xid};

use super::{Oid, Seq, TupleData};

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

    pub(super) fn marker(&self) -> u8 {
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
