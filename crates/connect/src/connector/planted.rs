//! Planted bugs: realistic mistakes the simulator must catch, switchable only with the
//! `planted-bugs` feature. The machine asks `bug` at each place one would bite, so without
//! the feature every such check is a constant `false`.

use super::Connector;

/// Realistic bugs for the simulator to catch; compiled only with the `planted-bugs` feature
/// and off until switched on with [`Connector::with_planted_bug`].
#[cfg(feature = "planted-bugs")]
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
}

#[derive(Clone, Copy)]
pub(super) enum BugId {
    IgnoreTsa,
    NoTimeout,
    ReuseId,
    NoPass2,
    StaleParams,
    StartupNextAddr,
    AnyAlpn,
}

impl Connector {
    pub(super) fn bug(&self, _b: BugId) -> bool {
        #[cfg(feature = "planted-bugs")]
        {
            let want = match _b {
                BugId::IgnoreTsa => PlantedBug::IgnoreTargetSessionAttrs,
                BugId::NoTimeout => PlantedBug::DropAttemptTimeout,
                BugId::ReuseId => PlantedBug::ReuseClosedAttempt,
                BugId::NoPass2 => PlantedBug::SkipPreferSecondPass,
                BugId::StaleParams => PlantedBug::TrustStaleParameterStatus,
                BugId::StartupNextAddr => PlantedBug::StartupErrorNextAddress,
                BugId::AnyAlpn => PlantedBug::AcceptAnyAlpn,
            };
            self.bugs.contains(&want)
        }
        #[cfg(not(feature = "planted-bugs"))]
        false
    }
}
