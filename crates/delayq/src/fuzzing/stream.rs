//! The `delayq_stream` target: operations on one queue over a faulty simulated disk, with the
//! queue's invariants checked on the way.

use std::collections::BTreeSet;

use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use pgyard_wire::pgoutput::{
    AbortInfo, Begin, Commit, CommitPrepared, LogicalMessage, PgOutputDecoder, PgOutputMessage,
    Prepare, ProtoVersion, Relation, RelationColumn, ReplicaIdentity, RollbackPrepared, Seq,
    StreamAbort, StreamCommit, StreamStart, TupleValue, Type,
};

use super::{config, Input, SEGMENT_BYTES};
use crate::{Accepted, Config, DelayQueue, Error, ItemId, Ready, Received, SimFaults, SimStorage};

/// A sequence of operations on one queue over a simulated disk: well-formed pgoutput messages
/// built with pgyard-wire's encoder, raw bytes through pgyard-wire's decoder, events paired with
/// arbitrary payloads, flushes, crashes and reopens, purges, polls, applies and reconnects.
/// Besides never panicking, within one session the flush and apply LSNs never fall, nothing is
/// handed out twice, items come out in due order, only durable transactions are handed out,
/// and the queue always recovers after a crash.
pub fn stream_events(data: &[u8]) {
    Stream::new(data, true).run();
}

/// The interpreter of [`stream_events`] (also the writer of [`recover_segments`]' queues).
pub(super) struct Stream<'a> {
    input: Input<'a>,
    cfg: Config,
    q: Option<DelayQueue<SimStorage>>,
    decoder: PgOutputDecoder,
    /// The WAL cursor: built messages take positions from here, mostly increasing.
    lsn: u64,
    now: i64,
    /// Within this session: the largest flush and apply LSN seen, what was handed out, the
    /// last due time handed out and the items waiting for `mark_applied`.
    flushed: Lsn,
    applied: Lsn,
    handed: BTreeSet<u64>,
    last_due: Option<UnixTime>,
    unapplied: Vec<ItemId>,
    /// The final LSN of the last Begin / Begin Prepare built, for its Commit / Prepare.
    pending_final: Option<(Lsn, Lsn)>,
    check: bool,
}

impl<'a> Stream<'a> {
    pub(super) fn new(data: &'a [u8], check: bool) -> Self {
        let mut input = Input(data);
        let setup = input.u8();
        let faults = SimFaults {
            fsync_fail_per_million: if setup & 0x01 != 0 { 20_000 } else { 0 },
            enospc_per_million: if setup & 0x02 != 0 { 20_000 } else { 0 },
            capacity_bytes: (setup & 0x04 != 0).then_some(6 * SEGMENT_BYTES),
            torn_writes: setup & 0x08 != 0,
        };
        let cfg = config(setup >> 4, input.u8());
        let seed = input.u64();
        let storage = SimStorage::with_rng(pgyard_types::rng_from_seed(seed), faults);
        let version = ProtoVersion::ALL[usize::from(setup >> 6)];
        let mut s = Stream {
            input,
            cfg,
            q: None,
            decoder: PgOutputDecoder::new(version),
            lsn: 0x100_0000,
            now: 1_700_000_000_000_000,
            flushed: Lsn(0),
            applied: Lsn(0),
            handed: BTreeSet::new(),
            last_due: None,
            unapplied: Vec::new(),
            pending_final: None,
            check,
        };
        s.reopen(storage);
        s
    }

    /// Items handed out since the last (re)open.
    #[cfg(test)]
    pub(super) fn handed_out(&self) -> usize {
        self.handed.len()
    }

    pub(super) fn into_storage(self) -> SimStorage {
        match self.q {
            Some(q) => q.into_storage(),
            None => SimStorage::new(0),
        }
    }

    /// Opens the queue over `storage`. An injected fault may fail the repair of a torn tail;
    /// the same disk is then opened again without faults (for the rest of the run). Any other
    /// failure is a recovery bug: the engine must always read back what it wrote.
    fn reopen(&mut self, storage: SimStorage) {
        let q = match DelayQueue::open(storage.clone(), self.cfg.clone()) {
            Ok(q) => q,
            Err(Error::Storage(_)) => {
                let mut storage = storage;
                storage.set_faults(SimFaults::default());
                DelayQueue::open(storage, self.cfg.clone())
                    .unwrap_or_else(|e| panic!("recovery after a crash failed: {e}"))
            }
            Err(e) => panic!("recovery after a crash failed: {e}"),
        };
        self.flushed = q.flush_lsn();
        self.applied = q.apply_lsn();
        self.handed.clear();
        self.last_due = None;
        self.unapplied.clear();
        self.decoder = PgOutputDecoder::new(self.decoder.version());
        self.q = Some(q);
    }

    pub(super) fn run(&mut self) {
        while !self.input.is_empty() {
            self.step();
            if self.check {
                self.check_invariants();
            }
        }
    }

    fn step(&mut self) {
        let Some(q) = self.q.as_mut() else { return };
        self.now += i64::from(self.input.u8()) * 100_000;
        let now = UnixTime(self.now);
        match self.input.u8() % 16 {
            0..=5 => self.feed_built(),
            6 => self.feed_decoded(),
            7 => self.feed_mismatched(),
            8 => {
                let _ = q.flush();
            }
            9 => {
                let Some(q) = self.q.take() else { return };
                let mut storage = q.into_storage();
                storage.crash();
                self.reopen(storage);
            }
            10 => {
                let _ = q.purge();
            }
            11 => self.poll(now),
            12 => self.apply(),
            13 => {
                let _ = q.restart_stream(now);
                self.decoder = PgOutputDecoder::new(self.decoder.version());
            }
            14 => {
                let lsn = self.lsn + u64::from(self.input.u8());
                q.note_received(Lsn(lsn));
            }
            _ => {
                let back = u64::from(self.input.u16());
                let _ = q.skip_applied_through(Lsn(self.lsn.saturating_sub(back)));
            }
        }
    }
}

/// The pgoutput epoch (2000-01-01) in Unix microseconds.
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

const COLUMNS: &[RelationColumn<'static>] = &[
    RelationColumn {
        key: true,
        name: b"id",
        type_oid: 23,
        type_modifier: -1,
    },
    RelationColumn {
        key: false,
        name: b"v",
        type_oid: 25,
        type_modifier: -1,
    },
];

impl Stream<'_> {
    /// A well-formed message from pgyard-wire's encoder, with LSNs that mostly follow one WAL.
    fn build(&mut self) -> Option<(Vec<u8>, PgOutputMessage<'static>)> {
        let kind = self.input.u8() % 18;
        let xid = Xid(1 + u32::from(self.input.u8() % 4));
        let step = self.input.u8();
        if step == 0xFF {
            // Re-sent WAL, as after a reconnect.
            self.lsn = self.lsn.saturating_sub(0x1000);
        } else {
            self.lsn += 8 + u64::from(step) * 8;
        }
        let at = Lsn(self.lsn);
        let ahead = Lsn(self.lsn + 0x100 + u64::from(self.input.u8()) * 8);
        let ts =
            PgTimestamp(self.now - PG_EPOCH_UNIX_MICROS - i64::from(self.input.u8()) * 1_000_000);
        let top = self.decoder.stream_xid();
        // Inside a stream block data messages carry the (sub)transaction's xid.
        let sub = top.map(|t| {
            if self.input.bool() {
                t
            } else {
                Xid(t.0.wrapping_add(100))
            }
        });
        let oid = 16384 + u32::from(self.input.u8() % 4);
        let (final_lsn, final_end) = self.pending_final.unwrap_or((at, Lsn(at.0 + 8)));
        let msg = match kind {
            0 => {
                self.pending_final = Some((ahead, Lsn(ahead.0 + 8)));
                PgOutputMessage::Begin(Begin {
                    final_lsn: ahead,
                    commit_time: ts,
                    xid,
                })
            }
            1 => {
                self.pending_final = None;
                self.lsn = self.lsn.max(final_end.0);
                PgOutputMessage::Commit(Commit {
                    commit_lsn: final_lsn,
                    end_lsn: final_end,
                    commit_time: ts,
                })
            }
            6 => PgOutputMessage::StreamStart(StreamStart {
                xid,
                first_segment: self.input.bool(),
            }),
            7 => PgOutputMessage::StreamStop,
            8 => {
                self.lsn = self.lsn.max(at.0 + 8);
                PgOutputMessage::StreamCommit(StreamCommit {
                    xid,
                    commit_lsn: at,
                    end_lsn: Lsn(at.0 + 8),
                    commit_time: ts,
                })
            }
            9 => PgOutputMessage::StreamAbort(StreamAbort {
                xid,
                subxid: if self.input.bool() {
                    xid
                } else {
                    Xid(xid.0 + 100)
                },
                abort: self.input.bool().then_some(AbortInfo { lsn: at, time: ts }),
            }),
            10 => {
                self.pending_final = Some((ahead, Lsn(ahead.0 + 8)));
                PgOutputMessage::BeginPrepare(prepare(ahead, ts, xid))
            }
            11 => {
                self.pending_final = None;
                self.lsn = self.lsn.max(final_end.0);
                PgOutputMessage::Prepare(prepare(final_lsn, ts, xid))
            }
            12 => {
                self.lsn = self.lsn.max(at.0 + 8);
                PgOutputMessage::CommitPrepared(CommitPrepared {
                    commit_lsn: at,
                    end_lsn: Lsn(at.0 + 8),
                    commit_time: ts,
                    xid,
                    gid: b"g",
                })
            }
            13 => {
                self.lsn = self.lsn.max(at.0 + 8);
                PgOutputMessage::RollbackPrepared(RollbackPrepared {
                    prepare_end_lsn: Lsn(at.0.saturating_sub(0x100)),
                    rollback_end_lsn: Lsn(at.0 + 8),
                    prepare_time: ts,
                    rollback_time: ts,
                    xid,
                    gid: b"g",
                })
            }
            14 => {
                self.lsn = self.lsn.max(at.0 + 8);
                PgOutputMessage::StreamPrepare(prepare(at, ts, xid))
            }
            _ => self.data_message(kind, sub, oid, at),
        };
        let payload = msg.to_bytes().ok()?.to_vec();
        Some((payload, msg))
    }

    /// A change, a description or a logical message (kinds 2 to 5 and 15 to 17), for
    /// `build`.
    fn data_message(
        &mut self,
        kind: u8,
        sub: Option<Xid>,
        oid: u32,
        at: Lsn,
    ) -> PgOutputMessage<'static> {
        match kind {
            2 => {
                const ROW: &[TupleValue<'static>] = &[TupleValue::Text(b"1"), TupleValue::Null];
                PgOutputMessage::Insert(pgyard_wire::pgoutput::Insert {
                    xid: sub,
                    relation: oid,
                    new: Seq::from_slice(ROW),
                })
            }
            3 => PgOutputMessage::Relation(Relation {
                xid: sub,
                oid,
                namespace: b"public",
                name: if self.input.bool() { b"t" } else { b"u" },
                replica_identity: ReplicaIdentity::Default,
                columns: Seq::from_slice(if self.input.bool() {
                    COLUMNS
                } else {
                    &COLUMNS[..1]
                }),
            }),
            4 => PgOutputMessage::Type(Type {
                xid: sub,
                oid,
                namespace: b"public",
                name: b"mood",
            }),
            5 => PgOutputMessage::Message(LogicalMessage {
                xid: sub,
                transactional: self.input.bool(),
                lsn: at,
                prefix: b"fuzz",
                content: b"",
            }),
            15 => PgOutputMessage::Delete(pgyard_wire::pgoutput::Delete {
                xid: sub,
                relation: oid,
                old: pgyard_wire::pgoutput::OldTuple::Key(Seq::from_slice(&[])),
            }),
            16 => PgOutputMessage::Origin(pgyard_wire::pgoutput::Origin {
                commit_lsn: at,
                name: b"origin",
            }),
            _ => {
                const RELATIONS: &[u32] = &[16384, 16385];
                PgOutputMessage::Truncate(pgyard_wire::pgoutput::Truncate {
                    xid: sub,
                    cascade: self.input.bool(),
                    restart_identity: false,
                    relations: Seq::from_slice(RELATIONS),
                })
            }
        }
    }

    fn feed_built(&mut self) {
        let Some((payload, msg)) = self.build() else {
            return;
        };
        // Keep the decoder's idea of the stream block in step for the next messages.
        let _ = self.decoder.decode(&payload);
        self.feed(&payload, crate::pgoutput::event(&msg));
    }

    /// Arbitrary bytes, fed only when pgyard-wire decodes them (as every driver does).
    fn feed_decoded(&mut self) {
        let len = usize::from(self.input.u8());
        let payload = self.input.take(len);
        let Ok(msg) = self.decoder.decode(payload) else {
            return;
        };
        let event = crate::pgoutput::event(&msg);
        self.feed(payload, event);
    }

    /// A well-formed event with a payload that does not match it: the payload is opaque to
    /// the queue, which must not trust it (it does read in-stream Relation/Type payloads).
    /// A length of 255 asks for a large payload instead (see [`large_payload`]).
    fn feed_mismatched(&mut self) {
        let Some((_, msg)) = self.build() else {
            return;
        };
        let event = crate::pgoutput::event(&msg);
        let len = usize::from(self.input.u8());
        if len == usize::from(u8::MAX) {
            let payload = large_payload(&mut self.input);
            self.feed(&payload, event);
        } else {
            let payload = self.input.take(len);
            self.feed(payload, event);
        }
    }

    fn feed(&mut self, payload: &[u8], event: crate::Event) {
        let Some(q) = self.q.as_mut() else { return };
        let msg = Received {
            wal_lsn: Lsn(self.lsn),
            payload,
            event,
        };
        match q.handle(UnixTime(self.now), msg) {
            Ok(Accepted::Queued | Accepted::Duplicate | Accepted::Ignored) => {}
            Err(e) => assert!(
                !self.check || !matches!(e, Error::Corrupt { .. }),
                "the index rejected a record the queue wrote itself: {e}"
            ),
        }
    }

    fn poll(&mut self, now: UnixTime) {
        let Some(q) = self.q.as_mut() else { return };
        let flush = q.flush_lsn();
        let Ok(Some(ready)) = q.poll_ready(now) else {
            return;
        };
        let id = ready.id();
        self.unapplied.push(id);
        if !self.check {
            return;
        }
        assert!(self.handed.insert(id.0), "item {} handed out twice", id.0);
        let Ready::Transaction(t) = &ready else {
            return;
        };
        assert!(t.due <= now, "item {} handed out before it is due", id.0);
        assert!(
            self.last_due.is_none_or(|d| d <= t.due),
            "item {} is due before the one handed out before it",
            id.0
        );
        self.last_due = Some(t.due);
        assert!(
            t.end_lsn <= flush,
            "item {} handed out before it was flushed",
            id.0
        );
        // Handed out means durable: whatever a crash now loses, this transaction survives.
        let mut disk = q.storage().clone();
        disk.crash();
        disk.set_faults(SimFaults::default());
        let after = DelayQueue::open(disk, self.cfg.clone())
            .unwrap_or_else(|e| panic!("recovery after a crash failed: {e}"));
        assert!(
            after.inspect().transactions.iter().any(|x| x.id == id),
            "item {} was handed out but a crash loses it",
            id.0
        );
    }

    fn apply(&mut self) {
        let Some(q) = self.q.as_mut() else { return };
        let Some(&next) = self.unapplied.first() else {
            return;
        };
        // Sometimes any id: out of order or never handed out is refused and changes nothing.
        let id = if self.input.bool() {
            ItemId(u64::from(self.input.u8()))
        } else {
            next
        };
        match q.mark_applied(id) {
            Ok(()) => self.unapplied.retain(|x| *x != id),
            // Applied meanwhile through `skip_applied_through`.
            Err(Error::Misuse(_)) if id == next => {
                self.unapplied.remove(0);
            }
            Err(_) => {}
        }
    }

    fn check_invariants(&mut self) {
        let Some(q) = self.q.as_ref() else { return };
        let flushed = q.flush_lsn();
        assert!(
            flushed >= self.flushed,
            "flush LSN fell from {} to {flushed}",
            self.flushed
        );
        self.flushed = flushed;
        let applied = q.apply_lsn();
        assert!(
            applied >= self.applied,
            "apply LSN fell from {} to {applied}",
            self.applied
        );
        self.applied = applied;
        assert!(q.budget_bytes() <= q.disk_bytes());
    }
}

/// Half a segment to 64 segments and more (a u16 in steps of 4 bytes, then a fill byte): a
/// record that fits a segment, one larger than a segment (its own segment, written without the
/// write buffer), and one longer than recovery's read window (checked piece by piece).
pub(super) fn large_payload(input: &mut Input<'_>) -> Vec<u8> {
    let n = SEGMENT_BYTES as usize / 2 + usize::from(input.u16()) * 4;
    let fill = input.u8();
    // Bytes that differ along the record, so a copy cut or shifted anywhere shows.
    (0..n).map(|i| fill ^ (i % 251) as u8).collect()
}

fn prepare(lsn: Lsn, ts: PgTimestamp, xid: Xid) -> Prepare<'static> {
    Prepare {
        prepare_lsn: lsn,
        end_lsn: Lsn(lsn.0 + 8),
        prepare_time: ts,
        xid,
        gid: b"g",
    }
}
