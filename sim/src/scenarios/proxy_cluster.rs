//! The cluster behind the `proxy` scenario's pooler: a primary and one or two streaming
//! standbys, each a [`pg::Node`] that answers the connect machine's logins, plus what the
//! pooler's decisions depend on — the WAL position, each standby's replay position lagging it
//! over simulated time, and the failures a seed draws: a server that dies (the primary or a
//! standby, by a fast shutdown that says FATAL 57P01 or by a crash that says nothing), the
//! promotion of a standby, and the old primary coming back as a standby of the new one.

use pgyard_types::{uniform_inclusive, Instant, Lsn, Rng};

use crate::world::pg::{Node, NodeState, Role};

/// Where the WAL starts.
const WAL_START: Lsn = Lsn(0x0300_0000);

/// One server of the cluster.
#[derive(Debug)]
pub(super) struct Member {
    /// The node that answers logins (its state is the server's state).
    pub(super) node: Node,
    /// Bumped at every restart: connections of an earlier life are dead.
    pub(super) life: u32,
    /// How far behind the primary's commits its replay runs.
    pub(super) lag_ns: u64,
    /// Where replay stood when recovery ended (`pg_last_wal_replay_lsn()` stays there);
    /// `None` while it never recovered or recovers still.
    frozen: Option<Lsn>,
}

/// What fails in a seed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
    /// Nothing.
    None,
    /// The primary dies and a standby is promoted.
    Primary,
    /// A standby dies.
    Standby,
}

/// The cluster's part of a seed's mix.
#[derive(Clone, Debug)]
pub(super) struct ClusterMix {
    /// Servers (the first is the primary).
    pub(super) nodes: usize,
    /// Each standby's replay lag.
    pub(super) lag_ns: Vec<u64>,
    /// What fails.
    pub(super) fault: Fault,
    /// The run step at which it fails.
    pub(super) at_step: u64,
    /// It says FATAL 57P01 to its clients first (a fast shutdown), else it just goes.
    pub(super) fatal: bool,
    /// How long after the primary's death the promotion starts.
    pub(super) promote_after_ns: u64,
    /// How long after its death the dead server starts again as a standby (`None`: never).
    pub(super) rejoin_after_ns: Option<u64>,
    /// The connect machine's failover budget for server connects (`failover_timeout`).
    pub(super) failover_ns: Option<u64>,
}

impl ClusterMix {
    /// Draws the cluster's mix.
    pub(super) fn draw(rng: &mut Rng) -> ClusterMix {
        let nodes = 2 + uniform_inclusive(rng, 1) as usize;
        let lag_ns = (1..nodes)
            .map(|_| [0, 2_000_000, 20_000_000, 200_000_000][uniform_inclusive(rng, 3) as usize])
            .collect();
        let fault = match uniform_inclusive(rng, 3) {
            0 => Fault::None,
            1 => Fault::Standby,
            _ => Fault::Primary,
        };
        ClusterMix {
            nodes,
            lag_ns,
            fault,
            at_step: 2 + uniform_inclusive(rng, 120),
            fatal: uniform_inclusive(rng, 1) == 0,
            promote_after_ns: 1_000_000 + uniform_inclusive(rng, 1_500_000_000),
            rejoin_after_ns: (uniform_inclusive(rng, 1) == 0)
                .then(|| 10_000_000 + uniform_inclusive(rng, 2_000_000_000)),
            failover_ns: (uniform_inclusive(rng, 1) == 0)
                .then(|| 1_000_000_000 * (1 + uniform_inclusive(rng, 4))),
        }
    }
}

/// A change of the cluster, due at an instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Change {
    /// The server's process is gone: connects are refused, connections die.
    Die(usize),
    /// A standby starts its promotion (still in recovery while it replays what it has).
    Promote(usize),
    /// The promotion is done: the server is the primary.
    Promoted(usize),
    /// The server starts again, as a standby (57P03 while it starts).
    Restart(usize),
    /// It accepts connections as a standby.
    Up(usize),
}

/// The `TimeZone` every server logs in with (what `DISCARD ALL` returns a session to).
pub(super) const ZONE: &str = "UTC";

/// The `search_path` every server logs in with (PostgreSQL's default, which PostgreSQL 18
/// reports).
pub(super) const PATH: &str = "\"$user\", public";

/// A zone as the servers spell it, whatever case it was written in: `UTC`, and the clients'
/// own zones in lower case (`z2`).
pub(super) fn spell_zone(zone: &str) -> String {
    if zone.eq_ignore_ascii_case(ZONE) {
        ZONE.to_owned()
    } else {
        zone.to_lowercase()
    }
}

/// The servers, the WAL and the replay positions.
#[derive(Debug)]
pub(super) struct Cluster {
    /// The servers, `pg0` first.
    pub(super) members: Vec<Member>,
    /// The WAL position of the last commit.
    pub(super) wal: Lsn,
    /// Every commit, in time order: when, and the position it ended at.
    commits: Vec<(Instant, Lsn)>,
    /// Bumped at every change, so that a connect can tell whether the cluster changed while
    /// it ran.
    pub(super) epoch: u64,
}

impl Cluster {
    /// `pg0` a primary, the others standbys with the mix's lags (trust logins).
    pub(super) fn new(rng: &mut Rng, mix: &ClusterMix) -> Cluster {
        let members = (0..mix.nodes)
            .map(|i| {
                let state = if i == 0 {
                    NodeState::Primary
                } else {
                    NodeState::Standby
                };
                let mut node = Node::new(format!("pg{i}"), state, 0, 1, rng);
                node.zone = Some(ZONE);
                node.path = Some(PATH);
                Member {
                    node,
                    life: 0,
                    lag_ns: if i == 0 { 0 } else { mix.lag_ns[i - 1] },
                    frozen: None,
                }
            })
            .collect();
        Cluster {
            members,
            wal: WAL_START,
            commits: Vec::new(),
            epoch: 0,
        }
    }

    /// A write committed at `now`, ending at the current WAL position.
    pub(super) fn committed(&mut self, now: Instant) {
        self.commits.push((now, self.wal));
    }

    /// The state of server `i`.
    pub(super) fn state(&self, i: usize) -> NodeState {
        self.members[i].node.state
    }

    /// Whether server `i` is in recovery (a standby, or a standby being promoted).
    pub(super) fn in_recovery(&self, i: usize) -> bool {
        self.state(i).in_recovery()
    }

    /// How far server `i` has replayed at `now`: every commit older than its lag.
    pub(super) fn replayed(&self, i: usize, now: Instant) -> Lsn {
        let horizon = now.0.saturating_sub(self.members[i].lag_ns);
        let n = self.commits.partition_point(|(at, _)| at.0 <= horizon);
        n.checked_sub(1).map_or(WAL_START, |k| self.commits[k].1)
    }

    /// What `pg_last_wal_replay_lsn()` answers on server `i` at `now`: the replay position
    /// during recovery, where it stopped once recovery ended, NULL on a server that never
    /// recovered (the first primary).
    pub(super) fn replay_lsn_sql(&self, i: usize, now: Instant) -> Option<Lsn> {
        if self.in_recovery(i) {
            Some(self.replayed(i, now))
        } else {
            self.members[i].frozen
        }
    }

    /// Applies a change; returns what the trace says about it.
    pub(super) fn apply(&mut self, now: Instant, change: Change) -> &'static str {
        self.epoch += 1;
        match change {
            Change::Die(i) => {
                self.members[i].node.state = NodeState::Crashed;
                "dies"
            }
            Change::Promote(i) => {
                self.members[i].node.state = NodeState::Promoting;
                "promoting"
            }
            Change::Promoted(i) => {
                let at = self.replayed(i, now);
                let m = &mut self.members[i];
                m.frozen = Some(at);
                m.lag_ns = 0;
                m.node.state = NodeState::Primary;
                "promoted"
            }
            Change::Restart(i) => {
                let m = &mut self.members[i];
                m.life += 1;
                m.frozen = None;
                m.node.state = NodeState::StartingUp {
                    then: Role::Standby,
                };
                "restarting as a standby"
            }
            Change::Up(i) => {
                self.members[i].node.state = NodeState::Standby;
                "up as a standby"
            }
        }
    }

    /// The changes the mix draws once the fault strikes at `now`, with their times.
    pub(super) fn plan_fault(
        &self,
        rng: &mut Rng,
        mix: &ClusterMix,
        now: Instant,
    ) -> Vec<(Instant, Change)> {
        let victim = match mix.fault {
            Fault::None => return Vec::new(),
            Fault::Primary => 0,
            Fault::Standby => 1 + uniform_inclusive(rng, mix.nodes as u64 - 2) as usize,
        };
        let mut out = vec![(now, Change::Die(victim))];
        let mut back_after = now.0;
        if victim == 0 {
            // The first standby is promoted.
            let heir = 1;
            let start = now.0 + mix.promote_after_ns;
            // The promotion replays what the standby received but had not applied.
            let done = start + self.members[heir].lag_ns + 1_000_000;
            out.push((Instant(start), Change::Promote(heir)));
            out.push((Instant(done), Change::Promoted(heir)));
            back_after = done;
        }
        if let Some(after) = mix.rejoin_after_ns {
            let at = back_after + after;
            out.push((Instant(at), Change::Restart(victim)));
            out.push((Instant(at + 5_000_000), Change::Up(victim)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mix(lag_ns: u64) -> ClusterMix {
        ClusterMix {
            nodes: 2,
            lag_ns: vec![lag_ns],
            fault: Fault::Primary,
            at_step: 2,
            fatal: true,
            promote_after_ns: 1_000,
            rejoin_after_ns: Some(10_000),
            failover_ns: None,
        }
    }

    #[test]
    fn a_standby_replays_what_is_older_than_its_lag_and_keeps_its_position_when_promoted() {
        let mut rng = pgyard_types::rng_from_seed(1);
        let mut c = Cluster::new(&mut rng, &mix(100));
        assert_eq!(
            c.replay_lsn_sql(0, Instant(0)),
            None,
            "the first primary never recovered"
        );
        c.wal = Lsn(WAL_START.0 + 0x100);
        c.committed(Instant(1_000));
        assert_eq!(c.replayed(1, Instant(1_050)), WAL_START);
        assert_eq!(c.replayed(1, Instant(1_100)), c.wal);
        assert_eq!(c.replay_lsn_sql(1, Instant(1_100)), Some(c.wal));
        let plan = c.plan_fault(&mut rng, &mix(100), Instant(2_000));
        let changes: Vec<Change> = plan.iter().map(|(_, ch)| *ch).collect();
        assert_eq!(
            changes,
            [
                Change::Die(0),
                Change::Promote(1),
                Change::Promoted(1),
                Change::Restart(0),
                Change::Up(0)
            ]
        );
        assert!(plan.windows(2).all(|w| w[0].0 <= w[1].0), "in time order");
        for (at, ch) in plan {
            c.apply(at, ch);
        }
        assert_eq!(c.state(1), NodeState::Primary);
        assert!(!c.in_recovery(1));
        // Out of recovery, the function stays where replay ended.
        let before = c.replay_lsn_sql(1, Instant(1_000_000_000));
        c.wal = Lsn(c.wal.0 + 0x100);
        c.committed(Instant(1_000_000_000));
        assert_eq!(c.replay_lsn_sql(1, Instant(2_000_000_000)), before);
        assert!(c.in_recovery(0), "the old primary is back as a standby");
        assert_eq!(c.members[0].life, 1);
    }
}
