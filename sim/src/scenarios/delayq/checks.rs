//! What the subscriber must hold, checked as the `delayq` scenario runs: the publisher's
//! committed prefix up to the subscriber's origin (row by row for inserts, by sums of row
//! hashes for whole tables), commit times, TRUNCATEs, refusals and due times.

use pgyard_types::Lsn;

use super::ops::Op;
use super::subscriber::{Change, Inserted};
use super::text::{lsn_str, Dec, LsnText};
use super::walsender::{column_count, is_column_name, rel_of, table_name, RELATIONS};
use super::{fail, Run};
use crate::publisher::Fate;
use crate::{trace, trace_line, Violation};

/// What the checks need of each publisher commit, in commit order: the rows inserted and the
/// tables' row-hash sums up to and including it, and the latest commit time among them (the
/// running maximum the due times follow).
#[derive(Clone, Copy, Debug)]
pub(super) struct Ledger {
    inserts: usize,
    state: [u64; RELATIONS as usize],
    /// This commit's own time.
    ts: i64,
    max_ts: i64,
}

/// The commit times the current queue's running maximum of due times goes over: those of the
/// transactions it recovered (an applied one whose first records were purged is forgotten,
/// even where its commit record is still on disk), and of every commit it took in since it
/// opened, from the resume position on.
#[derive(Clone, Debug)]
pub(super) struct Known {
    /// Recovered commits: (commit LSN, commit time in µs).
    recovered: Vec<(Lsn, i64)>,
    /// The index of the publisher's first commit taken in since the queue opened.
    fresh_from: usize,
    /// A cache of the latest commit time over the fresh commits `fresh_from..upto`.
    upto: usize,
    max_ts: i64,
}

impl Known {
    /// The recovered commits, and the fresh ones from the publisher's commit `fresh_from` on.
    pub(super) fn new(recovered: Vec<(Lsn, i64)>, fresh_from: usize) -> Known {
        Known {
            recovered,
            fresh_from,
            upto: fresh_from,
            max_ts: i64::MIN,
        }
    }
}

impl Run<'_> {
    /// A refused transaction is the first one the subscriber does not have (and the operator
    /// does not skip), and either it writes to a table the subscriber lacks, or its row check
    /// failed — each UPDATE and DELETE must find exactly its row — because it changes a row
    /// somebody deleted by hand on the subscriber, in the table the check's words name.
    pub(super) fn check_refusal(&self, commit_lsn: Lsn, text: &str) -> Result<(), Violation> {
        let origin = self.sub.origin;
        let commits = &self.publ.commits;
        let next = commits[commits.partition_point(|c| c.end_lsn <= origin)..]
            .iter()
            .find(|c| !self.operator.skips(c.commit_lsn));
        let txn = next
            .filter(|c| c.commit_lsn == commit_lsn)
            .and_then(|c| self.publ.txns.get(&c.xid.0));
        let changes = txn.map_or(&[][..], |t| &t.changes[..]);
        if let Some(words) = pgyard_delayq::apply::row_check_failure(text) {
            let table = words
                .split_once(" on relation ")
                .and_then(|(_, r)| r.split_once(" changed 0 rows "))
                .map(|(t, _)| t);
            let lost = changes.iter().any(|p| match (self.ops.op(p), table) {
                (Some(Op::Update { rel, old, .. } | Op::Delete { rel, old, .. }), Some(t)) => {
                    table_name(*rel) == t
                        && old
                            .first()
                            .cloned()
                            .flatten()
                            .is_some_and(|k| self.sub.tables.tampered(t, &k))
                }
                _ => false,
            });
            if !lost || !words.starts_with(&format!("commit {commit_lsn}: ")) {
                return Err(fail(
                    "updates-find-their-row",
                    format!("refused {commit_lsn}: {text} (no row of it was deleted by hand)"),
                ));
            }
            return Ok(());
        }
        let culprit = changes.iter().any(|p| {
            let one = [rel_of(p)];
            let rels = self.ops.op(p).map_or(&one[..], Op::tables);
            rels.iter().any(|r| {
                let table = table_name(*r);
                self.sub.missing.contains(table) && text.contains(table)
            })
        });
        if !culprit {
            return Err(fail(
                "refusal-names-culprit",
                format!(
                    "refused {commit_lsn} ({text}); the first transaction after origin {origin} \
                     is {next:?}, missing tables {:?}",
                    self.sub.missing
                ),
            ));
        }
        Ok(())
    }

    /// The running totals of the publisher's commits, extended to every commit so far.
    fn ledger(&mut self) -> &[Ledger] {
        for c in &self.publ.commits[self.ledger.len()..] {
            let prev = self.ledger.last().copied().unwrap_or(Ledger {
                inserts: 0,
                state: [0; RELATIONS as usize],
                ts: i64::MIN,
                max_ts: i64::MIN,
            });
            let txn = self.publ.txns.get(&c.xid.0);
            let ts = match txn.map(|t| t.fate) {
                Some(Fate::Committed { ts, .. }) => ts.to_unix().0,
                _ => i64::MIN,
            };
            let mut state = prev.state;
            let mut inserts = prev.inserts;
            // A skipped transaction keeps its due time, and changes nothing.
            let changes = match txn {
                Some(t) if !self.operator.skips(c.commit_lsn) => &t.changes[..],
                _ => &[],
            };
            for p in changes {
                let op = self.ops.op(p);
                inserts += usize::from(op.is_none_or(|o| matches!(o, Op::Insert { .. })));
                if let Some(op) = op {
                    op.apply(&mut state);
                }
            }
            self.ledger.push(Ledger {
                inserts,
                state,
                ts,
                max_ts: prev.max_ts.max(ts),
            });
        }
        &self.ledger
    }

    /// Commits `range` (of the publisher's, by index) just went onto the subscriber: none that
    /// the operator skips, none that the operator's `until` holds back (a skip and an
    /// `until` are set only as an applier starts, so every machine that sent work knew them).
    fn check_until(&self, range: std::ops::Range<usize>) -> Result<(), Violation> {
        for c in &self.publ.commits[range] {
            let ts = match self.publ.txns.get(&c.xid.0).map(|t| t.fate) {
                Some(Fate::Committed { ts, .. }) => ts,
                _ => continue,
            };
            if !self.operator.skips(c.commit_lsn) && self.operator.holds(c.commit_lsn, ts) {
                return Err(fail(
                    "until-holds",
                    format!(
                        "applied the commit at {} though the operator's until {:?} holds it",
                        c.commit_lsn, self.operator.controls.until
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The origin's commit time, set with the batch that moved it to `to`, is the publisher's
    /// commit time of the commit ending at `to` (what `pg_replication_origin_xact_setup` is
    /// given, read back as a server reads its text).
    pub(super) fn check_commit_time(&mut self, to: Lsn, time: i64) -> Result<(), Violation> {
        let i = self.publ.commits.partition_point(|c| c.end_lsn < to);
        let want = self.ledger().get(i).map(|l| l.ts);
        if want != Some(time) {
            return Err(fail(
                "origin-commit-time",
                format!("the batch to {to} set the origin's commit time to {time}, the publisher committed it at {want:?}"),
            ));
        }
        Ok(())
    }

    /// The TRUNCATEs a batch from origin `from` to `to` ran are those of the publisher's
    /// commits in between, in order, naming the same tables with the same options.
    pub(super) fn check_truncates(
        &self,
        from: Lsn,
        to: Lsn,
        ran: &[std::rc::Rc<Change>],
    ) -> Result<(), Violation> {
        let lo = self.publ.commits.partition_point(|c| c.end_lsn <= from);
        let hi = self.publ.commits.partition_point(|c| c.end_lsn <= to);
        let want = self.publ.commits[lo..hi]
            .iter()
            .filter(|c| !self.operator.skips(c.commit_lsn))
            .filter_map(|c| self.publ.txns.get(&c.xid.0))
            .flat_map(|t| t.changes.iter())
            .filter_map(|p| match self.ops.op(p) {
                Some(Op::Truncate {
                    rels,
                    cascade,
                    restart,
                }) => Some(Change::Truncate {
                    tables: rels.iter().map(|r| table_name(*r).to_owned()).collect(),
                    restart: *restart,
                    cascade: *cascade,
                }),
                _ => None,
            });
        if !want.eq(ran.iter().map(|c| (**c).clone())) {
            return Err(fail(
                "truncate-as-sent",
                format!("the batch to {to} ran the TRUNCATEs {ran:?}, unlike the publisher's"),
            ));
        }
        Ok(())
    }

    /// A batch committed on the subscriber, moving its origin from `from` to `to`: it holds
    /// exactly the changes of the publisher's commits in between, in commit order, each row
    /// in its change's table with the columns of the definition it was encoded with, and
    /// the last of them (so all of them) was due.
    pub(super) fn check_commit(
        &mut self,
        from: Lsn,
        to: Lsn,
        inserted: &[Inserted],
        keys: std::ops::Range<usize>,
    ) -> Result<(), Violation> {
        let lo = self.publ.commits.partition_point(|c| c.end_lsn <= from);
        let hi = self.publ.commits.partition_point(|c| c.end_lsn <= to);
        if hi <= lo || self.publ.commits[hi - 1].end_lsn != to {
            return Err(fail(
                "subscriber-prefix",
                format!("the origin moved from {from} to {to}, which ends no later commit"),
            ));
        }
        let max_ts = self.ledger()[hi - 1].max_ts;
        self.check_until(lo..hi)?;
        let ops = &self.ops;
        let operator = &self.operator;
        let mut expected = self.publ.commits[lo..hi]
            .iter()
            .filter(|c| !operator.skips(c.commit_lsn))
            .filter_map(|c| self.publ.txns.get(&c.xid.0))
            .flat_map(|t| t.changes.iter())
            .filter(|p| ops.op(p).is_none_or(|o| matches!(o, Op::Insert { .. })));
        let mut rows = 0usize;
        // Keys as inserted: a later UPDATE in the same batch may have changed the row's.
        let mut keys = self.sub.log[keys].iter();
        for ins in inserted {
            let mut shape = Shape::new(ins);
            for i in ins.rows.clone() {
                rows += 1;
                let key = keys.next();
                let got = shape.payload.and(key).map(Vec::as_slice);
                let want = expected.next();
                if got != want.map(Vec::as_slice) {
                    return Err(self.prefix_broken(from, to, rows, got, want));
                }
                let row = self
                    .sub
                    .row(&ins.target.table, i)
                    .map_or(&[][..], |r| &r.values[..]);
                shape.check(row, got.unwrap_or_default())?;
            }
        }
        if let Some(want) = expected.next() {
            return Err(self.prefix_broken(from, to, rows + 1, None, Some(want)));
        }
        let earliest = max_ts + (self.mix.delay_ms + self.mix.skew_tolerance_ms) as i64 * 1000;
        if self.now.0 < earliest {
            return Err(fail(
                "never-before-due",
                format!(
                    "commits through end {to} applied at {}, due at {earliest} (the latest \
                     commit time up to it plus the delay)",
                    self.now.0
                ),
            ));
        }
        // Traced for nearly every batch: in pieces, without `fmt`, while the clock is not
        // below 0 (as it never is).
        match u64::try_from(self.now.0) {
            Ok(now) => trace_line!(
                self.t,
                "subscriber commits ",
                hi - lo,
                " txns to ",
                lsn_str(to, &mut [0u8; 17]),
                ": ",
                rows,
                " rows at ",
                now
            ),
            Err(_) => trace!(
                self.t,
                "subscriber commits {} txns to {}: {} rows at {}",
                Dec((hi - lo) as i64),
                LsnText(to),
                Dec(rows as i64),
                Dec(self.now.0)
            ),
        }
        Ok(())
    }

    fn prefix_broken(
        &self,
        from: Lsn,
        to: Lsn,
        row: usize,
        got: Option<&[u8]>,
        want: Option<&Vec<u8>>,
    ) -> Violation {
        let text = |p: Option<&[u8]>| p.map(|p| String::from_utf8_lossy(p).into_owned());
        fail(
            "subscriber-prefix",
            format!(
                "the batch from origin {from} to {to} holds {:?} as its row {row}, the \
                 publisher committed {:?} there",
                text(got),
                text(want.map(Vec::as_slice))
            ),
        )
    }

    /// At every step: the subscriber holds exactly the changes of the publisher's commits up
    /// to its origin, and the queue has acknowledged nothing the subscriber does not hold
    /// durably.
    pub(super) fn check_subscriber(&mut self) -> Result<(), Violation> {
        let origin = self.sub.origin;
        let n = self.publ.commits.partition_point(|c| c.end_lsn <= origin);
        let at_commit =
            n == 0 && origin == Lsn(0) || n > 0 && self.publ.commits[n - 1].end_lsn == origin;
        let (want, state) = if n == 0 {
            (0, [0; RELATIONS as usize])
        } else {
            let l = self.ledger()[n - 1];
            (l.inserts, l.state)
        };
        if at_commit && self.sub.log.len() == want {
            self.check_tables(n, &state)?;
        }
        if !at_commit || self.sub.log.len() != want {
            return Err(fail(
                "subscriber-prefix",
                format!(
                    "the subscriber's origin is {origin} with {} rows; the publisher's first {n} \
                     commits hold {want} changes",
                    self.sub.log.len()
                ),
            ));
        }
        self.check_acknowledged()
    }

    /// The subscriber's tables, as of its last commit, hold what the publisher's first `n`
    /// commits left in them (compared by sums of row hashes, per table and over all tables).
    fn check_tables(&self, n: usize, state: &[u64; RELATIONS as usize]) -> Result<(), Violation> {
        let mut total = 0u64;
        for (r, want) in state.iter().enumerate() {
            let (got, all) = self.sub.tables.committed(table_name(r as u32));
            total = total.wrapping_add(got);
            if got != *want || r + 1 == state.len() && all != total {
                return Err(fail(
                    "subscriber-tables",
                    format!(
                        "after the publisher's first {n} commits table t{r} differs on the \
                         subscriber (row-hash sums {got:#x}, publisher's {want:#x}; all tables \
                         {all:#x})"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// At every step: the queue's next transaction carries its publisher's commit time, and
    /// is due no earlier than that time plus the delay (and tolerance) and no later than the
    /// latest commit time up to it plus the same (due times never go backwards, so a commit
    /// after a clock step back waits for the ones before it; a recovered queue may know fewer
    /// of the earlier ones, which only moves the bound down). A due time too early applies
    /// early; one too late holds the replica back for nothing.
    pub(super) fn check_due(&mut self) -> Result<(), Violation> {
        let Some((lsn, ts)) = self.q.as_ref().and_then(|q| q.next_commit()) else {
            return Ok(());
        };
        let due = self.q.as_ref().and_then(|q| q.next_due());
        let i = self.publ.commits.partition_point(|c| c.commit_lsn < lsn);
        if self.publ.commits.get(i).is_none_or(|c| c.commit_lsn != lsn) {
            return Err(fail(
                "due-on-time",
                format!("the queue's next commit at {lsn} is no commit of the publisher"),
            ));
        }
        let led = self.ledger()[i];
        let margin = (self.mix.delay_ms + self.mix.skew_tolerance_ms) as i64 * 1000;
        let exact = self.known_max_ts(i) + margin;
        match due {
            Some(d) if ts.to_unix().0 == led.ts && d.0 == exact => Ok(()),
            _ => Err(fail(
                "due-on-time",
                format!(
                    "the commit at {lsn} (time {}, publisher's {}) is due at {due:?}; the \
                     running maximum over the commits this queue has known up to it makes \
                     {exact} (over every commit: {})",
                    ts.to_unix().0,
                    led.ts,
                    led.max_ts + margin
                ),
            )),
        }
    }

    /// The latest commit time the current queue's running maximum has seen by the publisher's
    /// commit `i` (whose ledger entry the caller made): the recovered commits at or before it,
    /// and the fresh ones up to it.
    fn known_max_ts(&mut self, i: usize) -> i64 {
        let lsn = self.publ.commits[i].commit_lsn;
        let k = &mut self.known;
        if i + 1 < k.upto {
            k.upto = k.fresh_from;
            k.max_ts = i64::MIN;
        }
        for led in self.ledger.get(k.upto..=i).unwrap_or_default() {
            k.max_ts = k.max_ts.max(led.ts);
        }
        k.upto = k.upto.max(i + 1);
        let recovered = k
            .recovered
            .iter()
            .filter(|(l, _)| *l <= lsn)
            .map(|(_, ts)| *ts)
            .max()
            .unwrap_or(i64::MIN);
        k.max_ts.max(recovered)
    }
}

/// What one statement's rows must agree with: its table and its columns.
struct Shape<'a> {
    ins: &'a Inserted,
    /// The table number, from `"public"."t<n>"`.
    rel: Option<u32>,
    payload: Option<usize>,
    ver: Option<usize>,
    /// The last version whose column names were found to match.
    matched: Option<u32>,
}

impl<'a> Shape<'a> {
    fn new(ins: &'a Inserted) -> Shape<'a> {
        let rel = ins
            .target
            .table
            .strip_prefix("\"public\".\"t")
            .and_then(|t| t.strip_suffix('"'))
            .and_then(|n| n.parse().ok());
        let col = |name: &str| ins.target.columns.iter().position(|c| c == name);
        Shape {
            ins,
            rel,
            payload: col("payload"),
            ver: col("ver"),
            matched: None,
        }
    }

    /// One inserted row: in its change's table, with the columns of the version it names.
    fn check(&mut self, row: &[Option<Vec<u8>>], payload: &[u8]) -> Result<(), Violation> {
        let bad = |what: String| {
            fail(
                "relation-described",
                format!("row {}: {what}", String::from_utf8_lossy(payload)),
            )
        };
        let rel = rel_of(payload);
        if self.rel != Some(rel) {
            return Err(bad(format!(
                "inserted into {}, not t{rel}",
                self.ins.target.table
            )));
        }
        let ver = self
            .ver
            .and_then(|i| row[i].as_deref())
            .and_then(|v| std::str::from_utf8(v).ok()?.parse::<u32>().ok())
            .ok_or_else(|| bad(format!("no version among {:?}", self.ins.target.columns)))?;
        if self.matched == Some(ver) {
            return Ok(());
        }
        let columns = &self.ins.target.columns;
        let same = columns.len() == column_count(ver)
            && columns
                .iter()
                .enumerate()
                .all(|(i, c)| is_column_name(ver, i, c.as_bytes()));
        if !same {
            return Err(bad(format!(
                "encoded with version {ver}, inserted as columns {columns:?}"
            )));
        }
        self.matched = Some(ver);
        Ok(())
    }
}
