//! The async run loop: performs the connect machine's actions with tokio sockets and feeds
//! back what happened. Like the blocking loop it makes no protocol decision; every choice
//! (which address, when to give up, what to send, how strictly to verify) is the machine's.
//!
//! Each opened attempt is one tokio task that owns its socket: it connects, then waits on its
//! command channel (send, start TLS, close, hand over) and on the socket at once, reporting on
//! one channel. Host names are resolved by tasks too, so a race never waits on DNS. The loop
//! waits on that channel until the machine's next deadline (`sleep_until`).

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use pgyard_blocking::attempts::AttemptLog;
use pgyard_blocking::tls::{self, TlsSettings};
use pgyard_blocking::{Attempt, Error};
use pgyard_connect::{
    Action, AttemptId, Connector, Established, Event, OpenTarget, ResolveToken, TcpOptions,
};
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::Clock;

/// A byte stream the session can own: TCP, Unix, or TLS over either.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// A connection's byte stream, whatever it runs over.
pub(crate) type Transport = Box<dyn Io>;

/// Connect-wide settings the loop needs besides the machine.
pub(crate) struct DriverConfig {
    pub(crate) tls: TlsSettings,
    /// Upper bound for one `connect()`; above the machine's own `connect_timeout`.
    pub(crate) connect_bound: Option<Duration>,
}

/// Runs `connector` until it is done. `held` is the established connection a reset replaces
/// (the machine sends it Terminate and closes it).
pub(crate) async fn run(
    connector: &mut Connector,
    clock: &Clock,
    cfg: &DriverConfig,
    mut held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Msg>();
    let mut workers: HashMap<AttemptId, UnboundedSender<Cmd>> = HashMap::new();
    let mut local: VecDeque<Event> = VecDeque::new();
    let mut hosts: HashMap<IpAddr, String> = HashMap::new();
    let mut attempts = AttemptLog::new(log);
    loop {
        while let Some(action) = connector.poll_action() {
            match action {
                Action::Resolve { token, host, port } => {
                    let out = tx.clone();
                    tokio::spawn(async move {
                        let (ev, addrs) = resolve(token, &host, port).await;
                        let _ = out.send(Msg::Resolved(host, addrs, ev));
                    });
                }
                Action::Open {
                    attempt,
                    target,
                    tcp,
                } => {
                    let host = match &target {
                        OpenTarget::Tcp(a) => hosts
                            .get(&a.ip())
                            .cloned()
                            .unwrap_or_else(|| a.ip().to_string()),
                        OpenTarget::Unix(p) => String::from_utf8_lossy(p).into_owned(),
                    };
                    attempts.opened(attempt, host, target.clone(), clock.elapsed());
                    let (ctx, crx) = mpsc::unbounded_channel();
                    workers.insert(attempt, ctx);
                    let out = tx.clone();
                    let bound = cfg.connect_bound;
                    tokio::spawn(worker(attempt, target, tcp, bound, crx, out));
                }
                Action::Send { attempt, bytes } => match &mut held {
                    Some((id, t)) if *id == attempt => {
                        // The old connection may be dead already; Terminate is a courtesy.
                        let _ = write_flush(t, &bytes).await;
                    }
                    _ => {
                        if let Some(w) = workers.get(&attempt) {
                            let _ = w.send(Cmd::Send(bytes));
                        }
                    }
                },
                Action::StartTls {
                    attempt,
                    server_name,
                    verify,
                    ..
                } => {
                    let ip = match attempts.target(attempt) {
                        Some(OpenTarget::Tcp(a)) => Some(a.ip()),
                        _ => None,
                    };
                    let host = server_name
                        .clone()
                        .or_else(|| ip.map(|i| i.to_string()))
                        .unwrap_or_default();
                    match cfg.tls.client_config(verify) {
                        Ok(config) => {
                            if let Some(w) = workers.get(&attempt) {
                                let _ = w.send(Cmd::StartTls {
                                    config,
                                    name: tls::server_name(server_name.as_deref(), ip),
                                    host,
                                });
                            }
                        }
                        Err(message) => local.push_back(Event::TlsFailed { attempt, message }),
                    }
                }
                Action::Close { attempt } => {
                    match held.take() {
                        Some((id, mut t)) if id == attempt => {
                            let _ = t.shutdown().await;
                        }
                        other => held = other,
                    }
                    if let Some(w) = workers.remove(&attempt) {
                        let _ = w.send(Cmd::Close);
                    }
                    attempts.closed(attempt, clock.elapsed());
                }
                Action::Done(Ok(mut est)) => {
                    let Some(w) = workers.remove(&est.attempt) else {
                        return Err(Error::Internal("the winning attempt has no socket".into()));
                    };
                    // Dropping the other senders ends any worker the machine did not close.
                    drop(workers);
                    let _ = w.send(Cmd::Handover);
                    let transport = take_over(&mut rx, est.attempt, &mut est.leftover).await?;
                    attempts.connected(est.attempt, clock.elapsed());
                    return Ok((est, transport));
                }
                Action::Done(Err(e)) => {
                    attempts.failed(&e, clock.elapsed());
                    return Err(Error::Connect(e));
                }
            }
        }
        if let Some(ev) = local.pop_front() {
            connector.handle_event(clock.now(), ev);
            continue;
        }
        let now = clock.now();
        let deadline = match connector.poll_timeout() {
            Some(t) if t <= now => {
                connector.handle_timeout(now);
                continue;
            }
            Some(t) => Some(clock.deadline(t)),
            None => None,
        };
        let msg = match deadline {
            Some(d) => tokio::select! {
                m = rx.recv() => m,
                () = tokio::time::sleep_until(d) => {
                    connector.handle_timeout(clock.now());
                    continue;
                }
            },
            None => rx.recv().await,
        };
        match msg {
            Some(Msg::Event(ev)) => {
                attempts.event(&ev, clock.elapsed());
                connector.handle_event(clock.now(), ev);
            }
            Some(Msg::Resolved(host, addrs, ev)) => {
                for a in addrs {
                    hosts.insert(a.ip(), host.clone());
                }
                connector.handle_event(clock.now(), ev);
            }
            Some(Msg::Handover(..)) => {}
            // `tx` is held here, so the channel cannot close.
            None => return Err(Error::Internal("event channel closed".into())),
        }
    }
}

async fn write_flush(t: &mut Transport, bytes: &[u8]) -> io::Result<()> {
    t.write_all(bytes).await?;
    t.flush().await
}

/// Waits for the winner's task to hand its stream back; bytes it read meanwhile belong after
/// the machine's leftover.
async fn take_over(
    rx: &mut UnboundedReceiver<Msg>,
    winner: AttemptId,
    leftover: &mut Vec<u8>,
) -> Result<Transport, Error> {
    let wait = async {
        loop {
            match rx.recv().await {
                Some(Msg::Handover(id, t)) if id == winner => return Some(t),
                Some(Msg::Event(Event::Received { attempt, bytes })) if attempt == winner => {
                    leftover.extend_from_slice(&bytes);
                }
                Some(_) => {}
                None => return None,
            }
        }
    };
    match tokio::time::timeout(Duration::from_secs(10), wait).await {
        Ok(Some(t)) => Ok(t),
        _ => Err(Error::Internal("the winning connection was lost".into())),
    }
}

/// getaddrinfo through tokio (a blocking-pool thread, as std's `ToSocketAddrs`); the error
/// text is glibc's `gai_strerror` text.
async fn resolve(token: ResolveToken, host: &str, port: u16) -> (Event, Vec<SocketAddr>) {
    match tokio::net::lookup_host((host, port)).await {
        Ok(it) => {
            let addrs: Vec<SocketAddr> = it.collect();
            (
                Event::Resolved {
                    token,
                    addrs: addrs.clone(),
                },
                addrs,
            )
        }
        Err(e) => (
            Event::ResolveFailed {
                token,
                message: e.to_string(),
            },
            Vec::new(),
        ),
    }
}

/// Commands from the loop to one attempt's task.
enum Cmd {
    Send(Vec<u8>),
    StartTls {
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        host: String,
    },
    Close,
    Handover,
}

/// Reports from attempt and resolver tasks.
enum Msg {
    Event(Event),
    Resolved(String, Vec<SocketAddr>, Event),
    Handover(AttemptId, Transport),
}

/// Connects a TCP socket with `TCP_NODELAY`, bounded by `bound` (running out reads as
/// ETIMEDOUT).
async fn open_tcp(addr: &SocketAddr, bound: Option<Duration>) -> io::Result<TcpStream> {
    let s = match bound {
        Some(b) => tokio::time::timeout(b, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::from_raw_os_error(110))??,
        None => TcpStream::connect(addr).await?,
    };
    s.set_nodelay(true)?;
    Ok(s)
}

/// Opens a socket to `target` (bounded by `bound` for TCP) and applies the machine's TCP
/// options, if any.
pub(crate) async fn open(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
) -> io::Result<Transport> {
    match target {
        OpenTarget::Tcp(addr) => {
            let s = open_tcp(addr, bound).await?;
            if let Some(opts) = tcp {
                pgyard_blocking::set_tcp_options(&s, opts)?;
            }
            Ok(Box::new(s))
        }
        OpenTarget::Unix(path) => {
            use std::os::unix::ffi::OsStrExt;
            if let Some(name) = path.strip_prefix(b"@") {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
                s.set_nonblocking(true)?;
                Ok(Box::new(UnixStream::from_std(s)?))
            } else {
                let p = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
                Ok(Box::new(UnixStream::connect(p).await?))
            }
        }
    }
}

/// One attempt's task.
async fn worker(
    attempt: AttemptId,
    target: OpenTarget,
    tcp: Option<TcpOptions>,
    bound: Option<Duration>,
    mut cmds: UnboundedReceiver<Cmd>,
    out: UnboundedSender<Msg>,
) {
    let send = |ev: Event| out.send(Msg::Event(ev)).is_ok();
    // A Close (or the loop going away) while connect() is pending simply drops the socket.
    let opened = tokio::select! {
        r = open(&target, tcp.as_ref(), bound) => r,
        _ = wait_close(&mut cmds) => return,
    };
    let mut stream = match opened {
        Ok(s) => s,
        Err(e) => {
            send(Event::OpenFailed {
                attempt,
                error: pgyard_blocking::io_kind(&e),
            });
            return;
        }
    };
    if !send(Event::Opened { attempt }) {
        return;
    }
    let mut eof = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let cmd = if eof {
            // After EOF the socket stays open until the loop closes or takes it.
            cmds.recv().await
        } else {
            tokio::select! {
                biased;
                c = cmds.recv() => c,
                r = stream.read(&mut buf) => {
                    match r {
                        Ok(n) if n > 0 => {
                            if !send(Event::Received { attempt, bytes: buf[..n].to_vec() }) {
                                return;
                            }
                        }
                        // EOF, a reset, or a TLS peer dropping TCP without close_notify.
                        _ => {
                            send(Event::Closed { attempt });
                            eof = true;
                        }
                    }
                    continue;
                }
            }
        };
        match cmd {
            Some(Cmd::Send(bytes)) => {
                if write_flush(&mut stream, &bytes).await.is_err() {
                    send(Event::Closed { attempt });
                    eof = true;
                }
            }
            Some(Cmd::StartTls { config, name, host }) => {
                let connector = tokio_rustls::TlsConnector::from(config);
                let handshake = connector.connect(name, stream);
                let result = tokio::select! {
                    r = handshake => r,
                    _ = wait_close(&mut cmds) => return,
                };
                let tls = match result {
                    Ok(t) => t,
                    Err(e) => {
                        let ev = match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                            Some(te) => Event::TlsFailed {
                                attempt,
                                message: tls::handshake_error_text(te, &host),
                            },
                            None => Event::Closed { attempt },
                        };
                        send(ev);
                        // The socket went with the failed handshake; wait for the Close.
                        let _ = wait_close(&mut cmds).await;
                        return;
                    }
                };
                let ev = tls::established(attempt, tls.get_ref().1);
                stream = Box::new(tls);
                if !send(ev) {
                    return;
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
