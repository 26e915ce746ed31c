//! `pgyard wire decode` as a process, on the golden captures of real PostgreSQL 18 traffic in
//! `crates/wire/tests/golden/`: one JSON line per message with the right tags, lengths and
//! layers, covering every byte; malformed captures exit non-zero naming the byte offset.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../wire/tests/golden")
}

fn decode(side: &str, replication: bool, file: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_pgyard"));
    c.args(["wire", "decode", "--side", side]);
    if replication {
        c.arg("--replication");
    }
    c.arg(file).output().expect("pgyard runs")
}

fn lines(out: &Output) -> Vec<Value> {
    String::from_utf8(out.stdout.clone())
        .expect("UTF-8 output")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} in {v}"))
}

fn n(v: &Value, key: &str) -> usize {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} in {v}")) as usize
}

/// Checks the lines of one capture against its bytes: the protocol-layer lines tile the file
/// exactly, every tag is the byte at the line's offset, replication lines sit right after their
/// CopyData's header and pgoutput lines right after their XLogData's header.
fn check_capture(bytes: &[u8], side: &str, lines: &[Value], name: &str) {
    let mut next = 0usize;
    let mut last_copy: Option<usize> = None;
    let mut last_xlog: Option<usize> = None;
    for (i, l) in lines.iter().enumerate() {
        let offset = n(l, "offset");
        let ty = s(l, "type");
        assert!(!ty.is_empty(), "{name}:{i}: type");
        match s(l, "layer") {
            layer if layer == side => {
                assert_eq!(offset, next, "{name}:{i}: {l}");
                let size = match (&l["tag"], &l["len"]) {
                    (Value::Null, len) => len.as_u64().expect("startup length") as usize,
                    (Value::String(t), Value::Null) => {
                        assert_eq!(ty, "EncryptionResponse", "{name}:{i}");
                        assert!(["N", "S", "G"].contains(&t.as_str()));
                        1
                    }
                    (Value::String(_), len) => len.as_u64().expect("length") as usize + 1,
                    other => panic!("{name}:{i}: tag/len {other:?}"),
                };
                if let Value::String(t) = &l["tag"] {
                    assert_eq!(t.as_bytes(), &bytes[offset..offset + 1], "{name}:{i}: tag");
                }
                if let Some(len) = l["len"].as_u64() {
                    let at = offset + usize::from(!l["tag"].is_null());
                    let word = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
                    assert_eq!(u64::from(word), len, "{name}:{i}: length word");
                }
                last_copy = (ty == "CopyData").then_some(offset);
                last_xlog = None;
                next = offset + size;
            }
            "replication" => {
                assert_eq!(Some(offset), last_copy.map(|c| c + 5), "{name}:{i}: {l}");
                let allowed: &[&str] = if side == "backend" {
                    &["w", "k"]
                } else {
                    &["r", "h"]
                };
                assert!(allowed.contains(&s(l, "tag")), "{name}:{i}: {l}");
                assert_eq!(s(l, "tag").as_bytes(), &bytes[offset..offset + 1]);
                assert!(l["len"].is_null());
                last_xlog = (ty == "XLogData").then_some(offset);
                last_copy = None;
            }
            "pgoutput" => {
                assert_eq!(Some(offset), last_xlog.map(|x| x + 25), "{name}:{i}: {l}");
                assert_eq!(s(l, "tag").as_bytes(), &bytes[offset..offset + 1]);
                last_xlog = None;
            }
            other => panic!("{name}:{i}: layer {other}"),
        }
    }
    assert_eq!(next, bytes.len(), "{name}: the lines cover every byte");
}

#[test]
fn every_golden_capture_decodes_to_one_line_per_message() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(golden())
        .expect("golden captures")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut seen = std::collections::BTreeSet::new();
    let mut checked = 0;
    for path in files {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let side = match path.extension().and_then(|e| e.to_str()) {
            Some("frontend") => "frontend",
            Some("backend") => "backend",
            _ => continue,
        };
        let bytes = std::fs::read(&path).expect("capture");
        let out = decode(side, true, &path);
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let ls = lines(&out);
        check_capture(&bytes, side, &ls, &name);
        for l in &ls {
            seen.insert(format!("{}/{}", s(l, "layer"), s(l, "type")));
        }
        checked += 1;
    }
    assert!(checked >= 10, "{checked} captures");
    for want in [
        "backend/EncryptionResponse",
        "backend/AuthenticationSASL",
        "frontend/SASLInitialResponse",
        "frontend/Parse",
        "backend/CopyInResponse",
        "backend/NotificationResponse",
        "replication/XLogData",
        "replication/Primary keepalive message",
        "replication/Standby status update",
        "pgoutput/Begin",
        "pgoutput/Type",
        "pgoutput/Origin",
        "pgoutput/Stream Start",
        "pgoutput/Stream Abort",
        "pgoutput/Begin Prepare",
        "pgoutput/Stream Prepare",
        "pgoutput/Commit Prepared",
    ] {
        assert!(seen.contains(want), "never printed: {want}");
    }
}

#[test]
fn session_lines_carry_the_documented_fields() {
    let path = golden().join("psql-1.backend");
    let out = decode("backend", false, &path);
    assert!(out.status.success());
    let ls = lines(&out);
    assert_eq!(s(&ls[0], "tag"), "N");
    assert!(ls[0]["len"].is_null());
    assert_eq!(s(&ls[1], "type"), "AuthenticationSASL");
    assert_eq!(ls[1]["mechanisms"][0], "SCRAM-SHA-256");
    let find = |ty: &str| {
        ls.iter()
            .find(|l| s(l, "type") == ty)
            .unwrap_or_else(|| panic!("{ty}"))
    };
    assert_eq!(find("NotificationResponse")["channel"], "golden");
    assert_eq!(find("NotificationResponse")["payload"], "a payload");
    assert_eq!(find("ErrorResponse")["fields"]["code"], "22012");
    assert_eq!(find("NoticeResponse")["fields"]["message"], "hello from DO");
    assert!(ls.iter().all(|l| s(l, "layer") == "backend"));

    let front = lines(&decode(
        "frontend",
        false,
        &golden().join("psql-1.frontend"),
    ));
    assert_eq!(s(&front[0], "type"), "SSLRequest");
    assert!(front[0]["tag"].is_null());
    assert_eq!(s(&front[1], "type"), "StartupMessage");
    assert_eq!(front[1]["parameters"]["user"], "postgres");
}

#[test]
fn streamed_changes_carry_their_xid_and_parallel_aborts_their_lsn() {
    let path = golden().join("recvlogical_parallel-1.backend");
    let ls = lines(&decode("backend", true, &path));
    let pg: Vec<&Value> = ls.iter().filter(|l| s(l, "layer") == "pgoutput").collect();
    let mut in_stream: Option<u64> = None;
    for l in &pg {
        match s(l, "type") {
            "Stream Start" => in_stream = l["xid"].as_u64(),
            "Stream Stop" => in_stream = None,
            "Insert" | "Update" | "Delete" | "Relation" | "Type" => {
                assert!(in_stream.is_some(), "streamed change outside a block: {l}");
                assert!(l["xid"].is_u64(), "{l}");
            }
            _ => {}
        }
    }
    assert!(pg
        .iter()
        .any(|l| s(l, "type") == "Stream Abort" && l["abort_lsn"].is_string()));
    // Without --replication the CopyData lines stand alone.
    let plain = lines(&decode("backend", false, &path));
    assert!(plain.iter().all(|l| s(l, "layer") == "backend"));
    let base = ls.iter().filter(|l| s(l, "layer") == "backend").count();
    assert_eq!(plain.len(), base);
}

#[test]
fn malformed_captures_fail_naming_the_byte_offset() {
    let dir = std::env::temp_dir().join(format!("pgyard-wire-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch");
    let bytes = std::fs::read(golden().join("pgbench-2.backend")).expect("capture");

    let cut = bytes.len() - 2;
    let truncated = dir.join("truncated.backend");
    std::fs::write(&truncated, &bytes[..cut]).expect("write");
    let out = decode("backend", false, &truncated);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("byte offset {cut}")), "{err}");
    // The messages before the damage are still printed.
    assert!(!lines(&out).is_empty());

    // A ReadyForQuery with an impossible status byte.
    let z = bytes
        .windows(5)
        .position(|w| w == [b'Z', 0, 0, 0, 5])
        .expect("a ReadyForQuery");
    let mut bad = bytes.clone();
    bad[z + 5] = b'?';
    let corrupt = dir.join("corrupt.backend");
    std::fs::write(&corrupt, &bad).expect("write");
    let out = decode("backend", false, &corrupt);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("byte offset {}", z + 5)), "{err}");

    let out = decode("frontend", false, &dir.join("missing"));
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(&dir);
}
