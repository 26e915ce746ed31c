//! `require_auth`: which authentication exchanges the client accepts (spec §9.5).

use std::fmt;

use super::ConfigError;
use crate::Keyword;

/// One method name `require_auth` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AuthMethod {
    /// Cleartext password (`AuthenticationCleartextPassword`).
    Password,
    /// MD5-hashed password.
    Md5,
    /// GSSAPI.
    Gss,
    /// SSPI.
    Sspi,
    /// The SCRAM-SHA-256 SASL mechanism.
    ScramSha256,
    /// The OAUTHBEARER SASL mechanism.
    OAuth,
    /// No authentication exchange at all (trust, cert, peer).
    None,
}

impl AuthMethod {
    /// Every method, in libpq's documentation order.
    pub const ALL: &'static [AuthMethod] = &[
        AuthMethod::Password,
        AuthMethod::Md5,
        AuthMethod::Gss,
        AuthMethod::Sspi,
        AuthMethod::ScramSha256,
        AuthMethod::OAuth,
        AuthMethod::None,
    ];

    /// The name as written in `require_auth`.
    pub fn as_str(self) -> &'static str {
        match self {
            AuthMethod::Password => "password",
            AuthMethod::Md5 => "md5",
            AuthMethod::Gss => "gss",
            AuthMethod::Sspi => "sspi",
            AuthMethod::ScramSha256 => "scram-sha-256",
            AuthMethod::OAuth => "oauth",
            AuthMethod::None => "none",
        }
    }

    /// Exact, case-sensitive lookup.
    pub fn from_name(name: &[u8]) -> Option<Self> {
        AuthMethod::ALL
            .iter()
            .copied()
            .find(|m| m.as_str().as_bytes() == name)
    }

    /// The authentication request codes this method covers (for non-SASL methods).
    fn request_bits(self) -> u32 {
        match self {
            AuthMethod::Password => bit(auth_request::PASSWORD),
            AuthMethod::Md5 => bit(auth_request::MD5),
            AuthMethod::Gss => bit(auth_request::GSS) | bit(auth_request::GSS_CONT),
            AuthMethod::Sspi => bit(auth_request::SSPI) | bit(auth_request::GSS_CONT),
            AuthMethod::ScramSha256 | AuthMethod::OAuth | AuthMethod::None => 0,
        }
    }
}

impl fmt::Display for AuthMethod {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Authentication request codes of the `AuthenticationXXX` messages (the first int32 of `R`).
pub mod auth_request {
    /// AuthenticationOk.
    pub const OK: u32 = 0;
    /// AuthenticationCleartextPassword.
    pub const PASSWORD: u32 = 3;
    /// AuthenticationMD5Password.
    pub const MD5: u32 = 5;
    /// AuthenticationGSS.
    pub const GSS: u32 = 7;
    /// AuthenticationGSSContinue.
    pub const GSS_CONT: u32 = 8;
    /// AuthenticationSSPI.
    pub const SSPI: u32 = 9;
    /// AuthenticationSASL.
    pub const SASL: u32 = 10;
    /// AuthenticationSASLContinue.
    pub const SASL_CONT: u32 = 11;
    /// AuthenticationSASLFinal.
    pub const SASL_FIN: u32 = 12;
}

const fn bit(code: u32) -> u32 {
    1 << code
}

const SASL_BITS: u32 =
    bit(auth_request::SASL) | bit(auth_request::SASL_CONT) | bit(auth_request::SASL_FIN);

/// The parsed `require_auth` policy, with libpq's bookkeeping: whether the server must run
/// some exchange, the allowed request codes, and the allowed SASL mechanisms.
///
/// Unset means no checks at all. An explicitly empty value is accepted in phase 3 but, as in
/// libpq 18's code, leaves the checks armed with nothing allowed but a server that asks for no
/// authentication (code reading of `fe-auth.c`, not observed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequireAuth {
    raw: Option<Vec<u8>>,
    auth_required: bool,
    allowed_requests: u32,
    scram_allowed: bool,
    oauth_allowed: bool,
}

impl Default for RequireAuth {
    /// Unset: every method allowed, no checks.
    fn default() -> Self {
        RequireAuth {
            raw: None,
            auth_required: false,
            allowed_requests: u32::MAX,
            scram_allowed: true,
            oauth_allowed: true,
        }
    }
}

impl RequireAuth {
    /// Parses the option as libpq 18 does (`None` = unset), with its four error texts.
    pub fn parse(value: Option<&[u8]>) -> Result<Self, ConfigError> {
        let Some(value) = value else {
            return Ok(RequireAuth::default());
        };
        let mut policy = RequireAuth {
            raw: Some(value.to_vec()),
            auth_required: false,
            allowed_requests: 0,
            scram_allowed: false,
            oauth_allowed: false,
        };
        if value.is_empty() {
            return Ok(policy);
        }
        // A plain list starts from nothing allowed and adds; a negated one starts from
        // everything and removes.
        policy.auth_required = true;
        let mut negated = false;
        for (index, part) in value.split(|&b| b == b',').enumerate() {
            let duplicate = || ConfigError::RequireAuthDuplicate {
                method: part.to_vec(),
            };
            let name = if let Some(rest) = part.strip_prefix(b"!") {
                if index == 0 {
                    policy.auth_required = false;
                    policy.allowed_requests = u32::MAX;
                    policy.scram_allowed = true;
                    policy.oauth_allowed = true;
                } else if !negated {
                    return Err(ConfigError::RequireAuthNegativeMixed {
                        method: part.to_vec(),
                    });
                }
                negated = true;
                rest
            } else if negated {
                return Err(ConfigError::RequireAuthPositiveMixed {
                    method: part.to_vec(),
                });
            } else {
                part
            };
            let method = AuthMethod::from_name(name).ok_or_else(|| ConfigError::InvalidValue {
                keyword: Keyword::RequireAuth,
                value: name.to_vec(),
            })?;
            match method {
                AuthMethod::None => {
                    // "none" clears the must-authenticate flag, "!none" sets it; doing either
                    // twice is a duplicate.
                    if policy.auth_required == negated {
                        return Err(duplicate());
                    }
                    policy.auth_required = negated;
                }
                AuthMethod::ScramSha256 | AuthMethod::OAuth => {
                    let slot = if method == AuthMethod::ScramSha256 {
                        &mut policy.scram_allowed
                    } else {
                        &mut policy.oauth_allowed
                    };
                    if *slot != negated {
                        return Err(duplicate());
                    }
                    *slot = !negated;
                }
                _ => {
                    let bits = method.request_bits();
                    if negated {
                        if policy.allowed_requests & bits == 0 {
                            return Err(duplicate());
                        }
                        policy.allowed_requests &= !bits;
                    } else {
                        if policy.allowed_requests & bits == bits {
                            return Err(duplicate());
                        }
                        policy.allowed_requests |= bits;
                    }
                }
            }
        }
        // SASL requests are allowed exactly when some mechanism is.
        let any_sasl = policy.scram_allowed || policy.oauth_allowed;
        if !negated && any_sasl {
            policy.allowed_requests |= SASL_BITS;
        } else if negated && !any_sasl {
            policy.allowed_requests &= !SASL_BITS;
        }
        Ok(policy)
    }

    /// The option text, `None` when unset (then no checks apply).
    pub fn raw(&self) -> Option<&[u8]> {
        self.raw.as_deref()
    }

    /// Whether the option was set (even to the empty string), arming the checks.
    pub fn is_enforced(&self) -> bool {
        self.raw.is_some()
    }

    /// Whether an AuthenticationOk is rejected unless the client completed an exchange
    /// (i.e. `none` is not allowed).
    pub fn auth_required(&self) -> bool {
        self.is_enforced() && self.auth_required
    }

    /// Whether the server may send the authentication request with this code. Always true
    /// when unset; codes outside libpq's known set are never allowed when enforced.
    pub fn allows_request(&self, code: u32) -> bool {
        if !self.is_enforced() {
            return true;
        }
        match code {
            auth_request::PASSWORD
            | auth_request::MD5
            | auth_request::GSS
            | auth_request::GSS_CONT
            | auth_request::SSPI
            | auth_request::SASL
            | auth_request::SASL_CONT
            | auth_request::SASL_FIN => self.allowed_requests & bit(code) != 0,
            _ => false,
        }
    }

    /// Whether `method` is allowed: request codes for the classic methods, the mechanism list
    /// for SASL ones, and "no exchange required" for `none`.
    pub fn allows(&self, method: AuthMethod) -> bool {
        if !self.is_enforced() {
            return true;
        }
        match method {
            AuthMethod::None => !self.auth_required,
            AuthMethod::ScramSha256 => self.scram_allowed,
            AuthMethod::OAuth => self.oauth_allowed,
            _ => {
                let bits = method.request_bits();
                self.allowed_requests & bits == bits
            }
        }
    }
}
