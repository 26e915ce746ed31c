//! `slotsync`: a primary (the publisher model) with 1–2 physical standbys, a logical
//! subscriber consuming through the failover slot `sub_slot`, the slot-sync engine copying that
//! slot to the standbys (the worker on its `WorkerSchedule` cadence, or
//! `pg_sync_replication_slots()` now and then), and a failover at a random moment: a standby is
//! promoted with the engine's `promote` and the subscriber resumes from its synced slot.
//!
//! With `synchronized_standby_slots` naming the promoted standby, the walsender sends only up
//! to `StandbySlotList::send_bound`, and the subscriber must resume exactly after what it
//! applied: nothing it applied is missing on the new primary, nothing it never got is skipped,
//! and the WAL it needs is reserved by the slot. Without the setting the same quantities are
//! measured and traced as the loss window ([`loss_window`]).
//!
//! The world also holds what the slot positions are about (`cluster`): the primary's catalog
//! horizon and vacuum, whose prune records replay on the standbys and invalidate synced slots
//! they pass (`rows_removed`); the standbys' `hot_standby_feedback` carrying their synced slots'
//! `catalog_xmin` to their physical slots; WAL removal at the primary's checkpoints and the
//! standbys' restartpoints, with `max_slot_wal_keep_size` invalidations (`wal_removed`) on
//! both sides. After promotion the synced slot must be able to decode: its WAL still on the
//! standby and the catalog rows its transactions need kept ([`Unusable`], and the loss
//! window's `catalog_missing`).
//!
//! The failover-readiness check (`pgyard slotsync check`) is asked at random moments (about one
//! tick in five, of a random standby) and right before the failover, from a snapshot of the
//! same state: whenever it says the slot is ready, a failover to that standby at that moment
//! must lose nothing (`ready-means-lossless`); every report is also held to the check's own
//! documented rule, exit status and warnings (`report`). The primary also has a logical slot
//! without `failover`, which nothing may sync.

use pgyard_slotsync::check::check;
use pgyard_slotsync::snapshot::{PrimaryFacts, Snapshot};
use pgyard_slotsync::{
    promote, sync_cycle, sync_function, Caller, Outcome, PlanInput, SlotRow, Standby, SyncError,
    Version,
};
use pgyard_types::{side_stream, uniform_inclusive, Instant, Lsn, Rng, RngCore, UnixTime};

use crate::planted::{ScenarioBug, SyncBug};
use crate::publisher::{Publisher, Workload};
use crate::{trace, Scenario, Trace, Violation};
use cluster::Cluster;
use gate::Gate;
use loss::loss_at;
pub use loss::{LossWindow, Unusable};
use settings::{wrong_at, Misconfig, Wrong};
use worker::Worker;

mod actions;
mod cluster;
mod collect;
mod decode;
mod gate;
mod horizon;
mod judge;
mod loss;
mod plan_json;
mod reason;
mod reconnect;
mod report;
mod schedule;
mod settings;
mod user;
mod wal;
mod walsender;
mod worker;

/// The scenario.
pub struct SlotsyncScenario;

impl Scenario for SlotsyncScenario {
    fn name(&self) -> &'static str {
        "slotsync"
    }

    fn description(&self) -> &'static str {
        "failover slot synced to standbys; the subscriber resumes on the promoted standby"
    }

    fn run(&self, rng: &mut Rng, trace: &mut Trace) -> Result<u64, Violation> {
        run_slotsync(rng, trace, None, None).map(|r| r.nanos)
    }
}

/// The result of one seed.
#[derive(Clone, Debug)]
pub struct SlotsyncRun {
    /// Simulated nanoseconds.
    pub nanos: u64,
    /// What the failover cost (`None` when no failover happened).
    pub loss: Option<LossWindow>,
}

/// Runs `seed` as the runner does and returns its loss window (for sweeps that total it).
pub fn loss_window(seed: u64) -> Result<Option<LossWindow>, Violation> {
    let mut h = crate::trace::COMBINE_START;
    for b in "slotsync".bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let mut rng = pgyard_types::rng_from_seed(h ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut t = Trace::hashing();
    crate::trace!(t, "SEED={seed} scenario=slotsync");
    run_slotsync(&mut rng, &mut t, None, None).map(|r| r.loss)
}

#[derive(Debug)]
struct Mix {
    ticks: u64,
    tick_ms: u64,
    standbys: u64,
    gate_on: bool,
    list_all: bool,
    worker: bool,
    function_every: u64,
    txn_percent: u64,
    receive_percent: u64,
    confirm_percent: u64,
    stall_percent: [u64; 2],
    failover_tick: u64,
    new_after_failover: u64,
    workload: Workload,
    /// Percent of ticks the primary vacuums its catalog.
    vacuum_percent: u64,
    /// Percent of ticks the primary takes a checkpoint (and removes WAL).
    checkpoint_percent: u64,
    /// Percent of ticks each standby takes a restartpoint (and removes WAL).
    restartpoint_percent: u64,
    /// `max_slot_wal_keep_size` in bytes on every node, when set.
    keep_bytes: Option<u64>,
    /// A standby rebuilt from a fresh base backup: (tick, which standby).
    rebuild: Option<(u64, usize)>,
    /// Percent of ticks the primary writes a `RUNNING_XACTS` record, when the standbys
    /// decode (see `decode`); drawn from a stream of its own.
    decoding: Option<u64>,
    /// The tick the subscription enables `two_phase` on its slot (`ALTER SUBSCRIPTION … SET
    /// (two_phase = true)`), if it does; drawn from a stream of its own.
    two_phase_tick: Option<u64>,
}

const SLOT: &str = "sub_slot";
/// A logical slot on the primary without `failover` (see `primary_rows`).
const PLAIN_SLOT: &str = "plain_slot";
/// Where the slot and the subscription start.
const START: Lsn = Lsn(0x300_0000);

fn fail(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Runs one seed; `bug` plants a scenario bug (see [`ScenarioBug`]), `sync_bug` one of the
/// sync engine's (in every sync of every standby).
pub fn run_slotsync(
    rng: &mut Rng,
    t: &mut Trace,
    bug: Option<ScenarioBug>,
    sync_bug: Option<SyncBug>,
) -> Result<SlotsyncRun, Violation> {
    let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    let mut mix = draw_mix(rng);
    // Whether the standbys decode comes from a stream of its own, so the rest of the world
    // draws as it did before they could.
    let mut dec = side_stream(rng, DECODE_STREAM);
    mix.decoding = (r(&mut dec, 3) != 0).then(|| 5 + r(&mut dec, 55));
    // So does the moment the subscription turns two_phase on, in half the seeds.
    let mut alter = side_stream(rng, ALTER_STREAM);
    let mut users = side_stream(rng, USER_STREAM);
    mix.two_phase_tick = (r(&mut alter, 1) == 0).then(|| r(&mut alter, mix.ticks));
    // The moments of the check come from a stream of their own, so asking more or less often
    // never changes what the world does.
    let mut asks = side_stream(rng, ASK_STREAM);
    trace!(t, "mix {mix:?}");
    let misconfig = Misconfig::draw(rng, mix.ticks, mix.standbys);
    if let Some(m) = misconfig {
        trace!(t, "misconfigured {m:?}");
    }
    let ops = side_stream(rng, OPS_STREAM);
    let mut publ = Publisher::new(mix.workload.clone(), START);
    for i in 0..mix.standbys as usize {
        publ.add_standby(&format!("standby{}", i + 1), mix.stall_percent[i]);
    }
    let gate = Gate::draw(rng, t, &mix, &publ)?;
    let mut cluster = Cluster::new(&publ, mix.keep_bytes);
    if let Some((i, max)) = settings::draw_slots_max(rng, &mut cluster.slots_max) {
        trace!(t, "standby{} has max_replication_slots = {max:?}", i + 1);
    }
    if mix.decoding.is_some() {
        publ.track_wal();
        cluster.decoding.fill(decode::StandbyDecoding::known());
    }
    let mut standbys = Standbys {
        bug: sync_bug,
        misconfig,
        ops,
        locals: vec![Vec::new(); mix.standbys as usize],
        workers: (0..mix.standbys).map(|_| Worker::new()).collect(),
    };
    let mut sub = Subscriber {
        received: 0,
        // The subscription starts where its slot was created.
        confirmed: START,
    };
    let mut now = Instant::ZERO;
    let wall0 = 1_700_000_000_000_000i64;
    for tick in 0..mix.ticks {
        now = Instant(now.0 + mix.tick_ms * 1_000_000);
        let wall = UnixTime(wall0 + (now.0 / 1000) as i64);
        if r(rng, 99) < mix.txn_percent {
            publ.step(rng, wall);
        }
        if mix.decoding.is_some_and(|p| r(&mut dec, 99) < p) {
            publ.log_running_xacts();
        }
        schedule::at_tick(t, tick, &mix, &mut publ, &mut cluster, &mut standbys);
        publ.advance_standbys(rng);
        cluster.standbys_step(rng, t, tick, &mix, &publ, &mut standbys.locals);
        let primary_rows = primary_rows(&publ, &cluster);
        let bound = gate.bound(tick, bug, &primary_rows, publ.flush_lsn())?;
        // An invalidated slot cannot be streamed from (or confirmed through) at all.
        if cluster.logical_invalid.is_none() {
            sub.step(rng, t, tick, &mix, &mut publ, bound);
        }
        let world = (&publ, &mut cluster);
        standbys.sync(t, tick, (now, wall), &mix, world, &primary_rows)?;
        let feedback_off = misconfig.and_then(|m| m.feedback_off_at(tick));
        let locals = standbys.locals.as_slice();
        cluster.primary_step(rng, t, (tick, &mix), &mut publ, locals, feedback_off);
        let received = sub.received;
        let applied_end = received
            .checked_sub(1)
            .map_or(START, |i| publ.commits[i].end_lsn);
        let facts = Facts {
            setting: &gate.text,
            in_setting: &gate.in_setting,
            failover_tick: mix.failover_tick,
            sent: applied_end,
            worker: mix.worker,
            bug,
            misconfig,
        };
        let world = (&publ, &cluster);
        check_at_random(&mut asks, t, tick, &mix, world, locals, received, &facts)?;
        let someone = uniform_inclusive(&mut users, mix.standbys - 1) as usize;
        user::attempt(&mut users, tick, someone, &locals[someone], true)?;
        if tick == mix.failover_tick {
            let loss = fail_over_at(
                rng,
                t,
                (&mix, &gate),
                world,
                (locals, &mut users),
                &facts,
                &sub,
            )?;
            return Ok(SlotsyncRun {
                nanos: now.0,
                loss: Some(loss),
            });
        }
    }
    Ok(SlotsyncRun {
        nanos: now.0,
        loss: None,
    })
}

fn draw_mix(rng: &mut Rng) -> Mix {
    let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    let ticks = 40 + r(rng, 260);
    let mut workload = Workload::draw(rng);
    // Two-phase and streamed work counts only by its commits here.
    workload.plain += 2;
    Mix {
        ticks,
        tick_ms: 20 + r(rng, 480),
        standbys: 1 + r(rng, 1),
        gate_on: r(rng, 1) == 0,
        list_all: r(rng, 1) == 0,
        worker: r(rng, 1) == 0,
        function_every: 1 + r(rng, 20),
        txn_percent: 20 + r(rng, 80),
        receive_percent: 20 + r(rng, 80),
        confirm_percent: 5 + r(rng, 60),
        stall_percent: [r(rng, 90), r(rng, 90)],
        failover_tick: r(rng, ticks),
        new_after_failover: r(rng, 8),
        workload,
        vacuum_percent: r(rng, 60),
        checkpoint_percent: 5 + r(rng, 35),
        restartpoint_percent: 5 + r(rng, 35),
        keep_bytes: (r(rng, 3) == 0).then(|| (8 + r(rng, 24)) * wal::SEGMENT_BYTES),
        rebuild: (r(rng, 1) == 0).then(|| (r(rng, ticks), r(rng, 1) as usize)),
        decoding: None,
        two_phase_tick: None,
    }
}

/// The subscriber: commits received (and applied) in order, and what it confirmed.
struct Subscriber {
    received: usize,
    confirmed: Lsn,
}

impl Subscriber {
    /// Sometimes receives commits up to the walsender's `bound`, sometimes confirms the last.
    fn step(
        &mut self,
        rng: &mut Rng,
        t: &mut Trace,
        tick: u64,
        mix: &Mix,
        publ: &mut Publisher,
        bound: Option<Lsn>,
    ) {
        let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
        if r(rng, 99) < mix.receive_percent {
            let upto = bound.unwrap_or(Lsn(0));
            let before = self.received;
            while self.received < publ.commits.len()
                && publ.commits[self.received].end_lsn <= upto
                && r(rng, 3) != 0
            {
                self.received += 1;
            }
            if self.received > before {
                trace!(
                    t,
                    "tick {tick}: subscriber received {} commits (bound {upto})",
                    self.received - before
                );
            }
        }
        if self.received > 0 && r(rng, 99) < mix.confirm_percent {
            let at = publ.commits[self.received - 1].end_lsn;
            if at > self.confirmed {
                self.confirmed = at;
                publ.confirm(at);
                trace!(t, "tick {tick}: subscriber confirmed {at}");
            }
        }
    }
}

/// The standbys' synced slots and, for the worker, its schedule per standby.
struct Standbys {
    /// The sync engine's planted bug, if one is switched on.
    bug: Option<SyncBug>,
    /// A standby configured wrong for a while, if one is.
    misconfig: Option<Misconfig>,
    /// The operator's calls of `pg_sync_replication_slots()` while the worker runs are drawn
    /// from this stream.
    ops: Rng,
    locals: Vec<Vec<SlotRow>>,
    workers: Vec<Worker>,
}

impl Standbys {
    /// Runs a sync on every standby whose worker is due (or, without the worker, every
    /// `function_every` ticks), each judged by what it must leave behind.
    fn sync(
        &mut self,
        t: &mut Trace,
        tick: u64,
        (now, wall): (Instant, UnixTime),
        mix: &Mix,
        (publ, cluster): (&Publisher, &mut Cluster),
        primary_rows: &[SlotRow],
    ) -> Result<(), Violation> {
        for i in 0..mix.standbys as usize {
            let wrong = wrong_at(self.misconfig, i, tick);
            let input = standby_input(publ, cluster, (i, &self.locals[i]), mix.worker, wrong);
            let refusal = wrong.map(settings::refusal);
            if mix.worker && uniform_inclusive(&mut self.ops, 19) == 0 {
                // The operator calls the function while the worker runs (or would run).
                let expected = refusal.clone().unwrap_or(SyncError::Concurrent);
                let out = sync_function(primary_rows, &self.locals[i], &input);
                settings::judge_outcome(tick, i, Some(&expected), &self.locals[i], &out)?;
            }
            let run = if mix.worker {
                let at = worker::Moment {
                    tick,
                    i,
                    now,
                    wall,
                    input: &input,
                    wrong,
                    remote: primary_rows,
                };
                self.workers[i].cycle_due(t, &at)?
            } else {
                tick.is_multiple_of(mix.function_every)
            };
            if !run {
                continue;
            }
            let mut out = run_sync(primary_rows, &self.locals[i], &input, mix.worker, self.bug);
            let expected = if mix.worker { None } else { refusal.as_ref() };
            settings::judge_outcome(tick, i, expected, &self.locals[i], &out)?;
            judge::sync_call(
                tick,
                i,
                mix.worker,
                primary_rows,
                &input,
                &self.locals[i],
                &out,
            )?;
            actions::judge(tick, i, mix.worker, &self.locals[i], &out)?;
            plan_json::judge(tick, i, &out)?;
            decode::advances(tick, i, &input, &self.locals[i], &out)?;
            decode::memory_holds(tick, i, primary_rows, &out)?;
            cluster.decoding[i].after(&mut out);
            decode::judge(tick, i, publ, &cluster.decoding[i], &out.slots_after)?;
            if mix.worker {
                self.workers[i].cycle_done(now, out.updated);
            }
            if let Some(e) = &out.error {
                trace!(t, "tick {tick}: standby{} sync: ERROR {e}", i + 1);
            }
            if !out.actions.is_empty() {
                let names: Vec<String> = out
                    .actions
                    .iter()
                    .map(|a| a.to_json()["action"].as_str().unwrap_or("?").to_owned())
                    .collect();
                trace!(t, "tick {tick}: standby{} sync: {}", i + 1, names.join(","));
            }
            self.locals[i] = out.slots_after;
        }
        Ok(())
    }
}

/// One sync of a standby: a worker cycle or a `pg_sync_replication_slots()` call, with the
/// planted bug if one is on.
fn run_sync(
    remote: &[SlotRow],
    local: &[SlotRow],
    input: &Standby,
    worker: bool,
    bug: Option<SyncBug>,
) -> Outcome {
    #[cfg(feature = "planted-bugs")]
    if let Some(b) = bug {
        return if worker {
            pgyard_slotsync::sync_cycle_planted(remote, local, input, Caller::Worker, b)
        } else {
            pgyard_slotsync::sync_function_planted(remote, local, input, b)
        };
    }
    #[cfg(not(feature = "planted-bugs"))]
    if let Some(b) = bug {
        match b {}
    }
    if worker {
        sync_cycle(remote, local, input, Caller::Worker)
    } else {
        sync_function(remote, local, input)
    }
}

/// The RNG stream the check's moments are drawn from.
const ASK_STREAM: u64 = 0x6173_6b73;

/// The RNG stream the standbys' decoding and the running-xacts records are drawn from.
const DECODE_STREAM: u64 = 0x6465_636f_6465;

/// The RNG stream of the users who reach for a standby's synced slot.
const USER_STREAM: u64 = 0x7573_6572;

/// The RNG stream the subscription's `two_phase` change is drawn from.
const ALTER_STREAM: u64 = 0x0061_6c74_6572;

/// The RNG stream the operator's function calls are drawn from (see [`Standbys`]).
const OPS_STREAM: u64 = 0x6f70_7321;

/// The check at a random moment, of a random standby: if it says ready, a failover now must
/// lose nothing.
#[allow(clippy::too_many_arguments)]
fn check_at_random(
    asks: &mut Rng,
    t: &mut Trace,
    tick: u64,
    mix: &Mix,
    world: (&Publisher, &Cluster),
    locals: &[Vec<SlotRow>],
    received: usize,
    facts: &Facts,
) -> Result<(), Violation> {
    if uniform_inclusive(asks, 4) != 0 {
        return Ok(());
    }
    let i = uniform_inclusive(asks, mix.standbys - 1) as usize;
    if verdict_ready(tick, world, &locals[i], i, facts)? {
        let loss = loss_at(world.0, world.1, &locals[i], i, received, &[]);
        trace!(t, "tick {tick}: check says ready for standby{}", i + 1);
        if loss.total() > 0 {
            return Err(fail(
                "ready-means-lossless",
                format!(
                    "tick {tick}: the check said ready for standby{}, but a failover \
                     then loses {loss:?}",
                    i + 1
                ),
            ));
        }
    }
    Ok(())
}

/// The failover at its tick: the check asked of the standby to promote right before it, the
/// promotion, and a user reaching for the promoted server's slots; returns what it cost.
fn fail_over_at(
    rng: &mut Rng,
    t: &mut Trace,
    (mix, gate): (&Mix, &Gate),
    world: (&Publisher, &Cluster),
    (locals, users): (&[Vec<SlotRow>], &mut Rng),
    facts: &Facts,
    sub: &Subscriber,
) -> Result<LossWindow, Violation> {
    let tick = mix.failover_tick;
    let candidates = gate.candidates(mix.standbys);
    let p = candidates[uniform_inclusive(rng, candidates.len() as u64 - 1) as usize];
    let ready = verdict_ready(tick, world, &locals[p], p, facts)?;
    trace!(t, "check right before the failover: ready {ready}");
    settings::at_promotion(tick, world, &locals[p], p, facts)?;
    let at = (p, wrong_at(facts.misconfig, p, tick));
    let loss = failover(
        rng,
        t,
        mix,
        world,
        &locals[p],
        at,
        sub.received,
        sub.confirmed,
    )?;
    // The promoted server's slots are its own.
    let (_, promoted) = promote(&locals[p]);
    user::attempt(users, tick, p, &promoted, false)?;
    if ready && loss.total() > 0 {
        return Err(fail(
            "ready-means-lossless",
            format!(
                "the check said ready for standby{}, and the failover lost {loss:?}",
                p + 1
            ),
        ));
    }
    Ok(loss)
}

/// Promotes standby `p` and checks how the subscriber resumes there.
#[allow(clippy::too_many_arguments)]
fn failover(
    rng: &mut Rng,
    t: &mut Trace,
    mix: &Mix,
    (publ, cluster): (&Publisher, &Cluster),
    local: &[SlotRow],
    (p, wrong): (usize, Option<Wrong>),
    received: usize,
    confirmed: Lsn,
) -> Result<LossWindow, Violation> {
    let sb = &publ.standbys[p];
    // The new primary's WAL ends where the standby's received WAL ends; its timeline goes on
    // from there with new transactions.
    let f = sb.receive_lsn;
    let (_, after) = promote(local);
    let slot = after.iter().find(|s| s.slot_name == SLOT);
    let applied_end = received
        .checked_sub(1)
        .map_or(START, |i| publ.commits[i].end_lsn);
    trace!(
        t,
        "failover to standby{} at {f}: subscriber applied through {applied_end}, confirmed {confirmed}, slot {:?}",
        p + 1,
        slot.map(|s| (s.confirmed_flush_lsn, s.restart_lsn))
    );
    if let Some(slot) = slot {
        let s_conf = slot.confirmed_flush_lsn.unwrap_or(Lsn(0));
        if mix.gate_on && s_conf > confirmed {
            return Err(fail(
                "synced-slot-not-ahead",
                format!("synced confirmed_flush {s_conf} is ahead of what the subscriber confirmed ({confirmed})"),
            ));
        }
    }
    let mut lsn = f.0;
    let new_commits: Vec<(Lsn, Lsn)> = match slot {
        None => Vec::new(),
        Some(_) => (0..mix.new_after_failover)
            .map(|_| {
                let first = Lsn(lsn);
                lsn += 0x40 + 8 * uniform_inclusive(rng, 40);
                let commit = Lsn(lsn);
                lsn += 0x18;
                (first, commit)
            })
            .collect(),
    };
    let mut loss = loss_at(publ, cluster, local, p, received, &new_commits);
    loss.gate_on = mix.gate_on;
    trace!(t, "loss window {loss:?}");
    // Last, so the draws above (and the loss window sweeps total) do not depend on it.
    let world_seed = rng.next_u64();
    reconnect::subscriber_reconnects(t, mix, p, world_seed)?;
    // The setting's promise holds for a standby configured as slot synchronization needs;
    // without hot_standby_feedback its synced slot may be invalidated by the very WAL
    // promotion replays (the check then says not ready: `ready-means-lossless` still holds).
    if mix.gate_on && wrong != Some(Wrong::Feedback) && loss.total() > 0 {
        return Err(fail(
            "failover-loses-nothing",
            format!(
                "with synchronized_standby_slots the subscriber lost {loss:?} (standby at {f}, \
                 applied through {applied_end})"
            ),
        ));
    }
    Ok(loss)
}

/// What the readiness check is told besides the slot tables.
struct Facts<'a> {
    setting: &'a str,
    /// What the slot's walsender has sent: the end of the last commit the subscriber got.
    sent: Lsn,
    worker: bool,
    bug: Option<ScenarioBug>,
    misconfig: Option<Misconfig>,
    /// The standbys whose slots the setting names (however it spells them).
    in_setting: &'a [usize],
    failover_tick: u64,
}

/// `pgyard slotsync check` on standby `i` as things stand: is `sub_slot` ready? The whole
/// report is judged first (see `report`).
fn verdict_ready(
    tick: u64,
    (publ, cluster): (&Publisher, &Cluster),
    local: &[SlotRow],
    i: usize,
    facts: &Facts,
) -> Result<bool, Violation> {
    let wrong = wrong_at(facts.misconfig, i, tick);
    let mut sent_lsn = std::collections::BTreeMap::new();
    // The planted bug drops what was sent, as if no walsender were active: the check then
    // trusts the slot's confirmed_flush_lsn, which lags what the subscriber received.
    if facts.bug != Some(ScenarioBug::CheckWithoutSentLsn) {
        sent_lsn.insert(SLOT.to_owned(), facts.sent);
    }
    let snap = Snapshot {
        input: PlanInput {
            remote_slots: primary_rows(publ, cluster),
            local_slots: local.to_vec(),
            standby: standby_input(publ, cluster, (i, local), facts.worker, wrong),
        },
        primary: Some(PrimaryFacts {
            version: Version::V18,
            synchronized_standby_slots: facts.setting.to_owned(),
            sent_lsn,
            sent_hidden: Default::default(),
        }),
        notes: Vec::new(),
    };
    // `pgyard slotsync check --snapshot` reads this form: the world's snapshot must survive it
    // (tried where the snapshot is richest, as the JSON costs more than the check).
    let read = (tick == facts.failover_tick || wrong.is_some())
        .then(|| Snapshot::from_json(&snap.to_json()));
    if let Some(read) = read.filter(|r| r.as_ref() != Ok(&snap)) {
        return Err(fail(
            "snapshot-json-round-trip",
            format!("tick {tick}: {snap:?} reads back from its JSON as {read:?}"),
        ));
    }
    // `pgyard slotsync collect` reads the same from the servers, where they show it all.
    let dec = &cluster.decoding[i];
    if dec.snapshots.is_some() && (tick == facts.failover_tick || wrong.is_some()) {
        collect::judge(tick, i, &snap, publ.wal_facts(), dec)?;
    }
    let report = check(&snap);
    let listed = facts.in_setting.contains(&i);
    report::judge(tick, i, &snap, &report, (wrong, listed))?;
    Ok(report.slots.iter().any(|v| v.slot == SLOT && v.ready))
}

/// The primary's `pg_replication_slots`: each standby's physical slot (its feedback as
/// `restart_lsn` and `catalog_xmin`), the subscriber's failover slot, with their
/// invalidations, and a logical slot without `failover`.
fn primary_rows(publ: &Publisher, cluster: &Cluster) -> Vec<SlotRow> {
    let mut rows: Vec<SlotRow> = publ
        .standbys
        .iter()
        .zip(&cluster.physical)
        .enumerate()
        .map(|(i, (s, p))| {
            let mut row = SlotRow::physical(s.slot.clone());
            row.active = true;
            row.active_pid = Some(100 + i as i64);
            row.restart_lsn = Some(s.feedback_lsn);
            row.catalog_xmin = p.catalog_xmin;
            row.wal_status = Some("reserved".into());
            if let Some(cause) = p.invalid {
                horizon::invalidate(&mut row, cause);
            }
            row
        })
        .collect();
    let mut row = SlotRow::logical(SLOT);
    row.plugin = Some("pgoutput".into());
    row.datoid = Some(5);
    row.database = Some("postgres".into());
    row.active = true;
    row.active_pid = Some(200);
    row.restart_lsn = Some(publ.slot.restart_lsn);
    row.confirmed_flush_lsn = Some(publ.slot.confirmed_flush_lsn);
    row.catalog_xmin = Some(publ.slot.catalog_xmin);
    row.wal_status = Some("reserved".into());
    row.failover = true;
    row.two_phase = cluster.two_phase_at.is_some();
    row.two_phase_at = cluster.two_phase_at;
    if let Some(cause) = cluster.logical_invalid {
        // Nobody can acquire it any more.
        row.active = false;
        row.active_pid = None;
        horizon::invalidate(&mut row, cause);
    }
    // A second subscription's slot, created without `failover`: never synced, never given a
    // verdict. It keeps the same positions as the failover slot, so it holds back no WAL or
    // catalog rows that slot does not.
    let mut plain = row.clone();
    plain.slot_name = PLAIN_SLOT.into();
    plain.failover = false;
    plain.active_pid = plain.active_pid.map(|p| p + 1);
    rows.push(row);
    rows.push(plain);
    rows
}

/// Standby `i` as the sync engine reads it.
fn standby_input(
    publ: &Publisher,
    cluster: &Cluster,
    (i, local): (usize, &[SlotRow]),
    worker: bool,
    wrong: Option<Wrong>,
) -> Standby {
    let s = &publ.standbys[i];
    let w = &cluster.standby_wal[i];
    let mut sb = Standby {
        receive_lsn: Some(s.receive_lsn),
        replay_lsn: Some(s.replay_lsn),
        // Its next xid as of replay: that of the first transaction that began after it.
        snapshot_xmin: horizon::next_xid_at(publ, s.replay_lsn),
        oldest_wal_lsn: Some(w.oldest),
        redo_lsn: Some(w.redo),
        wal_segment_size_bytes: wal::SEGMENT_BYTES,
        primary_slot_name: s.slot.clone(),
        primary_conninfo: "host=primary dbname=postgres".into(),
        sync_replication_slots: worker,
        max_replication_slots: cluster.slots_max[i],
        ..Standby::default()
    };
    cluster.decoding[i].fill(&mut sb, publ, w.oldest, local);
    settings::apply(&mut sb, wrong);
    sb
}
