//! The subscriber session of `pgyard delayq apply` and `run`: batches written without waiting
//! for their replies, each UPDATE's and DELETE's row count checked before its transaction
//! may commit, and the replies read strictly in the order they were asked for.
//!
//! A batch without UPDATE or DELETE goes out whole, its COMMIT included. One with them is
//! *unsettled* until its statements' replies are read: its end (the COMMIT with the origin's
//! progress, or a statement that fails with the row check's words) is written only then, at
//! the latest in front of whatever is written next. So the subscriber may sit idle for one
//! round trip per such batch, while the client builds the next batch during the batch before.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use bytes::BytesMut;
use pgyard_blocking::{PendingQuery, Session};
use pgyard_delayq::apply::{quote_literal, tag_rows, Plan, RowCheck, Statement, Step};
use pgyard_types::Lsn;
use pgyard_wire::frontend as fe;

use crate::delayq_apply::ApplyFailure;

/// Statements a session keeps prepared at most; past it they are all deallocated and the
/// shapes in use prepared again (shapes depend on relations and column sets, so this is
/// only reached by schemas with very many of them).
const PREPARED_MAX: usize = 2000;

/// The COPY data of one CopyData frame at most.
const COPY_CHUNK: usize = 256 << 10;

/// How long [`Subscriber::connect`] waits for a replication origin that another session
/// holds. A killed predecessor's backend keeps the origin until it notices its client is gone,
/// which can take as long as the batch it was running; a second live applier holds it for ever.
const ORIGIN_WAIT: Duration = Duration::from_secs(30);

/// Every column of every valid, immediate, non-partial unique index on a plain table, one
/// row per column: where finding a row by the key columns alone matches one row at most.
const UNIQUE_SQL: &str = "SELECT i.indexrelid, n.nspname, c.relname, a.attname \
     FROM pg_catalog.pg_index i \
     JOIN pg_catalog.pg_class c ON c.oid = i.indrelid \
     JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
     JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey) \
     WHERE i.indisunique AND i.indisvalid AND i.indisready AND i.indislive AND i.indimmediate \
     AND i.indpred IS NULL AND i.indexprs IS NULL AND c.relkind = 'r' \
     ORDER BY i.indexrelid";

/// A request whose reply is still to be read: a batch ([`Subscriber::send`]) or a progress
/// question ([`Subscriber::send_progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ticket(u64);

/// What one reply in flight answers. Along the queue of replies tickets never decrease: a
/// batch's end is written after its statements and before anything sent later.
#[derive(Debug)]
enum Expect {
    /// A part of a batch (BEGIN, a COPY, statements without checks, its end).
    Part(u64),
    /// A batch's statements up to a Sync: each Execute's check, and whether it ran by key.
    Checked(u64, Vec<Option<(RowCheck, bool)>>),
    /// A progress question.
    Progress(u64),
}

impl Expect {
    fn ticket(&self) -> u64 {
        match self {
            Expect::Part(t) | Expect::Checked(t, _) | Expect::Progress(t) => *t,
        }
    }
}

/// What came back for one ticket so far.
#[derive(Debug, Default)]
struct Outcome {
    /// The server's first error.
    error: Option<String>,
    /// The first failed row check, as the statement that fails with its words.
    failed_check: Option<String>,
    /// A progress question's answer.
    progress: Option<Lsn>,
}

/// The latest batch whose row counts are still to be read before its end is written.
#[derive(Debug)]
struct Unsettled {
    ticket: u64,
    /// Its COMMIT with the origin's progress, when it ends its transaction.
    commit: Option<String>,
}

/// A subscriber session bound to the replication origin.
pub struct Subscriber {
    session: Session,
    origin: String,
    /// The origin's flushed progress when the session started.
    pub progress: Lsn,
    /// Statements prepared on this session: SQL → statement name.
    prepared: HashMap<String, String>,
    /// The column sets of each table's unique indexes, by (schema, name), unquoted.
    unique: HashMap<(String, String), Vec<Vec<String>>>,
    in_flight: VecDeque<(PendingQuery, Expect)>,
    outcomes: HashMap<u64, Outcome>,
    unsettled: Option<Unsettled>,
    next_ticket: u64,
}

fn encode_failure(e: pgyard_wire::frame::EncodeError) -> ApplyFailure {
    ApplyFailure::Subscriber(e.to_string())
}

fn refused(e: pgyard_blocking::Error) -> ApplyFailure {
    ApplyFailure::Subscriber(e.to_string().trim_end().to_owned())
}

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

/// The first column of the first row, parsed as an LSN.
fn first_lsn(rows: &[Vec<Option<String>>]) -> Option<Lsn> {
    rows.first()
        .and_then(|r| r.first().cloned().flatten())
        .and_then(|t| t.parse().ok())
}

impl Subscriber {
    /// Connects, sets `session_replication_role = replica` and `synchronous_commit = off`
    /// (as the apply worker), `plan_cache_mode = force_generic_plan` (each statement shape is
    /// planned once: finding a row by its replica identity has no value-dependent plan to
    /// choose) and `enable_seqscan = off` (rows are found through an index wherever one
    /// exists, as the apply worker finds them through the identity index, even when stale
    /// statistics call a table that updates have bloated small), creates the origin if
    /// missing, binds the session to it, and learns the tables' unique indexes.
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
        // Every result's rows come back in one list: the progress is the last one.
        let progress = first_lsn(rows.last().map(std::slice::from_ref).unwrap_or_default())
            .unwrap_or(Lsn::INVALID);
        let mut unique: HashMap<(String, String), Vec<Vec<String>>> = HashMap::new();
        let mut last_index = None;
        for row in session.simple_query(UNIQUE_SQL).map_err(refused)? {
            let [Some(index), Some(schema), Some(table), Some(column)] = &row[..] else {
                continue;
            };
            let sets = unique.entry((schema.clone(), table.clone())).or_default();
            if last_index.as_ref() != Some(index) || sets.is_empty() {
                sets.push(Vec::new());
                last_index = Some(index.clone());
            }
            if let Some(set) = sets.last_mut() {
                set.push(column.clone());
            }
        }
        Ok(Subscriber {
            session,
            origin: origin.to_owned(),
            progress,
            prepared: HashMap::new(),
            unique,
            in_flight: VecDeque::new(),
            outcomes: HashMap::new(),
            unsettled: None,
            next_ticket: 0,
        })
    }

    /// Sends one batch's plan in one write without waiting for its replies (several may be
    /// in flight; see [`Plan`] for why that is safe): the end of the batch before, if it was
    /// still unsettled; `BEGIN` as a simple query; runs of statements as Bind/Execute of
    /// statements prepared on this session (Parse first where one is new) up to a Sync; each
    /// COPY as a simple query with its data and CopyDone right behind it; then the progress
    /// with COMMIT as one simple query, unless the batch has row counts to check first (its
    /// end then waits: see the module's documentation). A piece of a larger transaction
    /// leaves out the `BEGIN` or the COMMIT as [`Plan`] says.
    pub fn send(&mut self, plan: &Plan) -> Result<Ticket, ApplyFailure> {
        let mut buf = BytesMut::with_capacity(plan.bytes() + 64 * plan.steps.len());
        let mut expect = Vec::new();
        self.settle(&mut buf, &mut expect)?;
        let t = self.ticket();
        if plan.opens {
            let begin = if self.prepared.len() > PREPARED_MAX {
                self.prepared.clear();
                format!("DEALLOCATE ALL; {}", Plan::BEGIN)
            } else {
                Plan::BEGIN.to_owned()
            };
            fe::encode_query(begin.as_bytes(), &mut buf).map_err(encode_failure)?;
            expect.push(Expect::Part(t));
        }
        let mut checked = false;
        let mut group: Option<Vec<Option<(RowCheck, bool)>>> = None;
        let mut end_group = |group: Vec<Option<(RowCheck, bool)>>, buf: &mut BytesMut| {
            fe::encode_sync(buf);
            if group.iter().all(Option::is_none) {
                Expect::Part(t)
            } else {
                checked = true;
                Expect::Checked(t, group)
            }
        };
        for step in &plan.steps {
            match step {
                Step::Run(st) => {
                    let by_key = self.encode_statement(st, &mut buf)?;
                    let check = st.check.clone().map(|c| (c, by_key));
                    group.get_or_insert_with(Vec::new).push(check);
                }
                Step::Copy(copy) => {
                    if let Some(g) = group.take() {
                        expect.push(end_group(g, &mut buf));
                    }
                    fe::encode_query(copy.sql.as_bytes(), &mut buf).map_err(encode_failure)?;
                    // COPY data may be cut anywhere; CopyData frames stay modest.
                    for chunk in copy.data.chunks(COPY_CHUNK) {
                        fe::encode_copy_data(chunk, &mut buf).map_err(encode_failure)?;
                    }
                    fe::encode_copy_done(&mut buf);
                    expect.push(Expect::Part(t));
                }
            }
        }
        if let Some(g) = group.take() {
            expect.push(end_group(g, &mut buf));
        }
        let commit = plan.closes.then(|| plan.commit_sql());
        if checked {
            self.unsettled = Some(Unsettled { ticket: t, commit });
        } else if let Some(sql) = commit {
            fe::encode_query(sql.as_bytes(), &mut buf).map_err(encode_failure)?;
            expect.push(Expect::Part(t));
        }
        self.write(&buf, expect)?;
        Ok(Ticket(t))
    }

    fn ticket(&mut self) -> u64 {
        let t = self.next_ticket;
        self.next_ticket += 1;
        self.outcomes.insert(t, Outcome::default());
        t
    }

    /// Bind/Execute of one statement, with its Parse the first time this session sees it;
    /// whether it went in its by-key form (the subscriber has a unique index on the key).
    fn encode_statement(
        &mut self,
        st: &Statement,
        buf: &mut BytesMut,
    ) -> Result<bool, ApplyFailure> {
        let by_key = st.check.as_ref().and_then(|c| {
            let c = &c.shape;
            let sets = self.unique.get(&c.relation)?;
            let unique = sets
                .iter()
                .any(|s| !s.is_empty() && s.iter().all(|col| c.key.contains(col)));
            unique.then_some(c.by_key.as_deref()).flatten()
        });
        let sql = by_key.unwrap_or(&st.sql);
        let next = self.prepared.len();
        let name = match self.prepared.get(sql) {
            Some(name) => name.as_str(),
            None => {
                let name = format!("pgyard_delayq_{next}");
                fe::encode_parse(name.as_bytes(), sql.as_bytes(), &[], buf)
                    .map_err(encode_failure)?;
                self.prepared.entry(sql.to_owned()).or_insert(name).as_str()
            }
        };
        let params: Vec<Option<&[u8]>> = st.params.iter().map(Option::as_deref).collect();
        fe::encode_bind(b"", name.as_bytes(), &[], &params, &[], buf).map_err(encode_failure)?;
        fe::encode_execute(b"", 0, buf).map_err(encode_failure)?;
        Ok(by_key.is_some())
    }

    /// Writes `buf` and notes the replies it asks for.
    fn write(&mut self, buf: &[u8], expect: Vec<Expect>) -> Result<(), ApplyFailure> {
        if expect.is_empty() {
            return Ok(());
        }
        let replies = self
            .session
            .send_pipeline(buf, expect.len())
            .map_err(refused)?;
        self.in_flight.extend(replies.into_iter().zip(expect));
        Ok(())
    }

    /// Ends the unsettled batch, if any, in `buf`: reads its replies, then its COMMIT when
    /// every row check passed, the failing statement when one did not, nothing when the
    /// server refused it already (its transaction is aborted) or it is a piece that does not
    /// end its transaction.
    fn settle(&mut self, buf: &mut BytesMut, expect: &mut Vec<Expect>) -> Result<(), ApplyFailure> {
        let Some(u) = self.unsettled.take() else {
            return Ok(());
        };
        self.read_through(u.ticket)?;
        let Some(o) = self.outcomes.get(&u.ticket) else {
            return Ok(());
        };
        let end = match (&o.error, &o.failed_check, u.commit) {
            (Some(_), _, _) => None,
            (None, Some(failing), _) => Some(failing.clone()),
            (None, None, commit) => commit,
        };
        if let Some(sql) = end {
            fe::encode_query(sql.as_bytes(), buf).map_err(encode_failure)?;
            expect.push(Expect::Part(u.ticket));
        }
        Ok(())
    }

    /// Reads replies until none of `ticket`'s (or an older one's) is in flight.
    fn read_through(&mut self, ticket: u64) -> Result<(), ApplyFailure> {
        while self
            .in_flight
            .front()
            .is_some_and(|(_, e)| e.ticket() <= ticket)
        {
            self.read_one()?;
        }
        Ok(())
    }

    /// Reads the oldest reply in flight into its ticket's outcome.
    fn read_one(&mut self) -> Result<(), ApplyFailure> {
        let Some((pending, expect)) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let reply = self.session.finish_query_tagged(pending);
        let outcome = self.outcomes.entry(expect.ticket()).or_default();
        let (rows, tags) = match reply {
            Ok(r) => r,
            // The server going away (shutdown, terminated backend) is the connection's
            // failure, not the transaction's: nothing more will come.
            Err(e) if e.kind().is_retryable() => return Err(refused(e)),
            Err(pgyard_blocking::Error::Server { text, .. }) => {
                outcome.error.get_or_insert(text);
                return Ok(());
            }
            Err(e) => return Err(refused(e)),
        };
        match expect {
            Expect::Part(_) => {}
            Expect::Progress(_) => {
                outcome.progress = Some(first_lsn(&rows).unwrap_or(Lsn::INVALID))
            }
            Expect::Checked(_, checks) => {
                if tags.len() != checks.len() {
                    return Err(ApplyFailure::Subscriber(format!(
                        "{} statements answered with {} command tags",
                        checks.len(),
                        tags.len()
                    )));
                }
                for (check, tag) in checks.into_iter().zip(&tags) {
                    let Some((check, by_key)) = check else {
                        continue;
                    };
                    let rows = tag_rows(tag).unwrap_or(0);
                    if rows == 1 {
                        continue;
                    }
                    if by_key && rows > 1 {
                        // The unique index found at connect is gone. A session of its own
                        // learns the indexes again and finds rows by ctid; this one's
                        // transaction, never committed, goes with it.
                        return Err(ApplyFailure::Subscriber(format!(
                            "{}: found by its key, {rows} rows changed: the unique index on \
                             the key that the session found at its start is gone",
                            check.what()
                        )));
                    }
                    outcome
                        .failed_check
                        .get_or_insert_with(|| check.failing_sql(rows));
                }
            }
        }
        Ok(())
    }

    /// Reads what came back for a batch: `Ok(Ok(()))` when it committed (or, for a piece
    /// that does not end its transaction, ran), `Ok(Err(text))` when the subscriber refused
    /// it or a row check failed (the first error: what follows only says the transaction is
    /// aborted), `Err` when the connection failed.
    pub fn finish(&mut self, ticket: Ticket) -> Result<Result<(), String>, ApplyFailure> {
        if self
            .unsettled
            .as_ref()
            .is_some_and(|u| u.ticket == ticket.0)
        {
            let mut buf = BytesMut::new();
            let mut expect = Vec::new();
            self.settle(&mut buf, &mut expect)?;
            self.write(&buf, expect)?;
        }
        self.read_through(ticket.0)?;
        let outcome = self.outcomes.remove(&ticket.0).unwrap_or_default();
        Ok(outcome.error.map_or(Ok(()), Err))
    }

    /// Asks for the origin's progress made durable (`flush = true` flushes the subscriber's
    /// WAL up to it): what may be acknowledged to the queue.
    pub fn send_progress(&mut self) -> Result<Ticket, ApplyFailure> {
        let mut buf = BytesMut::new();
        let mut expect = Vec::new();
        self.settle(&mut buf, &mut expect)?;
        let t = self.ticket();
        fe::encode_query(
            b"SELECT pg_catalog.pg_replication_origin_session_progress(true)",
            &mut buf,
        )
        .map_err(encode_failure)?;
        expect.push(Expect::Progress(t));
        self.write(&buf, expect)?;
        Ok(Ticket(t))
    }

    /// The answer to [`Subscriber::send_progress`].
    pub fn finish_progress(&mut self, ticket: Ticket) -> Result<Lsn, ApplyFailure> {
        self.read_through(ticket.0)?;
        let outcome = self.outcomes.remove(&ticket.0).unwrap_or_default();
        match outcome.error {
            Some(e) => Err(ApplyFailure::Subscriber(e.trim_end().to_owned())),
            None => Ok(outcome.progress.unwrap_or(Lsn::INVALID)),
        }
    }

    /// After a failed transaction: reads every reply still in flight (they fail: the
    /// transaction block is aborted), rolls back, and moves the origin back to `origin` (the
    /// last batch that committed) if the abort moved it (a COMMIT that failed after the
    /// progress was set).
    pub fn abandon(&mut self, origin: Lsn) -> Result<(), ApplyFailure> {
        self.unsettled = None;
        while let Some((p, _)) = self.in_flight.pop_front() {
            match self.session.finish_query(p) {
                Ok(_) | Err(pgyard_blocking::Error::Server { .. }) => {}
                Err(e) => return Err(refused(e)),
            }
        }
        self.outcomes.clear();
        // Statements parsed in batches that failed were never created: start afresh.
        self.prepared.clear();
        self.session
            .simple_query("ROLLBACK; DEALLOCATE ALL")
            .map_err(refused)?;
        let rows = self
            .session
            .simple_query("SELECT pg_catalog.pg_replication_origin_session_progress(false)")
            .map_err(refused)?;
        if first_lsn(&rows).is_some_and(|l| l > origin) {
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
