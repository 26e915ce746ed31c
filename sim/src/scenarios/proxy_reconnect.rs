//! The admin console's RECONNECT in the `proxy` world: once, at a drawn moment, every server
//! the pools hold (or the clients' database's, by name) is retired, as `shared.rs`'s
//! RECONNECT calls the pools' `retire`. Judged against the world's own record of which
//! servers were open then: exactly those are marked, none of them is lent again or stays
//! idle, and what WAIT_CLOSE asks of the pools (`retiring`) holds while one is still open.

use pgyard_proxy::{ServerId, ServerUse};

use super::proxy::{violation, World};
use crate::{trace, Trace, Violation};

/// The database every client of this world uses.
const DATABASE: &str = "app";

impl World {
    /// RECONNECT (`RECONNECT app` when `by_name`): the servers open now are retired.
    pub(super) fn console_reconnect(&mut self, t: &mut Trace, by_name: bool) {
        let db = by_name.then_some(DATABASE);
        trace!(t, "t={} RECONNECT {}", self.now.0, db.unwrap_or("(all)"));
        self.retired
            .extend(self.pools.servers().iter().map(|s| s.id));
        self.pools.retire(self.now, db);
        self.perform_pools(t, None);
    }

    /// The pools lend `server` (`how`): never one a RECONNECT retired.
    pub(super) fn judge_lend_retired(&mut self, how: &str, server: ServerId) {
        if self.retired.contains(&server) {
            let detail = format!("the pools {how} server {}, retired by RECONNECT", server.0);
            self.fault
                .get_or_insert(violation("retired-never-lent", detail));
        }
    }

    /// After every step: the pools mark exactly the servers the RECONNECT found open, none
    /// of them waits idle, and `retiring` says whether one is still open.
    pub(super) fn judge_retired(&self) -> Result<(), Violation> {
        let views = self.pools.servers();
        for v in &views {
            if v.retired != self.retired.contains(&v.id) {
                let detail = format!(
                    "server {} is marked retired={} where RECONNECT {} it",
                    v.id.0,
                    v.retired,
                    if v.retired {
                        "never retired"
                    } else {
                        "retired"
                    }
                );
                return Err(violation("reconnect-retires-exactly", detail));
            }
            if v.retired && v.state == ServerUse::Idle {
                let detail = format!("server {} is idle after RECONNECT retired it", v.id.0);
                return Err(violation("retired-never-idle", detail));
            }
        }
        let open = views.iter().any(|v| v.retired);
        let said = [
            self.pools.retiring(None),
            self.pools.retiring(Some(DATABASE)),
        ];
        if said != [open, open] || self.pools.retiring(Some("elsewhere")) {
            let detail =
                format!("retiring (all, {DATABASE}) is {said:?} with a retired server open={open}");
            return Err(violation("wait-close-answers", detail));
        }
        Ok(())
    }
}
