//! An established connection: who it reached, what the server reported, and blocking I/O on
//! it (simple queries, raw frames, middleware messages, cancel, reset).

use std::io::{Read, Write};
use std::time::Duration;

use bytes::BytesMut;
use pgyard_connect::{AttemptId, Established};
use pgyard_driver::{
    io_kind, receive_error, send_error, Attempt, ConnectOptions, Error, Machine, RawFrame, Reply,
    Rows, SessionCore, SimpleQuery,
};

use crate::transport::{self, Transport};
use crate::{driver, inline, Strategy};

/// A query sent with [`Session::send_query`] whose reply is still to be read.
#[derive(Debug)]
pub struct PendingQuery(SimpleQuery);

/// An established connection to the server the machine chose.
#[derive(Debug)]
pub struct Session {
    core: SessionCore<Transport>,
}

impl Session {
    pub(crate) fn connect(
        conninfo: &str,
        options: &ConnectOptions,
        log: &mut Vec<Attempt>,
    ) -> Result<Session, Error> {
        let mut m = Machine::prepare(conninfo, options)?;
        let from = log.len();
        let won = drive(&mut m, None, log);
        let attempts = log[from..].to_vec();
        let core = SessionCore::new(m, won?, attempts);
        Ok(Session { core })
    }

    /// Runs `sql` with the simple query protocol and returns every row of every result as
    /// text (`None` for NULL). An ErrorResponse becomes [`Error::Server`] after the server is
    /// ready again.
    pub fn simple_query(&mut self, sql: &str) -> Result<Rows, Error> {
        let pending = self.send_query(sql)?;
        self.finish_query(pending)
    }

    /// Sends `sql` (simple query protocol) without waiting for its reply, so that several
    /// queries can be in flight; read the replies in the order sent with
    /// [`Session::finish_query`]. The server runs them one after the other.
    pub fn send_query(&mut self, sql: &str) -> Result<PendingQuery, Error> {
        let (query, request) = SimpleQuery::start(sql)?;
        self.send_frame(&request)?;
        Ok(PendingQuery(query))
    }

    /// Sends encoded frontend frames in one write — simple `Query` messages (a COPY FROM
    /// STDIN followed by its data and CopyDone) and extended-protocol sequences each ending
    /// with `Sync` — without waiting, and returns one pending
    /// reply per `ReadyForQuery` the server will send (`replies` of them), to be read in order
    /// with [`Session::finish_query`] (rows of DataRows, the first ErrorResponse).
    pub fn send_pipeline(
        &mut self,
        frames: &[u8],
        replies: usize,
    ) -> Result<Vec<PendingQuery>, Error> {
        self.send_frame(frames)?;
        Ok((0..replies)
            .map(|_| PendingQuery(SimpleQuery::pipelined()))
            .collect())
    }

    /// Reads the reply of the oldest query sent with [`Session::send_query`] (as
    /// [`Session::simple_query`] returns it).
    pub fn finish_query(&mut self, pending: PendingQuery) -> Result<Rows, Error> {
        self.finish_query_tagged(pending).map(|(rows, _)| rows)
    }

    /// [`Session::finish_query`], with each statement's CommandComplete tag (`UPDATE 1`) in
    /// order: what a pipeline of extended-protocol statements up to one Sync changed.
    pub fn finish_query_tagged(
        &mut self,
        pending: PendingQuery,
    ) -> Result<(Rows, Vec<String>), Error> {
        let mut query = pending.0;
        loop {
            let frame = self.recv_frame()?;
            match query.frame(&frame, self.core.parameters_mut())? {
                Reply::Continue => {}
                Reply::Send(bytes) => self.send_frame(&bytes)?,
                Reply::Done(outcome) => return outcome.map(|rows| (rows, query.take_tags())),
            }
        }
    }

    /// Runs `COPY … TO STDOUT` (`sql`, simple query protocol) and hands each CopyData's bytes
    /// to `sink` as it arrives, so a table of any size streams through without being held.
    /// The server's error, or else the sink's first error (after which the query is cancelled
    /// and its reply drained, so the session stays usable), is the outcome.
    pub fn copy_out(
        &mut self,
        sql: &str,
        mut sink: impl FnMut(&[u8]) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let mut query = self.send_query(sql)?.0;
        let mut failed: Option<Error> = None;
        loop {
            let frame = self.recv_frame()?;
            if frame.tag == b'd' {
                if failed.is_none() {
                    if let Err(e) = sink(&frame.body) {
                        failed = Some(e);
                        // Best effort: without it the rest of the table is read and dropped.
                        let _ = self.cancel();
                    }
                }
                continue;
            }
            match query.frame(&frame, self.core.parameters_mut())? {
                Reply::Continue => {}
                Reply::Send(bytes) => self.send_frame(&bytes)?,
                Reply::Done(outcome) => {
                    return match failed {
                        Some(e) => Err(e),
                        None => outcome.map(drop),
                    }
                }
            }
        }
    }

    /// Writes bytes (one or more encoded frontend frames) as they are.
    pub fn send_frame(&mut self, bytes: &[u8]) -> Result<(), Error> {
        self.core.transport_mut()?.send(bytes).map_err(send_error)
    }

    /// Reads the next backend frame, blocking until it is complete.
    pub fn recv_frame(&mut self) -> Result<RawFrame, Error> {
        loop {
            match self.core.next_frame()? {
                Some(frame) => return Ok(frame),
                None => {
                    // Zeroed only when a read is due, not for every frame taken.
                    let mut chunk = [0u8; 16 * 1024];
                    let n = self.core.transport_mut()?.read(&mut chunk);
                    self.core.received(&chunk[..n.map_err(receive_error)?])?;
                }
            }
        }
    }

    /// Sends the proposal's middleware message (`class`, `payload`), refused (a
    /// configuration error) unless a middleware said it consumes them
    /// ([`pgyard_driver::SessionInfo::middleware_consumed`]); a negative class is refused too.
    pub fn send_middleware(&mut self, class: i64, payload: &[u8]) -> Result<(), Error> {
        let buf = self.core.middleware_frame(true, class, payload)?;
        self.send_frame(&buf)
    }

    /// [`Session::send_middleware`] without the check (tests of what servers do with one).
    pub fn send_middleware_unchecked(&mut self, class: i64, payload: &[u8]) -> Result<(), Error> {
        let buf = self.core.middleware_frame(false, class, payload)?;
        self.send_frame(&buf)
    }

    /// Asks the server to cancel the running query: a new plaintext connection to the same
    /// address carrying CancelRequest with the backend key (as `PQcancel`), then waits (at
    /// most 10 s) for the server to close it.
    pub fn cancel(&self) -> Result<(), Error> {
        let (target, request) = self.core.cancel_request()?;
        let bound = Some(Duration::from_secs(10));
        let mut sock = transport::open(&target, None, bound).map_err(|e| {
            Error::Io(format!(
                "could not connect to server: {}",
                io_kind(&e).strerror()
            ))
        })?;
        sock.write_all(&request)
            .map_err(|e| Error::Io(format!("could not send cancel packet: {e}")))?;
        let _ = sock.set_read_timeout(bound);
        let _ = sock.read(&mut [0u8; 64]);
        Ok(())
    }

    /// Starts over as `PQreset`: Terminate and close this connection, then let the machine
    /// choose again over the same host order.
    pub fn reset(&mut self) -> Result<(), Error> {
        let held = self.core.begin_reset();
        let mut attempts = Vec::new();
        let won = drive(&mut self.core.machine, held, &mut attempts)?;
        self.core.finish_reset(won, attempts);
        Ok(())
    }

    /// Sends Terminate and closes the connection.
    pub fn close(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if let Some(mut t) = self.core.take_transport() {
            let mut buf = BytesMut::new();
            pgyard_wire::frontend::encode_terminate(&mut buf);
            let _ = t.send(&buf);
            t.close();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.terminate();
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

/// Runs a connect: on this thread when attempts never overlap (libpq's sequential walk) and
/// no `connect_timeout` is set, with a worker thread per attempt otherwise (see `inline.rs`).
/// A blocking `connect()` on this thread could not let the machine's `connect_timeout` fire
/// while it waits (the workers' connects are bounded 1 s past it, so the machine's own
/// deadline reports first, as libpq's "timeout expired").
fn drive(
    m: &mut Machine,
    held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    let sequential = m.connector.config().strategy() == Strategy::Sequential;
    if sequential && m.driver.connect_bound.is_none() {
        inline::run(m, held, log)
    } else {
        driver::run(m, held, log)
    }
}
