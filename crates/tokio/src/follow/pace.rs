//! Paced reading of a stream in full flow from a publisher on the same host.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

/// A frame that came within this long of the wait's start means the stream is in full flow.
const FLOW_GAP: Duration = Duration::from_micros(500);
/// The pause between two pulses of reading a stream in full flow.
const PULSE: Duration = Duration::from_millis(1);
/// The receive buffer of a paced socket: what the publisher may send while the follower
/// pauses, before the rest waits in the publisher's own send buffer.
const PACED_RECV_BUFFER: usize = 16 * 1024;

/// Whether a publisher reached over TCP at `peer` from `local` runs on this host.
pub(super) fn same_host(local: SocketAddr, peer: SocketAddr) -> bool {
    peer.ip().is_loopback() || peer.ip() == local.ip()
}

/// Prepares a socket for paced reading, if its publisher runs on this host; false where it
/// does not (or the buffer cannot be set), and the stream is read as it comes.
pub(super) fn pace_socket(tcp: &TcpStream) -> bool {
    let (Ok(local), Ok(peer)) = (tcp.local_addr(), tcp.peer_addr()) else {
        return false;
    };
    same_host(local, peer)
        && socket2::SockRef::from(tcp)
            .set_recv_buffer_size(PACED_RECV_BUFFER)
            .is_ok()
}

/// Reading a stream in full flow in pulses, when the publisher runs on the same host.
///
/// Over loopback the walsender's CPU carries the receiving side's network stack for every
/// segment it sends, and it sends one per change (a `send` per message, `TCP_NODELAY`). A
/// follower that drained the socket as fast as it filled kept the receive window open, so
/// every change travelled as a segment of its own: about 450,000 segments for a million
/// rows, against about 3,500 for the native apply worker, whose slower apply keeps the
/// window closed so that the walsender's writes gather into large segments. The walsender
/// then spent 5–6 s of CPU instead of 3.2 s (docs/delayq-throughput.md). So, in full flow,
/// the follower takes everything the socket holds, then pauses for [`PULSE`] with a small
/// receive buffer: the window closes soon after and the walsender's writes gather in its
/// send buffer, to arrive as large segments at the next pulse. A pulse that finds nothing
/// ends the flow, and frames are read as they come again. The cost: a change may reach the
/// queue up to a pulse later, nothing against the delay the queue exists for.
pub(super) struct Pulse {
    enabled: bool,
    in_flow: bool,
    /// Frames taken since the last pause.
    got: u64,
    resume_at: Option<Instant>,
}

impl Pulse {
    pub(super) fn new(enabled: bool) -> Self {
        Pulse {
            enabled,
            in_flow: false,
            got: 0,
            resume_at: None,
        }
    }

    /// Whether the next read takes only what is there (no waiting).
    pub(super) fn in_flow(&self) -> bool {
        self.in_flow
    }

    /// Until when reading pauses, if it does and the pause ends before `wake`.
    pub(super) fn paused(&self, now: Instant, wake: Instant) -> Option<Instant> {
        self.resume_at.filter(|&t| t > now && t < wake)
    }

    /// A frame came; `waited` is when the wait for it began.
    pub(super) fn after_frame(&mut self, waited: Instant, now: Instant) {
        self.got += 1;
        if self.enabled && !self.in_flow && now.duration_since(waited) < FLOW_GAP {
            self.in_flow = true;
        }
    }

    /// In flow, the socket held nothing more at `now`.
    pub(super) fn drained(&mut self, now: Instant) {
        if self.got == 0 {
            self.in_flow = false;
        } else {
            self.got = 0;
            self.resume_at = Some(now + PULSE);
        }
    }

    /// A pause ended.
    pub(super) fn resume(&mut self) {
        self.resume_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(s: &str) -> SocketAddr {
        s.parse().expect("a socket address")
    }

    #[test]
    fn only_a_publisher_on_this_host_is_paced() {
        assert!(same_host(addr("127.0.0.1:40000"), addr("127.0.0.1:5432")));
        assert!(same_host(addr("[::1]:40000"), addr("[::1]:5432")));
        assert!(same_host(addr("10.0.0.5:40000"), addr("10.0.0.5:5432")));
        assert!(!same_host(addr("10.0.0.5:40000"), addr("10.0.0.6:5432")));
    }

    #[tokio::test]
    async fn a_loopback_socket_gets_the_small_receive_buffer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let tcp = TcpStream::connect(listener.local_addr().expect("address"))
            .await
            .expect("connect");
        // The default (tcp_rmem) may equal the paced size: start from another.
        socket2::SockRef::from(&tcp)
            .set_recv_buffer_size(4 * PACED_RECV_BUFFER)
            .expect("SO_RCVBUF");
        assert!(pace_socket(&tcp));
        // Linux doubles the value asked for (room for its own bookkeeping).
        let after = socket2::SockRef::from(&tcp)
            .recv_buffer_size()
            .expect("SO_RCVBUF");
        assert_eq!(after, 2 * PACED_RECV_BUFFER);
    }

    #[test]
    fn a_quick_frame_starts_the_flow_and_a_drained_socket_pauses_it() {
        let t0 = Instant::now();
        let mut p = Pulse::new(true);
        p.after_frame(t0, t0 + Duration::from_millis(3));
        assert!(!p.in_flow(), "a frame after a pause is no flow");
        p.after_frame(t0, t0 + Duration::from_micros(10));
        assert!(p.in_flow());
        let now = t0 + Duration::from_millis(5);
        p.drained(now);
        let far = now + Duration::from_secs(1);
        assert_eq!(p.paused(now, far), Some(now + PULSE));
        // The loop's own deadline comes first: no pause past it.
        assert_eq!(p.paused(now, now + PULSE / 2), None);
        p.resume();
        assert_eq!(p.paused(now, far), None);
        assert!(p.in_flow(), "still in flow until a pulse finds nothing");
        p.drained(now + PULSE);
        assert!(!p.in_flow(), "a pulse that found nothing ends the flow");
    }

    #[test]
    fn a_disabled_pulse_never_flows() {
        let t0 = Instant::now();
        let mut p = Pulse::new(false);
        for _ in 0..10 {
            p.after_frame(t0, t0);
        }
        assert!(!p.in_flow());
    }
}
