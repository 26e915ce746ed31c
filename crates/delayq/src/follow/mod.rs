//! [`FollowMachine`]: from a publisher's replication stream (pgoutput over `START_REPLICATION
//! … LOGICAL`) into the queue and back to standby status updates — the logic of `pgyard
//! delayq follow` and of the follower in `run`, as a sans-IO machine that the tokio adapter
//! drives over a socket and the simulator over its walsender model.
//!
//! What it owns: handing every XLogData message to [`DelayQueue::handle`] (through
//! [`crate::pgoutput::event`]), keepalives ([`DelayQueue::note_received`]), the flush points
//! (every [`FollowConfig::flush_every`] messages, or [`FollowConfig::flush_interval`] after the
//! first unflushed one), the standby status updates (write = received, flush = apply = the
//! queue's durable horizon; after a flush that moved it, at once when a keepalive asks, and at
//! least every [`FollowConfig::status_interval`]), flow control (a message the queue refuses
//! for now waits and is retried before anything more is read; nothing is read while the queue
//! says [`Flow::Pause`]), and the reconnect backoff ([`FollowConfig::reconnect_delay_min`]
//! doubling up to [`FollowConfig::reconnect_delay_max`], back to the minimum once
//! `START_REPLICATION` is accepted).
//!
//! It reads no clock — `now` (wall time, as the queue takes it) is an argument, and a clock
//! that steps back counts as every interval passing — opens no socket and spawns nothing. The
//! queue is passed into each call, so `pgyard delayq run` can hold its lock for one call at a
//! time while an apply thread uses the same queue.
//!
//! Driving it:
//!
//! * [`FollowMachine::start_session`] before each connect: abandons the transactions still in
//!   progress and says where to start (`START_REPLICATION` at the queue's resume LSN).
//! * [`FollowMachine::handle_started`] once the server answered with CopyBothResponse.
//! * [`FollowMachine::handle_frame`] with the body of every CopyData from the server, while
//!   [`FollowMachine::wants_read`]; [`FollowMachine::handle_timeout`] at
//!   [`FollowMachine::poll_timeout`] (extra calls are harmless).
//! * After every call: send every [`FollowMachine::poll_transmit`] (whole CopyData frames) and
//!   publish [`FollowMachine::poll_progress`].
//! * [`FollowMachine::handle_broken`] when the connection breaks or cannot be made: it keeps
//!   what arrived and says how long to wait before [`FollowMachine::start_session`] again.
//! * [`FollowMachine::finish`] to stop: a last flush and status update.
//!
//! A [`Failure`] is sticky: once a call returned one, every later call returns it again.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{BufMut, BytesMut};

use pgyard_types::{Lsn, PgTimestamp, UnixTime};
use pgyard_wire::pgoutput::{PgOutputDecoder, ProtoVersion};
use pgyard_wire::replication::{ReplicationMessage, StandbyStatusUpdate};

use crate::apply::elapsed;
use crate::{Accepted, DelayQueue, Error, Event, Flow, Inspection, Received, Storage};

#[cfg(test)]
mod tests;

/// How a [`FollowMachine`] paces its work. The defaults are what `pgyard delayq follow` uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FollowConfig {
    /// A flush point after this many queued messages ...
    pub flush_every: u64,
    /// ... or this long after the first message not yet flushed.
    pub flush_interval: Duration,
    /// The longest time between two standby status updates.
    pub status_interval: Duration,
    /// The wait before the first reconnect after a connection broke ...
    pub reconnect_delay_min: Duration,
    /// ... doubling after each failed attempt up to this.
    pub reconnect_delay_max: Duration,
    /// Whether [`Progress::inspection`] is filled in at each flush point (it walks every
    /// queued transaction, so only for someone who reads it).
    pub inspect: bool,
}

impl Default for FollowConfig {
    fn default() -> Self {
        FollowConfig {
            flush_every: 8192,
            flush_interval: Duration::from_millis(100),
            status_interval: Duration::from_secs(1),
            reconnect_delay_min: Duration::from_millis(100),
            reconnect_delay_max: Duration::from_secs(10),
            inspect: false,
        }
    }
}

/// Where a follower stands (the tokio adapter publishes it on a watch channel).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The LSN the latest `START_REPLICATION` was sent with.
    pub start_lsn: Lsn,
    /// pgoutput messages received since the machine started (over every connection).
    pub messages: u64,
    /// Messages the queue dropped as already queued (re-sent after a restart).
    pub duplicates: u64,
    /// The `write` of the last status update sent.
    pub reported_write: Lsn,
    /// The `flush` (and `apply`) of the last status update sent.
    pub reported_flush: Lsn,
    /// Status updates sent.
    pub status_updates: u64,
    /// The queue's summary after the last flush point (only with [`FollowConfig::inspect`]).
    pub inspection: Option<Inspection>,
    /// Connections that broke (or could not be made) and were tried again.
    pub reconnects: u64,
    /// Why the latest reconnect was needed.
    pub last_error: Option<String>,
    /// `START_REPLICATION` commands the server accepted.
    pub sessions: u64,
}

/// Why the machine stopped. Once a call returns one, every later call returns it again
/// (except a retryable refusal of [`FollowMachine::start_session`], which is not kept).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// The queue failed (poisoned, corrupt), or refused for now (out of space) where that
    /// cannot wait.
    #[error("{0}")]
    Queue(Error),
    /// The server sent something the replication protocol does not allow here.
    #[error("{0}")]
    Protocol(String),
    /// A call the machine's state does not allow (the adapter's mistake).
    #[error("follow machine misuse: {0}")]
    Misuse(String),
}

impl Failure {
    /// Whether reconnecting later may cure it: a queue refusal that goes away as space is
    /// freed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Failure::Queue(e) if e.is_retryable())
    }
}

/// Realistic bugs for the simulator to catch; compiled only with the `planted-bugs` feature
/// and off until switched on with [`FollowMachine::with_planted_bug`].
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Reports the queue's write position as flushed: confirms received data before the queue
    /// made it durable (flush before fsync).
    ReportWriteAsFlush,
}

/// The planted bug in force (never anything without the `planted-bugs` feature).
#[cfg(feature = "planted-bugs")]
type Bug = Option<PlantedBug>;
#[cfg(not(feature = "planted-bugs"))]
type Bug = Option<std::convert::Infallible>;

/// Where the connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No connection: [`FollowMachine::start_session`] is next.
    Down,
    /// `START_REPLICATION` is under way.
    Starting,
    /// The stream runs.
    Streaming,
    /// [`FollowMachine::finish`] ran, or a break that reconnecting cannot cure.
    Stopped,
}

/// One message the queue refused for now (full, or no space), retried before reading on. It
/// keeps the frame it came in (the pgoutput message is the body's tail from `at`), so a large
/// message is not copied to wait.
#[derive(Debug)]
struct Pending {
    wal_lsn: Lsn,
    end: Lsn,
    body: Vec<u8>,
    at: usize,
    event: Event,
    retry_at: UnixTime,
}

/// Where a refused message lies in its frame, until the frame is kept as [`Pending`].
#[derive(Debug)]
struct Refused {
    wal_lsn: Lsn,
    end: Lsn,
    at: usize,
    event: Event,
}

/// The follow machine (see the module documentation).
#[derive(Debug)]
pub struct FollowMachine {
    config: FollowConfig,
    phase: Phase,
    decoder: PgOutputDecoder,
    progress: Progress,
    progress_changed: bool,
    since_flush: u64,
    first_unflushed: Option<UnixTime>,
    last_status: UnixTime,
    pending: Option<Pending>,
    backoff: Duration,
    transmits: VecDeque<Vec<u8>>,
    failed: Option<Failure>,
    bug: Bug,
}

/// `t + d`, saturating at the end of time.
fn later(t: UnixTime, d: Duration) -> UnixTime {
    UnixTime(t.0.saturating_add(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)))
}

impl FollowMachine {
    /// A machine with no connection yet: [`FollowMachine::start_session`] is next.
    pub fn new(config: FollowConfig, now: UnixTime) -> FollowMachine {
        FollowMachine {
            backoff: config.reconnect_delay_min,
            config,
            phase: Phase::Down,
            decoder: PgOutputDecoder::new(ProtoVersion::V4),
            progress: Progress::default(),
            progress_changed: false,
            since_flush: 0,
            first_unflushed: None,
            last_status: now,
            pending: None,
            transmits: VecDeque::new(),
            failed: None,
            bug: None,
        }
    }

    /// Switches a planted bug on (simulator tests only).
    #[cfg(feature = "planted-bugs")]
    pub fn with_planted_bug(mut self, bug: PlantedBug) -> Self {
        self.bug = Some(bug);
        self
    }

    /// Whether the next flush points fill in [`Progress::inspection`] (the adapter turns it on
    /// only while someone watches).
    pub fn set_inspect(&mut self, inspect: bool) {
        self.config.inspect = inspect;
    }

    /// Where the machine stands.
    pub fn progress(&self) -> &Progress {
        &self.progress
    }

    /// The progress, when it changed since the last call (a status update, a session, a
    /// reconnect): what the adapter publishes.
    pub fn poll_progress(&mut self) -> Option<&Progress> {
        std::mem::take(&mut self.progress_changed).then_some(&self.progress)
    }

    /// The next frame to send to the server (a CopyData holding a standby status update),
    /// oldest first.
    pub fn poll_transmit(&mut self) -> Option<Vec<u8>> {
        self.transmits.pop_front()
    }

    /// While streaming, when [`FollowMachine::handle_timeout`] is due at the latest (the next
    /// flush point, status update or retry of a refused message); `None` otherwise.
    pub fn poll_timeout(&self) -> Option<UnixTime> {
        if self.phase != Phase::Streaming || self.failed.is_some() {
            return None;
        }
        let status = later(self.last_status, self.config.status_interval);
        let other = match (&self.pending, self.first_unflushed) {
            (Some(p), _) => Some(p.retry_at),
            (None, Some(first)) => Some(later(first, self.config.flush_interval)),
            (None, None) => None,
        };
        Some(other.map_or(status, |t| t.min(status)))
    }

    /// Whether to read the next frame: streaming, no refused message waiting, and the queue
    /// below its high watermark (above it, only status updates go out until it drains).
    pub fn wants_read<S: Storage>(&self, q: &DelayQueue<S>) -> bool {
        self.phase == Phase::Streaming
            && self.failed.is_none()
            && self.pending.is_none()
            && q.flow() == Flow::Read
    }

    /// Before each connect: abandons the transactions still in progress in the queue and
    /// returns the LSN to pass to `START_REPLICATION` (the queue's resume LSN). A retryable
    /// refusal (no space) is not kept: hand it to [`FollowMachine::handle_broken`].
    pub fn start_session<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<Lsn, Failure> {
        self.check()?;
        match q.restart_stream(now) {
            Ok(()) => {}
            Err(e) if e.is_retryable() => return Err(Failure::Queue(e)),
            Err(e) => return Err(self.fail(Failure::Queue(e))),
        }
        self.phase = Phase::Starting;
        Ok(q.resume_lsn())
    }

    /// The server accepted `START_REPLICATION` at `start`: the stream runs, and the reconnect
    /// backoff starts afresh.
    pub fn handle_started(&mut self, now: UnixTime, start: Lsn) -> Result<(), Failure> {
        self.check()?;
        if self.phase != Phase::Starting {
            return Err(self.fail(Failure::Misuse(format!(
                "a session started while {:?}",
                self.phase
            ))));
        }
        self.phase = Phase::Streaming;
        self.decoder = PgOutputDecoder::new(ProtoVersion::V4);
        self.backoff = self.config.reconnect_delay_min;
        self.last_status = now;
        self.progress.start_lsn = start;
        self.progress.sessions += 1;
        self.progress_changed = true;
        Ok(())
    }

    /// The body of one CopyData from the server: XLogData (a pgoutput message for the queue)
    /// or a keepalive. Then whatever is due. A message the queue refuses for now waits in
    /// `body` itself (no copy).
    pub fn handle_frame<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
        body: Vec<u8>,
    ) -> Result<(), Failure> {
        if let Some(w) = self.frame(q, now, &body)? {
            self.wait(w, body, now);
        }
        self.service(q, now)
    }

    /// As [`FollowMachine::handle_frame`], for a body the caller keeps (a reused buffer): it
    /// is copied only when the queue refuses its message for now and it has to wait.
    pub fn handle_frame_slice<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
        body: &[u8],
    ) -> Result<(), Failure> {
        if let Some(w) = self.frame(q, now, body)? {
            self.wait(w, body.to_vec(), now);
        }
        self.service(q, now)
    }

    /// One frame up to what is due after it: `Some` when its message was refused for now
    /// and must wait (the caller keeps the body as [`Pending`]).
    fn frame<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
        body: &[u8],
    ) -> Result<Option<Refused>, Failure> {
        self.check()?;
        if self.phase != Phase::Streaming || self.pending.is_some() {
            let why = format!("a frame while {:?} (or a message waits)", self.phase);
            return Err(self.fail(Failure::Misuse(why)));
        }
        let msg = match ReplicationMessage::decode_from_server(body) {
            Ok(m) => m,
            Err(e) => {
                let why = format!("replication message: {e}");
                return Err(self.fail(Failure::Protocol(why)));
            }
        };
        match msg {
            ReplicationMessage::XLogData(x) => {
                let event = match self.decoder.decode(x.data) {
                    Ok(m) => crate::pgoutput::event(&m),
                    Err(e) => {
                        let why = format!("pgoutput message at {}: {e}", x.start);
                        return Err(self.fail(Failure::Protocol(why)));
                    }
                };
                self.progress.messages += 1;
                let (wal_lsn, end, at) = (x.start, x.end, body.len() - x.data.len());
                let payload = body.get(at..).unwrap_or_default();
                if !self.offer(q, now, wal_lsn, end, payload, event)? {
                    return Ok(Some(Refused {
                        wal_lsn,
                        end,
                        at,
                        event,
                    }));
                }
            }
            ReplicationMessage::PrimaryKeepalive(k) => {
                q.note_received(k.wal_end);
                if k.reply_requested || q.flush_lsn() > self.progress.reported_flush {
                    // Make what is received durable first, so the answer confirms it all.
                    self.flush(q, now)?;
                    self.status(q, now);
                }
            }
            // Client-side message types are refused by decode_from_server.
            _ => {}
        }
        Ok(None)
    }

    /// The refused message `w` waits in `body` (its frame) for a retry.
    fn wait(&mut self, w: Refused, body: Vec<u8>, now: UnixTime) {
        self.pending = Some(Pending {
            wal_lsn: w.wal_lsn,
            end: w.end,
            body,
            at: w.at,
            event: w.event,
            retry_at: self.retry_at(now),
        });
    }

    /// Time passed: retries a refused message, flushes and reports when due.
    pub fn handle_timeout<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<(), Failure> {
        self.check()?;
        if self.phase != Phase::Streaming {
            return Ok(());
        }
        self.service(q, now)
    }

    /// The connection broke, or could not be made, or `START_REPLICATION` was refused. What
    /// arrived is kept (flushed; the publisher re-sends the rest, and a refused message).
    /// `Some(delay)` to wait before [`FollowMachine::start_session`] again when `retryable`;
    /// `None` (stopped) when not.
    pub fn handle_broken<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        retryable: bool,
        why: &str,
    ) -> Result<Option<Duration>, Failure> {
        self.check()?;
        self.pending = None;
        self.transmits.clear();
        self.phase = Phase::Down;
        self.flush_soft(q)?;
        if !retryable {
            self.phase = Phase::Stopped;
            return Ok(None);
        }
        self.progress.reconnects += 1;
        self.progress.last_error = Some(why.trim_end().to_owned());
        self.progress_changed = true;
        let delay = self.backoff;
        self.backoff = (self.backoff * 2).min(self.config.reconnect_delay_max);
        Ok(Some(delay))
    }

    /// Stops: while streaming, a last try of a refused message, a last flush and status
    /// update (to send before CopyDone).
    pub fn finish<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<(), Failure> {
        self.check()?;
        if self.phase == Phase::Streaming {
            self.retry_pending(q, now)?;
            self.flush(q, now)?;
            self.status(q, now);
        }
        self.pending = None;
        self.phase = Phase::Stopped;
        if self.config.inspect {
            self.progress.inspection = Some(q.inspect());
        }
        self.progress_changed = true;
        Ok(())
    }

    fn check(&self) -> Result<(), Failure> {
        match &self.failed {
            Some(f) => Err(f.clone()),
            None => Ok(()),
        }
    }

    fn fail(&mut self, f: Failure) -> Failure {
        self.failed = Some(f.clone());
        f
    }

    /// When to try a refused message again: after a flush interval (at least a millisecond,
    /// so an interval of zero does not make the adapter spin).
    fn retry_at(&self, now: UnixTime) -> UnixTime {
        later(
            now,
            self.config.flush_interval.max(Duration::from_millis(1)),
        )
    }

    /// What is due after an input: the refused message, a flush point, a status update.
    fn service<S: Storage>(&mut self, q: &mut DelayQueue<S>, now: UnixTime) -> Result<(), Failure> {
        self.retry_pending(q, now)?;
        if let Some(first) = self.first_unflushed {
            if self.since_flush >= self.config.flush_every
                || elapsed(first, now, self.config.flush_interval)
            {
                self.flush(q, now)?;
                if q.flush_lsn() > self.progress.reported_flush {
                    self.status(q, now);
                }
            }
        }
        if elapsed(self.last_status, now, self.config.status_interval) {
            self.status(q, now);
        }
        Ok(())
    }

    /// Hands one message to the queue; `false` after a retryable refusal (the caller keeps it
    /// as [`Pending`]).
    fn offer<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
        wal_lsn: Lsn,
        end: Lsn,
        payload: &[u8],
        event: Event,
    ) -> Result<bool, Failure> {
        let received = Received {
            wal_lsn,
            payload,
            event,
        };
        match q.handle(now, received) {
            Ok(a) => {
                if a == Accepted::Duplicate {
                    self.progress.duplicates += 1;
                }
                q.note_received(end);
                self.since_flush += 1;
                self.first_unflushed.get_or_insert(now);
                Ok(true)
            }
            Err(e) if e.is_retryable() => Ok(false),
            Err(e) => Err(self.fail(Failure::Queue(e))),
        }
    }

    fn retry_pending<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Result<(), Failure> {
        let Some(mut p) = self.pending.take() else {
            return Ok(());
        };
        let payload = p.body.get(p.at..).unwrap_or_default();
        if !self.offer(q, now, p.wal_lsn, p.end, payload, p.event)? {
            p.retry_at = self.retry_at(now);
            self.pending = Some(p);
        }
        Ok(())
    }

    /// A flush point. Out of space, the records stay buffered and nothing newer is confirmed;
    /// tried again a flush interval later (not at once, which would spin).
    fn flush<S: Storage>(&mut self, q: &mut DelayQueue<S>, now: UnixTime) -> Result<(), Failure> {
        match q.flush() {
            Ok(_) => {}
            Err(e) if e.is_retryable() => {
                if self.first_unflushed.is_some() {
                    self.first_unflushed = Some(now);
                }
                return Ok(());
            }
            Err(e) => return Err(self.fail(Failure::Queue(e))),
        }
        self.since_flush = 0;
        self.first_unflushed = None;
        if self.config.inspect {
            self.progress.inspection = Some(q.inspect());
        }
        Ok(())
    }

    /// A flush after a break: out of space is no reason to stop (the next session flushes).
    fn flush_soft<S: Storage>(&mut self, q: &mut DelayQueue<S>) -> Result<(), Failure> {
        match q.flush() {
            Ok(_) => {
                self.since_flush = 0;
                self.first_unflushed = None;
                Ok(())
            }
            Err(e) if e.is_retryable() => Ok(()),
            Err(e) => Err(self.fail(Failure::Queue(e))),
        }
    }

    /// Queues a standby status update: write = received, flush = apply = durable horizon.
    fn status<S: Storage>(&mut self, q: &DelayQueue<S>, now: UnixTime) {
        let flush = q.flush_lsn();
        let write = q.write_lsn().max(flush);
        let flush = if self.reports_write_as_flush() {
            write
        } else {
            flush
        };
        let update = ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
            write,
            flush,
            apply: flush,
            send_time: PgTimestamp::from_unix(now),
            reply_requested: false,
        });
        // A whole CopyData ('d', the length counting itself, the message), ready to write:
        // encoded in place after its header, one allocation.
        let mut frame = BytesMut::with_capacity(5 + update.encoded_len());
        frame.put_u8(b'd');
        frame.put_u32(u32::try_from(4 + update.encoded_len()).unwrap_or(u32::MAX));
        update.encode(&mut frame);
        let frame = Vec::from(frame);
        self.transmits.push_back(frame);
        self.last_status = now;
        self.progress.reported_write = write;
        self.progress.reported_flush = flush;
        self.progress.status_updates += 1;
        self.progress_changed = true;
    }

    /// Whether the planted bug `ReportWriteAsFlush` is on.
    fn reports_write_as_flush(&self) -> bool {
        #[cfg(feature = "planted-bugs")]
        return self.bug == Some(PlantedBug::ReportWriteAsFlush);
        // Without the feature the bug type has no values: never.
        #[cfg(not(feature = "planted-bugs"))]
        return self.bug.is_some();
    }
}
