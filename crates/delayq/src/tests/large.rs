//! Changes larger than a segment (a segment of their own), changes stored without passing
//! through the write buffer, and one transaction larger than the whole disk budget.

use super::*;

both!(
    a_change_larger_than_a_segment_gets_a_segment_of_its_own,
    a_transaction_larger_than_the_budget_streams_through,
    a_streamed_transaction_larger_than_the_budget_streams_through,
    a_damaged_large_record_in_an_older_segment_is_corruption,
);

/// `n` bytes that differ from position to position (a torn or shifted copy shows), tagged.
pub(super) fn big(tag: u8, n: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(n);
    v.push(tag);
    let mut x = 0x9E37_79B9u32 ^ u32::from(tag);
    while v.len() < n {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

/// A plain transaction whose change `at` is replaced by `payload`.
pub(super) fn with_change(mut t: Msgs, at: usize, payload: Vec<u8>) -> Msgs {
    t[1 + at].1 = payload;
    t
}

fn a_change_larger_than_a_segment_gets_a_segment_of_its_own<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    // 3 segments' worth, and one longer than recovery's read window (checked piece by piece).
    let large = big(b'L', 3 * 4096);
    let huge = big(b'H', 100_000);
    feed(&mut q, &g.plain(1, 1, 2));
    let t2 = with_change(g.plain(2, 1, 3), 1, large.clone());
    feed(&mut q, &t2);
    feed(&mut q, &with_change(g.plain(3, 1, 1), 0, huge.clone()));
    // A non-transactional message of any size too.
    let mut note = g.note("n");
    note[0].1 = big(b'M', 9000);
    feed(&mut q, &note);
    feed(&mut q, &g.plain(4, 1, 1));
    q.flush().unwrap();
    let segs = q.inspect().segments;
    let own: Vec<_> = segs.iter().filter(|s| s.capacity > 4096).collect();
    assert_eq!(own.len(), 3, "{segs:?}");
    for s in &own {
        // Sized to the record: full, and the next record went into a new segment.
        assert_eq!(s.valid_bytes, s.capacity, "{s:?}");
        assert_eq!(s.records, 1, "{s:?}");
    }
    assert!(own[1].capacity > 100_000);
    assert_eq!(segs.last().unwrap().capacity, 4096);
    assert_eq!(verify(q.storage()).unwrap().torn_tail, None);
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    assert_eq!(q.inspect().segments, segs);
    let mut got = Vec::new();
    while let Some(r) = q.poll_ready(at(10)).unwrap() {
        got.push(r.clone());
        q.mark_applied(r.id()).unwrap();
    }
    let Ready::Transaction(t) = &got[1] else {
        panic!("{got:?}")
    };
    let want: Vec<Vec<u8>> = t2.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(t.messages, want);
    let Ready::Transaction(t) = &got[2] else {
        panic!("{got:?}")
    };
    assert_eq!(t.messages[1], huge);
    let Ready::Message(m) = &got[3] else {
        panic!("{got:?}")
    };
    assert_eq!(m.payload, big(b'M', 9000));
    assert_eq!(got.len(), 5);
    // Applied and purged like any other: only the active segment stays.
    q.purge().unwrap();
    assert_eq!(q.inspect().segments.len(), 1);
}

/// A producer that honours `Pause` and `Full` but can apply only what is due now (the delay is
/// an hour): every stop must be one that time alone ends.
fn offer_or_stop<S: Storage>(q: &mut DelayQueue<S>, m: &(Event, Vec<u8>)) -> bool {
    q.flow() == Flow::Read && offer(q, m)
}

fn a_transaction_larger_than_the_budget_streams_through<H: Harness>(h: &mut H) {
    let cfg = Config {
        delay: Duration::from_secs(3600),
        ..tiny_budget()
    };
    let mut q = DelayQueue::open(h.fresh(), cfg.clone()).unwrap();
    let mut g = Gen::default();
    // Committed work that is not due for an hour, in the segment the big transaction
    // begins in: counting the big one's bytes, the queue would pause until then, and applying
    // this would not even free them.
    for xid in 1..4 {
        feed(&mut q, &g.plain(xid, 1, 3));
    }
    // Six times the whole budget, one change larger than a segment among them.
    let mut t = g.plain(100, 2, 200);
    for (i, m) in t[1..201].iter_mut().enumerate() {
        m.1 = format!("I100.{i}.{}", "x".repeat(400)).into_bytes();
    }
    t[51].1 = big(b'T', 3 * 4096);
    let (body, commit) = t.split_at(t.len() - 1);
    let mut over = false;
    for m in body {
        assert!(
            offer_or_stop(&mut q, m),
            "stopped inside the big transaction: {} of {} bytes counted",
            q.budget_bytes(),
            q.disk_bytes()
        );
        // Over the budget, and reported so: the disk holds more than the budget, while the
        // bytes counted against it stay below the low watermark.
        if q.disk_bytes() > cfg.disk_bytes_max {
            over = true;
            assert!(q.budget_bytes() < cfg.disk_low_watermark_bytes);
            let i = q.inspect();
            assert!(i.disk_bytes > cfg.disk_bytes_max && i.budget_bytes == q.budget_bytes());
        }
    }
    assert!(over, "the transaction never went over the budget");
    assert!(offer_or_stop(&mut q, &commit[0]));
    q.flush().unwrap();
    // Committed, it counts: what applying it will free. New work waits for that.
    assert_eq!(q.flow(), Flow::Pause);
    assert!(!offer(&mut q, &g.plain(101, 3, 1)[0]));
    assert_eq!(drain(&mut q, at(2)), Vec::<String>::new());
    let Some(Ready::Transaction(first)) = q.poll_ready(at(3601)).unwrap() else {
        panic!("nothing due after the delay");
    };
    q.mark_applied(first.id).unwrap();
    assert_eq!(drain(&mut q, at(3602)), ["C2", "C3", "C100"]);
    q.purge().unwrap();
    assert_eq!(q.flow(), Flow::Read);
    assert_eq!(q.inspect().segments.len(), 1);
}

fn a_streamed_transaction_larger_than_the_budget_streams_through<H: Harness>(h: &mut H) {
    let cfg = Config {
        delay: Duration::from_secs(3600),
        ..tiny_budget()
    };
    let mut q = DelayQueue::open(h.fresh(), cfg.clone()).unwrap();
    let mut g = Gen::default();
    let mut stream = g.plain(1, 1, 2);
    // Chunks of a streamed transaction interleaved with small transactions that commit
    // (and are not due for an hour): 20 blocks of 8 changes of about 400 bytes, and a change
    // larger than a segment.
    for block in 0..20u32 {
        let mut b = g.stream_block(700, block == 0, &[700; 8]);
        for m in &mut b[1..9] {
            m.1.extend_from_slice(&[b'y'; 400]);
        }
        if block == 7 {
            b[3].1 = big(b'S', 2 * 4096);
        }
        stream.extend(b);
        if block % 5 == 4 {
            stream.extend(g.plain(10 + block, 1, 1));
        }
    }
    for m in &stream {
        assert!(
            offer_or_stop(&mut q, m),
            "stopped inside the streamed transaction: {} of {} bytes counted",
            q.budget_bytes(),
            q.disk_bytes()
        );
    }
    assert!(q.disk_bytes() > cfg.disk_bytes_max);
    // Nothing can be freed before the committed work is due, and the open transaction holds
    // no place in the budget: the producer reads on.
    q.flush().unwrap();
    q.purge().unwrap();
    assert_eq!(q.flow(), Flow::Read);
    for m in &g.stream_commit(700, 2) {
        assert!(offer_or_stop(&mut q, m));
    }
    q.flush().unwrap();
    assert_eq!(q.flow(), Flow::Pause);
    let mut q = DelayQueue::open(h.crash(q.into_storage()), cfg).unwrap();
    let mut got = Vec::new();
    while let Some(r) = q.poll_ready(at(3602)).unwrap() {
        let Ready::Transaction(t) = &r else {
            panic!("{r:?}")
        };
        if t.xid == Xid(700) {
            assert_eq!(t.messages.len(), 20 * 8 + 1);
            assert_eq!(t.messages[7 * 8 + 2], big(b'S', 2 * 4096));
        }
        got.push(t.xid.0);
        q.mark_applied(r.id()).unwrap();
    }
    assert_eq!(got, [1, 14, 19, 24, 29, 700]);
    q.purge().unwrap();
    assert_eq!(q.flow(), Flow::Read);
}

fn a_damaged_large_record_in_an_older_segment_is_corruption<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    feed(
        &mut q,
        &with_change(g.plain(1, 1, 1), 0, big(b'D', 200_000)),
    );
    feed(&mut q, &g.plain(2, 1, 1));
    q.flush().unwrap();
    let own = q.inspect().segments[1].clone();
    assert!(own.capacity > 200_000, "{own:?}");
    // Far into the record: only the piece-by-piece checksum sees it.
    let s = h.xor_byte(q.into_storage(), &own.file, 150_000);
    let err = verify(&s).unwrap_err();
    assert!(
        matches!(&err, Error::Corrupt { file, offset: 72, .. } if *file == own.file),
        "{err}"
    );
    assert_eq!(DelayQueue::open(s, small()).unwrap_err(), err);
}

/// A record of a megabyte or more skips the write buffer at any segment size, and is read
/// back whole.
#[test]
fn a_megabyte_change_is_written_from_the_callers_bytes() {
    let mut q = DelayQueue::open(SimStorage::new(3), Config::default()).unwrap();
    let mut g = Gen::default();
    let t = with_change(g.plain(1, 1, 2), 1, big(b'X', 3 << 20));
    // Its record is on the disk as soon as it is accepted: nothing of it waits in the buffer.
    for m in &t[..3] {
        feed(&mut q, std::slice::from_ref(m));
    }
    let seg = q.inspect().segments[0].clone();
    assert!(q.storage().file(&seg.file).unwrap().len() as u64 == seg.valid_bytes);
    assert!(seg.valid_bytes > 3 << 20);
    feed(&mut q, &t[3..]);
    q.flush().unwrap();
    // Written, but not yet durable: the flush still has an fsync to do.
    let mut note = g.note("n");
    note[0].1 = big(b'Y', 2 << 20);
    feed(&mut q, &note);
    assert!(q.needs_flush());
    q.flush().unwrap();
    let mut s = q.into_storage();
    s.crash();
    let mut q = DelayQueue::open(s, Config::default()).unwrap();
    let Some(Ready::Transaction(r)) = q.poll_ready(at(5)).unwrap() else {
        panic!("not handed out");
    };
    let want: Vec<Vec<u8>> = t.iter().map(|(_, p)| p.clone()).collect();
    assert_eq!(r.messages, want);
    q.mark_applied(r.id).unwrap();
    let Some(Ready::Message(m)) = q.poll_ready(at(5)).unwrap() else {
        panic!("the message is lost");
    };
    assert_eq!(m.payload, note[0].1);
}

/// A large record refused for want of space changes nothing, and goes in once there is room.
#[test]
fn no_space_for_a_large_record_refuses_it_and_changes_nothing() {
    let mut q = DelayQueue::open(SimStorage::new(5), small()).unwrap();
    let mut g = Gen::default();
    feed(&mut q, &g.plain(1, 1, 1));
    q.flush().unwrap();
    let used = q.disk_bytes();
    let mut s = q.into_storage();
    s.set_faults(SimFaults {
        capacity_bytes: Some(used + 6000),
        ..SimFaults::default()
    });
    let mut q = DelayQueue::open(s, small()).unwrap();
    let t = with_change(g.plain(2, 1, 2), 0, big(b'N', 9000));
    feed(&mut q, &t[..1]);
    let before = q.inspect();
    let flushed = q.flush_lsn();
    let r = q.handle(
        at(0),
        Received {
            wal_lsn: Lsn::INVALID,
            payload: &t[1].1,
            event: t[1].0,
        },
    );
    let err = r.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    assert_eq!(q.inspect().transactions, before.transactions);
    assert_eq!(q.flush_lsn(), flushed);
    // Nothing of it stays on the disk either: the file was cut back.
    q.flush().unwrap();
    let mut s = q.into_storage();
    s.crash();
    let last = s.list().unwrap().into_iter().max().unwrap();
    let len = s.size(&last).unwrap();
    assert!(len < 4096, "{last}: {len} bytes");
    s.set_faults(SimFaults::default());
    let mut q = DelayQueue::open(s, small()).unwrap();
    q.restart_stream(at(0)).unwrap();
    let t = with_change(g.plain(3, 1, 2), 0, big(b'N', 9000));
    feed(&mut q, &t);
    q.flush().unwrap();
    assert_eq!(drain(&mut q, at(5)), ["C1", "C3"]);
}
