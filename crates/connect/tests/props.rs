//! Property tests: for random configurations, server behaviours and latencies the machine
//! never panics, always ends, opens only listed or resolved addresses, and never reports
//! success for a server that fails the session attributes.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use pgyard_connect::{Action, Connector, OpenTarget};
use pgyard_conninfo::typed::TargetSessionAttrs;
use pgyard_conninfo::Strategy as ConnStrategy;
use pgyard_types::Instant;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Behaviour {
    Refused,
    Blackhole,
    Garbage(Vec<u8>),
    Pg {
        ssl: u8,
        standby: bool,
        dtro: bool,
        old: bool,
        err: u8,
        close: bool,
        npv: bool,
    },
}

fn behaviour() -> impl Strategy<Value = Behaviour> {
    prop_oneof![
        Just(Behaviour::Refused),
        Just(Behaviour::Blackhole),
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Behaviour::Garbage),
        (
            0u8..4,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            0u8..5,
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(ssl, standby, dtro, old, err, close, npv)| Behaviour::Pg {
                ssl,
                standby,
                dtro,
                old,
                err,
                close: close && err == 0,
                npv,
            }),
    ]
}

fn node(b: &Behaviour) -> (Node, Option<(bool, bool)>) {
    match b {
        Behaviour::Refused => (Node::Refused, None),
        Behaviour::Blackhole => (Node::Blackhole, None),
        Behaviour::Garbage(g) => (Node::Garbage(g.clone()), None),
        Behaviour::Pg {
            ssl,
            standby,
            dtro,
            old,
            err,
            close,
            npv,
        } => {
            let mut pg = if *old {
                Pg::old(*standby)
            } else if *standby {
                Pg::standby()
            } else {
                Pg::primary()
            };
            if *dtro && !*standby {
                pg = Pg::dtro_on();
            }
            pg.ssl = [Ssl::No, Ssl::Yes, Ssl::YesButFails, Ssl::Error][*ssl as usize];
            pg.startup_errors = match err {
                1 => vec![Some(("57P03".into(), "starting".into()))],
                2 => vec![Some(("53300".into(), "too many".into()))],
                3 => vec![Some(("28000".into(), "no".into())), None],
                _ => vec![],
            };
            pg.close_after_startup = *close;
            if *npv {
                pg.npv = Some((0x0003_0000, vec![]));
            }
            // (standby, read-only by default)
            (Node::Pg(pg), Some((*standby, *standby || *dtro)))
        }
    }
}

const TSA: [TargetSessionAttrs; 7] = [
    TargetSessionAttrs::Any,
    TargetSessionAttrs::ReadWrite,
    TargetSessionAttrs::ReadOnly,
    TargetSessionAttrs::Primary,
    TargetSessionAttrs::Standby,
    TargetSessionAttrs::PreferStandby,
    TargetSessionAttrs::PreferPrimary,
];
const SSLMODE: [&str; 4] = ["disable", "allow", "prefer", "require"];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn machine_is_safe_and_live(
        slots in proptest::collection::vec((any::<bool>(), proptest::collection::vec((behaviour(), 0u64..400), 1..4)), 1..4),
        tsa in 0usize..7,
        sslmode in 0usize..4,
        race in any::<bool>(),
        random in any::<bool>(),
        failover in any::<bool>(),
        max32 in any::<bool>(),
        timeout in 1u32..3,
        seed in any::<u64>(),
    ) {
        let mut world = World::new();
        let mut hosts = vec![];
        let mut allowed = BTreeSet::new();
        let mut roles = std::collections::BTreeMap::new();
        for (i, (named, addrs)) in slots.iter().enumerate() {
            let addrs = if *named { addrs.clone() } else { addrs[..1].to_vec() };
            let mut socks = vec![];
            for (j, (b, lat)) in addrs.iter().enumerate() {
                let a = format!("127.0.{}.{}:6000", i + 1, j + 1);
                let (n, role) = node(b);
                world.nodes.insert(a.clone(), n);
                world.latency.insert(a.clone(), Duration::from_millis(*lat));
                if let Some(r) = role { roles.insert(a.clone(), r); }
                allowed.insert(OpenTarget::Tcp(a.parse().unwrap()));
                socks.push(a);
            }
            if *named {
                let h = format!("h{i}");
                let refs: Vec<&str> = socks.iter().map(String::as_str).collect();
                world = world.dns(&h, &refs);
                hosts.push(h);
            } else {
                hosts.push(format!("127.0.{}.1", i + 1));
            }
        }
        let ci = format!(
            "host={} port=6000 sslmode={} connect_timeout={} load_balance_hosts={}{}",
            hosts.join(","), SSLMODE[sslmode], timeout,
            if random { "random" } else { "disable" },
            if max32 { " max_protocol_version=3.2" } else { "" },
        );
        let mut cfg = config(&ci).with_target_session_attrs(TSA[tsa]);
        if race { cfg = cfg.with_strategy(ConnStrategy::Race).with_race_stagger(Duration::from_millis(100)); }
        if failover { cfg = cfg.with_failover_timeout(Some(Duration::from_secs(2))); }
        let mut c = Connector::new(cfg, Instant::ZERO, seed);
        let result = world.run(&mut c);
        // Bounded time: timeouts × addresses × passes, plus failover budget.
        prop_assert!(world.now <= Instant(60_000_000_000));
        for a in &world.actions {
            if let Action::Open { target, .. } = a {
                prop_assert!(allowed.contains(target), "opened unlisted {target:?}");
            }
        }
        let dones = world.actions.iter().filter(|a| matches!(a, Action::Done(_))).count();
        prop_assert_eq!(dones, 1);
        if let Ok(est) = result {
            let OpenTarget::Tcp(addr) = &est.target else { unreachable!() };
            let (standby, read_only) = roles[&addr.to_string()];
            let ok = match TSA[tsa] {
                TargetSessionAttrs::ReadWrite => !read_only,
                TargetSessionAttrs::ReadOnly => read_only,
                TargetSessionAttrs::Primary => !standby,
                TargetSessionAttrs::Standby => standby,
                _ => true,
            };
            prop_assert!(ok, "accepted a server failing {:?}", TSA[tsa]);
            prop_assert!(!world.closed.contains(&est.attempt));
        } else {
            prop_assert!(!result.unwrap_err().message().is_empty());
        }
    }
}

proptest! {
    /// Arbitrary bytes in arbitrary chunks at any point never panic the machine.
    #[test]
    fn arbitrary_bytes_never_panic(chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..8), tls in any::<bool>()) {
        let cfg = config("host=127.0.0.1 port=6001 target_session_attrs=read-write");
        let mut c = Connector::new(cfg, Instant::ZERO, 1);
        let Some(Action::Open { attempt, .. }) = c.poll_action() else { panic!("open") };
        c.handle_event(Instant::ZERO, pgyard_connect::Event::Opened { attempt });
        if tls {
            c.handle_event(Instant::ZERO, pgyard_connect::Event::Received { attempt, bytes: b"S".to_vec() });
            c.handle_event(Instant::ZERO, pgyard_connect::Event::TlsEstablished { attempt, server_end_point: None, alpn: None, client_cert: pgyard_connect::ClientCert::NotRequested });
        }
        for ch in chunks {
            c.handle_event(Instant::ZERO, pgyard_connect::Event::Received { attempt, bytes: ch });
            while c.poll_action().is_some() {}
        }
        c.handle_event(Instant::ZERO, pgyard_connect::Event::Closed { attempt });
        while c.poll_action().is_some() {}
    }
}
