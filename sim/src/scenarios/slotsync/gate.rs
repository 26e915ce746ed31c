//! `synchronized_standby_slots` as a seed sets it on the primary: which standbys' slots it
//! lists, how it spells them, what the walsender reads it as, and the bound it then puts on
//! what the failover slot's walsender may send.

use pgyard_slotsync::{SlotRow, StandbySlotList};
use pgyard_types::{Lsn, Rng};

use super::{fail, settings, walsender, Mix};
use crate::planted::ScenarioBug;
use crate::publisher::Publisher;
use crate::{trace, Trace, Violation};

/// The primary's `synchronized_standby_slots`, on or off.
pub(super) struct Gate {
    /// The setting is on (`Mix::gate_on`).
    on: bool,
    /// The standbys whose slots the setting lists when it is on.
    listed: Vec<usize>,
    /// The setting as the primary has it: empty when it is off.
    pub(super) text: String,
    /// What the walsender reads the setting as.
    list: StandbySlotList,
    /// The same list as an operator might mistype it (see `walsender::mistakes`).
    mistyped: Vec<StandbySlotList>,
    /// The standbys whose slots the setting in effect names (however it spells them).
    pub(super) in_setting: Vec<usize>,
}

impl Gate {
    /// Draws the setting for `publ`'s standbys (on `rng`'s side streams only) and judges that
    /// it, and a typo in it, parse as PostgreSQL parses them.
    pub(super) fn draw(
        rng: &Rng,
        t: &mut Trace,
        mix: &Mix,
        publ: &Publisher,
    ) -> Result<Gate, Violation> {
        let listed: Vec<usize> = if mix.list_all {
            (0..mix.standbys as usize).collect()
        } else {
            vec![0]
        };
        let setting = settings::spell_list(rng, listed.iter().map(|&i| &publ.standbys[i].slot));
        let list = StandbySlotList::parse(if mix.gate_on { &setting } else { "" })
            .map_err(|e| fail("setting-parses", format!("{setting:?}: {e:?}")))?;
        let intended: Vec<&String> = listed.iter().map(|&i| &publ.standbys[i].slot).collect();
        if mix.gate_on && !list.names().iter().eq(intended.iter().copied()) {
            return Err(fail(
                "setting-parses",
                format!("{setting:?} parses as {:?}, not {intended:?}", list.names()),
            ));
        }
        settings::judge_typo(&setting)?;
        let mistyped = walsender::mistakes(&list)?;
        let in_setting: Vec<usize> = if mix.gate_on {
            listed.clone()
        } else {
            Vec::new()
        };
        trace!(t, "synchronized_standby_slots = {:?}", list.names());
        Ok(Gate {
            on: mix.gate_on,
            listed,
            text: if mix.gate_on { setting } else { String::new() },
            list,
            mistyped,
            in_setting,
        })
    }

    /// The walsender's bound for sending up to `flush` over the primary's slots `rows` (the
    /// planted `IgnoreStandbySlots` sends it all); its reports are judged while the setting is
    /// on.
    pub(super) fn bound(
        &self,
        tick: u64,
        bug: Option<ScenarioBug>,
        rows: &[SlotRow],
        flush: Lsn,
    ) -> Result<Option<Lsn>, Violation> {
        let bound = if bug == Some(ScenarioBug::IgnoreStandbySlots) {
            Some(flush)
        } else {
            self.list.send_bound(rows, flush, true, false, false).upto
        };
        if self.on {
            walsender::judge(tick, &self.list, &self.mistyped, rows, flush)?;
        }
        Ok(bound)
    }

    /// The standbys a failover may promote: those the setting lists while it is on, else any
    /// of the `standbys`.
    pub(super) fn candidates(&self, standbys: u64) -> Vec<usize> {
        if self.on {
            self.listed.clone()
        } else {
            (0..standbys as usize).collect()
        }
    }
}
