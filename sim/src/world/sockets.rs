//! The world's sockets: opening one (with the network's delays and faults), sending on it,
//! closing it from either side, and delivering bytes to the server session or to the client's
//! driver core.

use pgyard_connect::{AttemptId, Event, IoErrorKind};
use pgyard_types::{uniform_inclusive, Instant};

use super::net::SYN_TIMEOUT_NS;
use super::pg::{NodeState, Session};
use super::{Delivery, Ev, Mode, Sock, World};
use crate::{trace, Trace, Violation};

impl World {
    /// The server side closes `id`: the client sees EOF after the link delay.
    pub(super) fn server_close(&mut self, id: u64) {
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        s.server_gone = true;
        s.session.end(&mut self.nodes[s.node]);
        let d = self.net.delay(&mut self.rng, s.client, s.node, self.now);
        let at = Instant((self.now.0 + d).max(s.down_last.0 + 1));
        s.down_last = at;
        self.queue.push(at, Ev::ToClient(id, Delivery::Closed));
    }

    pub(super) fn open(&mut self, id: u64, client: usize, attempt: AttemptId, node: usize) {
        let now = self.now;
        // The delays include any partition wait (SYNs are retransmitted until it heals).
        let rtt = self.net.delay(&mut self.rng, client, node, now)
            + self.net.delay(&mut self.rng, client, node, now);
        let (at, outcome) =
            if self.net.fires(&mut self.rng, self.net.mix.blackhole_pct) || rtt > SYN_TIMEOUT_NS {
                (
                    now.0 + SYN_TIMEOUT_NS,
                    Delivery::OpenFailed(IoErrorKind::TimedOut),
                )
            } else if self.nodes[node].state == NodeState::Crashed
                || self.net.fires(&mut self.rng, self.net.mix.refuse_pct)
            {
                (
                    now.0 + rtt,
                    Delivery::OpenFailed(IoErrorKind::ConnectionRefused),
                )
            } else {
                (now.0 + rtt, Delivery::Opened)
            };
        let hung = self.nodes[node].hang;
        let mut sock = self.sock(client, attempt, node, hung, now);
        sock.down_last = Instant(at);
        self.socks.insert(id, sock);
        self.queue.push(Instant(at), Ev::ToClient(id, outcome));
    }

    pub(super) fn sock(
        &self,
        client: usize,
        attempt: AttemptId,
        node: usize,
        hung: bool,
        now: Instant,
    ) -> Sock {
        Sock {
            client,
            attempt,
            node,
            session: Box::new(Session::new()),
            hung,
            server_gone: false,
            up_last: now,
            down_last: now,
            tls: None,
        }
    }

    pub(super) fn send(&mut self, id: u64, bytes: Vec<u8>) {
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        let d = self.net.delay(&mut self.rng, s.client, s.node, self.now);
        let at = Instant((self.now.0 + d).max(s.up_last.0 + 1));
        s.up_last = at;
        self.queue.push(at, Ev::ToServer(id, bytes));
    }

    pub(super) fn client_close(&mut self, id: u64) {
        if let Some(mut s) = self.socks.remove(&id) {
            s.session.end(&mut self.nodes[s.node]);
        }
    }

    pub(super) fn deliver_to_server(&mut self, id: u64, bytes: &[u8]) {
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        if s.hung || s.server_gone {
            return;
        }
        let node = s.node;
        if self.nodes[node].state == NodeState::Crashed {
            self.server_close(id);
            return;
        }
        let reply = s
            .session
            .receive(&mut self.nodes[node], bytes, &mut self.rng);
        let cannot = s.session.sent_cannot_connect_now;
        let client = s.client;
        if !reply.bytes.is_empty() {
            let reset = self.net.faults
                && self.net.mix.reset_permille > 0
                && uniform_inclusive(&mut self.rng, 999) < self.net.mix.reset_permille;
            if reset {
                self.server_close(id);
                return;
            }
            let d = self.net.delay(&mut self.rng, client, node, self.now);
            let Some(s) = self.socks.get_mut(&id) else {
                return;
            };
            let at = Instant((self.now.0 + d).max(s.down_last.0 + 1));
            s.down_last = at;
            self.queue
                .push(at, Ev::ToClient(id, Delivery::Bytes(reply.bytes, cannot)));
        }
        if reply.close {
            self.server_close(id);
        }
    }

    pub(super) fn deliver_to_client(
        &mut self,
        t: &mut Trace,
        id: u64,
        d: Delivery,
    ) -> Result<(), Violation> {
        let Some(s) = self.socks.get(&id) else {
            return Ok(());
        };
        let (i, attempt) = (s.client, s.attempt);
        let now = self.now;
        let c = &mut self.clients[i];
        if c.session.is_some_and(|(_, sid)| sid == id) {
            // The established session: only its end matters to the application.
            if matches!(d, Delivery::Closed) {
                trace!(t, "t={} c{i} session a{} broke", now.0, attempt.0);
                c.session = None;
                c.socks.remove(&attempt);
                c.mode = if c.spec.use_reset && c.spec.hold_ns.is_none() {
                    Mode::Session
                } else {
                    Mode::Idle
                };
                let gen = c.gen;
                let detect = c.spec.detect_ns;
                self.socks.remove(&id);
                self.queue.push(Instant(now.0 + detect), Ev::Wake(i, gen));
            }
            return Ok(());
        }
        if c.mode != Mode::Connecting {
            return Ok(());
        }
        let event = match d {
            Delivery::Opened => Event::Opened { attempt },
            Delivery::OpenFailed(error) => {
                trace!(t, "t={} c{i} a{} open failed {error:?}", now.0, attempt.0);
                self.socks.remove(&id);
                Event::OpenFailed { attempt, error }
            }
            Delivery::Bytes(bytes, cannot) => {
                if cannot {
                    c.after_cannot_connect = true;
                }
                Event::Received { attempt, bytes }
            }
            Delivery::Closed => {
                trace!(t, "t={} c{i} a{} eof", now.0, attempt.0);
                Event::Closed { attempt }
            }
            Delivery::TlsDone(Ok(alpn)) => Event::TlsEstablished {
                attempt,
                server_end_point: None,
                alpn: alpn.map(<[u8]>::to_vec),
            },
            Delivery::TlsDone(Err(())) => Event::TlsFailed {
                attempt,
                kind: pgyard_connect::FailureKind::Transient,
                message: "SSL error: unexpected eof while reading".to_owned(),
            },
        };
        self.with_core(i, |core, tap| core.report(tap, now, event));
        self.drain(t, i)
    }
}
