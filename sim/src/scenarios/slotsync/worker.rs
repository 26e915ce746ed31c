//! The slot-sync worker's life on one standby: the postmaster launches it when the settings
//! allow and no sooner than 10 s after its previous launch (`LaunchGate`), it checks its
//! `dbname` and the primary's side as it starts and exits on an error, it exits when a reload
//! changes one of its settings (and may then be launched again at once), and while it runs
//! its cycles follow its naptime (`WorkerSchedule`). Each refusal is judged from the setting
//! the world broke, each launch decision from the documented 10-second rule.

use pgyard_slotsync::cadence::{LaunchGate, WorkerSchedule};
use pgyard_slotsync::engine::{dbname_from_conninfo, validate_remote, worker_launch_check};
use pgyard_slotsync::{SlotRow, Standby};
use pgyard_types::{Instant, UnixTime};

use super::fail;
use super::settings::{judge_refusal, refusal, Wrong};
use crate::{trace, Trace, Violation};

/// `SLOTSYNC_RESTART_INTERVAL_SEC`, in the whole seconds of `time()` the postmaster compares.
const RESTART_INTERVAL_SECS: i64 = 10;

/// The worker's naptime after a cycle that changed a slot, and its ceiling
/// (`MIN_`/`MAX_SLOTSYNC_WORKER_NAPTIME_MS`): it doubles after each cycle that changed none.
const NAP_MIN_NANOS: u64 = 200_000_000;
const NAP_MAX_NANOS: u64 = 30_000_000_000;

/// One tick of standby `i` as its worker sees it: the time, the standby as the engine reads
/// it, the setting the world broke (if any), and the primary's slots.
pub(super) struct Moment<'a> {
    pub tick: u64,
    pub i: usize,
    pub now: Instant,
    pub wall: UnixTime,
    pub input: &'a Standby,
    pub wrong: Option<Wrong>,
    pub remote: &'a [SlotRow],
}

/// One standby's worker.
pub(super) struct Worker {
    schedule: WorkerSchedule,
    gate: LaunchGate,
    running: bool,
    /// The judge's own record: the second of the last launch ...
    last_launch: Option<i64>,
    /// ... and whether a parameter change has freed the next one since.
    freed: bool,
    /// The judge's own naptime and the time the next cycle is due.
    nap: u64,
    due: u64,
}

impl Worker {
    /// A standby whose worker has never been launched.
    pub fn new() -> Worker {
        Worker {
            schedule: WorkerSchedule::new(Instant::ZERO),
            gate: LaunchGate::new(),
            running: false,
            last_launch: None,
            freed: false,
            nap: NAP_MIN_NANOS,
            due: 0,
        }
    }

    /// Whether the worker of standby `i` runs a cycle at `now` (launching it first if it is
    /// not running and may be launched).
    pub fn cycle_due(&mut self, t: &mut Trace, at: &Moment) -> Result<bool, Violation> {
        let (tick, i, now, wrong) = (at.tick, at.i, at.now, at.wrong);
        // wal_level needs a restart, so it is wrong from the start: only a reload can change
        // a setting under a running worker.
        if self.running && wrong.is_some() {
            self.running = false;
            self.gate.reset();
            self.freed = true;
            trace!(
                t,
                "tick {tick}: standby{} worker exits: a setting changed",
                i + 1
            );
        }
        if !self.running && !self.launch(t, at)? {
            return Ok(false);
        }
        let due = self.schedule.handle_timeout(now);
        if due != (now.0 >= self.due) {
            return Err(fail(
                "worker-naptime",
                format!(
                    "tick {tick}: standby{}'s worker cycle due: {due} at {} ns; the naptime \
                     rule says the next cycle is due at {} ns (naptime {} ms)",
                    i + 1,
                    now.0,
                    self.due,
                    self.nap / 1_000_000
                ),
            ));
        }
        Ok(due)
    }

    /// A cycle ended at `now`; `updated`: it changed a slot. The naptime resets after a
    /// cycle that changed a slot and doubles, up to 30 s, after one that did not.
    pub fn cycle_done(&mut self, now: Instant, updated: bool) {
        self.schedule.handle_cycle_done(now, updated);
        self.nap = if updated {
            NAP_MIN_NANOS
        } else {
            (self.nap * 2).min(NAP_MAX_NANOS)
        };
        self.due = now.0 + self.nap;
    }

    /// The postmaster's launch and the worker's start; true when it runs.
    fn launch(&mut self, t: &mut Trace, at: &Moment) -> Result<bool, Violation> {
        let (tick, i, now, wall) = (at.tick, at.i, at.now, at.wall);
        let (input, wrong, remote) = (at.input, at.wrong, at.remote);
        // The postmaster checks the settings first (a LOG line, no launch, no throttle) ...
        let checked = wrong.filter(|w| *w != Wrong::Dbname).map(refusal);
        let launchable = worker_launch_check(input);
        judge_refusal(tick, i, checked.as_ref(), launchable.as_ref().err(), false)?;
        if launchable.is_err() {
            return Ok(false);
        }
        // ... then its throttle ...
        let allowed = self.gate.try_launch(wall);
        self.judge_launch(tick, i, wall, allowed)?;
        if !allowed {
            return Ok(false);
        }
        // ... and the worker checks its dbname and the primary's side as it starts.
        let started = dbname_from_conninfo(&input.primary_conninfo)
            .and_then(|_| validate_remote(input, remote));
        let at_start = wrong.filter(|w| *w == Wrong::Dbname).map(refusal);
        judge_refusal(tick, i, at_start.as_ref(), started.as_ref().err(), false)?;
        if let Err(e) = started {
            trace!(
                t,
                "tick {tick}: standby{} worker exits at start: {e}",
                i + 1
            );
            return Ok(false);
        }
        self.running = true;
        self.schedule = WorkerSchedule::new(now);
        // A new worker's first cycle is due at once; its naptime starts at the minimum.
        (self.nap, self.due) = (NAP_MIN_NANOS, now.0);
        Ok(true)
    }

    /// A launch is allowed exactly when none happened yet, a parameter change freed it, the
    /// clock went back, or 10 whole seconds passed since the last one.
    fn judge_launch(
        &mut self,
        tick: u64,
        i: usize,
        wall: UnixTime,
        allowed: bool,
    ) -> Result<(), Violation> {
        let secs = wall.0.div_euclid(1_000_000);
        let free = self.freed
            || self
                .last_launch
                .is_none_or(|l| secs < l || secs - l >= RESTART_INTERVAL_SECS);
        if allowed != free {
            return Err(fail(
                "worker-launch-throttled",
                format!(
                    "tick {tick}: standby{}'s worker launch at second {secs} was allowed: \
                     {allowed}; last launch {:?}, freed by a parameter change: {}",
                    i + 1,
                    self.last_launch,
                    self.freed
                ),
            ));
        }
        if allowed {
            self.last_launch = Some(secs);
            self.freed = false;
        }
        Ok(())
    }
}
