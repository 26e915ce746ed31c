//! Blocking I/O for the shared driver core (decisions are the machine's, bookkeeping the
//! core's). Each attempt's thread owns its socket and waits on it and on a wake-up socket at
//! once, so a command (send this, hand the socket over) is carried out the moment it is
//! posted rather than when a read times out; it reports on one channel; names resolve
//! inline, as libpq's do.

use std::io::{self, Read, Write};
use std::net::ToSocketAddrs;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::thread;
use std::time::Duration;

use pgyard_connect::{AttemptId, Established, Event, OpenTarget, TcpOptions};
use pgyard_driver::core::{Io, Mailbox, Step, TlsStart, WorkerCmd};
use pgyard_driver::tls::CertProbe;
use pgyard_driver::{io_kind, open_event, peer_event, tls, Attempt, Driving, Error, Machine};
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustls::ClientConnection;

use crate::transport::{open, Transport};

/// How long a worker's read waits before it looks at its commands again: only a bound, since
/// a posted command wakes the worker at once.
pub(crate) const POLL: Duration = Duration::from_millis(4);

/// How long a worker waits for its socket or a wake-up before it looks again anyway.
const IDLE: Timespec = Timespec {
    tv_sec: 0,
    tv_nsec: 100_000_000,
};

type Cmd = WorkerCmd<TlsStart>;

/// An attempt's mailbox: its command channel, and a socket pair whose one byte per command
/// wakes the worker out of its wait on the server's socket.
pub(crate) struct Mail {
    cmds: Sender<Cmd>,
    wake: UnixStream,
}

impl Mailbox for Mail {
    fn post(&self, cmd: Cmd) {
        if self.cmds.send(cmd).is_ok() {
            // Non-blocking: a full pair already holds a wake-up the worker has yet to see.
            let _ = (&self.wake).write(&[1]);
        }
    }
}

/// A command channel and its wake-up pair: the mailbox, and the worker's ends.
fn mail() -> io::Result<(Mail, Receiver<Cmd>, UnixStream)> {
    let (cmds, rx) = mpsc::channel();
    let (wake, woken) = UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    woken.set_nonblocking(true)?;
    Ok((Mail { cmds, wake }, rx, woken))
}

/// What a worker's wait ended on.
enum Ready {
    /// The socket has something (bytes, EOF or an error) for a read.
    Socket,
    /// A command was posted.
    Woken,
    /// Nothing within [`IDLE`].
    Idle,
}

/// Waits for the server's socket or a wake-up; a failed poll falls back to the timed read.
fn wait(sock: &socket2::Socket, woken: &UnixStream) -> Ready {
    let mut fds = [
        PollFd::new(sock, PollFlags::IN),
        PollFd::new(woken, PollFlags::IN),
    ];
    match poll(&mut fds, Some(&IDLE)) {
        Ok(0) => Ready::Idle,
        Err(e) if e == rustix::io::Errno::INTR => Ready::Idle,
        Err(_) => Ready::Socket,
        Ok(_) if !fds[1].revents().is_empty() => {
            let mut sink = [0u8; 64];
            while matches!((&*woken).read(&mut sink), Ok(n) if n > 0) {}
            Ready::Woken
        }
        Ok(_) => Ready::Socket,
    }
}

/// Runs `machine` until it is done, appending its attempts to `log`. `held` is the
/// established connection a reset replaces.
pub(crate) fn run(
    machine: &mut Machine,
    mut held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    let (tx, rx) = mpsc::channel::<Msg>();
    let d: Driving<'_, _> = machine.driving(held.as_ref().map(|h| h.0));
    let (m, clock, bound, mut core) = (d.machine, d.clock, d.bound, d.core);
    let outcome = loop {
        let io = match core.step(m, clock.now()) {
            Step::Io(io) => io,
            Step::Wait { within } => {
                // `tx` lives here, so the channel cannot disconnect: an error is the timeout.
                if let Ok(Msg::Event(ev)) = rx.recv_timeout(within.unwrap_or(Duration::MAX)) {
                    core.report(m, clock.now(), ev);
                }
                continue;
            }
            Step::Won(mut est) => {
                let won = take_over(&rx, est.attempt, &mut est.leftover);
                break won.map(|transport| (*est, transport));
            }
            Step::Failed(e) => break Err(e),
        };
        match io {
            Io::Resolve { token, host, port } => {
                let found = (host.as_str(), port).to_socket_addrs();
                let result = found.map(Iterator::collect).map_err(|e| e.to_string());
                core.resolved(m, clock.now(), token, &host, result);
            }
            Io::Open {
                attempt,
                target,
                tcp,
                peer_user,
            } => {
                let out = tx.clone();
                let spawned = mail().and_then(|(ctx, crx, woken)| {
                    let open = (target, tcp, peer_user);
                    thread::Builder::new()
                        .name(format!("pgyard-attempt-{}", attempt.0))
                        .spawn(move || worker(attempt, open, bound, (crx, woken), out))?;
                    Ok(ctx)
                });
                match spawned {
                    Ok(ctx) => core.spawned(attempt, ctx),
                    Err(e) => core.report(
                        m,
                        clock.now(),
                        Event::OpenFailed {
                            attempt,
                            error: io_kind(&e),
                        },
                    ),
                }
            }
            Io::SendHeld { bytes } => {
                if let Some((_, t)) = held.as_mut() {
                    // The old connection may be dead already; Terminate is a courtesy.
                    let _ = t.send(&bytes);
                }
            }
            Io::CloseHeld => {
                if let Some((_, t)) = held.take() {
                    t.close();
                }
            }
        }
    };
    log.append(&mut core.take_attempts());
    outcome
}

/// Waits for the winner's worker to hand its socket back; bytes it read meanwhile belong
/// after the machine's leftover.
fn take_over(
    rx: &Receiver<Msg>,
    winner: AttemptId,
    leftover: &mut Vec<u8>,
) -> Result<Transport, Error> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(Msg::Handover(id, t)) if id == winner => return Ok(t),
            Ok(Msg::Event(Event::Received { attempt, bytes })) if attempt == winner => {
                leftover.extend_from_slice(&bytes);
            }
            Ok(_) => {}
            Err(_) => return Err(Error::Internal("the winning connection was lost".into())),
        }
    }
}

/// Reports from attempt threads.
enum Msg {
    Event(Event),
    Handover(AttemptId, Transport),
}

/// One attempt's thread (`open`: where to, the TCP options, and whether the machine wants the
/// socket's peer user). After EOF the socket stays open (blocking on commands) until the loop
/// closes the attempt or takes its socket over.
fn worker(
    attempt: AttemptId,
    (target, tcp, peer_user): (OpenTarget, Option<TcpOptions>, bool),
    bound: Option<Duration>,
    (cmds, woken): (Receiver<Cmd>, UnixStream),
    out: Sender<Msg>,
) {
    let report = |ev: Event| out.send(Msg::Event(ev)).is_ok();
    let opened = open_attempt(&target, tcp.as_ref(), bound);
    if let (true, Ok(sock)) = (peer_user, &opened) {
        if !report(peer_event(attempt, sock)) {
            return;
        }
    }
    if !report(open_event(attempt, &opened)) {
        return;
    }
    let Ok(sock) = opened else { return };
    let mut stream = Transport::Plain(sock);
    // While a handshake is under way: the host named in certificate errors, and what it did
    // with client certificates.
    let mut handshake: Option<(String, CertProbe)> = None;
    let mut eof = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Commands first, so a Close or a Send never waits behind a read.
        let cmd = if eof {
            cmds.recv().map_err(|_| TryRecvError::Disconnected)
        } else {
            cmds.try_recv()
        };
        let ev = match cmd {
            Ok(Cmd::Send(bytes)) => match stream.send(&bytes) {
                Ok(()) => continue,
                Err(_) => Event::Closed { attempt },
            },
            Ok(Cmd::StartTls(start)) => match start_tls(attempt, stream, start) {
                Ok((tls, pending)) => {
                    stream = tls;
                    handshake = Some(pending);
                    continue;
                }
                Err((same, ev)) => {
                    stream = same;
                    ev
                }
            },
            Ok(Cmd::Handover) => {
                let _ = stream.sock().set_read_timeout(None);
                let _ = out.send(Msg::Handover(attempt, stream));
                return;
            }
            Ok(Cmd::Close) | Err(TryRecvError::Disconnected) => return stream.close(),
            Err(TryRecvError::Empty) => {
                if may_wait(&stream) && !matches!(wait(stream.sock(), &woken), Ready::Socket) {
                    continue;
                }
                match read_step(attempt, &mut stream, &mut handshake, &mut buf) {
                    Next::Again => continue,
                    Next::Report(ev) if ends(&ev) => ev,
                    Next::Report(ev) => {
                        if report(ev) {
                            continue;
                        }
                        return;
                    }
                }
            }
        };
        if !report(ev) {
            return;
        }
        eof = true;
    }
}

/// Opens an attempt's socket, its reads bounded by [`POLL`] so that a loop reading it looks
/// at its commands again in time.
pub(crate) fn open_attempt(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
) -> io::Result<socket2::Socket> {
    let s = open(target, tcp, bound)?;
    s.set_read_timeout(Some(POLL))?;
    Ok(s)
}

/// Puts TLS over a plain stream: the TLS stream, with the host to name in certificate errors
/// and the client-certificate probe while the handshake runs, or the stream unchanged and the
/// event that says why not.
pub(crate) fn start_tls(
    attempt: AttemptId,
    stream: Transport,
    TlsStart {
        config,
        name,
        host,
        probe,
    }: TlsStart,
) -> Result<(Transport, (String, CertProbe)), (Transport, Event)> {
    match (stream, ClientConnection::new(config, name)) {
        (Transport::Plain(sock), Ok(c)) => Ok((
            Transport::Tls(Box::new(rustls::StreamOwned::new(c, sock))),
            (host, probe),
        )),
        (same, result) => {
            let why = result
                .err()
                .map_or("TLS is up already".into(), |e| e.to_string());
            // rustls refused its own configuration: a setting that cannot work.
            let ev = Event::TlsFailed {
                attempt,
                message: format!("SSL error: {why}"),
                kind: pgyard_connect::FailureKind::Configuration,
                client_cert: pgyard_connect::ClientCert::NotRequested,
            };
            Err((same, ev))
        }
    }
}

/// What one read (or handshake step) of a worker came to.
pub(crate) enum Next {
    /// Nothing yet: look at the commands and wait again.
    Again,
    /// An event for the machine.
    Report(Event),
}

/// Whether `ev` ends the worker's reading (the connection is gone or unusable).
pub(crate) fn ends(ev: &Event) -> bool {
    matches!(
        ev,
        Event::Closed { .. } | Event::Broken { .. } | Event::TlsFailed { .. }
    )
}

/// Whether the worker may wait on the socket: not while TLS has bytes to write or plaintext
/// already decrypted, which no poll of the socket would announce.
pub(crate) fn may_wait(stream: &Transport) -> bool {
    match stream {
        Transport::Plain(_) => true,
        Transport::Tls(t) => t.conn.wants_read() && !t.conn.wants_write(),
    }
}

/// Reads what the socket has, or moves a TLS handshake along.
pub(crate) fn read_step(
    attempt: AttemptId,
    stream: &mut Transport,
    handshake: &mut Option<(String, CertProbe)>,
    buf: &mut [u8],
) -> Next {
    match (stream, &*handshake) {
        (Transport::Tls(t), Some((host, probe))) => match t.conn.complete_io(&mut t.sock) {
            Ok(_) if t.conn.is_handshaking() => Next::Again,
            Ok(_) => {
                let ev = tls::established(attempt, &t.conn, probe);
                *handshake = None;
                Next::Report(ev)
            }
            Err(e) if is_timeout(&e) => Next::Again,
            Err(e) => Next::Report(tls::handshake_failed(attempt, &e, host, probe)),
        },
        (stream, _) => match stream.read(buf) {
            Ok(n) if n > 0 => Next::Report(Event::Received {
                attempt,
                bytes: buf[..n].to_vec(),
            }),
            Err(e) if is_timeout(&e) => Next::Again,
            // EOF, a reset, or a TLS peer dropping TCP without close_notify; an alert.
            failed => Next::Report(tls::read_failed(attempt, failed.as_ref().err())),
        },
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
