//! Pools that hold nothing are forgotten. A client may ask for any database name (under
//! `--auth trust`, or as any user the auth file knows), and each name it asks for makes a
//! pool, whose open then fails on the server (3D000). Kept for ever, a client looping over
//! made-up names would grow the proxy's memory without bound (201 pools in SHOW POOLS after
//! 200 such logins, until session 35). So when a new pool is about to be made and the count
//! has reached a threshold, every pool with no server (open, being opened, idle or lent), no
//! waiting client and no retry pause still running is dropped, and the threshold becomes
//! twice the pools left (at least [`FORGET_MIN`]): the map never holds more than twice the
//! live pools plus that minimum, and the sweeps cost O(1) per new pool, amortised. A
//! forgotten pool is made again, empty, by its next client, as PgBouncer makes again an
//! auto-database it dropped after `autodb_idle_timeout`.

use pgyard_types::Instant;

use super::{Pool, Pools};

/// Pools kept before the first sweep, and the least threshold after any.
pub(super) const FORGET_MIN: usize = 64;

impl Pool {
    /// Nothing lives in it: no server, no waiter, and no retry pause that a client asking
    /// again should still respect.
    fn forgettable(&self, now: Instant) -> bool {
        self.count == 0
            && self.idle.is_empty()
            && self.waiting.is_empty()
            && self.retry_at.is_none_or(|at| at <= now)
    }
}

impl Pools {
    /// Drops the empty pools when there are `forget_at` of them or more.
    pub(super) fn forget_empty(&mut self, now: Instant) {
        if self.pools.len() < self.forget_at {
            return;
        }
        self.pools.retain(|_, pool| !pool.forgettable(now));
        self.forget_at = FORGET_MIN.max(2 * self.pools.len());
    }
}
