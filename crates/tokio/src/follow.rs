//! Following a publisher's logical slot into a durable delay queue (`pgyard delayq follow`).
//!
//! The decisions are the sans-IO [`FollowMachine`] (`pgyard_delayq::follow`), which the
//! simulator drives too: it feeds every XLogData message to [`DelayQueue::handle`] through
//! [`pgyard_delayq::pgoutput::event`], makes records durable at flush points (every
//! [`FollowOptions::flush_every`] messages, or [`FollowOptions::flush_interval`] after the
//! first unflushed one), stops reading while the queue is full, and writes the standby status
//! updates, which report:
//!
//! * `write` = the largest LSN received ([`DelayQueue::write_lsn`]);
//! * `flush` = the queue's durable horizon ([`DelayQueue::flush_lsn`]);
//! * `apply` = the same durable horizon. The queue owns the data from the moment it is
//!   durable: applying it to a subscriber later is the queue's business, not the publisher's,
//!   so a publisher waiting for `synchronous_commit = remote_apply` is not held back by the
//!   delay, and nothing the publisher keeps (WAL, catalog rows) depends on the apply.
//!
//! This module is its I/O: [`run`] connects through the connect machine with
//! `replication=database` (set through the connect options, not by editing the string), starts
//! pgoutput (`proto_version 4`, `streaming on`, `messages true`) where the machine says (the
//! queue's [`resume_lsn`](pgyard_delayq::DelayQueue::resume_lsn)), reads frames while the
//! machine wants them, sleeps on tokio timers until its next deadline (wall time now is read
//! here and passed in), sends what it queues, and publishes its [`Progress`].
//!
//! So while every transaction is held back for the delay, the slot's `confirmed_flush_lsn`
//! and `restart_lsn` keep advancing and the publisher recycles its WAL. A status update goes
//! out after every flush that moved the horizon, on every keepalive (at once when the server
//! asks for a reply), and at least every [`FollowOptions::status_interval`].
//!
//! A broken connection is not the end: [`run`] reconnects after the machine's bounded
//! exponential backoff ([`FollowOptions::reconnect_delay_min`] doubling up to
//! [`FollowOptions::reconnect_delay_max`]; back to the minimum once `START_REPLICATION` is
//! accepted again), abandons the transactions still in progress, and starts again at the
//! queue's resume LSN; whatever the publisher re-sends is dropped by the queue as a duplicate.
//! Errors that reconnecting cannot cure ([`FollowError::is_retryable`]: a missing slot or
//! publication, failed authentication, a bad connection string, a broken queue) end it.
//!
//! Applying is not this loop's business: `pgyard delayq run` shares the queue
//! ([`run_shared`], [`SharedQueue`]) with an apply thread that marks transactions applied and
//! purges. Alone ([`run`]) the queue only grows: at its high watermark the loop stops reading
//! (and keeps reporting) until it is stopped.

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::BytesMut;
use pgyard_delayq::follow::{Failure, FollowConfig, FollowMachine};
use pgyard_delayq::{Config, DelayQueue, FsStorage};
use pgyard_types::UnixTime;
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::{SqlState, Verbosity};
use pgyard_wire::pgoutput::ProtoVersion;
use pgyard_wire::replication::{start_replication_pgoutput, PgOutputOptions, Streaming};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{ConnectOptions, ErrorKind, Session};
use pgyard_driver::decode;

mod pace;
use pace::{pace_socket, Pulse};

/// What [`run`] needs: where to connect, which slot and publication, the delay and the queue
/// directory, plus the flush and status cadence.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// The publisher's connection string; `replication=database` is set over it (through
    /// [`pgyard_driver::ConnectOptions::set`], as a later keyword in the string would be).
    pub conninfo: String,
    /// The logical replication slot (pgoutput) to stream from.
    pub slot: String,
    /// The publication to ask pgoutput for.
    pub publication: String,
    /// How long every transaction is held back after its commit.
    pub delay: Duration,
    /// The queue directory (created if missing).
    pub dir: PathBuf,
    /// A flush point after this many queued messages ...
    pub flush_every: u64,
    /// ... or this long after the first message not yet flushed.
    pub flush_interval: Duration,
    /// The longest time between two standby status updates.
    pub status_interval: Duration,
    /// Seed, strategy or injected inputs for the connect.
    pub connect: ConnectOptions,
    /// The wait before the first reconnect after a connection broke ...
    pub reconnect_delay_min: Duration,
    /// ... doubling after each failed attempt up to this.
    pub reconnect_delay_max: Duration,
    /// Whether [`Progress::inspection`] is filled in at each flush point for watchers. It
    /// walks every queued transaction: with a deep queue and frequent flushes it cost more
    /// than the follower's own work, so only watchers that read it ask for it.
    pub inspect: bool,
    /// Whether to ask pgoutput for `two_phase`: prepared transactions are sent at PREPARE
    /// (and the queue holds them until COMMIT PREPARED) rather than whole at COMMIT PREPARED.
    pub two_phase: bool,
}

impl FollowOptions {
    /// Options with the default cadence (flush every 8,192 messages or 100 ms, status at least
    /// every second, reconnects after 100 ms doubling up to 10 s).
    pub fn new(
        conninfo: impl Into<String>,
        slot: impl Into<String>,
        publication: impl Into<String>,
        delay: Duration,
        dir: impl Into<PathBuf>,
    ) -> Self {
        FollowOptions {
            conninfo: conninfo.into(),
            slot: slot.into(),
            publication: publication.into(),
            delay,
            dir: dir.into(),
            flush_every: 8192,
            flush_interval: Duration::from_millis(100),
            status_interval: Duration::from_secs(1),
            connect: ConnectOptions::default(),
            reconnect_delay_min: Duration::from_millis(100),
            reconnect_delay_max: Duration::from_secs(10),
            inspect: false,
            two_phase: false,
        }
    }
}

impl FollowOptions {
    /// The follow machine's pacing, from these options.
    pub fn machine_config(&self) -> FollowConfig {
        FollowConfig {
            flush_every: self.flush_every,
            flush_interval: self.flush_interval,
            status_interval: self.status_interval,
            reconnect_delay_min: self.reconnect_delay_min,
            reconnect_delay_max: self.reconnect_delay_max,
            inspect: self.inspect,
        }
    }
}

/// Where a running [`run`] stands, published on a watch channel (see [`run_observed`]): the
/// follow machine's own account.
pub use pgyard_delayq::follow::Progress;

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The connect failed, or the connection broke (libpq's texts).
    #[error("{0}")]
    Connection(#[from] crate::Error),
    /// The server refused a command or ended the connection (its ErrorResponse, rendered as
    /// libpq does).
    #[error("{message}")]
    Server {
        /// The rendered error.
        message: String,
        /// Its SQLSTATE (empty if the server sent none).
        sqlstate: String,
    },
    /// The server ended the replication stream (CopyDone), e.g. when it shuts down.
    #[error("the server ended the replication stream")]
    StreamEnded,
    /// The queue refused a message or failed to store it.
    #[error("{0}")]
    Queue(#[from] pgyard_delayq::Error),
    /// The queue directory could not be created or opened.
    #[error("{0}")]
    Dir(String),
    /// The server sent something the replication protocol does not allow here.
    #[error("replication protocol: {0}")]
    Protocol(String),
    /// This adapter called the follow machine out of turn (a bug here, never the server's).
    #[error("{0}")]
    Misuse(String),
}

impl From<Failure> for FollowError {
    fn from(f: Failure) -> Self {
        match f {
            Failure::Queue(e) => FollowError::Queue(e),
            Failure::Protocol(p) => FollowError::Protocol(p),
            Failure::Misuse(_) => FollowError::Misuse(f.to_string()),
        }
    }
}

impl FollowError {
    /// True when connecting again may cure it: the connection broke or could not be made for a
    /// passing reason (refused, reset, timed out, the server starting up or shutting down, too
    /// many clients), the walsender was terminated, or the slot is still held by a walsender
    /// that is going away (SQLSTATE classes 08, 53, 57 and 55006).
    pub fn is_retryable(&self) -> bool {
        match self {
            // By the failure's kind: the connection broke or could not be made for a passing
            // reason, or the server refused for one; never by matching texts.
            FollowError::Connection(e) => e.kind().is_retryable(),
            // The connect machine's rule for refusals, and a slot or origin still held by a
            // walsender that is going away (55006), which passes too.
            FollowError::Server { sqlstate, .. } => {
                sqlstate == "55006"
                    || SqlState::from_bytes(sqlstate.as_bytes())
                        .is_some_and(|s| ErrorKind::Refused(s).is_retryable())
            }
            FollowError::StreamEnded => true,
            FollowError::Queue(e) => e.is_retryable(),
            FollowError::Dir(_) | FollowError::Protocol(_) | FollowError::Misuse(_) => false,
        }
    }
}

/// Streams `options.slot` into the queue in `options.dir` until `stop` resolves (or an error
/// that reconnecting cannot cure ends it); see the module documentation. Returns the final
/// progress.
pub async fn run(
    options: &FollowOptions,
    stop: impl Future<Output = ()>,
) -> Result<Progress, FollowError> {
    let (tx, _) = watch::channel(Progress::default());
    run_observed(options, stop, &tx).await
}

/// A queue shared between the follower and an applier in the same process
/// (`pgyard delayq run`); each holds the lock only for one queue call, never across I/O.
pub type SharedQueue = Arc<Mutex<DelayQueue<FsStorage>>>;

/// Opens (and so recovers) the queue in `options.dir` for sharing.
pub fn open_shared(options: &FollowOptions) -> Result<SharedQueue, FollowError> {
    std::fs::create_dir_all(&options.dir)
        .map_err(|e| FollowError::Dir(format!("{}: {e}", options.dir.display())))?;
    let storage = FsStorage::open(&options.dir)
        .map_err(|e| FollowError::Dir(format!("{}: {e}", options.dir.display())))?;
    let config = Config {
        delay: options.delay,
        ..Config::default()
    };
    Ok(Arc::new(Mutex::new(DelayQueue::open(storage, config)?)))
}

/// The queue, whatever a panicking holder left behind (the queue checks itself: a call
/// after a failed write returns that error).
pub fn lock(queue: &SharedQueue) -> MutexGuard<'_, DelayQueue<FsStorage>> {
    queue.lock().unwrap_or_else(PoisonError::into_inner)
}

/// [`run`], publishing [`Progress`] on `progress` after every status update and reconnect.
pub async fn run_observed(
    options: &FollowOptions,
    stop: impl Future<Output = ()>,
    progress: &watch::Sender<Progress>,
) -> Result<Progress, FollowError> {
    let queue = open_shared(options)?;
    run_shared(options, &queue, stop, progress).await
}

/// [`run_observed`] on a queue that an applier may use at the same time.
pub async fn run_shared(
    options: &FollowOptions,
    queue: &SharedQueue,
    stop: impl Future<Output = ()>,
    progress: &watch::Sender<Progress>,
) -> Result<Progress, FollowError> {
    let mut m = FollowMachine::new(options.machine_config(), unix_now());
    let mut stop = std::pin::pin!(stop);
    loop {
        let e = match follow_once(options, queue, &mut m, stop.as_mut(), progress).await {
            Ok(()) => return Ok(m.progress().clone()),
            Err(e) => e,
        };
        let why = e.to_string();
        let broken = m.handle_broken(&mut lock(queue), e.is_retryable(), &why);
        publish(&mut m, progress);
        let delay = match broken {
            Ok(Some(delay)) => delay,
            // Reconnecting cannot cure it.
            Ok(None) => return Err(e),
            // The machine had failed already: `e` is that failure (or a worse one).
            Err(_) if !e.is_retryable() => return Err(e),
            // Keeping what arrived failed for good.
            Err(f) => return Err(f.into()),
        };
        tokio::select! {
            biased;
            () = stop.as_mut() => return Ok(m.progress().clone()),
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// One connection: `Ok` once stopped (after the machine's last flush and status update and a
/// clean goodbye), `Err` when it could not be made or broke.
async fn follow_once(
    options: &FollowOptions,
    queue: &SharedQueue,
    m: &mut FollowMachine,
    mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    progress: &watch::Sender<Progress>,
) -> Result<(), FollowError> {
    let start = m.start_session(&mut lock(queue), unix_now())?;
    // Over whatever the user's string says, as a later keyword would in libpq.
    let connect = options
        .connect
        .clone()
        .set(pgyard_driver::Keyword::Replication, "database");
    let mut session = tokio::select! {
        biased;
        () = stop.as_mut() => {
            m.finish(&mut lock(queue), unix_now())?;
            return Ok(());
        }
        s = crate::connect_with(&options.conninfo, &connect) => s?,
    };
    let mut pgoutput =
        PgOutputOptions::new(ProtoVersion::V4.number(), &[options.publication.as_str()]);
    pgoutput.streaming = Streaming::On;
    pgoutput.messages = true;
    pgoutput.two_phase = options.two_phase;
    session
        .send_query(&start_replication_pgoutput(&options.slot, start, &pgoutput))
        .await?;
    expect_copy_both(&mut session).await?;
    let paced = session.tcp().is_some_and(pace_socket);
    m.handle_started(unix_now(), start)?;
    publish(m, progress);
    let mut f = Follower {
        session,
        pulse: Pulse::new(paced),
        queue,
        m,
        options,
        progress,
    };
    match f.stream(stop).await {
        Ok(()) => f.finish().await,
        Err(e) => {
            f.session.close().await;
            Err(e)
        }
    }
}

/// Publishes the machine's progress when it changed.
fn publish(m: &mut FollowMachine, progress: &watch::Sender<Progress>) {
    if let Some(p) = m.poll_progress() {
        progress.send_replace(p.clone());
    }
}

/// What woke the loop.
enum Wake {
    Stop,
    Frame(Result<crate::RawFrame, crate::Error>),
    Timer,
    /// In flow, the socket had nothing more.
    Drained,
    /// A pause between pulses ended.
    Resume,
}

/// One connection's I/O around the machine.
struct Follower<'a> {
    session: Session,
    pulse: Pulse,
    queue: &'a SharedQueue,
    m: &'a mut FollowMachine,
    options: &'a FollowOptions,
    progress: &'a watch::Sender<Progress>,
}

impl Follower<'_> {
    /// Reads the stream until `stop` (`Ok`) or an error. The queue's lock is taken for one
    /// machine call at a time, never across a read, a send or a sleep.
    async fn stream(
        &mut self,
        mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), FollowError> {
        loop {
            let watched = self.options.inspect && self.progress.receiver_count() > 0;
            self.m.set_inspect(watched);
            let reading = self.m.wants_read(&lock(self.queue));
            let wake = deadline(
                self.m
                    .poll_timeout()
                    .unwrap_or_else(|| later(unix_now(), self.options.status_interval)),
            );
            let waited = Instant::now();
            let paused = self.pulse.paused(waited, wake);
            let may_read = reading && paused.is_none();
            let woke = if may_read && self.pulse.in_flow() {
                // In flow: take what is there, without waiting for more.
                tokio::select! {
                    biased;
                    () = stop.as_mut() => Wake::Stop,
                    r = self.session.recv_frame() => Wake::Frame(r),
                    () = std::future::ready(()) => Wake::Drained,
                }
            } else {
                tokio::select! {
                    biased;
                    () = stop.as_mut() => Wake::Stop,
                    r = self.session.recv_frame(), if may_read => Wake::Frame(r),
                    () = tokio::time::sleep_until(paused.unwrap_or(wake)) => match paused {
                        Some(_) => Wake::Resume,
                        None => Wake::Timer,
                    },
                }
            };
            match woke {
                Wake::Stop => return Ok(()),
                Wake::Frame(r) => {
                    let frame = r?;
                    self.pulse.after_frame(waited, Instant::now());
                    self.on_frames(frame)?;
                }
                Wake::Drained => {
                    self.pulse.drained(waited);
                    continue;
                }
                Wake::Resume => {
                    self.pulse.resume();
                    continue;
                }
                Wake::Timer => self.m.handle_timeout(&mut lock(self.queue), unix_now())?,
            }
            self.transmit().await?;
            publish(self.m, self.progress);
        }
    }

    /// Hands `first` and the frames the same read brought along to the machine, under one
    /// lock and one reading of the clock: a frame at a time, each paid two locks, four clock
    /// readings and a timer registered and dropped. Stops where the machine stops reading or
    /// a deadline of its has come, and after [`BURST_FRAMES`], so that status updates go out.
    fn on_frames(&mut self, first: crate::RawFrame) -> Result<(), FollowError> {
        let now = unix_now();
        let queue = self.queue;
        let mut q = lock(queue);
        let mut frame = first;
        for _ in 1..BURST_FRAMES {
            self.on_frame(&mut q, now, frame)?;
            if !self.m.wants_read(&q) || self.m.poll_timeout().is_some_and(|t| t <= now) {
                return Ok(());
            }
            match self.session.buffered_frame()? {
                Some(next) => frame = next,
                None => return Ok(()),
            }
        }
        self.on_frame(&mut q, now, frame)
    }

    /// Hands a CopyData to the machine; the server's other messages are this adapter's.
    fn on_frame(
        &mut self,
        q: &mut DelayQueue<FsStorage>,
        now: UnixTime,
        frame: crate::RawFrame,
    ) -> Result<(), FollowError> {
        match frame.tag {
            b'd' => Ok(self.m.handle_frame(q, now, frame.body)?),
            b'c' => Err(FollowError::StreamEnded),
            _ => {
                match decode(&frame)? {
                    BackendMessage::ErrorResponse(e) => return Err(server_error(&e)),
                    BackendMessage::ParameterStatus(p) => {
                        self.session.note_parameter(p.name, p.value)
                    }
                    // Notices (e.g. about the slot) are not the stream's business.
                    _ => {}
                }
                Ok(())
            }
        }
    }

    /// Sends the status updates the machine queued.
    async fn transmit(&mut self) -> Result<(), FollowError> {
        while let Some(frame) = self.m.poll_transmit() {
            self.session.send_frame(&frame).await?;
        }
        Ok(())
    }

    /// The stop: the machine's last flush and status update, CopyDone, and a clean goodbye
    /// (the server answers CopyDone and ReadyForQuery; waited for at most 2 s).
    async fn finish(mut self) -> Result<(), FollowError> {
        self.m.finish(&mut lock(self.queue), unix_now())?;
        self.transmit().await?;
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_copy_done(&mut buf);
        self.session.send_frame(&buf).await?;
        let drain = async {
            loop {
                match self.session.recv_frame().await {
                    Ok(f) if f.tag == b'Z' => return,
                    Ok(f) if f.tag == b'd' => {
                        // Data still in flight is dropped: it was never confirmed.
                    }
                    Ok(_) => {}
                    Err(_) => return,
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        publish(self.m, self.progress);
        self.session.close().await;
        Ok(())
    }
}

/// At most this many frames are handed to the machine between two looks at the clock, the
/// stop signal and the status updates to send (a 16 KiB read holds a few hundred at most).
const BURST_FRAMES: usize = 512;

/// `t + d` in wall time.
fn later(t: UnixTime, d: Duration) -> UnixTime {
    UnixTime(t.0.saturating_add(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)))
}

/// The tokio instant of a wall-time deadline (one already past is now). At most a day
/// ahead: an instant too far ahead overflows, and a wall clock set forward is no reason to
/// sleep for long (the machine reports at least every status interval anyway).
fn deadline(at: UnixTime) -> Instant {
    let ahead = u64::try_from(at.0.saturating_sub(unix_now().0)).unwrap_or(0);
    Instant::now() + Duration::from_micros(ahead.min(86_400_000_000))
}

fn server_error(e: &pgyard_wire::error_fields::ErrorFields<'_>) -> FollowError {
    FollowError::Server {
        message: e.render(Verbosity::Default, true),
        sqlstate: e
            .code()
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .unwrap_or_default(),
    }
}

/// Waits for CopyBothResponse after `START_REPLICATION`.
async fn expect_copy_both(session: &mut Session) -> Result<(), FollowError> {
    let mut error = None;
    loop {
        let frame = session.recv_frame().await?;
        match decode(&frame)? {
            BackendMessage::CopyBothResponse(_) => return Ok(()),
            BackendMessage::ErrorResponse(e) => {
                error.get_or_insert_with(|| server_error(&e));
            }
            BackendMessage::ReadyForQuery(_) => {
                return Err(error.unwrap_or_else(|| FollowError::Server {
                    message: "START_REPLICATION ended without starting a stream".to_owned(),
                    sqlstate: String::new(),
                }))
            }
            _ => {}
        }
    }
}

/// Wall time now, as the queue takes it.
fn unix_now() -> UnixTime {
    UnixTime(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
    )
}

#[cfg(test)]
mod tests {
    use super::FollowError;

    fn server(sqlstate: &str) -> FollowError {
        FollowError::Server {
            message: String::new(),
            sqlstate: sqlstate.to_owned(),
        }
    }

    #[test]
    fn passing_failures_are_retried_and_final_ones_are_not() {
        // Walsender terminated, shutdown, starting up, too many clients, slot still held.
        for code in ["57P01", "57P02", "57P03", "53300", "08006", "55006"] {
            assert!(server(code).is_retryable(), "{code}");
        }
        // Slot or publication missing, authentication, wal_level, syntax.
        for code in ["42704", "28P01", "28000", "55000", "42601", ""] {
            assert!(!server(code).is_retryable(), "{code}");
        }
        assert!(FollowError::StreamEnded.is_retryable());
        assert!(FollowError::Connection(crate::Error::Io("reset".into())).is_retryable());
        assert!(!FollowError::Connection(crate::Error::Parse("bad".into())).is_retryable());
        assert!(!FollowError::Protocol("garbage".into()).is_retryable());
    }
}
