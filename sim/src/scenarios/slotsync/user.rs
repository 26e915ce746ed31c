//! Someone on a standby reaches for its synced slot: decodes from it, drops it or alters it.
//! PostgreSQL's documentation of logical replication failover says a synced slot cannot be
//! used for decoding, dropped or altered on the standby (it is being synchronized from the
//! primary); an invalidated one cannot be accessed at all; once the standby is promoted the
//! slot is its own and a subscriber decodes from it. `standby-refuses-synced-slots` holds
//! `check_user_op` to that, with the server's DETAIL and HINT.

use pgyard_slotsync::{check_user_op, InvalidationCause, SlotOpError, SlotRow, UserOp, Version};
use pgyard_types::{uniform_inclusive, Rng};

use super::{fail, SLOT};
use crate::Violation;

/// The operations tried, one drawn per attempt.
const OPS: [UserOp; 4] = [
    UserOp::Decode,
    UserOp::Drop,
    UserOp::Alter { failover: None },
    UserOp::Alter {
        failover: Some(false),
    },
];

/// The server's answer to `op` on slot `s` of a server in recovery (`in_recovery`) or not.
/// PostgreSQL 17 looks at the invalidation only once the decoding context is made, after
/// refusing a synced slot, and words it otherwise; 18 refuses an invalidated slot when it
/// acquires it.
fn expected(
    version: Version,
    s: &SlotRow,
    op: &UserOp,
    in_recovery: bool,
) -> Result<(), SlotOpError> {
    let name = s.slot_name.clone();
    let synced = in_recovery && s.synced;
    match (op, s.invalidation_reason, synced) {
        (UserOp::Decode, Some(_), true) if version == Version::V17 => {
            Err(SlotOpError::CannotUseSynced(name))
        }
        (UserOp::Decode, Some(cause), _) if version == Version::V17 => {
            Err(SlotOpError::InvalidatedV17(name, cause))
        }
        (UserOp::Decode, Some(cause), _) => Err(SlotOpError::Invalidated(name, cause)),
        (UserOp::Decode, None, true) => Err(SlotOpError::CannotUseSynced(name)),
        (UserOp::Drop, _, true) => Err(SlotOpError::CannotDropSynced(name)),
        (UserOp::Alter { .. }, _, true) => Err(SlotOpError::CannotAlterSynced(name)),
        _ => Ok(()),
    }
}

/// Now and then (about one tick in ten, from `rng`, a stream of its own) someone on standby
/// `i` tries an operation on its synced slot; `in_recovery` is false after promotion.
pub(super) fn attempt(
    rng: &mut Rng,
    tick: u64,
    i: usize,
    local: &[SlotRow],
    in_recovery: bool,
) -> Result<(), Violation> {
    if uniform_inclusive(rng, 9) != 0 {
        return Ok(());
    }
    let op = &OPS[uniform_inclusive(rng, OPS.len() as u64 - 1) as usize];
    let Some(s) = local.iter().find(|s| s.slot_name == SLOT) else {
        return Ok(());
    };
    for version in [Version::V18, Version::V17] {
        let want = expected(version, s, op, in_recovery);
        let got = check_user_op(version, local, in_recovery, SLOT, op);
        if got != want || !worded(&got) {
            return Err(fail(
                "standby-refuses-synced-slots",
                format!(
                    "tick {tick}: {op:?} on standby{}'s slot {s:?} (in recovery: {in_recovery}, \
                     {version:?}) gave {got:?} (detail {:?}), the server's answer is {want:?}",
                    i + 1,
                    got.as_ref().err().map(SlotOpError::detail)
                ),
            ));
        }
    }
    Ok(())
}

/// Whether a refusal carries the server's DETAIL and HINT: a synced slot's refusals say it
/// is being synchronized (decoding adds a hint); 18 names an invalidation's cause, 17 says
/// whether the slot ran past the reserved WAL or conflicted with recovery.
fn worded(got: &Result<(), SlotOpError>) -> bool {
    match got {
        Err(
            e @ (SlotOpError::CannotUseSynced(_)
            | SlotOpError::CannotDropSynced(_)
            | SlotOpError::CannotAlterSynced(_)),
        ) => {
            let hint_due = matches!(e, SlotOpError::CannotUseSynced(_));
            e.detail()
                .is_some_and(|d| d.contains("being synchronized from the primary"))
                && e.hint().is_some() == hint_due
        }
        Err(e @ SlotOpError::Invalidated(_, cause)) => {
            e.detail().is_some_and(|d| d.contains(cause.as_str()))
        }
        Err(e @ SlotOpError::InvalidatedV17(_, cause)) => {
            let why = match cause {
                InvalidationCause::WalRemoved => "it exceeded the maximum reserved size",
                _ => "it was conflicting with recovery",
            };
            e.detail().is_some_and(|d| d.contains(why)) && e.hint().is_none()
        }
        _ => true,
    }
}
