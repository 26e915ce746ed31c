//! The user list clients log in against, in PgBouncer's `auth_file` format: one user a line,
//! `"name" "password"`, each field in double quotes with `""` for a quote inside; further
//! fields and lines that do not start with `"` are ignored, as PgBouncer ignores them.
//!
//! The password is a SCRAM verifier (`SCRAM-SHA-256$…`, what `pg_authid` stores), an MD5
//! secret (`md5` and 32 hex digits), or anything else as plain text. A plain password gets a
//! SCRAM verifier once, when the file is read (with a random salt, as PostgreSQL would store
//! it), so clients log in by SCRAM and the server login can still use the plain text.

use std::collections::BTreeMap;

use pgyard_types::RngCore;
use pgyard_wire::auth::{is_md5_secret, scram_secret, ScramSecret, StoredSecret};

/// Iterations of the verifier made for a plain password (PostgreSQL's default).
const PLAIN_ITERATIONS: u32 = 4096;

/// Longest file accepted: a user list, not a database.
pub const AUTH_FILE_MAX: usize = 16 << 20;

/// One user's entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Password {
    /// Plain text, with the verifier made for it when the file was read.
    Plain {
        /// The password.
        text: String,
        /// Its SCRAM verifier.
        verifier: ScramSecret,
    },
    /// An `md5…` secret.
    Md5(String),
    /// A SCRAM verifier.
    Scram(ScramSecret),
}

impl Password {
    /// What a client's login is checked against.
    pub fn stored(&self) -> StoredSecret {
        match self {
            Password::Plain { verifier, .. } => StoredSecret::Scram(verifier.clone()),
            Password::Md5(s) => StoredSecret::Md5(s.clone()),
            Password::Scram(s) => StoredSecret::Scram(s.clone()),
        }
    }

    /// The plain text, when the file holds it (a server login can use it as a password).
    pub fn plain(&self) -> Option<&str> {
        match self {
            Password::Plain { text, .. } => Some(text),
            _ => None,
        }
    }
}

/// A parsed auth file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthFile {
    users: BTreeMap<String, Password>,
}

/// Why an auth file cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthFileError {
    /// Larger than [`AUTH_FILE_MAX`].
    #[error("auth file is larger than {AUTH_FILE_MAX} bytes")]
    TooLarge,
    /// A line that cannot be read.
    #[error("auth file line {line}: {reason}")]
    Line {
        /// 1-based line number.
        line: usize,
        /// What is wrong with it.
        reason: &'static str,
    },
}

impl AuthFile {
    /// Parses `text`; `rng` salts the verifiers of plain passwords.
    pub fn parse(text: &str, rng: &mut impl RngCore) -> Result<AuthFile, AuthFileError> {
        if text.len() > AUTH_FILE_MAX {
            return Err(AuthFileError::TooLarge);
        }
        let mut users = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let fail = |reason| AuthFileError::Line {
                line: i + 1,
                reason,
            };
            let line = line.trim_start();
            if !line.starts_with('"') {
                continue;
            }
            let (name, rest) = quoted(line).ok_or(fail("unterminated user name"))?;
            let rest = rest.trim_start();
            if !rest.starts_with('"') {
                return Err(fail("no password after the user name"));
            }
            let (secret, _) = quoted(rest).ok_or(fail("unterminated password"))?;
            if name.is_empty() {
                return Err(fail("empty user name"));
            }
            let password = if secret.starts_with("SCRAM-SHA-256$") {
                let parsed = ScramSecret::parse(&secret);
                Password::Scram(parsed.map_err(|_| fail("malformed SCRAM-SHA-256 verifier"))?)
            } else if is_md5_secret(&secret) {
                Password::Md5(secret)
            } else {
                let mut salt = [0u8; 16];
                rng.fill_bytes(&mut salt);
                let verifier = scram_secret(&secret, &salt, PLAIN_ITERATIONS);
                Password::Plain {
                    text: secret,
                    verifier,
                }
            };
            // A later line for the same user wins, as in PgBouncer.
            users.insert(name, password);
        }
        Ok(AuthFile { users })
    }

    /// The entry of `user`.
    pub fn get(&self, user: &str) -> Option<&Password> {
        self.users.get(user)
    }

    /// How many users the file lists.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether the file lists nobody.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// Reads one `"…"` field at the start of `s` (`""` is a quote); the field and the rest.
fn quoted(s: &str) -> Option<(String, &str)> {
    let body = s.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        if c != '"' {
            out.push(c);
            continue;
        }
        if body[i + 1..].starts_with('"') {
            out.push('"');
            chars.next();
            continue;
        }
        return Some((out, &body[i + 1..]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AuthFile, AuthFileError> {
        AuthFile::parse(text, &mut pgyard_types::rng_from_seed(1))
    }

    #[test]
    fn the_three_kinds_of_password_and_quotes_inside() {
        let text = concat!(
            "; a comment\n",
            "\"alice\" \"plain\"\"pw\" \"extra field\"\n",
            "\"bob\" \"md5f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1f1\"\n",
            "\"carol\" \"SCRAM-SHA-256$4096:c2FsdHNhbHRzYWx0c2FsdA==$",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=:",
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\"\n",
        );
        let f = parse(text).expect("parses");
        assert_eq!(f.len(), 3);
        assert_eq!(f.get("alice").and_then(Password::plain), Some("plain\"pw"));
        assert!(matches!(f.get("bob"), Some(Password::Md5(_))));
        assert!(matches!(f.get("carol"), Some(Password::Scram(_))));
        assert!(f.get("dave").is_none());
    }

    #[test]
    fn a_file_of_comments_lists_nobody() {
        for text in ["", "; only a comment\n", "\n  \nplain words\n"] {
            let f = parse(text).expect("parses");
            assert_eq!((f.is_empty(), f.len()), (true, 0), "{text:?}");
        }
        assert!(!parse("\"u\" \"p\"\n").expect("parses").is_empty());
    }

    #[test]
    fn broken_lines_are_named() {
        let err = |t: &str| parse(t).expect_err(t).to_string();
        assert_eq!(
            err("\"a\" \"b\"\n\"x"),
            "auth file line 2: unterminated user name"
        );
        assert_eq!(
            err("\"x\"\n"),
            "auth file line 1: no password after the user name"
        );
        assert_eq!(err("\"x\" \"y"), "auth file line 1: unterminated password");
        assert_eq!(
            err("\"x\" \"SCRAM-SHA-256$nope\""),
            "auth file line 1: malformed SCRAM-SHA-256 verifier"
        );
    }
}
