//! `require_auth` as libpq applies it to what the world's servers send first: trust answers
//! the startup with AuthenticationOk, MD5 asks for a hashed password, SCRAM for SASL. Written
//! from libpq's documentation and `check_expected_areq` (fe-auth.c), not from the machine:
//! AuthenticationOk before the client finished an exchange is refused when the list requires
//! authentication (a positive list without `none`, or a negated one with `!none`); any other
//! request is refused when its method is not allowed, with the method's description.

use pgyard_types::{uniform_inclusive, Rng};

use super::pg::Auth;

/// A `require_auth` value and which of the world's first messages it lets through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequireAuth {
    /// The value as written in the connection string (libpq quotes it in its error).
    pub raw: &'static str,
    /// AuthenticationOk with no exchange before it.
    trust: bool,
    /// AuthenticationMD5Password.
    md5: bool,
    /// AuthenticationSASL offering SCRAM-SHA-256.
    sasl: bool,
}

const fn req(raw: &'static str, trust: bool, md5: bool, sasl: bool) -> RequireAuth {
    RequireAuth {
        raw,
        trust,
        md5,
        sasl,
    }
}

/// The values a client draws from: positive lists (authentication required unless `none` is
/// listed) and negated ones (only `!none` requires it). `!scram-sha-256` and `oauth` are left
/// out: with PostgreSQL 18's OAUTHBEARER, SASL is refused by mechanism, not by request.
const CHOICES: [RequireAuth; 10] = [
    req("scram-sha-256", false, false, true),
    req("md5", false, true, false),
    req("password,md5", false, true, false),
    req("none", true, false, false),
    req("scram-sha-256,none", true, false, true),
    req("md5,scram-sha-256", false, true, true),
    req("!md5", true, false, true),
    req("!password,!md5", true, false, true),
    req("!none", false, true, true),
    req("!password", true, true, true),
];

impl RequireAuth {
    /// One of the values above, uniformly.
    pub fn draw(rng: &mut Rng) -> RequireAuth {
        CHOICES[uniform_inclusive(rng, CHOICES.len() as u64 - 1) as usize]
    }

    /// libpq's reason for refusing what a server authenticating by `auth` sends first, or
    /// `None` when it goes on.
    pub fn refusal(&self, auth: &Auth) -> Option<&'static str> {
        match auth {
            Auth::Trust if !self.trust => Some("server did not complete authentication"),
            Auth::Md5(_) if !self.md5 => Some("server requested a hashed password"),
            Auth::Scram(_) if !self.sasl => Some("server requested SASL authentication"),
            _ => None,
        }
    }

    /// libpq's whole text for the refusal `reason`, newline included.
    pub fn message(&self, reason: &str) -> String {
        format!(
            "authentication method requirement \"{}\" failed: {reason}\n",
            self.raw
        )
    }
}
