//! The clients' plans, on the moving side: start a connect (a new machine, or `reset()` on the
//! old one), hold the session it won or lose it, reconnect, give up on a connect when the
//! application would, and switch to the liveness phase. Each step tells the client's
//! [`Watch`] what it did and asks the checks of `invariants.rs` at the moments they apply.

use pgyard_connect::{AttemptId, ConnectError, Connector, Established, HostStatusMemory};
use pgyard_driver::core::Core;
use pgyard_types::{uniform_inclusive, Instant};

use super::drive::{Outbox, Seen, SimCore, SimTls};
use super::invariants::Watch;
use super::memory::{HostLog, LastSeen};
use super::pg::{Node, NodeState};
use super::{ClientSpec, Ev, World};
use crate::{trace, trace_line, Trace, Violation};

/// What a client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Mode {
    /// Between connects (or done with its plan).
    Idle,
    /// A connect is under way.
    Connecting,
    /// Holding a session; also a session that broke, which the client will replace by
    /// `reset()` on the same machine.
    Session,
    /// Its liveness connect failed; it makes no more.
    Finished,
}

/// Where a client is in the run's two phases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stage {
    /// Faults run; the client follows its plan.
    Safety,
    /// Faults stopped while a connect was under way, and the client let it run on; when it
    /// ends the client makes its liveness connect.
    Carried,
    /// Its liveness connect is due or under way.
    Live,
    /// Its liveness connect ended.
    Done,
}

/// A client: its spec, the machine it drives, and what it saw.
pub(super) struct Client {
    pub(super) spec: ClientSpec,
    /// `connect_timeout` in nanoseconds, parsed once.
    pub(super) ct_ns: Option<u64>,
    pub(super) machine: Option<Connector>,
    /// The driver core of the connect under way (or of the last one, for its attempt log).
    pub(super) core: Option<SimCore>,
    /// The machine's raw actions the core took since the world last looked.
    pub(super) seen: Vec<Seen>,
    /// The attempts' commands, posted by the core.
    pub(super) outbox: Outbox,
    /// The socket of the session a reset replaces.
    pub(super) held: Option<u64>,
    /// Counts connects, so that events of an earlier one are recognised and dropped.
    pub(super) gen: u32,
    /// The seed of the next machine's own draws (advanced per machine).
    pub(super) seed: u64,
    pub(super) mode: Mode,
    pub(super) stage: Stage,
    /// The socket of each attempt of the connect under way.
    pub(super) socks: AttemptSocks,
    /// The session held: its attempt and socket.
    pub(super) session: Option<(AttemptId, u64)>,
    pub(super) connects_left: u32,
    /// When the connect under way started.
    pub(super) started: Instant,
    /// What the invariant checks know of this client.
    pub(super) watch: Watch,
    /// The host-status memory between machines (the machine holds it while it runs).
    pub(super) memory: Option<HostStatusMemory>,
    /// What the world saw of the client's hosts, for the memory's checks.
    pub(super) hosts_seen: HostLog,
}

/// Which socket each attempt of a client uses, ordered by attempt. A client has a handful
/// at a time, so a sorted `Vec` beats a map, and `clear` keeps its allocation for the next
/// connect.
#[derive(Debug, Default)]
pub(super) struct AttemptSocks(Vec<(AttemptId, u64)>);

impl AttemptSocks {
    /// The socket of `attempt`.
    pub(super) fn get(&self, attempt: &AttemptId) -> Option<&u64> {
        self.0.iter().find(|(a, _)| a == attempt).map(|(_, id)| id)
    }

    /// Records `attempt`'s socket (replacing an earlier one of the same attempt).
    pub(super) fn insert(&mut self, attempt: AttemptId, id: u64) {
        match self.0.binary_search_by_key(&attempt, |&(a, _)| a) {
            Ok(at) => self.0[at].1 = id,
            Err(at) => self.0.insert(at, (attempt, id)),
        }
    }

    /// Forgets `attempt`'s socket.
    pub(super) fn remove(&mut self, attempt: &AttemptId) {
        self.0.retain(|(a, _)| a != attempt);
    }

    /// Forgets every socket.
    pub(super) fn clear(&mut self) {
        self.0.clear();
    }

    /// The sockets, in attempt order.
    pub(super) fn values(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|&(_, id)| id)
    }
}

impl Client {
    /// When the failover budget of the connect under way runs out, in nanoseconds (0 when
    /// it has none).
    pub(super) fn budget_end(&self) -> u64 {
        self.spec
            .config
            .failover_timeout()
            .map_or(0, |b| self.started.0 + b.as_nanos() as u64)
    }
}

impl World {
    /// The faults stop: nodes settle, and every client makes one liveness connect (after
    /// the connect under way, when it may run on).
    pub(super) fn liveness(&mut self, t: &mut Trace) -> Result<(), Violation> {
        self.net.faults = false;
        self.calm_since = Some(self.now);
        for n in &mut self.nodes {
            n.hang = false;
            // A refused ALPN selection aborts a libpq connect outright, like a failed
            // handshake: the liveness phase repairs it with the other faults.
            n.alpn = Some(b"postgresql");
            n.max_sessions = n.max_sessions.max(1000);
            // A role change still armed would move a fitting server after the promise.
            n.pending_flip = None;
            n.state = match n.state {
                NodeState::StartingUp { then } => NodeState::from(then),
                NodeState::Promoting => NodeState::Primary,
                NodeState::ShuttingDown => NodeState::Crashed,
                s => s,
            };
        }
        trace!(
            t,
            "t={} liveness phase: faults stop; nodes {}",
            self.now.0,
            States(&self.nodes)
        );
        for i in 0..self.clients.len() {
            let c = &mut self.clients[i];
            c.stage = Stage::Live;
            c.connects_left = 0;
            match c.mode {
                Mode::Connecting => {
                    let rides_out = c.spec.budget_rides_out && c.budget_end() > 0;
                    if c.ct_ns.is_some() || rides_out {
                        c.stage = Stage::Carried;
                        let promise = self.carried_promise(i);
                        self.clients[i].watch.promise(promise);
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
        let socks: Vec<u64> = self.clients[i].socks.values().collect();
        for id in socks {
            self.client_close(id);
        }
        let c = &mut self.clients[i];
        c.socks.clear();
        c.watch.abandoned();
        if let Some(mem) = c.machine.as_mut().and_then(Connector::take_host_memory) {
            c.memory = Some(mem);
        }
        c.machine = None;
        c.core = None;
        // Commands of the dropped core go nowhere, like a dropped worker channel's.
        c.outbox.borrow_mut().clear();
        c.mode = Mode::Idle;
    }

    /// The application ends its session: Terminate, then close.
    fn end_session(&mut self, t: &mut Trace, i: usize) {
        if let Some((a, id)) = self.clients[i].session.take() {
            trace_line!(t, "t=", self.now.0, " c", i, " ends session a", a.0);
            self.send(id, terminate());
            self.client_close(id);
            self.clients[i].socks.remove(&a);
        }
        self.clients[i].mode = Mode::Idle;
    }

    /// The client's next step is due: end a held session, or reconnect.
    pub(super) fn wake(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let c = &self.clients[i];
        match c.mode {
            // PQreset on a held session: the machine sends it Terminate and closes it.
            Mode::Session
                if c.spec.hold_ns.is_some()
                    && c.spec.use_reset
                    && c.connects_left > 0
                    && c.stage == Stage::Safety =>
            {
                self.next_connect(t, i)
            }
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
                let c = &self.clients[i];
                if c.connects_left > 0 || c.stage != Stage::Safety {
                    self.next_connect(t, i)
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }

    /// Schedules the next connect after some think time, if the plan has one left.
    fn next_or_idle(&mut self, i: usize) {
        if self.clients[i].connects_left > 0 {
            let think = 1_000_000 + uniform_inclusive(&mut self.rng, 200_000_000);
            let gen = self.clients[i].gen;
            let at = Instant(self.now.0 + think);
            self.queue.push(at, Ev::Wake { client: i, gen });
        }
    }

    /// The plan's next connect: `reset()` on the machine it has when the spec says so (never
    /// in the liveness phase), else a new machine.
    fn next_connect(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let c = &mut self.clients[i];
        match c.stage {
            Stage::Done => return Ok(()),
            Stage::Safety if c.connects_left == 0 => return Ok(()),
            Stage::Safety => c.connects_left -= 1,
            Stage::Carried | Stage::Live => {}
        }
        let reuse = c.spec.use_reset && c.machine.is_some() && c.stage == Stage::Safety;
        if reuse {
            trace!(t, "t={} c{i} reset()", self.now.0);
            c.mode = Mode::Connecting;
            c.gen += 1;
            c.started = self.now;
            c.watch.reset();
            c.hosts_seen.begin(self.now);
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
                // PQfinish: Terminate, then close.
                self.send(id, terminate());
                self.client_close(id);
            }
            self.start_connect(t, i)
        }
    }

    /// A connect on a new machine (with the run's planted bug, if any).
    fn start_connect(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let now = self.now;
        let live = self.clients[i].stage != Stage::Safety;
        let promise = live.then(|| self.fresh_promise(i));
        let c = &mut self.clients[i];
        c.gen += 1;
        c.seed = c.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        #[allow(unused_mut)]
        let mut m = Connector::new(std::sync::Arc::clone(&c.spec.config), now, c.seed)
            .with_extra_startup_params(c.spec.startup.extras.clone());
        #[cfg(feature = "planted-bugs")]
        if let Some(b) = self.bug {
            m = m.with_planted_bug(b);
        }
        #[cfg(not(feature = "planted-bugs"))]
        let _ = self.bug;
        // The memory goes from the machine that had it to the next one.
        if let Some(mem) = c.machine.as_mut().and_then(Connector::take_host_memory) {
            c.memory = Some(mem);
        }
        if let Some(mem) = c.memory.take() {
            m = m.with_host_memory(mem);
        }
        c.hosts_seen.begin(now);
        c.machine = Some(m);
        c.core = Some(Core::new(SimTls, None));
        c.mode = Mode::Connecting;
        c.started = now;
        c.socks.clear();
        c.watch.fresh();
        if let Some((promise, bound)) = promise {
            let fitting = promise.must_succeed;
            c.watch.promise(promise);
            trace_line!(
                t,
                "t=",
                now.0,
                " c",
                i,
                " liveness connect, fitting=",
                fitting,
                " bound=",
                bound,
                "ns"
            );
        } else {
            trace_line!(t, "t=", now.0, " c", i, " connect");
        }
        self.drain(t, i)
    }

    /// Client `i`'s connect ended with `result`.
    pub(super) fn done(
        &mut self,
        t: &mut Trace,
        i: usize,
        result: Result<Box<Established>, ConnectError>,
    ) -> Result<(), Violation> {
        let winner = result.as_ref().ok().map(|e| e.attempt);
        self.check_all_closed(i, winner)?;
        match result {
            Ok(est) => self.won(t, i, est),
            Err(e) => self.failed(t, i, e),
        }
    }

    /// The connect won a session: judge it, then hold it.
    fn won(&mut self, t: &mut Trace, i: usize, est: Box<Established>) -> Result<(), Violation> {
        let now = self.now;
        let id = self.check_winner_known(i, &est)?;
        self.check_alpn(i, &est, id)?;
        self.check_told(i, &est, id)?;
        let sock = self.socks.get(&id);
        let node = sock.map(|s| s.node);
        let role = sock.and_then(|s| s.session.seen_at_check);
        let name = node.map_or("?", |n| self.nodes[n].name.as_str());
        trace_line!(
            t,
            "t=",
            now.0,
            " c",
            i,
            " connected a",
            est.attempt.0,
            " to ",
            name,
            " in_recovery=",
            debug_text(role.map(|r| r.in_recovery)),
            " read_only=",
            debug_text(role.map(|r| r.read_only))
        );
        let needless = sock.map_or(0, |s| s.session.needless_checks);
        if let Some(n) = node {
            let name = &self.nodes[n].name;
            self.clients[i].hosts_seen.saw(name, now, LastSeen::Held);
        }
        self.check_won(i, &est, node, role)?;
        self.check_protocol_floor(i, id)?;
        self.check_no_needless_check(i, node, needless)?;
        let c = &mut self.clients[i];
        c.watch.established(est.attempt);
        c.session = Some((est.attempt, id));
        c.mode = Mode::Session;
        self.stats.connected += 1;
        if let Some(n) = node {
            self.stats.sessions.push((i, n));
        }
        self.finish(t, i, true)?;
        let c = &mut self.clients[i];
        if c.mode == Mode::Session {
            if let Some(hold) = c.spec.hold_ns {
                let gen = c.gen;
                self.queue
                    .push(Instant(now.0 + hold), Ev::Wake { client: i, gen });
            }
        }
        Ok(())
    }

    /// The connect failed: judge its report, then go on with the plan.
    fn failed(&mut self, t: &mut Trace, i: usize, e: ConnectError) -> Result<(), Violation> {
        let now = self.now;
        trace_line!(
            t,
            "t=",
            now.0,
            " c",
            i,
            " failed: ",
            e.reports.len(),
            " report entries"
        );
        self.check_report(i, &e)?;
        self.check_wording(i, &e)?;
        self.check_budget_used(i, &e)?;
        self.stats.failed += 1;
        let excused = self.ended_by_fault_phase_attempt(i, &e);
        if excused {
            trace!(
                t,
                "t={} c{i} ended by an attempt from before the calm",
                now.0
            );
        }
        self.clients[i].mode = Mode::Idle;
        self.check_live_failure(i, &e, excused)?;
        self.finish(t, i, false)
    }

    /// After a connect ends: the liveness phase's bookkeeping, then the plan's next step.
    fn finish(&mut self, t: &mut Trace, i: usize, ok: bool) -> Result<(), Violation> {
        let now = self.now;
        self.check_within_bound(i)?;
        let c = &mut self.clients[i];
        match c.stage {
            Stage::Carried => {
                c.stage = Stage::Live;
                if ok {
                    self.end_session(t, i);
                }
                self.start_connect(t, i)
            }
            Stage::Live | Stage::Done => {
                c.stage = Stage::Done;
                if ok {
                    self.stats.live_ok += 1;
                }
                c.mode = if ok { Mode::Session } else { Mode::Finished };
                Ok(())
            }
            Stage::Safety => {
                if !ok {
                    let gen = c.gen;
                    let think = 1_000_000 + uniform_inclusive(&mut self.rng, 300_000_000);
                    self.queue
                        .push(Instant(now.0 + think), Ev::Wake { client: i, gen });
                }
                Ok(())
            }
        }
    }
}

/// What `{:?}` prints for `role`, for [`trace_line!`].
fn debug_text(role: Option<bool>) -> &'static str {
    match role {
        Some(true) => "Some(true)",
        Some(false) => "Some(false)",
        None => "None",
    }
}

/// The nodes' states, comma-separated, formatted in place for the trace.
struct States<'a>(&'a [Node]);

impl std::fmt::Display for States<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(n.state.text())?;
        }
        Ok(())
    }
}

/// The bytes of a Terminate message.
fn terminate() -> Vec<u8> {
    vec![b'X', 0, 0, 0, 4]
}
