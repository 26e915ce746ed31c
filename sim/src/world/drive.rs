//! How a simulated client drives its connect: through the same [`pgyard_driver::core::Core`]
//! as the blocking and tokio adapters, with the world standing in for sockets, threads and
//! rustls. A [`Tap`] lets the world see the machine's raw actions on their way into the core,
//! so the invariants about the machine itself (`invariants.rs`: an attempt id is never
//! reused, a close is never repeated, no attempt outlives `connect_timeout`) are still checked
//! on what the machine did, not on what the core made of it.

use std::cell::RefCell;
use std::rc::Rc;

use pgyard_connect::{Action, AttemptId, Connector, Event, OpenTarget};
use pgyard_driver::core::{Core, Drive, Io, Mailbox, Step, TlsRequest, TlsSetup, WorkerCmd};
use pgyard_types::Instant;

use super::invariants::violation;
use super::memory::LastSeen;
use super::net::addr_node;
use super::sockets::{Delivery, Handshake};
use super::{Ev, World};
use crate::{trace_line, Trace, Violation};

/// A worker command as the world receives it: the attempt, and a TLS start that is just
/// whether the handshake is direct.
pub(super) type Mail = (AttemptId, WorkerCmd<bool>);

/// The core of one simulated connect.
pub(super) type SimCore = Core<SimMailbox, SimTls>;

/// A client's outbox: the commands its core posted to any of its attempts, in order. A seed
/// runs on one thread, so a shared `Vec` does what a channel did without a channel's
/// allocations and synchronisation.
pub(super) type Outbox = Rc<RefCell<Vec<Mail>>>;

/// An attempt's mailbox: its commands queue, in order, for the world to carry out.
pub(super) struct SimMailbox {
    attempt: AttemptId,
    out: Outbox,
}

impl SimMailbox {
    /// The mailbox of `attempt`, posting to `out`.
    pub(super) fn new(attempt: AttemptId, out: Outbox) -> Self {
        SimMailbox { attempt, out }
    }
}

impl Mailbox<bool> for SimMailbox {
    fn post(&self, cmd: WorkerCmd<bool>) {
        self.out.borrow_mut().push((self.attempt, cmd));
    }
}

/// The world's TLS: no configuration to build, so every request starts a handshake, whose
/// outcome the world decides from the node and the fault mix.
pub(super) struct SimTls;

impl TlsSetup for SimTls {
    type Start = bool;

    fn start(&self, request: TlsRequest<'_>) -> Result<bool, String> {
        Ok(request.direct)
    }
}

/// A raw action of the machine the world checks invariants on.
#[derive(Debug)]
pub(super) enum Seen {
    /// `Action::Open`.
    Open(AttemptId),
    /// `Action::Close`.
    Close(AttemptId),
}

/// The machine with a window on its actions.
pub(super) struct Tap<'a> {
    /// The machine.
    pub m: &'a mut Connector,
    /// The actions seen, in order.
    pub seen: &'a mut Vec<Seen>,
}

impl Drive for Tap<'_> {
    fn poll_action(&mut self) -> Option<Action> {
        let action = self.m.poll_action()?;
        match &action {
            Action::Open { attempt, .. } => self.seen.push(Seen::Open(*attempt)),
            Action::Close { attempt } => self.seen.push(Seen::Close(*attempt)),
            // The rest reach the world through the core's requests and the attempts' mail.
            _ => {}
        }
        Some(action)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.m.poll_timeout()
    }

    fn handle_event(&mut self, now: Instant, event: Event) {
        self.m.handle_event(now, event)
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.m.handle_timeout(now)
    }
}

impl World {
    /// Runs `f` on client `i`'s core and its tapped machine (nothing when it has neither).
    pub(super) fn with_core<R>(
        &mut self,
        i: usize,
        f: impl FnOnce(&mut SimCore, &mut Tap<'_>) -> R,
    ) -> Option<R> {
        let c = &mut self.clients[i];
        let (Some(core), Some(m)) = (c.core.as_mut(), c.machine.as_mut()) else {
            return None;
        };
        let mut tap = Tap {
            m,
            seen: &mut c.seen,
        };
        Some(f(core, &mut tap))
    }

    /// Steps client `i`'s core until it waits: checks the machine's raw actions, carries out
    /// the attempts' commands, then the core's I/O request or the connect's end.
    pub(super) fn drain(&mut self, t: &mut Trace, i: usize) -> Result<(), Violation> {
        loop {
            let now = self.now;
            let Some(step) = self.with_core(i, |core, tap| core.step(tap, now)) else {
                return Ok(());
            };
            // Both lists are swapped out into the world's scratch buffers and handed back
            // empty, so their allocations serve every later step of the run.
            let spare = std::mem::take(&mut self.seen_buf);
            let mut seen = std::mem::replace(&mut self.clients[i].seen, spare);
            let checked = seen.drain(..).try_for_each(|s| self.check_action(i, s));
            self.seen_buf = seen;
            checked?;
            let spare = std::mem::take(&mut self.mail_buf);
            let mut mail = std::mem::replace(&mut *self.clients[i].outbox.borrow_mut(), spare);
            for (attempt, cmd) in mail.drain(..) {
                self.command(i, attempt, cmd);
            }
            self.mail_buf = mail;
            match step {
                Step::Io(io) => self.perform(t, i, io)?,
                Step::Wait { .. } => return Ok(()),
                Step::Won(est) => return self.done(t, i, Ok(est)),
                Step::Failed(pgyard_driver::Error::Connect(e)) => {
                    return self.done(t, i, Err(e));
                }
                Step::Failed(e) => {
                    let detail = format!("client {i}: {e}");
                    return Err(violation("failures-come-from-the-machine", detail));
                }
            }
        }
    }

    /// A command the core posted to an attempt's worker.
    fn command(&mut self, i: usize, attempt: AttemptId, cmd: WorkerCmd<bool>) {
        let Some(&id) = self.clients[i].socks.get(&attempt) else {
            return;
        };
        match cmd {
            WorkerCmd::Send(bytes) => self.send(id, bytes),
            WorkerCmd::StartTls(direct) => self.start_tls(i, id, direct),
            // Not traced: every Close follows from the events already in the trace.
            WorkerCmd::Close => {
                self.clients[i].socks.remove(&attempt);
                self.client_close(id);
            }
            WorkerCmd::Handover => {}
        }
    }

    /// The handshake on socket `id`: it fails by the fault mix, or when it starts directly
    /// on a server without TLS; the client learns the outcome after a round trip.
    fn start_tls(&mut self, i: usize, id: u64, direct: bool) {
        let now = self.now;
        let fail = self.net.fires(&mut self.rng, self.net.mix.tls_fail_pct);
        let Some(s) = self.socks.get_mut(&id) else {
            return;
        };
        let node = &self.nodes[s.node];
        let outcome = if fail || (direct && !node.tls) {
            Err(())
        } else {
            s.tls = Some(Handshake {
                direct,
                alpn: node.alpn,
            });
            Ok(node.alpn)
        };
        let d = self.net.delay(&mut self.rng, i, s.node, now) * 2;
        let at = Instant((now.0 + d).max(s.down_last.0 + 1));
        s.down_last = at;
        let delivery = Delivery::TlsDone(outcome);
        self.queue.push(at, Ev::ToClient { sock: id, delivery });
    }

    /// The I/O the core asks for.
    fn perform(&mut self, t: &mut Trace, i: usize, io: Io) -> Result<(), Violation> {
        let now = self.now;
        match io {
            Io::Resolve { token, host, .. } => {
                trace_line!(t, "t=", now.0, " c", i, " resolve ", &host);
                self.check_memory_walk(i, &host)?;
                let c = &mut self.clients[i];
                c.watch.resolving();
                let gen = c.gen;
                let result = if self.net.fires(&mut self.rng, self.net.mix.dns_fail_pct) {
                    Err("Temporary failure in name resolution".to_owned())
                } else {
                    self.dns.lookup(&host)
                };
                // As the adapters hand it in: Rust's `io::Error` text for getaddrinfo's error,
                // which the machine words as libpq.
                let result =
                    result.map_err(|gai| format!("failed to lookup address information: {gai}"));
                let at = Instant(now.0 + self.dns.latency_ns);
                let resolved = Ev::Resolved {
                    client: i,
                    gen,
                    token,
                    host,
                    result,
                };
                self.queue.push(at, resolved);
            }
            Io::Open {
                attempt, target, ..
            } => {
                let OpenTarget::Tcp(addr) = target else {
                    return Err(violation("tcp-only", format!("{target:?}")));
                };
                let Some(node) = addr_node(&addr) else {
                    return Err(violation("known-address", format!("{addr}")));
                };
                self.check_one_walk(i, node)?;
                let id = self.next_sock;
                self.next_sock += 1;
                let c = &mut self.clients[i];
                c.socks.insert(attempt, id);
                let mailbox = SimMailbox::new(attempt, Rc::clone(&c.outbox));
                if let Some(core) = c.core.as_mut() {
                    core.spawned(attempt, mailbox);
                }
                let name = &self.nodes[node].name;
                trace_line!(t, "t=", now.0, " c", i, " open a", attempt.0, " ", name);
                c.hosts_seen.saw(name, now, LastSeen::Other);
                self.open(id, i, attempt, node);
            }
            Io::SendHeld { bytes } => {
                if let Some(id) = self.clients[i].held {
                    self.send(id, bytes);
                }
            }
            Io::CloseHeld => {
                if let Some(id) = self.clients[i].held.take() {
                    self.client_close(id);
                }
            }
        }
        Ok(())
    }
}
