//! One connection (one socket, one encryption method at a time): encryption negotiation,
//! startup packet, authentication, protocol negotiation and the session check (spec §8.3,
//! §8.5, §9, §10, §13). The walk over hosts lives in `connector`; this module only says what
//! the connection needs sent and how it ended.

mod auth;
mod session;
#[cfg(test)]
mod tests;

use bytes::BytesMut;
use pgyard_conninfo::typed::RequireAuth;
use pgyard_wire::auth::{AuthClient, AuthConfig, ChannelBinding, LoginSecret, NONCE_RAW_LEN};
use pgyard_wire::error_fields::{
    connect_disposition, ConnectDisposition, ConnectStage, ErrorFields, SqlState, Verbosity,
};
use pgyard_wire::frame::{decode_frame, Decoded, ProtocolVersion};
use pgyard_wire::frontend;

use crate::report::FailureKind;
use crate::BackendKey;
use session::CheckQuery;
pub use session::ServerRole;
pub(crate) use session::{Check, Tri};

/// libpq's text for an unexpected end of file from the server.
pub(crate) const EOF_MESSAGE: &str = "server closed the connection unexpectedly\n\tThis probably means the server terminated abnormally\n\tbefore or while processing the request.\n";

/// An encryption method tried on one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Method {
    /// No encryption.
    Plain,
    /// TLS, by SSLRequest or directly.
    Ssl,
}

/// How a failed connection continues (spec §8.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FailClass {
    /// Next encryption method on a new connection to the same address, else abort.
    NextMethod,
    /// Next address of the slot.
    NextAddr,
    /// Next slot (57P03).
    NextSlot,
    /// Session check rejected the server (Terminate already queued): next slot, or next
    /// address when configured.
    Mismatch,
    /// The whole connect fails.
    Abort,
    /// A new connection to the same address with the encryption in use, its startup packet
    /// without `application_name` (libpq's retry for servers that refuse the name: 42704
    /// after AuthenticationOk).
    WithoutAppName,
}

impl FailClass {
    /// How a connection continues after an ErrorResponse with `sqlstate` at `stage` of the
    /// startup: libpq's rule, kept in one place in pgyard-wire.
    pub(crate) fn for_startup_error(sqlstate: Option<SqlState>, stage: ConnectStage) -> FailClass {
        match connect_disposition(sqlstate, stage) {
            ConnectDisposition::NextHost => FailClass::NextSlot,
            ConnectDisposition::NextMethodSameAddress => FailClass::NextMethod,
            ConnectDisposition::Abort => FailClass::Abort,
        }
    }
}

/// Side effects a connection asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Out {
    Send(Vec<u8>),
    StartTls { direct: bool },
}

/// Where a connection stands after an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Pending,
    Qualified,
    Failed { class: FailClass, kind: FailureKind },
}

/// Startup parameters as (name, value) pairs, shared by every connection of a machine.
pub(crate) type StartupParams = std::sync::Arc<[(Vec<u8>, Vec<u8>)]>;

/// Everything from the configuration one connection needs.
#[derive(Clone, Debug)]
pub(crate) struct ConnParams {
    pub user: Vec<u8>,
    pub startup: StartupParams,
    pub password: Option<Vec<u8>>,
    pub password_from_file: Option<Vec<u8>>,
    /// What answers MD5 or SCRAM requests when there is no password (a proxy's pass-through).
    pub secret: Option<LoginSecret>,
    pub require_auth: RequireAuth,
    pub channel_binding: ChannelBinding,
    pub min_version: ProtocolVersion,
    pub max_version: ProtocolVersion,
    pub direct_ssl: bool,
    pub check: Check,
    /// A 42704 refusal after AuthenticationOk retries without `application_name` (libpq's
    /// `send_appname` with either name keyword set).
    pub appname_retry: bool,
    /// `sslcertmode=require`: AuthenticationOk is refused unless the server asked for a
    /// client certificate and got one.
    pub cert_required: bool,
}

#[derive(Debug)]
enum State {
    Connecting,
    AwaitSslByte,
    Tls,
    AwaitAuth,
    AwaitReady,
    AwaitCheck {
        query: CheckQuery,
        rows: u32,
        value: Option<Vec<u8>>,
        /// What the check query's ErrorResponse meant, once one came.
        error: Option<FailureKind>,
    },
    Finished,
}

/// One connection's protocol state.
#[derive(Debug)]
pub(crate) struct Conn {
    pub method: Method,
    /// Whether plaintext may follow a refused SSLRequest on the same socket.
    plain_next: bool,
    state: State,
    rx: Vec<u8>,
    params: ConnParams,
    nonce: [u8; NONCE_RAW_LEN],
    auth: Option<AuthClient>,
    client_finished_auth: bool,
    pub tls: bool,
    end_point: Option<Vec<u8>>,
    /// What the connect's TLS handshakes so far did with client certificates (the
    /// machine's latch, see [`crate::ClientCert`]).
    pub client_cert: crate::ClientCert,
    pub protocol: ProtocolVersion,
    negotiated: bool,
    /// Protocol options this connection asked for that the server's NegotiateProtocolVersion
    /// said it does not support.
    pub refused_options: Vec<String>,
    /// Every ParameterStatus so far, handed whole to the connection's [`crate::Established`]
    /// ([`Conn::take_parameters`]).
    reported: crate::Parameters,
    pub backend_key: Option<BackendKey>,
    pub in_hot_standby: Tri,
    pub dtro: Tri,
    sversion: i32,
    /// Set when the connection asked to fall back to plaintext on the same socket.
    pub fell_back_to_plain: bool,
    /// Whether the startup packet went out (Terminate makes sense only after it).
    pub startup_sent: bool,
    /// The role learned by the check, if any.
    pub role: Option<ServerRole>,
    /// Lines to append to the error buffer (each ends with a newline).
    pub messages: String,
    /// The ErrorResponse with which the server refused the connection, whole (a pooler
    /// passes it on to its client as the server said it).
    pub server_fields: Option<pgyard_wire::error_fields::OwnedErrorFields>,
    /// Bytes after ReadyForQuery that belong to the session.
    pub leftover: Vec<u8>,
    /// Planted-bug switch: accept every server.
    #[cfg(feature = "planted-bugs")]
    pub ignore_check: bool,
    /// Planted-bug switch: judge read-only by `in_hot_standby` alone.
    #[cfg(feature = "planted-bugs")]
    pub ignore_dtro: bool,
}

impl Conn {
    pub(crate) fn new(
        method: Method,
        plain_next: bool,
        params: ConnParams,
        nonce: [u8; NONCE_RAW_LEN],
    ) -> Conn {
        let protocol = params.max_version;
        Conn {
            method,
            plain_next,
            state: State::Connecting,
            rx: Vec::new(),
            params,
            nonce,
            auth: None,
            client_finished_auth: false,
            tls: false,
            end_point: None,
            client_cert: crate::ClientCert::NotRequested,
            protocol,
            negotiated: false,
            refused_options: Vec::new(),
            reported: crate::Parameters::new(),
            backend_key: None,
            in_hot_standby: Tri::Unknown,
            dtro: Tri::Unknown,
            sversion: 0,
            fell_back_to_plain: false,
            startup_sent: false,
            role: None,
            messages: String::new(),
            server_fields: None,
            leftover: Vec::new(),
            #[cfg(feature = "planted-bugs")]
            ignore_check: false,
            #[cfg(feature = "planted-bugs")]
            ignore_dtro: false,
        }
    }

    /// Whether the connection is waiting for the socket to open.
    pub(crate) fn is_connecting(&self) -> bool {
        matches!(self.state, State::Connecting)
    }

    /// Whether the connection is in a TLS handshake.
    pub(crate) fn in_tls_handshake(&self) -> bool {
        matches!(self.state, State::Tls)
    }

    /// Seeds the role state from an earlier connection (planted bug only).
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn inherit_role_state(&mut self, in_hot_standby: Tri, dtro: Tri, sversion: i32) {
        self.in_hot_standby = in_hot_standby;
        self.dtro = dtro;
        self.sversion = sversion;
    }

    /// The role state, for the planted stale-status bug.
    #[cfg(feature = "planted-bugs")]
    pub(crate) fn role_state(&self) -> (Tri, Tri, i32) {
        (self.in_hot_standby, self.dtro, self.sversion)
    }

    pub(super) fn fail(&mut self, class: FailClass, kind: FailureKind, msg: &str) -> Verdict {
        self.messages.push_str(msg);
        self.state = State::Finished;
        Verdict::Failed { class, kind }
    }

    /// The server broke the protocol: libpq gives up on the whole connect.
    pub(super) fn broken(&mut self, msg: &str) -> Verdict {
        self.fail(FailClass::Abort, FailureKind::Protocol, msg)
    }

    /// The socket is open: start negotiating.
    pub(crate) fn opened(&mut self, out: &mut Vec<Out>) -> Verdict {
        if !self.is_connecting() {
            return Verdict::Pending;
        }
        match self.method {
            Method::Ssl if self.params.direct_ssl => {
                self.state = State::Tls;
                out.push(Out::StartTls { direct: true });
                Verdict::Pending
            }
            Method::Ssl => {
                let mut b = BytesMut::with_capacity(8);
                frontend::encode_ssl_request(&mut b);
                out.push(Out::Send(Vec::from(b)));
                self.state = State::AwaitSslByte;
                Verdict::Pending
            }
            Method::Plain => self.send_startup(out),
        }
    }

    fn send_startup(&mut self, out: &mut Vec<Out>) -> Verdict {
        let pairs: Vec<(&[u8], &[u8])> = self
            .params
            .startup
            .iter()
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
            .collect();
        let mut b = BytesMut::new();
        if frontend::encode_startup(self.protocol, &pairs, &mut b).is_err() {
            return self.fail(
                FailClass::Abort,
                FailureKind::Configuration,
                "could not send startup packet: invalid parameter\n",
            );
        }
        out.push(Out::Send(Vec::from(b)));
        self.startup_sent = true;
        self.state = State::AwaitAuth;
        let config = AuthConfig {
            user: String::from_utf8_lossy(&self.params.user).into_owned(),
            password: self.params.password.clone(),
            channel_binding: self.params.channel_binding,
            tls_end_point: if self.tls {
                self.end_point.clone()
            } else {
                None
            },
            max_iterations: None,
            secret: self.params.secret.clone(),
        };
        self.auth = Some(AuthClient::new(config, self.nonce));
        Verdict::Pending
    }

    /// The TLS handshake finished, the server having selected `alpn` (refused as libpq
    /// refuses it unless `check_alpn` is off, which only a planted bug does).
    pub(crate) fn tls_established(
        &mut self,
        end_point: Option<Vec<u8>>,
        alpn: Option<&[u8]>,
        check_alpn: bool,
        out: &mut Vec<Out>,
    ) -> Verdict {
        if !self.in_tls_handshake() {
            return Verdict::Pending;
        }
        let direct = self.method == Method::Ssl && self.params.direct_ssl;
        if let Some(refusal) = crate::alpn_refusal(alpn, direct).filter(|_| check_alpn) {
            return self.end_tls(refusal, FailureKind::Protocol);
        }
        self.tls = true;
        // Without a certificate hash, SCRAM-PLUS cannot be offered; an empty end point
        // still means "TLS in use" for channel_binding's purposes.
        self.end_point = Some(end_point.unwrap_or_default());
        self.send_startup(out)
    }

    /// The TLS handshake failed with `message` (the driver's text) and the `kind` the
    /// driver read from the TLS library's error type.
    pub(crate) fn tls_failed(&mut self, message: &str, kind: FailureKind) -> Verdict {
        self.end_tls(message, kind)
    }

    fn end_tls(&mut self, message: &str, kind: FailureKind) -> Verdict {
        if !self.in_tls_handshake() {
            return Verdict::Pending;
        }
        let mut m = message.trim_end_matches('\n').to_owned();
        m.push('\n');
        self.fail(FailClass::NextMethod, kind, &m)
    }

    /// The server closed the connection.
    pub(crate) fn closed(&mut self) -> Verdict {
        self.lost(EOF_MESSAGE, "SSL SYSCALL error: EOF detected")
    }

    /// The connection broke with `message` (libpq's text; see `Event::Broken`).
    pub(crate) fn broke(&mut self, message: &str) -> Verdict {
        let mut m = message.trim_end_matches('\n').to_owned();
        m.push('\n');
        self.lost(&m, &m)
    }

    /// The connection is gone: `message` says why, `in_handshake` during a TLS handshake.
    fn lost(&mut self, message: &str, in_handshake: &str) -> Verdict {
        match self.state {
            State::Finished => Verdict::Pending,
            State::Connecting => self.fail(FailClass::NextAddr, FailureKind::Transient, message),
            State::Tls => self.end_tls(in_handshake, FailureKind::Transient),
            State::AwaitCheck { query, .. } => {
                self.messages.push_str(message);
                self.fail(
                    FailClass::Mismatch,
                    FailureKind::Transient,
                    query.failed_line(),
                )
            }
            _ => self.fail(FailClass::Abort, FailureKind::Transient, message),
        }
    }

    /// Bytes from the server (already decrypted when TLS is in use).
    pub(crate) fn received(&mut self, bytes: Vec<u8>, out: &mut Vec<Out>) -> Verdict {
        match self.state {
            State::Finished | State::Connecting | State::Tls => return Verdict::Pending,
            _ => {}
        }
        // Usually nothing is left over from the last read: the delivery becomes the buffer
        // instead of being copied into it.
        if self.rx.is_empty() {
            self.rx = bytes;
        } else {
            self.rx.extend_from_slice(&bytes);
        }
        if matches!(self.state, State::AwaitSslByte) {
            if let Some(v) = self.on_ssl_response(out) {
                return v;
            }
        }
        self.process_frames(out)
    }

    /// The server's one-byte answer to SSLRequest, at the front of `rx`: a verdict, or `None`
    /// when plaintext startup went out on the same socket and frames may follow.
    fn on_ssl_response(&mut self, out: &mut Vec<Out>) -> Option<Verdict> {
        let Some(&first) = self.rx.first() else {
            return Some(Verdict::Pending);
        };
        Some(match first {
            b'S' if self.rx.len() > 1 => {
                self.broken("received unencrypted data after SSL response\n")
            }
            b'S' => {
                self.rx.clear();
                self.state = State::Tls;
                out.push(Out::StartTls { direct: false });
                Verdict::Pending
            }
            b'N' if self.plain_next => {
                self.rx.remove(0);
                self.method = Method::Plain;
                self.fell_back_to_plain = true;
                let v = self.send_startup(out);
                if v == Verdict::Pending {
                    return None;
                }
                v
            }
            b'N' => self.fail(
                FailClass::Abort,
                FailureKind::Configuration,
                "server does not support SSL, but SSL was required\n",
            ),
            // libpq does not read this error (the server is not authenticated yet); a
            // postmaster sends it when it cannot start a backend, e.g. fork failed.
            b'E' => self.fail(
                FailClass::Abort,
                FailureKind::Transient,
                "server sent an error response during SSL exchange\n",
            ),
            other => {
                let m = format!(
                    "received invalid response to SSL negotiation: {}\n",
                    char::from(other)
                );
                self.broken(&m)
            }
        })
    }

    fn process_frames(&mut self, out: &mut Vec<Out>) -> Verdict {
        // Frames are handled in place and the consumed prefix is removed once at the end:
        // copying each body out and draining after every frame moved the rest of a burst
        // (a dozen ParameterStatus messages) again and again.
        let mut rx = std::mem::take(&mut self.rx);
        let mut pos = 0;
        let verdict = loop {
            let (tag, used) = match next_frame(&rx[pos..]) {
                Ok(Some(f)) => f,
                Ok(None) => break Verdict::Pending,
                Err(tag) => {
                    let m = if matches!(self.state, State::AwaitAuth) {
                        format!(
                            "expected authentication request from server, but received {}\n",
                            char::from(tag)
                        )
                    } else {
                        format!(
                            "lost synchronization with server: got message type \"{}\"\n",
                            char::from(tag)
                        )
                    };
                    break self.broken(&m);
                }
            };
            let body = &rx[pos + HEADER_LEN..pos + used];
            let v = match self.state {
                State::AwaitAuth => self.on_auth_phase(tag, body, out),
                State::AwaitReady => self.on_ready_phase(tag, body, out),
                State::AwaitCheck { .. } => self.on_check_phase(tag, body, out),
                _ => Verdict::Pending,
            };
            pos += used;
            if v != Verdict::Pending {
                break v;
            }
        };
        rx.drain(..pos);
        if verdict == Verdict::Qualified {
            self.leftover = rx;
        } else {
            self.rx = rx;
        }
        verdict
    }

    /// [`Conn::render_error`] of the ErrorResponse that refuses the connection, which is kept
    /// whole as the server sent it.
    pub(super) fn refusal(&mut self, body: &[u8]) -> (String, Option<SqlState>) {
        let owned = bytes::Bytes::copy_from_slice(body);
        self.server_fields = pgyard_wire::error_fields::OwnedErrorFields::decode(owned).ok();
        Self::render_error(body)
    }

    pub(super) fn render_error(body: &[u8]) -> (String, Option<SqlState>) {
        match ErrorFields::decode(body) {
            Ok(f) => (f.render(Verbosity::Default, true), f.sqlstate()),
            Err(_) => (
                "received invalid error message from server\n".to_owned(),
                None,
            ),
        }
    }
}

/// A Terminate message.
pub(crate) fn terminate_bytes() -> Vec<u8> {
    let mut b = BytesMut::with_capacity(5);
    frontend::encode_terminate(&mut b);
    Vec::from(b)
}

/// Type byte and length word of a backend message.
const HEADER_LEN: usize = 5;

/// The tag and whole length of the complete frame at the front of `rx`, if there is one;
/// `Err(tag)` for a bad length word (libpq's limits: about 1 GiB for `T D d V E N A`, 30 000
/// for the rest).
fn next_frame(rx: &[u8]) -> Result<Option<(u8, usize)>, u8> {
    let Some(&tag) = rx.first() else {
        return Ok(None);
    };
    let max = if b"TDdVENA".contains(&tag) {
        0x3FFF_FFFF
    } else {
        30_000
    };
    match decode_frame(rx, max) {
        Ok(Decoded::Frame(f)) => Ok(Some((f.tag, f.wire_len()))),
        Ok(Decoded::NeedMore { .. }) => Ok(None),
        Err(_) => Err(tag),
    }
}
