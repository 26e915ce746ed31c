//! Planted bugs of the sync engine (`planted-bugs`): realistic mistakes the simulator must
//! catch, each off unless a call switches it on.

/// Realistic bugs for the simulator to catch; compiled only with the `planted-bugs` feature
/// and off unless a call asks for one ([`super::sync_cycle_planted`],
/// [`super::sync_function_planted`]).
#[cfg(feature = "planted-bugs")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PlantedBug {
    /// The update takes the remote slot's positions even when they precede the synced slot's
    /// (`update_local_synced_slot` without its "remote behind local" check): a new synced
    /// slot goes back to a `restart_lsn` whose WAL the standby may have removed.
    TakePrecedingRemote,
}

/// The planted bug in force (never anything without the `planted-bugs` feature).
#[cfg(feature = "planted-bugs")]
pub(super) type Bug = Option<PlantedBug>;
#[cfg(not(feature = "planted-bugs"))]
pub(super) type Bug = Option<std::convert::Infallible>;

/// Whether the planted bug skips the "remote behind local" check.
#[cfg(feature = "planted-bugs")]
pub(super) fn takes_preceding_remote(bug: Bug) -> bool {
    bug == Some(PlantedBug::TakePrecedingRemote)
}
#[cfg(not(feature = "planted-bugs"))]
pub(super) fn takes_preceding_remote(_: Bug) -> bool {
    false
}
