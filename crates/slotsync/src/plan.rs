//! The `pgyard slotsync plan` input: both servers' slots and the standby, run as one
//! `pg_sync_replication_slots()` call (its JSON form is in [`crate::json`]).

use crate::engine::{sync_function, Outcome};
use crate::input::Standby;
use crate::row::SlotRow;

/// The plan input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanInput {
    /// Every row of the primary's `pg_replication_slots`, in the view's order.
    pub remote_slots: Vec<SlotRow>,
    /// Every row of the standby's `pg_replication_slots`, in the view's order.
    pub local_slots: Vec<SlotRow>,
    /// The standby's positions and settings.
    pub standby: Standby,
}

impl PlanInput {
    /// One `pg_sync_replication_slots()` call on this input.
    pub fn plan(&self) -> Outcome {
        sync_function(&self.remote_slots, &self.local_slots, &self.standby)
    }
}

pub use crate::json::{outcome_to_json, run_plan_text, PlanRun};
