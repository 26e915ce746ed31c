//! The seeded random workload of the differential test: slot operations, transactions left
//! open across sync calls, lag and checkpoints, each step followed by a sync call.

use super::*;

fn pick<'a>(rng: &mut Rng, items: &'a [String]) -> Option<&'a String> {
    if items.is_empty() {
        return None;
    }
    let i = uniform_inclusive(rng, items.len() as u64 - 1) as usize;
    items.get(i)
}

/// Transactions the random workload keeps open across sync calls: prepared ones (finished
/// in a later step) and sessions sleeping inside a transaction (joined at the end).
#[derive(Default)]
struct Open {
    prepared: Vec<String>,
    sessions: Vec<thread::JoinHandle<io::Result<String>>>,
    made: usize,
}

impl Open {
    /// Commits the prepared transactions and waits for the sessions.
    fn finish(&mut self, h: &Harness) {
        for gid in self.prepared.drain(..) {
            h.p(&format!("commit prepared '{gid}'"));
        }
        for s in self.sessions.drain(..) {
            s.join()
                .expect("session thread")
                .expect("open session committed");
        }
    }

    /// A prepared transaction (with a subtransaction, sometimes DDL), open across the
    /// following sync calls; or finish the oldest pending one.
    fn prepare_or_finish(&mut self, h: &Harness, rng: &mut Rng, seed: u64) {
        if self.prepared.is_empty() || (self.prepared.len() < 2 && uniform_inclusive(rng, 1) == 1) {
            self.made += 1;
            let n = seed as usize * 1000 + self.made;
            let ddl = if uniform_inclusive(rng, 1) == 1 {
                format!("create table p{n}(x int); ")
            } else {
                String::new()
            };
            let gid = format!("g{seed}_{n}");
            h.p(&format!(
                "begin; insert into t values (30); savepoint a; insert into t values (31); \
                 release a; {ddl}prepare transaction '{gid}'"
            ));
            self.prepared.push(gid);
        } else if !self.prepared.is_empty() {
            let gid = self.prepared.remove(0);
            let verb = if uniform_inclusive(rng, 2) == 0 {
                "rollback"
            } else {
                "commit"
            };
            h.p(&format!("{verb} prepared '{gid}'"));
        }
    }

    /// A session inside a transaction (savepoints, sometimes DDL) across this step's sync
    /// call; it commits during a later step.
    fn start_session(&mut self, h: &Harness, rng: &mut Rng, seed: u64) {
        self.made += 1;
        let n = seed as usize * 1000 + self.made;
        let ddl = if uniform_inclusive(rng, 1) == 1 {
            format!("create table o{n}(x int); ")
        } else {
            String::new()
        };
        let sql = format!(
            "begin; insert into t values (40); savepoint a; insert into t values (41); \
             {ddl}select pg_sleep(1.5); insert into t values (42); commit"
        );
        let sock = h.primary.socket_conninfo();
        self.sessions
            .push(thread::spawn(move || cluster::psql(&sock, &sql)));
        let deadline = Instant::now() + Duration::from_secs(10);
        // Its statements before the sleep assign the top-level xid and a subxid; only
        // once it sleeps are both in WAL, so that the flush in `wait_replay` covers them.
        while h.p(
            "select count(*) from pg_stat_activity where backend_xid is not null \
                   and wait_event = 'PgSleep' and query like '%pg_sleep(1.5)%'",
        ) == "0"
        {
            assert!(Instant::now() < deadline, "open session did not start");
            thread::sleep(Duration::from_millis(20));
        }
    }
}

/// One transaction with subtransactions and/or catalog changes, as SQL text. `shape` picks
/// the variant.
fn xact_sql(shape: u64, n: usize) -> String {
    match shape {
        // Savepoints: a rolled-back one, a released one, a nested one.
        0 => "begin; insert into t values (10); savepoint a; insert into t values (11); \
              rollback to a; savepoint b; insert into t values (12); savepoint c; \
              insert into t values (13); release b; insert into t values (14); commit"
            .to_owned(),
        // The top-level transaction writes first inside a subtransaction.
        1 => "begin; savepoint a; insert into t values (15); release a; \
              savepoint b; insert into t values (16); rollback to b; commit"
            .to_owned(),
        // DDL in a transaction block.
        2 => format!(
            "begin; insert into t values (20); create table d{n}(x int); \
             insert into d{n} values (1); commit"
        ),
        // DDL in a subtransaction that is rolled back, then a released one.
        3 => format!(
            "begin; insert into t values (21); savepoint a; create table e{n}(x int); \
             rollback to a; savepoint b; create table f{n}(x int); release b; commit"
        ),
        // Plain DDL, autocommit.
        _ => format!("create table g{n}(x int)"),
    }
}

pub(super) fn random_sequence(h: &mut Harness, seed: u64, steps: usize) {
    let mut rng = rng_from_seed(seed);
    let mut made = 0usize;
    let mut open = Open::default();
    for step in 0..steps {
        let live: Vec<String> = h
            .p("select coalesce(string_agg(slot_name, ' '), '') from pg_replication_slots where slot_type = 'logical' and invalidation_reason is null")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        let ctx = format!("seed {seed} step {step}");
        match uniform_inclusive(&mut rng, 14) {
            0 | 1 => {
                // Creating a slot waits for every running (and prepared) transaction.
                open.finish(h);
                made += 1;
                let name = format!("r{seed}_{made}");
                let failover = uniform_inclusive(&mut rng, 3) != 0;
                let two_phase = uniform_inclusive(&mut rng, 1) == 1;
                let plugin = if uniform_inclusive(&mut rng, 1) == 0 {
                    "test_decoding"
                } else {
                    "pgoutput"
                };
                h.create_remote(&name, plugin, two_phase, failover);
            }
            2 => {
                if let Some(s) = pick(&mut rng, &live) {
                    h.p(&format!("select pg_drop_replication_slot('{s}')"));
                }
            }
            3 | 4 => {
                if let Some(s) = pick(&mut rng, &live) {
                    h.catch_up(s);
                }
            }
            5 => {
                let td: Vec<String> = h
                    .p("select coalesce(string_agg(slot_name, ' '), '') from pg_replication_slots where plugin = 'test_decoding' and invalidation_reason is null")
                    .split_whitespace()
                    .map(str::to_owned)
                    .collect();
                if let Some(s) = pick(&mut rng, &td) {
                    h.p(&format!(
                        "select count(*) from pg_logical_slot_get_changes('{s}', null, null)"
                    ));
                }
            }
            6 => {
                h.p("insert into t select generate_series(1, 5)");
            }
            7 => {
                h.set_lag(true);
                h.p("insert into t values (8)");
                if let Some(s) = pick(&mut rng, &live) {
                    h.catch_up(s);
                }
                h.sync(&format!("{ctx} (lagging)"));
                h.set_lag(false);
            }
            8 => {
                h.p("checkpoint");
                h.wait_replay();
                h.s("checkpoint");
            }
            10 | 11 => {
                open.made += 1;
                let shape = uniform_inclusive(&mut rng, 4);
                h.p(&xact_sql(shape, seed as usize * 1000 + open.made));
                if let Some(s) = pick(&mut rng, &live) {
                    h.catch_up(s);
                }
            }
            12 => {
                open.prepare_or_finish(h, &mut rng, seed);
                if let Some(s) = pick(&mut rng, &live) {
                    h.catch_up(s);
                }
            }
            13 => {
                open.start_session(h, &mut rng, seed);
                if let Some(s) = pick(&mut rng, &live) {
                    h.catch_up(s);
                }
            }
            _ => {
                if let Some(s) = pick(&mut rng, &live) {
                    let on = uniform_inclusive(&mut rng, 1) == 1;
                    let _ = h.replication_cmd(&format!(
                        "ALTER_REPLICATION_SLOT {s} (FAILOVER {})",
                        if on { "true" } else { "false" }
                    ));
                }
            }
        }
        h.wait_replay();
        h.sync(&ctx);
    }
    open.finish(h);
    h.wait_replay();
    h.sync(&format!("seed {seed}: open transactions finished"));
}
