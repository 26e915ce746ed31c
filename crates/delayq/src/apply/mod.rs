//! From due transactions' pgoutput messages to the statements that apply them on a
//! subscriber, as PostgreSQL's apply worker would (pure: the adapter runs the statements).
//!
//! * Columns are matched by name, so the subscriber's table may have more columns; values are
//!   sent in the publisher's text form as parameters of unspecified type, so the subscriber's
//!   column types read them (what the apply worker does with `InputFunctionCall`).
//! * Statements are parameterised and their SQL depends only on the relation, the operation
//!   and the columns taking part, so the adapter prepares each once per session: the
//!   subscriber parses and plans a shape once instead of once per row.
//! * An UPDATE or DELETE finds its row by the replica identity — the key columns (`=`, they
//!   are never null), or every column for `REPLICA IDENTITY FULL` (`IS NOT DISTINCT FROM`) —
//!   and changes exactly one row even where several are identical (by `ctid` of the first
//!   match, or by the key alone where the subscriber has a unique index on it: the
//!   [`CheckShape::by_key`] form), as the apply worker does. Each carries a [`RowCheck`]: the
//!   runner reads the rows it changed before COMMIT, and anything but one stops the apply
//!   with the relation and the commit LSN.
//! * Unchanged TOASTed values (`'u'`) are left out of the SET list.
//! * TRUNCATE keeps the publisher's CASCADE and RESTART IDENTITY.
//! * Consecutive INSERTs into one relation with the same columns become multi-row INSERTs,
//!   or a COPY from [`COPY_ROWS`] rows on, also across the transactions of a [`Batch`]
//!   (several due transactions applied as one).
//! * [`ApplyMachine`] drives it all: due transactions out of the queue, batches to the
//!   subscriber, replies back, and `mark_applied` only once the subscriber's COMMIT
//!   succeeded and its origin's durable progress passed the transaction.
//! * The transaction records its origin progress (`pg_replication_origin_xact_setup` with the
//!   commit's end LSN and time), so a crash between COMMIT and `mark_applied` is recognised
//!   at the next start through `pg_replication_origin_progress`.

mod machine;
mod plan;
mod text;

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasherDefault;
use std::sync::Arc;

use pgyard_types::{Lsn, WordHasher};
use pgyard_wire::pgoutput::{PgOutputMessage, Relation, ReplicaIdentity, TupleData, TupleValue};

pub(crate) use machine::elapsed;
#[cfg(feature = "planted-bugs")]
pub use machine::PlantedBug;
pub use machine::{
    Applied, ApplyConfig, ApplyControls, ApplyMachine, BatchId, Command, Failure, Notice, Until,
    Wait,
};
pub use plan::{
    tag_rows, Batch, CheckShape, Copy, Param, Plan, RowCheck, Statement, Step, COPY_ROWS,
};
use plan::{Piece, TxnPieces};
pub use text::{quote_ident, quote_literal, timestamp_text};

use crate::{ReadyTxn, TxnPiece};

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
    /// A piece of a transaction was added while no transaction was open for more (the
    /// caller's mistake).
    #[error("a piece of a transaction while none was handed out in pieces")]
    NoOpenTransaction,
}

/// The marker of the row-count check's error (see [`Plan`]).
pub const CHECK_MARKER: &str = "pgyard row check: ";

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

/// A Relation message's bytes after its type byte and, inside a stream block, its xid: what
/// two messages describing a relation alike have in common.
fn relation_body(raw: &[u8], in_stream: bool) -> &[u8] {
    let skip = if in_stream { 5 } else { 1 };
    raw.get(skip..).unwrap_or_default()
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Rel {
    qualified: String,
    /// Schema and name, unquoted.
    names: (String, String),
    /// The key columns' names, unquoted.
    key: Vec<String>,
    identity: ReplicaIdentity,
    /// Quoted column names and whether each is a key column.
    columns: Vec<(String, bool)>,
    /// The Relation message it was built from, after the type byte and the stream xid (see
    /// [`relation_body`]): the same description comes again with every streamed transaction
    /// and every new consumer, and needs no decoding or quoting again.
    raw: Vec<u8>,
}

/// One column's value in a change.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    /// An unchanged TOASTed value: not sent, so not touched.
    Unchanged,
    /// A value, `None` for NULL.
    Sent(Param),
}

/// A transaction added in pieces whose last piece is still to come.
#[derive(Clone, Debug)]
struct Open {
    commit_lsn: Lsn,
    end: (Lsn, pgyard_types::PgTimestamp),
    streamed: bool,
    /// Index of its next message (for error texts).
    next: usize,
}

/// The relation map and the statement builder; keeps what Relation messages described.
#[derive(Clone, Debug, Default)]
pub struct Applier {
    relations: BTreeMap<u32, Rel>,
    open: Option<Open>,
    /// The SQL and check of each UPDATE and DELETE shape seen, built once: formatting them
    /// for every row was a fifth of the applier's CPU. (Hashed a word at a time: SipHash
    /// cost more than the rest of a lookup; the keys come from the publisher's own relation
    /// map, and nothing depends on the map's order.)
    shapes: HashMap<ShapeKey, Arc<Shape>, BuildHasherDefault<WordHasher>>,
}

/// A relation, an operation (`b'U'`, `b'D'`) and each column's part ([`SKIP`], [`NULL`],
/// [`PARAM`]: for an UPDATE the SET list's, then the filter's).
type ShapeKey = (u32, u8, Vec<u8>);

/// A column takes no part.
const SKIP: u8 = 0;
/// A key column matched with IS NULL.
const NULL: u8 = 1;
/// A column with a parameter.
const PARAM: u8 = 2;

/// One UPDATE or DELETE shape's SQL and check.
#[derive(Debug)]
struct Shape {
    sql: String,
    check: Arc<CheckShape>,
}

impl Applier {
    /// An applier that knows no relation yet.
    pub fn new() -> Applier {
        Applier::default()
    }

    /// Adds one due transaction (its `schema` messages first) to `batch` and returns the rows
    /// it changes; when it came in pieces ([`ReadyTxn::more`]), only its first piece, and
    /// the rest follows with [`Applier::add_piece`]. On an error the batch is left as it was.
    pub fn add(&mut self, batch: &mut Batch, txn: &ReadyTxn) -> Result<u64, ApplyError> {
        let commit_lsn = txn.commit_lsn;
        for (i, raw) in txn.schema.iter().enumerate() {
            if self.known(raw, false) {
                continue;
            }
            let msg = PgOutputMessage::decode(raw, false).map_err(|e| ApplyError::Decode {
                commit_lsn,
                index: i,
                detail: e.to_string(),
            })?;
            if let PgOutputMessage::Relation(r) = msg {
                self.describe(&r, raw, false);
            }
        }
        let streamed = Applier::streamed(&txn.messages);
        let open = Open {
            commit_lsn,
            end: (txn.end_lsn, txn.commit_ts),
            streamed,
            next: 0,
        };
        let out = self.messages(&open, &txn.messages)?;
        let changes = out.changes;
        batch.push(out, commit_lsn, open.end);
        self.open = txn.more.as_ref().map(|c| Open {
            next: c.next_index(),
            ..open
        });
        Ok(changes)
    }

    /// Takes in what a skipped transaction describes, without applying it: the Relation
    /// messages of its `schema` and of its body (`streamed` says how the body's messages are
    /// framed). The queue counts a description handed out as known to the consumer, and
    /// later transactions may change the relation without describing it again.
    pub fn skip(
        &mut self,
        commit_lsn: Lsn,
        schema: &[Vec<u8>],
        body: &[Vec<u8>],
        streamed: bool,
    ) -> Result<(), ApplyError> {
        let all = schema.iter().map(|m| (m, false));
        let body = body.iter().map(|m| {
            let framed = streamed && matches!(m.first(), Some(b'R'));
            (m, framed)
        });
        for (i, (raw, in_stream)) in all.chain(body).enumerate() {
            if raw.first() != Some(&b'R') || self.known(raw, in_stream) {
                continue;
            }
            match PgOutputMessage::decode(raw, in_stream) {
                Ok(PgOutputMessage::Relation(r)) => self.describe(&r, raw, in_stream),
                Ok(_) => {}
                Err(e) => {
                    return Err(ApplyError::Decode {
                        commit_lsn,
                        index: i,
                        detail: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }

    /// Whether a transaction's body is framed as a stream (its first message neither Begin
    /// nor Begin Prepare).
    pub fn streamed(messages: &[Vec<u8>]) -> bool {
        !matches!(messages.first().and_then(|m| m.first()), Some(b'B' | b'b'))
    }

    /// Adds the next piece of the transaction [`Applier::add`] took the first piece of, to
    /// `batch` (a batch of its own), and returns the rows it changes.
    pub fn add_piece(&mut self, batch: &mut Batch, piece: &TxnPiece) -> Result<u64, ApplyError> {
        let open = self.open.clone().ok_or(ApplyError::NoOpenTransaction)?;
        let out = self.messages(&open, &piece.messages)?;
        let changes = out.changes;
        batch.push(out, open.commit_lsn, open.end);
        self.open = piece.more.as_ref().map(|c| Open {
            next: c.next_index(),
            ..open
        });
        Ok(changes)
    }

    /// The statements of a transaction's messages (from message `at.next` on).
    fn messages(&mut self, at: &Open, messages: &[Vec<u8>]) -> Result<TxnPieces, ApplyError> {
        let commit_lsn = at.commit_lsn;
        let mut out = TxnPieces::default();
        // The relation and column set of the INSERT that `out` ends with, if it does.
        let mut open: Option<(u32, Vec<usize>)> = None;
        for (i, raw) in messages.iter().enumerate() {
            let in_stream = at.streamed
                && matches!(
                    raw.first(),
                    Some(b'I' | b'U' | b'D' | b'T' | b'R' | b'Y' | b'M')
                );
            if self.known(raw, in_stream) {
                // Anything else ends the multi-row INSERT, a Relation message included.
                open = None;
                continue;
            }
            let msg = PgOutputMessage::decode(raw, in_stream).map_err(|e| ApplyError::Decode {
                commit_lsn,
                index: at.next + i,
                detail: e.to_string(),
            })?;
            if let PgOutputMessage::Insert(ins) = &msg {
                self.insert(commit_lsn, ins.relation, &ins.new, &mut open, &mut out)?;
                continue;
            }
            // Anything else (a Relation message included) ends the multi-row INSERT.
            open = None;
            if let PgOutputMessage::Relation(r) = &msg {
                self.describe(r, raw, in_stream);
                continue;
            }
            if let Some((st, changes)) = self.statement(&msg, commit_lsn)? {
                out.bytes += st.sql.len() + st.params.iter().flatten().map(Vec::len).sum::<usize>();
                out.changes += changes;
                out.pieces.push(Piece::Statement(st));
            }
        }
        Ok(out)
    }

    /// Whether `raw` is a Relation message that says what the map already holds: it decodes
    /// as the one described did (the same bytes but for the stream xid, which may be any),
    /// so neither decoding nor describing it again changes anything. Streamed transactions
    /// carry their descriptions under their own xids, so comparing whole messages missed.
    fn known(&self, raw: &[u8], in_stream: bool) -> bool {
        let body = relation_body(raw, in_stream);
        let Some(oid) = body.first_chunk::<4>().map(|b| u32::from_be_bytes(*b)) else {
            return false;
        };
        raw.first() == Some(&b'R') && self.relations.get(&oid).is_some_and(|r| r.raw == body)
    }

    fn describe(&mut self, r: &Relation<'_>, raw: &[u8], in_stream: bool) {
        let body = relation_body(raw, in_stream);
        if self
            .relations
            .get(&r.oid)
            .is_some_and(|rel| rel.raw == body)
        {
            return;
        }
        self.shapes.retain(|k, _| k.0 != r.oid);
        let ns = String::from_utf8_lossy(r.namespace);
        let ns = if ns.is_empty() {
            "pg_catalog".into()
        } else {
            ns
        };
        let name = String::from_utf8_lossy(r.name);
        let mut qualified = quote_ident(&ns);
        qualified.push('.');
        qualified.push_str(&quote_ident(&name));
        // One walk over the columns: each step of it reads a column out of the message.
        let mut columns = Vec::with_capacity(r.columns.len());
        let mut key = Vec::new();
        for c in r.columns.iter() {
            let name = String::from_utf8_lossy(c.name);
            columns.push((quote_ident(&name), c.key));
            if c.key {
                key.push(name.into_owned());
            }
        }
        let names = (ns.into_owned(), name.into_owned());
        self.relations.insert(
            r.oid,
            Rel {
                qualified,
                names,
                key,
                identity: r.replica_identity,
                columns,
                raw: body.to_vec(),
            },
        );
    }

    fn rel(&self, commit_lsn: Lsn, oid: u32) -> Result<&Rel, ApplyError> {
        rel_of(&self.relations, commit_lsn, oid)
    }

    /// One INSERT's row: onto the open multi-row INSERT when it has the same relation and
    /// columns (unchanged-TOAST ones left out), else a new one.
    fn insert(
        &self,
        commit_lsn: Lsn,
        oid: u32,
        tuple: &TupleData<'_>,
        open: &mut Option<(u32, Vec<usize>)>,
        out: &mut TxnPieces,
    ) -> Result<(), ApplyError> {
        let rel = self.rel(commit_lsn, oid)?;
        check_width(commit_lsn, rel, tuple)?;
        out.changes += 1;
        // The columns sent (unchanged-TOAST ones left out), compared with the open INSERT's
        // without collecting them; the values go straight onto its run of rows.
        let sent = || {
            tuple
                .iter()
                .enumerate()
                .filter(|(_, v)| !matches!(v, TupleValue::UnchangedToast))
                .map(|(i, _)| i)
        };
        if let (Some((o, cols)), Some(Piece::Insert { rows, values, .. })) =
            (&*open, out.pieces.last_mut())
        {
            if *o == oid && cols.iter().copied().eq(sent()) {
                row_values(commit_lsn, rel, tuple, values, &mut out.bytes)?;
                *rows += 1;
                return Ok(());
            }
        }
        let key = (oid, sent().collect::<Vec<usize>>());
        let mut values = Vec::with_capacity(key.1.len());
        row_values(commit_lsn, rel, tuple, &mut values, &mut out.bytes)?;
        // Built by hand: a new INSERT starts with nearly every transaction of small ones.
        let names = key.1.iter().map(|&i| rel.columns[i].0.as_str());
        let mut target = String::with_capacity(rel.qualified.len() + 16 * key.1.len() + 3);
        target.push_str(&rel.qualified);
        target.push_str(" (");
        for (n, name) in names.enumerate() {
            if n > 0 {
                target.push_str(", ");
            }
            target.push_str(name);
        }
        target.push(')');
        out.bytes += target.len() + 20;
        out.pieces.push(Piece::Insert {
            target,
            width: key.1.len(),
            rows: 1,
            values,
        });
        *open = Some(key);
        Ok(())
    }

    /// The statement for one message other than INSERT and Relation, and the rows it
    /// changes; `None` for messages that change nothing (framing, origins, types, logical
    /// messages).
    fn statement(
        &mut self,
        msg: &PgOutputMessage<'_>,
        commit_lsn: Lsn,
    ) -> Result<Option<(Statement, u64)>, ApplyError> {
        match msg {
            PgOutputMessage::Update(u) => {
                let rel = rel_of(&self.relations, commit_lsn, u.relation)?;
                let new = values(commit_lsn, rel, &u.new)?;
                let old = match &u.old {
                    Some(o) => Some(values(commit_lsn, rel, o.tuple())?),
                    None => None,
                };
                let mut pattern: Vec<u8> = new
                    .iter()
                    .map(|v| {
                        if matches!(v, Value::Sent(_)) {
                            PARAM
                        } else {
                            SKIP
                        }
                    })
                    .collect();
                if !pattern.contains(&PARAM) {
                    return Ok(None);
                }
                let source = old.as_deref().unwrap_or(&new[..]);
                let ident = identity_pattern(rel, source);
                let filter = identity_params(source, &ident);
                pattern.extend_from_slice(&ident);
                let mut params: Vec<Param> = Vec::with_capacity(new.len() + filter.len());
                params.extend(new.into_iter().filter_map(|v| match v {
                    Value::Sent(p) => Some(p),
                    Value::Unchanged => None,
                }));
                params.extend(filter);
                let shape = shape_of(&mut self.shapes, rel, (u.relation, b'U', pattern));
                return Ok(Some((checked(&shape, "UPDATE", commit_lsn, params), 1)));
            }
            PgOutputMessage::Delete(d) => {
                let rel = rel_of(&self.relations, commit_lsn, d.relation)?;
                let old = values(commit_lsn, rel, d.old.tuple())?;
                let ident = identity_pattern(rel, &old);
                let params = identity_params(&old, &ident);
                let shape = shape_of(&mut self.shapes, rel, (d.relation, b'D', ident));
                return Ok(Some((checked(&shape, "DELETE", commit_lsn, params), 1)));
            }
            PgOutputMessage::Truncate(t) => {
                let names = t
                    .relations
                    .iter()
                    .map(|oid| self.rel(commit_lsn, oid).map(|r| r.qualified.clone()))
                    .collect::<Result<Vec<_>, _>>()?;
                let mut sql = format!("TRUNCATE ONLY {}", names.join(", "));
                if t.restart_identity {
                    sql.push_str(" RESTART IDENTITY");
                }
                if t.cascade {
                    sql.push_str(" CASCADE");
                }
                let st = Statement {
                    sql,
                    params: Vec::new(),
                    check: None,
                };
                return Ok(Some((st, 0)));
            }
            // Framing, origins, types (values are text) and logical messages change no rows.
            _ => {}
        }
        Ok(None)
    }
}

/// The relation `oid` as described, borrowed from the map alone (so that the shape cache
/// beside it can be borrowed mutably at the same time).
fn rel_of(relations: &BTreeMap<u32, Rel>, commit_lsn: Lsn, oid: u32) -> Result<&Rel, ApplyError> {
    relations
        .get(&oid)
        .ok_or(ApplyError::UnknownRelation { commit_lsn, oid })
}

/// A statement of `shape` with its values and its check.
fn checked(shape: &Shape, op: &'static str, commit_lsn: Lsn, params: Vec<Param>) -> Statement {
    Statement {
        sql: shape.sql.clone(),
        params,
        check: Some(RowCheck {
            op,
            commit_lsn,
            shape: shape.check.clone(),
        }),
    }
}

/// The shape under `key`, built on first sight.
fn shape_of(
    shapes: &mut HashMap<ShapeKey, Arc<Shape>, BuildHasherDefault<WordHasher>>,
    rel: &Rel,
    key: ShapeKey,
) -> Arc<Shape> {
    if let Some(shape) = shapes.get(&key) {
        return shape.clone();
    }
    let shape = Arc::new(build_shape(rel, key.1, &key.2));
    shapes.insert(key, shape.clone());
    shape
}

/// The SQL of an UPDATE (`op` `b'U'`: the SET list's part of `pattern`, then the filter's)
/// or DELETE (the filter's alone), and its check. The row is the first match's, by `ctid`:
/// exactly one row even where several are identical; the by-key form (where the identity
/// has key columns) leaves the ctid out for a subscriber with a unique index on them.
fn build_shape(rel: &Rel, op: u8, pattern: &[u8]) -> Shape {
    // Pieced together with `push_str` rather than `write!`: every new apply machine builds
    // its shapes again, and formatting them was about 1 % of the simulator's time.
    let n = rel.columns.len();
    let mut at = 0usize;
    let (head, ident) = if op == b'U' {
        let mut head = String::with_capacity(rel.qualified.len() + 24 * n + 20);
        head.push_str("UPDATE ONLY ");
        head.push_str(&rel.qualified);
        head.push_str(" SET ");
        let sets = rel
            .columns
            .iter()
            .zip(pattern)
            .filter(|(_, p)| **p == PARAM);
        for (i, ((name, _), _)) in sets.enumerate() {
            at += 1;
            if i > 0 {
                head.push_str(", ");
            }
            head.push_str(name);
            head.push_str(" = ");
            text::push_placeholder(&mut head, at);
        }
        (head, pattern.get(n..).unwrap_or_default())
    } else {
        let mut head = String::with_capacity(rel.qualified.len() + 17);
        head.push_str("DELETE FROM ONLY ");
        head.push_str(&rel.qualified);
        (head, pattern)
    };
    let full = rel.identity == ReplicaIdentity::Full;
    let mut filter = String::with_capacity(32 * n);
    for ((name, _), part) in rel.columns.iter().zip(ident) {
        if *part == SKIP {
            continue;
        }
        if !filter.is_empty() {
            filter.push_str(" AND ");
        }
        filter.push_str(name);
        if *part == NULL {
            filter.push_str(" IS NULL");
        } else {
            at += 1;
            filter.push_str(if full {
                " IS NOT DISTINCT FROM "
            } else {
                " = "
            });
            text::push_placeholder(&mut filter, at);
        }
    }
    if filter.is_empty() {
        // No identity (REPLICA IDENTITY NOTHING cannot publish updates or deletes): match
        // nothing, so the row check reports the missing row.
        filter.push_str("false");
    }
    let keyed = !full && !rel.key.is_empty() && filter != "false";
    let mut sql = String::with_capacity(head.len() + filter.len() + 2 * rel.qualified.len() + 56);
    sql.push_str(&head);
    sql.push_str(" WHERE ctid = (SELECT ctid FROM ONLY ");
    sql.push_str(&rel.qualified);
    sql.push_str(" WHERE ");
    sql.push_str(&filter);
    sql.push_str(" LIMIT 1)");
    let check = CheckShape {
        qualified: rel.qualified.clone(),
        relation: rel.names.clone(),
        key: if keyed { rel.key.clone() } else { Vec::new() },
        by_key: keyed.then(|| {
            let mut by_key = head;
            by_key.push_str(" WHERE ");
            by_key.push_str(&filter);
            by_key
        }),
    };
    Shape {
        sql,
        check: Arc::new(check),
    }
}

/// Each column's part in the filter that finds the row: key columns with `=` (or IS NULL),
/// every column with IS NOT DISTINCT FROM under REPLICA IDENTITY FULL; unchanged-TOAST old
/// values are left out (the publisher did not send them).
fn identity_pattern(rel: &Rel, source: &[Value]) -> Vec<u8> {
    let full = rel.identity == ReplicaIdentity::Full;
    rel.columns
        .iter()
        .zip(source)
        .map(|((_, key), v)| match v {
            _ if !full && !key => SKIP,
            Value::Unchanged => SKIP,
            Value::Sent(None) if !full => NULL,
            Value::Sent(_) => PARAM,
        })
        .collect()
}

/// The filter's values, in the order of `ident`'s parameters.
fn identity_params(source: &[Value], ident: &[u8]) -> Vec<Param> {
    source
        .iter()
        .zip(ident)
        .filter(|(_, p)| **p == PARAM)
        .map(|(v, _)| match v {
            Value::Sent(p) => p.clone(),
            Value::Unchanged => None,
        })
        .collect()
}

/// Each column's value, checked against the relation's columns.
fn values(commit_lsn: Lsn, rel: &Rel, tuple: &TupleData<'_>) -> Result<Vec<Value>, ApplyError> {
    check_width(commit_lsn, rel, tuple)?;
    tuple
        .iter()
        .map(|v| match v {
            TupleValue::Null => Ok(Value::Sent(None)),
            TupleValue::UnchangedToast => Ok(Value::Unchanged),
            TupleValue::Text(t) => Ok(Value::Sent(Some(t.to_vec()))),
            TupleValue::Binary(_) => Err(binary_value(commit_lsn, rel)),
        })
        .collect()
}

/// Appends an INSERT row's values (unchanged-TOAST ones left out) to `out`, counting their
/// bytes.
fn row_values(
    commit_lsn: Lsn,
    rel: &Rel,
    tuple: &TupleData<'_>,
    out: &mut Vec<Param>,
    bytes: &mut usize,
) -> Result<(), ApplyError> {
    for v in tuple.iter() {
        let v = match v {
            TupleValue::Null => None,
            TupleValue::UnchangedToast => continue,
            TupleValue::Text(t) => Some(t.to_vec()),
            TupleValue::Binary(_) => return Err(binary_value(commit_lsn, rel)),
        };
        *bytes += v.as_ref().map_or(4, Vec::len) + 4;
        out.push(v);
    }
    Ok(())
}

/// A row must have a value for each described column.
fn check_width(commit_lsn: Lsn, rel: &Rel, tuple: &TupleData<'_>) -> Result<(), ApplyError> {
    if tuple.len() != rel.columns.len() {
        return Err(ApplyError::BadTuple {
            commit_lsn,
            relation: rel.qualified.clone(),
            detail: format!(
                "a row with {} values for {} described columns",
                tuple.len(),
                rel.columns.len()
            ),
        });
    }
    Ok(())
}

/// The error for a value in binary form.
fn binary_value(commit_lsn: Lsn, rel: &Rel) -> ApplyError {
    ApplyError::BadTuple {
        commit_lsn,
        relation: rel.qualified.clone(),
        detail: "a value in binary form (the stream must be text)".into(),
    }
}

#[cfg(test)]
mod machine_tests;
#[cfg(test)]
mod piece_tests;
#[cfg(test)]
mod tests;
