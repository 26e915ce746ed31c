//! `pgyard delayq run`, a delayed replica in one process, against real PostgreSQL 18 servers:
//! with `--delay 3s` the subscriber always shows the publisher as it was at least 3 s earlier
//! (and not much more), and equals it once the delay has passed after the last commit; with
//! `--delay 1h` nothing is applied while the publisher's slot moves on and its WAL is
//! recycled; SIGKILLs of the whole process lose and repeat nothing.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{q, Rig};
use pgyard_testkit::cluster::{Node, Options, Primary};

const TABLE: &str = "create table ev(id bigint primary key, at timestamptz not null, v text)";

impl Rig {
    fn new(name: &str) -> Rig {
        let publisher = Primary::start(Options::default()).expect("publisher");
        let subscriber = Primary::start(Options::default()).expect("subscriber");
        q(&publisher, TABLE);
        q(&subscriber, TABLE);
        q(&publisher, "create publication pub for table ev");
        // Created here, before the first event: what commits before a slot exists is not
        // decoded (`--copy-data`'s business). The hour-long test lets `run` create it.
        let rig = Rig::with(publisher, subscriber, "run", name);
        if name != "hour" {
            rig.create_slot();
        }
        rig
    }

    fn run(&self, delay: &str) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["delayq", "run", "--create-slot"])
            .args(["--publisher", &self.publisher.conninfo()])
            .args(["--slot", "pgyard", "--publication", "pub"])
            .args(["--subscriber", &self.subscriber.conninfo()])
            .args(["--delay", delay])
            .arg(&self.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pgyard delayq run");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = sink
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                l.push_str(&line);
                l.push('\n');
            }
        });
        Replica { child, log }
    }

    /// One transaction on the publisher: a row stamped with the time it ran.
    fn event(&self, id: u64) {
        q(
            &self.publisher,
            &format!("insert into ev values ({id}, clock_timestamp(), 'e{id}')"),
        );
    }

    fn epoch(node: &Node, sql: &str) -> f64 {
        q(node, sql).parse().unwrap_or(0.0)
    }

    fn same(&self) -> bool {
        let all = "select count(*) || ':' || coalesce(md5(string_agg(id || v, ',' order by id)), '') from ev";
        q(&self.publisher, all) == q(&self.subscriber, all)
    }
}

/// A running `delayq run` and what it has written to standard error so far.
struct Replica {
    child: Child,
    log: Arc<Mutex<String>>,
}

/// A test that fails before it stops its replica must not leave the process running (it
/// would retry its servers for ever).
impl Drop for Replica {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Replica {
    fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        let _ = self.child.wait();
    }

    /// Until it has started streaming.
    fn wait_following(&self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log().contains("following from") {
            assert!(
                Instant::now() < deadline,
                "run never started: {}",
                self.log()
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// Ctrl-C once it is streaming (before that, SIGINT simply ends the process); it must
    /// stop cleanly.
    fn stop(mut self) {
        self.wait_following();
        let deadline = Instant::now() + Duration::from_secs(20);
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        while self.child.try_wait().expect("poll").is_none() {
            assert!(Instant::now() < deadline, "run did not stop on SIGINT");
            sleep(Duration::from_millis(50));
        }
        let status = self.child.wait().expect("reap");
        assert!(status.success(), "{status}: {}", self.log());
    }
}

/// How far behind the subscriber may fall beyond the delay: flush and status cadence, the
/// apply thread's polling and one transaction's apply.
const LATE: f64 = 2.5;

#[test]
fn the_subscriber_shows_the_publisher_as_it_was_three_seconds_ago() {
    let rig = Rig::new("delay");
    let child = rig.run("3s");
    let mut checks = 0;
    let started = Instant::now();
    let mut id = 0;
    // At least 12 s and at least 8 checks: on a loaded machine fewer iterations fit in 12 s,
    // and the check count must not depend on how fast psql starts.
    while started.elapsed() < Duration::from_secs(12) || checks < 8 {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {checks} checks in 120 s"
        );
        id += 1;
        rig.event(id);
        sleep(Duration::from_millis(100));
        if id % 5 == 0 {
            let clock = "select extract(epoch from clock_timestamp())";
            let before = Rig::epoch(&rig.publisher, clock);
            let newest = Rig::epoch(
                &rig.subscriber,
                "select coalesce(extract(epoch from max(at)), 0) from ev",
            );
            let after = Rig::epoch(&rig.publisher, clock);
            // Never early: a row stamped at T committed after T, so it is due after T + 3 s.
            assert!(
                newest <= after - 3.0,
                "applied early: row of {newest} seen by {after}"
            );
            // Not late: every row stamped before (the check's start) - 3 s - LATE is there.
            let cutoff = before - 3.0 - LATE;
            let want = q(
                &rig.publisher,
                &format!("select count(*) from ev where extract(epoch from at) <= {cutoff}"),
            );
            let have = q(
                &rig.subscriber,
                &format!("select count(*) from ev where extract(epoch from at) <= {cutoff}"),
            );
            assert_eq!(want, have, "rows older than {:.1}s missing", 3.0 + LATE);
            checks += 1;
        }
    }
    assert!(checks >= 8, "only {checks} checks");
    let deadline = Instant::now() + Duration::from_secs(3) + Duration::from_secs_f64(LATE);
    while !rig.same() {
        assert!(
            Instant::now() < deadline,
            "not equal 3 s after the last commit"
        );
        sleep(Duration::from_millis(100));
    }
    child.stop();
}

#[test]
fn with_an_hour_of_delay_the_publisher_recycles_its_wal() {
    let rig = Rig::new("hour");
    let child = rig.run("1h");
    child.wait_following();
    for id in 1..=200 {
        rig.event(id);
    }
    let before = q(
        &rig.publisher,
        "select restart_lsn from pg_replication_slots where slot_name = 'pgyard'",
    );
    for _ in 0..4 {
        q(&rig.publisher, "insert into ev select g, now(), 'x' from generate_series(1000 * (1 + (select count(*) from ev)), 1000 * (1 + (select count(*) from ev)) + 500) g");
        q(&rig.publisher, "select pg_switch_wal()");
    }
    let target = q(&rig.publisher, "select pg_current_wal_lsn()");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (confirmed, restart) = {
            let row = q(
                &rig.publisher,
                &format!(
                    "select confirmed_flush_lsn >= '{target}', restart_lsn > '{before}' \
                     from pg_replication_slots where slot_name = 'pgyard'"
                ),
            );
            (row.starts_with('t'), row.ends_with('t'))
        };
        if confirmed && restart {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the slot did not move on while held"
        );
        q(&rig.publisher, "select pg_log_standby_snapshot()");
        sleep(Duration::from_millis(200));
    }
    q(&rig.publisher, "checkpoint");
    let oldest = q(
        &rig.publisher,
        "select min(name) from pg_ls_waldir() where name ~ '^[0-9A-F]{24}$'",
    );
    let segment_of_before = q(
        &rig.publisher,
        &format!("select pg_walfile_name('{before}')"),
    );
    assert!(
        oldest > segment_of_before,
        "WAL of {before} ({segment_of_before}) is still kept: oldest {oldest}"
    );
    assert_eq!(
        q(&rig.subscriber, "select count(*) from ev"),
        "0",
        "nothing is due yet"
    );
    child.stop();
}

#[test]
fn sigkills_of_the_whole_replica_lose_and_repeat_nothing() {
    let rig = Rig::new("kill");
    let mut id = 0;
    for round in 0..20u64 {
        let child = rig.run("0s");
        for _ in 0..15 {
            id += 1;
            rig.event(id);
        }
        sleep(Duration::from_millis(50 + (round * 53) % 300));
        child.kill();
    }
    let child = rig.run("0s");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rig.same() {
        assert!(
            Instant::now() < deadline,
            "not equal after the last restart: {}",
            child.log()
        );
        sleep(Duration::from_millis(100));
    }
    child.stop();
}

fn pgyard(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(args)
        .output()
        .expect("run pgyard");
    assert!(
        out.status.success(),
        "pgyard {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The point of a delayed replica: a mistaken DELETE on the publisher, the operator pauses
/// within the delay, finds the transaction in `status`, skips it and resumes; the subscriber
/// never loses the rows, and what comes after is applied as usual.
#[test]
fn pause_skip_and_resume_keep_a_mistaken_delete_away() {
    let rig = Rig::new("skip");
    let child = rig.run("4s");
    child.wait_following();
    for id in 1..=20 {
        rig.event(id);
    }
    let before = q(&rig.publisher, "select pg_current_wal_lsn()");
    q(&rig.publisher, "delete from ev");
    let after = q(&rig.publisher, "select pg_current_wal_lsn()");
    let dir = rig.dir.to_str().expect("utf-8 path");
    pgyard(&["delayq", "pause", dir]);
    // Let the DELETE reach the queue, then find it in the status.
    let mut mistake = None;
    let deadline = Instant::now() + Duration::from_secs(10);
    while mistake.is_none() {
        assert!(
            Instant::now() < deadline,
            "the DELETE never showed up in status"
        );
        sleep(Duration::from_millis(200));
        let v: serde_json::Value =
            serde_json::from_str(&pgyard(&["delayq", "status", dir, "--json"])).expect("JSON");
        assert_eq!(v["running"], true, "{v}");
        assert_eq!(v["paused"], true, "{v}");
        mistake = v["pending"].as_array().into_iter().flatten().find_map(|p| {
            let l = p["commit_lsn"].as_str()?;
            let inside = q(
                &rig.publisher,
                &format!("select '{l}'::pg_lsn between '{before}' and '{after}'"),
            );
            (inside == "t").then(|| l.to_owned())
        });
    }
    let mistake = mistake.expect("found above");
    pgyard(&["delayq", "skip", dir, "--commit-lsn", &mistake]);
    let text = pgyard(&["delayq", "status", dir]);
    assert!(text.contains("PAUSED") && text.contains("(skip)"), "{text}");
    // Paused: even the rows long due are not applied.
    sleep(Duration::from_secs(5));
    assert_eq!(q(&rig.subscriber, "select count(*) from ev"), "0");
    pgyard(&["delayq", "resume", dir]);
    for id in 21..=25 {
        rig.event(id);
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while q(&rig.subscriber, "select count(*) from ev") != "25" {
        assert!(
            Instant::now() < deadline,
            "the subscriber did not catch up: {}",
            child.log()
        );
        sleep(Duration::from_millis(100));
    }
    assert_eq!(q(&rig.publisher, "select count(*) from ev"), "5");
    assert!(child
        .log()
        .contains(&format!("skipped the transaction committed at {mistake}")));
    child.stop();
}

/// The subscriber crashes (immediate stop) and comes back while `run` runs: it reconnects,
/// hands the unacknowledged transactions out again, and ends equal.
#[test]
fn run_reconnects_to_a_restarted_subscriber() {
    let mut rig = Rig::new("subrestart");
    let child = rig.run("0s");
    child.wait_following();
    for id in 1..=100 {
        rig.event(id);
    }
    rig.subscriber.kill().expect("crash the subscriber");
    for id in 101..=150 {
        rig.event(id);
    }
    sleep(Duration::from_millis(500));
    rig.subscriber.start().expect("restart the subscriber");
    for id in 151..=200 {
        rig.event(id);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rig.same() {
        assert!(Instant::now() < deadline, "not equal: {}", child.log());
        sleep(Duration::from_millis(100));
    }
    assert!(child.log().contains("reconnecting"), "{}", child.log());
    child.stop();
}

/// Rows of a table with a unique index on its key are found by the key alone, each change
/// checked to have changed one row. When the index goes while `run` runs (and the subscriber
/// now holds two rows with the key), the UPDATE that changed both is never committed: the
/// session ends, a new one learns the indexes again, and the retry finds one row by ctid.
#[test]
fn a_unique_index_dropped_under_run_never_lets_an_update_change_two_rows() {
    let rig = Rig::new("unique");
    let child = rig.run("0s");
    child.wait_following();
    rig.event(1);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rig.same() {
        assert!(Instant::now() < deadline, "not equal: {}", child.log());
        sleep(Duration::from_millis(50));
    }
    q(
        &rig.subscriber,
        "alter table ev drop constraint ev_pkey; insert into ev values (1, now(), 'e1')",
    );
    q(&rig.publisher, "update ev set v = 'changed' where id = 1");
    let rows = "select string_agg(v, ',' order by v) from ev where id = 1";
    while q(&rig.subscriber, rows) != "changed,e1" {
        assert!(
            Instant::now() < deadline,
            "subscriber has {}: {}",
            q(&rig.subscriber, rows),
            child.log()
        );
        sleep(Duration::from_millis(50));
    }
    let log = child.log();
    assert!(
        log.contains("2 rows changed: the unique index on the key"),
        "{log}"
    );
    assert!(log.contains("reconnecting"), "{log}");
    // Later changes to the table go on, one row each (either of the two with the key).
    q(&rig.publisher, "update ev set v = 'again' where id = 1");
    let again =
        "select count(*) filter (where v = 'again') || '/' || count(*) from ev where id = 1";
    while q(&rig.subscriber, again) != "1/2" {
        assert!(Instant::now() < deadline, "{}", child.log());
        sleep(Duration::from_millis(50));
    }
    child.stop();
}
