//! The follow machine against a real queue (over `SimStorage`) and hand-built frames.

use std::time::Duration;

use pgyard_types::{Lsn, UnixTime};
use pgyard_wire::replication::{ReplicationMessage, StandbyStatusUpdate};

use super::*;
use crate::{Config, DelayQueue, Ready, SimStorage};

type Queue = DelayQueue<SimStorage>;

const T0: UnixTime = UnixTime(1_700_000_000_000_000);

fn at(ms: i64) -> UnixTime {
    UnixTime(T0.0 + ms * 1000)
}

fn queue(config: Config) -> Queue {
    DelayQueue::open(SimStorage::new(7), config).expect("an empty queue opens")
}

/// Cadence that never fires on its own unless a test lowers it.
fn quiet() -> FollowConfig {
    FollowConfig {
        flush_every: 1_000,
        flush_interval: Duration::from_secs(3600),
        status_interval: Duration::from_secs(3600),
        ..FollowConfig::default()
    }
}

/// A machine streaming at `T0`, the session started at the queue's resume LSN.
fn streaming(q: &mut Queue, config: FollowConfig) -> FollowMachine {
    let mut m = FollowMachine::new(config, T0);
    let start = m.start_session(q, T0).expect("a session starts");
    m.handle_started(T0, start).expect("started");
    m
}

/// An XLogData body carrying `data` at `start`.
fn xlog(start: u64, data: &[u8]) -> Vec<u8> {
    let mut b = vec![b'w'];
    b.extend_from_slice(&start.to_be_bytes());
    b.extend_from_slice(&start.to_be_bytes());
    b.extend_from_slice(&0u64.to_be_bytes());
    b.extend_from_slice(data);
    b
}

fn keepalive(wal_end: u64, reply: bool) -> Vec<u8> {
    let mut b = vec![b'k'];
    b.extend_from_slice(&wal_end.to_be_bytes());
    b.extend_from_slice(&0u64.to_be_bytes());
    b.push(u8::from(reply));
    b
}

/// Begin and Commit of an empty transaction committed at `lsn`, ending at `lsn + 0x10`.
fn txn(xid: u32, lsn: u64) -> [Vec<u8>; 2] {
    let mut begin = vec![b'B'];
    begin.extend_from_slice(&lsn.to_be_bytes());
    begin.extend_from_slice(&0i64.to_be_bytes());
    begin.extend_from_slice(&xid.to_be_bytes());
    let mut commit = vec![b'C', 0];
    commit.extend_from_slice(&lsn.to_be_bytes());
    commit.extend_from_slice(&(lsn + 0x10).to_be_bytes());
    commit.extend_from_slice(&0i64.to_be_bytes());
    [xlog(lsn - 8, &begin), xlog(lsn, &commit)]
}

/// A non-transactional logical message at `lsn` with `len` bytes of content.
fn message(lsn: u64, len: usize) -> Vec<u8> {
    let mut m = vec![b'M', 0];
    m.extend_from_slice(&lsn.to_be_bytes());
    m.extend_from_slice(b"test\0");
    m.extend_from_slice(&u32::try_from(len).expect("small").to_be_bytes());
    m.resize(m.len() + len, b'x');
    xlog(lsn, &m)
}

/// Every status update the machine wants sent, decoded from its CopyData frames.
fn updates(m: &mut FollowMachine) -> Vec<StandbyStatusUpdate> {
    let mut out = Vec::new();
    while let Some(frame) = m.poll_transmit() {
        assert_eq!(frame[0], b'd');
        let len = u32::from_be_bytes(frame[1..5].try_into().expect("4 bytes"));
        assert_eq!(len as usize, frame.len() - 1, "the length counts itself");
        match ReplicationMessage::decode_from_client(&frame[5..]) {
            Ok(ReplicationMessage::StandbyStatusUpdate(u)) => out.push(u),
            other => panic!("not a status update: {other:?}"),
        }
    }
    out
}

fn feed(m: &mut FollowMachine, q: &mut Queue, now: UnixTime, frames: &[Vec<u8>]) {
    for f in frames {
        m.handle_frame(q, now, f.clone()).expect("accepted");
    }
}

#[test]
fn a_flush_point_after_flush_every_messages_reports_the_horizon() {
    let mut q = queue(Config::default());
    let config = FollowConfig {
        flush_every: 4,
        ..quiet()
    };
    let mut m = streaming(&mut q, config);
    feed(&mut m, &mut q, T0, &txn(1, 0x1000));
    assert!(
        updates(&mut m).is_empty(),
        "two messages: no flush point yet"
    );
    assert!(q.needs_flush());
    feed(&mut m, &mut q, T0, &txn(2, 0x2000));
    let u = updates(&mut m);
    assert_eq!(u.len(), 1, "{u:?}");
    assert_eq!((u[0].flush, u[0].apply), (Lsn(0x2010), Lsn(0x2010)));
    assert!(u[0].write >= u[0].flush);
    assert!(!q.needs_flush());
    assert_eq!(m.progress().messages, 4);
    assert_eq!(m.progress().reported_flush, Lsn(0x2010));
}

#[test]
fn a_flush_point_a_flush_interval_after_the_first_unflushed_message() {
    let mut q = queue(Config::default());
    let config = FollowConfig {
        flush_interval: Duration::from_millis(100),
        ..quiet()
    };
    let mut m = streaming(&mut q, config);
    feed(&mut m, &mut q, at(10), &txn(1, 0x1000)[..1]);
    feed(&mut m, &mut q, at(50), &txn(1, 0x1000)[1..]);
    // Counted from the first unflushed message, not the last.
    assert_eq!(m.poll_timeout(), Some(at(110)));
    m.handle_timeout(&mut q, at(109)).expect("ok");
    assert!(updates(&mut m).is_empty());
    assert!(q.needs_flush());
    m.handle_timeout(&mut q, at(110)).expect("ok");
    let u = updates(&mut m);
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].flush, Lsn(0x1010));
    // Nothing unflushed: only the status interval is left to wait for.
    assert_eq!(m.poll_timeout(), Some(at(110 + 3_600_000)));
}

#[test]
fn status_at_least_every_interval_and_at_once_when_asked() {
    let mut q = queue(Config::default());
    let config = FollowConfig {
        status_interval: Duration::from_secs(1),
        ..quiet()
    };
    let mut m = streaming(&mut q, config);
    assert_eq!(m.poll_timeout(), Some(at(1000)));
    m.handle_timeout(&mut q, at(999)).expect("ok");
    assert!(updates(&mut m).is_empty());
    m.handle_timeout(&mut q, at(1000)).expect("ok");
    assert_eq!(updates(&mut m).len(), 1);
    assert_eq!(m.poll_timeout(), Some(at(2000)));

    // A keepalive that asks for nothing, with nothing new durable: no answer.
    m.handle_frame(&mut q, at(1200), keepalive(0, false))
        .expect("ok");
    assert!(updates(&mut m).is_empty());
    // One that asks: the received transaction is made durable first, then confirmed.
    feed(&mut m, &mut q, at(1300), &txn(1, 0x1000));
    assert!(updates(&mut m).is_empty());
    m.handle_frame(&mut q, at(1400), keepalive(0x1800, true))
        .expect("ok");
    let u = updates(&mut m);
    assert_eq!(u.len(), 1);
    assert_eq!(
        u[0].flush,
        Lsn(0x1800),
        "durable through the keepalive's walEnd"
    );
    assert_eq!(u[0].write, Lsn(0x1800));
    assert!(!q.needs_flush());
    assert_eq!(m.poll_timeout(), Some(at(2400)), "the interval restarts");
    // A clock that stepped back counts as the interval passing.
    m.handle_timeout(&mut q, at(0)).expect("ok");
    assert_eq!(updates(&mut m).len(), 1);
    assert_eq!(m.progress().status_updates, 3);
}

#[test]
fn reconnect_backoff_doubles_to_the_max_and_restarts_when_a_session_starts() {
    let mut q = queue(Config::default());
    let config = FollowConfig {
        reconnect_delay_min: Duration::from_millis(100),
        reconnect_delay_max: Duration::from_millis(1000),
        ..quiet()
    };
    let mut m = streaming(&mut q, config);
    let mut delays = Vec::new();
    for _ in 0..6 {
        let d = m.handle_broken(&mut q, true, "refused\n").expect("ok");
        delays.push(d.expect("retryable").as_millis());
        // The next connect fails before START_REPLICATION is accepted.
        m.start_session(&mut q, T0).expect("starts");
    }
    assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
    m.handle_started(T0, Lsn(0)).expect("started");
    let d = m.handle_broken(&mut q, true, "reset").expect("ok");
    assert_eq!(d, Some(Duration::from_millis(100)));
    assert_eq!(m.progress().reconnects, 7);
    assert_eq!(m.progress().sessions, 2);
    assert_eq!(m.progress().last_error.as_deref(), Some("reset"));
    assert_eq!(m.poll_timeout(), None, "no timer while down");
    // A break reconnecting cannot cure stops it.
    m.start_session(&mut q, T0).expect("starts");
    assert_eq!(m.handle_broken(&mut q, false, "no slot").expect("ok"), None);
    assert_eq!(m.progress().reconnects, 7);
}

#[test]
fn a_full_queue_stops_reading_and_the_refused_message_is_retried() {
    let seg = 4096;
    let config = Config {
        segment_bytes_max: seg,
        disk_bytes_max: 3 * seg,
        disk_high_watermark_bytes: 3 * seg,
        disk_low_watermark_bytes: 2 * seg,
        ..Config::default()
    };
    let mut q = queue(config);
    let fc = FollowConfig {
        flush_every: 1,
        flush_interval: Duration::from_millis(100),
        ..quiet()
    };
    let mut m = streaming(&mut q, fc);
    let mut lsn = 0x1000;
    // Fed regardless of `Pause` (advisory) until the queue refuses one for good reason.
    while m.pending.is_none() {
        assert!(lsn < 0x1000 + 100 * 0x100, "the queue never filled up");
        m.handle_frame(&mut q, at(0), message(lsn, 1000))
            .expect("a refusal is not a failure");
        lsn += 0x100;
    }
    let refused = Lsn(lsn - 0x100);
    assert!(!m.wants_read(&q));
    assert_eq!(
        m.poll_timeout(),
        Some(at(100)),
        "retried a flush interval later"
    );
    // Still full at the retry: it keeps waiting.
    m.handle_timeout(&mut q, at(100)).expect("ok");
    assert!(m.pending.is_some());
    assert_eq!(m.poll_timeout(), Some(at(200)));
    // Reading on would reorder the stream.
    let e = m.handle_frame(&mut q, at(150), message(lsn, 10));
    assert!(matches!(e, Err(Failure::Misuse(_))), "{e:?}");
    // The same again on a fresh machine, then the applier frees space.
    let mut m = streaming(&mut q, m.config.clone());
    m.handle_frame(&mut q, at(150), message(refused.0, 1000))
        .expect("ok");
    assert!(m.pending.is_some());
    while let Some(Ready::Message(r)) = q.poll_ready(at(150)).expect("ready") {
        q.mark_applied(r.id).expect("marked");
    }
    q.flush().expect("flushed");
    q.purge().expect("purged");
    m.handle_timeout(&mut q, at(250)).expect("ok");
    assert!(m.pending.is_none(), "accepted once space was freed");
    assert!(m.wants_read(&q));
    assert_eq!(q.write_lsn(), refused);
    assert!(m.progress().reported_flush >= refused);
}

/// Everything the machine says over a scripted run, as text.
fn script(seed: u64) -> Vec<String> {
    let mut q = DelayQueue::open(SimStorage::new(seed), Config::default()).expect("opens");
    let config = FollowConfig {
        flush_every: 3,
        flush_interval: Duration::from_millis(40),
        status_interval: Duration::from_millis(250),
        ..FollowConfig::default()
    };
    let mut m = FollowMachine::new(config, T0);
    let mut out = Vec::new();
    let mut lsn = 0x1000;
    for round in 0..40i64 {
        let now = at(round * 37);
        if round % 13 == 12 {
            out.push(format!("{:?}", m.handle_broken(&mut q, true, "reset")));
        }
        if m.wants_read(&q) || m.progress().sessions == 0 || m.poll_timeout().is_none() {
            if m.poll_timeout().is_none() {
                let start = m.start_session(&mut q, now).expect("starts");
                m.handle_started(now, start).expect("started");
                out.push(format!("start {start}"));
            }
            for f in txn(u32::try_from(round).expect("small") + 1, lsn) {
                m.handle_frame(&mut q, now, f).expect("ok");
            }
            lsn += 0x100;
        }
        if round % 5 == 0 {
            m.handle_frame(&mut q, now, keepalive(lsn - 0x80, round % 10 == 0))
                .expect("ok");
        }
        m.handle_timeout(&mut q, now).expect("ok");
        while let Some(f) = m.poll_transmit() {
            out.push(format!("send {f:?}"));
        }
        out.push(format!("wake {:?}", m.poll_timeout()));
        if let Some(p) = m.poll_progress() {
            out.push(format!("{p:?}"));
        }
    }
    out
}

#[test]
fn the_same_inputs_give_the_same_outputs() {
    let a = script(1);
    assert_eq!(a, script(1));
    let sent = a.iter().filter(|l| l.starts_with("send")).count();
    assert!(sent >= 10, "the script exercises status updates: {sent}");
    assert!(a.iter().filter(|l| l.starts_with("start")).count() >= 3);
}

#[test]
fn untrusted_bytes_fail_without_panicking_and_the_failure_sticks() {
    let valid = txn(1, 0x1000);
    let mut cases: Vec<Vec<u8>> = (0..valid[0].len())
        .map(|n| valid[0][..n].to_vec())
        .collect();
    cases.push(xlog(0x1000, b"Z"));
    cases.push(vec![b'r'; 40]);
    cases.push(keepalive(1, true)[..17].to_vec());
    for case in cases {
        let mut q = queue(Config::default());
        let mut m = streaming(&mut q, quiet());
        let e = m
            .handle_frame(&mut q, T0, case.clone())
            .expect_err("refused");
        assert!(matches!(e, Failure::Protocol(_)), "{case:?}: {e:?}");
        assert!(!e.is_retryable());
        assert_eq!(m.handle_timeout(&mut q, T0), Err(e.clone()));
        assert!(!m.wants_read(&q));
        assert_eq!(m.poll_timeout(), None);
    }
    let mut q = queue(Config::default());
    let mut m = FollowMachine::new(quiet(), T0);
    let e = m.handle_frame(&mut q, T0, keepalive(1, false));
    assert!(
        matches!(e, Err(Failure::Misuse(_))),
        "before a session: {e:?}"
    );
}

#[test]
fn finish_flushes_and_reports_the_last_position() {
    let mut q = queue(Config::default());
    let mut m = streaming(&mut q, quiet());
    feed(&mut m, &mut q, at(5), &txn(1, 0x1000));
    m.finish(&mut q, at(6)).expect("finished");
    let u = updates(&mut m);
    assert_eq!(u.len(), 1);
    assert_eq!(u[0].flush, Lsn(0x1010));
    assert!(!q.needs_flush());
    assert!(!m.wants_read(&q));
    assert!(m.poll_progress().is_some());
}
