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
//! Nothing is applied here yet (that comes later), so the queue only grows: when it reaches
//! its high watermark [`run`] stops reading (and keeps reporting) until it is stopped.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_delayq::{Accepted, Config, DelayQueue, Event, Flow, FsStorage, Inspection, Received};
use pgyard_types::{Lsn, PgTimestamp, UnixTime};
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::Verbosity;
use pgyard_wire::pgoutput::{PgOutputDecoder, ProtoVersion};
use pgyard_wire::replication::{
    start_replication_pgoutput, PgOutputOptions, ReplicationMessage, StandbyStatusUpdate, Streaming,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::session::decode;
use crate::{ConnectOptions, Session};

/// What [`run`] needs: where to connect, which slot and publication, the delay and the queue
/// directory, plus the flush and status cadence.
#[derive(Clone, Debug)]
pub struct FollowOptions {
    /// The publisher's connection string; `replication=database` is added.
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
}

impl FollowOptions {
    /// Options with the default cadence (flush every 256 messages or 100 ms, status at least
    /// every second).
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
            flush_every: 256,
            flush_interval: Duration::from_millis(100),
            status_interval: Duration::from_secs(1),
            connect: ConnectOptions::default(),
        }
    }
}

/// Where a running [`run`] stands, published on a watch channel (see [`run_observed`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The LSN `START_REPLICATION` was sent with.
    pub start_lsn: Lsn,
    /// pgoutput messages received on this connection.
    pub messages: u64,
    /// Messages the queue dropped as already queued (re-sent after a restart).
    pub duplicates: u64,
    /// The `write` of the last status update sent.
    pub reported_write: Lsn,
    /// The `flush` (and `apply`) of the last status update sent.
    pub reported_flush: Lsn,
    /// Status updates sent.
    pub status_updates: u64,
    /// The queue's summary after the last flush point (only kept while someone watches).
    pub inspection: Option<Inspection>,
}

/// Why following stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FollowError {
    /// The connect failed, or the connection broke (libpq's texts).
    #[error("{0}")]
    Connection(#[from] crate::Error),
    /// The server refused a command (its ErrorResponse, rendered as libpq does).
    #[error("{0}")]
    Server(String),
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

/// Streams `options.slot` into the queue in `options.dir` until `stop` resolves (or an error
/// ends it); see the module documentation. Returns the final progress.
pub async fn run(
    options: &FollowOptions,
    stop: impl Future<Output = ()>,
) -> Result<Progress, FollowError> {
    let (tx, _) = watch::channel(Progress::default());
    run_observed(options, stop, &tx).await
}

/// [`run`], publishing [`Progress`] on `progress` after every status update.
pub async fn run_observed(
    options: &FollowOptions,
    stop: impl Future<Output = ()>,
    progress: &watch::Sender<Progress>,
) -> Result<Progress, FollowError> {
    std::fs::create_dir_all(&options.dir)
        .map_err(|e| FollowError::Dir(format!("{}: {e}", options.dir.display())))?;
    let storage = FsStorage::open(&options.dir)
        .map_err(|e| FollowError::Dir(format!("{}: {e}", options.dir.display())))?;
    let config = Config {
        delay: options.delay,
        ..Config::default()
    };
    let mut queue = DelayQueue::open(storage, config)?;
    queue.restart_stream(unix_now())?;
    let start = queue.resume_lsn();

    let conninfo = with_replication(&options.conninfo);
    let mut session = crate::connect_with(&conninfo, &options.connect).await?;
    let mut pgoutput =
        PgOutputOptions::new(ProtoVersion::V4.number(), &[options.publication.as_str()]);
    pgoutput.streaming = Streaming::On;
    pgoutput.messages = true;
    session
        .send_query(&start_replication_pgoutput(&options.slot, start, &pgoutput))
        .await?;
    expect_copy_both(&mut session).await?;

    let mut f = Follower {
        session,
        queue,
        decoder: PgOutputDecoder::new(ProtoVersion::V4),
        options,
        progress,
        state: Progress {
            start_lsn: start,
            ..Progress::default()
        },
        since_flush: 0,
        first_unflushed: None,
        last_status: Instant::now(),
        retry: None,
    };
    f.publish();
    let mut stop = std::pin::pin!(stop);
    loop {
        let status_due = f.last_status + options.status_interval;
        let wake = match (f.first_unflushed, &f.retry) {
            (_, Some(_)) => Instant::now() + options.flush_interval,
            (Some(t), None) => (t + options.flush_interval).min(status_due),
            (None, None) => status_due,
        };
        let reading = f.retry.is_none() && f.queue.flow() == Flow::Read;
        let woke = tokio::select! {
            biased;
            () = &mut stop => Wake::Stop,
            r = f.session.recv_frame(), if reading => Wake::Frame(r),
            () = tokio::time::sleep_until(wake) => Wake::Timer,
        };
        match woke {
            Wake::Stop => break,
            Wake::Frame(r) => {
                let frame = r?;
                if !f.on_frame(frame).await? {
                    return Err(FollowError::Protocol(
                        "the server ended the replication stream".to_owned(),
                    ));
                }
            }
            Wake::Timer => {}
        }
        f.retry_pending()?;
        f.maybe_flush().await?;
        if Instant::now() >= f.last_status + options.status_interval {
            f.send_status().await?;
        }
    }
    f.finish().await
}

/// What woke the loop.
enum Wake {
    Stop,
    Frame(Result<crate::RawFrame, crate::Error>),
    Timer,
}

/// One message the queue refused for now (full, or no space): retried before reading on.
struct Pending {
    wal_lsn: Lsn,
    end: Lsn,
    payload: Vec<u8>,
    event: Event,
}

/// The loop's state.
struct Follower<'o> {
    session: Session,
    queue: DelayQueue<FsStorage>,
    decoder: PgOutputDecoder,
    options: &'o FollowOptions,
    progress: &'o watch::Sender<Progress>,
    state: Progress,
    since_flush: u64,
    first_unflushed: Option<Instant>,
    last_status: Instant,
    retry: Option<Pending>,
}

impl Follower<'_> {
    /// Handles one backend frame; `false` when the server ended the stream.
    async fn on_frame(&mut self, frame: crate::RawFrame) -> Result<bool, FollowError> {
        match frame.tag {
            b'd' => {}
            b'c' => return Ok(false),
            _ => {
                match decode(&frame)? {
                    BackendMessage::ErrorResponse(e) => {
                        return Err(FollowError::Server(e.render(Verbosity::Default, true)))
                    }
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
                self.offer(x.start, x.end, x.data, event)?;
            }
            ReplicationMessage::PrimaryKeepalive(k) => {
                self.queue.note_received(k.wal_end);
                if k.reply_requested || self.queue.flush_lsn() > self.state.reported_flush {
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

    /// Hands one message to the queue; a retryable refusal keeps it for [`Self::retry_pending`].
    fn offer(
        &mut self,
        wal_lsn: Lsn,
        end: Lsn,
        payload: &[u8],
        event: Event,
    ) -> Result<(), FollowError> {
        let received = Received {
            wal_lsn,
            payload,
            event,
        };
        match self.queue.handle(unix_now(), received) {
            Ok(a) => {
                if a == Accepted::Duplicate {
                    self.state.duplicates += 1;
                }
                self.queue.note_received(end);
                self.since_flush += 1;
                self.first_unflushed.get_or_insert_with(Instant::now);
                Ok(())
            }
            Err(e) if e.is_retryable() => {
                self.retry = Some(Pending {
                    wal_lsn,
                    end,
                    payload: payload.to_vec(),
                    event,
                });
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    fn retry_pending(&mut self) -> Result<(), FollowError> {
        if let Some(p) = self.retry.take() {
            self.offer(p.wal_lsn, p.end, &p.payload, p.event)?;
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
            if self.queue.flush_lsn() > self.state.reported_flush {
                self.send_status().await?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), FollowError> {
        match self.queue.flush() {
            Ok(_) => {}
            // No space: the records stay buffered and nothing newer is confirmed; retried at
            // the next flush point.
            Err(e) if e.is_retryable() => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        self.since_flush = 0;
        self.first_unflushed = None;
        if self.progress.receiver_count() > 0 {
            self.state.inspection = Some(self.queue.inspect());
        }
        Ok(())
    }

    /// Sends a standby status update: write = received, flush = apply = durable horizon.
    async fn send_status(&mut self) -> Result<(), FollowError> {
        let flush = self.queue.flush_lsn();
        let write = self.queue.write_lsn().max(flush);
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
        if self.progress.receiver_count() > 0 {
            self.state.inspection = Some(self.queue.inspect());
        }
        self.publish();
        self.session.close().await;
        Ok(self.state)
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
                error.get_or_insert_with(|| e.render(Verbosity::Default, true));
            }
            BackendMessage::ReadyForQuery(_) => {
                return Err(FollowError::Server(error.unwrap_or_else(|| {
                    "START_REPLICATION ended without starting a stream".to_owned()
                })))
            }
            _ => {}
        }
    }
}

/// The connection string with `replication=database` (a keyword added to key/value strings,
/// a query parameter added to URIs).
pub fn with_replication(conninfo: &str) -> String {
    let t = conninfo.trim();
    if t.starts_with("postgresql://") || t.starts_with("postgres://") {
        let sep = if t.contains('?') { '&' } else { '?' };
        format!("{t}{sep}replication=database")
    } else {
        format!("{t} replication=database")
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
    use super::with_replication;

    #[test]
    fn replication_is_added_to_both_syntaxes() {
        assert_eq!(
            with_replication("host=a dbname=db"),
            "host=a dbname=db replication=database"
        );
        assert_eq!(
            with_replication("postgresql://a/db"),
            "postgresql://a/db?replication=database"
        );
        assert_eq!(
            with_replication("postgres://a/db?sslmode=disable"),
            "postgres://a/db?sslmode=disable&replication=database"
        );
    }
}
