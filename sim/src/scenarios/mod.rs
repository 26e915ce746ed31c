//! The registered scenarios.

pub mod connect;
mod conninfo;
pub mod failover;
mod middleware;

use crate::Scenario;

/// Every scenario, in the order `--scenario all` runs them.
pub static ALL: &[&dyn Scenario] = &[
    &conninfo::ConninfoScenario,
    &connect::ConnectScenario,
    &failover::FailoverScenario,
    &middleware::MiddlewareScenario,
];
