//! The task that owns the pools: it performs what [`Pools`] asks (open, lend, refuse,
//! close), keeps the idle server connections, and routes cancel requests to the server a
//! client is using at that moment.

use std::collections::BTreeMap;
use std::sync::Arc;

use pgyard_driver::{Clock, SessionInfo};
use pgyard_proxy::{
    ClientAuth, ClientId, Lent, PoolKey, PoolMode, PoolOut, Pools, Route, ServerId,
};
use tokio::sync::{mpsc, oneshot};

use super::ProxyConfig;
use crate::{CancelToken, Session};

/// What a client task asks of the pool task.
pub(super) enum PoolMsg {
    /// A server of `key` for `client`.
    Acquire {
        client: ClientId,
        key: PoolKey,
        reply: oneshot::Sender<Granted>,
    },
    /// The client left while waiting.
    CancelWait { client: ClientId },
    /// A server comes back (`conn` is `None` when its connection broke).
    Release {
        client: ClientId,
        lent: Lent,
        conn: Option<Box<Session>>,
        reusable: bool,
    },
    /// A client's cancel keys (so a CancelRequest can find it).
    Register {
        client: ClientId,
        pid: i32,
        secret: Vec<u8>,
    },
    /// The client is gone.
    Unregister { client: ClientId },
    /// A CancelRequest with the proxy's keys.
    Cancel { pid: i32, secret: Vec<u8> },
    /// A connect the task started ended.
    Opened {
        server: ServerId,
        result: Result<Box<Session>, String>,
    },
    /// A session-mode server's `DISCARD ALL` ended.
    Discarded {
        server: ServerId,
        back: Option<(Box<Session>, Lent)>,
    },
}

/// The answer to an acquire.
pub(super) enum Granted {
    /// The server's connection and settings.
    Server(Box<Session>, Lent),
    /// The wait timed out: the text for the client.
    Refused(String),
}

struct PoolTask {
    config: Arc<ProxyConfig>,
    clock: Clock,
    pools: Pools,
    tx: mpsc::UnboundedSender<PoolMsg>,
    idle: BTreeMap<ServerId, (Box<Session>, Lent)>,
    waiting: BTreeMap<ClientId, (PoolKey, oneshot::Sender<Granted>)>,
    /// The cancel token of the server each client holds.
    holding: BTreeMap<ClientId, CancelToken>,
    keys: BTreeMap<i32, (ClientId, Vec<u8>)>,
}

/// Runs the pool task until every client task's sender is gone.
pub(super) async fn run(config: Arc<ProxyConfig>, mut rx: mpsc::UnboundedReceiver<PoolMsg>) {
    let (tx, mut own) = mpsc::unbounded_channel();
    let mut t = PoolTask {
        pools: Pools::new(config.pool),
        config,
        clock: Clock::new(),
        tx,
        idle: BTreeMap::new(),
        waiting: BTreeMap::new(),
        holding: BTreeMap::new(),
        keys: BTreeMap::new(),
    };
    loop {
        let deadline = t.pools.poll_timeout().map(|d| t.clock.deadline(d));
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => std::future::pending().await,
            }
        };
        let msg = tokio::select! {
            m = rx.recv() => match m { Some(m) => m, None => return },
            Some(m) = own.recv() => m,
            () = sleep => {
                t.pools.handle_timeout(t.clock.now());
                t.perform();
                continue;
            }
        };
        t.handle(msg);
        t.perform();
    }
}

impl PoolTask {
    fn handle(&mut self, msg: PoolMsg) {
        let now = self.clock.now();
        match msg {
            PoolMsg::Acquire { client, key, reply } => {
                self.waiting.insert(client, (key.clone(), reply));
                self.pools.acquire(now, client, &key);
            }
            PoolMsg::CancelWait { client } => {
                self.waiting.remove(&client);
                self.pools.cancel_wait(client);
            }
            PoolMsg::Release {
                client,
                lent,
                conn,
                reusable,
            } => self.release(client, lent, conn, reusable),
            PoolMsg::Register {
                client,
                pid,
                secret,
            } => {
                self.keys.insert(pid, (client, secret));
            }
            PoolMsg::Unregister { client } => self.keys.retain(|_, (c, _)| *c != client),
            PoolMsg::Cancel { pid, secret } => {
                let found = self.keys.get(&pid).filter(|(_, s)| *s == secret);
                if let Some(token) = found.and_then(|(c, _)| self.holding.get(c)) {
                    let token = token.clone();
                    tokio::spawn(async move { token.cancel().await });
                }
            }
            PoolMsg::Opened { server, result } => match result {
                Ok(session) => {
                    let lent = lent_of(server, &session);
                    self.idle.insert(server, (session, lent));
                    self.pools.opened(now, server, Ok(()));
                }
                Err(e) => self.pools.opened(now, server, Err(e)),
            },
            PoolMsg::Discarded { server, back } => match back {
                Some(idle) => {
                    self.idle.insert(server, idle);
                    self.pools.release(now, server, true);
                }
                None => self.pools.release(now, server, false),
            },
        }
    }

    fn release(
        &mut self,
        client: ClientId,
        lent: Lent,
        conn: Option<Box<Session>>,
        reusable: bool,
    ) {
        let now = self.clock.now();
        self.holding.remove(&client);
        let server = lent.id;
        match conn {
            Some(session) if reusable => {
                if self.config.client.pool_mode == PoolMode::Session {
                    let tx = self.tx.clone();
                    tokio::spawn(async move {
                        let mut session = session;
                        let ok = session.simple_query("DISCARD ALL").await.is_ok();
                        // DISCARD ALL restores the settings of the login, which the
                        // session's own record holds (with what DISCARD reported).
                        let back = ok.then(|| {
                            let lent = lent_of(lent.id, &session);
                            (session, lent)
                        });
                        let _ = tx.send(PoolMsg::Discarded { server, back });
                    });
                    return;
                }
                self.idle.insert(server, (session, lent));
                self.pools.release(now, server, true);
            }
            other => {
                drop(other);
                self.pools.release(now, server, false);
            }
        }
    }

    fn perform(&mut self) {
        while let Some(out) = self.pools.poll_output() {
            match out {
                PoolOut::Open { server, key } => self.open(server, key),
                PoolOut::Grant { client, server } => self.grant(client, server),
                PoolOut::Refuse { client, message } => {
                    if let Some((_, reply)) = self.waiting.remove(&client) {
                        let _ = reply.send(Granted::Refused(message));
                    }
                }
                PoolOut::Close { server } => {
                    // Dropping a session sends Terminate and closes it.
                    self.idle.remove(&server);
                }
            }
        }
    }

    fn grant(&mut self, client: ClientId, server: ServerId) {
        let now = self.clock.now();
        let Some((session, lent)) = self.idle.remove(&server) else {
            return;
        };
        let Some((key, reply)) = self.waiting.remove(&client) else {
            // The client left meanwhile: the server stays idle.
            self.idle.insert(server, (session, lent));
            self.pools.release(now, server, true);
            return;
        };
        // A server that became a standby since it was opened never serves `primary`.
        if key.route == Route::Primary && lent.in_recovery == Some(true) {
            self.pools.broken(now, server);
            self.waiting.insert(client, (key.clone(), reply));
            self.pools.acquire(now, client, &key);
            return;
        }
        if let Ok(token) = session.cancel_token() {
            self.holding.insert(client, token);
        }
        if let Err(Granted::Server(session, lent)) = reply.send(Granted::Server(session, lent)) {
            self.holding.remove(&client);
            self.idle.insert(server, (session, lent));
            self.pools.release(now, server, true);
        }
    }

    fn open(&mut self, server: ServerId, key: PoolKey) {
        let password = match &self.config.client.auth {
            ClientAuth::File(f) => f.get(&key.user).and_then(|p| p.plain()).map(str::to_owned),
            ClientAuth::Trust => None,
        };
        let conninfo = server_conninfo(&self.config.backend, &key, password.as_deref());
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let result = match conninfo {
                Ok(c) => crate::connect(&c)
                    .await
                    .map(Box::new)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            let result = result.map_err(|e| e.trim_end().to_owned());
            let _ = tx.send(PoolMsg::Opened { server, result });
        });
    }
}

/// The server's settings as the connect left them.
fn lent_of(id: ServerId, session: &Session) -> Lent {
    let est = session.established();
    let settings: pgyard_proxy::client::Settings = est.parameters.iter().cloned().collect();
    let in_recovery = settings.get("in_hot_standby").map(|v| v == "on");
    Lent {
        id,
        settings,
        in_recovery,
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
