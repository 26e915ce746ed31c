//! `proxy`: clients run transactions through pgyard-proxy's machines — simple queries,
//! transaction blocks, unnamed and named prepared statements, with ROUTE, TAG and unknown
//! middleware messages between them — over a small pool of servers, their bytes cut into
//! random chunks and delivered in a random interleaving. The scenario plays the adapter: it
//! performs what the client sessions and the pools ask, opening servers of the route's role.
//! Invariants: no `M` or Terminate reaches a server; a transaction runs wholly on one server;
//! a transaction lands on a server of its route's role; a server serves one client at a time;
//! replies come back in order and without errors (a statement is prepared wherever it is
//! bound); every client finishes, and no server is left lent.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use pgyard_proxy::client::Settings;
use pgyard_proxy::{
    CancelKey, ClientAuth, ClientConfig, ClientId, ClientOut, ClientSession, Lent, PoolMode,
    PoolOut, PoolSettings, Pools, Route, ServerId,
};
use pgyard_types::{uniform_inclusive, Instant, Rng};
use pgyard_wire::auth::LoginRandom;
use pgyard_wire::frame::{decode_frame, Decoded, ProtocolVersion};
use pgyard_wire::frontend;

use super::proxy_server::{owner, FakeServer, Placement};
use crate::world::pg::Role;
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct ProxyScenario;

/// A bug planted in every client session (see [`crate::planted`]).
pub type Bug = Option<crate::planted::ProxyBug>;

impl Scenario for ProxyScenario {
    fn name(&self) -> &'static str {
        "proxy"
    }

    fn description(&self) -> &'static str {
        "transaction pooling with routes, blocks and prepared statements over a few servers"
    }

    fn run(&self, rng: &mut Rng, t: &mut Trace) -> Result<u64, Violation> {
        run_proxy(rng, t, None)
    }
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// One request of a client and the command tags its answer carries.
pub(super) struct Request {
    pub(super) bytes: Vec<u8>,
    pub(super) tags: Vec<Vec<u8>>,
}

/// A client: its session, what it still has to send, and what it expects back.
struct Client {
    session: ClientSession,
    plan: VecDeque<Request>,
    /// Tags still expected, in order, and the ReadyForQuery that ends the request.
    expect: VecDeque<Vec<u8>>,
    waiting: bool,
    welcomed: bool,
    inbox: Vec<u8>,
    holding: Option<ServerId>,
    closed: bool,
}

/// Runs one seed with `bug` planted in every client session.
pub fn run_proxy(rng: &mut Rng, t: &mut Trace, bug: Bug) -> Result<u64, Violation> {
    let clients = 1 + uniform_inclusive(rng, 3) as usize;
    let size = 1 + uniform_inclusive(rng, 2) as usize;
    let chunk_max = [1u64, 7, 64, 4096][uniform_inclusive(rng, 3) as usize];
    trace!(
        t,
        "mix clients={clients} pool_size={size} chunk_max={chunk_max}"
    );
    let mut w = World {
        pools: Pools::new(PoolSettings {
            size,
            wait_timeout: Duration::from_secs(3600),
            idle_timeout: None,
            lifetime: None,
        }),
        servers: BTreeMap::new(),
        idle: BTreeMap::new(),
        holder: BTreeMap::new(),
        replies: BTreeMap::new(),
        placed: Placement::new(),
        routes: BTreeMap::new(),
        clients: Vec::new(),
        chunk_max,
    };
    for c in 0..clients {
        let client = new_client(rng, c as u64, bug);
        w.clients.push(client);
    }
    let mut steps = 0u64;
    loop {
        steps += 1;
        if steps > 100_000 {
            return Err(violation("no-busy-loop", "over 100000 steps".into()));
        }
        w.settle(t)?;
        let Some(action) = w.pick(rng) else { break };
        w.act(rng, t, action)?;
    }
    w.finish()?;
    Ok(steps * 1_000)
}

fn new_client(rng: &mut Rng, c: u64, bug: Bug) -> Client {
    let config = ClientConfig {
        auth: ClientAuth::Trust,
        pool_mode: PoolMode::Transaction,
        default_route: Route::Primary,
        login_timeout: Duration::from_secs(60),
        databases: pgyard_proxy::Databases::Any,
        admin_users: Default::default(),
    };
    let key = CancelKey {
        pid: c as i32,
        secret: vec![1; 32],
    };
    let random = LoginRandom {
        salt: [0; 4],
        nonce: [0; 18],
        mock_salt: [0; 16],
    };
    #[allow(unused_mut)]
    let mut session = ClientSession::new(Instant(0), ClientId(c), config, key, random);
    #[cfg(feature = "planted-bugs")]
    if let Some(b) = bug {
        session = session.with_planted_bug(b);
    }
    #[cfg(not(feature = "planted-bugs"))]
    let _ = bug;
    let mut startup = BytesMut::new();
    let params: [(&[u8], &[u8]); 1] = [(b"user", b"app")];
    let _ = frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut startup);
    let mut plan = VecDeque::from([Request {
        bytes: startup.to_vec(),
        tags: Vec::new(),
    }]);
    plan.extend(super::proxy_plan::plan(rng, c));
    Client {
        session,
        plan,
        expect: VecDeque::new(),
        waiting: false,
        welcomed: false,
        inbox: Vec::new(),
        holding: None,
        closed: false,
    }
}

enum Action {
    Send(usize),
    Deliver(ServerId),
}

struct World {
    pools: Pools,
    servers: BTreeMap<ServerId, FakeServer>,
    idle: BTreeMap<ServerId, Lent>,
    holder: BTreeMap<ServerId, usize>,
    replies: BTreeMap<ServerId, VecDeque<u8>>,
    placed: Placement,
    /// The route each transaction was sent under.
    routes: BTreeMap<(u64, u64), Route>,
    clients: Vec<Client>,
    chunk_max: u64,
}

impl World {
    fn pick(&self, rng: &mut Rng) -> Option<Action> {
        let mut ready: Vec<Action> = Vec::new();
        for (i, c) in self.clients.iter().enumerate() {
            if !c.closed && !c.waiting && !c.plan.is_empty() {
                ready.push(Action::Send(i));
            }
        }
        for (id, r) in &self.replies {
            if !r.is_empty() && self.holder.contains_key(id) {
                ready.push(Action::Deliver(*id));
            }
        }
        if ready.is_empty() {
            return None;
        }
        let i = uniform_inclusive(rng, ready.len() as u64 - 1) as usize;
        Some(ready.swap_remove(i))
    }

    fn act(&mut self, rng: &mut Rng, t: &mut Trace, action: Action) -> Result<(), Violation> {
        match action {
            Action::Send(i) => {
                let Some(req) = self.clients[i].plan.pop_front() else {
                    return Ok(());
                };
                trace!(t, "c{i} sends {} bytes", req.bytes.len());
                let owner_key = req.tags.first().and_then(|tag| owner(tag));
                let c = &mut self.clients[i];
                c.expect.extend(req.tags);
                c.waiting = true;
                let mut rest = &req.bytes[..];
                while !rest.is_empty() {
                    let n =
                        (1 + uniform_inclusive(rng, self.chunk_max - 1) as usize).min(rest.len());
                    c.session.handle_client_bytes(Instant(0), &rest[..n]);
                    rest = &rest[n..];
                }
                // The route in force once the request's own middleware messages are read.
                if let Some(key) = owner_key {
                    self.routes.entry(key).or_insert(c.session.route());
                }
            }
            Action::Deliver(id) => {
                let Some(&i) = self.holder.get(&id) else {
                    return Ok(());
                };
                let r = self.replies.entry(id).or_default();
                let n = (1 + uniform_inclusive(rng, self.chunk_max - 1) as usize).min(r.len());
                let chunk: Vec<u8> = r.drain(..n).collect();
                self.clients[i]
                    .session
                    .handle_server_bytes(Instant(0), Bytes::from(chunk));
            }
        }
        Ok(())
    }

    /// Performs every output of the sessions and the pools until nothing is left.
    fn settle(&mut self, t: &mut Trace) -> Result<(), Violation> {
        loop {
            let mut busy = false;
            for i in 0..self.clients.len() {
                while let Some(out) = self.clients[i].session.poll_output() {
                    busy = true;
                    self.client_out(t, i, out)?;
                }
            }
            while let Some(out) = self.pools.poll_output() {
                busy = true;
                self.pool_out(t, out);
            }
            if !busy {
                return Ok(());
            }
        }
    }
}

impl World {
    fn client_out(&mut self, t: &mut Trace, i: usize, out: ClientOut) -> Result<(), Violation> {
        match out {
            ClientOut::ToClient(b) => {
                self.clients[i].inbox.extend_from_slice(&b);
                self.read_replies(i)
            }
            ClientOut::ToServer(b) => {
                let Some(id) = self.clients[i].holding else {
                    let detail = format!("client {i} sent {} bytes holding no server", b.len());
                    return Err(violation("bytes-only-to-a-lent-server", detail));
                };
                if self.holder.get(&id) != Some(&i) {
                    let detail = format!("client {i} wrote to server {} held by another", id.0);
                    return Err(violation("one-client-per-server", detail));
                }
                let mut reply = BytesMut::new();
                let server = self.servers.get_mut(&id).ok_or_else(|| {
                    violation("bytes-only-to-a-lent-server", format!("no server {}", id.0))
                })?;
                server.receive(&b, &mut self.placed, &mut reply)?;
                let (sid, role) = (server.id, server.role);
                self.check_route(sid, role)?;
                self.replies.entry(id).or_default().extend(reply.iter());
                Ok(())
            }
            ClientOut::Acquire(key) => {
                trace!(t, "c{i} acquires {:?}", key.route);
                self.pools.acquire(Instant(0), ClientId(i as u64), &key);
                Ok(())
            }
            ClientOut::Release { server, reusable } => {
                trace!(t, "c{i} releases s{} reusable={reusable}", server.id.0);
                let id = server.id;
                if self.holder.remove(&id) != Some(i) {
                    let detail = format!("client {i} released server {} it did not hold", id.0);
                    return Err(violation("one-client-per-server", detail));
                }
                self.clients[i].holding = None;
                let left = self.replies.get(&id).map_or(0, VecDeque::len);
                if reusable && left > 0 {
                    let detail = format!("server {} released with {left} reply bytes unread", id.0);
                    return Err(violation("released-between-transactions", detail));
                }
                if reusable {
                    self.idle.insert(id, server);
                } else {
                    self.servers.remove(&id);
                    self.replies.remove(&id);
                }
                self.pools.release(Instant(0), id, reusable);
                Ok(())
            }
            ClientOut::Cancel { .. } => Ok(()),
            ClientOut::Admin(request) => {
                // The simulated clients use application databases only.
                let detail = format!("client {i} asked the admin console for {request:?}");
                Err(violation("no-admin-requests", detail))
            }
            ClientOut::StartTls { .. } => {
                // The scenario's sessions have no TLS configured: every SSLRequest gets `N`.
                let detail = format!("client {i} asked for a TLS handshake without TLS");
                Err(violation("no-tls-without-certificate", detail))
            }
            ClientOut::Close => {
                self.clients[i].closed = true;
                Ok(())
            }
        }
    }

    fn pool_out(&mut self, t: &mut Trace, out: PoolOut) {
        match out {
            PoolOut::Open { server, key } => {
                // The adapter's connect: the route decides the role found.
                let role = if key.route == Route::Standby {
                    Role::Standby
                } else {
                    Role::Primary
                };
                let primary = role == Role::Primary;
                trace!(t, "open s{} primary={primary}", server.0);
                self.servers.insert(server, FakeServer::new(server.0, role));
                let mut settings = Settings::new();
                settings.insert("TimeZone".into(), "UTC".into());
                let standby = if primary { "off" } else { "on" };
                settings.insert("in_hot_standby".into(), standby.into());
                let lent = Lent {
                    id: server,
                    settings,
                    prepared: Default::default(),
                };
                self.idle.insert(server, lent);
                self.pools.opened(Instant(0), server, Ok(()));
            }
            PoolOut::Grant { client, server } => {
                let i = client.0 as usize;
                let Some(lent) = self.idle.remove(&server) else {
                    return;
                };
                trace!(t, "grant s{} to c{i}", server.0);
                self.holder.insert(server, i);
                self.clients[i].holding = Some(server);
                self.clients[i].session.handle_server(Instant(0), lent);
            }
            PoolOut::Refuse { client, message } => {
                self.clients[client.0 as usize]
                    .session
                    .handle_refused(&message);
            }
            PoolOut::Close { server } => {
                self.idle.remove(&server);
                self.servers.remove(&server);
            }
        }
    }

    /// A transaction's first message must land on a server of its route's role.
    fn check_route(&self, server: u64, role: Role) -> Result<(), Violation> {
        for (key, &s) in &self.placed {
            if s != server {
                continue;
            }
            let ok = match self.routes.get(key) {
                Some(Route::Primary) => role == Role::Primary,
                Some(Route::Standby) => role == Role::Standby,
                _ => true,
            };
            if !ok {
                let primary = role == Role::Primary;
                let detail = format!(
                    "client {} transaction {} (route {:?}) ran on server {server} (primary={primary})",
                    key.0, key.1, self.routes.get(key)
                );
                return Err(violation("routed-to-the-requested-role", detail));
            }
        }
        Ok(())
    }

    /// The client's view: whole replies, each command tag in the order it asked.
    fn read_replies(&mut self, i: usize) -> Result<(), Violation> {
        let c = &mut self.clients[i];
        loop {
            let (tag, body) = match decode_frame(&c.inbox, 1 << 20) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return Ok(()),
                Err(e) => return Err(violation("replies-well-formed", format!("c{i}: {e}"))),
            };
            c.inbox.drain(..5 + body.len());
            c.reply(i, tag, &body)?;
        }
    }

    /// Every client said goodbye and every server is back.
    fn finish(&mut self) -> Result<(), Violation> {
        for (i, c) in self.clients.iter_mut().enumerate() {
            if !c.plan.is_empty() || c.waiting {
                let detail = format!(
                    "client {i} stuck with {} requests left, waiting={}",
                    c.plan.len(),
                    c.waiting
                );
                return Err(violation("every-client-finishes", detail));
            }
            c.session
                .handle_client_bytes(Instant(0), &[b'X', 0, 0, 0, 4]);
        }
        let mut t = Trace::hashing();
        self.settle(&mut t)?;
        if let Some((id, i)) = self.holder.iter().next() {
            let detail = format!("server {} still lent to client {i} at the end", id.0);
            return Err(violation("no-pool-leaks", detail));
        }
        for (key, counts) in self.pools.counts() {
            if counts.active > 0 || counts.waiting > 0 {
                let detail = format!("{key:?}: {counts:?} at the end");
                return Err(violation("no-pool-leaks", detail));
            }
        }
        Ok(())
    }
}

impl Client {
    /// One reply frame: the welcome first, then each request's tags in order and its
    /// ReadyForQuery; an error is a broken promise (every request here is valid).
    fn reply(&mut self, i: usize, tag: u8, body: &[u8]) -> Result<(), Violation> {
        match tag {
            b'E' => {
                let text = String::from_utf8_lossy(body).replace('\0', " ");
                let invariant = if text.contains("26000") {
                    "statements-exist-where-bound"
                } else {
                    "no-errors"
                };
                Err(violation(
                    invariant,
                    format!("client {i} got an error: {text}"),
                ))
            }
            b'C' => {
                let got = body.strip_suffix(&[0]).unwrap_or(body);
                match self.expect.pop_front() {
                    Some(want) if want == got => Ok(()),
                    want => Err(violation(
                        "replies-in-order",
                        format!(
                            "client {i} got {:?}, expected {:?}",
                            String::from_utf8_lossy(got),
                            want.map(|w| String::from_utf8_lossy(&w).into_owned())
                        ),
                    )),
                }
            }
            b'Z' => {
                if !self.expect.is_empty() {
                    let detail = format!(
                        "client {i}: ReadyForQuery with {} tags owed",
                        self.expect.len()
                    );
                    return Err(violation("replies-in-order", detail));
                }
                self.welcomed = true;
                self.waiting = false;
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
