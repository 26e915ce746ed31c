//! The registered scenarios.

mod conninfo;

use crate::Scenario;

/// Every scenario, in the order `--scenario all` runs them.
pub static ALL: &[&dyn Scenario] = &[&conninfo::ConninfoScenario];
