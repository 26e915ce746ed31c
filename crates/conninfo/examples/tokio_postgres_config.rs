//! A `tokio_postgres::Config` from a connection string read exactly as libpq 18 reads it:
//! environment variables, the service file (`service=`, `PGSERVICE`, `PGSERVICEFILE`, the
//! system file) and the password file (`passfile`, `PGPASSFILE`, `~/.pgpass`, with its
//! permission check), none of which `tokio_postgres::Config::from_str` consults.
//!
//! ```sh
//! PGSERVICEFILE=./pg_service.conf cargo run -p pgyard-conninfo --example tokio_postgres_config \
//!     -- 'service=shop application_name=billing'
//! ```
//!
//! What tokio-postgres cannot hold is refused or reported, never dropped in silence: a
//! `target_session_attrs` other than any/read-write/read-only, `sslmode=allow`, a hostaddr
//! list that names only some hosts, and different passwords for different hosts (it keeps one
//! password for all) are errors; every other keyword that was set (TLS files and versions,
//! `require_auth`, `client_encoding`, `replication`, protocol versions, …) is listed in
//! [`Mapped::left_out`] for the caller to apply elsewhere, e.g. to its TLS connector.

use std::error::Error;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pgyard_conninfo::resolve::{
    self, add_defaults, passfile_path, Environment, MemFile, MemFiles, Source,
};
use pgyard_conninfo::typed::{
    ChannelBinding, ConnectConfig, LoadBalanceHosts, SlotKind, SslMode, SslNegotiation,
    TargetSessionAttrs,
};
use pgyard_conninfo::{configure, parse, ConnInfo, Keyword};
use tokio_postgres::config as tp;

/// Every error of the example, as text.
pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The keywords the `Config` carries (or that only steered the resolution).
const CARRIED: [Keyword; 22] = [
    Keyword::Service,
    Keyword::User,
    Keyword::Password,
    Keyword::Passfile,
    Keyword::ChannelBinding,
    Keyword::ConnectTimeout,
    Keyword::Dbname,
    Keyword::Host,
    Keyword::Hostaddr,
    Keyword::Port,
    Keyword::Options,
    Keyword::ApplicationName,
    Keyword::FallbackApplicationName,
    Keyword::Keepalives,
    Keyword::KeepalivesIdle,
    Keyword::KeepalivesInterval,
    Keyword::KeepalivesCount,
    Keyword::TcpUserTimeout,
    Keyword::Sslmode,
    Keyword::Sslnegotiation,
    Keyword::TargetSessionAttrs,
    Keyword::LoadBalanceHosts,
];

/// The `Config`, and the keywords that were set but that it does not carry.
pub struct Mapped {
    /// What tokio-postgres connects with.
    pub config: tokio_postgres::Config,
    /// Keywords given (in the string, the service file or the environment, not libpq's
    /// compiled defaults) that the `Config` has no place for.
    pub left_out: Vec<&'static str>,
}

/// Parses `conninfo`, resolves it with `env` and the files libpq would open for it, and
/// maps the result onto a `tokio_postgres::Config`.
pub fn config_from(conninfo: &str, env: &Environment) -> Result<Mapped> {
    let info = parse(conninfo)?;
    let files = read_files(&info, env);
    let configured = configure(info, env, &files)?;
    let left_out = configured
        .sources
        .iter()
        .filter(|&(kw, source)| source != Source::Compiled && !CARRIED.contains(&kw))
        .map(|(kw, _)| kw.name())
        .collect();
    let config = to_tokio_postgres(&configured.config)?;
    Ok(Mapped { config, left_out })
}

/// Reads the files libpq would consult for `info` under `env`: the service files, then the
/// password file, whose path the service group itself may set, hence the second look.
pub fn read_files(info: &ConnInfo, env: &Environment) -> MemFiles {
    let mut files = MemFiles::new();
    let mut service_files = vec![resolve::service::system_service_file(env)];
    service_files.extend(resolve::service::user_service_file(env).map(|(path, _)| path));
    for path in service_files {
        load(&mut files, path);
    }
    let mut resolved = info.clone();
    // A service error surfaces again, with libpq's text, when `configure` runs.
    let _ = add_defaults(&mut resolved, env, &files);
    if let Some(path) = passfile_path(resolved.get(Keyword::Passfile), env) {
        load(&mut files, path);
    }
    files
}

/// Adds the file at `path` as libpq would find it (type, mode, contents), if there is one.
fn load(files: &mut MemFiles, path: Vec<u8>) {
    let on_disk = Path::new(std::ffi::OsStr::from_bytes(&path));
    let Ok(meta) = std::fs::metadata(on_disk) else {
        return;
    };
    let mode = meta.permissions().mode() & 0o7777;
    let file = if meta.is_dir() {
        MemFile::directory()
    } else {
        match std::fs::read(on_disk) {
            Ok(contents) => MemFile::regular(contents),
            Err(_) => MemFile::regular(Vec::new()).unreadable(),
        }
    };
    files.insert(path, file.with_mode(mode));
}

/// The typed configuration as a `tokio_postgres::Config`.
pub fn to_tokio_postgres(c: &ConnectConfig) -> Result<tokio_postgres::Config> {
    let text = |what: &str, v: &[u8]| {
        String::from_utf8(v.to_vec()).map_err(|_| format!("{what} is not UTF-8"))
    };
    let mut config = tokio_postgres::Config::new();
    map_hosts(c, &mut config)?;
    config.user(text("user", c.user())?);
    config.dbname(text("dbname", c.dbname())?);
    if let Some(password) = one_password(c)? {
        config.password(password);
    }
    if !c.options().is_empty() {
        config.options(text("options", c.options())?);
    }
    if let Some(name) = c.startup_application_name() {
        config.application_name(text("application_name", name)?);
    }
    if let Some(timeout) = c.connect_timeout()? {
        config.connect_timeout(timeout);
    }
    config.keepalives(c.keepalives()?);
    if let Some(idle) = c.keepalives_idle()? {
        config.keepalives_idle(idle);
    }
    if let Some(interval) = c.keepalives_interval()? {
        config.keepalives_interval(interval);
    }
    if let Some(count) = c.keepalives_count()? {
        config.keepalives_retries(count);
    }
    if let Some(timeout) = c.tcp_user_timeout()? {
        config.tcp_user_timeout(timeout);
    }
    config.target_session_attrs(match c.target_session_attrs() {
        TargetSessionAttrs::Any => tp::TargetSessionAttrs::Any,
        TargetSessionAttrs::ReadWrite => tp::TargetSessionAttrs::ReadWrite,
        TargetSessionAttrs::ReadOnly => tp::TargetSessionAttrs::ReadOnly,
        other => return Err(format!("tokio-postgres has no target_session_attrs={other}").into()),
    });
    config.ssl_mode(match c.sslmode() {
        SslMode::Disable => tp::SslMode::Disable,
        SslMode::Prefer => tp::SslMode::Prefer,
        SslMode::Require => tp::SslMode::Require,
        // tokio-postgres leaves certificate checks to the TLS connector the caller passes to
        // `connect`; that connector must verify as these modes ask.
        SslMode::VerifyCa | SslMode::VerifyFull => tp::SslMode::Require,
        SslMode::Allow => return Err("tokio-postgres has no sslmode=allow".into()),
    });
    config.ssl_negotiation(match c.sslnegotiation() {
        SslNegotiation::Postgres => tp::SslNegotiation::Postgres,
        SslNegotiation::Direct => tp::SslNegotiation::Direct,
    });
    config.channel_binding(match c.channel_binding() {
        ChannelBinding::Disable => tp::ChannelBinding::Disable,
        ChannelBinding::Prefer => tp::ChannelBinding::Prefer,
        ChannelBinding::Require => tp::ChannelBinding::Require,
    });
    config.load_balance_hosts(match c.load_balance_hosts() {
        LoadBalanceHosts::Disable => tp::LoadBalanceHosts::Disable,
        LoadBalanceHosts::Random => tp::LoadBalanceHosts::Random,
    });
    Ok(config)
}

/// libpq's host slots as tokio-postgres's parallel lists. tokio-postgres wants either no
/// hostaddrs or one per host, so slots must be all by address or all by name.
fn map_hosts(c: &ConnectConfig, config: &mut tokio_postgres::Config) -> Result<()> {
    let slots = c.slots();
    let by_address = slots
        .iter()
        .filter(|s| s.kind() == SlotKind::Address)
        .count();
    let named = slots
        .iter()
        .filter(|s| s.host().is_some_and(|h| !h.is_empty()))
        .count();
    if by_address != 0 && (by_address != slots.len() || (named != 0 && named != slots.len())) {
        return Err("tokio-postgres needs a hostaddr for every host, or none".into());
    }
    for slot in slots {
        if let Some(addr) = slot.hostaddr().filter(|a| !a.is_empty()) {
            config.hostaddr(std::str::from_utf8(addr)?.parse()?);
        }
        match (slot.kind(), slot.host()) {
            // A socket directory (the default one included) becomes a Unix-socket host.
            (kind, Some(dir)) if kind.is_unix_socket() => {
                config.host_path(std::ffi::OsStr::from_bytes(dir));
            }
            (_, Some(host)) if !host.is_empty() => {
                config.host(std::str::from_utf8(host)?);
            }
            _ => {}
        }
        // libpq parses a port when it reaches the slot; a bad one fails here, at once.
        config.port(slot.port()?);
    }
    Ok(())
}

/// The one password tokio-postgres can hold: the same for every slot, or an error rather
/// than one host's password sent to another.
fn one_password(c: &ConnectConfig) -> Result<Option<Vec<u8>>> {
    let mut passwords = (0..c.slots().len()).map(|i| c.password_for(i));
    let first = passwords.next().flatten();
    if passwords.any(|p| p != first) {
        return Err("the password file gives the hosts different passwords; \
                    tokio-postgres keeps one for all"
            .into());
    }
    Ok(first.map(<[u8]>::to_vec))
}

/// The process environment as the resolver takes it, with the OS user.
pub fn process_environment() -> Environment {
    let mut env = Environment::new();
    for (name, value) in std::env::vars_os() {
        if let Some(name) = name.to_str() {
            env = env.with_var(name, value.as_bytes());
        }
    }
    if let Some(user) = os_user() {
        env = env.with_os_user(user);
    }
    env
}

/// The user name libpq would take from the passwd database, which std cannot ask: `$USER`,
/// else the `/etc/passwd` entry of the owner of `/proc/self` (Linux).
fn os_user() -> Option<String> {
    if let Ok(user) = std::env::var("USER") {
        return Some(user);
    }
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?);
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| fields[0].to_owned())
    })
}

/// The command line: the arguments in, the result printed.
fn cli() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [conninfo] = args.as_slice() else {
        return Err("usage: tokio_postgres_config CONNINFO".into());
    };
    let mapped = config_from(conninfo, &process_environment())?;
    // tokio-postgres's Debug of a Config hides the password.
    println!("{:#?}", mapped.config);
    if !mapped.left_out.is_empty() {
        println!("not carried: {}", mapped.left_out.join(", "));
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    // The errors are libpq's or the server's texts: print them as they are, not as Debug.
    match cli() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.to_string().trim_end());
            std::process::ExitCode::FAILURE
        }
    }
}
