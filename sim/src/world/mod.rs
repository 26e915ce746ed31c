//! The simulated world: a virtual clock and an event queue keyed by `(Instant, seq)`, a
//! network with faults, DNS, PostgreSQL nodes, and clients that each drive the real
//! [`pgyard_connect::Connector`] exactly as an adapter does (perform every action, feed
//! back every event, call `handle_timeout` at `poll_timeout`). The scenarios decide the
//! cluster, the fault mix and the clients' plans.
//!
//! The world has two halves. The moving half carries a run forward: the event loop here, the
//! clients' plans (`client.rs`), their driver cores (`drive.rs`), and the sockets that carry
//! bytes between them and the nodes (`sockets.rs`, over `net.rs` and `pg.rs`). The judging
//! half (`invariants.rs`) says what must hold. It keeps its own ledger per client of what the
//! machine opened and closed and of what the liveness phase promised; its checks read the
//! world and change nothing in it but that ledger. The moving half calls a check wherever
//! an invariant applies and ends the run at the first broken one.

mod client;
mod drive;
mod invariants;
mod memory;
pub mod net;
pub mod pg;
pub mod queue;
pub mod require_auth;
mod sockets;
mod startup;
mod wording;

use pgyard_connect::{Connector, ResolveToken};
use pgyard_conninfo::typed::{ConnectConfig, LoadBalanceHosts};
use pgyard_conninfo::Strategy;
use pgyard_types::{Instant, Rng, RngCore};

use crate::trace::{push_option_duration_debug, write_pieces, Piece};
use crate::{Trace, Violation};
use client::{AttemptSocks, Client, Mode, Stage};
use drive::{Mail, Outbox, Seen};
use invariants::{violation, Watch};
pub use memory::MemoryUse;
use net::{Dns, Net};
use pg::{Flip, Node, NodeState};
pub use queue::Queue;
use sockets::{Delivery, SockTable};
pub use startup::{StartupKeywords, StartupSpec};

/// Steps after which a run counts as a busy loop (a deadline that never moves).
const STEPS_MAX: u64 = 200_000;

/// What a client wants and how it behaves.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    /// The configuration every connect starts from.
    pub config: std::sync::Arc<ConnectConfig>,
    /// What its startup packets must carry, and the extra parameters the machine is given.
    pub startup: StartupSpec,
    /// Host names in its list (each resolves through [`Dns`]).
    pub hosts: Vec<String>,
    /// Connects to make during the safety phase.
    pub connects: u32,
    /// Reconnect with `reset()` on the same machine instead of a new one.
    pub use_reset: bool,
    /// Keep a host-status memory across connects (pgyard's, not libpq's), and how.
    pub memory: Option<MemoryUse>,
    /// How long a session is held before the client ends it (`None`: until it breaks).
    pub hold_ns: Option<u64>,
    /// Delay before a reconnect after a broken session (failure detection).
    pub detect_ns: u64,
    /// A connect still running when faults stop must succeed if its failover budget
    /// outlasts one more walk and a fitting server exists (the failover scenario's promise).
    pub budget_rides_out: bool,
    /// Its `require_auth`, when it sets one (the connect scenario's clients).
    pub require_auth: Option<require_auth::RequireAuth>,
}

/// A planted bug the run switches on in every machine it builds (see [`crate::planted`]).
pub type Bug = Option<crate::planted::ConnectBug>;

/// A cluster event.
#[derive(Clone, Copy)]
pub enum ClusterEvent {
    /// The node moves to a state.
    Set {
        /// The node.
        node: usize,
        /// Its new state.
        state: NodeState,
    },
    /// The node's process dies: connections reset, later connects refused.
    Crash(usize),
    /// The node goes half-open, or answers again.
    Hang {
        /// The node.
        node: usize,
        /// Half-open from now on (else it answers again).
        hung: bool,
    },
    /// The node's connection limit changes (53300 past it).
    Limit {
        /// The node.
        node: usize,
        /// Sessions it admits.
        max: u32,
    },
    /// A role change is armed on the node: it lands right after its next login.
    Flip {
        /// The node.
        node: usize,
        /// The change.
        flip: Flip,
    },
}

impl ClusterEvent {
    /// The event's trace text, as pieces (empty ones pad the short variants). The trace
    /// hash pins it: this is what the derived `Debug` printed when the variants had
    /// positional fields.
    fn pieces(self) -> [Piece<'static>; 5] {
        let text = Piece::Text;
        match self {
            ClusterEvent::Set { node, state } => [
                text("Set("),
                node.into(),
                text(", "),
                text(state.text()),
                text(")"),
            ],
            ClusterEvent::Crash(node) => {
                [text("Crash("), node.into(), text(")"), text(""), text("")]
            }
            ClusterEvent::Hang { node, hung } => [
                text("Hang("),
                node.into(),
                text(", "),
                hung.into(),
                text(")"),
            ],
            ClusterEvent::Limit { node, max } => [
                text("Limit("),
                node.into(),
                text(", "),
                max.into(),
                text(")"),
            ],
            ClusterEvent::Flip { node, flip } => [
                text("Flip("),
                node.into(),
                text(", "),
                text(flip.text()),
                text(")"),
            ],
        }
    }
}

impl std::fmt::Debug for ClusterEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_pieces(f, &self.pieces())
    }
}

/// Something due at an instant of virtual time.
#[derive(Debug)]
enum Ev {
    /// What the network delivers to the client end of a socket.
    ToClient { sock: u64, delivery: Delivery },
    /// Bytes that reach the server end of a socket.
    ToServer { sock: u64, bytes: Vec<u8> },
    /// The client's FIN reaches the server end of a socket, behind the bytes sent before it.
    Fin { sock: u64 },
    /// A name lookup of a client's connect completes.
    Resolved {
        client: usize,
        /// The connect it belongs to: a later connect ignores it.
        gen: u32,
        token: ResolveToken,
        host: String,
        result: Result<Vec<std::net::SocketAddr>, String>,
    },
    /// A client's next step of its plan is due (unless it moved on to another connect).
    Wake { client: usize, gen: u32 },
    /// A scheduled cluster event.
    Cluster(ClusterEvent),
    /// The faults stop.
    Liveness,
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
    socks: SockTable,
    next_sock: u64,
    clients: Vec<Client>,
    rng: Rng,
    /// Whether a TLS connection the server ends breaks with an alert instead (a stream of
    /// its own, so that the draws of runs without TLS stay as they were).
    alerts: Rng,
    bug: Bug,
    steps: u64,
    /// Counters.
    pub stats: Stats,
    /// When the faults stopped (the liveness phase began).
    calm_since: Option<Instant>,
    /// Spare buffers `drain` swaps with a client's raw actions and commands, so that a run
    /// allocates them once.
    seen_buf: Vec<Seen>,
    mail_buf: Vec<Mail>,
}

/// The stream of [`World::alerts`].
const ALERT_STREAM: u64 = 0x0061_6c65_7274;

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
            socks: SockTable::default(),
            next_sock: 1,
            clients: Vec::new(),
            rng: pgyard_types::rng_from_seed(seed),
            alerts: pgyard_types::side_stream(&pgyard_types::rng_from_seed(seed), ALERT_STREAM),
            bug,
            steps: 0,
            stats: Stats::default(),
            calm_since: None,
            seen_buf: Vec::new(),
            mail_buf: Vec::new(),
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
        self.clients.push(Client {
            ct_ns,
            memory: spec.memory.map(MemoryUse::memory),
            hosts_seen: memory::HostLog::default(),
            connects_left: spec.connects,
            spec,
            machine: None,
            core: None,
            seen: Vec::new(),
            outbox: Outbox::default(),
            held: None,
            gen: 0,
            seed,
            mode: Mode::Idle,
            stage: Stage::Safety,
            socks: AttemptSocks::default(),
            session: None,
            started: start,
            watch: Watch::default(),
        });
        self.queue.push(start, Ev::Wake { client: id, gen: 0 });
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
        self.check_converged()
    }

    fn handle(&mut self, t: &mut Trace, ev: Ev) -> Result<(), Violation> {
        match ev {
            Ev::Wake { client: i, gen } => {
                if self.clients[i].gen != gen || self.clients[i].mode == Mode::Connecting {
                    return Ok(());
                }
                self.wake(t, i)
            }
            Ev::Resolved {
                client: i,
                gen,
                token,
                host,
                result,
            } => {
                let c = &self.clients[i];
                if c.gen != gen || c.mode != Mode::Connecting {
                    return Ok(());
                }
                let now = self.now;
                self.clients[i]
                    .hosts_seen
                    .saw(&host, now, memory::LastSeen::Other);
                self.with_core(i, |core, tap| core.resolved(tap, now, token, &host, result));
                self.drain(t, i)
            }
            Ev::ToServer { sock, bytes } => self.deliver_to_server(sock, &bytes),
            Ev::Fin { sock } => self.deliver_fin(sock),
            Ev::ToClient { sock, delivery } => self.deliver_to_client(t, sock, delivery),
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
        let [a, b, c, d, f] = e.pieces();
        t.line(&[
            Piece::Text("t="),
            self.now.0.into(),
            Piece::Text(" cluster "),
            a,
            b,
            c,
            d,
            f,
        ]);
        match e {
            ClusterEvent::Set { node, state } => self.nodes[node].state = state,
            ClusterEvent::Crash(node) => {
                self.nodes[node].state = NodeState::Crashed;
                let ids: Vec<u64> = self
                    .socks
                    .iter()
                    .filter(|(_, s)| s.node == node && !s.server_gone())
                    .map(|(id, _)| id)
                    .collect();
                for id in ids {
                    self.server_close(id);
                }
            }
            ClusterEvent::Hang { node, hung } => self.nodes[node].hang = hung,
            ClusterEvent::Limit { node, max } => self.nodes[node].max_sessions = max,
            ClusterEvent::Flip { node, flip } => self.nodes[node].pending_flip = Some(flip),
        }
    }
}

/// One line describing a client's configuration, formatted in place (trace lines, failure
/// reports).
pub struct SpecText<'a>(pub &'a ClientSpec);

impl<'a> SpecText<'a> {
    /// The line's pieces, pushed onto `out`: every seed traces one per client, and `fmt`
    /// with the durations' `Debug` was a visible share of a seed's cost.
    pub fn push_pieces(&self, out: &mut Vec<Piece<'a>>) {
        let c = &self.0.config;
        out.push(Piece::Text("hosts="));
        for (i, h) in self.0.hosts.iter().enumerate() {
            if i > 0 {
                out.push(Piece::Text(","));
            }
            out.push(Piece::Text(h));
        }
        out.push(Piece::Text(" tsa="));
        out.push(Piece::Text(c.target_session_attrs().as_str()));
        out.push(Piece::Text(" lb="));
        out.push(Piece::Text(lb_debug(c.load_balance_hosts())));
        out.push(Piece::Text(" strategy="));
        out.push(Piece::Text(strategy_debug(c.strategy())));
        out.push(Piece::Text(" connect_timeout="));
        push_option_duration_debug(c.connect_timeout().ok().flatten(), out);
        out.push(Piece::Text(" failover="));
        push_option_duration_debug(c.failover_timeout(), out);
        if let Some(r) = self.0.require_auth {
            out.push(Piece::Text(" require_auth="));
            out.push(Piece::Text(r.raw));
        }
    }
}

impl std::fmt::Display for SpecText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut pieces = Vec::with_capacity(32);
        self.push_pieces(&mut pieces);
        write_pieces(f, &pieces)
    }
}

/// `{:?}` of a `load_balance_hosts` value.
fn lb_debug(lb: LoadBalanceHosts) -> &'static str {
    match lb {
        LoadBalanceHosts::Disable => "Disable",
        LoadBalanceHosts::Random => "Random",
    }
}

/// `{:?}` of a strategy.
fn strategy_debug(s: Strategy) -> &'static str {
    match s {
        Strategy::Sequential => "Sequential",
        Strategy::Race => "Race",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_line_names_read_as_debug_does() {
        for lb in LoadBalanceHosts::LIBPQ_VALUES {
            assert_eq!(lb_debug(*lb), format!("{lb:?}"));
        }
        for s in [Strategy::Sequential, Strategy::Race] {
            assert_eq!(strategy_debug(s), format!("{s:?}"));
        }
    }
}
