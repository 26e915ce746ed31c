//! Following a publisher's logical slot into a durable delay queue (`pgyard delayq follow`).
//!
//! [`run`] connects through the connect machine with `replication=database`, starts pgoutput
//! (`proto_version 4`, `streaming on`, `messages true`) at the queue's
//! [`resume_lsn`](pgyard_delayq::DelayQueue::resume_lsn), and feeds every XLogData message to
//! [`DelayQueue::handle`] through [`pgyard_delayq::pgoutput::event`]. Records become durable
//! at flush points (every [`FollowOptions::flush_every`] messages, or
//! [`FollowOptions::flush_interval`] after the first unflushed one); the standby status
//! updates report:
//!
//! * `write` = the largest LSN received ([`DelayQueue::write_lsn`]);
//! * `flush` = the queue's durable horizon ([`DelayQueue::flush_lsn`]);
//! * `apply` = the same durable horizon. The queue owns the data from the moment it is
//!   durable: applying it to a subscriber later is the queue's business, not the publisher's,
//!   so a publisher waiting for `synchronous_commit = remote_apply` is not held back by the
//!   delay, and nothing the publisher keeps (WAL, catalog rows) depends on the apply.
//!
//! So while every transaction is held back for the delay, the slot's `confirmed_flush_lsn`
//! and `restart_lsn` keep advancing and the publisher recycles its WAL. A status update goes
//! out after every flush that moved the horizon, on every keepalive (at once when the server
//! asks for a reply), and at least every [`FollowOptions::status_interval`].
//!
//! A broken connection is not the end: [`run`] reconnects with bounded exponential backoff
//! ([`FollowOptions::reconnect_delay_min`] doubling up to
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
use pgyard_delayq::{Accepted, Config, DelayQueue, Event, Flow, FsStorage, Inspection, Received};
use pgyard_types::{Lsn, PgTimestamp, UnixTime};
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::{SqlState, Verbosity};
use pgyard_wire::pgoutput::{PgOutputDecoder, ProtoVersion};
use pgyard_wire::replication::{
    start_replication_pgoutput, PgOutputOptions, ReplicationMessage, StandbyStatusUpdate, Streaming,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{ConnectOptions, ErrorKind, Session};
use pgyard_driver::decode;

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

/// Where a running [`run`] stands, published on a watch channel (see [`run_observed`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The LSN the latest `START_REPLICATION` was sent with.
    pub start_lsn: Lsn,
    /// pgoutput messages received since [`run`] started (over every connection).
    pub messages: u64,
    /// Messages the queue dropped as already queued (re-sent after a restart).
    pub duplicates: u64,
    /// The `write` of the last status update sent.
    pub reported_write: Lsn,
    /// The `flush` (and `apply`) of the last status update sent.
    pub reported_flush: Lsn,
    /// Status updates sent.
    pub status_updates: u64,
    /// The queue's summary after the last flush point (only with [`FollowOptions::inspect`]
    /// and while someone watches).
    pub inspection: Option<Inspection>,
    /// Connections that broke (or could not be made) and were tried again.
    pub reconnects: u64,
    /// Why the latest reconnect was needed.
    pub last_error: Option<String>,
    /// `START_REPLICATION` commands the server accepted.
    pub sessions: u64,
}

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
            FollowError::Dir(_) | FollowError::Protocol(_) => false,
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
    let mut state = Progress::default();
    let mut backoff = options.reconnect_delay_min;
    let mut stop = std::pin::pin!(stop);
    loop {
        let r = follow_once(options, queue, &mut state, stop.as_mut(), progress).await;
        match r {
            Ok(Some(done)) => return Ok(done),
            // A stream that had started broke: the backoff starts afresh.
            Ok(None) => backoff = options.reconnect_delay_min,
            Err(e) if e.is_retryable() => {
                // What arrived before the break is kept; the publisher re-sends the rest.
                let flushed = lock(queue).flush();
                match flushed {
                    Ok(_) => {}
                    Err(q) if q.is_retryable() => {}
                    Err(q) => return Err(q.into()),
                }
                state.reconnects += 1;
                state.last_error = Some(e.to_string().trim_end().to_owned());
                progress.send_replace(state.clone());
            }
            Err(e) => return Err(e),
        }
        tokio::select! {
            biased;
            () = stop.as_mut() => return Ok(state),
            () = tokio::time::sleep(backoff) => {}
        }
        backoff = (backoff * 2).min(options.reconnect_delay_max);
    }
}

/// One connection: `Ok(Some(progress))` after `stop`, `Ok(None)` when a stream that had
/// started broke for a retryable reason (already counted and flushed), `Err` otherwise.
async fn follow_once(
    options: &FollowOptions,
    queue: &SharedQueue,
    state: &mut Progress,
    mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    progress: &watch::Sender<Progress>,
) -> Result<Option<Progress>, FollowError> {
    let start = {
        let mut q = lock(queue);
        q.restart_stream(unix_now())?;
        q.resume_lsn()
    };

    // Over whatever the user's string says, as a later keyword would in libpq.
    let connect = options
        .connect
        .clone()
        .set(pgyard_driver::Keyword::Replication, "database");
    let mut session = tokio::select! {
        biased;
        () = stop.as_mut() => return Ok(Some(state.clone())),
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
    state.start_lsn = start;
    state.sessions += 1;

    let mut f = Follower {
        session,
        queue,
        decoder: PgOutputDecoder::new(ProtoVersion::V4),
        options,
        progress,
        state: state.clone(),
        since_flush: 0,
        first_unflushed: None,
        last_status: Instant::now(),
        retry: None,
    };
    f.publish();
    let r = f.stream(stop).await;
    match r {
        Ok(()) => f.finish().await.map(Some),
        Err(e) if e.is_retryable() => {
            f.state.reconnects += 1;
            f.state.last_error = Some(e.to_string().trim_end().to_owned());
            *state = f.state.clone();
            f.publish();
            f.session.close().await;
            // Keep what arrived; the publisher re-sends the rest.
            let flushed = lock(f.queue).flush();
            match flushed {
                Ok(_) => {}
                Err(q) if q.is_retryable() => {}
                Err(q) => return Err(q.into()),
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// What woke the loop.
enum Wake {
    Stop,
    Frame(Result<crate::RawFrame, crate::Error>),
    Timer,
}

/// One message the queue refused for now (full, or no space): retried before reading on. It
/// keeps the frame it came in (the pgoutput message is the body's tail from `at`), so a
/// large message is not copied to wait.
struct Pending {
    wal_lsn: Lsn,
    end: Lsn,
    body: Vec<u8>,
    at: usize,
    event: Event,
}

/// The loop's state.
struct Follower<'o, 'q> {
    session: Session,
    queue: &'q SharedQueue,
    decoder: PgOutputDecoder,
    options: &'o FollowOptions,
    progress: &'o watch::Sender<Progress>,
    state: Progress,
    since_flush: u64,
    first_unflushed: Option<Instant>,
    last_status: Instant,
    retry: Option<Pending>,
}

impl Follower<'_, '_> {
    /// Reads the stream until `stop` (`Ok`) or an error.
    async fn stream(
        &mut self,
        mut stop: std::pin::Pin<&mut impl Future<Output = ()>>,
    ) -> Result<(), FollowError> {
        let options = self.options;
        loop {
            let status_due = self.last_status + options.status_interval;
            let wake = match (self.first_unflushed, &self.retry) {
                (_, Some(_)) => Instant::now() + options.flush_interval,
                (Some(t), None) => (t + options.flush_interval).min(status_due),
                (None, None) => status_due,
            };
            let reading = self.retry.is_none() && lock(self.queue).flow() == Flow::Read;
            let woke = tokio::select! {
                biased;
                () = stop.as_mut() => Wake::Stop,
                r = self.session.recv_frame(), if reading => Wake::Frame(r),
                () = tokio::time::sleep_until(wake) => Wake::Timer,
            };
            match woke {
                Wake::Stop => return Ok(()),
                Wake::Frame(r) => {
                    let frame = r?;
                    if !self.on_frame(frame).await? {
                        return Err(FollowError::StreamEnded);
                    }
                }
                Wake::Timer => {}
            }
            self.retry_pending()?;
            self.maybe_flush().await?;
            if Instant::now() >= self.last_status + options.status_interval {
                self.send_status().await?;
            }
        }
    }

    /// Handles one backend frame; `false` when the server ended the stream.
    async fn on_frame(&mut self, frame: crate::RawFrame) -> Result<bool, FollowError> {
        match frame.tag {
            b'd' => {}
            b'c' => return Ok(false),
            _ => {
                match decode(&frame)? {
                    BackendMessage::ErrorResponse(e) => return Err(server_error(&e)),
                    BackendMessage::ParameterStatus(p) => self.session.note_parameter(
                        String::from_utf8_lossy(p.name).into_owned(),
                        String::from_utf8_lossy(p.value).into_owned(),
                    ),
                    // Notices (e.g. about the slot) are not the stream's business.
                    _ => {}
                }
                return Ok(true);
            }
        }
        let msg = ReplicationMessage::decode_from_server(&frame.body)
            .map_err(|e| FollowError::Protocol(format!("replication message: {e}")))?;
        match msg {
            ReplicationMessage::XLogData(x) => {
                let m = self.decoder.decode(x.data).map_err(|e| {
                    FollowError::Protocol(format!("pgoutput message at {}: {e}", x.start))
                })?;
                let event = pgyard_delayq::pgoutput::event(&m);
                self.state.messages += 1;
                let (wal_lsn, end, at) = (x.start, x.end, frame.body.len() - x.data.len());
                if !self.offer(wal_lsn, end, x.data, event)? {
                    self.retry = Some(Pending {
                        wal_lsn,
                        end,
                        body: frame.body,
                        at,
                        event,
                    });
                }
            }
            ReplicationMessage::PrimaryKeepalive(k) => {
                lock(self.queue).note_received(k.wal_end);
                if k.reply_requested || lock(self.queue).flush_lsn() > self.state.reported_flush {
                    // Make what is received durable first, so the answer confirms it all.
                    self.flush()?;
                    self.send_status().await?;
                }
            }
            // Client-side message types are refused by decode_from_server.
            _ => {}
        }
        Ok(true)
    }

    /// Hands one message to the queue; `false` after a retryable refusal (the caller keeps it
    /// for [`Self::retry_pending`]).
    fn offer(
        &mut self,
        wal_lsn: Lsn,
        end: Lsn,
        payload: &[u8],
        event: Event,
    ) -> Result<bool, FollowError> {
        let received = Received {
            wal_lsn,
            payload,
            event,
        };
        let handled = lock(self.queue).handle(unix_now(), received);
        match handled {
            Ok(a) => {
                if a == Accepted::Duplicate {
                    self.state.duplicates += 1;
                }
                lock(self.queue).note_received(end);
                self.since_flush += 1;
                self.first_unflushed.get_or_insert_with(Instant::now);
                Ok(true)
            }
            Err(e) if e.is_retryable() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn retry_pending(&mut self) -> Result<(), FollowError> {
        if let Some(p) = self.retry.take() {
            let payload = p.body.get(p.at..).unwrap_or_default();
            if !self.offer(p.wal_lsn, p.end, payload, p.event)? {
                self.retry = Some(p);
            }
        }
        Ok(())
    }

    /// A flush point when enough messages or enough time has gathered; reports a horizon
    /// that moved.
    async fn maybe_flush(&mut self) -> Result<(), FollowError> {
        let Some(first) = self.first_unflushed else {
            return Ok(());
        };
        if self.since_flush >= self.options.flush_every
            || first.elapsed() >= self.options.flush_interval
        {
            self.flush()?;
            if lock(self.queue).flush_lsn() > self.state.reported_flush {
                self.send_status().await?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), FollowError> {
        let flushed = lock(self.queue).flush();
        match flushed {
            Ok(_) => {}
            // No space: the records stay buffered and nothing newer is confirmed; retried at
            // the next flush point.
            Err(e) if e.is_retryable() => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        self.since_flush = 0;
        self.first_unflushed = None;
        if self.options.inspect && self.progress.receiver_count() > 0 {
            self.state.inspection = Some(lock(self.queue).inspect());
        }
        Ok(())
    }

    /// Sends a standby status update: write = received, flush = apply = durable horizon.
    async fn send_status(&mut self) -> Result<(), FollowError> {
        let (flush, write) = {
            let q = lock(self.queue);
            (q.flush_lsn(), q.write_lsn())
        };
        let write = write.max(flush);
        let msg = ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
            write,
            flush,
            apply: flush,
            send_time: PgTimestamp::from_unix(unix_now()),
            reply_requested: false,
        });
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_copy_data(&msg.to_bytes(), &mut buf)
            .map_err(|e| FollowError::Protocol(e.to_string()))?;
        self.session.send_frame(&buf).await?;
        self.last_status = Instant::now();
        self.state.reported_write = write;
        self.state.reported_flush = flush;
        self.state.status_updates += 1;
        self.publish();
        Ok(())
    }

    fn publish(&self) {
        self.progress.send_replace(self.state.clone());
    }

    /// The stop: a last flush and status update, CopyDone, and a clean goodbye (the server
    /// answers CopyDone and ReadyForQuery; waited for at most 2 s).
    async fn finish(mut self) -> Result<Progress, FollowError> {
        self.retry_pending()?;
        self.flush()?;
        self.send_status().await?;
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
        if self.options.inspect && self.progress.receiver_count() > 0 {
            self.state.inspection = Some(lock(self.queue).inspect());
        }
        self.publish();
        self.session.close().await;
        Ok(self.state)
    }
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
