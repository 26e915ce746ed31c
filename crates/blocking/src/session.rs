//! An established connection: who it reached, what the server reported, and blocking I/O on
//! it (simple queries, raw frames, middleware messages, cancel, reset).

use std::io::{Read, Write};
use std::time::Duration;

use bytes::BytesMut;
use pgyard_connect::{Connector, Established};
use pgyard_conninfo::typed::ConnectConfig;
use pgyard_conninfo::{configure, Keyword};
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::Verbosity;
use pgyard_wire::frame::{decode_frame, Decoded};

use crate::driver::{self, DriverConfig, Transport};
use crate::env::RealInputs;
use crate::tls::TlsSettings;
use crate::{os_seed, Attempt, Clock, ConnectOptions, Error};

/// The largest backend frame a session accepts (libpq's own cap for rows is 1 GiB).
const FRAME_BYTES_MAX: usize = 0x3FFF_FFFF;

/// libpq's text when the server closes the connection while a reply is awaited.
pub const SERVER_CLOSED: &str = "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request.";

/// Takes the next complete backend frame off the front of `inbuf`, if there is one (the
/// blocking and the tokio session read frames the same way, only the socket differs).
pub fn take_frame(inbuf: &mut Vec<u8>) -> Result<Option<RawFrame>, Error> {
    match decode_frame(inbuf, FRAME_BYTES_MAX) {
        Ok(Decoded::Frame(f)) => {
            let frame = RawFrame {
                tag: f.tag,
                body: f.body.to_vec(),
            };
            let used = f.wire_len();
            inbuf.drain(..used);
            Ok(Some(frame))
        }
        Ok(Decoded::NeedMore { .. }) => Ok(None),
        Err(e) => Err(Error::Io(format!("lost synchronization with server: {e}"))),
    }
}

/// One frame as it came off the wire: type byte and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    /// The type byte.
    pub tag: u8,
    /// The body, without the type byte and the length word.
    pub body: Vec<u8>,
}

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

impl std::fmt::Debug for DriverConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverConfig")
            .field("connect_bound", &self.connect_bound)
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(crate) fn connect(
        conninfo: &str,
        options: &ConnectOptions,
        log: &mut Vec<Attempt>,
    ) -> Result<Session, Error> {
        let prepared = prepare(conninfo, options)?;
        let driver = DriverConfig {
            tls: prepared.tls,
            connect_bound: prepared.connect_bound,
        };
        let clock = Clock::new();
        let mut connector = Connector::new(prepared.config, clock.now(), prepared.seed)
            .with_extra_startup_params(prepared.extra_startup_params);
        let from = log.len();
        let outcome = driver::run(&mut connector, &clock, &driver, None, log);
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
    pub fn simple_query(&mut self, sql: &str) -> Result<Vec<Vec<Option<String>>>, Error> {
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_query(sql.as_bytes(), &mut buf)
            .map_err(|e| Error::Io(e.to_string()))?;
        self.send_frame(&buf)?;
        let mut rows = Vec::new();
        let mut error = None;
        loop {
            let frame = self.recv_frame()?;
            let msg = BackendMessage::decode(frame.tag, &frame.body)
                .map_err(|e| Error::Io(format!("could not decode a server message: {e}")))?;
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
                    let params = &mut self.established.parameters;
                    match params.iter_mut().find(|(n, _)| *n == name) {
                        Some(slot) => slot.1 = value,
                        None => params.push((name, value)),
                    }
                }
                BackendMessage::CopyInResponse(_) => {
                    let mut b = BytesMut::new();
                    pgyard_wire::frontend::encode_copy_fail(
                        b"COPY FROM STDIN is not supported",
                        &mut b,
                    )
                    .map_err(|e| Error::Io(e.to_string()))?;
                    self.send_frame(&b)?;
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

    /// Writes bytes (one or more encoded frontend frames) as they are.
    pub fn send_frame(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let t = self.transport_mut()?;
        t.write_all(bytes)
            .and_then(|()| t.flush())
            .map_err(|e| Error::Io(format!("could not send data to server: {e}")))
    }

    /// Reads the next backend frame, blocking until it is complete.
    pub fn recv_frame(&mut self) -> Result<RawFrame, Error> {
        loop {
            if let Some(frame) = take_frame(&mut self.inbuf)? {
                return Ok(frame);
            }
            let mut chunk = [0u8; 16 * 1024];
            let t = self.transport_mut()?;
            let n = t
                .read(&mut chunk)
                .map_err(|e| Error::Io(format!("could not receive data from server: {e}")))?;
            if n == 0 {
                return Err(Error::Io(SERVER_CLOSED.to_owned()));
            }
            self.inbuf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends the proposal's middleware message (`class`, `payload`); a negative class is
    /// refused before anything is written.
    pub fn send_middleware(&mut self, class: i64, payload: &[u8]) -> Result<(), Error> {
        let mut buf = BytesMut::new();
        pgyard_wire::middleware::encode_middleware(class, payload, &mut buf)
            .map_err(|e| Error::Io(e.to_string()))?;
        self.send_frame(&buf)
    }

    /// Asks the server to cancel the running query: a new plaintext connection to the same
    /// address carrying CancelRequest with the backend key (as `PQcancel`), then waits for
    /// the server to close it.
    pub fn cancel(&self) -> Result<(), Error> {
        let key = self
            .established
            .backend_key
            .as_ref()
            .ok_or_else(|| Error::Io("no backend key to cancel with".to_owned()))?;
        let mut buf = BytesMut::new();
        pgyard_wire::frontend::encode_cancel_request(key.pid, &key.key, &mut buf)
            .map_err(|e| Error::Io(e.to_string()))?;
        let mut sock = driver::open(&self.established.target, Some(Duration::from_secs(10)))
            .map_err(|e| {
                Error::Io(format!(
                    "could not connect to server: {}",
                    driver::io_kind(&e).strerror()
                ))
            })?;
        sock.write_all(&buf)
            .map_err(|e| Error::Io(format!("could not send cancel packet: {e}")))?;
        // The server closes the connection once it has handled the request.
        let mut rest = [0u8; 64];
        let _ = sock.read(&mut rest);
        Ok(())
    }

    /// Starts over as `PQreset`: Terminate and close this connection, then let the machine
    /// choose again over the same host order.
    pub fn reset(&mut self) -> Result<(), Error> {
        self.connector.reset(self.clock.now());
        let held = self.transport.take().map(|t| (self.established.attempt, t));
        let mut attempts = Vec::new();
        let (est, transport) = driver::run(
            &mut self.connector,
            &self.clock,
            &self.driver,
            held,
            &mut attempts,
        )?;
        self.attempts = attempts;
        self.inbuf = est.leftover.clone();
        self.established = est;
        self.transport = Some(transport);
        Ok(())
    }

    /// Sends Terminate and closes the connection.
    pub fn close(mut self) {
        if let Some(mut t) = self.transport.take() {
            let mut buf = BytesMut::new();
            pgyard_wire::frontend::encode_terminate(&mut buf);
            let _ = t.write_all(&buf).and_then(|()| t.flush());
            t.close();
        }
    }

    fn transport_mut(&mut self) -> Result<&mut Transport, Error> {
        self.transport
            .as_mut()
            .ok_or_else(|| Error::Io("connection not open".to_owned()))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(mut t) = self.transport.take() {
            let mut buf = BytesMut::new();
            pgyard_wire::frontend::encode_terminate(&mut buf);
            let _ = t.write_all(&buf).and_then(|()| t.flush());
            t.close();
        }
    }
}

/// What a driver needs before the machine's first action, resolved from a connection string
/// and the adapter options (shared by this adapter and pgyard-tokio).
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The typed configuration for [`Connector::new`] (strategy override applied).
    pub config: ConnectConfig,
    /// Startup parameters from PGDATESTYLE, PGTZ and PGGEQO, for
    /// [`Connector::with_extra_startup_params`].
    pub extra_startup_params: Vec<(Vec<u8>, Vec<u8>)>,
    /// TLS settings (root, client certificate and key files, SNI, protocol versions).
    pub tls: TlsSettings,
    /// Upper bound for one socket `connect()`: `connect_timeout` + 1 s, so the machine's own
    /// deadline always fires first.
    pub connect_bound: Option<Duration>,
    /// The machine's seed (the option's, or one from the operating system).
    pub seed: u64,
}

/// Parses and resolves `conninfo` as libpq does (environment, service and password files,
/// from `options.inputs` or the real ones), printing password-file warnings on standard error
/// as libpq prints them.
pub fn prepare(conninfo: &str, options: &ConnectOptions) -> Result<Prepared, Error> {
    let lossy = |b: Vec<u8>| {
        let mut s = String::from_utf8_lossy(&b).into_owned();
        while s.ends_with('\n') {
            s.pop();
        }
        s
    };
    let info =
        pgyard_conninfo::parse(conninfo).map_err(|e| Error::Parse(lossy(e.libpq_message())))?;
    let inputs = match &options.inputs {
        Some(i) => i.clone(),
        None => RealInputs::read(info.get(Keyword::Passfile)),
    };
    let configured = configure(info, &inputs.env, &inputs.files)
        .map_err(|e| Error::Config(lossy(e.libpq_message())))?;
    for w in &configured.warnings {
        // libpq prints password-file warnings on standard error itself.
        eprint!("{}", String::from_utf8_lossy(&w.libpq_message()));
    }
    let mut config = configured.config;
    if let Some(s) = options.strategy {
        config.set_strategy(s);
    }
    Ok(Prepared {
        extra_startup_params: startup_extras(&inputs),
        tls: TlsSettings::new(&config, &inputs.env),
        connect_bound: config
            .connect_timeout()
            .ok()
            .flatten()
            .map(|d| d + Duration::from_secs(1)),
        seed: options.seed.unwrap_or_else(os_seed),
        config,
    })
}

/// The startup parameters libpq takes from PGDATESTYLE, PGTZ and PGGEQO (unless `default`).
fn startup_extras(inputs: &RealInputs) -> Vec<(Vec<u8>, Vec<u8>)> {
    [
        ("PGDATESTYLE", "datestyle"),
        ("PGTZ", "timezone"),
        ("PGGEQO", "geqo"),
    ]
    .into_iter()
    .filter_map(|(var, name)| {
        let v = inputs.env.var(var)?;
        (!v.eq_ignore_ascii_case(b"default")).then(|| (name.as_bytes().to_vec(), v.to_vec()))
    })
    .collect()
}

impl crate::SessionInfo for Session {
    fn established(&self) -> &Established {
        &self.established
    }

    fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }
}
