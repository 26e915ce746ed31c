//! Real file system: a child process ingests a deterministic stream and is SIGKILLed at random
//! moments; the parent recovers the queue after every kill and checks it.

use pgyard_delayq::{
    verify, Config, DelayQueue, Error, Event, FsStorage, Ready, Received, Storage, StorageError,
};
use pgyard_types::{Lsn, PgTimestamp, UnixTime, Xid};
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "DELAYQ_CHILD";

/// Splits every append into small writes so that a kill can tear a record.
struct Chunky(FsStorage);

impl Storage for Chunky {
    fn list(&self) -> Result<Vec<String>, StorageError> {
        self.0.list()
    }
    fn create(&mut self, name: &str) -> Result<(), StorageError> {
        self.0.create(name)
    }
    fn append(&mut self, name: &str, data: &[u8]) -> Result<(), StorageError> {
        for part in data.chunks(97) {
            self.0.append(name, part)?;
        }
        Ok(())
    }
    fn read(&self, name: &str, offset: u64, buf: &mut [u8]) -> Result<usize, StorageError> {
        self.0.read(name, offset, buf)
    }
    fn size(&self, name: &str) -> Result<u64, StorageError> {
        self.0.size(name)
    }
    fn sync(&mut self, name: &str) -> Result<(), StorageError> {
        self.0.sync(name)
    }
    fn sync_dir(&mut self) -> Result<(), StorageError> {
        self.0.sync_dir()
    }
    fn remove(&mut self, name: &str) -> Result<(), StorageError> {
        self.0.remove(name)
    }
    fn rename(&mut self, from: &str, to: &str) -> Result<(), StorageError> {
        self.0.rename(from, to)
    }
    fn truncate(&mut self, name: &str, len: u64) -> Result<(), StorageError> {
        self.0.truncate(name, len)
    }
}

fn config() -> Config {
    Config {
        segment_bytes_max: 16 << 10,
        write_buffer_bytes: 0,
        ..Config::default()
    }
}

/// Transaction `i` of the deterministic stream: its events with payloads.
fn txn(i: u64) -> Vec<(Event, Vec<u8>)> {
    let base = i * 0x1000;
    let commit = Lsn(base + 0x800);
    let ts = PgTimestamp(i as i64 * 1_000_000);
    let mut v = vec![(
        Event::Begin {
            xid: Xid(i as u32),
            final_lsn: commit,
            commit_ts: ts,
        },
        format!("B{i}").into_bytes(),
    )];
    for j in 0..(i % 5 + 1) {
        let pad = "x".repeat(((i * 7 + j * 13) % 200) as usize);
        v.push((
            Event::Change { xid: None },
            format!("I{i}.{j}{pad}").into_bytes(),
        ));
    }
    v.push((
        Event::Commit {
            commit_lsn: commit,
            end_lsn: Lsn(base + 0x900),
            commit_ts: ts,
        },
        format!("C{i}").into_bytes(),
    ));
    v
}

/// The child: resumes where the queue says and ingests until killed.
#[test]
fn crash_child() {
    let Ok(dir) = std::env::var(CHILD_ENV) else {
        return;
    };
    let storage = Chunky(FsStorage::open(&dir).unwrap());
    let mut q = DelayQueue::open(storage, config()).unwrap();
    q.restart_stream(UnixTime(0)).unwrap();
    let resume = q.resume_lsn();
    // Like the publisher: skip transactions whose commit starts before the resume point.
    let mut i = (resume.0 / 0x1000).max(1);
    if Lsn(i * 0x1000 + 0x800) < resume {
        i += 1;
    }
    let out = std::io::stdout();
    let mut since_flush = 0;
    loop {
        for (e, p) in txn(i) {
            q.handle(
                UnixTime(0),
                Received {
                    wal_lsn: Lsn::INVALID,
                    payload: &p,
                    event: e,
                },
            )
            .unwrap();
        }
        since_flush += 1;
        if since_flush == 10 {
            since_flush = 0;
            let lsn = q.flush().unwrap();
            let mut o = out.lock();
            writeln!(o, "FLUSHED {} {}", lsn.0, i).unwrap();
            o.flush().unwrap();
        }
        i += 1;
    }
}

/// A tiny deterministic generator for kill times.
fn lcg(state: &mut u64) -> u64 {
    *state = state
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    *state >> 33
}

#[test]
fn sigkill_during_ingest_recovers_everything_flushed() {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut seed = 0x5eed_u64;
    let mut flushed_max = Lsn(0);
    let mut torn = 0;
    let kills = 12;
    for round in 0..kills {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(40 + lcg(&mut seed) % 160));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let mut text = String::new();
        child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut text)
            .unwrap();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("FLUSHED ") {
                let lsn: u64 = rest.split(' ').next().unwrap().parse().unwrap();
                flushed_max = flushed_max.max(Lsn(lsn));
            }
        }
        // Every other round, also emulate a write torn by power loss: the first bytes of a
        // record (a plausible header claiming more than is there) at the end of the newest
        // segment.
        if round % 2 == 1 {
            let mut segs: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().path())
                .collect();
            segs.sort();
            if let Some(last) = segs.last() {
                let bytes = std::fs::read(last).unwrap();
                if bytes.len() > 72 + 32 {
                    let len = u32::from_le_bytes(bytes[72..76].try_into().unwrap()) as usize;
                    let mut f = std::fs::OpenOptions::new().append(true).open(last).unwrap();
                    f.write_all(&bytes[72..72 + len - 1]).unwrap();
                }
            }
        }
        // verify never changes anything and never calls a torn tail corruption.
        let report = verify(&FsStorage::open(dir.path()).unwrap()).unwrap();
        let mut q = DelayQueue::open(FsStorage::open(dir.path()).unwrap(), config()).unwrap();
        if let Some(t) = &q.recovery().torn_tail {
            torn += 1;
            assert_eq!(report.torn_tail.as_ref(), Some(t));
            let seg = q.inspect().segments.last().unwrap().clone();
            assert!(seg.file == t.file || t.offset == 0);
        }
        assert!(
            q.resume_lsn() >= flushed_max,
            "round {round}: resume {} below reported flush {}",
            q.resume_lsn(),
            flushed_max
        );
        // Everything committed at or below a reported flush LSN is there, intact, in order,
        // exactly once; nothing beyond the first missing transaction.
        let mut next = 1u64;
        while let Some(r) = q.poll_ready(UnixTime(i64::MAX)).unwrap() {
            let Ready::Transaction(t) = r else {
                panic!("unexpected message")
            };
            assert_eq!(t.xid, Xid(next as u32), "round {round}");
            let want: Vec<Vec<u8>> = txn(next).into_iter().map(|(_, p)| p).collect();
            assert_eq!(
                t.messages, want,
                "round {round}: transaction {next} damaged"
            );
            next += 1;
        }
        let last_end = Lsn((next - 1) * 0x1000 + 0x900);
        assert!(
            next == 1 && flushed_max == Lsn(0) || last_end >= flushed_max,
            "round {round}: only {} transactions survived, flush reported {flushed_max}",
            next - 1
        );
        drop(q);
    }
    println!("{kills} kills, {torn} torn tails truncated, flushed up to {flushed_max}");
    assert!(torn >= kills / 2);
    assert!(flushed_max > Lsn(0), "the child never flushed");
}

#[test]
fn flipped_byte_in_older_segment_names_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut q = DelayQueue::open(FsStorage::open(dir.path()).unwrap(), config()).unwrap();
    for i in 1..200 {
        for (e, p) in txn(i) {
            q.handle(
                UnixTime(0),
                Received {
                    wal_lsn: Lsn::INVALID,
                    payload: &p,
                    event: e,
                },
            )
            .unwrap();
        }
    }
    q.flush().unwrap();
    let segs = q.inspect().segments;
    assert!(segs.len() >= 3);
    drop(q);
    let victim = &segs[1];
    let path = dir.path().join(&victim.file);
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let err = verify(&FsStorage::open(dir.path()).unwrap()).unwrap_err();
    let Error::Corrupt { file, offset, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(file, &victim.file);
    assert!(*offset <= at as u64);
    let err2 = DelayQueue::open(FsStorage::open(dir.path()).unwrap(), config()).unwrap_err();
    assert_eq!(err, err2);
    // Nothing was changed by either.
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}
