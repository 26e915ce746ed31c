//! `pgyard delayq apply`: apply a queue's due transactions to a subscriber, exactly once
//! (adapter: the pure `pgyard_delayq::apply::ApplyMachine` decides what to send and what to
//! acknowledge, its `Applier` builds the SQL, pgyard's blocking driver runs it, the wall
//! clock decides what is due).
//!
//! Exactly once: the subscriber session is bound to a replication origin; each transaction
//! records the publisher's commit end LSN and time as that origin's progress inside the same
//! subscriber transaction; the queue marks it applied only after COMMIT succeeded; at start,
//! everything up to the origin's progress is marked applied. The session runs with
//! `synchronous_commit = off`, as PostgreSQL's apply worker does: the machine acknowledges a
//! transaction to the queue (and so lets it be purged) only once the origin's progress made
//! durable on the subscriber has passed it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use pgyard_delayq::apply::{timestamp_text, ApplyError};
use pgyard_delayq::{Config, DelayQueue, FsStorage};
use pgyard_tokio::follow::SharedQueue;

use crate::delayq_control::{lock_dir, parse_until, Until};
pub use crate::delayq_loop::{apply_loop, Controls};
pub use crate::delayq_sub::{Subscriber, Ticket};
/// What an apply run did: the machine's count.
pub use pgyard_delayq::apply::Applied;
use pgyard_types::{Lsn, UnixTime};

/// Arguments of `pgyard delayq apply`.
#[derive(clap::Args, Debug)]
pub struct ApplyArgs {
    /// The queue directory (made by `follow` or `ingest`).
    pub dir: PathBuf,
    /// The subscriber's connection string.
    #[arg(long)]
    pub subscriber: String,
    /// How long after its commit each transaction becomes due, e.g. `30s`, `1h`.
    #[arg(long, default_value = "0s", value_parser = crate::delayq_cmd::parse_delay)]
    pub delay: Duration,
    /// The replication origin on the subscriber that records what was applied.
    #[arg(long, default_value = "pgyard_delayq")]
    pub origin: String,
    /// Apply only what committed before this LSN (`0/16B3748`) or UTC time
    /// (`2026-12-01 18:00:00`), then stop.
    #[arg(long, value_parser = parse_until)]
    pub until: Option<Until>,
    /// Advanced: a transaction is read out of the queue and sent in pieces of at most this
    /// many bytes of pgoutput messages, one subscriber transaction (memory stays bounded by
    /// a few pieces however large a transaction is). Default 1 MiB.
    #[arg(long, hide = true, default_value_t = pgyard_delayq::apply::ApplyConfig::default().piece_bytes)]
    pub piece_bytes: usize,
}

/// Why applying stopped.
#[derive(Debug, thiserror::Error)]
pub enum ApplyFailure {
    /// The queue directory cannot be opened or written.
    #[error("queue: {0}")]
    Queue(String),
    /// The subscriber refused a statement or the connection broke.
    #[error("subscriber: {0}")]
    Subscriber(String),
    /// A transaction could not be applied as sent; it stays queued.
    #[error("{0}; the transaction stays queued")]
    Apply(ApplyError),
    /// An UPDATE or DELETE found no row (or several) to change; it stays queued.
    #[error("{0}; the transaction stays queued")]
    RowCheck(String),
    /// The subscriber raised an error while applying one transaction; it stays queued.
    #[error(
        "commit {commit_lsn}: the subscriber refused it: {text}; the transaction stays queued"
    )]
    Refused {
        /// The transaction's commit LSN.
        commit_lsn: Lsn,
        /// The server's error.
        text: String,
    },
}

/// The wall clock as the queue counts time.
pub fn unix_now() -> UnixTime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    UnixTime(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

pub(crate) fn status_line(q: &DelayQueue<FsStorage>, done: &Applied) -> String {
    let i = q.inspect();
    let now = unix_now();
    let next = q
        .next_due()
        .map(|d| format!("next due in {:.1}s", (d.0 - now.0) as f64 / 1e6))
        .unwrap_or_else(|| "nothing due".into());
    let applied = match (done.last_end_lsn, done.last_commit_ts) {
        (Some(l), Some(ts)) => format!(
            "applied through {l} (committed {}, lag {:.1}s)",
            timestamp_text(ts),
            (now.0 - ts.to_unix().0) as f64 / 1e6
        ),
        _ => format!("applied through {}", i.apply_lsn),
    };
    format!(
        "pgyard delayq: {} transactions queued ({} bytes), {next}, {} applied, {applied}",
        i.transactions.len(),
        i.disk_bytes,
        done.transactions,
    )
}

/// Runs `pgyard delayq apply`: 0 when everything queued was applied, 1 when a transaction
/// could not be (it stays queued; the error names it), 2 when the queue or the subscriber
/// cannot be reached.
pub fn run(args: ApplyArgs) -> ExitCode {
    let fail = |code: u8, e: &dyn std::fmt::Display| {
        eprintln!("pgyard delayq apply: {e}");
        ExitCode::from(code)
    };
    let _lock = match lock_dir(&args.dir) {
        Ok(l) => l,
        Err(e) => return fail(2, &e),
    };
    let storage = match FsStorage::open(&args.dir) {
        Ok(s) => s,
        Err(e) => return fail(2, &format!("{}: {e}", args.dir.display())),
    };
    let config = Config {
        delay: args.delay,
        ..Config::default()
    };
    let q = match DelayQueue::open(storage, config) {
        Ok(q) => q,
        Err(e) => return fail(2, &format!("{}: {e}", args.dir.display())),
    };
    let mut sub = match Subscriber::connect(&args.subscriber, &args.origin) {
        Ok(s) => s,
        Err(e) => return fail(2, &e),
    };
    let queue: SharedQueue = std::sync::Arc::new(std::sync::Mutex::new(q));
    let controls = Controls {
        dir: args.dir.clone(),
        until: args.until,
        piece_bytes: args.piece_bytes,
        bell: None,
    };
    match apply_loop(&queue, &mut sub, None, &controls) {
        Ok(done) => {
            sub.close();
            println!(
                "applied {} transactions ({} rows); {} were applied before",
                done.transactions, done.rows, done.skipped_at_start
            );
            if let Some(l) = done.held_at {
                println!("held at the transaction committed at {l} (--until)");
            }
            ExitCode::SUCCESS
        }
        Err(
            e @ (ApplyFailure::Apply(_) | ApplyFailure::RowCheck(_) | ApplyFailure::Refused { .. }),
        ) => fail(1, &e),
        Err(e) => fail(2, &e),
    }
}
