//! Logical replication slot synchronization to physical standbys, decided as PostgreSQL 18
//! (or 17, by [`Version`]) decides it (`pg_sync_replication_slots()` and the slot-sync worker). Pure: the inputs are
//! slot tables, WAL positions and settings; the outputs are actions and the resulting table.
//!
//! * [`engine`]: prerequisite checks, one sync cycle ([`sync_function`], [`sync_cycle`]),
//!   promotion ([`promote`]) and the user operations a standby refuses ([`check_user_op`]).
//! * [`decoding`]: what advancing a synced slot by decoding the standby's WAL does to its
//!   `restart_lsn` and `catalog_xmin`, from the `xl_running_xacts` records given.
//! * [`standby_slots`]: the primary's `synchronized_standby_slots` gate for failover walsenders.
//! * [`cadence`]: the worker's naptime/back-off and launch throttle, as a sans-IO scheduler.
//! * [`plan`]: the input of `pgyard slotsync plan` (see `docs/slotsync.md`).
//! * [`json`]: every JSON form read or written (rows, plan input and output, snapshots,
//!   actions, the check report); the engine itself carries no JSON.
//! * [`check`]: the failover-readiness verdict per failover slot (`pgyard slotsync check`).
//! * [`snapshot`]: the SQL that reads a plan input from live servers, and its assembly.

pub mod cadence;
pub mod check;
pub mod decoding;
pub mod engine;
pub mod error;
pub mod input;
pub mod json;
pub mod plan;
pub mod row;
pub mod snapshot;
pub mod standby_slots;

pub use engine::{
    check_function_prerequisites, check_user_op, promote, sync_cycle, sync_function, Action,
    Caller, Change, DropReason, Outcome, Positions, SkipReason, UserOp,
};
pub use error::{InputError, SlotOpError, SyncError};
pub use input::{Standby, Version, WalLevel};
pub use plan::{outcome_to_json, run_plan_text, PlanInput, PlanRun};
pub use row::{InvalidationCause, SlotRow, SlotType};
pub use standby_slots::{SendBound, StandbySlotList, StandbySlotReport};
