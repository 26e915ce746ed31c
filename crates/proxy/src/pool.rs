//! The pool bookkeeping: which server connections exist for each (database, user, route),
//! which are idle, which client holds which, and who waits. Pure: the adapter opens and
//! closes the connections it is told to (through the connect machine) and reports back.
//!
//! A client asks with [`Pools::acquire`]; it gets an idle server at once, or a new one is
//! opened for it while the pool is below its size, or it waits in a FIFO queue until a
//! server is released or its wait times out. A failed open is retried with a growing pause
//! for as long as clients wait, so a failover in progress holds them instead of failing them.
//!
//! [`Pools::pause`] (the admin console's PAUSE) stops lending: idle servers close, servers
//! being opened are forgotten (closed when they arrive), lent ones close when they come back,
//! and clients wait (their wait timeout still runs) until [`Pools::resume`].
//!
//! A pool that holds nothing (no server, no waiter, no retry pause running) may be forgotten
//! when a new one is made (`forget.rs`): any client can name any database, and the pools of
//! names the server refuses must not pile up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use pgyard_types::Instant;
use pgyard_wire::error_fields::OwnedErrorFields;

use crate::classes::Route;

mod forget;
mod pause;

/// A client connection of the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ClientId(pub u64);

/// A server connection of the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerId(pub u64);

/// Which pool a server belongs to. Ordered by its fields in turn, each name by its bytes (as
/// a derived order would), without a call to the C library's `memcmp` per name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// The database name the client asked for.
    pub database: String,
    /// The user name.
    pub user: String,
    /// The route.
    pub route: Route,
    /// The `options` its servers log in with: the client's switches and settings other
    /// than the tracked ones (empty: none), so each client gets what it asked a server for.
    pub options: String,
}

impl Ord for PoolKey {
    // Every lend and return looks its pool up by key, and the names are short: a `memcmp`
    // call per name was 2 % of the proxy's CPU time in `perf` (session 37).
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        bytes_cmp(self.database.as_bytes(), other.database.as_bytes())
            .then_with(|| bytes_cmp(self.user.as_bytes(), other.user.as_bytes()))
            .then_with(|| self.route.cmp(&other.route))
            .then_with(|| bytes_cmp(self.options.as_bytes(), other.options.as_bytes()))
    }
}

impl PartialOrd for PoolKey {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// `a.cmp(b)` for byte strings, eight bytes at a time (big-endian words order as their
/// bytes do), inlined.
#[inline]
fn bytes_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (mut x, mut y) = (a, b);
    while let (Some((p, xr)), Some((q, yr))) =
        (x.split_first_chunk::<8>(), y.split_first_chunk::<8>())
    {
        if p != q {
            return u64::from_be_bytes(*p).cmp(&u64::from_be_bytes(*q));
        }
        (x, y) = (xr, yr);
    }
    for (p, q) in x.iter().zip(y) {
        if p != q {
            return p.cmp(q);
        }
    }
    x.len().cmp(&y.len())
}

/// Limits of every pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolSettings {
    /// Server connections per pool.
    pub size: usize,
    /// How long a client waits for a server (PgBouncer's `query_wait_timeout`).
    pub wait_timeout: Duration,
    /// An idle server older than this in idleness is closed (`server_idle_timeout`).
    pub idle_timeout: Option<Duration>,
    /// A server older than this is closed when it is next released (`server_lifetime`).
    pub lifetime: Option<Duration>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            size: 20,
            wait_timeout: Duration::from_secs(30),
            idle_timeout: Some(Duration::from_secs(600)),
            lifetime: Some(Duration::from_secs(3600)),
        }
    }
}

/// What the pools ask of the adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolOut {
    /// Open a server connection for `key`; report with [`Pools::opened`].
    Open {
        /// The new server.
        server: ServerId,
        /// Its pool.
        key: PoolKey,
    },
    /// `client` may use `server` now.
    Grant {
        /// The client.
        client: ClientId,
        /// The server.
        server: ServerId,
    },
    /// `client` waited too long, or its server's login was refused: send it the error and
    /// let it go.
    Refuse {
        /// The client.
        client: ClientId,
        /// PgBouncer's text (SQLSTATE 08P01), or the server's own message.
        message: String,
        /// With the server's own message, its whole ErrorResponse: the client is answered as
        /// the server answered (a database that does not exist is 3D000, a setting of its
        /// `options` the server refuses comes with the server's HINT, as on a direct login).
        answer: Option<OwnedErrorFields>,
    },
    /// Close a server connection (idle too long, too old, or broken).
    Close {
        /// The server.
        server: ServerId,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Opening,
    Idle {
        since: Instant,
    },
    Busy(ClientId),
    /// Given back while a CancelRequest to it is on its way: kept out of the idle list
    /// until the cancel is done.
    Canceling,
}

/// What a server connection is doing, for the admin console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerUse {
    /// Being opened.
    Opening,
    /// Pooled.
    Idle,
    /// Lent to this client.
    Busy(ClientId),
    /// Back from its client, held until a CancelRequest to it is done.
    Canceling,
}

/// One server connection as the pools know it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerView {
    /// The server.
    pub id: ServerId,
    /// Its pool.
    pub key: PoolKey,
    /// What it is doing.
    pub state: ServerUse,
    /// It will be closed when it comes back (its database's backend changed).
    pub retired: bool,
}

#[derive(Debug)]
struct Server {
    key: PoolKey,
    born: Instant,
    state: State,
    /// Its database's backend changed since it was opened: closed instead of reused.
    retired: bool,
    /// CancelRequests sent to it and not done yet (PgBouncer's `sv_being_canceled`).
    cancels: u32,
}

#[derive(Debug, Default)]
struct Pool {
    /// Servers that exist or are being opened.
    count: usize,
    /// Idle servers in the order they came back, each with the time it did, never earlier
    /// than the one before it: the front holds the pool's next idle timeout, the back the
    /// next server to lend.
    idle: VecDeque<(ServerId, Instant)>,
    waiting: VecDeque<(ClientId, Instant)>,
    /// Consecutive failed opens, and when the next may start.
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

impl Pool {
    /// Appends an idle server. Its time is kept in order (a `now` that went back counts as
    /// the latest time seen), so the oldest is always at the front.
    fn idle_push(&mut self, server: ServerId, now: Instant) {
        let at = self.idle.back().map_or(now, |&(_, last)| now.max(last));
        self.idle.push_back((server, at));
    }
}

/// What [`Pools::return_idle`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Returned {
    /// Nothing: give the server back with [`Pools::release`].
    No,
    /// The server is idle. `deadline`: a timeout it added, which may come before every
    /// other; without one, [`Pools::poll_timeout`] is no earlier than before.
    Idle {
        /// The idle timeout of a server that joined an empty idle list.
        deadline: Option<Instant>,
    },
}

/// Counts for the admin console's `SHOW POOLS`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolCounts {
    /// Clients holding a server.
    pub active: usize,
    /// Clients waiting.
    pub waiting: usize,
    /// Idle servers.
    pub idle: usize,
    /// Servers being opened.
    pub opening: usize,
}

/// Every pool of the proxy.
#[derive(Debug)]
pub struct Pools {
    settings: PoolSettings,
    pools: BTreeMap<PoolKey, Pool>,
    servers: BTreeMap<ServerId, Server>,
    out: VecDeque<PoolOut>,
    next: u64,
    /// PAUSE is in force: nothing is lent or opened.
    paused: bool,
    /// Databases paused by name (`PAUSE db`): their pools lend and open nothing.
    paused_databases: BTreeSet<String>,
    /// How many pools there may be before the next new one makes [`Pools`] forget the
    /// empty ones (see `forget.rs`).
    forget_at: usize,
}

/// Whether `database`'s pools lend nothing: every database is paused, or it is by name.
/// (A free function, so that it borrows only the two fields while a pool is borrowed.)
fn held(paused: bool, by_name: &BTreeSet<String>, database: &str) -> bool {
    paused || (!by_name.is_empty() && by_name.contains(database))
}

/// First pause after a failed open; it doubles per failure, up to [`RETRY_CAP`].
const RETRY_BASE: Duration = Duration::from_millis(100);
const RETRY_CAP: Duration = Duration::from_secs(2);

impl Pools {
    /// No pools yet.
    pub fn new(settings: PoolSettings) -> Self {
        Pools {
            settings,
            pools: BTreeMap::new(),
            servers: BTreeMap::new(),
            out: VecDeque::new(),
            next: 1,
            paused: false,
            paused_databases: BTreeSet::new(),
            forget_at: forget::FORGET_MIN,
        }
    }

    /// The limits in force.
    pub fn settings(&self) -> PoolSettings {
        self.settings
    }

    /// New limits (a configuration reload). Idle servers beyond a smaller size are closed
    /// now, busy ones when they come back; waiters a larger size makes room for get servers
    /// opened; a new wait timeout applies to clients that start waiting from now on.
    pub fn set_settings(&mut self, now: Instant, settings: PoolSettings) {
        self.settings = settings;
        let keys: Vec<PoolKey> = self.pools.keys().cloned().collect();
        for key in keys {
            let Some(pool) = self.pools.get_mut(&key) else {
                continue;
            };
            while pool.count > settings.size {
                let Some((server, _)) = pool.idle.pop_front() else {
                    break;
                };
                self.servers.remove(&server);
                pool.count -= 1;
                self.out.push_back(PoolOut::Close { server });
            }
            self.serve(now, &key);
        }
    }

    /// The backend of `database` changed (a configuration reload): its idle servers are
    /// closed now and its busy ones when they come back, so that every later transaction
    /// runs on a server opened with the new settings.
    pub fn retire_database(&mut self, now: Instant, database: &str) {
        self.retire(now, Some(database));
    }

    /// RECONNECT: as [`Pools::retire_database`] for `database`, or for every database.
    pub fn retire(&mut self, now: Instant, database: Option<&str>) {
        let mut closing = Vec::new();
        for (id, s) in self.servers.iter_mut() {
            if database.is_some_and(|d| s.key.database != d) {
                continue;
            }
            s.retired = true;
            if matches!(s.state, State::Idle { .. }) {
                closing.push(*id);
            }
        }
        for server in closing {
            self.broken(now, server);
            self.out.push_back(PoolOut::Close { server });
        }
    }

    /// Whether a retired server of `database` (of any database: `None`) is still open,
    /// waiting to come back and be closed (what WAIT_CLOSE waits for).
    pub fn retiring(&self, database: Option<&str>) -> bool {
        self.servers
            .values()
            .any(|s| s.retired && database.is_none_or(|d| s.key.database == d))
    }

    /// The databases that have pools.
    pub fn databases(&self) -> std::collections::BTreeSet<String> {
        self.pools.keys().map(|k| k.database.clone()).collect()
    }

    /// `client` needs a server of `key`.
    pub fn acquire(&mut self, now: Instant, client: ClientId, key: &PoolKey) {
        let deadline = now + self.settings.wait_timeout;
        // The key is cloned only for a pool's first acquire (this runs every transaction).
        match self.pools.get_mut(key) {
            Some(pool) => pool.waiting.push_back((client, deadline)),
            None => {
                self.forget_empty(now);
                let mut pool = Pool::default();
                pool.waiting.push_back((client, deadline));
                self.pools.insert(key.clone(), pool);
            }
        }
        self.serve(now, key);
    }

    /// Lends `key`'s most recently returned idle server to `client` at once, when no one
    /// waits ahead of it and nothing is paused: what [`Pools::acquire`] and the `Grant` it
    /// queues would do, without the queue. `None`: nothing changed; call `acquire`.
    ///
    /// It adds no deadline (the idle list's oldest entry stays, or the list empties), so
    /// [`Pools::poll_timeout`] can only move later and a caller need not re-arm its timer.
    pub fn lend_idle(&mut self, client: ClientId, key: &PoolKey) -> Option<ServerId> {
        if held(self.paused, &self.paused_databases, &key.database) {
            return None;
        }
        let pool = self.pools.get_mut(key)?;
        // (Unpaused pools lend idle servers to waiters at once, so both are never found
        // together; the check keeps the queue's order should that change.)
        if !pool.waiting.is_empty() {
            return None;
        }
        let &(server, _) = pool.idle.back()?;
        let s = self.servers.get_mut(&server)?;
        pool.idle.pop_back();
        s.state = State::Busy(client);
        Some(server)
    }

    /// Gives `server` back reusable to a pool nobody waits on: what `release(now, server,
    /// true)` would do when it keeps the server idle, which then outputs nothing. The only
    /// deadline it can add is the idle timeout of a server joining an empty idle list
    /// (behind others, the oldest one's comes first), which it reports.
    pub fn return_idle(&mut self, now: Instant, server: ServerId) -> Returned {
        let Some(s) = self.servers.get_mut(&server) else {
            return Returned::No;
        };
        if held(self.paused, &self.paused_databases, &s.key.database) {
            return Returned::No;
        }
        let too_old = self.settings.lifetime.is_some_and(|l| now >= s.born + l);
        if s.cancels > 0 || too_old || s.retired {
            return Returned::No;
        }
        let Some(pool) = self.pools.get_mut(&s.key) else {
            return Returned::No;
        };
        if !pool.waiting.is_empty() || pool.count > self.settings.size {
            return Returned::No;
        }
        let first = pool.idle.is_empty();
        s.state = State::Idle { since: now };
        pool.idle_push(server, now);
        let deadline = match (first, self.settings.idle_timeout) {
            (true, Some(idle)) => Some(now + idle),
            _ => None,
        };
        Returned::Idle { deadline }
    }

    /// `client` went away while waiting.
    pub fn cancel_wait(&mut self, client: ClientId) {
        for pool in self.pools.values_mut() {
            pool.waiting.retain(|(c, _)| *c != client);
        }
    }

    /// The outcome of an [`PoolOut::Open`]: `Err` with the connect error's text.
    pub fn opened(&mut self, now: Instant, server: ServerId, result: Result<(), String>) {
        let Some(s) = self.servers.get_mut(&server) else {
            // Forgotten by a PAUSE while it was being opened: not for lending.
            if result.is_ok() {
                self.out.push_back(PoolOut::Close { server });
            }
            return;
        };
        let key = s.key.clone();
        let pool = self.pools.entry(key.clone()).or_default();
        match result {
            Ok(()) if s.retired || held(self.paused, &self.paused_databases, &key.database) => {
                // Opened with the settings from before a reload: not for lending.
                self.servers.remove(&server);
                pool.count -= 1;
                self.out.push_back(PoolOut::Close { server });
            }
            Ok(()) if pool.count > self.settings.size && pool.waiting.is_empty() => {
                // Asked for before a reload made the pool smaller, and nobody waits for it
                // now: idle, it would keep the pool over its size until its idle limit.
                self.servers.remove(&server);
                pool.count -= 1;
                pool.failures = 0;
                pool.retry_at = None;
                self.out.push_back(PoolOut::Close { server });
            }
            Ok(()) => {
                s.state = State::Idle { since: now };
                pool.idle_push(server, now);
                pool.failures = 0;
                pool.retry_at = None;
            }
            Err(e) => {
                self.servers.remove(&server);
                pool.count -= 1;
                let factor = 1u32 << pool.failures.min(5);
                pool.retry_at = Some(now + (RETRY_BASE * factor).min(RETRY_CAP));
                pool.failures += 1;
                pool.last_error = Some(e);
            }
        }
        self.serve(now, &key);
    }

    /// The login of `server` (being opened) was refused: credentials that retrying will not
    /// cure. Reported like a failed open, and every client waiting on its pool is refused
    /// now with the server's words (`server login failed: …`), as PgBouncer ends the logins
    /// waiting on a pool whose server refused its own, instead of holding them to their wait
    /// timeout. The next demand tries again after the backoff (a reload may have fixed it).
    /// `answer` is the server's ErrorResponse where the refusal concerns what the client
    /// asked for (its database, its `options`), which the client is then given as the server
    /// gave it.
    pub fn login_refused(
        &mut self,
        now: Instant,
        server: ServerId,
        error: String,
        answer: Option<OwnedErrorFields>,
    ) {
        let key = self.servers.get(&server).map(|s| s.key.clone());
        let said = answer.as_ref().and_then(|a| {
            let m = a.fields().message()?;
            Some(String::from_utf8_lossy(m).into_owned())
        });
        let message = said.unwrap_or_else(|| format!("server login failed: {error}"));
        self.opened(now, server, Err(error));
        let Some(pool) = key.and_then(|k| self.pools.get_mut(&k)) else {
            return;
        };
        for (client, _) in pool.waiting.drain(..) {
            self.out.push_back(PoolOut::Refuse {
                client,
                message: message.clone(),
                answer: answer.clone(),
            });
        }
    }

    /// `server` comes back from its client; `reusable` when it stands idle and clean. A
    /// reusable server with a CancelRequest on its way is held until [`Pools::cancel_done`]:
    /// lent at once, it could have its next client's query cancelled.
    pub fn release(&mut self, now: Instant, server: ServerId, reusable: bool) {
        let Some(s) = self.servers.get_mut(&server) else {
            return;
        };
        if reusable && s.cancels > 0 {
            s.state = State::Canceling;
            return;
        }
        let too_old = self.settings.lifetime.is_some_and(|l| now >= s.born + l);
        let Some(pool) = self.pools.get_mut(&s.key) else {
            // Every server's pool exists (made by the acquire that opened it); should one
            // be missing, it is made and the release starts over.
            self.pools.insert(s.key.clone(), Pool::default());
            return self.release(now, server, reusable);
        };
        let paused = held(self.paused, &self.paused_databases, &s.key.database);
        let keep = reusable && !too_old && !s.retired && !paused;
        let stays = keep && pool.count <= self.settings.size;
        if stays {
            s.state = State::Idle { since: now };
            pool.idle_push(server, now);
        } else {
            pool.count -= 1;
        }
        // Serving has nothing to do for a pool nobody waits on: the key (two strings) is
        // cloned only when someone does.
        let waited_on = (!pool.waiting.is_empty()).then(|| s.key.clone());
        if !stays {
            self.servers.remove(&server);
            self.out.push_back(PoolOut::Close { server });
        }
        if let Some(key) = waited_on {
            self.serve(now, &key);
        }
    }

    /// A CancelRequest for the query of `server`'s client is on its way to it. Until
    /// [`Pools::cancel_done`] the server is lent to no one else (PgBouncer's
    /// `sv_being_canceled`).
    pub fn cancel_sent(&mut self, server: ServerId) {
        if let Some(s) = self.servers.get_mut(&server) {
            s.cancels += 1;
        }
    }

    /// The CancelRequest to `server` is done (the server answered it, or it could not be
    /// sent); a server given back meanwhile goes to the idle list now.
    pub fn cancel_done(&mut self, now: Instant, server: ServerId) {
        let Some(s) = self.servers.get_mut(&server) else {
            return;
        };
        s.cancels = s.cancels.saturating_sub(1);
        if s.cancels == 0 && s.state == State::Canceling {
            self.release(now, server, true);
        }
    }

    /// Closes `server` whatever its state (it broke while idle).
    pub fn broken(&mut self, now: Instant, server: ServerId) {
        if let Some(s) = self.servers.remove(&server) {
            let pool = self.pools.entry(s.key.clone()).or_default();
            pool.count -= 1;
            pool.idle.retain(|(i, _)| *i != server);
            self.serve(now, &s.key);
        }
    }

    /// Grants idle servers to waiters, opens new ones while below the size.
    fn serve(&mut self, now: Instant, key: &PoolKey) {
        if held(self.paused, &self.paused_databases, &key.database) {
            return;
        }
        let size = self.settings.size;
        let Some(pool) = self.pools.get_mut(key) else {
            return;
        };
        while !pool.waiting.is_empty() {
            // The server given back last is lent first (PgBouncer's default,
            // `server_round_robin = 0`): under light load a few servers carry the work and
            // stay warm in the server's caches, and the rest age out at the idle timeout.
            if let Some((server, _)) = pool.idle.pop_back() {
                let Some((client, _)) = pool.waiting.pop_front() else {
                    break;
                };
                if let Some(s) = self.servers.get_mut(&server) {
                    s.state = State::Busy(client);
                }
                self.out.push_back(PoolOut::Grant { client, server });
                continue;
            }
            let opening = self
                .servers
                .values()
                .filter(|s| s.key == *key && s.state == State::Opening)
                .count();
            let retry_due = pool.retry_at.is_none_or(|t| t <= now);
            if pool.count < size && opening < pool.waiting.len() && retry_due {
                let server = ServerId(self.next);
                self.next += 1;
                pool.count += 1;
                let rec = Server {
                    key: key.clone(),
                    born: now,
                    state: State::Opening,
                    retired: false,
                    cancels: 0,
                };
                self.servers.insert(server, rec);
                self.out.push_back(PoolOut::Open {
                    server,
                    key: key.clone(),
                });
                continue;
            }
            break;
        }
    }

    /// The next thing for the adapter to do.
    pub fn poll_output(&mut self) -> Option<PoolOut> {
        self.out.pop_front()
    }

    /// When [`Pools::handle_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut next: Option<Instant> = None;
        let mut at = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        // One walk over the pools (this runs on every acquire and release).
        for (key, pool) in &self.pools {
            if let Some((_, d)) = pool.waiting.front() {
                at(*d);
            }
            if let (Some(idle), Some((_, since))) = (self.settings.idle_timeout, pool.idle.front())
            {
                at(*since + idle);
            }
            // A retry is due only where it could open a server: otherwise its deadline, once
            // past, would wake the timer again and again until an open under way ends. (The
            // opens under way are counted only for a pool with a retry set: this runs on
            // every acquire and release.)
            let paused = held(self.paused, &self.paused_databases, &key.database);
            if let (Some(r), false) = (pool.retry_at, paused) {
                let opening = || {
                    self.servers
                        .values()
                        .filter(|s| s.state == State::Opening && s.key == *key)
                        .count()
                };
                if pool.count < self.settings.size && opening() < pool.waiting.len() {
                    at(r);
                }
            }
        }
        next
    }

    /// Times out waiters, retries failed opens, closes servers idle too long.
    pub fn handle_timeout(&mut self, now: Instant) {
        let keys: Vec<PoolKey> = self.pools.keys().cloned().collect();
        for key in keys {
            let Some(pool) = self.pools.get_mut(&key) else {
                continue;
            };
            while let Some(&(client, deadline)) = pool.waiting.front() {
                if deadline > now {
                    break;
                }
                pool.waiting.pop_front();
                let message = match &pool.last_error {
                    Some(e) => format!("query_wait_timeout (server connect failed: {e})"),
                    None => "query_wait_timeout".to_owned(),
                };
                self.out.push_back(PoolOut::Refuse {
                    client,
                    message,
                    answer: None,
                });
            }
            self.serve(now, &key);
        }
        let Some(idle) = self.settings.idle_timeout else {
            return;
        };
        let stale: Vec<ServerId> = self
            .servers
            .iter()
            .filter(|(_, s)| matches!(s.state, State::Idle { since } if since + idle <= now))
            .map(|(id, _)| *id)
            .collect();
        for server in stale {
            self.broken(now, server);
            self.out.push_back(PoolOut::Close { server });
        }
    }

    /// Every pool the proxy has (an empty one may be forgotten, see `forget.rs`).
    pub fn keys(&self) -> Vec<PoolKey> {
        self.pools.keys().cloned().collect()
    }

    /// Every server connection and what it is doing, for the admin console.
    pub fn servers(&self) -> Vec<ServerView> {
        self.servers
            .iter()
            .map(|(id, s)| ServerView {
                id: *id,
                key: s.key.clone(),
                state: match s.state {
                    State::Opening => ServerUse::Opening,
                    State::Idle { .. } => ServerUse::Idle,
                    State::Busy(c) => ServerUse::Busy(c),
                    State::Canceling => ServerUse::Canceling,
                },
                retired: s.retired,
            })
            .collect()
    }

    /// Counts per pool, for the admin console.
    pub fn counts(&self) -> BTreeMap<PoolKey, PoolCounts> {
        let mut out: BTreeMap<PoolKey, PoolCounts> = BTreeMap::new();
        for (key, pool) in &self.pools {
            let c = out.entry(key.clone()).or_default();
            c.waiting = pool.waiting.len();
            c.idle = pool.idle.len();
        }
        for s in self.servers.values() {
            let c = out.entry(s.key.clone()).or_default();
            match s.state {
                // A server held for a cancel is still in use.
                State::Busy(_) | State::Canceling => c.active += 1,
                State::Opening => c.opening += 1,
                State::Idle { .. } => {}
            }
        }
        out
    }
}
