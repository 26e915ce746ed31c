//! `pgyard delayq run --create-slot --copy-data --two-phase` against real PostgreSQL 18
//! servers: rows committed before the slot exists arrive through the copy at its exported
//! snapshot, later ones through the stream, none twice (also identical rows of a table
//! without a key, written while the slot is being created); row filters and column lists are
//! honoured; a subscriber missing a table or holding rows is refused before anything is
//! copied; a prepared transaction stays invisible until its COMMIT PREPARED is due, and a
//! rolled-back one never appears.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{q, Rig};
use pgyard_testkit::cluster::{Options, Primary};

const SCHEMA: &str = "create table acct(id int primary key, v text); \
     create table bag(a int, b text); \
     create table flt(id int primary key, v int, extra text)";

/// Every table's rows as the subscriber should have them: `flt` filtered (`v > 0`) and
/// without its unpublished column.
const CHECKSUMS: [&str; 3] = [
    "select count(*) || ':' || coalesce(md5(string_agg(id || '/' || v, ',' order by id)), '') from acct",
    "select count(*) || ':' || coalesce(md5(string_agg(a || '/' || b, ',' order by a, b)), '') from bag",
    "select count(*) || ':' || coalesce(md5(string_agg(id || '/' || v, ',' order by id)), '') from flt where v > 0",
];

fn new_rig(name: &str) -> Rig {
    let publisher = Primary::start(Options::default().conf("max_prepared_transactions = 10"))
        .expect("publisher");
    let subscriber = Primary::start(Options::default()).expect("subscriber");
    q(&publisher, SCHEMA);
    q(&publisher, "alter table bag replica identity full");
    q(
        &publisher,
        "create publication pub for table acct, bag, flt (id, v) where (v > 0)",
    );
    // Before any slot: only the copy can bring these.
    q(
        &publisher,
        "insert into acct select g, 'old' || g from generate_series(1, 1000) g; \
         insert into bag select 1, 'same' from generate_series(1, 50); \
         insert into bag select g, 'b' || g from generate_series(2, 200) g; \
         insert into flt select g, g % 7 - 3, 'hidden' from generate_series(1, 300) g",
    );
    Rig::with(publisher, subscriber, "copy", name)
}

/// A running `delayq run` and its standard error so far.
struct Replica {
    child: Child,
    log: Arc<Mutex<String>>,
}

impl Replica {
    fn start(rig: &Rig, extra: &[&str]) -> Replica {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["delayq", "run", "--create-slot"])
            .args(extra)
            .args(["--publisher", &rig.publisher.conninfo()])
            .args(["--slot", "pgyard", "--publication", "pub"])
            .args(["--subscriber", &rig.subscriber.conninfo()])
            .args(["--delay", "2s"])
            .arg(&rig.dir)
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

    fn log(&self) -> String {
        self.log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Until it exits on its own (a refusal): its exit code and standard error.
    fn refused(mut self) -> (Option<i32>, String) {
        let status = self.child.wait().expect("reap");
        // The reader thread may still be copying the last lines.
        sleep(Duration::from_millis(200));
        (status.code(), self.log())
    }

    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log().contains(what) {
            assert!(Instant::now() < deadline, "no {what:?}: {}", self.log());
            sleep(Duration::from_millis(20));
        }
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let status = self.child.wait().expect("reap");
        assert!(status.success(), "{status}: {}", self.log());
    }
}

fn slots(rig: &Rig) -> String {
    q(
        &rig.publisher,
        "select coalesce(string_agg(slot_name || ':' || two_phase, ','), '') from pg_replication_slots",
    )
}

fn same(rig: &Rig) -> bool {
    CHECKSUMS.iter().enumerate().all(|(i, sql)| {
        let sub = if i == 2 {
            "select count(*) || ':' || coalesce(md5(string_agg(id || '/' || v, ',' order by id)), '') from flt"
        } else {
            sql
        };
        q(&rig.publisher, sql) == q(&rig.subscriber, sub)
    })
}

fn wait_same(rig: &Rig, replica: &Replica) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !same(rig) {
        assert!(
            Instant::now() < deadline,
            "never equal: {:?} vs {:?}\n{}",
            CHECKSUMS.map(|s| q(&rig.publisher, s)),
            CHECKSUMS.map(|s| q(&rig.subscriber, s)),
            replica.log()
        );
        sleep(Duration::from_millis(200));
    }
}

/// Whether the subscriber has `acct` row `id`.
fn has(rig: &Rig, id: i32) -> bool {
    q(
        &rig.subscriber,
        &format!("select count(*) from acct where id = {id}"),
    ) == "1"
}

#[test]
fn copy_data_then_the_stream_bring_every_row_once_and_prepared_ones_when_due() {
    let rig = new_rig("data");

    // Refusals come before anything is copied, and leave no slot behind.
    let (code, log) = Replica::start(&rig, &["--copy-data"]).refused();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("missing on the subscriber: public.acct, public.bag, public.flt"),
        "{log}"
    );
    assert_eq!(slots(&rig), "");
    q(&rig.subscriber, SCHEMA);
    q(&rig.subscriber, "insert into bag values (1, 'same')");
    let (code, log) = Replica::start(&rig, &["--copy-data"]).refused();
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("table public.bag on the subscriber is not empty"),
        "{log}"
    );
    assert_eq!(slots(&rig), "");
    assert_eq!(q(&rig.subscriber, "select count(*) from bag"), "1");
    q(&rig.subscriber, "delete from bag");

    // Writers run while the slot is created and the copy is taken: each of their rows is
    // either in the snapshot or after the consistent point, and must arrive exactly once.
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let conninfo = rig.publisher.conninfo();
    let writer = {
        let (stop, written) = (stop.clone(), written.clone());
        std::thread::spawn(move || {
            let mut s = pgyard_blocking::connect(&conninfo).expect("writer");
            let mut id = 10_000;
            while !stop.load(Ordering::Relaxed) {
                id += 1;
                s.simple_query(&format!(
                    "insert into acct values ({id}, 'during'); insert into bag values (7, 'twin'); \
                     insert into flt values ({id}, {id} % 3 - 1, 'hidden')"
                ))
                .expect("write");
                written.fetch_add(1, Ordering::Relaxed);
                sleep(Duration::from_millis(5));
            }
        })
    };
    let replica = Replica::start(&rig, &["--copy-data", "--two-phase"]);
    replica.wait_for("following from");
    sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    assert!(written.load(Ordering::Relaxed) > 0);
    let log = replica.log();
    assert!(log.contains("with two_phase; copied "), "{log}");
    assert_eq!(slots(&rig), "pgyard:true");

    // After it: updates and deletes of rows that came through the copy, identical rows too.
    q(
        &rig.publisher,
        "update acct set v = 'new' || id where id % 10 = 0; delete from acct where id % 13 = 0; \
         delete from bag where a = 1 and ctid = (select ctid from bag where a = 1 limit 1); \
         update bag set b = 'changed' where a = 5; insert into bag values (1, 'same')",
    );
    wait_same(&rig, &replica);
    assert_eq!(
        q(
            &rig.subscriber,
            "select count(*) from flt where extra is not null"
        ),
        "0"
    );
    assert_eq!(
        q(&rig.subscriber, "select count(*) from bag where a = 1"),
        "50"
    );

    // Two-phase: prepared long before the delay has passed, the row stays invisible until
    // COMMIT PREPARED is due; a rolled-back one never appears.
    q(
        &rig.publisher,
        "begin; insert into acct values (-1, 'prepared'); prepare transaction 'p1'",
    );
    q(
        &rig.publisher,
        "begin; insert into acct values (-2, 'rolled back'); prepare transaction 'p2'",
    );
    sleep(Duration::from_secs(5));
    assert!(!has(&rig, -1), "visible before COMMIT PREPARED");
    q(&rig.publisher, "rollback prepared 'p2'");
    let committed = Instant::now();
    q(&rig.publisher, "commit prepared 'p1'");
    sleep(Duration::from_millis(1000));
    if committed.elapsed() < Duration::from_millis(1900) {
        assert!(!has(&rig, -1), "applied before its COMMIT PREPARED was due");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !has(&rig, -1) {
        assert!(
            Instant::now() < deadline,
            "never applied: {}",
            replica.log()
        );
        sleep(Duration::from_millis(100));
    }
    assert!(committed.elapsed() >= Duration::from_secs(2));
    wait_same(&rig, &replica);
    assert!(
        !has(&rig, -2),
        "a rolled-back prepared transaction appeared"
    );
    replica.stop();
}

#[test]
fn copy_data_without_create_slot_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "run", "--copy-data"])
        .args([
            "--publisher",
            "host=nowhere",
            "--slot",
            "s",
            "--publication",
            "p",
        ])
        .args([
            "--subscriber",
            "host=nowhere",
            "--delay",
            "1s",
            "/nonexistent/dq",
        ])
        .output()
        .expect("pgyard");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--create-slot"), "{err}");
    assert!(err.contains("--copy-data"), "{err}");
}

/// A slot without the subscriber's origin is what a run killed during its copy leaves (the
/// origin commits with the copied rows): a run with `--copy-data` refuses to stream from it,
/// saying what to do, and leaves the slot alone.
#[test]
fn a_slot_whose_copy_never_committed_is_refused() {
    let rig = new_rig("orphan");
    q(&rig.subscriber, SCHEMA);
    q(
        &rig.publisher,
        "select pg_create_logical_replication_slot('pgyard', 'pgoutput')",
    );
    let (code, log) = Replica::start(&rig, &["--copy-data"]).refused();
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("ended before its copy committed"), "{log}");
    assert!(log.contains("pg_drop_replication_slot('pgyard')"), "{log}");
    assert_eq!(slots(&rig), "pgyard:false");
    assert_eq!(q(&rig.subscriber, "select count(*) from acct"), "0");
    // Once the slot is dropped, the same command copies and streams.
    q(&rig.publisher, "select pg_drop_replication_slot('pgyard')");
    let replica = Replica::start(&rig, &["--copy-data"]);
    replica.wait_for("copied");
    wait_same(&rig, &replica);
    assert_eq!(
        q(
            &rig.subscriber,
            "select count(*) from pg_replication_origin where roname = 'pgyard_delayq'"
        ),
        "1",
        "the copy committed its origin"
    );
    replica.stop();
}
