//! `failover`: clients hold sessions on the primary; the primary dies mid-session (crash,
//! or a switchover that shuts it down and brings it back as a standby); a standby is
//! promoted after a delay plus its replication lag; clients notice and call `reset()`.
//! With a failover wait budget that outlasts the promotion, the reset must land on the new
//! primary; without one it may fail, and the client retries. The promotion may land right
//! after a login (between its ParameterStatus and the check query), and the new primary may
//! come up in maintenance (`default_transaction_read_only = on`) until right after a login
//! once promoted. Safety and liveness as in `connect`.

use std::time::Duration;

use pgyard_conninfo::typed::{ConnectConfig, Context, TargetSessionAttrs};
use pgyard_conninfo::{parse, Strategy};
use pgyard_types::{uniform_inclusive, Instant, Rng};

use super::connect::{build_world, draw_mix, shuffle};
use crate::world::net::NetMix;
use crate::world::pg::{Flip, NodeState, Role, PASSWORD, USER};
use crate::world::{Bug, ClientSpec, ClusterEvent, SpecText, StartupSpec, World};
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct FailoverScenario;

const MS: u64 = 1_000_000;

/// What a seed draws for the failover itself.
#[derive(Debug)]
struct FailoverMix {
    crash_at_ms: u64,
    promote_after_ms: u64,
    switchover: bool,
    budget_pct: u64,
    /// The promotion lands right after the first login that follows its start.
    promote_on_login: bool,
    /// The new primary is read-only by default until right after a login once promoted.
    maintenance: bool,
}

/// Runs one seed with an optional planted bug.
pub fn run_failover(rng: &mut Rng, t: &mut Trace, bug: Bug) -> Result<u64, Violation> {
    let mut mix = draw_mix(rng);
    // A quieter network than `connect`: the failover is the fault under study.
    mix.nodes = 2 + uniform_inclusive(rng, 1) as usize;
    mix.net = NetMix {
        loss_pct: mix.net.loss_pct,
        reset_permille: 0,
        refuse_pct: 0,
        blackhole_pct: 0,
        tls_fail_pct: mix.net.tls_fail_pct,
        dns_fail_pct: 0,
    };
    mix.starting_pct = 0;
    let fm = FailoverMix {
        crash_at_ms: 100 + uniform_inclusive(rng, 400),
        promote_after_ms: 50 + uniform_inclusive(rng, 3000),
        switchover: uniform_inclusive(rng, 99) < 30,
        budget_pct: uniform_inclusive(rng, 100),
        promote_on_login: uniform_inclusive(rng, 99) < 30,
        maintenance: uniform_inclusive(rng, 99) < 20,
    };
    trace!(t, "mix {mix:?} {fm:?}");
    let mut w = build_world(rng, &mix, bug);
    for n in &w.nodes {
        trace!(t, "node {}", n.describe());
    }
    let new_primary = 1 + uniform_inclusive(rng, mix.nodes as u64 - 2) as usize;
    let lag = w.nodes[new_primary].lag_ms * MS;
    let crash = Instant(fm.crash_at_ms * MS);
    let promoted = Instant(crash.0 + fm.promote_after_ms * MS + lag);
    for i in 0..mix.clients {
        let mut hosts: Vec<String> = (0..mix.nodes).map(|n| format!("pg{n}")).collect();
        shuffle(rng, &mut hosts);
        let tsa = [
            "read-write",
            "primary",
            "prefer-primary",
            "any",
            "prefer-standby",
        ][uniform_inclusive(rng, 4) as usize];
        let mut text = format!(
            "host={} port=5432 user={USER} password={PASSWORD} dbname=app sslmode=prefer",
            hosts.join(",")
        );
        if tsa != "prefer-primary" {
            text.push_str(" target_session_attrs=");
            text.push_str(tsa);
        }
        if uniform_inclusive(rng, 99) < 50 {
            text.push_str(&format!(
                " connect_timeout={}",
                2 + uniform_inclusive(rng, 5)
            ));
        }
        let info = parse(&text).map_err(|e| Violation {
            invariant: "generated-config-parses",
            detail: format!("{text}: {e}"),
        })?;
        let mut config: ConnectConfig =
            ConnectConfig::from_resolved(&info, &Context::new().with_os_user(USER)).map_err(
                |e| Violation {
                    invariant: "generated-config-resolves",
                    detail: format!("{text}: {e}"),
                },
            )?;
        if tsa == "prefer-primary" {
            config.set_target_session_attrs(TargetSessionAttrs::PreferPrimary);
        }
        if uniform_inclusive(rng, 99) < 20 {
            config.set_strategy(Strategy::Race);
            config.set_race_stagger(Duration::from_millis(10 + uniform_inclusive(rng, 200)));
        }
        if uniform_inclusive(rng, 99) < fm.budget_pct {
            // Enough to ride out the promotion, or (sometimes) not.
            let budget = promoted.0 - crash.0 + uniform_inclusive(rng, 6000) * MS;
            config.set_failover_timeout(Some(Duration::from_nanos(budget)));
        }
        let spec = ClientSpec {
            config: config.into(),
            startup: StartupSpec::plain(USER, "app"),
            hosts,
            connects: 4,
            use_reset: true,
            memory: None,
            hold_ns: None,
            detect_ns: MS + uniform_inclusive(rng, 50 * MS),
            budget_rides_out: true,
            require_auth: None,
        };
        trace!(t, "client {i} {}", SpecText(&spec));
        w.add_client(spec, Instant(uniform_inclusive(rng, 20 * MS)));
    }
    schedule_failover(&mut w, &fm, new_primary, crash, promoted);
    w.schedule_liveness(Instant(promoted.0 + 500 * MS));
    w.run(t, Instant(promoted.0 + 3_600_000 * MS))?;
    trace!(
        t,
        "end t={} connected={} failed={} live_ok={}",
        w.now.0,
        w.stats.connected,
        w.stats.failed,
        w.stats.live_ok
    );
    Ok(w.now.0)
}

/// The failover's cluster events: the primary crashes (or shuts down, crashes and comes back
/// as a standby), `new_primary` promotes, perhaps right after a login, perhaps in maintenance.
fn schedule_failover(
    w: &mut World,
    fm: &FailoverMix,
    new_primary: usize,
    crash: Instant,
    promoted: Instant,
) {
    if fm.switchover {
        w.schedule(
            crash,
            ClusterEvent::Set {
                node: 0,
                state: NodeState::ShuttingDown,
            },
        );
        w.schedule(Instant(crash.0 + 30 * MS), ClusterEvent::Crash(0));
        w.schedule(
            Instant(promoted.0 + 100 * MS),
            ClusterEvent::Set {
                node: 0,
                state: NodeState::StartingUp {
                    then: Role::Standby,
                },
            },
        );
        w.schedule(
            Instant(promoted.0 + 300 * MS),
            ClusterEvent::Set {
                node: 0,
                state: NodeState::Standby,
            },
        );
    } else {
        w.schedule(crash, ClusterEvent::Crash(0));
    }
    let promoting = Instant(crash.0 + fm.promote_after_ms * MS);
    w.schedule(
        promoting,
        ClusterEvent::Set {
            node: new_primary,
            state: NodeState::Promoting,
        },
    );
    if fm.promote_on_login {
        let flip = Flip::Promote;
        w.schedule(
            promoting,
            ClusterEvent::Flip {
                node: new_primary,
                flip,
            },
        );
    }
    if fm.maintenance {
        w.nodes[new_primary].read_only = true;
        let flip = Flip::ReadOnly(false);
        w.schedule(
            promoted,
            ClusterEvent::Flip {
                node: new_primary,
                flip,
            },
        );
    }
    w.schedule(
        promoted,
        ClusterEvent::Set {
            node: new_primary,
            state: NodeState::Primary,
        },
    );
}

impl Scenario for FailoverScenario {
    fn name(&self) -> &'static str {
        "failover"
    }

    fn description(&self) -> &'static str {
        "the primary dies mid-session, a standby is promoted, clients reset()"
    }

    fn run(&self, rng: &mut Rng, trace: &mut Trace) -> Result<u64, Violation> {
        run_failover(rng, trace, None)
    }
}
