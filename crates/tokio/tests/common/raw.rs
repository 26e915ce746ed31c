//! A client speaking the protocol by hand, shared by the live tests that need to say exactly
//! what a driver's StartupMessage says.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A client speaking the protocol by hand, so that its StartupMessage says exactly what a
/// driver's would.
pub struct Raw {
    pub sock: TcpStream,
    buf: BytesMut,
}

impl Raw {
    /// Connects and sends a StartupMessage with `extra` beside user and database.
    pub async fn start(addr: SocketAddr, extra: &[(&str, &str)]) -> Raw {
        let extra: Vec<(&[u8], &[u8])> = extra
            .iter()
            .map(|(n, v)| (n.as_bytes(), v.as_bytes()))
            .collect();
        Raw::start_bytes(addr, &extra).await
    }

    /// [`Raw::start`] with values of any bytes (a client encoding's, not UTF-8's).
    pub async fn start_bytes(addr: SocketAddr, extra: &[(&[u8], &[u8])]) -> Raw {
        let mut params: Vec<(&[u8], &[u8])> =
            vec![(b"user", b"postgres"), (b"database", b"postgres")];
        params.extend_from_slice(extra);
        let mut b = BytesMut::new();
        frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
        let mut sock = TcpStream::connect(addr).await.expect("connect");
        sock.write_all(&b).await.expect("write");
        Raw {
            sock,
            buf: BytesMut::new(),
        }
    }

    /// The next message (tag, body); `None` at the end of the stream.
    pub async fn message(&mut self) -> Option<(u8, Vec<u8>)> {
        loop {
            if self.buf.len() >= 5 {
                let len = u32::from_be_bytes(self.buf[1..5].try_into().expect("4 bytes")) as usize;
                if self.buf.len() > len {
                    let frame = self.buf.split_to(1 + len);
                    return Some((frame[0], frame[5..].to_vec()));
                }
            }
            let read =
                tokio::time::timeout(Duration::from_secs(20), self.sock.read_buf(&mut self.buf));
            if read.await.expect("an answer in time").expect("read") == 0 {
                return None;
            }
        }
    }

    /// Messages up to and including ReadyForQuery (or the end of the stream).
    pub async fn until_ready(&mut self) -> Vec<(u8, Vec<u8>)> {
        let mut all = Vec::new();
        while let Some(m) = self.message().await {
            let done = m.0 == b'Z';
            all.push(m);
            if done {
                break;
            }
        }
        all
    }

    /// Runs `sql`; its reply, up to and including ReadyForQuery, whether it failed or not.
    pub async fn reply(&mut self, sql: &str) -> Vec<(u8, Vec<u8>)> {
        let mut b = BytesMut::new();
        frontend::encode_query(sql.as_bytes(), &mut b).expect("query");
        self.sock.write_all(&b).await.expect("write");
        self.until_ready().await
    }

    /// Runs `sql`, which must not fail; its reply.
    pub async fn exec(&mut self, sql: &str) -> Vec<(u8, Vec<u8>)> {
        let reply = self.reply(sql).await;
        assert!(reply.iter().all(|(t, _)| *t != b'E'), "{sql}: {reply:?}");
        reply
    }

    /// The first column of the first row of `sql`.
    pub async fn one(&mut self, sql: &str) -> String {
        let reply = self.exec(sql).await;
        let row = reply
            .iter()
            .find(|(t, _)| *t == b'D')
            .unwrap_or_else(|| panic!("{sql}: {reply:?}"));
        let len = i32::from_be_bytes(row.1[2..6].try_into().expect("4 bytes")) as usize;
        String::from_utf8_lossy(&row.1[6..6 + len]).into_owned()
    }
}

/// The value of ParameterStatus `name` among `messages`.
pub fn status(messages: &[(u8, Vec<u8>)], name: &str) -> Option<String> {
    messages.iter().find_map(|(tag, body)| {
        let mut parts = body.split(|&b| b == 0);
        (*tag == b'S' && parts.next() == Some(name.as_bytes()))
            .then(|| String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned())
    })
}

/// A server's loopback address, for the direct login the proxy's answers are compared with.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}
