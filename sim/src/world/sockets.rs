//! The world's sockets: opening one (with the network's delays and faults), sending on it,
//! closing it from either side, and delivering bytes to the server session or to the client's
//! driver core.

use std::collections::VecDeque;

use pgyard_connect::{AttemptId, ClientCert, Event, IoErrorKind};
use pgyard_types::{uniform_inclusive, Instant};
use pgyard_wire::frame::ProtocolVersion;

use super::client::Mode;
use super::invariants::{Heard, ALERT_TEXT};
use super::memory::LastSeen;
use super::net::SYN_TIMEOUT_NS;
use super::pg::{NodeState, Session};
use super::{Ev, World};
use crate::{trace, trace_line, Trace, Violation};

/// What the network delivers to the client end of a socket.
#[derive(Debug)]
pub(super) enum Delivery {
    /// The connect went through.
    Opened,
    /// The connect failed.
    OpenFailed(IoErrorKind),
    /// Bytes from the server.
    Bytes {
        /// The bytes.
        bytes: Vec<u8>,
        /// The server has said it cannot take connections now (57P03) on this socket.
        cannot_connect_now: bool,
        /// The SQLSTATE of a FATAL error among the bytes.
        fatal: Option<[u8; 5]>,
        /// ReadyForQuery messages among the bytes.
        readies: u32,
        /// The version a NegotiateProtocolVersion among the bytes offered.
        negotiated: Option<ProtocolVersion>,
        /// The server's first authentication message is among the bytes, and the client's
        /// `require_auth` refuses it for this reason.
        auth_refused: Option<&'static str>,
        /// Plaintext followed the server's `S` in these bytes.
        stuffed: bool,
    },
    /// End of stream: the server closed, or the connection reset.
    Closed,
    /// The handshake's outcome; when it completed, what the server selected by ALPN.
    TlsDone(Result<Option<&'static [u8]>, ()>),
}

/// What the server end of a socket does with the bytes that reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ServerEnd {
    /// Its session reads them and answers.
    Answering,
    /// Half-open: it accepted the connection and never answers.
    Hung,
    /// It closed the connection (the session ended or the node crashed).
    Gone,
}

/// The last TLS handshake on a socket.
#[derive(Clone, Copy, Debug)]
pub(super) struct Handshake {
    /// It started directly, without SSLRequest.
    pub(super) direct: bool,
    /// What the server selected by ALPN.
    pub(super) alpn: Option<&'static [u8]>,
}

/// A connection between a client's attempt and a node.
#[derive(Debug)]
pub(super) struct Sock {
    pub(super) client: usize,
    pub(super) attempt: AttemptId,
    pub(super) node: usize,
    /// The server side of the connection.
    pub(super) session: Session,
    pub(super) server_end: ServerEnd,
    /// When the last segment towards the server arrives (per-direction FIFO).
    pub(super) up_last: Instant,
    /// When the last delivery towards the client arrives (per-direction FIFO).
    pub(super) down_last: Instant,
    /// The last TLS handshake, once one completed.
    pub(super) tls: Option<Handshake>,
    /// The client end has closed: deliveries to it are dropped, and its FIN is on the way
    /// to the server behind the bytes sent before it.
    pub(super) client_closed: bool,
    /// ReadyForQuery messages the client's connect was handed.
    pub(super) ready_heard: u32,
    /// The server sent what the client refuses on the spot (a protocol version below its
    /// minimum, an authentication message its `require_auth` refuses): libpq stops reading
    /// there, so what followed it in the same stream went unread.
    pub(super) stopped: bool,
}

impl Sock {
    /// Whether the server end has closed.
    pub(super) fn server_gone(&self) -> bool {
        self.server_end == ServerEnd::Gone
    }
}

/// The world's sockets by id. Ids count up and are never reused, so socket `id` sits at
/// `id - first`: a lookup is an index instead of a tree search, and walking the table visits
/// ids in order. Closed sockets leave a hole until every older one is closed too, so the
/// table spans only the sockets from the oldest open one on.
#[derive(Debug, Default)]
pub(super) struct SockTable {
    slots: VecDeque<Option<Sock>>,
    /// The id of `slots[0]`.
    first: u64,
}

impl SockTable {
    fn slot(&self, id: u64) -> Option<usize> {
        usize::try_from(id.checked_sub(self.first)?).ok()
    }

    /// Socket `id`, while it is open.
    pub(super) fn get(&self, id: &u64) -> Option<&Sock> {
        self.slots.get(self.slot(*id)?)?.as_ref()
    }

    /// Socket `id`, while it is open.
    pub(super) fn get_mut(&mut self, id: &u64) -> Option<&mut Sock> {
        let at = self.slot(*id)?;
        self.slots.get_mut(at)?.as_mut()
    }

    /// Adds socket `id`, newer than every socket added before.
    pub(super) fn insert(&mut self, id: u64, sock: Sock) {
        if self.slots.is_empty() {
            self.first = id;
        }
        let Some(at) = self.slot(id) else {
            return;
        };
        if at >= self.slots.len() {
            self.slots.resize_with(at + 1, || None);
        }
        self.slots[at] = Some(sock);
    }

    /// Takes socket `id` out.
    pub(super) fn remove(&mut self, id: &u64) -> Option<Sock> {
        let at = self.slot(*id)?;
        let sock = self.slots.get_mut(at)?.take();
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.first += 1;
        }
        sock
    }

    /// The open sockets, by id.
    pub(super) fn iter(&self) -> impl Iterator<Item = (u64, &Sock)> + '_ {
        let first = self.first;
        (first..)
            .zip(&self.slots)
            .filter_map(|(id, s)| s.as_ref().map(|s| (id, s)))
    }
}

impl World {
    /// The server side closes `id`: the client sees EOF after the link delay.
    pub(super) fn server_close(&mut self, id: u64) {
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        s.server_end = ServerEnd::Gone;
        s.session.end(&mut self.nodes[s.node]);
        let d = self.net.delay(&mut self.rng, s.client, s.node, self.now);
        let at = Instant((self.now.0 + d).max(s.down_last.0 + 1));
        s.down_last = at;
        self.queue.push(
            at,
            Ev::ToClient {
                sock: id,
                delivery: Delivery::Closed,
            },
        );
    }

    /// Opens socket `id` for `client`'s `attempt` to `node`; the client learns the outcome
    /// after a round trip (or the SYN budget).
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
        let server_end = if self.nodes[node].hang {
            ServerEnd::Hung
        } else {
            ServerEnd::Answering
        };
        let sock = Sock {
            client,
            attempt,
            node,
            session: Session::new(),
            server_end,
            up_last: now,
            down_last: Instant(at),
            tls: None,
            client_closed: false,
            ready_heard: 0,
            stopped: false,
        };
        self.socks.insert(id, sock);
        let delivery = outcome;
        self.queue
            .push(Instant(at), Ev::ToClient { sock: id, delivery });
    }

    /// Sends `bytes` from the client end of `id`.
    pub(super) fn send(&mut self, id: u64, bytes: Vec<u8>) {
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        let d = self.net.delay(&mut self.rng, s.client, s.node, self.now);
        let at = Instant((self.now.0 + d).max(s.up_last.0 + 1));
        s.up_last = at;
        self.queue.push(at, Ev::ToServer { sock: id, bytes });
    }

    /// The client end closes `id`. TCP sends the FIN behind the bytes already sent, so a
    /// server that answers reads them (a Terminate) before the end of the stream; a server end
    /// that is gone or hung ends with the socket at once.
    pub(super) fn client_close(&mut self, id: u64) {
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        if s.client_closed {
            return;
        }
        s.client_closed = true;
        if s.server_end != ServerEnd::Answering {
            if let Some(mut s) = self.socks.remove(&id) {
                s.session.end(&mut self.nodes[s.node]);
            }
            return;
        }
        let d = self.net.delay(&mut self.rng, s.client, s.node, self.now);
        let at = Instant((self.now.0 + d).max(s.up_last.0 + 1));
        s.up_last = at;
        self.queue.push(at, Ev::Fin { sock: id });
    }

    /// The client's FIN reaches the server end of `id`: the session ends, after the check on
    /// how the client left it.
    pub(super) fn deliver_fin(&mut self, id: u64) -> Result<(), Violation> {
        let Some(mut s) = self.socks.remove(&id) else {
            return Ok(());
        };
        let checked = self.check_terminated(&s);
        s.session.end(&mut self.nodes[s.node]);
        checked
    }

    /// Bytes reach the server end of `id`: its session answers, resets or closes. The first
    /// StartupMessage is judged against what the client's configuration asks libpq to send.
    pub(super) fn deliver_to_server(&mut self, id: u64, bytes: &[u8]) -> Result<(), Violation> {
        let Some(s) = self.socks.get_mut(&id) else {
            return Ok(());
        };
        if s.server_end != ServerEnd::Answering {
            return Ok(());
        }
        let node = s.node;
        if self.nodes[node].state == NodeState::Crashed {
            self.server_close(id);
            return Ok(());
        }
        let readies_before = s.session.readies;
        let reply = s
            .session
            .receive(&mut self.nodes[node], bytes, &mut self.rng);
        let readies = s.session.readies - readies_before;
        let cannot_connect_now = s.session.sent_cannot_connect_now;
        let fatal = s.session.fatal.take();
        let negotiated = s.session.negotiated.take();
        let stuffed = std::mem::take(&mut s.session.stuffed);
        let client = s.client;
        let auth_refused = if std::mem::take(&mut s.session.auth_began) {
            let required = self.clients[client].spec.require_auth;
            required.and_then(|r| r.refusal(&self.nodes[node].auth))
        } else {
            None
        };
        if let Some(seen) = s.session.startup_seen.take() {
            self.check_startup(client, id, &seen)?;
        }
        if !reply.bytes.is_empty() {
            let reset = self.net.faults
                && self.net.mix.reset_permille > 0
                && uniform_inclusive(&mut self.rng, 999) < self.net.mix.reset_permille;
            if reset {
                self.server_close(id);
                return Ok(());
            }
            let d = self.net.delay(&mut self.rng, client, node, self.now);
            let Some(s) = self.socks.get_mut(&id) else {
                return Ok(());
            };
            let at = Instant((self.now.0 + d).max(s.down_last.0 + 1));
            s.down_last = at;
            let delivery = Delivery::Bytes {
                bytes: reply.bytes,
                cannot_connect_now,
                fatal,
                readies,
                negotiated,
                auth_refused,
                stuffed,
            };
            self.queue.push(at, Ev::ToClient { sock: id, delivery });
        }
        if reply.close {
            self.server_close(id);
        }
        Ok(())
    }

    /// The server's end of `id` reaches its client during a connect: end of stream, or on a
    /// TLS connection, one time in two, an alert that breaks it (drawn from
    /// [`World::alerts`](super::World), so runs without TLS draw as before).
    fn closed_event(&mut self, t: &mut Trace, id: u64, i: usize, attempt: AttemptId) -> Event {
        let now = self.now;
        let tls = self.socks.get(&id).is_some_and(|s| s.tls.is_some());
        if tls && uniform_inclusive(&mut self.alerts, 1) == 0 {
            trace_line!(t, "t=", now.0, " c", i, " a", attempt.0, " alert");
            self.clients[i].watch.heard(attempt, Heard::Broken);
            let message = ALERT_TEXT.to_owned();
            return Event::Broken { attempt, message };
        }
        trace_line!(t, "t=", now.0, " c", i, " a", attempt.0, " eof");
        Event::Closed { attempt }
    }

    /// A delivery reaches the client end of `id`: the end of a held session, or an event
    /// for the connect under way.
    pub(super) fn deliver_to_client(
        &mut self,
        t: &mut Trace,
        id: u64,
        d: Delivery,
    ) -> Result<(), Violation> {
        let Some(s) = self.socks.get(&id) else {
            return Ok(());
        };
        if s.client_closed {
            return Ok(());
        }
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
                self.queue
                    .push(Instant(now.0 + detect), Ev::Wake { client: i, gen });
            }
            return Ok(());
        }
        if c.mode != Mode::Connecting {
            return Ok(());
        }
        let refused = matches!(d, Delivery::OpenFailed(_));
        let seen = if refused {
            LastSeen::Refused
        } else {
            LastSeen::Other
        };
        c.hosts_seen.saw(&self.nodes[s.node].name, now, seen);
        let event = match d {
            Delivery::Opened => Event::Opened { attempt },
            Delivery::OpenFailed(error) => {
                trace!(t, "t={} c{i} a{} open failed {error:?}", now.0, attempt.0);
                c.watch.heard(attempt, Heard::OpenFailed(error.clone()));
                self.socks.remove(&id);
                Event::OpenFailed { attempt, error }
            }
            Delivery::Bytes {
                bytes,
                cannot_connect_now,
                fatal,
                readies,
                negotiated,
                auth_refused,
                stuffed,
            } => {
                let c = &mut self.clients[i];
                let min = c.spec.startup.min_version;
                // What libpq reads after it stopped (at a version below its minimum, which
                // comes before any authentication message) it never acts on.
                let mut auth_refused = auth_refused;
                if let Some(s) = self.socks.get_mut(&id) {
                    s.ready_heard += readies;
                    s.stopped |= negotiated.is_some_and(|v| v < min);
                    auth_refused = auth_refused.filter(|_| !s.stopped);
                    s.stopped |= auth_refused.is_some();
                }
                if cannot_connect_now {
                    c.watch.heard_cannot_connect_now();
                }
                if let Some(code) = fatal {
                    c.watch.heard(attempt, Heard::Fatal(code));
                }
                if let Some(v) = negotiated {
                    c.watch.heard(attempt, Heard::Negotiated(v));
                }
                if let Some(reason) = auth_refused {
                    c.watch.heard(attempt, Heard::AuthRefused(reason));
                }
                if stuffed {
                    c.watch.heard(attempt, Heard::Stuffed);
                }
                Event::Received { attempt, bytes }
            }
            Delivery::Closed => self.closed_event(t, id, i, attempt),
            Delivery::TlsDone(Ok(alpn)) => {
                let direct = self
                    .socks
                    .get(&id)
                    .and_then(|s| s.tls)
                    .is_some_and(|h| h.direct);
                let c = &mut self.clients[i];
                c.watch.heard(attempt, Heard::Tls { direct, alpn });
                Event::TlsEstablished {
                    attempt,
                    server_end_point: None,
                    alpn: alpn.map(<[u8]>::to_vec),
                    // The world's servers never ask for a client certificate.
                    client_cert: ClientCert::NotRequested,
                }
            }
            Delivery::TlsDone(Err(())) => Event::TlsFailed {
                attempt,
                kind: pgyard_connect::FailureKind::Transient,
                message: "SSL error: unexpected eof while reading".to_owned(),
                client_cert: ClientCert::NotRequested,
            },
        };
        self.with_core(i, |core, tap| core.report(tap, now, event));
        self.drain(t, i)
    }
}
