//! In-stream descriptions at their edges: one that opens a subtransaction which aborts, and
//! one whose relation the map described at a position no later than the stream's.

use super::*;

both!(
    an_aborted_subtransaction_takes_its_opening_description_with_it,
    a_stream_description_wins_over_one_at_the_same_position,
);

/// Queues plain transaction `xid` and recovers the queue as a consumer that restarts finds
/// it: the descriptions handed out with `xid`, the first thing due.
fn schema_after_restart<H: Harness>(
    h: &mut H,
    mut q: DelayQueue<H::S>,
    g: &mut Gen,
    xid: u32,
) -> Vec<Vec<u8>> {
    feed(&mut q, &g.plain(xid, 3, 1));
    q.flush().unwrap();
    let mut q = DelayQueue::open(h.crash(q.into_storage()), small()).unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("nothing ready");
    };
    assert_eq!(t.xid, Xid(xid));
    t.schema
}

fn in_stream(oid: u32, xid: u32, column: &[u8]) -> (Event, Vec<u8>) {
    let event = Event::Relation {
        oid,
        xid: Some(Xid(xid)),
    };
    (event, relation_bytes(oid, Some(Xid(xid)), column))
}

fn an_aborted_subtransaction_takes_its_opening_description_with_it<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    // Subtransaction 701 of stream 700 opens with a description of 16400; the apply worker's
    // spool is cut at a subtransaction's first message when it aborts, description included.
    let mut stream = g.stream_block(700, true, &[700, 701]);
    stream.insert(2, in_stream(16400, 701, b"v2"));
    feed(&mut q, &stream);
    let abort = Event::StreamAbort {
        xid: Xid(700),
        sub_xid: Xid(701),
    };
    feed(&mut q, &[(abort, b"A".to_vec())]);
    feed(&mut q, &g.stream_commit(700, 1));
    q.flush().unwrap();
    let Some(Ready::Transaction(t)) = q.poll_ready(at(100)).unwrap() else {
        panic!("the stream is due");
    };
    assert_eq!(t.messages.len(), 2, "one change and the commit");
    assert!(t.schema.is_empty());
    q.mark_applied(t.id).unwrap();
    assert_eq!(
        schema_after_restart(h, q, &mut g, 800),
        Vec::<Vec<u8>>::new()
    );
}

fn a_stream_description_wins_over_one_at_the_same_position<H: Harness>(h: &mut H) {
    let mut q = DelayQueue::open(h.fresh(), small()).unwrap();
    let mut g = Gen::default();
    // `feed` gives no WAL position (`Lsn::INVALID`) to either description: the stream's,
    // received later, is not older than the map's, so its commit makes it current.
    let plain = (
        Event::Relation {
            oid: 16400,
            xid: None,
        },
        relation_bytes(16400, None, b"v1"),
    );
    feed(&mut q, &[plain]);
    feed(&mut q, &g.plain(1, 1, 1));
    let mut stream = g.stream_block(700, true, &[700]);
    stream.insert(1, in_stream(16400, 700, b"v2"));
    feed(&mut q, &stream);
    feed(&mut q, &g.stream_commit(700, 2));
    q.flush().unwrap();
    assert_eq!(drain(&mut q, at(100)), ["C1", "c700"]);
    let v2 = relation_bytes(16400, None, b"v2");
    assert_eq!(schema_after_restart(h, q, &mut g, 800), [v2]);
}
