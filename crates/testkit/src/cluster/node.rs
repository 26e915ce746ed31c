//! One server of a cluster: its files, its configuration and its process.

use super::host::*;
use super::*;

/// One server of a cluster (the primary or a standby).
#[derive(Debug)]
pub struct Node {
    pub(super) name: String,
    pub(super) dir: PathBuf,
    pub(super) data: PathBuf,
    pub(super) socket_dir: PathBuf,
    pub(super) log: PathBuf,
    pub(super) port: u16,
    pub(super) password: Option<String>,
    pub(super) install: Install,
    pub(super) user: ServerUser,
    pub(super) conf: String,
    pub(super) standby_of: Option<StandbyOf>,
    pub(super) timeout: Duration,
    pub(super) running: bool,
    pub(super) started_once: bool,
}

#[derive(Clone, Debug)]
pub(super) struct StandbyOf {
    pub(super) conninfo: String,
    pub(super) slot: String,
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

    pub(super) fn new(
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

    pub(super) fn write_node_conf(&self) -> io::Result<()> {
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

    pub(super) fn start_once(&mut self) -> io::Result<()> {
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

    pub(super) fn pg_ctl_stop(&mut self, mode: &str) -> io::Result<()> {
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
    pub(super) fn force_stop(&self) -> io::Result<()> {
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

    pub(super) fn stop_for_drop(&mut self) {
        if self.running || self.data.join("postmaster.pid").exists() {
            let _ = self.pg_ctl_stop("immediate");
        }
    }

    pub(super) fn pg_ctl(&self, action: &str) -> Command {
        let mut cmd = Command::new(self.install.bin_dir.join("pg_ctl"));
        cmd.arg(action).arg("-D").arg(&self.data);
        self.as_server(&mut cmd);
        cmd
    }

    pub(super) fn as_server(&self, cmd: &mut Command) {
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

    pub(super) fn log_tail(&self) -> String {
        let text = self.log_text();
        let lines: Vec<&str> = text.lines().collect();
        let from = lines.len().saturating_sub(30);
        format!(
            "--- last lines of {} ---\n{}",
            self.log.display(),
            lines[from..].join("\n")
        )
    }

    pub(super) fn with_log(&self, e: io::Error, what: &str) -> io::Error {
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
