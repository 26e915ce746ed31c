//! The accumulated error text (spec §8.4) and the per-attempt record behind it.

use std::fmt;

use crate::{AttemptId, OpenTarget};

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

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

/// The host-identity prefix libpq appends before connecting (spec §8.4).
pub(crate) fn prefix_for(
    kind_is_address: bool,
    host_display: &str,
    port_display: &str,
    target: &OpenTarget,
) -> String {
    match target {
        OpenTarget::Unix(path) => format!(
            "connection to server on socket \"{}\" failed: ",
            String::from_utf8_lossy(path)
        ),
        OpenTarget::Tcp(addr) => {
            let ip = addr.ip().to_string();
            if !kind_is_address && host_display != ip {
                format!(
                    "connection to server at \"{host_display}\" ({ip}), port {port_display} failed: "
                )
            } else {
                format!("connection to server at \"{host_display}\", port {port_display} failed: ")
            }
        }
    }
}
