//! Phase-3 errors, with libpq 18's message texts word for word (without the trailing newline).

use crate::error::lossy;
use crate::Keyword;

/// Why a resolved option table cannot be turned into a [`ConnectConfig`](super::ConnectConfig),
/// or why a lazily parsed value (port, timeouts, keepalives) is unusable.
///
/// `Display` gives libpq's text without its trailing newline, with bytes that are not UTF-8
/// shown as U+FFFD; [`ConfigError::libpq_message`] gives the exact bytes libpq would append to
/// its error buffer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A non-empty `host` list whose length differs from the `hostaddr` list's.
    #[error("could not match {hosts} host names to {hostaddrs} hostaddr values")]
    HostCountMismatch {
        /// Elements in `host` (1 + commas).
        hosts: usize,
        /// Elements in `hostaddr`, which is the number of host slots.
        hostaddrs: usize,
    },
    /// A `port` list with more than one element whose length differs from the host count.
    #[error("could not match {ports} port numbers to {hosts} hosts")]
    PortCountMismatch {
        /// Elements in `port` (1 + commas).
        ports: usize,
        /// Number of host slots.
        hosts: usize,
    },
    /// `user` is empty or unset and the operating-system user name is unknown.
    #[error("{message}")]
    UserUnavailable {
        /// The text the caller supplied for the failed lookup.
        message: String,
    },
    /// A value outside an option's fixed set (`invalid <option> value: "<v>"`).
    #[error("invalid {} value: \"{}\"", .keyword.name(), lossy(.value))]
    InvalidValue {
        /// The option.
        keyword: Keyword,
        /// The rejected value.
        value: Vec<u8>,
    },
    /// A negated `require_auth` method after a plain one.
    #[error("negative require_auth method \"{}\" cannot be mixed with non-negative methods", lossy(.method))]
    RequireAuthNegativeMixed {
        /// The element, `!` included.
        method: Vec<u8>,
    },
    /// A plain `require_auth` method after a negated one.
    #[error("require_auth method \"{}\" cannot be mixed with negative methods", lossy(.method))]
    RequireAuthPositiveMixed {
        /// The element.
        method: Vec<u8>,
    },
    /// A `require_auth` method named twice.
    #[error("require_auth method \"{}\" is specified more than once", lossy(.method))]
    RequireAuthDuplicate {
        /// The element as written, `!` included.
        method: Vec<u8>,
    },
    /// `sslnegotiation=direct` with an sslmode that allows plaintext.
    #[error("weak sslmode \"{}\" may not be used with sslnegotiation=direct (use \"require\", \"verify-ca\", or \"verify-full\")", .sslmode.as_str())]
    WeakSslModeForDirect {
        /// The effective sslmode.
        sslmode: super::SslMode,
    },
    /// `sslrootcert=system` with an sslmode other than `verify-full`.
    #[error("weak sslmode \"{}\" may not be used with sslrootcert=system (use \"verify-full\")", .sslmode.as_str())]
    WeakSslModeForSystemRoot {
        /// The effective sslmode.
        sslmode: super::SslMode,
    },
    /// A TLS version bound that is not `TLSv1`..`TLSv1.3` (any case) or empty.
    #[error("invalid \"{}\" value: \"{}\"", .keyword.name(), lossy(.value))]
    InvalidTlsVersion {
        /// `ssl_min_protocol_version` or `ssl_max_protocol_version`.
        keyword: Keyword,
        /// The rejected value.
        value: Vec<u8>,
    },
    /// `ssl_min_protocol_version` above `ssl_max_protocol_version`.
    #[error("invalid SSL protocol version range")]
    InvalidTlsVersionRange,
    /// `gssencmode=require` in a build without GSSAPI (pgyard's build, like the reference one).
    #[error("gssencmode value \"{}\" invalid when GSSAPI support is not compiled in", lossy(.value))]
    GssNotCompiledIn {
        /// The value (`require`).
        value: Vec<u8>,
    },
    /// `scram_client_key`/`scram_server_key` is not valid base64.
    #[error("invalid SCRAM {} key", .which.as_str())]
    InvalidScramKey {
        /// Which key.
        which: ScramKeyKind,
    },
    /// `scram_client_key`/`scram_server_key` decodes to other than 32 bytes.
    #[error("invalid SCRAM {} key length: {length}", .which.as_str())]
    InvalidScramKeyLength {
        /// Which key.
        which: ScramKeyKind,
        /// The decoded length.
        length: usize,
    },
    /// `min_protocol_version` above `max_protocol_version`.
    #[error("\"min_protocol_version\" is greater than \"max_protocol_version\"")]
    ProtocolVersionRange,
    /// A value that fails libpq's integer rule (`pqParseIntParam`).
    #[error("invalid integer value \"{}\" for connection option \"{name}\"", lossy(.value))]
    InvalidInteger {
        /// The option name.
        name: String,
        /// The rejected value.
        value: Vec<u8>,
    },
    /// A port that is an integer but not in 1..=65535.
    #[error("invalid port number: \"{}\"", lossy(.value))]
    InvalidPortNumber {
        /// The raw port text of the slot.
        value: Vec<u8>,
    },
    /// A Unix-domain socket path that does not fit in `sun_path`.
    #[error("Unix-domain socket path \"{}\" is too long (maximum {max} bytes)", lossy(.path))]
    SocketPathTooLong {
        /// The path libpq built (truncated as libpq's buffer truncates it).
        path: Vec<u8>,
        /// The limit (107 on Linux).
        max: usize,
    },
}

/// Which of the two SCRAM pass-through keys an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ScramKeyKind {
    /// `scram_client_key`.
    Client,
    /// `scram_server_key`.
    Server,
}

impl ScramKeyKind {
    /// `client` or `server`, as in the messages.
    pub fn as_str(self) -> &'static str {
        match self {
            ScramKeyKind::Client => "client",
            ScramKeyKind::Server => "server",
        }
    }
}

impl ConfigError {
    /// The exact bytes libpq 18 appends to its error buffer, trailing newline included
    /// (values are copied byte for byte, not made UTF-8).
    pub fn libpq_message(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let quoted = |out: &mut Vec<u8>, b: &[u8]| {
            out.push(b'"');
            out.extend_from_slice(b);
            out.push(b'"');
        };
        match self {
            ConfigError::InvalidValue { keyword, value } => {
                out.extend_from_slice(format!("invalid {} value: ", keyword.name()).as_bytes());
                quoted(&mut out, value);
            }
            ConfigError::RequireAuthNegativeMixed { method } => {
                out.extend_from_slice(b"negative require_auth method ");
                quoted(&mut out, method);
                out.extend_from_slice(b" cannot be mixed with non-negative methods");
            }
            ConfigError::RequireAuthPositiveMixed { method } => {
                out.extend_from_slice(b"require_auth method ");
                quoted(&mut out, method);
                out.extend_from_slice(b" cannot be mixed with negative methods");
            }
            ConfigError::RequireAuthDuplicate { method } => {
                out.extend_from_slice(b"require_auth method ");
                quoted(&mut out, method);
                out.extend_from_slice(b" is specified more than once");
            }
            ConfigError::InvalidTlsVersion { keyword, value } => {
                out.extend_from_slice(format!("invalid \"{}\" value: ", keyword.name()).as_bytes());
                quoted(&mut out, value);
            }
            ConfigError::GssNotCompiledIn { value } => {
                out.extend_from_slice(b"gssencmode value ");
                quoted(&mut out, value);
                out.extend_from_slice(b" invalid when GSSAPI support is not compiled in");
            }
            ConfigError::InvalidInteger { name, value } => {
                out.extend_from_slice(b"invalid integer value ");
                quoted(&mut out, value);
                out.extend_from_slice(format!(" for connection option \"{name}\"").as_bytes());
            }
            ConfigError::InvalidPortNumber { value } => {
                out.extend_from_slice(b"invalid port number: ");
                quoted(&mut out, value);
            }
            ConfigError::SocketPathTooLong { path, max } => {
                out.extend_from_slice(b"Unix-domain socket path ");
                quoted(&mut out, path);
                out.extend_from_slice(format!(" is too long (maximum {max} bytes)").as_bytes());
            }
            other => out.extend_from_slice(other.to_string().as_bytes()),
        }
        out.push(b'\n');
        out
    }
}
