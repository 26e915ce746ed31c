//! A change larger than a queue segment, end to end on real PostgreSQL 18 servers: one row
//! with a 100 MB text value goes publisher → `pgyard delayq follow` → queue → `pgyard delayq
//! apply` → subscriber, and so does an update of another column of that row, which leaves the
//! TOASTed value unchanged (pgoutput sends it as `u`). And one transaction of 200,000 rows
//! applied with a small piece bound (`--piece-bytes`): read out of the queue and sent in
//! pieces, one subscriber transaction.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{q, Rig};
use pgyard_testkit::cluster::{Options, Primary};

/// The row: 3.2 million hex digests, 102,400,000 bytes that compress poorly, stored without
/// compression (`storage external`) so the value is its full size everywhere on the way.
const BIG_ROW: &str = "insert into big select 1, string_agg(md5(g::text), '' order by g), 0 \
                       from generate_series(1, 3200000) g";

fn rig() -> Rig {
    let schema = "create table big(id int primary key, v text, n int); \
                  alter table big alter column v set storage external";
    rig_with(schema, "big", "row")
}

/// Two servers with `schema` on both, the publication `pub` of `table` and the slot.
fn rig_with(schema: &str, table: &str, name: &str) -> Rig {
    let publisher = Primary::start(Options::default()).expect("publisher");
    let subscriber = Primary::start(Options::default()).expect("subscriber");
    q(&publisher, schema);
    q(&subscriber, schema);
    q(
        &publisher,
        &format!("create publication pub for table {table}"),
    );
    let rig = Rig::with(publisher, subscriber, "large", name);
    rig.create_slot();
    rig
}

/// Runs `follow` until it reports the publisher's current position flushed, then stops it.
fn follow_to_end(rig: &Rig) {
    let target = q(&rig.publisher, "select pg_current_wal_lsn()");
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "follow", &rig.publisher.conninfo()])
        .args(["--slot", "pgyard", "--publication", "pub", "--delay", "0s"])
        .arg(&rig.dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("pgyard delayq follow");
    let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let deadline = Instant::now() + Duration::from_secs(90);
    for line in lines {
        let line = line.expect("read follow's output");
        if let Some(l) = line.strip_prefix("flushed ") {
            let done = q(
                &rig.publisher,
                &format!("select '{l}'::pg_lsn >= '{target}'::pg_lsn"),
            );
            if done == "t" {
                break;
            }
        }
        assert!(Instant::now() < deadline, "follow never flushed {target}");
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// What both sides must agree on: the value's length and digest, and the other column.
fn row(node: &pgyard_testkit::cluster::Node) -> String {
    q(
        node,
        "select string_agg(id || ':' || length(v) || ':' || md5(v) || ':' || n, ',' order by id) \
         from big",
    )
}

#[test]
fn a_100_mb_value_arrives_equal_and_so_does_an_update_leaving_it_alone() {
    let started = Instant::now();
    let rig = rig();
    q(&rig.publisher, BIG_ROW);
    q(&rig.publisher, "insert into big values (2, 'small', 0)");
    q(&rig.publisher, "update big set n = n + 1 where id = 1");
    let want = row(&rig.publisher);
    assert!(want.starts_with("1:102400000:"), "{want}");
    let written = started.elapsed();
    follow_to_end(&rig);
    let followed = started.elapsed();
    // The change is larger than a segment (64 MiB): it has a segment of its own.
    let segments: Vec<u64> = std::fs::read_dir(&rig.dir)
        .expect("queue folder")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            name.ends_with(".seg")
                .then(|| e.metadata().ok().map(|m| m.len()))?
        })
        .collect();
    assert!(
        segments.iter().any(|&len| len > 100_000_000),
        "no segment holds the change: {segments:?}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "apply"])
        .arg(&rig.dir)
        .args(["--subscriber", &rig.subscriber.conninfo()])
        .output()
        .expect("pgyard delayq apply");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(row(&rig.subscriber), want);
    // The update left the value alone on the subscriber too: it was not rewritten as empty
    // or NULL (pgoutput sent it as unchanged), and the other column moved.
    assert!(want.contains(":1,2:5:"), "{want}");
    println!(
        "100 MB row: servers and publisher's writes {written:?}, followed at {followed:?}, \
         applied and checked at {:?}",
        started.elapsed()
    );
}

/// Count and digest of the many-rows table, in key order.
fn many(node: &pgyard_testkit::cluster::Node) -> String {
    q(
        node,
        "select count(*) || ':' || md5(string_agg(id || '=' || v, ',' order by id)) from many",
    )
}

#[test]
fn a_transaction_of_200000_rows_is_applied_in_small_pieces_as_one_transaction() {
    let rig = rig_with(
        "create table many(id int primary key, v text)",
        "many",
        "rows",
    );
    q(
        &rig.publisher,
        "insert into many select g, md5(g::text) || repeat('x', g % 50) \
         from generate_series(1, 200000) g",
    );
    let want = many(&rig.publisher);
    assert!(want.starts_with("200000:"), "{want}");
    follow_to_end(&rig);
    // Pieces of 64 KiB: the transaction (tens of MB of messages) goes in hundreds of them.
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "apply", "--piece-bytes", "65536"])
        .arg(&rig.dir)
        .args(["--subscriber", &rig.subscriber.conninfo()])
        .output()
        .expect("pgyard delayq apply");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("applied 1 transactions (200000 rows)"),
        "{stdout}"
    );
    assert_eq!(many(&rig.subscriber), want);
    // Applied and acknowledged: the subscriber's origin is past it and a second run has
    // nothing to do.
    let again = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["delayq", "apply", "--piece-bytes", "65536"])
        .arg(&rig.dir)
        .args(["--subscriber", &rig.subscriber.conninfo()])
        .output()
        .expect("pgyard delayq apply");
    let stdout = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success() && stdout.contains("applied 0 transactions"),
        "{stdout}"
    );
    assert_eq!(many(&rig.subscriber), want);
}
