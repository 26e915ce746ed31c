//! A recording TCP proxy for golden captures of real client/server traffic.
//!
//! [`RecordingProxy::start`] listens on a free port of `127.0.0.1`; every client it accepts is
//! connected to the server port, and both directions are copied verbatim by plain threads.
//! The bytes of connection `n` (numbered from 1 in accept order) are appended to
//! `<dir>/<n>.frontend` (client → server) and `<dir>/<n>.backend` (server → client) as they
//! pass, so a capture holds exactly what crossed the wire, from the first byte.
//!
//! [`RecordingProxy::shutdown`] (also run on drop) stops accepting, closes every connection
//! still open and waits, bounded, for the copy threads to finish writing.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// How long [`RecordingProxy::shutdown`] and [`RecordingProxy::wait_idle`] wait at most.
pub const WAIT_BOUND: Duration = Duration::from_secs(10);

/// How long connecting to the server may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How often blocked threads look at the stop flag.
const POLL: Duration = Duration::from_millis(50);

/// State shared by the accept thread and the copy threads.
#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    accepted: AtomicUsize,
    /// Copy threads still running.
    active: AtomicUsize,
    /// Sockets of open connections, so shutdown can unblock their readers.
    sockets: Mutex<Vec<TcpStream>>,
    /// Copy threads, joined on shutdown.
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// A running recording proxy; see the module documentation.
#[derive(Debug)]
pub struct RecordingProxy {
    addr: SocketAddr,
    dir: PathBuf,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl RecordingProxy {
    /// Listens on a free port of `127.0.0.1`, forwarding to `127.0.0.1:<server_port>` and
    /// recording into `dir` (created if missing).
    pub fn start(server_port: u16, dir: impl Into<PathBuf>) -> io::Result<RecordingProxy> {
        let dir = dir.into();
        fs::create_dir_all(&dir)?;
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let server = SocketAddr::from((Ipv4Addr::LOCALHOST, server_port));
        let shared = Arc::new(Shared::default());
        let acceptor = {
            let shared = Arc::clone(&shared);
            let dir = dir.clone();
            thread::Builder::new()
                .name("recording-proxy-accept".into())
                .spawn(move || accept_loop(listener, server, &dir, &shared))?
        };
        Ok(RecordingProxy {
            addr,
            dir,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The port clients should connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The folder the captures are written to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// How many client connections were accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// The two capture files of connection `n` (1-based): `(frontend, backend)`.
    pub fn capture_paths(&self, n: usize) -> (PathBuf, PathBuf) {
        capture_paths(&self.dir, n)
    }

    /// Waits (at most [`WAIT_BOUND`]) until every accepted connection was closed by a peer and
    /// its bytes were written; returns whether that happened in time.
    pub fn wait_idle(&self) -> bool {
        let deadline = Instant::now() + WAIT_BOUND;
        while self.shared.active.load(Ordering::SeqCst) > 0 {
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// Stops accepting, closes the connections still open and waits (bounded) for the copy
    /// threads; idempotent.
    pub fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        if let Ok(sockets) = self.shared.sockets.lock() {
            for s in sockets.iter() {
                let _ = s.shutdown(Shutdown::Both);
            }
        }
        let _ = self.wait_idle();
        let threads = match self.shared.threads.lock() {
            Ok(mut t) => std::mem::take(&mut *t),
            Err(_) => Vec::new(),
        };
        for t in threads {
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }
}

impl Drop for RecordingProxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `<dir>/<n>.frontend` and `<dir>/<n>.backend`.
pub fn capture_paths(dir: &Path, n: usize) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{n}.frontend")),
        dir.join(format!("{n}.backend")),
    )
}

fn accept_loop(listener: TcpListener, server: SocketAddr, dir: &Path, shared: &Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let n = shared.accepted.fetch_add(1, Ordering::SeqCst) + 1;
                if let Err(e) = start_connection(client, server, dir, n, shared) {
                    eprintln!("recording proxy: connection {n}: {e}");
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => thread::sleep(POLL / 5),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                eprintln!("recording proxy: accept: {e}");
                thread::sleep(POLL);
            }
        }
    }
}

fn start_connection(
    client: TcpStream,
    server: SocketAddr,
    dir: &Path,
    n: usize,
    shared: &Arc<Shared>,
) -> io::Result<()> {
    client.set_nonblocking(false)?;
    let upstream = match TcpStream::connect_timeout(&server, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) => {
            let _ = client.shutdown(Shutdown::Both);
            return Err(e);
        }
    };
    for s in [&client, &upstream] {
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(POLL))?;
    }
    let (front_path, back_path) = capture_paths(dir, n);
    let open = |p: &Path| OpenOptions::new().create(true).append(true).open(p);
    let (front_file, back_file) = (open(&front_path)?, open(&back_path)?);
    if let Ok(mut sockets) = shared.sockets.lock() {
        sockets.push(client.try_clone()?);
        sockets.push(upstream.try_clone()?);
    }
    let pipes = [
        (client.try_clone()?, upstream.try_clone()?, front_file, "fe"),
        (upstream, client, back_file, "be"),
    ];
    for (from, to, file, side) in pipes {
        let shared2 = Arc::clone(shared);
        shared.active.fetch_add(1, Ordering::SeqCst);
        let handle = thread::Builder::new()
            .name(format!("recording-proxy-{n}-{side}"))
            .spawn(move || {
                copy_and_record(from, to, file, &shared2.stop);
                shared2.active.fetch_sub(1, Ordering::SeqCst);
            });
        match handle {
            Ok(h) => {
                if let Ok(mut threads) = shared.threads.lock() {
                    threads.push(h);
                }
            }
            Err(e) => {
                shared.active.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        }
    }
    Ok(())
}

/// Copies `from` to `to`, appending every chunk to `file` before forwarding it. Ends when
/// `from` reaches end of stream or fails, or when `stop` is set; then half-closes `to`.
fn copy_and_record(mut from: TcpStream, mut to: TcpStream, mut file: File, stop: &AtomicBool) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let chunk = &buf[..n];
                if file.write_all(chunk).is_err() || to.write_all(chunk).is_err() {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
            }
            Err(_) => break,
        }
    }
    let _ = file.flush();
    let _ = to.shutdown(Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_both_directions_of_each_connection() {
        let server = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = server.local_addr().expect("addr").port();
        let echo = thread::spawn(move || {
            for _ in 0..2 {
                let (mut s, _) = server.accept().expect("accept");
                let mut got = Vec::new();
                s.read_to_end(&mut got).expect("read");
                let mut reply = b"re:".to_vec();
                reply.extend_from_slice(&got);
                s.write_all(&reply).expect("write");
            }
        });
        let dir = std::env::temp_dir().join(format!("pgyard-proxy-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let mut proxy = RecordingProxy::start(port, &dir).expect("proxy");
        for msg in [&b"hello"[..], b"world!"] {
            let mut c = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect");
            c.write_all(msg).expect("send");
            c.shutdown(Shutdown::Write).expect("half-close");
            let mut reply = Vec::new();
            c.read_to_end(&mut reply).expect("reply");
            assert_eq!(reply, [&b"re:"[..], msg].concat());
        }
        echo.join().expect("echo server");
        assert!(proxy.wait_idle());
        proxy.shutdown();
        assert_eq!(proxy.connections(), 2);
        let (f1, b1) = proxy.capture_paths(1);
        assert_eq!(fs::read(f1).expect("1.frontend"), b"hello");
        assert_eq!(fs::read(b1).expect("1.backend"), b"re:hello");
        let (f2, b2) = proxy.capture_paths(2);
        assert_eq!(fs::read(f2).expect("2.frontend"), b"world!");
        assert_eq!(fs::read(b2).expect("2.backend"), b"re:world!");
        let _ = fs::remove_dir_all(&dir);
    }
}
