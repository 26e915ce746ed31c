//! A configuration reload in the `proxy` world: once, at a drawn moment, the pool size
//! changes, as `shared.rs` hands a reloaded file's limits to the pools (`set_settings`).
//! Judged against the world's own record: a pool never holds more connections than the size
//! in force, but for the servers a shrink found open, which may stay until they come back;
//! a pool over its size keeps none of them idle (an idle one is closed at the reload, a lent
//! one when it comes back); a grown pool serves its waiting clients (every client must still
//! finish). The reload changes the size only: idle and lifetime limits stay as drawn.

use std::collections::BTreeSet;

use pgyard_proxy::{PoolSettings, Route, ServerId, ServerUse};

use super::proxy::{violation, World};
use super::proxy_plan::OPTIONS;
use crate::{trace, Trace, Violation};

impl World {
    /// RELOAD with pool size `size`; a shrink records the servers open or being opened.
    pub(super) fn console_reload(&mut self, t: &mut Trace, size: usize) {
        let before = self.pools.settings();
        trace!(
            t,
            "t={} RELOAD pool_size {} -> {size}",
            self.now.0,
            before.size
        );
        if size < before.size {
            let open = self.conns.keys().copied();
            let opening = self.openings.keys().filter(|s| !self.forgotten.contains(s));
            let found: BTreeSet<ServerId> = open.chain(opening.copied()).collect();
            self.shrunk_from.extend(found);
        }
        self.pools
            .set_settings(self.now, PoolSettings { size, ..before });
        self.perform_pools(t, None);
    }

    /// Whether the pool of `server` holds more connections (open or being opened) than the
    /// size in force: what a shrink leaves, closed as it comes back or goes idle.
    pub(super) fn over_size(&self, server: ServerId) -> bool {
        let Some(c) = self.conns.get(&server) else {
            return false;
        };
        let (open, opening, _) = self.pool_load(c.route, &c.options);
        open + opening > self.pools.settings().size
    }

    /// A pool's connections (by route and `options`): open (being reset included), being
    /// opened (but those a PAUSE forgot), and of both those a shrink found. Counted without
    /// allocating: this runs after every step.
    fn pool_load(&self, route: Route, options: &[u8]) -> (usize, usize, usize) {
        let open = self
            .conns
            .iter()
            .filter(|(_, c)| c.route == route && c.options == options);
        let opening = self.openings.iter().filter(|(id, o)| {
            o.route == route && o.options.as_bytes() == options && !self.forgotten.contains(id)
        });
        let (mut open_n, mut opening_n, mut left) = (0, 0, 0);
        for (id, _) in open {
            open_n += 1;
            left += usize::from(self.shrunk_from.contains(id));
        }
        for (id, _) in opening {
            opening_n += 1;
            left += usize::from(self.shrunk_from.contains(id));
        }
        (open_n, opening_n, left)
    }

    /// After every step, per pool (route and `options`): the connections (open, being
    /// opened, being reset) within the size in force, or within the servers a shrink found
    /// that are still there; and with more than the size, none of them idle in the pools.
    pub(super) fn judge_sizes(&self) -> Result<(), Violation> {
        let size = self.pools.settings().size;
        let pools = [Route::Primary, Route::Standby, Route::Any]
            .into_iter()
            .flat_map(|r| std::iter::once("").chain(OPTIONS).map(move |o| (r, o)));
        for (route, options) in pools {
            let (open_n, opening_n, left) = self.pool_load(route, options.as_bytes());
            let count = open_n + opening_n;
            if count <= size {
                continue;
            }
            if count > left {
                let detail = format!(
                    "the {route:?} pool (options {options:?}) of size {size} has {open_n} \
                     connections and {opening_n} being opened ({left} of them there since a \
                     shrink)"
                );
                return Err(violation("pool-within-size", detail));
            }
            let views = self.pools.servers();
            let idle = views.iter().find(|v| {
                v.key.route == route && v.key.options == options && v.state == ServerUse::Idle
            });
            if let Some(v) = idle {
                let detail = format!(
                    "the {route:?} pool (options {options:?}) of size {size} keeps server {} \
                     idle with {count} connections",
                    v.id.0
                );
                return Err(violation("over-size-never-idle", detail));
            }
        }
        Ok(())
    }
}
