//! `delayq`: the publisher model's stream (plain, streamed with savepoint aborts, two-phase,
//! non-transactional messages) through a `DelayQueue` over a faulty `SimStorage`, fed by
//! `pgyard_delayq::follow::FollowMachine` (the follower the CLI drives: XLogData frames and
//! keepalives in, flush points and standby status updates out at its own cadence, reconnect
//! backoff), with broken connections, crashes (torn writes), fsync failures (poisoned → crash
//! → reopen) and ENOSPC; applied at an advancing wall clock by
//! `pgyard_delayq::apply::ApplyMachine` (the machine the CLI drives) against a model
//! subscriber with asynchronous commit, which crashes, loses unflushed commits, may lack a
//! table, and whose applier process is killed. Many seeds hold some prepared transactions
//! until the end of the run under a budget of a few segments, with a producer that always
//! honours `Pause`: carry-forward must keep them from deadlocking the queue.
//!
//! Invariants, checked after every step and every recovery: every transaction committed at or
//! below a reported flush LSN survives any crash; the subscriber holds exactly a prefix of the
//! publisher's commits, in commit order, each once, none before its due time; the queue marks
//! applied only what the subscriber holds durably; after a purge no segment file is orphaned
//! or missing; recovery is repeatable. At the end faults stop, every open transaction ends,
//! time passes every due time, and the subscriber must hold everything committed
//! (non-transactional messages handed out at least once).

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use pgyard_delayq::apply::{ApplyConfig, ApplyMachine};
use pgyard_delayq::follow::{FollowConfig, FollowMachine};
use pgyard_delayq::{Config, DelayQueue, Error, SimFaults, SimStorage};
use pgyard_types::{rng_from_seed, side_stream, uniform_inclusive, Lsn, Rng, RngCore, UnixTime};

use crate::planted::{ApplyBug, FollowBug};
use crate::publisher::{Fate, Publisher, Workload};
use crate::{trace, Scenario, Trace, Violation};
use checks::Ledger;
use operator::Operator;
use ops::Ops;
use subscriber::SubServer;
use walsender::{rel_of, table_name, Catalog, Walsender, RELATIONS};

mod apply;
mod checks;
mod disk;
mod follow;
mod operator;
mod ops;
mod public;
mod realdisk;
mod restart;
mod settings;
mod subscriber;
mod tables;
mod text;
mod walsender;

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
        run_delayq(rng, trace, None, None)
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
    follow: FollowMix,
    poll_percent: u64,
    crash_percent: u64,
    reconnect_percent: u64,
    fsync_fail_per_million: u32,
    enospc_per_million: u32,
    torn_writes: bool,
    segment_bytes: u64,
    write_buffer: usize,
    budget_segments: Option<u64>,
    apply: ApplyMix,
}

/// The follow machine's pacing and the walsender's keepalives and connection faults.
#[derive(Debug)]
struct FollowMix {
    flush_every: u64,
    flush_interval_ms: u64,
    status_interval_ms: u64,
    reconnect_min_ms: u64,
    reconnect_max_ms: u64,
    /// Chance per step of a keepalive ...
    keepalive_percent: u64,
    /// ... and that it asks for a reply.
    reply_percent: u64,
    /// Chance that a reconnect attempt fails again.
    connect_fail_percent: u64,
}

fn draw_follow_mix(rng: &mut Rng) -> FollowMix {
    let pick = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    let reconnect_min_ms = 1 + pick(rng, 200);
    FollowMix {
        flush_every: 1 + pick(rng, 15),
        flush_interval_ms: pick(rng, 500),
        status_interval_ms: 1 + pick(rng, 2000),
        reconnect_min_ms,
        reconnect_max_ms: reconnect_min_ms * (1 + pick(rng, 15)),
        keepalive_percent: pick(rng, 60),
        reply_percent: pick(rng, 100),
        connect_fail_percent: pick(rng, 50),
    }
}

/// The applier's pacing and the subscriber's faults.
#[derive(Debug)]
struct ApplyMix {
    depth: usize,
    batch_txns: usize,
    batch_bytes: usize,
    /// Small in a third of the runs: transactions are sent in pieces (see apply.rs).
    piece_bytes: usize,
    progress_every: usize,
    progress_interval_ms: u64,
    purge_interval_ms: u64,
    /// Chance per step that the subscriber's WAL writer flushes.
    wal_flush_percent: u64,
    subscriber_crash_percent: u64,
    applier_crash_percent: u64,
    pause_percent: u64,
    /// A table the subscriber lacks until apply fails on it.
    missing_table: Option<u32>,
}

fn draw_apply_mix(rng: &mut Rng) -> ApplyMix {
    let pick = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    ApplyMix {
        depth: 1 + pick(rng, 7) as usize,
        batch_txns: 1 + pick(rng, 7) as usize,
        batch_bytes: 64 + pick(rng, 4096) as usize,
        piece_bytes: if pick(rng, 2) == 0 {
            64 + pick(rng, 448) as usize
        } else {
            1 << 20
        },
        progress_every: 1 + pick(rng, 15) as usize,
        progress_interval_ms: pick(rng, 500),
        purge_interval_ms: 100 + pick(rng, 1900),
        wal_flush_percent: pick(rng, 40),
        subscriber_crash_percent: pick(rng, 4),
        applier_crash_percent: pick(rng, 5),
        pause_percent: pick(rng, 3),
        missing_table: if pick(rng, 3) == 0 {
            Some(pick(rng, u64::from(RELATIONS) - 1) as u32)
        } else {
            None
        },
    }
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

/// Publisher clock steps in a quarter of the runs, of about a second, ten seconds or two
/// minutes: commits after a step back wait behind the ones before it, and a step forward
/// holds everything after it past the end of the run's busy part.
fn draw_clock(rng: &mut Rng, w: &mut Workload) {
    if uniform_inclusive(rng, 3) == 0 {
        w.clock_step_percent = 1 + uniform_inclusive(rng, 9);
        w.clock_step_micros =
            [1_000_000, 10_000_000, 120_000_000][uniform_inclusive(rng, 2) as usize];
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
        follow: draw_follow_mix(rng),
        poll_percent: 5 + pick(rng, 60),
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
        apply: draw_apply_mix(rng),
    }
}

struct Run<'a> {
    rng: &'a mut Rng,
    t: &'a mut Trace,
    mix: Mix,
    apply_bug: Option<ApplyBug>,
    follow_bug: Option<FollowBug>,
    cfg: Config,
    follow_cfg: FollowConfig,
    apply_cfg: ApplyConfig,
    faults: SimFaults,
    publ: Publisher,
    q: Option<DelayQueue<SimStorage>>,
    now: UnixTime,
    start: UnixTime,
    conn: VecDeque<usize>,
    /// The follower process's machine (a new one after every restart).
    follower: FollowMachine,
    /// The frame handed to the follower, reused (the machine copies only a refused one).
    frame: Vec<u8>,
    /// While the connection is down: when the follower tries again.
    reconnect_at: Option<UnixTime>,
    /// The highest LSN the walsender sent in this session (its keepalives' `walEnd`).
    sent: Lsn,
    /// Highest flush LSN reported to the publisher (its slot's `confirmed_flush_lsn`).
    reported: Lsn,
    /// Highest flush LSN reported by the current queue incarnation.
    reported_here: Lsn,
    session: u64,
    /// The model subscriber server.
    sub: SubServer,
    /// The applier process's machine, while it runs.
    app: Option<ApplyMachine>,
    /// The operator's controls (pause, skip, until).
    operator: Operator,
    /// Non-transactional messages handed out, by LSN.
    notes: BTreeSet<u64>,
    /// Running totals over the publisher's commits (see [`Ledger`]).
    ledger: Vec<Ledger>,
    catalog: Catalog,
    ddl_percent: u64,
    wal: Walsender,
    /// What each change does (insert, update, delete, truncate).
    ops: Ops,
    /// The next restart also recovers on the real file system (see `realdisk`).
    real_disk: bool,
    /// What the current follower machine did (see `follow::Tally`).
    tally: follow::Tally,
    /// The publisher's commits the current queue knows, for the due times' running maximum.
    known: checks::Known,
    /// The disk as the last restart decoded it (see `disk::Memo`).
    disk_memo: disk::Memo,
}

fn fail(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Draws of the WAL written after the last commit (see `liveness`).
const IDLE_WAL_STREAM: u64 = 0x6964_6c65;

/// Runs one seed; `apply_bug` plants a bug in every apply machine the run starts,
/// `follow_bug` one in every follow machine.
pub fn run_delayq(
    rng: &mut Rng,
    t: &mut Trace,
    apply_bug: Option<ApplyBug>,
    follow_bug: Option<FollowBug>,
) -> Result<u64, Violation> {
    // Drawn from a stream of its own before anything else: the main stream is untouched.
    let ops = Ops::new(rng);
    let operator = Operator::new(rng);
    let mut mix = draw_mix(rng);
    draw_held(rng, &mut mix);
    draw_clock(rng, &mut mix.workload);
    let ddl_percent = draw_ddl(rng);
    trace!(t, "mix {mix:?}, ddl {ddl_percent}%");
    if ops.mix.any() {
        trace!(t, "changes {:?}", ops.mix);
    }
    if operator.mix != operator::OperatorMix::default() {
        trace!(t, "operator {:?}", operator.mix);
    }
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
    settings::judge(&cfg, rng)?;
    let real_disk = realdisk::chosen(rng);
    let faults = SimFaults {
        fsync_fail_per_million: mix.fsync_fail_per_million,
        enospc_per_million: mix.enospc_per_million,
        capacity_bytes: None,
        torn_writes: mix.torn_writes,
    };
    let a = &mix.apply;
    let apply_cfg = ApplyConfig {
        depth: a.depth,
        batch_txns: a.batch_txns,
        batch_bytes: a.batch_bytes,
        piece_bytes: a.piece_bytes,
        progress_every: a.progress_every,
        progress_interval: Duration::from_millis(a.progress_interval_ms),
        purge_interval: Duration::from_millis(a.purge_interval_ms),
        ..ApplyConfig::default()
    };
    let f = &mix.follow;
    let follow_cfg = FollowConfig {
        flush_every: f.flush_every,
        flush_interval: Duration::from_millis(f.flush_interval_ms),
        status_interval: Duration::from_millis(f.status_interval_ms),
        reconnect_delay_min: Duration::from_millis(f.reconnect_min_ms),
        reconnect_delay_max: Duration::from_millis(f.reconnect_max_ms),
        inspect: false,
    };
    let mut sub = SubServer::default();
    sub.tables.indexed = ops.mix.any();
    sub.tables.unique = ops.mix.unique_key;
    sub.missing
        .extend(a.missing_table.map(|r| table_name(r).to_owned()));
    let storage = SimStorage::with_rng(rng_from_seed(rng.next_u64()), faults.clone());
    let q = DelayQueue::open(storage, cfg.clone())
        .map_err(|e| fail("open-empty", format!("opening an empty queue failed: {e}")))?;
    let start = UnixTime(1_700_000_000_000_000);
    let publ = Publisher::new(mix.workload.clone(), Lsn(0x100_0000));
    let mut run = Run {
        rng,
        t,
        mix,
        apply_bug,
        follow_bug,
        cfg,
        apply_cfg,
        follower: FollowMachine::new(follow_cfg.clone(), start),
        frame: Vec::new(),
        follow_cfg,
        reconnect_at: None,
        sent: Lsn(0),
        faults,
        publ,
        q: Some(q),
        now: start,
        start,
        conn: VecDeque::new(),
        reported: Lsn(0),
        reported_here: Lsn(0),
        session: 0,
        sub,
        app: None,
        operator,
        notes: BTreeSet::new(),
        ledger: Vec::new(),
        catalog: Catalog::default(),
        ddl_percent,
        wal: Walsender::new(ops.mix.full),
        ops,
        real_disk,
        tally: follow::Tally::default(),
        known: checks::Known::new(Vec::new(), 0),
        disk_memo: disk::Memo::default(),
    };
    run.follower = follow::new_follower(&run, start);
    let first = run.q().resume_lsn();
    let started = run
        .follower
        .start_session(run.q.as_mut().expect("open"), start);
    match started {
        Ok(s) if s == first => run.started(s)?,
        other => {
            return Err(fail(
                "open-empty",
                format!("an empty queue resumes at {first}, the machine said {other:?}"),
            ))
        }
    }
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
            self.published(new);
            if self.roll(self.ddl_percent) {
                self.ddl();
            }
            self.follow_step(None)?;
            if self.roll(self.mix.poll_percent) {
                self.apply_step(false)?;
            }
            self.subscriber_faults()?;
            if self.roll(self.mix.crash_percent) {
                trace!(self.t, "step {step}: power loss");
                self.restart(true)?;
            } else if self.roll(self.mix.reconnect_percent) {
                trace!(self.t, "step {step}: reconnect");
                self.break_connection("connection lost")?;
            }
            self.check_subscriber()?;
            self.check_due()?;
        }
        Ok(())
    }

    /// The subscriber's WAL writer, crashes of the subscriber and of the applier process,
    /// and the operator pausing and resuming.
    fn subscriber_faults(&mut self) -> Result<(), Violation> {
        let a = &self.mix.apply;
        let (flush, crash, kill, pause) = (
            a.wal_flush_percent,
            a.subscriber_crash_percent,
            a.applier_crash_percent,
            a.pause_percent,
        );
        if self.roll(flush) {
            self.sub.flush_wal();
        }
        if self.roll(crash) {
            self.app = None;
            let lost = self.sub.crash();
            trace!(self.t, "subscriber crash: {lost} unflushed rows lost");
        }
        if self.roll(kill) && self.app.is_some() {
            self.crash_applier()?;
        }
        if self.roll(pause) {
            let c = &mut self.operator.controls;
            c.paused = !c.paused;
            trace!(self.t, "paused: {}", c.paused);
            self.steer();
        }
        let tamper = self.ops.mix.tamper_percent;
        // Rolled only in seeds that draw it: the others keep their draws.
        if tamper > 0 && self.roll(tamper) {
            let pick = self.rng.next_u64();
            if let Some(table) = self.sub.tamper(pick) {
                trace!(self.t, "a row of {table} deleted by hand on the subscriber");
            }
        }
        if self.operator.maybe_lift() {
            trace!(self.t, "until lifted");
            self.steer();
        }
        Ok(())
    }

    /// Hands the operator's controls to the running machine.
    fn steer(&mut self) {
        if let Some(m) = &mut self.app {
            m.set_controls(self.operator.controls.clone());
        }
    }

    /// Faults stop; every transaction ends; the queue drains.
    fn liveness(&mut self) -> Result<(), Violation> {
        // The budget stays: long-lived prepared transactions must not deadlock it.
        trace!(self.t, "liveness: faults stop");
        self.faults = SimFaults::default();
        self.sub.missing.clear();
        self.operator.controls.paused = false;
        self.operator.calm();
        self.sub.restore();
        self.steer();
        self.restart(false)?;
        let new = self.publ.finish_all(self.rng, self.now);
        self.published(new);
        // WAL no subscriber decodes (tables outside the publication) after the last commit.
        let mut idle = side_stream(self.rng, IDLE_WAL_STREAM);
        self.publ
            .append_wal(1 + uniform_inclusive(&mut idle, 16 << 10));
        let mut settled_rounds = 0u32;
        for round in 0..10_000u32 {
            // The walsender asks for a reply: everything received is made durable.
            self.follow_step(Some(true))?;
            if let Some(due) = self.q().next_due() {
                self.now = self.now.max(due);
            }
            self.apply_step(true)?;
            self.check_subscriber()?;
            self.check_due()?;
            let idle = match (&self.app, &self.q) {
                (Some(m), Some(q)) => {
                    m.wait(q) == pgyard_delayq::apply::Wait::Drained && self.follower.wants_read(q)
                }
                _ => false,
            };
            if self.conn.is_empty() && self.wal.out.is_empty() && idle {
                if self.reported >= self.publ.flush_lsn() {
                    trace!(self.t, "liveness: drained after {round} rounds");
                    return self.final_checks();
                }
                // Drained: the keepalives that follow must let the slot reach the WAL's end.
                settled_rounds += 1;
                if settled_rounds > 50 {
                    return Err(fail(
                        "slot-reaches-wal-end",
                        format!(
                            "drained and idle, the follower still reports {}; the publisher's \
                             WAL ends at {}",
                            self.reported,
                            self.publ.flush_lsn()
                        ),
                    ));
                }
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
        let last = self
            .publ
            .commits
            .iter()
            .rev()
            .find(|c| !self.operator.skips(c.commit_lsn))
            .map_or(Lsn(0), |c| c.end_lsn);
        if self.sub.origin != last {
            let missing = self
                .publ
                .commits
                .iter()
                .find(|c| c.end_lsn > self.sub.origin);
            return Err(fail(
                "liveness-all-applied",
                format!(
                    "the subscriber's origin is {}, the last commit not skipped ends at {last}; \
                     first missing {missing:?}; reported flush {}",
                    self.sub.origin, self.reported
                ),
            ));
        }
        for n in &self.publ.notes {
            if !self.notes.contains(&n.lsn.0) {
                return Err(fail(
                    "liveness-all-applied",
                    format!("message at {} was never delivered", n.lsn),
                ));
            }
        }
        self.purge()?;
        let per_table: Vec<usize> = (0..RELATIONS)
            .map(|r| self.sub.tables.live(table_name(r)))
            .collect();
        trace!(
            self.t,
            "end: {} commits applied, rows per table {per_table:?}, {} messages",
            self.publ.commits.len(),
            self.notes.len()
        );
        Ok(())
    }

    // ---- the stream (the follower is in `follow.rs`) ----------------------------------

    /// New messages in the publisher's log: what their changes do is decided, and they are
    /// the walsender's to send.
    fn published(&mut self, new: std::ops::Range<usize>) {
        self.ops.extend(self.publ.log(), &self.catalog);
        self.conn.extend(new);
    }

    /// DDL between workload steps: a new definition of a relation, from the current WAL
    /// position on. A relation changed by an open transaction (streaming, or prepared) is
    /// locked until it ends, as on the server.
    fn ddl(&mut self) {
        let rel = uniform_inclusive(self.rng, u64::from(RELATIONS) - 1) as u32;
        let locked = self.publ.txns.values().any(|t| {
            matches!(t.fate, Fate::InProgress | Fate::Prepared)
                && t.changes
                    .iter()
                    .any(|c| self.ops.op(c).map_or(rel_of(c) == rel, |o| o.touches(rel)))
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
}
