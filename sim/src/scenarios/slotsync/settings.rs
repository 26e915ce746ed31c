//! Standbys configured wrong for slot synchronization for a while, and the syncs nobody should
//! run: what the engine must refuse, with which error, and what the readiness check must warn
//! about, judged from the setting the world broke (not from the engine's own checks).
//!
//! A drawn standby runs, for a window of ticks, with one setting slot synchronization needs
//! set wrong: `wal_level = replica` (from the start: the setting needs a restart, and nothing
//! has synced before it), `hot_standby_feedback = off` (to the end of the run; its physical
//! slot on the primary then holds no `catalog_xmin`, so the primary's vacuum may remove catalog
//! rows its synced slots need, and replaying that removal invalidates them), or a `primary_conninfo` without
//! `dbname` (streaming needs none; slot synchronization does). Each of these settings leaves
//! physical streaming as it was (the worker's life around them is in `worker.rs`). In worker
//! mode an operator also calls `pg_sync_replication_slots()` now and then while the worker
//! runs.

use pgyard_slotsync::engine::worker_launch_check;
use pgyard_slotsync::{
    sync_function, Outcome, SlotRow, Standby, StandbySlotList, SyncError, WalLevel,
};
use pgyard_types::{side_stream, uniform_inclusive, Rng};

use super::cluster::Cluster;
use super::{fail, primary_rows, standby_input, Facts, SLOT};
use crate::publisher::Publisher;
use crate::Violation;

/// The RNG stream the misconfigurations are drawn from: seeds without one run exactly the
/// world they ran before it existed.
const STREAM: u64 = 0x6d69_7363;

/// The RNG stream the spelling of `synchronized_standby_slots` is drawn from.
const SPELL_STREAM: u64 = 0x7370_656c;

/// `synchronized_standby_slots` naming `names` (lowercase slot names), each spelled one of
/// the ways `SplitIdentifierString` reads as that name: as is, in capitals or mixed case
/// (unquoted names fold to lowercase), double-quoted, with spaces and tabs around it and
/// around the commas. Drawn from a stream of its own.
pub(super) fn spell_list<'a>(rng: &Rng, names: impl Iterator<Item = &'a String>) -> String {
    let mut rng = side_stream(rng, SPELL_STREAM);
    let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
    let pad = |rng: &mut Rng| ["", " ", "  ", "\t", " \t "][r(rng, 4) as usize];
    let mut out = String::new();
    for (k, name) in names.enumerate() {
        if k > 0 {
            out.push_str(pad(&mut rng));
            out.push(',');
        }
        out.push_str(pad(&mut rng));
        match r(&mut rng, 3) {
            0 => out.push_str(name),
            1 => out.push_str(&name.to_ascii_uppercase()),
            2 => {
                let mixed: String = name
                    .chars()
                    .enumerate()
                    .map(|(j, c)| {
                        if j % 2 == 0 {
                            c.to_ascii_uppercase()
                        } else {
                            c
                        }
                    })
                    .collect();
                out.push_str(&mixed);
            }
            _ => {
                out.push('"');
                out.push_str(name);
                out.push('"');
            }
        }
        out.push_str(pad(&mut rng));
    }
    out
}

/// One setting set wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Wrong {
    /// `wal_level = replica`.
    WalLevel,
    /// `hot_standby_feedback = off`.
    Feedback,
    /// `primary_conninfo` without `dbname`.
    Dbname,
}

/// A standby misconfigured over ticks `from..until`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Misconfig {
    /// Which standby.
    pub standby: usize,
    /// What is wrong.
    pub wrong: Wrong,
    /// First tick it is wrong.
    pub from: u64,
    /// First tick it is right again.
    pub until: u64,
}

impl Misconfig {
    /// Draws one in a third of the seeds, from a stream of its own.
    pub fn draw(rng: &Rng, ticks: u64, standbys: u64) -> Option<Misconfig> {
        let mut rng = side_stream(rng, STREAM);
        let r = |rng: &mut Rng, max: u64| uniform_inclusive(rng, max);
        if r(&mut rng, 2) != 0 {
            return None;
        }
        let standby = r(&mut rng, standbys - 1) as usize;
        let wrong = [Wrong::WalLevel, Wrong::Feedback, Wrong::Dbname][r(&mut rng, 2) as usize];
        let from = if wrong == Wrong::WalLevel {
            0
        } else {
            r(&mut rng, ticks)
        };
        // Feedback stays off: once it is back, a removal made meanwhile may still wait in WAL
        // the standby received and has not replayed, which no snapshot shows (docs/slotsync.md).
        let until = if wrong == Wrong::Feedback {
            u64::MAX
        } else {
            from + 1 + r(&mut rng, ticks / 2)
        };
        Some(Misconfig {
            standby,
            wrong,
            from,
            until,
        })
    }

    /// Whether standby `i` has it at `tick`.
    pub fn hits(&self, i: usize, tick: u64) -> bool {
        self.standby == i && (self.from..self.until).contains(&tick)
    }

    /// The standby running without `hot_standby_feedback` at `tick`, if this is that.
    pub fn feedback_off_at(&self, tick: u64) -> Option<usize> {
        (self.wrong == Wrong::Feedback && self.hits(self.standby, tick)).then_some(self.standby)
    }
}

/// What is wrong with standby `i` at `tick`, if anything.
pub(super) fn wrong_at(m: Option<Misconfig>, i: usize, tick: u64) -> Option<Wrong> {
    m.filter(|m| m.hits(i, tick)).map(|m| m.wrong)
}

/// Sets `wrong` in the standby's settings.
pub(super) fn apply(sb: &mut Standby, wrong: Option<Wrong>) {
    match wrong {
        Some(Wrong::WalLevel) => sb.wal_level = WalLevel::Replica,
        Some(Wrong::Feedback) => sb.hot_standby_feedback = false,
        Some(Wrong::Dbname) => sb.primary_conninfo = "host=primary".into(),
        None => {}
    }
}

/// The error the server raises for `wrong`, in its words.
pub(super) fn refusal(wrong: Wrong) -> SyncError {
    match wrong {
        Wrong::WalLevel => SyncError::WalLevelTooLow,
        Wrong::Feedback => SyncError::HotStandbyFeedbackOff,
        Wrong::Dbname => SyncError::DbnameMissing,
    }
}

/// What the check's warning about `wrong` must mention (the setting's name, as the server
/// quotes it).
pub(super) fn warning_key(wrong: Wrong) -> &'static str {
    match wrong {
        Wrong::WalLevel => "\"wal_level\"",
        Wrong::Feedback => "\"hot_standby_feedback\"",
        Wrong::Dbname => "\"dbname\"",
    }
}

/// Whether `e` refuses a sync for a setting (of the standby, or the primary's slot), as
/// opposed to something about the slots or the WAL.
pub(super) fn is_setting_error(e: &SyncError) -> bool {
    matches!(
        e,
        SyncError::NotInRecovery
            | SyncError::WalLevelTooLow
            | SyncError::PrimarySlotNameUnset
            | SyncError::HotStandbyFeedbackOff
            | SyncError::PrimaryConninfoUnset
            | SyncError::DbnameMissing
            | SyncError::ConninfoSyntax(_)
            | SyncError::Concurrent
            | SyncError::PromotionTriggered
            | SyncError::RemoteIsStandby
            | SyncError::PrimarySlotMissing(_)
    )
}

/// A refused sync changes nothing and names exactly the expected error; an accepted one is
/// not refused for a setting (`expected`: the error the world calls for, if any).
pub(super) fn judge_refusal(
    tick: u64,
    i: usize,
    expected: Option<&SyncError>,
    got: Option<&SyncError>,
    changed: bool,
) -> Result<(), Violation> {
    let bad = match (expected, got) {
        (Some(e), Some(g)) => e != g || changed,
        (Some(_), None) => true,
        (None, Some(g)) => is_setting_error(g),
        (None, None) => false,
    };
    if !bad {
        return match got.filter(|g| g.sqlstate() != refusal_sqlstate(g)) {
            Some(g) => Err(fail(
                "sync-refused-exactly-for-settings",
                format!(
                    "tick {tick}: a sync on standby{} was refused with {g:?} under SQLSTATE \
                     {:?}, the server's is {}",
                    i + 1,
                    g.sqlstate(),
                    refusal_sqlstate(g)
                ),
            )),
            None => Ok(()),
        };
    }
    Err(fail(
        "sync-refused-exactly-for-settings",
        format!(
            "tick {tick}: a sync on standby{} ended with {got:?} (changed slots: {changed}); \
             its settings call for {expected:?}",
            i + 1
        ),
    ))
}

/// The SQLSTATE PostgreSQL's `slotsync.c` raises a refusal the world calls for under: a
/// setting slot synchronization needs is `invalid_parameter_value`; a server out of recovery,
/// a promotion under way or another sync running is `object_not_in_prerequisite_state`; a
/// `primary_conninfo` libpq cannot parse is `syntax_error`. Errors about the slots and the
/// WAL are not refusals; they keep whatever they carry.
fn refusal_sqlstate(e: &SyncError) -> &'static str {
    match e {
        SyncError::NotInRecovery | SyncError::PromotionTriggered | SyncError::Concurrent => "55000",
        SyncError::ConninfoSyntax(_) => "42601",
        e if is_setting_error(e) => "22023",
        other => other.sqlstate(),
    }
}

/// `judge_refusal` for a whole sync call.
pub(super) fn judge_outcome(
    tick: u64,
    i: usize,
    expected: Option<&SyncError>,
    before: &[SlotRow],
    out: &Outcome,
) -> Result<(), Violation> {
    let changed = !out.actions.is_empty() || out.slots_after != before;
    judge_refusal(tick, i, expected, out.error.as_ref(), changed)
}

/// Around the promotion of standby `p`: once promotion is signalled a function call is
/// refused (a wrong setting's refusal comes first, in the server's order), and once it is
/// done every sync, and the worker's launch, is refused as the server is out of recovery.
pub(super) fn at_promotion(
    tick: u64,
    (publ, cluster): (&Publisher, &Cluster),
    local: &[SlotRow],
    p: usize,
    facts: &Facts,
) -> Result<(), Violation> {
    let wrong = wrong_at(facts.misconfig, p, tick);
    let remote = primary_rows(publ, cluster);
    let mut sb = standby_input(publ, cluster, (p, local), facts.worker, wrong);
    sb.promotion_triggered = true;
    let signalled = wrong.map_or(SyncError::PromotionTriggered, refusal);
    let out = sync_function(&remote, local, &sb);
    judge_outcome(tick, p, Some(&signalled), local, &out)?;
    sb.in_recovery = false;
    let out = sync_function(&remote, local, &sb);
    judge_outcome(tick, p, Some(&SyncError::NotInRecovery), local, &out)?;
    let launch = worker_launch_check(&sb).err();
    judge_refusal(
        tick,
        p,
        Some(&SyncError::NotInRecovery),
        launch.as_ref(),
        false,
    )
}

/// Draws of the standbys' `max_replication_slots`.
const FULL_STREAM: u64 = 0x6675_6c6c;

/// One standby in twelve has room for no synced slot, or for one (from a stream of its own):
/// creating one more fails with `AllSlotsInUse`. Returns the standby and its setting.
pub(super) fn draw_slots_max(
    rng: &Rng,
    slots_max: &mut [Option<usize>],
) -> Option<(usize, Option<usize>)> {
    let mut full = side_stream(rng, FULL_STREAM);
    if uniform_inclusive(&mut full, 11) != 0 || slots_max.is_empty() {
        return None;
    }
    let i = uniform_inclusive(&mut full, slots_max.len() as u64 - 1) as usize;
    slots_max[i] = Some(uniform_inclusive(&mut full, 1) as usize);
    Some((i, slots_max[i]))
}

/// The operator's typo: a quote doubled inside a quoted name is one quote, which no slot name
/// may hold; the check hook refuses the list (`setting`, with the typo put first) naming what
/// it read.
pub(super) fn judge_typo(setting: &str) -> Result<(), Violation> {
    let typo = format!("\"{SLOT}\"\"x\", {setting}");
    let refused = StandbySlotList::parse(&typo).err().map(|e| e.detail);
    let named = format!("replication slot name \"{SLOT}\"x\" contains invalid character");
    if refused.as_deref() != Some(named.as_str()) {
        return Err(fail(
            "setting-parses",
            format!("{typo:?} was refused with {refused:?}, not {named:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pgyard_slotsync::StandbySlotList;
    use pgyard_types::rng_from_seed;

    /// Every spelling names the same slots, and the spellings drawn cover quoting, capitals
    /// and whitespace.
    #[test]
    fn every_spelling_parses_as_the_names() {
        let names = ["standby1".to_owned(), "standby2".to_owned()];
        let (mut quoted, mut capitals, mut tabs) = (false, false, false);
        for seed in 0..200 {
            let spelled = spell_list(&rng_from_seed(seed), names.iter());
            let list = StandbySlotList::parse(&spelled).expect("parses");
            assert_eq!(list.names(), &names[..], "{spelled:?}");
            quoted |= spelled.contains('"');
            capitals |= spelled.contains("STANDBY");
            tabs |= spelled.contains('\t');
        }
        assert!(quoted && capitals && tabs);
    }
}
