//! A crash-safe segmented queue for time-delayed logical replication: everything received is
//! written to durable files and handed out for apply only once it is due.
//!
//! Pure state machine behind the [`Storage`] trait: the engine never reads a clock (wall time is
//! an argument) and touches files only through the storage it is given. [`FsStorage`] is the real
//! file system (the only module that uses `std::fs`); `SimStorage` (feature `sim`) is an in-memory
//! disk with seeded faults for the simulator and fuzz targets. The on-disk format, the recovery
//! rules and the LSN contract are described in `docs/delayq.md`.
//!
//! Driving it: feed every pgoutput message with [`DelayQueue::handle`], call
//! [`DelayQueue::flush`] at flush points and report [`DelayQueue::flush_lsn`] to the publisher;
//! pull due work with [`DelayQueue::poll_ready`] (or, to read a large transaction in bounded
//! pieces, [`DelayQueue::poll_ready_bounded`] and [`DelayQueue::read_more`]), apply it, then
//! [`DelayQueue::mark_applied`];
//! call [`DelayQueue::purge`] now and then; on every (re)connect call
//! [`DelayQueue::restart_stream`] and start replication at [`DelayQueue::resume_lsn`].
//!
//! It sits between a logical replication stream (pgyard-wire decodes the pgoutput messages,
//! [`pgoutput::event`] says what each means to the queue) and an apply worker: the two sans-IO
//! machines [`follow::FollowMachine`] (stream in, status updates out) and
//! [`apply::ApplyMachine`] (due transactions out to a subscriber) drive it, pgyard-tokio's
//! `follow` and the CLI's apply loop drive them, `pgyard delayq run` is the whole program.
//! One transaction, one minute late:
//!
//! ```
//! use std::time::Duration;
//! use pgyard_delayq::{Config, DelayQueue, Event, FsStorage, Ready, Received};
//! use pgyard_types::{Lsn, PgTimestamp, Xid};
//!
//! let dir = tempfile::tempdir()?;
//! let config = Config { delay: Duration::from_secs(60), ..Config::default() };
//! let mut queue = DelayQueue::open(FsStorage::open(dir.path())?, config)?;
//!
//! // The publisher committed at `ts`; the messages arrive a second later.
//! let ts = PgTimestamp(800_000_000_000_000);
//! let arrival = ts.to_unix();
//! let later = |secs: i64| pgyard_types::UnixTime(arrival.0 + secs * 1_000_000);
//! let messages = [
//!     (Event::Begin { xid: Xid(7), final_lsn: Lsn(0x300), commit_ts: ts }, &b"B"[..]),
//!     (Event::Change { xid: None }, &b"I"[..]),
//!     (Event::Commit { commit_lsn: Lsn(0x300), end_lsn: Lsn(0x330), commit_ts: ts }, &b"C"[..]),
//! ];
//! for (event, payload) in messages {
//!     // The payload is the raw pgoutput message; the queue stores it as it came.
//!     queue.handle(later(1), Received { wal_lsn: Lsn::INVALID, payload, event })?;
//! }
//! // Durable now: this is the position to report to the publisher as flushed.
//! assert_eq!(queue.flush()?, Lsn(0x330));
//!
//! assert_eq!(queue.poll_ready(later(30))?, None); // not due yet
//! let Some(Ready::Transaction(txn)) = queue.poll_ready(later(61))? else { panic!("due") };
//! assert_eq!(txn.xid, Xid(7));
//! assert_eq!(txn.messages, [b"B".to_vec(), b"I".to_vec(), b"C".to_vec()]);
//! // Apply it on the subscriber, then acknowledge; purge frees what is applied.
//! queue.mark_applied(txn.id)?;
//! queue.purge()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod format;
mod fs;
mod items;
mod model;
mod queue;
mod recover;
#[cfg(any(test, feature = "sim"))]
mod sim;
mod storage;
#[cfg(test)]
mod tests;

pub mod apply;
pub mod follow;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod pgoutput;
pub use fs::FsStorage;
pub use model::{CommitKind, TxnState};
pub use queue::{
    DelayQueue, Flow, Inspection, ItemId, Ready, ReadyMessage, ReadyTxn, SegmentInfo, TxnCursor,
    TxnInfo, TxnPiece,
};
pub use recover::{verify, Recovery, TornTail};
#[cfg(any(test, feature = "sim"))]
pub use sim::{SimFaults, SimStats, SimStorage};
pub use storage::{Storage, StorageError, StorageErrorKind};

use pgyard_types::{Lsn, PgTimestamp, Xid};
use std::time::Duration;

/// What the queue needs to know about one pgoutput message (the caller decodes the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `Begin` (`'B'`).
    Begin {
        /// Transaction id.
        xid: Xid,
        /// Start LSN of the commit record.
        final_lsn: Lsn,
        /// Commit timestamp.
        commit_ts: PgTimestamp,
    },
    /// `Commit` (`'C'`).
    Commit {
        /// Start LSN of the commit record.
        commit_lsn: Lsn,
        /// End LSN of the commit record.
        end_lsn: Lsn,
        /// Commit timestamp.
        commit_ts: PgTimestamp,
    },
    /// `Begin Prepare` (`'b'`).
    BeginPrepare {
        /// Transaction id.
        xid: Xid,
        /// Start LSN of the prepare record.
        prepare_lsn: Lsn,
        /// End LSN of the prepared transaction.
        end_lsn: Lsn,
        /// Prepare timestamp.
        prepare_ts: PgTimestamp,
    },
    /// `Prepare` (`'P'`).
    Prepare {
        /// Transaction id.
        xid: Xid,
        /// Start LSN of the prepare record.
        prepare_lsn: Lsn,
        /// End LSN of the prepare record.
        end_lsn: Lsn,
        /// Prepare timestamp.
        prepare_ts: PgTimestamp,
    },
    /// `Commit Prepared` (`'K'`).
    CommitPrepared {
        /// Transaction id of the prepared transaction.
        xid: Xid,
        /// Start LSN of the commit-prepared record.
        commit_lsn: Lsn,
        /// End LSN of the commit-prepared record.
        end_lsn: Lsn,
        /// Commit timestamp.
        commit_ts: PgTimestamp,
    },
    /// `Rollback Prepared` (`'r'`).
    RollbackPrepared {
        /// Transaction id of the prepared transaction.
        xid: Xid,
        /// End LSN of the prepared transaction.
        prepare_end_lsn: Lsn,
        /// End LSN of the rollback record.
        rollback_end_lsn: Lsn,
        /// Rollback timestamp.
        rollback_ts: PgTimestamp,
    },
    /// `Stream Start` (`'S'`).
    StreamStart {
        /// Top-level transaction id.
        xid: Xid,
        /// First block of this transaction.
        first: bool,
    },
    /// `Stream Stop` (`'E'`).
    StreamStop,
    /// `Stream Commit` (`'c'`).
    StreamCommit {
        /// Top-level transaction id.
        xid: Xid,
        /// Start LSN of the commit record.
        commit_lsn: Lsn,
        /// End LSN of the commit record.
        end_lsn: Lsn,
        /// Commit timestamp.
        commit_ts: PgTimestamp,
    },
    /// `Stream Prepare` (`'p'`).
    StreamPrepare {
        /// Top-level transaction id.
        xid: Xid,
        /// Start LSN of the prepare record.
        prepare_lsn: Lsn,
        /// End LSN of the prepare record.
        end_lsn: Lsn,
        /// Prepare timestamp.
        prepare_ts: PgTimestamp,
    },
    /// `Stream Abort` (`'A'`): the whole transaction when `sub_xid == xid`, else a subtransaction.
    StreamAbort {
        /// Top-level transaction id.
        xid: Xid,
        /// Aborted (sub)transaction id.
        sub_xid: Xid,
    },
    /// `Relation` (`'R'`).
    Relation {
        /// Relation OID.
        oid: u32,
        /// The xid field, present inside stream blocks.
        xid: Option<Xid>,
    },
    /// `Type` (`'Y'`).
    Type {
        /// Type OID.
        oid: u32,
        /// The xid field, present inside stream blocks.
        xid: Option<Xid>,
    },
    /// `Insert`, `Update`, `Delete`, `Truncate` or `Origin`: data of the current transaction.
    Change {
        /// The xid field, present inside stream blocks (the subtransaction's xid).
        xid: Option<Xid>,
    },
    /// `Message` (`'M'`).
    Message {
        /// Transactional (flags 1) or not (flags 0).
        transactional: bool,
        /// The xid field, present inside stream blocks.
        xid: Option<Xid>,
        /// The message's own LSN.
        lsn: Lsn,
    },
}

/// One received pgoutput message: what it means, its raw bytes and where it arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received<'a> {
    /// The `'w'` header's data start LSN (0 when the server sent 0).
    pub wal_lsn: Lsn,
    /// The raw pgoutput message (what followed the 25-byte `'w'` header); stored verbatim.
    pub payload: &'a [u8],
    /// What the message is.
    pub event: Event,
}

/// What [`DelayQueue::handle`] did with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    /// Written to the queue (or kept as session state, e.g. `Stream Stop`).
    Queued,
    /// Already queued or applied earlier (re-sent after a reconnect); dropped.
    Duplicate,
    /// Nothing to do (e.g. `Rollback Prepared` or `Stream Abort` for a transaction the queue
    /// does not hold, which the apply worker also ignores).
    Ignored,
}

/// Queue settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Minimum delay between the publisher's commit time and apply.
    pub delay: Duration,
    /// Extra margin added to every due time to tolerate a publisher clock running behind.
    pub skew_tolerance: Duration,
    /// Segment size. A record never spans two segments: one that does not fit an empty
    /// segment (a change larger than this) gets a segment of its own, sized to it, and so does
    /// a carry-forward set. At least 4 KiB.
    pub segment_bytes_max: u64,
    /// Appended records are buffered in memory up to this many bytes before being written.
    pub write_buffer_bytes: usize,
    /// Hard budget: new transactions are refused ([`Error::Full`]) while the queue is this big.
    pub disk_bytes_max: u64,
    /// [`Flow::Pause`] from this size on ...
    pub disk_high_watermark_bytes: u64,
    /// ... until the queue shrinks to this size.
    pub disk_low_watermark_bytes: u64,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            delay: Duration::ZERO,
            skew_tolerance: Duration::ZERO,
            segment_bytes_max: 64 << 20,
            write_buffer_bytes: 64 << 10,
            disk_bytes_max: 8 << 30,
            disk_high_watermark_bytes: 6 << 30,
            disk_low_watermark_bytes: 4 << 30,
        }
    }
}

impl Config {
    /// Checks the settings; [`DelayQueue::open`] does this too.
    pub fn validate(&self) -> Result<(), Error> {
        let bad = |s: &str| Err(Error::Config(s.to_owned()));
        if self.segment_bytes_max < 4096 || self.segment_bytes_max > u64::from(u32::MAX) {
            return bad("segment_bytes_max must be between 4 KiB and 4 GiB - 1");
        }
        if self.disk_low_watermark_bytes > self.disk_high_watermark_bytes
            || self.disk_high_watermark_bytes > self.disk_bytes_max
        {
            return bad(
                "need disk_low_watermark_bytes <= disk_high_watermark_bytes <= disk_bytes_max",
            );
        }
        if i64::try_from((self.delay + self.skew_tolerance).as_micros()).is_err() {
            return bad("delay is too large");
        }
        Ok(())
    }

    pub(crate) fn delay_micros(&self) -> i64 {
        i64::try_from((self.delay + self.skew_tolerance).as_micros()).unwrap_or(i64::MAX)
    }
}

/// Everything that can go wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bytes on disk are not a valid queue: never skipped, never truncated.
    #[error("delay queue corrupt: file \"{file}\" at byte offset {offset}: {reason}")]
    Corrupt {
        /// Segment file name.
        file: String,
        /// Byte offset of the bad record or header.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A storage operation failed. `NoSpace` during appends is retryable; the rest is fatal.
    #[error("delay queue storage error: {0}")]
    Storage(StorageError),
    /// The disk budget is used up; stop reading, retry the same message later.
    #[error("delay queue is full: {bytes} bytes queued, budget {max} bytes")]
    Full {
        /// Bytes in the queue.
        bytes: u64,
        /// The budget.
        max: u64,
    },
    /// One message is longer than a record can be (4 GiB - 1 bytes with its header; the
    /// publisher sends at most 1 GiB in one message). Nothing changed.
    #[error("a record of {len} bytes is longer than the {capacity} bytes a record can hold")]
    RecordTooLarge {
        /// Encoded record length.
        len: u64,
        /// The largest record length (`u32::MAX`).
        capacity: u64,
    },
    /// The message sequence violates the logical replication protocol; the message was
    /// rejected and the queue is unchanged.
    #[error("logical replication protocol violation: {0}")]
    Protocol(String),
    /// The caller used the API wrongly; nothing changed.
    #[error("delay queue misuse: {0}")]
    Misuse(String),
    /// Invalid [`Config`].
    #[error("invalid delay queue configuration: {0}")]
    Config(String),
    /// An earlier fatal error; the queue must be reopened (recovery reads what is durable).
    #[error("delay queue stopped after an earlier failure: {0}")]
    Poisoned(Box<Error>),
}

impl Error {
    /// True when the same call may simply be retried later (no space, budget full).
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Full { .. } => true,
            // An fsync failure is never retried on the same file (fsyncgate).
            Error::Storage(e) => {
                e.kind == StorageErrorKind::NoSpace && e.op != "sync" && e.op != "sync directory"
            }
            _ => false,
        }
    }
}
