//! Phase 3: the typed view of a resolved connection string, with libpq validation.
//!
//! [`ConnectConfig::from_resolved`] takes an option table whose defaults are already filled
//! (phase 2) plus a small [`Context`] (OS user, default socket directory, password lookup) and
//! does what libpq's `pqConnectOptions2` does: expands the host list, defaults user and dbname,
//! looks up per-slot passwords, and validates every enumerated option in libpq's order, the
//! first failure winning. Values libpq parses only at connect time (port, connect_timeout,
//! keepalives*, tcp_user_timeout) stay raw here and are parsed by methods, so the connect
//! machine can report their errors where libpq does.

mod base64;
mod enums;
mod error;
mod hosts;
mod int;
mod require_auth;
#[cfg(test)]
mod tests;

use std::fmt;
use std::time::Duration;

pub use enums::{
    ChannelBinding, GssEncMode, LoadBalanceHosts, ProtocolVersion, SslCertMode, SslMode,
    SslNegotiation, TargetSessionAttrs, TlsVersion,
};
pub use error::{ConfigError, ScramKeyKind};
pub use hosts::{HostSlot, HostSlotKey, SlotError, SlotKind, DEFAULT_PORT, SOCKET_PATH_MAX};
pub use int::parse_int_param;
pub use require_auth::{auth_request, AuthMethod, RequireAuth};

use crate::{ConnInfo, Keyword, Strategy};

/// The password lookup phase 3 calls once per host slot when `password` is unset or empty
/// (libpq's `passwordFromFile`); `None` means no password for that slot.
pub type PasswordLookup<'a> = &'a dyn Fn(&HostSlotKey<'_>) -> Option<Vec<u8>>;

/// What phase 3 needs from outside the option table. Pure data plus one callback.
#[derive(Clone)]
pub struct Context<'a> {
    /// The operating-system user name (libpq: `getpwuid(geteuid())`), `None` if unknown.
    pub os_user: Option<Vec<u8>>,
    /// The message reported when `os_user` is needed but `None` (libpq's text names the
    /// numeric uid, e.g. `local user with ID 1000 does not exist`, so the caller supplies it).
    pub os_user_error: String,
    /// The default Unix-socket directory (`DEFAULT_PGSOCKET_DIR`); empty means the build has
    /// none and defaults to host name `localhost`, as on Windows.
    pub default_socket_dir: Vec<u8>,
    /// The encoding name `client_encoding=auto` resolves to (from the locale; `SQL_ASCII` for
    /// the C locale).
    pub locale_encoding: Vec<u8>,
    /// The per-slot password lookup. Supply it only when a password file is to be consulted
    /// (libpq skips the lookup when no passfile path can be determined).
    pub password_lookup: Option<PasswordLookup<'a>>,
}

impl Default for Context<'_> {
    fn default() -> Self {
        Context {
            os_user: None,
            os_user_error: String::from("could not determine the local user name"),
            default_socket_dir: b"/tmp".to_vec(),
            locale_encoding: b"SQL_ASCII".to_vec(),
            password_lookup: None,
        }
    }
}

impl<'a> Context<'a> {
    /// The defaults of the reference build: no OS user, socket directory `/tmp`, C locale,
    /// no password lookup.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the operating-system user name.
    pub fn with_os_user(mut self, user: impl Into<Vec<u8>>) -> Self {
        self.os_user = Some(user.into());
        self
    }

    /// Sets the message reported when the OS user is needed but unknown.
    pub fn with_os_user_error(mut self, message: impl Into<String>) -> Self {
        self.os_user_error = message.into();
        self
    }

    /// Sets the default Unix-socket directory (empty: none, use `localhost`).
    pub fn with_default_socket_dir(mut self, dir: impl Into<Vec<u8>>) -> Self {
        self.default_socket_dir = dir.into();
        self
    }

    /// Sets the encoding `client_encoding=auto` resolves to.
    pub fn with_locale_encoding(mut self, encoding: impl Into<Vec<u8>>) -> Self {
        self.locale_encoding = encoding.into();
        self
    }

    /// Sets the per-slot password lookup.
    pub fn with_password_lookup(mut self, lookup: PasswordLookup<'a>) -> Self {
        self.password_lookup = Some(lookup);
        self
    }
}

impl fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        f.debug_struct("Context")
            .field("os_user", &self.os_user.as_deref().map(text))
            .field("os_user_error", &self.os_user_error)
            .field("default_socket_dir", &text(&self.default_socket_dir))
            .field("locale_encoding", &text(&self.locale_encoding))
            .field("password_lookup", &self.password_lookup.map(|_| "<fn>"))
            .finish()
    }
}

/// A 32-byte SCRAM key decoded from `scram_client_key`/`scram_server_key`.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramKey([u8; ScramKey::LEN]);

impl ScramKey {
    /// The only accepted length (`SCRAM_MAX_KEY_LEN`, SHA-256 output).
    pub const LEN: usize = 32;

    /// Decodes a key as libpq does, with its error texts.
    pub fn decode(which: ScramKeyKind, value: &[u8]) -> Result<Self, ConfigError> {
        let bytes = base64::decode(value).ok_or(ConfigError::InvalidScramKey { which })?;
        let array: [u8; ScramKey::LEN] =
            bytes
                .as_slice()
                .try_into()
                .map_err(|_| ConfigError::InvalidScramKeyLength {
                    which,
                    length: bytes.len(),
                })?;
        Ok(ScramKey(array))
    }

    /// The key bytes.
    pub fn as_bytes(&self) -> &[u8; ScramKey::LEN] {
        &self.0
    }
}

impl fmt::Debug for ScramKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScramKey(********)")
    }
}

/// The validated, typed connection configuration: libpq's state after `pqConnectOptions2`,
/// plus pgyard's own (non-libpq) connection policy with libpq-compatible defaults.
///
/// `Debug` masks passwords and SCRAM keys.
#[derive(Clone, PartialEq)]
pub struct ConnectConfig {
    options_table: ConnInfo,
    slots: Vec<HostSlot>,
    user: Vec<u8>,
    dbname: Vec<u8>,
    password: Option<Vec<u8>>,
    require_auth: RequireAuth,
    channel_binding: ChannelBinding,
    sslmode: SslMode,
    sslnegotiation: SslNegotiation,
    ssl_min_protocol_version: Option<TlsVersion>,
    ssl_max_protocol_version: Option<TlsVersion>,
    sslcertmode: SslCertMode,
    gssencmode: GssEncMode,
    target_session_attrs: TargetSessionAttrs,
    scram_client_key: Option<ScramKey>,
    scram_server_key: Option<ScramKey>,
    load_balance_hosts: LoadBalanceHosts,
    min_protocol_version: ProtocolVersion,
    max_protocol_version: ProtocolVersion,
    client_encoding: Option<Vec<u8>>,
    strategy: Strategy,
    race_stagger: Duration,
    failover_timeout: Option<Duration>,
    keep_trying_addresses_after_mismatch: bool,
}

/// The user, the database and the password of a configuration.
type Identity = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// Step 2 of [`ConnectConfig::from_resolved`]: the user (the OS user when unset or empty),
/// the database (the user when unset or empty), the password, and each slot's password from
/// the lookup (the password file) when no password was given.
fn identity(
    info: &ConnInfo,
    ctx: &Context<'_>,
    slots: &mut [HostSlot],
) -> Result<Identity, ConfigError> {
    let user = match info.get(Keyword::User) {
        Some(u) if !u.is_empty() => u.to_vec(),
        _ => ctx
            .os_user
            .clone()
            .ok_or_else(|| ConfigError::UserUnavailable {
                message: ctx.os_user_error.clone(),
            })?,
    };
    let dbname = match info.get(Keyword::Dbname) {
        Some(d) if !d.is_empty() => d.to_vec(),
        _ => user.clone(),
    };
    let password = info.get(Keyword::Password).map(<[u8]>::to_vec);
    if !matches!(password.as_deref(), Some(p) if !p.is_empty()) {
        if let Some(lookup) = ctx.password_lookup {
            for slot in slots {
                let key = HostSlotKey {
                    host: slot.host.as_deref(),
                    hostaddr: slot.hostaddr.as_deref(),
                    port: slot.port.as_deref(),
                    dbname: &dbname,
                    user: &user,
                };
                slot.password = lookup(&key);
            }
        }
    }
    Ok((user, dbname, password))
}

/// Step 9: the TLS version bounds, each checked, then that they form a range.
fn tls_range(info: &ConnInfo) -> Result<(Option<TlsVersion>, Option<TlsVersion>), ConfigError> {
    let bound = |kw: Keyword| match info.get(kw) {
        None => Ok(None),
        Some(v) => TlsVersion::parse(kw, v),
    };
    let min = bound(Keyword::SslMinProtocolVersion)?;
    let max = bound(Keyword::SslMaxProtocolVersion)?;
    if let (Some(lo), Some(hi)) = (min, max) {
        if lo > hi {
            return Err(ConfigError::InvalidTlsVersionRange);
        }
    }
    Ok((min, max))
}

/// Step 15: the protocol versions; the maximum defaults to 3.0 unless the minimum asks for
/// more.
fn protocol_range(info: &ConnInfo) -> Result<(ProtocolVersion, ProtocolVersion), ConfigError> {
    let min = match info.get(Keyword::MinProtocolVersion) {
        Some(v) => ProtocolVersion::parse(Keyword::MinProtocolVersion, v)?,
        None => ProtocolVersion::V3_0,
    };
    let max = match info.get(Keyword::MaxProtocolVersion) {
        Some(v) => ProtocolVersion::parse(Keyword::MaxProtocolVersion, v)?,
        None if min > ProtocolVersion::V3_0 => ProtocolVersion::LATEST,
        None => ProtocolVersion::V3_0,
    };
    if min > max {
        return Err(ConfigError::ProtocolVersionRange);
    }
    Ok((min, max))
}

/// pgyard's default delay between the starts of two raced attempts.
pub const DEFAULT_RACE_STAGGER: Duration = Duration::from_millis(250);

impl ConnectConfig {
    /// Derives and validates the configuration from a table whose defaults are filled, in
    /// exactly libpq 18's order (spec §16); the first failure is returned.
    ///
    /// Unset enumerated options take the value libpq's phase 3 gives them (e.g. sslmode
    /// `prefer`); an unset `sslmode` is *not* upgraded for `sslrootcert=system`, that being a
    /// phase-2 rule. The load-balance shuffle is not done here: see
    /// [`ConnectConfig::shuffle_slots`].
    pub fn from_resolved(info: &ConnInfo, ctx: &Context<'_>) -> Result<Self, ConfigError> {
        let get = |kw: Keyword| info.get(kw);

        // 1. Host list.
        let mut slots = hosts::expand(
            get(Keyword::Host),
            get(Keyword::Hostaddr),
            get(Keyword::Port),
            &ctx.default_socket_dir,
        )?;

        // 2. user, then dbname (and per-slot passwords when none was given).
        let (user, dbname, password) = identity(info, ctx, &mut slots)?;

        // 3. require_auth.
        let require_auth = RequireAuth::parse(get(Keyword::RequireAuth))?;

        // 4. channel_binding.
        let channel_binding =
            parse_or_default(get(Keyword::ChannelBinding), ChannelBinding::parse)?;

        // 6. sslmode (5 is the non-SSL-build check, not applicable).
        let sslmode = parse_or_default(get(Keyword::Sslmode), SslMode::parse)?;

        // 7. sslnegotiation, and direct needs a non-plaintext sslmode.
        let sslnegotiation = parse_or_default(get(Keyword::Sslnegotiation), SslNegotiation::parse)?;
        if sslnegotiation == SslNegotiation::Direct && sslmode.allows_plaintext() {
            return Err(ConfigError::WeakSslModeForDirect { sslmode });
        }

        // 8. sslrootcert=system needs verify-full.
        if get(Keyword::Sslrootcert) == Some(b"system") && sslmode != SslMode::VerifyFull {
            return Err(ConfigError::WeakSslModeForSystemRoot { sslmode });
        }

        // 9. TLS version bounds, then their range.
        let (ssl_min_protocol_version, ssl_max_protocol_version) = tls_range(info)?;

        // 10. sslcertmode.
        let sslcertmode = parse_or_default(get(Keyword::Sslcertmode), SslCertMode::parse)?;

        // 11. gssencmode; this build has no GSSAPI.
        let gssencmode = parse_or_default(get(Keyword::Gssencmode), GssEncMode::parse)?;
        if gssencmode == GssEncMode::Require {
            return Err(ConfigError::GssNotCompiledIn {
                value: b"require".to_vec(),
            });
        }

        // 12. target_session_attrs.
        let target_session_attrs =
            parse_or_default(get(Keyword::TargetSessionAttrs), TargetSessionAttrs::parse)?;

        // 13. SCRAM keys, client first.
        let scram_client_key = get(Keyword::ScramClientKey)
            .map(|v| ScramKey::decode(ScramKeyKind::Client, v))
            .transpose()?;
        let scram_server_key = get(Keyword::ScramServerKey)
            .map(|v| ScramKey::decode(ScramKeyKind::Server, v))
            .transpose()?;

        // 14. load_balance_hosts.
        let load_balance_hosts =
            parse_or_default(get(Keyword::LoadBalanceHosts), LoadBalanceHosts::parse)?;

        // 15. Protocol versions.
        let (min_protocol_version, max_protocol_version) = protocol_range(info)?;

        // 16. client_encoding=auto.
        let client_encoding = get(Keyword::ClientEncoding).map(|v| {
            if v == b"auto" {
                ctx.locale_encoding.clone()
            } else {
                v.to_vec()
            }
        });

        Ok(ConnectConfig {
            options_table: info.clone(),
            slots,
            user,
            dbname,
            password,
            require_auth,
            channel_binding,
            sslmode,
            sslnegotiation,
            ssl_min_protocol_version,
            ssl_max_protocol_version,
            sslcertmode,
            gssencmode,
            target_session_attrs,
            scram_client_key,
            scram_server_key,
            load_balance_hosts,
            min_protocol_version,
            max_protocol_version,
            client_encoding,
            strategy: Strategy::Sequential,
            race_stagger: DEFAULT_RACE_STAGGER,
            failover_timeout: None,
            keep_trying_addresses_after_mismatch: false,
        })
    }

    // ---- host slots ----

    /// The host slots, in connect order (after [`ConnectConfig::shuffle_slots`], if called).
    pub fn slots(&self) -> &[HostSlot] {
        &self.slots
    }

    /// The password to use for slot `index`: the slot's own (from the password file), else
    /// the `password` option (libpq's order); `None` if neither, or `index` is out of range.
    pub fn password_for(&self, index: usize) -> Option<&[u8]> {
        let slot = self.slots.get(index)?;
        slot.password().or(self.password.as_deref())
    }

    /// Permutes the slots as libpq does for `load_balance_hosts=random` (inside-out
    /// Fisher–Yates): for i in 1..n, swap slot i with slot `pick(i)`, where `pick(i)` must
    /// return a uniform integer in `0..=i` (libpq: `pg_prng_uint64_range(0, i)`). Out-of-range
    /// picks are clamped to `i`. Does nothing when load balancing is disabled.
    pub fn shuffle_slots(&mut self, mut pick: impl FnMut(usize) -> usize) {
        if self.load_balance_hosts != LoadBalanceHosts::Random {
            return;
        }
        for i in 1..self.slots.len() {
            let j = pick(i).min(i);
            self.slots.swap(i, j);
        }
    }

    // ---- identity ----

    /// The option table this configuration was derived from (defaults filled, as given).
    pub fn conninfo(&self) -> &ConnInfo {
        &self.options_table
    }

    /// The raw value of any keyword, as given.
    pub fn raw(&self, kw: Keyword) -> Option<&[u8]> {
        self.options_table.get(kw)
    }

    /// The effective user name (the OS user when `user` was empty or unset).
    pub fn user(&self) -> &[u8] {
        &self.user
    }

    /// The effective database name (the user name when `dbname` was empty or unset).
    pub fn dbname(&self) -> &[u8] {
        &self.dbname
    }

    /// The `password` option, if set (possibly empty).
    pub fn password(&self) -> Option<&[u8]> {
        self.password.as_deref()
    }

    /// The `passfile` option, if set (needed for the `password retrieved from file` line).
    pub fn passfile(&self) -> Option<&[u8]> {
        self.raw(Keyword::Passfile)
    }

    /// The `options` option (server command-line options), empty when unset.
    pub fn options(&self) -> &[u8] {
        self.raw(Keyword::Options).unwrap_or_default()
    }

    /// The `application_name` option, if set.
    pub fn application_name(&self) -> Option<&[u8]> {
        self.raw(Keyword::ApplicationName)
    }

    /// The `fallback_application_name` option, if set.
    pub fn fallback_application_name(&self) -> Option<&[u8]> {
        self.raw(Keyword::FallbackApplicationName)
    }

    /// The application name the startup packet carries: `application_name` if non-empty,
    /// else `fallback_application_name` if non-empty.
    pub fn startup_application_name(&self) -> Option<&[u8]> {
        hosts::non_empty(self.application_name())
            .or(hosts::non_empty(self.fallback_application_name()))
    }

    /// The client encoding to request (`auto` already resolved), if set.
    pub fn client_encoding(&self) -> Option<&[u8]> {
        self.client_encoding.as_deref()
    }

    /// The `replication` option as given (sent in the startup packet when non-empty).
    pub fn replication(&self) -> Option<&[u8]> {
        self.raw(Keyword::Replication)
    }

    /// The `requirepeer` option (checked on Unix sockets), if set.
    pub fn requirepeer(&self) -> Option<&[u8]> {
        self.raw(Keyword::Requirepeer)
    }

    // ---- security ----

    /// The parsed `require_auth` policy.
    pub fn require_auth(&self) -> &RequireAuth {
        &self.require_auth
    }

    /// `channel_binding`.
    pub fn channel_binding(&self) -> ChannelBinding {
        self.channel_binding
    }

    /// `sslmode`.
    pub fn sslmode(&self) -> SslMode {
        self.sslmode
    }

    /// `sslnegotiation`.
    pub fn sslnegotiation(&self) -> SslNegotiation {
        self.sslnegotiation
    }

    /// `ssl_min_protocol_version` (`None`: unset or empty, no bound).
    pub fn ssl_min_protocol_version(&self) -> Option<TlsVersion> {
        self.ssl_min_protocol_version
    }

    /// `ssl_max_protocol_version` (`None`: unset or empty, no bound).
    pub fn ssl_max_protocol_version(&self) -> Option<TlsVersion> {
        self.ssl_max_protocol_version
    }

    /// `sslcertmode`.
    pub fn sslcertmode(&self) -> SslCertMode {
        self.sslcertmode
    }

    /// `gssencmode` (never `Require` in this build).
    pub fn gssencmode(&self) -> GssEncMode {
        self.gssencmode
    }

    /// Whether TLS SNI is sent: libpq tests the first character of `sslsni` for `1`.
    pub fn sslsni(&self) -> bool {
        self.raw(Keyword::Sslsni)
            .is_some_and(|v| v.first() == Some(&b'1'))
    }

    /// Whether TLS compression is requested: first character of `sslcompression` is `1`.
    pub fn sslcompression(&self) -> bool {
        self.raw(Keyword::Sslcompression)
            .is_some_and(|v| v.first() == Some(&b'1'))
    }

    /// Whether GSS credentials are delegated: first character of `gssdelegation` is `1`.
    pub fn gssdelegation(&self) -> bool {
        self.raw(Keyword::Gssdelegation)
            .is_some_and(|v| v.first() == Some(&b'1'))
    }

    /// The decoded `scram_client_key`, if set.
    pub fn scram_client_key(&self) -> Option<&ScramKey> {
        self.scram_client_key.as_ref()
    }

    /// The decoded `scram_server_key`, if set.
    pub fn scram_server_key(&self) -> Option<&ScramKey> {
        self.scram_server_key.as_ref()
    }

    // ---- server selection and protocol ----

    /// `target_session_attrs` (or what the pgyard API set).
    pub fn target_session_attrs(&self) -> TargetSessionAttrs {
        self.target_session_attrs
    }

    /// Sets the server kind to look for, including pgyard's `PreferPrimary`.
    pub fn set_target_session_attrs(&mut self, value: TargetSessionAttrs) {
        self.target_session_attrs = value;
    }

    /// Builder form of [`ConnectConfig::set_target_session_attrs`].
    pub fn with_target_session_attrs(mut self, value: TargetSessionAttrs) -> Self {
        self.target_session_attrs = value;
        self
    }

    /// `load_balance_hosts`.
    pub fn load_balance_hosts(&self) -> LoadBalanceHosts {
        self.load_balance_hosts
    }

    /// The lowest protocol version accepted (`min_protocol_version`, default 3.0).
    pub fn min_protocol_version(&self) -> ProtocolVersion {
        self.min_protocol_version
    }

    /// The protocol version requested (`max_protocol_version`; default 3.0, or latest when
    /// the minimum is above 3.0).
    pub fn max_protocol_version(&self) -> ProtocolVersion {
        self.max_protocol_version
    }

    // ---- values libpq parses at connect time ----

    /// `connect_timeout` as the blocking connect parses it: unset, zero or negative → no
    /// timeout; otherwise that many seconds per address.
    pub fn connect_timeout(&self) -> Result<Option<Duration>, ConfigError> {
        Ok(self
            .int_option(Keyword::ConnectTimeout)?
            .filter(|&s| s > 0)
            .map(|s| Duration::from_secs(s.unsigned_abs().into())))
    }

    /// Whether TCP keepalives are on: unset → on, `0` → off, any other integer → on.
    pub fn keepalives(&self) -> Result<bool, ConfigError> {
        Ok(self.int_option(Keyword::Keepalives)? != Some(0))
    }

    /// `keepalives_idle` (TCP_KEEPIDLE): `None` = OS default; negative values become 0.
    pub fn keepalives_idle(&self) -> Result<Option<Duration>, ConfigError> {
        Ok(self
            .clamped(Keyword::KeepalivesIdle)?
            .map(Duration::from_secs))
    }

    /// `keepalives_interval` (TCP_KEEPINTVL): `None` = OS default; negative values become 0.
    pub fn keepalives_interval(&self) -> Result<Option<Duration>, ConfigError> {
        Ok(self
            .clamped(Keyword::KeepalivesInterval)?
            .map(Duration::from_secs))
    }

    /// `keepalives_count` (TCP_KEEPCNT): `None` = OS default; negative values become 0.
    pub fn keepalives_count(&self) -> Result<Option<u32>, ConfigError> {
        Ok(self
            .clamped(Keyword::KeepalivesCount)?
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX)))
    }

    /// `tcp_user_timeout` (TCP_USER_TIMEOUT, milliseconds): `None` = OS default; negative
    /// values become 0.
    pub fn tcp_user_timeout(&self) -> Result<Option<Duration>, ConfigError> {
        Ok(self
            .clamped(Keyword::TcpUserTimeout)?
            .map(Duration::from_millis))
    }

    fn int_option(&self, kw: Keyword) -> Result<Option<i32>, ConfigError> {
        self.raw(kw)
            .map(|v| parse_int_param(kw.name(), v))
            .transpose()
    }

    fn clamped(&self, kw: Keyword) -> Result<Option<u64>, ConfigError> {
        Ok(self
            .int_option(kw)?
            .map(|v| u64::from(v.max(0).unsigned_abs())))
    }

    // ---- pgyard extensions (not libpq keywords) ----

    /// How the host list is walked (default [`Strategy::Sequential`], as libpq).
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Sets the strategy.
    pub fn set_strategy(&mut self, strategy: Strategy) {
        self.strategy = strategy;
    }

    /// Builder form of [`ConnectConfig::set_strategy`].
    pub fn with_strategy(mut self, strategy: Strategy) -> Self {
        self.strategy = strategy;
        self
    }

    /// Delay between the starts of two raced attempts (default 250 ms).
    pub fn race_stagger(&self) -> Duration {
        self.race_stagger
    }

    /// Sets the race stagger.
    pub fn set_race_stagger(&mut self, stagger: Duration) {
        self.race_stagger = stagger;
    }

    /// Builder form of [`ConnectConfig::set_race_stagger`].
    pub fn with_race_stagger(mut self, stagger: Duration) -> Self {
        self.race_stagger = stagger;
        self
    }

    /// How long to keep cycling through the hosts until one qualifies (`None`, the default:
    /// one pass, as libpq).
    pub fn failover_timeout(&self) -> Option<Duration> {
        self.failover_timeout
    }

    /// Sets the failover timeout.
    pub fn set_failover_timeout(&mut self, timeout: Option<Duration>) {
        self.failover_timeout = timeout;
    }

    /// Builder form of [`ConnectConfig::set_failover_timeout`].
    pub fn with_failover_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.failover_timeout = timeout;
        self
    }

    /// Whether a target_session_attrs mismatch moves to the slot's next address instead of
    /// the next slot (default false: libpq skips the slot's remaining addresses).
    pub fn keep_trying_addresses_after_mismatch(&self) -> bool {
        self.keep_trying_addresses_after_mismatch
    }

    /// Sets whether a mismatch moves to the next address.
    pub fn set_keep_trying_addresses_after_mismatch(&mut self, keep_trying: bool) {
        self.keep_trying_addresses_after_mismatch = keep_trying;
    }

    /// Builder form of [`ConnectConfig::set_keep_trying_addresses_after_mismatch`].
    pub fn with_keep_trying_addresses_after_mismatch(mut self, keep_trying: bool) -> Self {
        self.keep_trying_addresses_after_mismatch = keep_trying;
        self
    }
}

impl fmt::Debug for ConnectConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        let masked = |v: &Option<Vec<u8>>| v.as_ref().map(|_| "********");
        let table: Vec<(&str, String)> = self
            .options_table
            .iter()
            .map(|(kw, v)| {
                let secret = kw.info().display == crate::keywords::Display::Secret
                    || matches!(kw, Keyword::ScramClientKey | Keyword::ScramServerKey);
                (
                    kw.name(),
                    if secret {
                        "********".to_owned()
                    } else {
                        text(v)
                    },
                )
            })
            .collect();
        f.debug_struct("ConnectConfig")
            .field("slots", &self.slots)
            .field("user", &text(&self.user))
            .field("dbname", &text(&self.dbname))
            .field("password", &masked(&self.password))
            .field("require_auth", &self.require_auth)
            .field("channel_binding", &self.channel_binding)
            .field("sslmode", &self.sslmode)
            .field("sslnegotiation", &self.sslnegotiation)
            .field("ssl_min_protocol_version", &self.ssl_min_protocol_version)
            .field("ssl_max_protocol_version", &self.ssl_max_protocol_version)
            .field("sslcertmode", &self.sslcertmode)
            .field("gssencmode", &self.gssencmode)
            .field("target_session_attrs", &self.target_session_attrs)
            .field("scram_client_key", &self.scram_client_key)
            .field("scram_server_key", &self.scram_server_key)
            .field("load_balance_hosts", &self.load_balance_hosts)
            .field("min_protocol_version", &self.min_protocol_version)
            .field("max_protocol_version", &self.max_protocol_version)
            .field(
                "client_encoding",
                &self.client_encoding.as_deref().map(text),
            )
            .field("strategy", &self.strategy)
            .field("race_stagger", &self.race_stagger)
            .field("failover_timeout", &self.failover_timeout)
            .field(
                "keep_trying_addresses_after_mismatch",
                &self.keep_trying_addresses_after_mismatch,
            )
            .field("options_table", &table)
            .finish()
    }
}

/// Parses a set option with `parse`, or takes the type's libpq default when unset.
fn parse_or_default<T: Default>(
    value: Option<&[u8]>,
    parse: fn(&[u8]) -> Result<T, ConfigError>,
) -> Result<T, ConfigError> {
    value.map_or_else(|| Ok(T::default()), parse)
}
