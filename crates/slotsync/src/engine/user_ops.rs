//! Promotion, and the user operations a standby (or a promoted server) refuses on synced
//! slots.

use crate::error::SlotOpError;
use crate::input::Version;
use crate::row::SlotRow;

use super::{Action, DropReason};

/// Promotion: slots not yet sync-ready are dropped, the rest stay (with `synced = true`).
pub fn promote(local_slots: &[SlotRow]) -> (Vec<Action>, Vec<SlotRow>) {
    let mut actions = Vec::new();
    let mut after = Vec::new();
    for row in local_slots {
        if row.synced && row.temporary {
            actions.push(Action::Drop {
                slot: row.slot_name.clone(),
                datoid: None,
                reason: DropReason::NotSyncReady,
            });
            continue;
        }
        let mut row = row.clone();
        if row.synced {
            // Set to the promotion time, which a pure engine does not know.
            row.inactive_since = None;
        }
        after.push(row);
    }
    (actions, after)
}

/// A user's slot operation, checked as a standby (or a promoted server) checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UserOp {
    /// `pg_logical_slot_get_changes`, `_peek_changes`, `pg_replication_slot_advance`,
    /// `START_REPLICATION SLOT … LOGICAL` (for an invalidated slot on 17, the texts are
    /// `get_changes`'s: 17 refuses there when decoding starts, not when the slot is acquired).
    Decode,
    /// `pg_drop_replication_slot` / `DROP_REPLICATION_SLOT`.
    Drop,
    /// `ALTER_REPLICATION_SLOT` (with the failover value if given).
    Alter {
        /// `FAILOVER` option.
        failover: Option<bool>,
    },
    /// Creating a logical slot.
    Create {
        /// Temporary slot.
        temporary: bool,
        /// Failover slot.
        failover: bool,
    },
}

/// Whether a `version` server allows `op` on slot `name`; the error is the server's.
pub fn check_user_op(
    version: Version,
    local_slots: &[SlotRow],
    in_recovery: bool,
    name: &str,
    op: &UserOp,
) -> Result<(), SlotOpError> {
    let slot = local_slots.iter().find(|r| r.slot_name == name);
    match op {
        UserOp::Create {
            temporary,
            failover,
        } => {
            if *failover && in_recovery {
                return Err(SlotOpError::FailoverOnStandby);
            }
            if *failover && *temporary {
                return Err(SlotOpError::FailoverTemporary);
            }
            if slot.is_some() {
                return Err(SlotOpError::AlreadyExists(name.to_owned()));
            }
            Ok(())
        }
        UserOp::Decode => {
            let slot = slot.ok_or_else(|| SlotOpError::NoSuchSlot(name.to_owned()))?;
            let synced = in_recovery && slot.synced;
            // 17 refuses a synced slot when the decoding context is made, before it looks at
            // the invalidation; 18 refuses an invalidated slot already when acquiring it.
            if version == Version::V17 && synced {
                return Err(SlotOpError::CannotUseSynced(name.to_owned()));
            }
            if let Some(cause) = slot.invalidation_reason {
                return Err(match version {
                    Version::V17 => SlotOpError::InvalidatedV17(name.to_owned(), cause),
                    Version::V18 => SlotOpError::Invalidated(name.to_owned(), cause),
                });
            }
            if synced {
                return Err(SlotOpError::CannotUseSynced(name.to_owned()));
            }
            Ok(())
        }
        UserOp::Drop => {
            let slot = slot.ok_or_else(|| SlotOpError::NoSuchSlot(name.to_owned()))?;
            if in_recovery && slot.synced {
                return Err(SlotOpError::CannotDropSynced(name.to_owned()));
            }
            Ok(())
        }
        UserOp::Alter { failover } => {
            let slot = slot.ok_or_else(|| SlotOpError::NoSuchSlot(name.to_owned()))?;
            if in_recovery && slot.synced {
                return Err(SlotOpError::CannotAlterSynced(name.to_owned()));
            }
            if in_recovery && *failover == Some(true) {
                return Err(SlotOpError::AlterFailoverOnStandby);
            }
            Ok(())
        }
    }
}
