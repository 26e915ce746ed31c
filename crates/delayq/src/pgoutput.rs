//! From pgyard-wire's decoded pgoutput messages to the queue's [`Event`]s: what the queue
//! needs to know of each message besides its raw bytes.

use pgyard_wire::pgoutput::PgOutputMessage;

use crate::Event;

/// The queue's view of one decoded pgoutput message.
pub fn event(msg: &PgOutputMessage<'_>) -> Event {
    match msg {
        PgOutputMessage::Begin(b) => Event::Begin {
            xid: b.xid,
            final_lsn: b.final_lsn,
            commit_ts: b.commit_time,
        },
        PgOutputMessage::Commit(c) => Event::Commit {
            commit_lsn: c.commit_lsn,
            end_lsn: c.end_lsn,
            commit_ts: c.commit_time,
        },
        PgOutputMessage::BeginPrepare(p) => Event::BeginPrepare {
            xid: p.xid,
            prepare_lsn: p.prepare_lsn,
            end_lsn: p.end_lsn,
            prepare_ts: p.prepare_time,
        },
        PgOutputMessage::Prepare(p) => Event::Prepare {
            xid: p.xid,
            prepare_lsn: p.prepare_lsn,
            end_lsn: p.end_lsn,
            prepare_ts: p.prepare_time,
        },
        PgOutputMessage::StreamPrepare(p) => Event::StreamPrepare {
            xid: p.xid,
            prepare_lsn: p.prepare_lsn,
            end_lsn: p.end_lsn,
            prepare_ts: p.prepare_time,
        },
        PgOutputMessage::CommitPrepared(c) => Event::CommitPrepared {
            xid: c.xid,
            commit_lsn: c.commit_lsn,
            end_lsn: c.end_lsn,
            commit_ts: c.commit_time,
        },
        PgOutputMessage::RollbackPrepared(r) => Event::RollbackPrepared {
            xid: r.xid,
            prepare_end_lsn: r.prepare_end_lsn,
            rollback_end_lsn: r.rollback_end_lsn,
            rollback_ts: r.rollback_time,
        },
        PgOutputMessage::StreamStart(s) => Event::StreamStart {
            xid: s.xid,
            first: s.first_segment,
        },
        PgOutputMessage::StreamStop => Event::StreamStop,
        PgOutputMessage::StreamCommit(c) => Event::StreamCommit {
            xid: c.xid,
            commit_lsn: c.commit_lsn,
            end_lsn: c.end_lsn,
            commit_ts: c.commit_time,
        },
        PgOutputMessage::StreamAbort(a) => Event::StreamAbort {
            xid: a.xid,
            sub_xid: a.subxid,
        },
        PgOutputMessage::Relation(r) => Event::Relation {
            oid: r.oid,
            xid: r.xid,
        },
        PgOutputMessage::Type(t) => Event::Type {
            oid: t.oid,
            xid: t.xid,
        },
        PgOutputMessage::Message(m) => Event::Message {
            transactional: m.transactional,
            xid: m.xid,
            lsn: m.lsn,
        },
        PgOutputMessage::Insert(i) => Event::Change { xid: i.xid },
        PgOutputMessage::Update(u) => Event::Change { xid: u.xid },
        PgOutputMessage::Delete(d) => Event::Change { xid: d.xid },
        PgOutputMessage::Truncate(t) => Event::Change { xid: t.xid },
        PgOutputMessage::Origin(_) => Event::Change { xid: None },
    }
}
