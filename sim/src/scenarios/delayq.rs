//! `delayq`: the publisher model's stream (plain, streamed with savepoint aborts, two-phase,
//! non-transactional messages) through a `DelayQueue` over a faulty `SimStorage`, with random
//! flush points, standby status reports, apply polls at an advancing wall clock, purges,
//! reconnects, crashes (torn writes), fsync failures (poisoned → crash → reopen) and ENOSPC.
//! Many seeds hold some prepared transactions until the end of the run under a budget of a few
//! segments, with a producer that always honours `Pause`: carry-forward must keep them from
//! deadlocking the queue.
//!
//! Invariants, checked after every step and every recovery: every transaction committed at or
//! below a reported flush LSN survives any crash and is applied exactly once, in commit order,
//! never before its due time, with exactly its surviving changes; aborted work is never handed
//! out; after a purge no segment file is orphaned or missing; recovery is repeatable. At the end
//! faults stop, every open transaction ends, time passes every due time, and everything
//! committed must have been applied (non-transactional messages at least once).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use pgyard_delayq::{
    Config, DelayQueue, Error, Event, Flow, Ready, ReadyMessage, ReadyTxn, Received, SimFaults,
    SimStorage, Storage, TxnState,
};
use pgyard_types::{
    rng_from_seed, uniform_inclusive, Lsn, PgTimestamp, Rng, RngCore, UnixTime, Xid,
};
use pgyard_wire::pgoutput::{
    self as po, PgOutputDecoder, PgOutputMessage, ProtoVersion, RelationColumn, ReplicaIdentity,
    Seq, TupleValue,
};

use crate::planted_scenarios::ScenarioBug;
use crate::publisher::{Fate, LogItem, Publisher, Workload};
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct DelayqScenario;

impl Scenario for DelayqScenario {
    fn name(&self) -> &'static str {
        "delayq"
    }

    fn description(&self) -> &'static str {
        "delay queue under crashes, torn writes, fsync failures and ENOSPC: exactly-once, in order, on time"
    }

    fn run(&self, rng: &mut Rng, trace: &mut Trace) -> Result<u64, Violation> {
        run_delayq(rng, trace, None)
    }
}

/// What one seed draws before it starts.
#[derive(Debug)]
struct Mix {
    steps: u64,
    workload: Workload,
    delay_ms: u64,
    skew_tolerance_ms: u64,
    tick_max_ms: u64,
    deliver_max: u64,
    flush_percent: u64,
    report_percent: u64,
    poll_percent: u64,
    purge_percent: u64,
    crash_percent: u64,
    reconnect_percent: u64,
    fsync_fail_per_million: u32,
    enospc_per_million: u32,
    torn_writes: bool,
    segment_bytes: u64,
    write_buffer: usize,
    budget_segments: Option<u64>,
}

/// How often a relation is redefined (DDL) between workload steps.
fn draw_ddl(rng: &mut Rng) -> u64 {
    if uniform_inclusive(rng, 2) == 0 {
        0
    } else {
        uniform_inclusive(rng, 25)
    }
}

/// Long-lived prepared transactions (decided only at the end of the run) are drawn with a
/// tiny budget often enough that every few seeds pin old segments while the queue is full.
fn draw_held(rng: &mut Rng, mix: &mut Mix) {
    if mix.workload.two_phase > 0 && uniform_inclusive(rng, 1) == 0 {
        mix.workload.held_percent = 10 + uniform_inclusive(rng, 40);
        if uniform_inclusive(rng, 1) == 0 {
            mix.budget_segments = Some(4 + uniform_inclusive(rng, 2));
        }
    }
}

fn draw_mix(rng: &mut Rng) -> Mix {
    let pick = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    Mix {
        steps: 20 + pick(rng, 90),
        workload: Workload::draw(rng),
        delay_ms: pick(rng, 3000),
        skew_tolerance_ms: if pick(rng, 1) == 0 {
            0
        } else {
            pick(rng, 2000)
        },
        tick_max_ms: 1 + pick(rng, 400),
        deliver_max: 1 + pick(rng, 12),
        flush_percent: pick(rng, 60),
        report_percent: pick(rng, 60),
        poll_percent: 5 + pick(rng, 60),
        purge_percent: pick(rng, 30),
        crash_percent: pick(rng, 8),
        reconnect_percent: pick(rng, 5),
        fsync_fail_per_million: if pick(rng, 2) == 0 {
            pick(rng, 30_000) as u32
        } else {
            0
        },
        enospc_per_million: if pick(rng, 2) == 0 {
            pick(rng, 50_000) as u32
        } else {
            0
        },
        torn_writes: pick(rng, 1) == 0,
        segment_bytes: 4096 * (1 + pick(rng, 3)),
        write_buffer: pick(rng, 2048) as usize,
        budget_segments: if pick(rng, 3) == 0 {
            Some(4 + pick(rng, 6))
        } else {
            None
        },
    }
}

/// The subscriber: what it applied, and its replication origin.
#[derive(Debug, Default)]
struct Subscriber {
    /// End LSN of the last applied transaction (the replication origin's progress).
    origin: Lsn,
    applied: BTreeSet<u32>,
    /// Non-transactional messages delivered: LSN → session of the last delivery.
    notes: BTreeMap<u64, u64>,
    /// Stream position of the last item handed out in this session.
    last_pos: Lsn,
    /// An applied item whose `mark_applied` must be retried.
    unacked: Option<pgyard_delayq::ItemId>,
    /// The apply worker's relation map (lost when the process restarts): OID → columns.
    relations: BTreeMap<u32, Vec<(Vec<u8>, u32)>>,
    /// Type OIDs described to it.
    types: BTreeSet<u32>,
}

struct Run<'a> {
    rng: &'a mut Rng,
    t: &'a mut Trace,
    mix: Mix,
    bug: Option<ScenarioBug>,
    cfg: Config,
    faults: SimFaults,
    publ: Publisher,
    q: Option<DelayQueue<SimStorage>>,
    now: UnixTime,
    start: UnixTime,
    conn: VecDeque<usize>,
    /// Highest flush LSN reported to the publisher (its slot's `confirmed_flush_lsn`).
    reported: Lsn,
    /// Highest flush LSN reported by the current queue incarnation.
    reported_here: Lsn,
    session: u64,
    sub: Subscriber,
    catalog: Catalog,
    ddl_percent: u64,
    wal: Walsender,
}

fn fail(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Runs one seed; `bug` plants a scenario bug (see [`ScenarioBug`]).
pub fn run_delayq(
    rng: &mut Rng,
    t: &mut Trace,
    bug: Option<ScenarioBug>,
) -> Result<u64, Violation> {
    let mut mix = draw_mix(rng);
    draw_held(rng, &mut mix);
    let ddl_percent = draw_ddl(rng);
    trace!(t, "mix {mix:?}, ddl {ddl_percent}%");
    let budget = mix
        .budget_segments
        .map_or(Config::default().disk_bytes_max, |n| n * mix.segment_bytes);
    let cfg = Config {
        delay: Duration::from_millis(mix.delay_ms),
        skew_tolerance: Duration::from_millis(mix.skew_tolerance_ms),
        segment_bytes_max: mix.segment_bytes,
        write_buffer_bytes: mix.write_buffer,
        disk_bytes_max: budget,
        disk_high_watermark_bytes: budget / 4 * 3,
        disk_low_watermark_bytes: budget / 2,
    };
    let faults = SimFaults {
        fsync_fail_per_million: mix.fsync_fail_per_million,
        enospc_per_million: mix.enospc_per_million,
        capacity_bytes: None,
        torn_writes: mix.torn_writes,
    };
    let storage = SimStorage::with_rng(rng_from_seed(rng.next_u64()), faults.clone());
    let q = DelayQueue::open(storage, cfg.clone())
        .map_err(|e| fail("open-empty", format!("opening an empty queue failed: {e}")))?;
    let start = UnixTime(1_700_000_000_000_000);
    let publ = Publisher::new(mix.workload.clone(), Lsn(0x100_0000));
    let mut run = Run {
        rng,
        t,
        mix,
        bug,
        cfg,
        faults,
        publ,
        q: Some(q),
        now: start,
        start,
        conn: VecDeque::new(),
        reported: Lsn(0),
        reported_here: Lsn(0),
        session: 0,
        sub: Subscriber::default(),
        catalog: Catalog::default(),
        ddl_percent,
        wal: Walsender::new(),
    };
    run.safety()?;
    run.liveness()?;
    Ok(u64::try_from(run.now.0 - run.start.0).unwrap_or(0) * 1000)
}

impl Run<'_> {
    fn q(&mut self) -> &mut DelayQueue<SimStorage> {
        self.q.as_mut().expect("queue is open between steps")
    }

    fn roll(&mut self, percent: u64) -> bool {
        uniform_inclusive(self.rng, 99) < percent
    }

    fn safety(&mut self) -> Result<(), Violation> {
        for step in 0..self.mix.steps {
            self.now.0 += uniform_inclusive(self.rng, self.mix.tick_max_ms * 1000) as i64;
            let new = self.publ.step(self.rng, self.now);
            self.conn.extend(new);
            if self.roll(self.ddl_percent) {
                self.ddl();
            }
            self.deliver()?;
            if self.roll(self.mix.flush_percent) {
                self.flush()?;
            }
            if self.roll(self.mix.report_percent) {
                self.report_status()?;
            }
            if self.roll(self.mix.poll_percent) {
                self.poll()?;
            }
            if self.roll(self.mix.purge_percent) {
                self.purge()?;
            }
            if self.roll(self.mix.crash_percent) {
                trace!(self.t, "step {step}: power loss");
                self.restart(true)?;
            } else if self.roll(self.mix.reconnect_percent) {
                trace!(self.t, "step {step}: reconnect");
                self.reconnect()?;
            }
        }
        Ok(())
    }

    /// Faults stop; every transaction ends; the queue drains.
    fn liveness(&mut self) -> Result<(), Violation> {
        // The budget stays: long-lived prepared transactions must not deadlock it.
        trace!(self.t, "liveness: faults stop");
        self.faults = SimFaults::default();
        self.restart(false)?;
        let new = self.publ.finish_all(self.rng, self.now);
        self.conn.extend(new);
        for round in 0..10_000u32 {
            self.deliver()?;
            self.flush()?;
            self.report_status()?;
            if let Some(due) = self.q().next_due() {
                self.now = self.now.max(due);
            }
            self.poll()?;
            self.purge()?;
            if self.conn.is_empty()
                && self.wal.out.is_empty()
                && self.q().next_due().is_none()
                && self.sub.unacked.is_none()
            {
                trace!(self.t, "liveness: drained after {round} rounds");
                return self.final_checks();
            }
            self.now.0 += 100_000;
        }
        Err(fail(
            "liveness-drains",
            format!(
                "queue did not drain: {} messages unsent, next due {:?}, flow {:?}, \
                 {} of {} bytes counted against the budget",
                self.conn.len(),
                self.q().next_due(),
                self.q().flow(),
                self.q().budget_bytes(),
                self.q().disk_bytes()
            ),
        ))
    }

    fn final_checks(&mut self) -> Result<(), Violation> {
        for (xid, txn) in &self.publ.txns {
            if let Fate::Committed { end_lsn, .. } = txn.fate {
                if !self.sub.applied.contains(xid) {
                    return Err(fail(
                        "liveness-all-applied",
                        format!(
                            "transaction {xid} committed (end {end_lsn}) was never applied; \
                             origin {}, reported flush {}",
                            self.sub.origin, self.reported
                        ),
                    ));
                }
            }
        }
        for n in &self.publ.notes {
            if !self.sub.notes.contains_key(&n.lsn.0) {
                return Err(fail(
                    "liveness-all-applied",
                    format!("message at {} was never delivered", n.lsn),
                ));
            }
        }
        self.check_no_orphans()?;
        trace!(
            self.t,
            "end: {} transactions applied, {} messages, {} commits",
            self.sub.applied.len(),
            self.sub.notes.len(),
            self.publ.commits.len()
        );
        Ok(())
    }

    // ---- the stream ------------------------------------------------------------------------

    fn deliver(&mut self) -> Result<(), Violation> {
        for _ in 0..self.mix.deliver_max {
            // A producer that honours Pause, as `follow` does: the queue must never pause
            // (or refuse) for bytes that only reading on could free.
            if self.q().flow() == Flow::Pause {
                return Ok(());
            }
            if self.wal.out.is_empty() {
                let Some(i) = self.conn.pop_front() else {
                    return Ok(());
                };
                let item = self.publ.log()[i].clone();
                self.wal.send(&item, &self.catalog)?;
            }
            let Some((wal_lsn, event, payload)) = self.wal.out.front().cloned() else {
                continue;
            };
            let now = self.now;
            let r = self.q().handle(
                now,
                Received {
                    wal_lsn,
                    payload: &payload,
                    event,
                },
            );
            match r {
                Ok(_) => {
                    self.wal.out.pop_front();
                }
                Err(e) if e.is_retryable() => {
                    trace!(self.t, "handle {event:?}: {e} (retry later)");
                    return Ok(());
                }
                Err(e) => return self.on_error("handle", e),
            }
        }
        Ok(())
    }

    /// DDL between workload steps: a new definition of a relation, from the current WAL
    /// position on. A relation changed by an open transaction (streaming, or prepared) is
    /// locked until it ends, as on the server.
    fn ddl(&mut self) {
        let rel = uniform_inclusive(self.rng, u64::from(RELATIONS) - 1) as u32;
        let locked = self.publ.txns.values().any(|t| {
            matches!(t.fate, Fate::InProgress | Fate::Prepared)
                && t.changes.iter().any(|c| rel_of(c) == rel)
        });
        if locked {
            return;
        }
        let at = self.publ.flush_lsn();
        let v = self.catalog.redefine(rel, at);
        trace!(self.t, "ALTER TABLE t{rel} at {at}: version {v}");
    }

    /// A non-retryable error: protocol errors are violations, storage failures make the
    /// process restart over the same (crashed) disk.
    fn on_error(&mut self, what: &str, e: Error) -> Result<(), Violation> {
        match e {
            Error::Protocol(_) | Error::Misuse(_) | Error::Corrupt { .. } => {
                Err(fail("queue-accepts-valid-stream", format!("{what}: {e}")))
            }
            _ => {
                trace!(self.t, "{what}: {e}: restart");
                self.restart(true)
            }
        }
    }

    fn flush(&mut self) -> Result<(), Violation> {
        match self.q().flush() {
            Ok(lsn) => {
                trace!(self.t, "flush -> {lsn}");
                self.report(lsn)
            }
            Err(e) if e.is_retryable() => {
                trace!(self.t, "flush: {e}");
                Ok(())
            }
            Err(e) => self.on_error("flush", e),
        }
    }

    /// A standby status update between flushes.
    fn report_status(&mut self) -> Result<(), Violation> {
        let lsn = self.q().flush_lsn();
        self.report(lsn)
    }

    fn report(&mut self, lsn: Lsn) -> Result<(), Violation> {
        let lsn = if self.bug == Some(ScenarioBug::ReportWriteAsFlush) {
            self.q().write_lsn()
        } else {
            lsn
        };
        if lsn < self.reported_here {
            // `flush_lsn()` falls back to the last flush point while a completed transaction
            // waits for its fsync, below a receive position reported before it arrived.
            // Harmless (the slot only moves forward), but it is recorded.
            trace!(
                self.t,
                "flush LSN went back from {} to {lsn}",
                self.reported_here
            );
        }
        self.reported_here = self.reported_here.max(lsn);
        if lsn > self.reported {
            self.reported = lsn;
            self.publ.confirm(lsn);
        }
        Ok(())
    }

    // ---- apply -----------------------------------------------------------------------------

    /// Applies what is due. Everything is flushed first: `poll_ready` also hands out items
    /// that are only buffered, and applying one moves the subscriber's origin past earlier
    /// prepared transactions that a crash could still lose; the walsender, started at the
    /// origin, would then never re-send their prepare (see docs/simulation.md).
    fn poll(&mut self) -> Result<(), Violation> {
        if self.q().needs_flush() {
            match self.q().flush() {
                Ok(lsn) => self.report(lsn)?,
                Err(e) if e.is_retryable() => return Ok(()),
                Err(e) => return self.on_error("flush", e),
            }
        }
        for _ in 0..1000 {
            if let Some(id) = self.sub.unacked {
                match self.q().mark_applied(id) {
                    Ok(()) => self.sub.unacked = None,
                    Err(e) if e.is_retryable() => return Ok(()),
                    Err(e) => return self.on_error("mark_applied", e),
                }
            }
            let now = self.now;
            let ready = match self.q().poll_ready(now) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(e) => return self.on_error("poll_ready", e),
            };
            match &ready {
                Ready::Transaction(t) => self.apply_txn(t)?,
                Ready::Message(m) => self.deliver_note(m)?,
            }
            self.sub.unacked = Some(ready.id());
        }
        Ok(())
    }

    fn apply_txn(&mut self, t: &ReadyTxn) -> Result<(), Violation> {
        let Some(txn) = self.publ.txns.get(&t.xid.0) else {
            return Err(fail(
                "only-published",
                format!("handed out unknown xid {}", t.xid),
            ));
        };
        let Fate::Committed {
            commit_lsn,
            end_lsn,
            ts,
        } = txn.fate
        else {
            return Err(fail(
                "aborted-never-applied",
                format!(
                    "transaction {} handed out while {:?} on the publisher",
                    t.xid, txn.fate
                ),
            ));
        };
        if (t.commit_lsn, t.end_lsn) != (commit_lsn, end_lsn) {
            return Err(fail(
                "commit-positions",
                format!(
                    "transaction {} handed out with commit {}..{}, published {commit_lsn}..{end_lsn}",
                    t.xid, t.commit_lsn, t.end_lsn
                ),
            ));
        }
        if self.sub.applied.contains(&t.xid.0) {
            return Err(fail(
                "applied-exactly-once",
                format!("transaction {} (end {end_lsn}) handed out again", t.xid),
            ));
        }
        if end_lsn <= self.sub.origin {
            return Err(fail(
                "commit-order",
                format!(
                    "transaction {} ends at {end_lsn}, before the last applied end {}",
                    t.xid, self.sub.origin
                ),
            ));
        }
        let earliest =
            ts.to_unix().0 + (self.mix.delay_ms + self.mix.skew_tolerance_ms) as i64 * 1000;
        if t.due.0 < earliest || t.due > self.now {
            return Err(fail(
                "never-before-due",
                format!(
                    "transaction {} due {} (commit ts + delay = {earliest}), handed out at {}",
                    t.xid, t.due.0, self.now.0
                ),
            ));
        }
        let expected = txn.changes.clone();
        let data = self.apply_schema_and_changes(t)?;
        if data != expected {
            return Err(fail(
                "applied-content",
                format!(
                    "transaction {} applied {:?}, expected {:?}",
                    t.xid,
                    data.iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect::<Vec<_>>(),
                    expected
                        .iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect::<Vec<_>>()
                ),
            ));
        }
        trace!(
            self.t,
            "apply {} end {end_lsn} due {} at {}",
            t.xid,
            t.due.0,
            self.now.0
        );
        self.sub.applied.insert(t.xid.0);
        self.sub.origin = end_lsn;
        self.sub.last_pos = self.sub.last_pos.max(commit_lsn);
        Ok(())
    }

    /// Plays the apply worker's relation map through one transaction: the queue's `schema`
    /// first, then its messages in order. Every change must refer to a relation the map holds,
    /// with the definition the change was encoded with (and every custom type described).
    /// Returns the changes' payloads.
    fn apply_schema_and_changes(&mut self, t: &ReadyTxn) -> Result<Vec<Vec<u8>>, Violation> {
        let bad = |what: String| {
            fail(
                "relation-described",
                format!("transaction {}: {what}", t.xid),
            )
        };
        for raw in &t.schema {
            match po::decode(raw, false) {
                Ok(PgOutputMessage::Relation(r)) => self.sub.hold_relation(&r),
                Ok(PgOutputMessage::Type(y)) => {
                    self.sub.types.insert(y.oid);
                }
                other => return Err(bad(format!("schema entry {other:?}"))),
            }
        }
        let streamed = !matches!(
            t.messages.first().and_then(|m| m.first()),
            Some(b'B' | b'b')
        );
        let mut data = Vec::new();
        for raw in &t.messages {
            let in_stream = streamed && matches!(raw.first(), Some(b'R' | b'Y' | b'I' | b'M'));
            match po::decode(raw, in_stream) {
                Ok(PgOutputMessage::Relation(r)) => self.sub.hold_relation(&r),
                Ok(PgOutputMessage::Type(y)) => {
                    self.sub.types.insert(y.oid);
                }
                Ok(PgOutputMessage::Insert(i)) => {
                    let vals: Vec<TupleValue<'_>> = i.new.iter().collect();
                    let (Some(TupleValue::Text(payload)), Some(TupleValue::Text(ver))) =
                        (vals.first(), vals.get(1))
                    else {
                        return Err(bad(format!("malformed change {raw:?}")));
                    };
                    let ver: u32 = std::str::from_utf8(ver)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let rel = i.relation.wrapping_sub(REL_OID_BASE);
                    let want = columns(rel, ver);
                    let Some(held) = self.sub.relations.get(&i.relation) else {
                        return Err(bad(format!(
                            "change {} on relation {} that the consumer does not hold",
                            String::from_utf8_lossy(payload),
                            i.relation
                        )));
                    };
                    let held_names: Vec<(Vec<u8>, u32)> = held.clone();
                    let want_names: Vec<(Vec<u8>, u32)> =
                        want.iter().map(|(n, ty, _)| (n.clone(), *ty)).collect();
                    if held_names != want_names || vals.len() != want.len() {
                        return Err(bad(format!(
                            "change {} encoded with version {ver} of relation {}, the consumer \
                             holds {:?}",
                            String::from_utf8_lossy(payload),
                            i.relation,
                            held_names
                                .iter()
                                .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
                                .collect::<Vec<_>>()
                        )));
                    }
                    if let Some(ty) = want_names
                        .iter()
                        .map(|c| c.1)
                        .find(|ty| *ty >= TYPE_OID_BASE && !self.sub.types.contains(ty))
                    {
                        return Err(bad(format!("type {ty} used before it was described")));
                    }
                    data.push(payload.to_vec());
                }
                Ok(_) => {}
                Err(e) => return Err(bad(format!("undecodable message {raw:?}: {e}"))),
            }
        }
        Ok(data)
    }

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
        if self.sub.notes.get(&m.lsn.0) == Some(&self.session) {
            return Err(fail(
                "applied-exactly-once",
                format!("message at {} delivered twice in one session", m.lsn),
            ));
        }
        if m.lsn < self.sub.last_pos {
            return Err(fail(
                "commit-order",
                format!(
                    "message at {} after an item at {}",
                    m.lsn, self.sub.last_pos
                ),
            ));
        }
        trace!(self.t, "deliver message {}", m.lsn);
        self.sub.notes.insert(m.lsn.0, self.session);
        self.sub.last_pos = m.lsn;
        Ok(())
    }

    // ---- purge, crash, recovery ------------------------------------------------------------

    fn purge(&mut self) -> Result<(), Violation> {
        match self.q().purge() {
            Ok(removed) => {
                if !removed.is_empty() {
                    trace!(self.t, "purge removed {}", removed.len());
                }
                self.check_no_orphans()
            }
            Err(e) if e.is_retryable() => Ok(()),
            Err(e) => self.on_error("purge", e),
        }
    }

    /// After a purge: the files on disk are exactly the queue's segments, and nothing older
    /// than the oldest unfinished transaction is kept (unless a pending message pins it).
    fn check_no_orphans(&mut self) -> Result<(), Violation> {
        let info = self.q().inspect();
        let mut files: Vec<String> = self
            .q()
            .storage()
            .list()
            .map_err(|e| fail("no-orphan-segments", format!("list: {e}")))?
            .into_iter()
            .filter(|f| f.starts_with("dq-"))
            .collect();
        files.sort();
        let segs: Vec<String> = info.segments.iter().map(|s| s.file.clone()).collect();
        if files != segs {
            return Err(fail(
                "no-orphan-segments",
                format!("disk has {files:?}, queue knows {segs:?}"),
            ));
        }
        let (Some(first), Some(last)) = (info.segments.first(), info.segments.last()) else {
            return Ok(());
        };
        let floor = info
            .transactions
            .iter()
            .filter(|t| {
                matches!(
                    t.state,
                    TxnState::InProgress | TxnState::Prepared | TxnState::Committed
                )
            })
            .map(|t| t.first_segment)
            .min()
            .unwrap_or(last.seq)
            .min(last.seq);
        // Segments below the floor may stay while a carry-forward set is not yet durable
        // (purge's flush ran out of space); a pending message pins its segment too.
        let settled = info.messages_pending == 0 && !self.q().needs_flush();
        let bad = first.seq > floor || (settled && first.seq < floor);
        if bad {
            return Err(fail(
                "no-orphan-segments",
                format!(
                    "after purge the oldest segment is {}, the oldest needed is {floor}",
                    first.seq
                ),
            ));
        }
        Ok(())
    }

    fn reconnect(&mut self) -> Result<(), Violation> {
        let now = self.now;
        match self.q().restart_stream(now) {
            Ok(()) => {}
            Err(e) if e.is_retryable() => return Ok(()),
            Err(e) => return self.on_error("restart_stream", e),
        }
        self.start_replication();
        Ok(())
    }

    fn start_replication(&mut self) {
        let resume = self.q().resume_lsn();
        let requested = resume.max(self.sub.origin);
        let (start, idx) = self.publ.resend_from(requested);
        trace!(
            self.t,
            "START_REPLICATION {requested} (resume {resume}, origin {}) -> from {start}, {} messages",
            self.sub.origin,
            idx.len()
        );
        self.conn = idx.into();
        self.wal = Walsender::new();
        self.session += 1;
        self.sub.last_pos = Lsn(0);
    }

    /// Process restart over the same disk (`crash`: after a power loss), recovery checks, and
    /// a new replication session.
    fn restart(&mut self, crash: bool) -> Result<(), Violation> {
        let Some(q) = self.q.take() else {
            return Err(fail("recovery-succeeds", "no queue to restart".into()));
        };
        let mut storage = q.into_storage();
        // The apply worker restarts with the process: its relation map is gone.
        self.sub.relations.clear();
        self.sub.types.clear();
        for attempt in 0..20 {
            if crash || attempt > 0 {
                storage.crash();
            }
            // A fault that broke the previous attempt is taken as transient: later attempts
            // run without fsync failures.
            let mut faults = self.faults.clone();
            if attempt > 0 {
                faults.fsync_fail_per_million = 0;
            }
            storage.set_faults(faults);
            let twin = storage.clone();
            let q = match DelayQueue::open(storage, self.cfg.clone()) {
                Ok(q) => q,
                Err(Error::Storage(e)) => {
                    trace!(self.t, "reopen: {e}; retry");
                    storage = twin;
                    continue;
                }
                Err(e) => return Err(fail("recovery-succeeds", format!("reopen: {e}"))),
            };
            if let Some(tt) = &q.recovery().torn_tail {
                trace!(
                    self.t,
                    "recovery cut a torn tail of {} bytes",
                    tt.dropped_bytes
                );
            }
            self.q = Some(q);
            self.check_recovery()?;
            match self.after_open() {
                Ok(()) => return Ok(()),
                Err(AfterOpen::Violation(v)) => return Err(v),
                Err(AfterOpen::Fatal(e)) => {
                    trace!(self.t, "after reopen: {e}; restart again");
                    let Some(q) = self.q.take() else {
                        return Err(fail("recovery-succeeds", "no queue".into()));
                    };
                    storage = q.into_storage();
                }
            }
        }
        Err(fail(
            "recovery-succeeds",
            "20 restarts in a row failed".into(),
        ))
    }

    /// Right after recovery: the same disk recovers to the same queue again, everything
    /// reported flushed and not yet applied is there, and nothing the publisher did not
    /// commit is queued as committed.
    fn check_recovery(&mut self) -> Result<(), Violation> {
        let info = self.q().inspect();
        let mut again = self.q().storage().clone();
        again.set_faults(SimFaults::default());
        let twin = DelayQueue::open(again, self.cfg.clone())
            .map_err(|e| fail("recovery-repeatable", format!("second reopen: {e}")))?;
        if twin.inspect() != info {
            return Err(fail(
                "recovery-repeatable",
                format!(
                    "a second recovery of the same disk differs: {:?} vs {:?}",
                    twin.inspect(),
                    info
                ),
            ));
        }
        let (reported, origin) = (self.reported, self.sub.origin);
        let state_of = |xid: u32| {
            info.transactions
                .iter()
                .filter(|t| t.xid.0 == xid)
                .map(|t| t.state)
                .find(|s| *s != TxnState::Aborted)
        };
        for (xid, txn) in &self.publ.txns {
            let need = match txn.fate {
                Fate::Committed { end_lsn, .. } if end_lsn <= origin => None,
                Fate::Committed { end_lsn, .. } if end_lsn <= reported => {
                    Some(&[TxnState::Committed, TxnState::Applied][..])
                }
                Fate::Committed { .. } | Fate::Prepared
                    if txn.prepare_end.is_some_and(|p| p <= reported) =>
                {
                    Some(&[TxnState::Prepared, TxnState::Committed, TxnState::Applied][..])
                }
                _ => None,
            };
            if let Some(ok) = need {
                let got = state_of(*xid);
                if !got.is_some_and(|s| ok.contains(&s)) {
                    return Err(fail(
                        "flushed-survives-crash",
                        format!(
                            "transaction {xid} ({:?}, prepare end {:?}) is at or below the \
                             reported flush {reported} but recovered as {got:?}; origin {origin}",
                            txn.fate, txn.prepare_end
                        ),
                    ));
                }
            }
        }
        for t in &info.transactions {
            if t.state != TxnState::Committed {
                continue;
            }
            let published = self.publ.txns.get(&t.xid.0).map(|p| p.fate);
            let ok = matches!(published, Some(Fate::Committed { end_lsn, .. }) if Some(end_lsn) == t.end_lsn);
            if !ok {
                return Err(fail(
                    "aborted-never-applied",
                    format!(
                        "recovered queue holds {} as committed (end {:?}); publisher: {published:?}",
                        t.xid, t.end_lsn
                    ),
                ));
            }
        }
        trace!(
            self.t,
            "recovered: {} transactions, {} segments, resume {}",
            info.transactions.len(),
            info.segments.len(),
            info.resume_lsn
        );
        Ok(())
    }

    fn after_open(&mut self) -> Result<(), AfterOpen> {
        let origin = self.sub.origin;
        let now = self.now;
        self.sub.unacked = None;
        self.retry(|q| q.skip_applied_through(origin).map(|_| ()))?;
        self.retry(|q| q.restart_stream(now))?;
        self.reported_here = Lsn(0);
        self.start_replication();
        Ok(())
    }

    fn retry(
        &mut self,
        mut f: impl FnMut(&mut DelayQueue<SimStorage>) -> Result<(), Error>,
    ) -> Result<(), AfterOpen> {
        for _ in 0..50 {
            match f(self.q()) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_retryable() => continue,
                Err(e @ (Error::Protocol(_) | Error::Misuse(_) | Error::Corrupt { .. })) => {
                    return Err(AfterOpen::Violation(fail(
                        "queue-accepts-valid-stream",
                        format!("after reopen: {e}"),
                    )))
                }
                Err(e) => return Err(AfterOpen::Fatal(e)),
            }
        }
        Err(AfterOpen::Fatal(Error::Misuse("still out of space".into())))
    }
}

/// Why the steps after a reopen did not complete.
enum AfterOpen {
    Violation(Violation),
    Fatal(Error),
}

impl Subscriber {
    fn hold_relation(&mut self, r: &po::Relation<'_>) {
        let cols = r
            .columns
            .iter()
            .map(|c| (c.name.to_vec(), c.type_oid))
            .collect();
        self.relations.insert(r.oid, cols);
    }
}

// ---- relations and the walsender's pgoutput ------------------------------------------------

/// Tables the workload writes to.
const RELATIONS: u32 = 3;
const REL_OID_BASE: u32 = 16384;
/// OIDs of the custom (non-built-in) column types, one per table.
const TYPE_OID_BASE: u32 = 70000;
const TEXT_OID: u32 = 25;
const INT4_OID: u32 = 23;

/// Table definitions over time: version `v` of a table holds from its DDL's WAL position on.
#[derive(Debug, Default)]
struct Catalog {
    history: BTreeMap<u32, Vec<(Lsn, u32)>>,
}

impl Catalog {
    fn version(&self, rel: u32, at: Lsn) -> u32 {
        self.history
            .get(&rel)
            .and_then(|h| h.iter().rev().find(|(l, _)| *l <= at))
            .map_or(1, |(_, v)| *v)
    }

    fn redefine(&mut self, rel: u32, at: Lsn) -> u32 {
        let h = self.history.entry(rel).or_default();
        let v = h.last().map_or(1, |(_, v)| *v) + 1;
        h.push((at, v));
        v
    }
}

/// The table a change (`C<xid>.<n>`) writes to.
fn rel_of(payload: &[u8]) -> u32 {
    let n: u64 = std::str::from_utf8(payload)
        .ok()
        .and_then(|p| p.rsplit('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    (n % u64::from(RELATIONS)) as u32
}

/// Version `v` of table `rel`: the payload and version columns, then `v % 3` more whose names
/// name the version, the first of a custom type when `v` is even.
fn columns(rel: u32, v: u32) -> Vec<(Vec<u8>, u32, bool)> {
    let mut c = vec![
        (b"payload".to_vec(), TEXT_OID, true),
        (b"ver".to_vec(), INT4_OID, false),
    ];
    for i in 0..v % 3 {
        let ty = if i == 0 && v.is_multiple_of(2) {
            TYPE_OID_BASE + rel
        } else {
            TEXT_OID
        };
        c.push((format!("x{v}_{i}").into_bytes(), ty, false));
    }
    c
}

/// What pgoutput sends for one walsender session: Relation (with Type) messages before a
/// table's first change in the session, again after a redefinition, and per streamed
/// transaction inside its blocks; at Stream Commit the tables described in the stream count as
/// described for the session (`cleanup_rel_sync_cache`). Descriptions sent inside a rolled-back
/// subtransaction's part of a stream are dropped with it on the apply side, so the model sends
/// them again (pgoutput's own bookkeeping of that case is not modelled).
#[derive(Debug)]
struct Walsender {
    decoder: PgOutputDecoder,
    block: Option<u32>,
    global: BTreeMap<u32, u32>,
    /// Per streamed transaction: (table, version, sequence number of the description).
    streams: BTreeMap<u32, Vec<(u32, u32, u64)>>,
    /// Sequence number of the first change of each (transaction, subtransaction).
    first_change: BTreeMap<(u32, u32), u64>,
    seq: u64,
    /// Encoded messages not yet taken by the queue: (`'w'` LSN, event, bytes).
    out: VecDeque<(Lsn, Event, Vec<u8>)>,
}

impl Walsender {
    fn new() -> Self {
        Walsender {
            decoder: PgOutputDecoder::new(ProtoVersion::V4),
            block: None,
            global: BTreeMap::new(),
            streams: BTreeMap::new(),
            first_change: BTreeMap::new(),
            seq: 0,
            out: VecDeque::new(),
        }
    }

    /// Encodes one message of the publisher's log, with the descriptions it needs first.
    fn send(&mut self, item: &LogItem, catalog: &Catalog) -> Result<(), Violation> {
        let lsn = item.lsn;
        let gid = |xid: Xid| format!("pgyard_{}", xid.0).into_bytes();
        let msg_bytes = match item.event {
            Event::Begin {
                xid,
                final_lsn,
                commit_ts,
            } => encode(PgOutputMessage::Begin(po::Begin {
                final_lsn,
                commit_time: commit_ts,
                xid,
            })),
            Event::Commit {
                commit_lsn,
                end_lsn,
                commit_ts,
            } => encode(PgOutputMessage::Commit(po::Commit {
                commit_lsn,
                end_lsn,
                commit_time: commit_ts,
            })),
            Event::BeginPrepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            }
            | Event::Prepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            }
            | Event::StreamPrepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            } => {
                let g = gid(xid);
                let p = po::Prepare {
                    prepare_lsn,
                    end_lsn,
                    prepare_time: prepare_ts,
                    xid,
                    gid: &g,
                };
                if let Event::StreamPrepare { .. } = item.event {
                    self.streams.remove(&xid.0);
                }
                encode(match item.event {
                    Event::BeginPrepare { .. } => PgOutputMessage::BeginPrepare(p),
                    Event::Prepare { .. } => PgOutputMessage::Prepare(p),
                    _ => PgOutputMessage::StreamPrepare(p),
                })
            }
            Event::CommitPrepared {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => {
                let g = gid(xid);
                encode(PgOutputMessage::CommitPrepared(po::CommitPrepared {
                    commit_lsn,
                    end_lsn,
                    commit_time: commit_ts,
                    xid,
                    gid: &g,
                }))
            }
            Event::RollbackPrepared {
                xid,
                prepare_end_lsn,
                rollback_end_lsn,
                rollback_ts,
            } => {
                let g = gid(xid);
                encode(PgOutputMessage::RollbackPrepared(po::RollbackPrepared {
                    prepare_end_lsn,
                    rollback_end_lsn,
                    prepare_time: PgTimestamp(0),
                    rollback_time: rollback_ts,
                    xid,
                    gid: &g,
                }))
            }
            Event::StreamStart { xid, first } => {
                self.block = Some(xid.0);
                encode(PgOutputMessage::StreamStart(po::StreamStart {
                    xid,
                    first_segment: first,
                }))
            }
            Event::StreamStop => {
                self.block = None;
                encode(PgOutputMessage::StreamStop)
            }
            Event::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => {
                // DDL since the stream described a table invalidated that (pgoutput clears
                // the entry's list of streamed transactions): only current ones count.
                for (rel, v, _) in self.streams.remove(&xid.0).unwrap_or_default() {
                    if catalog.version(rel, lsn) == v {
                        self.global.insert(rel, v);
                    }
                }
                encode(PgOutputMessage::StreamCommit(po::StreamCommit {
                    xid,
                    commit_lsn,
                    end_lsn,
                    commit_time: commit_ts,
                }))
            }
            Event::StreamAbort { xid, sub_xid } => {
                if sub_xid == xid {
                    self.streams.remove(&xid.0);
                } else if let Some(cut) = self.first_change.get(&(xid.0, sub_xid.0)) {
                    let cut = *cut;
                    if let Some(sent) = self.streams.get_mut(&xid.0) {
                        sent.retain(|(_, _, at)| *at < cut);
                    }
                }
                encode(PgOutputMessage::StreamAbort(po::StreamAbort {
                    xid,
                    subxid: sub_xid,
                    abort: None,
                }))
            }
            Event::Change { xid } => {
                let rel = rel_of(&item.payload);
                let v = catalog.version(rel, lsn);
                let top = self.block;
                let described = match top {
                    Some(top) => self
                        .streams
                        .get(&top)
                        .and_then(|s| s.iter().rev().find(|(r, _, _)| *r == rel))
                        .is_some_and(|(_, sv, _)| *sv == v),
                    None => self.global.get(&rel) == Some(&v),
                };
                if !described {
                    let in_stream = top.map(Xid);
                    if v.is_multiple_of(2) && !v.is_multiple_of(3) {
                        let name = format!("t{rel}_kind").into_bytes();
                        let y = encode(PgOutputMessage::Type(po::Type {
                            xid: in_stream,
                            oid: TYPE_OID_BASE + rel,
                            namespace: b"public",
                            name: &name,
                        }))?;
                        self.emit(lsn, y)?;
                    }
                    let cols = columns(rel, v);
                    let rc: Vec<RelationColumn<'_>> = cols
                        .iter()
                        .map(|(name, ty, key)| RelationColumn {
                            key: *key,
                            name,
                            type_oid: *ty,
                            type_modifier: -1,
                        })
                        .collect();
                    let name = format!("t{rel}").into_bytes();
                    let r = encode(PgOutputMessage::Relation(po::Relation {
                        xid: in_stream,
                        oid: REL_OID_BASE + rel,
                        namespace: b"public",
                        name: &name,
                        replica_identity: ReplicaIdentity::Default,
                        columns: Seq::from_slice(&rc),
                    }))?;
                    let at = self.seq;
                    self.emit(lsn, r)?;
                    match top {
                        Some(top) => self.streams.entry(top).or_default().push((rel, v, at)),
                        None => {
                            self.global.insert(rel, v);
                        }
                    }
                }
                if let (Some(top), Some(sub)) = (top, xid) {
                    self.first_change.entry((top, sub.0)).or_insert(self.seq);
                }
                let ver = v.to_string().into_bytes();
                let mut vals = vec![TupleValue::Text(&item.payload), TupleValue::Text(&ver)];
                vals.resize(columns(rel, v).len(), TupleValue::Null);
                encode(PgOutputMessage::Insert(po::Insert {
                    xid,
                    relation: REL_OID_BASE + rel,
                    new: Seq::from_slice(&vals),
                }))
            }
            Event::Message {
                transactional,
                xid,
                lsn: at,
            } => encode(PgOutputMessage::Message(po::LogicalMessage {
                xid,
                transactional,
                lsn: at,
                prefix: b"pgyard",
                content: &item.payload,
            })),
            Event::Relation { .. } | Event::Type { .. } => {
                return Err(fail(
                    "queue-accepts-valid-stream",
                    "the publisher model never logs descriptions".into(),
                ))
            }
        }?;
        self.emit(lsn, msg_bytes)
    }

    /// Queues one encoded message, with the event the production path derives from its bytes.
    fn emit(&mut self, lsn: Lsn, bytes: Vec<u8>) -> Result<(), Violation> {
        let event = match self.decoder.decode(&bytes) {
            Ok(m) => pgyard_delayq::pgoutput::event(&m),
            Err(e) => {
                return Err(fail(
                    "queue-accepts-valid-stream",
                    format!("the walsender model sent undecodable bytes {bytes:?}: {e}"),
                ))
            }
        };
        self.seq += 1;
        self.out.push_back((lsn, event, bytes));
        Ok(())
    }
}

fn encode(m: PgOutputMessage<'_>) -> Result<Vec<u8>, Violation> {
    m.to_bytes()
        .map(|b| b.to_vec())
        .map_err(|e| fail("queue-accepts-valid-stream", format!("encode {m:?}: {e}")))
}
