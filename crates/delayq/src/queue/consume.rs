//! The consumer's side of the queue: what is due, handing it out in commit order, its
//! acknowledgement, the restart after a crash, and a new consumer.

use pgyard_types::{Lsn, PgTimestamp, UnixTime};

use super::{DelayQueue, ItemId, Ready, ReadyMessage, ReadyTxn, TxnCursor, TxnPiece};
use crate::model::Item;
use crate::model::Loc;
use crate::storage::Storage;
use crate::Error;

impl<S: Storage> DelayQueue<S> {
    /// When the next item not yet handed out becomes due (`None`: nothing queued).
    pub fn next_due(&self) -> Option<UnixTime> {
        let (_, id) = self.next_unhanded()?;
        self.model
            .items
            .get(&id)
            .map(|it| it.due.unwrap_or(UnixTime(i64::MIN)))
    }

    /// Hands items out again from the oldest one not yet applied, to a new consumer (the old
    /// one lost its session with items in flight: they may or may not have been applied, and
    /// [`DelayQueue::skip_applied_through`] with the subscriber's origin sorts that out). The
    /// next item carries the whole Relation/Type map as of its own position, as after
    /// opening: a relation redescribed after it (and already handed out with a later item)
    /// reaches the consumer in the form that item's changes were encoded with.
    pub fn rehand(&mut self) {
        self.handed = None;
        // A transaction half read goes out again from its start; old cursors go stale.
        self.reading = None;
        self.session += 1;
        self.model.schema.restart_consumer();
    }

    /// The commit LSN and time of the next item to be handed out, when it is a transaction
    /// (so a caller can hold before it without handing it out).
    pub fn next_commit(&self) -> Option<(Lsn, PgTimestamp)> {
        let (_, id) = self.next_unhanded()?;
        let it = self.model.items.get(&id)?;
        if it.note {
            return None;
        }
        it.commit.map(|c| (c.lsn, c.ts))
    }

    /// The next item in commit order if it is due at `now`, a transaction whole (however
    /// large). Each item is handed out once per session; acknowledge it with
    /// [`DelayQueue::mark_applied`].
    pub fn poll_ready(&mut self, now: UnixTime) -> Result<Option<Ready>, Error> {
        self.poll_ready_bounded(now, u64::MAX)
    }

    /// As [`DelayQueue::poll_ready`], but a transaction comes with its messages up to
    /// `max_bytes` (at least one) and a [`ReadyTxn::more`] cursor for the rest, which must be
    /// read to the end with [`DelayQueue::read_more`] before anything else is handed out.
    pub fn poll_ready_bounded(
        &mut self,
        now: UnixTime,
        max_bytes: u64,
    ) -> Result<Option<Ready>, Error> {
        self.check()?;
        if let Some((id, _)) = self.reading {
            return Err(Error::Misuse(format!(
                "item {id} was handed out in pieces and is not read to its end"
            )));
        }
        let Some((pos, id)) = self.next_unhanded() else {
            return Ok(None);
        };
        let Some(it) = self.model.items.get(&id) else {
            return Ok(None);
        };
        let due = it.due.unwrap_or(UnixTime(i64::MIN));
        if due > now {
            return Ok(None);
        }
        // Only durable transactions are handed out: applying one moves the subscriber's origin
        // past everything before it, so a transaction (say an earlier PREPARE) that a crash
        // could still take away must not be overtaken.
        // The flush LSN alone is not enough: a publisher that reported a position past a
        // transaction it sends later would let an unsynced one through.
        if !it.note {
            if let Some(c) = it.commit {
                let last = it.decide.or(it.seal);
                if c.end > self.flush_lsn() || last.is_some_and(|l| !self.is_durable(l)) {
                    return Ok(None);
                }
            }
        }
        let commit = it.commit;
        let out = if it.note {
            let loc = it
                .begin()
                .ok_or_else(|| Error::Misuse("message without record".into()))?;
            let payload = self.read_raw(loc)?;
            Ready::Message(ReadyMessage {
                id: ItemId(id),
                lsn: commit.map_or(Lsn::INVALID, |c| c.lsn),
                payload,
            })
        } else {
            let (locs, next) = piece_locs(it, 0, max_bytes);
            let xid = it.xid;
            let in_stream: Vec<(u8, u32, Vec<u8>)> = it
                .schema
                .iter()
                .filter_map(|(_, tag, oid, _, raw)| {
                    let rest = raw.get(5..)?;
                    Some((
                        *tag,
                        *oid,
                        std::iter::once(*tag).chain(rest.iter().copied()).collect(),
                    ))
                })
                .collect();
            let messages = self.read_all(&locs)?;
            let c = commit.ok_or_else(|| Error::Misuse("uncommitted item in order".into()))?;
            let oldest = self.model.order.keys().next().copied().unwrap_or(pos);
            let schema = self.model.schema.delta_until(pos, oldest);
            for (tag, oid, raw) in in_stream {
                self.model.schema.consumer_applied(tag, oid, &raw);
            }
            Ready::Transaction(ReadyTxn {
                id: ItemId(id),
                xid,
                kind: c.kind,
                commit_lsn: c.lsn,
                end_lsn: c.end,
                commit_ts: c.ts,
                due,
                schema,
                messages,
                more: next.map(|next| {
                    self.reading = Some((id, next));
                    TxnCursor {
                        id: ItemId(id),
                        next,
                        session: self.session,
                    }
                }),
            })
        };
        self.handed = Some(pos);
        Ok(Some(out))
    }

    /// Records that the oldest handed-out item was applied (buffered; durable with the next
    /// flush). Call it once the apply is committed on the subscriber together with its
    /// replication origin progress. Items must be acknowledged in the order handed out.
    pub fn mark_applied(&mut self, id: ItemId) -> Result<(), Error> {
        self.check()?;
        let Some((&pos, &head)) = self.model.order.iter().next() else {
            return Err(Error::Misuse(format!("item {} is not pending", id.0)));
        };
        if head != id.0 {
            return Err(Error::Misuse(format!(
                "items are applied in commit order: next is {head}, not {}",
                id.0
            )));
        }
        if !matches!(self.handed, Some(h) if pos <= h) {
            return Err(Error::Misuse(format!("item {} was not handed out", id.0)));
        }
        if self.reading.is_some_and(|(r, _)| r == head) {
            return Err(Error::Misuse(format!(
                "item {} is not read to its end",
                id.0
            )));
        }
        self.push_applied(head)?;
        self.refresh_flow();
        Ok(())
    }

    /// Marks every queued transaction whose end LSN is at or below `origin_lsn` (the
    /// subscriber's replication origin progress) applied, with the messages before them.
    pub fn skip_applied_through(&mut self, origin_lsn: Lsn) -> Result<usize, Error> {
        self.check()?;
        let mut upto = None;
        for (&pos, id) in &self.model.order {
            let it = &self.model.items[id];
            match it.commit {
                Some(c) if !it.note && c.end <= origin_lsn => upto = Some(pos),
                Some(_) if it.note => {}
                _ => break,
            }
        }
        let Some(upto) = upto else { return Ok(0) };
        let ids: Vec<u64> = self.model.order.range(..=upto).map(|(_, id)| *id).collect();
        for id in &ids {
            self.push_applied(*id)?;
        }
        if self.reading.is_some_and(|(r, _)| ids.contains(&r)) {
            self.reading = None;
        }
        self.handed = self.handed.max(Some(upto));
        self.refresh_flow();
        Ok(ids.len())
    }

    /// The next piece of a transaction handed out in pieces: its messages up to `max_bytes`
    /// (at least one), read from storage. Fails on a cursor that is not the current one.
    pub fn read_more(&mut self, cursor: TxnCursor, max_bytes: u64) -> Result<TxnPiece, Error> {
        self.check()?;
        let TxnCursor { id, next, session } = cursor;
        if session != self.session || self.reading != Some((id.0, next)) {
            return Err(Error::Misuse(format!(
                "a stale cursor for item {} at message {next}",
                id.0
            )));
        }
        let it = self
            .model
            .items
            .get(&id.0)
            .ok_or_else(|| Error::Misuse(format!("item {} is not queued", id.0)))?;
        let (locs, rest) = piece_locs(it, next, max_bytes);
        let messages = self.read_all(&locs)?;
        self.reading = rest.map(|n| (id.0, n));
        Ok(TxnPiece {
            messages,
            more: rest.map(|next| TxnCursor { id, next, session }),
        })
    }

    fn read_all(&mut self, locs: &[Loc]) -> Result<Vec<Vec<u8>>, Error> {
        let mut messages = Vec::with_capacity(locs.len());
        for &loc in locs {
            messages.push(self.read_raw(loc)?);
        }
        Ok(messages)
    }
}

/// The records of transaction `it` from message `from` on, as many as fit in `max_bytes`
/// (at least one), and the index of the first one left out, if any. Resolved from the index
/// each time, so a cursor holds no record location that could move.
fn piece_locs(it: &Item, from: usize, max_bytes: u64) -> (Vec<Loc>, Option<usize>) {
    let all = it
        .begin()
        .into_iter()
        .chain(it.body.iter().map(|(l, _)| *l))
        .chain(it.seal)
        .chain(it.decide);
    // Room for a small transaction's records without growing, not for a huge one's.
    let mut locs = Vec::with_capacity((it.body.len() + 3).saturating_sub(from).min(64));
    let mut bytes = 0u64;
    for (i, loc) in all.enumerate().skip(from) {
        if !locs.is_empty() && bytes.saturating_add(loc.len) > max_bytes {
            return (locs, Some(i));
        }
        bytes = bytes.saturating_add(loc.len);
        locs.push(loc);
    }
    (locs, None)
}
