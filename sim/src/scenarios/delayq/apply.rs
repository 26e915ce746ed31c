//! The subscriber's side: applying what the queue hands out, checked against what the
//! publisher committed.

use pgyard_delayq::{Ready, ReadyMessage, ReadyTxn};
use pgyard_wire::pgoutput::{self as po, PgOutputMessage, TupleValue};

use super::text::{Dec, LsnText};
use super::walsender::{column_count, column_name, column_type, REL_OID_BASE, TYPE_OID_BASE};
use super::{fail, Run, Subscriber};
use crate::publisher::Fate;
use crate::{trace, Violation};

impl Run<'_> {
    /// Applies what is due. Everything is flushed first: `poll_ready` also hands out items
    /// that are only buffered, and applying one moves the subscriber's origin past earlier
    /// prepared transactions that a crash could still lose; the walsender, started at the
    /// origin, would then never re-send their prepare (see docs/simulation.md).
    pub(super) fn poll(&mut self) -> Result<(), Violation> {
        if self.q().needs_flush() {
            match self.q().flush() {
                Ok(lsn) => self.report(lsn)?,
                Err(e) if e.is_retryable() => return Ok(()),
                Err(e) => return self.on_error("flush", e),
            }
        }
        for _ in 0..1000 {
            if let Some(id) = self.sub.unacked {
                match self.q().mark_applied(id) {
                    Ok(()) => self.sub.unacked = None,
                    Err(e) if e.is_retryable() => return Ok(()),
                    Err(e) => return self.on_error("mark_applied", e),
                }
            }
            let now = self.now;
            let ready = match self.q().poll_ready(now) {
                Ok(Some(r)) => r,
                Ok(None) => return Ok(()),
                Err(e) => return self.on_error("poll_ready", e),
            };
            match &ready {
                Ready::Transaction(t) => self.apply_txn(t)?,
                Ready::Message(m) => self.deliver_note(m)?,
            }
            self.sub.unacked = Some(ready.id());
        }
        Ok(())
    }

    fn apply_txn(&mut self, t: &ReadyTxn) -> Result<(), Violation> {
        let Some(txn) = self.publ.txns.get(&t.xid.0) else {
            return Err(fail(
                "only-published",
                format!("handed out unknown xid {}", t.xid),
            ));
        };
        let Fate::Committed {
            commit_lsn,
            end_lsn,
            ts,
        } = txn.fate
        else {
            return Err(fail(
                "aborted-never-applied",
                format!(
                    "transaction {} handed out while {:?} on the publisher",
                    t.xid, txn.fate
                ),
            ));
        };
        if (t.commit_lsn, t.end_lsn) != (commit_lsn, end_lsn) {
            return Err(fail(
                "commit-positions",
                format!(
                    "transaction {} handed out with commit {}..{}, published {commit_lsn}..{end_lsn}",
                    t.xid, t.commit_lsn, t.end_lsn
                ),
            ));
        }
        if self.sub.applied.contains(&t.xid.0) {
            return Err(fail(
                "applied-exactly-once",
                format!("transaction {} (end {end_lsn}) handed out again", t.xid),
            ));
        }
        if end_lsn <= self.sub.origin {
            return Err(fail(
                "commit-order",
                format!(
                    "transaction {} ends at {end_lsn}, before the last applied end {}",
                    t.xid, self.sub.origin
                ),
            ));
        }
        let earliest =
            ts.to_unix().0 + (self.mix.delay_ms + self.mix.skew_tolerance_ms) as i64 * 1000;
        if t.due.0 < earliest || t.due > self.now {
            return Err(fail(
                "never-before-due",
                format!(
                    "transaction {} due {} (commit ts + delay = {earliest}), handed out at {}",
                    t.xid, t.due.0, self.now.0
                ),
            ));
        }
        let data = self.sub.apply_schema_and_changes(t)?;
        let expected = &txn.changes;
        let same = data.len() == expected.len()
            && data.iter().zip(expected).all(|(d, e)| *d == e.as_slice());
        if !same {
            return Err(fail(
                "applied-content",
                format!(
                    "transaction {} applied {:?}, expected {:?}",
                    t.xid,
                    data.iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect::<Vec<_>>(),
                    expected
                        .iter()
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect::<Vec<_>>()
                ),
            ));
        }
        trace!(
            self.t,
            "apply {} end {} due {} at {}",
            Dec(t.xid.0.into()),
            LsnText(end_lsn),
            Dec(t.due.0),
            Dec(self.now.0)
        );
        self.sub.applied.insert(t.xid.0);
        self.sub.origin = end_lsn;
        self.sub.last_pos = self.sub.last_pos.max(commit_lsn);
        Ok(())
    }

    fn deliver_note(&mut self, m: &ReadyMessage) -> Result<(), Violation> {
        let content = match po::decode(&m.payload, false) {
            Ok(PgOutputMessage::Message(lm)) => lm.content.to_vec(),
            _ => Vec::new(),
        };
        let known = self
            .publ
            .notes
            .iter()
            .any(|n| n.lsn == m.lsn && n.payload == content);
        if !known {
            return Err(fail(
                "only-published",
                format!("handed out unknown message at {}", m.lsn),
            ));
        }
        if self.sub.notes.get(&m.lsn.0) == Some(&self.session) {
            return Err(fail(
                "applied-exactly-once",
                format!("message at {} delivered twice in one session", m.lsn),
            ));
        }
        if m.lsn < self.sub.last_pos {
            return Err(fail(
                "commit-order",
                format!(
                    "message at {} after an item at {}",
                    m.lsn, self.sub.last_pos
                ),
            ));
        }
        trace!(self.t, "deliver message {}", LsnText(m.lsn));
        self.sub.notes.insert(m.lsn.0, self.session);
        self.sub.last_pos = m.lsn;
        Ok(())
    }
}

impl Subscriber {
    /// Plays the apply worker's relation map through one transaction: the queue's `schema`
    /// first, then its messages in order. Every change must refer to a relation the map holds,
    /// with the definition the change was encoded with (and every custom type described).
    /// Returns the changes' payloads.
    fn apply_schema_and_changes<'t>(
        &mut self,
        t: &'t ReadyTxn,
    ) -> Result<Vec<&'t [u8]>, Violation> {
        let bad = |what: String| {
            fail(
                "relation-described",
                format!("transaction {}: {what}", t.xid),
            )
        };
        for raw in &t.schema {
            match po::decode(raw, false) {
                Ok(PgOutputMessage::Relation(r)) => self.hold_relation(&r),
                Ok(PgOutputMessage::Type(y)) => {
                    self.types.insert(y.oid);
                }
                other => return Err(bad(format!("schema entry {other:?}"))),
            }
        }
        let streamed = !matches!(
            t.messages.first().and_then(|m| m.first()),
            Some(b'B' | b'b')
        );
        let mut data = Vec::new();
        let mut name = Vec::new();
        for raw in &t.messages {
            let in_stream = streamed && matches!(raw.first(), Some(b'R' | b'Y' | b'I' | b'M'));
            match po::decode(raw, in_stream) {
                Ok(PgOutputMessage::Relation(r)) => self.hold_relation(&r),
                Ok(PgOutputMessage::Type(y)) => {
                    self.types.insert(y.oid);
                }
                Ok(PgOutputMessage::Insert(i)) => {
                    let mut vals = i.new.iter();
                    let (Some(TupleValue::Text(payload)), Some(TupleValue::Text(ver))) =
                        (vals.next(), vals.next())
                    else {
                        return Err(bad(format!("malformed change {raw:?}")));
                    };
                    let count = 2 + vals.count();
                    let ver: u32 = std::str::from_utf8(ver)
                        .ok()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let rel = i.relation.wrapping_sub(REL_OID_BASE);
                    let Some(held) = self.relations.get(&i.relation) else {
                        return Err(bad(format!(
                            "change {} on relation {} that the consumer does not hold",
                            String::from_utf8_lossy(payload),
                            i.relation
                        )));
                    };
                    // Compared column by column with the definition the change was encoded
                    // with, which is built from the version without allocating it whole.
                    let want = column_count(ver);
                    let same = held.len() == want
                        && held.iter().enumerate().all(|(c, (held_name, held_type))| {
                            name.clear();
                            column_name(ver, c, &mut name);
                            *held_name == name && *held_type == column_type(rel, ver, c)
                        });
                    if !same || count != want {
                        return Err(bad(format!(
                            "change {} encoded with version {ver} of relation {}, the consumer \
                             holds {:?}",
                            String::from_utf8_lossy(payload),
                            i.relation,
                            held.iter()
                                .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
                                .collect::<Vec<_>>()
                        )));
                    }
                    if let Some(ty) = (0..want)
                        .map(|c| column_type(rel, ver, c))
                        .find(|ty| *ty >= TYPE_OID_BASE && !self.types.contains(ty))
                    {
                        return Err(bad(format!("type {ty} used before it was described")));
                    }
                    data.push(payload);
                }
                Ok(_) => {}
                Err(e) => return Err(bad(format!("undecodable message {raw:?}: {e}"))),
            }
        }
        Ok(data)
    }

    fn hold_relation(&mut self, r: &po::Relation<'_>) {
        let cols = r
            .columns
            .iter()
            .map(|c| (c.name.to_vec(), c.type_oid))
            .collect();
        self.relations.insert(r.oid, cols);
    }
}
