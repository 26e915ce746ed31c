//! Entry points for the cargo-fuzz targets `delayq_recover` and `delayq_stream` and for their
//! corpus replays (feature `fuzzing`, which turns on `sim`). Each must never panic on any bytes: a panic is a bug in the
//! queue (or in an invariant checked here), never in the input.

use std::collections::BTreeSet;
use std::time::Duration;

use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use pgyard_wire::pgoutput::{
    AbortInfo, Begin, Commit, CommitPrepared, LogicalMessage, PgOutputDecoder, PgOutputMessage,
    Prepare, ProtoVersion, Relation, RelationColumn, ReplicaIdentity, RollbackPrepared, Seq,
    StreamAbort, StreamCommit, StreamStart, TupleValue, Type,
};

use crate::format::{segment_name, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::{
    verify, Accepted, Config, DelayQueue, Error, ItemId, Ready, Received, SimFaults, SimStorage,
    Storage,
};

/// Reads fuzz input front to back; once it runs dry every read yields zeros, so any prefix of
/// an input is an input too.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(n.min(self.0.len()));
        self.0 = rest;
        head
    }

    fn rest(&mut self) -> &'a [u8] {
        self.take(self.0.len())
    }

    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }

    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) | u16::from(self.u8()) << 8
    }

    fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        let head = self.take(8);
        b[..head.len()].copy_from_slice(head);
        u64::from_le_bytes(b)
    }

    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

/// Small segments so that a few kilobytes of input roll over, carry forward and purge.
const SEGMENT_BYTES: u64 = 4096;

fn config(delay_secs: u8, budget_segments: u8) -> Config {
    let budget = match budget_segments % 8 {
        0 => Config::default().disk_bytes_max,
        n => u64::from(n) * SEGMENT_BYTES,
    };
    Config {
        delay: Duration::from_secs(u64::from(delay_secs)),
        skew_tolerance: Duration::ZERO,
        segment_bytes_max: SEGMENT_BYTES,
        write_buffer_bytes: 512,
        disk_bytes_max: budget,
        disk_high_watermark_bytes: budget / 4 * 3,
        disk_low_watermark_bytes: budget / 2,
    }
}

// ---- recovery ------------------------------------------------------------------------------

/// Segment files cut from the bytes (one to three, some starting with a valid header, some with
/// records re-framed so their lengths and checksums hold) or written by the engine and then
/// damaged; recovery and `verify` agree, never panic, and reject only with [`Error::Corrupt`].
/// A queue that opens is recovered again without a torn tail, inspected, drained and purged.
pub fn recover_segments(data: &[u8]) {
    let mut input = Input(data);
    let shape = input.u8();
    let storage = if shape & 0x80 == 0 {
        cut_segments(shape, &mut input)
    } else {
        damaged_segments(&mut input)
    };
    let cfg = config(input.u8() % 8, 0);
    let verified = verify(&storage);
    let opened = DelayQueue::open(storage, cfg.clone());
    let q = match (opened, verified) {
        (Err(e), Err(v)) => {
            assert_eq!(e, v, "open and verify reject differently");
            assert!(
                matches!(&e, Error::Corrupt { reason, .. } if !reason.is_empty()),
                "recovery failed without naming the damage: {e:?}"
            );
            return;
        }
        (Ok(q), Ok(v)) => {
            assert_eq!(
                q.recovery(),
                &v,
                "open and verify disagree on what they found"
            );
            q
        }
        (opened, verified) => panic!(
            "open ({:?}) and verify ({:?}) disagree",
            opened.err(),
            verified.err()
        ),
    };
    let seen = q.inspect();
    assert_eq!(seen.segments.len(), q.recovery().segments);
    assert!(q.budget_bytes() <= q.disk_bytes());
    // What recovery repaired is a valid queue: it opens again, unchanged and without a tail.
    let again = DelayQueue::open(q.into_storage(), cfg.clone());
    let mut q = again.unwrap_or_else(|e| panic!("a recovered queue does not reopen: {e}"));
    assert_eq!(
        q.recovery().torn_tail,
        None,
        "recovery left a torn tail behind"
    );
    assert_eq!(q.inspect(), seen, "reopening a recovered queue changed it");
    drain(&mut q, &mut input);
}

/// Hands out, applies and purges a little; errors are fine (a damaged record is found only
/// when read for apply), panics are not.
fn drain(q: &mut DelayQueue<SimStorage>, input: &mut Input<'_>) {
    let rounds = 1 + input.u8() % 8;
    for _ in 0..rounds {
        let now = UnixTime(i64::MAX >> (input.u8() % 64));
        if let Ok(Some(ready)) = q.poll_ready(now) {
            let _ = q.mark_applied(ready.id());
        }
        if input.bool() {
            let _ = q.purge();
        }
        let _ = q.next_due();
        let _ = q.inspect();
    }
    let _ = q.flush();
}

/// One to three files cut from the input. Per file: a mode byte, a u16 length, then the bytes.
fn cut_segments(shape: u8, input: &mut Input<'_>) -> SimStorage {
    let files = 1 + usize::from(shape % 3);
    let mut seq = match (shape >> 2) & 3 {
        0 => 1,
        1 => u64::from(input.u8()),
        2 => u64::MAX - 2,
        _ => input.u64(),
    };
    let mut storage = SimStorage::new(u64::from(shape));
    for i in 0..files {
        let mode = input.u8();
        let body = if i + 1 == files {
            input.rest()
        } else {
            let len = usize::from(input.u16());
            input.take(len)
        };
        let mut file = Vec::new();
        // Low two bits: 0 raw bytes, 1 a header, 2 and 3 a header and re-framed records.
        let layout = mode & 3;
        if layout != 0 {
            let named = if mode & 0x04 != 0 { seq ^ 1 } else { seq };
            let capacity = match (mode >> 3) & 3 {
                0 => SEGMENT_BYTES,
                1 => SEGMENT_HEADER_BYTES + body.len() as u64,
                2 => SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + u64::from(mode >> 5),
                _ => u64::MAX,
            };
            let header = SegmentHeader {
                seq: named,
                capacity,
                created: UnixTime(0),
                horizon: Lsn(u64::from(mode >> 5) << 8),
                apply_lsn: Lsn(0),
                next_id: u64::from(mode >> 6),
            };
            file.extend_from_slice(&header.encode());
            if mode & 0x20 != 0 {
                // Format version 1 is read as well.
                file[8..10].copy_from_slice(&1u16.to_le_bytes());
                let crc = crc32c::crc32c(&file[0..68]);
                file[68..72].copy_from_slice(&crc.to_le_bytes());
            }
        }
        let start = file.len();
        file.extend_from_slice(body);
        if layout >= 2 {
            frame_records(&mut file[start..]);
        }
        put_file(&mut storage, &segment_name(seq), &file);
        // A gap in the sequence numbers is corruption; let the input ask for one.
        let step = if mode & 0x40 != 0 && mode & 0x80 != 0 {
            2
        } else {
            1
        };
        let Some(next) = seq.checked_add(step) else {
            break;
        };
        seq = next;
    }
    if shape & 0x40 != 0 {
        // Files that are not segments are ignored.
        put_file(&mut storage, "dq-1.seg", b"PGYDQSEG");
    }
    storage
}

/// Rewrites each record's length (kept within the bytes left), kind, reserved bytes and
/// checksum so that the fuzzer reaches the index instead of stopping at the first checksum.
fn frame_records(body: &mut [u8]) {
    let head = RECORD_HEADER_BYTES as usize;
    let mut off = 0;
    while body.len() - off >= head {
        let rest = body.len() - off;
        let asked = usize::from(u16::from_le_bytes([body[off], body[off + 1]]));
        let len = head + asked % (rest - head + 1);
        let rec = &mut body[off..off + len];
        rec[0..4].copy_from_slice(&(len as u32).to_le_bytes());
        rec[8] = 1 + rec[8] % 9;
        rec[10] = 0;
        rec[11] = 0;
        let crc = crc32c::crc32c_append(crc32c::crc32c(&rec[0..4]), &rec[8..]);
        rec[4..8].copy_from_slice(&crc.to_le_bytes());
        off += len;
    }
}

fn put_file(storage: &mut SimStorage, name: &str, bytes: &[u8]) {
    // Fault-free storage: these only fail if the name exists, which the caller avoids.
    if storage.create(name).is_ok() {
        let _ = storage.append(name, bytes);
        let _ = storage.sync(name);
    }
    let _ = storage.sync_dir();
}

/// A queue written by the engine from a stream of operations, crashed (torn writes allowed),
/// then damaged: up to 8 `(file, offset, xor)` bit flips, and perhaps one file cut short.
fn damaged_segments(input: &mut Input<'_>) -> SimStorage {
    let ops_len = usize::from(input.u16() % 2048);
    let ops = input.take(ops_len);
    let mut storage = written_queue(ops);
    let mut names = storage.list().unwrap_or_default();
    names.sort();
    if names.is_empty() {
        return storage;
    }
    for _ in 0..input.u8() % 9 {
        let name = &names[usize::from(input.u8()) % names.len()];
        let offset = usize::from(input.u16());
        let xor = input.u8().max(1);
        storage.corrupt(name, offset, xor);
    }
    if input.bool() {
        let name = &names[usize::from(input.u8()) % names.len()];
        let size = storage.size(name).unwrap_or(0);
        let cut = u64::from(input.u16()).min(size);
        let _ = storage.truncate(name, cut);
        let _ = storage.sync(name);
    }
    storage
}

/// Runs the stream interpreter on `ops` (without its checks) and returns the disk after a
/// crash.
fn written_queue(ops: &[u8]) -> SimStorage {
    let mut run = Stream::new(ops, false);
    run.run();
    let mut storage = run.into_storage();
    storage.crash();
    // Recovery is judged on what is on disk, not on faults injected while it repairs.
    storage.set_faults(SimFaults::default());
    storage
}

// ---- the replication stream ----------------------------------------------------------------

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
struct Stream<'a> {
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
    fn new(data: &'a [u8], check: bool) -> Self {
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

    fn into_storage(self) -> SimStorage {
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

    fn run(&mut self) {
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
    fn feed_mismatched(&mut self) {
        let Some((_, msg)) = self.build() else {
            return;
        };
        let event = crate::pgoutput::event(&msg);
        let len = usize::from(self.input.u8());
        let payload = self.input.take(len);
        self.feed(payload, event);
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

fn prepare(lsn: Lsn, ts: PgTimestamp, xid: Xid) -> Prepare<'static> {
    Prepare {
        prepare_lsn: lsn,
        end_lsn: Lsn(lsn.0 + 8),
        prepare_time: ts,
        xid,
        gid: b"g",
    }
}
