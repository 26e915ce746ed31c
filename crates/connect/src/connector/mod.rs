//! The [`Connector`]: its state, the public run loop, and the pieces the walk and the
//! attempts share.

mod attempt;
mod params;
mod planted;
mod walk;

use std::collections::VecDeque;
use std::time::Duration;

use pgyard_conninfo::typed::{ConnectConfig, LoadBalanceHosts};
use pgyard_conninfo::Strategy;
use pgyard_types::{rng_from_seed, uniform_inclusive, Instant, Rng};
use pgyard_wire::auth::LoginSecret;

use crate::conn::{self, FailClass, StartupParams};
use crate::{
    Action, AttemptId, AttemptReport, Event, FailureKind, HostStatus, HostStatusMemory, OpenTarget,
};
use attempt::Run;
#[cfg(feature = "planted-bugs")]
pub use planted::PlantedBug;
#[cfg(not(feature = "planted-bugs"))]
use planted::PlantedBug;
use walk::Walk;

/// The failover connect machine. See the crate documentation for the run loop.
pub struct Connector {
    /// The configuration, its slots shuffled once at the start when load balancing.
    /// Shared, so that a caller connecting again with the same configuration (a pool, a
    /// simulated client) hands it over without a copy.
    config: std::sync::Arc<ConnectConfig>,
    /// Drives the load-balancing shuffles.
    rng: Rng,
    /// Drives the SCRAM nonces, apart from `rng` so that nonces do not move the shuffles.
    nonce_rng: Rng,
    memory: Option<HostStatusMemory>,
    extra_startup: Vec<(Vec<u8>, Vec<u8>)>,
    /// Answers MD5 or SCRAM requests when the configuration has no password.
    login_secret: Option<LoginSecret>,
    /// The startup parameters, built on first use and shared by every connection.
    startup: Option<StartupParams>,
    /// Side effects not yet handed to the driver.
    actions: VecDeque<Action>,
    /// A spare list for what a connection asks for while it handles one event.
    out_buf: Vec<conn::Out>,
    /// Ids keep counting across resets so that a late event never names a new attempt.
    next_id: u64,
    next_token: u64,
    /// The error buffer of this connect (from the start or the last reset).
    reports: Vec<AttemptReport>,
    /// The addresses being tried, one connection each (several only when racing).
    runs: Vec<Run>,
    /// `connect_timeout`, or libpq's error for a bad value (reported at the first open).
    timeout: Result<Option<Duration>, String>,
    /// Whether this connect asked for a socket yet (a bad `connect_timeout` fails the first).
    first_open_done: bool,
    /// What this connect's TLS handshakes saw of client certificates, kept across attempts,
    /// hosts and resets as libpq keeps its two flags (`sslcertmode=require`).
    client_cert: crate::ClientCert,
    /// When failover stops walking again (`failover_timeout`).
    failover_deadline: Option<Instant>,
    /// Completed walks of this connect, for the backoff between them.
    cycle: u32,
    phase: Phase,
    /// The previous connection's role state, for the planted stale-status bug.
    #[cfg(feature = "planted-bugs")]
    stale_role: Option<(conn::Tri, conn::Tri, i32)>,
    #[cfg(feature = "planted-bugs")]
    bugs: Vec<PlantedBug>,
}

/// Where the machine is in its life, with what means something in that phase only.
enum Phase {
    /// Nothing happened yet: the first call starts the machine at `start`.
    Idle { start: Instant },
    /// Walking the slots.
    Walking(Walk),
    /// All addresses failed and `failover_timeout` allows another walk, from `until`.
    Backoff { until: Instant },
    /// [`Action::Done`] went out; the winner, if one won, is closed by a reset.
    Done { established: Option<AttemptId> },
}

impl Connector {
    /// A machine for `config` starting at `now`; `seed` drives the load-balancing shuffles
    /// (and SCRAM nonces, from a separate stream). Nothing happens until the first call.
    pub fn new(config: impl Into<std::sync::Arc<ConnectConfig>>, now: Instant, seed: u64) -> Self {
        let config = config.into();
        let timeout = config
            .connect_timeout()
            .map_err(|e| String::from_utf8_lossy(&e.libpq_message()).into_owned());
        let mut nonce_rng = rng_from_seed(seed);
        nonce_rng.set_stream(1);
        Connector {
            config,
            rng: rng_from_seed(seed),
            nonce_rng,
            memory: None,
            extra_startup: Vec::new(),
            login_secret: None,
            startup: None,
            actions: VecDeque::new(),
            out_buf: Vec::new(),
            next_id: 1,
            next_token: 1,
            reports: Vec::new(),
            runs: Vec::new(),
            timeout,
            first_open_done: false,
            client_cert: crate::ClientCert::NotRequested,
            failover_deadline: None,
            cycle: 0,
            phase: Phase::Idle { start: now },
            #[cfg(feature = "planted-bugs")]
            stale_role: None,
            #[cfg(feature = "planted-bugs")]
            bugs: Vec::new(),
        }
    }

    /// Builder: use (and update) host-status memory kept by the caller. Not libpq behaviour:
    /// recently failed or wrong-role hosts are tried last, and round-robin rotates the start.
    pub fn with_host_memory(mut self, memory: HostStatusMemory) -> Self {
        self.memory = Some(memory);
        self
    }

    /// Builder: extra startup parameters sent after `client_encoding` (libpq sends
    /// `datestyle`, `timezone`, `geqo` from PGDATESTYLE, PGTZ, PGGEQO unless `default`).
    pub fn with_extra_startup_params(mut self, params: Vec<(Vec<u8>, Vec<u8>)>) -> Self {
        self.extra_startup = params;
        self.startup = None;
        self
    }

    /// Builder: a credential that answers the servers' MD5 or SCRAM requests when the
    /// configuration names no password — what a proxy proved its client knows (not libpq
    /// behaviour; a password from the configuration still wins).
    pub fn with_login_secret(mut self, secret: Option<LoginSecret>) -> Self {
        self.login_secret = secret;
        self
    }

    /// Builder: switch on one planted bug.
    #[cfg(feature = "planted-bugs")]
    pub fn with_planted_bug(mut self, bug: PlantedBug) -> Self {
        self.bugs.push(bug);
        self
    }

    /// The host memory, updated with what this connect saw.
    pub fn host_memory(&self) -> Option<&HostStatusMemory> {
        self.memory.as_ref()
    }

    /// Takes the host memory back out.
    pub fn take_host_memory(&mut self) -> Option<HostStatusMemory> {
        self.memory.take()
    }

    /// The configuration, with slots in connect order (shuffled when load balancing).
    pub fn config(&self) -> &ConnectConfig {
        &self.config
    }

    /// Whether [`Action::Done`] was emitted.
    pub fn is_done(&self) -> bool {
        matches!(self.phase, Phase::Done { .. })
    }

    /// Feeds one event. Events for unknown or closed attempts and stale tokens are ignored.
    pub fn handle_event(&mut self, now: Instant, event: Event) {
        self.ensure_started();
        if self.is_done() {
            return;
        }
        match event {
            Event::Resolved { token, addrs } => self.on_resolved(now, token, Ok(addrs)),
            Event::ResolveFailed { token, message } => self.on_resolved(now, token, Err(message)),
            Event::Opened { attempt } => {
                let refusal = self.peer_refusal(attempt);
                self.with_run(now, attempt, |c, out| match &refusal {
                    // Like every failed check of who the server is, it ends the connect.
                    Some(m) if c.is_connecting() => {
                        c.fail(FailClass::Abort, FailureKind::Authentication, m)
                    }
                    _ => c.opened(out),
                })
            }
            Event::PeerUser { attempt, user } => {
                if let Some(i) = self.run_index(attempt) {
                    self.runs[i].peer = Some(user);
                }
            }
            Event::OpenFailed { attempt, error } => {
                let Some(i) = self.run_index(attempt) else {
                    return;
                };
                if !self.runs[i].conn.is_connecting() {
                    return;
                }
                let tail = if matches!(self.runs[i].plan.target, OpenTarget::Unix(_)) {
                    "\n\tIs the server running locally and accepting connections on that socket?\n"
                } else {
                    "\n\tIs the server running on that host and accepting TCP/IP connections?\n"
                };
                let msg = format!("{}{tail}", error.strerror());
                self.append(i, &msg);
                self.fail_run(now, i, FailClass::NextAddr, FailureKind::Transient);
            }
            Event::Received { attempt, bytes } => {
                self.with_run(now, attempt, |c, out| c.received(bytes, out))
            }
            Event::Closed { attempt } => self.with_run(now, attempt, |c, _| c.closed()),
            // The planted bug words an alert as the end of stream libpq reports otherwise.
            Event::Broken { attempt, .. } if self.bug(PlantedBug::BrokenWordedAsClosed) => {
                self.with_run(now, attempt, |c, _| c.closed())
            }
            Event::Broken { attempt, message } => {
                self.with_run(now, attempt, |c, _| c.broke(&message))
            }
            Event::TlsEstablished {
                attempt,
                server_end_point,
                alpn,
                client_cert,
            } => {
                let check_alpn = !self.bug(PlantedBug::AcceptAnyAlpn);
                self.latch_client_cert(attempt, client_cert);
                self.with_run(now, attempt, |c, out| {
                    let end_point = server_end_point.clone();
                    c.tls_established(end_point, alpn.as_deref(), check_alpn, out)
                })
            }
            Event::TlsFailed {
                attempt,
                message,
                kind,
                client_cert,
            } => {
                self.latch_client_cert(attempt, client_cert);
                self.with_run(now, attempt, |c, _| c.tls_failed(&message, kind))
            }
        }
    }

    /// Handles deadlines up to `now`; early calls are no-ops.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.ensure_started();
        if self.is_done() {
            return;
        }
        // Per-address connect_timeout.
        loop {
            let expired = self
                .runs
                .iter()
                .position(|r| r.plan.deadline.is_some_and(|d| d <= now));
            let Some(i) = expired else { break };
            self.append(i, "timeout expired\n");
            self.fail_run(now, i, FailClass::NextAddr, FailureKind::Transient);
            if self.is_done() {
                return;
            }
        }
        match &mut self.phase {
            Phase::Backoff { until } if *until <= now => {
                self.begin_cycle(now);
                self.pump(now, false);
            }
            Phase::Walking(walk) if walk.race_next_at.is_some_and(|t| t <= now) => {
                walk.race_next_at = None;
                self.pump(now, true);
            }
            _ => {}
        }
    }

    /// The next side effect, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.ensure_started();
        self.actions.pop_front()
    }

    /// When [`Connector::handle_timeout`] must next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let phase_timer = match &self.phase {
            Phase::Idle { start } => return Some(*start),
            Phase::Done { .. } => return None,
            Phase::Walking(walk) => walk.race_next_at,
            Phase::Backoff { until } => Some(*until),
        };
        let runs = self.runs.iter().filter_map(|r| r.plan.deadline);
        runs.chain(phase_timer).min()
    }

    /// Starts over as `PQreset` does: the established connection (if any) gets Terminate
    /// and Close, the error buffer is cleared, and selection runs again over the same slot
    /// order (no reshuffle; addresses are re-resolved and reshuffled).
    pub fn reset(&mut self, now: Instant) {
        self.ensure_started();
        if let Phase::Done {
            established: Some(id),
        } = self.phase
        {
            self.actions.push_back(Action::Send {
                attempt: id,
                bytes: conn::terminate_bytes(),
            });
            self.actions.push_back(Action::Close { attempt: id });
        }
        let live: Vec<AttemptId> = self.runs.drain(..).map(|r| r.id).collect();
        for id in live {
            self.actions.push_back(Action::Close { attempt: id });
        }
        self.reports.clear();
        self.first_open_done = false;
        self.timeout = self
            .config
            .connect_timeout()
            .map_err(|e| String::from_utf8_lossy(&e.libpq_message()).into_owned());
        self.cycle = 0;
        self.failover_deadline = self.config.failover_timeout().map(|d| now + d);
        self.begin_cycle(now);
        self.pump(now, false);
    }

    fn race(&self) -> bool {
        self.config.strategy() == Strategy::Race
    }

    fn ensure_started(&mut self) {
        let Phase::Idle { start: now } = self.phase else {
            return;
        };
        if self.config.load_balance_hosts() == LoadBalanceHosts::Random {
            let rng = &mut self.rng;
            // The one change a machine makes to its configuration: copied first if shared.
            std::sync::Arc::make_mut(&mut self.config)
                .shuffle_slots(|i| uniform_inclusive(rng, i as u64) as usize);
        }
        self.failover_deadline = self.config.failover_timeout().map(|d| now + d);
        self.begin_cycle(now);
        self.pump(now, false);
    }

    /// The current walk, when the machine is walking.
    fn walk_mut(&mut self) -> Option<&mut Walk> {
        match &mut self.phase {
            Phase::Walking(walk) => Some(walk),
            _ => None,
        }
    }

    fn remember(&mut self, slot: usize, status: HostStatus, now: Instant) {
        if let Some(mem) = self.memory.as_mut() {
            let s = &self.config.slots()[slot];
            mem.record(
                s.display_host(),
                s.port_raw().unwrap_or_default(),
                status,
                now,
            );
        }
    }

    fn push_plain_report(&mut self, slot: usize, text: String, kind: FailureKind) {
        self.reports.push(AttemptReport {
            attempt: None,
            slot: Some(slot),
            target: None,
            prefix: String::new(),
            text,
            cancelled: false,
            kind,
            server_fields: None,
        });
    }
}
