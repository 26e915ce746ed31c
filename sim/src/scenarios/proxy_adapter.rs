//! The `proxy` scenario's adapter: what `crates/tokio/src/proxy/` does around the pure
//! machines, step for step, on simulated sockets. `shared.rs`'s part: the pools' outputs
//! (open through the connect machine, lend — at once to the client that asked, through its
//! channel to one that waits —, refuse, close), a server coming back, a CancelRequest routed
//! to the server the client holds with that server's key. `client_task.rs`'s part: the
//! session's outputs, `take` (an idle server that has spoken or closed is discarded and
//! another asked for; MIN_LSN asks the server's replay position and falls back to the
//! primary when it is behind), a server whose connection ends, a client that goes away.
//! The judge's checks sit where the facts are seen.

use bytes::BytesMut;
use pgyard_proxy::{ClientId, ClientOut, Lent, PoolKey, PoolOut, Returned, ServerId};
use pgyard_types::{uniform_inclusive, Instant};
use pgyard_wire::error_fields::encode_error_response;

use super::proxy::{violation, Conn, Ev, Granted, World};
use super::proxy_client::{new_session, Heard};
use super::proxy_cluster::Change;
use super::proxy_connect::{hop, NetEv, Opening, Outcome};
use super::proxy_server::FakeServer;
use crate::world::pg::NodeState;
use crate::{trace, Trace, Violation};

impl World {
    /// Performs every output of the sessions and the pools until nothing is left.
    pub(super) fn settle(&mut self, t: &mut Trace) -> Result<(), Violation> {
        loop {
            let mut busy = false;
            for i in 0..self.clients.len() {
                while let Some(out) = self.clients[i].session.poll_output() {
                    busy = true;
                    self.client_out(t, i, out)?;
                }
                self.register(i);
            }
            if !busy {
                return Ok(());
            }
        }
    }

    /// The client task tells the pools its cancel key once the client has been given it.
    fn register(&mut self, i: usize) {
        let s = &self.clients[i].session;
        let pid = s.cancel_pid();
        if self.keys.get(&pid).is_some_and(|(sid, _)| *sid == s.id()) {
            return;
        }
        if let Some(secret) = s.cancel_secret() {
            self.keys.insert(pid, (s.id(), secret.to_vec()));
        }
    }

    fn client_out(&mut self, t: &mut Trace, i: usize, out: ClientOut) -> Result<(), Violation> {
        let sid = self.clients[i].session.id();
        match out {
            ClientOut::ToClient(b) => {
                if self.clients[i].read(&b)? == Heard::Loss {
                    self.judge_loss(i)?;
                }
                self.clients[i].judge_counters()
            }
            ClientOut::ToServer(b) => {
                let Some(&server) = self.lent.get(&sid) else {
                    let detail = format!("client {i} sent {} bytes holding no server", b.len());
                    return Err(violation("bytes-only-to-a-lent-server", detail));
                };
                if self.holder.get(&server) != Some(&sid) {
                    let detail = format!("client {i} wrote to server {} held by another", server.0);
                    return Err(violation("one-client-per-server", detail));
                }
                if self.conns.get(&server).is_some_and(|c| c.eof) {
                    // The write fails on a connection the server closed.
                    self.clients[i].session.handle_server_gone();
                    return Ok(());
                }
                self.feed_server(server, &b)
            }
            ClientOut::Acquire(key) => {
                trace!(t, "t={} c{i} acquires {:?}", self.now.0, key.route);
                self.acquire(t, sid, &key)
            }
            ClientOut::Release { server, reusable } => self.release(t, sid, server, reusable),
            ClientOut::Cancel { pid, key } => {
                self.cancel(t, pid, &key);
                Ok(())
            }
            ClientOut::Admin(request) => {
                let detail = format!("client {i} asked the admin console for {request:?}");
                Err(violation("no-admin-requests", detail))
            }
            ClientOut::StartTls { .. } => {
                let detail = format!("client {i} asked for a TLS handshake without TLS");
                Err(violation("no-tls-without-certificate", detail))
            }
            ClientOut::Close => self.closed(t, i),
        }
    }

    /// The proxy closed client `i`'s connection: after its goodbye, or after it heard that
    /// its server was lost; then it connects again for the rest of its plan.
    fn closed(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        let sid = self.clients[i].session.id();
        self.end_task(t, sid);
        if self.clients[i].done {
            return Ok(());
        }
        if self.clients[i].cut_off() {
            // It was reading a message when the connection ended: its server was lost.
            self.judge_loss(i)?;
        }
        let c = &self.clients[i];
        if !c.lost {
            let detail = format!(
                "client {i} was closed without a word (waiting={} in_block={} txns={})",
                c.waiting,
                c.in_block,
                c.txns.len()
            );
            return Err(violation("no-errors", detail));
        }
        self.reconnect(t, i);
        Ok(())
    }

    /// Client `i` starts a new connection for what is left of its plan.
    fn reconnect(&mut self, t: &mut Trace, i: usize) {
        let sid = self.new_session_id(i);
        trace!(
            t,
            "t={} c{i} connects again as session {}",
            self.now.0,
            sid.0
        );
        let mode = self.mode();
        let session = new_session(self.now, sid, &mut self.rng, self.bug, mode);
        self.clients[i].reconnect(session);
    }

    /// A client task ends (`client_task.rs`, after its loop): a wait still open is
    /// abandoned (`abandon_wait`: a server already sent on the channel goes back to the
    /// pools), and its key forgotten.
    fn end_task(&mut self, t: &mut Trace, sid: ClientId) {
        if self.later.remove(&sid) {
            match self.channel.remove(&sid) {
                Some(Granted::Server(_, lent)) => {
                    trace!(t, "t={} s{} back unread", self.now.0, lent.id.0);
                    self.give_back(t, sid, lent, true);
                }
                _ => {
                    self.waiting.remove(&sid);
                    self.pools.cancel_wait(sid);
                }
            }
        }
        self.keys.retain(|_, (c, _)| *c != sid);
        self.wanted.remove(&sid);
    }

    /// A client heard that its server was lost: it must have been inside a transaction (or
    /// owed a reply, or in session mode, where its session state died with the server) on a
    /// server that died, lent before its death reached the proxy.
    fn judge_loss(&mut self, i: usize) -> Result<(), Violation> {
        let c = &self.clients[i];
        if !(c.waiting || c.in_block || self.limits.session) {
            let detail = format!("client {i} heard of a lost server between transactions");
            return Err(violation("failure-invisible-between-transactions", detail));
        }
        let Some(&(server, known)) = self.last_lend.get(&c.session.id()) else {
            let detail = format!("client {i} heard of a lost server it never had");
            return Err(violation("failure-invisible-between-transactions", detail));
        };
        if !self.dead.contains(&server) {
            let detail = format!("client {i} heard of a lost server, but s{} lives", server.0);
            return Err(violation("failure-invisible-between-transactions", detail));
        }
        if known {
            let detail = format!(
                "client {i} was lent s{} after its death had reached the proxy",
                server.0
            );
            return Err(violation("failure-invisible-between-transactions", detail));
        }
        Ok(())
    }

    /// `client_task.rs`'s `acquire`: a server now, or an answer later on the channel.
    fn acquire(&mut self, t: &mut Trace, sid: ClientId, key: &PoolKey) -> Result<(), Violation> {
        self.wanted.insert(sid, key.clone());
        // `shared.rs` lends straight from the idle list when it can (`lend_idle`), with
        // nothing else to perform; the general path otherwise.
        self.waiting.insert(sid, key.clone());
        let now_lent = match self.pools.lend_idle(sid, key) {
            Some(server) => {
                self.judge_lend_retired("lent (shortcut)", server);
                self.unidle(server).map(|lent| {
                    self.waiting.remove(&sid);
                    self.holding.insert(sid, server);
                    (server, lent)
                })
            }
            None => {
                self.pools.acquire(self.now, sid, key);
                self.perform_pools(t, Some(sid))
            }
        };
        match now_lent {
            Some((server, lent)) => self.take(t, sid, server, lent),
            None => {
                self.later.insert(sid);
                Ok(())
            }
        }
    }

    /// `shared.rs`'s `perform`: what the pools ask; a server granted to `me` is returned.
    pub(super) fn perform_pools(
        &mut self,
        t: &mut Trace,
        me: Option<ClientId>,
    ) -> Option<(ServerId, Lent)> {
        let mut mine = None;
        while let Some(out) = self.pools.poll_output() {
            match out {
                PoolOut::Open { server, key } => {
                    self.judge_paused("opened", server);
                    self.open(t, server, key);
                }
                PoolOut::Grant { client, server } => {
                    self.judge_paused("lent", server);
                    self.judge_lend_retired("lent", server);
                    let Some(lent) = self.unidle(server) else {
                        continue;
                    };
                    if !self.waiting.contains_key(&client) {
                        // The client left meanwhile: the server stays idle.
                        self.pool_idle(server, lent, true);
                        self.pools.release(self.now, server, true);
                        continue;
                    }
                    self.holding.insert(client, server);
                    if Some(client) == me {
                        mine = Some((server, lent));
                    } else {
                        self.waiting.remove(&client);
                        self.channel.insert(client, Granted::Server(server, lent));
                    }
                }
                PoolOut::Refuse {
                    client, message, ..
                } => {
                    if self.waiting.remove(&client).is_some() {
                        self.channel.insert(client, Granted::Refused(message));
                    }
                }
                PoolOut::Close { server } => {
                    trace!(t, "t={} close s{}", self.now.0, server.0);
                    self.judge_close(server);
                    self.unidle(server);
                    self.close_conn(server);
                }
            }
        }
        if let (Some(me), Some(_)) = (me, &mine) {
            self.waiting.remove(&me);
        }
        mine
    }

    /// A waiting client's task reads its channel.
    pub(super) fn receive(&mut self, t: &mut Trace, sid: ClientId) -> Result<(), Violation> {
        self.later.remove(&sid);
        let Some(answer) = self.channel.remove(&sid) else {
            return Ok(());
        };
        match answer {
            Granted::Server(server, lent) => self.take(t, sid, server, lent),
            Granted::Refused(text) => {
                let i = self.sessions[&sid];
                self.clients[i].session.handle_refused(&text);
                Ok(())
            }
        }
    }

    /// `client_task.rs`'s `take`: an idle server that has spoken or closed is discarded and
    /// another asked for; MIN_LSN needs a server that has replayed that far, or the primary.
    fn take(
        &mut self,
        t: &mut Trace,
        sid: ClientId,
        server: ServerId,
        lent: Lent,
    ) -> Result<(), Violation> {
        let now = self.now;
        let i = self.sessions[&sid];
        let Some(conn) = self.conns.get(&server) else {
            let detail = format!("server {} granted to c{i} has no connection", server.0);
            return Err(violation("no-pool-leaks", detail));
        };
        if conn.eof || !conn.replies.is_empty() {
            trace!(t, "t={} s{} spoke while idle: discarded", now.0, server.0);
            self.give_back(t, sid, lent, false);
            let Some(key) = self.wanted.get(&sid).cloned() else {
                return Ok(());
            };
            return self.acquire(t, sid, &key);
        }
        if let Some(why) = conn.fake.mid_protocol() {
            let detail = format!("server {} lent to c{i} while it {why}", server.0);
            return Err(violation("pool-never-lends-mid-protocol", detail));
        }
        let wants = self.clients[i]
            .startup_options
            .as_deref()
            .unwrap_or_default();
        if conn.options != wants.as_bytes() {
            let detail = format!(
                "server {} lent to c{i} logged in with options {:?}; the client asked for {wants:?}",
                server.0,
                String::from_utf8_lossy(&conn.options)
            );
            return Err(violation("pool-per-options", detail));
        }
        if let Some((c, x)) = conn.fake.open_block() {
            let detail = format!(
                "server {} lent to c{i} inside the block of client {c} transaction {x}",
                server.0
            );
            return Err(violation("transaction-on-one-server", detail));
        }
        if let Some((c, x)) = conn.fake.served_since_reset() {
            if self.limits.reset_always {
                let detail = format!(
                    "server {} lent to c{i} after client {c} transaction {x} without a \
                     DISCARD ALL between them",
                    server.0
                );
                return Err(violation("reset-between-lendings", detail));
            }
        }
        if let Some(need) = self.clients[i].session.needs_lsn() {
            // `select pg_last_wal_replay_lsn() where pg_is_in_recovery()`: no row (a server
            // out of recovery) has every write; a dead server cannot answer.
            let node = conn.node;
            let row = |cl: &super::proxy_cluster::Cluster| {
                cl.in_recovery(node)
                    .then(|| cl.replay_lsn_sql(node, now))
                    .flatten()
            };
            let answer = (!conn.dead).then(|| row(&self.cluster));
            let ok = matches!(answer, Some(None)) || matches!(answer, Some(Some(at)) if at >= need);
            if !ok {
                trace!(
                    t,
                    "t={} c{i} MIN_LSN {need}: s{} is behind",
                    now.0,
                    server.0
                );
                self.give_back(t, sid, lent, answer.is_some());
                self.clients[i].session.fall_back();
                return Ok(());
            }
        }
        trace!(t, "t={} lend s{} to c{i}", now.0, server.0);
        self.lent.insert(sid, server);
        self.holder.insert(server, sid);
        // Whether the proxy could have known the server was dead (its FATAL or EOF had come).
        let known = conn.eof || !conn.replies.is_empty();
        self.last_lend.insert(sid, (server, known));
        self.clients[i].session.handle_server(now, lent);
        Ok(())
    }

    /// `shared.rs`'s `release`: a reusable server goes to the idle list (in session mode, or
    /// with `server_reset_query_always`, after its `DISCARD ALL`), any other is closed.
    pub(super) fn give_back(&mut self, t: &mut Trace, sid: ClientId, lent: Lent, reusable: bool) {
        self.holding.remove(&sid);
        let server = lent.id;
        if reusable && (self.limits.session || self.limits.reset_always) {
            return self.reset(t, lent);
        }
        if reusable {
            self.pool_idle(server, lent, true);
            // (The model has no timer to arm: it asks the pools for their next timeout.)
            if self.pools.return_idle(self.now, server) != Returned::No {
                return;
            }
        } else {
            self.close_conn(server);
        }
        self.pools.release(self.now, server, reusable);
        self.perform_pools(t, None);
    }

    /// A session gives its server back: judged first (a reusable server must stand clean,
    /// between transactions, its replies read), then `shared.rs`'s `release`.
    fn release(
        &mut self,
        t: &mut Trace,
        sid: ClientId,
        lent: Lent,
        reusable: bool,
    ) -> Result<(), Violation> {
        let server = lent.id;
        let i = self.sessions[&sid];
        trace!(
            t,
            "t={} c{i} releases s{} reusable={reusable}",
            self.now.0,
            server.0
        );
        if self.holder.get(&server) != Some(&sid) {
            let detail = format!("client {i} released server {} it did not hold", server.0);
            return Err(violation("one-client-per-server", detail));
        }
        self.holder.remove(&server);
        self.lent.remove(&sid);
        if let (true, Some(conn)) = (reusable, self.conns.get(&server)) {
            let unread = conn.replies.len();
            if unread > 0 && !conn.eof {
                let detail = format!(
                    "server {} released with {unread} reply bytes unread",
                    server.0
                );
                return Err(violation("released-between-transactions", detail));
            }
            if let Some(why) = conn.fake.mid_protocol() {
                let detail = format!("server {} released while it {why}", server.0);
                return Err(violation("released-between-transactions", detail));
            }
            if let Some((c, x)) = conn.fake.open_block() {
                let detail = format!(
                    "server {} released inside the block of client {c} transaction {x}",
                    server.0
                );
                return Err(violation("transaction-on-one-server", detail));
            }
        }
        self.give_back(t, sid, lent, reusable && self.conns.contains_key(&server));
        Ok(())
    }

    /// `shared.rs`'s `cancel`: the keys name a client; the server it holds now gets a
    /// CancelRequest with that server's own key, on a connection of its own.
    fn cancel(&mut self, t: &mut Trace, pid: i32, secret: &[u8]) {
        let found = self.keys.get(&pid).filter(|(_, s)| s == secret);
        let Some(&(from, _)) = found else {
            return;
        };
        let Some(&server) = self.holding.get(&from) else {
            return;
        };
        let Some(conn) = self.conns.get(&server) else {
            return;
        };
        trace!(
            t,
            "t={} cancel for session {} goes to s{}",
            self.now.0,
            from.0,
            server.0
        );
        let (node, life, (pid, key)) = (conn.node, conn.life, conn.key.clone());
        self.pools.cancel_sent(server);
        // A connection to the server, the request, and the server closing it when done.
        let at = Instant(self.now.0 + hop(&mut self.rng) + hop(&mut self.rng));
        let done = Instant(at.0 + hop(&mut self.rng));
        let ev = Ev::CancelArrives {
            node,
            life,
            pid,
            key,
            from,
        };
        self.q.push(at, ev);
        self.q.push(done, Ev::CancelDone { server });
    }

    /// The cancel's task ends: the pools may lend the server again.
    pub(super) fn cancel_done(&mut self, t: &mut Trace, server: ServerId) {
        if let Some(since) = self.idle_since.get_mut(&server) {
            // Held back from the idle list until now.
            since.0 = self.now;
        }
        self.pools.cancel_done(self.now, server);
        self.perform_pools(t, None);
    }

    /// A client sends a CancelRequest on a new connection, with the keys the proxy gave it.
    pub(super) fn client_cancels(&mut self, t: &mut Trace, i: usize, gen: u32, txn: u64) {
        let c = &mut self.clients[i];
        if c.gen != gen || !c.waiting || c.current().is_none_or(|x| x.n != txn) {
            return;
        }
        let (pid, secret) = (c.session.cancel_pid(), c.session.cancel_secret());
        let Some(secret) = secret.map(<[u8]>::to_vec) else {
            return;
        };
        c.cancelled = true;
        c.cancel_sent = true;
        trace!(t, "t={} c{i} sends a CancelRequest", self.now.0);
        let mut packet = BytesMut::new();
        let _ = pgyard_wire::frontend::encode_cancel_request(pid, &secret, &mut packet);
        let id = ClientId(u64::MAX - self.next_session);
        self.next_session += 1;
        let mode = self.mode();
        let mut s = new_session(self.now, id, &mut self.rng, None, mode);
        s.handle_client_bytes(self.now, &packet);
        while let Some(out) = s.poll_output() {
            if let ClientOut::Cancel { pid, key } = out {
                self.cancel(t, pid, &key);
            }
        }
    }

    /// The proxy's CancelRequest reaches the server, which finds the backend by its key: that
    /// backend must still be serving the client the cancel is for (or nobody); a query
    /// running there stops with 57014.
    pub(super) fn cancel_arrives(
        &mut self,
        t: &mut Trace,
        node: usize,
        life: u32,
        key: (i32, Vec<u8>),
        from: ClientId,
    ) -> Result<(), Violation> {
        let member = &self.cluster.members[node];
        if member.life != life || member.node.state == NodeState::Crashed {
            return Ok(());
        }
        let backend = self
            .conns
            .iter()
            .find(|(_, c)| c.node == node && c.life == life && !c.dead && c.key == key);
        let Some((&server, _)) = backend else {
            return Ok(());
        };
        let Some(conn) = self.conns.get_mut(&server) else {
            return Ok(());
        };
        if let Some(&other) = self.holder.get(&server).filter(|h| **h != from) {
            let detail = format!(
                "the cancel of session {} reached server {} while it served session {}",
                from.0, server.0, other.0
            );
            return Err(violation("cancel-reaches-only-its-clients-server", detail));
        }
        if !conn.fake.is_running() {
            return Ok(());
        }
        trace!(
            t,
            "t={} cancel stops the query on s{}",
            self.now.0,
            server.0
        );
        let mut out = BytesMut::new();
        let recovery = self.cluster.in_recovery(node);
        conn.fake.finish(true, recovery, &mut out);
        conn.replies.extend(out.iter());
        self.feed_server(server, &[])
    }

    /// A client walks away from the transaction under way: its task ends.
    pub(super) fn leave(
        &mut self,
        t: &mut Trace,
        i: usize,
        gen: u32,
        txn: u64,
    ) -> Result<(), Violation> {
        let c = &mut self.clients[i];
        if c.gen != gen || c.session.is_closed() || c.current().is_none_or(|x| x.n != txn) {
            return Ok(());
        }
        trace!(t, "t={} c{i} disconnects in transaction {txn}", self.now.0);
        c.session.handle_client_gone();
        let sid = c.session.id();
        while let Some(out) = self.clients[i].session.poll_output() {
            if let ClientOut::Release { server, reusable } = out {
                self.release(t, sid, server, reusable)?;
            }
        }
        self.end_task(t, sid);
        self.reconnect(t, i);
        Ok(())
    }

    /// `shared.rs`'s `open`: a connect through the machine with the route's settings.
    fn open(&mut self, t: &mut Trace, server: ServerId, key: PoolKey) {
        trace!(t, "t={} open s{} for {:?}", self.now.0, server.0, key.route);
        let seed = uniform_inclusive(&mut self.rng, u64::MAX);
        let pool = (key.route, key.options.as_str());
        let opening = match Opening::new(&self.routes, pool, self.now, seed, self.cluster.epoch) {
            Ok(o) => o,
            Err(v) => {
                self.fault.get_or_insert(v);
                return;
            }
        };
        self.openings.insert(server, opening);
        self.born.insert(server, self.now);
        // The connect runs on a task of its own, which starts right away.
        self.q.push(self.now, Ev::Start { server });
    }

    /// A network delivery of a connect, or its deadline; `shared.rs`'s `opened` once it ends.
    pub(super) fn connect_step(
        &mut self,
        t: &mut Trace,
        server: ServerId,
        ev: Option<NetEv>,
    ) -> Result<(), Violation> {
        let Some(o) = self.openings.get_mut(&server) else {
            return Ok(());
        };
        let wrap = move |ev: NetEv| Ev::Net { server, ev };
        let (now, cl, rng, q) = (self.now, &mut self.cluster, &mut self.rng, &mut self.q);
        let outcome = match ev {
            Some(ev) => o.deliver(ev, now, cl, rng, q, &wrap)?,
            // The task's start, or the machine's deadline.
            None => o.drain(now, cl, rng, q, &wrap)?,
        };
        let Some(outcome) = outcome else {
            return Ok(());
        };
        let Some(o) = self.openings.remove(&server) else {
            return Ok(());
        };
        match outcome {
            Outcome::Won(won) => {
                let (est, sock) = *won;
                let node = sock.node;
                trace!(t, "t={} s{} connected to pg{node}", now.0, server.0);
                self.check_prefer_standby(&o, server, node)?;
                let settings: pgyard_proxy::client::Settings = est.parameters.iter().collect();
                let standby = settings.get("in_hot_standby").is_some_and(|v| v == "on");
                let key = est.backend_key.map(|k| (k.pid, k.key)).unwrap_or_default();
                let options = super::proxy_connect::login_options(&sock.session);
                if options != o.options.as_bytes() {
                    let detail = format!(
                        "server {} of a pool with options {:?} logged in with {:?}",
                        server.0,
                        o.options,
                        String::from_utf8_lossy(&options)
                    );
                    return Err(violation("pool-per-options", detail));
                }
                let conn = Conn {
                    options,
                    node,
                    life: sock.life,
                    fake: FakeServer::new(server.0, standby),
                    login: sock.session,
                    key,
                    replies: Default::default(),
                    dead: sock.gone,
                    eof: false,
                    run: 0,
                    route: o.route,
                };
                if conn.dead {
                    // Died between its ReadyForQuery and now: the EOF is on its way.
                    self.dead.insert(server);
                    self.q.push(
                        Instant(now.0 + hop(&mut self.rng)),
                        Ev::Death {
                            server,
                            fatal: false,
                        },
                    );
                }
                self.conns.insert(server, conn);
                let lent = Lent {
                    id: server,
                    settings,
                    prepared: Default::default(),
                };
                self.pool_idle(server, lent, false);
                self.pools.opened(now, server, Ok(()));
            }
            Outcome::Failed(text, login) => {
                let words = text.replace('\n', " ");
                trace!(t, "t={} s{} failed: {words}", now.0, server.0);
                // As `shared.rs`: a refused login refuses the pool's waiting clients at once.
                if login {
                    self.pools.login_refused(now, server, text, None);
                } else {
                    self.pools.opened(now, server, Err(text));
                }
            }
        }
        self.perform_pools(t, None);
        Ok(())
    }

    /// A `prefer-standby` connect that found the primary while the cluster stood still with
    /// a standby serving broke the promise of its first pass.
    fn check_prefer_standby(
        &self,
        o: &Opening,
        server: ServerId,
        node: usize,
    ) -> Result<(), Violation> {
        if o.route != pgyard_proxy::Route::Standby || o.epoch != self.cluster.epoch {
            return Ok(());
        }
        let standby_up = (0..self.cluster.members.len()).any(|n| self.cluster.in_recovery(n));
        if !self.cluster.in_recovery(node) && standby_up {
            let detail = format!(
                "server {} of the standby pool went to the primary pg{node} with a standby up",
                server.0
            );
            return Err(violation("prefer-standby-finds-a-standby", detail));
        }
        Ok(())
    }

    /// Closes a server connection (its server ends the session; a dead one is gone already).
    pub(super) fn close_conn(&mut self, server: ServerId) {
        if let Some(mut conn) = self.conns.remove(&server) {
            let member = &mut self.cluster.members[conn.node];
            if member.life == conn.life {
                conn.login.end(&mut member.node);
            }
        }
    }

    /// A change of the cluster; a server that dies takes its connections with it.
    pub(super) fn change(&mut self, t: &mut Trace, change: Change) {
        let now = self.now;
        let what = self.cluster.apply(now, change);
        let node = match change {
            Change::Die(n)
            | Change::Promote(n)
            | Change::Promoted(n)
            | Change::Restart(n)
            | Change::Up(n) => n,
        };
        trace!(t, "t={} cluster pg{node} {what}", now.0);
        if !matches!(change, Change::Die(_)) {
            return;
        }
        let fatal = self.cmix.fatal;
        for (server, conn) in self.conns.iter_mut() {
            if conn.node == node && !conn.dead {
                conn.dead = true;
                self.dead.insert(*server);
                // A FATAL is written at once; a silent crash is noticed later.
                let mut after = hop(&mut self.rng);
                if !fatal {
                    after += uniform_inclusive(&mut self.rng, 20_000_000);
                }
                let ev = Ev::Death {
                    server: *server,
                    fatal,
                };
                self.q.push(Instant(now.0 + after), ev);
            }
        }
        for (server, o) in self.openings.iter_mut() {
            let server = *server;
            o.node_died(node, now, &mut self.rng, &mut self.q, |ev| Ev::Net {
                server,
                ev,
            });
        }
    }

    /// A dead server's FATAL (if it said one) and EOF reach the proxy.
    pub(super) fn death_arrives(&mut self, t: &mut Trace, server: ServerId, fatal: bool) {
        let Some(conn) = self.conns.get_mut(&server) else {
            return;
        };
        trace!(t, "t={} s{} is gone (fatal={fatal})", self.now.0, server.0);
        if fatal {
            let mut out = BytesMut::new();
            let fields: [(u8, &[u8]); 4] = [
                (b'S', b"FATAL"),
                (b'V', b"FATAL"),
                (b'C', b"57P01"),
                (b'M', b"terminating connection due to administrator command"),
            ];
            let _ = encode_error_response(&fields, &mut out);
            conn.replies.extend(out.iter());
        }
        conn.eof = true;
    }
}
