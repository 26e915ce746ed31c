//! Real PostgreSQL 18 servers for tests: a primary and streaming standbys on loopback.
//!
//! [`Primary::start`] runs `initdb` as an unprivileged account (servers refuse to run as root)
//! into a fresh folder under the cache (`<cache>/clusters/<pid>-<n>/`), so parallel tests never
//! share a folder, a port or a socket. Each server listens on `127.0.0.1` only, on a port the
//! kernel picked for a throwaway listener, and keeps its unix socket in its own folder.
//! [`Primary::add_standby`] makes a streaming standby by copying the cleanly stopped primary
//! (the npm package has no `pg_basebackup`, and Debian's 15 cannot back up an 18 server).
//!
//! Every command the harness runs is bounded in time. Dropping a [`Primary`] stops all its servers
//! and removes its folder; folders left behind by a test process that was killed are swept by
//! the next [`Primary::start`].
//!
//! The harness itself talks to servers through their unix socket, which `pg_hba.conf` always
//! trusts; the chosen [`Auth`] method applies to TCP clients, i.e. to [`Node::conninfo`].

use std::fs;
use std::io::{self, Read};
use std::net::{Ipv4Addr, TcpListener};
use std::ops::{Deref, DerefMut};
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::pg18::{self, Install};

/// The OS account that runs servers when the harness runs as root (unless
/// `$PGYARD_SERVER_USER` names another).
pub const SERVER_USER: &str = "postgres";

/// The database superuser `initdb` creates (also the user in every conninfo string).
pub const SUPERUSER: &str = "postgres";

/// The password used when an [`Auth`] method needs one and [`Options::password`] is `None`.
pub const DEFAULT_PASSWORD: &str = "pgyard-secret";

/// How TCP clients authenticate (`pg_hba.conf` method for `127.0.0.1/32`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Auth {
    /// No password (`trust`).
    #[default]
    Trust,
    /// `md5`, with passwords stored as MD5 (`password_encryption = md5`).
    Md5,
    /// `scram-sha-256`, with passwords stored as SCRAM verifiers.
    ScramSha256,
}

impl Auth {
    /// The method name as written in `pg_hba.conf`.
    pub fn hba_method(self) -> &'static str {
        match self {
            Auth::Trust => "trust",
            Auth::Md5 => "md5",
            Auth::ScramSha256 => "scram-sha-256",
        }
    }

    fn password_encryption(self) -> &'static str {
        match self {
            Auth::Md5 => "md5",
            Auth::Trust | Auth::ScramSha256 => "scram-sha-256",
        }
    }
}

/// Settings for [`Primary::start`]; standbys inherit them.
#[derive(Clone, Debug)]
pub struct Options {
    /// Authentication method for TCP clients.
    pub auth: Auth,
    /// Password of the superuser [`SUPERUSER`]; with `None`, [`DEFAULT_PASSWORD`] is set when
    /// `auth` is not [`Auth::Trust`], and no password is set otherwise.
    pub password: Option<String>,
    /// Extra `postgresql.conf` lines, written after the harness's own (so they win).
    pub conf: Vec<String>,
    /// Extra `pg_hba.conf` lines, written after the harness's unix-socket `trust` lines and
    /// before its TCP lines (so they decide first for TCP clients).
    pub hba: Vec<String>,
    /// Bound for each server operation (initdb, start, stop, promote, copying a data folder).
    pub timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            auth: Auth::Trust,
            password: None,
            conf: Vec::new(),
            hba: Vec::new(),
            timeout: Duration::from_secs(60),
        }
    }
}

impl Options {
    /// Sets the authentication method for TCP clients.
    pub fn auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }

    /// Sets the superuser's password.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Adds a `postgresql.conf` line such as `"log_connections = on"`.
    pub fn conf(mut self, line: impl Into<String>) -> Self {
        self.conf.push(line.into());
        self
    }

    /// Adds a `pg_hba.conf` line such as `"host all alice 127.0.0.1/32 reject"`.
    pub fn hba(mut self, line: impl Into<String>) -> Self {
        self.hba.push(line.into());
        self
    }

    /// Sets the bound for each server operation.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    fn effective_password(&self) -> Option<String> {
        match (&self.password, self.auth) {
            (Some(p), _) => Some(p.clone()),
            (None, Auth::Trust) => None,
            (None, _) => Some(DEFAULT_PASSWORD.to_owned()),
        }
    }
}

/// The OS account servers run as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUser {
    /// Account name.
    pub name: String,
    /// Numeric user id.
    pub uid: u32,
    /// Numeric primary group id.
    pub gid: u32,
    /// Whether this process created the account.
    pub created: bool,
}

/// Makes sure the account servers run as exists and says which it is.
///
/// As root this is `$PGYARD_SERVER_USER` or [`SERVER_USER`], created with `useradd --system`
/// when missing. As any other user, servers run as that user itself.
pub fn ensure_server_user() -> io::Result<ServerUser> {
    static USER: OnceLock<Result<ServerUser, String>> = OnceLock::new();
    USER.get_or_init(|| find_or_create_user().map_err(|e| e.to_string()))
        .clone()
        .map_err(io::Error::other)
}

/// Where Debian's `psql` is: on `PATH`, else under `/usr/lib/postgresql/*/bin`.
pub fn psql_path() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join("psql"));
    let debian = fs::read_dir("/usr/lib/postgresql")
        .map(|entries| {
            let mut dirs: Vec<PathBuf> = entries
                .filter_map(Result::ok)
                .map(|e| e.path().join("bin/psql"))
                .collect();
            dirs.sort();
            dirs.reverse();
            dirs
        })
        .unwrap_or_default();
    on_path.chain(debian).find(|p| p.is_file())
}

/// Runs `psql -X -At -v ON_ERROR_STOP=1 -c <sql>` against `conninfo` with libpq 18 and returns its
/// standard output without the trailing newline (rows on lines, columns separated by `|`).
///
/// Bounded by 30 s; a non-zero exit is an error carrying psql's standard error.
pub fn psql(conninfo: &str, sql: &str) -> io::Result<String> {
    psql_with_timeout(conninfo, sql, Duration::from_secs(30))
}

/// [`psql`] with an explicit bound.
pub fn psql_with_timeout(conninfo: &str, sql: &str, timeout: Duration) -> io::Result<String> {
    let install = pg18::ensure_installed()?;
    let psql = psql_path().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            "psql not found (install postgresql-client, or run `cargo xtask provision`)",
        )
    })?;
    let mut cmd = Command::new(psql);
    cmd.args(["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d"])
        .arg(conninfo)
        .arg("-c")
        .arg(sql)
        .env("LD_LIBRARY_PATH", &install.lib_dir)
        .env("PGCONNECT_TIMEOUT", "10")
        .env("LC_ALL", "C");
    let out = run_checked(&mut cmd, timeout)?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    while text.ends_with('\n') {
        text.pop();
    }
    Ok(text)
}

/// Quotes a value for a `key=value` connection string when it needs it.
pub fn quote_conninfo_value(value: &str) -> String {
    if !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\' || c == '=')
    {
        return value.to_owned();
    }
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// A primary server, the standbys made from it, and the folder that holds them all.
///
/// Dereferences to the primary's [`Node`]. Dropping it stops every server (immediate mode) and
/// removes the folder.
#[derive(Debug)]
pub struct Primary {
    node: Node,
    standbys: Vec<Node>,
    root: PathBuf,
    options: Options,
}

impl Primary {
    /// Runs `initdb`, configures and starts a primary, and waits until it answers `select 1`.
    pub fn start(options: Options) -> io::Result<Primary> {
        let install = pg18::ensure_installed()?;
        let user = ensure_server_user()?;
        sweep_stale_clusters(&install);
        let root = create_cluster_root(&install.cache, &user)?;
        let password = options.effective_password();
        let node = Node::new("primary", &root, install, user, &options, password)?;
        // From here on, dropping `primary` cleans up whatever exists.
        let mut primary = Primary {
            node,
            standbys: Vec::new(),
            root,
            options,
        };
        primary.init()?;
        Ok(primary)
    }

    /// Creates a streaming standby named `name` (lowercase letters, digits, `_`; at most 32)
    /// and waits until the primary reports it `streaming`.
    ///
    /// Creates the physical slot `name` on the primary, stops the primary cleanly, copies its
    /// data folder, adds `standby.signal`, `primary_conninfo` (TCP, `application_name=<name>`)
    /// and `primary_slot_name`, then starts the primary and the standby. Standbys already
    /// running reconnect by themselves. The primary must be running.
    pub fn add_standby(&mut self, name: &str) -> io::Result<&mut Node> {
        check_node_name(name)?;
        if name == self.node.name || self.standbys.iter().any(|s| s.name == name) {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("a node named {name:?} already exists"),
            ));
        }
        if !self.node.running {
            return Err(io::Error::other(
                "add_standby needs the primary running (it creates a slot on it)",
            ));
        }
        self.node
            .psql(&format!(
                "select pg_create_physical_replication_slot('{name}', true)"
            ))
            .map_err(|e| annotate(e, "creating the standby's replication slot"))?;
        self.node.stop()?;

        let mut standby = Node::new(
            name,
            &self.root,
            self.node.install.clone(),
            self.node.user.clone(),
            &self.options,
            self.node.password.clone(),
        )?;
        let copied = copy_data_dir(&self.node.data, &standby.data, self.options.timeout);
        let started = self.node.start();
        copied?;
        started?;
        let mut conninfo = format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres application_name={name}",
            self.node.port
        );
        if let Some(password) = &self.node.password {
            conninfo.push_str(&format!(" password={}", quote_conninfo_value(password)));
        }
        standby.standby_of = Some(StandbyOf {
            conninfo,
            slot: name.to_owned(),
        });
        standby.write_node_conf()?;
        write_owned(&standby.data.join("standby.signal"), "", &standby.user)?;
        self.standbys.push(standby);
        let standby = self.standbys.last_mut().expect("pushed just above");
        standby.start()?;
        let deadline = Instant::now() + self.options.timeout;
        let query = format!(
            "select count(*) from pg_stat_replication \
             where application_name = '{name}' and state = 'streaming'"
        );
        loop {
            if self.node.psql(&query)? == "1" {
                break;
            }
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "standby {name} did not start streaming within {:?}\n{}",
                        self.options.timeout,
                        standby.log_tail()
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(standby)
    }

    /// The standby named `name`.
    pub fn standby(&self, name: &str) -> Option<&Node> {
        self.standbys.iter().find(|s| s.name == name)
    }

    /// The standby named `name`, mutably (to stop, restart or promote it).
    pub fn standby_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.standbys.iter_mut().find(|s| s.name == name)
    }

    /// All standbys, in the order they were added.
    pub fn standbys(&self) -> &[Node] {
        &self.standbys
    }

    /// The folder holding every node of this cluster.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn init(&mut self) -> io::Result<()> {
        let node = &mut self.node;
        let mut initdb = Command::new(node.install.bin_dir.join("initdb"));
        initdb
            .arg("-D")
            .arg(&node.data)
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"])
            .args(["--no-sync", "--no-instructions"]);
        node.as_server(&mut initdb);
        run_checked(&mut initdb, self.options.timeout).map_err(|e| annotate(e, "initdb"))?;

        // The harness's socket access first, then the caller's lines, then TCP defaults.
        let mut hba = String::from(
            "# written by pgyard-testkit\n\
             local all all trust\n\
             local replication all trust\n\
             # extra lines from Options::hba\n",
        );
        for line in &self.options.hba {
            hba.push_str(line);
            hba.push('\n');
        }
        let method = self.options.auth.hba_method();
        hba.push_str(&format!(
            "host all all 127.0.0.1/32 {method}\n\
             host replication all 127.0.0.1/32 {method}\n"
        ));
        write_owned(&node.data.join("pg_hba.conf"), &hba, &node.user)?;

        let conf_path = node.data.join("postgresql.conf");
        let mut conf = fs::read_to_string(&conf_path)?;
        conf.push_str("\n# pgyard-testkit: settings of this node\ninclude 'pgyard.conf'\n");
        write_owned(&conf_path, &conf, &node.user)?;
        node.write_node_conf()?;
        node.start()?;

        if let Some(password) = node.password.clone() {
            let sql = format!(
                "set password_encryption = '{}'; alter role {SUPERUSER} password '{}'",
                self.options.auth.password_encryption(),
                password.replace('\'', "''")
            );
            node.psql(&sql)
                .map_err(|e| annotate(e, "setting the superuser password"))?;
        }
        Ok(())
    }
}

impl Deref for Primary {
    type Target = Node;

    fn deref(&self) -> &Node {
        &self.node
    }
}

impl DerefMut for Primary {
    fn deref_mut(&mut self) -> &mut Node {
        &mut self.node
    }
}

impl Drop for Primary {
    fn drop(&mut self) {
        for standby in &mut self.standbys {
            standby.stop_for_drop();
        }
        self.node.stop_for_drop();
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// One server of a cluster (the primary or a standby).
#[derive(Debug)]
pub struct Node {
    name: String,
    dir: PathBuf,
    data: PathBuf,
    socket_dir: PathBuf,
    log: PathBuf,
    port: u16,
    password: Option<String>,
    install: Install,
    user: ServerUser,
    conf: String,
    standby_of: Option<StandbyOf>,
    timeout: Duration,
    running: bool,
    started_once: bool,
}

#[derive(Clone, Debug)]
struct StandbyOf {
    conninfo: String,
    slot: String,
}

impl Node {
    /// The node's name (`primary` for the primary).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The TCP port the server listens on at `127.0.0.1`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `host=127.0.0.1 port=<port> user=postgres dbname=postgres [password=<password>]`.
    ///
    /// Append ` dbname=other` or other keywords to override: libpq keeps the last value.
    pub fn conninfo(&self) -> String {
        let mut s = format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres",
            self.port
        );
        if let Some(password) = &self.password {
            s.push_str(&format!(" password={}", quote_conninfo_value(password)));
        }
        s
    }

    /// A conninfo string through the unix socket (always `trust`).
    pub fn socket_conninfo(&self) -> String {
        format!(
            "host={} port={} user={SUPERUSER} dbname=postgres",
            quote_conninfo_value(&self.socket_dir.to_string_lossy()),
            self.port
        )
    }

    /// The superuser's password, if one was set.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The folder holding the unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    /// The data folder.
    pub fn data_dir(&self) -> &Path {
        &self.data
    }

    /// The server's log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The whole server log so far (empty if there is none yet).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the harness started this server and has not stopped it since.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Whether this node was made as a standby (it stays `true` after promotion).
    pub fn is_standby(&self) -> bool {
        self.standby_of.is_some()
    }

    /// Runs [`psql`] on this node through its unix socket as the superuser.
    pub fn psql(&self, sql: &str) -> io::Result<String> {
        psql(&self.socket_conninfo(), sql)
            .map_err(|e| annotate(e, &format!("psql on node {}", self.name)))
    }

    /// Starts the server (`pg_ctl start -w`) and waits until it answers `select 1`.
    pub fn start(&mut self) -> io::Result<()> {
        if self.running {
            return Ok(());
        }
        let mut attempts = 0;
        loop {
            attempts += 1;
            match self.start_once() {
                Ok(()) => break,
                // Another process took the port between our probe and the server's bind: take
                // another one, but only before anyone else learned this node's port.
                Err(e)
                    if !self.started_once
                        && attempts < 4
                        && self.log_text().contains("could not bind") =>
                {
                    let _ = e;
                    self.port = free_port()?;
                    let _ = fs::remove_file(&self.log);
                    self.write_node_conf()?;
                }
                Err(e) => return Err(e),
            }
        }
        self.started_once = true;
        self.running = true;
        self.wait_ready()
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`), waiting at most the configured bound.
    pub fn stop(&mut self) -> io::Result<()> {
        self.pg_ctl_stop("fast")
    }

    /// Stops the server at once (`pg_ctl stop -m immediate`): no shutdown checkpoint, like a
    /// crash; the next start runs crash recovery.
    pub fn kill(&mut self) -> io::Result<()> {
        self.pg_ctl_stop("immediate")
    }

    /// [`Node::stop`] then [`Node::start`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.start()
    }

    /// Promotes a standby (`pg_ctl promote -w`) and waits until it accepts writes.
    pub fn promote(&mut self) -> io::Result<()> {
        let mut cmd = self.pg_ctl("promote");
        cmd.arg("-w")
            .arg("-t")
            .arg(self.timeout.as_secs().max(1).to_string());
        run_checked(&mut cmd, self.timeout + Duration::from_secs(10))
            .map_err(|e| self.with_log(e, "pg_ctl promote"))?;
        let deadline = Instant::now() + self.timeout;
        while self.psql("select pg_is_in_recovery()")? != "f" {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("node {} still in recovery after promotion", self.name),
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    /// Polls `select 1` through the unix socket until it answers, within the configured bound.
    pub fn wait_ready(&self) -> io::Result<()> {
        let deadline = Instant::now() + self.timeout;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            match psql_with_timeout(
                &self.socket_conninfo(),
                "select 1",
                remaining.max(Duration::from_secs(1)),
            ) {
                Ok(out) if out == "1" => return Ok(()),
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    thread::sleep(Duration::from_millis(50))
                }
                Ok(out) => {
                    return Err(io::Error::other(format!(
                        "node {}: select 1 returned {out:?}",
                        self.name
                    )))
                }
                Err(e) => return Err(self.with_log(e, "waiting for the server to accept queries")),
            }
        }
    }

    fn new(
        name: &str,
        root: &Path,
        install: Install,
        user: ServerUser,
        options: &Options,
        password: Option<String>,
    ) -> io::Result<Node> {
        let dir = root.join(name);
        fs::create_dir(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755))?;
        chown(&dir, Some(user.uid), Some(user.gid))?;
        let socket_dir = dir.join("sock");
        fs::create_dir(&socket_dir)?;
        fs::set_permissions(&socket_dir, fs::Permissions::from_mode(0o755))?;
        chown(&socket_dir, Some(user.uid), Some(user.gid))?;
        // The socket path must fit in sockaddr_un (108 bytes with the terminating NUL).
        let socket_len = socket_dir.join(".s.PGSQL.65535").as_os_str().len();
        if socket_len > 103 {
            return Err(io::Error::other(format!(
                "unix socket path under {} is {socket_len} bytes, too long; use a shorter \
                 $PGYARD_CACHE",
                socket_dir.display()
            )));
        }
        let mut conf = String::new();
        conf.push_str(&format!(
            "listen_addresses = '127.0.0.1'\n\
             wal_level = logical\n\
             max_wal_senders = 16\n\
             max_replication_slots = 16\n\
             hot_standby = on\n\
             hot_standby_feedback = on\n\
             wal_receiver_status_interval = 1s\n\
             wal_retrieve_retry_interval = 200ms\n\
             fsync = off\n\
             shared_buffers = 32MB\n\
             max_connections = 50\n\
             unix_socket_permissions = 0777\n\
             password_encryption = '{}'\n\
             log_line_prefix = '%m [%p] %q%a '\n\
             # extra lines from Options::conf\n",
            options.auth.password_encryption()
        ));
        for line in &options.conf {
            conf.push_str(line);
            conf.push('\n');
        }
        Ok(Node {
            name: name.to_owned(),
            data: dir.join("data"),
            log: dir.join("server.log"),
            dir,
            socket_dir,
            port: free_port()?,
            password,
            install,
            user,
            conf,
            standby_of: None,
            timeout: options.timeout,
            running: false,
            started_once: false,
        })
    }

    fn write_node_conf(&self) -> io::Result<()> {
        let mut text = format!(
            "# written by pgyard-testkit for node {name}\n\
             port = {port}\n\
             unix_socket_directories = '{sock}'\n\
             cluster_name = '{name}'\n\
             {conf}",
            name = self.name,
            port = self.port,
            sock = self.socket_dir.display(),
            conf = self.conf,
        );
        if let Some(of) = &self.standby_of {
            text.push_str(&format!(
                "primary_conninfo = '{}'\nprimary_slot_name = '{}'\n",
                of.conninfo.replace('\\', "\\\\").replace('\'', "''"),
                of.slot
            ));
        }
        write_owned(&self.data.join("pgyard.conf"), &text, &self.user)
    }

    fn start_once(&mut self) -> io::Result<()> {
        let mut cmd = self.pg_ctl("start");
        cmd.arg("-w")
            .arg("-t")
            .arg(self.timeout.as_secs().max(1).to_string())
            .arg("-l")
            .arg(&self.log);
        match run_checked(&mut cmd, self.timeout + Duration::from_secs(10)) {
            Ok(_) => Ok(()),
            Err(e) => {
                // pg_ctl may have given up while the postmaster lives on: make sure it is gone.
                let _ = self.force_stop();
                Err(self.with_log(e, "pg_ctl start"))
            }
        }
    }

    fn pg_ctl_stop(&mut self, mode: &str) -> io::Result<()> {
        if !self.running && !self.data.join("postmaster.pid").exists() {
            self.running = false;
            return Ok(());
        }
        let mut cmd = self.pg_ctl("stop");
        cmd.args(["-m", mode, "-w", "-t"])
            .arg(self.timeout.as_secs().max(1).to_string());
        let result = run_checked(&mut cmd, self.timeout + Duration::from_secs(10));
        match result {
            Ok(_) => {
                self.running = false;
                Ok(())
            }
            Err(e) => {
                let _ = self.force_stop();
                self.running = false;
                Err(self.with_log(e, &format!("pg_ctl stop -m {mode}")))
            }
        }
    }

    /// Immediate stop, then SIGKILL to the postmaster if it still runs.
    fn force_stop(&self) -> io::Result<()> {
        let mut cmd = self.pg_ctl("stop");
        cmd.args(["-m", "immediate", "-w", "-t", "10"]);
        if run_checked(&mut cmd, Duration::from_secs(20)).is_ok() {
            return Ok(());
        }
        if let Some(pid) = postmaster_pid(&self.data) {
            let mut kill = Command::new("kill");
            kill.args(["-KILL", &pid.to_string()]);
            run_checked(&mut kill, Duration::from_secs(5))?;
        }
        Ok(())
    }

    fn stop_for_drop(&mut self) {
        if self.running || self.data.join("postmaster.pid").exists() {
            let _ = self.pg_ctl_stop("immediate");
        }
    }

    fn pg_ctl(&self, action: &str) -> Command {
        let mut cmd = Command::new(self.install.bin_dir.join("pg_ctl"));
        cmd.arg(action).arg("-D").arg(&self.data);
        self.as_server(&mut cmd);
        cmd
    }

    fn as_server(&self, cmd: &mut Command) {
        cmd.uid(self.user.uid)
            .gid(self.user.gid)
            .current_dir(&self.dir)
            .env("HOME", &self.dir)
            .env("LC_ALL", "C")
            .env("LD_LIBRARY_PATH", &self.install.lib_dir)
            .env_remove("PGDATA")
            .env_remove("PGPORT")
            .env_remove("PGHOST");
    }

    fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(30);
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            lines[from..].join("\n")
        )
    }

    fn with_log(&self, e: io::Error, what: &str) -> io::Error {
        io::Error::new(
            e.kind(),
            format!("node {}: {what}: {e}\n{}", self.name, self.log_tail()),
        )
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.stop_for_drop();
    }
}

// ---------------------------------------------------------------------------------------------
// helpers

fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

fn check_node_name(name: &str) -> io::Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && name != "primary";
    if ok {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "node name {name:?}: use 1 to 32 of a-z, 0-9, _ (and not \"primary\"); it also \
                 names the replication slot"
            ),
        ))
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Writes `contents` to `path` (mode 0600) and hands it to the server account.
fn write_owned(path: &Path, contents: &str, user: &ServerUser) -> io::Result<()> {
    fs::write(path, contents)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    chown(path, Some(user.uid), Some(user.gid))
}

fn copy_data_dir(from: &Path, to: &Path, timeout: Duration) -> io::Result<()> {
    let mut cp = Command::new("cp");
    cp.arg("-a").arg(from).arg(to);
    run_checked(&mut cp, timeout).map_err(|e| annotate(e, "copying the data folder"))?;
    // What pg_basebackup leaves out: the primary's slots, pid and options files.
    for file in ["postmaster.pid", "postmaster.opts", "standby.signal"] {
        let _ = fs::remove_file(to.join(file));
    }
    let slots = to.join("pg_replslot");
    if let Ok(entries) = fs::read_dir(&slots) {
        for entry in entries.flatten() {
            fs::remove_dir_all(entry.path())?;
        }
    }
    Ok(())
}

fn postmaster_pid(data: &Path) -> Option<u32> {
    fs::read_to_string(data.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

fn clusters_dir(cache: &Path) -> PathBuf {
    cache.join("clusters")
}

/// Makes `<cache>/clusters/<pid>-<n>` (0755, owned by the server account).
fn create_cluster_root(cache: &Path, user: &ServerUser) -> io::Result<PathBuf> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let parent = clusters_dir(cache);
    fs::create_dir_all(&parent)?;
    fs::set_permissions(&parent, fs::Permissions::from_mode(0o755))?;
    let pid = std::process::id();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let root = parent.join(format!("{pid}-{n}"));
        match fs::create_dir(&root) {
            Ok(()) => {
                fs::set_permissions(&root, fs::Permissions::from_mode(0o755))?;
                chown(&root, Some(user.uid), Some(user.gid))?;
                return Ok(root);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Stops servers and removes folders of cluster roots whose creating process is gone (a test
/// binary that was killed before its `Drop` ran). Runs once per process.
fn sweep_stale_clusters(install: &Install) {
    static SWEPT: Mutex<bool> = Mutex::new(false);
    let mut swept = SWEPT.lock().unwrap_or_else(|p| p.into_inner());
    if *swept {
        return;
    }
    *swept = true;
    let Ok(entries) = fs::read_dir(clusters_dir(&install.cache)) else {
        return;
    };
    let me = std::process::id();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let Ok(nodes) = fs::read_dir(entry.path()) else {
            continue;
        };
        for node in nodes.flatten() {
            let data = node.path().join("data");
            if let Some(server_pid) = postmaster_pid(&data) {
                if Path::new(&format!("/proc/{server_pid}")).exists() {
                    let mut cmd = Command::new(install.bin_dir.join("pg_ctl"));
                    cmd.args(["stop", "-m", "immediate", "-w", "-t", "10", "-D"])
                        .arg(&data)
                        .env("LD_LIBRARY_PATH", &install.lib_dir);
                    if let Ok(meta) = fs::metadata(&data) {
                        use std::os::unix::fs::MetadataExt;
                        cmd.uid(meta.uid()).gid(meta.gid());
                    }
                    let _ = run_checked(&mut cmd, Duration::from_secs(20));
                }
            }
        }
        let _ = fs::remove_dir_all(entry.path());
    }
}

fn find_or_create_user() -> io::Result<ServerUser> {
    let euid = effective_id("Uid:")?;
    if euid != 0 {
        let name = getent("passwd", &euid.to_string())?
            .and_then(|line| line.split(':').next().map(str::to_owned))
            .unwrap_or_else(|| euid.to_string());
        return Ok(ServerUser {
            name,
            uid: euid,
            gid: effective_id("Gid:")?,
            created: false,
        });
    }
    let name = std::env::var("PGYARD_SERVER_USER")
        .ok()
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| SERVER_USER.to_owned());
    if let Some(user) = lookup_user(&name)? {
        return Ok(user);
    }
    // Another process may be creating it at the same moment: useradd fails then, so look again.
    let group_exists = getent("group", &name)?.is_some();
    let mut useradd = Command::new("useradd");
    useradd.args([
        "--system",
        "--no-create-home",
        "--home-dir",
        "/nonexistent",
        "--shell",
        "/usr/sbin/nologin",
    ]);
    if group_exists {
        useradd.arg("--gid").arg(&name);
    } else {
        useradd.arg("--user-group");
    }
    useradd.arg(&name);
    let added = run_checked(&mut useradd, Duration::from_secs(30));
    match (lookup_user(&name)?, added) {
        (Some(user), Ok(_)) => Ok(ServerUser {
            created: true,
            ..user
        }),
        (Some(user), Err(_)) => Ok(user),
        (None, Err(e)) => Err(annotate(e, "creating the server account")),
        (None, Ok(_)) => Err(io::Error::other(format!(
            "useradd succeeded but {name} is not in the user database"
        ))),
    }
}

fn lookup_user(name: &str) -> io::Result<Option<ServerUser>> {
    let Some(line) = getent("passwd", name)? else {
        return Ok(None);
    };
    let fields: Vec<&str> = line.split(':').collect();
    let parse = |i: usize| -> io::Result<u32> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| io::Error::other(format!("unexpected getent passwd line: {line}")))
    };
    Ok(Some(ServerUser {
        name: name.to_owned(),
        uid: parse(2)?,
        gid: parse(3)?,
        created: false,
    }))
}

fn getent(database: &str, key: &str) -> io::Result<Option<String>> {
    let mut cmd = Command::new("getent");
    cmd.arg(database).arg(key);
    let out = run_bounded(&mut cmd, Duration::from_secs(10))?;
    // getent exits with 2 when the key is not found.
    if !out.status.success() {
        return Ok(None);
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_owned))
}

/// The effective id from the `Uid:` or `Gid:` line of `/proc/self/status`.
fn effective_id(line: &str) -> io::Result<u32> {
    let status = fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no {line} line in /proc/self/status")))
}

struct Captured {
    status: ExitStatus,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs `cmd` with stdin closed, capturing its output; kills it if it outlives `timeout`.
fn run_bounded(cmd: &mut Command, timeout: Duration) -> io::Result<Captured> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("could not run {}: {e}", show(cmd))))?;
    let (tx, rx) = mpsc::channel::<(bool, Vec<u8>)>();
    let readers: [(bool, Option<Box<dyn Read + Send>>); 2] = [
        (
            true,
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
        (
            false,
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ),
    ];
    for (is_stdout, reader) in readers {
        let tx = tx.clone();
        thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut reader) = reader {
                let _ = reader.read_to_end(&mut buf);
            }
            let _ = tx.send((is_stdout, buf));
        });
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} did not finish within {timeout:?}", show(cmd)),
            ));
        }
        thread::sleep(Duration::from_millis(10));
    };
    // A grandchild may still hold the pipes open; do not wait for it for long.
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let grace = Instant::now() + Duration::from_secs(2);
    for _ in 0..2 {
        match rx.recv_timeout(grace.saturating_duration_since(Instant::now())) {
            Ok((true, bytes)) => stdout = bytes,
            Ok((false, bytes)) => stderr = bytes,
            Err(_) => break,
        }
    }
    Ok(Captured {
        status,
        stdout,
        stderr,
    })
}

/// [`run_bounded`], and a non-zero exit becomes an error with the command's output.
/// Runs `cmd` bounded by `timeout`; its standard output, or an error with its standard error.
pub fn run_bounded_output(cmd: &mut Command, timeout: Duration) -> io::Result<String> {
    let out = run_checked(cmd, timeout)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run_checked(cmd: &mut Command, timeout: Duration) -> io::Result<Captured> {
    let out = run_bounded(cmd, timeout)?;
    if out.status.success() {
        return Ok(out);
    }
    Err(io::Error::other(format!(
        "{} failed ({}): {}{}",
        show(cmd),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr).trim_end()
    )))
}

fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conninfo_values_are_quoted_when_needed() {
        assert_eq!(quote_conninfo_value("abc"), "abc");
        assert_eq!(quote_conninfo_value(""), "''");
        assert_eq!(quote_conninfo_value("a b"), "'a b'");
        assert_eq!(quote_conninfo_value("it's"), r"'it\'s'");
        assert_eq!(quote_conninfo_value(r"a\b"), r"'a\\b'");
    }

    #[test]
    fn node_names_are_checked() {
        assert!(check_node_name("standby_1").is_ok());
        assert!(check_node_name("").is_err());
        assert!(check_node_name("Standby").is_err());
        assert!(check_node_name("primary").is_err());
        assert!(check_node_name(&"a".repeat(33)).is_err());
    }

    #[test]
    fn bounded_commands_time_out() {
        let mut sleep = Command::new("sleep");
        sleep.arg("5");
        let started = Instant::now();
        let err = run_bounded(&mut sleep, Duration::from_millis(200))
            .err()
            .expect("sleep 5 cannot finish in 200 ms");
        assert_eq!(err.kind(), io::ErrorKind::TimedOut);
        assert!(started.elapsed() < Duration::from_secs(4));
    }

    #[test]
    fn bounded_commands_capture_output() {
        let mut sh = Command::new("sh");
        sh.args(["-c", "echo out; echo err >&2; exit 3"]);
        let out = run_bounded(&mut sh, Duration::from_secs(10)).expect("sh runs");
        assert_eq!(out.stdout, b"out\n");
        assert_eq!(out.stderr, b"err\n");
        assert_eq!(out.status.code(), Some(3));
        assert!(run_checked(&mut sh, Duration::from_secs(10)).is_err());
    }
}
