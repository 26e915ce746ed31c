//! What the machine and its driver say to each other: the [`Event`]s fed in, the [`Action`]s
//! handed out, and the [`Established`] connection at the end.

use std::net::SocketAddr;
use std::time::Duration;

use crate::{ConnectError, FailureKind, Parameters, ServerRole};

/// Names one connection (one socket). Events about a closed attempt are ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AttemptId(pub u64);

/// Names one host-name resolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResolveToken(pub u64);

/// Where a connection goes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OpenTarget {
    /// A TCP address.
    Tcp(SocketAddr),
    /// A Unix-domain socket path (`@…` is Linux's abstract namespace).
    Unix(Vec<u8>),
}

/// Socket options libpq sets on TCP sockets (spec §12.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TcpOptions {
    /// SO_KEEPALIVE.
    pub keepalives: bool,
    /// TCP_KEEPIDLE; `None` = OS default.
    pub keepalives_idle: Option<Duration>,
    /// TCP_KEEPINTVL; `None` = OS default.
    pub keepalives_interval: Option<Duration>,
    /// TCP_KEEPCNT; `None` = OS default.
    pub keepalives_count: Option<u32>,
    /// TCP_USER_TIMEOUT; `None` = OS default.
    pub tcp_user_timeout: Option<Duration>,
}

/// How the TLS peer must be verified (from `sslmode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TlsVerify {
    /// No verification (`prefer`, `allow`, `require` without a root certificate).
    None,
    /// Chain only (`verify-ca`, or `require` when a root certificate exists).
    Ca,
    /// Chain and host name (`verify-full`).
    Full,
}

/// A socket error the driver saw, with glibc's `strerror` text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IoErrorKind {
    /// ECONNREFUSED.
    ConnectionRefused,
    /// ENOENT (a Unix socket that does not exist).
    NotFound,
    /// EHOSTUNREACH.
    HostUnreachable,
    /// ENETUNREACH.
    NetworkUnreachable,
    /// ETIMEDOUT.
    TimedOut,
    /// EACCES.
    PermissionDenied,
    /// EADDRNOTAVAIL.
    AddrNotAvailable,
    /// ECONNRESET.
    ConnectionReset,
    /// Anything else, with its text.
    Other(String),
}

impl IoErrorKind {
    /// The `strerror` text.
    pub fn strerror(&self) -> &str {
        match self {
            IoErrorKind::ConnectionRefused => "Connection refused",
            IoErrorKind::NotFound => "No such file or directory",
            IoErrorKind::HostUnreachable => "No route to host",
            IoErrorKind::NetworkUnreachable => "Network is unreachable",
            IoErrorKind::TimedOut => "Connection timed out",
            IoErrorKind::PermissionDenied => "Permission denied",
            IoErrorKind::AddrNotAvailable => "Cannot assign requested address",
            IoErrorKind::ConnectionReset => "Connection reset by peer",
            IoErrorKind::Other(s) => s,
        }
    }
}

/// An input from the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A host name resolved, addresses in resolver order.
    Resolved {
        /// The token of the [`Action::Resolve`].
        token: ResolveToken,
        /// The addresses.
        addrs: Vec<SocketAddr>,
    },
    /// A host name did not resolve. The machine words the error as libpq does.
    ResolveFailed {
        /// The token of the [`Action::Resolve`].
        token: ResolveToken,
        /// The resolver's error as the platform reported it: `gai_strerror`'s text (e.g.
        /// `Name or service not known`), or Rust's `io::Error` text for it, which puts
        /// `failed to lookup address information: ` in front.
        message: String,
    },
    /// The socket connected.
    Opened {
        /// The attempt.
        attempt: AttemptId,
    },
    /// Who owns the server's end of a Unix socket, asked for by [`Action::Open`]'s
    /// `peer_user` and sent before [`Event::Opened`]: the operating-system user name of the
    /// peer's user ID, or libpq's text for why it is not known (`could not get peer
    /// credentials: …`, `local user with ID N does not exist`). A Unix socket opened
    /// without it, when it was asked for, fails the `requirepeer` check.
    PeerUser {
        /// The attempt.
        attempt: AttemptId,
        /// The user name, or why there is none.
        user: Result<String, String>,
    },
    /// socket()/connect() failed.
    OpenFailed {
        /// The attempt.
        attempt: AttemptId,
        /// What failed.
        error: IoErrorKind,
    },
    /// Bytes from the server (after decryption when TLS is up).
    Received {
        /// The attempt.
        attempt: AttemptId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// The server closed the connection (EOF).
    Closed {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The connection broke with an error libpq words in its own way, where it would not
    /// say the server closed the connection: after the TLS handshake, an alert from the
    /// server (`SSL error: tlsv1 alert unknown ca` when the server refuses the client's
    /// certificate, which TLS 1.3 tells only after the client's handshake is done). The
    /// machine ends the attempt as for [`Event::Closed`], with `message` in place of libpq's
    /// text for a closed connection.
    Broken {
        /// The attempt.
        attempt: AttemptId,
        /// libpq's text, without a trailing newline.
        message: String,
    },
    /// The TLS handshake of [`Action::StartTls`] completed. The machine still refuses the
    /// connection when the ALPN selection is not what libpq accepts.
    TlsEstablished {
        /// The attempt.
        attempt: AttemptId,
        /// `tls-server-end-point` channel-binding data, if the certificate allows it.
        server_end_point: Option<Vec<u8>>,
        /// The protocol the server selected by ALPN, if it selected one.
        alpn: Option<Vec<u8>>,
        /// Whether the server asked for a client certificate, and whether one was sent.
        client_cert: ClientCert,
    },
    /// The TLS handshake failed (including certificate checks).
    TlsFailed {
        /// The attempt.
        attempt: AttemptId,
        /// libpq's text, e.g. `SSL error: certificate verify failed`.
        message: String,
        /// What the failure means, from the TLS library's error type: a certificate that did
        /// not verify is [`FailureKind::Authentication`], a setting that cannot work (a missing
        /// root file) [`FailureKind::Configuration`], an alert or a reset
        /// [`FailureKind::Transient`].
        kind: FailureKind,
        /// Whether the server asked for a client certificate before the handshake failed
        /// (libpq keeps what any handshake of the connect saw; see [`ClientCert`]).
        client_cert: ClientCert,
    },
}

/// A side effect for the driver.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Resolve a host name (getaddrinfo, AF_UNSPEC, SOCK_STREAM); answer with
    /// [`Event::Resolved`] or [`Event::ResolveFailed`]. Also asked for a link-local IPv6
    /// `hostaddr` with a zone (`fe80::1%eth0`), whose interface name only the system knows.
    Resolve {
        /// Token for the answer.
        token: ResolveToken,
        /// The host name (or zoned address).
        host: String,
        /// The port.
        port: u16,
    },
    /// Create a socket and connect; answer with [`Event::Opened`] or [`Event::OpenFailed`].
    Open {
        /// The new attempt.
        attempt: AttemptId,
        /// Where to.
        target: OpenTarget,
        /// TCP options (`None` for Unix sockets).
        tcp: Option<TcpOptions>,
        /// Read who owns the server's end of this Unix socket once it is connected and report
        /// it with [`Event::PeerUser`] before [`Event::Opened`] (`requirepeer` is set).
        peer_user: bool,
    },
    /// Write bytes (through TLS once it is up).
    Send {
        /// The attempt.
        attempt: AttemptId,
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// Start a TLS handshake (ALPN `postgresql`); answer with [`Event::TlsEstablished`] or
    /// [`Event::TlsFailed`].
    StartTls {
        /// The attempt.
        attempt: AttemptId,
        /// The slot's `host` (SNI when `sslsni` and not an IP literal, and the name
        /// verify-full checks).
        server_name: Option<String>,
        /// Direct TLS (`sslnegotiation=direct`): the server must select ALPN `postgresql`.
        direct: bool,
        /// Verification required.
        verify: TlsVerify,
    },
    /// Close the socket. Every opened attempt is closed exactly once, except the winner.
    Close {
        /// The attempt.
        attempt: AttemptId,
    },
    /// The end: the established connection, or every failure.
    /// (Boxed: the established connection is by far the largest action, and every action
    /// is moved through the adapter's queue.)
    Done(Result<Box<Established>, ConnectError>),
}

/// BackendKeyData: what a cancel request must quote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendKey {
    /// Backend process id.
    pub pid: i32,
    /// Secret key (4 bytes under 3.0, up to 256 under 3.2).
    pub key: Vec<u8>,
}

/// A connection that passed authentication and the session check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Established {
    /// The winning attempt (the driver keeps its socket).
    pub attempt: AttemptId,
    /// Index into the configuration's slot order.
    pub slot: usize,
    /// What libpq's `PQhost` reports.
    pub host: String,
    /// The address connected to.
    pub target: OpenTarget,
    /// ParameterStatus values in arrival order (a repeated name keeps its first position).
    pub parameters: Parameters,
    /// BackendKeyData, if sent.
    pub backend_key: Option<BackendKey>,
    /// The protocol version in use (major, minor).
    pub protocol_version: (u16, u16),
    /// Whether TLS is in use.
    pub tls: bool,
    /// The server role, if the check learned it.
    pub role: Option<ServerRole>,
    /// Bytes received after ReadyForQuery.
    pub leftover: Vec<u8>,
    /// Protocol options asked for (through extra startup parameters named `_pq_.…`) that
    /// the server said it does not support.
    pub refused_options: Vec<String>,
}

/// What became of client certificates in a TLS handshake: what libpq's certificate callback
/// records (`ssl_cert_requested`, `ssl_cert_sent`) for `sslcertmode=require`, which refuses a
/// login the server accepted without asking for a certificate or without getting one. libpq
/// never clears the two flags during a connect, so what one handshake saw (even one that
/// failed afterwards) holds for every later attempt and host; the order of the variants is
/// that of what has been seen, the latest of any two being the larger.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClientCert {
    /// The server sent no CertificateRequest (and every connection without TLS).
    #[default]
    NotRequested,
    /// The server asked, and the client had no certificate to send.
    NoneSent,
    /// The server asked, and the client had a certificate loaded to send.
    Sent,
}
