//! `connect`: a random cluster (primaries, standbys, nodes starting up or shutting down,
//! crashed, full, old versions that report no role, primaries in maintenance with
//! `default_transaction_read_only = on`, roles that change right after a login, between the
//! ParameterStatus and the check query), random clients (every
//! `target_session_attrs`, load balancing, racing, `connect_timeout`, the failover budget)
//! and a random fault mix. Safety: a client only ever connects to a listed server that met
//! its `target_session_attrs` when it answered. Liveness: once faults stop, a client with a
//! fitting server connects within the bound its policy implies.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use pgyard_conninfo::typed::{ConnectConfig, Context, TargetSessionAttrs};
use pgyard_conninfo::{parse, Strategy};
use pgyard_types::{uniform_inclusive, Instant, Rng, RngCore};

use crate::trace::{write_pieces, Piece};
use crate::world::net::{Dns, Link, Net, NetMix, Partition};
use crate::world::pg::{Flip, Node, NodeState, Role, PASSWORD, USER};
use crate::world::require_auth::RequireAuth;
use crate::world::{
    Bug, ClientSpec, ClusterEvent, MemoryUse, SpecText, StartupKeywords, StartupSpec, World,
};
use crate::{trace, trace_line, Scenario, Trace, Violation};

/// The scenario.
pub struct ConnectScenario;

const MS: u64 = 1_000_000;

/// What one seed draws first (swarm testing): which faults exist at all, and how often.
pub(crate) struct Mix {
    pub nodes: usize,
    pub clients: usize,
    pub net: NetMix,
    pub partition: bool,
    pub crash: bool,
    pub promote: bool,
    pub switchover: bool,
    pub two_primaries: bool,
    pub too_many: bool,
    pub hang: bool,
    pub old_version_pct: u64,
    pub tls_pct: u64,
    /// How often a server's TLS handshakes select no ALPN or another protocol.
    pub alpn_off_pct: u64,
    pub starting_pct: u64,
    pub safety_ms: u64,
    /// How often a node runs with `default_transaction_read_only = on`.
    pub read_only_pct: u64,
    /// Role changes armed to land right after a login (0 for none).
    pub flips: u64,
}

impl Mix {
    /// The text `#[derive(Debug)]` would print (the trace format is part of the replay
    /// contract), `prefix` first, as pieces for [`Trace::line`]: every seed traces it, and
    /// even one `write!` over twenty arguments was a visible share of a seed's cost.
    fn pieces<'a>(&self, prefix: &'a str) -> [Piece<'a>; 46] {
        let n = &self.net;
        [
            Piece::Text(prefix),
            Piece::Text("Mix { nodes: "),
            Piece::from(self.nodes),
            Piece::Text(", clients: "),
            Piece::from(self.clients),
            Piece::Text(", net: NetMix { loss_pct: "),
            Piece::from(n.loss_pct),
            Piece::Text(", reset_permille: "),
            Piece::from(n.reset_permille),
            Piece::Text(", refuse_pct: "),
            Piece::from(n.refuse_pct),
            Piece::Text(", blackhole_pct: "),
            Piece::from(n.blackhole_pct),
            Piece::Text(", tls_fail_pct: "),
            Piece::from(n.tls_fail_pct),
            Piece::Text(", dns_fail_pct: "),
            Piece::from(n.dns_fail_pct),
            Piece::Text(" }, partition: "),
            Piece::from(self.partition),
            Piece::Text(", crash: "),
            Piece::from(self.crash),
            Piece::Text(", promote: "),
            Piece::from(self.promote),
            Piece::Text(", switchover: "),
            Piece::from(self.switchover),
            Piece::Text(", two_primaries: "),
            Piece::from(self.two_primaries),
            Piece::Text(", too_many: "),
            Piece::from(self.too_many),
            Piece::Text(", hang: "),
            Piece::from(self.hang),
            Piece::Text(", old_version_pct: "),
            Piece::from(self.old_version_pct),
            Piece::Text(", tls_pct: "),
            Piece::from(self.tls_pct),
            Piece::Text(", alpn_off_pct: "),
            Piece::from(self.alpn_off_pct),
            Piece::Text(", starting_pct: "),
            Piece::from(self.starting_pct),
            Piece::Text(", safety_ms: "),
            Piece::from(self.safety_ms),
            Piece::Text(", read_only_pct: "),
            Piece::from(self.read_only_pct),
            Piece::Text(", flips: "),
            Piece::from(self.flips),
            Piece::Text(" }"),
        ]
    }
}

impl std::fmt::Debug for Mix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_pieces(f, &self.pieces(""))
    }
}

fn pct(rng: &mut Rng, on_pct: u64, max: u64) -> u64 {
    if uniform_inclusive(rng, 99) < on_pct {
        1 + uniform_inclusive(rng, max - 1)
    } else {
        0
    }
}

fn coin(rng: &mut Rng, p: u64) -> bool {
    uniform_inclusive(rng, 99) < p
}

pub(crate) fn draw_mix(rng: &mut Rng) -> Mix {
    Mix {
        nodes: 1 + uniform_inclusive(rng, 3) as usize,
        // Small seeds, many of them (swarm testing): mostly one client, sometimes up to three.
        clients: [1, 1, 1, 1, 1, 1, 2, 2, 2, 3][uniform_inclusive(rng, 9) as usize],
        net: NetMix {
            loss_pct: pct(rng, 30, 10),
            reset_permille: pct(rng, 25, 60),
            refuse_pct: pct(rng, 25, 20),
            blackhole_pct: pct(rng, 20, 15),
            tls_fail_pct: pct(rng, 25, 30),
            dns_fail_pct: pct(rng, 20, 20),
        },
        partition: coin(rng, 25),
        crash: coin(rng, 35),
        promote: coin(rng, 35),
        switchover: coin(rng, 20),
        two_primaries: coin(rng, 15),
        too_many: coin(rng, 25),
        hang: coin(rng, 25),
        old_version_pct: pct(rng, 40, 100),
        tls_pct: pct(rng, 50, 100),
        alpn_off_pct: pct(rng, 30, 60),
        starting_pct: pct(rng, 25, 50),
        safety_ms: 200 + uniform_inclusive(rng, 3000),
        read_only_pct: pct(rng, 30, 100),
        flips: if coin(rng, 40) {
            1 + uniform_inclusive(rng, 2)
        } else {
            0
        },
    }
}

/// A `server_version` as servers of the age report it: releases, a first minor (`X.0`),
/// a packager's suffix, a beta; before 10 three numbers. libpq counts a server below 9.0
/// as never in hot standby, so any misreading of these texts that lands below 90000 shows
/// as a standby taken for a primary.
fn draw_version(rng: &mut Rng, old: bool) -> &'static str {
    const NEW: [&str; 4] = ["18.1", "18.0", "18.4 (Debian 18.4-1.pgdg13+1)", "18beta1"];
    const OLD: [&str; 8] = [
        "13.2",
        "13.0",
        "12.22 (Ubuntu 12.22-0ubuntu0.20.04.1)",
        "10.0",
        "9.6.24",
        "9.6beta1",
        "9.0.0",
        "9.2.4",
    ];
    let list: &[&str] = if old { &OLD } else { &NEW };
    list[uniform_inclusive(rng, list.len() as u64 - 1) as usize]
}

/// Nodes (node 0 the primary unless it starts elsewhere), DNS, and the network.
pub(crate) fn build_world(rng: &mut Rng, mix: &Mix, bug: Bug) -> World {
    let mut nodes = Vec::new();
    for i in 0..mix.nodes {
        let role = if i == 0 { Role::Primary } else { Role::Standby };
        // trust 40 %, MD5 30 %, SCRAM 30 %.
        let auth = [0, 0, 0, 0, 1, 1, 1, 2, 2, 2][uniform_inclusive(rng, 9) as usize];
        let iterations = 1 + uniform_inclusive(rng, 3) as u32;
        let mut n = Node::new(node_name(i), role.into(), auth, iterations, rng);
        n.old_version = coin(rng, mix.old_version_pct);
        n.version = Some(draw_version(rng, n.old_version));
        n.tls = coin(rng, mix.tls_pct);
        n.stuffs_after_ssl = n.tls && coin(rng, 4);
        if coin(rng, mix.alpn_off_pct) {
            n.alpn = if coin(rng, 50) {
                None
            } else {
                Some(b"http/1.1")
            };
        }
        n.lag_ms = uniform_inclusive(rng, 300);
        if coin(rng, mix.starting_pct) {
            n.state = NodeState::StartingUp { then: role };
        }
        n.read_only = coin(rng, mix.read_only_pct);
        nodes.push(n);
    }
    let mut names = BTreeMap::new();
    for i in 0..mix.nodes {
        names.insert(node_name(i), vec![i]);
    }
    // A name with several addresses (a DNS round-robin record), in random order.
    let mut all: Vec<usize> = (0..mix.nodes).collect();
    shuffle(rng, &mut all);
    let take = 1 + uniform_inclusive(rng, (mix.nodes - 1) as u64) as usize;
    all.truncate(take.max(2).min(mix.nodes));
    names.insert("pg-any".to_owned(), all);
    let dns = Dns {
        names,
        latency_ns: 100_000 + uniform_inclusive(rng, 2 * MS),
    };
    let links = (0..mix.clients)
        .map(|_| {
            (0..mix.nodes)
                .map(|_| Link {
                    min_ns: 50_000 + uniform_inclusive(rng, 2 * MS),
                    mean_ns: uniform_inclusive(rng, 5 * MS),
                })
                .collect()
        })
        .collect();
    let net = Net {
        links,
        mix: mix.net.clone(),
        partitions: Vec::new(),
        faults: true,
    };
    World::new(nodes, dns, net, rng.next_u64(), bug)
}

/// The name of node `i` (`pg0`…), without `format!` for the few every seed has.
fn node_name(i: usize) -> String {
    const NAMES: [&str; 4] = ["pg0", "pg1", "pg2", "pg3"];
    match NAMES.get(i) {
        Some(name) => (*name).to_owned(),
        None => format!("pg{i}"),
    }
}

/// Fisher–Yates with the world's RNG.
pub(crate) fn shuffle<T>(rng: &mut Rng, v: &mut [T]) {
    for i in (1..v.len()).rev() {
        let j = uniform_inclusive(rng, i as u64) as usize;
        v.swap(i, j);
    }
}

/// A random client configuration over the world's names.
pub(crate) fn random_config(
    rng: &mut Rng,
    nodes: usize,
    all_tls: bool,
) -> Result<Generated, Violation> {
    // A client with host-status memory names each node by its own name only, so that the
    // world knows which host every connection went to.
    let memory = match uniform_inclusive(rng, 9) {
        0 => Some(MemoryUse::RoundRobin),
        1 | 2 => Some(MemoryUse::Recheck),
        _ => None,
    };
    let mut hosts = Vec::new();
    let count = 1 + uniform_inclusive(rng, 2);
    for _ in 0..count {
        let r = uniform_inclusive(rng, 99);
        let name = if r < 8 {
            "nowhere".to_owned()
        } else if r < 30 && memory.is_none() {
            "pg-any".to_owned()
        } else {
            node_name(uniform_inclusive(rng, nodes as u64 - 1) as usize)
        };
        hosts.push(name);
    }
    let tsa_all = [
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
        "prefer-primary",
    ];
    let tsa = tsa_all[uniform_inclusive(rng, tsa_all.len() as u64 - 1) as usize];
    // A recheck client accepts any server, so a host it held a session on is a good one.
    let tsa = if memory == Some(MemoryUse::Recheck) {
        "any"
    } else {
        tsa
    };
    let ssl = if all_tls {
        ["disable", "allow", "prefer", "require"][uniform_inclusive(rng, 3) as usize]
    } else {
        ["disable", "allow", "prefer"][uniform_inclusive(rng, 2) as usize]
    };
    // Put together piece by piece: every seed builds one or more of these.
    let mut text = String::with_capacity(192);
    text.push_str("host=");
    for (i, h) in hosts.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(h);
    }
    text.push_str(" port=5432 password=");
    text.push_str(PASSWORD);
    let (keywords, extras) = draw_startup(rng);
    keywords.write_conninfo(&mut text);
    text.push_str(" sslmode=");
    text.push_str(ssl);
    // Direct TLS (libpq 17+) needs sslmode require or stronger.
    if ssl == "require" && coin(rng, 40) {
        text.push_str(" sslnegotiation=direct");
    }
    if tsa != "prefer-primary" {
        text.push_str(" target_session_attrs=");
        text.push_str(tsa);
    }
    // A round-robin client keeps its slot order, so its k-th connect's start is known.
    if coin(rng, 30) && memory != Some(MemoryUse::RoundRobin) {
        text.push_str(" load_balance_hosts=random");
    }
    if coin(rng, 50) {
        // Writing into a String cannot fail.
        let _ = write!(text, " connect_timeout={}", 2 + uniform_inclusive(rng, 8));
    }
    let require_auth = coin(rng, 15).then(|| RequireAuth::draw(rng));
    if let Some(r) = require_auth {
        text.push_str(" require_auth=");
        text.push_str(r.raw);
    }
    let info = parse(&text).map_err(|e| Violation {
        invariant: "generated-config-parses",
        detail: format!("{text}: {e}"),
    })?;
    let mut cfg =
        ConnectConfig::from_resolved(&info, &Context::new().with_os_user(USER)).map_err(|e| {
            Violation {
                invariant: "generated-config-resolves",
                detail: format!("{text}: {e}"),
            }
        })?;
    if tsa == "prefer-primary" {
        cfg.set_target_session_attrs(TargetSessionAttrs::PreferPrimary);
    }
    if coin(rng, 25) {
        cfg.set_strategy(Strategy::Race);
        cfg.set_race_stagger(Duration::from_millis(10 + uniform_inclusive(rng, 400)));
    }
    // A memory client walks once per connect: a failover budget would walk again.
    if coin(rng, 25) && memory.is_none() {
        cfg.set_failover_timeout(Some(Duration::from_millis(
            500 + uniform_inclusive(rng, 5000),
        )));
    }
    Ok(Generated {
        config: cfg,
        hosts,
        startup: keywords.spec(extras),
        memory,
        require_auth,
    })
}

/// A random client's configuration and what the world needs to know of it.
pub(crate) struct Generated {
    config: ConnectConfig,
    hosts: Vec<String>,
    startup: StartupSpec,
    memory: Option<MemoryUse>,
    require_auth: Option<RequireAuth>,
}

/// Startup parameters an adapter hands the machine besides the configuration.
type Extras = Vec<(Vec<u8>, Vec<u8>)>;

/// The keywords that decide a client's startup packets, and the extra parameters its
/// adapter hands the machine (PGDATESTYLE, PGTZ, PGGEQO when not `default`, then the
/// middleware option, a `_pq_.` protocol option no server knows).
fn draw_startup(rng: &mut Rng) -> (StartupKeywords, Extras) {
    let some = |s: &str| Some(s.to_owned());
    let dbname = match uniform_inclusive(rng, 9) {
        0 => None,
        1 => some(""),
        2 => some("sim_db"),
        _ => some("app"),
    };
    let options = match uniform_inclusive(rng, 19) {
        0..=2 => some("-c geqo=off"),
        3 => some("-c statement_timeout=5s"),
        4 => some(""),
        _ => None,
    };
    let application_name = match uniform_inclusive(rng, 19) {
        0..=6 => some("app-one"),
        7 => some(""),
        _ => None,
    };
    // libpq sends `application_name` when the keyword is given, even empty, and the fallback
    // only when it is not; an empty name beside a fallback is left out (see
    // docs/simulation.md, "What the server receives").
    let fallback_application_name = if application_name.as_deref() != Some("") && coin(rng, 40) {
        some("pgyard-sim")
    } else {
        None
    };
    let client_encoding = match uniform_inclusive(rng, 11) {
        0 => some("UTF8"),
        1 => some("LATIN1"),
        2 => some("SQL_ASCII"),
        _ => None,
    };
    let (min_protocol_version, max_protocol_version) = match uniform_inclusive(rng, 99) {
        0..=59 => (None, None),
        60..=69 => (None, Some("latest")),
        70..=77 => (None, Some("3.2")),
        78..=85 => (Some("3.2"), None),
        86..=92 => (Some("3.0"), Some("latest")),
        _ => (Some("3.2"), Some("latest")),
    };
    let keywords = StartupKeywords {
        user: USER.to_owned(),
        dbname,
        replication: None,
        options,
        application_name,
        fallback_application_name,
        client_encoding,
        min_protocol_version,
        max_protocol_version,
    };
    let mut extras = Vec::new();
    for (name, value, p) in [
        ("datestyle", "ISO, MDY", 20),
        ("timezone", "UTC", 20),
        ("geqo", "off", 10),
        (pgyard_driver::MIDDLEWARE_OPTION, "on", 15),
    ] {
        if coin(rng, p) {
            extras.push((name.as_bytes().to_vec(), value.as_bytes().to_vec()));
        }
    }
    (keywords, extras)
}

/// Cluster events of the safety phase, as the mix allows.
pub(crate) fn schedule_faults(rng: &mut Rng, w: &mut World, mix: &Mix, t: &mut Trace) {
    let safety = mix.safety_ms * MS;
    let at = |rng: &mut Rng| Instant(uniform_inclusive(rng, safety));
    let n = mix.nodes as u64;
    if mix.crash {
        let node = uniform_inclusive(rng, n - 1) as usize;
        let t0 = at(rng);
        w.schedule(t0, ClusterEvent::Crash(node));
        if coin(rng, 50) {
            let back = Instant(t0.0 + uniform_inclusive(rng, safety / 2));
            w.schedule(
                back,
                ClusterEvent::Set {
                    node,
                    state: NodeState::StartingUp {
                        then: Role::Standby,
                    },
                },
            );
            w.schedule(
                Instant(back.0 + 50 * MS),
                ClusterEvent::Set {
                    node,
                    state: NodeState::Standby,
                },
            );
        }
    }
    if mix.promote && n > 1 {
        let node = 1 + uniform_inclusive(rng, n - 2) as usize;
        let t0 = at(rng);
        if !mix.two_primaries {
            w.schedule(t0, ClusterEvent::Crash(0));
        }
        let lag = w.nodes[node].lag_ms * MS;
        w.schedule(
            t0,
            ClusterEvent::Set {
                node,
                state: NodeState::Promoting,
            },
        );
        w.schedule(
            Instant(t0.0 + lag + 10 * MS),
            ClusterEvent::Set {
                node,
                state: NodeState::Primary,
            },
        );
    } else if mix.two_primaries && n > 1 {
        let node = 1 + uniform_inclusive(rng, n - 2) as usize;
        w.schedule(
            at(rng),
            ClusterEvent::Set {
                node,
                state: NodeState::Primary,
            },
        );
    }
    if mix.switchover && n > 1 {
        let node = 1 + uniform_inclusive(rng, n - 2) as usize;
        let t0 = at(rng);
        w.schedule(
            t0,
            ClusterEvent::Set {
                node: 0,
                state: NodeState::ShuttingDown,
            },
        );
        w.schedule(
            Instant(t0.0 + 20 * MS),
            ClusterEvent::Set {
                node,
                state: NodeState::Promoting,
            },
        );
        w.schedule(
            Instant(t0.0 + 60 * MS),
            ClusterEvent::Set {
                node,
                state: NodeState::Primary,
            },
        );
        w.schedule(
            Instant(t0.0 + 80 * MS),
            ClusterEvent::Set {
                node: 0,
                state: NodeState::StartingUp {
                    then: Role::Standby,
                },
            },
        );
        w.schedule(
            Instant(t0.0 + 200 * MS),
            ClusterEvent::Set {
                node: 0,
                state: NodeState::Standby,
            },
        );
    }
    if mix.too_many {
        let node = uniform_inclusive(rng, n - 1) as usize;
        let t0 = at(rng);
        w.schedule(t0, ClusterEvent::Limit { node, max: 0 });
        w.schedule(
            Instant(t0.0 + uniform_inclusive(rng, safety)),
            ClusterEvent::Limit { node, max: 100 },
        );
    }
    if mix.hang {
        let node = uniform_inclusive(rng, n - 1) as usize;
        let t0 = at(rng);
        w.schedule(t0, ClusterEvent::Hang { node, hung: true });
        w.schedule(
            Instant(t0.0 + uniform_inclusive(rng, safety)),
            ClusterEvent::Hang { node, hung: false },
        );
    }
    for _ in 0..mix.flips {
        let node = uniform_inclusive(rng, n - 1) as usize;
        let flip = match uniform_inclusive(rng, 2) {
            0 if node > 0 => Flip::Promote,
            0 | 1 => Flip::ReadOnly(true),
            _ => Flip::ReadOnly(false),
        };
        w.schedule(at(rng), ClusterEvent::Flip { node, flip });
    }
    if mix.partition {
        let node = uniform_inclusive(rng, n - 1) as usize;
        let from = at(rng);
        let until = Instant(from.0 + uniform_inclusive(rng, 3000 * MS));
        trace!(t, "partition pg{node} {}..{}", from.0, until.0);
        w.net.partitions.push(Partition {
            nodes: vec![node],
            from,
            until,
        });
    }
}

/// Runs one seed with an optional planted bug (the registered scenario runs with none).
pub fn run_connect(rng: &mut Rng, t: &mut Trace, bug: Bug) -> Result<u64, Violation> {
    let mix = draw_mix(rng);
    t.line(&mix.pieces("mix "));
    let mut w = build_world(rng, &mix, bug);
    for n in &w.nodes {
        t.line(&n.describe_pieces("node "));
    }
    let all_tls = w.nodes.iter().all(|n| n.tls);
    for i in 0..mix.clients {
        let Generated {
            config,
            hosts,
            startup,
            memory,
            require_auth,
        } = random_config(rng, mix.nodes, all_tls)?;
        let spec = ClientSpec {
            config: config.into(),
            startup,
            memory,
            hosts,
            // The memory shows only across connects: its clients make one more.
            connects: 1 + u32::from(coin(rng, 30)) + u32::from(memory.is_some()),
            use_reset: coin(rng, 30),
            hold_ns: Some(uniform_inclusive(rng, 500 * MS)),
            detect_ns: MS + uniform_inclusive(rng, 100 * MS),
            budget_rides_out: false,
            require_auth,
        };
        let mut line = Vec::with_capacity(32);
        line.extend([Piece::Text("client "), Piece::from(i), Piece::Text(" ")]);
        SpecText(&spec).push_pieces(&mut line);
        t.line(&line);
        let start = Instant(uniform_inclusive(rng, mix.safety_ms * MS / 2));
        w.add_client(spec, start);
    }
    schedule_faults(rng, &mut w, &mix, t);
    let live = Instant(mix.safety_ms * MS);
    w.schedule_liveness(live);
    w.run(t, Instant(live.0 + 3_600_000 * MS))?;
    trace_line!(
        t,
        "end t=",
        w.now.0,
        " connected=",
        w.stats.connected,
        " failed=",
        w.stats.failed,
        " live_ok=",
        w.stats.live_ok
    );
    Ok(w.now.0)
}

impl Scenario for ConnectScenario {
    fn name(&self) -> &'static str {
        "connect"
    }

    fn description(&self) -> &'static str {
        "random cluster, configs and faults; connect safety and liveness"
    }

    fn run(&self, rng: &mut Rng, trace: &mut Trace) -> Result<u64, Violation> {
        run_connect(rng, trace, None)
    }
}
