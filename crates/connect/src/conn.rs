//! One connection (one socket, one encryption method at a time): encryption negotiation,
//! startup packet, authentication, protocol negotiation and the session check (spec §8.3,
//! §8.5, §9, §10, §13). The walk over hosts lives in `lib.rs`; this module only says what the
//! connection needs sent and how it ended.

use bytes::BytesMut;
use pgyard_conninfo::typed::{auth_request, AuthMethod, RequireAuth, TargetSessionAttrs};
use pgyard_wire::auth::{
    AuthClient, AuthConfig, AuthError, AuthRequest, AuthResponse, AuthStep, ChannelBinding,
    NONCE_RAW_LEN,
};
use pgyard_wire::error_fields::{ErrorFields, SqlState, Verbosity};
use pgyard_wire::frame::{decode_frame, Decoded, ProtocolVersion};
use pgyard_wire::frontend;

use crate::kinds;
use crate::report::FailureKind;
use crate::BackendKey;

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

/// Three-valued server state from ParameterStatus (libpq's `PGTernaryBool`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum Tri {
    #[default]
    Unknown,
    Yes,
    No,
}

impl Tri {
    fn from_on(value: &[u8]) -> Tri {
        if value == b"on" {
            Tri::Yes
        } else {
            Tri::No
        }
    }
}

/// What the server role looked like, when the check learned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerRole {
    /// Not in hot standby, sessions writable by default.
    Primary,
    /// In hot standby (or read-only by default).
    Standby,
}

/// The session check a connection must pass in its pass (prefer-* already mapped).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    Any,
    ReadWrite,
    ReadOnly,
    Primary,
    Standby,
}

impl Check {
    /// The check for `tsa` in pass 1 (`second_pass` false) or pass 2.
    pub(crate) fn for_pass(tsa: TargetSessionAttrs, second_pass: bool) -> Check {
        match tsa {
            TargetSessionAttrs::ReadWrite => Check::ReadWrite,
            TargetSessionAttrs::ReadOnly => Check::ReadOnly,
            TargetSessionAttrs::Primary => Check::Primary,
            TargetSessionAttrs::Standby => Check::Standby,
            TargetSessionAttrs::PreferStandby if !second_pass => Check::Standby,
            TargetSessionAttrs::PreferPrimary if !second_pass => Check::Primary,
            _ => Check::Any,
        }
    }
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
    pub require_auth: RequireAuth,
    pub channel_binding: ChannelBinding,
    pub min_version: ProtocolVersion,
    pub max_version: ProtocolVersion,
    pub direct_ssl: bool,
    pub check: Check,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CheckQuery {
    ShowReadOnly,
    InRecovery,
}

impl CheckQuery {
    fn sql(self) -> &'static [u8] {
        match self {
            CheckQuery::ShowReadOnly => b"SHOW transaction_read_only",
            CheckQuery::InRecovery => b"SELECT pg_catalog.pg_is_in_recovery()",
        }
    }
    fn failed_line(self) -> &'static str {
        match self {
            CheckQuery::ShowReadOnly => "\"SHOW transaction_read_only\" failed\n",
            CheckQuery::InRecovery => "\"SELECT pg_is_in_recovery()\" failed\n",
        }
    }
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
    pub protocol: ProtocolVersion,
    negotiated: bool,
    /// Protocol options this connection asked for that the server's NegotiateProtocolVersion
    /// said it does not support.
    pub refused_options: Vec<String>,
    pub parameters: Vec<(String, String)>,
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
    /// Bytes after ReadyForQuery that belong to the session.
    pub leftover: Vec<u8>,
    /// Planted-bug switch: accept every server.
    pub ignore_check: bool,
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
            protocol,
            negotiated: false,
            refused_options: Vec::new(),
            parameters: Vec::new(),
            backend_key: None,
            in_hot_standby: Tri::Unknown,
            dtro: Tri::Unknown,
            sversion: 0,
            fell_back_to_plain: false,
            startup_sent: false,
            role: None,
            messages: String::new(),
            leftover: Vec::new(),
            ignore_check: false,
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

    fn fail(&mut self, class: FailClass, kind: FailureKind, msg: &str) -> Verdict {
        self.messages.push_str(msg);
        self.state = State::Finished;
        Verdict::Failed { class, kind }
    }

    /// The server broke the protocol: libpq gives up on the whole connect.
    fn broken(&mut self, msg: &str) -> Verdict {
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
                let mut b = BytesMut::new();
                frontend::encode_ssl_request(&mut b);
                out.push(Out::Send(b.to_vec()));
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
        match self.state {
            State::Finished => Verdict::Pending,
            State::Connecting => {
                self.fail(FailClass::NextAddr, FailureKind::Transient, EOF_MESSAGE)
            }
            State::Tls => self.end_tls("SSL SYSCALL error: EOF detected", FailureKind::Transient),
            State::AwaitCheck { query, .. } => {
                self.messages.push_str(EOF_MESSAGE);
                self.fail(
                    FailClass::Mismatch,
                    FailureKind::Transient,
                    query.failed_line(),
                )
            }
            _ => self.fail(FailClass::Abort, FailureKind::Transient, EOF_MESSAGE),
        }
    }

    /// Bytes from the server (already decrypted when TLS is in use).
    pub(crate) fn received(&mut self, bytes: &[u8], out: &mut Vec<Out>) -> Verdict {
        match self.state {
            State::Finished | State::Connecting | State::Tls => return Verdict::Pending,
            _ => {}
        }
        self.rx.extend_from_slice(bytes);
        if matches!(self.state, State::AwaitSslByte) {
            let Some(&first) = self.rx.first() else {
                return Verdict::Pending;
            };
            match first {
                b'S' => {
                    if self.rx.len() > 1 {
                        return self.broken("received unencrypted data after SSL response\n");
                    }
                    self.rx.clear();
                    self.state = State::Tls;
                    out.push(Out::StartTls { direct: false });
                    return Verdict::Pending;
                }
                b'N' => {
                    self.rx.remove(0);
                    if self.plain_next {
                        self.method = Method::Plain;
                        self.fell_back_to_plain = true;
                        let v = self.send_startup(out);
                        if v != Verdict::Pending {
                            return v;
                        }
                    } else {
                        return self.fail(
                            FailClass::Abort,
                            FailureKind::Configuration,
                            "server does not support SSL, but SSL was required\n",
                        );
                    }
                }
                b'E' => {
                    // libpq does not read this error (the server is not authenticated yet);
                    // a postmaster sends it when it cannot start a backend, e.g. fork failed.
                    return self.fail(
                        FailClass::Abort,
                        FailureKind::Transient,
                        "server sent an error response during SSL exchange\n",
                    );
                }
                other => {
                    let m = format!(
                        "received invalid response to SSL negotiation: {}\n",
                        char::from(other)
                    );
                    return self.broken(&m);
                }
            }
        }
        self.process_frames(out)
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

    fn render_error(body: &[u8]) -> (String, Option<SqlState>) {
        match ErrorFields::decode(body) {
            Ok(f) => (f.render(Verbosity::Default, true), f.sqlstate()),
            Err(_) => (
                "received invalid error message from server\n".to_owned(),
                None,
            ),
        }
    }

    fn on_auth_phase(&mut self, tag: u8, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        match tag {
            b'E' => {
                let (text, code) = Self::render_error(body);
                self.messages.push_str(&text);
                if code == Some(SqlState::INVALID_PASSWORD) {
                    if let Some(path) = &self.params.password_from_file {
                        let line = format!(
                            "password retrieved from file \"{}\"\n",
                            String::from_utf8_lossy(path)
                        );
                        self.messages.push_str(&line);
                    }
                }
                let class = if code == Some(SqlState::CANNOT_CONNECT_NOW) {
                    FailClass::NextSlot
                } else {
                    FailClass::NextMethod
                };
                self.fail(class, kinds::server_error(code), "")
            }
            b'v' => self.on_negotiate(body),
            b'R' => self.on_auth_request(body, out),
            other => {
                let m = format!(
                    "expected authentication request from server, but received {}\n",
                    char::from(other)
                );
                self.broken(&m)
            }
        }
    }

    fn on_negotiate(&mut self, body: &[u8]) -> Verdict {
        const P: &str = "received invalid protocol negotiation message";
        if self.negotiated {
            return self.broken("received duplicate protocol negotiation message\n");
        }
        self.negotiated = true;
        if body.len() < 4 || body.len() > 1996 {
            return self.broken(&format!("{P}\n"));
        }
        let word = |at: usize| -> Option<u32> {
            body.get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        let (Some(theirs), Some(count)) = (word(0), word(4)) else {
            return self.broken(&format!("{P}: message too short\n"));
        };
        let count = count as i32;
        let theirs = ProtocolVersion(theirs);
        if theirs > self.protocol {
            return self.broken(&format!(
                "{P}: server requested downgrade to a higher-numbered version\n"
            ));
        }
        if theirs < ProtocolVersion::V3_0 {
            return self.broken(&format!(
                "{P}: server requested downgrade to pre-3.0 protocol version\n"
            ));
        }
        if theirs == ProtocolVersion::V3_1_RESERVED {
            return self.broken(&format!(
                "{P}: server requested downgrade to non-existent 3.1 protocol version\n"
            ));
        }
        if count < 0 {
            return self.broken(&format!(
                "{P}: server reported negative number of unsupported parameters\n"
            ));
        }
        if theirs == self.protocol && count == 0 {
            return self.broken(&format!("{P}: server negotiated but asks for no changes\n"));
        }
        if theirs < self.params.min_version {
            let m = format!(
                "server only supports protocol version {}.{}, but \"min_protocol_version\" was set to {}.{}\n",
                theirs.major(),
                theirs.minor(),
                self.params.min_version.major(),
                self.params.min_version.minor()
            );
            return self.fail(FailClass::Abort, FailureKind::Configuration, &m);
        }
        self.protocol = theirs;
        let mut rest = body.get(8..).unwrap_or_default();
        for _ in 0..count {
            let Some(end) = rest.iter().position(|&b| b == 0) else {
                return self.broken(&format!("{P}: message too short\n"));
            };
            let name = &rest[..end];
            // libpq asks for no protocol option, so for it every listed name is an error; an
            // option this connection did ask for (a pgyard extra) is simply not supported.
            let requested = name.starts_with(b"_pq_.")
                && self
                    .params
                    .startup
                    .iter()
                    .any(|(k, _)| k.as_slice() == name);
            let text = String::from_utf8_lossy(name).into_owned();
            if !requested {
                let m = if name.starts_with(b"_pq_.") {
                    format!("{P}: server reported an unsupported parameter that was not requested (\"{text}\")\n")
                } else {
                    format!("{P}: server reported unsupported parameter name without a \"_pq_.\" prefix (\"{text}\")\n")
                };
                return self.broken(&m);
            }
            self.refused_options.push(text);
            rest = &rest[end + 1..];
        }
        Verdict::Pending
    }

    fn require_auth_reason(&self, code: i32) -> Option<&'static str> {
        let ra = &self.params.require_auth;
        if !ra.is_enforced() {
            return None;
        }
        let ucode = u32::try_from(code).unwrap_or(u32::MAX);
        if ucode == auth_request::OK {
            return (ra.auth_required() && !self.client_finished_auth)
                .then_some("server did not complete authentication");
        }
        if ra.allows_request(ucode) {
            return None;
        }
        Some(match ucode {
            auth_request::PASSWORD => "server requested a cleartext password",
            auth_request::MD5 => "server requested a hashed password",
            auth_request::GSS | auth_request::GSS_CONT => "server requested GSSAPI authentication",
            auth_request::SSPI => "server requested SSPI authentication",
            auth_request::SASL | auth_request::SASL_CONT | auth_request::SASL_FIN => {
                "server requested SASL authentication"
            }
            _ => "server requested an unknown authentication type",
        })
    }

    fn on_auth_request(&mut self, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        let request = match AuthRequest::decode(body) {
            Ok(r) => r,
            Err(_) => {
                return self.broken("expected authentication request from server, but received R\n")
            }
        };
        let raw = self
            .params
            .require_auth
            .raw()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .unwrap_or_default();
        if let Some(reason) = self.require_auth_reason(request.code()) {
            let m = format!("authentication method requirement \"{raw}\" failed: {reason}\n");
            return self.fail(FailClass::Abort, FailureKind::Authentication, &m);
        }
        if matches!(request, AuthRequest::Sasl(_))
            && !self.params.require_auth.allows(AuthMethod::ScramSha256)
        {
            let m = format!(
                "authentication method requirement \"{raw}\" failed: server requested SCRAM-SHA-256 authentication\n"
            );
            return self.fail(FailClass::Abort, FailureKind::Authentication, &m);
        }
        let Some(auth) = self.auth.as_mut() else {
            // send_startup sets it before any request can arrive; reaching this is a bug.
            return self.broken("authentication state lost\n");
        };
        let step = auth.handle_request(request);
        match step {
            Err(e) => {
                let m = auth_error_text(&e);
                self.fail(FailClass::Abort, kinds::auth_error(&e), &m)
            }
            Ok(AuthStep::Send(resp)) => {
                let mut b = BytesMut::new();
                let r = match &resp {
                    AuthResponse::Password(p) => {
                        self.client_finished_auth = true;
                        // The payload is NUL-terminated already; encode_password adds one.
                        let p = p.strip_suffix(&[0]).unwrap_or(p);
                        frontend::encode_password(p, &mut b)
                    }
                    AuthResponse::SaslInitial { mechanism, data } => {
                        frontend::encode_sasl_initial_response(
                            mechanism.name().as_bytes(),
                            Some(data.as_slice()),
                            &mut b,
                        )
                    }
                    AuthResponse::Sasl(data) => frontend::encode_sasl_response(data, &mut b),
                };
                if r.is_err() {
                    // Only a configured password that cannot be framed fails to encode.
                    return self.fail(
                        FailClass::Abort,
                        FailureKind::Configuration,
                        "could not send authentication response\n",
                    );
                }
                out.push(Out::Send(b.to_vec()));
                Verdict::Pending
            }
            Ok(AuthStep::Wait) => {
                self.client_finished_auth = true;
                Verdict::Pending
            }
            Ok(AuthStep::Authenticated) => {
                self.state = State::AwaitReady;
                Verdict::Pending
            }
        }
    }

    fn set_parameter(&mut self, name: &[u8], value: &[u8]) {
        match name {
            b"in_hot_standby" => self.in_hot_standby = Tri::from_on(value),
            b"default_transaction_read_only" => self.dtro = Tri::from_on(value),
            b"server_version" => self.sversion = parse_server_version(value),
            _ => {}
        }
        // `from_utf8` is the fast path (servers send valid UTF-8); lossy only when it is not.
        let text = |b: &[u8]| match std::str::from_utf8(b) {
            Ok(s) => s.to_owned(),
            Err(_) => String::from_utf8_lossy(b).into_owned(),
        };
        let value = text(value);
        let name = String::from_utf8_lossy(name);
        match self.parameters.iter_mut().find(|(n, _)| *n == *name) {
            Some(slot) => slot.1 = value,
            None => self.parameters.push((name.into_owned(), value)),
        }
    }

    fn parameter_status(&mut self, body: &[u8]) {
        let mut parts = body.split(|&b| b == 0);
        if let (Some(n), Some(v)) = (parts.next(), parts.next()) {
            self.set_parameter(n, v);
        }
    }

    fn on_ready_phase(&mut self, tag: u8, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        match tag {
            b'S' => {
                self.parameter_status(body);
                Verdict::Pending
            }
            b'K' => {
                if body.len() < 5 {
                    return self.broken("received invalid BackendKeyData message\n");
                }
                let pid = i32::from_be_bytes([body[0], body[1], body[2], body[3]]);
                self.backend_key = Some(BackendKey {
                    pid,
                    key: body[4..].to_vec(),
                });
                Verdict::Pending
            }
            b'N' => Verdict::Pending,
            b'E' => {
                let (text, code) = Self::render_error(body);
                self.fail(FailClass::Abort, kinds::server_error(code), &text)
            }
            b'Z' => self.check_target(out),
            other => {
                let m = format!(
                    "unexpected message type \"{}\" during startup\n",
                    char::from(other)
                );
                self.broken(&m)
            }
        }
    }

    fn read_only_server(&self) -> bool {
        self.dtro == Tri::Yes || self.in_hot_standby == Tri::Yes
    }

    fn check_target(&mut self, out: &mut Vec<Out>) -> Verdict {
        // Learn the role for the caller's host memory when it is already known.
        if self.in_hot_standby != Tri::Unknown {
            self.role = Some(if self.in_hot_standby == Tri::Yes {
                ServerRole::Standby
            } else {
                ServerRole::Primary
            });
        }
        if self.ignore_check {
            self.state = State::Finished;
            return Verdict::Qualified;
        }
        let reject = match self.params.check {
            Check::Any => None,
            Check::ReadWrite | Check::ReadOnly => {
                if self.dtro == Tri::Unknown || self.in_hot_standby == Tri::Unknown {
                    return self.send_check(CheckQuery::ShowReadOnly, out);
                }
                let ro = self.read_only_server();
                if self.params.check == Check::ReadWrite && ro {
                    Some("session is read-only\n")
                } else if self.params.check == Check::ReadOnly && !ro {
                    Some("session is not read-only\n")
                } else {
                    None
                }
            }
            Check::Primary | Check::Standby => {
                if self.sversion < 90000 {
                    self.in_hot_standby = Tri::No;
                }
                if self.in_hot_standby == Tri::Unknown {
                    return self.send_check(CheckQuery::InRecovery, out);
                }
                if self.params.check == Check::Primary && self.in_hot_standby == Tri::Yes {
                    Some("server is in hot standby mode\n")
                } else if self.params.check == Check::Standby && self.in_hot_standby == Tri::No {
                    Some("server is not in hot standby mode\n")
                } else {
                    None
                }
            }
        };
        match reject {
            None => {
                self.state = State::Finished;
                Verdict::Qualified
            }
            Some(m) => {
                out.push(Out::Send(terminate_bytes()));
                // A server of the wrong role now may be the right one after a failover.
                self.fail(FailClass::Mismatch, FailureKind::Transient, m)
            }
        }
    }

    fn send_check(&mut self, query: CheckQuery, out: &mut Vec<Out>) -> Verdict {
        let mut b = BytesMut::new();
        if frontend::encode_query(query.sql(), &mut b).is_err() {
            // The check queries are constants that always encode; reaching this is a bug.
            return self.broken(query.failed_line());
        }
        out.push(Out::Send(b.to_vec()));
        self.state = State::AwaitCheck {
            query,
            rows: 0,
            value: None,
            error: None,
        };
        Verdict::Pending
    }

    fn on_check_phase(&mut self, tag: u8, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        let State::AwaitCheck {
            query,
            rows,
            value,
            error,
        } = &mut self.state
        else {
            return Verdict::Pending;
        };
        let query = *query;
        match tag {
            b'D' => {
                *rows += 1;
                if *rows == 1 {
                    *value = first_column(body);
                }
            }
            b'E' => {
                let (text, code) = Self::render_error(body);
                *error = Some(kinds::server_error(code));
                self.messages.push_str(&text);
            }
            b'S' => self.parameter_status(body),
            b'Z' => {
                let ok = error.is_none() && *rows == 1;
                // No error but not one usable row: the server answered nonsense.
                let kind = error.unwrap_or(FailureKind::Protocol);
                let v = value.take();
                match (ok, v) {
                    (true, Some(v)) => {
                        match query {
                            CheckQuery::ShowReadOnly => {
                                let t = if v.starts_with(b"on") {
                                    Tri::Yes
                                } else {
                                    Tri::No
                                };
                                self.dtro = t;
                                self.in_hot_standby = t;
                            }
                            CheckQuery::InRecovery => {
                                self.in_hot_standby = if v.starts_with(b"t") {
                                    Tri::Yes
                                } else {
                                    Tri::No
                                };
                            }
                        }
                        return self.check_target(out);
                    }
                    _ => {
                        out.push(Out::Send(terminate_bytes()));
                        return self.fail(FailClass::Mismatch, kind, query.failed_line());
                    }
                }
            }
            _ => {}
        }
        Verdict::Pending
    }
}

/// A Terminate message.
pub(crate) fn terminate_bytes() -> Vec<u8> {
    let mut b = BytesMut::new();
    frontend::encode_terminate(&mut b);
    b.to_vec()
}

/// The first column of a DataRow body; `None` if NULL or malformed.
fn first_column(body: &[u8]) -> Option<Vec<u8>> {
    let n = i16::from_be_bytes([*body.first()?, *body.get(1)?]);
    if n < 1 {
        return None;
    }
    let len = i32::from_be_bytes([*body.get(2)?, *body.get(3)?, *body.get(4)?, *body.get(5)?]);
    let len = usize::try_from(len).ok()?;
    body.get(6..6 + len).map(<[u8]>::to_vec)
}

/// libpq's numeric server version from the `server_version` text (0 when unparsable).
pub(crate) fn parse_server_version(value: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(value);
    let mut nums = Vec::new();
    let mut rest = text.as_ref();
    for _ in 0..3 {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            break;
        }
        let Ok(n) = digits.parse::<i32>() else { break };
        nums.push(n);
        rest = &rest[digits.len()..];
        match rest.strip_prefix('.') {
            Some(r) => rest = r,
            None => break,
        }
    }
    match nums.as_slice() {
        [maj, min, rev] if *maj < 10 => maj * 10000 + min * 100 + rev,
        [maj, min, ..] if *maj >= 10 => maj * 10000 + min,
        [maj, min, ..] => maj * 10000 + min * 100,
        [maj] => maj * 10000,
        _ => 0,
    }
}

/// libpq's text for an authentication failure, newline included.
fn auth_error_text(e: &AuthError) -> String {
    let mut m = e.to_string();
    m.push('\n');
    m
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_version_parsing_follows_libpq() {
        assert_eq!(parse_server_version(b"18.4"), 180004);
        assert_eq!(parse_server_version(b"9.6.24"), 90624);
        assert_eq!(parse_server_version(b"9.6"), 90600);
        assert_eq!(parse_server_version(b"13.2 (Debian)"), 130002);
        assert_eq!(parse_server_version(b"18devel"), 180000);
        assert_eq!(parse_server_version(b"x"), 0);
    }

    #[test]
    fn check_mapping_per_pass() {
        use TargetSessionAttrs as T;
        assert_eq!(Check::for_pass(T::PreferStandby, false), Check::Standby);
        assert_eq!(Check::for_pass(T::PreferStandby, true), Check::Any);
        assert_eq!(Check::for_pass(T::PreferPrimary, false), Check::Primary);
        assert_eq!(Check::for_pass(T::ReadWrite, true), Check::ReadWrite);
    }
}
