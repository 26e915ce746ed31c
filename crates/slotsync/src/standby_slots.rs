//! The primary's side: `synchronized_standby_slots`, and how far a logical walsender of a
//! failover slot may send (`StandbySlotsHaveCaughtup`).

use pgyard_types::Lsn;

use crate::row::{SlotRow, SlotType};

/// NAMEDATALEN - 1: identifiers are truncated to this many bytes.
const NAME_MAX_BYTES: usize = 63;

/// A rejected `synchronized_standby_slots` value (the check hook's report).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid value for parameter \"synchronized_standby_slots\": \"{value}\"")]
pub struct StandbySlotsGucError {
    /// The value as written.
    pub value: String,
    /// The `DETAIL` line.
    pub detail: String,
    /// The `HINT` line, if any.
    pub hint: Option<String>,
}

/// A parsed `synchronized_standby_slots`: physical slot names, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StandbySlotList {
    names: Vec<String>,
}

/// What stops a listed slot from counting as caught up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StandbySlotProblem {
    /// No slot of that name.
    Missing,
    /// The slot is logical.
    Logical,
    /// The slot is invalidated.
    Invalidated,
    /// Behind, and no walsender is attached.
    NoActivePid,
    /// Behind, with a walsender attached: wait silently.
    Behind,
}

/// The report while waiting (WARNING, or ERROR once the walsender is shutting down).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandbySlotReport {
    /// The listed slot.
    pub slot: String,
    /// What is wrong.
    pub problem: StandbySlotProblem,
    /// `true` for ERROR (walsender received the shutdown request), `false` for WARNING.
    pub is_error: bool,
}

impl StandbySlotReport {
    /// The primary message, or `None` when the server waits without saying anything.
    pub fn message(&self) -> Option<String> {
        let s = &self.slot;
        Some(match self.problem {
            StandbySlotProblem::Missing => format!(
                "replication slot \"{s}\" specified in parameter \"synchronized_standby_slots\" does not exist"
            ),
            StandbySlotProblem::Logical => format!(
                "cannot specify logical replication slot \"{s}\" in parameter \"synchronized_standby_slots\""
            ),
            StandbySlotProblem::Invalidated => format!(
                "physical replication slot \"{s}\" specified in parameter \"synchronized_standby_slots\" has been invalidated"
            ),
            StandbySlotProblem::NoActivePid => format!(
                "replication slot \"{s}\" specified in parameter \"synchronized_standby_slots\" does not have active_pid"
            ),
            StandbySlotProblem::Behind => return None,
        })
    }

    /// The `DETAIL` line.
    pub fn detail(&self) -> Option<String> {
        let s = &self.slot;
        match self.problem {
            StandbySlotProblem::Logical => Some(format!(
                "Logical replication is waiting for correction on replication slot \"{s}\"."
            )),
            StandbySlotProblem::Behind => None,
            _ => Some(format!(
                "Logical replication is waiting on the standby associated with replication slot \"{s}\"."
            )),
        }
    }

    /// The `HINT` line.
    pub fn hint(&self) -> Option<String> {
        let s = &self.slot;
        Some(match self.problem {
            StandbySlotProblem::Missing => format!(
                "Create the replication slot \"{s}\" or amend parameter \"synchronized_standby_slots\"."
            ),
            StandbySlotProblem::Logical => format!(
                "Remove the logical replication slot \"{s}\" from parameter \"synchronized_standby_slots\"."
            ),
            StandbySlotProblem::Invalidated => format!(
                "Drop and recreate the replication slot \"{s}\", or amend parameter \"synchronized_standby_slots\"."
            ),
            StandbySlotProblem::NoActivePid => format!(
                "Start the standby associated with the replication slot \"{s}\", or amend parameter \"synchronized_standby_slots\"."
            ),
            StandbySlotProblem::Behind => return None,
        })
    }

    /// The SQLSTATE.
    pub fn sqlstate(&self) -> &'static str {
        match self.problem {
            StandbySlotProblem::Missing | StandbySlotProblem::Logical => "22023",
            _ => "55000",
        }
    }
}

/// How far a logical walsender may send, and why it waits if it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendBound {
    /// The LSN it may send up to (never beyond what every listed standby flushed); `None`
    /// when a listed slot is missing, logical, invalidated or has no `restart_lsn`.
    pub upto: Option<Lsn>,
    /// The first problem found while scanning the list for `flush`, if any.
    pub report: Option<StandbySlotReport>,
}

impl StandbySlotList {
    /// Parses the setting as its check hook does (list syntax, identifier folding, names).
    pub fn parse(value: &str) -> Result<StandbySlotList, StandbySlotsGucError> {
        let err = |detail: String, hint: Option<&str>| StandbySlotsGucError {
            value: value.to_owned(),
            detail,
            hint: hint.map(str::to_owned),
        };
        let names =
            split_identifiers(value).ok_or_else(|| err("List syntax is invalid.".into(), None))?;
        for name in &names {
            if name.is_empty() {
                return Err(err(
                    format!("replication slot name \"{name}\" is too short"),
                    None,
                ));
            }
            if name.len() > NAME_MAX_BYTES {
                return Err(err(
                    format!("replication slot name \"{name}\" is too long"),
                    None,
                ));
            }
            if !name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
            {
                return Err(err(
                    format!("replication slot name \"{name}\" contains invalid character"),
                    Some("Replication slot names may only contain lower case letters, numbers, and the underscore character."),
                ));
            }
        }
        Ok(StandbySlotList { names })
    }

    /// The listed names, in order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether a walsender of a slot with `failover` on a server (`in_recovery` or not) waits
    /// for the list at all.
    pub fn applies(&self, failover: bool, in_recovery: bool) -> bool {
        failover && !in_recovery && !self.names.is_empty()
    }

    /// `StandbySlotsHaveCaughtup(lsn)`: `Ok` when every listed slot exists, is physical, valid
    /// and has flushed `lsn`; otherwise the first failing slot (the scan stops there).
    pub fn caught_up(
        &self,
        primary_slots: &[SlotRow],
        lsn: Lsn,
        shutting_down: bool,
    ) -> Result<(), StandbySlotReport> {
        for name in &self.names {
            let report = |problem| StandbySlotReport {
                slot: name.clone(),
                problem,
                is_error: shutting_down,
            };
            let Some(slot) = primary_slots.iter().find(|s| &s.slot_name == name) else {
                return Err(report(StandbySlotProblem::Missing));
            };
            if slot.slot_type == SlotType::Logical {
                return Err(report(StandbySlotProblem::Logical));
            }
            if slot.invalidation_reason.is_some() {
                return Err(report(StandbySlotProblem::Invalidated));
            }
            let restart = slot.restart_lsn.unwrap_or(Lsn::INVALID);
            if restart == Lsn::INVALID || restart < lsn {
                let problem = if slot.active_pid.is_none() {
                    StandbySlotProblem::NoActivePid
                } else {
                    StandbySlotProblem::Behind
                };
                return Err(report(problem));
            }
        }
        Ok(())
    }

    /// How far a walsender of a slot with `failover` may send when WAL is flushed to `flush`.
    pub fn send_bound(
        &self,
        primary_slots: &[SlotRow],
        flush: Lsn,
        failover: bool,
        in_recovery: bool,
        shutting_down: bool,
    ) -> SendBound {
        if !self.applies(failover, in_recovery) {
            return SendBound {
                upto: Some(flush),
                report: None,
            };
        }
        let report = self.caught_up(primary_slots, flush, shutting_down).err();
        let mut upto = flush;
        for name in &self.names {
            let slot = primary_slots.iter().find(|s| &s.slot_name == name);
            match slot {
                Some(s)
                    if s.slot_type == SlotType::Physical
                        && s.invalidation_reason.is_none()
                        && s.restart_lsn.is_some_and(|l| l != Lsn::INVALID) =>
                {
                    upto = upto.min(s.restart_lsn.unwrap_or(Lsn::INVALID));
                }
                _ => {
                    return SendBound { upto: None, report };
                }
            }
        }
        SendBound {
            upto: Some(upto),
            report,
        }
    }
}

/// `SplitIdentifierString(value, ',')`: `None` on a syntax error.
fn split_identifiers(value: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let chars: Vec<char> = value.chars().collect();
    let mut i = 0;
    let skip_ws = |i: &mut usize| {
        while *i < chars.len() && chars[*i].is_whitespace() {
            *i += 1;
        }
    };
    skip_ws(&mut i);
    if i == chars.len() {
        return Some(out);
    }
    loop {
        let mut name = String::new();
        if chars.get(i) == Some(&'"') {
            i += 1;
            loop {
                match chars.get(i) {
                    None => return None,
                    Some('"') if chars.get(i + 1) == Some(&'"') => {
                        name.push('"');
                        i += 2;
                    }
                    Some('"') => {
                        i += 1;
                        break;
                    }
                    Some(c) => {
                        name.push(*c);
                        i += 1;
                    }
                }
            }
        } else {
            let start = i;
            while i < chars.len() && chars[i] != ',' && !chars[i].is_whitespace() && chars[i] != '"'
            {
                i += 1;
            }
            if i == start {
                return None;
            }
            name = chars[start..i]
                .iter()
                .collect::<String>()
                .to_ascii_lowercase();
        }
        out.push(truncate_name(name));
        skip_ws(&mut i);
        match chars.get(i) {
            None => return Some(out),
            Some(',') => {
                i += 1;
                skip_ws(&mut i);
            }
            Some(_) => return None,
        }
    }
}

fn truncate_name(mut name: String) -> String {
    if name.len() > NAME_MAX_BYTES {
        let mut cut = NAME_MAX_BYTES;
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        name.truncate(cut);
    }
    name
}
