//! Gathering what the machine sends: batches of due transactions, and a transaction handed
//! out in pieces sent piece by piece inside one subscriber transaction.

use pgyard_types::{Lsn, UnixTime};

#[cfg(feature = "planted-bugs")]
use super::PlantedBug;
use super::{ApplyMachine, BatchId, Command, Failure, InFlight, Needs, Notice, OpenTxn, Waiting};
use crate::apply::{Batch, Plan};
use crate::{DelayQueue, Ready, Storage};

impl ApplyMachine {
    /// Hands due items out and gathers the next batch: consecutive due transactions up to
    /// the batch limits, ending before a message, a skipped transaction or `until`, or with
    /// the first piece of a transaction handed out in pieces (the batch then stays open for
    /// its other pieces). Messages and skipped transactions before it are queued for
    /// acknowledgement.
    pub(super) fn next_batch<S: Storage>(
        &mut self,
        q: &mut DelayQueue<S>,
        now: UnixTime,
    ) -> Option<Command> {
        let mut batch = Batch::new();
        let mut txns: Vec<Waiting> = Vec::new();
        let mut last_commit = Lsn::INVALID;
        let mut opened = None;
        self.applied.held_at = None;
        while self.failed.is_none() && self.applied.held_at.is_none() && opened.is_none() {
            let next = q.next_commit();
            if let (Some(until), Some((lsn, ts))) = (self.controls.until, next) {
                if until.holds(lsn, ts) {
                    self.applied.held_at = Some(lsn);
                    break;
                }
            }
            if let (Some(through), Some((lsn, _))) = (self.singly_through, next) {
                if lsn > through {
                    self.singly_through = None;
                }
            }
            let skip = next.is_some_and(|(lsn, _)| self.controls.skip.contains(&lsn));
            if !batch.is_empty() {
                // Messages and skipped transactions go on their own; so does everything
                // while a refused batch is retried one by one.
                let full = batch.len() >= self.config.batch_txns
                    || batch.bytes() >= self.config.batch_bytes;
                if full || skip || next.is_none() || self.singly_through.is_some() {
                    break;
                }
            }
            let ready = match q.poll_ready_bounded(now, self.piece_bytes()) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    // What is gathered goes out; the machine stops once it is answered.
                    self.failed = Some(Failure::Queue(e));
                    break;
                }
            };
            match ready {
                Ready::Message(m) => {
                    self.waiting.push_back(Waiting {
                        id: m.id,
                        needs: Needs::Nothing,
                        txn: None,
                        skipped: None,
                    });
                    self.notices.push_back(Notice::Message(m));
                }
                Ready::Transaction(t) if self.controls.skip.contains(&t.commit_lsn) => {
                    // Skipped, yet read to its end (the queue hands out nothing else, nor
                    // takes the acknowledgement, before), and what it describes is learnt:
                    // the queue will not describe those relations again.
                    let streamed = crate::apply::Applier::streamed(&t.messages);
                    let mut learnt =
                        self.applier
                            .skip(t.commit_lsn, &t.schema, &t.messages, streamed);
                    let mut more = t.more;
                    while let (Some(cursor), Ok(())) = (more, &learnt) {
                        match q.read_more(cursor, self.piece_bytes()) {
                            Ok(piece) => {
                                more = piece.more;
                                learnt =
                                    self.applier
                                        .skip(t.commit_lsn, &[], &piece.messages, streamed);
                            }
                            Err(e) => {
                                self.failed = Some(Failure::Queue(e));
                                break;
                            }
                        }
                    }
                    if let Err(e) = learnt {
                        self.failed = Some(Failure::Plan(e));
                    }
                    self.waiting.push_back(Waiting {
                        id: t.id,
                        needs: Needs::Nothing,
                        txn: None,
                        skipped: Some(t.commit_lsn),
                    });
                }
                Ready::Transaction(t) => match self.applier.add(&mut batch, &t) {
                    Ok(changes) => {
                        last_commit = t.commit_lsn;
                        txns.push(Waiting {
                            id: t.id,
                            needs: Needs::Commit(self.next_batch),
                            txn: Some((t.end_lsn, t.commit_ts, changes)),
                            skipped: None,
                        });
                        opened = t.more;
                    }
                    Err(e) => self.failed = Some(Failure::Plan(e)),
                },
            }
        }
        let mut plan = batch.finish()?;
        if let Some(cursor) = opened {
            // The batch's subscriber transaction stays open for the other pieces; its
            // transactions wait for the COMMIT that ends the last one.
            self.open = Some(OpenTxn {
                cursor,
                first: plan.commit_lsn,
                last: last_commit,
                txns: txns.len(),
            });
            plan.closes = false;
            for w in &mut txns {
                w.needs = Needs::Sending;
            }
        } else if self.acks_on_send() {
            for w in &mut txns {
                w.needs = Needs::Nothing;
            }
        }
        let first = plan.commit_lsn;
        self.sent_since_asked += txns.len();
        let n = txns.len();
        self.waiting.extend(txns);
        Some(self.push_send(plan, first, last_commit, n))
    }

    /// The next piece of the transaction sent in pieces, as a part of its subscriber
    /// transaction (the last one with the COMMIT). Pieces that change nothing are not sent.
    pub(super) fn next_piece<S: Storage>(&mut self, q: &mut DelayQueue<S>) -> Option<Command> {
        let open = self.open.take()?;
        let mut cursor = open.cursor;
        loop {
            let piece = match q.read_more(cursor, self.piece_bytes()) {
                Ok(p) => p,
                Err(e) => {
                    self.failed = Some(Failure::Queue(e));
                    return None;
                }
            };
            let mut batch = Batch::new();
            match self.applier.add_piece(&mut batch, &piece) {
                Ok(changes) => {
                    // The transaction in pieces is the last one handed out.
                    if let Some((_, _, rows)) = self.waiting.back_mut().and_then(|w| w.txn.as_mut())
                    {
                        *rows += changes;
                    }
                }
                Err(e) => {
                    self.failed = Some(Failure::Plan(e));
                    return None;
                }
            }
            let mut plan = batch.finish()?;
            plan.opens = false;
            plan.closes = piece.more.is_none();
            match piece.more {
                Some(more) if plan.steps.is_empty() => cursor = more,
                Some(more) => {
                    self.open = Some(OpenTxn {
                        cursor: more,
                        ..open
                    });
                    return Some(self.push_send(plan, open.first, open.last, open.txns));
                }
                None => {
                    let id = self.next_batch;
                    let acked = self.acks_on_send();
                    for w in &mut self.waiting {
                        if w.needs == Needs::Sending {
                            w.needs = if acked {
                                Needs::Nothing
                            } else {
                                Needs::Commit(id)
                            };
                        }
                    }
                    return Some(self.push_send(plan, open.first, open.last, open.txns));
                }
            }
        }
    }

    /// Puts `plan` in flight as the next batch: `first` and `last` are the commit LSNs of
    /// the first and last transactions of its subscriber transaction, `txns` how many.
    fn push_send(&mut self, plan: Plan, first: Lsn, last: Lsn, txns: usize) -> Command {
        let id = self.next_batch;
        self.next_batch += 1;
        let bytes = plan.bytes();
        self.pipe.push_back(InFlight::Batch {
            id,
            first,
            last,
            end: plan.end_lsn,
            closes: plan.closes,
            txns,
            bytes,
        });
        self.batches_in_flight += 1;
        self.bytes_in_flight += bytes;
        Command::Send {
            id: BatchId(id),
            plan,
        }
    }

    /// The bound of a piece read out of the queue.
    fn piece_bytes(&self) -> u64 {
        u64::try_from(self.config.piece_bytes).unwrap_or(u64::MAX)
    }

    /// Whether the planted bug `AckBeforeCommit` is on.
    fn acks_on_send(&self) -> bool {
        #[cfg(feature = "planted-bugs")]
        return self.bug == Some(PlantedBug::AckBeforeCommit);
        // Without the feature the bug type has no values: never.
        #[cfg(not(feature = "planted-bugs"))]
        return self.bug.is_some();
    }
}
