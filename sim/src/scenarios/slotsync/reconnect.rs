//! After the failover, the subscriber finds the new primary over the simulated network.

use pgyard_conninfo::parse;
use pgyard_conninfo::typed::{ConnectConfig, Context};
use pgyard_types::{uniform_inclusive, Instant, RngCore};

use super::{fail, Mix};
use crate::world::net::{Dns, Link, Net, NetMix};
use crate::world::pg::{Node, NodeState, PASSWORD, USER};
use crate::world::{ClientSpec, StartupKeywords, World};
use crate::{trace, Trace, Violation};

/// The subscriber finds the new primary as a real client would: its connection string lists
/// the old primary and every standby with `target_session_attrs=read-write`, and the same
/// `pgyard-connect` machine the adapters drive walks them over the simulated network (latency,
/// authentication, the crashed old primary refusing). It must land on the promoted standby and
/// nowhere else.
pub(super) fn subscriber_reconnects(
    t: &mut Trace,
    mix: &Mix,
    promoted: usize,
    seed: u64,
) -> Result<(), Violation> {
    let mut rng = pgyard_types::rng_from_seed(seed);
    let rng = &mut rng;
    let count = 1 + mix.standbys as usize;
    let mut nodes = Vec::with_capacity(count);
    for i in 0..count {
        let state = if i == 0 {
            NodeState::Crashed
        } else if i == promoted + 1 {
            NodeState::Primary
        } else {
            NodeState::Standby
        };
        // trust, MD5 or SCRAM, as the cluster's pg_hba.conf may say.
        let auth = uniform_inclusive(rng, 2);
        let iterations = 1 + uniform_inclusive(rng, 3) as u32;
        let mut n = Node::new(format!("pg{i}"), state, auth, iterations, rng);
        n.old_version = uniform_inclusive(rng, 3) == 0;
        nodes.push(n);
    }
    let names = (0..count).map(|i| (format!("pg{i}"), vec![i])).collect();
    let dns = Dns {
        names,
        latency_ns: 100_000 + uniform_inclusive(rng, 1_000_000),
    };
    let links = vec![(0..count)
        .map(|_| Link {
            min_ns: 50_000 + uniform_inclusive(rng, 2_000_000),
            mean_ns: uniform_inclusive(rng, 3_000_000),
        })
        .collect()];
    let net = Net {
        links,
        mix: NetMix::default(),
        partitions: Vec::new(),
        faults: true,
    };
    let hosts: Vec<String> = (0..count).map(|i| format!("pg{i}")).collect();
    let text = format!(
        "host={} user={USER} password={PASSWORD} dbname=postgres replication=database \
         target_session_attrs=read-write connect_timeout=5",
        hosts.join(",")
    );
    let info = parse(&text).map_err(|e| fail("subscriber-config-parses", format!("{e}")))?;
    let config = ConnectConfig::from_resolved(&info, &Context::new().with_os_user(USER))
        .map_err(|e| fail("subscriber-config-resolves", format!("{e}")))?;
    let mut w = World::new(nodes, dns, net, rng.next_u64(), None);
    w.add_client(
        ClientSpec {
            config: config.into(),
            startup: StartupKeywords {
                user: USER.to_owned(),
                dbname: Some("postgres".to_owned()),
                replication: Some("database".to_owned()),
                ..StartupKeywords::default()
            }
            .spec(Vec::new()),
            hosts,
            connects: 1,
            use_reset: false,
            memory: None,
            hold_ns: Some(1_000_000),
            detect_ns: 1_000_000,
            budget_rides_out: false,
            require_auth: None,
        },
        Instant::ZERO,
    );
    w.run(t, Instant(60_000_000_000))?;
    let want = promoted + 1;
    trace!(
        t,
        "subscriber reconnect: sessions {:?} (new primary pg{want})",
        w.stats.sessions
    );
    if w.stats.sessions != [(0, want)] {
        return Err(fail(
            "subscriber-finds-new-primary",
            format!(
                "the subscriber's read-write connect over pg0..pg{} ended in sessions {:?}, \
                 not one on the promoted pg{want}",
                count - 1,
                w.stats.sessions
            ),
        ));
    }
    Ok(())
}
