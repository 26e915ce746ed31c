//! `pgyard slotsync check` against what really happens: for each state of a failover slot, the
//! verdict is recorded, the standby is promoted, and a real subscriber of that slot (CREATE
//! SUBSCRIPTION with `failover = true`, repointed at the new primary) either resumes without
//! losing or repeating a transaction or does not. `ready` must be true exactly when it does.
//! Each scenario runs on PostgreSQL 17 and 18.

use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{Node, Options, Primary};
use pgyard_testkit::postgres::Major;
use serde_json::Value;

/// A primary with a streaming standby `s1`, and a subscriber cluster.
struct Rig {
    primary: Primary,
    subscriber: Primary,
    subs: Vec<String>,
}

fn q(node: &Node, sql: &str) -> String {
    node.psql(sql)
        .unwrap_or_else(|e| panic!("{}: {sql}: {e}", node.name()))
}

fn wait_for(what: &str, secs: u64, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        thread::sleep(Duration::from_millis(100));
    }
}

impl Rig {
    fn new(major: Major) -> Rig {
        let options = Options::default().major(major).conf("autovacuum = off");
        let mut primary = Primary::start(options.clone()).expect("primary");
        primary.add_standby("s1").expect("standby");
        let subscriber = Primary::start(options).expect("subscriber");
        Rig {
            primary,
            subscriber,
            subs: Vec::new(),
        }
    }

    fn standby(&self) -> &Node {
        &self.primary.standbys()[0]
    }

    fn p(&self, sql: &str) -> String {
        q(&self.primary, sql)
    }

    fn s(&self, sql: &str) -> String {
        q(self.standby(), sql)
    }

    fn sub(&self, sql: &str) -> String {
        q(&self.subscriber, sql)
    }

    /// A table, its publication, and a subscription (slot `name`, failover) that has caught up.
    fn subscribe(&mut self, name: &str) {
        let table = format!("create table {name}(id int primary key, v text)");
        self.p(&table);
        self.sub(&table);
        self.p(&format!(
            "insert into {name} select g, 'before' from generate_series(1, 3) g"
        ));
        self.p(&format!("create publication {name} for table {name}"));
        self.sub(&format!(
            "create subscription {name} connection '{}' publication {name} with (failover = true)",
            self.primary.conninfo()
        ));
        self.subs.push(name.to_owned());
        self.wait_subscriber(name);
    }

    fn rows(node: &Node, table: &str) -> String {
        q(
            node,
            &format!(
                "select coalesce(string_agg(id || ':' || v, ',' order by id), '') from {table}"
            ),
        )
    }

    /// Until the subscriber's copy of `table` equals the primary's.
    fn wait_subscriber(&self, table: &str) {
        wait_for(&format!("subscriber of {table}"), 30, || {
            Rig::rows(&self.primary, table) == Rig::rows(&self.subscriber, table)
        });
    }

    /// Until the standby has replayed everything the primary has flushed.
    fn wait_replay(&self) {
        let target = self.p("select pg_current_wal_flush_lsn()");
        wait_for("standby replay", 30, || {
            self.s(&format!("select pg_last_wal_replay_lsn() >= '{target}'")) == "t"
        });
    }

    /// Calls `pg_sync_replication_slots()` until the standby holds `slot` persistently.
    fn sync_until_persistent(&self, slot: &str) {
        wait_for(&format!("{slot} persisted on the standby"), 60, || {
            self.p("select pg_log_standby_snapshot()");
            self.wait_replay();
            let _ = self.standby().psql("select pg_sync_replication_slots()");
            self.s(&format!(
                "select count(*) from pg_replication_slots \
                 where slot_name = '{slot}' and synced and not temporary"
            )) == "1"
        });
    }

    fn insert(&self, table: &str, from: i32, tag: &str) {
        self.p(&format!(
            "insert into {table} select g, '{tag}' from generate_series({from}, {}) g",
            from + 4
        ));
    }

    /// Blocks the standby's streaming connection (`pg_hba.conf` reject + terminate).
    fn block_standby(&self) {
        let path = self.primary.data_dir().join("pg_hba.conf");
        let text = std::fs::read_to_string(&path).expect("pg_hba.conf");
        std::fs::write(
            &path,
            format!("host replication all 127.0.0.1/32 reject\n{text}"),
        )
        .expect("write pg_hba.conf");
        self.p("select pg_reload_conf()");
        wait_for("the standby's walsender to go", 15, || {
            self.p(
                "select count(*) from (select pg_terminate_backend(pid) from pg_stat_replication \
                 where application_name = 's1') t",
            ) == "0"
        });
    }

    /// `pgyard slotsync check --json` (with the primary, or the standby alone).
    fn check(&self, with_primary: bool) -> Value {
        let primary = with_primary.then(|| self.primary.conninfo());
        self.run_check(primary, self.standby().conninfo())
    }

    /// [`Rig::check`] with both servers, as database user `role`.
    fn check_as(&self, role: &str) -> Value {
        let as_role = |c: String| c.replace("user=postgres", &format!("user={role}"));
        self.run_check(
            Some(as_role(self.primary.conninfo())),
            as_role(self.standby().conninfo()),
        )
    }

    fn run_check(&self, primary: Option<String>, standby: String) -> Value {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pgyard"));
        cmd.args(["slotsync", "check", "--json"]);
        if let Some(p) = primary {
            cmd.args(["--primary", &p]);
        }
        cmd.args(["--standby", &standby]);
        let out = cmd.output().expect("run pgyard slotsync check");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "check printed no JSON ({e}): {stdout}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        let all_ready = report["slots"]
            .as_array()
            .expect("slots")
            .iter()
            .all(|s| s["ready"] == true);
        assert_eq!(
            out.status.code(),
            Some(if all_ready { 0 } else { 1 }),
            "exit status for {report}"
        );
        report
    }

    /// Promotes the standby, repoints every subscription at it, writes a new row to each
    /// table there, and reports per subscription whether the subscriber then equals the new
    /// primary (resumed: nothing lost, nothing repeated) within a bound.
    fn promote_and_follow(&mut self) -> Vec<(String, bool)> {
        self.primary.stop().expect("stop the old primary");
        self.primary
            .standby_mut("s1")
            .expect("s1")
            .promote()
            .expect("promote");
        let new_primary = self.standby().conninfo();
        for name in &self.subs {
            self.sub(&format!(
                "alter subscription {name} connection '{new_primary}'"
            ));
            self.sub(&format!("alter subscription {name} enable"));
            self.s(&format!("insert into {name} values (1000, 'after')"));
        }
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut resumed: Vec<(String, bool)> =
            self.subs.iter().map(|s| (s.clone(), false)).collect();
        while Instant::now() < deadline && resumed.iter().any(|(_, r)| !r) {
            for (name, r) in resumed.iter_mut().filter(|(_, r)| !*r) {
                *r = Rig::rows(self.standby(), name) == Rig::rows(&self.subscriber, name);
            }
            thread::sleep(Duration::from_millis(200));
        }
        resumed
    }
}

fn verdict<'a>(report: &'a Value, slot: &str) -> &'a Value {
    report["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .find(|s| s["slot"] == slot)
        .unwrap_or_else(|| panic!("no verdict for {slot} in {report}"))
}

/// Each verdict's `ready` against what the promotion showed.
fn assert_verdicts_held(report: &Value, resumed: &[(String, bool)]) {
    for (slot, ok) in resumed {
        let v = verdict(report, slot);
        assert_eq!(
            v["ready"] == true,
            *ok,
            "{slot}: verdict {v} but the subscriber {} after promotion",
            if *ok { "resumed" } else { "did not resume" }
        );
    }
}

fn reason(report: &Value, slot: &str) -> String {
    verdict(report, slot)["reason"]
        .as_str()
        .unwrap_or("")
        .to_owned()
}

fn has_warning(report: &Value, text: &str) -> bool {
    report["warnings"].as_array().is_some_and(|w| {
        w.iter()
            .any(|x| x.as_str().is_some_and(|s| s.contains(text)))
    })
}

/// Synced, synced-then-advanced, and never synced; with two prerequisites broken after the
/// sync (warnings only); then the standby alone.
fn synced_advanced_and_never(major: Major) {
    let mut rig = Rig::new(major);
    rig.subscribe("synced");
    rig.subscribe("advanced");
    rig.sync_until_persistent("synced");
    rig.sync_until_persistent("advanced");
    rig.insert("advanced", 10, "moved on");
    rig.wait_subscriber("advanced");
    rig.subscribe("never");
    rig.s("alter system set hot_standby_feedback = off");
    rig.s("alter system set primary_slot_name = ''");
    rig.s(&format!(
        "alter system set primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=s1'",
        rig.primary.port()
    ));
    rig.s("select pg_reload_conf()");
    wait_for("the standby to stream again", 30, || {
        rig.p("select count(*) from pg_stat_replication where application_name = 's1' and state = 'streaming'") == "1"
    });
    rig.wait_replay();
    let report = rig.check(true);
    assert_eq!(verdict(&report, "synced")["ready"], true, "{report}");
    assert_eq!(verdict(&report, "advanced")["ready"], true, "{report}");
    assert!(
        reason(&report, "never").starts_with("not synced yet"),
        "{report}"
    );
    assert!(
        has_warning(&report, "\"hot_standby_feedback\" to be enabled"),
        "{report}"
    );
    assert!(
        has_warning(&report, "\"dbname\" to be specified"),
        "{report}"
    );
    assert!(
        has_warning(&report, "\"primary_slot_name\" to be set"),
        "{report}"
    );
    assert!(
        has_warning(&report, "sync_replication_slots is off"),
        "{report}"
    );
    assert!(
        has_warning(
            &report,
            "synchronized_standby_slots cannot hold subscribers back"
        ),
        "{report}"
    );
    let next = &verdict(&report, "advanced")["next_sync"];
    assert_eq!(next["caller"], "function", "{report}");

    let alone = rig.check(false);
    let names: Vec<&str> = alone["slots"]
        .as_array()
        .expect("slots")
        .iter()
        .filter_map(|s| s["slot"].as_str())
        .collect();
    assert_eq!(names, ["synced", "advanced"], "{alone}");
    assert!(
        alone["unchecked"].as_array().is_some_and(|u| !u.is_empty()),
        "{alone}"
    );

    let resumed = rig.promote_and_follow();
    assert_verdicts_held(&report, &resumed);
    assert_eq!(
        resumed.iter().filter(|(_, r)| *r).count(),
        2,
        "synced and advanced resume: {resumed:?}"
    );
}

/// The standby stops receiving while the subscriber goes on: subscribers have what the
/// standby lacks, unless `synchronized_standby_slots` holds them back.
fn lagging(major: Major, hold_back: bool) {
    let mut rig = Rig::new(major);
    rig.subscribe("lag");
    rig.sync_until_persistent("lag");
    if hold_back {
        rig.p("alter system set synchronized_standby_slots = 's1'");
        rig.p("select pg_reload_conf()");
    }
    rig.block_standby();
    rig.insert("lag", 10, "only on the old primary");
    if !hold_back {
        rig.wait_subscriber("lag");
    } else {
        // The walsender waits for s1; give it the time it would need to send.
        thread::sleep(Duration::from_secs(2));
    }
    let report = rig.check(true);
    if hold_back {
        assert_eq!(verdict(&report, "lag")["ready"], true, "{report}");
        assert!(
            !has_warning(&report, "synchronized_standby_slots"),
            "{report}"
        );
    } else {
        assert!(reason(&report, "lag").contains("bytes behind"), "{report}");
        assert!(
            has_warning(&report, "synchronized_standby_slots"),
            "{report}"
        );
    }
    let resumed = rig.promote_and_follow();
    assert_verdicts_held(&report, &resumed);
}

/// The subscriber is disabled and the standby removes the WAL its synced slot needs.
fn invalidated_on_standby(major: Major) {
    let mut rig = Rig::new(major);
    rig.subscribe("inv");
    rig.sync_until_persistent("inv");
    rig.sub("alter subscription inv disable");
    rig.s("alter system set max_slot_wal_keep_size = '1MB'");
    rig.s("select pg_reload_conf()");
    for i in 0..4 {
        rig.p(&format!(
            "create table filler{i} as select generate_series(1, 1000) x"
        ));
        rig.p("select pg_switch_wal()");
    }
    rig.p("checkpoint");
    rig.wait_replay();
    wait_for("the synced slot to be invalidated", 30, || {
        rig.s("checkpoint");
        rig.s("select count(*) from pg_replication_slots where slot_name = 'inv' and invalidation_reason is not null")
            == "1"
    });
    let report = rig.check(true);
    assert!(
        reason(&report, "inv").starts_with("invalidated on the standby"),
        "{report}"
    );
    let resumed = rig.promote_and_follow();
    assert_verdicts_held(&report, &resumed);
}

/// A standby with `wal_level = replica` (a restart, before it holds any logical slot: with
/// one the server would refuse to start): sync cannot run, the check warns in the server's
/// words and the slot is not ready, and indeed the subscriber cannot resume.
fn wal_level_too_low(major: Major) {
    let mut rig = Rig::new(major);
    rig.subscribe("wl");
    rig.s("alter system set wal_level = replica");
    rig.primary
        .standby_mut("s1")
        .expect("s1")
        .restart()
        .expect("restart the standby");
    assert_eq!(rig.s("show wal_level"), "replica");
    let err = rig
        .standby()
        .psql("select pg_sync_replication_slots()")
        .expect_err("sync refuses");
    assert!(
        err.to_string().contains("\"wal_level\" >= \"logical\""),
        "{err}"
    );
    rig.wait_replay();
    let report = rig.check(true);
    assert!(
        has_warning(&report, "requires \"wal_level\" >= \"logical\""),
        "{report}"
    );
    assert!(
        reason(&report, "wl").starts_with("not synced yet"),
        "{report}"
    );
    let resumed = rig.promote_and_follow();
    assert_verdicts_held(&report, &resumed);
}

/// The slot-sync worker keeps a new synced slot temporary while the primary's slot (its
/// subscriber disabled) needs a catalog xmin the standby has passed.
fn temporary(major: Major) {
    let mut rig = Rig::new(major);
    rig.subscribe("tmp");
    rig.sub("alter subscription tmp disable");
    for i in 0..5 {
        rig.p(&format!("create table other{i}(x int)"));
    }
    rig.p("select pg_log_standby_snapshot()");
    rig.wait_replay();
    rig.s("alter system set sync_replication_slots = on");
    rig.s("select pg_reload_conf()");
    wait_for("the worker's temporary slot", 60, || {
        rig.s("select count(*) from pg_replication_slots where slot_name = 'tmp' and synced and temporary")
            == "1"
    });
    let report = rig.check(true);
    let why = reason(&report, "tmp");
    assert!(
        why.starts_with("temporary: the primary's slot needs WAL"),
        "{report}"
    );
    assert_eq!(
        verdict(&report, "tmp")["next_sync"]["caller"],
        "worker",
        "{report}"
    );
    let resumed = rig.promote_and_follow();
    assert_verdicts_held(&report, &resumed);
}

#[test]
fn pg18_synced_advanced_and_never_synced() {
    synced_advanced_and_never(Major::V18);
}

#[test]
fn pg17_synced_advanced_and_never_synced() {
    synced_advanced_and_never(Major::V17);
}

#[test]
fn pg18_standby_lagging() {
    lagging(Major::V18, false);
}

#[test]
fn pg17_standby_lagging() {
    lagging(Major::V17, false);
}

#[test]
fn pg18_standby_lagging_held_back_by_synchronized_standby_slots() {
    lagging(Major::V18, true);
}

#[test]
fn pg17_standby_lagging_held_back_by_synchronized_standby_slots() {
    lagging(Major::V17, true);
}

#[test]
fn pg18_invalidated_on_the_standby() {
    invalidated_on_standby(Major::V18);
}

#[test]
fn pg17_invalidated_on_the_standby() {
    invalidated_on_standby(Major::V17);
}

#[test]
fn pg18_wal_level_too_low_on_the_standby() {
    wal_level_too_low(Major::V18);
}

#[test]
fn pg17_wal_level_too_low_on_the_standby() {
    wal_level_too_low(Major::V17);
}

#[test]
fn pg18_temporary_synced_slot() {
    temporary(Major::V18);
}

#[test]
fn pg17_temporary_synced_slot() {
    temporary(Major::V17);
}

/// `snapshot` as a role without privileges, then with `pg_monitor`, then with
/// `pg_read_server_files` too: what each leaves out (docs/slotsync.md, "Privileges").
#[test]
fn snapshot_says_what_privileges_left_out() {
    let mut rig = Rig::new(Major::V18);
    rig.subscribe("priv");
    rig.sync_until_persistent("priv");
    rig.p("create role watcher login");
    rig.p("create extension pg_walinspect");
    rig.wait_replay();
    let as_watcher = |node: &Node| node.conninfo().replace("user=postgres", "user=watcher");
    let snapshot = |rig: &Rig| -> Value {
        let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["slotsync", "snapshot"])
            .args(["--primary", &as_watcher(&rig.primary)])
            .args(["--standby", &as_watcher(rig.standby())])
            .output()
            .expect("run pgyard slotsync snapshot");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("snapshot JSON")
    };
    let notes = |v: &Value| -> Vec<String> {
        v["notes"]
            .as_array()
            .expect("notes")
            .iter()
            .map(|n| n.as_str().unwrap_or("").to_owned())
            .collect()
    };
    let bare = notes(&snapshot(&rig));
    let said = |notes: &[String], text: &str| notes.iter().any(|n| n.contains(text));
    assert!(said(&bare, "primary_conninfo is not readable"), "{bare:?}");
    assert!(said(&bare, "pg_ls_waldir"), "{bare:?}");
    assert!(said(&bare, "pg_ls_logicalsnapdir"), "{bare:?}");
    assert!(said(&bare, "walsenders have sent is hidden"), "{bare:?}");
    let unprivileged = rig.check_as("watcher");
    assert!(
        reason(&unprivileged, "priv").starts_with("cannot tell what the slot's walsender has sent"),
        "{unprivileged}"
    );
    rig.p("grant pg_monitor to watcher");
    rig.wait_replay();
    let monitor = notes(&snapshot(&rig));
    assert_eq!(monitor.len(), 1, "{monitor:?}");
    assert!(said(&monitor, "pg_read_binary_file"), "{monitor:?}");
    rig.p("grant pg_read_server_files to watcher");
    rig.p("grant execute on function pg_read_binary_file(text) to watcher");
    rig.p(
        "grant execute on function pg_read_binary_file(text, bigint, bigint, boolean) to watcher",
    );
    rig.wait_replay();
    let full = snapshot(&rig);
    watch_reprints(&rig);
    assert!(notes(&full).is_empty(), "{:?}", notes(&full));
}

/// `check --watch` prints a report, waits, and prints again until it is killed.
fn watch_reprints(rig: &Rig) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["slotsync", "check", "--watch", "0.2"])
        .args(["--primary", &rig.primary.conninfo()])
        .args(["--standby", &rig.standby().conninfo()])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run pgyard slotsync check --watch");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut reports = 0;
    while reports < 3 {
        let line = lines
            .next()
            .expect("a line before the pipe closes")
            .expect("read");
        if line == "priv: ready" {
            reports += 1;
        }
    }
    assert!(
        child.try_wait().expect("poll").is_none(),
        "--watch keeps running"
    );
    child.kill().expect("kill");
    child.wait().expect("reap");
}
