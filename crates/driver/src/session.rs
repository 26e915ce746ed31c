//! What an established session holds, whatever does its I/O: the machine (kept for resets),
//! the connection it chose, the bytes read past the last whole frame, and the attempts.

use bytes::BytesMut;
use pgyard_connect::{AttemptId, Connector, Established, Parameters};

use crate::core::{Core, Mailbox, TlsStart};
use crate::frames::{cancel_request, take_frame_at, RawFrame, SERVER_CLOSED};
use crate::tls::TlsSettings;
use crate::{prepare, Attempt, Clock, ConnectOptions, DriverConfig, Error, OpenTarget};

/// The machine a session connects (and resets) with, and what its driver needs besides.
pub struct Machine {
    /// The connect machine, boxed: it is some 1,600 bytes, and a session moves its machine
    /// several times on the way out of a connect.
    pub connector: Box<Connector>,
    /// Its clock, from the first connect.
    pub clock: Clock,
    /// TLS settings and the connect bound.
    pub driver: DriverConfig,
}

impl Machine {
    /// The machine for `conninfo`, resolved as libpq resolves it (see [`prepare`]).
    pub fn prepare(conninfo: &str, options: &ConnectOptions) -> Result<Machine, Error> {
        let prepared = prepare(conninfo, options)?;
        let clock = Clock::new();
        let connector = Connector::new(prepared.config, clock.now(), prepared.seed)
            .with_extra_startup_params(prepared.extra_startup_params)
            .with_login_secret(prepared.login_secret);
        Ok(Machine {
            connector: Box::new(connector),
            clock,
            driver: DriverConfig {
                tls: prepared.tls,
                connect_bound: prepared.connect_bound,
            },
        })
    }
}

/// What an adapter's connect loop works with: the machine, its clock, the bound on each
/// socket connect, and a fresh driver core.
pub struct Driving<'a, M: Mailbox<TlsStart>> {
    /// The connect machine, passed to each of the core's calls.
    pub machine: &'a mut Connector,
    /// The machine's clock.
    pub clock: Clock,
    /// The bound on one socket connect (from `connect_timeout`).
    pub bound: Option<std::time::Duration>,
    /// The core of this connect.
    pub core: Core<M, &'a TlsSettings>,
}

impl Machine {
    /// Starts a connect (or a reset replacing the established `held` attempt).
    pub fn driving<M: Mailbox<TlsStart>>(&mut self, held: Option<AttemptId>) -> Driving<'_, M> {
        Driving {
            machine: &mut self.connector,
            clock: self.clock,
            bound: self.driver.connect_bound,
            core: Core::new(&self.driver.tls, held),
        }
    }
}

/// An established session's state over a transport `T`.
pub struct SessionCore<T> {
    /// The machine, kept for resets.
    pub machine: Machine,
    established: Established,
    transport: Option<T>,
    inbuf: Vec<u8>,
    /// How much of `inbuf`'s front was already taken as frames: dropped once per read, not
    /// once per frame (a 16 KiB read of small frames was moved forward once for each).
    taken: usize,
    attempts: Vec<Attempt>,
}

impl<T> std::fmt::Debug for SessionCore<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("established", &self.established)
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}

impl<T> SessionCore<T> {
    /// The session the driver's connect produced; `attempts` are that connect's.
    pub fn new(machine: Machine, won: (Established, T), attempts: Vec<Attempt>) -> Self {
        let (established, transport) = won;
        SessionCore {
            machine,
            inbuf: established.leftover.clone(),
            taken: 0,
            established,
            transport: Some(transport),
            attempts,
        }
    }

    /// Starts a reset (`PQreset`): the machine starts over, and the connection it replaces
    /// goes to the driver, which sends it Terminate and closes it.
    pub fn begin_reset(&mut self) -> Option<(AttemptId, T)> {
        self.machine.connector.reset(self.machine.clock.now());
        self.transport.take().map(|t| (self.established.attempt, t))
    }

    /// Ends a reset with what the driver's connect produced.
    pub fn finish_reset(&mut self, won: (Established, T), attempts: Vec<Attempt>) {
        let (established, transport) = won;
        self.inbuf = established.leftover.clone();
        self.taken = 0;
        self.established = established;
        self.transport = Some(transport);
        self.attempts = attempts;
    }

    /// The machine's view of the connection (ParameterStatus values kept current).
    pub fn established(&self) -> &Established {
        &self.established
    }

    /// Every attempt of the last connect or reset.
    pub fn attempts(&self) -> &[Attempt] {
        &self.attempts
    }

    /// The ParameterStatus values, for the session to keep current.
    pub fn parameters_mut(&mut self) -> &mut Parameters {
        &mut self.established.parameters
    }

    /// The open transport.
    pub fn transport_mut(&mut self) -> Result<&mut T, Error> {
        self.transport
            .as_mut()
            .ok_or_else(|| Error::Io("connection not open".to_owned()))
    }

    /// The transport, taken for closing.
    pub fn take_transport(&mut self) -> Option<T> {
        self.transport.take()
    }

    /// The next whole frame already read, if any.
    pub fn next_frame(&mut self) -> Result<Option<RawFrame>, Error> {
        take_frame_at(&mut self.inbuf, &mut self.taken)
    }

    /// The bytes read but not yet taken as frames (for a relay that forwards raw bytes).
    pub fn take_buffered(&mut self) -> Vec<u8> {
        self.inbuf.drain(..std::mem::take(&mut self.taken));
        std::mem::take(&mut self.inbuf)
    }

    /// Bytes a read returned; none means the server closed the connection.
    pub fn received(&mut self, bytes: &[u8]) -> Result<(), Error> {
        if bytes.is_empty() {
            return Err(Error::Io(SERVER_CLOSED.to_owned()));
        }
        self.inbuf.drain(..std::mem::take(&mut self.taken));
        self.inbuf.extend_from_slice(bytes);
        Ok(())
    }

    /// A middleware message ready to send: refused unless a middleware answered
    /// `middleware_messages=on` (skipped when not `checked`, for tests).
    pub fn middleware_frame(
        &self,
        checked: bool,
        class: i64,
        payload: &[u8],
    ) -> Result<BytesMut, Error> {
        let consumed = crate::info::consumes_middleware(&self.established);
        crate::frames::middleware_frame(consumed, checked, class, payload)
    }

    /// Where to send a CancelRequest for this session, and the packet.
    pub fn cancel_request(&self) -> Result<(OpenTarget, BytesMut), Error> {
        let est = &self.established;
        cancel_request(&est.target, est.backend_key.as_ref())
    }
}

/// The text of a failed read on the session's connection.
pub fn receive_error(e: std::io::Error) -> Error {
    Error::Io(format!("could not receive data from server: {e}"))
}

/// The text of a failed write on the session's connection.
pub fn send_error(e: std::io::Error) -> Error {
    Error::Io(format!("could not send data to server: {e}"))
}
