//! The configuration file of `pgyard proxy` (TOML): listen addresses, the backends (one for
//! every database, and `[databases.NAME]` entries), the pools, the auth, the timeouts, TLS to
//! clients. Every
//! key is described in `docs/proxy.md`; a key not known here is an error that names it, so a
//! misspelt setting is never silently left at its default.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::client::IGNORED_BY_DEFAULT;
use pgyard_proxy::{ClientAuth, ClientConfig, Databases, PoolMode, PoolSettings, Route, TlsMode};
use serde::Deserialize;

use super::tls::{ProxyTls, TlsFile};
use super::{read_auth_file, ProxyConfig};

/// Largest configuration file read (bytes).
pub const CONFIG_MAX: u64 = 1 << 20;

/// Largest timeout accepted (a year): beyond that a clock deadline could overflow.
const SECONDS_MAX: f64 = 365.0 * 24.0 * 3600.0;

/// The listen addresses when the file names none.
const LISTEN_DEFAULT: &str = "127.0.0.1:6432";

/// What a configuration file says.
#[derive(Clone, Debug)]
pub struct FileConfig {
    /// Where to accept clients (a change needs a restart).
    pub listen: Vec<SocketAddr>,
    /// The folder of a Unix socket to accept clients on as well, `.s.PGSQL.PORT` with the
    /// first listen address's port (a change needs a restart).
    pub unix_socket_dir: Option<PathBuf>,
    /// Everything else.
    pub proxy: ProxyConfig,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    listen: Option<Listen>,
    unix_socket_dir: Option<PathBuf>,
    unix_auth: Option<RawUnixAuth>,
    backend: Option<String>,
    #[serde(default)]
    databases: BTreeMap<String, RawDatabase>,
    pool_mode: Option<RawMode>,
    pool_size: Option<usize>,
    default_route: Option<RawRoute>,
    auth_file: Option<PathBuf>,
    auth: Option<RawAuth>,
    max_client_conn: Option<usize>,
    query_wait_timeout: Option<f64>,
    client_login_timeout: Option<f64>,
    server_idle_timeout: Option<f64>,
    server_lifetime: Option<f64>,
    failover_timeout: Option<f64>,
    shutdown_timeout: Option<f64>,
    #[serde(default)]
    server_reset_query_always: bool,
    #[serde(default)]
    admin_users: Vec<String>,
    ignore_startup_parameters: Option<Vec<String>>,
    tls: Option<RawTls>,
}

#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "an address (\"IP:port\") or a list of addresses"
)]
enum Listen {
    One(String),
    Many(Vec<String>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDatabase {
    conninfo: String,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawMode {
    Transaction,
    Session,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawRoute {
    Primary,
    Standby,
    Any,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawAuth {
    Trust,
    Cert,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum RawUnixAuth {
    Peer,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    mode: Option<String>,
}

/// Reads and checks the configuration file at `path` (and the auth file it names, relative
/// to the file's folder); the error names the file, and the key or line at fault.
pub fn load_config(path: &Path) -> Result<FileConfig, String> {
    let text = read_limited(path, CONFIG_MAX)?;
    let text = String::from_utf8(text).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut config = parse_config(&text, dir).map_err(|e| format!("{}: {e}", path.display()))?;
    config.proxy.file = Some(path.to_path_buf());
    Ok(config)
}

/// Parses and checks a configuration file's text; relative paths in it are taken from `dir`.
pub fn parse_config(text: &str, dir: &Path) -> Result<FileConfig, String> {
    let raw: Raw = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_owned())?;
    let listen = listen(raw.listen)?;
    let unix_socket_dir = match raw.unix_socket_dir {
        Some(d) if d.as_os_str().is_empty() => {
            return Err("unix_socket_dir: an empty path (leave the key out for none)".into())
        }
        d => d.map(|d| dir.join(d)),
    };
    let unix_peer = matches!(raw.unix_auth, Some(RawUnixAuth::Peer));
    if unix_peer && unix_socket_dir.is_none() {
        return Err("unix_auth = \"peer\" needs unix_socket_dir: there is no Unix socket".into());
    }
    let tls = raw.tls.as_ref().map(|t| tls(t, dir)).transpose()?;
    let auth = match (&raw.auth_file, raw.auth) {
        (Some(_), Some(_)) => return Err("give auth_file or auth, not both".into()),
        (None, None) => {
            return Err("give auth_file = \"FILE\", auth = \"trust\" or auth = \"cert\"".into())
        }
        (None, Some(RawAuth::Cert)) => {
            if !tls.as_ref().is_some_and(ProxyTls::verifies_clients) {
                return Err(
                    "auth = \"cert\" needs client certificates: a [tls] table with ca_file".into(),
                );
            }
            ClientAuth::Cert
        }
        (Some(file), None) => ClientAuth::File(Arc::new(read_auth_file(&dir.join(file))?)),
        (None, Some(RawAuth::Trust)) => {
            if let Some(a) = listen.iter().find(|a| !a.ip().is_loopback()) {
                return Err(format!(
                    "auth = \"trust\" is allowed only on loopback listen addresses, not {a}"
                ));
            }
            ClientAuth::Trust
        }
    };
    let defaults = PoolSettings::default();
    let pool = PoolSettings {
        size: raw.pool_size.unwrap_or(defaults.size),
        wait_timeout: positive("query_wait_timeout", raw.query_wait_timeout, 30.0)?,
        idle_timeout: optional("server_idle_timeout", raw.server_idle_timeout, 600.0)?,
        lifetime: optional("server_lifetime", raw.server_lifetime, 3600.0)?,
    };
    let max_client_conn = raw.max_client_conn.unwrap_or(100);
    if max_client_conn == 0 {
        return Err("max_client_conn must be at least 1".into());
    }
    let client = ClientConfig {
        auth,
        pool_mode: match raw.pool_mode.unwrap_or(RawMode::Transaction) {
            RawMode::Transaction => PoolMode::Transaction,
            RawMode::Session => PoolMode::Session,
        },
        default_route: match raw.default_route.unwrap_or(RawRoute::Primary) {
            RawRoute::Primary => Route::Primary,
            RawRoute::Standby => Route::Standby,
            RawRoute::Any => Route::Any,
        },
        login_timeout: positive("client_login_timeout", raw.client_login_timeout, 60.0)?,
        databases: Databases::Any,
        disabled: Default::default(),
        admin_users: Arc::new(admin_users(raw.admin_users)?),
        ignore_startup_parameters: Arc::new(ignored(raw.ignore_startup_parameters)?),
    };
    let proxy = ProxyConfig {
        backend: raw.backend,
        databases: raw
            .databases
            .into_iter()
            .map(|(name, db)| (name, db.conninfo))
            .collect(),
        client,
        pool,
        seed: None,
        max_client_conn,
        failover_timeout: optional("failover_timeout", raw.failover_timeout, 0.0)?,
        shutdown_timeout: seconds("shutdown_timeout", raw.shutdown_timeout.unwrap_or(30.0))?,
        file: None,
        tls,
        unix_peer,
        server_reset_query_always: raw.server_reset_query_always,
    };
    Ok(FileConfig {
        listen,
        unix_socket_dir,
        proxy: proxy.checked()?,
    })
}

/// The users who may open the admin console (an empty name is surely a mistake).
fn admin_users(names: Vec<String>) -> Result<BTreeSet<String>, String> {
    if names.iter().any(String::is_empty) {
        return Err("admin_users: an empty user name".into());
    }
    Ok(names.into_iter().collect())
}

/// The StartupMessage settings ignored: [`IGNORED_BY_DEFAULT`] unless the file names them,
/// in lower case (a server's setting names are).
fn ignored(names: Option<Vec<String>>) -> Result<BTreeSet<String>, String> {
    let Some(names) = names else {
        return Ok(IGNORED_BY_DEFAULT.iter().map(|&n| n.to_owned()).collect());
    };
    if names.iter().any(String::is_empty) {
        return Err("ignore_startup_parameters: an empty name".into());
    }
    Ok(names.iter().map(|n| n.to_ascii_lowercase()).collect())
}

fn listen(raw: Option<Listen>) -> Result<Vec<SocketAddr>, String> {
    let texts = match raw {
        None => vec![LISTEN_DEFAULT.to_owned()],
        Some(Listen::One(a)) => vec![a],
        Some(Listen::Many(list)) => list,
    };
    if texts.is_empty() {
        return Err("listen: no address".into());
    }
    texts
        .iter()
        .map(|t| {
            t.parse::<SocketAddr>()
                .map_err(|_| format!("listen: {t:?} is not an address of the form IP:port"))
        })
        .collect()
}

/// A number of seconds as a duration; the error names the key.
fn seconds(key: &str, value: f64) -> Result<Duration, String> {
    if !(0.0..=SECONDS_MAX).contains(&value) {
        return Err(format!(
            "{key}: {value} is not a number of seconds from 0 to {SECONDS_MAX}"
        ));
    }
    Duration::try_from_secs_f64(value).map_err(|e| format!("{key}: {e}"))
}

/// A timeout that must be more than zero.
fn positive(key: &str, value: Option<f64>, default: f64) -> Result<Duration, String> {
    let d = seconds(key, value.unwrap_or(default))?;
    if d.is_zero() {
        return Err(format!("{key}: must be more than 0 seconds"));
    }
    Ok(d)
}

/// A timeout where 0 means never.
fn optional(key: &str, value: Option<f64>, default: f64) -> Result<Option<Duration>, String> {
    let d = seconds(key, value.unwrap_or(default))?;
    Ok((!d.is_zero()).then_some(d))
}

/// Reads at most `limit` bytes of `path`; a larger file is an error.
fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut text = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut text)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if text.len() as u64 > limit {
        return Err(format!("{}: larger than {limit} bytes", path.display()));
    }
    Ok(text)
}

/// The `[tls]` table: the mode (`prefer` when not given: a table with a certificate means
/// TLS is wanted), the certificate and key, read and paired now so that a broken pair is
/// reported with the file rather than at the first client, and the CA of client
/// certificates (required by the `verify-*` modes).
fn tls(raw: &RawTls, dir: &Path) -> Result<ProxyTls, String> {
    let modes = [
        TlsMode::Disable,
        TlsMode::Allow,
        TlsMode::Prefer,
        TlsMode::Require,
        TlsMode::VerifyCa,
        TlsMode::VerifyFull,
    ];
    let named = raw.mode.as_deref().unwrap_or("prefer");
    let Some(mode) = modes.into_iter().find(|m| m.name() == named) else {
        return Err(format!(
            "tls.mode: unknown mode \"{named}\"; expected \"disable\", \"allow\", \"prefer\", \
             \"require\", \"verify-ca\" or \"verify-full\""
        ));
    };
    let (Some(cert), Some(key)) = (&raw.cert_file, &raw.key_file) else {
        let missing = if raw.cert_file.is_none() {
            "cert_file"
        } else {
            "key_file"
        };
        return Err(format!(
            "tls.{missing}: missing (the [tls] table needs both files)"
        ));
    };
    let ca = raw.ca_file.as_ref().map(|c| dir.join(c));
    ProxyTls::from_files_with_ca(mode, &dir.join(cert), &dir.join(key), ca.as_deref()).map_err(
        |e| {
            let key = match e.file {
                TlsFile::Cert => "cert_file",
                TlsFile::Key => "key_file",
                TlsFile::Ca => "ca_file",
            };
            format!("tls.{key}: {}", e.message)
        },
    )
}

#[cfg(test)]
mod tests;
