//! The fixed-set options, with libpq's exact (case-sensitive) spellings.

use std::fmt;

use super::ConfigError;
use crate::Keyword;

/// Defines an enum whose variants are spelled exactly as libpq spells them, with a strict
/// parser that produces libpq's `invalid <option> value: "<v>"` error. Variants listed under
/// `extra` have a spelling but are not accepted by the libpq parser.
macro_rules! libpq_enum {
    (
        $(#[$meta:meta])*
        $name:ident, keyword $kw:ident, default $default:ident,
        { $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )* }
        $( extra { $( $(#[$xmeta:meta])* $xvariant:ident = $xtext:literal, )* } )?
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            $( $( $(#[$xmeta])* $xvariant, )* )?
        }

        impl $name {
            /// The values libpq accepts, in its documentation order.
            pub const LIBPQ_VALUES: &'static [$name] = &[ $( $name::$variant, )* ];

            /// The spelling of this value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                    $( $( $name::$xvariant => $xtext, )* )?
                }
            }

            /// Exact, case-sensitive match against libpq's spellings.
            pub fn from_libpq(value: &[u8]) -> Option<Self> {
                match value {
                    $( v if v == $text.as_bytes() => Some($name::$variant), )*
                    _ => None,
                }
            }

            /// Parses as libpq does, with its error text on failure.
            pub fn parse(value: &[u8]) -> Result<Self, ConfigError> {
                Self::from_libpq(value).ok_or_else(|| ConfigError::InvalidValue {
                    keyword: Keyword::$kw,
                    value: value.to_vec(),
                })
            }
        }

        impl Default for $name {
            /// The value libpq uses when the option is unset.
            fn default() -> Self {
                $name::$default
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

libpq_enum! {
    /// `sslmode`: whether and how strictly TLS is used.
    SslMode, keyword Sslmode, default Prefer,
    {
        /// Plaintext only.
        Disable = "disable",
        /// Plaintext first, TLS if the server insists.
        Allow = "allow",
        /// TLS first, plaintext if TLS is refused or fails (the default of SSL builds).
        Prefer = "prefer",
        /// TLS only, no certificate checks (unless a root certificate file exists).
        Require = "require",
        /// TLS only, certificate chain verified.
        VerifyCa = "verify-ca",
        /// TLS only, chain and host name verified.
        VerifyFull = "verify-full",
    }
}

impl SslMode {
    /// Whether a plaintext connection may be used (disable, allow, prefer).
    pub fn allows_plaintext(self) -> bool {
        matches!(self, SslMode::Disable | SslMode::Allow | SslMode::Prefer)
    }

    /// Whether TLS may be attempted (everything but disable).
    pub fn allows_tls(self) -> bool {
        self != SslMode::Disable
    }
}

libpq_enum! {
    /// `target_session_attrs`: which kind of server a connection must reach.
    TargetSessionAttrs, keyword TargetSessionAttrs, default Any,
    {
        /// Any server.
        Any = "any",
        /// A server whose sessions are writable by default.
        ReadWrite = "read-write",
        /// A server whose sessions are read-only (standby or `default_transaction_read_only`).
        ReadOnly = "read-only",
        /// A server not in hot standby.
        Primary = "primary",
        /// A server in hot standby.
        Standby = "standby",
        /// A standby if one is reachable, else any server (two passes over the hosts).
        PreferStandby = "prefer-standby",
    }
    extra {
        /// pgyard only: a primary if one is reachable, else any server. libpq has no such
        /// value; the libpq parser rejects `prefer-primary`, the pgyard API can set it.
        PreferPrimary = "prefer-primary",
    }
}

libpq_enum! {
    /// `load_balance_hosts`: whether host slots (and each slot's addresses) are shuffled.
    LoadBalanceHosts, keyword LoadBalanceHosts, default Disable,
    {
        /// List order.
        Disable = "disable",
        /// Shuffle the slots once, and each slot's addresses on every resolution.
        Random = "random",
    }
}

libpq_enum! {
    /// `sslnegotiation`: how TLS is started.
    SslNegotiation, keyword Sslnegotiation, default Postgres,
    {
        /// Send SSLRequest and wait for `S`/`N`.
        Postgres = "postgres",
        /// Start the TLS handshake at once (needs sslmode require or stronger).
        Direct = "direct",
    }
}

libpq_enum! {
    /// `gssencmode`: GSSAPI transport encryption. pgyard, like the reference libpq build, has
    /// no GSSAPI, so `prefer` behaves as `disable` and `require` is rejected in phase 3.
    GssEncMode, keyword Gssencmode, default Disable,
    {
        /// Never.
        Disable = "disable",
        /// If available (never, in this build).
        Prefer = "prefer",
        /// Always (rejected in this build).
        Require = "require",
    }
}

libpq_enum! {
    /// `channel_binding`: whether SCRAM channel binding is used.
    ChannelBinding, keyword ChannelBinding, default Prefer,
    {
        /// Never.
        Disable = "disable",
        /// When TLS and the server allow it (default of SSL builds).
        Prefer = "prefer",
        /// Always; authentication without it fails.
        Require = "require",
    }
}

libpq_enum! {
    /// `sslcertmode`: whether a client certificate is sent.
    SslCertMode, keyword Sslcertmode, default Allow,
    {
        /// Never send one.
        Disable = "disable",
        /// Send one if configured and requested (default of SSL builds).
        Allow = "allow",
        /// Fail unless the server requested and accepted one.
        Require = "require",
    }
}

/// A frontend/backend protocol version libpq 18 can request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 3.0, the version every server since 7.4 speaks.
    V3_0,
    /// 3.2, new in PostgreSQL 18 (longer cancel keys).
    V3_2,
}

impl ProtocolVersion {
    /// What `latest` means in libpq 18.
    pub const LATEST: ProtocolVersion = ProtocolVersion::V3_2;

    /// Parses `min_protocol_version`/`max_protocol_version` (`3.0`, `3.2` or `latest`);
    /// `keyword` names the option in the error.
    pub fn parse(keyword: Keyword, value: &[u8]) -> Result<Self, ConfigError> {
        match value {
            b"latest" => Ok(Self::LATEST),
            b"3.0" => Ok(ProtocolVersion::V3_0),
            b"3.2" => Ok(ProtocolVersion::V3_2),
            _ => Err(ConfigError::InvalidValue {
                keyword,
                value: value.to_vec(),
            }),
        }
    }

    /// The major number.
    pub fn major(self) -> u16 {
        3
    }

    /// The minor number.
    pub fn minor(self) -> u16 {
        match self {
            ProtocolVersion::V3_0 => 0,
            ProtocolVersion::V3_2 => 2,
        }
    }

    /// The 32-bit code sent in the startup packet (major in the high half).
    pub fn code(self) -> u32 {
        (u32::from(self.major()) << 16) | u32::from(self.minor())
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major(), self.minor())
    }
}

/// A TLS protocol version bound (`ssl_min_protocol_version`, `ssl_max_protocol_version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TlsVersion {
    /// `TLSv1` (1.0).
    Tls1_0,
    /// `TLSv1.1`.
    Tls1_1,
    /// `TLSv1.2`.
    Tls1_2,
    /// `TLSv1.3`.
    Tls1_3,
}

impl TlsVersion {
    /// libpq's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            TlsVersion::Tls1_0 => "TLSv1",
            TlsVersion::Tls1_1 => "TLSv1.1",
            TlsVersion::Tls1_2 => "TLSv1.2",
            TlsVersion::Tls1_3 => "TLSv1.3",
        }
    }

    /// Parses a bound as libpq does: one of the four spellings in any ASCII case, or empty
    /// (no bound, `Ok(None)`); `keyword` names the option in the error.
    pub fn parse(keyword: Keyword, value: &[u8]) -> Result<Option<Self>, ConfigError> {
        if value.is_empty() {
            return Ok(None);
        }
        [
            TlsVersion::Tls1_0,
            TlsVersion::Tls1_1,
            TlsVersion::Tls1_2,
            TlsVersion::Tls1_3,
        ]
        .into_iter()
        .find(|v| v.as_str().as_bytes().eq_ignore_ascii_case(value))
        .map(Some)
        .ok_or_else(|| ConfigError::InvalidTlsVersion {
            keyword,
            value: value.to_vec(),
        })
    }
}

impl fmt::Display for TlsVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
