//! Differential test against real PostgreSQL 18 and 17: before every `pg_sync_replication_slots()`
//! call the engine predicts the standby's slot table (or the error), and afterwards the
//! prediction must equal what `pg_replication_slots` shows. Scripted steps first, then a
//! seeded random sequence (fixed seeds), then promotion.

use std::collections::BTreeMap;
use std::io;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use pgyard_slotsync::decoding::parse_running_xacts_description;
use pgyard_slotsync::engine::{check_user_op, promote, UserOp};
use pgyard_slotsync::snapshot::{self, QueryError, Source};
use pgyard_slotsync::{
    Action, Outcome, PlanInput, Positions, SkipReason, SlotOpError, SlotRow, StandbySlotList,
    Version,
};
use pgyard_testkit::cluster::{self, Node, Options, Primary};
use pgyard_testkit::postgres::Major;
use pgyard_types::{rng_from_seed, uniform_inclusive, Lsn, Rng, Xid};
use serde_json::Value;

#[path = "differential/random.rs"]
mod random;
#[path = "differential/scripted.rs"]
mod scripted;
#[path = "differential/snapfiles.rs"]
mod snapfiles;

use random::random_sequence;
use scripted::{
    failover_toggled, local_invalidation, promotion, remote_drop, remote_invalidation,
    same_name_local_slot, scripted_catch_up, standby_lag, user_ops_on_synced, walsender_gate,
};

/// Columns whose values depend on wall time or process ids, which the engine does not predict.
const VOLATILE: [&str; 4] = ["inactive_since", "active", "active_pid", "safe_wal_size"];

struct Harness {
    primary: Primary,
    /// The version the engine is asked to decide as (the servers' own).
    version: Version,
    mismatches: Vec<String>,
    syncs: usize,
    errors_checked: usize,
    /// Position updates predicted as copies / by decoding.
    copied: usize,
    decoded: usize,
    /// Decoded updates whose restart_lsn or catalog_xmin is not the remote's (a copy would
    /// have been wrong there).
    decoded_differs: usize,
    /// Slots whose restart_lsn/catalog_xmin were not compared (approximate predictions).
    exempted: usize,
    /// Slot rows compared after sync calls.
    rows_compared: usize,
    /// The standby's in-memory `effective_catalog_xmin` values that differ from the view
    /// (not observable in SQL): what the engine predicted after the previous call. The
    /// standby is never restarted here, so nothing else changes them between calls.
    effective: BTreeMap<String, Xid>,
    /// Sync calls whose input carried such values.
    carried: usize,
    /// `could not synchronize` LOG lines compared with the predicted skips.
    logs_checked: usize,
    /// Decoded updates whose decoded range held: subtransaction records (mapped to their
    /// top-level xid), catalog changes (INVALIDATION records), PREPARE records, and
    /// transactions still running at the call (no end record).
    with_subxacts: usize,
    with_catalog: usize,
    with_prepared: usize,
    with_open: usize,
}

/// A node read through psql (the harness's way in), as the snapshot code's [`Source`].
struct Psql<'a>(&'a Node);

impl Source for Psql<'_> {
    fn value(&mut self, sql: &str) -> Result<Option<String>, QueryError> {
        self.0
            .psql(sql)
            .map(|t| (!t.is_empty()).then_some(t))
            .map_err(|e| QueryError {
                sqlstate: None,
                message: server_error(&e),
            })
    }
}

fn server_error(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find("ERROR:  ") {
        Some(i) => text[i + 8..].lines().next().unwrap_or("").to_owned(),
        None => format!("(no server error in: {text})"),
    }
}

fn server_detail(e: &io::Error) -> Option<String> {
    let text = e.to_string();
    text.find("DETAIL:  ")
        .map(|i| text[i + 9..].lines().next().unwrap_or("").to_owned())
}

/// The `could not synchronize replication slot` LOG messages (with their DETAIL) in a piece
/// of the server log, in order.
fn sync_skip_logs(log: &str) -> Vec<(String, Option<String>)> {
    let lines: Vec<&str> = log.lines().collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(at) = line.find("LOG:  could not synchronize replication slot") else {
            continue;
        };
        let detail = lines
            .get(i + 1)
            .and_then(|l| l.find("DETAIL:  ").map(|d| l[d + 9..].to_owned()));
        out.push((line[at + 6..].to_owned(), detail));
    }
    out
}

fn normalized(rows: &[Value]) -> Vec<Value> {
    let mut rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mut r = r.clone();
            if let Some(o) = r.as_object_mut() {
                for k in VOLATILE {
                    o.remove(k);
                }
            }
            r
        })
        .collect();
    rows.sort_by_key(|r| r["slot_name"].as_str().unwrap_or("").to_owned());
    rows
}

impl Harness {
    fn standby(&self) -> &Node {
        &self.primary.standbys()[0]
    }

    fn p(&self, sql: &str) -> String {
        self.primary
            .psql(sql)
            .unwrap_or_else(|e| panic!("primary: {sql}: {e}"))
    }

    fn s(&self, sql: &str) -> String {
        self.standby()
            .psql(sql)
            .unwrap_or_else(|e| panic!("standby: {sql}: {e}"))
    }

    fn rows(node: &Node) -> Vec<Value> {
        let text = node
            .psql(snapshot::SLOTS_SQL)
            .expect("reading pg_replication_slots");
        match serde_json::from_str(&text) {
            Ok(Value::Array(a)) => a,
            other => panic!("unexpected slots JSON {other:?}"),
        }
    }

    /// Makes the primary flush every WAL record inserted so far, then waits (bounded) until
    /// the standby has replayed it.
    fn wait_replay(&self) {
        // An open transaction's records stay in the primary's WAL buffers until something
        // flushes them: the walwriter once a RUNNING_XACTS record asks it to, or the next
        // commit. Waiting for the flush position alone let them reach the standby between
        // capturing an input and the call, moving its next xid under the engine (issue 11).
        // A non-transactional logical message flushed at once pushes them out now; it takes no
        // xid, and fast-forward decoding skips it.
        let target = self.p("select pg_current_wal_flush_lsn() \
             from (select pg_logical_emit_message(false, 'pgyard-harness', '', true)) m");
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let done = self.s(&format!(
                "select pg_last_wal_replay_lsn() >= '{target}'::pg_lsn"
            ));
            if done == "t" {
                return;
            }
            assert!(Instant::now() < deadline, "standby did not replay {target}");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The plan input, read as `pgyard slotsync snapshot` reads it (the same SQL, here run
    /// through psql), so every call below also checks the snapshot code.
    fn collect(&self) -> PlanInput {
        let mut primary = Psql(&self.primary);
        let mut standby = Psql(self.standby());
        let snap = snapshot::collect(Some(&mut primary), &mut standby).expect("snapshot");
        assert!(
            snap.notes.is_empty(),
            "a superuser reads everything: {:?}",
            snap.notes
        );
        assert_eq!(snap.input.standby.version, self.version);
        snap.input
    }

    /// Predicts, calls `pg_sync_replication_slots()`, compares. Returns the server's error.
    fn sync(&mut self, step: &str) -> Option<String> {
        self.syncs += 1;
        let captured_at = SystemTime::now();
        let mut input = self.collect();
        input.standby.effective_catalog_xmins = self.effective.clone();
        self.carried += usize::from(!self.effective.is_empty());
        let outcome = input.plan();
        self.effective = outcome.effective_catalog_xmins.clone();
        let log_start = self.standby().log_text().len();
        let called_at = SystemTime::now();
        let result = self.standby().psql("select pg_sync_replication_slots()");
        if let Some(stale) = self.input_went_stale(&input) {
            self.mismatches.push(format!("[{step}] {stale}"));
        }
        if let Some(files) = snapfiles::check(
            self.standby(),
            outcome.serialized_snapshots.as_deref(),
            captured_at,
            called_at,
        ) {
            self.mismatches.push(format!(
                "[{step}] {files}\n  input: {}\n  actions: {:?}",
                input.to_json(),
                outcome.actions
            ));
        }
        self.compare_skip_logs(step, &input, &outcome, log_start);
        let actual_error = self.compare_error(step, &input, &outcome, &result);
        self.compare_slots(step, &input, &outcome);
        actual_error
    }

    /// The call's LOG lines show what the view cannot, so the predicted skips must match them.
    fn compare_skip_logs(
        &mut self,
        step: &str,
        input: &PlanInput,
        outcome: &Outcome,
        log_start: usize,
    ) {
        // The LOG lines of the call: a temporary slot's skip shows the local catalog_xmin the
        // server computed (the initial one for a new slot), which the view never shows.
        let log = self.standby().log_text();
        let logged = sync_skip_logs(log.get(log_start..).unwrap_or(""));
        let predicted_logs: Vec<(String, Option<String>)> = outcome
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Skip { slot, reason } => match reason {
                    SkipReason::RemotePrecedes {
                        temporary: true, ..
                    }
                    | SkipReason::NoConsistentSnapshot { .. } => reason.log(slot),
                    _ => None,
                },
                _ => None,
            })
            .collect();
        self.logs_checked += logged.len();
        if logged != predicted_logs {
            self.mismatches.push(format!(
                "[{step}] skip logs differ\n  predicted: {predicted_logs:?}\n  server:    {logged:?}\n  input: {}\n  actions: {:?}",
                input.to_json(),
                outcome.actions
            ));
        }
    }

    /// The server must fail exactly when, and as (DETAIL too), predicted; returns its error.
    fn compare_error(
        &mut self,
        step: &str,
        input: &PlanInput,
        outcome: &Outcome,
        result: &io::Result<String>,
    ) -> Option<String> {
        let actual_error = result.as_ref().err().map(server_error);
        let predicted_error = outcome.error.as_ref().map(|e| e.to_string());
        if actual_error != predicted_error {
            self.mismatches.push(format!(
                "[{step}] error: predicted {predicted_error:?}, server {actual_error:?}\n  input: {}\n  actions: {:?}",
                input.to_json(),
                outcome.actions
            ));
        } else if actual_error.is_some() {
            self.errors_checked += 1;
        }
        if let (Err(e), Some(pe)) = (result, &outcome.error) {
            if pe.detail().is_some() && server_detail(e) != pe.detail() {
                self.mismatches
                    .push(format!("[{step}] detail differs: {e}"));
            }
        }
        actual_error
    }

    /// The heart of the check: exact but for positions the engine itself calls approximate.
    fn compare_slots(&mut self, step: &str, input: &PlanInput, outcome: &Outcome) {
        let predicted: Vec<Value> = outcome
            .slots_after
            .iter()
            .map(|r| r.to_json_as(self.version))
            .collect();
        let actual = Harness::rows(self.standby());
        let (mut p, mut a) = (normalized(&predicted), normalized(&actual));
        // Only where the engine says a case it does not model decided the positions are
        // restart_lsn and catalog_xmin left out; everything else is compared exactly.
        let exempt = self.count_position_updates(input, outcome);
        for row in p.iter_mut().chain(a.iter_mut()) {
            let name = row["slot_name"].as_str().unwrap_or("").to_owned();
            if exempt.contains(&name.as_str()) {
                if let Some(o) = row.as_object_mut() {
                    o.remove("restart_lsn");
                    o.remove("catalog_xmin");
                }
            }
        }
        self.exempted += exempt.len();
        self.rows_compared += a.len();
        if p != a {
            self.mismatches.push(format!(
                "[{step}] slots differ\n  predicted: {}\n  server:    {}\n  input: {}\n  actions: {:?}",
                Value::Array(p),
                Value::Array(a),
                input.to_json(),
                outcome.actions
            ));
        }
    }

    /// Coverage counters show which update paths ran; returns the approximated slots to exempt.
    fn count_position_updates<'o>(
        &mut self,
        input: &PlanInput,
        outcome: &'o Outcome,
    ) -> Vec<&'o str> {
        let mut exempt: Vec<&str> = Vec::new();
        for act in &outcome.actions {
            if let Action::Update {
                slot,
                positions: Some(pos),
                ..
            } = act
            {
                match pos {
                    Positions::Copied => self.copied += 1,
                    Positions::Decoded { approximate, .. } => {
                        self.decoded += 1;
                        self.count_decoded_range(input, slot);
                        let after = outcome.slots_after.iter().find(|r| &r.slot_name == slot);
                        let remote = input.remote_slots.iter().find(|r| &r.slot_name == slot);
                        if let (Some(l), Some(r)) = (after, remote) {
                            if l.restart_lsn != r.restart_lsn || l.catalog_xmin != r.catalog_xmin {
                                self.decoded_differs += 1;
                            }
                        }
                        if *approximate {
                            if let Ok(dir) = std::env::var("SLOTSYNC_DUMP_EXEMPT") {
                                let _ = std::fs::write(
                                    format!("{dir}/exempt_{}_{slot}.json", self.syncs),
                                    input.to_json().to_string(),
                                );
                            }
                            exempt.push(slot.as_str());
                        }
                    }
                }
            }
        }
        exempt
    }

    /// Shows whether the run reached the hard decoding cases (subxacts, catalog, PREPARE, open).
    fn count_decoded_range(&mut self, input: &PlanInput, slot: &str) {
        let before = input.local_slots.iter().find(|r| r.slot_name == slot);
        let remote = input.remote_slots.iter().find(|r| r.slot_name == slot);
        if let (Some(from), Some(to)) = (
            before.and_then(|r| r.restart_lsn),
            remote.and_then(|r| r.confirmed_flush_lsn),
        ) {
            let inside = |l: &Lsn| *l >= from && *l < to;
            let xs = &input.standby.xacts;
            self.with_subxacts += usize::from(
                xs.iter()
                    .any(|x| x.top_xid_lsn.as_ref().is_some_and(inside)),
            );
            self.with_catalog +=
                usize::from(xs.iter().any(|x| x.invalidation_lsns.iter().any(inside)));
            self.with_prepared += usize::from(
                xs.iter()
                    .any(|x| x.prepare_lsn.as_ref().is_some_and(inside)),
            );
            self.with_open += usize::from(
                xs.iter()
                    .any(|x| x.end_lsn.is_none() && x.record_lsns.iter().any(inside)),
            );
        }
    }

    /// The harness's own check that the input still described the standby when the call ran:
    /// a record replayed after the capture that carries an xid at or past the captured next
    /// xid (or a RUNNING_XACTS record announcing one) moves the standby's next xid, and with
    /// it a new slot's catalog_xmin, under the engine. Names those records, so that such a
    /// race is reported as the harness's fault rather than as a wrong prediction.
    fn input_went_stale(&self, input: &PlanInput) -> Option<String> {
        let captured = input.standby.replay_lsn?;
        let now: Lsn = self.s("select pg_last_wal_replay_lsn()").parse().ok()?;
        if now <= captured {
            return None;
        }
        let next = u64::from(input.standby.snapshot_xmin.0);
        let text = self.s(&format!(
            "select coalesce(json_agg(json_build_object('lsn', start_lsn, 'rm', resource_manager, \
             'type', record_type, 'xid', xid::text::bigint, 'description', description) \
             order by start_lsn), '[]') from pg_get_wal_records_info('{captured}', '{now}') \
             where xid::text::bigint >= {next} or record_type = 'RUNNING_XACTS'"
        ));
        let recs: Vec<Value> = serde_json::from_str(&text).expect("replayed records JSON");
        let moved: Vec<String> = recs
            .iter()
            .filter(|r| {
                let desc = r["description"].as_str().unwrap_or("");
                match parse_running_xacts_description(desc) {
                    Some((nx, ..)) if r["type"] == "RUNNING_XACTS" => u64::from(nx.0) > next,
                    _ => r["xid"].as_u64().is_some_and(|x| x >= next),
                }
            })
            .map(Value::to_string)
            .collect();
        (!moved.is_empty()).then(|| {
            format!(
                "harness: the input went stale: between capture (replay {captured}, next xid \
                 {next}) and the call the standby replayed {}",
                moved.join(", ")
            )
        })
    }

    /// Runs `sql` on the standby and checks the server's error against the engine's.
    fn check_user_op(&mut self, sql: &str, name: &str, op: UserOp) {
        self.check_user_op_on(false, sql, name, op);
    }

    /// [`Harness::check_user_op`] on the primary (`true`) or the standby.
    fn check_user_op_on(&mut self, on_primary: bool, sql: &str, name: &str, op: UserOp) {
        let node = if on_primary {
            &self.primary
        } else {
            self.standby()
        };
        let local: Vec<SlotRow> = Harness::rows(node)
            .iter()
            .map(|r| SlotRow::from_json(r).expect("row"))
            .collect();
        let in_recovery = node.psql("select pg_is_in_recovery()").expect("recovery") == "t";
        let predicted = check_user_op(self.version, &local, in_recovery, name, &op);
        let actual = node.psql(sql);
        let same = match (&predicted, &actual) {
            (Ok(()), Ok(_)) => true,
            (Err(p), Err(a)) => p.to_string() == server_error(a) && p.detail() == server_detail(a),
            _ => false,
        };
        if same {
            self.errors_checked += usize::from(predicted.is_err());
        } else {
            self.mismatches.push(format!(
                "user op {sql}: predicted {predicted:?} / {:?}, server {actual:?}",
                predicted.as_ref().err().map(SlotOpError::detail)
            ));
        }
    }

    /// Blocks or unblocks the standby's streaming connection (pg_hba + terminate).
    fn set_lag(&self, blocked: bool) {
        let path = self.primary.data_dir().join("pg_hba.conf");
        let text = std::fs::read_to_string(&path).expect("pg_hba.conf");
        let line = "host replication all 127.0.0.1/32 reject\n";
        let rest = text.replace(line, "");
        let new = if blocked {
            format!("{line}{rest}")
        } else {
            rest
        };
        std::fs::write(&path, new).expect("write pg_hba.conf");
        self.p("select pg_reload_conf()");
        if blocked {
            self.p("select pg_terminate_backend(pid) from pg_stat_replication");
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.p("select count(*) from pg_stat_replication") != "0" {
                assert!(Instant::now() < deadline, "walsender did not go away");
                thread::sleep(Duration::from_millis(20));
            }
        } else {
            let deadline = Instant::now() + Duration::from_secs(15);
            while self.p("select count(*) from pg_stat_replication where state = 'streaming'")
                != "1"
            {
                assert!(Instant::now() < deadline, "standby did not reconnect");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }

    /// Moves the remote slot's catalog_xmin past every xid so far, and advances it.
    fn catch_up(&self, slot: &str) {
        self.p("select pg_log_standby_snapshot()");
        let sql = format!("select pg_replication_slot_advance('{slot}', pg_current_wal_lsn())");
        if let Err(e) = self.primary.psql(&sql) {
            // Slots invalidated on purpose (or as a side effect) cannot move any more.
            assert!(
                server_error(&e).starts_with("can no longer access"),
                "{sql}: {e}"
            );
        }
    }

    fn create_remote(&self, name: &str, plugin: &str, two_phase: bool, failover: bool) {
        self.p(&format!(
            "select pg_create_logical_replication_slot('{name}', '{plugin}', false, {two_phase}, {failover})"
        ));
    }

    fn replication_cmd(&self, cmd: &str) -> io::Result<String> {
        cluster::psql(
            &format!("{} replication=database", self.primary.socket_conninfo()),
            cmd,
        )
    }
}

#[test]
fn differential_against_postgres18() {
    differential(Major::V18);
}

#[test]
fn differential_against_postgres17() {
    differential(Major::V17);
}

fn differential(major: Major) {
    let started = Instant::now();
    let mut h = start(major);
    scripted_catch_up(&mut h);
    user_ops_on_synced(&mut h);
    failover_toggled(&mut h);
    same_name_local_slot(&mut h);
    standby_lag(&mut h);
    remote_drop(&mut h);
    remote_invalidation(&mut h);
    local_invalidation(&mut h);
    // Randomized sequences (fixed seeds).
    for seed in [1u64, 2] {
        random_sequence(&mut h, seed, 40);
    }
    promotion(&mut h);
    walsender_gate(&h);
    report(&h, major, started);
}

/// The primary with one standby, as the issue describes it.
fn start(major: Major) -> Harness {
    let mut primary = Primary::start(
        Options::default()
            .major(major)
            .conf("autovacuum = off")
            .conf("max_prepared_transactions = 10"),
    )
    .expect("start primary (PostgreSQL from the test tooling)");
    primary.psql("create table t(x int)").expect("create table");
    // pg_walinspect reads the standby's WAL for the decoding inputs (replicated to it).
    primary
        .psql("create extension pg_walinspect")
        .expect("create extension pg_walinspect");
    primary.add_standby("s1").expect("add standby");
    let version = match major {
        Major::V17 => Version::V17,
        Major::V18 => Version::V18,
    };
    let h = Harness {
        primary,
        version,
        mismatches: Vec::new(),
        syncs: 0,
        errors_checked: 0,
        copied: 0,
        decoded: 0,
        decoded_differs: 0,
        exempted: 0,
        rows_compared: 0,
        effective: BTreeMap::new(),
        carried: 0,
        logs_checked: 0,
        with_subxacts: 0,
        with_catalog: 0,
        with_prepared: 0,
        with_open: 0,
    };
    // The standby as the issue describes it.
    assert_eq!(h.s("show hot_standby_feedback"), "on");
    assert_eq!(h.s("show sync_replication_slots"), "off");
    assert!(h.s("show primary_conninfo").contains("dbname=postgres"));
    h
}

/// Prints what the run compared and fails on any mismatch.
fn report(h: &Harness, major: Major, started: Instant) {
    eprintln!(
        "differential (PostgreSQL {}): {} sync calls, {} slot rows compared, {} server errors checked, {} skip logs checked, \
         position updates: {} copied, {} decoded ({} not equal to the remote); {} calls with in-memory catalog_xmin carried over; decoded ranges with subtransactions {}, catalog changes {}, \
         PREPARE {}, open transactions {}; {} rows exempted from restart_lsn/catalog_xmin, {:?}",
        major.number(),
        h.syncs,
        h.rows_compared,
        h.errors_checked,
        h.logs_checked,
        h.copied,
        h.decoded,
        h.decoded_differs,
        h.carried,
        h.with_subxacts,
        h.with_catalog,
        h.with_prepared,
        h.with_open,
        h.exempted,
        started.elapsed()
    );
    assert!(
        h.exempted * 50 <= h.rows_compared,
        "too many exempted comparisons: {} of {}",
        h.exempted,
        h.rows_compared
    );
    assert!(
        h.mismatches.is_empty(),
        "{} mismatch(es):\n{}",
        h.mismatches.len(),
        h.mismatches.join("\n\n")
    );
}
