//! A client connection's byte stream: the TCP socket, TLS over it once the session asked
//! for a handshake, or a Unix-domain socket (never encrypted, as in PostgreSQL). Bytes read
//! before the handshake that belong to it (direct TLS's first record, which the session had
//! to see to recognise) are put back in front of the socket.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use pgyard_proxy::ClientCert;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

/// The client connection, plain or encrypted.
pub(super) enum ClientIo {
    /// Plain TCP.
    Tcp(TcpStream),
    /// A Unix-domain socket.
    Unix(UnixStream),
    /// TLS (boxed: rustls's state is large).
    Tls(Box<TlsStream<Rewind>>),
    /// The socket went into a handshake that did not finish; nothing more can be done.
    Gone,
}

impl ClientIo {
    /// Runs the server side of a TLS handshake, with `early` read first; returns the ALPN
    /// protocol agreed on and the client's certificate, which the acceptor verified (none
    /// when the client showed none). On failure the connection is gone.
    pub(super) async fn accept_tls(
        &mut self,
        acceptor: TlsAcceptor,
        early: Bytes,
    ) -> io::Result<(Option<Vec<u8>>, Option<ClientCert>)> {
        let ClientIo::Tcp(sock) = std::mem::replace(self, ClientIo::Gone) else {
            return Err(io::Error::other(
                "TLS asked for twice, or over a Unix socket",
            ));
        };
        let tls = acceptor.accept(Rewind { early, sock }).await?;
        let conn = tls.get_ref().1;
        let alpn = conn.alpn_protocol().map(<[u8]>::to_vec);
        let cert = conn
            .peer_certificates()
            .and_then(<[_]>::first)
            .map(|leaf| super::tls::client_cert(leaf));
        *self = ClientIo::Tls(Box::new(tls));
        Ok((alpn, cert))
    }

    /// The TLS session in PgBouncer's words for SHOW CLIENTS (libtls's version, cipher and
    /// key exchange: `TLSv1.3/TLS_AES_256_GCM_SHA384/ECDH=X25519`), so that tools reading
    /// PgBouncer's column read pgyard's; `None` over plaintext.
    pub(super) fn tls_description(&self) -> Option<String> {
        let ClientIo::Tls(tls) = self else {
            return None;
        };
        let conn = tls.get_ref().1;
        // rustls names versions `TLSv1_3` and TLS 1.3 suites `TLS13_…`; the IANA names that
        // OpenSSL (and so PgBouncer) print are `TLSv1.3` and `TLS_…`.
        let version = conn
            .protocol_version()
            .map(|v| {
                v.as_str()
                    .map_or_else(|| format!("{v:?}"), |s| s.replace('_', "."))
            })
            .unwrap_or_default();
        let cipher = conn
            .negotiated_cipher_suite()
            .map(|c| {
                let name = c
                    .suite()
                    .as_str()
                    .map_or_else(|| format!("{:?}", c.suite()), str::to_owned);
                match name.strip_prefix("TLS13_") {
                    Some(rest) => format!("TLS_{rest}"),
                    None => name,
                }
            })
            .unwrap_or_default();
        let mut text = format!("{version}/{cipher}");
        if let Some(group) = conn.negotiated_key_exchange_group() {
            let name = group.name();
            let name = name
                .as_str()
                .map_or_else(|| format!("{name:?}"), str::to_owned);
            text.push_str(&format!("/ECDH={name}"));
        }
        Some(text)
    }
}

impl ClientIo {
    /// Writes all of `bytes` and flushes. Over a plain socket a write almost always goes out
    /// whole at once: one non-blocking attempt first, without the futures, the trait calls
    /// and the flush of the general path (about 150 instructions a write).
    pub(super) async fn write_whole(&mut self, bytes: &[u8]) -> io::Result<()> {
        use crate::transport::{owed_after_try, PlainSocket};
        let plain = match self {
            ClientIo::Tcp(s) => Some(PlainSocket::Tcp(s)),
            ClientIo::Unix(s) => Some(PlainSocket::Unix(s)),
            _ => None,
        };
        match owed_after_try(plain, bytes)? {
            Some(rest) => {
                self.write_all(rest).await?;
                self.flush().await
            }
            None => Ok(()),
        }
    }
}

impl AsyncRead for ClientIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientIo::Unix(s) => Pin::new(s).poll_read(cx, buf),
            ClientIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
            ClientIo::Gone => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncWrite for ClientIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientIo::Unix(s) => Pin::new(s).poll_write(cx, buf),
            ClientIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
            ClientIo::Gone => Poll::Ready(Err(io::ErrorKind::NotConnected.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_flush(cx),
            ClientIo::Unix(s) => Pin::new(s).poll_flush(cx),
            ClientIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
            ClientIo::Gone => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientIo::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientIo::Unix(s) => Pin::new(s).poll_shutdown(cx),
            ClientIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
            ClientIo::Gone => Poll::Ready(Ok(())),
        }
    }
}

/// The socket with bytes already read put back in front of it.
pub(super) struct Rewind {
    early: Bytes,
    sock: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        if me.early.is_empty() {
            return Pin::new(&mut me.sock).poll_read(cx, buf);
        }
        let n = me.early.len().min(buf.remaining());
        buf.put_slice(&me.early[..n]);
        me.early.advance(n);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().sock).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().sock).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().sock).poll_shutdown(cx)
    }
}
