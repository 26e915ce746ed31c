//! Logical replication slot synchronization to physical standbys, decided as PostgreSQL 18
//! (or 17, by [`Version`]) decides it (`pg_sync_replication_slots()` and the slot-sync
//! worker). Pure: the inputs are slot tables, WAL positions and settings; the outputs are
//! actions and the resulting table.
//!
//! A failover tool asks it what the next sync would do, and whether subscribers would carry
//! on after promoting a standby, from rows it read itself ([`snapshot`] has the SQL); the
//! simulator checks the same engine against its model. The primary's failover slot `sub1`,
//! absent on the standby, is created there, persisted and given the primary's positions:
//!
//! ```
//! use pgyard_slotsync::{Action, PlanInput};
//!
//! let input = PlanInput::from_json_str(r#"{
//!   "remote_slots": [
//!     {"slot_name":"sb","plugin":null,"slot_type":"physical","datoid":null,"database":null,
//!      "temporary":false,"active":true,"active_pid":1234,"xmin":"760","catalog_xmin":"755",
//!      "restart_lsn":"0/3000000","confirmed_flush_lsn":null,"wal_status":"reserved",
//!      "safe_wal_size":null,"two_phase":false,"two_phase_at":null,"inactive_since":null,
//!      "conflicting":null,"invalidation_reason":null,"failover":false,"synced":false},
//!     {"slot_name":"sub1","plugin":"pgoutput","slot_type":"logical","datoid":5,
//!      "database":"postgres","temporary":false,"active":false,"active_pid":null,"xmin":null,
//!      "catalog_xmin":"755","restart_lsn":"0/2000000","confirmed_flush_lsn":"0/2000100",
//!      "wal_status":"reserved","safe_wal_size":null,"two_phase":false,"two_phase_at":null,
//!      "inactive_since":"2026-11-30 06:00:00+00","conflicting":false,
//!      "invalidation_reason":null,"failover":true,"synced":false}
//!   ],
//!   "local_slots": [],
//!   "standby": {"receive_lsn":"0/3000000","replay_lsn":"0/3000000","in_recovery":true,
//!     "oldest_wal_lsn":"0/1000000","redo_lsn":"0/1800000","snapshot_xmin":755,
//!     "wal_level":"logical","hot_standby_feedback":"on","primary_slot_name":"sb",
//!     "primary_conninfo":"host=db1 user=postgres dbname=postgres",
//!     "sync_replication_slots":"off","wal_segment_size":"16MB"}
//! }"#)?;
//! let outcome = input.plan();
//! assert_eq!(outcome.error, None);
//! assert!(matches!(&outcome.actions[0], Action::Create { slot, .. } if slot == "sub1"));
//! assert!(outcome.actions.contains(&Action::Persist { slot: "sub1".into() }));
//! let synced = &outcome.slots_after[0];
//! assert!(synced.synced && synced.failover && !synced.temporary);
//! assert_eq!(synced.confirmed_flush_lsn, Some("0/2000100".parse()?));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
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
#[cfg(feature = "planted-bugs")]
pub use engine::{sync_cycle_planted, sync_function_planted, PlantedBug};
pub use error::{InputError, SlotOpError, SyncError};
pub use input::{Standby, Version, WalLevel};
pub use plan::{outcome_to_json, run_plan_text, PlanInput, PlanRun};
pub use row::{InvalidationCause, SlotRow, SlotType};
pub use standby_slots::{SendBound, StandbySlotList, StandbySlotReport};
