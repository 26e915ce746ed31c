//! `pgyard delayq ingest` over real pgoutput captured from PostgreSQL 18 (the wire crate's
//! golden captures): every committed transaction of the capture is queued, aborted and
//! rolled-back work is marked so, flush points only move forward, and the result verifies.

use std::collections::BTreeSet;
use std::process::Command;

use pgyard_wire::pgoutput::{PgOutputDecoder, PgOutputMessage, ProtoVersion};
use pgyard_wire::replication::ReplicationMessage;

fn golden(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../wire/tests/golden")
        .join(name)
}

fn pgyard(args: &[&std::ffi::OsStr]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(args)
        .output()
        .expect("pgyard runs")
}

/// The xids the capture commits, read independently of the queue.
fn committed_xids(capture: &[u8]) -> BTreeSet<u64> {
    let start = usize::from(capture.first() == Some(&b'N'));
    let mut decoder = PgOutputDecoder::new(ProtoVersion::MAX);
    let mut copy_both = false;
    let mut current = None;
    let mut out = BTreeSet::new();
    for frame in pgyard_wire::frame::frames(&capture[start..], 1 << 30) {
        let frame = frame.expect("golden captures are well formed");
        if frame.tag == b'W' {
            copy_both = true;
        }
        if frame.tag != b'd' || !copy_both {
            continue;
        }
        let Ok(ReplicationMessage::XLogData(x)) =
            ReplicationMessage::decode_from_server(frame.body)
        else {
            continue;
        };
        match decoder.decode(x.data).expect("pgoutput decodes") {
            PgOutputMessage::Begin(b) => current = Some(b.xid.0),
            PgOutputMessage::Commit(_) => {
                out.insert(u64::from(current.take().expect("commit after begin")));
            }
            PgOutputMessage::StreamCommit(c) => {
                out.insert(u64::from(c.xid.0));
            }
            PgOutputMessage::CommitPrepared(c) => {
                out.insert(u64::from(c.xid.0));
            }
            _ => {}
        }
    }
    out
}

#[test]
fn real_captures_are_queued_whole_and_verify() {
    for name in [
        "recvlogical_v1-1",
        "recvlogical_v4-1",
        "recvlogical_stream-1",
        "recvlogical_parallel-1",
    ] {
        let capture = golden(&format!("{name}.backend"));
        let bytes = std::fs::read(&capture).expect("golden capture");
        let expected = committed_xids(&bytes);
        assert!(
            !expected.is_empty(),
            "{name}: the capture commits something"
        );

        let dir = std::env::temp_dir().join(format!("pgyard-ingest-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = pgyard(&[
            "delayq".as_ref(),
            "ingest".as_ref(),
            dir.as_os_str(),
            "--capture".as_ref(),
            capture.as_os_str(),
            "--delay".as_ref(),
            "1h".as_ref(),
            "--sync-every".as_ref(),
            "4".as_ref(),
        ]);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let flushed: Vec<pgyard_types::Lsn> = String::from_utf8(out.stdout)
            .expect("UTF-8")
            .lines()
            .map(|l| {
                l.strip_prefix("flushed ")
                    .expect("flushed lines")
                    .parse()
                    .expect("LSN")
            })
            .collect();
        assert!(!flushed.is_empty(), "{name}: at least one flush point");
        assert!(
            flushed.windows(2).all(|w| w[0] < w[1]),
            "{name}: {flushed:?}"
        );

        let out = pgyard(&[
            "delayq".as_ref(),
            "inspect".as_ref(),
            "--json".as_ref(),
            dir.as_os_str(),
        ]);
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let queued: BTreeSet<u64> = v["transactions"]
            .as_array()
            .expect("transactions")
            .iter()
            .filter(|t| t["state"] == "committed")
            .map(|t| t["xid"].as_u64().expect("xid"))
            .collect();
        assert_eq!(queued, expected, "{name}");
        assert_eq!(
            v["flush_lsn"].as_str().expect("flush_lsn"),
            flushed.last().expect("a flush").to_string()
        );
        // Nothing was applied: ingest only queues.
        assert_eq!(v["apply_lsn"], "0/0");

        let out = pgyard(&["delayq".as_ref(), "verify".as_ref(), dir.as_os_str()]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn a_truncated_capture_is_refused_with_its_offset() {
    let bytes = std::fs::read(golden("recvlogical_v4-1.backend")).expect("golden capture");
    let dir = std::env::temp_dir().join(format!("pgyard-ingest-cut-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    let cut = dir.join("cut.backend");
    std::fs::write(&cut, &bytes[..bytes.len() - 3]).expect("write");
    let qdir = dir.join("q");
    let out = pgyard(&[
        "delayq".as_ref(),
        "ingest".as_ref(),
        qdir.as_os_str(),
        "--capture".as_ref(),
        cut.as_os_str(),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("byte offset"));
    let _ = std::fs::remove_dir_all(&dir);
}
