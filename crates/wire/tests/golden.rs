//! Golden captures of real PostgreSQL 18 traffic: every byte decodes and re-encodes exactly.
//!
//! `tests/golden/` holds raw one-direction captures (`<scenario>-<n>.frontend` and
//! `<scenario>-<n>.backend`, connection `n` of the scenario) recorded by
//! `pgyard_testkit::proxy::RecordingProxy` between Debian's PostgreSQL 15 client tools (with
//! libpq 18) and a PostgreSQL 18 server: a SCRAM login, simple queries, COPY in and out, a
//! notice, LISTEN/NOTIFY and an error from psql; `pgbench -i` and `pgbench -M extended`; and
//! logical replication through `pg_recvlogical` with pgoutput protocol versions 1 and 4
//! (buffered, `streaming=on`, `streaming=parallel`, a two-phase slot) over transactions that
//! are streamed, prepared, origin-tagged and enum-typed.
//!
//! [`committed_captures_decode_and_reencode_exactly`] replays the committed files.
//! [`live_capture_decodes_and_reencodes_exactly`] records the same sessions afresh from a live
//! server and checks them the same way; with `PGYARD_REGEN_GOLDEN=1` it also replaces the
//! committed files with the new recording.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use pgyard_testkit::cluster::{psql_path, Auth, Node, Options, Primary};
use pgyard_testkit::postgres;
use pgyard_testkit::proxy::RecordingProxy;
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::describe::{self, Side, WalkOptions};
use pgyard_wire::frame::{Decoded, FrameDecoder, Limits, UnitRef};
use pgyard_wire::frontend::{AuthResponseKind, FrontendMessage, StartupPacket};
use pgyard_wire::pgoutput::{PgOutputDecoder, ProtoVersion};
use pgyard_wire::replication::ReplicationMessage;

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Counts of described messages per `layer/type name`.
type Counts = BTreeMap<String, usize>;

/// Decodes a capture unit by unit with the codec (not the describer), re-encodes every unit and
/// every replication and pgoutput layer, and checks the bytes are the ones captured. Returns
/// the number of units checked.
fn roundtrip(capture: &[u8], side: Side, name: &str) -> usize {
    let mut dec = match side {
        Side::Frontend => FrameDecoder::frontend(Limits::default()),
        Side::Backend => FrameDecoder::backend(Limits::default()),
    };
    let mut pos = 0;
    let mut checked = 0;
    if side == Side::Backend {
        // The one-byte answers to SSLRequest / GSSENCRequest.
        while pos < 2
            && matches!(capture.get(pos), Some(b'N' | b'S' | b'G'))
            && (pos == 0 || capture.get(pos + 1).is_some_and(|&b| b != 0))
        {
            pos += 1;
            checked += 1;
        }
    }
    dec.feed(&capture[pos..]);
    let mut copy_both = false;
    let mut sasl_started = false;
    let mut pgoutput = PgOutputDecoder::new(ProtoVersion::MAX);
    loop {
        let unit = match dec.decode_ref() {
            Ok(Decoded::Frame(u)) => u,
            Ok(Decoded::NeedMore { .. }) => {
                assert_eq!(pos, capture.len(), "{name}: trailing partial message");
                return checked;
            }
            Err(e) => panic!("{name}: framing fails at byte {pos}: {e}"),
        };
        let wire = &capture[pos..];
        let mut out = BytesMut::new();
        let len = match unit {
            UnitRef::Startup(body) => {
                let p = StartupPacket::decode(body)
                    .unwrap_or_else(|e| panic!("{name}: startup packet at {pos}: {e}"));
                p.encode(&mut out).expect("startup packet encodes");
                body.len() + 4
            }
            UnitRef::Byte(b) => {
                out.extend_from_slice(&[b]);
                1
            }
            UnitRef::Typed(f) => {
                let fail = |e: &dyn std::fmt::Display| -> ! {
                    panic!("{name}: {:?} at byte {pos}: {e}", char::from(f.tag))
                };
                match side {
                    Side::Frontend => {
                        let kind = (f.tag == b'p').then(|| {
                            if sasl_started {
                                AuthResponseKind::Sasl
                            } else {
                                sasl_started = true;
                                AuthResponseKind::SaslInitial
                            }
                        });
                        let m = FrontendMessage::decode_with(f.tag, f.body, kind)
                            .unwrap_or_else(|e| fail(&e));
                        m.encode(&mut out).unwrap_or_else(|e| fail(&e));
                        match m {
                            FrontendMessage::Query(q) if q.starts_with(b"START_REPLICATION") => {
                                copy_both = true
                            }
                            FrontendMessage::CopyDone => copy_both = false,
                            FrontendMessage::CopyData(p) if copy_both => {
                                let r = ReplicationMessage::decode_from_client(p)
                                    .unwrap_or_else(|e| fail(&e));
                                assert_eq!(&r.to_bytes()[..], p, "{name}: replication at {pos}");
                                checked += 1;
                            }
                            _ => {}
                        }
                    }
                    Side::Backend => {
                        let m = BackendMessage::decode(f.tag, f.body).unwrap_or_else(|e| fail(&e));
                        m.encode(&mut out).unwrap_or_else(|e| fail(&e));
                        match m {
                            BackendMessage::CopyBothResponse(_) => copy_both = true,
                            BackendMessage::CopyDone
                            | BackendMessage::ErrorResponse(_)
                            | BackendMessage::ReadyForQuery(_) => copy_both = false,
                            BackendMessage::CopyData(p) if copy_both => {
                                let r = ReplicationMessage::decode_from_server(p)
                                    .unwrap_or_else(|e| fail(&e));
                                assert_eq!(&r.to_bytes()[..], p, "{name}: replication at {pos}");
                                checked += 1;
                                if let ReplicationMessage::XLogData(x) = r {
                                    let msg = pgoutput.decode(x.data).unwrap_or_else(|e| fail(&e));
                                    let again = msg.to_bytes().expect("pgoutput encodes");
                                    assert_eq!(&again[..], x.data, "{name}: pgoutput at {pos}");
                                    checked += 1;
                                }
                            }
                            _ => {}
                        }
                    }
                }
                f.wire_len()
            }
        };
        assert_eq!(
            &out[..],
            &wire[..len],
            "{name}: unit at byte {pos} re-encodes"
        );
        pos += len;
        checked += 1;
    }
}

/// Round-trips and describes every capture in `dir`; returns counts per file and in total.
fn check_dir(dir: &Path) -> (Vec<(String, usize, usize)>, Counts) {
    let mut files: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            matches!(
                p.extension().and_then(|e| e.to_str()),
                Some("frontend" | "backend")
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no captures in {}", dir.display());
    let mut per_file = Vec::new();
    let mut counts = Counts::new();
    for path in files {
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let side = if name.ends_with(".frontend") {
            Side::Frontend
        } else {
            Side::Backend
        };
        let bytes = fs::read(&path).expect("capture readable");
        let units = roundtrip(&bytes, side, &name);
        let opts = WalkOptions {
            side,
            replication: true,
        };
        let described = describe::describe_all(&bytes, opts)
            .unwrap_or_else(|e| panic!("{name}: describe: {e}"));
        assert_eq!(described.len(), units, "{name}: describer and codec agree");
        for d in &described {
            *counts
                .entry(format!("{}/{}", d.layer.name(), d.type_name))
                .or_insert(0) += 1;
        }
        per_file.push((name, bytes.len(), described.len()));
    }
    (per_file, counts)
}

/// What every full recording must contain (layer/type).
const EXPECTED: &[&str] = &[
    "frontend/SSLRequest",
    "frontend/StartupMessage",
    "frontend/SASLInitialResponse",
    "frontend/SASLResponse",
    "frontend/Query",
    "frontend/Parse",
    "frontend/Bind",
    "frontend/Describe",
    "frontend/Execute",
    "frontend/Sync",
    "frontend/CopyData",
    "frontend/CopyDone",
    "frontend/Terminate",
    "backend/EncryptionResponse",
    "backend/AuthenticationSASL",
    "backend/AuthenticationSASLContinue",
    "backend/AuthenticationSASLFinal",
    "backend/AuthenticationOk",
    "backend/ParameterStatus",
    "backend/BackendKeyData",
    "backend/ReadyForQuery",
    "backend/RowDescription",
    "backend/DataRow",
    "backend/CommandComplete",
    "backend/ParseComplete",
    "backend/BindComplete",
    "backend/CopyInResponse",
    "backend/CopyOutResponse",
    "backend/CopyBothResponse",
    "backend/NoticeResponse",
    "backend/NotificationResponse",
    "backend/ErrorResponse",
    "replication/XLogData",
    "replication/Primary keepalive message",
    "replication/Standby status update",
    "pgoutput/Begin",
    "pgoutput/Commit",
    "pgoutput/Origin",
    "pgoutput/Relation",
    "pgoutput/Type",
    "pgoutput/Insert",
    "pgoutput/Update",
    "pgoutput/Delete",
    "pgoutput/Truncate",
    "pgoutput/Message",
    "pgoutput/Stream Start",
    "pgoutput/Stream Stop",
    "pgoutput/Stream Commit",
    "pgoutput/Stream Abort",
    "pgoutput/Begin Prepare",
    "pgoutput/Prepare",
    "pgoutput/Commit Prepared",
    "pgoutput/Rollback Prepared",
    "pgoutput/Stream Prepare",
];

fn report(per_file: &[(String, usize, usize)], counts: &Counts) {
    let total: usize = per_file.iter().map(|f| f.1).sum();
    eprintln!("{} captures, {total} bytes:", per_file.len());
    for (name, bytes, n) in per_file {
        eprintln!("  {name:40} {bytes:>7} bytes {n:>5} messages");
    }
    for (k, n) in counts {
        eprintln!("  {k:45} {n}");
    }
    let missing: Vec<&&str> = EXPECTED
        .iter()
        .filter(|k| !counts.contains_key(**k))
        .collect();
    assert!(missing.is_empty(), "never seen: {missing:?}");
}

#[test]
fn committed_captures_decode_and_reencode_exactly() {
    let (per_file, counts) = check_dir(&golden_dir());
    report(&per_file, &counts);
    // The parallel-streaming capture carries Stream Abort's abort LSN and time (v4 layout).
    let parallel = fs::read(golden_dir().join("recvlogical_parallel-1.backend")).expect("capture");
    let opts = WalkOptions {
        side: Side::Backend,
        replication: true,
    };
    let d = describe::describe_all(&parallel, opts).expect("describes");
    assert!(d
        .iter()
        .any(|d| d.type_name == "Stream Abort" && d.fields.iter().any(|(k, _)| *k == "abort_lsn")));
}

#[test]
fn truncated_and_corrupted_captures_fail_with_their_offset() {
    let path = golden_dir().join("psql-1.backend");
    let bytes = fs::read(&path).expect("capture");
    let opts = WalkOptions {
        side: Side::Backend,
        replication: false,
    };
    let cut = bytes.len() - 3;
    let e = describe::describe_all(&bytes[..cut], opts).expect_err("truncated");
    assert_eq!(e.offset, cut);
    assert!(e.message_offset < cut);
    // Corrupt the length word of the second typed message (after the one-byte answer and the
    // first frame).
    let first_len = u32::from_be_bytes(bytes[2..6].try_into().expect("4 bytes")) as usize;
    let second = 1 + 1 + first_len;
    let mut bad = bytes.clone();
    bad[second + 1..second + 5].copy_from_slice(&2u32.to_be_bytes());
    let e = describe::describe_all(&bad, opts).expect_err("corrupt length");
    assert_eq!((e.offset, e.message_offset), (second + 1, second));
}

// ---------------------------------------------------------------------------------------------
// live recording

/// Runs `cmd` with output to files in `dir`, killing it after `timeout`; returns whether it
/// succeeded, and its standard error.
fn run(cmd: &mut Command, dir: &Path, what: &str, timeout: Duration) -> (bool, String) {
    let out = dir.join(format!("{what}.out"));
    let err = dir.join(format!("{what}.err"));
    cmd.stdin(Stdio::null())
        .stdout(File::create(&out).expect("stdout file"))
        .stderr(File::create(&err).expect("stderr file"));
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("{what}: {e}"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = fs::read_to_string(&err).unwrap_or_default();
    (status.is_some_and(|s| s.success()), stderr)
}

struct Tools {
    bin: PathBuf,
    lib_dir: PathBuf,
}

impl Tools {
    fn cmd(&self, tool: &str, password: &str) -> Command {
        let mut c = Command::new(self.bin.join(tool));
        c.env("LD_LIBRARY_PATH", &self.lib_dir)
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", "10")
            .env("PGAPPNAME", "pgyard-golden")
            .env("LC_ALL", "C")
            .env_remove("PGSSLMODE")
            .env_remove("PGOPTIONS");
        c
    }
}

/// Through a fresh proxy, runs `f` (which gets the proxy port) and waits for the connections
/// to close; the captures land in `<out>/<scenario>/`.
fn record(node: &Node, out: &Path, scenario: &str, f: impl FnOnce(u16)) -> PathBuf {
    let dir = out.join(scenario);
    let mut proxy = RecordingProxy::start(node.port(), &dir).expect("proxy starts");
    f(proxy.port());
    assert!(proxy.wait_idle(), "{scenario}: connections still open");
    proxy.shutdown();
    assert!(proxy.connections() > 0, "{scenario}: nothing connected");
    dir
}

const SETUP: &str = "
CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy');
CREATE TABLE t (id int PRIMARY KEY, m mood, note text);
CREATE TABLE t2 (v text);
ALTER TABLE t2 REPLICA IDENTITY FULL;
INSERT INTO t2 VALUES ('a'), ('b');
CREATE PUBLICATION pub FOR TABLE t, t2;
SELECT pg_replication_origin_create('upstream');
";

const WORKLOAD: &str = "
BEGIN;
INSERT INTO t VALUES (1, 'happy', 'one'), (2, 'sad', 'two'), (3, 'ok', 'three');
UPDATE t SET note = 'uno' WHERE id = 1;
UPDATE t SET id = 20 WHERE id = 2;
DELETE FROM t WHERE id = 3;
COMMIT;
UPDATE t2 SET v = v || '!';
BEGIN;
INSERT INTO t VALUES (4, 'ok', 'before savepoint');
SAVEPOINT s;
INSERT INTO t VALUES (5, 'sad', 'rolled back to savepoint');
ROLLBACK TO SAVEPOINT s;
INSERT INTO t VALUES (6, 'happy', 'after savepoint');
COMMIT;
BEGIN;
INSERT INTO t VALUES (7, 'ok', 'aborted');
ROLLBACK;
SELECT pg_logical_emit_message(true, 'pgyard', 'transactional hello');
SELECT pg_logical_emit_message(false, 'pgyard', 'immediate hello');
BEGIN;
INSERT INTO t VALUES (8, 'happy', 'prepared then committed');
PREPARE TRANSACTION 'gid_commit';
COMMIT PREPARED 'gid_commit';
BEGIN;
INSERT INTO t VALUES (9, 'sad', 'prepared then rolled back');
PREPARE TRANSACTION 'gid_rollback';
ROLLBACK PREPARED 'gid_rollback';
SELECT pg_replication_origin_session_setup('upstream');
BEGIN;
SELECT pg_replication_origin_xact_setup('0/12345678', now());
INSERT INTO t VALUES (11, 'ok', 'from upstream');
COMMIT;
SELECT pg_replication_origin_session_reset();
TRUNCATE t2;
";

fn psql_session_script(dir: &Path) -> String {
    let csv = dir.join("rows.csv");
    let csv = csv.display();
    format!(
        "\\copy (SELECT g, 'row ' || g FROM generate_series(1, 12) g) TO '{csv}'\n\
         CREATE TEMP TABLE cin (a int, b text);\n\
         \\copy cin FROM '{csv}'\n\
         SELECT count(*), max(b), NULL::text AS nothing FROM cin;\n\
         DO $$ BEGIN RAISE NOTICE 'hello from DO'; END $$;\n\
         LISTEN golden;\n\
         NOTIFY golden, 'a payload';\n\
         SELECT 1 / 0;\n\
         SELECT 'still here' AS after_error;\n"
    )
}

/// The password of the live server's SCRAM login, which every recorded client presents.
const PASSWORD: &str = "golden-Secret";

/// How long any one client may run before it counts as hung.
const BOUND: Duration = Duration::from_secs(30);

/// Through the proxy at `port`; `sslmode=prefer` so libpq sends the SSLRequest `EXPECTED` lists.
fn conninfo(port: u16, extra: &str) -> String {
    format!(
        "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=prefer \
         application_name=pgyard-golden {extra}"
    )
}

#[test]
fn live_capture_decodes_and_reencodes_exactly() {
    let tools = live_tools();
    let node = Primary::start(
        Options::default()
            .auth(Auth::ScramSha256)
            .password(PASSWORD)
            .conf("max_prepared_transactions = 10")
            .conf("logical_decoding_work_mem = 64kB")
            .conf("debug_logical_replication_streaming = immediate")
            .conf("wal_sender_timeout = 10s"),
    )
    .expect("PostgreSQL 18 starts");
    let out = std::env::temp_dir().join(format!("pgyard-golden-{}", std::process::id()));
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).expect("scratch folder");
    node.psql(SETUP).expect("setup");

    let mut scenarios = record_client_sessions(&node, &tools, &out);
    let (create, endpos) = record_slot_creation_and_workload(&node, &tools, &out);
    scenarios.push(create);
    scenarios.extend(record_recvlogical_runs(&node, &tools, &out, &endpos));
    check_live_recordings(&out, &scenarios);
    drop(node);
    let _ = fs::remove_dir_all(&out);
}

/// `cargo xtask test` installs the client tools; a missing tool is a failure, never a skip.
fn live_tools() -> Tools {
    let psql = psql_path().expect("psql must be installed (cargo xtask provision installs it)");
    let bin = psql.parent().expect("psql's folder").to_owned();
    for tool in ["pgbench", "pg_recvlogical"] {
        assert!(
            bin.join(tool).is_file(),
            "{tool} must be installed next to psql (cargo xtask provision installs it)"
        );
    }
    let install = postgres::ensure_installed().expect("PostgreSQL 18");
    Tools {
        bin,
        lib_dir: install.lib_dir.clone(),
    }
}

/// One scenario per client run, so a failing capture names the client that made it.
fn record_client_sessions(node: &Node, tools: &Tools, out: &Path) -> Vec<PathBuf> {
    let mut scenarios = Vec::new();

    // psql: SCRAM login, COPY out and in, a notice, LISTEN/NOTIFY, an error.
    let script = out.join("session.sql");
    fs::write(&script, psql_session_script(out)).expect("script");
    scenarios.push(record(node, out, "psql", |port| {
        let mut c = tools.cmd("psql", PASSWORD);
        c.args(["-X", "-v", "ON_ERROR_STOP=0", "-f"])
            .arg(&script)
            .arg("-d")
            .arg(conninfo(port, ""));
        let (ok, err) = run(&mut c, out, "psql", BOUND);
        assert!(ok, "psql: {err}");
        assert!(err.contains("division by zero"), "{err}");
    }));

    // pgbench: initialisation (server-side data generation keeps it small), then the
    // extended query protocol.
    scenarios.push(record(node, out, "pgbench_init", |port| {
        let mut c = tools.cmd("pgbench", PASSWORD);
        c.args(["-i", "-s", "1", "-I", "dtGvp", "-h", "127.0.0.1", "-p"])
            .arg(port.to_string())
            .args(["-U", "postgres", "postgres"]);
        let (ok, err) = run(&mut c, out, "pgbench_init", BOUND);
        assert!(ok, "pgbench -i: {err}");
    }));
    scenarios.push(record(node, out, "pgbench", |port| {
        let mut c = tools.cmd("pgbench", PASSWORD);
        c.args([
            "-M",
            "extended",
            "-t",
            "20",
            "-c",
            "1",
            "-n",
            "-h",
            "127.0.0.1",
        ])
        .arg("-p")
        .arg(port.to_string())
        .args(["-U", "postgres", "postgres"]);
        let (ok, err) = run(&mut c, out, "pgbench", BOUND);
        assert!(ok, "pgbench: {err}");
    }));
    scenarios
}

/// Slots made after the workload would miss its changes; returns the creation and end LSN.
fn record_slot_creation_and_workload(node: &Node, tools: &Tools, out: &Path) -> (PathBuf, String) {
    // Logical replication: one slot per run. The two-phase slot of the buffered v4 run is
    // made by pg_recvlogical itself, through the proxy.
    node.psql(
        "SELECT pg_create_logical_replication_slot('s_v1', 'pgoutput'); \
         SELECT pg_create_logical_replication_slot('s_stream', 'pgoutput', false, true); \
         SELECT pg_create_logical_replication_slot('s_parallel', 'pgoutput', false, true);",
    )
    .expect("slots");
    let create = record(node, out, "recvlogical_create", |port| {
        let mut c = tools.cmd("pg_recvlogical", PASSWORD);
        c.args([
            "--create-slot",
            "--two-phase",
            "-P",
            "pgoutput",
            "-S",
            "s_v4",
        ])
        .arg("-d")
        .arg(conninfo(port, ""));
        let (ok, err) = run(&mut c, out, "recvlogical_create", BOUND);
        assert!(ok, "pg_recvlogical --create-slot: {err}");
    });
    // The workload on the unix socket (not recorded); each statement on its own.
    let workload = out.join("workload.sql");
    fs::write(&workload, WORKLOAD).expect("workload");
    let mut c = tools.cmd("psql", PASSWORD);
    c.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-f"])
        .arg(&workload)
        .arg("-d")
        .arg(node.socket_conninfo());
    let (ok, err) = run(&mut c, out, "workload", BOUND);
    assert!(ok, "workload: {err}");
    let endpos = node
        .psql("SELECT pg_current_wal_lsn()")
        .expect("end position");
    (create, endpos)
}

/// Each protocol version and streaming mode lays pgoutput out differently, so each is recorded.
fn record_recvlogical_runs(node: &Node, tools: &Tools, out: &Path, endpos: &str) -> Vec<PathBuf> {
    let runs: [(&str, &str, &[&str]); 4] = [
        (
            "recvlogical_v1",
            "s_v1",
            &["proto_version=1", "messages=true"],
        ),
        (
            "recvlogical_v4",
            "s_v4",
            &["proto_version=4", "messages=true", "two_phase=true"],
        ),
        (
            "recvlogical_stream",
            "s_stream",
            &[
                "proto_version=4",
                "messages=true",
                "two_phase=true",
                "streaming=on",
            ],
        ),
        (
            "recvlogical_parallel",
            "s_parallel",
            &[
                "proto_version=4",
                "messages=true",
                "two_phase=true",
                "streaming=parallel",
            ],
        ),
    ];
    let mut scenarios = Vec::new();
    for (scenario, slot, opts) in runs {
        scenarios.push(record(node, out, scenario, |port| {
            let mut c = tools.cmd("pg_recvlogical", PASSWORD);
            c.args(["--start", "-n", "-s", "1", "-f", "/dev/null", "-S", slot])
                .args(["-o", "publication_names=pub"])
                .arg("-E")
                .arg(endpos)
                .arg("-d")
                .arg(conninfo(port, ""));
            for o in opts {
                c.args(["-o", o]);
            }
            let (ok, err) = run(&mut c, out, scenario, BOUND);
            assert!(ok, "pg_recvlogical {scenario}: {err}");
        }));
    }
    scenarios
}

/// Named as the committed captures are, so `PGYARD_REGEN_GOLDEN=1` can commit them as they are.
fn check_live_recordings(out: &Path, scenarios: &[PathBuf]) {
    // Gather the recordings as `<scenario>-<n>.<side>`, check them, optionally commit them.
    let flat = out.join("flat");
    fs::create_dir_all(&flat).expect("flat folder");
    for dir in scenarios {
        let scenario = dir
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        for e in fs::read_dir(dir).expect("captures").filter_map(Result::ok) {
            let file = e.file_name().to_string_lossy().into_owned();
            if file.ends_with(".frontend") || file.ends_with(".backend") {
                fs::copy(e.path(), flat.join(format!("{scenario}-{file}"))).expect("copy");
            }
        }
    }
    let (per_file, counts) = check_dir(&flat);
    report(&per_file, &counts);
    if std::env::var_os("PGYARD_REGEN_GOLDEN").is_some_and(|v| v == "1") {
        let golden = golden_dir();
        let _ = fs::remove_dir_all(&golden);
        fs::create_dir_all(&golden).expect("golden folder");
        for (name, _, _) in &per_file {
            fs::copy(flat.join(name), golden.join(name)).expect("commit capture");
        }
        eprintln!("regenerated {}", golden.display());
    }
}
