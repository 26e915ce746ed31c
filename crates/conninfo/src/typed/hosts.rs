//! The expanded host list (spec §7): counting, pairing, slot kinds and lazy port parsing.

use std::fmt;

use super::{parse_int_param, ConfigError};

/// The port used when a slot's port is empty or unset (`DEF_PGPORT`).
pub const DEFAULT_PORT: u16 = 5432;

/// The longest Unix-domain socket path that fits in Linux's `sun_path` (108 bytes with NUL).
pub const SOCKET_PATH_MAX: usize = 107;

/// libpq builds the socket path in a `MAXPGPATH` (1024-byte) buffer, so longer paths are cut.
const PATH_BUFFER_MAX: usize = 1023;

/// How a host slot is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SlotKind {
    /// TCP to the numeric address in `hostaddr`; `host` only names it (TLS, passfile, errors).
    Address,
    /// TCP to the addresses a DNS lookup of `host` gives.
    HostName,
    /// A Unix-domain socket in the directory `host` (starts with `/`, or `@` for Linux's
    /// abstract namespace).
    UnixSocket,
    /// Neither host nor hostaddr given: a Unix-domain socket in the default socket directory,
    /// which libpq stores as the slot's `host`.
    DefaultUnixSocket,
}

impl SlotKind {
    /// Whether the slot connects over a Unix-domain socket.
    pub fn is_unix_socket(self) -> bool {
        matches!(self, SlotKind::UnixSocket | SlotKind::DefaultUnixSocket)
    }
}

/// A failure found when the connect machine reaches a slot, with libpq's consequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotError {
    /// The whole connect fails at once (a port that is not an integer).
    Abort(ConfigError),
    /// The message is appended and the next host slot is tried (port out of range, socket
    /// path too long).
    NextSlot(ConfigError),
}

impl SlotError {
    /// The error, whatever its consequence.
    pub fn error(&self) -> &ConfigError {
        match self {
            SlotError::Abort(e) | SlotError::NextSlot(e) => e,
        }
    }

    /// Whether the whole connect fails.
    pub fn aborts(&self) -> bool {
        matches!(self, SlotError::Abort(_))
    }
}

impl fmt::Display for SlotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.error(), f)
    }
}

impl std::error::Error for SlotError {}

/// One element of the expanded host list (libpq's `connhost[i]`).
#[derive(Clone, PartialEq, Eq)]
pub struct HostSlot {
    pub(super) host: Option<Vec<u8>>,
    pub(super) hostaddr: Option<Vec<u8>>,
    pub(super) port: Option<Vec<u8>>,
    pub(super) password: Option<Vec<u8>>,
    pub(super) kind: SlotKind,
}

impl HostSlot {
    /// The slot's `host` element (for default slots, the default socket directory or
    /// `localhost`); `None` when `host` was empty/unset and `hostaddr` names the slot.
    pub fn host(&self) -> Option<&[u8]> {
        self.host.as_deref()
    }

    /// The slot's `hostaddr` element, if the `hostaddr` list was non-empty (it may itself be
    /// empty, e.g. the second element of `1.2.3.4,`).
    pub fn hostaddr(&self) -> Option<&[u8]> {
        self.hostaddr.as_deref()
    }

    /// The raw port text, `None` when the `port` option was empty or unset.
    pub fn port_raw(&self) -> Option<&[u8]> {
        self.port.as_deref()
    }

    /// The password found for this slot by the password-file lookup, if any.
    pub fn password(&self) -> Option<&[u8]> {
        self.password.as_deref()
    }

    /// How the slot is reached.
    pub fn kind(&self) -> SlotKind {
        self.kind
    }

    /// What libpq's `PQhost` reports for this slot: `host` if non-empty, else `hostaddr`.
    pub fn display_host(&self) -> &[u8] {
        match self.host.as_deref() {
            Some(h) if !h.is_empty() => h,
            _ => self.hostaddr.as_deref().unwrap_or_default(),
        }
    }

    /// The port, parsed as libpq does when it reaches the slot: empty → 5432; not an integer →
    /// [`SlotError::Abort`] (`invalid integer value "<v>" for connection option "port"`);
    /// outside 1..=65535 → [`SlotError::NextSlot`] (`invalid port number: "<v>"`).
    pub fn port(&self) -> Result<u16, SlotError> {
        let raw = match self.port.as_deref() {
            None | Some(b"") => return Ok(DEFAULT_PORT),
            Some(raw) => raw,
        };
        let n = parse_int_param("port", raw).map_err(SlotError::Abort)?;
        u16::try_from(n).ok().filter(|&p| p != 0).ok_or_else(|| {
            SlotError::NextSlot(ConfigError::InvalidPortNumber {
                value: raw.to_vec(),
            })
        })
    }

    /// For Unix-socket slots, the socket path `<dir>/.s.PGSQL.<port>` (port errors first,
    /// then [`SlotError::NextSlot`] with `Unix-domain socket path "<path>" is too long
    /// (maximum 107 bytes)`); `None` for TCP slots.
    pub fn unix_socket_path(&self) -> Option<Result<Vec<u8>, SlotError>> {
        if !self.kind.is_unix_socket() {
            return None;
        }
        Some(self.port().and_then(|port| {
            let mut path = self.host.clone().unwrap_or_default();
            path.extend_from_slice(format!("/.s.PGSQL.{port}").as_bytes());
            path.truncate(PATH_BUFFER_MAX);
            if path.len() > SOCKET_PATH_MAX {
                Err(SlotError::NextSlot(ConfigError::SocketPathTooLong {
                    path,
                    max: SOCKET_PATH_MAX,
                }))
            } else {
                Ok(path)
            }
        }))
    }
}

impl fmt::Debug for HostSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |v: &Option<Vec<u8>>| -> Option<String> {
            v.as_deref()
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        f.debug_struct("HostSlot")
            .field("kind", &self.kind)
            .field("host", &text(&self.host))
            .field("hostaddr", &text(&self.hostaddr))
            .field("port", &text(&self.port))
            .field("password", &self.password.as_ref().map(|_| "********"))
            .finish()
    }
}

/// What the password-file lookup gets for one slot: the slot's host (possibly the default
/// socket directory), hostaddr and raw port, and the connection's dbname and user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostSlotKey<'a> {
    /// The slot's `host` (see [`HostSlot::host`]).
    pub host: Option<&'a [u8]>,
    /// The slot's `hostaddr`.
    pub hostaddr: Option<&'a [u8]>,
    /// The slot's raw port text (`None`: the caller matches it as `5432`).
    pub port: Option<&'a [u8]>,
    /// The effective database name.
    pub dbname: &'a [u8],
    /// The effective user name.
    pub user: &'a [u8],
}

impl HostSlotKey<'_> {
    /// The host libpq matches against the file: `host` if non-empty, else `hostaddr`
    /// (mapping empty or the default socket directory to `localhost` is the caller's job).
    pub fn lookup_host(&self) -> &[u8] {
        match self.host {
            Some(h) if !h.is_empty() => h,
            _ => self.hostaddr.unwrap_or_default(),
        }
    }
}

/// Number of elements in a comma-separated list, as libpq counts them (1 + commas).
pub(super) fn count_elements(list: &[u8]) -> usize {
    1 + list.iter().filter(|&&b| b == b',').count()
}

fn split(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    list.split(|&b| b == b',')
}

pub(super) fn non_empty(v: Option<&[u8]>) -> Option<&[u8]> {
    v.filter(|v| !v.is_empty())
}

/// Expands `host`, `hostaddr` and `port` into slots (passwords not yet filled).
pub(super) fn expand(
    host: Option<&[u8]>,
    hostaddr: Option<&[u8]>,
    port: Option<&[u8]>,
    default_socket_dir: &[u8],
) -> Result<Vec<HostSlot>, ConfigError> {
    let host = non_empty(host);
    let hostaddr = non_empty(hostaddr);
    let port = non_empty(port);
    let n = match (hostaddr, host) {
        (Some(a), _) => count_elements(a),
        (None, Some(h)) => count_elements(h),
        (None, None) => 1,
    };
    let mut hostaddrs: Vec<Option<Vec<u8>>> = vec![None; n];
    if let Some(a) = hostaddr {
        for (slot, element) in hostaddrs.iter_mut().zip(split(a)) {
            *slot = Some(element.to_vec());
        }
    }
    let mut hosts: Vec<Option<Vec<u8>>> = vec![None; n];
    if let Some(h) = host {
        let count = count_elements(h);
        if count != n {
            return Err(ConfigError::HostCountMismatch {
                hosts: count,
                hostaddrs: n,
            });
        }
        for (slot, element) in hosts.iter_mut().zip(split(h)) {
            *slot = Some(element.to_vec());
        }
    }
    let mut ports: Vec<Option<Vec<u8>>> = vec![None; n];
    if let Some(p) = port {
        let count = count_elements(p);
        if count == 1 {
            ports.iter_mut().for_each(|slot| *slot = Some(p.to_vec()));
        } else if count == n {
            for (slot, element) in ports.iter_mut().zip(split(p)) {
                *slot = Some(element.to_vec());
            }
        } else {
            return Err(ConfigError::PortCountMismatch {
                ports: count,
                hosts: n,
            });
        }
    }
    let slots = hostaddrs
        .into_iter()
        .zip(hosts)
        .zip(ports)
        .map(|((hostaddr, host), port)| {
            let (host, kind) = if non_empty(hostaddr.as_deref()).is_some() {
                (host, SlotKind::Address)
            } else if let Some(h) = non_empty(host.as_deref()) {
                let kind = if h.starts_with(b"/") || h.starts_with(b"@") {
                    SlotKind::UnixSocket
                } else {
                    SlotKind::HostName
                };
                (host, kind)
            } else if default_socket_dir.is_empty() {
                (Some(b"localhost".to_vec()), SlotKind::HostName)
            } else {
                (
                    Some(default_socket_dir.to_vec()),
                    SlotKind::DefaultUnixSocket,
                )
            };
            HostSlot {
                host,
                hostaddr,
                port,
                password: None,
                kind,
            }
        })
        .collect();
    Ok(slots)
}
