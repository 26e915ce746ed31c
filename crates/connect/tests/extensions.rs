//! pgyard's opt-in extensions: racing, the failover budget, prefer-primary, host memory,
//! round robin, trying further addresses after a mismatch; and determinism.

mod common;

use std::time::Duration;

use common::*;
use pgyard_connect::{Action, Connector, HostStatus, HostStatusMemory, OpenTarget, ServerRole};
use pgyard_conninfo::typed::TargetSessionAttrs;
use pgyard_conninfo::Strategy;
use pgyard_types::Instant;

const TWO: &str = "host=127.0.0.1,127.0.0.2 port=6001,6002 sslmode=disable";
const MS: u64 = 1_000_000;

fn opens(w: &World) -> Vec<(OpenTarget, pgyard_connect::AttemptId)> {
    w.actions
        .iter()
        .filter_map(|a| match a {
            Action::Open {
                target, attempt, ..
            } => Some((target.clone(), *attempt)),
            _ => None,
        })
        .collect()
}

#[test]
fn race_staggers_and_first_qualified_wins() {
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::new())
        .pg("127.0.0.2:6002", Pg::new());
    w.latency
        .insert("127.0.0.1:6001".into(), Duration::from_millis(400));
    w.latency
        .insert("127.0.0.2:6002".into(), Duration::from_millis(10));
    let cfg = config(TWO)
        .with_strategy(Strategy::Race)
        .with_race_stagger(Duration::from_millis(250));
    let mut c = Connector::new(cfg, Instant::ZERO, 1);
    let est = w.run(&mut c).unwrap();
    assert_eq!(est.target, tcp("127.0.0.2:6002"));
    // Second attempt started at the stagger, result at 250 + 2 round trips of 10 ms.
    assert_eq!(w.now, Instant(270 * MS));
    // The loser got closed before Done, and the winner never.
    let o = opens(&w);
    assert_eq!(o.len(), 2);
    assert!(w.closed.contains(&o[0].1));
    assert!(!w.closed.contains(&est.attempt));
}

#[test]
fn race_starts_next_at_once_on_failure_and_respects_session_check() {
    let mut w = World::new()
        .pg("127.0.0.2:6002", Pg::standby())
        .pg("127.0.0.3:6003", Pg::primary());
    let cfg = config(
        "host=127.0.0.1,127.0.0.2,127.0.0.3 port=6001,6002,6003 sslmode=disable target_session_attrs=read-write",
    )
    .with_strategy(Strategy::Race)
    .with_race_stagger(Duration::from_secs(10));
    let mut c = Connector::new(cfg, Instant::ZERO, 1);
    let est = w.run(&mut c).unwrap();
    assert_eq!(est.target, tcp("127.0.0.3:6003"));
    // Failures advanced without waiting for the 10 s stagger.
    assert_eq!(w.now, Instant::ZERO);
}

#[test]
fn race_all_fail_reports_every_attempt() {
    let mut w = World::new();
    let cfg = config(TWO).with_strategy(Strategy::Race);
    let mut c = Connector::new(cfg, Instant::ZERO, 1);
    let e = w.run(&mut c).unwrap_err();
    assert_eq!(e.reports.len(), 2);
    assert_eq!(
        e.message(),
        format!(
            "connection to server at \"127.0.0.1\", port 6001 failed: {REFUSED_TCP}connection to server at \"127.0.0.2\", port 6002 failed: {REFUSED_TCP}"
        )
    );
}

#[test]
fn failover_budget_cycles_with_backoff_until_a_server_fits() {
    let mut pg = Pg::new();
    pg.startup_errors = vec![
        Some(("57P03".into(), "starting up".into())),
        Some(("57P03".into(), "starting up".into())),
        None,
    ];
    let mut w = World::new().pg("127.0.0.1:6001", pg.clone());
    let cfg = config("host=127.0.0.1 port=6001 sslmode=disable")
        .with_failover_timeout(Some(Duration::from_secs(10)));
    let mut c = Connector::new(cfg, Instant::ZERO, 1);
    let est = w.run(&mut c).unwrap();
    assert_eq!(est.target, tcp("127.0.0.1:6001"));
    // 100 ms then 200 ms of backoff.
    assert_eq!(w.now, Instant(300 * MS));
    // Without a budget: libpq's single pass.
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    assert!(connect(&mut w, "host=127.0.0.1 port=6001 sslmode=disable").is_err());
}

#[test]
fn failover_budget_expires() {
    let mut w = World::new();
    let cfg = config("host=127.0.0.1 port=6001 sslmode=disable")
        .with_failover_timeout(Some(Duration::from_secs(1)));
    let mut c = Connector::new(cfg, Instant::ZERO, 1);
    let e = w.run(&mut c).unwrap_err();
    assert!(w.now >= Instant(1_000 * MS));
    assert!(w.now < Instant(3_000 * MS));
    assert!(e.reports.len() > 3);
}

#[test]
fn prefer_primary_takes_primary_then_any() {
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::standby())
        .pg("127.0.0.2:6002", Pg::primary());
    let cfg = config(TWO).with_target_session_attrs(TargetSessionAttrs::PreferPrimary);
    let mut c = Connector::new(cfg.clone(), Instant::ZERO, 1);
    assert_eq!(w.run(&mut c).unwrap().target, tcp("127.0.0.2:6002"));
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::standby())
        .pg("127.0.0.2:6002", Pg::standby());
    let mut c = Connector::new(cfg, Instant::ZERO, 1);
    let est = w.run(&mut c).unwrap();
    assert_eq!(est.target, tcp("127.0.0.1:6001"));
}

#[test]
fn host_memory_tries_recently_bad_hosts_last() {
    let mut w = World::new().pg("127.0.0.2:6002", Pg::new());
    let mut c = Connector::new(config(TWO), Instant::ZERO, 1)
        .with_host_memory(HostStatusMemory::new(Duration::from_secs(10)));
    w.run(&mut c).unwrap();
    let mem = c.take_host_memory().unwrap();
    assert_eq!(
        mem.fresh_status(b"127.0.0.1", b"6001", Instant::ZERO),
        Some(HostStatus::Down)
    );
    // Within the window: the live host first, no refused attempt.
    let mut w2 = World::new().pg("127.0.0.2:6002", Pg::new());
    let mut c = Connector::new(config(TWO), Instant(5_000 * MS), 1).with_host_memory(mem);
    w2.now = Instant(5_000 * MS);
    w2.run(&mut c).unwrap();
    assert_eq!(opens(&w2).len(), 1);
    // After the window: list order again.
    let mem = c.take_host_memory().unwrap();
    let mut w3 = World::new().pg("127.0.0.2:6002", Pg::new());
    w3.now = Instant(20_000 * MS);
    let mut c = Connector::new(config(TWO), Instant(20_000 * MS), 1).with_host_memory(mem);
    w3.run(&mut c).unwrap();
    assert_eq!(opens(&w3)[0].0, tcp("127.0.0.1:6001"));
}

#[test]
fn host_memory_puts_wrong_role_last_and_remembers_roles() {
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::standby())
        .pg("127.0.0.2:6002", Pg::primary());
    let cfg = config(&format!("{TWO} target_session_attrs=primary"));
    let mut c =
        Connector::new(cfg.clone(), Instant::ZERO, 1).with_host_memory(HostStatusMemory::default());
    w.run(&mut c).unwrap();
    let mem = c.take_host_memory().unwrap();
    assert_eq!(
        mem.fresh_status(b"127.0.0.1", b"6001", Instant::ZERO),
        Some(HostStatus::Up(Some(ServerRole::Standby)))
    );
    let mut w = World::new()
        .pg("127.0.0.1:6001", Pg::standby())
        .pg("127.0.0.2:6002", Pg::primary());
    let mut c = Connector::new(cfg, Instant::ZERO, 1).with_host_memory(mem);
    w.run(&mut c).unwrap();
    assert_eq!(opens(&w).len(), 1);
}

#[test]
fn round_robin_start_index_across_connects() {
    let mut mem = HostStatusMemory::default().with_round_robin(true);
    let mut got = vec![];
    for _ in 0..4 {
        let mut w = World::new()
            .pg("127.0.0.1:6001", Pg::new())
            .pg("127.0.0.2:6001", Pg::new())
            .pg("127.0.0.3:6001", Pg::new());
        let cfg = config("host=127.0.0.1,127.0.0.2,127.0.0.3 port=6001 sslmode=disable");
        let mut c = Connector::new(cfg, Instant::ZERO, 1).with_host_memory(mem);
        got.push(w.run(&mut c).unwrap().target);
        mem = c.take_host_memory().unwrap();
    }
    assert_eq!(
        got,
        vec![
            tcp("127.0.0.1:6001"),
            tcp("127.0.0.2:6001"),
            tcp("127.0.0.3:6001"),
            tcp("127.0.0.1:6001")
        ]
    );
}

#[test]
fn keep_trying_addresses_after_mismatch() {
    let mk = || {
        World::new()
            .dns("pgmulti", &["127.0.0.1:6001", "127.0.0.3:6001"])
            .pg("127.0.0.1:6001", Pg::primary())
            .pg("127.0.0.3:6001", Pg::standby())
    };
    let cfg = config("host=pgmulti port=6001 target_session_attrs=standby sslmode=disable");
    let mut c = Connector::new(cfg.clone(), Instant::ZERO, 1);
    assert!(mk().run(&mut c).is_err());
    let mut c = Connector::new(
        cfg.with_keep_trying_addresses_after_mismatch(true),
        Instant::ZERO,
        1,
    );
    assert_eq!(mk().run(&mut c).unwrap().target, tcp("127.0.0.3:6001"));
}

#[test]
fn same_seed_same_actions() {
    let trace = |seed: u64| {
        let mut w = World::new()
            .dns("a", &["127.0.0.1:6001", "127.0.0.2:6001", "127.0.0.3:6001"])
            .dns("b", &["127.0.0.4:6001", "127.0.0.5:6001"])
            .pg("127.0.0.5:6001", Pg::standby())
            .pg("127.0.0.2:6001", Pg::primary());
        let cfg = config(
            "host=a,b port=6001 load_balance_hosts=random target_session_attrs=prefer-standby",
        )
        .with_strategy(Strategy::Race);
        let mut c = Connector::new(cfg, Instant::ZERO, seed);
        let _ = w.run(&mut c);
        format!("{:?}", w.actions)
    };
    for seed in [0, 1, 99] {
        assert_eq!(trace(seed), trace(seed));
    }
    assert_ne!(trace(0), trace(1));
}
