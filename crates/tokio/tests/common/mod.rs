//! What the live proxy tests share.

use std::net::SocketAddr;
use std::time::Duration;

use pgyard_proxy::{ClientAuth, ClientConfig, PoolMode, PoolSettings};
use pgyard_tokio::proxy::{spawn, ProxyConfig};

/// A transaction-mode proxy under trust on a free loopback port, with `size` server
/// connections to the server on `port`, the machine's randomness seeded with `seed`, and
/// `change` made to its configuration last.
pub async fn transaction_proxy(
    port: u16,
    size: usize,
    seed: u64,
    change: impl FnOnce(&mut ProxyConfig),
) -> SocketAddr {
    let client = ClientConfig {
        login_timeout: Duration::from_secs(10),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let mut config = ProxyConfig::new(format!("host=127.0.0.1 port={port}"), client);
    config.pool = PoolSettings {
        size,
        wait_timeout: Duration::from_secs(60),
        ..PoolSettings::default()
    };
    config.seed = Some(seed);
    change(&mut config);
    let proxy = spawn(config, "127.0.0.1:0".parse().expect("an address"));
    proxy.await.expect("proxy").addr
}
