//! The simulated world: a virtual clock and an event queue keyed by `(Instant, seq)`, a
//! network with faults, DNS, PostgreSQL nodes, and clients that each drive the real
//! [`pgyard_connect::Connector`] exactly as an adapter does (perform every action, feed
//! back every event, call `handle_timeout` at `poll_timeout`). Invariants are checked as
//! the run goes; the scenarios decide the cluster, the fault mix and the clients' plans.

mod drive;
pub mod net;
mod outcome;
pub mod pg;
pub mod queue;
mod sockets;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{self, Receiver, Sender};

use pgyard_connect::{AttemptId, Connector, IoErrorKind, OpenTarget, ResolveToken};
use pgyard_conninfo::typed::{ConnectConfig, TargetSessionAttrs};
use pgyard_driver::core::Core;
use pgyard_types::{uniform_inclusive, Instant, Rng, RngCore};

use crate::{trace, Trace, Violation};
use drive::{Mail, Seen, SimCore, SimTls};
use net::{addr_node, Dns, Net};
use pg::{Node, NodeState, Session};
pub use queue::Queue;

/// Steps after which a run counts as a busy loop (a deadline that never moves).
const STEPS_MAX: u64 = 200_000;

/// What a client wants and how it behaves.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    /// The configuration every connect starts from.
    pub config: ConnectConfig,
    /// Host names in its list (each resolves through [`Dns`]).
    pub hosts: Vec<String>,
    /// Connects to make during the safety phase.
    pub connects: u32,
    /// Reconnect with `reset()` on the same machine instead of a new one.
    pub use_reset: bool,
    /// How long a session is held before the client ends it (`None`: until it breaks).
    pub hold_ns: Option<u64>,
    /// Delay before a reconnect after a broken session (failure detection).
    pub detect_ns: u64,
    /// A connect still running when faults stop must succeed if its failover budget
    /// outlasts one more walk and a fitting server exists (the failover scenario's promise).
    pub budget_rides_out: bool,
}

/// A planted bug the run switches on in every machine it builds (see [`crate::planted`]).
pub type Bug = Option<crate::planted::ConnectBug>;

/// A cluster event.
#[derive(Clone, Copy, Debug)]
pub enum ClusterEvent {
    /// Node moves to a state.
    Set(usize, NodeState),
    /// The node's process dies: connections reset, later connects refused.
    Crash(usize),
    /// Half-open on or off.
    Hang(usize, bool),
    /// Connection limit (53300 past it).
    Limit(usize, u32),
}

#[derive(Debug)]
enum Delivery {
    Opened,
    OpenFailed(IoErrorKind),
    Bytes(Vec<u8>, bool),
    Closed,
    /// The handshake's outcome; when it completed, what the server selected by ALPN.
    TlsDone(Result<Option<&'static [u8]>, ()>),
}

#[derive(Debug)]
enum Ev {
    ToClient(u64, Delivery),
    ToServer(u64, Vec<u8>),
    Resolved(
        usize,
        u32,
        ResolveToken,
        String,
        Result<Vec<std::net::SocketAddr>, String>,
    ),
    Wake(usize, u32),
    Cluster(ClusterEvent),
    Liveness,
}

#[derive(Debug)]
struct Sock {
    client: usize,
    attempt: AttemptId,
    node: usize,
    session: Box<Session>,
    hung: bool,
    server_gone: bool,
    up_last: Instant,
    down_last: Instant,
    /// The last TLS handshake: whether it started directly, and what the server selected.
    tls: Option<(bool, Option<&'static [u8]>)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Idle,
    Connecting,
    Session,
    Finished,
}

/// A client: its spec, the machine it drives, and what it saw.
struct Client {
    spec: ClientSpec,
    /// `connect_timeout` in nanoseconds, parsed once.
    ct_ns: Option<u64>,
    machine: Option<Connector>,
    /// The driver core of the connect under way (or of the last one, for its attempt log).
    core: Option<SimCore>,
    /// The machine's raw actions the core took since the world last looked.
    seen: Vec<Seen>,
    /// The attempts' commands, posted by the core.
    mail_tx: Sender<Mail>,
    mail_rx: Receiver<Mail>,
    /// The socket of the session a reset replaces.
    held: Option<u64>,
    gen: u32,
    seed: u64,
    mode: Mode,
    socks: BTreeMap<AttemptId, u64>,
    ever_opened: BTreeSet<AttemptId>,
    opened_this: BTreeSet<AttemptId>,
    open_now: BTreeSet<AttemptId>,
    session: Option<(AttemptId, u64)>,
    established: Option<AttemptId>,
    connects_left: u32,
    started: Instant,
    after_cannot_connect: bool,
    liveness: bool,
    live_deadline: Option<Instant>,
    expect_success: bool,
    carried: bool,
    done_live: bool,
}

/// Counters a scenario can report or assert on.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    /// Connects that ended with a session.
    pub connected: u64,
    /// Connects that ended with an error.
    pub failed: u64,
    /// Liveness connects that succeeded.
    pub live_ok: u64,
    /// `(client, node)` of every session established, in order.
    pub sessions: Vec<(usize, usize)>,
}

/// The whole simulated world of one seed.
pub struct World {
    /// The virtual clock.
    pub now: Instant,
    queue: Queue<Ev>,
    /// The PostgreSQL nodes.
    pub nodes: Vec<Node>,
    /// The resolver.
    pub dns: Dns,
    /// The network.
    pub net: Net,
    socks: BTreeMap<u64, Sock>,
    next_sock: u64,
    clients: Vec<Client>,
    rng: Rng,
    bug: Bug,
    steps: u64,
    /// Counters.
    pub stats: Stats,
    /// When the faults stopped (the liveness phase began).
    calm_since: Option<Instant>,
}

impl World {
    /// A world with these nodes, resolver and network; `seed` drives every draw the world
    /// makes (latencies, faults, salts and nonces).
    pub fn new(nodes: Vec<Node>, dns: Dns, net: Net, seed: u64, bug: Bug) -> Self {
        World {
            now: Instant::ZERO,
            queue: Queue::new(),
            nodes,
            dns,
            net,
            socks: BTreeMap::new(),
            next_sock: 1,
            clients: Vec::new(),
            rng: pgyard_types::rng_from_seed(seed),
            bug,
            steps: 0,
            stats: Stats::default(),
            calm_since: None,
        }
    }

    /// Adds a client that starts its first connect at `start`.
    pub fn add_client(&mut self, spec: ClientSpec, start: Instant) {
        let id = self.clients.len();
        let seed = self.rng.next_u64();
        let ct_ns = spec
            .config
            .connect_timeout()
            .ok()
            .flatten()
            .map(|d| d.as_nanos() as u64);
        let (mail_tx, mail_rx) = mpsc::channel();
        self.clients.push(Client {
            ct_ns,
            connects_left: spec.connects,
            spec,
            machine: None,
            core: None,
            seen: Vec::new(),
            mail_tx,
            mail_rx,
            held: None,
            gen: 0,
            seed,
            mode: Mode::Idle,
            socks: BTreeMap::new(),
            ever_opened: BTreeSet::new(),
            opened_this: BTreeSet::new(),
            open_now: BTreeSet::new(),
            session: None,
            established: None,
            started: start,
            after_cannot_connect: false,
            liveness: false,
            live_deadline: None,
            expect_success: false,
            carried: false,
            done_live: false,
        });
        self.queue.push(start, Ev::Wake(id, 0));
    }

    /// Schedules a cluster event (ignored once the liveness phase has begun).
    pub fn schedule(&mut self, at: Instant, event: ClusterEvent) {
        self.queue.push(at, Ev::Cluster(event));
    }

    /// Schedules the switch to the liveness phase.
    pub fn schedule_liveness(&mut self, at: Instant) {
        self.queue.push(at, Ev::Liveness);
    }

    /// Runs until `end` or until nothing is left to do; then checks that every client
    /// finished its liveness connect.
    pub fn run(&mut self, t: &mut Trace, end: Instant) -> Result<(), Violation> {
        loop {
            self.steps += 1;
            if self.steps > STEPS_MAX {
                return Err(violation(
                    "no-busy-loop",
                    format!("more than {STEPS_MAX} steps"),
                ));
            }
            let qt = self.queue.peek_time();
            let mut ct: Option<(Instant, usize)> = None;
            for (i, c) in self.clients.iter().enumerate() {
                if c.mode != Mode::Connecting {
                    continue;
                }
                if let Some(d) = c.machine.as_ref().and_then(Connector::poll_timeout) {
                    if ct.is_none_or(|(best, _)| d < best) {
                        ct = Some((d, i));
                    }
                }
            }
            let next = match (qt, ct) {
                (None, None) => break,
                (Some(q), None) => q,
                (None, Some((c, _))) => c,
                (Some(q), Some((c, _))) => q.min(c),
            };
            if next > end {
                self.now = end;
                break;
            }
            self.now = self.now.max(next);
            match ct {
                // The core hands the machine its timeout.
                Some((c, i)) if qt.is_none_or(|q| c < q) => self.drain(t, i)?,
                _ => {
                    if let Some((_, ev)) = self.queue.pop() {
                        self.handle(t, ev)?;
                    }
                }
            }
        }
        for (i, c) in self.clients.iter().enumerate() {
            if c.liveness && !c.done_live {
                return Err(violation(
                    "liveness-converges",
                    format!(
                        "client {i} ({}) still {:?} at t={}ns{}",
                        SpecText(&c.spec),
                        c.mode,
                        self.now.0,
                        attempts_text(c)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Whether a listed name surely leads to a fitting server now. A mismatch or a 57P03
    /// skips the rest of a name's addresses (libpq), so a name counts only when one of its
    /// addresses fits and every other one either fits or refuses (a crashed node).
    fn fitting_exists(&self, spec: &ClientSpec) -> bool {
        let tsa = spec.config.target_session_attrs();
        let fits = |n: usize| {
            let st = self.nodes[n].state;
            st.serving() && role_fits(tsa, Some(st.in_recovery()))
        };
        spec.hosts
            .iter()
            .filter_map(|h| self.dns.names.get(h))
            .any(|nodes| {
                nodes.iter().any(|&n| fits(n))
                    && nodes
                        .iter()
                        .all(|&n| fits(n) || self.nodes[n].state == NodeState::Crashed)
            })
    }

    fn listed_nodes(&self, spec: &ClientSpec) -> BTreeSet<usize> {
        spec.hosts
            .iter()
            .filter_map(|h| self.dns.names.get(h))
            .flatten()
            .copied()
            .collect()
    }

    /// The time a connect may take once faults stop: every (slot, address) attempt bounded
    /// by `connect_timeout` or by the round trips a login needs, per pass, plus resolution.
    fn bound_ns(&self, client: usize) -> u64 {
        let ct_ns = self.clients[client].ct_ns;
        let spec = &self.clients[client].spec;
        let lat_max = self.net.links[client]
            .iter()
            .map(|l| l.max_ns())
            .max()
            .unwrap_or(0);
        let round_trips = 40 * lat_max + 1_000_000;
        let per_attempt = ct_ns.map_or(round_trips, |ct| round_trips.min(ct));
        let passes = match spec.config.target_session_attrs() {
            TargetSessionAttrs::PreferStandby | TargetSessionAttrs::PreferPrimary => 2,
            _ => 1,
        };
        let walk: u64 = spec
            .hosts
            .iter()
            .map(|h| self.dns.latency_ns + self.dns.count(h) as u64 * per_attempt)
            .sum();
        passes * walk + 1_000_000
    }

    fn handle(&mut self, t: &mut Trace, ev: Ev) -> Result<(), Violation> {
        match ev {
            Ev::Wake(i, gen) => {
                if self.clients[i].gen != gen || self.clients[i].mode == Mode::Connecting {
                    return Ok(());
                }
                self.wake(t, i)
            }
            Ev::Resolved(i, gen, token, host, result) => {
                let c = &self.clients[i];
                if c.gen != gen || c.mode != Mode::Connecting {
                    return Ok(());
                }
                let now = self.now;
                self.with_core(i, |core, tap| core.resolved(tap, now, token, &host, result));
                self.drain(t, i)
            }
            Ev::ToServer(id, bytes) => {
                self.deliver_to_server(id, &bytes);
                Ok(())
            }
            Ev::ToClient(id, d) => self.deliver_to_client(t, id, d),
            Ev::Cluster(e) => {
                if self.net.faults {
                    self.cluster(t, e);
                }
                Ok(())
            }
            Ev::Liveness => self.liveness(t),
        }
    }

    fn cluster(&mut self, t: &mut Trace, e: ClusterEvent) {
        trace!(t, "t={} cluster {e:?}", self.now.0);
        match e {
            ClusterEvent::Set(n, s) => self.nodes[n].state = s,
            ClusterEvent::Crash(n) => {
                self.nodes[n].state = NodeState::Crashed;
                let ids: Vec<u64> = self
                    .socks
                    .iter()
                    .filter(|(_, s)| s.node == n && !s.server_gone)
                    .map(|(&id, _)| id)
                    .collect();
                for id in ids {
                    self.server_close(id);
                }
            }
            ClusterEvent::Hang(n, on) => self.nodes[n].hang = on,
            ClusterEvent::Limit(n, max) => self.nodes[n].max_sessions = max,
        }
    }

    fn liveness(&mut self, t: &mut Trace) -> Result<(), Violation> {
        self.net.faults = false;
        self.calm_since = Some(self.now);
        for n in &mut self.nodes {
            n.hang = false;
            // A refused ALPN selection aborts a libpq connect outright, like a failed
            // handshake: the liveness phase repairs it with the other faults.
            n.alpn = Some(b"postgresql");
            n.max_sessions = n.max_sessions.max(1000);
            n.state = match n.state {
                NodeState::StartingUp { standby: true } => NodeState::Standby,
                NodeState::StartingUp { standby: false } | NodeState::Promoting => {
                    NodeState::Primary
                }
                NodeState::ShuttingDown => NodeState::Crashed,
                s => s,
            };
        }
        let states: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("{:?}", n.state))
            .collect();
        trace!(
            t,
            "t={} liveness phase: faults stop; nodes {}",
            self.now.0,
            states.join(",")
        );
        for i in 0..self.clients.len() {
            let c = &mut self.clients[i];
            c.liveness = true;
            c.connects_left = 0;
            match c.mode {
                Mode::Connecting => {
                    let budget_end = c
                        .spec
                        .config
                        .failover_timeout()
                        .map_or(0, |b| c.started.0 + b.as_nanos() as u64);
                    let has_timeout = c.ct_ns.is_some();
                    let rides_out = c.spec.budget_rides_out;
                    if has_timeout || (rides_out && budget_end > 0) {
                        c.carried = true;
                        let bound = self.bound_ns(i);
                        let c = &mut self.clients[i];
                        // The attempt under way may wait out its whole connect_timeout.
                        let ct = c.ct_ns.unwrap_or(0);
                        c.live_deadline = Some(Instant(
                            self.now.0.max(budget_end) + ct + 2 * bound + 2_000_000_000,
                        ));
                        c.expect_success = false;
                        if rides_out && budget_end > self.now.0 + ct + bound + 2_000_000_000 {
                            let fitting = self.fitting_exists(&self.clients[i].spec);
                            self.clients[i].expect_success = fitting;
                        }
                        trace!(t, "c{i} carries its connect into the liveness phase");
                    } else {
                        self.abandon(t, i);
                        self.start_connect(t, i)?;
                    }
                }
                Mode::Session => {
                    self.end_session(t, i);
                    self.start_connect(t, i)?;
                }
                Mode::Idle | Mode::Finished => self.start_connect(t, i)?,
            }
        }
        Ok(())
    }

    /// Drops the machine without waiting (the application gave up): its sockets close.
    fn abandon(&mut self, t: &mut Trace, i: usize) {
        trace!(t, "t={} c{i} abandons its connect", self.now.0);
        let socks: Vec<u64> = self.clients[i].socks.values().copied().collect();
        for id in socks {
            self.client_close(id);
        }
        let c = &mut self.clients[i];
        c.socks.clear();
        c.open_now.clear();
        c.machine = None;
        c.core = None;
        // Commands of the dropped core go nowhere, like a dropped worker channel's.
        drive::mail(&c.mail_rx);
        c.mode = Mode::Idle;
    }

    fn end_session(&mut self, t: &mut Trace, i: usize) {
        if let Some((a, id)) = self.clients[i].session.take() {
            trace!(t, "t={} c{i} ends session a{}", self.now.0, a.0);
            self.send(id, pgyard_wire_terminate());
            self.client_close(id);
            self.clients[i].socks.remove(&a);
        }
        self.clients[i].mode = Mode::Idle;
    }

    fn wake(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let c = &self.clients[i];
        match c.mode {
            Mode::Session if c.spec.hold_ns.is_some() => {
                self.end_session(t, i);
                self.next_or_idle(i);
                Ok(())
            }
            Mode::Session => {
                // The session broke: reconnect (reset() or a new machine).
                self.next_connect(t, i)
            }
            Mode::Idle => {
                if self.clients[i].connects_left > 0 || self.clients[i].liveness {
                    self.next_connect(t, i)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    fn next_or_idle(&mut self, i: usize) {
        if self.clients[i].connects_left > 0 {
            let think = 1_000_000 + uniform_inclusive(&mut self.rng, 200_000_000);
            let gen = self.clients[i].gen;
            self.queue
                .push(Instant(self.now.0 + think), Ev::Wake(i, gen));
        }
    }

    fn next_connect(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let c = &mut self.clients[i];
        if c.liveness {
            if c.done_live {
                return Ok(());
            }
        } else if c.connects_left == 0 {
            return Ok(());
        } else {
            c.connects_left -= 1;
        }
        let reuse = c.spec.use_reset && c.machine.is_some() && !c.liveness;
        if reuse {
            trace!(t, "t={} c{i} reset()", self.now.0);
            c.mode = Mode::Connecting;
            c.gen += 1;
            c.started = self.now;
            c.opened_this.clear();
            c.after_cannot_connect = false;
            // reset() sends Terminate and closes the established attempt itself, through the
            // core's held connection.
            let held = c.session.take().map(|(a, id)| {
                c.socks.remove(&a);
                c.held = Some(id);
                a
            });
            c.core = Some(Core::new(SimTls, held));
            if let Some(m) = c.machine.as_mut() {
                m.reset(self.now);
            }
            self.drain(t, i)
        } else {
            if let Some((_, id)) = self.clients[i].session.take() {
                self.client_close(id);
            }
            self.start_connect(t, i)
        }
    }

    fn start_connect(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let fitting = self.fitting_exists(&self.clients[i].spec);
        let bound = self.bound_ns(i);
        let now = self.now;
        let c = &mut self.clients[i];
        c.gen += 1;
        c.seed = c.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        #[allow(unused_mut)]
        let mut m = Connector::new(c.spec.config.clone(), now, c.seed);
        #[cfg(feature = "planted-bugs")]
        if let Some(b) = self.bug {
            m = m.with_planted_bug(b);
        }
        #[cfg(not(feature = "planted-bugs"))]
        let _ = self.bug;
        c.machine = Some(m);
        c.core = Some(Core::new(SimTls, None));
        c.mode = Mode::Connecting;
        c.started = now;
        c.socks.clear();
        c.ever_opened.clear();
        c.opened_this.clear();
        c.open_now.clear();
        c.established = None;
        c.after_cannot_connect = false;
        if c.liveness {
            c.expect_success = fitting;
            // Without a fitting server the failover budget may run out first, then one more
            // walk may still be under way, after a backoff of at most 2 s.
            let budget = c
                .spec
                .config
                .failover_timeout()
                .map_or(0, |b| b.as_nanos() as u64 + bound + 2_000_000_000);
            let allowed = if fitting { bound } else { bound + budget };
            c.live_deadline = Some(Instant(now.0 + allowed));
            trace!(
                t,
                "t={} c{i} liveness connect, fitting={fitting} bound={bound}ns",
                now.0
            );
        } else {
            trace!(t, "t={} c{i} connect", now.0);
        }
        self.drain(t, i)
    }

    /// After a connect ends: liveness bookkeeping, then the next step of the plan.
    fn finish(&mut self, t: &mut Trace, i: usize, ok: bool) -> Result<(), Violation> {
        let now = self.now;
        let c = &mut self.clients[i];
        if c.liveness {
            if let Some(deadline) = c.live_deadline {
                if now > deadline {
                    return Err(violation(
                        "liveness-within-bound",
                        format!(
                            "client {i} ({}) finished at {}ns, bound was {}ns{}",
                            SpecText(&c.spec),
                            now.0,
                            deadline.0,
                            attempts_text(c)
                        ),
                    ));
                }
            }
            if c.carried {
                c.carried = false;
                if ok {
                    self.end_session(t, i);
                }
                return self.start_connect(t, i);
            }
            c.done_live = true;
            if ok {
                self.stats.live_ok += 1;
            }
            c.mode = if ok { Mode::Session } else { Mode::Finished };
            return Ok(());
        }
        if !ok {
            let gen = c.gen;
            let think = 1_000_000 + uniform_inclusive(&mut self.rng, 300_000_000);
            self.queue.push(Instant(now.0 + think), Ev::Wake(i, gen));
        }
        Ok(())
    }
}

/// Whether a server whose recovery state was `in_recovery` at the check fits `tsa`
/// (prefer-* and `any` accept every server).
fn role_fits(tsa: TargetSessionAttrs, in_recovery: Option<bool>) -> bool {
    match tsa {
        TargetSessionAttrs::ReadWrite | TargetSessionAttrs::Primary => in_recovery == Some(false),
        TargetSessionAttrs::ReadOnly | TargetSessionAttrs::Standby => in_recovery == Some(true),
        _ => true,
    }
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

fn attempts_text(c: &Client) -> String {
    let mut s = String::from("\nattempts:");
    for a in c.core.as_ref().map_or(&[][..], SimCore::attempts) {
        let node = match &a.target {
            OpenTarget::Tcp(addr) => addr_node(addr),
            OpenTarget::Unix(_) => None,
        };
        s.push_str(&format!(
            "\n  {} -> node {node:?} at {}ns {}",
            a.host,
            a.started.as_nanos(),
            a.outcome
        ));
    }
    s
}

/// One line describing a client's configuration, formatted in place (trace lines, failure
/// reports).
pub struct SpecText<'a>(pub &'a ClientSpec);

impl std::fmt::Display for SpecText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = &self.0.config;
        f.write_str("hosts=")?;
        for (i, h) in self.0.hosts.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(h)?;
        }
        write!(
            f,
            " tsa={} lb={:?} strategy={:?} connect_timeout={:?} failover={:?}",
            c.target_session_attrs().as_str(),
            c.load_balance_hosts(),
            c.strategy(),
            c.connect_timeout().ok().flatten(),
            c.failover_timeout()
        )
    }
}

/// The bytes of a Terminate message.
fn pgyard_wire_terminate() -> Vec<u8> {
    vec![b'X', 0, 0, 0, 4]
}
