//! The `delayq_recover` target: segment files cut from the input, or written by the engine and
//! damaged, recovered.

use pgyard_types::{Lsn, UnixTime};

use super::stream::Stream;
use super::{config, Input, SEGMENT_BYTES};
use crate::format::{segment_name, SegmentHeader, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::{verify, DelayQueue, Error, SimFaults, SimStorage, Storage};

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
pub(super) fn cut_segments(shape: u8, input: &mut Input<'_>) -> SimStorage {
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
pub(super) fn damaged_segments(input: &mut Input<'_>) -> SimStorage {
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
