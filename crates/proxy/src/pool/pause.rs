//! PAUSE and RESUME, of every database or of one by name: [`Pools`]'s methods for the
//! admin console's commands.

use pgyard_types::Instant;

use super::{PoolKey, Pools, ServerId, State};
use crate::pool::PoolOut;

impl Pools {
    /// PAUSE: nothing more is lent or opened; idle servers are closed now, servers being
    /// opened are forgotten (each is closed when [`Pools::opened`] reports it), lent ones are
    /// closed when they come back. False (and nothing changes) when already paused.
    pub fn pause(&mut self, now: Instant) -> bool {
        if self.paused {
            return false;
        }
        self.paused = true;
        self.let_go(now, None);
        true
    }

    /// `PAUSE db`: [`Pools::pause`] for one database's pools. False (and nothing changes)
    /// when that database is paused by name already.
    pub fn pause_database(&mut self, now: Instant, database: &str) -> bool {
        if !self.paused_databases.insert(database.to_owned()) {
            return false;
        }
        self.let_go(now, Some(database));
        true
    }

    /// `RESUME db`: lending starts again for a database paused by name (a PAUSE of every
    /// database still holds it). False when it is not paused by name.
    pub fn resume_database(&mut self, now: Instant, database: &str) -> bool {
        if !self.paused_databases.remove(database) {
            return false;
        }
        let keys: Vec<PoolKey> = self
            .pools
            .keys()
            .filter(|k| k.database == database)
            .cloned()
            .collect();
        for key in keys {
            self.serve(now, &key);
        }
        true
    }

    /// Whether `database` is paused by name.
    pub fn is_paused_by_name(&self, database: &str) -> bool {
        self.paused_databases.contains(database)
    }

    /// Whether a `PAUSE db` is complete: paused by name, and no server of it left.
    pub fn pause_complete_for(&self, database: &str) -> bool {
        self.is_paused_by_name(database)
            && self.servers.values().all(|s| s.key.database != database)
    }

    /// Closes the idle servers of `database` (of every database: `None`) and forgets the
    /// ones being opened, which are closed when they arrive.
    fn let_go(&mut self, now: Instant, database: Option<&str>) {
        let gone: Vec<(ServerId, State)> = self
            .servers
            .iter()
            .filter(|(_, s)| !matches!(s.state, State::Busy(_)))
            .filter(|(_, s)| database.is_none_or(|d| s.key.database == d))
            .map(|(id, s)| (*id, s.state))
            .collect();
        for (server, state) in gone {
            self.broken(now, server);
            if state != State::Opening {
                self.out.push_back(PoolOut::Close { server });
            }
        }
    }

    /// RESUME: lending starts again, and waiting clients are served. False when not paused.
    pub fn resume(&mut self, now: Instant) -> bool {
        if !self.paused {
            return false;
        }
        self.paused = false;
        let keys: Vec<PoolKey> = self.pools.keys().cloned().collect();
        for key in keys {
            self.serve(now, &key);
        }
        true
    }

    /// Whether PAUSE is in force.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Whether a PAUSE is complete: paused, and no server connection left (none lent).
    pub fn pause_complete(&self) -> bool {
        self.paused && self.servers.is_empty()
    }
}
