//! The follower: `pgyard_delayq::follow::FollowMachine`, the machine `pgyard delayq follow`
//! and `run` drive over a socket, driven here over the walsender model — each pgoutput message
//! goes in as the XLogData frame a walsender sends, keepalives at random (some asking for a
//! reply), timer ticks at the simulated wall time — and its status updates, decoded from
//! the bytes it would send, move the publisher's slot. Connections break at random, and the
//! reconnect waits for the machine's backoff (a connect may fail again).

use pgyard_delayq::follow::{Failure, FollowMachine};
use pgyard_types::{Lsn, UnixTime};
use pgyard_wire::replication::ReplicationMessage;

use super::text::lsn_str;
use super::{fail, Run};
use crate::{trace, trace_line, Violation};

/// The `'w'` frame a walsender sends for one pgoutput message at `lsn` (`walEnd` as the
/// message's own LSN: the model reports nothing beyond what it sent), into `out` (a buffer
/// reused for every frame).
fn xlog_data(lsn: Lsn, data: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(25 + data.len());
    out.push(b'w');
    out.extend_from_slice(&lsn.0.to_be_bytes());
    out.extend_from_slice(&lsn.0.to_be_bytes());
    out.extend_from_slice(&0u64.to_be_bytes());
    out.extend_from_slice(data);
}

/// A primary keepalive (`'k'`) at `wal_end`.
fn keepalive(wal_end: Lsn, reply: bool) -> [u8; 18] {
    let mut b = [0u8; 18];
    b[0] = b'k';
    b[1..9].copy_from_slice(&wal_end.0.to_be_bytes());
    b[17] = u8::from(reply);
    b
}

/// What the simulator saw the current follower machine do, to hold its `Progress` to
/// (`progress-true`); a new machine starts from zero.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    messages: u64,
    status_updates: u64,
    sessions: u64,
    reconnects: u64,
    start_lsn: Lsn,
    reported: (Lsn, Lsn),
    /// Something happened that the machine must publish (a status update, a session, a
    /// reconnect) since `poll_progress` was last asked.
    changed: bool,
}

/// A new follower process's machine, with the run's planted bug.
pub(super) fn new_follower(run: &Run<'_>, now: UnixTime) -> FollowMachine {
    let m = FollowMachine::new(run.follow_cfg.clone(), now);
    #[cfg(feature = "planted-bugs")]
    let m = match run.follow_bug {
        Some(b) => m.with_planted_bug(b),
        None => m,
    };
    #[cfg(not(feature = "planted-bugs"))]
    let _ = run.follow_bug;
    m
}

impl Run<'_> {
    /// One turn of the follower: reconnect when the backoff has passed, hand it up to
    /// `deliver_max` messages while it wants to read, maybe a keepalive (`reply`: always
    /// asking for one, as the calm phase does to make everything durable), its timer, and
    /// its status updates to the publisher.
    pub(super) fn follow_step(&mut self, reply: Option<bool>) -> Result<(), Violation> {
        if let Some(at) = self.reconnect_at {
            if self.now < at {
                return Ok(());
            }
            self.connect()?;
            if self.reconnect_at.is_some() {
                return Ok(());
            }
        }
        self.deliver()?;
        let ka = self.mix.follow.keepalive_percent;
        let reply = match reply {
            Some(r) => Some(r),
            None if self.roll(ka) => Some(self.roll(self.mix.follow.reply_percent)),
            None => None,
        };
        let q = self.q.as_mut().expect("queue is open between steps");
        if let Some(reply) = reply.filter(|_| self.follower.wants_read(q)) {
            // A walsender that has sent everything has read the WAL up to the publisher's
            // flush position (a commit's end, WAL of tables outside the publication): its
            // keepalive says so, and the subscriber may confirm that far.
            if self.conn.is_empty() && self.wal.out.is_empty() {
                self.sent = self.sent.max(self.publ.flush_lsn());
            }
            let q = self.q.as_mut().expect("queue is open between steps");
            let frame = keepalive(self.sent, reply);
            let r = self.follower.handle_frame_slice(q, self.now, &frame);
            if r.is_err() {
                return self.machine_result("keepalive", r);
            }
        }
        let q = self.q.as_mut().expect("queue is open between steps");
        let r = self.follower.handle_timeout(q, self.now);
        if r.is_err() {
            return self.machine_result("timer", r);
        }
        self.status_updates()
    }

    /// Messages from the walsender, as long as the machine reads (it stops while the queue
    /// pauses or a refused message waits: the producer always honours `Pause`).
    fn deliver(&mut self) -> Result<(), Violation> {
        for _ in 0..self.mix.deliver_max {
            let q = self.q.as_mut().expect("queue is open between steps");
            if !self.follower.wants_read(q) {
                return Ok(());
            }
            if self.wal.out.is_empty() {
                let Some(i) = self.conn.pop_front() else {
                    return Ok(());
                };
                self.wal
                    .send(i, &self.publ.log()[i], &self.catalog, &self.ops)?;
            }
            let Some((wal_lsn, bytes)) = self.wal.out.pop_front() else {
                continue;
            };
            self.sent = self.sent.max(wal_lsn);
            xlog_data(wal_lsn, &bytes, &mut self.frame);
            let q = self.q.as_mut().expect("queue is open between steps");
            let r = self.follower.handle_frame_slice(q, self.now, &self.frame);
            if r.is_err() {
                // A process restart (if not a violation): its new session goes on next step.
                return self.machine_result("handle", r);
            }
            self.tally.messages += 1;
        }
        Ok(())
    }

    /// The status updates the machine sent, as the walsender reads them.
    fn status_updates(&mut self) -> Result<(), Violation> {
        while let Some(frame) = self.follower.poll_transmit() {
            let body = frame.get(5..).unwrap_or_default();
            let (write, flush) = match ReplicationMessage::decode_from_client(body) {
                Ok(ReplicationMessage::StandbyStatusUpdate(u)) => (u.write, u.flush),
                other => {
                    return Err(fail(
                        "queue-accepts-valid-stream",
                        format!("the follower sent {frame:?}: {other:?}"),
                    ))
                }
            };
            self.tally.status_updates += 1;
            self.tally.reported = (write, flush);
            self.tally.changed = true;
            self.report(flush);
        }
        self.check_progress()
    }

    /// `progress-true`: whenever the machine sent a status update, started a session or
    /// counted a reconnect, `poll_progress` hands out its progress (once), and that progress
    /// counts what the simulator saw: messages received, status updates and what the last one
    /// said, sessions, reconnects and where the latest session started.
    fn check_progress(&mut self) -> Result<(), Violation> {
        let due = std::mem::take(&mut self.tally.changed);
        let t = &self.tally;
        let got = self.follower.poll_progress().map(|p| {
            (
                p.messages,
                p.status_updates,
                p.sessions,
                p.reconnects,
                p.start_lsn,
                (p.reported_write, p.reported_flush),
            )
        });
        let want = (
            t.messages,
            t.status_updates,
            t.sessions,
            t.reconnects,
            t.start_lsn,
            t.reported,
        );
        match got {
            Some(got) if got != want => Err(fail(
                "progress-true",
                format!("the follower's progress says {got:?}; it did {want:?}"),
            )),
            None if due => Err(fail(
                "progress-true",
                format!("the follower did {want:?} and published no progress"),
            )),
            _ => Ok(()),
        }
    }

    /// The publisher takes a reported flush LSN as the slot's `confirmed_flush_lsn`.
    fn report(&mut self, lsn: Lsn) {
        if lsn < self.reported_here {
            // `flush_lsn()` falls back to the last flush point while a completed transaction
            // waits for its fsync, below a receive position reported before it arrived.
            // Harmless (the slot only moves forward), but it is recorded.
            trace!(
                self.t,
                "flush LSN went back from {} to {lsn}",
                self.reported_here
            );
        } else {
            // A hundred of these per seed: put together without `fmt` (the same text).
            trace_line!(self.t, "status: flush ", lsn_str(lsn, &mut [0u8; 17]));
        }
        self.reported_here = self.reported_here.max(lsn);
        if lsn > self.reported {
            self.reported = lsn;
            self.publ.confirm(lsn);
        }
    }

    /// A machine call's outcome: a queue failure that is not the stream's fault restarts the
    /// process over the same (crashed) disk; anything else is a violation.
    fn machine_result(&mut self, what: &str, r: Result<(), Failure>) -> Result<(), Violation> {
        match r {
            Ok(()) => Ok(()),
            Err(Failure::Queue(e)) => self.on_error(what, e),
            Err(f) => Err(fail("queue-accepts-valid-stream", format!("{what}: {f}"))),
        }
    }

    /// The connection to the publisher breaks (the walsender is gone): what arrived is kept
    /// and the machine says when to connect again.
    pub(super) fn break_connection(&mut self, why: &str) -> Result<(), Violation> {
        let q = self.q.as_mut().expect("queue is open between steps");
        match self.follower.handle_broken(q, true, why) {
            Ok(Some(delay)) => {
                self.tally.reconnects += 1;
                self.tally.changed = true;
                let micros = i64::try_from(delay.as_micros()).unwrap_or(i64::MAX);
                self.reconnect_at = Some(UnixTime(self.now.0.saturating_add(micros)));
                self.conn.clear();
                self.wal.out.clear();
                trace!(self.t, "{why}: reconnect in {} ms", micros / 1000);
                Ok(())
            }
            Ok(None) => Err(fail(
                "recovery-succeeds",
                "a retryable break stopped".into(),
            )),
            Err(Failure::Queue(e)) => self.on_error("break", e),
            Err(f) => Err(fail("queue-accepts-valid-stream", format!("break: {f}"))),
        }
    }

    /// A connect attempt once the backoff passed: it may fail again (the publisher is still
    /// away); otherwise a session starts where the machine says.
    fn connect(&mut self) -> Result<(), Violation> {
        if self.roll(self.mix.follow.connect_fail_percent) {
            return self.break_connection("connect failed");
        }
        let q = self.q.as_mut().expect("queue is open between steps");
        match self.follower.start_session(q, self.now) {
            Ok(start) => self.started(start),
            Err(f) if f.is_retryable() => self.break_connection(&f.to_string()),
            Err(Failure::Queue(e)) => self.on_error("restart_stream", e),
            Err(f) => Err(fail("queue-accepts-valid-stream", format!("start: {f}"))),
        }
    }

    /// `START_REPLICATION` at `start` was accepted.
    pub(super) fn started(&mut self, start: Lsn) -> Result<(), Violation> {
        let r = self.follower.handle_started(self.now, start);
        self.machine_result("started", r)?;
        self.tally.sessions += 1;
        self.tally.start_lsn = start;
        self.tally.changed = true;
        self.reconnect_at = None;
        self.start_replication(start);
        Ok(())
    }

    /// The walsender's side of `START_REPLICATION`: it re-sends from the later of the
    /// requested LSN and its slot's `confirmed_flush_lsn`.
    fn start_replication(&mut self, start: Lsn) {
        // The subscriber's origin as an apply worker reads it at start: durable.
        let origin = self.sub.durable_origin();
        let requested = start.max(origin);
        let (from, idx) = self.publ.resend_from(requested);
        let mut bufs = [[0u8; 17]; 4];
        let [b0, b1, b2, b3] = &mut bufs;
        trace_line!(
            self.t,
            "START_REPLICATION ",
            lsn_str(requested, b0),
            " (resume ",
            lsn_str(start, b1),
            ", origin ",
            lsn_str(origin, b2),
            ") -> from ",
            lsn_str(from, b3),
            ", ",
            idx.len(),
            " messages"
        );
        self.conn = idx.into();
        self.wal.new_session();
        self.sent = Lsn(0);
        self.session += 1;
    }
}
