//! `delayq_append/{pgyard,raw_fdatasync}`: a seeded stream of transactions (Begin, 1–8 changes
//! of 1–8 KiB each, Commit; 32 MiB of pgoutput payload) written to a fresh directory with a
//! flush point every 1 MiB of payload and one at the end. `pgyard` feeds every message to
//! `DelayQueue::handle` and calls `flush()` at the flush points; `raw_fdatasync` writes the same
//! payload bytes, one `write` per message, into one file created beforehand and calls
//! `fdatasync` at the same points: the physical floor.
//!
//! `delayq_recover/pgyard`: `DelayQueue::open` (the recovery scan) of a queue holding 256 MiB
//! of payload, built once before timing; after the first scan the files are in the page cache.
//!
//! Goals: append ≥ 90% of the raw throughput; recovery ≥ 1 GB/s from the page cache. Both
//! groups count throughput in payload bytes (append) and segment file bytes (recover).

use std::fs::{self, File};
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, SamplingMode, Throughput};
use pgyard_delayq::{Config, DelayQueue, Event, FsStorage, Received, Storage};
use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};

/// Seed of the stream generator.
const SEED: u64 = 0xde1a_7b0e_5eed;

/// Payload bytes per `delayq_append` iteration.
const APPEND_BYTES: u64 = 32 << 20;

/// Payload bytes of the queue `delayq_recover` opens.
const RECOVER_BYTES: u64 = 256 << 20;

/// A flush point after the message that crosses each multiple of this many payload bytes.
const FLUSH_EVERY: u64 = 1 << 20;

/// Wire sizes of pgoutput's Begin and Commit messages.
const BEGIN_LEN: usize = 21;
const COMMIT_LEN: usize = 26;

/// SplitMix64: small, seeded, platform-independent.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi` (modulo bias is irrelevant here).
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
}

/// One pgoutput message of the stream: its meaning, where it arrived, and its payload as a
/// window of the stream's byte pool.
struct Msg {
    event: Event,
    wal_lsn: Lsn,
    start: usize,
    len: usize,
    /// A flush point follows this message.
    flush: bool,
}

/// The seeded stream: messages plus the pool their payloads are cut from.
struct Stream {
    pool: Vec<u8>,
    msgs: Vec<Msg>,
    payload_bytes: u64,
    transactions: usize,
}

impl Stream {
    /// Whole transactions until at least `bytes` of payload; the last message is a flush point.
    fn new(bytes: u64) -> Stream {
        let mut rng = Rng(SEED);
        // Random bytes, so nothing on the way can shortcut repeated content.
        let pool: Vec<u8> = (0..(64 << 10) / 8)
            .flat_map(|_| rng.next().to_le_bytes())
            .collect();
        let mut s = Stream {
            pool,
            msgs: Vec::new(),
            payload_bytes: 0,
            transactions: 0,
        };
        let mut lsn = 0x0100_0000_u64;
        while s.payload_bytes < bytes {
            s.transactions += 1;
            let txn = u32::try_from(s.transactions).expect("fewer than 2^32 transactions");
            let sizes: Vec<usize> = (0..rng.range(1, 8))
                .map(|_| rng.range(1024, 8192) as usize)
                .collect();
            // LSNs advance with the payload, as WAL does with the changes it logs.
            let begin_lsn = lsn;
            let commit_lsn = begin_lsn + sizes.iter().sum::<usize>() as u64 + 64;
            let end_lsn = commit_lsn + 64;
            let ts = PgTimestamp(800_000_000_000_000 + i64::from(txn) * 1_000);
            let begin = Event::Begin {
                xid: Xid(1_000 + txn),
                final_lsn: Lsn(commit_lsn),
                commit_ts: ts,
            };
            s.push(&mut rng, begin, begin_lsn, BEGIN_LEN);
            let mut at = begin_lsn;
            for len in sizes {
                s.push(&mut rng, Event::Change { xid: None }, at, len);
                at += len as u64;
            }
            let commit = Event::Commit {
                commit_lsn: Lsn(commit_lsn),
                end_lsn: Lsn(end_lsn),
                commit_ts: ts,
            };
            s.push(&mut rng, commit, commit_lsn, COMMIT_LEN);
            lsn = end_lsn;
        }
        if let Some(last) = s.msgs.last_mut() {
            last.flush = true;
        }
        s
    }

    /// Appends a message whose payload is `len` bytes from a random place in the pool.
    fn push(&mut self, rng: &mut Rng, event: Event, wal_lsn: u64, len: usize) {
        let start = rng.range(0, (self.pool.len() - len) as u64) as usize;
        let before = self.payload_bytes;
        self.payload_bytes += len as u64;
        self.msgs.push(Msg {
            event,
            wal_lsn: Lsn(wal_lsn),
            start,
            len,
            flush: before / FLUSH_EVERY != self.payload_bytes / FLUSH_EVERY,
        });
    }

    fn payload(&self, m: &Msg) -> &[u8] {
        &self.pool[m.start..m.start + m.len]
    }

    fn flush_points(&self) -> usize {
        self.msgs.iter().filter(|m| m.flush).count()
    }
}

/// Feeds the whole stream to `q`, flushing at the flush points.
#[inline(never)]
fn append_pgyard<S: Storage>(q: &mut DelayQueue<S>, stream: &Stream) {
    let now = UnixTime(1_700_000_000_000_000);
    for m in &stream.msgs {
        let msg = Received {
            wal_lsn: m.wal_lsn,
            payload: stream.payload(m),
            event: m.event,
        };
        q.handle(now, msg).expect("the queue accepts the stream");
        if m.flush {
            q.flush().expect("flush");
        }
    }
}

/// Writes the stream's payloads to `f`, one `write` per message, `fdatasync` at flush points.
#[inline(never)]
fn append_raw(f: &mut File, stream: &Stream) {
    for m in &stream.msgs {
        f.write_all(stream.payload(m)).expect("write");
        if m.flush {
            f.sync_data().expect("fdatasync");
        }
    }
}

/// A scratch folder under the system temporary folder, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("pgyard-bench-delayq-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).expect("create the scratch folder");
        Scratch(dir)
    }

    /// A new empty folder `name` inside (emptied first if it exists).
    fn fresh(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).expect("create a scratch subfolder");
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Opens a new queue in an empty `dir`.
fn new_queue(dir: &Path) -> DelayQueue<FsStorage> {
    let storage = FsStorage::open(dir).expect("open the queue folder");
    DelayQueue::open(storage, Config::default()).expect("open an empty queue")
}

/// Total size of the files in `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .expect("list the queue folder")
        .map(|e| e.expect("folder entry").metadata().expect("stat").len())
        .sum()
}

fn delayq_append(c: &mut Criterion, scratch: &Scratch) {
    let stream = Stream::new(APPEND_BYTES);
    eprintln!(
        "delayq_append: {} messages, {} transactions, {} payload bytes, {} flush points",
        stream.msgs.len(),
        stream.transactions,
        stream.payload_bytes,
        stream.flush_points()
    );
    // The stream is accepted whole and survives a reopen.
    {
        let dir = scratch.fresh("append-check");
        let mut q = new_queue(&dir);
        append_pgyard(&mut q, &stream);
        let q = DelayQueue::open(q.into_storage(), Config::default()).expect("reopen");
        assert_eq!(q.inspect().transactions.len(), stream.transactions);
        assert_eq!(q.recovery().torn_tail, None);
    }

    let mut group = c.benchmark_group("delayq_append");
    group
        .throughput(Throughput::Bytes(stream.payload_bytes))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(10));
    // Each iteration starts from an empty folder; opening and removing it are not timed.
    group.bench_function("pgyard", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let dir = scratch.fresh("append");
                let mut q = new_queue(&dir);
                let start = Instant::now();
                append_pgyard(&mut q, black_box(&stream));
                timed += start.elapsed();
                drop(q);
            }
            timed
        })
    });
    group.bench_function("raw_fdatasync", |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let dir = scratch.fresh("append");
                let mut f = File::create(dir.join("raw")).expect("create the raw file");
                let start = Instant::now();
                append_raw(&mut f, black_box(&stream));
                timed += start.elapsed();
                drop(f);
            }
            timed
        })
    });
    group.finish();
}

fn delayq_recover(c: &mut Criterion, scratch: &Scratch) {
    let stream = Stream::new(RECOVER_BYTES);
    let dir = scratch.fresh("recover");
    let mut q = new_queue(&dir);
    append_pgyard(&mut q, &stream);
    drop(q);
    let bytes = dir_bytes(&dir);
    let q = DelayQueue::open(FsStorage::open(&dir).expect("open"), Config::default())
        .expect("recover the queue");
    assert_eq!(q.recovery().torn_tail, None);
    assert_eq!(q.inspect().transactions.len(), stream.transactions);
    eprintln!(
        "delayq_recover: {} segments, {} records, {bytes} bytes on disk",
        q.recovery().segments,
        q.recovery().records
    );
    drop(q);

    let mut group = c.benchmark_group("delayq_recover");
    group
        .throughput(Throughput::Bytes(bytes))
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(6));
    // The recovered queue is dropped outside the timing (criterion drops batched outputs after
    // the measurement).
    group.bench_function("pgyard", |b| {
        b.iter_batched(
            || FsStorage::open(&dir).expect("open the queue folder"),
            |storage| DelayQueue::open(storage, Config::default()).expect("recover"),
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

fn main() {
    // `criterion_main!` spelled out: its generated `pub fn` would lack a doc comment.
    let mut c = Criterion::default().configure_from_args();
    let scratch = Scratch::new();
    delayq_append(&mut c, &scratch);
    delayq_recover(&mut c, &scratch);
    c.final_summary();
}
