//! The host side of the harness: the server account, folders, ports and bounded commands.

use super::*;

// ---------------------------------------------------------------------------------------------
// helpers

pub(super) fn annotate(e: io::Error, what: &str) -> io::Error {
    io::Error::new(e.kind(), format!("{what}: {e}"))
}

pub(super) fn check_node_name(name: &str) -> io::Result<()> {
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
pub(super) fn free_port() -> io::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?.port())
}

/// Writes `contents` to `path` (mode 0600) and hands it to the server account.
pub(super) fn write_owned(path: &Path, contents: &str, user: &ServerUser) -> io::Result<()> {
    fs::write(path, contents)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    chown(path, Some(user.uid), Some(user.gid))
}

pub(super) fn copy_data_dir(from: &Path, to: &Path, timeout: Duration) -> io::Result<()> {
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

pub(super) fn postmaster_pid(data: &Path) -> Option<u32> {
    fs::read_to_string(data.join("postmaster.pid"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

pub(super) fn clusters_dir(cache: &Path) -> PathBuf {
    cache.join("clusters")
}

/// Makes `<cache>/clusters/<pid>-<n>` (0755, owned by the server account).
pub(super) fn create_cluster_root(cache: &Path, user: &ServerUser) -> io::Result<PathBuf> {
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
pub(super) fn sweep_stale_clusters(install: &Install) {
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

pub(super) fn find_or_create_user() -> io::Result<ServerUser> {
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

pub(super) fn lookup_user(name: &str) -> io::Result<Option<ServerUser>> {
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

pub(super) fn getent(database: &str, key: &str) -> io::Result<Option<String>> {
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
pub(super) fn effective_id(line: &str) -> io::Result<u32> {
    let status = fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(line))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no {line} line in /proc/self/status")))
}

pub(super) struct Captured {
    pub(super) status: ExitStatus,
    pub(super) stdout: Vec<u8>,
    pub(super) stderr: Vec<u8>,
}

/// Runs `cmd` with stdin closed, capturing its output; kills it if it outlives `timeout`.
pub(super) fn run_bounded(cmd: &mut Command, timeout: Duration) -> io::Result<Captured> {
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

/// Runs `cmd` bounded by `timeout`; its standard output, or an error with its standard error.
pub fn run_bounded_output(cmd: &mut Command, timeout: Duration) -> io::Result<String> {
    let out = run_checked(cmd, timeout)?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`run_bounded`], and a non-zero exit becomes an error with the command's output.
pub(super) fn run_checked(cmd: &mut Command, timeout: Duration) -> io::Result<Captured> {
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

pub(super) fn show(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        s.push(' ');
        s.push_str(&arg.to_string_lossy());
    }
    s
}
