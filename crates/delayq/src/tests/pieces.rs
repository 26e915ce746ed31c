//! A transaction handed out in pieces (`poll_ready_bounded` and `read_more`): each piece
//! bounded, together the whole transaction, handed out again from its start after a rehand
//! or a crash.

use super::large::{big, with_change};
use super::*;

both!(
    pieces_are_bounded_and_add_up_to_the_whole,
    a_rehand_restarts_from_the_first_piece,
    a_message_larger_than_the_bound_comes_alone,
    a_crash_mid_transaction_hands_it_out_whole_again,
);

/// The raw bytes of a piece.
fn bytes(messages: &[Vec<u8>]) -> u64 {
    messages.iter().map(|m| m.len() as u64).sum()
}

/// Reads the transaction due next in pieces of `max` bytes: its pieces' messages.
fn pieces<S: Storage>(q: &mut DelayQueue<S>, max: u64) -> (ItemId, Vec<Vec<Vec<u8>>>) {
    let Some(Ready::Transaction(t)) = q.poll_ready_bounded(at(10), max).unwrap() else {
        panic!("a transaction is due")
    };
    let mut out = vec![t.messages];
    let mut more = t.more;
    while let Some(cursor) = more {
        assert_eq!(cursor.id(), t.id);
        let piece = q.read_more(cursor, max).unwrap();
        out.push(piece.messages);
        more = piece.more;
    }
    (t.id, out)
}

fn payloads(t: &Msgs) -> Vec<Vec<u8>> {
    t.iter().map(|(_, p)| p.clone()).collect()
}

fn pieces_are_bounded_and_add_up_to_the_whole<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let t1 = g.plain(1, 1, 100);
    let t2 = g.plain(2, 1, 2);
    feed(&mut q, &t1);
    feed(&mut q, &t2);
    q.flush().unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready_bounded(at(10), 200).unwrap() else {
        panic!("due")
    };
    let first = t.messages.clone();
    let mut cursor = t.more.clone().expect("more than one piece");
    assert_eq!(cursor.next_index(), first.len());
    // Nothing else goes out, nor is acknowledged, before the transaction is read through.
    assert!(matches!(
        q.poll_ready_bounded(at(10), 200),
        Err(Error::Misuse(_))
    ));
    assert!(matches!(q.mark_applied(t.id), Err(Error::Misuse(_))));
    let mut all = vec![first];
    loop {
        let piece = q.read_more(cursor, 200).unwrap();
        all.push(piece.messages);
        match piece.more {
            Some(c) => cursor = c,
            None => break,
        }
    }
    assert!(all.len() >= 5, "{} pieces", all.len());
    for p in &all {
        assert!(!p.is_empty());
        assert!(bytes(p) <= 200, "{} bytes in a piece", bytes(p));
    }
    assert_eq!(all.concat(), payloads(&t1));
    q.mark_applied(t.id).unwrap();
    // A small one comes whole, with no cursor.
    let Some(Ready::Transaction(t)) = q.poll_ready_bounded(at(10), 200).unwrap() else {
        panic!("due")
    };
    assert_eq!((t.messages, t.more), (payloads(&t2), None));
}

fn a_rehand_restarts_from_the_first_piece<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let t1 = g.plain(1, 1, 60);
    feed(&mut q, &t1);
    q.flush().unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready_bounded(at(10), 150).unwrap() else {
        panic!("due")
    };
    let piece = q.read_more(t.more.clone().unwrap(), 150).unwrap();
    let stale = piece.more.clone().unwrap();
    // The consumer's subscriber refused it: handed out again from the start.
    q.rehand();
    assert!(matches!(q.read_more(stale, 150), Err(Error::Misuse(_))));
    let (id, again) = pieces(&mut q, 150);
    assert_eq!(id, t.id);
    assert_eq!(again[0], t.messages);
    assert_eq!(again[1], piece.messages);
    assert_eq!(again.concat(), payloads(&t1));
    q.mark_applied(id).unwrap();
    assert_eq!(q.poll_ready_bounded(at(10), 150).unwrap(), None);
}

fn a_message_larger_than_the_bound_comes_alone<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let large = big(b'L', 9000);
    let t1 = with_change(g.plain(1, 1, 5), 2, large.clone());
    feed(&mut q, &t1);
    q.flush().unwrap();
    let (_, all) = pieces(&mut q, 100);
    let alone: Vec<_> = all.iter().filter(|p| bytes(p) > 100).collect();
    assert_eq!(alone, [&vec![large]]);
    assert_eq!(all.concat(), payloads(&t1));
}

fn a_crash_mid_transaction_hands_it_out_whole_again<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    let t1 = with_change(g.plain(1, 1, 80), 40, big(b'X', 6000));
    let t2 = g.plain(2, 1, 1);
    feed(&mut q, &t1);
    feed(&mut q, &t2);
    q.flush().unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready_bounded(at(10), 300).unwrap() else {
        panic!("due")
    };
    let piece = q.read_more(t.more.unwrap(), 300).unwrap();
    assert!(piece.more.is_some());
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    let Some(Ready::Transaction(again)) = q.poll_ready(at(10)).unwrap() else {
        panic!("due")
    };
    assert_eq!((again.id, again.more), (t.id, None));
    assert_eq!(again.messages, payloads(&t1));
    q.mark_applied(again.id).unwrap();
    let Some(Ready::Transaction(next)) = q.poll_ready(at(10)).unwrap() else {
        panic!("due")
    };
    assert_eq!(next.messages, payloads(&t2));
}
