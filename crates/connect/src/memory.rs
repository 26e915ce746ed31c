//! Host-status memory kept by the caller across connects (pgjdbc's `GlobalHostStatusTracker`
//! with `hostRecheckSeconds`, Npgsql's cluster-state cache and round-robin start index).
//! Not libpq: a connector uses it only when given one.

use std::time::Duration;

use pgyard_types::Instant;

use crate::conn::ServerRole;

/// What was last seen of a host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HostStatus {
    /// Unreachable, timed out, refused, starting up or not resolvable.
    Down,
    /// Reached; role if it was learned.
    Up(Option<ServerRole>),
}

/// One remembered host: the slot's display host and raw port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostEntry {
    /// The host as the slot names it (host, else hostaddr).
    pub host: Vec<u8>,
    /// The raw port text (empty: default).
    pub port: Vec<u8>,
    /// What was seen.
    pub status: HostStatus,
    /// When it was seen.
    pub at: Instant,
}

/// Host statuses and a round-robin counter, kept by the caller between connects.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostStatusMemory {
    entries: Vec<HostEntry>,
    recheck: Duration,
    round_robin: bool,
    next_start: u64,
}

impl Default for HostStatusMemory {
    fn default() -> Self {
        HostStatusMemory::new(Duration::from_secs(10))
    }
}

impl HostStatusMemory {
    /// Empty memory; statuses older than `recheck` are ignored (pgjdbc's default is 10 s).
    pub fn new(recheck: Duration) -> Self {
        HostStatusMemory {
            entries: Vec::new(),
            recheck,
            round_robin: false,
            next_start: 0,
        }
    }

    /// Builder: rotate the start slot by one on every connect (Npgsql's load balancing).
    pub fn with_round_robin(mut self, on: bool) -> Self {
        self.round_robin = on;
        self
    }

    /// Every remembered host, oldest insertion first.
    pub fn entries(&self) -> &[HostEntry] {
        &self.entries
    }

    /// The recheck window.
    pub fn recheck(&self) -> Duration {
        self.recheck
    }

    /// Records what was seen of `host`/`port` at `at`.
    pub fn record(&mut self, host: &[u8], port: &[u8], status: HostStatus, at: Instant) {
        match self
            .entries
            .iter_mut()
            .find(|e| e.host == host && e.port == port)
        {
            Some(e) => {
                e.status = status;
                e.at = at;
            }
            None => self.entries.push(HostEntry {
                host: host.to_vec(),
                port: port.to_vec(),
                status,
                at,
            }),
        }
    }

    /// The status seen within the recheck window before `now`, if any.
    pub fn fresh_status(&self, host: &[u8], port: &[u8], now: Instant) -> Option<HostStatus> {
        self.entries
            .iter()
            .find(|e| e.host == host && e.port == port)
            .filter(|e| now.saturating_duration_since(e.at) < self.recheck)
            .map(|e| e.status)
    }

    /// The round-robin start offset for the next connect (and advances it), or 0 when
    /// round-robin is off.
    pub(crate) fn take_start(&mut self) -> u64 {
        if !self.round_robin {
            return 0;
        }
        let s = self.next_start;
        self.next_start = self.next_start.wrapping_add(1);
        s
    }
}
