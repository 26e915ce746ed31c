//! The connect loop on the caller's task, for libpq's sequential strategy: at most one
//! attempt is open at a time, so nothing needs a task of its own. The machine's commands are
//! carried out as soon as it posts them, and the loop itself waits on the attempt's pending
//! open or handshake, its socket, and the machine's next deadline at once. With a task per
//! attempt every step crossed tasks twice (a command sent and woken, an event sent back): five
//! `epoll_wait`s and an eventfd write per trust connect where tokio-postgres, which connects
//! on the caller's task, makes two (docs/connect.md).
//!
//! `Strategy::Race` keeps the tasks of `driver.rs`: its attempts overlap, and each waits on
//! its own commands.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use pgyard_connect::{AttemptId, Established, Event};
use pgyard_driver::core::{Inline, Io, Posted, Step, TlsStart, WorkerCmd};
use pgyard_driver::{open_event, tls, Attempt, Driving, Error, Machine};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

use crate::transport::{open_attempt, write_flush, Transport};

/// What a pending open or handshake ends with: the socket's peer user when the machine asked
/// for it, its event, and the stream if it has one.
type Settled = (Option<Event>, Event, Option<Transport>);

/// An attempt's open or TLS handshake under way; a Close drops it, and with it the socket.
struct Pending {
    attempt: AttemptId,
    fut: Pin<Box<dyn Future<Output = Settled> + Send>>,
}

/// One open attempt's connection.
struct Conn {
    attempt: AttemptId,
    stream: Transport,
    /// Reading ended (EOF, reset, a failed write): only commands are left for it.
    ended: bool,
}

/// Everything the loop holds besides the machine.
#[derive(Default)]
struct Attempts {
    pending: Vec<Pending>,
    conns: Vec<Conn>,
    events: VecDeque<Event>,
    handed: Option<(AttemptId, Transport)>,
}

/// The size of the buffer sockets are read into while connecting.
const READ_BUF: usize = 16 * 1024;

/// The longest wait when nothing is in flight (see `Attempts::wait`).
const IDLE: Duration = Duration::from_millis(100);

/// How long a closing attempt's close_notify may take, off the loop.
const CLOSE_BOUND: Duration = Duration::from_secs(1);

/// Runs `machine` on the caller's task until it is done, appending its attempts to `log`.
/// `held` is the established connection a reset replaces.
pub(crate) async fn run(
    machine: &mut Machine,
    mut held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    let posted: Posted = Posted::default();
    let mut at = Attempts::default();
    // Never zeroed: only what a read fills is looked at.
    let mut buf: Vec<u8> = Vec::with_capacity(READ_BUF);
    let d: Driving<'_, Inline> = machine.driving(held.as_ref().map(|h| h.0));
    let (m, clock, bound, mut core) = (d.machine, d.clock, d.bound, d.core);
    let outcome = loop {
        at.carry_out(&posted).await;
        if let Some(ev) = at.events.pop_front() {
            core.report(m, clock.now(), ev);
            continue;
        }
        match core.step(m, clock.now()) {
            Step::Io(Io::Resolve { token, host, port }) => {
                let found = tokio::net::lookup_host((host.as_str(), port)).await;
                let result = found.map(Iterator::collect).map_err(|e| e.to_string());
                core.resolved(m, clock.now(), token, &host, result);
            }
            Step::Io(Io::Open {
                attempt,
                target,
                tcp,
                peer_user,
            }) => {
                // A walk moving on posts the previous attempt's Terminate and Close first.
                at.carry_out(&posted).await;
                core.spawned(attempt, posted.mailbox(attempt));
                let peer = peer_user.then_some(attempt);
                let fut = async move {
                    let (opened, report) = open_attempt(&target, tcp.as_ref(), bound, peer).await;
                    (report, open_event(attempt, &opened), opened.ok())
                };
                at.pending.push(Pending {
                    attempt,
                    fut: Box::pin(fut),
                });
            }
            // The old connection may be dead already; Terminate is a courtesy.
            Step::Io(Io::SendHeld { bytes }) => {
                if let Some((_, t)) = held.as_mut() {
                    let _ = write_flush(t, &bytes).await;
                }
            }
            Step::Io(Io::CloseHeld) => {
                if let Some((_, mut t)) = held.take() {
                    let _ = t.shutdown().await;
                }
            }
            Step::Wait { within } => {
                if posted.is_empty() {
                    at.wait(within, &mut buf).await;
                }
            }
            Step::Won(est) => {
                // The winner's Handover and the losers' Close are queued by now.
                at.carry_out(&posted).await;
                break match at.handed.take() {
                    Some((id, t)) if id == est.attempt => Ok((*est, t)),
                    _ => Err(Error::Internal("the winning connection was lost".into())),
                };
            }
            Step::Failed(e) => break Err(e),
        }
    };
    log.append(&mut core.take_attempts());
    // Commands still queued (a failed walk's last Terminate) go out, as an attempt task
    // carries out its channel's commands before it sees the channel end; then what is open
    // closes.
    at.carry_out(&posted).await;
    for c in at.conns {
        close_off_loop(c.stream);
    }
    outcome
}

impl Attempts {
    /// Carries out the posted commands in order; the socket a Handover gives up goes to
    /// `handed`.
    async fn carry_out(&mut self, posted: &Posted) {
        loop {
            let Some((attempt, cmd)) = posted.pop() else {
                return;
            };
            if let Some(p) = self.pending.iter().position(|p| p.attempt == attempt) {
                // Only a Close can come while an open or handshake is under way.
                if matches!(cmd, WorkerCmd::Close) {
                    self.pending.swap_remove(p);
                }
                continue;
            }
            let Some(at) = self.conns.iter().position(|c| c.attempt == attempt) else {
                // Its socket never opened, or it was closed or handed over already.
                continue;
            };
            match cmd {
                WorkerCmd::Send(bytes) => {
                    let c = &mut self.conns[at];
                    if !c.ended && write_flush(&mut c.stream, &bytes).await.is_err() {
                        c.ended = true;
                        self.events.push_back(Event::Closed { attempt });
                    }
                }
                WorkerCmd::StartTls(TlsStart {
                    config,
                    name,
                    host,
                    probe,
                }) => {
                    let stream = self.conns.swap_remove(at).stream;
                    let fut = async move {
                        let handshake = tokio_rustls::TlsConnector::from(config);
                        match handshake.connect(name, stream).await {
                            Ok(t) => {
                                let ev = tls::established(attempt, t.get_ref().1, &probe);
                                (None, ev, Some(Box::new(t) as Transport))
                            }
                            // The socket went with the failed handshake.
                            Err(e) => (
                                None,
                                tls::handshake_failed(attempt, &e, &host, &probe),
                                None,
                            ),
                        }
                    };
                    self.pending.push(Pending {
                        attempt,
                        fut: Box::pin(fut),
                    });
                }
                WorkerCmd::Close => close_off_loop(self.conns.swap_remove(at).stream),
                WorkerCmd::Handover => {
                    let c = self.conns.swap_remove(at);
                    self.handed = Some((attempt, c.stream));
                }
            }
        }
    }

    /// Waits until an open or handshake settles, a socket has something, or the machine's
    /// deadline (`within`) comes; what happened goes to `events`.
    async fn wait(&mut self, within: Option<Duration>, buf: &mut Vec<u8>) {
        // With nothing in flight no event can come: only the deadline, bounded, so a machine
        // that waits without one is stepped again rather than left waiting for ever.
        let idle = self.pending.is_empty() && self.conns.iter().all(|c| c.ended);
        let within = if idle {
            Some(within.map_or(IDLE, |w| w.min(IDLE)))
        } else {
            within
        };
        let mut deadline = within.map(|w| Box::pin(tokio::time::sleep(w)));
        poll_fn(|cx| {
            if self.poll_attempts(cx, buf) {
                return Poll::Ready(());
            }
            match deadline.as_mut() {
                Some(d) => d.as_mut().poll(cx),
                None => Poll::Pending,
            }
        })
        .await;
    }

    /// Polls every pending open or handshake and every live socket once; true when any of
    /// them produced an event.
    fn poll_attempts(&mut self, cx: &mut Context<'_>, buf: &mut Vec<u8>) -> bool {
        let mut any = false;
        let mut i = 0;
        while i < self.pending.len() {
            let Poll::Ready((peer, ev, stream)) = self.pending[i].fut.as_mut().poll(cx) else {
                i += 1;
                continue;
            };
            let attempt = self.pending.swap_remove(i).attempt;
            self.events.extend(peer);
            self.events.push_back(ev);
            if let Some(stream) = stream {
                self.conns.push(Conn {
                    attempt,
                    stream,
                    ended: false,
                });
            }
            any = true;
        }
        for c in self.conns.iter_mut().filter(|c| !c.ended) {
            buf.clear();
            let mut rb = ReadBuf::uninit(buf.spare_capacity_mut());
            let ev = match Pin::new(&mut c.stream).poll_read(cx, &mut rb) {
                Poll::Pending => continue,
                Poll::Ready(Ok(())) if !rb.filled().is_empty() => Event::Received {
                    attempt: c.attempt,
                    bytes: rb.filled().to_vec(),
                },
                // EOF, a reset, or a TLS peer dropping TCP without close_notify; an alert.
                Poll::Ready(failed) => {
                    c.ended = true;
                    tls::read_failed(c.attempt, failed.as_ref().err())
                }
            };
            self.events.push_back(ev);
            any = true;
        }
        any
    }
}

/// Closes an attempt's stream without holding up the loop: under TLS close_notify goes first,
/// within [`CLOSE_BOUND`].
fn close_off_loop(mut stream: Transport) {
    tokio::spawn(async move {
        let _ = tokio::time::timeout(CLOSE_BOUND, stream.shutdown()).await;
    });
}
