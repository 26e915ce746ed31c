//! TLS to clients, the machine's half. The adapter holds the certificate and runs the
//! handshake; the session decides when one starts and what it may not accept around it:
//!
//! * SSLRequest is answered `S` when TLS is on (any mode but [`TlsMode::Disable`]), else `N`;
//!   after `S` the session asks for the handshake ([`ClientOut::StartTls`]).
//! * Bytes that arrived with an SSLRequest or GSSENCRequest, before the answer, are refused
//!   with PostgreSQL's and PgBouncer's FATAL `received unencrypted data after SSL request`:
//!   they were sent in plaintext before the encryption was agreed, so a man in the middle may
//!   have put them there (CVE-2021-23214's buffer stuffing).
//! * A connection whose first byte is a TLS handshake record (0x16) is PostgreSQL 17's direct
//!   TLS: the handshake starts at once, with the bytes already read, and must have agreed on
//!   the ALPN protocol `postgresql`, as PostgreSQL requires. Without TLS it is refused.
//! * A second SSLRequest, or a GSSENCRequest once TLS is up, gets the FATAL PostgreSQL gives
//!   a request code it no longer expects.
//! * In [`TlsMode::Require`], [`TlsMode::VerifyCa`] and [`TlsMode::VerifyFull`] a
//!   StartupMessage over plaintext is refused with PgBouncer's FATAL `SSL required`.
//! * Client certificates: the adapter verifies a presented certificate against its CA during
//!   the handshake (a bad one never gets here) and hands the session what it learnt
//!   ([`ClientCert`]). Where one is required (the `verify-*` modes, or
//!   [`super::ClientAuth::Cert`]), a login without one gets PostgreSQL's FATAL 28000
//!   `connection requires a valid client certificate`; `verify-full` and `Cert` also require
//!   the certificate's Common Name to be the user name (PostgreSQL's `clientcert=verify-full`
//!   and `cert` method, without user maps).
//! * Over TLS the password check offers SCRAM-SHA-256-PLUS with `tls-server-end-point`
//!   channel binding when the adapter gave the certificate's hash.

use std::sync::Arc;

use bytes::Bytes;
use pgyard_wire::frame::StartupKind;

use super::{ClientOut, ClientSession, Phase};

/// The ALPN protocol name of PostgreSQL's wire protocol.
pub const ALPN_POSTGRESQL: &[u8] = b"postgresql";

/// The first byte of a TLS handshake record: a client starting TLS without SSLRequest.
const TLS_HANDSHAKE: u8 = 0x16;

/// How the proxy treats TLS from its clients: the server side of PgBouncer's
/// `client_tls_sslmode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS: SSLRequest is answered `N` and direct TLS is refused.
    #[default]
    Disable,
    /// TLS when the client asks for it, plaintext otherwise.
    Allow,
    /// The same as [`TlsMode::Allow`] on the server side (PgBouncer keeps both names; the
    /// client is the one that prefers).
    Prefer,
    /// TLS when the client asks for it; a client that logs in over plaintext is refused.
    Require,
    /// As [`TlsMode::Require`], and the client must show a certificate signed by the
    /// proxy's CA (PostgreSQL's `clientcert=verify-ca`).
    VerifyCa,
    /// As [`TlsMode::VerifyCa`], and the certificate's Common Name must be the user name
    /// the client logs in as (PostgreSQL's `clientcert=verify-full`).
    VerifyFull,
}

impl TlsMode {
    /// Whether a handshake is offered at all.
    pub fn enabled(self) -> bool {
        self != TlsMode::Disable
    }

    /// Whether a login over plaintext is refused.
    pub fn requires_tls(self) -> bool {
        matches!(
            self,
            TlsMode::Require | TlsMode::VerifyCa | TlsMode::VerifyFull
        )
    }

    /// Whether a login needs a client certificate.
    pub fn requires_cert(self) -> bool {
        matches!(self, TlsMode::VerifyCa | TlsMode::VerifyFull)
    }

    /// The name in PgBouncer's `client_tls_sslmode` and in the configuration file.
    pub fn name(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Allow => "allow",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }
}

/// What the handshake learnt of a client's certificate, which the adapter verified against
/// its CA (chain, validity dates, key usage) before handing it over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientCert {
    /// The subject's first Common Name, when it has one that is text without NUL bytes.
    pub common_name: Option<String>,
}

/// What a client session knows of the proxy's TLS: the mode, and the certificate's
/// `tls-server-end-point` hash for SCRAM channel binding (`None`: only SCRAM-SHA-256 is
/// offered, e.g. for an Ed25519 certificate, whose signature has no separate digest).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClientTls {
    /// When TLS is used.
    pub mode: TlsMode,
    /// The channel-binding data of the certificate the adapter shows.
    pub end_point: Option<Arc<[u8]>>,
}

/// Where the connection stands with respect to encryption.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Link {
    /// Plaintext (before any request, or after `N`).
    #[default]
    Plain,
    /// The adapter is running the handshake; no bytes may be fed meanwhile.
    Handshake {
        /// Started by the client's first byte rather than by SSLRequest.
        direct: bool,
    },
    /// Encrypted.
    Tls,
}

/// The declared length of an SSLRequest or GSSENCRequest at the start of `packet`; `None`
/// for any other packet.
pub(super) fn request_len(packet: &[u8]) -> Option<usize> {
    let len = u32::from_be_bytes(*packet.first_chunk::<4>()?) as usize;
    let code = u32::from_be_bytes(*packet.get(4..)?.first_chunk::<4>()?);
    match StartupKind::from_code(code) {
        StartupKind::SslRequest | StartupKind::GssEncRequest => Some(len),
        StartupKind::CancelRequest | StartupKind::Startup(_) => None,
    }
}

/// The TLS state of one client session.
#[derive(Clone, Debug, Default)]
pub(super) struct TlsSide {
    config: ClientTls,
    link: Link,
    /// The verified client certificate, once the handshake showed one.
    cert: Option<ClientCert>,
    /// Some byte has arrived (direct TLS is recognised only by the very first one).
    seen: bool,
    /// An SSLRequest was answered (or TLS started directly): another is refused.
    ssl_done: bool,
    /// A GSSENCRequest was answered (or TLS is up): another is refused.
    gss_done: bool,
}

impl TlsSide {
    /// The mode this client is held to.
    pub(super) fn mode(&self) -> TlsMode {
        self.config.mode
    }

    /// The verified client certificate: only over TLS.
    pub(super) fn client_cert(&self) -> Option<&ClientCert> {
        match self.link {
            Link::Tls => self.cert.as_ref(),
            _ => None,
        }
    }

    /// Whether that certificate's Common Name is `user`, byte for byte.
    pub(super) fn cert_names(&self, user: &str) -> bool {
        self.client_cert().and_then(|c| c.common_name.as_deref()) == Some(user)
    }

    /// The channel-binding data to offer `-PLUS` with: only over TLS.
    pub(super) fn end_point(&self) -> Option<&[u8]> {
        match self.link {
            Link::Tls => self.config.end_point.as_deref(),
            _ => None,
        }
    }
}

impl ClientSession {
    /// Sets how this client may use TLS (the adapter's certificate and mode); without it
    /// every SSLRequest is answered `N`.
    pub fn with_tls(mut self, tls: ClientTls) -> Self {
        self.tls.config = tls;
        self
    }

    /// Whether the connection is encrypted (the handshake finished).
    pub fn is_tls(&self) -> bool {
        self.tls.link == Link::Tls
    }

    /// The handshake asked for by [`ClientOut::StartTls`] finished; `alpn` is the protocol
    /// it agreed on. Direct TLS without ALPN `postgresql` is refused (PostgreSQL's rule: a
    /// client that never sent SSLRequest must show that it speaks PostgreSQL's protocol).
    /// From here on the client's bytes are the decrypted ones.
    pub fn handle_tls_established(&mut self, alpn: Option<&[u8]>) {
        self.handle_tls_established_with_cert(alpn, None);
    }

    /// The same, with the client certificate the handshake verified (`None`: the client
    /// showed none).
    pub fn handle_tls_established_with_cert(
        &mut self,
        alpn: Option<&[u8]>,
        cert: Option<ClientCert>,
    ) {
        let Link::Handshake { direct } = self.tls.link else {
            return;
        };
        self.tls.link = Link::Tls;
        self.tls.cert = cert;
        match alpn {
            Some(ALPN_POSTGRESQL) => {}
            Some(_) => self.fatal(b"08P01", "unexpected ALPN protocol in TLS handshake"),
            None if direct => self.fatal(
                b"08P01",
                "received direct SSL connection request without ALPN protocol negotiation \
                 extension",
            ),
            None => {}
        }
    }

    /// Looks at client bytes before the splitter does: direct TLS by its first byte, and
    /// bytes that must not arrive during a handshake. True when the bytes were taken.
    pub(super) fn tls_takes(&mut self, data: &[u8]) -> bool {
        if let Link::Handshake { .. } = self.tls.link {
            // The adapter feeds nothing until the handshake is done; plaintext now would be
            // exactly the stuffing the handshake must not let through.
            self.fatal(b"08P01", "received unencrypted data after SSL request");
            return true;
        }
        if self.tls.seen || data.is_empty() {
            return false;
        }
        self.tls.seen = true;
        if data.first() != Some(&TLS_HANDSHAKE) || !matches!(self.phase, Phase::Startup) {
            return false;
        }
        if !self.tls.config.mode.enabled() {
            // PostgreSQL just closes; a line of text at least tells a person with a raw
            // socket why (a TLS client sees a broken record either way).
            self.fatal(
                b"08P01",
                "direct SSL connection request received, but this pgyard proxy has no TLS \
                 configured",
            );
            return true;
        }
        self.tls.ssl_done = true;
        self.tls.gss_done = true;
        self.tls.link = Link::Handshake { direct: true };
        self.out.push_back(ClientOut::StartTls {
            early: Bytes::copy_from_slice(data),
        });
        true
    }

    /// An SSLRequest (`packet`: its bytes and whatever the splitter passed on with it).
    pub(super) fn ssl_request(&mut self, packet: &[u8]) {
        if self.tls.ssl_done {
            return self.unexpected_request(packet);
        }
        if self.stuffed(packet) {
            return self.fatal(b"08P01", "received unencrypted data after SSL request");
        }
        self.tls.ssl_done = true;
        if !self.tls.config.mode.enabled() {
            return self
                .out
                .push_back(ClientOut::ToClient(Bytes::from_static(b"N")));
        }
        // PostgreSQL does not take a GSSENCRequest inside TLS.
        self.tls.gss_done = true;
        self.tls.link = Link::Handshake { direct: false };
        self.out
            .push_back(ClientOut::ToClient(Bytes::from_static(b"S")));
        self.out.push_back(ClientOut::StartTls {
            early: Bytes::new(),
        });
    }

    /// A GSSENCRequest: always `N` (no GSSAPI), once.
    pub(super) fn gss_request(&mut self, packet: &[u8]) {
        if self.tls.gss_done {
            return self.unexpected_request(packet);
        }
        if self.stuffed(packet) {
            return self.fatal(
                b"08P01",
                "received unencrypted data after GSSAPI encryption request",
            );
        }
        self.tls.gss_done = true;
        self.out
            .push_back(ClientOut::ToClient(Bytes::from_static(b"N")));
    }

    /// Whether a StartupMessage may log in over this link; refuses it when not.
    pub(super) fn tls_admits_startup(&mut self) -> bool {
        if self.tls.config.mode.requires_tls() && !self.is_tls() {
            self.fatal(b"08P01", "SSL required");
            return false;
        }
        true
    }

    /// Bytes beyond the request's own length, in the same item or still in the splitter:
    /// they were sent before the answer.
    fn stuffed(&self, packet: &[u8]) -> bool {
        let declared = request_len(packet).unwrap_or(packet.len());
        packet.len() > declared || self.splitter.buffered() > 0
    }

    /// A request code answered before: PostgreSQL reads it as a protocol version it does
    /// not support.
    fn unexpected_request(&mut self, packet: &[u8]) {
        let code = packet
            .get(4..8)
            .and_then(|c| c.first_chunk::<4>())
            .map_or(0, |c| u32::from_be_bytes(*c));
        let text = format!(
            "unsupported frontend protocol {}.{}: server supports 3.0 to 3.2",
            code >> 16,
            code & 0xffff
        );
        self.fatal(b"0A000", &text);
    }
}
