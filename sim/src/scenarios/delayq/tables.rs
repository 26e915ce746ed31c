//! The model subscriber's tables and the statements the apply machine sends them: INSERT and
//! COPY, and UPDATE, DELETE and TRUNCATE in exactly the forms the machine writes (anything
//! else is refused as unsupported, so a statement the model cannot run fails the seed rather
//! than passing unnoticed). Changes land in the tables at once, each with an undo entry;
//! rolling back, or a crash losing what was not flushed, plays the entries backwards.
//!
//! Each table keeps the sum of its live rows' hashes (see `ops.rs`), both as it stands and as
//! of the last commit, so the scenario compares a whole table with the publisher's in constant
//! time.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;

use pgyard_types::WordHasher;
use std::rc::Rc;

use super::ops::{hash_row, name_hash, table_hash};

/// One row: each column's text value, `None` for NULL.
pub(super) type Row = Vec<Option<Vec<u8>>>;

/// The table and columns of an INSERT or COPY: parsed once per statement text.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// The qualified table name as the statement wrote it.
    pub(super) table: String,
    /// The column names, unquoted.
    pub(super) columns: Vec<String>,
    /// Each column name's part of a row hash.
    hashes: Vec<u64>,
    /// Where the key column (`payload`) is, if present.
    payload: Option<usize>,
}

impl Target {
    /// The target of `table` with `columns` (unquoted names).
    pub(super) fn new(table: String, columns: Vec<String>) -> Target {
        let hashes = columns.iter().map(|c| name_hash(c.as_bytes())).collect();
        let payload = columns.iter().position(|c| c == "payload");
        Target {
            table,
            columns,
            hashes,
            payload,
        }
    }

    /// Where the key column (`payload`) is, if present.
    pub(super) fn payload_at(&self) -> Option<usize> {
        self.payload
    }
}

/// A row as stored: the columns it was inserted with, its values, whether it is still there.
#[derive(Debug)]
pub(super) struct Stored {
    target: Rc<Target>,
    /// The values, in the target's column order.
    pub(super) values: Row,
    live: bool,
    /// Deleted by hand on the subscriber (not live, yet counted in the table's sums, which
    /// say what the publisher's changes alone would leave).
    tampered: bool,
}

/// One table.
#[derive(Debug, Default)]
struct Table {
    name: String,
    /// The name's part of a row hash.
    seed: u64,
    rows: Vec<Stored>,
    /// Sum of the hashes of the live rows and the ones deleted by hand, now ...
    sum: u64,
    /// ... and as of the last commit.
    committed: u64,
    /// Live rows by key, where rows are looked up.
    index: Option<HashMap<Vec<u8>, Vec<usize>, BuildHasherDefault<WordHasher>>>,
}

impl Table {
    fn hash(&self, i: usize) -> u64 {
        let s = &self.rows[i];
        let cols = s.target.hashes.iter().zip(&s.values);
        hash_row(self.seed, cols.map(|(h, v)| (*h, v.as_deref())))
    }

    fn key(&self, i: usize) -> Option<&Vec<u8>> {
        let s = &self.rows[i];
        s.values.get(s.target.payload?)?.as_ref()
    }

    /// Row `i` enters (`true`) or leaves the live rows: its hash and its key's index entry.
    fn count(&mut self, i: usize, enters: bool) {
        self.add(i, enters);
        self.index(i, enters);
    }

    /// Adds row `i`'s hash to the sum, or takes it away.
    fn add(&mut self, i: usize, enters: bool) {
        let h = self.hash(i);
        self.sum = if enters {
            self.sum.wrapping_add(h)
        } else {
            self.sum.wrapping_sub(h)
        };
    }

    /// Row `i`'s key enters the index, or leaves it.
    fn index(&mut self, i: usize, enters: bool) {
        let Some(index) = &mut self.index else {
            return;
        };
        let s = &self.rows[i];
        let Some(k) = s.target.payload.and_then(|p| s.values.get(p)?.as_ref()) else {
            return;
        };
        // The key is copied only for a new entry. A key that leaves without an entry needs
        // none: an empty entry and a missing one read the same (no rows).
        match index.get_mut(k.as_slice()) {
            Some(at) if enters => {
                at.push(i);
                at.sort_unstable();
            }
            Some(at) => at.retain(|r| *r != i),
            None if enters => {
                index.insert(k.clone(), vec![i]);
            }
            None => {}
        }
    }
}

/// How to undo one change.
#[derive(Debug)]
pub(super) enum Undo {
    /// Remove the table's last row.
    Insert(usize),
    /// Put back a row's old values.
    Update(usize, usize, Row),
    /// Make a row live again.
    Delete(usize, usize),
    /// Count a row deleted by hand again (a TRUNCATE had removed it).
    Untamper(usize, usize),
}

/// One term of a filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Term {
    /// `col = $n`: never true for NULL.
    Eq(String, usize),
    /// `col IS NOT DISTINCT FROM $n`.
    Same(String, usize),
    /// `col IS NULL`.
    Null(String),
}

/// An UPDATE, DELETE or TRUNCATE, parsed once per statement text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// `UPDATE` (with SET assignments) or `DELETE` (without).
    Rows {
        table: String,
        sets: Option<Vec<(String, usize)>>,
        /// `None`: `false` (no identity).
        filter: Option<Vec<Term>>,
        /// By `ctid` of the first match (`LIMIT 1`), else every match.
        first: bool,
    },
    /// `TRUNCATE ONLY`, with RESTART IDENTITY and CASCADE as written.
    Truncate {
        tables: Vec<String>,
        restart: bool,
        cascade: bool,
    },
}

/// The subscriber's tables.
#[derive(Debug, Default)]
pub(super) struct Tables {
    tables: Vec<Table>,
    /// Keep an index by key (seeds with updates and deletes).
    pub(super) indexed: bool,
    /// The key has a unique index: a second row with a key already there is refused.
    pub(super) unique: bool,
}

impl Tables {
    fn id(&mut self, name: &str) -> usize {
        if let Some(i) = self.tables.iter().position(|t| t.name == name) {
            return i;
        }
        self.tables.push(Table {
            name: name.to_owned(),
            seed: table_hash(name.as_bytes()),
            index: self.indexed.then(HashMap::default),
            ..Table::default()
        });
        self.tables.len() - 1
    }

    fn find(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// Inserts rows; returns the range of their positions.
    pub(super) fn insert(
        &mut self,
        target: &Rc<Target>,
        rows: impl Iterator<Item = Row>,
        undo: &mut Vec<Undo>,
    ) -> Result<std::ops::Range<usize>, String> {
        let id = self.id(&target.table);
        let unique = self.unique;
        let t = &mut self.tables[id];
        let first = t.rows.len();
        for values in rows {
            if unique {
                let key = target.payload.and_then(|p| values.get(p)?.as_ref());
                let index = t.index.as_ref();
                if key
                    .and_then(|k| index?.get(k))
                    .is_some_and(|v| !v.is_empty())
                {
                    return Err(format!(
                        "duplicate key value violates unique constraint on {}",
                        t.name
                    ));
                }
            }
            t.rows.push(Stored {
                target: Rc::clone(target),
                values,
                live: true,
                tampered: false,
            });
            undo.push(Undo::Insert(id));
            t.count(t.rows.len() - 1, true);
        }
        Ok(first..t.rows.len())
    }

    /// Runs an UPDATE or DELETE with `params`; returns the rows it changed.
    pub(super) fn change_rows(
        &mut self,
        change: &Change,
        params: &[Option<Vec<u8>>],
        undo: &mut Vec<Undo>,
    ) -> Result<u64, String> {
        let Change::Rows {
            table,
            sets,
            filter,
            first,
        } = change
        else {
            return Err("pgyard sim: not an UPDATE or DELETE".into());
        };
        let param = |n: usize| -> Result<&Option<Vec<u8>>, String> {
            params
                .get(n.wrapping_sub(1))
                .ok_or_else(|| format!("there is no parameter ${n}"))
        };
        let id = self.id(table);
        let mut hits = Vec::new();
        if let Some(terms) = filter {
            let t = &self.tables[id];
            let by_key = terms.iter().find_map(|term| match term {
                Term::Eq(c, n) | Term::Same(c, n) if c == "payload" => Some(*n),
                _ => None,
            });
            let candidates: Vec<usize> = match (by_key, &t.index) {
                (Some(n), Some(index)) => match param(n)? {
                    Some(k) => index.get(k).cloned().unwrap_or_default(),
                    None => (0..t.rows.len()).collect(),
                },
                _ => (0..t.rows.len()).collect(),
            };
            for i in candidates {
                if t.rows[i].live && matches(&t.rows[i], terms, &param)? {
                    hits.push(i);
                    if *first {
                        break;
                    }
                }
            }
        }
        for &i in &hits {
            let t = &mut self.tables[id];
            t.count(i, false);
            match sets {
                None => {
                    t.rows[i].live = false;
                    undo.push(Undo::Delete(id, i));
                }
                Some(sets) => {
                    let old = t.rows[i].values.clone();
                    let row = &mut t.rows[i];
                    for (col, n) in sets {
                        let at = row
                            .target
                            .columns
                            .iter()
                            .position(|c| c == col)
                            .ok_or_else(|| {
                                format!("column \"{col}\" of relation {table} does not exist")
                            })?;
                        row.values[at] = param(*n)?.clone();
                    }
                    undo.push(Undo::Update(id, i, old));
                    t.count(i, true);
                }
            }
        }
        Ok(hits.len() as u64)
    }

    /// Empties tables.
    pub(super) fn truncate(&mut self, names: &[String], undo: &mut Vec<Undo>) {
        for name in names {
            let id = self.id(name);
            let t = &mut self.tables[id];
            for i in 0..t.rows.len() {
                if t.rows[i].live {
                    t.count(i, false);
                    t.rows[i].live = false;
                    undo.push(Undo::Delete(id, i));
                } else if t.rows[i].tampered {
                    t.add(i, false);
                    t.rows[i].tampered = false;
                    undo.push(Undo::Untamper(id, i));
                }
            }
        }
    }

    /// Plays undo entries backwards.
    pub(super) fn undo(&mut self, entries: Vec<Undo>) {
        for u in entries.into_iter().rev() {
            match u {
                Undo::Insert(id) => {
                    let t = &mut self.tables[id];
                    let i = t.rows.len() - 1;
                    if t.rows[i].live {
                        t.count(i, false);
                    }
                    t.rows.pop();
                }
                Undo::Update(id, i, old) => {
                    let t = &mut self.tables[id];
                    t.count(i, false);
                    t.rows[i].values = old;
                    t.count(i, true);
                }
                Undo::Delete(id, i) => {
                    let t = &mut self.tables[id];
                    t.rows[i].live = true;
                    t.count(i, true);
                }
                Undo::Untamper(id, i) => {
                    let t = &mut self.tables[id];
                    t.rows[i].tampered = true;
                    t.add(i, true);
                }
            }
        }
    }

    /// Somebody deletes the `pick`-th live row (of all tables, modulo their number) by hand,
    /// outside replication; `None` when no row is live, else the row's table.
    pub(super) fn tamper(&mut self, pick: u64) -> Option<String> {
        let live: Vec<(usize, usize)> = self
            .tables
            .iter()
            .enumerate()
            .flat_map(|(id, t)| {
                let rows = t.rows.iter().enumerate();
                rows.filter(|(_, r)| r.live).map(move |(i, _)| (id, i))
            })
            .collect();
        let &(id, i) = live.get((pick % live.len().max(1) as u64) as usize)?;
        let t = &mut self.tables[id];
        t.index(i, false);
        t.rows[i].live = false;
        t.rows[i].tampered = true;
        Some(t.name.clone())
    }

    /// Every row deleted by hand is put back as it was; how many.
    pub(super) fn restore(&mut self) -> usize {
        let mut n = 0;
        for t in &mut self.tables {
            for i in 0..t.rows.len() {
                if t.rows[i].tampered {
                    t.rows[i].tampered = false;
                    t.rows[i].live = true;
                    t.index(i, true);
                    n += 1;
                }
            }
        }
        n
    }

    /// Whether a row of table `name` with key `key` was deleted by hand and not put back.
    pub(super) fn tampered(&self, name: &str, key: &[u8]) -> bool {
        self.find(name).is_some_and(|t| {
            (0..t.rows.len())
                .any(|i| t.rows[i].tampered && t.key(i).map(Vec::as_slice) == Some(key))
        })
    }

    /// Everything in the tables is committed.
    pub(super) fn commit(&mut self) {
        self.tables.iter_mut().for_each(|t| t.committed = t.sum);
    }

    /// The committed sum of a table's row hashes, and the sum over every table.
    pub(super) fn committed(&self, name: &str) -> (u64, u64) {
        let all = self
            .tables
            .iter()
            .fold(0u64, |a, t| a.wrapping_add(t.committed));
        (self.find(name).map_or(0, |t| t.committed), all)
    }

    /// A stored row, live or not.
    pub(super) fn row(&self, name: &str, i: usize) -> Option<&Stored> {
        self.find(name)?.rows.get(i)
    }

    /// How many rows of a table are live.
    pub(super) fn live(&self, name: &str) -> usize {
        self.find(name)
            .map_or(0, |t| t.rows.iter().filter(|r| r.live).count())
    }
}

/// Whether a row passes every term of a filter.
fn matches<'p>(
    row: &Stored,
    terms: &[Term],
    param: &impl Fn(usize) -> Result<&'p Option<Vec<u8>>, String>,
) -> Result<bool, String> {
    let value = |c: &str| {
        let at = row.target.columns.iter().position(|n| n == c);
        at.and_then(|i| row.values[i].as_ref())
    };
    for t in terms {
        let pass = match t {
            Term::Eq(c, n) => param(*n)?.as_ref().is_some_and(|p| value(c) == Some(p)),
            Term::Same(c, n) => value(c) == param(*n)?.as_ref(),
            Term::Null(c) => value(c).is_none(),
        };
        if !pass {
            return Ok(false);
        }
    }
    Ok(true)
}

/// An UPDATE, DELETE or TRUNCATE as the apply machine writes them; `None` for anything else.
pub(super) fn parse_change(sql: &str) -> Option<Change> {
    if let Some(rest) = sql.strip_prefix("TRUNCATE ONLY ") {
        let (rest, cascade) = match rest.strip_suffix(" CASCADE") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let (rest, restart) = match rest.strip_suffix(" RESTART IDENTITY") {
            Some(r) => (r, true),
            None => (rest, false),
        };
        let tables = rest.split(", ").map(str::to_owned).collect();
        return Some(Change::Truncate {
            tables,
            restart,
            cascade,
        });
    }
    let (table, sets, cond) = if let Some(rest) = sql.strip_prefix("UPDATE ONLY ") {
        let (table, rest) = rest.split_once(" SET ")?;
        let (sets, cond) = rest.split_once(" WHERE ")?;
        let sets = sets
            .split(", ")
            .map(|a| {
                let (c, p) = a.split_once(" = ")?;
                Some((unquote(c)?, placeholder(p)?))
            })
            .collect::<Option<Vec<_>>>()?;
        (table, Some(sets), cond)
    } else {
        let rest = sql.strip_prefix("DELETE FROM ONLY ")?;
        let (table, cond) = rest.split_once(" WHERE ")?;
        (table, None, cond)
    };
    let (filter, first) = match cond.strip_prefix("ctid = (SELECT ctid FROM ONLY ") {
        Some(sub) => {
            let inner = sub.strip_prefix(table)?.strip_prefix(" WHERE ")?;
            (inner.strip_suffix(" LIMIT 1)")?, true)
        }
        None => (cond, false),
    };
    let filter = if filter == "false" {
        None
    } else {
        Some(
            filter
                .split(" AND ")
                .map(term)
                .collect::<Option<Vec<_>>>()?,
        )
    };
    Some(Change::Rows {
        table: table.to_owned(),
        sets,
        filter,
        first,
    })
}

fn term(t: &str) -> Option<Term> {
    if let Some(c) = t.strip_suffix(" IS NULL") {
        return Some(Term::Null(unquote(c)?));
    }
    if let Some((c, p)) = t.split_once(" IS NOT DISTINCT FROM ") {
        return Some(Term::Same(unquote(c)?, placeholder(p)?));
    }
    let (c, p) = t.split_once(" = ")?;
    Some(Term::Eq(unquote(c)?, placeholder(p)?))
}

/// `"name"` → `name` (the model's names hold no quotes).
fn unquote(c: &str) -> Option<String> {
    let n = c.strip_prefix('"')?.strip_suffix('"')?;
    (!n.contains('"')).then(|| n.to_owned())
}

/// `$n` → `n`.
fn placeholder(p: &str) -> Option<usize> {
    p.strip_prefix('$')?.parse().ok().filter(|n| *n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Rc<Target> {
        Rc::new(Target::new(
            "\"public\".\"t0\"".into(),
            vec!["payload".into(), "ver".into(), "x1_0".into()],
        ))
    }

    fn row(k: &str, x: Option<&str>) -> Row {
        vec![
            Some(k.as_bytes().to_vec()),
            Some(b"1".to_vec()),
            x.map(|x| x.as_bytes().to_vec()),
        ]
    }

    #[test]
    fn the_machines_statements_parse() {
        let u = "UPDATE ONLY \"public\".\"t0\" SET \"payload\" = $1, \"x1_0\" = $2 WHERE ctid = \
                 (SELECT ctid FROM ONLY \"public\".\"t0\" WHERE \"payload\" = $3 AND \"ver\" IS \
                 NULL LIMIT 1)";
        let Some(Change::Rows {
            sets,
            filter,
            first,
            ..
        }) = parse_change(u)
        else {
            panic!("{u}")
        };
        assert_eq!(sets, Some(vec![("payload".into(), 1), ("x1_0".into(), 2)]));
        assert_eq!(
            filter,
            Some(vec![
                Term::Eq("payload".into(), 3),
                Term::Null("ver".into())
            ])
        );
        assert!(first);
        let d = "DELETE FROM ONLY \"public\".\"t2\" WHERE \"payload\" IS NOT DISTINCT FROM $1";
        assert!(matches!(
            parse_change(d),
            Some(Change::Rows {
                sets: None,
                first: false,
                ..
            })
        ));
        let mismatched = "DELETE FROM ONLY \"public\".\"t2\" WHERE ctid = (SELECT ctid FROM \
                          ONLY \"public\".\"t1\" WHERE \"payload\" = $1 LIMIT 1)";
        assert_eq!(
            parse_change(mismatched),
            None,
            "the subquery names another table"
        );
        assert_eq!(
            parse_change("TRUNCATE ONLY \"public\".\"t0\", \"public\".\"t1\" RESTART IDENTITY"),
            Some(Change::Truncate {
                tables: vec!["\"public\".\"t0\"".into(), "\"public\".\"t1\"".into()],
                restart: true,
                cascade: false
            })
        );
        assert_eq!(parse_change("UPDATE t SET x = 1"), None);
    }

    #[test]
    fn changes_find_their_rows_and_undo_restores_everything() {
        let mut t = Tables {
            indexed: true,
            unique: true,
            ..Tables::default()
        };
        let name = "\"public\".\"t0\"";
        let mut undo = Vec::new();
        let tg = target();
        t.insert(
            &tg,
            [row("a", None), row("b", Some("x"))].into_iter(),
            &mut undo,
        )
        .expect("insert");
        t.commit();
        let (before, _) = t.committed(name);
        let mut undo = Vec::new();
        let upd = parse_change(
            "UPDATE ONLY \"public\".\"t0\" SET \"x1_0\" = $1 WHERE ctid = (SELECT ctid FROM \
             ONLY \"public\".\"t0\" WHERE \"payload\" = $2 LIMIT 1)",
        )
        .expect("parses");
        let p = |v: &[Option<&str>]| -> Row {
            v.iter().map(|s| s.map(|s| s.as_bytes().to_vec())).collect()
        };
        assert_eq!(
            t.change_rows(&upd, &p(&[Some("y"), Some("a")]), &mut undo),
            Ok(1)
        );
        assert_eq!(
            t.change_rows(&upd, &p(&[Some("y"), None]), &mut undo),
            Ok(0),
            "= NULL matches nothing"
        );
        let del = parse_change(
            "DELETE FROM ONLY \"public\".\"t0\" WHERE \"payload\" IS NOT DISTINCT FROM $1 AND \
             \"x1_0\" IS NOT DISTINCT FROM $2",
        )
        .expect("parses");
        assert_eq!(
            t.change_rows(&del, &p(&[Some("b"), Some("x")]), &mut undo),
            Ok(1)
        );
        assert_eq!(t.live(name), 1);
        assert!(
            t.insert(&tg, [row("a", None)].into_iter(), &mut undo)
                .is_err(),
            "unique key"
        );
        t.truncate(&[name.to_owned()], &mut undo);
        assert_eq!(t.live(name), 0);
        t.undo(undo);
        assert_eq!(t.live(name), 2);
        t.commit();
        assert_eq!(t.committed(name).0, before, "every change undone");
        assert_eq!(
            t.row(name, 0).map(|r| r.values.clone()),
            Some(row("a", None))
        );
    }
}
