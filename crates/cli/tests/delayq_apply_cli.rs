//! `pgyard delayq apply` against real PostgreSQL 18 servers: `follow` queues a publisher's
//! mixed workload, `apply` applies it to a subscriber, and the subscriber must equal the
//! publisher — also when `apply` is SIGKILLed again and again along the way, and never with a
//! duplicate row in a table without a primary key.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{q, Rig};
use pgyard_testkit::cluster::{Node, Options, Primary};

const TABLES: [&str; 5] = ["acct", "nokey", "big", "trunc", "bulk"];

fn schema(extra_column: bool) -> String {
    let extra = if extra_column {
        ", local_note text default 'only on the subscriber'"
    } else {
        ""
    };
    format!(
        "create table acct(id int primary key, bal int, note text{extra}); \
         create table nokey(a int, b text); \
         create table big(id int primary key, payload text, extra int); \
         create table trunc(id serial primary key, v int); \
         create table bulk(id int primary key, v text)"
    )
}

impl Rig {
    fn new(name: &str) -> Rig {
        let publisher = Primary::start(
            Options::default()
                .conf("logical_decoding_work_mem = 64kB")
                .conf("max_prepared_transactions = 10"),
        )
        .expect("publisher");
        let subscriber = Primary::start(Options::default()).expect("subscriber");
        q(&publisher, &schema(false));
        q(&publisher, "alter table nokey replica identity full");
        q(&subscriber, &schema(true));
        q(
            &publisher,
            "create publication pub for table acct, nokey, big, trunc, bulk",
        );
        let rig = Rig::with(publisher, subscriber, "apply", name);
        rig.create_slot();
        rig
    }

    fn p(&self, sql: &str) -> String {
        q(&self.publisher, sql)
    }

    /// Inserts, updates, deletes, identical rows without a key, TOASTed values updated and
    /// left alone, TRUNCATE with RESTART IDENTITY, a savepoint rolled back, a prepared
    /// transaction committed and one rolled back, and a streamed transaction.
    fn workload(&self, rounds: usize) {
        self.p("insert into acct select g, 100, 'n' || g from generate_series(1, 50) g");
        self.p("insert into nokey values (1, 'same'), (1, 'same'), (1, 'same'), (2, null)");
        self.p("insert into big values (1, repeat('x', 300000), 0), (2, 'small', 0)");
        self.p("insert into trunc(v) select generate_series(1, 5)");
        for r in 0..rounds {
            self.p(&format!(
                "update acct set bal = bal + {r} where id % 7 = {m}; \
                 delete from acct where id = {d}; \
                 insert into acct values ({i}, {r}, 'it''s \\\\ {r}')",
                m = r % 7,
                d = 1 + r % 50,
                i = 1000 + r
            ));
        }
        self.p("delete from nokey where ctid = (select ctid from nokey where a = 1 limit 1)");
        self.p("update nokey set b = 'changed' where ctid = (select ctid from nokey where a = 1 limit 1)");
        self.p("update nokey set b = 'was null' where a = 2");
        self.p("update big set extra = extra + 1");
        self.p("update big set payload = repeat('y', 200000) where id = 2");
        self.p("truncate trunc restart identity");
        self.p("insert into trunc(v) values (42)");
        self.p(
            "begin; insert into acct values (5000, 1, 'kept'); savepoint s; \
             insert into acct values (5001, 1, 'rolled back'); rollback to s; commit",
        );
        self.p("begin; insert into acct values (6000, 6, 'prepared'); prepare transaction 'p1'");
        self.p("commit prepared 'p1'");
        self.p("begin; insert into acct values (6001, 6, 'never'); prepare transaction 'p2'");
        self.p("rollback prepared 'p2'");
        // Larger than logical_decoding_work_mem: streamed in chunks.
        self.p("insert into bulk select g, repeat('b', 100) from generate_series(1, 3000) g");
        self.p("update bulk set v = 'u' where id % 3 = 0");
        // A run long enough to go by COPY, with every byte COPY's text format escapes.
        self.p(
            "insert into acct select 20000 + g, g, case g % 5 when 0 then E'tab\\there' \
             when 1 then E'nl\\nand\\\\back\\r' when 2 then '' when 3 then null \
             else '\u{fc}n\u{ef} ' || g end from generate_series(1, 100) g",
        );
        self.p("update acct set bal = bal + 1 where id > 20000 and id % 4 = 0");
    }

    /// Runs `follow` until it reports the publisher's current position flushed, then stops it.
    fn follow_to_end(&self) {
        let target: String = self.p("select pg_current_wal_lsn()");
        let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["delayq", "follow", &self.publisher.conninfo()])
            .args(["--slot", "pgyard", "--publication", "pub", "--delay", "0s"])
            .arg(&self.dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgyard delayq follow");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        for line in lines {
            let line = line.expect("read follow's output");
            if let Some(l) = line.strip_prefix("flushed ") {
                if self.p(&format!("select '{l}'::pg_lsn >= '{target}'::pg_lsn")) == "t" {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "follow never flushed {target}");
        }
        let _ = child.kill();
        let _ = child.wait();
    }

    fn apply(&self) -> Child {
        Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["delayq", "apply"])
            .arg(&self.dir)
            .args(["--subscriber", &self.subscriber.conninfo()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("pgyard delayq apply")
    }

    fn table(node: &Node, table: &str) -> String {
        let cols = match table {
            "acct" => "id, bal, note",
            "nokey" => "a, b",
            "big" => "id, md5(payload), extra",
            "trunc" => "id, v",
            _ => "id, v",
        };
        q(
            node,
            &format!(
                "select count(*) || ':' || coalesce(md5(string_agg(r::text, ',' order by r::text)), '') \
                 from (select {cols} from {table}) r"
            ),
        )
    }

    fn assert_equal(&self) {
        for t in TABLES {
            assert_eq!(
                Rig::table(&self.publisher, t),
                Rig::table(&self.subscriber, t),
                "table {t} differs"
            );
        }
    }
}

fn finished(child: Child) -> Output {
    child.wait_with_output().expect("apply finishes")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_mixed_workload_arrives_equal() {
    let rig = Rig::new("mixed");
    rig.workload(30);
    rig.follow_to_end();
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
    assert_eq!(
        q(
            &rig.subscriber,
            "select count(*) from acct where local_note is null"
        ),
        "0",
        "the subscriber's own column keeps its default"
    );
    // Running again finds everything applied (the origin's progress) and changes nothing.
    let again = finished(rig.apply());
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert!(
        text(&again.stdout).starts_with("applied 0 transactions"),
        "{}",
        text(&again.stdout)
    );
    rig.assert_equal();
}

#[test]
fn sigkills_along_the_way_lose_and_repeat_nothing() {
    let rig = Rig::new("kill");
    rig.workload(300);
    rig.follow_to_end();
    let mut kills = 0;
    // Kills at growing times after the start (5 ms, then half as long again each time), so
    // the first ones land before any apply could have finished on any machine and the later
    // ones reach ever further into the work. (Fixed times of 30-150 ms let a fast machine
    // finish everything by the third try.)
    for i in 0..20 {
        let child = rig.apply();
        std::thread::sleep(Duration::from_secs_f64(0.005 * 1.5f64.powi(i)));
        let mut child = child;
        if child.try_wait().expect("poll").is_some() {
            let out = finished(child);
            assert!(
                out.status.success(),
                "an apply between kills failed: {}: {}",
                out.status,
                text(&out.stderr)
            );
            break;
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        kills += 1;
    }
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(kills >= 3, "apply was killed only {kills} times");
    rig.assert_equal();
}

/// A predecessor SIGKILLed while its backend was busy leaves the origin held until that
/// backend notices; apply waits for it (SQLSTATE 55006 is transient) instead of giving up.
#[test]
fn an_origin_still_held_by_a_killed_predecessors_backend_is_waited_for() {
    let rig = Rig::new("held");
    rig.workload(1);
    rig.follow_to_end();
    q(
        &rig.subscriber,
        "select pg_replication_origin_create('pgyard_delayq')",
    );
    let mut holder = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["connect", &rig.subscriber.conninfo(), "-c"])
        .arg("select pg_replication_origin_session_setup('pgyard_delayq'); select pg_sleep(5)")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("pgyard connect");
    let deadline = Instant::now() + Duration::from_secs(30);
    while q(
        &rig.subscriber,
        "select count(*) from pg_stat_activity \
         where query like '%pg_sleep(5)%' and state = 'active' and pid <> pg_backend_pid()",
    ) != "1"
    {
        assert!(Instant::now() < deadline, "the holder never ran");
        std::thread::sleep(Duration::from_millis(20));
    }
    holder.kill().expect("SIGKILL");
    let _ = holder.wait();
    let held = rig
        .subscriber
        .psql("select pg_replication_origin_session_setup('pgyard_delayq')")
        .expect_err("the killed client's backend still holds the origin");
    assert!(held.to_string().contains("already active"), "{held}");
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
}

#[test]
fn a_missing_table_stops_apply_naming_it_and_keeps_the_transaction() {
    let rig = Rig::new("missing");
    q(&rig.subscriber, "drop table big");
    rig.workload(1);
    rig.follow_to_end();
    let out = finished(rig.apply());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("relation \"public.big\" does not exist"),
        "{err}"
    );
    assert!(err.contains("commit "), "{err}");
    assert!(err.contains("stays queued"), "{err}");
    // Once the table exists the same queue applies to the end.
    q(
        &rig.subscriber,
        "create table big(id int primary key, payload text, extra int)",
    );
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
}

/// `--until LSN` applies what committed before it and stops there; a later run goes on.
#[test]
fn until_applies_what_committed_before_and_holds() {
    let rig = Rig::new("until");
    rig.p("insert into acct values (1, 1, 'before')");
    rig.p("insert into acct values (2, 2, 'before')");
    let until = rig.p("select pg_current_wal_lsn()");
    rig.p("insert into acct values (3, 3, 'after')");
    rig.p("update acct set note = 'after' where id = 1");
    rig.follow_to_end();
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "apply"])
        .arg(&rig.dir)
        .args([
            "--subscriber",
            &rig.subscriber.conninfo(),
            "--until",
            &until,
        ])
        .output()
        .expect("apply --until");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("held at"),
        "{}",
        text(&out.stdout)
    );
    assert_eq!(
        q(
            &rig.subscriber,
            "select string_agg(id || note, ',' order by id) from acct"
        ),
        "1before,2before"
    );
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
}

/// An UPDATE whose row the subscriber does not have stops apply (the row-count check, server
/// side), names the relation and the commit, and applies nothing of that transaction.
#[test]
fn a_missing_row_stops_apply_and_nothing_of_its_transaction_lands() {
    let rig = Rig::new("row");
    rig.p("insert into acct values (1, 1, 'one'), (2, 2, 'two')");
    rig.follow_to_end();
    assert!(finished(rig.apply()).status.success());
    q(&rig.subscriber, "delete from acct where id = 1");
    rig.p("begin; insert into acct values (3, 3, 'three'); update acct set bal = 10 where id = 1; commit");
    rig.follow_to_end();
    let out = finished(rig.apply());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("UPDATE on relation \"public\".\"acct\" changed 0 rows instead of 1"),
        "{err}"
    );
    assert!(err.contains("stays queued"), "{err}");
    assert_eq!(
        q(
            &rig.subscriber,
            "select string_agg(id::text, ',' order by id) from acct"
        ),
        "2",
        "the insert of the failed transaction must not land"
    );
    q(&rig.subscriber, "insert into acct values (1, 1, 'one')");
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
}

/// Due transactions go to the subscriber in batches; when one is refused, everything that
/// committed before the culprit still lands, the error names the culprit's commit LSN, and
/// nothing after it is applied.
#[test]
fn a_refused_batch_applies_what_came_before_the_culprit() {
    let rig = Rig::new("batch");
    rig.p("insert into acct values (1, 1, 'one')");
    rig.follow_to_end();
    assert!(finished(rig.apply()).status.success());
    q(&rig.subscriber, "delete from acct where id = 1");
    for id in 10..20 {
        rig.p(&format!("insert into acct values ({id}, {id}, 'before')"));
    }
    let before = rig.p("select pg_current_wal_lsn()");
    rig.p("update acct set bal = 2 where id = 1");
    let after = rig.p("select pg_current_wal_lsn()");
    for id in 20..25 {
        rig.p(&format!("insert into acct values ({id}, {id}, 'after')"));
    }
    rig.follow_to_end();
    let out = finished(rig.apply());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    let culprit = err
        .lines()
        .find(|l| l.contains("changed 0 rows instead of 1"))
        .unwrap_or_else(|| panic!("no row-check error in {err}"))
        .split("commit ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_else(|| panic!("no commit LSN in {err}"));
    let lsn = |s: &str| q(&rig.subscriber, &format!("select '{s}'::pg_lsn - '0/0'"));
    let n = |s: &str| s.parse::<u64>().expect("a number");
    let (b, c, a) = (n(&lsn(&before)), n(&lsn(culprit)), n(&lsn(&after)));
    assert!(
        b < c && c <= a,
        "culprit {culprit} not within {before}..{after}: {err}"
    );
    assert_eq!(
        q(
            &rig.subscriber,
            "select string_agg(id::text, ',' order by id) from acct"
        ),
        "10,11,12,13,14,15,16,17,18,19",
        "everything before the culprit lands, nothing after it"
    );
    q(&rig.subscriber, "insert into acct values (1, 1, 'one')");
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
}

/// The subscriber commits asynchronously; a crash of the subscriber (immediate stop, crash
/// recovery at the next start) loses the commits not yet flushed, and the queue must not have
/// counted them as applied: after three crashes during apply the end state is still equal,
/// with no duplicate among the identical rows.
#[test]
fn subscriber_crashes_lose_nothing_acknowledged() {
    let mut rig = Rig::new("crash");
    rig.workload(300);
    rig.follow_to_end();
    for round in 0..3u64 {
        let child = rig.apply();
        std::thread::sleep(Duration::from_millis(150 + round * 100));
        rig.subscriber.kill().expect("crash the subscriber");
        let out = finished(child);
        if out.status.success() {
            break;
        }
        rig.subscriber.start().expect("restart the subscriber");
    }
    if !rig.subscriber.is_running() {
        rig.subscriber.start().expect("restart the subscriber");
    }
    let out = finished(rig.apply());
    assert!(out.status.success(), "{}", text(&out.stderr));
    rig.assert_equal();
}

/// `delayq run` (follow and apply in one process) SIGKILLed 20 times at staggered moments while
/// the mixed workload runs on the publisher, then run to the end: equal, no duplicate among
/// the identical rows of the table without a key, no transaction missing.
#[test]
fn run_killed_twenty_times_during_the_mixed_workload_ends_equal() {
    let rig = Rig::new("runkill");
    let spawn_run = || {
        Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["delayq", "run", "--publisher", &rig.publisher.conninfo()])
            .args(["--slot", "pgyard", "--publication", "pub"])
            .args(["--subscriber", &rig.subscriber.conninfo(), "--delay", "0s"])
            .arg(&rig.dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgyard delayq run")
    };
    std::thread::scope(|s| {
        let writer = s.spawn(|| rig.workload(200));
        for i in 0..20u64 {
            let mut child = spawn_run();
            std::thread::sleep(Duration::from_millis(100 + (i * 71) % 400));
            child.kill().expect("SIGKILL");
            let _ = child.wait();
        }
        writer.join().expect("the workload ran");
    });
    let mut child = spawn_run();
    let deadline = Instant::now() + Duration::from_secs(60);
    let equal = || {
        TABLES
            .iter()
            .all(|t| Rig::table(&rig.publisher, t) == Rig::table(&rig.subscriber, t))
    };
    while !equal() {
        if Instant::now() > deadline {
            let _ = child.kill();
            rig.assert_equal();
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = child.kill();
    let _ = child.wait();
    rig.assert_equal();
}
