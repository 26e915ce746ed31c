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

use pgyard_types::Xid;

use crate::buf::DecodeError;
pub use crate::frame::EncodeError;

mod decode;
mod encode;
mod seq;
mod stream;
mod types;

pub use seq::{Seq, SeqItem, SeqIter, TupleData};
pub use stream::PgOutputDecoder;
pub use types::{
    AbortInfo, Begin, Commit, CommitPrepared, Delete, Insert, LogicalMessage, OldTuple, Origin,
    Prepare, Relation, RelationColumn, ReplicaIdentity, RollbackPrepared, StreamAbort,
    StreamCommit, StreamStart, Truncate, TupleValue, Type, Update,
};

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

impl PgOutputMessage<'_> {
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
}

// The Truncate options byte, read by decode and written by encode.
const TRUNCATE_CASCADE: u8 = 1;
const TRUNCATE_RESTART_IDENTITY: u8 = 2;

#[cfg(test)]
mod tests;
