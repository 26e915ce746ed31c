//! The corpus seeds that reach records larger than a segment, built here operation by
//! operation so that they say what they do. The tests check that the committed files
//! (`fuzz/corpus/delayq_*/large_*`) are these bytes and that each reaches what it is for;
//! `PGYARD_WRITE_SEEDS=1 cargo test -p pgyard-delayq --features fuzzing the_committed_seeds_are_these`
//! writes them.

use super::recover::{cut_segments, damaged_segments};
use super::stream::Stream;
use super::{Input, SEGMENT_BYTES};
use crate::format::{
    check_head, decode_record, segment_name, Body, Carry, SegmentHeader, SEGMENT_HEADER_BYTES,
};
use crate::{verify, SimStorage, Storage};

/// Input for the stream interpreter, in the order it reads it.
struct Ops(Vec<u8>);

impl Ops {
    /// Protocol version 4 and a 12 s delay (`setup` 0xC0), plus `faults` bits, default budget.
    fn new(faults: u8) -> Ops {
        let mut v = vec![0xC0 | faults, 0];
        v.extend_from_slice(&1u64.to_le_bytes());
        Ops(v)
    }

    fn op(&mut self, advance: u8, op: u8) {
        self.0.extend_from_slice(&[advance, op]);
    }

    /// A built message of `kind` (outside a stream block) for xid `1 + xid`.
    fn built(&mut self, kind: u8, xid: u8) {
        self.op(0, 0);
        // kind, xid, WAL step, lookahead, timestamp, OID
        self.0.extend_from_slice(&[kind, xid, 1, 0, 0, 0]);
    }

    /// A change (the event of a built Insert) carrying a large payload of
    /// `SEGMENT_BYTES / 2 + 4 * quarter` bytes.
    fn large_change(&mut self, xid: u8, quarter: u16, fill: u8) {
        self.op(0, 7);
        self.0.extend_from_slice(&[2, xid, 1, 0, 0, 0, u8::MAX]);
        self.0.extend_from_slice(&quarter.to_le_bytes());
        self.0.push(fill);
    }

    /// Op 15 with no step back: everything committed is marked applied.
    fn skip_applied(&mut self) {
        self.op(0, 15);
        self.0.extend_from_slice(&[0, 0]);
    }
}

const BEGIN: u8 = 0;
const COMMIT: u8 = 1;
const INSERT: u8 = 2;
const BEGIN_PREPARE: u8 = 10;
const PREPARE: u8 = 11;
const COMMIT_PREPARED: u8 = 12;

/// A prepared transaction with a change of 2.5 segments, 24 committed transactions of half a
/// segment each behind it, all of them applied, a purge (the prepared body is carried forward
/// into a segment of its own), a crash in the middle of another large change, COMMIT
/// PREPARED, a flush, and the hand-out (checked to survive a crash at that moment).
fn large_carried(faults: u8) -> Vec<u8> {
    let mut o = Ops::new(faults);
    o.built(BEGIN_PREPARE, 0);
    o.large_change(0, 2000, 0x5A);
    o.built(INSERT, 0);
    o.built(PREPARE, 0);
    for i in 0..24 {
        o.built(BEGIN, 1);
        o.large_change(1, 0, i);
        o.built(COMMIT, 1);
    }
    o.op(0, 8); // flush
    o.skip_applied();
    o.op(0, 10); // purge
                 // A transaction with a change larger than a segment, cut by the power loss (torn with
                 // the fault bit 0x08), abandoned at the reconnect.
    o.built(BEGIN, 2);
    o.large_change(2, 3000, 7);
    o.op(0, 9); // crash
    o.op(0, 13); // restart_stream
    o.built(COMMIT_PREPARED, 0);
    o.op(0, 8);
    o.op(u8::MAX, 11); // poll, 25.5 s later: due
    o.op(0, 12); // apply
    o.0.push(0);
    o.0
}

/// The stream seeds: without faults, and with torn writes at the crash.
fn stream_seeds() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("large_carried", large_carried(0)),
        ("large_carried_torn", large_carried(0x08)),
    ]
}

/// `delayq_recover` input written by the engine from `ops`, undamaged or with one file (the
/// `victim`-th) cut to `cut` bytes.
fn damaged(ops: &[u8], cut: Option<(u8, u16)>) -> Vec<u8> {
    let mut v = vec![0x80];
    v.extend_from_slice(&(ops.len() as u16).to_le_bytes());
    v.extend_from_slice(ops);
    v.push(0); // no bit flips
    match cut {
        None => v.push(0),
        Some((victim, at)) => {
            v.extend_from_slice(&[1, victim]);
            v.extend_from_slice(&at.to_le_bytes());
        }
    }
    v
}

/// One segment sized to its only record, a NOTE longer than recovery's read window.
fn own_sized_segment() -> Vec<u8> {
    // shape 0: one file, sequence number 1; mode 0x0A: a header, records re-framed, the
    // capacity just what the file holds.
    let mut v = vec![0x00, 0x0A];
    let len = 32 + 65_535;
    let mut rec = vec![0u8; len];
    rec[0..2].copy_from_slice(&u16::MAX.to_le_bytes()); // asks for the longest record
    rec[8] = 6; // kind 1 + 6 = NOTE
    rec[16..24].copy_from_slice(&1u64.to_le_bytes()); // item 1
    rec[24..32].copy_from_slice(&0x1000u64.to_le_bytes());
    for (i, b) in rec[32..].iter_mut().enumerate() {
        *b = (i % 253) as u8;
    }
    v.extend_from_slice(&rec);
    v
}

/// The recover seeds: the carried queue whole, with its large segment cut in the middle of
/// its large record, and a segment sized to one record.
fn recover_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let ops = large_carried(0);
    let whole = damaged(&ops, None);
    let (victim, size) = large_segment(&damaged_segments(&mut Input(&whole[1..])))
        .expect("the carried queue has a large segment");
    let cut = u16::try_from(size / 2).expect("the large segment is shorter than 128 KiB");
    vec![
        ("large_carried", whole.clone()),
        ("large_carried_cut", damaged(&ops, Some((victim, cut)))),
        ("large_own_segment", own_sized_segment()),
    ]
}

/// The position (in name order) and size of the first segment larger than a segment.
fn large_segment(s: &SimStorage) -> Option<(u8, u64)> {
    let mut names = s.list().ok()?;
    names.sort();
    names.iter().enumerate().find_map(|(i, n)| {
        let h = SegmentHeader::decode(s.file(n)?).ok()?;
        let size = s.size(n).ok()?;
        (h.capacity > SEGMENT_BYTES).then_some((i as u8, size))
    })
}

/// The records of segment `name` (whole ones), as (kind is CARRY, length).
fn records(s: &SimStorage, name: &str) -> Vec<(bool, u64)> {
    let bytes = s.file(name).unwrap_or_default();
    let mut off = SEGMENT_HEADER_BYTES as usize;
    let mut out = Vec::new();
    while let Ok(len) = check_head(&bytes[off.min(bytes.len())..], (bytes.len() - off) as u64) {
        let Ok(rec) = decode_record(&bytes[off..off + len as usize]) else {
            break;
        };
        out.push((rec.carry != Carry::No, len));
        off += len as usize;
    }
    out
}

fn corpus(target: &str, name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
        .join(name)
}

/// The committed corpus files are exactly these seeds. With `PGYARD_WRITE_SEEDS=1` the test
/// writes them first (after changing a seed), then checks as always.
#[test]
fn the_committed_seeds_are_these() {
    let write = std::env::var_os("PGYARD_WRITE_SEEDS").is_some_and(|v| v == "1");
    for (target, seeds) in [
        ("delayq_stream", stream_seeds()),
        ("delayq_recover", recover_seeds()),
    ] {
        for (name, bytes) in seeds {
            let path = corpus(target, name);
            if write {
                std::fs::write(&path, &bytes).expect("write seed");
            }
            let file = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(file == bytes, "{} is not its seed", path.display());
        }
    }
}

/// The stream seed leaves the prepared body carried forward into a segment of its own: CARRY
/// records, one of them larger than a segment.
#[test]
fn the_stream_seed_carries_a_body_larger_than_a_segment() {
    for (name, seed) in stream_seeds() {
        let mut run = Stream::new(&seed, true);
        run.run();
        // COMMIT PREPARED after the crash: the carried transaction was handed out.
        assert_eq!(run.handed_out(), 1, "{name}");
        let disk = run.into_storage();
        let (i, _) = large_segment(&disk).unwrap_or_else(|| panic!("{name}: no large segment"));
        let mut names = disk.list().unwrap();
        names.sort();
        let recs = records(&disk, &names[usize::from(i)]);
        assert!(
            recs.iter()
                .any(|&(carry, len)| carry && len > SEGMENT_BYTES),
            "{name}: {recs:?}"
        );
        assert!(recs.iter().all(|&(carry, _)| carry), "{name}: {recs:?}");
    }
}

/// The recover seeds reach a large record: whole, cut in the middle (a torn tail or, in an
/// older segment, corruption naming it), and alone in a segment sized to it.
#[test]
fn the_recover_seeds_reach_large_records() {
    let seeds = recover_seeds();
    let whole = damaged_segments(&mut Input(&seeds[0].1[1..]));
    let (i, _) = large_segment(&whole).expect("large segment");
    let v = verify(&whole).expect("the carried queue verifies");
    assert_eq!(v.torn_tail, None);
    let cut = damaged_segments(&mut Input(&seeds[1].1[1..]));
    let mut names = cut.list().unwrap();
    names.sort();
    let victim = &names[usize::from(i)];
    match verify(&cut) {
        Ok(v) => assert_eq!(v.torn_tail.map(|t| t.file), Some(victim.clone())),
        Err(crate::Error::Corrupt { file, .. }) => assert_eq!(&file, victim),
        Err(e) => panic!("{e}"),
    }
    let own = cut_segments(0, &mut Input(&seeds[2].1[1..]));
    let v = verify(&own).expect("the own-sized segment verifies");
    assert_eq!((v.records, v.torn_tail), (1, None));
    let h = SegmentHeader::decode(own.file(&segment_name(1)).unwrap()).unwrap();
    assert_eq!(h.capacity, SEGMENT_HEADER_BYTES + 32 + 65_535);
    let body = own.file(&segment_name(1)).unwrap();
    let rec = decode_record(&body[SEGMENT_HEADER_BYTES as usize..]).unwrap();
    assert!(matches!(rec.body, Body::Note { raw } if raw.len() == 65_535));
}
