//! The model subscriber: a PostgreSQL server that runs the apply machine's plans against its
//! tables, with the replication origin's progress committed in the same transaction and
//! `synchronous_commit = off` — a commit is durable only once the WAL is flushed (by the WAL
//! writer now and then, by `pg_replication_origin_session_progress(true)`, or by the
//! `pg_replication_origin_progress(name, true)` an applier reads when it connects), and a
//! crash loses the commits after the last flush together with the origin progress they
//! carried.
//!
//! Requests arrive on one connection in the order sent and are answered in that order; the
//! scenario decides when the server gets to run them. A refused batch leaves the transaction
//! block aborted, so everything behind it fails until the ROLLBACK, as on the server. The
//! server also plays the part of the CLI's runner: it checks that each UPDATE and DELETE
//! changed exactly one row (refusing the transaction with the check's own words when not),
//! and finds rows by key alone where the tables have a unique index on it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use pgyard_delayq::apply::{BatchId, Plan, Statement, Step};
use pgyard_types::Lsn;

use super::tables::{parse_change, Stored, Tables, Undo};
pub(super) use super::tables::{Change, Row, Target};
use super::text::origin_setup;

/// Where a statement of a committed batch put its rows, for the scenario's checks.
#[derive(Debug)]
pub(super) struct Inserted {
    /// The table and columns.
    pub(super) target: Rc<Target>,
    /// The rows, by position in the table.
    pub(super) rows: std::ops::Range<usize>,
}

/// A request on the applier's connection.
#[derive(Debug)]
pub(super) enum Request {
    /// A batch: `BEGIN`, its steps, the origin's progress with `COMMIT`.
    Batch(BatchId, Plan),
    /// `pg_replication_origin_session_progress(true)`.
    Progress,
    /// `ROLLBACK`, and the origin put back at this LSN if the abort had moved it.
    Rollback(Lsn),
}

/// The server's answer to one request.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reply {
    /// The batch committed.
    Committed(BatchId),
    /// The batch was refused with this error text.
    Refused(BatchId, String),
    /// The origin's progress, now flushed.
    Progress(Lsn),
    /// A request that failed in an aborted transaction block, or a ROLLBACK's answer.
    Other,
}

/// What running one request changed, for the scenario's checks.
#[derive(Debug)]
pub(super) enum Ran {
    /// Nothing the checks look at.
    Nothing,
    /// A batch committed: the origin moved from `from` to `to`, these rows were inserted
    /// (their keys at insertion are `log[keys]`), these TRUNCATEs ran; the origin's commit
    /// time was set to `time` (Unix microseconds).
    Committed {
        from: Lsn,
        to: Lsn,
        time: i64,
        inserted: Vec<Inserted>,
        keys: std::ops::Range<usize>,
        truncated: Vec<Rc<Change>>,
    },
    /// A ROLLBACK was asked to leave the origin at `asked`; it stood at `at`.
    RolledBack { asked: Lsn, at: Lsn },
}

/// What survives a crash.
#[derive(Clone, Debug, Default)]
struct Durable {
    origin: Lsn,
    log: usize,
}

/// A transaction block in progress: its changes are in the tables already, with their undo.
#[derive(Debug, Default)]
struct OpenTxn {
    inserted: Vec<Inserted>,
    keys: Vec<Vec<u8>>,
    truncated: Vec<Rc<Change>>,
    undo: Vec<Undo>,
}

/// The applier's connection: requests not yet run, replies not yet read (each marked live
/// until the applier abandons it), and whether the transaction block is aborted.
#[derive(Debug, Default)]
struct Session {
    inbox: VecDeque<(Request, bool)>,
    outbox: VecDeque<(Reply, bool)>,
    aborted: bool,
    /// A transaction sent in pieces whose COMMIT has not come yet.
    open: Option<OpenTxn>,
}

/// The subscriber server.
#[derive(Debug, Default)]
pub(super) struct SubServer {
    pub(super) tables: Tables,
    /// Tables the subscriber does not have yet (the operator creates them after a failure).
    pub(super) missing: BTreeSet<String>,
    /// The `payload` column of every row, in commit order: the checks compare it with what
    /// the publisher committed.
    pub(super) log: Vec<Vec<u8>>,
    /// The origin's progress (in memory: committed, maybe not yet flushed).
    pub(super) origin: Lsn,
    durable: Durable,
    /// How to undo what was committed since the last flush (a crash loses it).
    unflushed: Vec<Undo>,
    session: Option<Session>,
    /// Statement targets parsed so far, by their text.
    targets: BTreeMap<String, Rc<Target>>,
    /// UPDATE, DELETE and TRUNCATE statements parsed so far, by their text.
    changes: BTreeMap<String, Rc<Change>>,
}

impl SubServer {
    /// A new connection from an applier: the previous one is gone, and the applier reads the
    /// origin's progress with `flush = true`, which makes everything committed durable.
    pub(super) fn connect(&mut self) -> Lsn {
        self.drop_session(0);
        self.session = Some(Session::default());
        self.flush_wal();
        self.origin
    }

    /// Whether an applier is connected.
    pub(super) fn connected(&self) -> bool {
        self.session.is_some()
    }

    /// Requests sent and not yet run, and replies not yet read.
    pub(super) fn in_flight(&self) -> (usize, usize) {
        self.session
            .as_ref()
            .map_or((0, 0), |s| (s.inbox.len(), s.outbox.len()))
    }

    /// The applier sends a request.
    pub(super) fn send(&mut self, request: Request) {
        if let Some(s) = &mut self.session {
            s.inbox.push_back((request, true));
        }
    }

    /// The applier gives up every request and reply in flight (it rolls back after a
    /// refusal): their replies will be read and dropped.
    pub(super) fn abandon_in_flight(&mut self) {
        if let Some(s) = &mut self.session {
            s.inbox.iter_mut().for_each(|r| r.1 = false);
            s.outbox.iter_mut().for_each(|r| r.1 = false);
        }
    }

    /// The oldest reply, if a live one: abandoned replies are read and dropped on the way.
    pub(super) fn read_reply(&mut self) -> Option<Reply> {
        let s = self.session.as_mut()?;
        while let Some((reply, live)) = s.outbox.pop_front() {
            if live {
                return Some(reply);
            }
        }
        None
    }

    /// The WAL writer (or a flushing function) writes and flushes everything committed.
    pub(super) fn flush_wal(&mut self) {
        self.durable = Durable {
            origin: self.origin,
            log: self.log.len(),
        };
        self.unflushed.clear();
    }

    /// The origin's durable progress.
    pub(super) fn durable_origin(&self) -> Lsn {
        self.durable.origin
    }

    /// Immediate shutdown or power loss: commits after the last flush are gone with their
    /// origin progress, and so is the applier's connection.
    pub(super) fn crash(&mut self) -> usize {
        self.end_session();
        let lost = self.log.len() - self.durable.log;
        self.origin = self.durable.origin;
        self.log.truncate(self.durable.log);
        self.tables.undo(std::mem::take(&mut self.unflushed));
        self.tables.commit();
        lost
    }

    /// The connection is gone: an open transaction block is rolled back.
    fn end_session(&mut self) {
        if let Some(open) = self.session.take().and_then(|s| s.open) {
            self.tables.undo(open.undo);
        }
    }

    /// The applier process died: of what it sent, the first `arrived` requests had reached
    /// the server, which runs them; the rest never arrive, and no reply is read. Returns what
    /// running them changed.
    pub(super) fn drop_session(&mut self, arrived: usize) -> Vec<Ran> {
        let Some(mut s) = self.session.take() else {
            return Vec::new();
        };
        s.inbox.truncate(arrived);
        s.inbox.iter_mut().for_each(|r| r.1 = false);
        self.session = Some(s);
        let mut ran = Vec::new();
        while let Some(r) = self.run_next() {
            ran.push(r);
        }
        // The backend notices its client is gone: an open transaction block is rolled back.
        self.end_session();
        ran
    }

    /// Runs the oldest request sent, if any.
    pub(super) fn run_next(&mut self) -> Option<Ran> {
        let s = self.session.as_mut()?;
        let (request, mut live) = s.inbox.pop_front()?;
        let aborted = s.aborted;
        // The applier reads the ROLLBACK's answer itself, as part of abandoning the batch.
        live &= !matches!(request, Request::Rollback(_));
        let (reply, ran) = match request {
            Request::Rollback(asked) => {
                self.abort(false);
                let at = self.origin;
                (Reply::Other, Ran::RolledBack { asked, at })
            }
            _ if aborted => (Reply::Other, Ran::Nothing),
            Request::Progress => {
                self.flush_wal();
                (Reply::Progress(self.origin), Ran::Nothing)
            }
            Request::Batch(id, plan) => match self.run_plan(plan) {
                Ok(Some((open, to, time))) => (Reply::Committed(id), self.commit(open, to, time)),
                // A piece of a transaction sent in pieces ran; the COMMIT comes later.
                Ok(None) => (Reply::Committed(id), Ran::Nothing),
                Err(text) => {
                    self.abort(true);
                    (Reply::Refused(id, text), Ran::Nothing)
                }
            },
        };
        if let Some(s) = &mut self.session {
            s.outbox.push_back((reply, live));
        }
        Some(ran)
    }

    /// The transaction block is rolled back (`failed`: it failed first, and stays aborted
    /// until the ROLLBACK).
    fn abort(&mut self, failed: bool) {
        let Some(s) = &mut self.session else {
            return;
        };
        s.aborted = failed;
        if let Some(open) = s.open.take() {
            self.tables.undo(open.undo);
        }
    }

    /// Runs a plan (or a piece of a transaction sent in pieces): the transaction to commit
    /// with the origin's progress and commit time, read from the query that commits it, once
    /// it closes; `None` while it stays open; or the error that aborts it. A piece out of
    /// place is refused: on the server its statements would run outside the transaction, or
    /// BEGIN would be ignored inside one.
    fn run_plan(&mut self, plan: Plan) -> Result<Option<(OpenTxn, Lsn, i64)>, String> {
        let commit = plan.closes.then(|| plan.commit_sql());
        let open = self.session.as_mut().and_then(|s| s.open.take());
        let mut txn = match (plan.opens, open) {
            (true, None) => OpenTxn::default(),
            (false, Some(txn)) => txn,
            (true, Some(txn)) => {
                self.tables.undo(txn.undo);
                return Err("pgyard sim: BEGIN inside a transaction".into());
            }
            (false, None) => return Err("pgyard sim: a piece outside a transaction".into()),
        };
        for step in plan.steps {
            if let Err(e) = self.run_step(step, &mut txn) {
                self.tables.undo(txn.undo);
                return Err(e);
            }
        }
        if let Some(sql) = commit {
            let Some((to, time)) = origin_setup(&sql) else {
                self.tables.undo(txn.undo);
                return Err(format!("pgyard sim: unsupported commit {sql}"));
            };
            return Ok(Some((txn, to, time)));
        }
        if let Some(s) = &mut self.session {
            s.open = Some(txn);
        }
        Ok(None)
    }

    /// Runs one step inside the transaction `txn`.
    fn run_step(&mut self, step: Step, txn: &mut OpenTxn) -> Result<(), String> {
        let (target, rows) = match step {
            Step::Run(st) if !st.sql.starts_with("INSERT ") => return self.run_change(st, txn),
            Step::Run(st) => {
                let target = self
                    .target(&st.sql)
                    .ok_or_else(|| format!("pgyard sim: unsupported statement {}", st.sql))?;
                let width = target.columns.len();
                if width == 0 || st.params.len() % width != 0 {
                    return Err(format!(
                        "pgyard sim: {} values for {target:?}",
                        st.params.len()
                    ));
                }
                // The values move into the rows: the plan is spent once it has run.
                let mut rows = Vec::with_capacity(st.params.len() / width);
                let mut values = st.params.into_iter();
                loop {
                    let row: Row = values.by_ref().take(width).collect();
                    if row.is_empty() {
                        break;
                    }
                    rows.push(row);
                }
                (target, rows)
            }
            Step::Copy(c) => {
                let target = self
                    .target(&c.sql)
                    .ok_or_else(|| format!("pgyard sim: unsupported COPY {}", c.sql))?;
                let rows = copy_rows(&c.data, target.columns.len())
                    .ok_or_else(|| format!("pgyard sim: bad COPY data for {target:?}"))?;
                (target, rows)
            }
        };
        self.exists(&target.table)?;
        let p = target.payload_at();
        txn.keys.extend(
            rows.iter()
                .map(|r| p.and_then(|i| r[i].clone()).unwrap_or_default()),
        );
        let rows = self
            .tables
            .insert(&target, rows.into_iter(), &mut txn.undo)?;
        txn.inserted.push(Inserted { target, rows });
        Ok(())
    }

    /// An UPDATE, DELETE or TRUNCATE, run as the CLI's runner runs it: by key alone where
    /// the key has a unique index, and each UPDATE or DELETE checked to change one row.
    fn run_change(&mut self, st: Statement, txn: &mut OpenTxn) -> Result<(), String> {
        let by_key = st.check.as_ref().and_then(|c| {
            let keyed = self.tables.unique && c.shape.key.iter().any(|k| k == "payload");
            keyed.then_some(c.shape.by_key.as_deref()).flatten()
        });
        let sql = by_key.unwrap_or(&st.sql);
        let change = self
            .parsed(sql)
            .ok_or_else(|| format!("pgyard sim: unsupported statement {sql}"))?;
        if let Change::Truncate { tables, .. } = &*change {
            for t in tables {
                self.exists(t)?;
            }
            self.tables.truncate(tables, &mut txn.undo);
            txn.truncated.push(change);
            return Ok(());
        }
        if let Change::Rows { table, .. } = &*change {
            self.exists(table)?;
        }
        let rows = self
            .tables
            .change_rows(&change, &st.params, &mut txn.undo)?;
        match &st.check {
            Some(c) if by_key.is_some() && rows > 1 => Err(format!(
                "pgyard sim: {} found {rows} rows by a unique key",
                c.what()
            )),
            // The runner sends the check's failing statement instead of the COMMIT; the
            // transaction fails with what the server says to it.
            Some(c) if rows != 1 => Err(cast_error(&c.failing_sql(rows))),
            _ => Ok(()),
        }
    }

    /// Somebody deletes a row by hand (`pick` chooses which), in a session of their own with
    /// synchronous commit: the WAL is flushed through it. Not while the applier's
    /// transaction is open (it could hold that row's lock). The row's table, if any.
    pub(super) fn tamper(&mut self, pick: u64) -> Option<String> {
        if self.session.as_ref().is_some_and(|s| s.open.is_some()) {
            return None;
        }
        self.flush_wal();
        self.tables.tamper(pick)
    }

    /// The operator puts back every row deleted by hand (durably); how many.
    pub(super) fn restore(&mut self) -> usize {
        self.flush_wal();
        self.tables.restore()
    }

    /// Refuses a statement on a table the subscriber lacks.
    fn exists(&self, table: &str) -> Result<(), String> {
        if self.missing.contains(table) {
            return Err(format!("relation {table} does not exist"));
        }
        Ok(())
    }

    /// An UPDATE, DELETE or TRUNCATE statement, parsed once per text.
    fn parsed(&mut self, sql: &str) -> Option<Rc<Change>> {
        if let Some(c) = self.changes.get(sql) {
            return Some(Rc::clone(c));
        }
        let c = Rc::new(parse_change(sql)?);
        self.changes.insert(sql.to_owned(), Rc::clone(&c));
        Some(c)
    }

    /// The target of `INSERT INTO t (cols) VALUES …` or `COPY t (cols) FROM STDIN`.
    fn target(&mut self, sql: &str) -> Option<Rc<Target>> {
        let text = target_text(sql)?;
        if let Some(t) = self.targets.get(text) {
            return Some(t.clone());
        }
        let (table, cols) = text.split_once(" (")?;
        let columns = cols
            .strip_suffix(')')?
            .split(", ")
            .map(|c| c.trim_matches('"').to_owned())
            .collect();
        let t = Rc::new(Target::new(table.to_owned(), columns));
        self.targets.insert(text.to_owned(), t.clone());
        Some(t)
    }

    /// Makes a transaction's changes committed, with the origin's progress.
    fn commit(&mut self, txn: OpenTxn, to: Lsn, time: i64) -> Ran {
        let from = self.origin;
        let first = self.log.len();
        self.log.extend(txn.keys);
        self.unflushed.extend(txn.undo);
        self.tables.commit();
        self.origin = to;
        Ran::Committed {
            from,
            to,
            time,
            inserted: txn.inserted,
            keys: first..self.log.len(),
            truncated: txn.truncated,
        }
    }

    /// A stored row of a table, live or not.
    pub(super) fn row(&self, table: &str, i: usize) -> Option<&Stored> {
        self.tables.row(table, i)
    }
}

/// What the server says to `SELECT '<text>'::pg_catalog.int4`: the literal does not read as
/// an integer (the runner's way of failing a transaction with the row check's words).
fn cast_error(sql: &str) -> String {
    let literal = sql
        .strip_prefix("SELECT '")
        .and_then(|r| r.strip_suffix("'::pg_catalog.int4"));
    match literal {
        Some(l) => format!(
            "invalid input syntax for type integer: \"{}\"",
            l.replace("''", "'")
        ),
        None => format!("pgyard sim: unsupported statement {sql}"),
    }
}

/// The `t (cols)` part of an INSERT (before ` VALUES `) or a COPY (before ` FROM STDIN`).
fn target_text(sql: &str) -> Option<&str> {
    match sql.strip_prefix("INSERT INTO ") {
        Some(rest) => {
            // Column names hold no parenthesis: the list ends at the first one.
            let end = rest.find(')')? + 1;
            rest[end..].starts_with(" VALUES ").then(|| &rest[..end])
        }
        None => sql.strip_prefix("COPY ")?.strip_suffix(" FROM STDIN"),
    }
}

/// COPY's text format back into rows of `width` values (`\N` is NULL; backslash escapes).
fn copy_rows(data: &[u8], width: usize) -> Option<Vec<Row>> {
    let mut rows = Vec::new();
    for line in data.split(|b| *b == b'\n') {
        if line.is_empty() {
            continue;
        }
        let row: Row = line
            .split(|b| *b == b'\t')
            .map(|field| {
                if field == b"\\N" {
                    return None;
                }
                let mut v = Vec::with_capacity(field.len());
                let mut it = field.iter();
                while let Some(&b) = it.next() {
                    if b != b'\\' {
                        v.push(b);
                        continue;
                    }
                    v.push(match it.next() {
                        Some(b't') => b'\t',
                        Some(b'n') => b'\n',
                        Some(b'r') => b'\r',
                        Some(&o) => o,
                        None => b'\\',
                    });
                }
                Some(v)
            })
            .collect();
        if row.len() != width {
            return None;
        }
        rows.push(row);
    }
    Some(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgyard_delayq::apply::{Copy, Statement};
    use pgyard_types::PgTimestamp;

    fn plan(steps: Vec<Step>, end: u64) -> Plan {
        Plan {
            steps,
            commit_lsn: Lsn(end - 8),
            end_lsn: Lsn(end),
            commit_ts: PgTimestamp(0),
            changes: 1,
            opens: true,
            closes: true,
        }
    }

    fn insert(p: &str) -> Step {
        Step::Run(Statement {
            sql: "INSERT INTO \"public\".\"t0\" (\"payload\", \"ver\") VALUES ($1, $2)".into(),
            params: vec![Some(p.as_bytes().to_vec()), Some(b"1".to_vec())],
            check: None,
        })
    }

    #[test]
    fn unflushed_commits_die_with_the_server_and_an_abort_blocks_the_rest() {
        let mut s = SubServer::default();
        assert_eq!(s.connect(), Lsn(0));
        s.send(Request::Batch(BatchId(0), plan(vec![insert("a")], 0x10)));
        s.send(Request::Progress);
        s.send(Request::Batch(BatchId(1), plan(vec![insert("b")], 0x20)));
        for _ in 0..3 {
            assert!(s.run_next().is_some());
        }
        assert_eq!(s.read_reply(), Some(Reply::Committed(BatchId(0))));
        assert_eq!(s.read_reply(), Some(Reply::Progress(Lsn(0x10))));
        assert_eq!(s.read_reply(), Some(Reply::Committed(BatchId(1))));
        assert_eq!((s.origin, s.durable_origin()), (Lsn(0x20), Lsn(0x10)));
        assert_eq!(s.crash(), 1, "the unflushed commit is lost");
        assert_eq!((s.origin, s.log.clone()), (Lsn(0x10), vec![b"a".to_vec()]));
        assert_eq!(s.tables.live("\"public\".\"t0\""), 1);

        s.connect();
        s.missing.insert("\"public\".\"t0\"".into());
        s.send(Request::Batch(BatchId(2), plan(vec![insert("c")], 0x30)));
        s.send(Request::Progress);
        s.send(Request::Rollback(Lsn(0x10)));
        while s.run_next().is_some() {}
        let refused = s.read_reply();
        assert!(
            matches!(&refused, Some(Reply::Refused(BatchId(2), t)) if t.contains("does not exist")),
            "{refused:?}"
        );
        assert_eq!(
            s.read_reply(),
            Some(Reply::Other),
            "failed in the aborted block"
        );
        assert_eq!(s.origin, Lsn(0x10));
    }

    #[test]
    fn a_transaction_in_pieces_commits_at_its_last_piece_and_a_refusal_drops_it() {
        let piece = |steps, end, opens, closes| Plan {
            opens,
            closes,
            ..plan(steps, end)
        };
        let mut s = SubServer::default();
        s.connect();
        s.send(Request::Batch(
            BatchId(0),
            piece(vec![insert("a")], 0x10, true, false),
        ));
        s.send(Request::Batch(
            BatchId(1),
            piece(vec![insert("b")], 0x10, false, true),
        ));
        assert!(matches!(s.run_next(), Some(Ran::Nothing)));
        assert!(s.log.is_empty(), "nothing is visible before the COMMIT");
        let Some(Ran::Committed { inserted, to, .. }) = s.run_next() else {
            panic!("committed")
        };
        assert_eq!((inserted.len(), to), (2, Lsn(0x10)));
        assert_eq!(s.log, vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(s.read_reply(), Some(Reply::Committed(BatchId(0))));
        assert_eq!(s.read_reply(), Some(Reply::Committed(BatchId(1))));

        // A piece refused: what the earlier pieces staged is gone with the ROLLBACK.
        s.missing.insert("\"public\".\"t0\"".into());
        s.send(Request::Batch(
            BatchId(2),
            piece(Vec::new(), 0x20, true, false),
        ));
        s.send(Request::Batch(
            BatchId(3),
            piece(vec![insert("c")], 0x20, false, true),
        ));
        s.send(Request::Rollback(Lsn(0x10)));
        while s.run_next().is_some() {}
        assert_eq!(s.read_reply(), Some(Reply::Committed(BatchId(2))));
        assert!(matches!(
            s.read_reply(),
            Some(Reply::Refused(BatchId(3), _))
        ));
        assert_eq!((s.origin, s.log.len()), (Lsn(0x10), 2));

        // A piece with no open transaction is refused, not run on its own.
        s.missing.clear();
        s.send(Request::Batch(
            BatchId(4),
            piece(vec![insert("d")], 0x30, false, true),
        ));
        s.run_next();
        let refused = s.read_reply();
        assert!(
            matches!(&refused, Some(Reply::Refused(BatchId(4), t)) if t.contains("outside")),
            "{refused:?}"
        );
        assert_eq!((s.origin, s.log.len()), (Lsn(0x10), 2));
    }

    #[test]
    fn copy_data_comes_back_as_rows() {
        let mut s = SubServer::default();
        s.connect();
        let copy = Step::Copy(Copy {
            sql: "COPY \"public\".\"t1\" (\"payload\", \"x\") FROM STDIN".into(),
            data: b"a\\tb\t\\N\nc\\\\\td\n".to_vec(),
            rows: 2,
        });
        s.send(Request::Batch(BatchId(0), plan(vec![copy], 0x10)));
        let Some(Ran::Committed { inserted, .. }) = s.run_next() else {
            panic!("committed")
        };
        assert_eq!(inserted[0].rows, 0..2);
        let table = &inserted[0].target.table;
        let rows: Vec<Row> = (0..2)
            .filter_map(|i| s.row(table, i).map(|r| r.values.clone()))
            .collect();
        assert_eq!(
            rows,
            [
                vec![Some(b"a\tb".to_vec()), None],
                vec![Some(b"c\\".to_vec()), Some(b"d".to_vec())]
            ]
        );
        assert_eq!(s.log, vec![b"a\tb".to_vec(), b"c\\".to_vec()]);
    }
}
