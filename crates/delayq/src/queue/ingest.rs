//! The producer's side of the queue: each received pgoutput message checked against the
//! stream state and turned into records.

use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};

use super::DelayQueue;
use crate::format::{Body, Carry, Flavor, Rec, SealKind};
use crate::model::{SchemaMap, TxnState};
use crate::storage::Storage;
use crate::{Accepted, Error, Event, Received};

impl<S: Storage> DelayQueue<S> {
    /// Takes one received message. Records are buffered; they are durable after
    /// [`DelayQueue::flush`].
    ///
    /// Retryable errors ([`Error::is_retryable`]) leave the queue unchanged: stop reading and
    /// submit the same message again later. Until then nothing newer is confirmed.
    pub fn handle(&mut self, now: UnixTime, msg: Received<'_>) -> Result<Accepted, Error> {
        self.check()?;
        self.now = now;
        // What may already have been reported stays reported: a completed transaction that
        // now waits for its fsync holds `flush_lsn` where it was, never below.
        let floor = self.flush_lsn();
        let r = self.handle_inner(&msg);
        self.flushed = self.flushed.max(floor);
        match &r {
            Ok(_) => {
                self.stalled = false;
                self.received = self.received.max(msg.wal_lsn).max(event_end(&msg.event));
            }
            Err(e) if e.is_retryable() => self.stalled = true,
            Err(_) => {}
        }
        self.refresh_flow();
        r
    }

    /// A keepalive's (or any other) report of the last WAL position received.
    pub fn note_received(&mut self, lsn: Lsn) {
        if !self.stalled {
            self.received = self.received.max(lsn);
        }
    }

    /// Forgets the per-connection stream state before a (re)connect: every transaction still in
    /// progress is abandoned (the publisher sends it again from the start). A retryable error
    /// changes nothing: the old session's stream state stands until a call succeeds.
    pub fn restart_stream(&mut self, now: UnixTime) -> Result<(), Error> {
        self.check()?;
        self.now = now;
        let open: Vec<(u64, Xid)> = self
            .model
            .items
            .values()
            .filter(|it| it.state == TxnState::InProgress)
            .map(|it| (it.id, it.xid))
            .collect();
        // Room for every ABORT first: rolling over is the only step of a buffered append that
        // can fail retryably (ENOSPC), so after it none can. Aborting one by one, a roll-over
        // refused part-way left some transactions abandoned and the rest not, and a caller
        // that kept its session (as a retryable error allows) had its next chunk of an
        // abandoned stream refused (found by the simulator, seed 21119).
        let bytes: u64 = open
            .iter()
            .map(|&(id, xid)| abort_rec(xid, id, 0).encoded_len())
            .sum();
        if bytes > 0 {
            self.ensure_room(bytes)?;
        }
        for (id, xid) in open {
            self.push(abort_rec(xid, id, 0))?;
        }
        self.in_block = None;
        self.skipping = None;
        self.stalled = false;
        Ok(())
    }

    /// Dispatches one message by its event; each arm keeps the stream state consistent or
    /// refuses the message with [`Error::Protocol`].
    fn handle_inner(&mut self, msg: &Received<'_>) -> Result<Accepted, Error> {
        let raw = msg.payload;
        let wal = msg.wal_lsn;
        let horizon = self.model.horizon;
        match msg.event {
            Event::Begin { xid, final_lsn, .. } => {
                self.expect_idle("BEGIN")?;
                if final_lsn < horizon {
                    self.skipping = Some(Flavor::Plain);
                    return Ok(Accepted::Duplicate);
                }
                self.begin(xid, wal, Flavor::Plain, raw)
            }
            Event::BeginPrepare {
                xid, prepare_lsn, ..
            } => {
                self.expect_idle("BEGIN PREPARE")?;
                if prepare_lsn < horizon || self.model.prepared.contains_key(&xid.0) {
                    self.skipping = Some(Flavor::TwoPhase);
                    return Ok(Accepted::Duplicate);
                }
                self.begin(xid, wal, Flavor::TwoPhase, raw)
            }
            Event::Commit {
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.seal_open(
                Flavor::Plain,
                SealKind::Commit,
                commit_lsn,
                end_lsn,
                commit_ts,
                wal,
                raw,
            ),
            Event::Prepare {
                prepare_lsn,
                end_lsn,
                prepare_ts,
                ..
            } => self.seal_open(
                Flavor::TwoPhase,
                SealKind::Prepare,
                prepare_lsn,
                end_lsn,
                prepare_ts,
                wal,
                raw,
            ),
            Event::CommitPrepared {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.commit_prepared(xid, commit_lsn, end_lsn, commit_ts, wal, raw),
            Event::RollbackPrepared {
                xid,
                prepare_end_lsn,
                rollback_end_lsn,
                rollback_ts,
            } => self.rollback_prepared(
                xid,
                prepare_end_lsn,
                rollback_end_lsn,
                rollback_ts,
                wal,
                raw,
            ),
            Event::StreamStart { xid, first } => self.stream_start(xid, first, wal, raw),
            Event::StreamStop => match self.in_block.take() {
                Some(_) => Ok(Accepted::Queued),
                None => Err(Error::Protocol(
                    "STREAM STOP message without STREAM START".into(),
                )),
            },
            Event::StreamCommit {
                xid,
                commit_lsn,
                end_lsn,
                commit_ts,
            } => self.seal_stream(
                xid,
                SealKind::StreamCommit,
                commit_lsn,
                end_lsn,
                commit_ts,
                wal,
                raw,
            ),
            Event::StreamPrepare {
                xid,
                prepare_lsn,
                end_lsn,
                prepare_ts,
            } => self.seal_stream(
                xid,
                SealKind::StreamPrepare,
                prepare_lsn,
                end_lsn,
                prepare_ts,
                wal,
                raw,
            ),
            Event::StreamAbort { xid, sub_xid } => self.stream_abort(xid, sub_xid, raw),
            Event::Relation { oid, .. } | Event::Type { oid, .. } => self.describe(msg, oid),
            Event::Change { .. } => self.data(msg),
            Event::Message {
                transactional: true,
                ..
            } => self.data(msg),
            Event::Message {
                transactional: false,
                lsn,
                ..
            } => self.note(lsn, raw),
        }
    }

    fn commit_prepared(
        &mut self,
        xid: Xid,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_ts: PgTimestamp,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        self.expect_idle("COMMIT PREPARED")?;
        if commit_lsn < self.model.horizon {
            return Ok(Accepted::Duplicate);
        }
        let Some(&id) = self.model.prepared.get(&xid.0) else {
            return Err(Error::Protocol(format!(
                "COMMIT PREPARED for transaction {xid}, which is not prepared in the queue"
            )));
        };
        self.push_seal(
            xid,
            id,
            wal,
            Body::Decide {
                commit: true,
                commit_lsn,
                end_lsn,
                ts: commit_ts,
                raw,
            },
        )
    }

    fn rollback_prepared(
        &mut self,
        xid: Xid,
        prepare_end_lsn: Lsn,
        rollback_end_lsn: Lsn,
        rollback_ts: PgTimestamp,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        self.expect_idle("ROLLBACK PREPARED")?;
        if rollback_end_lsn <= self.model.horizon {
            return Ok(Accepted::Duplicate);
        }
        let Some(&id) = self.model.prepared.get(&xid.0) else {
            return Ok(Accepted::Ignored);
        };
        self.push_seal(
            xid,
            id,
            wal,
            Body::Decide {
                commit: false,
                commit_lsn: prepare_end_lsn,
                end_lsn: rollback_end_lsn,
                ts: rollback_ts,
                raw,
            },
        )
    }

    fn stream_start(
        &mut self,
        xid: Xid,
        first: bool,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol("duplicate STREAM START message".into()));
        }
        self.expect_idle("STREAM START")?;
        let known = self.model.streams.get(&xid.0).copied();
        if first {
            self.check_budget()?;
            if let Some(old) = known {
                // Re-streamed from the start (after a reconnect): drop the old chunks.
                self.push(abort_rec(xid, old, 0))?;
            }
            let id = self.model.next_id;
            self.push(Rec {
                flags: 0,
                carry: Carry::No,
                xid,
                item: id,
                lsn: wal,
                body: Body::Begin {
                    flavor: Flavor::Streamed,
                    raw,
                },
            })?;
        } else if known.is_none() {
            return Err(Error::Protocol(format!(
                "STREAM START for transaction {xid} continues a stream the queue does not hold"
            )));
        }
        self.in_block = Some(xid.0);
        Ok(Accepted::Queued)
    }

    fn stream_abort(&mut self, xid: Xid, sub_xid: Xid, raw: &[u8]) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(
                "STREAM ABORT message without STREAM STOP".into(),
            ));
        }
        let Some(&id) = self.model.streams.get(&xid.0) else {
            return Ok(Accepted::Ignored);
        };
        let mut rec = abort_rec(xid, id, sub_xid.0);
        rec.body = Body::Abort {
            sub_xid: sub_xid.0,
            raw,
        };
        self.push(rec)?;
        Ok(Accepted::Queued)
    }

    /// A Relation or Type message: inside a stream block it is the streamed transaction's;
    /// outside, it joins the session's map unless the map already holds it unchanged.
    fn describe(&mut self, msg: &Received<'_>, oid: u32) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return self.data(msg);
        }
        let raw = msg.payload;
        let tag = if matches!(msg.event, Event::Relation { .. }) {
            b'R'
        } else {
            b'Y'
        };
        // Kept even inside a re-sent (skipped) transaction: the publisher will not
        // send it again in this session.
        let key_same = self
            .model
            .schema
            .current
            .get(&SchemaMap::key(tag, oid))
            .is_some_and(|(t, p)| *t == tag && p.as_slice() == raw);
        if key_same {
            return Ok(Accepted::Queued);
        }
        // Inside a re-sent transaction the queue drops, a description older in the WAL than
        // the one the map holds is stale: the relation was redefined after that transaction,
        // and everything still to be handed out that uses it was encoded with the newer one —
        // new transactions commit after the redefinition, and queued ones committing later
        // (a prepared transaction decided after this reconnect) changed it after it. Recorded,
        // it would be handed to those in place of the newer one.
        let stale = self.skipping.is_some()
            && msg.wal_lsn != Lsn::INVALID
            && self
                .model
                .schema
                .current_lsn
                .get(&SchemaMap::key(tag, oid))
                .is_some_and(|l| *l > msg.wal_lsn);
        if stale {
            return Ok(Accepted::Duplicate);
        }
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid: Xid(0),
            item: 0,
            lsn: msg.wal_lsn,
            body: Body::Schema { tag, oid, raw },
        })?;
        Ok(Accepted::Queued)
    }

    /// A non-transactional logical message: an item of its own, complete on arrival.
    fn note(&mut self, lsn: Lsn, raw: &[u8]) -> Result<Accepted, Error> {
        if lsn < self.model.horizon {
            return Ok(Accepted::Duplicate);
        }
        self.check_budget()?;
        let id = self.model.next_id;
        self.push_seal(Xid(0), id, lsn, Body::Note { raw })
    }

    fn expect_idle(&self, what: &str) -> Result<(), Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(format!("{what} inside a stream block")));
        }
        if self.model.open_tx.is_some() || self.skipping.is_some() {
            return Err(Error::Protocol(format!("{what} inside a transaction")));
        }
        Ok(())
    }

    fn begin(&mut self, xid: Xid, wal: Lsn, flavor: Flavor, raw: &[u8]) -> Result<Accepted, Error> {
        self.check_budget()?;
        let id = self.model.next_id;
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid,
            item: id,
            lsn: wal,
            body: Body::Begin { flavor, raw },
        })?;
        Ok(Accepted::Queued)
    }

    #[allow(clippy::too_many_arguments)]
    fn seal_open(
        &mut self,
        flavor: Flavor,
        kind: SealKind,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(format!("{kind:?} inside a stream block")));
        }
        if self.skipping == Some(flavor) {
            self.skipping = None;
            return Ok(Accepted::Duplicate);
        }
        let open = self.model.open_tx.and_then(|id| self.model.items.get(&id));
        let Some((id, xid)) = open
            .filter(|it| it.flavor == flavor)
            .map(|it| (it.id, it.xid))
        else {
            return Err(Error::Protocol(format!(
                "{kind:?} without a matching BEGIN"
            )));
        };
        self.push_seal(
            xid,
            id,
            wal,
            Body::Seal {
                kind,
                commit_lsn,
                end_lsn,
                ts,
                raw,
            },
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn seal_stream(
        &mut self,
        xid: Xid,
        kind: SealKind,
        commit_lsn: Lsn,
        end_lsn: Lsn,
        ts: PgTimestamp,
        wal: Lsn,
        raw: &[u8],
    ) -> Result<Accepted, Error> {
        if self.in_block.is_some() {
            return Err(Error::Protocol(format!(
                "{} message without STREAM STOP",
                if kind == SealKind::StreamCommit {
                    "STREAM COMMIT"
                } else {
                    "STREAM PREPARE"
                }
            )));
        }
        let known = self.model.streams.get(&xid.0).copied();
        if kind == SealKind::StreamCommit {
            if let Some(id) = known {
                self.promote_stream_schema(id)?;
            }
        }
        if commit_lsn < self.model.horizon {
            if let Some(id) = known {
                self.push(abort_rec(xid, id, 0))?;
            }
            return Ok(Accepted::Duplicate);
        }
        let Some(id) = known else {
            return Err(Error::Protocol(format!(
                "{kind:?} for transaction {xid}, which the queue does not hold"
            )));
        };
        self.push_seal(
            xid,
            id,
            wal,
            Body::Seal {
                kind,
                commit_lsn,
                end_lsn,
                ts,
                raw,
            },
        )
    }

    /// At Stream Commit pgoutput marks the relations described inside the stream as sent for
    /// the whole session (`cleanup_rel_sync_cache`), so later transactions use them without a
    /// new Relation message: their descriptions join the map here, in the outside-stream form
    /// (the in-stream form only adds the Int32 xid after the tag). Written before the seal: a
    /// crash between the two leaves descriptions that were current anyway (the streamed
    /// transaction holds its relations' locks until it ends).
    fn promote_stream_schema(&mut self, id: u64) -> Result<(), Error> {
        let Some(it) = self.model.items.get(&id) else {
            return Ok(());
        };
        let mut latest: Vec<((u8, u32), Lsn, Vec<u8>)> = Vec::new();
        for (_, tag, oid, lsn, raw) in &it.schema {
            let Some(rest) = raw.get(5..) else { continue };
            let global: Vec<u8> = std::iter::once(*tag).chain(rest.iter().copied()).collect();
            latest.retain(|(k, _, _)| *k != (*tag, *oid));
            latest.push(((*tag, *oid), *lsn, global));
        }
        for ((tag, oid), lsn, raw) in latest {
            let key = SchemaMap::key(tag, oid);
            let same = self
                .model
                .schema
                .current
                .get(&key)
                .is_some_and(|(t, p)| *t == tag && *p == raw);
            // A description sent later in the WAL than the stream's wins: DDL after the stream
            // described the relation (possible once the change that locked it was rolled back
            // to a savepoint) invalidates the stream's list on the publisher, so pgoutput does
            // not count it as sent, and a transaction queued since may depend on the newer one.
            let newer = self
                .model
                .schema
                .current_lsn
                .get(&key)
                .is_some_and(|l| *l > lsn);
            if !same && !newer {
                self.push(Rec {
                    flags: 0,
                    carry: Carry::No,
                    xid: Xid(0),
                    item: 0,
                    lsn,
                    body: Body::Schema {
                        tag,
                        oid,
                        raw: &raw,
                    },
                })?;
            }
        }
        Ok(())
    }

    /// A data message: inside a stream block it belongs to the block's transaction.
    fn data(&mut self, msg: &Received<'_>) -> Result<Accepted, Error> {
        let sub = match msg.event {
            Event::Change { xid }
            | Event::Relation { xid, .. }
            | Event::Type { xid, .. }
            | Event::Message { xid, .. } => xid,
            _ => None,
        };
        let (id, sub) = if let Some(top) = self.in_block {
            let id =
                self.model.streams.get(&top).copied().ok_or_else(|| {
                    Error::Protocol("stream block for an unknown transaction".into())
                })?;
            (id, sub.map_or(top, |x| x.0))
        } else if self.skipping.is_some() {
            return Ok(Accepted::Duplicate);
        } else if let Some(id) = self.model.open_tx {
            (id, 0)
        } else {
            return Err(Error::Protocol("data message outside a transaction".into()));
        };
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid: Xid(sub),
            item: id,
            lsn: msg.wal_lsn,
            body: Body::Msg {
                schema: match msg.event {
                    Event::Relation { oid, .. } => Some((b'R', oid)),
                    Event::Type { oid, .. } => Some((b'Y', oid)),
                    _ => None,
                },
                raw: msg.payload,
            },
        })?;
        Ok(Accepted::Queued)
    }

    /// Queues the record that completes item `id` (a commit, prepare, stream commit or stream
    /// prepare, a prepared transaction's decision, or a non-transactional message): until it is
    /// durable the flush LSN stays where it was.
    fn push_seal(&mut self, xid: Xid, id: u64, wal: Lsn, body: Body) -> Result<Accepted, Error> {
        self.push(Rec {
            flags: 0,
            carry: Carry::No,
            xid,
            item: id,
            lsn: wal,
            body,
        })?;
        self.unsynced_seal = true;
        Ok(Accepted::Queued)
    }
}

fn abort_rec(xid: Xid, id: u64, sub_xid: u32) -> Rec<'static> {
    Rec {
        flags: 0,
        carry: Carry::No,
        xid,
        item: id,
        lsn: Lsn::INVALID,
        body: Body::Abort { sub_xid, raw: &[] },
    }
}

/// An LSN the message proves was received.
fn event_end(e: &Event) -> Lsn {
    match *e {
        Event::Commit { end_lsn, .. }
        | Event::Prepare { end_lsn, .. }
        | Event::CommitPrepared { end_lsn, .. }
        | Event::StreamCommit { end_lsn, .. }
        | Event::StreamPrepare { end_lsn, .. } => end_lsn,
        Event::RollbackPrepared {
            rollback_end_lsn, ..
        } => rollback_end_lsn,
        _ => Lsn::INVALID,
    }
}
