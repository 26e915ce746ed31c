//! A connection's byte stream over tokio sockets: TCP, Unix, or TLS over either.

use std::io;
use std::time::Duration;

use pgyard_connect::{AttemptId, Event, OpenTarget, TcpOptions};
use pgyard_driver::{peer_event, set_tcp_options, unix_address, UnixAddress};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// A byte stream the session can own: TCP, Unix, or TLS over either.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The TCP socket under the stream, if it runs over one (socket options).
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }

    /// The socket when the stream is that socket itself, with no layer (TLS) that may hold
    /// bytes of its own.
    fn plain(&self) -> Option<PlainSocket<'_>> {
        None
    }
}

/// A TCP or Unix socket read and written with nothing in between: a non-blocking read or
/// write on it is the whole story.
#[derive(Clone, Copy, Debug)]
pub(crate) enum PlainSocket<'a> {
    /// TCP.
    Tcp(&'a TcpStream),
    /// A Unix-domain socket.
    Unix(&'a UnixStream),
}

impl PlainSocket<'_> {
    /// One non-blocking write, registering no wake-up.
    pub(crate) fn try_write(self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            PlainSocket::Tcp(s) => s.try_write(bytes),
            PlainSocket::Unix(s) => s.try_write(bytes),
        }
    }

    /// One non-blocking read, registering no wake-up.
    pub(crate) fn try_read(self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            PlainSocket::Tcp(s) => s.try_read(buf),
            PlainSocket::Unix(s) => s.try_read(buf),
        }
    }
}

impl Stream for TcpStream {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }

    fn plain(&self) -> Option<PlainSocket<'_>> {
        Some(PlainSocket::Tcp(self))
    }
}

impl Stream for UnixStream {
    fn plain(&self) -> Option<PlainSocket<'_>> {
        Some(PlainSocket::Unix(self))
    }
}

impl Stream for tokio_rustls::client::TlsStream<Transport> {
    fn tcp(&self) -> Option<&TcpStream> {
        self.get_ref().0.tcp()
    }
}

/// A connection's byte stream, whatever it runs over.
pub(crate) type Transport = Box<dyn Stream>;

pub(crate) async fn write_flush(t: &mut Transport, bytes: &[u8]) -> io::Result<()> {
    match owed_after_try(t.plain(), bytes)? {
        Some(rest) => {
            t.write_all(rest).await?;
            t.flush().await
        }
        None => Ok(()),
    }
}

/// What a whole write of `bytes` still owes after one non-blocking attempt on `plain`, the
/// stream's own socket when it has no layer above it: `None` once all went out (almost
/// always, for a message of a proxy or driver; flushing a plain socket does nothing), else the
/// bytes left for the general path's write and flush (all of them when there is no plain
/// socket).
pub(crate) fn owed_after_try<'a>(
    plain: Option<PlainSocket<'_>>,
    bytes: &'a [u8],
) -> io::Result<Option<&'a [u8]>> {
    let Some(plain) = plain else {
        return Ok(Some(bytes));
    };
    if bytes.is_empty() {
        return Ok(None);
    }
    match plain.try_write(bytes) {
        Ok(n) if n == bytes.len() => Ok(None),
        Ok(n) => Ok(Some(&bytes[n..])),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Some(bytes)),
        Err(e) => Err(e),
    }
}

/// Opens a socket to `target` (bounded by `bound` for TCP; running out reads as ETIMEDOUT)
/// and applies the machine's TCP options, if any.
pub(crate) async fn open(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
) -> io::Result<Transport> {
    Ok(connect(target, tcp, bound, None).await?.0)
}

/// [`open`] for an attempt: the socket (or why not), and the report of its peer user that a
/// Unix socket under `requirepeer` owes the machine first (`peer`: the attempt, when the
/// machine asked for it).
pub(crate) async fn open_attempt(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
    peer: Option<AttemptId>,
) -> (io::Result<Transport>, Option<Event>) {
    match connect(target, tcp, bound, peer).await {
        Ok((stream, report)) => (Ok(stream), report),
        Err(e) => (Err(e), None),
    }
}

async fn connect(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
    peer: Option<AttemptId>,
) -> io::Result<(Transport, Option<Event>)> {
    let addr = match target {
        OpenTarget::Tcp(addr) => addr,
        OpenTarget::Unix(path) => {
            let s = match unix_address(path)? {
                UnixAddress::Abstract(addr) => {
                    let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
                    s.set_nonblocking(true)?;
                    UnixStream::from_std(s)?
                }
                UnixAddress::Path(p) => UnixStream::connect(p).await?,
            };
            let report = peer.map(|attempt| peer_event(attempt, &s));
            return Ok((Box::new(s), report));
        }
    };
    let s = match bound {
        Some(b) => tokio::time::timeout(b, TcpStream::connect(addr))
            .await
            .map_err(|_| io::Error::from_raw_os_error(110))??,
        None => TcpStream::connect(addr).await?,
    };
    s.set_nodelay(true)?;
    if let Some(opts) = tcp {
        set_tcp_options(&s, opts)?;
    }
    Ok((Box::new(s), None))
}

#[cfg(test)]
mod tests {
    use super::{write_flush, Transport};
    use tokio::io::AsyncReadExt;

    /// A write larger than the socket's buffers goes out in part at the first attempt; the
    /// rest must follow, in order, through the general path.
    #[tokio::test]
    async fn a_write_the_socket_cannot_take_at_once_arrives_whole() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let sender = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (mut receiver, _) = listener.accept().await.expect("accept");
        let data: Vec<u8> = (0..8u32 << 20).map(|i| (i % 251) as u8).collect();
        let mut t: Transport = Box::new(sender);
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            receiver.read_to_end(&mut got).await.expect("read");
            got
        });
        write_flush(&mut t, &data).await.expect("write");
        drop(t);
        let got = reading.await.expect("reader");
        assert_eq!(got.len(), data.len());
        assert!(got == data, "the bytes arrived in order");
    }
}
