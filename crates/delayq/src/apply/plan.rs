//! What applies a batch of due transactions: parameterised statements between `BEGIN` and
//! the origin's progress with `COMMIT`, and the batch that gathers them.

use std::sync::Arc;

use pgyard_types::{Lsn, PgTimestamp};

use super::text::{push_lsn, push_placeholder, push_timestamp};

/// A value sent as a statement parameter: the publisher's text form, `None` for NULL.
pub type Param = Option<Vec<u8>>;

/// The parameters a statement may carry at most (the protocol counts them in 16 bits).
const PARAMS_MAX: usize = u16::MAX as usize;

/// Rows in the multi-row INSERT statements a run of rows is cut into, largest first: a few
/// fixed shapes, so that each is prepared once per relation and column set.
const INSERT_CHUNKS: [usize; 3] = [64, 8, 1];

/// A run of at least this many rows into one relation goes by COPY instead: past it the
/// COPY's own start-up costs less than binding the rows as parameters.
pub const COPY_ROWS: usize = 64;

/// One statement: SQL with `$1…$n` placeholders and their values, in text form. Its SQL
/// depends only on the relation, the operation and which columns take part, never on the
/// values, so a session can prepare it once and run it many times.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Statement {
    /// The SQL with placeholders.
    pub sql: String,
    /// The placeholders' values, in order.
    pub params: Vec<Param>,
    /// For an UPDATE or DELETE: it must change exactly one row, which whoever runs it checks
    /// (from its CommandComplete) before the transaction may commit.
    pub check: Option<RowCheck>,
}

/// What an UPDATE or DELETE must do: change exactly one row. Checked by the runner rather
/// than in SQL: a check inside the statement (a CTE counting the changed rows) cost the
/// subscriber a fifth of each UPDATE's time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowCheck {
    /// `UPDATE` or `DELETE`.
    pub op: &'static str,
    /// The commit it applies.
    pub commit_lsn: Lsn,
    /// What every statement of its shape shares.
    pub shape: Arc<CheckShape>,
}

/// The part of a [`RowCheck`] that depends only on the statement's shape (relation,
/// operation, columns taking part), built once per shape.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckShape {
    /// The relation, quoted and qualified.
    pub qualified: String,
    /// The relation's schema and name, unquoted.
    pub relation: (String, String),
    /// The replica identity's key columns, unquoted (empty under `REPLICA IDENTITY FULL`).
    pub key: Vec<String>,
    /// The same statement finding its row by the key columns alone, with the same
    /// parameters, for a subscriber with a unique index on some of the key columns, where at
    /// most one row can match: cheaper than finding the first match's `ctid` first. `None`
    /// under `REPLICA IDENTITY FULL`.
    pub by_key: Option<String>,
}

impl RowCheck {
    /// What the statement applies: `commit L: UPDATE on relation "s"."t"`.
    pub fn what(&self) -> String {
        format!(
            "commit {}: {} on relation {}",
            self.commit_lsn, self.op, self.shape.qualified
        )
    }

    /// The words of the failure when the statement changed `rows` rows (marked with
    /// [`super::CHECK_MARKER`]).
    pub fn failure(&self, rows: u64) -> String {
        let why = if rows == 0 {
            "the subscriber has no row matching the publisher's replica identity"
        } else {
            "several rows match the publisher's replica identity"
        };
        format!(
            "{}{} changed {rows} rows instead of 1 ({why})",
            super::CHECK_MARKER,
            self.what()
        )
    }

    /// A statement that fails with [`RowCheck::failure`]'s words (a text cast to integer),
    /// which the runner sends instead of COMMIT: the transaction aborts and stays aborted
    /// for the caller's ROLLBACK, as if the server itself had refused the change.
    pub fn failing_sql(&self, rows: u64) -> String {
        format!(
            "SELECT {}::pg_catalog.int4",
            super::quote_literal(&self.failure(rows))
        )
    }
}

/// The rows a CommandComplete's tag says a statement changed (`UPDATE 1`, `DELETE 0`).
pub fn tag_rows(tag: &str) -> Option<u64> {
    tag.rsplit(' ').next()?.parse().ok()
}

impl Statement {
    /// Appends a value and writes its placeholder (`$n`) onto the SQL. Multi-row INSERTs
    /// write one per value, and formatting each into a string of its own was most of the
    /// time spent building them.
    fn push_param(&mut self, value: Param) {
        self.params.push(value);
        push_placeholder(&mut self.sql, self.params.len());
    }
}

/// One step of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A statement (prepared once per session, bound and executed with its values).
    Run(Statement),
    /// Rows for `COPY … FROM STDIN` (text format).
    Copy(Copy),
}

/// A COPY of rows into one relation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copy {
    /// `COPY relation (columns) FROM STDIN`.
    pub sql: String,
    /// The rows in COPY's text format: tab between values, `\N` for NULL, backslash,
    /// tab, newline and carriage return escaped, a newline after each row.
    pub data: Vec<u8>,
    /// How many rows.
    pub rows: usize,
}

/// The work of one subscriber transaction: [`Plan::BEGIN`], the steps in order, then
/// [`Plan::commit_sql`] — one due transaction, or several gathered by a [`Batch`] — or of a
/// part of one (see [`Plan::opens`] and [`Plan::closes`]).
///
/// Each UPDATE or DELETE carries a [`RowCheck`]: whoever runs the plan reads the rows it
/// changed before sending the COMMIT, and when that is not 1 sends
/// [`RowCheck::failing_sql`] instead, so the transaction aborts and stays aborted for the
/// caller's ROLLBACK (which also makes anything pipelined after it fail harmlessly). The
/// origin's progress is set in
/// the same simple-protocol message as COMMIT, last, because PostgreSQL advances a session's
/// origin also when a transaction with the progress set aborts: set earlier, a transaction
/// lost to a broken connection would count as applied; in one message with COMMIT the server
/// runs both or neither, even if the client dies right after sending it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The changes in commit order.
    pub steps: Vec<Step>,
    /// The (first) commit LSN it applies, for error texts.
    pub commit_lsn: Lsn,
    /// The last transaction's end LSN: the origin's progress once it commits.
    pub end_lsn: Lsn,
    /// The last transaction's commit time, recorded with the progress.
    pub commit_ts: PgTimestamp,
    /// Rows changed: inserts, updates, deletes (truncates not counted).
    pub changes: u64,
    /// Whether it starts the subscriber transaction ([`Plan::BEGIN`] first): not so for the
    /// later pieces of a transaction sent in pieces.
    pub opens: bool,
    /// Whether it ends it ([`Plan::commit_sql`] last): not so for the pieces of a transaction
    /// sent in pieces but its last.
    pub closes: bool,
}

impl Plan {
    /// What starts the subscriber transaction. Deferred constraints are checked at each
    /// statement so that COMMIT itself does not fail after the progress is set.
    pub const BEGIN: &'static str = "BEGIN; SET CONSTRAINTS ALL IMMEDIATE";

    /// The origin's progress and COMMIT, as one simple query.
    pub fn commit_sql(&self) -> String {
        // Pieced together rather than through `format!`: one per applied batch.
        let mut sql = String::with_capacity(112);
        sql.push_str("SELECT pg_catalog.pg_replication_origin_xact_setup('");
        push_lsn(&mut sql, self.end_lsn);
        sql.push_str("', '");
        push_timestamp(&mut sql, self.commit_ts);
        sql.push_str("'); COMMIT");
        sql
    }

    /// The bytes of SQL text and values it sends, roughly.
    pub fn bytes(&self) -> usize {
        self.steps
            .iter()
            .map(|step| match step {
                Step::Run(s) => {
                    s.sql.len() + s.params.iter().flatten().map(Vec::len).sum::<usize>()
                }
                Step::Copy(c) => c.sql.len() + c.data.len(),
            })
            .sum::<usize>()
            + 160
    }
}

/// Consecutive due transactions applied as one subscriber transaction: one BEGIN, one
/// COMMIT and one origin update (the last transaction's end LSN and commit time) for all of
/// them, and INSERTs into one relation merged across their boundaries. Per-transaction
/// overhead is most of the cost of applying small transactions; the subscriber still only
/// ever shows a prefix of the publisher's commit order, and the origin names exactly which.
#[derive(Clone, Debug, Default)]
pub struct Batch {
    pieces: Vec<Piece>,
    bytes: usize,
    txns: usize,
    changes: u64,
    first_commit: Option<Lsn>,
    end: Option<(Lsn, PgTimestamp)>,
}

/// A part of a batch.
#[derive(Clone, Debug)]
pub(crate) enum Piece {
    /// One statement.
    Statement(Statement),
    /// Rows for `INSERT INTO {target} VALUES …`, where `target` is the qualified relation
    /// and its column list; cut into statements when the batch is finished. The `rows`
    /// rows' values lie one after another in `values`, `width` to a row: one vector for the
    /// run instead of one per row.
    Insert {
        target: String,
        width: usize,
        rows: usize,
        values: Vec<Param>,
    },
}

/// One transaction's part of a batch, built apart so that a transaction that cannot be
/// applied leaves the batch as it was.
#[derive(Debug, Default)]
pub(crate) struct TxnPieces {
    pub(crate) pieces: Vec<Piece>,
    pub(crate) bytes: usize,
    pub(crate) changes: u64,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Batch {
        Batch::default()
    }

    /// How many transactions it holds.
    pub fn len(&self) -> usize {
        self.txns
    }

    /// Whether it holds no transaction.
    pub fn is_empty(&self) -> bool {
        self.txns == 0
    }

    /// The size of its changes so far (SQL and values), in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Takes in one transaction's pieces, merging its first INSERT into the batch's last one
    /// when both go to the same relation and columns.
    pub(crate) fn push(&mut self, txn: TxnPieces, commit_lsn: Lsn, end: (Lsn, PgTimestamp)) {
        let mut rest = txn.pieces.into_iter();
        if let Some(first) = rest.next() {
            match (self.pieces.last_mut(), first) {
                (
                    Some(Piece::Insert {
                        target,
                        rows,
                        values,
                        ..
                    }),
                    Piece::Insert {
                        target: t,
                        rows: more,
                        values: more_values,
                        ..
                    },
                ) if *target == t => {
                    // The same target names the same columns: the same width.
                    *rows += more;
                    values.extend(more_values);
                }
                (_, first) => self.pieces.push(first),
            }
        }
        self.pieces.extend(rest);
        self.bytes += txn.bytes;
        self.txns += 1;
        self.changes += txn.changes;
        self.first_commit.get_or_insert(commit_lsn);
        self.end = Some(end);
    }

    /// The plan, `None` for an empty batch.
    pub fn finish(self) -> Option<Plan> {
        let (end_lsn, commit_ts) = self.end?;
        let mut steps = Vec::with_capacity(self.pieces.len());
        for piece in self.pieces {
            match piece {
                Piece::Statement(s) => steps.push(Step::Run(s)),
                Piece::Insert {
                    target,
                    width,
                    rows,
                    values,
                } if rows >= COPY_ROWS => {
                    steps.push(Step::Copy(copy(&target, width, rows, &values)));
                }
                Piece::Insert {
                    target,
                    width,
                    rows,
                    values,
                } => insert_statements(&target, width, rows, values, &mut steps),
            }
        }
        Some(Plan {
            steps,
            commit_lsn: self.first_commit.unwrap_or(end_lsn),
            end_lsn,
            commit_ts,
            changes: self.changes,
            opens: true,
            closes: true,
        })
    }
}

/// Cuts a run of rows into INSERTs of [`INSERT_CHUNKS`] rows (fewer where the columns would
/// need more than [`PARAMS_MAX`] parameters).
fn insert_statements(
    target: &str,
    row_width: usize,
    rows: usize,
    values: Vec<Param>,
    out: &mut Vec<Step>,
) {
    let width = row_width.max(1);
    let fit = (PARAMS_MAX / width).max(1);
    let mut left = rows;
    let mut values = values.into_iter();
    while left > 0 {
        let n = INSERT_CHUNKS
            .iter()
            .map(|&c| c.min(fit))
            .find(|&c| c <= left)
            .unwrap_or(1);
        let mut sql = String::with_capacity(target.len() + 20 + n * width * 6);
        sql.push_str("INSERT INTO ");
        sql.push_str(target);
        sql.push_str(" VALUES ");
        let mut st = Statement {
            sql,
            params: Vec::with_capacity(n * width),
            check: None,
        };
        for r in 0..n {
            st.sql.push_str(if r == 0 { "(" } else { ", (" });
            for (i, v) in values.by_ref().take(row_width).enumerate() {
                if i > 0 {
                    st.sql.push_str(", ");
                }
                st.push_param(v);
            }
            st.sql.push(')');
        }
        out.push(Step::Run(st));
        left -= n;
    }
}

/// The COPY of a run of rows, in COPY's text format.
/// Appends `v` escaped for COPY's text format. Runs without a byte to escape (nearly every
/// value) are copied whole: byte by byte, this was the applier's largest item in a bulk load.
fn copy_escape(mut v: &[u8], data: &mut Vec<u8>) {
    while let Some(at) = v
        .iter()
        .position(|&b| matches!(b, b'\\' | b'\t' | b'\n' | b'\r'))
    {
        data.extend_from_slice(&v[..at]);
        data.extend_from_slice(match v[at] {
            b'\\' => b"\\\\",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            _ => b"\\r",
        });
        v = &v[at + 1..];
    }
    data.extend_from_slice(v);
}

fn copy(target: &str, width: usize, rows: usize, values: &[Param]) -> Copy {
    let mut data = Vec::with_capacity(
        values
            .iter()
            .map(|v| v.as_ref().map_or(2, Vec::len) + 1)
            .sum(),
    );
    let mut values = values.iter();
    for _ in 0..rows {
        for (i, v) in values.by_ref().take(width).enumerate() {
            if i > 0 {
                data.push(b'\t');
            }
            match v {
                None => data.extend_from_slice(b"\\N"),
                Some(v) => copy_escape(v, &mut data),
            }
        }
        data.push(b'\n');
    }
    Copy {
        sql: format!("COPY {target} FROM STDIN"),
        data,
        rows,
    }
}

#[cfg(test)]
mod escape_tests {
    use super::copy_escape;
    use proptest::prelude::*;

    /// COPY's text escaping, one byte at a time: what `copy_escape` must equal.
    fn escaped_bytewise(v: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in v {
            match b {
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\t' => out.extend_from_slice(b"\\t"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                _ => out.push(b),
            }
        }
        out
    }

    proptest! {
        #[test]
        fn runs_copied_whole_escape_as_byte_by_byte(
            v in proptest::collection::vec(
                prop_oneof![Just(b'\\'), Just(b'\t'), Just(b'\n'), Just(b'\r'), any::<u8>()],
                0..64,
            ),
            prefix in proptest::collection::vec(any::<u8>(), 0..4),
        ) {
            let mut got = prefix.clone();
            copy_escape(&v, &mut got);
            let mut want = prefix;
            want.extend_from_slice(&escaped_bytewise(&v));
            prop_assert_eq!(got, want);
        }
    }
}
