use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};

use super::*;
use crate::{CommitKind, ItemId};

fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A Relation message: `public.<name>` with (column, is key) pairs, replica identity `ri`.
pub(super) fn relation(oid: u32, name: &str, ri: u8, cols: &[(&str, bool)]) -> Vec<u8> {
    let mut m = vec![b'R'];
    m.extend_from_slice(&oid.to_be_bytes());
    cstr(&mut m, "public");
    cstr(&mut m, name);
    m.push(ri);
    m.extend_from_slice(&(cols.len() as i16).to_be_bytes());
    for (c, key) in cols {
        m.push(u8::from(*key));
        cstr(&mut m, c);
        m.extend_from_slice(&25u32.to_be_bytes());
        m.extend_from_slice(&(-1i32).to_be_bytes());
    }
    m
}

/// TupleData: `Some(text)`, `None` for NULL; `"\u{0}u"` stands for unchanged TOAST.
fn tuple(m: &mut Vec<u8>, vals: &[Option<&str>]) {
    m.extend_from_slice(&(vals.len() as i16).to_be_bytes());
    for v in vals {
        match v {
            None => m.push(b'n'),
            Some("\u{0}u") => m.push(b'u'),
            Some(t) => {
                m.push(b't');
                m.extend_from_slice(&(t.len() as i32).to_be_bytes());
                m.extend_from_slice(t.as_bytes());
            }
        }
    }
}

pub(super) fn insert(oid: u32, vals: &[Option<&str>]) -> Vec<u8> {
    let mut m = vec![b'I'];
    m.extend_from_slice(&oid.to_be_bytes());
    m.push(b'N');
    tuple(&mut m, vals);
    m
}

fn update(oid: u32, key: Option<&[Option<&str>]>, new: &[Option<&str>]) -> Vec<u8> {
    let mut m = vec![b'U'];
    m.extend_from_slice(&oid.to_be_bytes());
    if let Some(k) = key {
        m.push(b'O');
        tuple(&mut m, k);
    }
    m.push(b'N');
    tuple(&mut m, new);
    m
}

/// A DELETE with its key tuple (every column, the others NULL).
fn delete(oid: u32, key: &[Option<&str>]) -> Vec<u8> {
    let mut m = vec![b'D'];
    m.extend_from_slice(&oid.to_be_bytes());
    m.push(b'K');
    tuple(&mut m, key);
    m
}

/// A committed transaction at `lsn` holding `changes`, with `schema` handed out before it.
fn txn(lsn: u64, schema: Vec<Vec<u8>>, changes: Vec<Vec<u8>>) -> ReadyTxn {
    let mut begin = vec![b'B'];
    begin.extend_from_slice(&(lsn + 8).to_be_bytes());
    begin.extend_from_slice(&1i64.to_be_bytes());
    begin.extend_from_slice(&7u32.to_be_bytes());
    let mut commit = vec![b'C', 0];
    commit.extend_from_slice(&lsn.to_be_bytes());
    commit.extend_from_slice(&(lsn + 8).to_be_bytes());
    commit.extend_from_slice(&1i64.to_be_bytes());
    let mut messages = vec![begin];
    messages.extend(changes);
    messages.push(commit);
    ReadyTxn {
        id: ItemId(lsn),
        xid: Xid(7),
        kind: CommitKind::Commit,
        commit_lsn: Lsn(lsn),
        end_lsn: Lsn(lsn + 8),
        commit_ts: PgTimestamp(lsn as i64),
        due: UnixTime(0),
        schema,
        messages,
        more: None,
    }
}

/// The plan of one transaction alone.
fn plan(a: &mut Applier, txn: &ReadyTxn) -> Plan {
    let mut batch = Batch::new();
    a.add(&mut batch, txn).expect("applicable");
    batch.finish().expect("a plan")
}

fn p(s: &str) -> Param {
    Some(s.as_bytes().to_vec())
}

/// The plan's statements (none of its steps may be a COPY).
/// A later transaction updating relation 1 with no Relation message of its own.
fn update_without_description(a: &mut Applier) -> Plan {
    let change = update(1, None, &[Some("2"), Some("y")]);
    plan(a, &txn(200, Vec::new(), vec![change]))
}

fn statements(plan: &Plan) -> Vec<&Statement> {
    plan.steps
        .iter()
        .map(|s| match s {
            Step::Run(st) => st,
            Step::Copy(c) => panic!("a COPY where statements were expected: {c:?}"),
        })
        .collect()
}

/// A batch of `n` single-row INSERT transactions into `t(id, v)` with `v` from `v(i)`.
fn inserts(n: u64, v: impl Fn(u64) -> Option<String>) -> Plan {
    let mut a = Applier::new();
    let mut batch = Batch::new();
    let schema = vec![relation(1, "t", b'd', &[("id", true), ("v", false)])];
    for i in 0..n {
        let id = i.to_string();
        let s = if i == 0 { schema.clone() } else { Vec::new() };
        let v = v(i);
        let changes = vec![insert(1, &[Some(&id), v.as_deref()])];
        assert_eq!(a.add(&mut batch, &txn(100 + i * 16, s, changes)), Ok(1));
    }
    assert_eq!(batch.len(), n as usize);
    batch.finish().expect("a plan")
}

#[test]
fn inserts_merge_across_a_batch_and_are_cut_into_fixed_shapes() {
    let plan = inserts(63, |_| None);
    // 63 rows: seven statements of 8 rows, seven of 1.
    let st = statements(&plan);
    let shapes: Vec<usize> = st.iter().map(|s| s.params.len() / 2).collect();
    assert_eq!(shapes, [8, 8, 8, 8, 8, 8, 8, 1, 1, 1, 1, 1, 1, 1]);
    assert!(st[13]
        .sql
        .starts_with("INSERT INTO \"public\".\"t\" (\"id\", \"v\") VALUES ($1, $2)"));
    assert_eq!(st[0].params[0], p("0"));
    assert_eq!(st[0].params[1], None);
    assert_eq!(st[13].params[0], p("62"));
    assert_eq!(plan.commit_lsn, Lsn(100));
    assert_eq!(plan.end_lsn, Lsn(100 + 62 * 16 + 8));
    assert_eq!(plan.changes, 63);
    assert!(plan.commit_sql().starts_with(&format!(
        "SELECT pg_catalog.pg_replication_origin_xact_setup('{}'",
        plan.end_lsn
    )));
}

#[test]
fn a_long_run_of_rows_goes_by_copy_with_its_values_escaped() {
    let odd = |i: u64| match i {
        1 => None,
        2 => Some("tab\there\\back\nline\rcr".to_owned()),
        3 => Some(String::new()),
        _ => Some(format!("v{i}")),
    };
    let plan = inserts(COPY_ROWS as u64, odd);
    let [Step::Copy(c)] = plan.steps.as_slice() else {
        panic!("one COPY expected: {:?}", plan.steps);
    };
    assert_eq!(c.sql, "COPY \"public\".\"t\" (\"id\", \"v\") FROM STDIN");
    assert_eq!(c.rows, COPY_ROWS);
    let text = String::from_utf8(c.data.clone()).expect("utf-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), COPY_ROWS);
    assert_eq!(lines[0], "0\tv0");
    assert_eq!(lines[1], "1\t\\N");
    assert_eq!(lines[2], "2\ttab\\there\\\\back\\nline\\rcr");
    assert_eq!(lines[3], "3\t");
    assert!(text.ends_with('\n'));
}

#[test]
fn statement_text_does_not_depend_on_values_or_commit() {
    let mut a = Applier::new();
    let schema = vec![relation(1, "t", b'd', &[("id", true), ("v", false)])];
    let one = plan(
        &mut a,
        &txn(100, schema, vec![update(1, None, &[Some("1"), Some("x")])]),
    );
    let two = plan(
        &mut a,
        &txn(200, Vec::new(), vec![update(1, None, &[Some("2"), None])]),
    );
    let (one, two) = (statements(&one)[0].clone(), statements(&two)[0].clone());
    assert_eq!(one.sql, two.sql);
    assert_eq!(
        one.sql,
        "UPDATE ONLY \"public\".\"t\" SET \"id\" = $1, \"v\" = $2 WHERE ctid = \
         (SELECT ctid FROM ONLY \"public\".\"t\" WHERE \"id\" = $3 LIMIT 1)"
    );
    // SET id, v; the key filter.
    assert_eq!(one.params, [p("1"), p("x"), p("1")]);
    assert_eq!(two.params, [p("2"), None, p("2")]);
    // The check names the commit; its by-key form takes the same parameters.
    let check = two.check.expect("an UPDATE is checked");
    assert_eq!(
        check.what(),
        format!("commit {}: UPDATE on relation \"public\".\"t\"", Lsn(200))
    );
    assert_eq!(check.shape.relation, ("public".to_owned(), "t".to_owned()));
    assert_eq!(check.shape.key, ["id"]);
    assert_eq!(
        check.shape.by_key.as_deref(),
        Some("UPDATE ONLY \"public\".\"t\" SET \"id\" = $1, \"v\" = $2 WHERE \"id\" = $3")
    );
    assert_eq!(
        check.failure(0),
        format!(
            "{CHECK_MARKER}commit {}: UPDATE on relation \"public\".\"t\" changed 0 rows \
             instead of 1 (the subscriber has no row matching the publisher's replica identity)",
            Lsn(200)
        )
    );
    assert!(check
        .failure(2)
        .contains("changed 2 rows instead of 1 (several rows match"));
    assert_eq!(tag_rows("UPDATE 1"), Some(1));
    assert_eq!(tag_rows("DELETE 0"), Some(0));
    assert_eq!(tag_rows("SELECT"), None);
}

#[test]
fn unchanged_toast_is_left_out_and_full_identity_matches_every_column() {
    let mut a = Applier::new();
    let schema = vec![relation(
        1,
        "f",
        b'f',
        &[("a", true), ("b", true), ("c", true)],
    )];
    let plan = plan(
        &mut a,
        &txn(
            100,
            schema,
            vec![update(
                1,
                Some(&[Some("1"), None, Some("\u{0}u")]),
                &[Some("2"), Some("\u{0}u"), Some("z")],
            )],
        ),
    );
    let st = statements(&plan)[0];
    assert!(
        st.sql.contains("SET \"a\" = $1, \"c\" = $2 WHERE"),
        "{}",
        st.sql
    );
    assert!(
        st.sql.contains(
            "WHERE \"a\" IS NOT DISTINCT FROM $3 AND \"b\" IS NOT DISTINCT FROM $4 LIMIT 1"
        ),
        "{}",
        st.sql
    );
    assert_eq!(st.params, [p("2"), p("z"), p("1"), None]);
    // Under FULL no key says which row: only the first match's ctid does.
    let check = st.check.as_ref().expect("an UPDATE is checked");
    assert_eq!(
        (check.shape.key.len(), check.shape.by_key.as_ref()),
        (0, None)
    );
}

#[test]
fn a_transaction_that_cannot_be_applied_leaves_the_batch_as_it_was() {
    let mut a = Applier::new();
    let mut batch = Batch::new();
    let schema = vec![relation(1, "t", b'd', &[("id", true)])];
    assert_eq!(
        a.add(&mut batch, &txn(100, schema, vec![insert(1, &[Some("1")])])),
        Ok(1)
    );
    let bad = txn(
        200,
        Vec::new(),
        vec![insert(1, &[Some("2")]), insert(9, &[Some("3")])],
    );
    assert_eq!(
        a.add(&mut batch, &bad),
        Err(ApplyError::UnknownRelation {
            commit_lsn: Lsn(200),
            oid: 9
        })
    );
    assert_eq!(batch.len(), 1);
    let plan = batch.finish().expect("plan");
    let st = statements(&plan);
    assert_eq!(st.len(), 1);
    assert_eq!(st[0].params, [p("1")]);
    assert_eq!(plan.end_lsn, Lsn(108));
}

#[test]
fn row_check_words_come_back_out_of_the_server_error() {
    let text = format!(
        "ERROR:  invalid input syntax for type integer: \"{CHECK_MARKER}commit 0/10: DELETE on \
         relation \"\"public\"\".\"\"t\"\" changed 0 rows instead of 1\"\n"
    );
    assert_eq!(
        row_check_failure(&text).as_deref(),
        Some("commit 0/10: DELETE on relation \"public\".\"t\" changed 0 rows instead of 1")
    );
    assert_eq!(row_check_failure("ERROR:  something else"), None);
}

#[test]
fn a_shape_is_built_once_and_a_redescribed_relation_gets_new_ones() {
    let mut a = Applier::new();
    let two = vec![relation(1, "t", b'd', &[("id", true), ("v", false)])];
    let one = plan(
        &mut a,
        &txn(100, two, vec![update(1, None, &[Some("1"), Some("x")])]),
    );
    let again = update_without_description(&mut a);
    let (one, again) = (statements(&one)[0].clone(), statements(&again)[0].clone());
    let (c1, c2) = (one.check.expect("checked"), again.check.expect("checked"));
    assert!(Arc::ptr_eq(&c1.shape, &c2.shape), "one shape, shared");
    assert_eq!((c1.commit_lsn, c2.commit_lsn), (Lsn(100), Lsn(200)));
    // The relation gains a column: the next UPDATE sets it too.
    let three = vec![relation(
        1,
        "t",
        b'd',
        &[("id", true), ("v", false), ("w", false)],
    )];
    let later = plan(
        &mut a,
        &txn(
            300,
            three,
            vec![update(1, None, &[Some("3"), Some("z"), Some("w3")])],
        ),
    );
    let later = statements(&later)[0].clone();
    assert!(
        later
            .sql
            .contains("SET \"id\" = $1, \"v\" = $2, \"w\" = $3 WHERE"),
        "{}",
        later.sql
    );
    assert_eq!(later.params, [p("3"), p("z"), p("w3"), p("3")]);
    // A DELETE by the key.
    let gone = plan(
        &mut a,
        &txn(400, Vec::new(), vec![delete(1, &[Some("3"), None, None])]),
    );
    let gone = statements(&gone)[0].clone();
    assert_eq!(
        gone.sql,
        "DELETE FROM ONLY \"public\".\"t\" WHERE ctid = (SELECT ctid FROM ONLY \"public\".\"t\" \
         WHERE \"id\" = $1 LIMIT 1)"
    );
    assert_eq!(gone.params, [p("3")]);
    let check = gone.check.expect("checked");
    assert_eq!(
        check.shape.by_key.as_deref(),
        Some("DELETE FROM ONLY \"public\".\"t\" WHERE \"id\" = $1")
    );
}

#[test]
fn a_description_under_a_stream_xid_is_the_one_already_known() {
    let mut a = Applier::new();
    let rel = relation(1, "t", b'd', &[("id", true), ("v", false)]);
    let first = plan(
        &mut a,
        &txn(
            100,
            vec![rel.clone()],
            vec![update(1, None, &[Some("1"), Some("x")])],
        ),
    );
    // The same description framed in a stream block, under any xid.
    let mut framed = vec![b'R'];
    framed.extend_from_slice(&77u32.to_be_bytes());
    framed.extend_from_slice(&rel[1..]);
    assert!(a.known(&framed, true) && a.known(&rel, false));
    assert!(
        !a.known(&framed, false),
        "framed, read as unframed, is another message"
    );
    let mut changed = relation(1, "t", b'f', &[("id", true), ("v", false)]);
    assert!(!a.known(&changed, false));
    changed[0] = b'Y';
    assert!(
        !a.known(&changed[..], false),
        "a Type message is never a known relation"
    );
    a.skip(Lsn(150), &[], &[framed], true).expect("skips");
    let again = update_without_description(&mut a);
    let (c1, c2) = (
        statements(&first)[0].check.clone().expect("checked"),
        statements(&again)[0].check.clone().expect("checked"),
    );
    assert!(Arc::ptr_eq(&c1.shape, &c2.shape), "its shapes are kept");
}
