//! Async I/O for the shared driver core (decisions are the machine's, bookkeeping the core's).
//! Each attempt is a task that owns its socket and waits on its commands and its socket at
//! once; names resolve in tasks too, so a race never waits on DNS.

use std::net::SocketAddr;

use bytes::BytesMut;
use std::time::Duration;

use pgyard_connect::{AttemptId, Established, Event, OpenTarget, TcpOptions};
use pgyard_driver::core::{Io, Mailbox, Step, TlsStart, WorkerCmd};
use pgyard_driver::{open_event, tls, Attempt, Driving, Error, Machine};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::transport::{open_attempt, write_flush, Transport};

type Cmd = WorkerCmd<TlsStart>;

/// Runs `machine` until it is done, appending its attempts to `log`. `held` is the
/// established connection a reset replaces.
pub(crate) async fn run(
    machine: &mut Machine,
    mut held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    let d: Driving<'_, _> = machine.driving(held.as_ref().map(|h| h.0));
    let (m, clock, bound, mut core) = (d.machine, d.clock, d.bound, d.core);
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let outcome = loop {
        let io = match core.step(m, clock.now()) {
            Step::Io(io) => io,
            Step::Wait { within } => {
                let msg = match within {
                    Some(d) => tokio::time::timeout(d, rx.recv()).await.ok().flatten(),
                    None => rx.recv().await,
                };
                match msg {
                    Some(Msg::Event(ev)) => core.report(m, clock.now(), ev),
                    Some(Msg::Resolved(token, host, result)) => {
                        core.resolved(m, clock.now(), token, &host, result)
                    }
                    Some(Msg::Handover(..)) | None => {}
                }
                continue;
            }
            Step::Won(mut est) => {
                let won = take_over(&mut rx, est.attempt, &mut est.leftover).await;
                break won.map(|transport| (*est, transport));
            }
            Step::Failed(e) => break Err(e),
        };
        match io {
            Io::Resolve { token, host, port } => {
                let out = tx.clone();
                tokio::spawn(async move {
                    let found = tokio::net::lookup_host((host.as_str(), port)).await;
                    let result = found.map(Iterator::collect).map_err(|e| e.to_string());
                    let _ = out.send(Msg::Resolved(token, host, result));
                });
            }
            Io::Open {
                attempt,
                target,
                tcp,
                peer_user,
            } => {
                let (ctx, crx) = mpsc::unbounded_channel();
                core.spawned(attempt, Mail(ctx));
                let out = tx.clone();
                let open = (target, tcp, peer_user);
                tokio::spawn(worker(attempt, open, bound, crx, out));
            }
            // The old connection may be dead already; Terminate is a courtesy.
            Io::SendHeld { bytes } => {
                if let Some((_, t)) = held.as_mut() {
                    let _ = write_flush(t, &bytes).await;
                }
            }
            Io::CloseHeld => {
                if let Some((_, mut t)) = held.take() {
                    let _ = t.shutdown().await;
                }
            }
        }
    };
    log.append(&mut core.take_attempts());
    outcome
}

/// Waits for the winner's task to hand its stream back; bytes it read meanwhile belong after
/// the machine's leftover.
async fn take_over(
    rx: &mut UnboundedReceiver<Msg>,
    winner: AttemptId,
    leftover: &mut Vec<u8>,
) -> Result<Transport, Error> {
    let wait = async {
        while let Some(msg) = rx.recv().await {
            match msg {
                Msg::Handover(id, t) if id == winner => return Some(t),
                Msg::Event(Event::Received { attempt, bytes }) if attempt == winner => {
                    leftover.extend_from_slice(&bytes);
                }
                _ => {}
            }
        }
        None
    };
    match tokio::time::timeout(Duration::from_secs(10), wait).await {
        Ok(Some(t)) => Ok(t),
        _ => Err(Error::Internal("the winning connection was lost".into())),
    }
}

/// An attempt task's command channel, as the core posts to it.
struct Mail(UnboundedSender<Cmd>);

impl Mailbox for Mail {
    fn post(&self, cmd: Cmd) {
        let _ = self.0.send(cmd);
    }
}

/// Reports from attempt and resolver tasks.
enum Msg {
    Event(Event),
    Resolved(
        pgyard_connect::ResolveToken,
        String,
        Result<Vec<SocketAddr>, String>,
    ),
    Handover(AttemptId, Transport),
}

/// One attempt's task (`open`: where to, the TCP options, and whether the machine wants the
/// socket's peer user). After EOF the socket stays open until the loop closes or takes it.
async fn worker(
    attempt: AttemptId,
    (target, tcp, peer_user): (OpenTarget, Option<TcpOptions>, bool),
    bound: Option<Duration>,
    mut cmds: UnboundedReceiver<Cmd>,
    out: UnboundedSender<Msg>,
) {
    let report = |ev: Event| out.send(Msg::Event(ev)).is_ok();
    let peer = peer_user.then_some(attempt);
    // A Close (or the loop going away) while connect() is pending simply drops the socket.
    let (opened, peer_report) = tokio::select! {
        r = open_attempt(&target, tcp.as_ref(), bound, peer) => r,
        _ = wait_close(&mut cmds) => return,
    };
    if let Some(ev) = peer_report {
        if !report(ev) {
            return;
        }
    }
    // A worker whose open failed has nothing more to do once it has said so.
    let (true, Ok(mut stream)) = (report(open_event(attempt, &opened)), opened) else {
        return;
    };
    let mut eof = false;
    // Read without zeroing first: a fresh zeroed 16 KiB per attempt was a tenth of the
    // instructions a trust connect spends outside the kernel.
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        let cmd = if eof {
            cmds.recv().await
        } else {
            tokio::select! {
                biased;
                c = cmds.recv() => c,
                r = stream.read_buf(&mut buf) => {
                    let ev = match r {
                        Ok(n) if n > 0 => {
                            let bytes = buf.to_vec();
                            buf.clear();
                            Event::Received { attempt, bytes }
                        }
                        // EOF, a reset, or a TLS peer dropping TCP without close_notify;
                        // an alert.
                        failed => {
                            eof = true;
                            tls::read_failed(attempt, failed.as_ref().err())
                        }
                    };
                    if !report(ev) {
                        return;
                    }
                    continue;
                }
            }
        };
        match cmd {
            Some(Cmd::Send(bytes)) => {
                if write_flush(&mut stream, &bytes).await.is_err() {
                    report(Event::Closed { attempt });
                    eof = true;
                }
            }
            Some(Cmd::StartTls(TlsStart {
                config,
                name,
                host,
                probe,
            })) => {
                let handshake = tokio_rustls::TlsConnector::from(config).connect(name, stream);
                let result = tokio::select! {
                    r = handshake => r,
                    _ = wait_close(&mut cmds) => return,
                };
                match result {
                    Ok(t) => {
                        let ev = tls::established(attempt, t.get_ref().1, &probe);
                        stream = Box::new(t);
                        if !report(ev) {
                            return;
                        }
                    }
                    Err(e) => {
                        report(tls::handshake_failed(attempt, &e, &host, &probe));
                        // The socket went with the failed handshake; wait for the Close.
                        return wait_close(&mut cmds).await;
                    }
                }
            }
            Some(Cmd::Handover) => {
                let _ = out.send(Msg::Handover(attempt, stream));
                return;
            }
            Some(Cmd::Close) | None => {
                // Sends close_notify first when TLS is up.
                let _ = tokio::time::timeout(Duration::from_secs(1), stream.shutdown()).await;
                return;
            }
        }
    }
}

/// Resolves when the loop closes this attempt (or goes away); other commands cannot arrive
/// while a connect or handshake is pending, so they are dropped.
async fn wait_close(cmds: &mut UnboundedReceiver<Cmd>) {
    while let Some(c) = cmds.recv().await {
        if matches!(c, Cmd::Close) {
            return;
        }
    }
}
