//! The driver core: one sans-IO loop around the connect machine that both adapters drive.
//!
//! The machine decides; the core turns its actions into I/O requests ([`Io`]) and commands for
//! the attempts' workers ([`WorkerCmd`], posted to their [`Mailbox`]es), and keeps the
//! bookkeeping around them — the attempt log, which address came from which host name, the
//! TLS configuration per attempt, the connection a reset replaces, the workers of the open
//! attempts — so the adapters only perform the requests and report back. Time comes in as an
//! argument.
//!
//! ```text
//! loop {
//!     match core.step(now) {
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
use std::sync::Arc;
use std::time::Duration;

use pgyard_connect::{
    Action, AttemptId, Connector, Established, Event, FailureKind, OpenTarget, ResolveToken,
    TcpOptions,
};
use pgyard_types::Instant;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::attempts::AttemptLog;
use crate::tls::{self, TlsSettings};
use crate::{Attempt, Clock, Error, Machine};

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
    },
    /// Write to the connection a reset replaces (a courtesy Terminate: errors do not matter).
    SendHeld {
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Close the connection a reset replaces.
    CloseHeld,
}

/// A command for the worker that owns an attempt's socket.
#[derive(Debug)]
pub enum WorkerCmd {
    /// Write the bytes.
    Send(Vec<u8>),
    /// Start TLS (report the outcome with [`crate::tls::established`] or
    /// [`crate::tls::handshake_failed`]).
    StartTls {
        /// The client configuration for the machine's verification level.
        config: Arc<ClientConfig>,
        /// The name to send (SNI) and verify.
        name: ServerName<'static>,
        /// The host as libpq names it in certificate errors.
        host: String,
    },
    /// Close the socket (after close_notify, when TLS is up).
    Close,
    /// Hand the socket over: the adapter's own command once the machine chose this attempt.
    Handover,
}

/// Where the core posts an attempt's commands: the sending end of its worker's channel.
pub trait Mailbox {
    /// Posts `cmd`; a worker that has gone away simply misses it.
    fn post(&self, cmd: WorkerCmd);
}

impl Mailbox for std::sync::mpsc::Sender<WorkerCmd> {
    fn post(&self, cmd: WorkerCmd) {
        let _ = self.send(cmd);
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
    Won(Established),
    /// The connect failed.
    Failed(Error),
}

/// The bookkeeping of one connect (or reset) around the machine.
pub struct Core<'a, M: Mailbox> {
    connector: &'a mut Connector,
    tls: &'a TlsSettings,
    clock: Clock,
    attempts: AttemptLog<'a>,
    /// Which host name each resolved address came from (libpq's `PQhost` for the log).
    hosts: HashMap<IpAddr, String>,
    /// Events the core produces itself (a TLS configuration that cannot be built).
    local: VecDeque<Event>,
    /// The connection a reset replaces, which the machine sends Terminate and closes.
    held: Option<AttemptId>,
    /// Each open attempt's worker.
    workers: BTreeMap<AttemptId, M>,
}

impl<'a, M: Mailbox> Core<'a, M> {
    /// Starts driving `machine`, appending its attempts to `log`. `held` is the attempt of
    /// the established connection a reset replaces.
    pub fn new(
        machine: &'a mut Machine,
        held: Option<AttemptId>,
        log: &'a mut Vec<Attempt>,
    ) -> Self {
        Core {
            connector: &mut machine.connector,
            tls: &machine.driver.tls,
            clock: machine.clock,
            attempts: AttemptLog::new(log),
            hosts: HashMap::new(),
            local: VecDeque::new(),
            held,
            workers: BTreeMap::new(),
        }
    }

    /// Now on the machine's clock, for the adapter to pass to [`Core::step`] and the reports
    /// (the core itself never reads a clock).
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The worker for `attempt` (of an [`Io::Open`]) is running.
    pub fn spawned(&mut self, attempt: AttemptId, mailbox: M) {
        self.workers.insert(attempt, mailbox);
    }

    fn post(&self, attempt: AttemptId, cmd: WorkerCmd) {
        if let Some(m) = self.workers.get(&attempt) {
            m.post(cmd);
        }
    }

    /// The next thing to do at `now`.
    pub fn step(&mut self, now: Instant) -> Step {
        loop {
            if let Some(action) = self.connector.poll_action() {
                if let Some(step) = self.action(now, action) {
                    return step;
                }
                continue;
            }
            if let Some(ev) = self.local.pop_front() {
                self.report(now, ev);
                continue;
            }
            match self.connector.poll_timeout() {
                Some(t) if t <= now => self.connector.handle_timeout(now),
                deadline => {
                    let within = deadline.map(|t| since_start(t) - since_start(now));
                    return Step::Wait { within };
                }
            }
        }
    }

    /// A worker's report about its attempt.
    pub fn report(&mut self, now: Instant, event: Event) {
        self.attempts.event(&event, since_start(now));
        self.connector.handle_event(now, event);
    }

    /// The answer to [`Io::Resolve`]: the addresses, or the resolver's error as the platform
    /// gave it (the machine words it).
    pub fn resolved(
        &mut self,
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
        self.connector.handle_event(now, event);
    }

    fn action(&mut self, now: Instant, action: Action) -> Option<Step> {
        let io = match action {
            Action::Resolve { token, host, port } => Io::Resolve { token, host, port },
            Action::Open {
                attempt,
                target,
                tcp,
            } => {
                let host = match &target {
                    OpenTarget::Tcp(a) => self
                        .hosts
                        .get(&a.ip())
                        .cloned()
                        .unwrap_or_else(|| a.ip().to_string()),
                    OpenTarget::Unix(p) => String::from_utf8_lossy(p).into_owned(),
                };
                self.attempts
                    .opened(attempt, host, target.clone(), since_start(now));
                Io::Open {
                    attempt,
                    target,
                    tcp,
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
                ..
            } => {
                let ip = match self.attempts.target(attempt) {
                    Some(OpenTarget::Tcp(a)) => Some(a.ip()),
                    _ => None,
                };
                let host = server_name
                    .clone()
                    .or_else(|| ip.map(|i| i.to_string()))
                    .unwrap_or_default();
                match self.tls.client_config(verify) {
                    Ok(config) => {
                        let name = tls::server_name(server_name.as_deref(), ip);
                        let cmd = WorkerCmd::StartTls { config, name, host };
                        self.post(attempt, cmd);
                    }
                    // A setting that cannot work (a missing root file): libpq's text.
                    Err(message) => self.local.push_back(Event::TlsFailed {
                        attempt,
                        message,
                        kind: FailureKind::Configuration,
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
