//! The driver core: one sans-IO loop around the connect machine that both adapters drive.
//!
//! The machine decides; the core turns its actions into I/O requests ([`Io`]) and commands for
//! the attempts' workers ([`WorkerCmd`], posted to their [`Mailbox`]es), and keeps the
//! bookkeeping around them — the attempt log, which address came from which host name, the
//! TLS configuration per attempt, the connection a reset replaces, the workers of the open
//! attempts — so the adapters only perform the requests and report back. Time comes in as an
//! argument.
//!
//! The core owns its state and borrows the machine per call (anything that implements
//! [`Drive`], so the simulator can watch the machine's raw actions go by), and what a TLS
//! handshake needs comes from a [`TlsSetup`] (rustls configurations for the adapters, a
//! simulated handshake for the simulator).
//!
//! ```text
//! loop {
//!     match core.step(&mut connector, now) {
//!         Step::Io(io)              => perform it (answer a Resolve with `resolved`, register
//!                                      an opened attempt's mailbox with `spawned`),
//!         Step::Wait { within }     => wait for a worker's report (`report`) or the deadline,
//!         Step::Won(established)    => take the winner's socket over,
//!         Step::Failed(error)       => give up,
//!     }
//! }
//! ```

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pgyard_connect::{
    Action, AttemptId, ClientCert, Connector, Established, Event, FailureKind, OpenTarget,
    ResolveToken, TcpOptions, TlsVerify,
};
use pgyard_types::Instant;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::attempts::AttemptLog;
use crate::tls::{self, TlsSettings};
use crate::{Attempt, Error};

/// I/O the adapter performs for the core.
#[derive(Debug)]
pub enum Io {
    /// Resolve a host name (getaddrinfo), then answer with [`Core::resolved`].
    Resolve {
        /// The machine's token for the answer.
        token: ResolveToken,
        /// The host name.
        host: String,
        /// The port.
        port: u16,
    },
    /// Open a socket for a new attempt in a worker of its own: register the worker's mailbox
    /// with [`Core::spawned`]; the worker reports with [`Core::report`].
    Open {
        /// The new attempt.
        attempt: AttemptId,
        /// Where to.
        target: OpenTarget,
        /// TCP options to set once connected (`None` for Unix sockets).
        tcp: Option<TcpOptions>,
        /// Report the socket's peer user ([`crate::net::peer_event`]) before it is opened.
        peer_user: bool,
    },
    /// Write to the connection a reset replaces (a courtesy Terminate: errors do not matter).
    SendHeld {
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Close the connection a reset replaces.
    CloseHeld,
}

/// What the adapters' workers need to start a TLS handshake.
#[derive(Debug)]
pub struct TlsStart {
    /// The client configuration for the machine's verification level.
    pub config: Arc<ClientConfig>,
    /// The name to send (SNI) and verify.
    pub name: ServerName<'static>,
    /// The host as libpq names it in certificate errors.
    pub host: String,
    /// What the handshake does with client certificates, read when it is done.
    pub probe: tls::CertProbe,
}

/// The machine's request for a TLS handshake, as a [`TlsSetup`] sees it.
#[derive(Clone, Copy, Debug)]
pub struct TlsRequest<'r> {
    /// The host name to verify (`None`: connected by address).
    pub server_name: Option<&'r str>,
    /// The address connected to, for TCP.
    pub ip: Option<IpAddr>,
    /// The verification level.
    pub verify: TlsVerify,
    /// Whether the handshake starts right away, without SSLRequest (`sslnegotiation=direct`).
    pub direct: bool,
}

/// Turns the machine's TLS request into what a worker needs to start the handshake.
pub trait TlsSetup {
    /// What the worker gets.
    type Start;
    /// The start of one handshake, or libpq's text for why none can be made (a setting
    /// that cannot work, such as a missing root file).
    fn start(&self, request: TlsRequest<'_>) -> Result<Self::Start, String>;
}

impl TlsSetup for &TlsSettings {
    type Start = TlsStart;

    fn start(&self, r: TlsRequest<'_>) -> Result<TlsStart, String> {
        let (config, probe) = self.client_config(r.verify, r.server_name)?;
        let host = r
            .server_name
            .map(str::to_owned)
            .or_else(|| r.ip.map(|i| i.to_string()))
            .unwrap_or_default();
        let name = tls::server_name(r.server_name, r.ip);
        Ok(TlsStart {
            config,
            name,
            host,
            probe,
        })
    }
}

/// The connect machine as the core drives it: [`Connector`], or a wrapper that watches it.
pub trait Drive {
    /// [`Connector::poll_action`].
    fn poll_action(&mut self) -> Option<Action>;
    /// [`Connector::poll_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// [`Connector::handle_event`].
    fn handle_event(&mut self, now: Instant, event: Event);
    /// [`Connector::handle_timeout`].
    fn handle_timeout(&mut self, now: Instant);
}

impl Drive for Connector {
    fn poll_action(&mut self) -> Option<Action> {
        Connector::poll_action(self)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Connector::poll_timeout(self)
    }
    fn handle_event(&mut self, now: Instant, event: Event) {
        Connector::handle_event(self, now, event)
    }
    fn handle_timeout(&mut self, now: Instant) {
        Connector::handle_timeout(self, now)
    }
}

/// A boxed machine (as [`crate::Machine`] holds its connector) drives as the machine does.
impl<D: Drive + ?Sized> Drive for Box<D> {
    fn poll_action(&mut self) -> Option<Action> {
        (**self).poll_action()
    }
    fn poll_timeout(&self) -> Option<Instant> {
        (**self).poll_timeout()
    }
    fn handle_event(&mut self, now: Instant, event: Event) {
        (**self).handle_event(now, event)
    }
    fn handle_timeout(&mut self, now: Instant) {
        (**self).handle_timeout(now)
    }
}

/// A command for the worker that owns an attempt's socket; `S` is what starts a handshake
/// ([`TlsStart`] for the adapters).
#[derive(Debug)]
pub enum WorkerCmd<S = TlsStart> {
    /// Write the bytes.
    Send(Vec<u8>),
    /// Start TLS (the adapters report the outcome with [`crate::tls::established`] or
    /// [`crate::tls::handshake_failed`]).
    StartTls(S),
    /// Close the socket (after close_notify, when TLS is up).
    Close,
    /// Hand the socket over: the adapter's own command once the machine chose this attempt.
    Handover,
}

/// Where the core posts an attempt's commands: the sending end of its worker's channel.
pub trait Mailbox<S = TlsStart> {
    /// Posts `cmd`; a worker that has gone away simply misses it.
    fn post(&self, cmd: WorkerCmd<S>);
}

impl<S> Mailbox<S> for std::sync::mpsc::Sender<WorkerCmd<S>> {
    fn post(&self, cmd: WorkerCmd<S>) {
        let _ = self.send(cmd);
    }
}

/// The commands the core posted, with the attempt each is for, in posting order: the queue of
/// an adapter loop that carries out every attempt's commands itself (no worker per attempt).
#[derive(Debug)]
pub struct Posted<S = TlsStart>(Arc<Mutex<Queue<S>>>);

/// The queue behind [`Posted`].
type Queue<S> = VecDeque<(AttemptId, WorkerCmd<S>)>;

impl<S> Default for Posted<S> {
    fn default() -> Self {
        Posted(Arc::default())
    }
}

impl<S> Posted<S> {
    /// The mailbox of `attempt`, posting to this queue.
    pub fn mailbox(&self, attempt: AttemptId) -> Inline<S> {
        Inline {
            attempt,
            posted: Posted(Arc::clone(&self.0)),
        }
    }

    /// The oldest command not yet carried out.
    pub fn pop(&self) -> Option<(AttemptId, WorkerCmd<S>)> {
        self.lock().pop_front()
    }

    /// Whether every posted command has been carried out.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    // A panic while pushing or popping leaves whole commands behind: the queue stays usable.
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue<S>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// An attempt's mailbox in a [`Posted`] queue.
#[derive(Debug)]
pub struct Inline<S = TlsStart> {
    attempt: AttemptId,
    posted: Posted<S>,
}

impl<S> Mailbox<S> for Inline<S> {
    fn post(&self, cmd: WorkerCmd<S>) {
        self.posted.lock().push_back((self.attempt, cmd));
    }
}

/// What the adapter does next.
#[derive(Debug)]
pub enum Step {
    /// Perform this, then step again.
    Io(Io),
    /// Wait for a worker's report, at most `within` (`None`: no deadline), then step again.
    Wait {
        /// Time left until the machine's next deadline.
        within: Option<Duration>,
    },
    /// The machine chose a connection. Its worker has been told to hand its socket over, and
    /// every other mailbox dropped (so their workers end); the bytes the winner's worker read
    /// meanwhile go after `leftover`.
    Won(Box<Established>),
    /// The connect failed.
    Failed(Error),
}

/// The bookkeeping of one connect (or reset) around the machine.
pub struct Core<M: Mailbox<T::Start>, T: TlsSetup> {
    tls: T,
    attempts: AttemptLog,
    /// Which host name each resolved address came from (libpq's `PQhost` for the log).
    hosts: HashMap<IpAddr, String>,
    /// Events the core produces itself (a TLS configuration that cannot be built).
    local: VecDeque<Event>,
    /// The connection a reset replaces, which the machine sends Terminate and closes.
    held: Option<AttemptId>,
    /// Each open attempt's worker.
    workers: BTreeMap<AttemptId, M>,
}

impl<M: Mailbox<T::Start>, T: TlsSetup> Core<M, T> {
    /// Starts the bookkeeping of one connect. `held` is the attempt of the established
    /// connection a reset replaces.
    pub fn new(tls: T, held: Option<AttemptId>) -> Self {
        Core {
            tls,
            attempts: AttemptLog::default(),
            hosts: HashMap::new(),
            local: VecDeque::new(),
            held,
            workers: BTreeMap::new(),
        }
    }

    /// The attempts of this connect so far, in the order they were opened.
    pub fn attempts(&self) -> &[Attempt] {
        self.attempts.entries()
    }

    /// The log entry of `attempt`.
    pub fn attempt(&self, attempt: AttemptId) -> Option<&Attempt> {
        self.attempts.get(attempt)
    }

    /// Takes the attempts of this connect (for the session's log).
    pub fn take_attempts(&mut self) -> Vec<Attempt> {
        self.attempts.take()
    }

    /// The worker for `attempt` (of an [`Io::Open`]) is running.
    pub fn spawned(&mut self, attempt: AttemptId, mailbox: M) {
        self.workers.insert(attempt, mailbox);
    }

    fn post(&self, attempt: AttemptId, cmd: WorkerCmd<T::Start>) {
        if let Some(m) = self.workers.get(&attempt) {
            m.post(cmd);
        }
    }

    /// The next thing to do at `now`.
    pub fn step(&mut self, machine: &mut impl Drive, now: Instant) -> Step {
        loop {
            if let Some(action) = machine.poll_action() {
                if let Some(step) = self.action(now, action) {
                    return step;
                }
                continue;
            }
            if let Some(ev) = self.local.pop_front() {
                self.report(machine, now, ev);
                continue;
            }
            match machine.poll_timeout() {
                Some(t) if t <= now => machine.handle_timeout(now),
                deadline => {
                    let within = deadline.map(|t| since_start(t) - since_start(now));
                    return Step::Wait { within };
                }
            }
        }
    }

    /// A worker's report about its attempt.
    pub fn report(&mut self, machine: &mut impl Drive, now: Instant, event: Event) {
        self.attempts.event(&event, since_start(now));
        machine.handle_event(now, event);
    }

    /// The answer to [`Io::Resolve`]: the addresses, or the resolver's error as the platform
    /// gave it (the machine words it).
    pub fn resolved(
        &mut self,
        machine: &mut impl Drive,
        now: Instant,
        token: ResolveToken,
        host: &str,
        result: Result<Vec<SocketAddr>, String>,
    ) {
        let event = match result {
            Ok(addrs) => {
                for a in &addrs {
                    self.hosts.insert(a.ip(), host.to_owned());
                }
                Event::Resolved { token, addrs }
            }
            Err(message) => Event::ResolveFailed { token, message },
        };
        machine.handle_event(now, event);
    }

    fn action(&mut self, now: Instant, action: Action) -> Option<Step> {
        let io = match action {
            Action::Resolve { token, host, port } => Io::Resolve { token, host, port },
            Action::Open {
                attempt,
                target,
                tcp,
                peer_user,
            } => {
                let host = match &target {
                    OpenTarget::Tcp(a) => self
                        .hosts
                        .get(&a.ip())
                        .cloned()
                        .unwrap_or_else(|| pgyard_connect::ip_text(a.ip())),
                    OpenTarget::Unix(p) => String::from_utf8_lossy(p).into_owned(),
                };
                self.attempts
                    .opened(attempt, host, target.clone(), since_start(now));
                Io::Open {
                    attempt,
                    target,
                    tcp,
                    peer_user,
                }
            }
            Action::Send { attempt, bytes } if self.held == Some(attempt) => Io::SendHeld { bytes },
            Action::Send { attempt, bytes } => {
                self.post(attempt, WorkerCmd::Send(bytes));
                return None;
            }
            Action::StartTls {
                attempt,
                server_name,
                verify,
                direct,
            } => {
                let ip = match self.attempts.target(attempt) {
                    Some(OpenTarget::Tcp(a)) => Some(a.ip()),
                    _ => None,
                };
                let request = TlsRequest {
                    server_name: server_name.as_deref(),
                    ip,
                    verify,
                    direct,
                };
                match self.tls.start(request) {
                    Ok(start) => self.post(attempt, WorkerCmd::StartTls(start)),
                    // A setting that cannot work (a missing root file): libpq's text.
                    Err(message) => self.local.push_back(Event::TlsFailed {
                        attempt,
                        message,
                        kind: FailureKind::Configuration,
                        client_cert: ClientCert::NotRequested,
                    }),
                }
                return None;
            }
            Action::Close { attempt } => {
                self.attempts.closed(attempt, since_start(now));
                if self.held == Some(attempt) {
                    self.held = None;
                    Io::CloseHeld
                } else {
                    if let Some(m) = self.workers.remove(&attempt) {
                        m.post(WorkerCmd::Close);
                    }
                    return None;
                }
            }
            Action::Done(Ok(est)) => {
                self.attempts.connected(est.attempt, since_start(now));
                if let Some(m) = self.workers.remove(&est.attempt) {
                    m.post(WorkerCmd::Handover);
                }
                // Dropped mailboxes end every worker the machine did not close.
                self.workers.clear();
                return Some(Step::Won(est));
            }
            Action::Done(Err(e)) => {
                self.attempts.failed(&e, since_start(now));
                return Some(Step::Failed(Error::Connect(e)));
            }
        };
        Some(Step::Io(io))
    }
}

/// The adapters' clocks start at the connect, so the machine's instant is the time since.
fn since_start(now: Instant) -> Duration {
    Duration::from_nanos(now.as_nanos())
}
