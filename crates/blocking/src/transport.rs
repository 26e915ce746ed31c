//! A connection's byte stream over std sockets: plain, or TLS over the socket.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use pgyard_connect::{OpenTarget, TcpOptions};
use pgyard_driver::{set_tcp_options, unix_address, UnixAddress};
use rustls::ClientConnection;
use socket2::Socket;

/// A connection's byte stream: plain, or TLS over the socket.
#[derive(Debug)]
pub(crate) enum Transport {
    Plain(Socket),
    Tls(Box<rustls::StreamOwned<ClientConnection, Socket>>),
}

impl Transport {
    /// The socket under the stream.
    pub(crate) fn sock(&self) -> &Socket {
        match self {
            Transport::Plain(s) => s,
            Transport::Tls(t) => &t.sock,
        }
    }

    /// Sends close_notify (TLS) and closes the socket. Dropping it closes the one descriptor
    /// (nothing here duplicates it), which sends the FIN as `shutdown` would, one system call
    /// fewer per connection, as libpq closes.
    pub(crate) fn close(mut self) {
        if let Transport::Tls(t) = &mut self {
            t.conn.send_close_notify();
            // Best effort: the peer may be gone already.
            let _ = t.conn.write_tls(&mut t.sock);
        }
    }

    /// Writes everything and flushes.
    pub(crate) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)?;
        self.flush()
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

/// Opens a socket to `target` (bounded by `bound` for TCP), with the machine's TCP options.
pub(crate) fn open(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
) -> io::Result<Socket> {
    match target {
        OpenTarget::Tcp(addr) => {
            let s = match bound {
                Some(b) => TcpStream::connect_timeout(addr, b)?,
                None => TcpStream::connect(addr)?,
            };
            s.set_nodelay(true)?;
            if let Some(opts) = tcp {
                set_tcp_options(&s, opts)?;
            }
            Ok(Socket::from(s))
        }
        OpenTarget::Unix(path) => Ok(Socket::from(match unix_address(path)? {
            UnixAddress::Abstract(addr) => UnixStream::connect_addr(&addr)?,
            UnixAddress::Path(p) => UnixStream::connect(p)?,
        })),
    }
}
