//! From a due transaction's pgoutput messages to the SQL that applies it on a subscriber, as
//! PostgreSQL's apply worker would (pure: the adapter runs the statements).
//!
//! * Columns are matched by name, so the subscriber's table may have more columns; values are
//!   sent in the publisher's text form as untyped literals, so the subscriber's column types
//!   read them (what the apply worker does with `InputFunctionCall`).
//! * An UPDATE or DELETE finds its row by the replica identity — the key columns (`=`, they
//!   are never null), or every column for `REPLICA IDENTITY FULL` (`IS NOT DISTINCT FROM`) —
//!   and changes exactly one row even where several are identical (by `ctid` of the first
//!   match), as the apply worker does. Each returns how many rows it changed; anything but one
//!   stops the apply with the relation and the commit LSN.
//! * Unchanged TOASTed values (`'u'`) are left out of the SET list.
//! * TRUNCATE keeps the publisher's CASCADE and RESTART IDENTITY.
//! * Consecutive INSERTs into one relation with the same columns become one multi-row INSERT,
//!   also across the transactions of a [`Batch`] (several due transactions applied as one).
//! * The transaction records its origin progress (`pg_replication_origin_xact_setup` with the
//!   commit's end LSN and time), so a crash between COMMIT and `mark_applied` is recognised
//!   at the next start through `pg_replication_origin_progress`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use pgyard_types::{Lsn, PgTimestamp, PG_EPOCH_OFFSET_MICROS};
use pgyard_wire::pgoutput::{
    OldTuple, PgOutputMessage, Relation, ReplicaIdentity, TupleData, TupleValue,
};

use crate::ReadyTxn;

/// What stops a transaction from being applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    /// A stored message does not decode.
    #[error("commit {commit_lsn}: message {index} does not decode: {detail}")]
    Decode {
        /// The transaction's commit LSN.
        commit_lsn: Lsn,
        /// Which of its messages.
        index: usize,
        /// The decoder's complaint.
        detail: String,
    },
    /// A change names a relation no Relation message described.
    #[error("commit {commit_lsn}: a change to relation OID {oid}, which was never described")]
    UnknownRelation {
        /// The transaction's commit LSN.
        commit_lsn: Lsn,
        /// The relation OID.
        oid: u32,
    },
    /// A tuple does not match its relation's columns, or carries a binary value.
    #[error("commit {commit_lsn}: relation {relation}: {detail}")]
    BadTuple {
        /// The transaction's commit LSN.
        commit_lsn: Lsn,
        /// The qualified relation name.
        relation: String,
        /// What is wrong.
        detail: String,
    },
}

/// The marker of the row-count check's error (see [`Script::sql`]).
pub const CHECK_MARKER: &str = "pgyard row check: ";

/// One subscriber transaction's SQL, sent as one simple query: one due transaction, or
/// several consecutive ones gathered by a [`Batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Script {
    /// `BEGIN`, the changes, the origin's progress, `COMMIT`. Each UPDATE or DELETE counts
    /// its rows and, when the count is not 1, raises an error whose text carries
    /// [`CHECK_MARKER`] (a text cast to integer that fails), so the rest of the query —
    /// the progress and COMMIT included — is skipped and the transaction is left aborted
    /// for the caller's ROLLBACK (which also makes any query pipelined after it fail
    /// harmlessly). The progress is set last because PostgreSQL advances a session's origin
    /// also when a transaction with the progress set aborts: set at BEGIN, a transaction lost
    /// to a broken connection would count as applied; in the one message with COMMIT the
    /// server runs both even if the client dies right after sending it.
    pub sql: String,
    /// The (first) commit LSN it applies, for error texts.
    pub commit_lsn: Lsn,
    /// Rows changed by this script: inserts, updates, deletes (truncates not counted).
    pub changes: u64,
}

impl Script {
    /// The check's own words when the server's error `text` came from a row-count check.
    pub fn row_check_failure(text: &str) -> Option<String> {
        let at = text.find(CHECK_MARKER)? + CHECK_MARKER.len();
        let rest = &text[at..];
        let end = rest
            .find("\"\n")
            .or_else(|| rest.rfind('"'))
            .unwrap_or(rest.len());
        Some(rest[..end].replace("\"\"", "\""))
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

/// A part of a batch's SQL.
#[derive(Clone, Debug)]
enum Piece {
    /// Statements written out, each starting with a space and ending with `;`.
    Sql(String),
    /// ` INSERT INTO … (…) VALUES ` and its rows, joined when the batch is finished.
    Insert { head: String, rows: Vec<String> },
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

    /// The size of its changes' SQL so far, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    fn append(&mut self, pieces: Vec<Piece>) {
        let mut rest = pieces.into_iter();
        if let Some(first) = rest.next() {
            match (self.pieces.last_mut(), first) {
                (Some(Piece::Insert { head, rows }), Piece::Insert { head: h, rows: r })
                    if *head == h =>
                {
                    rows.extend(r);
                }
                (_, first) => self.pieces.push(first),
            }
        }
        self.pieces.extend(rest);
    }

    /// The script, `None` for an empty batch.
    pub fn finish(self) -> Option<Script> {
        let (end_lsn, commit_ts) = self.end?;
        Some(self.render(end_lsn, commit_ts))
    }

    fn render(self, end_lsn: Lsn, commit_ts: PgTimestamp) -> Script {
        // Deferred constraints are checked before the progress is set, so that COMMIT
        // itself does not fail (see `Script::sql`).
        let mut sql = String::with_capacity(self.bytes + 160);
        sql.push_str("BEGIN; SET CONSTRAINTS ALL IMMEDIATE;");
        for piece in &self.pieces {
            match piece {
                Piece::Sql(s) => sql.push_str(s),
                Piece::Insert { head, rows } => {
                    sql.push_str(head);
                    for (i, row) in rows.iter().enumerate() {
                        if i > 0 {
                            sql.push_str(", ");
                        }
                        sql.push_str(row);
                    }
                    sql.push(';');
                }
            }
        }
        let _ = write!(
            sql,
            " SELECT pg_catalog.pg_replication_origin_xact_setup('{}', '{}'); COMMIT;",
            end_lsn,
            timestamp_text(commit_ts)
        );
        Script {
            sql,
            commit_lsn: self.first_commit.unwrap_or(end_lsn),
            changes: self.changes,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rel {
    qualified: String,
    identity: ReplicaIdentity,
    /// Quoted column names and whether each is a key column.
    columns: Vec<(String, bool)>,
}

/// The relation map and the SQL builder; keeps what Relation messages described.
#[derive(Clone, Debug, Default)]
pub struct Applier {
    relations: BTreeMap<u32, Rel>,
}

impl Applier {
    /// An applier that knows no relation yet.
    pub fn new() -> Applier {
        Applier::default()
    }

    /// Builds the script for one due transaction (its `schema` messages first).
    pub fn script(&mut self, txn: &ReadyTxn) -> Result<Script, ApplyError> {
        let mut batch = Batch::new();
        self.add(&mut batch, txn)?;
        Ok(batch.render(txn.end_lsn, txn.commit_ts))
    }

    /// Adds one due transaction (its `schema` messages first) to `batch` and returns the rows
    /// it changes. On an error the batch is left as it was.
    pub fn add(&mut self, batch: &mut Batch, txn: &ReadyTxn) -> Result<u64, ApplyError> {
        let commit_lsn = txn.commit_lsn;
        for (i, raw) in txn.schema.iter().enumerate() {
            let msg = PgOutputMessage::decode(raw, false).map_err(|e| ApplyError::Decode {
                commit_lsn,
                index: i,
                detail: e.to_string(),
            })?;
            if let PgOutputMessage::Relation(r) = msg {
                self.describe(&r);
            }
        }
        let streamed = !matches!(
            txn.messages.first().and_then(|m| m.first()),
            Some(b'B' | b'b')
        );
        let mut pieces: Vec<Piece> = Vec::new();
        let mut bytes = 0;
        let mut changes = 0;
        // The relation and column set of the INSERT that `pieces` ends with, if it does.
        let mut open: Option<(u32, Vec<usize>)> = None;
        for (i, raw) in txn.messages.iter().enumerate() {
            let in_stream = streamed
                && matches!(
                    raw.first(),
                    Some(b'I' | b'U' | b'D' | b'T' | b'R' | b'Y' | b'M')
                );
            let msg = PgOutputMessage::decode(raw, in_stream).map_err(|e| ApplyError::Decode {
                commit_lsn,
                index: i,
                detail: e.to_string(),
            })?;
            if let PgOutputMessage::Insert(ins) = &msg {
                let (cols, values) = self.row(commit_lsn, ins.relation, &ins.new)?;
                bytes += values.len() + 2;
                changes += 1;
                let key = (ins.relation, cols);
                if let (Some(open), Some(Piece::Insert { rows, .. })) = (&open, pieces.last_mut()) {
                    if *open == key {
                        rows.push(values);
                        continue;
                    }
                }
                let head = self.insert_head(commit_lsn, key.0, &key.1)?;
                bytes += head.len();
                pieces.push(Piece::Insert {
                    head,
                    rows: vec![values],
                });
                open = Some(key);
                continue;
            }
            // Anything else (a Relation message included) ends the multi-row INSERT.
            open = None;
            let mut sql = String::new();
            changes += self.statement(&msg, commit_lsn, &mut sql)?;
            if !sql.is_empty() {
                bytes += sql.len();
                pieces.push(Piece::Sql(sql));
            }
        }
        batch.append(pieces);
        batch.bytes += bytes;
        batch.txns += 1;
        batch.changes += changes;
        batch.first_commit.get_or_insert(commit_lsn);
        batch.end = Some((txn.end_lsn, txn.commit_ts));
        Ok(changes)
    }

    /// ` INSERT INTO relation (columns…) VALUES `.
    fn insert_head(&self, commit_lsn: Lsn, oid: u32, cols: &[usize]) -> Result<String, ApplyError> {
        let rel = self.rel(commit_lsn, oid)?;
        let names: Vec<&str> = cols.iter().map(|&i| rel.columns[i].0.as_str()).collect();
        Ok(format!(
            " INSERT INTO {} ({}) VALUES ",
            rel.qualified,
            names.join(", ")
        ))
    }

    fn describe(&mut self, r: &Relation<'_>) {
        let ns = String::from_utf8_lossy(r.namespace);
        let ns = if ns.is_empty() {
            "pg_catalog".into()
        } else {
            ns
        };
        let qualified = format!(
            "{}.{}",
            quote_ident(&ns),
            quote_ident(&String::from_utf8_lossy(r.name))
        );
        let columns = r
            .columns
            .iter()
            .map(|c| (quote_ident(&String::from_utf8_lossy(c.name)), c.key))
            .collect();
        self.relations.insert(
            r.oid,
            Rel {
                qualified,
                identity: r.replica_identity,
                columns,
            },
        );
    }

    fn rel(&self, commit_lsn: Lsn, oid: u32) -> Result<&Rel, ApplyError> {
        self.relations
            .get(&oid)
            .ok_or(ApplyError::UnknownRelation { commit_lsn, oid })
    }

    /// An INSERT's column indexes (unchanged-TOAST ones left out) and its VALUES row.
    fn row(
        &self,
        commit_lsn: Lsn,
        oid: u32,
        tuple: &TupleData<'_>,
    ) -> Result<(Vec<usize>, String), ApplyError> {
        let rel = self.rel(commit_lsn, oid)?;
        let values = values(commit_lsn, rel, tuple)?;
        let mut cols = Vec::new();
        let mut row = String::from("(");
        for (i, v) in values.iter().enumerate() {
            if let Some(v) = v {
                if !cols.is_empty() {
                    row.push_str(", ");
                }
                cols.push(i);
                row.push_str(v);
            }
        }
        row.push(')');
        Ok((cols, row))
    }

    /// Writes one non-INSERT message's statement to `body`; returns the rows it changes.
    fn statement(
        &mut self,
        msg: &PgOutputMessage<'_>,
        commit_lsn: Lsn,
        body: &mut String,
    ) -> Result<u64, ApplyError> {
        match msg {
            PgOutputMessage::Relation(r) => self.describe(r),
            PgOutputMessage::Update(u) => {
                let rel = self.rel(commit_lsn, u.relation)?;
                let new = values(commit_lsn, rel, &u.new)?;
                let old = match &u.old {
                    Some(o) => old_values(commit_lsn, rel, o)?,
                    None => new.clone(),
                };
                let set: Vec<String> = rel
                    .columns
                    .iter()
                    .zip(&new)
                    .filter_map(|((name, _), v)| v.as_ref().map(|v| format!("{name} = {v}")))
                    .collect();
                if set.is_empty() {
                    return Ok(0);
                }
                let filter = identity_filter(rel, &old);
                let _ = write!(
                    body,
                    " WITH c AS (UPDATE ONLY {q} SET {set} WHERE ctid = (SELECT ctid FROM ONLY {q} \
                     WHERE {filter} LIMIT 1) RETURNING 1) {check};",
                    q = rel.qualified,
                    set = set.join(", "),
                    check = count_check("UPDATE", &rel.qualified, commit_lsn),
                );
                return Ok(1);
            }
            PgOutputMessage::Delete(d) => {
                let rel = self.rel(commit_lsn, d.relation)?;
                let old = old_values(commit_lsn, rel, &d.old)?;
                let filter = identity_filter(rel, &old);
                let _ = write!(
                    body,
                    " WITH c AS (DELETE FROM ONLY {q} WHERE ctid = (SELECT ctid FROM ONLY {q} \
                     WHERE {filter} LIMIT 1) RETURNING 1) {check};",
                    q = rel.qualified,
                    check = count_check("DELETE", &rel.qualified, commit_lsn),
                );
                return Ok(1);
            }
            PgOutputMessage::Truncate(t) => {
                let names = t
                    .relations
                    .iter()
                    .map(|oid| self.rel(commit_lsn, oid).map(|r| r.qualified.clone()))
                    .collect::<Result<Vec<_>, _>>()?;
                let _ = write!(body, " TRUNCATE ONLY {}", names.join(", "));
                if t.restart_identity {
                    body.push_str(" RESTART IDENTITY");
                }
                if t.cascade {
                    body.push_str(" CASCADE");
                }
                body.push(';');
            }
            // Framing, origins, types (values are text) and logical messages change no rows.
            _ => {}
        }
        Ok(0)
    }
}

/// A SELECT over the CTE `c` that returns nothing when it changed exactly one row and
/// otherwise fails with a text naming the operation, the relation and the commit.
fn count_check(op: &str, relation: &str, commit_lsn: Lsn) -> String {
    let head = quote_literal(&format!(
        "{CHECK_MARKER}commit {commit_lsn}: {op} on relation {relation} changed "
    ));
    let tail = quote_literal(
        " rows instead of 1 (the subscriber has no row matching the publisher's replica identity)",
    );
    format!("SELECT ({head} || count(*) || {tail})::int FROM c HAVING count(*) <> 1")
}

/// Each column's SQL literal (`NULL` for null), `None` for an unchanged TOASTed value.
fn values(
    commit_lsn: Lsn,
    rel: &Rel,
    tuple: &TupleData<'_>,
) -> Result<Vec<Option<String>>, ApplyError> {
    let bad = |detail: String| ApplyError::BadTuple {
        commit_lsn,
        relation: rel.qualified.clone(),
        detail,
    };
    if tuple.len() != rel.columns.len() {
        return Err(bad(format!(
            "a row with {} values for {} described columns",
            tuple.len(),
            rel.columns.len()
        )));
    }
    tuple
        .iter()
        .map(|v| match v {
            TupleValue::Null => Ok(Some("NULL".to_owned())),
            TupleValue::UnchangedToast => Ok(None),
            TupleValue::Text(t) => Ok(Some(quote_literal(&String::from_utf8_lossy(t)))),
            TupleValue::Binary(_) => Err(bad(
                "a value in binary form (the stream must be text)".into()
            )),
        })
        .collect()
}

fn old_values(
    commit_lsn: Lsn,
    rel: &Rel,
    old: &OldTuple<'_>,
) -> Result<Vec<Option<String>>, ApplyError> {
    values(commit_lsn, rel, old.tuple())
}

/// The WHERE condition that finds the row: key columns with `=` (or IS NULL), every column
/// with IS NOT DISTINCT FROM under REPLICA IDENTITY FULL. Unchanged-TOAST old values are
/// left out (the publisher did not send them).
fn identity_filter(rel: &Rel, old: &[Option<String>]) -> String {
    let full = rel.identity == ReplicaIdentity::Full;
    let mut parts = Vec::new();
    for ((name, key), v) in rel.columns.iter().zip(old) {
        if !full && !key {
            continue;
        }
        match v {
            None => {}
            Some(v) if v == "NULL" => parts.push(format!("{name} IS NULL")),
            Some(v) if full => parts.push(format!("{name} IS NOT DISTINCT FROM {v}")),
            Some(v) => parts.push(format!("{name} = {v}")),
        }
    }
    if parts.is_empty() {
        // No identity (REPLICA IDENTITY NOTHING cannot publish updates or deletes): match
        // nothing, so the count check reports the missing row.
        return "false".to_owned();
    }
    parts.join(" AND ")
}

/// `"name"` with inner quotes doubled.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// `'text'` with inner quotes doubled (standard-conforming strings, so backslashes stay).
pub fn quote_literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

/// A PostgreSQL timestamp as `YYYY-MM-DD HH:MM:SS.ffffff+00` (UTC).
pub fn timestamp_text(ts: PgTimestamp) -> String {
    let unix_micros = ts.0.saturating_add(PG_EPOCH_OFFSET_MICROS);
    let secs = unix_micros.div_euclid(1_000_000);
    let micros = unix_micros.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{micros:06}+00",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (eras of 400 years).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn timestamps_render_in_utc() {
        assert_eq!(
            timestamp_text(PgTimestamp(0)),
            "2000-01-01 00:00:00.000000+00"
        );
        // 2024-02-29 12:34:56.789012 UTC
        let unix = 1_709_210_096_789_012i64;
        assert_eq!(
            timestamp_text(PgTimestamp(unix - PG_EPOCH_OFFSET_MICROS)),
            "2024-02-29 12:34:56.789012+00"
        );
        assert_eq!(
            timestamp_text(PgTimestamp(-PG_EPOCH_OFFSET_MICROS - 1)),
            "1969-12-31 23:59:59.999999+00"
        );
    }

    #[test]
    fn quoting() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_literal("it's \\x"), "'it''s \\x'");
    }
}
