//! The run loop: performs the connect machine's actions over real sockets and feeds back what
//! happened. It makes no protocol decisions; every choice (which address, when to give up,
//! what to send) is the machine's.
//!
//! Each opened attempt gets one thread that owns its socket: it connects, then alternates
//! between draining commands (send, start TLS, close, hand over) and a short-timeout read,
//! reporting results on one channel. The loop itself resolves host names inline (blocking,
//! as libpq does) and waits on that channel until the machine's next deadline.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use pgyard_connect::{
    Action, AttemptId, Connector, Established, Event, IoErrorKind, OpenTarget, TcpOptions,
};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

use crate::attempts::AttemptLog;
use crate::tls::{self, TlsSettings};
use crate::{Attempt, Clock, Error};

/// How long a worker's read waits before it looks at its commands again.
const POLL: Duration = Duration::from_millis(4);

/// A connected socket, TCP or Unix.
#[derive(Debug)]
pub(crate) enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.set_read_timeout(t),
            Sock::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn shutdown(&self) {
        // Best effort: the peer may be gone already.
        let _ = match self {
            Sock::Tcp(s) => s.shutdown(std::net::Shutdown::Both),
            Sock::Unix(s) => s.shutdown(std::net::Shutdown::Both),
        };
    }
}

impl Read for Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.read(buf),
            Sock::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sock::Tcp(s) => s.write(buf),
            Sock::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.flush(),
            Sock::Unix(s) => s.flush(),
        }
    }
}

/// A connection's byte stream: plain, or TLS over the socket.
#[derive(Debug)]
pub(crate) enum Transport {
    Plain(Sock),
    Tls(Box<rustls::StreamOwned<ClientConnection, Sock>>),
}

impl Transport {
    pub(crate) fn sock(&self) -> &Sock {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }

    /// Sends close_notify (TLS) and shuts the socket down.
    pub(crate) fn close(mut self) {
        if let Transport::Tls(t) = &mut self {
            t.conn.send_close_notify();
            let _ = t.conn.write_tls(&mut t.sock);
        }
        self.sock().shutdown();
    }
}

impl Read for Transport {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.read(buf),
            Transport::Tls(t) => match t.read(buf) {
                // A peer that drops TCP without close_notify: treat as EOF, as libpq does.
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
                other => other,
            },
        }
    }
}

impl Write for Transport {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => s.write(buf),
            Transport::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(s) => s.flush(),
            Transport::Tls(t) => t.flush(),
        }
    }
}

/// Connect-wide settings the loop needs besides the machine.
pub(crate) struct DriverConfig {
    pub(crate) tls: TlsSettings,
    /// Upper bound for one blocking `connect()`; kept above the machine's own
    /// `connect_timeout` so the machine's deadline always fires first.
    pub(crate) connect_bound: Option<Duration>,
}

/// What a connect produced: the winner, its transport and the attempt log.
pub(crate) type Outcome = Result<(Established, Transport), Error>;

/// Runs `connector` until it is done. `held` is the established connection a reset replaces
/// (the machine sends it Terminate and closes it).
pub(crate) fn run(
    connector: &mut Connector,
    clock: &Clock,
    cfg: &DriverConfig,
    mut held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Outcome {
    let (tx, rx) = mpsc::channel::<Msg>();
    let mut workers: BTreeMap<AttemptId, Sender<Cmd>> = BTreeMap::new();
    let mut local: VecDeque<Event> = VecDeque::new();
    let mut hosts: HashMap<IpAddr, String> = HashMap::new();
    let mut attempts = AttemptLog::new(log);
    loop {
        while let Some(action) = connector.poll_action() {
            match action {
                Action::Resolve { token, host, port } => {
                    local.push_back(resolve(token, &host, port, &mut hosts));
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
                    let (ctx, crx) = mpsc::channel();
                    workers.insert(attempt, ctx);
                    let out = tx.clone();
                    let bound = cfg.connect_bound;
                    thread::Builder::new()
                        .name(format!("pgyard-attempt-{}", attempt.0))
                        .spawn(move || worker(attempt, target, tcp, bound, crx, out))
                        .map_err(|e| e.to_string())
                        .unwrap_or_else(|e| {
                            local.push_back(Event::OpenFailed {
                                attempt,
                                error: IoErrorKind::Other(e),
                            });
                            thread::spawn(|| {})
                        });
                }
                Action::Send { attempt, bytes } => match &mut held {
                    Some((id, t)) if *id == attempt => {
                        // The old connection may be dead already; Terminate is a courtesy.
                        let _ = t.write_all(&bytes).and_then(|()| t.flush());
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
                    let name_for_text = server_name
                        .clone()
                        .or_else(|| ip.map(|i| i.to_string()))
                        .unwrap_or_default();
                    match cfg.tls.client_config(verify) {
                        Ok(config) => {
                            if let Some(w) = workers.get(&attempt) {
                                let _ = w.send(Cmd::StartTls {
                                    config,
                                    name: tls::server_name(server_name.as_deref(), ip),
                                    host: name_for_text,
                                });
                            }
                        }
                        Err(message) => local.push_back(Event::TlsFailed { attempt, message }),
                    }
                }
                Action::Close { attempt } => {
                    match held.take() {
                        Some((id, t)) if id == attempt => t.close(),
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
                    drop(workers);
                    let _ = w.send(Cmd::Handover);
                    let transport = take_over(&rx, est.attempt, &mut est.leftover)?;
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
        let wait = match connector.poll_timeout() {
            Some(t) if t <= now => {
                connector.handle_timeout(now);
                continue;
            }
            Some(t) => Duration::from_nanos(t.as_nanos() - now.as_nanos()),
            None => Duration::from_secs(3600),
        };
        match rx.recv_timeout(wait) {
            Ok(Msg::Event(ev)) => {
                attempts.event(&ev, clock.elapsed());
                connector.handle_event(clock.now(), ev);
            }
            Ok(Msg::Handover(..)) => {}
            Err(RecvTimeoutError::Timeout) => connector.handle_timeout(clock.now()),
            Err(RecvTimeoutError::Disconnected) => {
                return Err(Error::Internal("event channel closed".into()));
            }
        }
    }
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

fn resolve(
    token: pgyard_connect::ResolveToken,
    host: &str,
    port: u16,
    hosts: &mut HashMap<IpAddr, String>,
) -> Event {
    match (host, port).to_socket_addrs() {
        Ok(it) => {
            let addrs: Vec<SocketAddr> = it.collect();
            for a in &addrs {
                hosts.insert(a.ip(), host.to_owned());
            }
            Event::Resolved { token, addrs }
        }
        Err(e) => Event::ResolveFailed {
            token,
            message: e.to_string(),
        },
    }
}

/// Commands from the loop to one attempt's thread.
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

/// Reports from attempt threads.
enum Msg {
    Event(Event),
    Handover(AttemptId, Transport),
}

/// libpq's `IoErrorKind` for a socket error (by errno).
pub fn io_kind(e: &io::Error) -> IoErrorKind {
    match e.raw_os_error() {
        Some(111) => IoErrorKind::ConnectionRefused,
        Some(2) => IoErrorKind::NotFound,
        Some(113) => IoErrorKind::HostUnreachable,
        Some(101) => IoErrorKind::NetworkUnreachable,
        Some(110) => IoErrorKind::TimedOut,
        Some(13) => IoErrorKind::PermissionDenied,
        Some(99) => IoErrorKind::AddrNotAvailable,
        Some(104) => IoErrorKind::ConnectionReset,
        _ if e.kind() == io::ErrorKind::TimedOut => IoErrorKind::TimedOut,
        _ => {
            let text = e.to_string();
            let text = match text.find(" (os error ") {
                Some(i) => text[..i].to_owned(),
                None => text,
            };
            IoErrorKind::Other(text)
        }
    }
}

/// Opens a socket to `target` (bounded by `bound` for TCP).
pub(crate) fn open(target: &OpenTarget, bound: Option<Duration>) -> io::Result<Sock> {
    match target {
        OpenTarget::Tcp(addr) => {
            let s = match bound {
                Some(b) => TcpStream::connect_timeout(addr, b)?,
                None => TcpStream::connect(addr)?,
            };
            s.set_nodelay(true)?;
            Ok(Sock::Tcp(s))
        }
        OpenTarget::Unix(path) => {
            use std::os::unix::ffi::OsStrExt;
            if let Some(name) = path.strip_prefix(b"@") {
                use std::os::linux::net::SocketAddrExt;
                let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
                Ok(Sock::Unix(UnixStream::connect_addr(&addr)?))
            } else {
                let p = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
                Ok(Sock::Unix(UnixStream::connect(p)?))
            }
        }
    }
}

fn apply_tcp_options(sock: &Sock, opts: &TcpOptions) -> io::Result<()> {
    match sock {
        Sock::Tcp(s) => set_tcp_options(s, opts),
        Sock::Unix(_) => Ok(()),
    }
}

/// Sets the keepalive and `TCP_USER_TIMEOUT` options the machine asked for on a connected TCP
/// socket (std or tokio: anything with a file descriptor).
pub fn set_tcp_options(sock: &impl std::os::fd::AsFd, opts: &TcpOptions) -> io::Result<()> {
    let r = socket2::SockRef::from(sock);
    r.set_keepalive(opts.keepalives)?;
    if opts.keepalives {
        let mut ka = socket2::TcpKeepalive::new();
        if let Some(d) = opts.keepalives_idle {
            ka = ka.with_time(d);
        }
        if let Some(d) = opts.keepalives_interval {
            ka = ka.with_interval(d);
        }
        if let Some(n) = opts.keepalives_count {
            ka = ka.with_retries(n);
        }
        r.set_tcp_keepalive(&ka)?;
    }
    if let Some(d) = opts.tcp_user_timeout {
        r.set_tcp_user_timeout(Some(d))?;
    }
    Ok(())
}

/// One attempt's thread.
fn worker(
    attempt: AttemptId,
    target: OpenTarget,
    tcp: Option<TcpOptions>,
    bound: Option<Duration>,
    cmds: Receiver<Cmd>,
    out: Sender<Msg>,
) {
    let send = |ev: Event| out.send(Msg::Event(ev)).is_ok();
    let opened = open(&target, bound).and_then(|s| {
        if let Some(o) = &tcp {
            apply_tcp_options(&s, o)?;
        }
        s.set_read_timeout(Some(POLL))?;
        Ok(s)
    });
    let mut sock = match opened {
        Ok(s) => s,
        Err(e) => {
            send(Event::OpenFailed {
                attempt,
                error: io_kind(&e),
            });
            return;
        }
    };
    if !send(Event::Opened { attempt }) {
        return;
    }
    let mut tls: Option<(ClientConnection, String)> = None;
    let mut handshaking = false;
    let mut eof = false;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        // Commands first, so a Close or a Send never waits behind a read. After EOF the
        // socket stays open (blocking on commands) until the loop closes or takes it.
        loop {
            let next = if eof {
                cmds.recv().map_err(|_| TryRecvError::Disconnected)
            } else {
                cmds.try_recv()
            };
            match next {
                Ok(Cmd::Send(bytes)) => {
                    let r = match &mut tls {
                        Some((c, _)) => c
                            .writer()
                            .write_all(&bytes)
                            .and_then(|()| flush_tls(c, &mut sock)),
                        None => sock.write_all(&bytes),
                    };
                    if r.is_err() {
                        send(Event::Closed { attempt });
                        return;
                    }
                }
                Ok(Cmd::StartTls { config, name, host }) => {
                    match ClientConnection::new(config, name) {
                        Ok(mut c) => {
                            if flush_tls(&mut c, &mut sock).is_err() {
                                send(Event::Closed { attempt });
                                return;
                            }
                            tls = Some((c, host));
                            handshaking = true;
                        }
                        Err(e) => {
                            send(Event::TlsFailed {
                                attempt,
                                message: format!("SSL error: {e}"),
                            });
                        }
                    }
                }
                Ok(Cmd::Close) | Err(TryRecvError::Disconnected) => {
                    if let Some((c, _)) = &mut tls {
                        c.send_close_notify();
                        let _ = flush_tls(c, &mut sock);
                    }
                    sock.shutdown();
                    return;
                }
                Ok(Cmd::Handover) => {
                    let _ = sock.set_read_timeout(None);
                    let t = match tls.take() {
                        Some((c, _)) => Transport::Tls(Box::new(rustls::StreamOwned::new(c, sock))),
                        None => Transport::Plain(sock),
                    };
                    let _ = out.send(Msg::Handover(attempt, t));
                    return;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
        match &mut tls {
            None => match sock.read(&mut buf) {
                Ok(0) => {
                    send(Event::Closed { attempt });
                    {
                        eof = true;
                        continue;
                    }
                }
                Ok(n) => {
                    if !send(Event::Received {
                        attempt,
                        bytes: buf[..n].to_vec(),
                    }) {
                        return;
                    }
                }
                Err(e) if is_timeout(&e) => {}
                Err(_) => {
                    send(Event::Closed { attempt });
                    {
                        eof = true;
                        continue;
                    }
                }
            },
            Some((c, host)) => {
                match c.read_tls(&mut sock) {
                    Ok(0) => {
                        send(Event::Closed { attempt });
                        {
                            eof = true;
                            continue;
                        }
                    }
                    Ok(_) => {}
                    Err(e) if is_timeout(&e) => continue,
                    Err(_) => {
                        send(Event::Closed { attempt });
                        {
                            eof = true;
                            continue;
                        }
                    }
                }
                let state = match c.process_new_packets() {
                    Ok(s) => s,
                    Err(e) => {
                        let _ = flush_tls(c, &mut sock);
                        if handshaking {
                            send(Event::TlsFailed {
                                attempt,
                                message: tls::handshake_error_text(&e, host),
                            });
                        } else {
                            send(Event::Closed { attempt });
                        }
                        {
                            eof = true;
                            continue;
                        }
                    }
                };
                if flush_tls(c, &mut sock).is_err() {
                    send(Event::Closed { attempt });
                    {
                        eof = true;
                        continue;
                    }
                }
                if handshaking && !c.is_handshaking() {
                    handshaking = false;
                    if !send(tls::established(attempt, c)) {
                        return;
                    }
                }
                let n = state.plaintext_bytes_to_read();
                if n > 0 {
                    let mut data = vec![0u8; n];
                    if c.reader().read_exact(&mut data).is_ok()
                        && !send(Event::Received {
                            attempt,
                            bytes: data,
                        })
                    {
                        return;
                    }
                }
                if state.peer_has_closed() {
                    send(Event::Closed { attempt });
                    {
                        eof = true;
                        continue;
                    }
                }
            }
        }
    }
}

/// After EOF: keep the thread (and so the socket) until the loop closes the attempt.
fn flush_tls(c: &mut ClientConnection, sock: &mut Sock) -> io::Result<()> {
    while c.wants_write() {
        c.write_tls(sock)?;
    }
    sock.flush()
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}
