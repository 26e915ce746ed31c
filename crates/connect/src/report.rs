//! The accumulated error text (spec §8.4) and the per-attempt record behind it.

use std::fmt;

use pgyard_wire::error_fields::{OwnedErrorFields, SqlState};

use crate::{AttemptId, OpenTarget};

/// What kind of failure an attempt (or a whole connect) ended in, for callers that decide
/// without reading texts. The text stays libpq's; this is what it means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The network or the server's momentary state: unreachable, refused, timed out, reset,
    /// a name that did not resolve, the server closing the connection, a server of the wrong
    /// role for `target_session_attrs`. Worth retrying.
    Transient,
    /// Authentication failed or could not proceed, on either side: a wrong password, an
    /// `pg_hba.conf` rejection, no password to send, a `require_auth` or `channel_binding`
    /// refusal, a server certificate that does not verify.
    Authentication,
    /// The configuration cannot work against this server: an invalid option value met at
    /// connect time, TLS required but not offered, a missing certificate file.
    Configuration,
    /// The server broke the protocol: bytes or messages that make no sense at that point.
    Protocol,
    /// The server refused with an ErrorResponse carrying this SQLSTATE (other than the
    /// authentication ones).
    Refused(SqlState),
}

impl FailureKind {
    /// Whether trying again later may succeed: transient failures, and refusals that say
    /// the server cannot take the connection now (too many connections, starting up or
    /// shutting down, out of resources, connection-class errors).
    pub fn is_retryable(&self) -> bool {
        match self {
            FailureKind::Transient => true,
            FailureKind::Refused(s) => {
                matches!(&s.class(), b"08" | b"53" | b"57")
            }
            _ => false,
        }
    }

    /// Whether the server refused the connection, or the credentials, and trying again will
    /// not change that: an authentication failure, or a refusal that is not retryable (a
    /// database that does not exist, no right to connect to it). A pooler ends the logins
    /// waiting on such a server at once instead of holding them to their wait timeout.
    pub fn is_refusal_for_good(&self) -> bool {
        match self {
            FailureKind::Authentication => true,
            FailureKind::Refused(_) => !self.is_retryable(),
            _ => false,
        }
    }
}

/// One entry of the error buffer: either an attempt (a host-identity prefix plus the lines
/// appended while it ran) or a line with no prefix (resolution and port errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptReport {
    /// The connection, when the entry belongs to one.
    pub attempt: Option<AttemptId>,
    /// Index of the host slot in the configuration's slot order.
    pub slot: Option<usize>,
    /// Where the connection went, when it got that far.
    pub target: Option<OpenTarget>,
    /// The host-identity prefix (`connection to server at "h", port 5432 failed: `), empty
    /// for entries without one.
    pub prefix: String,
    /// The lines appended for this entry, each ending in a newline.
    pub text: String,
    /// Whether a race winner cancelled this attempt (its entry is not rendered).
    pub cancelled: bool,
    /// What the entry's failure means.
    pub kind: FailureKind,
    /// The ErrorResponse with which the server ended the attempt, whole (every field as the
    /// server sent it).
    pub server_fields: Option<OwnedErrorFields>,
}

impl AttemptReport {
    /// The entry as libpq would have appended it.
    pub fn render(&self) -> String {
        let mut s = String::with_capacity(self.prefix.len() + self.text.len());
        s.push_str(&self.prefix);
        s.push_str(&self.text);
        s
    }
}

/// Why a connect failed: every attempt, and libpq's accumulated message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct ConnectError {
    /// Every entry of the error buffer, in the order libpq would have appended them.
    pub reports: Vec<AttemptReport>,
}

impl ConnectError {
    /// The exact text of libpq's `PQerrorMessage` after the failed connect (trailing newline
    /// included).
    pub fn message(&self) -> String {
        self.reports
            .iter()
            .filter(|r| !r.cancelled)
            .map(AttemptReport::render)
            .collect()
    }
}

impl ConnectError {
    /// What the failure means: the kind of the last entry libpq renders (the one that ended
    /// the connect), or [`FailureKind::Transient`] when nothing was rendered.
    pub fn kind(&self) -> FailureKind {
        self.last().map_or(FailureKind::Transient, |r| r.kind)
    }

    /// The server's SQLSTATE and primary message, when the entry that ended the connect is a
    /// server's ErrorResponse.
    pub fn server_error(&self) -> Option<(SqlState, String)> {
        let f = self.server_fields()?.fields();
        let message = String::from_utf8_lossy(f.message()?).into_owned();
        Some((f.sqlstate()?, message))
    }

    /// The whole ErrorResponse of [`ConnectError::server_error`], as the server sent it: a
    /// pooler gives it to its client so, DETAIL and HINT included.
    pub fn server_fields(&self) -> Option<&OwnedErrorFields> {
        self.last().and_then(|r| r.server_fields.as_ref())
    }

    fn last(&self) -> Option<&AttemptReport> {
        self.reports
            .iter()
            .rev()
            .find(|r| !r.cancelled && !r.text.is_empty())
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// The host-identity prefix libpq appends before connecting (spec §8.4). Built with
/// `push_str` rather than `format!`: it runs once per attempt, thousands of times a second
/// in the simulator.
pub(crate) fn prefix_for(
    kind_is_address: bool,
    host_display: &str,
    port_display: &str,
    target: &OpenTarget,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(64 + host_display.len());
    match target {
        OpenTarget::Unix(path) => {
            s.push_str("connection to server on socket \"");
            s.push_str(&String::from_utf8_lossy(path));
            s.push_str("\" failed: ");
        }
        OpenTarget::Tcp(addr) => {
            s.push_str("connection to server at \"");
            s.push_str(host_display);
            s.push('"');
            if !kind_is_address {
                let mark = s.len();
                s.push_str(" (");
                match addr.ip() {
                    std::net::IpAddr::V4(v4) => push_ipv4(&mut s, v4),
                    // Writing into a String cannot fail.
                    ip => {
                        let _ = write!(s, "{ip}");
                    }
                }
                // libpq names the address only when it differs from what the user wrote.
                if s[mark + 2..] == *host_display {
                    s.truncate(mark);
                } else {
                    s.push(')');
                }
            }
            s.push_str(", port ");
            s.push_str(port_display);
            s.push_str(" failed: ");
        }
    }
    s
}

/// An address as `IpAddr`'s `Display` writes it, an IPv4 address by hand: a driver names
/// its attempt by address before the socket opens, where the formatting machinery cost some
/// 2,800 instructions of cold code per connect.
pub fn ip_text(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => {
            let mut s = String::with_capacity(15);
            push_ipv4(&mut s, v4);
            s
        }
        ip => ip.to_string(),
    }
}

/// Dotted-quad text of `ip`, as `Ipv4Addr`'s `Display` prints it, without the formatting
/// machinery (a tenth of the instructions).
fn push_ipv4(s: &mut String, ip: std::net::Ipv4Addr) {
    for (i, octet) in ip.octets().into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if octet >= 100 {
            s.push(char::from(b'0' + octet / 100));
        }
        if octet >= 10 {
            s.push(char::from(b'0' + octet / 10 % 10));
        }
        s.push(char::from(b'0' + octet % 10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_text_matches_display() {
        let v4 = std::net::IpAddr::from([10, 0, 100, 255]);
        assert_eq!(ip_text(v4), v4.to_string());
        for v6 in [
            std::net::Ipv6Addr::LOCALHOST,
            std::net::Ipv6Addr::UNSPECIFIED,
        ] {
            assert_eq!(ip_text(v6.into()), v6.to_string());
        }
    }

    #[test]
    fn dotted_quads_match_display() {
        for ip in [
            [0, 0, 0, 0],
            [127, 0, 0, 1],
            [10, 99, 100, 255],
            [1, 20, 109, 200],
        ] {
            let ip = std::net::Ipv4Addr::from(ip);
            let mut s = String::new();
            push_ipv4(&mut s, ip);
            assert_eq!(s, ip.to_string());
        }
    }

    #[test]
    fn prefix_names_the_address_only_when_it_differs() {
        let target = OpenTarget::Tcp("10.0.0.7:5433".parse().expect("addr"));
        assert_eq!(
            prefix_for(false, "db", "5433", &target),
            "connection to server at \"db\" (10.0.0.7), port 5433 failed: "
        );
        assert_eq!(
            prefix_for(false, "10.0.0.7", "5433", &target),
            "connection to server at \"10.0.0.7\", port 5433 failed: "
        );
        assert_eq!(
            prefix_for(true, "10.0.0.7", "5433", &target),
            "connection to server at \"10.0.0.7\", port 5433 failed: "
        );
        let v6 = OpenTarget::Tcp("[::1]:5432".parse().expect("addr"));
        assert_eq!(
            prefix_for(false, "localhost", "5432", &v6),
            "connection to server at \"localhost\" (::1), port 5432 failed: "
        );
        let unix = OpenTarget::Unix(b"/tmp/.s.PGSQL.5432".to_vec());
        assert_eq!(
            prefix_for(false, "/tmp", "5432", &unix),
            "connection to server on socket \"/tmp/.s.PGSQL.5432\" failed: "
        );
    }

    fn entry(text: &str, cancelled: bool, kind: FailureKind) -> AttemptReport {
        AttemptReport {
            attempt: None,
            slot: None,
            target: None,
            prefix: String::new(),
            text: text.into(),
            cancelled,
            kind,
            server_fields: None,
        }
    }

    #[test]
    fn the_kind_is_the_last_entry_rendered_with_text() {
        let e = ConnectError {
            reports: vec![
                entry("session is read-only\n", false, FailureKind::Transient),
                entry(
                    "password authentication failed\n",
                    false,
                    FailureKind::Authentication,
                ),
                // A raced attempt cancelled by the winner's failure is not rendered…
                entry("Connection timed out\n", true, FailureKind::Protocol),
                // …nor is an entry with nothing to say.
                entry("", false, FailureKind::Configuration),
            ],
        };
        assert_eq!(e.kind(), FailureKind::Authentication);
        let none = ConnectError {
            reports: vec![entry("x\n", true, FailureKind::Protocol)],
        };
        assert_eq!(none.kind(), FailureKind::Transient, "nothing rendered");
    }
}
