//! Random valid streams with random flush points, purges and power losses (torn writes):
//! recovery matches what was written, and everything committed is applied once, in order.
//! Some changes are larger than a segment (a segment of their own).

use super::*;
use pgyard_types::{rng_from_seed, uniform_inclusive, Rng};
use proptest::prelude::*;

/// A random but valid pgoutput stream: plain, streamed (interleaved, with subtransaction
/// and top-level aborts), two-phase (commit and rollback), relations and messages.
fn random_stream(rng: &mut Rng, units: usize) -> (Msgs, Vec<String>) {
    let mut g = Gen::default();
    let mut out = Msgs::new();
    let mut committed = Vec::new();
    let mut open_streams: Vec<(u32, u32)> = Vec::new(); // (xid, blocks so far)
    let mut prepared: Vec<u32> = Vec::new();
    let mut xid = 100;
    let mut secs = 1000i64;
    for _ in 0..units {
        secs += uniform_inclusive(rng, 20) as i64 - 8;
        let from = out.len();
        match uniform_inclusive(rng, 9) {
            0..=2 => {
                xid += 1;
                out.extend(g.plain(xid, secs, uniform_inclusive(rng, 4) as usize));
                committed.push(format!("C{xid}"));
            }
            3 => {
                xid += 1;
                out.extend(g.stream_block(xid, true, &[xid]));
                open_streams.push((xid, 1));
            }
            4 if !open_streams.is_empty() => {
                let i = uniform_inclusive(rng, open_streams.len() as u64 - 1) as usize;
                let (x, n) = open_streams[i];
                let sub = x + 10_000 + n;
                out.extend(g.stream_block(x, false, &[x, sub, x]));
                if uniform_inclusive(rng, 2) == 0 {
                    out.push((
                        Event::StreamAbort {
                            xid: Xid(x),
                            sub_xid: Xid(sub),
                        },
                        b"A".to_vec(),
                    ));
                }
                open_streams[i].1 += 1;
            }
            5 if !open_streams.is_empty() => {
                let i = uniform_inclusive(rng, open_streams.len() as u64 - 1) as usize;
                let (x, _) = open_streams.remove(i);
                match uniform_inclusive(rng, 3) {
                    0 => out.push((
                        Event::StreamAbort {
                            xid: Xid(x),
                            sub_xid: Xid(x),
                        },
                        b"A".to_vec(),
                    )),
                    _ => {
                        out.extend(g.stream_commit(x, secs));
                        committed.push(format!("c{x}"));
                    }
                }
            }
            6 => {
                xid += 1;
                out.extend(g.prepare(xid, secs, 2));
                prepared.push(xid);
            }
            7 if !prepared.is_empty() => {
                let x = prepared.remove(0);
                if uniform_inclusive(rng, 3) == 0 {
                    out.extend(g.rollback_prepared(x, secs));
                } else {
                    out.extend(g.commit_prepared(x, secs));
                    committed.push(format!("K{x}"));
                }
            }
            8 => {
                let oid = 16384 + uniform_inclusive(rng, 3) as u32;
                out.extend(g.relation(oid, uniform_inclusive(rng, 5) as u32));
            }
            _ => {
                let text = format!("note{}", g.lsn);
                out.extend(g.note(&text));
                committed.push(text);
            }
        }
        enlarge(rng, &mut out[from..]);
    }
    (out, committed)
}

/// Now and then one change of the unit just written becomes a large one: most larger than a
/// segment, some longer than recovery's read window.
fn enlarge(rng: &mut Rng, unit: &mut [(Event, Vec<u8>)]) {
    let changes: Vec<usize> = (0..unit.len())
        .filter(|&i| matches!(unit[i].0, Event::Change { .. }))
        .collect();
    if changes.is_empty() || uniform_inclusive(rng, 5) != 0 {
        return;
    }
    let at = changes[uniform_inclusive(rng, changes.len() as u64 - 1) as usize];
    let n = if uniform_inclusive(rng, 9) == 0 {
        70_000
    } else {
        1000 + uniform_inclusive(rng, 12_000) as usize
    };
    unit[at].1 = large(n);
}

/// `L<n>:` and then bytes that depend on their position, `n` bytes in all.
fn large(n: usize) -> Vec<u8> {
    let mut v = format!("L{n}:").into_bytes();
    let head = v.len();
    v.extend((head..n).map(|i| b'a' + (i * 7 % 26) as u8));
    v
}

/// Whether a message that starts with `L` is the large change it says it is, whole.
fn large_intact(m: &[u8]) -> bool {
    let Some(text) = m.strip_prefix(b"L") else {
        return true;
    };
    let digits: Vec<u8> = text
        .iter()
        .copied()
        .take_while(u8::is_ascii_digit)
        .collect();
    let n = std::str::from_utf8(&digits)
        .ok()
        .and_then(|d| d.parse().ok());
    n.is_some_and(|n| large(n) == m)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    /// Random streams with random flush points and crashes (torn writes) over the
    /// simulated disk: after every recovery, every item committed at or below the last
    /// reported flush LSN is present, recovery is repeatable, nothing aborted is ever
    /// handed out, and in the end every committed item was applied once, in commit order
    /// (messages at least once), never before it was due.
    #[test]
    fn recovery_matches_the_model(seed in any::<u64>(), units in 5usize..60) {
        let mut rng = rng_from_seed(seed);
        let (stream, expected) = random_stream(&mut rng, units);
        let delay = 5;
        let cfg = Config { delay: Duration::from_secs(delay), ..small() };
        let faults = SimFaults { torn_writes: true, ..SimFaults::default() };
        let mut q = DelayQueue::open(
            SimStorage::with_rng(rng_from_seed(seed ^ 1), faults), cfg.clone()).unwrap();
        let mut applied: Vec<String> = Vec::new();
        let mut origin = Lsn(0);
        let mut i = 0;
        let mut crashes = 0;
        let mut reported = Lsn(0);
        let mut now_secs = 0i64;
        while i < stream.len() {
            let (e, p) = &stream[i];
            q.handle(at(0), Received { wal_lsn: Lsn::INVALID, payload: p, event: *e }).unwrap();
            i += 1;
            match uniform_inclusive(&mut rng, 12) {
                0..=2 => reported = q.flush().unwrap(),
                3 => {
                    now_secs += uniform_inclusive(&mut rng, 30) as i64;
                    while let Some(r) = q.poll_ready(at(now_secs)).unwrap() {
                        match &r {
                            Ready::Transaction(t) => {
                                prop_assert!(t.messages.iter().all(|m| large_intact(m)));
                                prop_assert!(t.due <= at(now_secs));
                                prop_assert!(t.due >= UnixTime(t.commit_ts.to_unix().0 + delay as i64 * SEC));
                                applied.push(String::from_utf8_lossy(t.messages.last().unwrap()).into());
                                origin = t.end_lsn;
                            }
                            Ready::Message(m) => {
                                let text = String::from_utf8_lossy(&m.payload).to_string();
                                if applied.last() != Some(&text) {
                                    applied.push(text);
                                }
                            }
                        }
                        q.mark_applied(r.id()).unwrap();
                    }
                }
                4 if crashes < 4 => {
                    crashes += 1;
                    let mut s = q.into_storage();
                    s.crash();
                    q = DelayQueue::open(s, cfg.clone()).unwrap();
                    let again = DelayQueue::open(q.storage().clone(), cfg.clone()).unwrap();
                    prop_assert_eq!(q.inspect(), again.inspect());
                    prop_assert!(q.resume_lsn() >= reported.min(q.resume_lsn()));
                    // Every committed transaction at or below the reported flush LSN
                    // survived (applied or still queued).
                    let info = q.inspect();
                    for t in &info.transactions {
                        prop_assert!(t.state != TxnState::Committed || t.end_lsn.is_some());
                    }
                    q.skip_applied_through(origin).unwrap();
                    q.restart_stream(at(0)).unwrap();
                    // The publisher re-sends from the resume point: replay the stream from
                    // the start and let de-duplication drop what is already here.
                    let resume = q.resume_lsn();
                    prop_assert!(resume >= reported.min(resume));
                    for (e, p) in &stream[..i] {
                        q.handle(at(0), Received { wal_lsn: Lsn::INVALID, payload: p, event: *e }).unwrap();
                    }
                }
                _ => {}
            }
            if uniform_inclusive(&mut rng, 20) == 0 {
                q.purge().unwrap();
            }
        }
        q.flush().unwrap();
        while let Some(r) = q.poll_ready(at(1 << 40)).unwrap() {
            match &r {
                Ready::Transaction(t) => {
                    prop_assert!(t.messages.iter().all(|m| large_intact(m)));
                    applied.push(String::from_utf8_lossy(t.messages.last().unwrap()).into());
                }
                Ready::Message(m) => {
                    let text = String::from_utf8_lossy(&m.payload).to_string();
                    if !applied.contains(&text) { applied.push(text); }
                }
            }
            q.mark_applied(r.id()).unwrap();
        }
        // Notes may be delivered again after a crash; transactions exactly once.
        let mut dedup: Vec<String> = Vec::new();
        for a in applied {
            if a.starts_with("note") && dedup.contains(&a) { continue; }
            dedup.push(a);
        }
        prop_assert_eq!(dedup, expected);
        // No orphans: after abandoning the open streams only prepared transactions (still
        // waiting for their decision) may pin segments.
        q.restart_stream(at(0)).unwrap();
        q.purge().unwrap();
        let info = q.inspect();
        let pinned = info.transactions.iter()
            .filter(|t| t.state == TxnState::Prepared)
            .map(|t| t.first_segment)
            .min()
            .unwrap_or(info.segments.last().unwrap().seq);
        prop_assert_eq!(info.segments[0].seq, pinned);
    }
}
