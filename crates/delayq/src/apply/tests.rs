use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};

use super::*;
use crate::{CommitKind, ItemId};

fn cstr(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(s.as_bytes());
    out.push(0);
}

/// A Relation message: `public.<name>` with (column, is key) pairs, replica identity `ri`.
fn relation(oid: u32, name: &str, ri: u8, cols: &[(&str, bool)]) -> Vec<u8> {
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

fn insert(oid: u32, vals: &[Option<&str>]) -> Vec<u8> {
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
    }
}

fn p(s: &str) -> Param {
    Some(s.as_bytes().to_vec())
}

#[test]
fn inserts_merge_across_a_batch_and_are_cut_into_fixed_shapes() {
    let mut a = Applier::new();
    let mut batch = Batch::new();
    let schema = vec![relation(1, "t", b'd', &[("id", true), ("v", false)])];
    for i in 0..75u64 {
        let id = i.to_string();
        let s = if i == 0 { schema.clone() } else { Vec::new() };
        let changes = vec![insert(1, &[Some(&id), None])];
        assert_eq!(a.add(&mut batch, &txn(100 + i * 16, s, changes)), Ok(1));
    }
    assert_eq!(batch.len(), 75);
    let plan = batch.finish().expect("a plan");
    // 75 rows: one statement of 64 rows, one of 8, three of 1.
    let shapes: Vec<usize> = plan.statements.iter().map(|s| s.params.len() / 2).collect();
    assert_eq!(shapes, [64, 8, 1, 1, 1]);
    assert!(plan.statements[4]
        .sql
        .starts_with("INSERT INTO \"public\".\"t\" (\"id\", \"v\") VALUES ($1, $2)"));
    assert_eq!(plan.statements[0].params[0], p("0"));
    assert_eq!(plan.statements[0].params[1], None);
    assert_eq!(plan.statements[4].params[0], p("74"));
    assert_eq!(plan.commit_lsn, Lsn(100));
    assert_eq!(plan.end_lsn, Lsn(100 + 74 * 16 + 8));
    assert_eq!(plan.changes, 75);
    assert!(plan.commit_sql().starts_with(&format!(
        "SELECT pg_catalog.pg_replication_origin_xact_setup('{}'",
        plan.end_lsn
    )));
}

#[test]
fn statement_text_does_not_depend_on_values_or_commit() {
    let mut a = Applier::new();
    let schema = vec![relation(1, "t", b'd', &[("id", true), ("v", false)])];
    let one = a
        .plan(&txn(
            100,
            schema,
            vec![update(1, None, &[Some("1"), Some("x")])],
        ))
        .expect("plan");
    let two = a
        .plan(&txn(
            200,
            Vec::new(),
            vec![update(1, None, &[Some("2"), None])],
        ))
        .expect("plan");
    assert_eq!(one.statements.len(), 1);
    assert_eq!(one.statements[0].sql, two.statements[0].sql);
    // SET id, v; the key filter; the check's text naming the commit.
    assert_eq!(one.statements[0].params[..3], [p("1"), p("x"), p("1")]);
    assert_eq!(two.statements[0].params[..3], [p("2"), None, p("2")]);
    let check = |plan: &Plan| String::from_utf8(plan.statements[0].params[3].clone().unwrap());
    assert_eq!(
        check(&two).unwrap(),
        format!(
            "{CHECK_MARKER}commit {}: UPDATE on relation \"public\".\"t\" changed ",
            Lsn(200)
        )
    );
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
    let plan = a
        .plan(&txn(
            100,
            schema,
            vec![update(
                1,
                Some(&[Some("1"), None, Some("\u{0}u")]),
                &[Some("2"), Some("\u{0}u"), Some("z")],
            )],
        ))
        .expect("plan");
    let st = &plan.statements[0];
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
    assert_eq!(st.params[..4], [p("2"), p("z"), p("1"), None]);
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
    assert_eq!(plan.statements.len(), 1);
    assert_eq!(plan.statements[0].params, [p("1")]);
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
