//! `pgyard delayq inspect` and `verify` as processes over a queue written by the library.

use std::process::Command;

use pgyard_delayq::{Config, DelayQueue, Event, FsStorage, Received};
use pgyard_types::{Lsn, PgTimestamp, Xid};

fn pgyard(args: &[&str], dir: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("delayq")
        .args(args)
        .arg(dir)
        .output()
        .expect("pgyard runs")
}

/// Three committed transactions of two changes each, flushed.
fn write_queue(dir: &std::path::Path) {
    let mut q =
        DelayQueue::open(FsStorage::open(dir).expect("dir"), Config::default()).expect("open");
    let now = PgTimestamp(0).to_unix();
    let mut lsn = 0x100u64;
    for xid in 1..=3u32 {
        let commit_ts = PgTimestamp(i64::from(xid) * 1_000_000);
        let commit_lsn = Lsn(lsn + 0x300);
        let mut msgs = vec![(
            Event::Begin {
                xid: Xid(xid),
                final_lsn: commit_lsn,
                commit_ts,
            },
            format!("B{xid}"),
        )];
        for i in 0..2 {
            msgs.push((Event::Change { xid: None }, format!("I{xid}.{i}")));
        }
        msgs.push((
            Event::Commit {
                commit_lsn,
                end_lsn: Lsn(lsn + 0x400),
                commit_ts,
            },
            format!("C{xid}"),
        ));
        for (event, payload) in &msgs {
            q.handle(
                now,
                Received {
                    wal_lsn: Lsn::INVALID,
                    payload: payload.as_bytes(),
                    event: *event,
                },
            )
            .expect("queued");
        }
        lsn += 0x500;
    }
    q.flush().expect("flush");
}

#[test]
fn inspect_lists_transactions_in_commit_order_and_verify_finds_corruption() {
    let dir = std::env::temp_dir().join(format!("pgyard-dq-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    write_queue(&dir);

    let out = pgyard(&["inspect", "--json"], &dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("clean JSON");
    let txns = v["transactions"].as_array().expect("transactions");
    assert_eq!(txns.len(), 3);
    let xids: Vec<u64> = txns
        .iter()
        .map(|t| t["xid"].as_u64().expect("xid"))
        .collect();
    assert_eq!(xids, [1, 2, 3]);
    assert!(txns.iter().all(|t| t["state"] == "committed"), "{txns:?}");
    assert_eq!(txns[0]["commit_lsn"], "0/400");
    assert!(v["flush_lsn"].as_str().expect("flush_lsn").contains('/'));
    let segments = v["segments"].as_array().expect("segments");
    assert!(!segments.is_empty());

    let out = pgyard(&["verify"], &dir);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Flip a byte inside the first record's payload area of the first segment.
    let file = segments[0]["file"].as_str().expect("file name");
    let path = dir.join(file);
    let mut bytes = std::fs::read(&path).expect("segment");
    let at = 72 + 40;
    bytes[at] ^= 0x55;
    std::fs::write(&path, &bytes).expect("write");
    let out = pgyard(&["verify"], &dir);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains(file) && err.contains("offset"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
