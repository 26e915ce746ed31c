//! A connection's byte stream over tokio sockets: TCP, Unix, or TLS over either.

use std::io;
use std::time::Duration;

use pgyard_connect::{OpenTarget, TcpOptions};
use pgyard_driver::{set_tcp_options, unix_address, UnixAddress};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

/// A byte stream the session can own: TCP, Unix, or TLS over either.
pub(crate) trait Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// The TCP socket under the stream, if it runs over one (socket options).
    fn tcp(&self) -> Option<&TcpStream> {
        None
    }

    /// The TCP socket when the stream is that socket itself, with no layer (TLS) that may
    /// hold bytes of its own.
    fn plain_tcp(&self) -> Option<&TcpStream> {
        None
    }
}

impl Stream for TcpStream {
    fn tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }

    fn plain_tcp(&self) -> Option<&TcpStream> {
        Some(self)
    }
}

impl Stream for UnixStream {}

impl Stream for tokio_rustls::client::TlsStream<Transport> {
    fn tcp(&self) -> Option<&TcpStream> {
        self.get_ref().0.tcp()
    }
}

/// A connection's byte stream, whatever it runs over.
pub(crate) type Transport = Box<dyn Stream>;

pub(crate) async fn write_flush(t: &mut Transport, bytes: &[u8]) -> io::Result<()> {
    t.write_all(bytes).await?;
    t.flush().await
}

/// Opens a socket to `target` (bounded by `bound` for TCP; running out reads as ETIMEDOUT)
/// and applies the machine's TCP options, if any.
pub(crate) async fn open(
    target: &OpenTarget,
    tcp: Option<&TcpOptions>,
    bound: Option<Duration>,
) -> io::Result<Transport> {
    let addr = match target {
        OpenTarget::Tcp(addr) => addr,
        OpenTarget::Unix(path) => {
            return Ok(match unix_address(path)? {
                UnixAddress::Abstract(addr) => {
                    let s = std::os::unix::net::UnixStream::connect_addr(&addr)?;
                    s.set_nonblocking(true)?;
                    Box::new(UnixStream::from_std(s)?)
                }
                UnixAddress::Path(p) => Box::new(UnixStream::connect(p).await?),
            })
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
    Ok(Box::new(s))
}
