//! [`ScramSecret`]: the verifier PostgreSQL stores in `pg_authid`, derived, parsed and printed.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rand_core::RngCore;

use super::parse::parse_decimal;
use super::{Keys, DEFAULT_SALT_LEN, KEY_LEN};
use crate::auth::saslprep::saslprep_password;

/// A stored SCRAM-SHA-256 verifier, as in `pg_authid.rolpassword`:
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64 fields).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    /// PBKDF2 iteration count (at least 1).
    pub iterations: u32,
    /// The salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: [u8; KEY_LEN],
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: [u8; KEY_LEN],
}

/// Why a stored SCRAM secret could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid SCRAM secret: {0}")]
pub struct SecretError(&'static str);

/// The verifier PostgreSQL stores for `password` with `salt` and `iterations` (0 counts as 1);
/// its `Display` is the `pg_authid` text.
pub fn scram_secret(password: impl AsRef<[u8]>, salt: &[u8], iterations: u32) -> ScramSecret {
    ScramSecret::new(password, salt, iterations)
}

impl ScramSecret {
    /// See [`scram_secret`].
    pub fn new(password: impl AsRef<[u8]>, salt: &[u8], iterations: u32) -> Self {
        let iterations = iterations.max(1);
        let password = saslprep_password(password.as_ref());
        let keys = Keys::derive(&password, salt, iterations);
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        }
    }

    /// [`new`](Self::new) with a [`DEFAULT_SALT_LEN`]-byte salt drawn from `rng`.
    pub fn from_rng(password: impl AsRef<[u8]>, iterations: u32, rng: &mut impl RngCore) -> Self {
        let mut salt = [0u8; DEFAULT_SALT_LEN];
        rng.fill_bytes(&mut salt);
        Self::new(password, &salt, iterations)
    }

    /// Parses the `pg_authid` text form.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let rest = text
            .strip_prefix("SCRAM-SHA-256$")
            .ok_or(SecretError("does not start with SCRAM-SHA-256$"))?;
        let (params, keys) = rest.split_once('$').ok_or(SecretError("missing '$'"))?;
        let (iterations, salt) = params
            .split_once(':')
            .ok_or(SecretError("missing ':' after iterations"))?;
        let (stored, server) = keys
            .split_once(':')
            .ok_or(SecretError("missing ':' between keys"))?;
        let iterations = parse_decimal(iterations.as_bytes())
            .filter(|&i| i >= 1)
            .ok_or(SecretError("invalid iteration count"))?;
        let salt = BASE64
            .decode(salt)
            .map_err(|_| SecretError("invalid salt"))?;
        let key = |text: &str, what: &'static str| -> Result<[u8; KEY_LEN], SecretError> {
            let bytes = BASE64.decode(text).map_err(|_| SecretError(what))?;
            <[u8; KEY_LEN]>::try_from(bytes.as_slice()).map_err(|_| SecretError(what))
        };
        Ok(ScramSecret {
            iterations,
            salt,
            stored_key: key(stored, "invalid StoredKey")?,
            server_key: key(server, "invalid ServerKey")?,
        })
    }
}

impl FromStr for ScramSecret {
    type Err = SecretError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScramSecret::parse(s)
    }
}

impl fmt::Display for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

impl fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are password equivalents for SCRAM; keep them out of logs.
        f.debug_struct("ScramSecret")
            .field("iterations", &self.iterations)
            .field("salt", &BASE64.encode(&self.salt))
            .finish_non_exhaustive()
    }
}
