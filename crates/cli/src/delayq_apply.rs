//! `pgyard delayq apply`: apply a queue's due transactions to a subscriber, exactly once
//! (adapter: the pure `pgyard_delayq::apply::Applier` builds the SQL, pgyard's blocking driver
//! runs it, the wall clock decides what is due).
//!
//! Exactly once: the subscriber session is bound to a replication origin; each transaction
//! records the publisher's commit end LSN and time as that origin's progress inside the same
//! subscriber transaction; the queue marks it applied only after COMMIT succeeded; at start,
//! everything up to the origin's progress is marked applied. The session runs with
//! `synchronous_commit = on`, so a successful COMMIT is flushed and purging behind it is safe.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use pgyard_blocking::Session;
use std::sync::atomic::{AtomicBool, Ordering};

use pgyard_delayq::apply::{quote_literal, timestamp_text, Applier, ApplyError};
use pgyard_delayq::{Config, DelayQueue, FsStorage, Ready, ReadyTxn};
use pgyard_tokio::follow::{lock, SharedQueue};

use crate::delayq_control::{lock_dir, parse_until, status_json, Control, Until};
use pgyard_types::{Lsn, PgTimestamp, UnixTime};

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

/// A subscriber session bound to the replication origin.
pub struct Subscriber {
    session: Session,
    origin: String,
    /// The origin's flushed progress when the session started.
    pub progress: Lsn,
    /// The progress of the last transaction this session committed.
    committed: Lsn,
}

fn refused(e: pgyard_blocking::Error) -> ApplyFailure {
    ApplyFailure::Subscriber(e.to_string().trim_end().to_owned())
}

impl Subscriber {
    /// Connects, sets `session_replication_role = replica` and `synchronous_commit = on`,
    /// creates the origin if missing and binds the session to it.
    pub fn connect(conninfo: &str, origin: &str) -> Result<Subscriber, ApplyFailure> {
        let mut session = pgyard_blocking::connect(conninfo).map_err(refused)?;
        let name = quote_literal(origin);
        let setup = format!(
            "SET session_replication_role = replica; SET synchronous_commit = on; \
             SELECT pg_catalog.pg_replication_origin_create({name}) \
             WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin WHERE roname = {name}); \
             SELECT pg_catalog.pg_replication_origin_session_setup({name}); \
             SELECT pg_catalog.pg_replication_origin_progress({name}, true)"
        );
        let rows = session.simple_query(&setup).map_err(refused)?;
        let progress = rows
            .last()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|t| t.parse().ok())
            .unwrap_or(Lsn::INVALID);
        Ok(Subscriber {
            session,
            origin: origin.to_owned(),
            progress,
            committed: progress,
        })
    }

    /// Applies one transaction: body, row check, COMMIT (ROLLBACK on any failure).
    pub fn apply(&mut self, applier: &mut Applier, txn: &ReadyTxn) -> Result<u64, ApplyFailure> {
        let script = applier.script(txn).map_err(ApplyFailure::Apply)?;
        let outcome = match self.session.simple_query(&script.body) {
            Ok(rows) => script.check(&rows).map_err(ApplyFailure::Apply),
            Err(pgyard_blocking::Error::Server { text, .. }) => Err(ApplyFailure::Refused {
                commit_lsn: txn.commit_lsn,
                text: text.trim_end().to_owned(),
            }),
            Err(e) => return Err(refused(e)),
        };
        if let Err(e) = outcome {
            self.session.simple_query("ROLLBACK").map_err(refused)?;
            return Err(e);
        }
        match self.session.simple_query(&script.commit) {
            Ok(_) => {
                self.committed = txn.end_lsn;
                Ok(script.changes)
            }
            Err(pgyard_blocking::Error::Server { text, .. }) => {
                // The abort moved the origin past this transaction: move it back.
                self.rewind(self.committed)?;
                Err(ApplyFailure::Refused {
                    commit_lsn: txn.commit_lsn,
                    text: text.trim_end().to_owned(),
                })
            }
            Err(e) => Err(refused(e)),
        }
    }

    /// Sets the origin's progress back to `lsn` (the session lets go of it meanwhile).
    fn rewind(&mut self, lsn: Lsn) -> Result<(), ApplyFailure> {
        let name = quote_literal(&self.origin);
        let sql = format!(
            "SELECT pg_catalog.pg_replication_origin_session_reset(); \
             SELECT pg_catalog.pg_replication_origin_advance({name}, '{lsn}'); \
             SELECT pg_catalog.pg_replication_origin_session_setup({name})"
        );
        self.session.simple_query(&sql).map_err(refused)?;
        Ok(())
    }

    /// Ends the session politely.
    pub fn close(self) {
        self.session.close();
    }
}

/// The wall clock as the queue counts time.
pub fn unix_now() -> UnixTime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    UnixTime(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

/// What an apply run did.
#[derive(Debug, Default)]
pub struct Applied {
    /// Transactions applied.
    pub transactions: u64,
    /// Rows inserted, updated or deleted.
    pub rows: u64,
    /// Transactions the origin's progress showed as applied already.
    pub skipped_at_start: usize,
    /// The commit end LSN of the last transaction applied.
    pub last_end_lsn: Option<Lsn>,
    /// Its commit time on the publisher.
    pub last_commit_ts: Option<PgTimestamp>,
    /// Transactions dropped as the operator asked (`skip`), by commit LSN.
    pub skipped: Vec<Lsn>,
    /// Where `--until` made applying hold (the next transaction's commit LSN).
    pub held_at: Option<Lsn>,
}

/// Where the operator's controls live and where applying holds.
#[derive(Clone, Debug)]
pub struct Controls {
    /// The queue directory (`control.json`, `status.json`).
    pub dir: PathBuf,
    /// Apply only what committed before this, then hold.
    pub until: Option<Until>,
}

/// One apply run's state (see [`apply_loop`]).
struct Looper<'a> {
    queue: &'a SharedQueue,
    sub: &'a mut Subscriber,
    stop: Option<&'a AtomicBool>,
    controls: &'a Controls,
    control: Control,
    control_read: Instant,
    applier: Applier,
    done: Applied,
    last_log: Instant,
    last_status: Instant,
}

/// What one turn of the loop did.
enum Turn {
    Go,
    Wait(Duration),
    Finished,
}

fn qerr(e: pgyard_delayq::Error) -> ApplyFailure {
    ApplyFailure::Queue(e.to_string())
}

/// Space and other retryable refusals resolve as apply and purge free segments.
fn soft<T>(r: Result<T, pgyard_delayq::Error>) -> Result<(), ApplyFailure> {
    match r {
        Err(e) if !e.is_retryable() => Err(qerr(e)),
        _ => Ok(()),
    }
}

/// Applies due items in commit order. Without `stop`, returns once the queue holds nothing
/// more (waiting for due times) or holds at `--until`; with it, runs until the flag is set
/// (`delayq run`, where `follow` fills the same queue). Obeys `pause`, `resume` and `skip`
/// within 200 ms and writes `status.json` every second.
pub fn apply_loop(
    queue: &SharedQueue,
    sub: &mut Subscriber,
    stop: Option<&AtomicBool>,
    controls: &Controls,
) -> Result<Applied, ApplyFailure> {
    let mut done = Applied::default();
    {
        let mut q = lock(queue);
        done.skipped_at_start = q.skip_applied_through(sub.progress).map_err(qerr)?;
        soft(q.flush())?;
    }
    let long_ago = Instant::now() - Duration::from_secs(60);
    let mut l = Looper {
        queue,
        sub,
        stop,
        controls,
        control: Control::default(),
        control_read: long_ago,
        applier: Applier::new(),
        done,
        last_log: Instant::now(),
        last_status: long_ago,
    };
    loop {
        let turn = l.turn()?;
        l.report();
        match turn {
            Turn::Go => {}
            Turn::Wait(d) => std::thread::sleep(d),
            Turn::Finished => {
                soft(lock(l.queue).flush())?;
                l.last_status = long_ago;
                l.report();
                return Ok(l.done);
            }
        }
    }
}

impl Looper<'_> {
    fn turn(&mut self) -> Result<Turn, ApplyFailure> {
        let idle = Duration::from_millis(200);
        if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return Ok(Turn::Finished);
        }
        if self.control_read.elapsed() >= idle {
            self.control_read = Instant::now();
            match Control::load(&self.controls.dir) {
                Ok(c) => self.control = c,
                Err(e) => eprintln!("pgyard delayq: {e}; keeping the previous controls"),
            }
        }
        if self.control.paused {
            return Ok(Turn::Wait(idle));
        }
        let next = lock(self.queue).next_commit();
        if let (Some(until), Some((lsn, ts))) = (self.controls.until, next) {
            if until.holds(lsn, ts) {
                self.done.held_at = Some(lsn);
                return Ok(if self.stop.is_some() {
                    Turn::Wait(idle)
                } else {
                    Turn::Finished
                });
            }
        }
        let ready = lock(self.queue).poll_ready(unix_now()).map_err(qerr)?;
        match ready {
            Some(Ready::Transaction(txn)) if self.control.skip.contains(&txn.commit_lsn) => {
                let mut q = lock(self.queue);
                q.mark_applied(txn.id).map_err(qerr)?;
                soft(q.flush())?;
                eprintln!(
                    "pgyard delayq: skipped the transaction committed at {}, as asked",
                    txn.commit_lsn
                );
                self.done.skipped.push(txn.commit_lsn);
            }
            Some(Ready::Transaction(txn)) => {
                self.done.rows += self.sub.apply(&mut self.applier, &txn)?;
                let mut q = lock(self.queue);
                q.mark_applied(txn.id).map_err(qerr)?;
                self.done.transactions += 1;
                self.done.last_end_lsn = Some(txn.end_lsn);
                self.done.last_commit_ts = Some(txn.commit_ts);
                if self.done.transactions.is_multiple_of(64) {
                    soft(q.flush())?;
                }
            }
            Some(Ready::Message(m)) => lock(self.queue).mark_applied(m.id).map_err(qerr)?,
            None => {
                let next = {
                    let mut q = lock(self.queue);
                    soft(q.flush())?;
                    soft(q.purge())?;
                    q.next_due()
                };
                let wait = match (next, self.stop) {
                    (None, None) => return Ok(Turn::Finished),
                    (None, Some(_)) => 200_000,
                    (Some(due), _) => (due.0 - unix_now().0).clamp(1_000, 200_000),
                };
                return Ok(Turn::Wait(Duration::from_micros(wait as u64)));
            }
        }
        Ok(Turn::Go)
    }

    /// The status line every 5 s on standard error, `status.json` every second.
    fn report(&mut self) {
        if self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            eprintln!("{}", status_line(&lock(self.queue), &self.done));
        }
        if self.last_status.elapsed() >= Duration::from_secs(1) {
            self.last_status = Instant::now();
            let applied = self.done.last_end_lsn.zip(self.done.last_commit_ts);
            let mut v = status_json(
                &lock(self.queue).inspect(),
                &self.control,
                applied,
                unix_now(),
            );
            v["running"] = true.into();
            v["pid"] = std::process::id().into();
            v["held_at"] = self.done.held_at.map(|l| l.to_string()).into();
            let path = self.controls.dir.join("status.json");
            if let Err(e) = write_status(&path, &v) {
                eprintln!("pgyard delayq: {e}");
            }
        }
    }
}

/// Replaces `status.json` (informational: renamed into place, not fsynced).
fn write_status(path: &std::path::Path, v: &serde_json::Value) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, v.to_string())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn status_line(q: &DelayQueue<FsStorage>, done: &Applied) -> String {
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
        Err(e @ (ApplyFailure::Apply(_) | ApplyFailure::Refused { .. })) => fail(1, &e),
        Err(e) => fail(2, &e),
    }
}
