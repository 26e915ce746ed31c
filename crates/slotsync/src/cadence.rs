//! The slot sync worker's timing as a sans-IO scheduler: naptime with back-off between
//! cycles, and the postmaster's minimum gap between worker launches.

use std::time::Duration;

use pgyard_types::{Instant, UnixTime};

/// Sleep after a cycle that changed a slot (`MIN_SLOTSYNC_WORKER_NAPTIME_MS`).
pub const NAPTIME_MIN: Duration = Duration::from_millis(200);
/// Longest sleep between cycles (`MAX_SLOTSYNC_WORKER_NAPTIME_MS`).
pub const NAPTIME_MAX: Duration = Duration::from_millis(30_000);
/// Minimum gap between worker launches (`SLOTSYNC_RESTART_INTERVAL_SEC`).
pub const RESTART_INTERVAL: Duration = Duration::from_secs(10);

/// When the worker runs its next cycle. Drive it with `handle_*` and read
/// [`WorkerSchedule::poll_timeout`]; time is always a parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerSchedule {
    sleep: Duration,
    next_cycle: Option<Instant>,
}

impl WorkerSchedule {
    /// A worker that just started: its first cycle is due at `now`.
    pub fn new(now: Instant) -> WorkerSchedule {
        WorkerSchedule {
            sleep: NAPTIME_MIN,
            next_cycle: Some(now),
        }
    }

    /// The deadline of the next cycle, or `None` while a cycle runs.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_cycle
    }

    /// The sleep chosen after the last cycle.
    pub fn naptime(&self) -> Duration {
        self.sleep
    }

    /// Returns `true` when a cycle is due at `now` (and marks it running); early calls are
    /// no-ops returning `false`.
    pub fn handle_timeout(&mut self, now: Instant) -> bool {
        match self.next_cycle {
            Some(due) if now >= due => {
                self.next_cycle = None;
                true
            }
            _ => false,
        }
    }

    /// A cycle finished at `now`; `updated` says whether it created, updated or invalidated
    /// a slot. The sleep resets to the minimum or doubles up to the maximum.
    pub fn handle_cycle_done(&mut self, now: Instant, updated: bool) {
        self.sleep = if updated {
            NAPTIME_MIN
        } else {
            (self.sleep * 2).min(NAPTIME_MAX)
        };
        self.next_cycle = Some(now + self.sleep);
    }

    /// The worker's latch was set: the pending sleep ends now.
    pub fn handle_wakeup(&mut self, now: Instant) {
        if let Some(due) = self.next_cycle {
            self.next_cycle = Some(due.min(now));
        }
    }
}

/// The postmaster's launch throttle (`SlotSyncWorkerCanRestart`), in wall-clock seconds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LaunchGate {
    last_start_secs: Option<i64>,
}

impl LaunchGate {
    /// A gate that has never launched a worker.
    pub fn new() -> LaunchGate {
        LaunchGate::default()
    }

    /// Whether a worker may be launched at `now`; if so, records the launch. A clock that
    /// went backwards allows the launch.
    pub fn try_launch(&mut self, now: UnixTime) -> bool {
        let now_secs = now.0.div_euclid(1_000_000);
        let interval = RESTART_INTERVAL.as_secs() as i64;
        let allowed = match self.last_start_secs {
            None => true,
            Some(last) => now_secs < last || now_secs - last >= interval,
        };
        if allowed {
            self.last_start_secs = Some(now_secs);
        }
        allowed
    }

    /// The worker exited for a parameter change: the next launch need not wait.
    pub fn reset(&mut self) {
        self.last_start_secs = None;
    }
}
