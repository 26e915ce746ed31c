//! The admin console's commands about one database (or every one): RECONNECT, WAIT_CLOSE,
//! DISABLE, ENABLE, PAUSE db, RESUME db and KILL. The pools decide which servers close and
//! when a database's pause is complete; this checks the name, keeps the DISABLEd set, tells
//! the killed clients, and answers the commands that wait once the pools say so.

use std::collections::BTreeSet;
use std::sync::Arc;

use pgyard_proxy::admin::{no_such_database, not_paused, PAUSE_ENDED};
use pgyard_proxy::Pools;
use tokio::sync::oneshot;

use super::admin::lock;
use super::Shared;

/// Where a command's late answer goes.
pub(in crate::proxy) type Answer = oneshot::Sender<Result<(), String>>;

/// What a waiting command waits for.
#[derive(Debug)]
pub(in crate::proxy) enum Wait {
    /// WAIT_CLOSE: no retired server of the database (of any: `None`) left open.
    Close(Option<String>),
    /// PAUSE db: no server of the database left.
    Pause(String),
}

impl Wait {
    fn done(&self, pools: &Pools) -> bool {
        match self {
            Wait::Close(db) => !pools.retiring(db.as_deref()),
            Wait::Pause(db) => pools.pause_complete_for(db),
        }
    }
}

/// Answers the waiting commands whose condition holds now.
pub(in crate::proxy) fn answer_waiters(pools: &Pools, waiters: &mut Vec<(Wait, Answer)>) {
    if waiters.is_empty() {
        return;
    }
    let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(waiters)
        .into_iter()
        .partition(|(w, _)| w.done(pools));
    *waiters = waiting;
    for (what, tx) in done {
        tracing::info!(?what, "console command complete");
        let _ = tx.send(Ok(()));
    }
}

impl Shared {
    /// The databases DISABLEd now.
    pub(in crate::proxy) fn disabled(&self) -> Arc<BTreeSet<String>> {
        lock(&self.registry).disabled.clone()
    }

    /// A command's database must be one SHOW DATABASES lists (`None`: every database).
    fn known_database(&self, database: Option<&str>) -> Result<(), String> {
        match database {
            Some(d) if !self.snapshot().databases.iter().any(|r| r.name == d) => {
                Err(no_such_database(d))
            }
            _ => Ok(()),
        }
    }

    /// RECONNECT: the database's servers (every server: `None`) close as they come back,
    /// the idle ones at once; later transactions get servers opened anew.
    pub(super) fn reconnect(self: &Arc<Self>, database: Option<&str>) -> Result<(), String> {
        self.known_database(database)?;
        let mut st = self.lock();
        let now = self.clock.now();
        st.pools.retire(now, database);
        tracing::info!(database = ?database, "RECONNECT: servers close as they come back");
        self.perform(&mut st, None, now);
        Ok(())
    }

    /// WAIT_CLOSE: `None` when no retired server of the database (of any) is open, else
    /// the receiver answered once none is.
    pub(super) fn wait_close(
        &self,
        database: Option<String>,
    ) -> Result<Option<oneshot::Receiver<Result<(), String>>>, String> {
        self.known_database(database.as_deref())?;
        let mut st = self.lock();
        if !st.pools.retiring(database.as_deref()) {
            return Ok(None);
        }
        let (tx, rx) = oneshot::channel();
        st.db_waiters.push((Wait::Close(database), tx));
        Ok(Some(rx))
    }

    /// DISABLE (`true`) or ENABLE a database: clients connecting from now on are refused
    /// (or admitted) when they log in to it.
    pub(super) fn set_disabled(&self, database: &str, disabled: bool) -> Result<(), String> {
        self.known_database(Some(database))?;
        let mut r = lock(&self.registry);
        let set = Arc::make_mut(&mut r.disabled);
        if disabled {
            set.insert(database.to_owned());
        } else {
            set.remove(database);
        }
        tracing::info!(database, disabled, "logins to a database");
        Ok(())
    }

    /// PAUSE db: the database's pools lend and open nothing; the receiver answers once none
    /// of its servers is left (PAUSE of a database paused already waits the same way).
    pub(super) fn pause_database(
        self: &Arc<Self>,
        database: &str,
    ) -> Result<oneshot::Receiver<Result<(), String>>, String> {
        self.known_database(Some(database))?;
        let mut st = self.lock();
        let now = self.clock.now();
        st.pools.pause_database(now, database);
        tracing::info!(database, "PAUSE: lending none of its servers until RESUME");
        let (tx, rx) = oneshot::channel();
        st.db_waiters.push((Wait::Pause(database.to_owned()), tx));
        // Closes its idle servers, and answers at once when nothing was open.
        self.perform(&mut st, None, now);
        Ok(rx)
    }

    /// RESUME db: lending starts again for a database paused by name; a PAUSE of it still
    /// waiting is told it ended.
    pub(super) fn resume_database(self: &Arc<Self>, database: &str) -> Result<(), String> {
        self.known_database(Some(database))?;
        let mut st = self.lock();
        let now = self.clock.now();
        if !st.pools.resume_database(now, database) {
            return Err(not_paused(database));
        }
        tracing::info!(database, "RESUME: lending its servers again");
        let (ended, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut st.db_waiters)
            .into_iter()
            .partition(|(w, _)| matches!(w, Wait::Pause(d) if d == database));
        st.db_waiters = kept;
        for (_, tx) in ended {
            let _ = tx.send(Err(PAUSE_ENDED.into()));
        }
        self.perform(&mut st, None, now);
        Ok(())
    }

    /// KILL: the database is paused (new clients wait for RESUME), its clients are closed
    /// with FATAL `database removed` and its servers with them, now.
    pub(super) fn kill(self: &Arc<Self>, database: &str) -> Result<(), String> {
        self.known_database(Some(database))?;
        {
            let mut st = self.lock();
            let now = self.clock.now();
            st.pools.pause_database(now, database);
            self.perform(&mut st, None, now);
        }
        let killed = lock(&self.registry).kill(database);
        tracing::info!(
            database,
            clients = killed,
            "KILL: its clients and servers closed"
        );
        Ok(())
    }
}
