//! An established connection: who it reached, what the server reported, and async I/O on it
//! (simple queries, raw frames, middleware messages, cancel, reset).

use std::time::Duration;

use bytes::BytesMut;
use pgyard_connect::{Established, OpenTarget};
use pgyard_driver::{
    io_kind, receive_error, send_error, Attempt, Error, Machine, RawFrame, Reply, Rows,
    SessionCore, SimpleQuery,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::transport::{self, write_flush, Transport};
use crate::{driver, inline};

/// An established connection to the server the machine chose.
#[derive(Debug)]
pub struct Session {
    core: SessionCore<Transport>,
}

impl Session {
    /// Connects `machine`, appending its attempts to `log`.
    pub(crate) async fn connect(
        mut machine: Machine,
        log: &mut Vec<Attempt>,
    ) -> Result<Session, Error> {
        let first = log.len();
        let outcome = drive(&mut machine, None, log).await;
        Ok(Session {
            core: SessionCore::new(machine, outcome?, log[first..].to_vec()),
        })
    }

    /// Runs `sql` with the simple query protocol and returns every row of every result as
    /// text (`None` for NULL). An ErrorResponse becomes [`Error::Server`] after the server is
    /// ready again.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Rows, Error> {
        let (mut query, request) = SimpleQuery::start(sql)?;
        self.send_frame(&request).await?;
        loop {
            let frame = self.recv_frame().await?;
            match query.frame(&frame, self.core.parameters_mut())? {
                Reply::Done(outcome) => break outcome,
                Reply::Send(bytes) => self.send_frame(&bytes).await?,
                Reply::Continue => {}
            }
        }
    }

    /// Sends one simple-query `Query` frame and nothing else (the caller reads the answer
    /// with [`Session::recv_frame`], e.g. for `START_REPLICATION`).
    pub async fn send_query(&mut self, sql: &str) -> Result<(), Error> {
        let (_, request) = SimpleQuery::start(sql)?;
        self.send_frame(&request).await
    }

    /// Records a ParameterStatus the caller received.
    pub(crate) fn note_parameter(&mut self, name: &[u8], value: &[u8]) {
        self.core.parameters_mut().set_lossy(name, value);
    }

    /// Writes bytes (one or more encoded frontend frames) as they are.
    pub async fn send_frame(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let t = self.core.transport_mut()?;
        write_flush(t, bytes).await.map_err(send_error)
    }

    /// Reads the next backend frame. Cancel-safe: dropping the future (e.g. in a
    /// `tokio::select!`) loses no bytes, they stay buffered for the next call.
    pub async fn recv_frame(&mut self) -> Result<RawFrame, Error> {
        loop {
            if let Some(frame) = self.core.next_frame()? {
                return Ok(frame);
            }
            // Zeroed only when a read is due: at every call, a stream of small frames paid
            // 16 KiB of memset per frame.
            let mut chunk = [0u8; 16 * 1024];
            // `read` is cancel-safe, and the bytes join the buffer before the next await.
            let n = self.core.transport_mut()?.read(&mut chunk).await;
            self.core.received(&chunk[..n.map_err(receive_error)?])?;
        }
    }

    /// The TCP socket under the session, if it runs over TCP (for socket options).
    pub(crate) fn tcp(&mut self) -> Option<&tokio::net::TcpStream> {
        self.core.transport_mut().ok()?.tcp()
    }

    /// The next backend frame if a read already brought it, without reading: a consumer of
    /// a stream of small frames handles one read's worth in one go.
    pub fn buffered_frame(&mut self) -> Result<Option<RawFrame>, Error> {
        self.core.next_frame()
    }

    /// Reads whatever the server sent next, as raw bytes (frames not split out): bytes
    /// already buffered first, else one read into `buf`'s spare room. For a relay that scans
    /// frames itself (the proxy). Cancel-safe like [`Session::recv_frame`].
    pub async fn recv_bytes(&mut self, buf: &mut BytesMut) -> Result<(), Error> {
        let held = self.core.take_buffered();
        if !held.is_empty() {
            buf.extend_from_slice(&held);
            return Ok(());
        }
        let n = self.core.transport_mut()?.read_buf(buf).await;
        match n.map_err(receive_error)? {
            0 => Err(Error::Io(pgyard_driver::SERVER_CLOSED.to_owned())),
            _ => Ok(()),
        }
    }

    /// Whether a server that nobody reads from sent something or closed, asked without
    /// waiting and without a wake-up registered: `None` unless the connection is a plain TCP
    /// or Unix socket (a TLS layer may hold bytes of its own). A byte found is consumed: for a relay that
    /// then drops the connection, since an idle server speaks only to end the session.
    pub(crate) fn spoke_unread(&mut self) -> Option<bool> {
        if !self.core.take_buffered().is_empty() {
            return Some(true);
        }
        let plain = self.core.transport_mut().ok()?.plain()?;
        let mut probe = [0u8; 1];
        match plain.try_read(&mut probe) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Some(false),
            _ => Some(true),
        }
    }

    /// Sends the proposal's middleware message (`class`, `payload`), refused (a
    /// configuration error) unless a middleware said it consumes them
    /// ([`pgyard_driver::SessionInfo::middleware_consumed`]); a negative class is refused too.
    pub async fn send_middleware(&mut self, class: i64, payload: &[u8]) -> Result<(), Error> {
        let buf = self.core.middleware_frame(true, class, payload)?;
        self.send_frame(&buf).await
    }

    /// [`Session::send_middleware`] without the check (tests of what servers do with one).
    pub async fn send_middleware_unchecked(
        &mut self,
        class: i64,
        payload: &[u8],
    ) -> Result<(), Error> {
        let buf = self.core.middleware_frame(false, class, payload)?;
        self.send_frame(&buf).await
    }

    /// Asks the server to cancel the running query: a new plaintext connection to the same
    /// address carrying CancelRequest with the backend key (as `PQcancel`), then waits (at
    /// most 10 s) for the server to close it.
    pub async fn cancel(&self) -> Result<(), Error> {
        self.cancel_token()?.cancel().await
    }

    /// What [`Session::cancel`] needs, detached from the session so another task can cancel
    /// a query this one is waiting on.
    pub fn cancel_token(&self) -> Result<CancelToken, Error> {
        let (target, request) = self.core.cancel_request()?;
        Ok(CancelToken { target, request })
    }

    /// Starts over as `PQreset`: Terminate and close this connection, then let the machine
    /// choose again over the same host order.
    pub async fn reset(&mut self) -> Result<(), Error> {
        let replaced = self.core.begin_reset();
        let mut log = Vec::new();
        let outcome = drive(&mut self.core.machine, replaced, &mut log).await;
        self.core.finish_reset(outcome?, log);
        Ok(())
    }

    /// Sends Terminate and closes the connection (close_notify first under TLS).
    pub async fn close(mut self) {
        if let Some(t) = self.core.take_transport() {
            terminate(t).await;
        }
    }
}

/// Runs a connect: on the caller's task when attempts never overlap (libpq's sequential
/// walk), with a task per attempt when they race (see `inline.rs`).
async fn drive(
    m: &mut Machine,
    held: Option<(pgyard_connect::AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    if m.connector.config().strategy() == pgyard_driver::Strategy::Sequential {
        inline::run(m, held, log).await
    } else {
        driver::run(m, held, log).await
    }
}

/// Terminate, then close (close_notify first under TLS). A plain socket is closed by the
/// drop alone, which sends the FIN a `shutdown` would, one system call fewer, as libpq closes.
async fn terminate(mut t: Transport) {
    let mut buf = BytesMut::new();
    pgyard_wire::frontend::encode_terminate(&mut buf);
    let _ = write_flush(&mut t, &buf).await;
    if t.plain().is_none() {
        let _ = t.shutdown().await;
    }
}

/// The address and backend key of a session: enough to cancel its running query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelToken {
    target: OpenTarget,
    /// The CancelRequest packet with the session's backend key.
    request: BytesMut,
}

impl CancelToken {
    /// Sends CancelRequest on a new plaintext connection (as `PQcancel`) and waits (at most
    /// 10 s) for the server to close it.
    pub async fn cancel(&self) -> Result<(), Error> {
        let bound = Some(Duration::from_secs(10));
        let mut sock = transport::open(&self.target, None, bound)
            .await
            .map_err(|e| {
                Error::Io(format!(
                    "could not connect to server: {}",
                    io_kind(&e).strerror()
                ))
            })?;
        sock.write_all(&self.request)
            .await
            .map_err(|e| Error::Io(format!("could not send cancel packet: {e}")))?;
        // The server closes the connection once it has handled the request.
        let mut rest = [0u8; 64];
        let _ = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut rest)).await;
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Best effort, as the blocking adapter does: Terminate and close on a runtime task
        // (a plain drop of the socket would read as an unexpected EOF on the server).
        let Some(t) = self.core.take_transport() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(terminate(t));
        }
    }
}

impl pgyard_driver::SessionInfo for Session {
    fn established(&self) -> &Established {
        self.core.established()
    }

    fn attempts(&self) -> &[Attempt] {
        self.core.attempts()
    }
}
