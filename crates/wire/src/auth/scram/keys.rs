//! [`ScramKeys`]: what a proven SCRAM login leaves a server holding, enough to log in again
//! to another server that stores the same verifier.

use std::fmt;

use super::KEY_LEN;

/// ClientKey and ServerKey of one SCRAM-SHA-256 verifier, with the salt and iteration count
/// they belong to.
///
/// A server learns ClientKey from a client's proof (proof XOR ClientSignature), so a proxy that
/// checked a client against a verifier can log in as that user to a server storing the *same*
/// verifier without ever seeing the password — PgBouncer's SCRAM pass-through. A server whose
/// verifier has another salt or iteration count needs the password itself.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramKeys {
    /// PBKDF2 iteration count of the verifier.
    pub iterations: u32,
    /// The verifier's salt.
    pub salt: Vec<u8>,
    /// `HMAC(SaltedPassword, "Client Key")`.
    pub client_key: [u8; KEY_LEN],
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: [u8; KEY_LEN],
}

impl ScramKeys {
    /// Whether these keys answer a server that sent this salt and iteration count.
    pub fn fits(&self, salt: &[u8], iterations: u32) -> bool {
        self.iterations == iterations && self.salt == salt
    }
}

impl fmt::Debug for ScramKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The keys log in as the user: they stay out of logs.
        f.debug_struct("ScramKeys")
            .field("iterations", &self.iterations)
            .field("salt_len", &self.salt.len())
            .finish_non_exhaustive()
    }
}
