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
//! block aborted, so everything behind it fails until the ROLLBACK, as on the server.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::rc::Rc;

use pgyard_delayq::apply::{BatchId, Plan, Step};
use pgyard_types::Lsn;

/// One row: each column's text value, `None` for NULL.
pub(super) type Row = Vec<Option<Vec<u8>>>;

/// Where a statement inserts: parsed once per statement shape.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// The qualified table name as the statement wrote it.
    pub(super) table: String,
    /// The column names, unquoted.
    pub(super) columns: Vec<String>,
}

/// Rows a statement of a batch inserts.
#[derive(Debug)]
struct Staged {
    target: Rc<Target>,
    rows: Vec<Row>,
}

/// Where a statement of a committed batch put its rows, for the scenario's checks.
#[derive(Debug)]
pub(super) struct Inserted {
    /// The table and columns.
    pub(super) target: Rc<Target>,
    /// The rows, by index in the table.
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
    /// A batch committed: the origin moved from `from` to `to`, these rows were inserted.
    Committed {
        from: Lsn,
        to: Lsn,
        inserted: Vec<Inserted>,
    },
    /// A ROLLBACK was asked to leave the origin at `asked`; it stood at `at`.
    RolledBack { asked: Lsn, at: Lsn },
}

/// What survives a crash.
#[derive(Clone, Debug, Default)]
struct Durable {
    origin: Lsn,
    log: usize,
    tables: BTreeMap<String, usize>,
}

/// The applier's connection: requests not yet run, replies not yet read (each marked live
/// until the applier abandons it), and whether the transaction block is aborted.
#[derive(Debug, Default)]
struct Session {
    inbox: VecDeque<(Request, bool)>,
    outbox: VecDeque<(Reply, bool)>,
    aborted: bool,
    /// The rows of a transaction sent in pieces whose COMMIT has not come yet.
    open: Option<Vec<Staged>>,
}

/// The subscriber server.
#[derive(Debug, Default)]
pub(super) struct SubServer {
    tables: BTreeMap<String, Vec<Row>>,
    /// Tables the subscriber does not have yet (the operator creates them after a failure).
    pub(super) missing: BTreeSet<String>,
    /// The `payload` column of every row, in commit order: the checks compare it with what
    /// the publisher committed.
    pub(super) log: Vec<Vec<u8>>,
    /// The origin's progress (in memory: committed, maybe not yet flushed).
    pub(super) origin: Lsn,
    durable: Durable,
    session: Option<Session>,
    /// Statement targets parsed so far, by their text.
    targets: BTreeMap<String, Rc<Target>>,
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
            tables: self
                .tables
                .iter()
                .map(|(t, r)| (t.clone(), r.len()))
                .collect(),
        };
    }

    /// The origin's durable progress.
    pub(super) fn durable_origin(&self) -> Lsn {
        self.durable.origin
    }

    /// Immediate shutdown or power loss: commits after the last flush are gone with their
    /// origin progress, and so is the applier's connection.
    pub(super) fn crash(&mut self) -> usize {
        self.session = None;
        let lost = self.log.len() - self.durable.log;
        self.origin = self.durable.origin;
        self.log.truncate(self.durable.log);
        for (t, rows) in &mut self.tables {
            rows.truncate(self.durable.tables.get(t).copied().unwrap_or(0));
        }
        lost
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
        self.session = None;
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
                if let Some(s) = &mut self.session {
                    s.aborted = false;
                    s.open = None;
                }
                let at = self.origin;
                (Reply::Other, Ran::RolledBack { asked, at })
            }
            _ if aborted => (Reply::Other, Ran::Nothing),
            Request::Progress => {
                self.flush_wal();
                (Reply::Progress(self.origin), Ran::Nothing)
            }
            Request::Batch(id, plan) => match self.run_plan(plan) {
                Ok(Some((staged, to))) => {
                    let from = self.origin;
                    let inserted = self.commit(staged, to);
                    (Reply::Committed(id), Ran::Committed { from, to, inserted })
                }
                // A piece of a transaction sent in pieces ran; the COMMIT comes later.
                Ok(None) => (Reply::Committed(id), Ran::Nothing),
                Err(text) => {
                    if let Some(s) = &mut self.session {
                        s.aborted = true;
                        s.open = None;
                    }
                    (Reply::Refused(id, text), Ran::Nothing)
                }
            },
        };
        if let Some(s) = &mut self.session {
            s.outbox.push_back((reply, live));
        }
        Some(ran)
    }

    /// Runs a plan (or a piece of a transaction sent in pieces): the rows to commit and the
    /// origin's progress once it closes its transaction, `None` while it stays open, or the
    /// error that aborts it. A piece out of place is refused: on the server its statements
    /// would run outside the transaction, or BEGIN would be ignored inside one.
    fn run_plan(&mut self, plan: Plan) -> Result<Option<(Vec<Staged>, Lsn)>, String> {
        let open = self.session.as_mut().and_then(|s| s.open.take());
        let mut rows = match (plan.opens, open) {
            (true, None) => Vec::new(),
            (false, Some(rows)) => rows,
            (true, Some(_)) => return Err("pgyard sim: BEGIN inside a transaction".into()),
            (false, None) => return Err("pgyard sim: a piece outside a transaction".into()),
        };
        rows.extend(self.stage(plan.steps)?);
        if plan.closes {
            return Ok(Some((rows, plan.end_lsn)));
        }
        if let Some(s) = &mut self.session {
            s.open = Some(rows);
        }
        Ok(None)
    }

    /// Runs a plan's steps inside the transaction: the rows each would insert, or the error
    /// that aborts it.
    fn stage(&mut self, steps: Vec<Step>) -> Result<Vec<Staged>, String> {
        let mut out = Vec::with_capacity(steps.len());
        for step in steps {
            let ins = match step {
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
                    Staged { target, rows }
                }
                Step::Copy(c) => {
                    let target = self
                        .target(&c.sql)
                        .ok_or_else(|| format!("pgyard sim: unsupported COPY {}", c.sql))?;
                    let rows = copy_rows(&c.data, target.columns.len())
                        .ok_or_else(|| format!("pgyard sim: bad COPY data for {target:?}"))?;
                    Staged { target, rows }
                }
            };
            if self.missing.contains(&ins.target.table) {
                return Err(format!("relation {} does not exist", ins.target.table));
            }
            out.push(ins);
        }
        Ok(out)
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
        let t = Rc::new(Target {
            table: table.to_owned(),
            columns,
        });
        self.targets.insert(text.to_owned(), t.clone());
        Some(t)
    }

    /// Makes the staged rows part of the tables, with the origin's progress.
    fn commit(&mut self, staged: Vec<Staged>, end: Lsn) -> Vec<Inserted> {
        let mut out = Vec::with_capacity(staged.len());
        for st in staged {
            let payload = st.target.columns.iter().position(|c| c == "payload");
            // The name is copied only for a table's first rows (nearly every commit has them).
            if !self.tables.contains_key(&st.target.table) {
                self.tables.insert(st.target.table.clone(), Vec::new());
            }
            let table = self
                .tables
                .get_mut(&st.target.table)
                .expect("inserted above");
            let first = table.len();
            for row in st.rows {
                let p = payload.and_then(|i| row[i].clone()).unwrap_or_default();
                self.log.push(p);
                table.push(row);
            }
            out.push(Inserted {
                rows: first..table.len(),
                target: st.target,
            });
        }
        self.origin = end;
        out
    }

    /// A table's rows (none if it holds none).
    pub(super) fn table(&self, table: &str) -> &[Row] {
        self.tables.get(table).map_or(&[], Vec::as_slice)
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
        assert_eq!(s.table("\"public\".\"t0\"").len(), 1);

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
        assert_eq!(
            s.table(&inserted[0].target.table),
            [
                vec![Some(b"a\tb".to_vec()), None],
                vec![Some(b"c\\".to_vec()), Some(b"d".to_vec())]
            ]
        );
        assert_eq!(s.log, vec![b"a\tb".to_vec(), b"c\\".to_vec()]);
    }
}
