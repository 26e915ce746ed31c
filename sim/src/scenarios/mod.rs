//! The registered scenarios.

pub mod connect;
mod conninfo;
pub mod delayq;
pub mod failover;
mod middleware;
pub mod proxy;
mod proxy_adapter;
mod proxy_client;
mod proxy_cluster;
mod proxy_connect;
mod proxy_console;
mod proxy_limits;
pub mod proxy_login;
mod proxy_login_auth;
mod proxy_login_prelude;
mod proxy_login_settings;
mod proxy_plan;
mod proxy_reconnect;
mod proxy_reload;
mod proxy_server;
mod proxy_show;
pub mod slotsync;

use crate::Scenario;

/// Every scenario, in the order `--scenario all` runs them.
pub static ALL: &[&dyn Scenario] = &[
    &conninfo::ConninfoScenario,
    &connect::ConnectScenario,
    &failover::FailoverScenario,
    &middleware::MiddlewareScenario,
    &proxy::ProxyScenario,
    &proxy_login::ProxyLoginScenario,
    &delayq::DelayqScenario,
    &slotsync::SlotsyncScenario,
];
