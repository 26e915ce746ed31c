//! The connect machine driven by a hand-written poll loop over std sockets, then one query on
//! the connection it picked.
//!
//! ```sh
//! cargo run -p pgyard-connect --example poll_loop -- \
//!     'host=db1,db2 user=app dbname=shop target_session_attrs=read-write' 'select 1'
//! ```
//!
//! The loop is the whole contract of [`Connector`]: perform every action it hands out, feed
//! back what happened as events, and call `handle_timeout` when `poll_timeout` says. Its
//! simplifications, each said where it happens: TCP only (no Unix sockets), no TLS (a
//! `StartTls` is answered with a failure, after which `sslmode=prefer` falls back to
//! plaintext as libpq does and `require` or stronger ends the connect, so use
//! `sslmode=disable` or `prefer`), sockets opened one blocking call at a time, and a sweep of
//! non-blocking reads every millisecond instead of poll(2). pgyard-blocking and pgyard-tokio
//! are the complete drivers.

use std::collections::BTreeMap;
use std::error::Error;
use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::BytesMut;
use pgyard_connect::{
    Action, AttemptId, Connector, Established, Event, FailureKind, IoErrorKind, OpenTarget,
};
use pgyard_conninfo::resolve::{Environment, MemFiles};
use pgyard_types::Instant;
use pgyard_wire::backend::BackendMessage;
use pgyard_wire::error_fields::Verbosity;
use pgyard_wire::frame::{Decoded, FrameDecoder, Limits, Unit};
use pgyard_wire::frontend;

/// Every error of the example, as text.
pub type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

/// The longest one blocking `connect()` may take. The machine's own `connect_timeout` cannot
/// fire while the loop is stuck in it, so keep this short.
const OPEN_BOUND: Duration = Duration::from_secs(5);

/// The machine's clock: nanoseconds since the connect began.
struct Clock(std::time::Instant);

impl Clock {
    fn now(&self) -> Instant {
        Instant(u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }
}

/// Runs the machine for `conninfo` until it settles on a server; returns what it learned
/// about the connection and the socket, still holding any bytes after ReadyForQuery in
/// `Established::leftover`.
///
/// `env` stands for the process environment (`PGHOST`, `PGUSER`, …); service and password
/// files are not consulted here (`MemFiles::new()`), see pgyard-driver's `RealInputs`.
pub fn connect(conninfo: &str, env: &Environment) -> Result<(Established, TcpStream)> {
    let info = pgyard_conninfo::parse(conninfo)?;
    let config = pgyard_conninfo::configure(info, env, &MemFiles::new())?.config;
    let clock = Clock(std::time::Instant::now());
    // The seed drives the load-balancing shuffle and SCRAM nonces; any varying value will do
    // for a demonstration, a driver draws it from the OS.
    let seed = std::process::id() as u64 ^ clock.0.elapsed().as_nanos() as u64;
    let mut machine = Connector::new(config, clock.now(), seed);
    let mut sockets: BTreeMap<AttemptId, TcpStream> = BTreeMap::new();

    loop {
        // 1. Perform every action the machine has queued, answering at once where we can.
        while let Some(action) = machine.poll_action() {
            match action {
                Action::Resolve { token, host, port } => {
                    let event = match (host.as_str(), port).to_socket_addrs() {
                        Ok(addrs) => Event::Resolved {
                            token,
                            addrs: addrs.collect(),
                        },
                        // The machine words the error as libpq does around this text.
                        Err(e) => Event::ResolveFailed {
                            token,
                            message: e.to_string(),
                        },
                    };
                    machine.handle_event(clock.now(), event);
                }
                Action::Open {
                    attempt, target, ..
                } => {
                    // `tcp` (keepalives, TCP_USER_TIMEOUT) is ignored: std cannot set them.
                    let event = match target {
                        OpenTarget::Tcp(addr) => match open(&addr) {
                            Ok(socket) => {
                                sockets.insert(attempt, socket);
                                Event::Opened { attempt }
                            }
                            Err(e) => Event::OpenFailed {
                                attempt,
                                error: io_kind(&e),
                            },
                        },
                        OpenTarget::Unix(_) => Event::OpenFailed {
                            attempt,
                            error: IoErrorKind::Other("this example opens TCP only".into()),
                        },
                    };
                    machine.handle_event(clock.now(), event);
                }
                Action::Send { attempt, bytes } => {
                    if let Some(socket) = sockets.get_mut(&attempt) {
                        if send(socket, &bytes).is_err() {
                            machine.handle_event(clock.now(), Event::Closed { attempt });
                        }
                    }
                }
                Action::StartTls { attempt, .. } => {
                    let message = "this example has no TLS (use sslmode=disable)".to_owned();
                    let kind = FailureKind::Configuration;
                    machine.handle_event(
                        clock.now(),
                        Event::TlsFailed {
                            attempt,
                            message,
                            kind,
                            client_cert: pgyard_connect::ClientCert::NotRequested,
                        },
                    );
                }
                Action::Close { attempt } => {
                    sockets.remove(&attempt);
                }
                Action::Done(result) => {
                    let established = result?;
                    // The winner is never closed by the machine: its socket is ours now.
                    let socket = sockets
                        .remove(&established.attempt)
                        .ok_or("the winning attempt has no socket")?;
                    socket.set_nonblocking(false)?;
                    return Ok((*established, socket));
                }
            }
        }

        // 2. Nothing left to do until a socket has bytes or a deadline passes: look at both.
        let mut idle = true;
        let mut received = Vec::new();
        for (&attempt, socket) in &mut sockets {
            let mut chunk = [0u8; 16384];
            match socket.read(&mut chunk) {
                Ok(0) => received.push(Event::Closed { attempt }),
                Ok(n) => received.push(Event::Received {
                    attempt,
                    bytes: chunk[..n].to_vec(),
                }),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // A reset reads as the server going away, which is how libpq reports it.
                Err(_) => received.push(Event::Closed { attempt }),
            }
        }
        for event in received {
            machine.handle_event(clock.now(), event);
            idle = false;
        }
        if machine.poll_timeout().is_some_and(|at| at <= clock.now()) {
            machine.handle_timeout(clock.now());
            idle = false;
        }
        if idle {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Opens a TCP connection, non-blocking afterwards so that the loop can sweep all sockets.
fn open(addr: &std::net::SocketAddr) -> io::Result<TcpStream> {
    let socket = TcpStream::connect_timeout(addr, OPEN_BOUND)?;
    socket.set_nodelay(true)?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// Writes all of `bytes`. The socket blocks for the write only: the loop's sockets are
/// non-blocking for reading, and a partial write would need a queue this example has not.
fn send(socket: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    socket.set_nonblocking(false)?;
    let written = socket.write_all(bytes);
    socket.set_nonblocking(true)?;
    written
}

/// The machine words a failed `connect()` from the errno's `strerror` text.
fn io_kind(e: &io::Error) -> IoErrorKind {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => IoErrorKind::ConnectionRefused,
        io::ErrorKind::TimedOut => IoErrorKind::TimedOut,
        io::ErrorKind::HostUnreachable => IoErrorKind::HostUnreachable,
        io::ErrorKind::NetworkUnreachable => IoErrorKind::NetworkUnreachable,
        io::ErrorKind::PermissionDenied => IoErrorKind::PermissionDenied,
        io::ErrorKind::AddrNotAvailable => IoErrorKind::AddrNotAvailable,
        io::ErrorKind::ConnectionReset => IoErrorKind::ConnectionReset,
        _ => IoErrorKind::Other(e.to_string()),
    }
}

/// One simple query on the established connection: its rows, values as text.
pub fn simple_query(
    socket: &mut TcpStream,
    leftover: &[u8],
    sql: &str,
) -> Result<Vec<Vec<Option<String>>>> {
    let mut out = BytesMut::new();
    frontend::encode_query(sql.as_bytes(), &mut out)?;
    socket.write_all(&out)?;
    let mut decoder = FrameDecoder::backend(Limits::libpq_client());
    // Bytes that came after ReadyForQuery (a notice, say) belong before the reply.
    decoder.feed(leftover);
    let (mut rows, mut error) = (Vec::new(), None);
    loop {
        let frame = match decoder.decode()? {
            Decoded::Frame(Unit::Typed(frame)) => frame,
            Decoded::Frame(other) => return Err(format!("unexpected {other:?}").into()),
            Decoded::NeedMore { .. } => {
                let mut chunk = [0u8; 16384];
                match socket.read(&mut chunk)? {
                    0 => return Err("server closed the connection unexpectedly".into()),
                    n => decoder.feed(&chunk[..n]),
                }
                continue;
            }
        };
        match BackendMessage::decode(frame.tag(), frame.body())? {
            BackendMessage::DataRow(row) => rows.push(
                row.fields()
                    .map(|v| v.map(|v| String::from_utf8_lossy(v).into_owned()))
                    .collect(),
            ),
            BackendMessage::ErrorResponse(f) => error = Some(f.render(Verbosity::Default, true)),
            BackendMessage::ReadyForQuery(_) => break,
            _ => {}
        }
    }
    match error {
        Some(text) => Err(text.trim_end().to_owned().into()),
        None => Ok(rows),
    }
}

/// The process environment as the resolver takes it, with the OS user.
fn process_environment() -> Environment {
    let mut env = Environment::new();
    for (name, value) in std::env::vars() {
        env = env.with_var(name, value);
    }
    if let Some(user) = os_user() {
        env = env.with_os_user(user);
    }
    env
}

/// The user name libpq would take from the passwd database, which std cannot ask: `$USER`,
/// else the `/etc/passwd` entry of the owner of `/proc/self` (Linux).
fn os_user() -> Option<String> {
    if let Ok(user) = std::env::var("USER") {
        return Some(user);
    }
    let uid = std::os::unix::fs::MetadataExt::uid(&std::fs::metadata("/proc/self").ok()?);
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2)?.parse::<u32>().ok()? == uid).then(|| fields[0].to_owned())
    })
}

/// The command line: the arguments in, the result printed.
fn cli() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [conninfo, sql] = args.as_slice() else {
        return Err("usage: poll_loop CONNINFO SQL".into());
    };
    let (established, mut socket) = connect(conninfo, &process_environment())?;
    println!(
        "connected to {} ({:?}), slot {}",
        established.host, established.target, established.slot
    );
    for row in simple_query(&mut socket, &established.leftover, sql)? {
        let text: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap_or("")).collect();
        println!("{}", text.join("|"));
    }
    let mut bye = BytesMut::new();
    frontend::encode_terminate(&mut bye);
    socket.write_all(&bye)?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    // The errors are libpq's or the server's texts: print them as they are, not as Debug.
    match cli() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", e.to_string().trim_end());
            std::process::ExitCode::FAILURE
        }
    }
}
