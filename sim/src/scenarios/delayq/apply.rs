//! The applier: `pgyard_delayq::apply::ApplyMachine`, the machine `pgyard delayq apply` and
//! `run` drive over a real subscriber, driven here over the model subscriber — its commands
//! become requests on the model connection, the model's replies are handed back in order —
//! and the checks of what the subscriber ends up holding.

use pgyard_delayq::apply::{ApplyControls, ApplyMachine, Command, Failure, Notice};
use pgyard_delayq::ReadyMessage;
use pgyard_types::{uniform_inclusive, Lsn};
use pgyard_wire::pgoutput::{self as po, PgOutputMessage};

use super::ops::Op;
use super::subscriber::{Change, Inserted, Ran, Reply, Request};
use super::text::{lsn_str, Dec, LsnText};
use super::walsender::{column_count, column_name, rel_of, table_name, RELATIONS};
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

impl Run<'_> {
    /// One turn of the applier process: start it if it is down, then a few rounds of its
    /// commands, the subscriber running some of what was sent, and replies read back. `calm`
    /// runs everything to completion (the liveness phase).
    pub(super) fn apply_step(&mut self, calm: bool) -> Result<(), Violation> {
        if self.app.is_none() && !self.start_applier()? {
            return Ok(());
        }
        let rounds = if calm {
            10_000
        } else {
            1 + uniform_inclusive(self.rng, 2)
        };
        for _ in 0..rounds {
            self.perform()?;
            let (sent, answered) = self.sub.in_flight();
            if self.app.is_none() || calm && sent == 0 && answered == 0 {
                return Ok(());
            }
            let run = if calm {
                sent
            } else {
                uniform_inclusive(self.rng, sent as u64) as usize
            };
            for _ in 0..run {
                self.run_one()?;
            }
            let (_, answered) = self.sub.in_flight();
            let read = if calm {
                answered
            } else {
                uniform_inclusive(self.rng, answered as u64) as usize
            };
            for _ in 0..read {
                if self.app.is_none() {
                    return Ok(());
                }
                self.read_one()?;
            }
        }
        Ok(())
    }

    /// Connects to the subscriber (reading the origin's progress with a flush) and starts a
    /// machine there. `false` when the queue was out of space for it (tried again later).
    fn start_applier(&mut self) -> Result<bool, Violation> {
        let origin = self.sub.connect();
        let controls = ApplyControls {
            paused: self.paused,
            ..ApplyControls::default()
        };
        let (cfg, now) = (self.apply_cfg.clone(), self.now);
        let q = self.q.as_mut().expect("queue is open between steps");
        match ApplyMachine::new(q, origin, cfg, controls, now) {
            Ok(m) => {
                #[cfg(feature = "planted-bugs")]
                let m = match self.apply_bug {
                    Some(b) => m.with_planted_bug(b),
                    None => m,
                };
                #[cfg(not(feature = "planted-bugs"))]
                let _ = self.apply_bug;
                trace!(
                    self.t,
                    "applier starts at origin {}, {} applied before",
                    LsnText(origin),
                    m.applied().skipped_at_start
                );
                self.app = Some(m);
                self.check_acknowledged()?;
                Ok(true)
            }
            Err(f) if f.is_retryable() => {
                self.end_session(0)?;
                Ok(false)
            }
            Err(f) => {
                self.end_session(0)?;
                self.applier_failed(f).map(|()| false)
            }
        }
    }

    /// The machine's commands until it has none, sent on the model connection.
    fn perform(&mut self) -> Result<(), Violation> {
        for _ in 0..10_000 {
            let Some(m) = self.app.as_mut() else {
                return Ok(());
            };
            let q = self.q.as_mut().expect("queue is open between steps");
            let command = m.poll_command(q, self.now);
            self.notices()?;
            self.check_acknowledged()?;
            match command {
                Ok(None) => return Ok(()),
                Ok(Some(Command::Send { id, plan })) => {
                    if !(plan.opens && plan.closes) {
                        let (o, c) = (plan.opens, plan.closes);
                        let flag = |b: bool| if b { "true" } else { "false" };
                        trace_line!(
                            self.t,
                            "send batch ",
                            id.0,
                            " piece opens=",
                            flag(o),
                            " closes=",
                            flag(c)
                        );
                    }
                    self.sub.send(Request::Batch(id, plan));
                }
                Ok(Some(Command::AskProgress)) => self.sub.send(Request::Progress),
                Ok(Some(Command::RollBack { origin })) => {
                    // As the CLI does: every reply still in flight is read and dropped.
                    self.sub.abandon_in_flight();
                    self.sub.send(Request::Rollback(origin));
                }
                Err(f) => return self.applier_failed(f),
            }
        }
        Err(fail(
            "no-busy-loop",
            "the apply machine issued 10,000 commands in a row".into(),
        ))
    }

    /// The subscriber runs the oldest request sent.
    fn run_one(&mut self) -> Result<(), Violation> {
        match self.sub.run_next() {
            Some(ran) => self.check_ran(ran),
            None => Ok(()),
        }
    }

    fn check_ran(&mut self, ran: Ran) -> Result<(), Violation> {
        match ran {
            Ran::Nothing => Ok(()),
            Ran::Committed {
                from,
                to,
                time,
                inserted,
                keys,
                truncated,
            } => {
                self.check_commit(from, to, &inserted, keys)?;
                self.check_commit_time(to, time)?;
                self.check_truncates(from, to, &truncated)
            }
            Ran::RolledBack { asked, at } if asked != at => Err(fail(
                "rollback-keeps-origin",
                format!("the machine rolled back to origin {asked}, the subscriber's is {at}"),
            )),
            Ran::RolledBack { .. } => Ok(()),
        }
    }

    /// Reads the oldest live reply and hands it to the machine, then performs what follows
    /// (one reply per turn, as the CLI reads them).
    fn read_one(&mut self) -> Result<(), Violation> {
        let Some(reply) = self.sub.read_reply() else {
            return Ok(());
        };
        let (Some(m), Some(q)) = (self.app.as_mut(), self.q.as_mut()) else {
            return Ok(());
        };
        let handled = match reply {
            Reply::Committed(id) => m.handle_committed(q, id, self.now),
            Reply::Refused(id, text) => m.handle_refused(id, text),
            Reply::Progress(lsn) => m.handle_progress(q, lsn, self.now),
            Reply::Other => {
                return Err(fail(
                    "applier-replies-in-order",
                    "a request the machine still waits for failed in an aborted block".into(),
                ))
            }
        };
        self.notices()?;
        if let Err(f) = handled {
            return self.applier_failed(f);
        }
        self.check_acknowledged()?;
        self.perform()
    }

    /// What the machine reported doing on its own.
    fn notices(&mut self) -> Result<(), Violation> {
        while let Some(n) = self.app.as_mut().and_then(ApplyMachine::poll_notice) {
            match n {
                Notice::Message(m) => self.deliver_note(&m)?,
                // The machine purges last in a call, so the files are as the purge left them.
                Notice::Purged(removed) => {
                    if removed > 0 {
                        trace!(self.t, "purge removed {removed}");
                    }
                    self.check_no_orphans()?;
                }
                Notice::Skipped(lsn) => {
                    return Err(fail(
                        "only-asked-skips",
                        format!("skipped {lsn} though nobody asked"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// The applier process ends (crash, failure, restart): of the requests it sent, the first
    /// `arrived` reach the subscriber and run there; the rest are lost with the connection.
    pub(super) fn end_session(&mut self, arrived: usize) -> Result<(), Violation> {
        self.app = None;
        for ran in self.sub.drop_session(arrived) {
            self.check_ran(ran)?;
        }
        Ok(())
    }

    /// The applier process dies at a random moment: a random part of what it sent arrived.
    pub(super) fn crash_applier(&mut self) -> Result<(), Violation> {
        let (sent, _) = self.sub.in_flight();
        let arrived = uniform_inclusive(self.rng, sent as u64) as usize;
        trace!(
            self.t,
            "applier killed, {arrived} of {sent} requests arrived"
        );
        self.end_session(arrived)
    }

    /// The machine stopped: a refusal (a table the subscriber lacks) names the right
    /// transaction and the operator creates the table; a queue failure restarts the process;
    /// anything else is a violation.
    fn applier_failed(&mut self, f: Failure) -> Result<(), Violation> {
        let (sent, _) = self.sub.in_flight();
        self.end_session(sent)?;
        match f {
            Failure::Refused { commit_lsn, text } => {
                self.check_refusal(commit_lsn, &text)?;
                trace!(
                    self.t,
                    "apply stopped at {commit_lsn}: {text}; the table is created"
                );
                self.sub.missing.clear();
                Ok(())
            }
            Failure::Queue(e) => self.on_error("apply", e),
            Failure::Plan(e) => Err(fail("relation-described", e.to_string())),
            Failure::Misuse(m) => Err(fail("applier-replies-in-order", m)),
        }
    }

    /// A refused transaction is the first one the subscriber does not have, and it writes to
    /// a table the subscriber lacks (never a failed row check).
    fn check_refusal(&self, commit_lsn: Lsn, text: &str) -> Result<(), Violation> {
        if text.starts_with(pgyard_delayq::apply::CHECK_MARKER) {
            // Every UPDATE and DELETE of the publisher's finds exactly one row on a subscriber
            // that holds the publisher's prefix.
            return Err(fail(
                "updates-find-their-row",
                format!("refused {commit_lsn}: {text}"),
            ));
        }
        let origin = self.sub.origin;
        let commits = &self.publ.commits;
        let next = commits.get(commits.partition_point(|c| c.end_lsn <= origin));
        let culprit = next.filter(|c| c.commit_lsn == commit_lsn).and_then(|c| {
            self.publ.txns.get(&c.xid.0).filter(|t| {
                t.changes.iter().any(|p| {
                    let one = [rel_of(p)];
                    let rels = self.ops.op(p).map_or(&one[..], Op::tables);
                    rels.iter().any(|r| {
                        let table = format!("\"public\".\"t{r}\"");
                        self.sub.missing.contains(&table) && text.contains(&table)
                    })
                })
            })
        });
        if culprit.is_none() {
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
            for p in txn.map_or(&[][..], |t| &t.changes[..]) {
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

    /// The origin's commit time, set with the batch that moved it to `to`, is the publisher's
    /// commit time of the commit ending at `to` (what `pg_replication_origin_xact_setup` is
    /// given, read back as a server reads its text).
    fn check_commit_time(&mut self, to: Lsn, time: i64) -> Result<(), Violation> {
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
    fn check_truncates(
        &self,
        from: Lsn,
        to: Lsn,
        ran: &[std::rc::Rc<Change>],
    ) -> Result<(), Violation> {
        let lo = self.publ.commits.partition_point(|c| c.end_lsn <= from);
        let hi = self.publ.commits.partition_point(|c| c.end_lsn <= to);
        let want = self.publ.commits[lo..hi]
            .iter()
            .filter_map(|c| self.publ.txns.get(&c.xid.0))
            .flat_map(|t| t.changes.iter())
            .filter_map(|p| match self.ops.op(p) {
                Some(Op::Truncate {
                    rels,
                    cascade,
                    restart,
                }) => Some(Change::Truncate {
                    tables: rels
                        .iter()
                        .map(|r| format!("\"public\".\"t{r}\""))
                        .collect(),
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
    fn check_commit(
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
        let ops = &self.ops;
        let mut expected = self.publ.commits[lo..hi]
            .iter()
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
        let (lo, hi) = (led.ts + margin, led.max_ts + margin);
        match due {
            Some(d) if ts.to_unix().0 == led.ts && (lo..=hi).contains(&d.0) => Ok(()),
            _ => Err(fail(
                "due-on-time",
                format!(
                    "the commit at {lsn} (time {}, publisher's {}) is due at {due:?}; it must \
                     be due from {lo} to {hi}",
                    ts.to_unix().0,
                    led.ts
                ),
            )),
        }
    }

    /// What the machine protects: the queue marks applied (and may purge) only what the
    /// subscriber committed and flushed.
    fn check_acknowledged(&mut self) -> Result<(), Violation> {
        let Some(q) = self.q.as_ref() else {
            return Ok(());
        };
        let durable = self.sub.durable_origin();
        if q.apply_lsn() > durable {
            return Err(fail(
                "applied-only-when-durable",
                format!(
                    "the queue has applied through {}, the subscriber's durable origin is \
                     {durable} (in memory {})",
                    q.apply_lsn(),
                    self.sub.origin
                ),
            ));
        }
        Ok(())
    }

    /// A non-transactional message handed out: one the publisher sent.
    fn deliver_note(&mut self, m: &ReadyMessage) -> Result<(), Violation> {
        let content = match po::decode(&m.payload, false) {
            Ok(PgOutputMessage::Message(lm)) => lm.content.to_vec(),
            _ => Vec::new(),
        };
        let known = self
            .publ
            .notes
            .iter()
            .any(|n| n.lsn == m.lsn && n.payload == content);
        if !known {
            return Err(fail(
                "only-published",
                format!("handed out unknown message at {}", m.lsn),
            ));
        }
        trace_line!(self.t, "deliver message ", lsn_str(m.lsn, &mut [0u8; 17]));
        self.notes.insert(m.lsn.0);
        Ok(())
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
        let mut name = Vec::new();
        let columns = &self.ins.target.columns;
        let same = columns.len() == column_count(ver)
            && columns.iter().enumerate().all(|(i, c)| {
                name.clear();
                column_name(ver, i, &mut name);
                c.as_bytes() == name
            });
        if !same {
            return Err(bad(format!(
                "encoded with version {ver}, inserted as columns {columns:?}"
            )));
        }
        self.matched = Some(ver);
        Ok(())
    }
}
