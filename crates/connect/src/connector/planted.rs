//! Planted bugs: realistic mistakes the simulator must catch, switchable only with the
//! `planted-bugs` feature. The machine asks `bug` at each place one would bite, so without
//! the feature every such check is a constant `false`.

use super::Connector;

/// Realistic bugs for the simulator to catch, each off until switched on with
/// [`Connector::with_planted_bug`]. The machine names one at each place it would bite; only with
/// the `planted-bugs` feature is the enum exported and can a bug be switched on.
// Without the feature the variants that only `plant_in_conn` names are never built.
#[cfg_attr(not(feature = "planted-bugs"), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlantedBug {
    /// Accept every server regardless of `target_session_attrs`.
    IgnoreTargetSessionAttrs,
    /// Never arm the per-address `connect_timeout`.
    DropAttemptTimeout,
    /// Reuse the closed attempt id for an encryption-fallback reconnect.
    ReuseClosedAttempt,
    /// Skip prefer-standby's (and prefer-primary's) second pass.
    SkipPreferSecondPass,
    /// Carry `in_hot_standby`/`default_transaction_read_only` over from the previous
    /// connection.
    TrustStaleParameterStatus,
    /// Treat 57P03 (cannot connect now) as a reason to try the slot's next address.
    StartupErrorNextAddress,
    /// Accept whatever the server selected by ALPN, or nothing, even for direct TLS.
    AcceptAnyAlpn,
    /// Judge a server read-only by `in_hot_standby` alone, ignoring
    /// `default_transaction_read_only` (a primary in maintenance passes as read-write).
    IgnoreDefaultReadOnly,
    /// Report a connection that broke with a TLS alert as one the server closed, losing the
    /// alert's text (`SSL error: tlsv1 alert unknown ca` for a refused client certificate).
    BrokenWordedAsClosed,
}

impl Connector {
    /// Whether `bug` is switched on: always `false` without the `planted-bugs` feature.
    pub(super) fn bug(&self, _bug: PlantedBug) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            self.bugs.contains(&_bug)
        }
        #[cfg(not(feature = "planted-bugs"))]
        false
    }

    /// The bugs that live in the connection: accepting every server, ignoring
    /// `default_transaction_read_only`, and the previous connection's role state.
    #[cfg(feature = "planted-bugs")]
    pub(super) fn plant_in_conn(&self, mut conn: crate::conn::Conn) -> crate::conn::Conn {
        conn.ignore_check = self.bug(PlantedBug::IgnoreTargetSessionAttrs);
        conn.ignore_dtro = self.bug(PlantedBug::IgnoreDefaultReadOnly);
        if self.bug(PlantedBug::TrustStaleParameterStatus) {
            if let Some((h, d, v)) = self.stale_role {
                conn.inherit_role_state(h, d, v);
            }
        }
        conn
    }

    /// Without the feature no bug lives in the connection.
    #[cfg(not(feature = "planted-bugs"))]
    pub(super) fn plant_in_conn(&self, conn: crate::conn::Conn) -> crate::conn::Conn {
        conn
    }
}
