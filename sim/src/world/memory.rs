//! The host-status memory's promises (pgyard's, not libpq's: `HostStatusMemory`, kept by the
//! caller across connects), judged on what the world saw of a client's hosts rather than on
//! the memory's own records. A client with round-robin starts its k-th connect at its k-th
//! slot; a client whose statuses stay fresh walks a host whose last connection the world
//! refused after a host it last held a session on.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use pgyard_connect::HostStatusMemory;
use pgyard_types::Instant;

use super::invariants::{violation, CheckResult};
use super::World;

/// How long a status stays fresh for a [`MemoryUse::Recheck`] client.
const RECHECK: Duration = Duration::from_secs(30);

/// How a client keeps a host-status memory across its connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryUse {
    /// Round-robin start, statuses never fresh (a recheck window of zero); the client neither
    /// load-balances nor has a failover budget, so each connect is one walk from its start.
    RoundRobin,
    /// Statuses fresh for 30 s, no round-robin; the client accepts any server, so a host it
    /// held a session on counts as good.
    Recheck,
}

impl MemoryUse {
    /// The memory the client starts with.
    pub(super) fn memory(self) -> HostStatusMemory {
        match self {
            MemoryUse::RoundRobin => HostStatusMemory::new(Duration::ZERO).with_round_robin(true),
            MemoryUse::Recheck => HostStatusMemory::new(RECHECK),
        }
    }
}

/// What the world last saw of a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LastSeen {
    /// The connection was refused or timed out.
    Refused,
    /// The client won a session on it.
    Held,
    /// Anything else (the memory may have recorded something the world does not judge).
    Other,
}

/// What the world saw of one client's hosts across its connects.
#[derive(Debug, Default)]
pub(super) struct HostLog {
    /// Connects begun (each one walk: memory clients have no failover budget).
    connects: u64,
    /// Per node name: what was last seen of it, and when.
    last: BTreeMap<String, (Instant, LastSeen)>,
    /// At the start of the connect under way: hosts last refused, and last held, within the
    /// recheck window.
    bad_at_start: BTreeSet<String>,
    good_at_start: BTreeSet<String>,
    /// Names the connect under way resolved, in order.
    walked: Vec<String>,
}

impl HostLog {
    /// A connect begins at `now` (a new machine with the memory, or `reset()`).
    pub(super) fn begin(&mut self, now: Instant) {
        self.connects += 1;
        self.walked.clear();
        self.bad_at_start.clear();
        self.good_at_start.clear();
        // A millisecond's margin: the memory's own window is exclusive at its end.
        let fresh =
            |at: Instant| now.0.saturating_sub(at.0) + 1_000_000 < RECHECK.as_nanos() as u64;
        for (name, &(at, seen)) in &self.last {
            match seen {
                LastSeen::Refused if fresh(at) => self.bad_at_start.insert(name.clone()),
                LastSeen::Held if fresh(at) => self.good_at_start.insert(name.clone()),
                _ => false,
            };
        }
    }

    /// The world saw `seen` of node `name` at `now`.
    pub(super) fn saw(&mut self, name: &str, now: Instant, seen: LastSeen) {
        match self.last.get_mut(name) {
            Some(e) => *e = (now, seen),
            None => {
                self.last.insert(name.to_owned(), (now, seen));
            }
        }
    }
}

impl World {
    /// Client `i`'s connect resolves `host`: with round-robin its first name is its k-th
    /// slot's; with fresh statuses, a host last refused comes after every host last held.
    pub(super) fn check_memory_walk(&mut self, i: usize, host: &str) -> CheckResult {
        let c = &mut self.clients[i];
        let Some(used) = c.spec.memory else {
            return Ok(());
        };
        let log = &mut c.hosts_seen;
        let first = log.walked.is_empty();
        log.walked.push(host.to_owned());
        match used {
            MemoryUse::RoundRobin if first => {
                let n = c.spec.hosts.len() as u64;
                let k = log.connects.saturating_sub(1);
                let want = &c.spec.hosts[(k % n) as usize];
                if want == host {
                    return Ok(());
                }
                Err(violation(
                    "memory-round-robin-start",
                    format!(
                        "client {i} ({:?}) began connect {k} with round-robin memory at {host}, \
                         slot {} is {want}",
                        c.spec.hosts,
                        k % n
                    ),
                ))
            }
            MemoryUse::RoundRobin => Ok(()),
            MemoryUse::Recheck => {
                if !log.bad_at_start.contains(host) {
                    return Ok(());
                }
                let skipped: Vec<&String> = log
                    .good_at_start
                    .iter()
                    .filter(|g| !log.walked.contains(g))
                    .collect();
                if skipped.is_empty() {
                    return Ok(());
                }
                Err(violation(
                    "memory-down-hosts-last",
                    format!(
                        "client {i} ({:?}) walked {host}, refused within the recheck window, \
                         before {skipped:?}, held within it (walk {:?})",
                        c.spec.hosts, log.walked
                    ),
                ))
            }
        }
    }
}
