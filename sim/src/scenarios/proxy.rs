//! `proxy`: clients run transactions through pgyard-proxy's machines — simple queries,
//! transaction blocks, unnamed and named prepared statements, writes and reads after them
//! with MIN_LSN, slow queries that get cancelled, with ROUTE, TAG and unknown middleware
//! messages between them — over a pool of server connections to a small cluster whose
//! servers die, get promoted and lag. Their bytes are cut into random chunks and delivered
//! in a random interleaving on simulated time. The scenario plays the adapter as
//! `crates/tokio/src/proxy/` does (`proxy_adapter.rs`): it opens servers through the real
//! connect machine (`proxy_connect.rs`), checks an idle server before lending it, checks the
//! replay position for MIN_LSN, hands a waiting client its server through a channel the
//! client reads later, routes cancels to the server a client holds, and tells the sessions
//! when a server connection ends. A third of the seeds run the pools in session mode (a
//! client keeps its server; `DISCARD ALL` runs before the server serves another), and some
//! draw idle and lifetime limits short enough to strike (`proxy_limits.rs`). Invariants: see
//! `docs/simulation.md`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgyard_proxy::{ClientId, Lent, PoolKey, PoolMode, PoolSettings, Pools, Route, ServerId};
use pgyard_types::{rng_from_seed, uniform_inclusive, Instant, Lsn, Rng, RngCore};

pub use super::proxy_client::Bug;
use super::proxy_client::{new_session, Client};
use super::proxy_cluster::{Change, Cluster, ClusterMix};
use super::proxy_connect::{NetEv, Opening, Routes};
use super::proxy_plan::{plan, startup_options, startup_zone, PlanMix, PoolMix};
use super::proxy_server::{FakeServer, Placement};
use crate::world::{pg, Queue};
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct ProxyScenario;

impl Scenario for ProxyScenario {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn description(&self) -> &'static str {
        "transaction pooling with routes, prepared statements, MIN_LSN and cancels over a cluster that fails over"
    }

    fn run(&self, rng: &mut Rng, t: &mut Trace) -> Result<u64, Violation> {
        run_proxy(rng, t, None)
    }
}

/// A broken invariant.
pub(super) fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Most simulated time between two steps of the clients and the network.
const STEP_NS: u64 = 200_000;
/// Steps after which a run counts as a busy loop.
const STEPS_MAX: u64 = 100_000;

/// Something due at an instant of simulated time.
#[derive(Debug)]
pub(super) enum Ev {
    /// A server connect's task starts.
    Start { server: ServerId },
    /// Traffic of a server connect.
    Net { server: ServerId, ev: NetEv },
    /// The cluster changes.
    Change(Change),
    /// A dead server's end (its FATAL 57P01 when it said one, then EOF) reaches the proxy.
    Death { server: ServerId, fatal: bool },
    /// A slow query ends by itself.
    SleepDone { server: ServerId, run: u64 },
    /// A client sends a CancelRequest for its request under way.
    Cancel { client: usize, gen: u32, txn: u64 },
    /// A CancelRequest the proxy sent on reaches the server.
    CancelArrives {
        node: usize,
        life: u32,
        pid: i32,
        key: Vec<u8>,
        from: ClientId,
    },
    /// The server closed the connection of a CancelRequest: the cancel is done.
    CancelDone { server: ServerId },
    /// A client walks away from the transaction under way.
    Leave { client: usize, gen: u32, txn: u64 },
    /// Session mode: the answer to the `DISCARD ALL` sent to a server has come back.
    ResetDone { server: ServerId },
    /// The admin console's PAUSE, lifted by a RESUME this long after.
    Pause { resume_after: u64, by_name: bool },
    /// The admin console's RESUME.
    Resume,
    /// The admin console's RECONNECT, of the clients' database or of every one.
    Reconnect { by_name: bool },
    /// A configuration reload that sets the pool size.
    Reload { size: usize },
}

/// A pooled server connection (the proxy's end and the server's).
#[derive(Debug)]
pub(super) struct Conn {
    /// The server it reaches.
    pub(super) node: usize,
    /// That server's life when the connection was made.
    pub(super) life: u32,
    /// The server's query side.
    pub(super) fake: FakeServer,
    /// The server's login side (its session slot).
    pub(super) login: pg::Session,
    /// The backend's cancel key.
    pub(super) key: (i32, Vec<u8>),
    /// Bytes on their way to the proxy.
    pub(super) replies: VecDeque<u8>,
    /// The server's end is gone (its process died): what is sent is lost.
    pub(super) dead: bool,
    /// The EOF has reached the proxy.
    pub(super) eof: bool,
    /// Bumped at every slow query, so that a stale end is ignored.
    pub(super) run: u64,
    /// Its pool's route.
    pub(super) route: Route,
    /// The `options` its StartupMessage carried (empty: none).
    pub(super) options: Vec<u8>,
}

/// The answer a waiting client's task reads from its channel.
#[derive(Debug)]
pub(super) enum Granted {
    /// A server.
    Server(ServerId, Lent),
    /// The wait timed out.
    Refused(String),
}

/// The whole simulated world of one seed.
pub(super) struct World {
    /// The simulated clock.
    pub(super) now: Instant,
    /// Every draw after the mix and the plans.
    pub(super) rng: Rng,
    /// Timed events.
    pub(super) q: Queue<Ev>,
    /// The bug planted in every client session.
    pub(super) bug: Bug,
    /// The pools' mode and limits.
    pub(super) limits: PoolMix,
    /// Largest chunk a byte stream is cut into.
    pub(super) chunk_max: u64,
    /// The servers, the WAL and the replay positions.
    pub(super) cluster: Cluster,
    /// The cluster's part of the mix.
    pub(super) cmix: ClusterMix,
    /// Each route's connect settings.
    pub(super) routes: Routes,
    /// The pools under test.
    pub(super) pools: Pools,
    /// Server connects under way.
    pub(super) openings: BTreeMap<ServerId, Opening>,
    /// Every server connection the proxy has.
    pub(super) conns: BTreeMap<ServerId, Conn>,
    /// The adapter's books (`shared.rs`): idle servers, clients waiting and the pool they
    /// asked, answers sent to waiting clients not read yet, the server each client holds for
    /// cancels, the clients' cancel keys.
    pub(super) idle: BTreeMap<ServerId, Lent>,
    pub(super) waiting: BTreeMap<ClientId, PoolKey>,
    pub(super) channel: BTreeMap<ClientId, Granted>,
    pub(super) holding: BTreeMap<ClientId, ServerId>,
    pub(super) keys: BTreeMap<i32, (ClientId, Vec<u8>)>,
    /// The client tasks' books (`client_task.rs`): the pool each asked last, whether it
    /// awaits an answer on its channel, the server it has.
    pub(super) wanted: BTreeMap<ClientId, PoolKey>,
    pub(super) later: BTreeSet<ClientId>,
    pub(super) lent: BTreeMap<ClientId, ServerId>,
    /// The judge's books: who has each server, the client behind each session, where each
    /// transaction ran, under which route and MIN_LSN, the server each session was lent last
    /// (and whether its death had reached the proxy by then), the servers that died.
    pub(super) holder: BTreeMap<ServerId, ClientId>,
    pub(super) sessions: BTreeMap<ClientId, usize>,
    pub(super) placed: Placement,
    pub(super) route_of: BTreeMap<(u64, u64), Route>,
    pub(super) min_lsn_of: BTreeMap<(u64, u64), Lsn>,
    pub(super) last_lend: BTreeMap<ClientId, (ServerId, bool)>,
    pub(super) dead: BTreeSet<ServerId>,
    /// Session mode: the server each client connection ran on; servers running their
    /// `DISCARD ALL` (the adapter's `resetting`), with what goes back to the idle list.
    pub(super) ran_on: BTreeMap<(u64, u64), u64>,
    pub(super) resetting: BTreeMap<ServerId, Lent>,
    /// The judge's books of the limits: when each server was asked for, since when each
    /// idle one is idle (and whether it came back from a client), and the first broken
    /// promise seen where no error can be returned.
    pub(super) born: BTreeMap<ServerId, Instant>,
    pub(super) idle_since: BTreeMap<ServerId, (Instant, bool)>,
    pub(super) fault: Option<Violation>,
    /// PAUSE is in force; the connects it made the pools forget (closed when they arrive,
    /// counted in no pool's size, as `docs/proxy.md` says).
    pub(super) paused: bool,
    /// The PAUSE names the clients' database (`PAUSE app`), rather than every database.
    pub(super) paused_by_name: bool,
    pub(super) forgotten: BTreeSet<ServerId>,
    /// The servers a RECONNECT found open (the judge's record, see `proxy_reconnect.rs`).
    pub(super) retired: BTreeSet<ServerId>,
    /// The servers open or being opened when a reload shrank the pools (`proxy_reload.rs`).
    pub(super) shrunk_from: BTreeSet<ServerId>,
    /// The clients, by plan.
    pub(super) clients: Vec<Client>,
    /// Session ids handed out so far.
    pub(super) next_session: u64,
}

/// What a step can do besides the timed events.
enum Action {
    /// A client sends its next request.
    Send(usize),
    /// Bytes (or the EOF) of a lent server reach its client's task.
    Deliver(ServerId),
    /// A waiting client's task reads its channel.
    Receive(ClientId),
}

/// Runs one seed with `bug` planted in every client session.
pub fn run_proxy(rng: &mut Rng, t: &mut Trace, bug: Bug) -> Result<u64, Violation> {
    let clients = 1 + uniform_inclusive(rng, 3) as usize;
    let size = 1 + uniform_inclusive(rng, 2) as usize;
    let chunk_max = [1u64, 7, 64, 4096][uniform_inclusive(rng, 3) as usize];
    let cmix = ClusterMix::draw(rng);
    let pmix = PlanMix::draw(rng);
    let limits = PoolMix::draw(rng);
    trace!(
        t,
        "mix clients={clients} pool_size={size} chunk_max={chunk_max} {cmix:?} {pmix:?} {limits:?}"
    );
    let nanos = |ns: Option<u64>| ns.map(Duration::from_nanos);
    let mut w = World {
        now: Instant::ZERO,
        rng: rng_from_seed(rng.next_u64()),
        q: Queue::new(),
        bug,
        limits,
        chunk_max,
        cluster: Cluster::new(rng, &cmix),
        routes: Routes::new(cmix.nodes, cmix.failover_ns)?,
        cmix,
        pools: Pools::new(PoolSettings {
            size,
            wait_timeout: Duration::from_secs(60),
            idle_timeout: nanos(limits.idle_ns),
            lifetime: nanos(limits.lifetime_ns),
        }),
        openings: BTreeMap::new(),
        conns: BTreeMap::new(),
        idle: BTreeMap::new(),
        waiting: BTreeMap::new(),
        channel: BTreeMap::new(),
        holding: BTreeMap::new(),
        keys: BTreeMap::new(),
        wanted: BTreeMap::new(),
        later: BTreeSet::new(),
        lent: BTreeMap::new(),
        holder: BTreeMap::new(),
        sessions: BTreeMap::new(),
        placed: Placement::new(),
        route_of: BTreeMap::new(),
        min_lsn_of: BTreeMap::new(),
        last_lend: BTreeMap::new(),
        dead: BTreeSet::new(),
        ran_on: BTreeMap::new(),
        resetting: BTreeMap::new(),
        born: BTreeMap::new(),
        idle_since: BTreeMap::new(),
        fault: None,
        paused: false,
        paused_by_name: false,
        forgotten: BTreeSet::new(),
        retired: BTreeSet::new(),
        shrunk_from: BTreeSet::new(),
        clients: Vec::new(),
        next_session: 0,
    };
    for c in 0..clients {
        let zone = startup_zone(rng, &pmix);
        let options = startup_options(rng);
        let txns = plan(rng, &pmix, limits.session);
        let sid = w.new_session_id(c);
        let mode = w.mode();
        let session = new_session(w.now, sid, &mut w.rng, bug, mode);
        w.clients.push(Client::new(
            c as u64,
            session,
            txns,
            limits.session,
            (zone, options),
        ));
    }
    if let Some((at, by_name)) = limits.reconnect_ns {
        w.q.push(Instant(at), Ev::Reconnect { by_name });
    }
    if let Some((at, size)) = limits.reload_ns {
        w.q.push(Instant(at), Ev::Reload { size });
    }
    if let Some((at, resume_after, by_name)) = limits.pause_ns {
        w.q.push(
            Instant(at),
            Ev::Pause {
                resume_after,
                by_name,
            },
        );
    }
    w.run(t)?;
    w.finish()?;
    Ok(w.now.0)
}

impl World {
    /// The pools' mode.
    pub(super) fn mode(&self) -> PoolMode {
        if self.limits.session {
            PoolMode::Session
        } else {
            PoolMode::Transaction
        }
    }

    /// A fresh session id for client `c`.
    pub(super) fn new_session_id(&mut self, c: usize) -> ClientId {
        let id = ClientId(self.next_session);
        self.next_session += 1;
        self.sessions.insert(id, c);
        id
    }

    fn run(&mut self, t: &mut Trace) -> Result<(), Violation> {
        let mut steps = 0u64;
        loop {
            steps += 1;
            if steps > STEPS_MAX {
                let detail = format!("over {STEPS_MAX} steps");
                return Err(violation("no-busy-loop", detail));
            }
            self.settle(t)?;
            self.judge_limits()?;
            if steps == self.cmix.at_step {
                let changes = self.cluster.plan_fault(&mut self.rng, &self.cmix, self.now);
                for (at, change) in changes {
                    self.q.push(at, Ev::Change(change));
                }
            }
            let mut ready = self.ready();
            let timed = self.next_timed();
            if ready.is_empty() {
                let Some(at) = timed else { return Ok(()) };
                self.now = self.now.max(at);
                self.fire_timed(t)?;
                continue;
            }
            let at = Instant(self.now.0 + uniform_inclusive(&mut self.rng, STEP_NS));
            if timed.is_some_and(|due| due <= at) {
                self.now = self.now.max(timed.unwrap_or(at));
                self.fire_timed(t)?;
                continue;
            }
            self.now = at;
            let i = uniform_inclusive(&mut self.rng, ready.len() as u64 - 1) as usize;
            match ready.swap_remove(i) {
                Action::Send(i) => self.send(t, i)?,
                Action::Deliver(server) => self.deliver(t, server)?,
                Action::Receive(sid) => self.receive(t, sid)?,
            }
        }
    }

    fn ready(&self) -> Vec<Action> {
        let mut ready = Vec::new();
        for (i, c) in self.clients.iter().enumerate() {
            if c.ready_to_send() {
                ready.push(Action::Send(i));
            }
        }
        for server in self.holder.keys() {
            if let Some(conn) = self.conns.get(server) {
                if !conn.replies.is_empty() || conn.eof {
                    ready.push(Action::Deliver(*server));
                }
            }
        }
        for sid in self.channel.keys() {
            if self.later.contains(sid) {
                ready.push(Action::Receive(*sid));
            }
        }
        ready
    }

    /// The earliest timed thing: an event, a connect's deadline, the pools' or a session's.
    fn next_timed(&self) -> Option<Instant> {
        let mut next = self.q.peek_time();
        let mut at = |d: Option<Instant>| {
            if let Some(d) = d {
                next = Some(next.map_or(d, |n| n.min(d)));
            }
        };
        for o in self.openings.values() {
            at(o.deadline());
        }
        at(self.pools.poll_timeout());
        for c in &self.clients {
            at(c.session.poll_timeout());
        }
        next
    }

    /// Handles whatever is due now, earliest source first.
    fn fire_timed(&mut self, t: &mut Trace) -> Result<(), Violation> {
        let now = self.now;
        if self.q.peek_time().is_some_and(|at| at <= now) {
            if let Some((_, ev)) = self.q.pop() {
                return self.event(t, ev);
            }
        }
        let due: Vec<ServerId> = self
            .openings
            .iter()
            .filter(|(_, o)| o.deadline().is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for server in due {
            self.connect_step(t, server, None)?;
        }
        if self.pools.poll_timeout().is_some_and(|d| d <= now) {
            self.pools.handle_timeout(now);
            self.perform_pools(t, None);
        }
        for c in &mut self.clients {
            if c.session.poll_timeout().is_some_and(|d| d <= now) {
                c.session.handle_timeout(now);
            }
        }
        Ok(())
    }

    fn event(&mut self, t: &mut Trace, ev: Ev) -> Result<(), Violation> {
        match ev {
            Ev::Start { server } => self.connect_step(t, server, None),
            Ev::Net { server, ev } => self.connect_step(t, server, Some(ev)),
            Ev::Change(change) => {
                self.change(t, change);
                Ok(())
            }
            Ev::Death { server, fatal } => {
                self.death_arrives(t, server, fatal);
                Ok(())
            }
            Ev::SleepDone { server, run } => self.sleep_done(server, run),
            Ev::Cancel { client, gen, txn } => {
                self.client_cancels(t, client, gen, txn);
                Ok(())
            }
            Ev::CancelArrives {
                node,
                life,
                pid,
                key,
                from,
            } => self.cancel_arrives(t, node, life, (pid, key), from),
            Ev::CancelDone { server } => {
                self.cancel_done(t, server);
                Ok(())
            }
            Ev::Leave { client, gen, txn } => self.leave(t, client, gen, txn),
            Ev::ResetDone { server } => self.reset_done(t, server),
            Ev::Pause {
                resume_after,
                by_name,
            } => {
                self.pause(t, resume_after, by_name);
                Ok(())
            }
            Ev::Resume => {
                self.resume(t);
                Ok(())
            }
            Ev::Reconnect { by_name } => {
                self.console_reconnect(t, by_name);
                Ok(())
            }
            Ev::Reload { size } => {
                self.console_reload(t, size);
                Ok(())
            }
        }
    }

    /// A client sends its next request (its goodbye once its plan is done), cut into chunks.
    fn send(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let now = self.now;
        let c = &mut self.clients[i];
        let Some(req) = c.next_request() else {
            trace!(t, "c{i} says goodbye");
            c.done = true;
            c.session.handle_client_bytes(now, &[b'X', 0, 0, 0, 4]);
            return Ok(());
        };
        trace!(t, "t={} c{i} sends {} bytes", now.0, req.bytes.len());
        let mut rest = &req.bytes[..];
        while !rest.is_empty() {
            let n =
                (1 + uniform_inclusive(&mut self.rng, self.chunk_max - 1) as usize).min(rest.len());
            c.session.handle_client_bytes(now, &rest[..n]);
            rest = &rest[n..];
        }
        let Some(txn) = req.first_of else {
            return Ok(());
        };
        // The route in force once the request's own middleware messages are read.
        let key = (c.c, txn);
        self.route_of.insert(key, c.session.route());
        if let Some(lsn) = req.min_lsn {
            self.min_lsn_of.insert(key, lsn);
        }
        let gen = c.gen;
        let (cancel, leave) = c
            .txns
            .front()
            .map_or((None, None), |x| (x.cancel_after, x.leave_after));
        if let Some(after) = cancel {
            let ev = Ev::Cancel {
                client: i,
                gen,
                txn,
            };
            self.q.push(Instant(now.0 + after), ev);
        }
        if let Some(after) = leave {
            let ev = Ev::Leave {
                client: i,
                gen,
                txn,
            };
            self.q.push(Instant(now.0 + after), ev);
        }
        Ok(())
    }

    /// The next chunk of a lent server's bytes reaches its client's task, or its EOF.
    fn deliver(&mut self, t: &mut Trace, server: ServerId) -> Result<(), Violation> {
        let Some(&sid) = self.holder.get(&server) else {
            return Ok(());
        };
        let Some(&i) = self.sessions.get(&sid) else {
            return Ok(());
        };
        let Some(conn) = self.conns.get_mut(&server) else {
            return Ok(());
        };
        if conn.replies.is_empty() {
            // The server's connection ended (`recv` fails in the client task).
            trace!(t, "t={} s{} lost under c{i}", self.now.0, server.0);
            self.clients[i].session.handle_server_gone();
            return Ok(());
        }
        let n = (1 + uniform_inclusive(&mut self.rng, self.chunk_max - 1) as usize)
            .min(conn.replies.len());
        let chunk: Vec<u8> = conn.replies.drain(..n).collect();
        self.clients[i]
            .session
            .handle_server_bytes(self.now, Bytes::from(chunk));
        Ok(())
    }

    /// Every client said goodbye, and every server connection is accounted for.
    fn finish(&mut self) -> Result<(), Violation> {
        for (i, c) in self.clients.iter().enumerate() {
            if !c.done || !c.session.is_closed() {
                let detail = format!(
                    "client {i} stuck with {} transactions left, waiting={} lost={} at t={}",
                    c.txns.len(),
                    c.waiting,
                    c.lost,
                    self.now.0
                );
                return Err(violation("every-client-finishes", detail));
            }
        }
        let leak = |what: &str| violation("no-pool-leaks", format!("{what} at the end"));
        if let Some((server, sid)) = self.holder.iter().next() {
            return Err(leak(&format!("server {} lent to {}", server.0, sid.0)));
        }
        if !self.channel.is_empty() || !self.waiting.is_empty() || !self.openings.is_empty() {
            let detail = format!(
                "{} unread grants, {} waiters, {} connects",
                self.channel.len(),
                self.waiting.len(),
                self.openings.len()
            );
            return Err(leak(&detail));
        }
        for (key, counts) in self.pools.counts() {
            if counts.active > 0 || counts.waiting > 0 || counts.opening > 0 {
                return Err(leak(&format!("{key:?}: {counts:?}")));
            }
        }
        let pooled: BTreeSet<ServerId> = self.pools.servers().iter().map(|s| s.id).collect();
        let idle: BTreeSet<ServerId> = self.idle.keys().copied().collect();
        let open: BTreeSet<ServerId> = self.conns.keys().copied().collect();
        if pooled != idle || idle != open {
            let ids = |s: &BTreeSet<ServerId>| s.iter().map(|x| x.0).collect::<Vec<_>>();
            let detail = format!(
                "the pools know servers {:?}, the adapter holds idle {:?}, connections open {:?}",
                ids(&pooled),
                ids(&idle),
                ids(&open)
            );
            return Err(leak(&detail));
        }
        Ok(())
    }

    /// Feeds the bytes to the server of `server` and queues its answer; checks where each
    /// transaction that starts there may run.
    pub(super) fn feed_server(&mut self, server: ServerId, bytes: &[u8]) -> Result<(), Violation> {
        let now = self.now;
        let Some(conn) = self.conns.get_mut(&server) else {
            let detail = format!("no server {}", server.0);
            return Err(violation("bytes-only-to-a-lent-server", detail));
        };
        if conn.dead {
            return Ok(());
        }
        let node = conn.node;
        let before = self.cluster.wal;
        let mut ctx = super::proxy_server::Ctx {
            placed: &mut self.placed,
            started: Vec::new(),
            in_recovery: self.cluster.in_recovery(node),
            wal: &mut self.cluster.wal,
            sleep: None,
            sessions: &mut self.ran_on,
        };
        let mut out = BytesMut::new();
        conn.fake.receive(bytes, &mut ctx, &mut out)?;
        let (started, sleep) = (ctx.started, ctx.sleep);
        conn.replies.extend(out.iter());
        if let Some(ns) = sleep {
            conn.run += 1;
            let run = conn.run;
            self.q
                .push(Instant(now.0 + ns), Ev::SleepDone { server, run });
        }
        if self.cluster.wal != before {
            self.cluster.committed(now);
        }
        for (key, zone, path) in started {
            self.check_placement(key, server, node)?;
            self.check_settings(key, (&zone, &path), server)?;
        }
        Ok(())
    }

    /// A transaction's first message reached `server` on `node`: a `primary` transaction must
    /// find the primary (never a demoted or returning old one), and one after MIN_LSN a
    /// server that has replayed that far or is not in recovery.
    fn check_placement(
        &self,
        key: (u64, u64),
        server: ServerId,
        node: usize,
    ) -> Result<(), Violation> {
        let route = self.route_of.get(&key).copied();
        let state = self.cluster.state(node);
        if route == Some(Route::Primary) && state != pg::NodeState::Primary {
            let detail = format!(
                "client {} transaction {} (route primary) ran on server {} at pg{node}, {state:?}",
                key.0, key.1, server.0
            );
            return Err(violation("routed-to-the-requested-role", detail));
        }
        let need = self.min_lsn_of.get(&key).copied();
        if let (Some(need), true) = (need, route != Some(Route::Primary)) {
            let replayed = self.cluster.replayed(node, self.now);
            if self.cluster.in_recovery(node) && replayed < need {
                let detail = format!(
                    "client {} transaction {} with MIN_LSN {need} ran on server {} at pg{node}, \
                     which had replayed only {replayed}",
                    key.0, key.1, server.0
                );
                return Err(violation("min-lsn-honoured", detail));
            }
        }
        Ok(())
    }

    /// A transaction's first message reached `server` while its `TimeZone` and `search_path`
    /// were `(zone, path)`: the client's own, what it sent at startup or set since, or else
    /// the servers' login values (never what another client left there).
    fn check_settings(
        &self,
        key: (u64, u64),
        (zone, path): (&str, &str),
        server: ServerId,
    ) -> Result<(), Violation> {
        let Some(client) = self.clients.get(key.0 as usize) else {
            return Ok(());
        };
        if zone == client.zone() && path == client.path() {
            return Ok(());
        }
        let detail = format!(
            "client {} transaction {} ran on server {} with TimeZone {zone} and search_path \
             {path}; the client's are {} and {}",
            key.0,
            key.1,
            server.0,
            client.zone(),
            client.path()
        );
        Err(violation("settings-follow-the-client", detail))
    }

    /// A slow query's time is up.
    fn sleep_done(&mut self, server: ServerId, run: u64) -> Result<(), Violation> {
        let Some(conn) = self.conns.get_mut(&server) else {
            return Ok(());
        };
        if conn.dead || conn.run != run || !conn.fake.is_running() {
            return Ok(());
        }
        let mut out = BytesMut::new();
        let recovery = self.cluster.in_recovery(conn.node);
        conn.fake.finish(false, recovery, &mut out);
        conn.replies.extend(out.iter());
        // What waited behind the query is read now.
        self.feed_server(server, &[])
    }
}
