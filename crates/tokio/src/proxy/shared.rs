//! The pools, shared by every client task: what [`Pools`] asks (open, lend, refuse, close) is
//! done under one lock by whichever task caused it, so a client that finds an idle server
//! takes it at once, with no other task in between; a waiting client is handed its server
//! through a oneshot. The idle server connections live here, and cancel requests are routed to
//! the server a client holds at that moment. A small timer task runs the pools' timeouts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use pgyard_driver::{Clock, SessionInfo};
use pgyard_proxy::{
    ClientAuth, ClientId, Lent, PoolKey, PoolMode, PoolOut, Pools, Route, ServerId,
};
use pgyard_types::Instant;
use tokio::sync::{oneshot, Notify};

use super::ProxyConfig;
use crate::{CancelToken, Session};

/// The answer to an acquire.
pub(super) enum Granted {
    /// The server's connection and settings.
    Server(Box<Session>, Lent),
    /// The wait timed out: the text for the client.
    Refused(String),
}

/// An acquire's outcome: a server now, or later through the receiver.
pub(super) enum Acquired {
    Now(Box<Session>, Lent),
    Later(oneshot::Receiver<Granted>),
}

struct State {
    pools: Pools,
    idle: BTreeMap<ServerId, (Box<Session>, Lent)>,
    waiting: BTreeMap<ClientId, (PoolKey, oneshot::Sender<Granted>)>,
    /// The cancel token of the server each client holds.
    holding: BTreeMap<ClientId, CancelToken>,
    keys: BTreeMap<i32, (ClientId, Vec<u8>)>,
    /// The deadline the timer task sleeps to.
    armed: Option<Instant>,
}

/// The pools and their connections.
pub(super) struct Shared {
    config: Arc<ProxyConfig>,
    clock: Clock,
    state: Mutex<State>,
    timer: Notify,
}

impl Shared {
    /// The pools of `config`, with their timer task running.
    pub(super) fn start(config: Arc<ProxyConfig>) -> Arc<Shared> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                pools: Pools::new(config.pool),
                idle: BTreeMap::new(),
                waiting: BTreeMap::new(),
                holding: BTreeMap::new(),
                keys: BTreeMap::new(),
                armed: None,
            }),
            config,
            clock: Clock::new(),
            timer: Notify::new(),
        });
        tokio::spawn(timer(shared.clone()));
        shared
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the books half-written in a way that
        // matters more than stopping would; keep serving.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A server of `key` for `client`.
    pub(super) fn acquire(self: &Arc<Self>, client: ClientId, key: PoolKey) -> Acquired {
        let (reply, rx) = oneshot::channel();
        let mut st = self.lock();
        st.waiting.insert(client, (key.clone(), reply));
        st.pools.acquire(self.clock.now(), client, &key);
        let mine = self.perform(&mut st, Some(client));
        match mine {
            Some((session, lent)) => Acquired::Now(session, lent),
            None => Acquired::Later(rx),
        }
    }

    /// The client left while waiting.
    pub(super) fn cancel_wait(self: &Arc<Self>, client: ClientId) {
        let mut st = self.lock();
        st.waiting.remove(&client);
        st.pools.cancel_wait(client);
    }

    /// A server comes back (`conn` is `None` when its connection broke).
    pub(super) fn release(
        self: &Arc<Self>,
        client: ClientId,
        lent: Lent,
        conn: Option<Box<Session>>,
        reusable: bool,
    ) {
        let server = lent.id;
        let mut st = self.lock();
        st.holding.remove(&client);
        let now = self.clock.now();
        match conn {
            Some(session) if reusable => {
                if self.config.client.pool_mode == PoolMode::Session {
                    drop(st);
                    let shared = self.clone();
                    tokio::spawn(async move { shared.discard(session, lent).await });
                    return;
                }
                st.idle.insert(server, (session, lent));
                st.pools.release(now, server, true);
            }
            other => {
                drop(other);
                st.pools.release(now, server, false);
            }
        }
        self.perform(&mut st, None);
    }

    /// Session mode: `DISCARD ALL` before the server serves anyone else.
    async fn discard(self: Arc<Self>, mut session: Box<Session>, lent: Lent) {
        let ok = session.simple_query("DISCARD ALL").await.is_ok();
        let server = lent.id;
        let mut st = self.lock();
        let now = self.clock.now();
        if ok {
            // DISCARD ALL restores the settings of the login, which the session's own record
            // holds (with what DISCARD reported).
            let lent = lent_of(server, &session);
            st.idle.insert(server, (session, lent));
        }
        st.pools.release(now, server, ok);
        self.perform(&mut st, None);
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
    /// holds now; anything else is ignored, as PostgreSQL ignores unknown keys.
    pub(super) fn cancel(&self, pid: i32, secret: &[u8]) {
        let st = self.lock();
        let found = st.keys.get(&pid).filter(|(_, s)| s == secret);
        if let Some(token) = found.and_then(|(c, _)| st.holding.get(c)) {
            let token = token.clone();
            tokio::spawn(async move { token.cancel().await });
        }
    }

    fn opened(self: &Arc<Self>, server: ServerId, result: Result<Box<Session>, String>) {
        let mut st = self.lock();
        let now = self.clock.now();
        match result {
            Ok(session) => {
                let lent = lent_of(server, &session);
                st.idle.insert(server, (session, lent));
                st.pools.opened(now, server, Ok(()));
            }
            Err(e) => st.pools.opened(now, server, Err(e)),
        }
        self.perform(&mut st, None);
    }

    /// Does what the pools ask; a server granted to `me` is returned instead of sent.
    fn perform(
        self: &Arc<Self>,
        st: &mut State,
        me: Option<ClientId>,
    ) -> Option<(Box<Session>, Lent)> {
        let mut mine = None;
        while let Some(out) = st.pools.poll_output() {
            match out {
                PoolOut::Open { server, key } => self.open(server, key),
                PoolOut::Grant { client, server } => {
                    if let Some(got) = self.grant(st, client, server) {
                        if Some(client) == me {
                            mine = Some(got);
                        } else if let Some((_, reply)) = st.waiting.remove(&client) {
                            let (session, lent) = got;
                            if let Err(Granted::Server(session, lent)) =
                                reply.send(Granted::Server(session, lent))
                            {
                                // The client left meanwhile: the server stays idle.
                                st.holding.remove(&client);
                                st.idle.insert(server, (session, lent));
                                st.pools.release(self.clock.now(), server, true);
                            }
                        }
                    }
                }
                PoolOut::Refuse { client, message } => {
                    if let Some((_, reply)) = st.waiting.remove(&client) {
                        let _ = reply.send(Granted::Refused(message));
                    }
                }
                // Dropping a session sends Terminate and closes it.
                PoolOut::Close { server } => drop(st.idle.remove(&server)),
            }
        }
        if mine.is_some() {
            if let Some(me) = me {
                st.waiting.remove(&me);
            }
        }
        let next = st.pools.poll_timeout();
        if next.is_some_and(|n| st.armed.is_none_or(|a| n < a)) {
            st.armed = next;
            self.timer.notify_one();
        }
        mine
    }

    /// Takes a granted server out of the idle set (`None`: it cannot be lent).
    fn grant(
        self: &Arc<Self>,
        st: &mut State,
        client: ClientId,
        server: ServerId,
    ) -> Option<(Box<Session>, Lent)> {
        let now = self.clock.now();
        let (session, lent) = st.idle.remove(&server)?;
        if !st.waiting.contains_key(&client) {
            // The client left meanwhile: the server stays idle.
            st.idle.insert(server, (session, lent));
            st.pools.release(now, server, true);
            return None;
        }
        if let Ok(token) = session.cancel_token() {
            st.holding.insert(client, token);
        }
        Some((session, lent))
    }

    fn open(self: &Arc<Self>, server: ServerId, key: PoolKey) {
        let password = match &self.config.client.auth {
            ClientAuth::File(f) => f.get(&key.user).and_then(|p| p.plain()).map(str::to_owned),
            ClientAuth::Trust => None,
        };
        let conninfo = server_conninfo(&self.config.backend, &key, password.as_deref());
        let shared = self.clone();
        tokio::spawn(async move {
            let result = match conninfo {
                Ok(c) => crate::connect(&c)
                    .await
                    .map(Box::new)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            shared.opened(server, result.map_err(|e| e.trim_end().to_owned()));
        });
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
        st.pools.handle_timeout(s.clock.now());
        s.perform(&mut st, None);
    }
}

/// The server's settings as the connect left them.
fn lent_of(id: ServerId, session: &Session) -> Lent {
    let est = session.established();
    let settings: pgyard_proxy::client::Settings = est.parameters.iter().cloned().collect();
    Lent {
        id,
        settings,
        prepared: BTreeMap::new(),
    }
}

/// The backend's connection string with the pool's user, database and route; the auth
/// file's plain password is used only when the backend string names none.
pub fn server_conninfo(
    backend: &str,
    key: &PoolKey,
    password: Option<&str>,
) -> Result<String, pgyard_conninfo::ParseError> {
    use pgyard_conninfo::Keyword;
    let mut info = pgyard_conninfo::parse(backend.as_bytes())?;
    info.set(Keyword::User, &key.user);
    info.set(Keyword::Dbname, &key.database);
    let tsa = match key.route {
        Route::Primary => "read-write",
        Route::Standby => "prefer-standby",
        Route::Any => "any",
    };
    info.set(Keyword::TargetSessionAttrs, tsa);
    if key.route == Route::Any {
        info.set(Keyword::LoadBalanceHosts, "random");
    }
    if let (Some(p), None) = (password, info.get(Keyword::Password)) {
        info.set(Keyword::Password, p);
    }
    let text = pgyard_conninfo::serialize::to_keyword_value(&info);
    Ok(String::from_utf8_lossy(&text).into_owned())
}
