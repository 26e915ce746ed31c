//! pgoutput against a real PostgreSQL 18: slots made with our `CREATE_REPLICATION_SLOT` text,
//! a workload touching every message kind, and the changes read back through
//! `pg_logical_slot_peek_binary_changes` with protocol versions 1 and 4 (buffered, streamed
//! immediately, parallel streaming, binary values). Every payload must decode with the stateful
//! decoder, re-encode to the same bytes, and say what the workload did.

use std::collections::HashMap;
use std::fmt::Write as _;

use pgyard_testkit::cluster::{psql, Node, Options, Primary};
use pgyard_types::{Lsn, Xid};
use pgyard_wire::pgoutput::{
    OldTuple, PgOutputDecoder, PgOutputMessage, ProtoVersion, ReplicaIdentity, TupleData,
    TupleValue,
};
use pgyard_wire::replication::{
    create_replication_slot, read_replication_slot, CreatedSlot, IdentifySystem, ReadSlot,
    SlotKind, SnapshotAction, IDENTIFY_SYSTEM,
};

fn unhex(s: &str) -> Vec<u8> {
    let s = s.strip_prefix("\\x").expect("bytea in hex form");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex digit"))
        .collect()
}

/// Runs a command on a logical replication connection and splits psql's one-row output.
fn repl_command(node: &Node, sql: &str) -> Vec<String> {
    let conninfo = format!("{} replication=database", node.socket_conninfo());
    let out = psql(&conninfo, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    out.split('|').map(str::to_owned).collect()
}

/// psql prints NULL as an empty field; none of these columns can be an empty string.
fn fields(row: &[String]) -> Vec<Option<&[u8]>> {
    row.iter()
        .map(|f| (!f.is_empty()).then_some(f.as_bytes()))
        .collect()
}

fn peek(node: &Node, setup: &str, slot: &str, options: &str) -> Vec<Vec<u8>> {
    let sql = format!(
        "SET timezone = 'UTC'; {setup} SELECT data FROM \
         pg_logical_slot_peek_binary_changes('{slot}', NULL, NULL, {options})"
    );
    let out = node.psql(&sql).unwrap_or_else(|e| panic!("peek: {e}"));
    out.lines().filter(|l| !l.is_empty()).map(unhex).collect()
}

fn show(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

fn tuple_text(t: &TupleData<'_>) -> String {
    let parts: Vec<String> = t
        .iter()
        .map(|v| match v {
            TupleValue::Null => "null".to_owned(),
            TupleValue::UnchangedToast => "toast".to_owned(),
            TupleValue::Text(s) => show(s),
            TupleValue::Binary(b) => {
                let mut s = "b:".to_owned();
                for x in b {
                    let _ = write!(s, "{x:02x}");
                }
                s
            }
        })
        .collect();
    format!("({})", parts.join(","))
}

/// What a peek saw, after checking every payload decodes and re-encodes exactly.
struct Seen {
    /// One line per message, readable.
    lines: Vec<String>,
    /// Count per type byte.
    tags: HashMap<u8, usize>,
}

impl Seen {
    fn count(&self, tag: u8) -> usize {
        self.tags.get(&tag).copied().unwrap_or(0)
    }

    fn has(&self, line: &str) -> bool {
        self.lines.iter().any(|l| l == line)
    }

    fn has_prefix(&self, prefix: &str) -> bool {
        self.lines.iter().any(|l| l.starts_with(prefix))
    }

    /// Counts per message type, for the test log.
    fn summary(&self) -> String {
        let mut tags: Vec<(char, usize)> = self
            .tags
            .iter()
            .map(|(t, n)| (char::from(*t), *n))
            .collect();
        tags.sort();
        let parts: Vec<String> = tags.iter().map(|(t, n)| format!("{t}:{n}")).collect();
        format!("{} messages [{}]", self.lines.len(), parts.join(" "))
    }

    fn dump(&self) -> String {
        self.lines.join("\n")
    }
}

/// Decodes every payload with state tracking, checks exact re-encoding and the protocol's
/// consistency rules (xids of stream blocks and transactions, commit LSNs), and renders them.
fn decode_all(payloads: &[Vec<u8>], version: ProtoVersion) -> Seen {
    let mut decoder = PgOutputDecoder::new(version);
    let mut relations: HashMap<u32, String> = HashMap::new();
    let mut lines = Vec::new();
    let mut tags = HashMap::new();
    let mut open_begin: Option<(Lsn, Xid)> = None;
    let mut open_prepare: Option<Xid> = None;
    let mut streams_done: Vec<Xid> = Vec::new();
    for (i, payload) in payloads.iter().enumerate() {
        let was_in_stream = decoder.in_stream();
        let msg = decoder
            .decode(payload)
            .unwrap_or_else(|e| panic!("payload {i} ({payload:02x?}) does not decode: {e}"));
        let again = msg.to_bytes().expect("re-encodes");
        assert_eq!(
            &again[..],
            &payload[..],
            "payload {i} re-encodes differently"
        );
        assert_eq!(
            PgOutputMessage::decode(payload, was_in_stream),
            Ok(msg),
            "stateless decode agrees"
        );
        *tags.entry(msg.tag()).or_insert(0) += 1;
        // Changes inside a block carry an xid: the block's or one of its subtransactions'
        // (which are newer than the top-level xid).
        if was_in_stream {
            if let (Some(x), Some(top)) = (msg.stream_xid(), decoder.stream_xid()) {
                assert!(x.0 >= top.0, "change xid {x} inside block of {top}");
            }
        } else {
            assert_eq!(msg.stream_xid(), None);
        }
        let rel = |oid: u32| relations.get(&oid).cloned().unwrap_or(format!("?{oid}"));
        let line = match msg {
            PgOutputMessage::Begin(b) => {
                assert!(open_begin.is_none(), "nested Begin");
                open_begin = Some((b.final_lsn, b.xid));
                "B".to_owned()
            }
            PgOutputMessage::Commit(c) => {
                let (lsn, _) = open_begin.take().expect("Commit after Begin");
                assert_eq!(c.commit_lsn, lsn, "commit LSN = Begin's final LSN");
                assert!(c.end_lsn > c.commit_lsn);
                "C".to_owned()
            }
            PgOutputMessage::Origin(o) => format!("O {} {}", o.commit_lsn, show(o.name)),
            PgOutputMessage::Relation(r) => {
                let name = show(r.name);
                relations.insert(r.oid, name.clone());
                let cols: Vec<String> = r
                    .columns
                    .iter()
                    .map(|c| format!("{}{}", show(c.name), if c.key { "*" } else { "" }))
                    .collect();
                let ident = match r.replica_identity {
                    ReplicaIdentity::Default => "d",
                    ReplicaIdentity::Nothing => "n",
                    ReplicaIdentity::Full => "f",
                    ReplicaIdentity::Index => "i",
                };
                format!("R {}.{name} {ident} {}", show(r.namespace), cols.join(","))
            }
            PgOutputMessage::Type(t) => format!("Y {}.{}", show(t.namespace), show(t.name)),
            PgOutputMessage::Insert(m) => format!("I {} {}", rel(m.relation), tuple_text(&m.new)),
            PgOutputMessage::Update(m) => {
                let old = match m.old {
                    None => String::new(),
                    Some(OldTuple::Key(t)) => format!(" K{}", tuple_text(&t)),
                    Some(OldTuple::Full(t)) => format!(" O{}", tuple_text(&t)),
                };
                format!("U {}{old} N{}", rel(m.relation), tuple_text(&m.new))
            }
            PgOutputMessage::Delete(m) => match m.old {
                OldTuple::Key(t) => format!("D {} K{}", rel(m.relation), tuple_text(&t)),
                OldTuple::Full(t) => format!("D {} O{}", rel(m.relation), tuple_text(&t)),
            },
            PgOutputMessage::Truncate(m) => {
                let names: Vec<String> = m.relations.iter().map(rel).collect();
                format!("T {}", names.join(","))
            }
            PgOutputMessage::Message(m) => format!(
                "M {} {} {}",
                if m.transactional { "tx" } else { "nontx" },
                show(m.prefix),
                show(m.content)
            ),
            PgOutputMessage::StreamStart(s) => {
                assert!(!streams_done.contains(&s.xid), "stream of a finished xid");
                format!("S{}", if s.first_segment { " first" } else { "" })
            }
            PgOutputMessage::StreamStop => "E".to_owned(),
            PgOutputMessage::StreamCommit(c) => {
                streams_done.push(c.xid);
                assert!(c.end_lsn > c.commit_lsn);
                "c".to_owned()
            }
            PgOutputMessage::StreamAbort(a) => {
                if a.subxid == a.xid {
                    streams_done.push(a.xid);
                }
                format!(
                    "A {}{}",
                    if a.subxid == a.xid { "top" } else { "sub" },
                    if a.abort.is_some() { " info" } else { "" }
                )
            }
            PgOutputMessage::BeginPrepare(p) => {
                open_prepare = Some(p.xid);
                format!("b {}", show(p.gid))
            }
            PgOutputMessage::Prepare(p) => {
                assert_eq!(
                    open_prepare.take(),
                    Some(p.xid),
                    "Prepare after Begin Prepare"
                );
                format!("P {}", show(p.gid))
            }
            PgOutputMessage::StreamPrepare(p) => {
                streams_done.push(p.xid);
                format!("p {}", show(p.gid))
            }
            PgOutputMessage::CommitPrepared(p) => format!("K {}", show(p.gid)),
            PgOutputMessage::RollbackPrepared(p) => format!("r {}", show(p.gid)),
        };
        lines.push(line);
    }
    assert!(!decoder.in_stream(), "stream block left open");
    let seen = Seen { lines, tags };
    eprintln!("v{}: {}", version.number(), seen.summary());
    assert!(open_begin.is_none(), "transaction left open");
    seen
}

/// Makes the server stream each change at once instead of buffering it to its transaction's end.
const IMMEDIATE: &str = "SET debug_logical_replication_streaming = immediate;";

const V4_STREAM: &str = "'proto_version', '4', 'publication_names', 'pub', 'streaming', 'on', \
                         'two_phase', 'on', 'messages', 'true', 'binary', 'false'";

/// Panics with the statement on failure, so a broken workload step names itself.
fn query(node: &Node, s: &str) -> String {
    node.psql(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

#[test]
fn pgoutput_from_postgresql_18_decodes_and_reencodes_exactly() {
    let primary = Primary::start(
        Options::default()
            .conf("max_prepared_transactions = 10")
            .conf("logical_decoding_work_mem = 64kB"),
    )
    .expect("primary starts");
    let node: &Node = &primary;
    replication_commands_round_trip(node);
    run_workload(node);
    check_v4_buffered(node);
    check_v4_streamed(node);
    check_v4_binary(node);
    check_v1(node);
}

/// The slots the peeks read are made with pgyard's own command text, which this also checks.
fn replication_commands_round_trip(node: &Node) {
    // Replication commands built by pgyard, answered by the server, parsed by pgyard.
    let ident_row = repl_command(node, IDENTIFY_SYSTEM);
    let ident = IdentifySystem::from_row(&fields(&ident_row)).expect("IDENTIFY_SYSTEM row");
    assert_eq!(
        ident.systemid.to_string(),
        query(node, "select system_identifier from pg_control_system()")
    );
    assert_eq!(ident.timeline, 1);
    assert_eq!(ident.dbname, Some("postgres"));
    assert!(ident.xlogpos > Lsn(0));

    let s4 = create_replication_slot(
        "s4",
        false,
        &SlotKind::Logical {
            plugin: "pgoutput".to_owned(),
            two_phase: true,
            failover: false,
            snapshot: None,
        },
    );
    let row = repl_command(node, &s4);
    let created = CreatedSlot::from_row(&fields(&row)).expect("CREATE_REPLICATION_SLOT row");
    assert_eq!(created.slot_name, "s4");
    assert_eq!(created.output_plugin, Some("pgoutput"));
    assert!(created.snapshot_name.is_some(), "exported by default");
    assert!(created.consistent_point >= ident.xlogpos);
    let s1 = create_replication_slot(
        "s1",
        false,
        &SlotKind::Logical {
            plugin: "pgoutput".to_owned(),
            two_phase: false,
            failover: true,
            snapshot: Some(SnapshotAction::Nothing),
        },
    );
    let row = repl_command(node, &s1);
    let created = CreatedSlot::from_row(&fields(&row)).expect("CREATE_REPLICATION_SLOT row");
    assert_eq!(created.snapshot_name, None);
    assert_eq!(
        query(
            node,
            "select slot_name, two_phase, failover from pg_replication_slots order by 1"
        ),
        "s1|f|t\ns4|t|f"
    );
    let phys = create_replication_slot("phys", false, &SlotKind::Physical { reserve_wal: true });
    let row = repl_command(node, &phys);
    let created = CreatedSlot::from_row(&fields(&row)).expect("physical slot row");
    assert_eq!(created.output_plugin, None);
    let row = repl_command(node, &read_replication_slot("phys"));
    let read = ReadSlot::from_row(&fields(&row)).expect("READ_REPLICATION_SLOT row");
    assert_eq!(read.slot_type, Some("physical"));
    assert_eq!(read.restart_tli, Some(1));
    assert!(read.restart_lsn.is_some());
    let row = repl_command(node, &read_replication_slot("nope"));
    assert!(!ReadSlot::from_row(&fields(&row))
        .expect("all NULL")
        .exists());
}

/// One statement or transaction per message kind the checks below expect to see.
fn run_workload(node: &Node) {
    let sql = |s: &str| query(node, s);
    // The schema (after the slots: DDL is not published anyway).
    sql("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy')");
    sql(
        "CREATE TABLE t (a int4 PRIMARY KEY, b text, c numeric(10,2), d bool, \
         e timestamptz, m mood, j jsonb, bin bytea)",
    );
    sql("CREATE TABLE t2 (id int4 PRIMARY KEY, m mood, note text)");
    sql("ALTER TABLE t2 REPLICA IDENTITY FULL");
    sql("CREATE PUBLICATION pub FOR TABLE t, t2");

    // The workload.
    sql(
        "INSERT INTO t VALUES (1, 'hello', 12.5, true, '2024-01-02 03:04:05+00', 'happy', \
         '{\"k\": 1}', '\\xdeadbeef'), (2, NULL, NULL, false, NULL, 'sad', NULL, NULL)",
    );
    sql("UPDATE t SET b = 'world' WHERE a = 1");
    sql("UPDATE t SET a = 3 WHERE a = 2");
    sql("INSERT INTO t2 VALUES (1, 'happy', 'n1')");
    sql("UPDATE t2 SET note = 'n2' WHERE id = 1");
    sql("DELETE FROM t WHERE a = 3");
    sql("DELETE FROM t2 WHERE id = 1");
    sql(
        "BEGIN; SELECT pg_logical_emit_message(true, 'pfx', 'tx-msg'); \
         INSERT INTO t (a, b) VALUES (10, 'with-msg'); COMMIT",
    );
    sql("SELECT pg_logical_emit_message(false, 'pfx', 'nontx')");
    sql("TRUNCATE t2");
    sql("BEGIN; INSERT INTO t (a, b) VALUES (20, 'prep1'); PREPARE TRANSACTION 'gid1'");
    sql("COMMIT PREPARED 'gid1'");
    sql("BEGIN; INSERT INTO t (a, b) VALUES (21, 'prep2'); PREPARE TRANSACTION 'gid2'");
    sql("ROLLBACK PREPARED 'gid2'");
    sql(
        "BEGIN; INSERT INTO t (a, b) VALUES (40, 'sub-kept'); SAVEPOINT s1; \
         INSERT INTO t (a, b) VALUES (41, 'sub-gone'); ROLLBACK TO s1; \
         INSERT INTO t (a, b) VALUES (42, 'sub-after'); COMMIT",
    );
    sql("BEGIN; INSERT INTO t (a, b) VALUES (50, 'aborted'); ROLLBACK");
    sql("SELECT pg_replication_origin_create('orig1')");
    sql(
        "SELECT pg_replication_origin_session_setup('orig1'); BEGIN; \
         SELECT pg_replication_origin_xact_setup('0/ABCDEF', now()); \
         INSERT INTO t (a, b) VALUES (60, 'from-origin'); COMMIT",
    );
    // Large enough to exceed logical_decoding_work_mem (64 kB) and stream on its own.
    sql("INSERT INTO t (a, b) SELECT g, repeat('x', 200) FROM generate_series(1000, 1599) g");
}

/// Buffered decoding is where every message kind shows up with its full content.
fn check_v4_buffered(node: &Node) {
    // v4, streaming on, buffered: only the big transaction streams.
    let payloads = peek(node, "", "s4", V4_STREAM);
    let v4 = decode_all(&payloads, ProtoVersion::V4);
    let dump = v4.dump();
    for line in [
        "R public.t d a*,b,c,d,e,m,j,bin",
        "Y public.mood",
        "R public.t2 f id*,m*,note*",
        "I t (1,hello,12.50,t,2024-01-02 03:04:05+00,happy,{\"k\": 1},\\xdeadbeef)",
        "I t (2,null,null,f,null,sad,null,null)",
        "U t N(1,world,12.50,t,2024-01-02 03:04:05+00,happy,{\"k\": 1},\\xdeadbeef)",
        "U t K(2,null,null,null,null,null,null,null) N(3,null,null,f,null,sad,null,null)",
        "I t2 (1,happy,n1)",
        "U t2 O(1,happy,n1) N(1,happy,n2)",
        "D t K(3,null,null,null,null,null,null,null)",
        "D t2 O(1,happy,n2)",
        "M tx pfx tx-msg",
        "M nontx pfx nontx",
        "T t2",
        "b gid1",
        "P gid1",
        "K gid1",
        "b gid2",
        "P gid2",
        "r gid2",
        "I t (40,sub-kept,null,null,null,null,null,null)",
        "I t (42,sub-after,null,null,null,null,null,null)",
        "O 0/ABCDEF orig1",
        "S first",
        "E",
        "c",
    ] {
        assert!(v4.has(line), "v4 buffered lacks {line:?}:\n{dump}");
    }
    assert!(
        !v4.has_prefix("I t (41,"),
        "rolled-back subtransaction sent:\n{dump}"
    );
    assert!(
        !v4.has_prefix("I t (50,"),
        "aborted transaction sent:\n{dump}"
    );
    assert_eq!(v4.count(b'I'), 9 + 600, "{dump}");
    assert!(
        v4.count(b'S') >= 2,
        "the big transaction streams in several blocks"
    );
    assert_eq!(v4.count(b'c'), 1);
    assert_eq!(v4.count(b'A'), 0);
    // Order inside the message transaction: the transactional message, then the insert.
    let at = |l: &str| v4.lines.iter().position(|x| x == l).expect("present");
    assert!(at("M tx pfx tx-msg") < at("I t (10,with-msg,null,null,null,null,null,null)"));
    assert!(at("b gid1") < at("P gid1") && at("P gid1") < at("K gid1"));
}

/// Aborted work reaches the client only when streamed before its transaction ends.
fn check_v4_streamed(node: &Node) {
    // v4, streaming on, every change streamed at once: aborts appear, without abort info.
    let payloads = peek(node, IMMEDIATE, "s4", V4_STREAM);
    let st = decode_all(&payloads, ProtoVersion::V4);
    let dump = st.dump();
    for line in ["A sub", "A top", "p gid1", "K gid1", "p gid2", "r gid2"] {
        assert!(st.has(line), "v4 immediate lacks {line:?}:\n{dump}");
    }
    assert!(st.has_prefix("I t (41,sub-gone"), "{dump}");
    assert!(st.has_prefix("I t (50,aborted"), "{dump}");
    assert_eq!(st.count(b'B'), 0, "everything streamed:\n{dump}");
    assert_eq!(st.count(b'b'), 0, "prepared transactions streamed:\n{dump}");

    // v4, parallel streaming: Stream Abort carries abort LSN and time (25 bytes).
    let parallel = V4_STREAM.replace("'streaming', 'on'", "'streaming', 'parallel'");
    let payloads = peek(node, IMMEDIATE, "s4", &parallel);
    let par = decode_all(&payloads, ProtoVersion::V4);
    assert!(
        par.has("A sub info") && par.has("A top info"),
        "{}",
        par.dump()
    );
    assert!(!par.has("A sub") && !par.has("A top"));
    // The same stream must be rejected by a v3 decoder (abort info is v4-only).
    let mut v3 = PgOutputDecoder::new(ProtoVersion::V3);
    let rejected = payloads.iter().any(|p| v3.decode(p).is_err());
    assert!(rejected, "a v3 decoder accepted v4-only Stream Abort");
}

/// Binary mode sends values in their send/recv form, a tuple kind text mode never uses.
fn check_v4_binary(node: &Node) {
    // v4 with binary values.
    let binary = V4_STREAM.replace("'binary', 'false'", "'binary', 'true'");
    let payloads = peek(node, "", "s4", &binary);
    let bin = decode_all(&payloads, ProtoVersion::V4);
    assert!(
        bin.has("I t2 (b:00000001,b:6861707079,b:6e31)"),
        "{}",
        bin.dump()
    );
}

/// Version 1 must leave out everything newer, even when the server is asked to stream.
fn check_v1(node: &Node) {
    // v1: no streaming, no two-phase; prepared transactions arrive at COMMIT PREPARED.
    let v1_options = "'proto_version', '1', 'publication_names', 'pub', 'messages', 'true'";
    let payloads = peek(node, IMMEDIATE, "s1", v1_options);
    let v1 = decode_all(&payloads, ProtoVersion::V1);
    let dump = v1.dump();
    for tag in [b'S', b'E', b'c', b'A', b'b', b'P', b'K', b'r', b'p'] {
        assert_eq!(v1.count(tag), 0, "v1 sent {:?}:\n{dump}", char::from(tag));
    }
    for line in [
        "I t (20,prep1,null,null,null,null,null,null)",
        "U t2 O(1,happy,n1) N(1,happy,n2)",
        "M nontx pfx nontx",
        "O 0/ABCDEF orig1",
        "T t2",
    ] {
        assert!(v1.has(line), "v1 lacks {line:?}:\n{dump}");
    }
    assert!(
        !v1.has_prefix("I t (21,"),
        "rolled-back prepared transaction sent"
    );
    assert_eq!(v1.count(b'I'), 8 + 600, "{dump}");
    assert_eq!(v1.count(b'B'), v1.count(b'C'));
}
