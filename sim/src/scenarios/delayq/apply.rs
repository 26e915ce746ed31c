//! The applier: `pgyard_delayq::apply::ApplyMachine`, the machine `pgyard delayq apply` and
//! `run` drive over a real subscriber, driven here over the model subscriber — its commands
//! become requests on the model connection, the model's replies are handed back in order —
//! and the checks of what the subscriber ends up holding.

use pgyard_delayq::apply::{ApplyMachine, Command, Failure, Notice};
use pgyard_delayq::ReadyMessage;
use pgyard_types::uniform_inclusive;
use pgyard_wire::pgoutput::{self as po, PgOutputMessage};

use super::subscriber::{Ran, Reply, Request};
use super::text::{lsn_str, LsnText};
use super::{fail, Run};
use crate::publisher::Fate;
use crate::{trace, trace_line, Violation};

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
        let txns = &self.publ.txns;
        let time = |c: &crate::publisher::Commit| match txns.get(&c.xid.0).map(|t| t.fate) {
            Some(Fate::Committed { ts, .. }) => Some(ts),
            _ => None,
        };
        let ops = &mut self.ops;
        let may_skip = |c: &crate::publisher::Commit| ops.skip(c.xid.0);
        let (skipped, said) = self
            .operator
            .at_start(&self.publ.commits, time, may_skip, origin);
        if let Some(i) = skipped {
            // What the checks expect changes from that commit on.
            self.ledger.truncate(i);
        }
        if let Some(said) = said {
            trace!(self.t, "operator: {said}");
        }
        let controls = self.operator.controls.clone();
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
                Ok(Some(Command::Send { id, plan }))
                    if self.operator.controls.paused && plan.opens =>
                {
                    // The machine was told at once (`steer`), or started paused. The rest of
                    // a transaction sent in pieces may still go: it finishes what is open.
                    return Err(fail(
                        "pause-holds",
                        format!(
                            "batch {} opens a transaction while the operator has paused applying",
                            id.0
                        ),
                    ));
                }
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
                Notice::Skipped(lsn) if !self.operator.skips(lsn) => {
                    return Err(fail(
                        "only-asked-skips",
                        format!("skipped {lsn} though nobody asked"),
                    ))
                }
                Notice::Skipped(lsn) => trace!(self.t, "skipped {lsn}"),
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
                if pgyard_delayq::apply::row_check_failure(&text).is_some() {
                    let n = self.sub.restore();
                    trace!(
                        self.t,
                        "apply stopped at {commit_lsn}: {text}; {n} rows put back by hand"
                    );
                } else {
                    trace!(
                        self.t,
                        "apply stopped at {commit_lsn}: {text}; the table is created"
                    );
                    self.sub.missing.clear();
                }
                Ok(())
            }
            Failure::Queue(e) => self.on_error("apply", e),
            Failure::Plan(e) => Err(fail("relation-described", e.to_string())),
            Failure::Misuse(m) => Err(fail("applier-replies-in-order", m)),
        }
    }

    /// What the machine protects: the queue marks applied (and may purge) only what the
    /// subscriber committed and flushed, or what the operator skipped.
    pub(super) fn check_acknowledged(&mut self) -> Result<(), Violation> {
        let Some(q) = self.q.as_ref() else {
            return Ok(());
        };
        let durable = self.sub.durable_origin();
        // Skipped transactions right after the durable origin count as applied too.
        let commits = &self.publ.commits;
        let bound = if self.operator.controls.skip.is_empty() {
            durable
        } else {
            commits[commits.partition_point(|c| c.end_lsn <= durable)..]
                .iter()
                .take_while(|c| self.operator.skips(c.commit_lsn))
                .last()
                .map_or(durable, |c| c.end_lsn)
        };
        if q.apply_lsn() > bound {
            return Err(fail(
                "applied-only-when-durable",
                format!(
                    "the queue has applied through {}, the subscriber's durable origin is \
                     {durable} (in memory {}; with the skipped transactions after it {bound})",
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
