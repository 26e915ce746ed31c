//! Records read back through the read-ahead window: every hand-out is what was written,
//! whether the records came from the window, from a fresh read, from an older segment or from
//! the active one while more was appended behind them, durable or not yet.

use super::large::{big, with_change};
use super::*;

both!(hand_outs_read_through_the_window_are_what_was_written);

fn hand_outs_read_through_the_window_are_what_was_written<H: Harness>(h: &mut H) {
    let config = Config {
        segment_bytes_max: 256 << 10,
        write_buffer_bytes: 4 << 10,
        ..delayed(0)
    };
    let mut q = DelayQueue::open(h.fresh(), config).unwrap();
    let mut g = Gen::default();
    let mut fed: Vec<Msgs> = Vec::new();
    let mut next_out = 0usize;
    for xid in 1..=240u32 {
        // Changes of 10 bytes to 9 KiB: some records straddle a window's end.
        let size = 10 + (xid as usize * 7919) % (9 << 10);
        let t = with_change(g.plain(xid, 1, 3), 1, big(xid as u8, size));
        feed(&mut q, &t);
        fed.push(t);
        // Flushes every third transaction; the others stay buffered or written but not yet
        // durable, behind what the window may hold.
        if xid % 3 == 0 {
            q.flush().unwrap();
        }
        // Hands out whatever is durable (several per window, or one at a time).
        let take = if xid % 5 == 0 { usize::MAX } else { 1 };
        for _ in 0..take {
            let Some(r) = q.poll_ready(at(100)).unwrap() else {
                break;
            };
            let Ready::Transaction(t) = &r else {
                panic!("a transaction, not {r:?}");
            };
            let want: Vec<Vec<u8>> = fed[next_out].iter().map(|(_, p)| p.clone()).collect();
            assert_eq!(t.xid, Xid(next_out as u32 + 1));
            assert!(t.messages == want, "transaction {} differs", t.xid.0);
            q.mark_applied(r.id()).unwrap();
            next_out += 1;
        }
    }
    q.flush().unwrap();
    while let Some(r) = q.poll_ready(at(100)).unwrap() {
        let Ready::Transaction(t) = &r else {
            panic!("a transaction, not {r:?}");
        };
        let want: Vec<Vec<u8>> = fed[next_out].iter().map(|(_, p)| p.clone()).collect();
        assert!(t.messages == want, "transaction {} differs", t.xid.0);
        q.mark_applied(r.id()).unwrap();
        next_out += 1;
    }
    assert_eq!(next_out, fed.len(), "every transaction was handed out");
    assert!(q.inspect().segments.len() > 1, "spans several segments");
}
