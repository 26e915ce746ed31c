//! The pools, shared by every client task: what [`Pools`] asks (open, lend, refuse, close) is
//! done under one lock by whichever task caused it, so a client that finds an idle server
//! takes it at once, with no other task in between; a waiting client is handed its server
//! through a oneshot. The idle server connections live here, and cancel requests are routed to
//! the server a client holds at that moment. A small timer task runs the pools' timeouts.
//! The configuration in force is swapped here on a reload, and the proxy's phase (serving,
//! draining, stopped) is broadcast from here to the listeners and the client tasks. What the
//! admin console shows and does is in [`admin`].

mod admin;
mod conninfo;
mod databases;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use pgyard_driver::{Clock, ConnectOptions, SessionInfo};
use pgyard_proxy::admin::ClientAddr;
use pgyard_proxy::{
    ClientAuth, ClientId, Lent, PoolKey, PoolMode, PoolOut, Pools, Returned, ServerId,
};
use pgyard_types::Instant;
use pgyard_wire::auth::LoginSecret;
use pgyard_wire::error_fields::OwnedErrorFields;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, watch, Notify};

pub(super) use admin::{AdminOutcome, ClientSlot};

/// A client connection just accepted.
pub(super) struct Accepted {
    /// Its socket.
    pub(super) io: ClientIo,
    /// Its address.
    pub(super) peer: ClientAddr,
    /// The proxy's end.
    pub(super) local: Option<ClientAddr>,
}

impl Accepted {
    /// A TCP client (Nagle off: every message the proxy writes is whole).
    pub(super) fn tcp(sock: TcpStream, peer: SocketAddr) -> Accepted {
        let _ = sock.set_nodelay(true);
        let local = sock.local_addr().ok().map(ClientAddr::Tcp);
        Accepted {
            io: ClientIo::Tcp(sock),
            peer: ClientAddr::Tcp(peer),
            local,
        }
    }

    /// A client of the Unix socket named after `port`.
    pub(super) fn unix(sock: tokio::net::UnixStream, port: u16) -> Accepted {
        Accepted {
            io: ClientIo::Unix(sock),
            peer: ClientAddr::Unix { port },
            local: Some(ClientAddr::Unix { port }),
        }
    }
}

use super::client_io::ClientIo;
use super::refusal::Failed;
use super::{client_task, Phase, ProxyConfig};
use crate::{CancelToken, Session};
pub use conninfo::server_conninfo;

/// The answer to an acquire.
pub(super) enum Granted {
    /// The server's connection and settings.
    Server(Box<Session>, Lent),
    /// The wait timed out, or the login was refused: the text for the client, and the
    /// server's ErrorResponse when the text is the server's own.
    Refused(String, Option<OwnedErrorFields>),
}

/// An acquire's outcome: a server now, or later through the receiver.
pub(super) enum Acquired {
    Now(Box<Session>, Lent),
    Later(oneshot::Receiver<Granted>),
}

/// One open server connection as the adapter keeps it: a lend or a return looks it up once.
struct Entry {
    /// What the admin console shows of it.
    info: admin::ServerInfo,
    /// Its cancel token, made once at its login rather than at every lending.
    token: Option<Arc<CancelToken>>,
    /// The connection while it is idle here (lent: the client task has it).
    parked: Option<(Box<Session>, Lent)>,
    /// The client it is lent to, which a CancelRequest with that client's keys reaches.
    holder: Option<ClientId>,
}

impl Entry {
    /// A server just logged in (or found without an entry), idle here.
    fn idle(session: Box<Session>, lent: Lent) -> Entry {
        Entry {
            info: admin::ServerInfo::of(&session),
            token: session.cancel_token().ok().map(Arc::new),
            parked: Some((session, lent)),
            holder: None,
        }
    }
}

struct State {
    pools: Pools,
    /// Every open server connection (from its login until the pools close it).
    servers: BTreeMap<ServerId, Entry>,
    waiting: BTreeMap<ClientId, (PoolKey, oneshot::Sender<Granted>)>,
    keys: BTreeMap<i32, (ClientId, Vec<u8>)>,
    /// The deadline the timer task sleeps to.
    armed: Option<Instant>,
    /// The proxy stopped: servers that come back are closed.
    stopped: bool,
    /// Servers running `DISCARD ALL` (see [`Shared::discard`]).
    resetting: BTreeSet<ServerId>,
    /// PAUSEs waiting for every server to come back.
    pause_waiters: Vec<oneshot::Sender<Result<(), String>>>,
    /// WAIT_CLOSEs and PAUSEs of one database, waiting for its servers to close.
    db_waiters: Vec<(databases::Wait, databases::Answer)>,
    /// Per user, what its clients proved at login (MD5 secret or SCRAM keys): servers of its
    /// pools log in with it when the auth file has no plain-text password and the backend
    /// string none either. Cleared on a reload, refilled by the next transaction.
    secrets: HashMap<String, LoginSecret>,
}

/// The pools and their connections.
pub(super) struct Shared {
    /// Swapped whole on a reload; each user takes the `Arc` it needs and lets go.
    config: Mutex<Arc<ProxyConfig>>,
    /// Fixed at start: sessions of both modes must never share servers.
    mode: PoolMode,
    /// `server_reset_query_always` of the configuration in force (read on every release).
    reset_always: AtomicBool,
    seed: u64,
    clock: Clock,
    state: Mutex<State>,
    timer: Notify,
    phase: watch::Sender<Phase>,
    /// Client connections open now.
    clients: watch::Sender<usize>,
    next_client: AtomicU64,
    /// What each client task publishes, and the counters of clients gone.
    registry: Mutex<admin::Registry>,
    /// The addresses listened on.
    addrs: Vec<SocketAddr>,
    /// The folder of the Unix socket listened on, if any.
    unix_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("mode", &self.mode)
            .field("clients", &*self.clients.borrow())
            .field("phase", &*self.phase.borrow())
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// The pools of `config`, with their timer task running, for listeners on `addrs` (and a
    /// Unix socket in `unix_dir`).
    pub(super) fn start(
        config: Arc<ProxyConfig>,
        addrs: Vec<SocketAddr>,
        unix_dir: Option<std::path::PathBuf>,
    ) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pools: Pools::new(config.pool),
                servers: BTreeMap::new(),
                waiting: BTreeMap::new(),
                keys: BTreeMap::new(),
                armed: None,
                stopped: false,
                resetting: BTreeSet::new(),
                pause_waiters: Vec::new(),
                db_waiters: Vec::new(),
                secrets: HashMap::new(),
            }),
            mode: config.client.pool_mode,
            reset_always: AtomicBool::new(config.server_reset_query_always),
            seed: config.seed.unwrap_or_else(pgyard_driver::os_seed),
            config: Mutex::new(config),
            clock: Clock::new(),
            timer: Notify::new(),
            phase: watch::Sender::new(Phase::Running),
            clients: watch::Sender::new(0),
            next_client: AtomicU64::new(1),
            registry: Mutex::default(),
            addrs,
            unix_dir,
        });
        tokio::spawn(timer(shared.clone()));
        shared
    }

    /// The configuration in force.
    pub(super) fn config(&self) -> Arc<ProxyConfig> {
        self.config
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The time on the pools' clock, which every client task's session runs on too.
    pub(super) fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Follows the proxy's phase.
    pub(super) fn phase(&self) -> watch::Receiver<Phase> {
        self.phase.subscribe()
    }

    /// Moves to `phase` (never back).
    pub(super) fn set_phase(&self, phase: Phase) {
        let moved = self.phase.send_if_modified(|p| {
            let forward =
                (*p == Phase::Running) || (*p == Phase::Draining && phase == Phase::Stopped);
            if forward {
                *p = phase;
            }
            forward
        });
        if moved {
            self.kick_clients();
        }
    }

    /// Client connections open now.
    pub(super) fn clients(&self) -> usize {
        *self.clients.borrow()
    }

    /// Waits, at most `bound`, until no client is connected; true if none is.
    pub(super) async fn all_gone(&self, bound: Duration) -> bool {
        let mut count = self.clients.subscribe();
        let none = async move { count.wait_for(|n| *n == 0).await.is_ok() };
        tokio::time::timeout(bound, none).await.unwrap_or(false)
    }

    /// A new client connection: its task runs until it leaves.
    pub(super) fn admit(self: &Arc<Self>, sock: Accepted) {
        let Accepted { io, peer, local } = sock;
        let config = self.config();
        let id = self.next_client.fetch_add(1, Ordering::Relaxed);
        let mut over = false;
        self.clients.send_modify(|n| {
            over = *n >= config.max_client_conn;
            *n += 1;
        });
        tracing::debug!(client = id, %peer, "client connected");
        // The pools' clock: a client task's reading of it serves the pools too.
        let slot = ClientSlot::new(peer, local, self.clock);
        let slot = Arc::new(slot);
        let mut client = config.client.clone();
        client.disabled = self.disabled();
        if let (ClientIo::Unix(sock), true) = (&io, config.unix_peer) {
            let uid = sock.peer_cred().ok().map(|c| c.uid());
            let os_user = uid.and_then(pgyard_driver::user_name);
            tracing::debug!(client = id, ?uid, ?os_user, "peer of the Unix socket");
            client.auth = ClientAuth::Peer { os_user };
        }
        let mut task = client_task::ClientTask::new(
            id,
            self.seed,
            over,
            client,
            self.clone(),
            self.phase(),
            slot.clone(),
        );
        // A Unix-socket client is never offered TLS, as PostgreSQL offers none there.
        let unix = matches!(io, ClientIo::Unix(_));
        if let Some(tls) = config.tls.as_ref().filter(|_| !unix) {
            task = task.with_tls(tls);
        }
        self.register_client(ClientId(id), slot);
        let shared = self.clone();
        tokio::spawn(async move {
            task.run(io).await;
            shared.forget_client(ClientId(id));
            shared.clients.send_modify(|n| *n = n.saturating_sub(1));
            tracing::debug!(client = id, %peer, "client disconnected");
        });
    }

    /// Swaps in `new` (see [`super::Proxy::reload`]).
    pub(super) fn reload(self: &Arc<Self>, new: ProxyConfig) -> Result<(), String> {
        let mut new = new.checked()?;
        let old = self.config();
        if new.client.pool_mode != old.client.pool_mode {
            tracing::warn!(
                kept = ?old.client.pool_mode,
                asked = ?new.client.pool_mode,
                "pool_mode changes only with a restart; keeping the current one"
            );
            new.client.pool_mode = old.client.pool_mode;
        }
        new.seed = old.seed;
        if new.file.is_none() {
            new.file.clone_from(&old.file);
        }
        let settings = new.pool;
        let always = new.server_reset_query_always;
        self.reset_always.store(always, Ordering::Relaxed);
        let new = Arc::new(new);
        *self.config.lock().unwrap_or_else(|p| p.into_inner()) = new.clone();
        let mut st = self.lock();
        // A user's entry may have changed: its clients prove the new one from now on.
        st.secrets.clear();
        let now = self.clock.now();
        st.pools.set_settings(now, settings);
        let changed: Vec<String> = st
            .pools
            .databases()
            .into_iter()
            .filter(|d| old.backend_of(d) != new.backend_of(d))
            .collect();
        for database in &changed {
            st.pools.retire_database(now, database);
        }
        self.perform(&mut st, None, now);
        drop(st);
        tracing::info!(
            pool_size = settings.size,
            databases = ?new.databases.keys().collect::<Vec<_>>(),
            retired = ?changed,
            "configuration reloaded"
        );
        Ok(())
    }

    /// Closes every idle server connection, and from now on every server that comes back.
    pub(super) fn close_idle(&self) {
        let mut st = self.lock();
        st.stopped = true;
        let now = self.clock.now();
        let parked: Vec<ServerId> = st
            .servers
            .iter()
            .filter(|(_, e)| e.parked.is_some())
            .map(|(id, _)| *id)
            .collect();
        let mut idle = Vec::with_capacity(parked.len());
        for server in parked {
            st.pools.broken(now, server);
            idle.extend(st.servers.remove(&server));
        }
        while st.pools.poll_output().is_some() {}
        drop(st);
        if !idle.is_empty() {
            tracing::info!(servers = idle.len(), "closing idle server connections");
        }
        // Dropping a session sends Terminate and closes it.
        drop(idle);
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the books half-written in a way that
        // matters more than stopping would; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A server of `key` for `client`.
    /// `proven` is what the client proved at login, for the pool's server logins.
    /// `now` is the caller's latest reading of [`Shared::now`]'s clock.
    pub(super) fn acquire(
        self: &Arc<Self>,
        client: ClientId,
        key: &PoolKey,
        proven: Option<&LoginSecret>,
        now: Instant,
    ) -> Acquired {
        let mut st = self.lock();
        if let Some(secret) = proven {
            if st.secrets.get(&key.user) != Some(secret) {
                st.secrets.insert(key.user.clone(), secret.clone());
            }
        }
        // Most acquires find an idle server at once: lent straight from the idle list, with
        // no output to perform and no earlier timeout to arm. Only a client that must wait
        // gets a channel and an entry among the waiting (the lock is held until it has them).
        let mine = match st.pools.lend_idle(client, key) {
            Some(server) => self
                .grant(&mut st, client, server, true, now)
                .map(|(session, lent)| Granted::Server(session, lent)),
            None => {
                st.pools.acquire(now, client, key);
                self.perform(&mut st, Some(client), now)
            }
        };
        if let Some(Granted::Server(session, lent)) = mine {
            return Acquired::Now(session, lent);
        }
        let (reply, rx) = oneshot::channel();
        match mine {
            Some(refused) => {
                let _ = reply.send(refused);
            }
            None => {
                st.waiting.insert(client, (key.clone(), reply));
            }
        }
        Acquired::Later(rx)
    }

    /// The client left while waiting.
    pub(super) fn cancel_wait(self: &Arc<Self>, client: ClientId) {
        let mut st = self.lock();
        st.waiting.remove(&client);
        st.pools.cancel_wait(client);
    }

    /// A server comes back (`conn` is `None` when its connection broke); `now` as for
    /// [`Shared::acquire`].
    pub(super) fn release(
        self: &Arc<Self>,
        client: ClientId,
        lent: Lent,
        conn: Option<Box<Session>>,
        reusable: bool,
        now: Instant,
    ) {
        let server = lent.id;
        let mut st = self.lock();
        if let Some(e) = st.servers.get_mut(&server) {
            e.info.returned(&lent);
            if e.holder == Some(client) {
                e.holder = None;
            }
        }
        match conn {
            Some(session) if reusable && !st.stopped => {
                if self.mode == PoolMode::Session || self.reset_always.load(Ordering::Relaxed) {
                    st.resetting.insert(server);
                    drop(st);
                    let shared = self.clone();
                    tokio::spawn(async move { shared.discard(session, lent).await });
                    return;
                }
                park(&mut st, server, session, lent);
                // Back to a pool nobody waits on: nothing to perform, at most a timer to arm.
                if let Returned::Idle { deadline } = st.pools.return_idle(now, server) {
                    if deadline.is_some_and(|d| st.armed.is_none_or(|a| d < a)) {
                        st.armed = deadline;
                        self.timer.notify_one();
                    }
                    return;
                }
                st.pools.release(now, server, true);
            }
            other => {
                drop(other);
                st.pools.release(now, server, false);
            }
        }
        self.perform(&mut st, None, now);
    }

    /// `DISCARD ALL` before the server serves anyone else (session mode, or
    /// `server_reset_query_always`).
    async fn discard(self: Arc<Self>, mut session: Box<Session>, lent: Lent) {
        // The server as its client left it, amended below by what DISCARD reports: what it
        // does not reset (`in_hot_standby` after a promotion) stays as last reported.
        for (name, value) in lent.settings.iter() {
            session.note_parameter(name.as_bytes(), value.as_bytes());
        }
        let ok = session.simple_query("DISCARD ALL").await.is_ok();
        let server = lent.id;
        let mut st = self.lock();
        st.resetting.remove(&server);
        let now = self.clock.now();
        if ok && !st.stopped {
            // DISCARD ALL returns the tracked settings to the login's, which they count as
            // from now on (statements the proxy prepared there are gone with it).
            let lent = lent_of(server, &session);
            park(&mut st, server, session, lent);
        }
        let reusable = ok && !st.stopped;
        st.pools.release(now, server, reusable);
        self.perform(&mut st, None, now);
    }

    /// A client's cancel keys, so that a CancelRequest can find it.
    pub(super) fn register(&self, client: ClientId, pid: i32, secret: Vec<u8>) {
        self.lock().keys.insert(pid, (client, secret));
    }

    /// The client is gone.
    pub(super) fn unregister(&self, client: ClientId) {
        self.lock().keys.retain(|_, (c, _)| *c != client);
    }

    /// A CancelRequest with the proxy's keys: cancels the query of the server that client
    /// holds now; anything else is ignored, as PostgreSQL ignores unknown keys. Until the
    /// server has handled it the pools lend that server to no one else, whose query the
    /// cancel would otherwise stop.
    pub(super) fn cancel(self: &Arc<Self>, pid: i32, secret: &[u8]) {
        let mut st = self.lock();
        let found = st.keys.get(&pid).filter(|(_, s)| s == secret);
        let Some(&(client, _)) = found else {
            return;
        };
        // A scan of the open servers: cancels are rare, lends and returns are not.
        let held = st.servers.iter().find(|(_, e)| e.holder == Some(client));
        let Some((&server, Some(token))) = held.map(|(id, e)| (id, e.token.clone())) else {
            return;
        };
        st.pools.cancel_sent(server);
        drop(st);
        let shared = self.clone();
        tokio::spawn(async move {
            let _ = token.cancel().await;
            let mut st = shared.lock();
            let now = shared.clock.now();
            st.pools.cancel_done(now, server);
            shared.perform(&mut st, None, now);
        });
    }

    /// A client task ends while it awaits a server: a server sent to it meanwhile goes back
    /// to the pools (dropped with the channel, the pools would count it lent for ever),
    /// otherwise its wait is cancelled.
    pub(super) fn abandon_wait(
        self: &Arc<Self>,
        client: ClientId,
        mut rx: oneshot::Receiver<Granted>,
    ) {
        // Closed first, so that nothing can be sent once the channel has been read.
        rx.close();
        match rx.try_recv() {
            Ok(Granted::Server(session, lent)) => {
                self.release(client, lent, Some(session), true, self.now());
            }
            _ => self.cancel_wait(client),
        }
    }

    fn opened(
        self: &Arc<Self>,
        server: ServerId,
        key: &PoolKey,
        result: Result<Box<Session>, Failed>,
    ) {
        let mut st = self.lock();
        let now = self.clock.now();
        match result {
            Ok(session) => {
                let est = session.established();
                tracing::info!(
                    server = server.0,
                    database = %key.database,
                    user = %key.user,
                    route = ?key.route,
                    host = %est.host,
                    target = ?est.target,
                    "server connection opened"
                );
                let lent = lent_of(server, &session);
                st.servers.insert(server, Entry::idle(session, lent));
                st.pools.opened(now, server, Ok(()));
            }
            Err(Failed {
                login,
                text,
                answer,
            }) => {
                tracing::warn!(
                    database = %key.database,
                    user = %key.user,
                    route = ?key.route,
                    login_refused = login,
                    error = %text.split_whitespace().collect::<Vec<_>>().join(" "),
                    "server connection failed"
                );
                if login {
                    st.pools.login_refused(now, server, text, answer);
                } else {
                    st.pools.opened(now, server, Err(text));
                }
            }
        }
        self.perform(&mut st, None, now);
    }

    /// Does what the pools ask; what is granted to (or refused) `me`, the client acquiring
    /// under this lock and not among the waiting, is returned instead of sent.
    /// `now` is the time the caller read under the lock (one clock reading per call).
    fn perform(
        self: &Arc<Self>,
        st: &mut State,
        me: Option<ClientId>,
        now: Instant,
    ) -> Option<Granted> {
        let mut mine = None;
        while let Some(out) = st.pools.poll_output() {
            match out {
                PoolOut::Open { server, key } => {
                    let proven = st.secrets.get(&key.user).cloned();
                    self.open(server, key, proven);
                }
                PoolOut::Grant { client, server } => {
                    let present = Some(client) == me || st.waiting.contains_key(&client);
                    if let Some(got) = self.grant(st, client, server, present, now) {
                        if Some(client) == me {
                            mine = Some(Granted::Server(got.0, got.1));
                        } else if let Some((_, reply)) = st.waiting.remove(&client) {
                            let (session, lent) = got;
                            if let Err(Granted::Server(session, lent)) =
                                reply.send(Granted::Server(session, lent))
                            {
                                // The client left meanwhile: the server stays idle.
                                park(st, server, session, lent);
                                if let Some(e) = st.servers.get_mut(&server) {
                                    e.holder = None;
                                }
                                st.pools.release(now, server, true);
                            }
                        }
                    }
                }
                PoolOut::Refuse {
                    client,
                    message,
                    answer,
                } => {
                    if Some(client) == me {
                        mine = Some(Granted::Refused(message, answer));
                    } else if let Some((_, reply)) = st.waiting.remove(&client) {
                        let _ = reply.send(Granted::Refused(message, answer));
                    }
                }
                PoolOut::Close { server } => {
                    tracing::info!(server = server.0, "server connection closed");
                    // Dropping a session sends Terminate and closes it.
                    drop(st.servers.remove(&server));
                }
            }
        }
        if st.pools.pause_complete() && !st.pause_waiters.is_empty() {
            tracing::info!("PAUSE complete: no server connection left");
            for waiter in st.pause_waiters.drain(..) {
                let _ = waiter.send(Ok(()));
            }
        }
        databases::answer_waiters(&st.pools, &mut st.db_waiters);
        let next = st.pools.poll_timeout();
        if next.is_some_and(|n| st.armed.is_none_or(|a| n < a)) {
            st.armed = next;
            self.timer.notify_one();
        }
        mine
    }

    /// Takes a granted server out of the idle set (`None`: it cannot be lent); a client no
    /// longer `present` (it left while waiting) leaves the server idle.
    fn grant(
        self: &Arc<Self>,
        st: &mut State,
        client: ClientId,
        server: ServerId,
        present: bool,
        now: Instant,
    ) -> Option<(Box<Session>, Lent)> {
        let e = st.servers.get_mut(&server).filter(|e| e.parked.is_some())?;
        if !present {
            // The client left meanwhile: the server stays idle.
            st.pools.release(now, server, true);
            return None;
        }
        let (session, lent) = e.parked.take()?;
        e.holder = Some(client);
        e.info.lent_now(now);
        Some((session, lent))
    }

    /// Opens a server of `key`'s pool. The login uses, in this order: the backend string's
    /// password (or passfile, or PGPASSWORD), the auth file's plain-text password, then what a
    /// client of this user proved (`proven`: an MD5 secret, or SCRAM keys, which only a server
    /// storing the same verifier accepts).
    fn open(self: &Arc<Self>, server: ServerId, key: PoolKey, proven: Option<LoginSecret>) {
        let config = self.config();
        let (password, proven) = match &config.client.auth {
            ClientAuth::File(f) => (
                f.get(&key.user).and_then(|p| p.plain()).map(str::to_owned),
                proven,
            ),
            // Peer is only ever a client's own (`ProxyConfig::checked` refuses it here); a
            // certificate proves nothing a server would take.
            ClientAuth::Trust | ClientAuth::Peer { .. } | ClientAuth::Cert => (None, None),
        };
        let conninfo = server_conninfo(&config, &key, password.as_deref());
        let options = ConnectOptions::default()
            .failover_timeout(config.failover_timeout)
            .login_secret(proven);
        let shared = self.clone();
        tokio::spawn(async move {
            let result = match conninfo {
                Ok(c) => crate::connect_with(&c, &options)
                    .await
                    .map(Box::new)
                    .map_err(|e| Failed::of(&e)),
                Err(text) => Err(Failed::unusable(text)),
            };
            shared.opened(server, &key, result);
        });
    }
}

/// Keeps an idle connection in its server's entry (made anew should it be missing).
fn park(st: &mut State, server: ServerId, session: Box<Session>, lent: Lent) {
    match st.servers.get_mut(&server) {
        Some(e) => e.parked = Some((session, lent)),
        None => {
            st.servers.insert(server, Entry::idle(session, lent));
        }
    }
}

/// Runs the pools' timeouts (for as long as the runtime runs).
async fn timer(s: Arc<Shared>) {
    loop {
        let deadline = s.lock().armed.map(|d| s.clock.deadline(d));
        let notified = s.timer.notified();
        match deadline {
            Some(d) => {
                tokio::select! {
                    () = tokio::time::sleep_until(d.into()) => {}
                    () = notified => continue,
                }
            }
            None => {
                notified.await;
                continue;
            }
        }
        let mut st = s.lock();
        st.armed = None;
        let now = s.clock.now();
        st.pools.handle_timeout(now);
        s.perform(&mut st, None, now);
    }
}

/// The server's settings as the connect left them.
fn lent_of(id: ServerId, session: &Session) -> Lent {
    let est = session.established();
    let settings: pgyard_proxy::client::Settings = est.parameters.iter().collect();
    Lent {
        id,
        settings,
        prepared: BTreeMap::new(),
    }
}
