//! An established connection: who it reached, what the server reported, and async I/O on it
//! (simple queries, raw frames, middleware messages, cancel, reset).

use std::time::Duration;

use bytes::BytesMut;
use pgyard_blocking::{take_frame, SERVER_CLOSED};
use pgyard_blocking::{Attempt, ConnectOptions, Error, RawFrame};
use pgyard_connect::{BackendKey, Connector, Established, OpenTarget};
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::Verbosity;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::driver::{self, DriverConfig, Transport};
use crate::Clock;

/// An established connection to the server the machine chose.
pub struct Session {
    connector: Connector,
    clock: Clock,
    driver: DriverConfig,
    established: Established,
    transport: Option<Transport>,
    inbuf: Vec<u8>,
    attempts: Vec<Attempt>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("established", &self.established)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) async fn connect(
        conninfo: &str,
        options: &ConnectOptions,
        log: &mut Vec<Attempt>,
    ) -> Result<Session, Error> {
        let prepared = pgyard_blocking::prepare(conninfo, options)?;
        let driver = DriverConfig {
            tls: prepared.tls,
            connect_bound: prepared.connect_bound,
        };
        let clock = Clock::new();
        let mut connector = Connector::new(prepared.config, clock.now(), prepared.seed)
            .with_extra_startup_params(prepared.extra_startup_params);
        let from = log.len();
        let outcome = driver::run(&mut connector, &clock, &driver, None, log).await;
        let attempts = log[from..].to_vec();
        let (established, transport) = outcome?;
        Ok(Session {
            connector,
            clock,
            driver,
            inbuf: established.leftover.clone(),
            established,
            transport: Some(transport),
            attempts,
        })
    }

    /// Runs `sql` with the simple query protocol and returns every row of every result as
    /// text (`None` for NULL). An ErrorResponse becomes [`Error::Server`] after the server is
    /// ready again.
    pub async fn simple_query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, Error> {
        self.send_query(sql).await?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let frame = self.recv_frame().await?;
            let msg = decode(&frame)?;
            match msg {
                BackendMessage::DataRow(row) => rows.push(
                    row.fields()
                        .map(|v| v.map(|b| String::from_utf8_lossy(b).into_owned()))
                        .collect(),
                ),
                BackendMessage::ErrorResponse(f) => {
                    error.get_or_insert_with(|| f.render(Verbosity::Default, true));
                }
                BackendMessage::ParameterStatus(p) => {
                    let name = String::from_utf8_lossy(p.name).into_owned();
                    let value = String::from_utf8_lossy(p.value).into_owned();
                    self.note_parameter(name, value);
                }
                BackendMessage::CopyInResponse(_) => {
                    let mut b = BytesMut::new();
                    pgyard_wire::frontend::encode_copy_fail(
                        b"COPY FROM STDIN is not supported",
                        &mut b,
                    )
                    .map_err(|e| Error::Io(e.to_string()))?;
                    self.send_frame(&b).await?;
                }
                BackendMessage::ReadyForQuery(_) => break,
                _ => {}
            }
        }
        match error {
            Some(text) => Err(Error::Server(text)),
            None => Ok(rows),
        }
    }

    /// Sends one simple-query `Query` frame and nothing else (the caller reads the answer
    /// with [`Session::recv_frame`], e.g. for `START_REPLICATION`).
    pub async fn send_query(&mut self, sql: &str) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_query(sql.as_bytes(), &mut buf)
            .map_err(|e| Error::Io(e.to_string()))?;
        self.send_frame(&buf).await
    }

    /// Records a ParameterStatus the caller received.
    pub(crate) fn note_parameter(&mut self, name: String, value: String) {
        let params = &mut self.established.parameters;
        match params.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => params.push((name, value)),
        }
    }

    /// Writes bytes (one or more encoded frontend frames) as they are.
    pub async fn send_frame(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let t = self.transport_mut()?;
        let r = async {
            t.write_all(bytes).await?;
            t.flush().await
        }
        .await;
        r.map_err(|e| Error::Io(format!("could not send data to server: {e}")))
    }

    /// Reads the next backend frame. Cancel-safe: dropping the future (e.g. in a
    /// `tokio::select!`) loses no bytes, they stay buffered for the next call.
    pub async fn recv_frame(&mut self) -> Result<RawFrame, Error> {
        loop {
            if let Some(frame) = take_frame(&mut self.inbuf)? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            let t = self.transport_mut()?;
            // `read` is cancel-safe, and the bytes join the buffer before the next await.
            let n = t
                .read(&mut chunk)
                .await
                .map_err(|e| Error::Io(format!("could not receive data from server: {e}")))?;
            if n == 0 {
                return Err(Error::Io(SERVER_CLOSED.to_owned()));
            }
            self.inbuf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends the proposal's middleware message (`class`, `payload`); a negative class is
    /// refused before anything is written.
    pub async fn send_middleware(&mut self, class: i64, payload: &[u8]) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        pgyard_wire::middleware::encode_middleware(class, payload, &mut buf)
            .map_err(|e| Error::Io(e.to_string()))?;
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
        let key = self
            .established
            .backend_key
            .clone()
            .ok_or_else(|| Error::Io("no backend key to cancel with".to_owned()))?;
        Ok(CancelToken {
            target: self.established.target.clone(),
            key,
        })
    }

    /// Starts over as `PQreset`: Terminate and close this connection, then let the machine
    /// choose again over the same host order.
    pub async fn reset(&mut self) -> Result<(), Error> {
        self.connector.reset(self.clock.now());
        let held = self.transport.take().map(|t| (self.established.attempt, t));
        let mut attempts = Vec::new();
        let (est, transport) = driver::run(
            &mut self.connector,
            &self.clock,
            &self.driver,
            held,
            &mut attempts,
        )
        .await?;
        self.attempts = attempts;
        self.inbuf = est.leftover.clone();
        self.established = est;
        self.transport = Some(transport);
        Ok(())
    }

    /// Sends Terminate and closes the connection (close_notify first under TLS).
    pub async fn close(mut self) {
        if let Some(mut t) = self.transport.take() {
            let mut buf = BytesMut::new();
            pgyard_wire::frontend::encode_terminate(&mut buf);
            let _ = t.write_all(&buf).await;
            let _ = t.flush().await;
            let _ = t.shutdown().await;
        }
    }

    fn transport_mut(&mut self) -> Result<&mut Transport, Error> {
        self.transport
            .as_mut()
            .ok_or_else(|| Error::Io("connection not open".to_owned()))
    }
}

/// The address and backend key of a session: enough to cancel its running query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CancelToken {
    target: OpenTarget,
    key: BackendKey,
}

impl CancelToken {
    /// Sends CancelRequest on a new plaintext connection (as `PQcancel`) and waits (at most
    /// 10 s) for the server to close it.
    pub async fn cancel(&self) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_cancel_request(self.key.pid, &self.key.key, &mut buf)
            .map_err(|e| Error::Io(e.to_string()))?;
        let bound = Some(Duration::from_secs(10));
        let mut sock = driver::open(&self.target, None, bound).await.map_err(|e| {
            Error::Io(format!(
                "could not connect to server: {}",
                pgyard_blocking::io_kind(&e).strerror()
            ))
        })?;
        sock.write_all(&buf)
            .await
            .map_err(|e| Error::Io(format!("could not send cancel packet: {e}")))?;
        // The server closes the connection once it has handled the request.
        let mut rest = [0u8; 64];
        let _ = tokio::time::timeout(Duration::from_secs(10), sock.read(&mut rest)).await;
        Ok(())
    }
}

/// Decodes a backend frame, with the session's error text.
pub(crate) fn decode(frame: &RawFrame) -> Result<BackendMessage<'_>, Error> {
    BackendMessage::decode(frame.tag, &frame.body)
        .map_err(|e| Error::Io(format!("could not decode a server message: {e}")))
}

impl Drop for Session {
    fn drop(&mut self) {
        // Best effort, as the blocking adapter does: Terminate and close on a runtime task
        // (a plain drop of the socket would read as an unexpected EOF on the server).
        let Some(mut t) = self.transport.take() else {
            return;
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let mut buf = BytesMut::new();
                pgyard_wire::frontend::encode_terminate(&mut buf);
                let _ = t.write_all(&buf).await;
                let _ = t.flush().await;
                let _ = t.shutdown().await;
            });
        }
    }
}

impl crate::SessionInfo for Session {
    fn established(&self) -> &Established {
        &self.established
    }

    fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }
}
