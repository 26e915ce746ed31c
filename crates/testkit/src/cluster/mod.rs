//! Real PostgreSQL servers (18, or 17 through [`Options::major`]) for tests: a primary and streaming standbys on loopback.
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

use crate::postgres::{self, Install, Major};

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
    /// Which PostgreSQL runs the servers (18 unless a test compares versions).
    pub major: Major,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            auth: Auth::Trust,
            password: None,
            conf: Vec::new(),
            hba: Vec::new(),
            timeout: Duration::from_secs(60),
            major: Major::V18,
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

    /// Runs the servers with this PostgreSQL major version.
    pub fn major(mut self, major: Major) -> Self {
        self.major = major;
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
    let install = postgres::ensure_installed()?;
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
        let install = postgres::ensure_major(options.major)?;
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

    /// Brings the old primary back, on its own port and data folder, as a streaming standby
    /// of the standby `name` (promoted since), and waits until `name` reports it `streaming`.
    ///
    /// No rewind and no new base backup: the old primary must have been stopped cleanly
    /// ([`Node::stop`], not [`Node::kill`]) before `name` was promoted. A clean stop hands
    /// every WAL record to the connected standby before the server exits, so the old
    /// primary's history is a prefix of the new timeline, and it follows the timeline switch
    /// from `name` (`recovery_target_timeline` is `latest`). Creates the physical slot
    /// `<old primary's name>_rejoined` on `name`.
    pub fn rejoin_as_standby_of(&mut self, name: &str) -> io::Result<()> {
        if self.node.running {
            return Err(io::Error::other(
                "rejoin_as_standby_of needs the old primary stopped (cleanly)",
            ));
        }
        let Some(upstream) = self.standbys.iter().find(|s| s.name == name) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no standby named {name:?}"),
            ));
        };
        let slot = format!("{}_rejoined", self.node.name);
        upstream
            .psql(&format!(
                "select pg_create_physical_replication_slot('{slot}', true)"
            ))
            .map_err(|e| annotate(e, "creating the rejoining node's replication slot"))?;
        let mut conninfo = format!(
            "host=127.0.0.1 port={} user={SUPERUSER} dbname=postgres application_name={}",
            upstream.port, self.node.name
        );
        if let Some(password) = &upstream.password {
            conninfo.push_str(&format!(" password={}", quote_conninfo_value(password)));
        }
        let query = format!(
            "select count(*) from pg_stat_replication \
             where application_name = '{}' and state = 'streaming'",
            self.node.name
        );
        self.node.standby_of = Some(StandbyOf { conninfo, slot });
        self.node.write_node_conf()?;
        write_owned(&self.node.data.join("standby.signal"), "", &self.node.user)?;
        self.node.start()?;
        let deadline = Instant::now() + self.options.timeout;
        let upstream = self
            .standbys
            .iter()
            .find(|s| s.name == name)
            .expect("found above");
        while upstream.psql(&query)? != "1" {
            if Instant::now() >= deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "the old primary did not start streaming from {name} within {:?}\n{}",
                        self.options.timeout,
                        self.node.log_tail()
                    ),
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
        Ok(())
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

mod host;
mod node;

pub use host::run_bounded_output;
use host::*;
pub use node::Node;
use node::StandbyOf;

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
