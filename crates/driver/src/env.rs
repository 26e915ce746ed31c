//! The real process environment and files, read once and handed to the pure resolver (the
//! canonical copy: the CLI calls this one).

use pgyard_conninfo::resolve::{Environment, FileKind, MemFile, MemFiles};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// A snapshot of everything libpq would read: environment variables, the OS user and its home
/// directory, and the service and password files those point at.
#[derive(Clone, Debug)]
pub struct RealInputs {
    /// The environment, as the pure resolver takes it.
    pub env: Environment,
    /// The files it may open, preloaded.
    pub files: MemFiles,
}

impl RealInputs {
    /// Reads the process environment, the passwd entry of the effective user, and every file
    /// the resolver may consult for `passfile_keyword` (the connection string's own value).
    pub fn read(passfile_keyword: Option<&[u8]>) -> Self {
        let mut env = Environment::new();
        for (k, v) in std::env::vars_os() {
            if let Ok(k) = k.into_string() {
                env.vars.insert(k, v.into_vec());
            }
        }
        if let Some((name, home)) = passwd_entry() {
            env.os_user = Some(name);
            env.passwd_home = Some(home);
        }
        let mut files = MemFiles::new();
        let home = env.home_directory().map(<[u8]>::to_vec);
        let sysconf = env
            .var("PGSYSCONFDIR")
            .map(<[u8]>::to_vec)
            .unwrap_or_else(|| env.sysconfdir.clone());
        let mut candidates: Vec<Vec<u8>> = vec![join(&sysconf, b"pg_service.conf")];
        if let Some(p) = env.var("PGSERVICEFILE") {
            candidates.push(p.to_vec());
        }
        if let Some(p) = env.var("PGPASSFILE") {
            candidates.push(p.to_vec());
        }
        if let Some(p) = passfile_keyword {
            candidates.push(p.to_vec());
        }
        if let Some(h) = &home {
            candidates.push(join(h, b".pg_service.conf"));
            candidates.push(join(h, b".pgpass"));
        }
        for path in candidates {
            if let Some(file) = load(&path) {
                files.insert(path, file);
            }
        }
        RealInputs { env, files }
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    p.push(b'/');
    p.extend_from_slice(name);
    p
}

fn load(path: &[u8]) -> Option<MemFile> {
    let path = Path::new(std::ffi::OsStr::from_bytes(path));
    let meta = std::fs::metadata(path).ok()?;
    let mode = meta.permissions().mode() & 0o7777;
    if meta.is_dir() {
        return Some(MemFile::directory().with_mode(mode));
    }
    let file = match std::fs::read(path) {
        Ok(contents) => MemFile::regular(contents).with_mode(mode),
        Err(_) => MemFile::regular(Vec::new()).with_mode(mode).unreadable(),
    };
    let mut file = file;
    if !meta.is_file() {
        file.kind = FileKind::Other;
    }
    Some(file)
}

/// The effective user's name and home directory from `/etc/passwd` (what `getpwuid` reads on
/// a plain Linux system).
fn passwd_entry() -> Option<(Vec<u8>, Vec<u8>)> {
    let uid = std::fs::metadata("/proc/self").ok()?.uid();
    let passwd = std::fs::read("/etc/passwd").ok()?;
    passwd.split(|&b| b == b'\n').find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b':').collect();
        let entry_uid: u32 = std::str::from_utf8(fields.get(2)?).ok()?.parse().ok()?;
        (entry_uid == uid).then(|| {
            (
                fields[0].to_vec(),
                fields.get(5).copied().unwrap_or_default().to_vec(),
            )
        })
    })
}
