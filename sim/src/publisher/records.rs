//! The publisher model's transactions, commits, messages and slots as scenarios read them.

use pgyard_types::{Lsn, PgTimestamp, Xid};

/// How a transaction is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnKind {
    /// `Begin` … `Commit` at commit time.
    Plain,
    /// Stream blocks while it runs, then `Stream Commit`/`Stream Prepare`/`Stream Abort`.
    Streamed,
    /// `Begin Prepare` … `Prepare` at prepare time, then the decision.
    TwoPhase,
}

/// Where a transaction stands on the publisher.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Still running (streamed transactions only).
    InProgress,
    /// Prepared, waiting for its decision.
    Prepared,
    /// Committed: visible to subscribers.
    Committed {
        /// Start LSN of the commit record.
        commit_lsn: Lsn,
        /// End LSN of the commit record.
        end_lsn: Lsn,
        /// Commit timestamp (publisher clock).
        ts: PgTimestamp,
    },
    /// Aborted or rolled back: never visible.
    Aborted,
}

/// One transaction of the workload and what a consumer must end up with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Txn {
    /// Top-level xid.
    pub xid: Xid,
    /// How it is sent.
    pub kind: TxnKind,
    /// LSN of its first record (decoding must restart at or before it).
    pub first_lsn: Lsn,
    /// Its fate so far.
    pub fate: Fate,
    /// The change payloads that survive (rolled-back savepoints removed), in order.
    pub changes: Vec<Vec<u8>>,
    /// End LSN of its prepare record, once prepared (two-phase and stream-prepared ones).
    pub prepare_end: Option<Lsn>,
    /// Subtransaction xid of each surviving change (the top-level xid outside savepoints).
    pub(super) subs: Vec<u32>,
}

/// A committed transaction, in commit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Commit {
    /// Top-level xid.
    pub xid: Xid,
    /// LSN of its first record.
    pub first_lsn: Lsn,
    /// Start LSN of the commit record.
    pub commit_lsn: Lsn,
    /// End LSN of the commit record.
    pub end_lsn: Lsn,
}

/// A non-transactional logical message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    /// Its LSN.
    pub lsn: Lsn,
    /// Its payload.
    pub payload: Vec<u8>,
}

/// The publisher's logical replication slot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogicalSlot {
    /// Oldest WAL decoding may need to restart.
    pub restart_lsn: Lsn,
    /// Everything committed before it is confirmed by the subscriber.
    pub confirmed_flush_lsn: Lsn,
    /// Oldest xid whose catalog rows decoding may still need.
    pub catalog_xmin: Xid,
}

/// A physical standby streaming from the publisher.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhysicalStandby {
    /// Its physical slot's name on the primary (`primary_slot_name`).
    pub slot: String,
    /// WAL received and flushed (`pg_last_wal_receive_lsn()`).
    pub receive_lsn: Lsn,
    /// WAL replayed (`pg_last_wal_replay_lsn()`), at most `receive_lsn`.
    pub replay_lsn: Lsn,
    /// What its feedback last reported: the physical slot's `restart_lsn` on the primary,
    /// at most `receive_lsn`.
    pub feedback_lsn: Lsn,
    /// Percent chance per tick that it receives nothing (a lagging link).
    pub stall_percent: u64,
}
