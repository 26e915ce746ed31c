//! The apply loop of `pgyard delayq apply` and `run`: the adapter around the pure
//! `pgyard_delayq::apply::ApplyMachine`, which decides everything — batches of due
//! transactions, how many are in flight, when to ask the subscriber for its durable origin
//! progress, what is acknowledged to the queue and when, the retry of a refused batch one
//! transaction at a time, the operator's controls. This file performs its commands over the
//! blocking subscriber session, reads the replies in order, reads `control.json`, sleeps,
//! and reports (a status line every 5 s, `status.json` every second).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use pgyard_delayq::apply::{
    row_check_failure, ApplyConfig, ApplyControls, ApplyMachine, BatchId, Command, Failure, Notice,
    Wait,
};
use pgyard_tokio::follow::{lock, SharedQueue};
use pgyard_types::Lsn;

use crate::delayq_apply::{status_line, unix_now, Applied, ApplyFailure, Subscriber, Ticket};
use crate::delayq_control::{status_json, Control, Until};

/// Where the operator's controls live and where applying holds.
#[derive(Clone, Debug)]
pub struct Controls {
    /// The queue directory (`control.json`, `status.json`).
    pub dir: PathBuf,
    /// Apply only what committed before this, then hold.
    pub until: Option<Until>,
    /// See [`ApplyConfig::piece_bytes`].
    pub piece_bytes: usize,
    /// Rung by the follower of `delayq run` whenever it made more of the queue durable, so
    /// that an applier that drained the queue goes on at once instead of after its idle
    /// pause (200 ms, which in a catch-up left the subscriber idle for most of each pause).
    pub bell: Option<Arc<Doorbell>>,
}

/// A wake-up between threads: [`Doorbell::ring`] ends the current or the next
/// [`Doorbell::wait`].
#[derive(Debug, Default)]
pub struct Doorbell {
    rung: Mutex<bool>,
    ringing: Condvar,
}

impl Doorbell {
    /// Wakes the waiter, or the next one to wait.
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.ringing.notify_all();
    }

    /// Waits for a ring (one that came since the last wait counts) or at most `pause`.
    pub fn wait(&self, pause: Duration) {
        let rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut rung, _) = self
            .ringing
            .wait_timeout_while(rung, pause, |rung| !*rung)
            .unwrap_or_else(PoisonError::into_inner);
        *rung = false;
    }
}

/// A request sent to the subscriber whose reply is still to be read, in the order sent.
enum Pending {
    Batch(BatchId, Ticket),
    Progress(Ticket),
}

/// One apply run's state (see [`apply_loop`]).
struct Looper<'a> {
    queue: &'a SharedQueue,
    sub: &'a mut Subscriber,
    stop: Option<&'a AtomicBool>,
    controls: &'a Controls,
    control: Control,
    control_read: Instant,
    machine: ApplyMachine,
    pending: VecDeque<Pending>,
    last_log: Instant,
    last_status: Instant,
}

/// What one turn of the loop did.
enum Turn {
    Go,
    Wait(Duration),
    Finished,
}

/// The machine's reasons to stop, in the words `apply` and `run` always used.
fn failure(f: Failure) -> ApplyFailure {
    match f {
        Failure::Queue(e) => ApplyFailure::Queue(e.to_string()),
        Failure::Plan(e) => ApplyFailure::Apply(e),
        Failure::Refused { commit_lsn, text } => match row_check_failure(&text) {
            Some(words) => ApplyFailure::RowCheck(words),
            None => ApplyFailure::Refused {
                commit_lsn,
                text: text.trim_end().to_owned(),
            },
        },
        Failure::Misuse(m) => ApplyFailure::Queue(m),
    }
}

/// Space and other retryable refusals resolve as apply and purge free segments.
fn soft<T>(r: Result<T, pgyard_delayq::Error>) -> Result<(), ApplyFailure> {
    match r {
        Err(e) if !e.is_retryable() => Err(ApplyFailure::Queue(e.to_string())),
        _ => Ok(()),
    }
}

/// Applies due items in commit order. Without `stop`, returns once the queue holds nothing
/// more (waiting for due times) or holds at `--until`; with it, runs until the flag is set
/// (`delayq run`, where `follow` fills the same queue). Obeys `pause`, `resume` and `skip`
/// within 200 ms and writes `status.json` every second.
pub fn apply_loop(
    queue: &SharedQueue,
    sub: &mut Subscriber,
    stop: Option<&AtomicBool>,
    controls: &Controls,
) -> Result<Applied, ApplyFailure> {
    let steer = ApplyControls {
        until: controls.until,
        ..ApplyControls::default()
    };
    let machine = ApplyMachine::new(
        &mut lock(queue),
        sub.progress,
        ApplyConfig {
            piece_bytes: controls.piece_bytes,
            ..ApplyConfig::default()
        },
        steer,
        unix_now(),
    )
    .map_err(failure)?;
    let long_ago = Instant::now() - Duration::from_secs(60);
    let mut l = Looper {
        queue,
        sub,
        stop,
        controls,
        control: Control::default(),
        control_read: long_ago,
        machine,
        pending: VecDeque::new(),
        last_log: Instant::now(),
        last_status: long_ago,
    };
    loop {
        let turn = l.turn();
        if turn.is_err() {
            l.last_status = long_ago;
            l.report();
        }
        match turn? {
            Turn::Go => {}
            Turn::Wait(d) => match &controls.bell {
                Some(bell) => bell.wait(d),
                None => std::thread::sleep(d),
            },
            Turn::Finished => {
                soft(lock(l.queue).flush())?;
                l.last_status = long_ago;
                l.report();
                return Ok(l.machine.applied().clone());
            }
        }
        l.report();
    }
}

impl Looper<'_> {
    fn turn(&mut self) -> Result<Turn, ApplyFailure> {
        let idle = Duration::from_millis(200);
        if self.control_read.elapsed() >= idle {
            self.control_read = Instant::now();
            match Control::load(&self.controls.dir) {
                Ok(c) => {
                    self.machine.set_controls(ApplyControls {
                        paused: c.paused,
                        skip: c.skip.clone(),
                        until: self.controls.until,
                    });
                    self.control = c;
                }
                Err(e) => eprintln!("pgyard delayq: {e}; keeping the previous controls"),
            }
        }
        if self.stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            self.machine.stop();
        }
        self.perform()?;
        let wait = self.machine.wait(&lock(self.queue));
        let pause = match wait {
            Wait::Reply => {
                self.complete_one()?;
                return Ok(Turn::Go);
            }
            // An acknowledgement waits for space in the queue.
            Wait::Poll => Duration::from_millis(10),
            Wait::Stopped => return Ok(Turn::Finished),
            Wait::Paused => idle,
            Wait::Held(_) if self.stop.is_none() => return Ok(Turn::Finished),
            Wait::Held(_) => idle,
            Wait::Drained if self.stop.is_none() => return Ok(Turn::Finished),
            Wait::Drained => idle,
            // Due already yet not handed out: not durable yet. With a follower, its next
            // flush rings the bell; polling every millisecond meanwhile cost a core's worth
            // of wake-ups under a burst.
            Wait::Due(due) if due.0 <= unix_now().0 && self.controls.bell.is_some() => idle,
            Wait::Due(due) => {
                let micros = (due.0 - unix_now().0).clamp(1_000, 200_000);
                Duration::from_micros(micros as u64)
            }
        };
        Ok(Turn::Wait(pause))
    }

    /// Performs the machine's commands until it has none: batches and progress questions
    /// are sent without waiting (their replies are read in order later); a rollback reads
    /// and drops every reply still in flight first.
    fn perform(&mut self) -> Result<(), ApplyFailure> {
        loop {
            let command = self.machine.poll_command(&mut lock(self.queue), unix_now());
            self.notices();
            match command.map_err(failure)? {
                None => return Ok(()),
                Some(Command::Send { id, plan }) => {
                    let replies = self.sub.send(&plan)?;
                    self.pending.push_back(Pending::Batch(id, replies));
                }
                Some(Command::AskProgress) => {
                    let reply = self.sub.send_progress()?;
                    self.pending.push_back(Pending::Progress(reply));
                }
                Some(Command::RollBack { origin }) => self.roll_back(origin)?,
            }
        }
    }

    /// Drops every request in flight: the subscriber reads their replies and rolls back.
    fn roll_back(&mut self, origin: Lsn) -> Result<(), ApplyFailure> {
        self.pending.clear();
        self.sub.abandon(origin)
    }

    /// Reads the oldest reply and hands it to the machine.
    fn complete_one(&mut self) -> Result<(), ApplyFailure> {
        let Some(pending) = self.pending.pop_front() else {
            return Ok(());
        };
        let handled = match pending {
            Pending::Batch(id, replies) => match self.sub.finish(replies)? {
                Ok(()) => self
                    .machine
                    .handle_committed(&mut lock(self.queue), id, unix_now()),
                Err(text) => self.machine.handle_refused(id, text),
            },
            Pending::Progress(reply) => {
                let durable = self.sub.finish_progress(reply)?;
                self.machine
                    .handle_progress(&mut lock(self.queue), durable, unix_now())
            }
        };
        self.notices();
        handled.map_err(failure)
    }

    /// Reports what the machine did on its own.
    fn notices(&mut self) {
        while let Some(n) = self.machine.poll_notice() {
            if let Notice::Skipped(lsn) = n {
                eprintln!("pgyard delayq: skipped the transaction committed at {lsn}, as asked");
            }
        }
    }

    /// The status line every 5 s on standard error, `status.json` every second.
    fn report(&mut self) {
        let done = self.machine.applied();
        if self.last_log.elapsed() >= Duration::from_secs(5) {
            self.last_log = Instant::now();
            eprintln!("{}", status_line(&lock(self.queue), done));
        }
        if self.last_status.elapsed() >= Duration::from_secs(1) {
            self.last_status = Instant::now();
            let applied = done.last_end_lsn.zip(done.last_commit_ts);
            let mut v = status_json(
                &lock(self.queue).inspect(),
                &self.control,
                applied,
                unix_now(),
            );
            v["running"] = true.into();
            v["pid"] = std::process::id().into();
            v["held_at"] = done.held_at.map(|l| l.to_string()).into();
            let path = self.controls.dir.join("status.json");
            if let Err(e) = write_status(&path, &v) {
                eprintln!("pgyard delayq: {e}");
            }
        }
    }
}

/// Replaces `status.json` (informational: renamed into place, not fsynced).
fn write_status(path: &std::path::Path, v: &serde_json::Value) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, v.to_string())
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| format!("{}: {e}", path.display()))
}
