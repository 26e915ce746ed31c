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

use pgyard_blocking::Session;

use std::collections::HashMap;

use bytes::BytesMut;
use pgyard_blocking::PendingQuery;
use pgyard_delayq::apply::{quote_literal, timestamp_text, ApplyError, Plan, Statement, Step};
use pgyard_delayq::{Config, DelayQueue, FsStorage};
use pgyard_tokio::follow::SharedQueue;
use pgyard_wire::frontend as fe;

use crate::delayq_control::{lock_dir, parse_until, Until};
pub use crate::delayq_loop::{apply_loop, Controls};
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

/// A subscriber session bound to the replication origin.
pub struct Subscriber {
    session: Session,
    origin: String,
    /// The origin's flushed progress when the session started.
    pub progress: Lsn,
    /// Statements prepared on this session: SQL → statement name.
    prepared: HashMap<String, String>,
}

/// Statements a session keeps prepared at most; past it they are all deallocated and the
/// shapes in use prepared again (shapes depend on relations and column sets, so this is
/// only reached by schemas with very many of them).
const PREPARED_MAX: usize = 2000;

/// The COPY data of one CopyData frame at most.
const COPY_CHUNK: usize = 256 << 10;

fn encode_failure(e: pgyard_wire::frame::EncodeError) -> ApplyFailure {
    ApplyFailure::Subscriber(e.to_string())
}

/// A batch sent with [`Subscriber::send`] whose replies are still to be read: BEGIN, each
/// run of statements up to its Sync, each COPY, and the progress with COMMIT.
#[derive(Debug)]
pub struct PendingBatch(Vec<PendingQuery>);

impl PendingBatch {
    /// The replies still to read, for [`Subscriber::abandon`].
    pub fn into_replies(self) -> Vec<PendingQuery> {
        self.0
    }
}

/// How long [`Subscriber::connect`] waits for a replication origin that another session
/// holds. A killed predecessor's backend keeps the origin until it notices its client is gone,
/// which can take as long as the batch it was running; a second live applier holds it for ever.
const ORIGIN_WAIT: Duration = Duration::from_secs(30);

/// Runs the session setup, trying again while the origin is active in another backend
/// (SQLSTATE 55006, as the apply worker treats it: transient), for at most `patience`.
/// The setup is one implicit transaction, so a failed try leaves nothing behind.
fn bind_origin(
    session: &mut Session,
    setup: &str,
    patience: Duration,
) -> Result<Vec<Vec<Option<String>>>, ApplyFailure> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(20);
    loop {
        let e = match session.simple_query(setup) {
            Ok(rows) => return Ok(rows),
            Err(e) if e.sqlstate().is_some_and(|s| s.as_str() == "55006") => e,
            Err(e) => return Err(refused(e)),
        };
        if start.elapsed() + pause > patience {
            return Err(ApplyFailure::Subscriber(format!(
                "{} (waited {} s for the session that holds the origin to end; is another \
                 pgyard applying with the same --origin?)",
                e.to_string().trim_end(),
                patience.as_secs()
            )));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

fn refused(e: pgyard_blocking::Error) -> ApplyFailure {
    ApplyFailure::Subscriber(e.to_string().trim_end().to_owned())
}

impl Subscriber {
    /// Connects, sets `session_replication_role = replica` and `synchronous_commit = off`
    /// (as the apply worker), `plan_cache_mode = force_generic_plan` (each statement shape is
    /// planned once: finding a row by its replica identity has no value-dependent plan to
    /// choose) and `enable_seqscan = off` (rows are found through an index wherever one
    /// exists, as the apply worker finds them through the identity index, even when stale
    /// statistics call a table that updates have bloated small), creates the origin if
    /// missing and binds the session to it.
    pub fn connect(conninfo: &str, origin: &str) -> Result<Subscriber, ApplyFailure> {
        let mut session = pgyard_blocking::connect(conninfo).map_err(refused)?;
        let name = quote_literal(origin);
        let setup = format!(
            "SET session_replication_role = replica; SET synchronous_commit = off; \
             SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off; \
             SELECT pg_catalog.pg_replication_origin_create({name}) \
             WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_origin WHERE roname = {name}); \
             SELECT pg_catalog.pg_replication_origin_session_setup({name}); \
             SELECT pg_catalog.pg_replication_origin_progress({name}, true)"
        );
        let rows = bind_origin(&mut session, &setup, ORIGIN_WAIT)?;
        let progress = rows
            .last()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|t| t.parse().ok())
            .unwrap_or(Lsn::INVALID);
        Ok(Subscriber {
            session,
            origin: origin.to_owned(),
            progress,
            prepared: HashMap::new(),
        })
    }

    /// Sends one batch's plan in one write without waiting for the replies (several may be
    /// in flight; see [`Plan`] for why that is safe): `BEGIN` as a simple query; runs of
    /// statements as Bind/Execute of statements prepared on this session (Parse first where
    /// one is new) up to a Sync; each COPY as a simple query with its data and CopyDone
    /// right behind it; then the progress with COMMIT as one simple query. A piece of a
    /// larger transaction leaves out the `BEGIN` or the COMMIT as [`Plan`] says.
    pub fn send(&mut self, plan: &Plan) -> Result<PendingBatch, ApplyFailure> {
        let mut buf = BytesMut::with_capacity(plan.bytes() + 64 * plan.steps.len());
        let mut replies = 0;
        // A later piece of a transaction sent in pieces continues the open one.
        if plan.opens {
            let begin = if self.prepared.len() > PREPARED_MAX {
                self.prepared.clear();
                format!("DEALLOCATE ALL; {}", Plan::BEGIN)
            } else {
                Plan::BEGIN.to_owned()
            };
            fe::encode_query(begin.as_bytes(), &mut buf).map_err(encode_failure)?;
            replies += 1;
        }
        let mut extended = false;
        for step in &plan.steps {
            match step {
                Step::Run(st) => {
                    self.encode_statement(st, &mut buf)?;
                    extended = true;
                }
                Step::Copy(copy) => {
                    if std::mem::take(&mut extended) {
                        fe::encode_sync(&mut buf);
                        replies += 1;
                    }
                    fe::encode_query(copy.sql.as_bytes(), &mut buf).map_err(encode_failure)?;
                    // COPY data may be cut anywhere; CopyData frames stay modest.
                    for chunk in copy.data.chunks(COPY_CHUNK) {
                        fe::encode_copy_data(chunk, &mut buf).map_err(encode_failure)?;
                    }
                    fe::encode_copy_done(&mut buf);
                    replies += 1;
                }
            }
        }
        if extended {
            fe::encode_sync(&mut buf);
            replies += 1;
        }
        if plan.closes {
            fe::encode_query(plan.commit_sql().as_bytes(), &mut buf).map_err(encode_failure)?;
            replies += 1;
        }
        let replies = self.session.send_pipeline(&buf, replies).map_err(refused)?;
        Ok(PendingBatch(replies))
    }

    /// Bind/Execute of one statement, with its Parse the first time this session sees it.
    fn encode_statement(&mut self, st: &Statement, buf: &mut BytesMut) -> Result<(), ApplyFailure> {
        let next = self.prepared.len();
        let name = match self.prepared.get(&st.sql) {
            Some(name) => name.as_str(),
            None => {
                let name = format!("pgyard_delayq_{next}");
                fe::encode_parse(name.as_bytes(), st.sql.as_bytes(), &[], buf)
                    .map_err(encode_failure)?;
                self.prepared.entry(st.sql.clone()).or_insert(name).as_str()
            }
        };
        let params: Vec<Option<&[u8]>> = st.params.iter().map(Option::as_deref).collect();
        fe::encode_bind(b"", name.as_bytes(), &[], &params, &[], buf).map_err(encode_failure)?;
        fe::encode_execute(b"", 0, buf).map_err(encode_failure)
    }

    /// Reads the replies of the oldest batch sent: `Ok(Ok(()))` when it committed,
    /// `Ok(Err(text))` when the subscriber refused it (its first error: what follows only
    /// says the transaction is aborted), `Err` when the connection failed.
    pub fn finish(&mut self, pending: PendingBatch) -> Result<Result<(), String>, ApplyFailure> {
        let mut first: Option<String> = None;
        for reply in pending.0 {
            match self.session.finish_query(reply) {
                Ok(_) => {}
                // The server going away (shutdown, terminated backend) is the connection's
                // failure, not the transaction's: nothing more will come.
                Err(e) if e.kind().is_retryable() => return Err(refused(e)),
                Err(pgyard_blocking::Error::Server { text, .. }) => {
                    first.get_or_insert(text);
                }
                Err(e) => return Err(refused(e)),
            }
        }
        Ok(first.map_or(Ok(()), Err))
    }

    /// Asks for the origin's progress made durable (`flush = true` flushes the subscriber's
    /// WAL up to it): what may be acknowledged to the queue.
    pub fn send_progress(&mut self) -> Result<PendingQuery, ApplyFailure> {
        self.session
            .send_query("SELECT pg_catalog.pg_replication_origin_session_progress(true)")
            .map_err(refused)
    }

    /// The answer to [`Subscriber::send_progress`].
    pub fn finish_progress(&mut self, pending: PendingQuery) -> Result<Lsn, ApplyFailure> {
        let rows = self.session.finish_query(pending).map_err(refused)?;
        Ok(rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|t| t.parse().ok())
            .unwrap_or(Lsn::INVALID))
    }

    /// After a failed transaction: reads the replies still in flight (they fail: the
    /// transaction block is aborted), rolls back, and moves the origin back to `origin` (the
    /// last batch that committed) if the abort moved it (a COMMIT that failed after the
    /// progress was set).
    pub fn abandon(
        &mut self,
        in_flight: Vec<PendingQuery>,
        origin: Lsn,
    ) -> Result<(), ApplyFailure> {
        for p in in_flight {
            match self.session.finish_query(p) {
                Ok(_) | Err(pgyard_blocking::Error::Server { .. }) => {}
                Err(e) => return Err(refused(e)),
            }
        }
        // Statements parsed in batches that failed were never created: start afresh.
        self.prepared.clear();
        self.session
            .simple_query("ROLLBACK; DEALLOCATE ALL")
            .map_err(refused)?;
        let rows = self
            .session
            .simple_query("SELECT pg_catalog.pg_replication_origin_session_progress(false)")
            .map_err(refused)?;
        let now: Option<Lsn> = rows
            .first()
            .and_then(|r| r.first().cloned().flatten())
            .and_then(|t| t.parse().ok());
        if now.is_some_and(|l| l > origin) {
            self.rewind(origin)?;
        }
        Ok(())
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
