//! The admin console's side of the shared state: what each client task publishes about its
//! session (a [`ClientSlot`]), what is known of each server connection ([`ServerInfo`]), the
//! [`Snapshot`] built from them and the pools for `SHOW …`, and the actions `RELOAD`, `PAUSE`,
//! `RESUME`, `RECONNECT`, `WAIT_CLOSE`, `DISABLE` and `ENABLE`. The machines decide; this
//! gathers and converts (clocks to wall time).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use pgyard_driver::{Clock, SessionInfo};
use pgyard_proxy::admin::{
    Activity, AdminError, AdminReply, AdminRequest, ClientAddr, ClientRow, ClientState,
    ClientStats, ConfigRow, DatabaseRow, ServerRow, ServerState, Snapshot, ALREADY_PAUSED,
    NOT_PAUSED, NO_FILE, PAUSE_ENDED,
};
use pgyard_proxy::{ClientAuth, ClientId, ClientSession, Lent, PoolMode, ServerUse, TlsMode};
use pgyard_types::Instant;
use tokio::sync::oneshot;

use super::Shared;
use crate::proxy::kick::Kick;
use crate::proxy::{load_config, ProxyConfig};
use crate::Session;

/// What one client task publishes about its session, for the admin console.
#[derive(Debug)]
pub(in crate::proxy) struct ClientSlot {
    peer: ClientAddr,
    local: Option<ClientAddr>,
    connected: SystemTime,
    /// The clock the session's instants are on.
    clock: Clock,
    report: Mutex<Report>,
    /// Given when the proxy's phase changes, or the client is KILLed.
    pub(in crate::proxy) kick: Kick,
    /// KILL of the client's database: its task closes the session at the kick.
    killed: AtomicBool,
}

#[derive(Debug, Default)]
struct Report {
    activity: Option<Activity>,
    user: String,
    database: String,
    tag: Option<String>,
    application_name: String,
    /// What its `options` asks of its servers (see `ClientRow::options`).
    options: String,
    /// The client connection's TLS session, described once its handshake is done.
    tls: Option<String>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // What is behind these locks is copied in whole values: a panic cannot leave it torn.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ClientSlot {
    /// The slot of a client connected now from `peer` to `local`, whose session runs on
    /// `clock`.
    pub(in crate::proxy) fn new(
        peer: ClientAddr,
        local: Option<ClientAddr>,
        clock: Clock,
    ) -> ClientSlot {
        ClientSlot {
            peer,
            local,
            connected: SystemTime::now(),
            clock,
            report: Mutex::default(),
            kick: Kick::new(),
            killed: AtomicBool::new(false),
        }
    }

    /// Whether the client's database was KILLed since the last call.
    pub(in crate::proxy) fn take_killed(&self) -> bool {
        self.killed.swap(false, Ordering::AcqRel)
    }

    /// The clock the client's session runs on.
    pub(in crate::proxy) fn clock(&self) -> Clock {
        self.clock
    }

    /// Publishes `session`'s activity (the texts only when its labels changed since
    /// `labels`, the last published). No comparison first: a turn of the client loop almost
    /// always changes something (its state or counters), and the lock is uncontended.
    pub(in crate::proxy) fn publish(&self, session: &ClientSession, labels: &mut Option<u32>) {
        let now = session.activity();
        let relabel = *labels != Some(now.labels);
        *labels = Some(now.labels);
        let mut r = lock(&self.report);
        r.activity = Some(now);
        if relabel {
            let (user, database) = session.identity();
            r.user = user.to_owned();
            r.database = database.to_owned();
            r.tag = session.tag().map(str::to_owned);
            r.application_name = session.application_name().unwrap_or_default().to_owned();
            r.options = session.server_options().to_owned();
        }
    }

    /// The client's connection is encrypted now: `description` is what SHOW CLIENTS shows
    /// in its `tls` column.
    pub(in crate::proxy) fn set_tls(&self, description: String) {
        lock(&self.report).tls = Some(description);
    }

    /// The client's row, with its instants turned into wall time.
    fn row(&self, id: ClientId, wall: SystemTime, mono: std::time::Instant) -> Option<ClientRow> {
        let r = lock(&self.report);
        let activity = r.activity?;
        let at = |i: Instant| wall_time(self.clock, i, wall, mono);
        let wait = match (activity.state, activity.wait_since) {
            (ClientState::Waiting, Some(since)) => {
                mono.saturating_duration_since(self.clock.deadline(since))
            }
            _ => Duration::ZERO,
        };
        Some(ClientRow {
            id,
            user: r.user.clone(),
            database: r.database.clone(),
            activity,
            addr: Some(self.peer),
            local: self.local,
            connect_time: unix(self.connected),
            request_time: activity.last_request.map(at).and_then(unix),
            wait,
            tls: r.tls.clone(),
            application_name: r.application_name.clone(),
            tag: r.tag.clone(),
            options: r.options.clone(),
        })
    }
}

impl Registry {
    /// KILL: marks and wakes every client of `database`; how many there were.
    pub(super) fn kill(&self, database: &str) -> usize {
        let mut n = 0;
        for slot in self.clients.values() {
            if lock(&slot.report).database == database {
                slot.killed.store(true, Ordering::Release);
                slot.kick.kick();
                n += 1;
            }
        }
        n
    }
}

/// The wall time of `at` on `clock`, given the same moment on both clocks.
fn wall_time(clock: Clock, at: Instant, wall: SystemTime, mono: std::time::Instant) -> SystemTime {
    wall - mono.saturating_duration_since(clock.deadline(at))
}

/// Seconds since the Unix epoch.
fn unix(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs())
}

/// The client slots, and the counters of the clients that have left, per database.
#[derive(Debug, Default)]
pub(in crate::proxy) struct Registry {
    clients: BTreeMap<ClientId, Arc<ClientSlot>>,
    retired: BTreeMap<String, ClientStats>,
    /// The databases DISABLEd (kept across reloads, by name), handed to each new client.
    pub(super) disabled: Arc<BTreeSet<String>>,
}

/// What is known of a server connection beyond the pools' books.
#[derive(Debug)]
pub(super) struct ServerInfo {
    addr: Option<String>,
    port: Option<u16>,
    pid: Option<i32>,
    tls: bool,
    opened: SystemTime,
    /// When it was last lent (monotonic: turned into wall time only when shown).
    lent: Option<Instant>,
    application_name: String,
    prepared: usize,
}

impl ServerInfo {
    /// A server just opened.
    pub(super) fn of(session: &Session) -> ServerInfo {
        let est = session.established();
        let (addr, port) = match &est.target {
            pgyard_connect::OpenTarget::Tcp(a) => (Some(a.ip().to_string()), Some(a.port())),
            pgyard_connect::OpenTarget::Unix(path) => {
                (Some(String::from_utf8_lossy(path).into_owned()), None)
            }
        };
        let application_name = est
            .parameters
            .get("application_name")
            .unwrap_or_default()
            .to_owned();
        ServerInfo {
            addr,
            port,
            pid: est.backend_key.as_ref().map(|k| k.pid),
            tls: est.tls,
            opened: SystemTime::now(),
            lent: None,
            application_name,
            prepared: 0,
        }
    }

    /// It is lent now.
    pub(super) fn lent_now(&mut self, now: Instant) {
        self.lent = Some(now);
    }

    /// It came back with `lent`'s settings and statements.
    pub(super) fn returned(&mut self, lent: &Lent) {
        self.prepared = lent.prepared.len();
        if let Some(name) = lent.settings.tracked("application_name") {
            if *name != self.application_name {
                self.application_name.clone_from(name);
            }
        }
    }
}

/// The answer to an admin request: now, or once the pause is complete.
pub(in crate::proxy) enum AdminOutcome {
    Now(AdminReply),
    Later(oneshot::Receiver<Result<(), String>>),
    /// SHUTDOWN: the proxy has stopped; nothing is answered.
    Stopped,
}

impl Shared {
    /// A new client's slot.
    pub(in crate::proxy) fn register_client(&self, id: ClientId, slot: Arc<ClientSlot>) {
        lock(&self.registry).clients.insert(id, slot);
    }

    /// Wakes every client task (the proxy's phase changed). A client registered after this
    /// reads the phase on its first wait all the same.
    pub(in crate::proxy) fn kick_clients(&self) {
        for slot in lock(&self.registry).clients.values() {
            slot.kick.kick();
        }
    }

    /// The client left: its counters join its database's totals, if a server of it ever
    /// served the client. A client may name any database, and the names the server refuses
    /// (3D000) would otherwise each keep a SHOW STATS row for ever (session 35), as their
    /// pools did before they were forgotten.
    pub(in crate::proxy) fn forget_client(&self, id: ClientId) {
        let mut registry = lock(&self.registry);
        let Some(slot) = registry.clients.remove(&id) else {
            return;
        };
        let r = lock(&slot.report);
        let served = |a: &Activity| a.counted() && a.stats.assignments > 0;
        if let Some(a) = r.activity.filter(served) {
            let totals = registry.retired.entry(r.database.clone()).or_default();
            totals.add(&a.stats);
        }
    }

    /// Performs an admin request.
    pub(in crate::proxy) fn admin(self: &Arc<Self>, request: AdminRequest) -> AdminOutcome {
        let failed = |e: String| AdminReply::Failed(AdminError::pooler(e));
        let reply = match request {
            AdminRequest::Snapshot => AdminReply::Snapshot(Box::new(self.snapshot())),
            AdminRequest::Reload => match self.reload_file() {
                Ok(()) => AdminReply::Done,
                Err(e) if e == NO_FILE => failed(e),
                Err(e) => AdminReply::Failed(AdminError::reload(format!("RELOAD failed: {e}"))),
            },
            AdminRequest::Pause => match self.pause() {
                Ok(rx) => return AdminOutcome::Later(rx),
                Err(e) => failed(e),
            },
            AdminRequest::Resume => match self.resume() {
                Ok(()) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::Reconnect(db) => match self.reconnect(db.as_deref()) {
                Ok(()) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::WaitClose(db) => match self.wait_close(db) {
                Ok(Some(rx)) => return AdminOutcome::Later(rx),
                Ok(None) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::Disable(db) => match self.set_disabled(&db, true) {
                Ok(()) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::Enable(db) => match self.set_disabled(&db, false) {
                Ok(()) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::PauseDatabase(db) => match self.pause_database(&db) {
                Ok(rx) => return AdminOutcome::Later(rx),
                Err(e) => failed(e),
            },
            AdminRequest::ResumeDatabase(db) => match self.resume_database(&db) {
                Ok(()) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::Kill(db) => match self.kill(&db) {
                Ok(()) => AdminReply::Done,
                Err(e) => failed(e),
            },
            AdminRequest::Shutdown => {
                tracing::info!("SHUTDOWN on the console: stopping now");
                self.set_phase(super::Phase::Stopped);
                self.close_idle();
                return AdminOutcome::Stopped;
            }
        };
        AdminOutcome::Now(reply)
    }

    /// Re-reads the configuration file the proxy was started with and applies it (RELOAD,
    /// SIGHUP); the listen addresses change only with a restart (logged).
    pub(in crate::proxy) fn reload_file(self: &Arc<Self>) -> Result<(), String> {
        let config = self.config();
        let Some(path) = config.file.as_deref() else {
            return Err(NO_FILE.into());
        };
        tracing::info!(file = %path.display(), "re-reading the configuration");
        let file = load_config(path).inspect_err(|e| {
            tracing::error!(error = %e, "reload failed; the running configuration stays");
        })?;
        if !same_listen(&file.listen, &self.addrs) {
            tracing::warn!(
                running = ?self.addrs,
                file = ?file.listen,
                "listen addresses change only with a restart"
            );
        }
        if file.unix_socket_dir != self.unix_dir {
            tracing::warn!(
                running = ?self.unix_dir,
                file = ?file.unix_socket_dir,
                "unix_socket_dir changes only with a restart"
            );
        }
        self.reload(file.proxy).inspect_err(|e| {
            tracing::error!(error = %e, "reload failed; the running configuration stays");
        })
    }

    /// PAUSE: lend no more servers; the receiver answers once none is lent.
    fn pause(self: &Arc<Self>) -> Result<oneshot::Receiver<Result<(), String>>, String> {
        let mut st = self.lock();
        let now = self.clock.now();
        if !st.pools.pause(now) {
            return Err(ALREADY_PAUSED.into());
        }
        tracing::info!("PAUSE: lending no servers until RESUME");
        let (tx, rx) = oneshot::channel();
        st.pause_waiters.push(tx);
        self.perform(&mut st, None, now);
        Ok(rx)
    }

    /// RESUME: lend again; a PAUSE still waiting is told it ended.
    fn resume(self: &Arc<Self>) -> Result<(), String> {
        let mut st = self.lock();
        let now = self.clock.now();
        if !st.pools.resume(now) {
            return Err(NOT_PAUSED.into());
        }
        tracing::info!("RESUME: lending servers again");
        for waiter in st.pause_waiters.drain(..) {
            let _ = waiter.send(Err(PAUSE_ENDED.into()));
        }
        self.perform(&mut st, None, now);
        Ok(())
    }

    /// Everything the admin console shows, now.
    pub(super) fn snapshot(&self) -> Snapshot {
        let (wall, mono) = (SystemTime::now(), std::time::Instant::now());
        let (slots, retired, disabled) = {
            let r = lock(&self.registry);
            let slots: Vec<(ClientId, Arc<ClientSlot>)> =
                r.clients.iter().map(|(id, s)| (*id, s.clone())).collect();
            (slots, r.retired.clone(), r.disabled.clone())
        };
        let clients: Vec<ClientRow> = slots
            .iter()
            .filter_map(|(id, slot)| slot.row(*id, wall, mono))
            .collect();
        let config = self.config();
        let st = self.lock();
        let servers = st
            .pools
            .servers()
            .into_iter()
            .map(|v| {
                let info = st.servers.get(&v.id).map(|e| &e.info);
                let state = match v.state {
                    ServerUse::Opening => ServerState::New,
                    ServerUse::Idle => ServerState::Idle,
                    ServerUse::Busy(_) if st.resetting.contains(&v.id) => ServerState::Tested,
                    ServerUse::Busy(_) => ServerState::Active,
                    // Back from its client, held until a cancel sent to it is done.
                    ServerUse::Canceling => ServerState::Active,
                };
                let client = match v.state {
                    ServerUse::Busy(c) if state == ServerState::Active => Some(c),
                    _ => None,
                };
                ServerRow {
                    id: v.id,
                    key: v.key,
                    state,
                    client,
                    addr: info.and_then(|i| i.addr.clone()),
                    port: info.and_then(|i| i.port),
                    connect_time: info.and_then(|i| unix(i.opened)),
                    request_time: info
                        .and_then(|i| i.lent)
                        .and_then(|at| unix(wall_time(self.clock, at, wall, mono))),
                    close_needed: v.retired,
                    pid: info.and_then(|i| i.pid),
                    tls: info.is_some_and(|i| i.tls),
                    application_name: info.map(|i| i.application_name.clone()).unwrap_or_default(),
                    prepared: info.map_or(0, |i| i.prepared),
                }
            })
            .collect();
        let pools = st.pools.keys();
        let in_use: Vec<&str> = pools
            .iter()
            .map(|k| k.database.as_str())
            .chain(
                clients
                    .iter()
                    .filter(|c| c.activity.counted())
                    .map(|c| c.database.as_str()),
            )
            .chain(disabled.iter().map(String::as_str))
            .collect();
        let mut databases = database_rows(&config, &in_use);
        for row in &mut databases {
            row.disabled = disabled.contains(&row.name);
            row.paused = st.pools.is_paused_by_name(&row.name);
        }
        Snapshot {
            pool_mode: self.mode,
            paused: st.pools.is_paused(),
            pools,
            clients,
            servers,
            retired,
            config: config_rows(&config, &self.addrs, self.unix_dir.as_deref()),
            databases,
        }
    }
}

/// SHOW DATABASES's rows: every `[databases.NAME]` entry, and each other name in use
/// (`in_use`) that the fallback backend serves, as PgBouncer lists the databases its `*`
/// entry made.
fn database_rows(c: &ProxyConfig, in_use: &[&str]) -> Vec<DatabaseRow> {
    use pgyard_conninfo::Keyword;
    let row = |name: &str, conninfo: &str, own: bool| {
        let info = pgyard_conninfo::parse(conninfo.as_bytes()).ok();
        let get = |kw| {
            info.as_ref()
                .and_then(|i| i.get(kw))
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .filter(|v| !v.is_empty())
        };
        let port = get(Keyword::Port).and_then(|p| p.split(',').next()?.trim().parse().ok());
        // A database's own string may rename it on the server; the fallback's pools use the
        // client's name.
        let database = own.then(|| get(Keyword::Dbname)).flatten();
        DatabaseRow {
            name: name.to_owned(),
            host: get(Keyword::Host).or_else(|| get(Keyword::Hostaddr)),
            port,
            database: database.unwrap_or_else(|| name.to_owned()),
            pool_size: c.pool.size,
            paused: false,
            disabled: false,
        }
    };
    let mut rows: BTreeMap<&str, DatabaseRow> = c
        .databases
        .iter()
        .map(|(name, conninfo)| (name.as_str(), row(name, conninfo, true)))
        .collect();
    if let Some(backend) = &c.backend {
        for name in in_use {
            if !rows.contains_key(name) {
                rows.insert(name, row(name, backend, false));
            }
        }
    }
    rows.into_values().collect()
}

/// Whether the configured addresses are the ones listened on (port 0 was any port).
fn same_listen(configured: &[SocketAddr], bound: &[SocketAddr]) -> bool {
    configured.len() == bound.len()
        && configured
            .iter()
            .zip(bound)
            .all(|(c, b)| c.ip() == b.ip() && (c.port() == b.port() || c.port() == 0))
}

/// A connection string as shown: its password, if any, masked.
fn masked(conninfo: &str) -> String {
    use pgyard_conninfo::Keyword;
    match pgyard_conninfo::parse(conninfo.as_bytes()) {
        Ok(mut info) if info.get(Keyword::Password).is_some() => {
            info.set(Keyword::Password, "********");
            let text = pgyard_conninfo::serialize::to_keyword_value(&info);
            String::from_utf8_lossy(&text).into_owned()
        }
        Ok(_) => conninfo.to_owned(),
        Err(_) => "(unreadable)".to_owned(),
    }
}

/// Seconds as the configuration file writes them (`0`: never, where that is the meaning).
fn secs(d: Option<Duration>) -> String {
    d.map_or(0.0, |d| d.as_secs_f64()).to_string()
}

/// SHOW CONFIG: every key of the configuration file (`docs/proxy.md`) with its value in
/// force, its default, and whether a reload changes it.
pub(in crate::proxy) fn config_rows(
    c: &ProxyConfig,
    listen: &[SocketAddr],
    unix_dir: Option<&std::path::Path>,
) -> Vec<ConfigRow> {
    let row = |key: &str, value: String, default: &str, changeable: bool| ConfigRow {
        key: key.to_owned(),
        value,
        default: default.to_owned(),
        changeable,
    };
    let addrs: Vec<String> = listen.iter().map(SocketAddr::to_string).collect();
    let mut rows = vec![
        row("listen", addrs.join(", "), "127.0.0.1:6432", false),
        row(
            "unix_socket_dir",
            unix_dir
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            "",
            false,
        ),
        row(
            "backend",
            c.backend.as_deref().map(masked).unwrap_or_default(),
            "",
            true,
        ),
    ];
    for (name, conninfo) in &c.databases {
        rows.push(row(
            &format!("databases.{name}"),
            masked(conninfo),
            "",
            true,
        ));
    }
    let mode = match c.client.pool_mode {
        PoolMode::Transaction => "transaction",
        PoolMode::Session => "session",
    };
    let auth = match &c.client.auth {
        ClientAuth::Trust => "trust".to_owned(),
        ClientAuth::File(f) => format!("auth_file ({} users)", f.len()),
        ClientAuth::Peer { .. } => "peer".to_owned(),
        ClientAuth::Cert => "cert".to_owned(),
    };
    let admins: Vec<&str> = c.client.admin_users.iter().map(String::as_str).collect();
    let ignored: Vec<&str> = c
        .client
        .ignore_startup_parameters
        .iter()
        .map(String::as_str)
        .collect();
    rows.extend([
        row("pool_mode", mode.into(), "transaction", false),
        row("pool_size", c.pool.size.to_string(), "20", true),
        row(
            "server_reset_query_always",
            u8::from(c.server_reset_query_always).to_string(),
            "0",
            true,
        ),
        row(
            "default_route",
            c.client.default_route.as_str().into(),
            "primary",
            true,
        ),
        row("auth", auth, "", true),
        row(
            "unix_auth",
            if c.unix_peer { "peer" } else { "" }.into(),
            "",
            true,
        ),
        row("admin_users", admins.join(", "), "", true),
        row(
            "ignore_startup_parameters",
            ignored.join(", "),
            &pgyard_proxy::client::IGNORED_BY_DEFAULT.join(", "),
            true,
        ),
        row(
            "max_client_conn",
            c.max_client_conn.to_string(),
            "100",
            true,
        ),
        row(
            "query_wait_timeout",
            secs(Some(c.pool.wait_timeout)),
            "30",
            true,
        ),
        row(
            "client_login_timeout",
            secs(Some(c.client.login_timeout)),
            "60",
            true,
        ),
        row(
            "server_idle_timeout",
            secs(c.pool.idle_timeout),
            "600",
            true,
        ),
        row("server_lifetime", secs(c.pool.lifetime), "3600", true),
        row("failover_timeout", secs(c.failover_timeout), "0", true),
        row(
            "shutdown_timeout",
            secs(Some(c.shutdown_timeout)),
            "30",
            true,
        ),
    ]);
    // Without a `[tls]` table TLS is off, which is what `disable` means.
    let tls_mode = c.tls.as_ref().map_or(TlsMode::Disable, |t| t.mode).name();
    let cert_file = c.tls.as_ref().and_then(|t| t.cert_file());
    let ca_file = c.tls.as_ref().and_then(|t| t.ca_file());
    rows.extend([
        row(
            "tls.cert_file",
            cert_file
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            "",
            true,
        ),
        row("tls.mode", tls_mode.into(), "disable", true),
        row(
            "tls.ca_file",
            ca_file.map(|p| p.display().to_string()).unwrap_or_default(),
            "",
            true,
        ),
    ]);
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgyard_proxy::{ClientConfig, Route};

    #[test]
    fn config_rows_mask_passwords_and_write_seconds_as_the_file_does() {
        let client = ClientConfig {
            default_route: Route::Standby,
            login_timeout: Duration::from_millis(1500),
            admin_users: Arc::new(["ops".to_owned(), "root".to_owned()].into()),
            ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
        };
        let mut c = ProxyConfig::new("host=db1 password=s3cret", client);
        c.databases
            .insert("shop".into(), "host=a dbname=shop_live".into());
        let rows = config_rows(
            &c,
            &["127.0.0.1:6432".parse().expect("addr")],
            Some(std::path::Path::new("/run/pgyard")),
        );
        let get = |k: &str| {
            rows.iter()
                .find(|r| r.key == k)
                .unwrap_or_else(|| panic!("{k}"))
                .clone()
        };
        let backend = get("backend").value;
        assert!(
            !backend.contains("s3cret") && backend.contains("********"),
            "{backend}"
        );
        assert_eq!(get("databases.shop").value, "host=a dbname=shop_live");
        assert_eq!(get("client_login_timeout").value, "1.5");
        assert_eq!(get("server_idle_timeout").value, "600");
        assert_eq!(get("failover_timeout").value, "0");
        assert_eq!(get("admin_users").value, "ops, root");
        assert_eq!(get("unix_socket_dir").value, "/run/pgyard");
        assert!(!get("unix_socket_dir").changeable);
        assert_eq!(
            get("unix_auth").value,
            "",
            "the socket's clients use `auth`"
        );
        assert_eq!(get("default_route").value, "standby");
        let ignored = get("ignore_startup_parameters");
        assert_eq!(ignored.value, "extra_float_digits");
        assert_eq!(
            (ignored.default.as_str(), ignored.changeable),
            ("extra_float_digits", true)
        );
        let reset = get("server_reset_query_always");
        assert_eq!((reset.value.as_str(), reset.changeable), ("0", true));
        assert!(!get("listen").changeable && get("pool_size").changeable);
        // No `[tls]` table: TLS is off.
        assert_eq!(get("tls.mode").value, "disable");
        assert_eq!(get("tls.cert_file").value, "");
    }

    #[test]
    fn a_configured_port_zero_matches_the_port_bound() {
        let a = |s: &str| s.parse::<SocketAddr>().expect("addr");
        assert!(same_listen(&[a("127.0.0.1:0")], &[a("127.0.0.1:5555")]));
        assert!(same_listen(&[a("127.0.0.1:6432")], &[a("127.0.0.1:6432")]));
        assert!(!same_listen(&[a("127.0.0.1:6433")], &[a("127.0.0.1:6432")]));
        assert!(!same_listen(&[], &[a("127.0.0.1:6432")]));
    }
}
