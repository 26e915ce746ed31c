//! `report-worded-as-libpq`: a failed connect's report says what the world did, in libpq's
//! words, rendered here on their own rather than by the machine's code. Each attempt's
//! entry starts with libpq's host-identity prefix for the slot and the address it went to;
//! an attempt the world refused or timed out says the system's text for it; one a server
//! ended with a FATAL error carries that error's kind; and the whole message, its `Display`
//! and its kind are those of the entries libpq renders.

use pgyard_connect::{
    AttemptId, AttemptReport, ConnectError, FailureKind, IoErrorKind, OpenTarget,
};
use pgyard_conninfo::typed::{HostSlot, SlotKind};
use pgyard_wire::error_fields::SqlState;
use pgyard_wire::frame::ProtocolVersion;

use super::invariants::{violation, CheckResult, Heard, ALERT_TEXT};
use super::World;

impl World {
    /// The failure report of client `i`'s connect, against the world's record of it.
    pub(super) fn check_wording(&self, i: usize, e: &ConnectError) -> CheckResult {
        let c = &self.clients[i];
        let bad = |what: String| {
            Err(violation(
                "report-worded-as-libpq",
                format!("client {i}: {what}"),
            ))
        };
        let shown: Vec<&AttemptReport> = e.reports.iter().filter(|r| !r.cancelled).collect();
        let whole: String = shown
            .iter()
            .flat_map(|r| [&r.prefix, &r.text])
            .map(String::as_str)
            .collect();
        if !displays_as(e, &whole) {
            return bad(format!(
                "the message is {:?}, its entries say {whole:?}",
                e.to_string()
            ));
        }
        // libpq's connect fails with the kind of the last entry it rendered with text.
        let last = shown.iter().rev().find(|r| !r.text.is_empty());
        let want_kind = last.map_or(FailureKind::Transient, |r| r.kind);
        if e.kind() != want_kind {
            return bad(format!(
                "the connect's kind is {:?}, its last entry's {want_kind:?}",
                e.kind()
            ));
        }
        // The entry's slot index is the machine's (load balancing reorders its slots), so
        // the prefix must be libpq's for one of the client's slots and the entry's address.
        let slots = c.spec.config.slots();
        for r in &shown {
            let Some(OpenTarget::Tcp(addr)) = &r.target else {
                continue;
            };
            let ip = pgyard_connect::ip_text(addr.ip());
            if !slots.iter().any(|s| prefix_is(s, &ip, &r.prefix)) {
                return bad(format!(
                    "entry of a{:?} starts {:?}, which libpq says for no slot at {addr}",
                    r.attempt, r.prefix
                ));
            }
        }
        for (attempt, what) in &c.watch.heard {
            let Some(r) = shown.iter().find(|r| r.attempt == Some(*attempt)) else {
                continue;
            };
            let fits = match what {
                Heard::OpenFailed(k) => {
                    r.kind == FailureKind::Transient
                        && r.text.contains(&format!("{}\n", system_text(k)))
                }
                // NegotiateProtocolVersion comes before any FATAL; one below the client's
                // minimum ends the connect before libpq reads the error.
                Heard::Fatal(code) => {
                    r.kind == fatal_kind(code) || c.watch.heard.iter().any(|(a, h)| {
                        a == attempt
                            && matches!(h, Heard::Negotiated(v) if *v < c.spec.startup.min_version)
                    })
                }
                Heard::Negotiated(v) => negotiation_fits(r, *v, c.spec.startup.min_version),
                Heard::Tls { direct, alpn } => alpn_fits(r, *direct, *alpn),
                Heard::Stuffed => {
                    r.kind == FailureKind::Protocol
                        && r.text
                            .contains("received unencrypted data after SSL response\n")
                }
                Heard::AuthRefused(reason) => {
                    let want = c.spec.require_auth.map(|a| a.message(reason));
                    r.kind == FailureKind::Authentication && Some(&r.text) == want.as_ref()
                }
                // Like a closed connection (the attempt ends, the connect goes on as libpq
                // would), in the alert's words.
                Heard::Broken => {
                    r.kind == FailureKind::Transient && r.text.contains(&format!("{ALERT_TEXT}\n"))
                }
            };
            if !fits {
                return bad(format!(
                    "a{} was told {what:?}, its entry is {:?} of kind {:?}",
                    attempt.0, r.text, r.kind
                ));
            }
        }
        // The requirement's refusal is said only where the world's server sent what it refuses.
        for r in &shown {
            let refused = |a: &AttemptId| {
                c.watch
                    .heard
                    .iter()
                    .any(|(h, what)| h == a && matches!(what, Heard::AuthRefused(_)))
            };
            if r.text.contains("authentication method requirement")
                && !r.attempt.as_ref().is_some_and(refused)
            {
                let a = r.attempt.map_or(0, |a| a.0);
                return bad(format!(
                    "a{a} says {:?}, but its server sent nothing the requirement refuses",
                    r.text
                ));
            }
        }
        Ok(())
    }
}

/// Whether `value`'s `Display` writes exactly `want`, compared as it is written: every
/// failed connect is checked, and the message is long enough that a copy showed.
fn displays_as(value: &impl std::fmt::Display, want: &str) -> bool {
    struct Compare<'a> {
        rest: &'a str,
        same: bool,
    }
    impl std::fmt::Write for Compare<'_> {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            match self.rest.strip_prefix(s) {
                Some(rest) if self.same => self.rest = rest,
                _ => self.same = false,
            }
            Ok(())
        }
    }
    let mut c = Compare {
        rest: want,
        same: true,
    };
    use std::fmt::Write as _;
    let _ = write!(c, "{value}");
    c.same && c.rest.is_empty()
}

/// Whether `text` is libpq's host-identity prefix for `slot` connecting to an address whose
/// text is `ip`: the address slot's hostaddr, else the host name followed by the address when
/// it reads differently, then the port (5432 when none or an empty one is given). Matched
/// piece by piece, as it is asked for every slot of every entry of every failed connect.
fn prefix_is(slot: &HostSlot, ip: &str, text: &str) -> bool {
    fn lossy(b: Option<&[u8]>) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(b.unwrap_or_default())
    }
    let address = slot.kind() == SlotKind::Address;
    let host = if address {
        lossy(slot.hostaddr())
    } else {
        lossy(slot.host())
    };
    let port = match slot.port_raw() {
        Some(p) if !p.is_empty() => lossy(Some(p)),
        _ => "5432".into(),
    };
    let named = !address && ip != host;
    let rest = text
        .strip_prefix("connection to server at \"")
        .and_then(|t| t.strip_prefix(&*host))
        .and_then(|t| t.strip_prefix('"'));
    let rest = match rest {
        Some(t) if named => t
            .strip_prefix(" (")
            .and_then(|t| t.strip_prefix(ip))
            .and_then(|t| t.strip_prefix(')')),
        other => other,
    };
    rest.and_then(|t| t.strip_prefix(", port "))
        .and_then(|t| t.strip_prefix(&*port))
        .is_some_and(|t| t == " failed: ")
}

/// The C library's `strerror` text for the errors the world gives.
fn system_text(k: &IoErrorKind) -> &str {
    match k {
        IoErrorKind::ConnectionRefused => "Connection refused",
        IoErrorKind::TimedOut => "Connection timed out",
        IoErrorKind::ConnectionReset => "Connection reset by peer",
        IoErrorKind::Other(s) => s,
        _ => "",
    }
}

/// A FATAL error's kind: class 28 refuses the credentials, anything else the connection.
fn fatal_kind(code: &[u8; 5]) -> FailureKind {
    if code.starts_with(b"28") {
        FailureKind::Authentication
    } else {
        FailureKind::Refused(SqlState::from_array(*code))
    }
}

/// Whether an entry fits a completed handshake: libpq refuses one whose server selected
/// another protocol than `postgresql` by ALPN, or none when TLS started directly, in these
/// words; any other handshake goes on, so nothing about ALPN may be said of it.
fn alpn_fits(r: &AttemptReport, direct: bool, alpn: Option<&[u8]>) -> bool {
    let refusal = match alpn {
        Some(p) if p == b"postgresql" => None,
        Some(_) => Some("SSL connection was established with unexpected ALPN protocol\n"),
        None if direct => Some(
            "direct SSL connection was established without ALPN protocol negotiation extension\n",
        ),
        None => None,
    };
    match refusal {
        Some(text) => r.kind == FailureKind::Protocol && r.text.contains(text),
        None => !r.text.contains("ALPN"),
    }
}

/// Whether an entry fits a well-formed NegotiateProtocolVersion offering `offered` to a
/// client whose `min_protocol_version` is `min`: below it, libpq's configuration error;
/// otherwise nothing about the negotiation, which libpq accepts.
fn negotiation_fits(r: &AttemptReport, offered: ProtocolVersion, min: ProtocolVersion) -> bool {
    if offered < min {
        let text = format!(
            "server only supports protocol version {}.{}, but \"min_protocol_version\" was set \
             to {}.{}\n",
            offered.major(),
            offered.minor(),
            min.major(),
            min.minor()
        );
        return r.kind == FailureKind::Configuration && r.text.contains(&text);
    }
    !r.text.contains("protocol negotiation message")
}

#[cfg(test)]
mod tests {
    #[test]
    fn displays_as_compares_the_whole_text() {
        assert!(super::displays_as(&"ab", "ab"));
        assert!(super::displays_as(&"", ""));
        assert!(!super::displays_as(&"ab", "abc"));
        assert!(!super::displays_as(&"abc", "ab"));
        assert!(!super::displays_as(&"ax", "ab"));
        assert!(super::displays_as(&format_args!("{}-{}", 1, "z"), "1-z"));
    }
}
