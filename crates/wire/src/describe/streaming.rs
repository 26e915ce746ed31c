//! Descriptions of the replication layer: CopyData sub-messages and the pgoutput messages
//! inside XLogData.

use super::{ch, hex, int, lsn, text, ts, Description, Fields, Layer, Value};
use crate::pgoutput::{OldTuple, PgOutputMessage, Prepare, TupleData, TupleValue};
use crate::replication::ReplicationMessage;

/// Describes a replication CopyData payload that starts at byte `offset` of the capture.
pub fn replication(offset: usize, m: &ReplicationMessage<'_>) -> Description {
    let (name, fields) = match m {
        ReplicationMessage::XLogData(x) => (
            "XLogData",
            vec![
                ("wal_start", lsn(x.start)),
                ("wal_end", lsn(x.end)),
                ("send_time", ts(x.send_time)),
                ("data_len", int(x.data.len() as i64)),
            ],
        ),
        ReplicationMessage::PrimaryKeepalive(k) => (
            "Primary keepalive message",
            vec![
                ("wal_end", lsn(k.wal_end)),
                ("send_time", ts(k.send_time)),
                ("reply_requested", Value::Bool(k.reply_requested)),
            ],
        ),
        ReplicationMessage::StandbyStatusUpdate(s) => (
            "Standby status update",
            vec![
                ("write_lsn", lsn(s.write)),
                ("flush_lsn", lsn(s.flush)),
                ("apply_lsn", lsn(s.apply)),
                ("send_time", ts(s.send_time)),
                ("reply_requested", Value::Bool(s.reply_requested)),
            ],
        ),
        ReplicationMessage::HotStandbyFeedback(h) => (
            "Hot standby feedback message",
            vec![
                ("send_time", ts(h.send_time)),
                ("xmin", int(h.xmin.0)),
                ("xmin_epoch", int(h.xmin_epoch)),
                ("catalog_xmin", int(h.catalog_xmin.0)),
                ("catalog_xmin_epoch", int(h.catalog_xmin_epoch)),
            ],
        ),
    };
    Description {
        layer: Layer::Replication,
        offset,
        tag: Some(m.tag()),
        len: None,
        type_name: name,
        fields,
    }
}

fn tuple(t: &TupleData<'_>) -> Value {
    Value::List(
        t.iter()
            .map(|v| match v {
                TupleValue::Null => Value::Null,
                TupleValue::Text(s) => text(s),
                TupleValue::UnchangedToast => {
                    Value::Map(vec![("kind".into(), Value::Text("u".into()))])
                }
                TupleValue::Binary(b) => Value::Map(vec![
                    ("kind".into(), Value::Text("b".into())),
                    ("value".into(), hex(b)),
                ]),
            })
            .collect(),
    )
}

fn old_tuple(fields: &mut Fields, old: &OldTuple<'_>) {
    match old {
        OldTuple::Key(t) => fields.push(("old_key", tuple(t))),
        OldTuple::Full(t) => fields.push(("old_tuple", tuple(t))),
    }
}

fn prepare_fields(p: &Prepare<'_>) -> Fields {
    vec![
        ("prepare_lsn", lsn(p.prepare_lsn)),
        ("end_lsn", lsn(p.end_lsn)),
        ("prepare_time", ts(p.prepare_time)),
        ("xid", int(p.xid.0)),
        ("gid", text(p.gid)),
    ]
}

/// Describes a pgoutput message that starts at byte `offset` of the capture.
pub fn pgoutput(offset: usize, m: &PgOutputMessage<'_>) -> Description {
    let mut f: Fields = Vec::new();
    if let Some(x) = m.stream_xid() {
        f.push(("xid", int(x.0)));
    }
    let name = match m {
        PgOutputMessage::Begin(b) => {
            f.push(("final_lsn", lsn(b.final_lsn)));
            f.push(("commit_time", ts(b.commit_time)));
            f.push(("xid", int(b.xid.0)));
            "Begin"
        }
        PgOutputMessage::Commit(c) => {
            f.push(("commit_lsn", lsn(c.commit_lsn)));
            f.push(("end_lsn", lsn(c.end_lsn)));
            f.push(("commit_time", ts(c.commit_time)));
            "Commit"
        }
        PgOutputMessage::Origin(o) => {
            f.push(("commit_lsn", lsn(o.commit_lsn)));
            f.push(("name", text(o.name)));
            "Origin"
        }
        PgOutputMessage::Relation(r) => {
            f.push(("oid", int(r.oid)));
            f.push(("namespace", text(r.namespace)));
            f.push(("name", text(r.name)));
            f.push(("replica_identity", ch(r.replica_identity.byte())));
            let cols = r
                .columns
                .iter()
                .map(|c| {
                    Value::Map(vec![
                        ("key".into(), Value::Bool(c.key)),
                        ("name".into(), text(c.name)),
                        ("type_oid".into(), int(c.type_oid)),
                        ("type_modifier".into(), int(c.type_modifier)),
                    ])
                })
                .collect();
            f.push(("columns", Value::List(cols)));
            "Relation"
        }
        PgOutputMessage::Type(t) => {
            f.push(("oid", int(t.oid)));
            f.push(("namespace", text(t.namespace)));
            f.push(("name", text(t.name)));
            "Type"
        }
        PgOutputMessage::Insert(i) => {
            f.push(("relation_oid", int(i.relation)));
            f.push(("new_tuple", tuple(&i.new)));
            "Insert"
        }
        PgOutputMessage::Update(u) => {
            f.push(("relation_oid", int(u.relation)));
            if let Some(old) = &u.old {
                old_tuple(&mut f, old);
            }
            f.push(("new_tuple", tuple(&u.new)));
            "Update"
        }
        PgOutputMessage::Delete(d) => {
            f.push(("relation_oid", int(d.relation)));
            old_tuple(&mut f, &d.old);
            "Delete"
        }
        PgOutputMessage::Truncate(t) => {
            f.push(("cascade", Value::Bool(t.cascade)));
            f.push(("restart_identity", Value::Bool(t.restart_identity)));
            f.push((
                "relation_oids",
                Value::List(t.relations.iter().map(int).collect()),
            ));
            "Truncate"
        }
        PgOutputMessage::Message(msg) => {
            f.push(("transactional", Value::Bool(msg.transactional)));
            f.push(("lsn", lsn(msg.lsn)));
            f.push(("prefix", text(msg.prefix)));
            f.push(("content", text(msg.content)));
            "Message"
        }
        PgOutputMessage::StreamStart(s) => {
            f.push(("xid", int(s.xid.0)));
            f.push(("first_segment", Value::Bool(s.first_segment)));
            "Stream Start"
        }
        PgOutputMessage::StreamStop => "Stream Stop",
        PgOutputMessage::StreamCommit(c) => {
            f.push(("xid", int(c.xid.0)));
            f.push(("commit_lsn", lsn(c.commit_lsn)));
            f.push(("end_lsn", lsn(c.end_lsn)));
            f.push(("commit_time", ts(c.commit_time)));
            "Stream Commit"
        }
        PgOutputMessage::StreamAbort(a) => {
            f.push(("xid", int(a.xid.0)));
            f.push(("subtransaction_xid", int(a.subxid.0)));
            if let Some(info) = a.abort {
                f.push(("abort_lsn", lsn(info.lsn)));
                f.push(("abort_time", ts(info.time)));
            }
            "Stream Abort"
        }
        PgOutputMessage::BeginPrepare(p) => {
            f.extend(prepare_fields(p));
            "Begin Prepare"
        }
        PgOutputMessage::Prepare(p) => {
            f.extend(prepare_fields(p));
            "Prepare"
        }
        PgOutputMessage::StreamPrepare(p) => {
            f.extend(prepare_fields(p));
            "Stream Prepare"
        }
        PgOutputMessage::CommitPrepared(c) => {
            f.push(("commit_lsn", lsn(c.commit_lsn)));
            f.push(("end_lsn", lsn(c.end_lsn)));
            f.push(("commit_time", ts(c.commit_time)));
            f.push(("xid", int(c.xid.0)));
            f.push(("gid", text(c.gid)));
            "Commit Prepared"
        }
        PgOutputMessage::RollbackPrepared(r) => {
            f.push(("prepare_end_lsn", lsn(r.prepare_end_lsn)));
            f.push(("rollback_end_lsn", lsn(r.rollback_end_lsn)));
            f.push(("prepare_time", ts(r.prepare_time)));
            f.push(("rollback_time", ts(r.rollback_time)));
            f.push(("xid", int(r.xid.0)));
            f.push(("gid", text(r.gid)));
            "Rollback Prepared"
        }
    };
    Description {
        layer: Layer::PgOutput,
        offset,
        tag: Some(m.tag()),
        len: None,
        type_name: name,
        fields: f,
    }
}
