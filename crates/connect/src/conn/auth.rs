//! Authentication and protocol negotiation: the server's answers to the startup packet up
//! to AuthenticationOk, with `require_auth` enforced on each request.

use bytes::BytesMut;
use pgyard_conninfo::typed::{auth_request, AuthMethod};
use pgyard_wire::auth::{AuthError, AuthRequest, AuthResponse, AuthStep};
use pgyard_wire::error_fields::{ConnectStage, SqlState};
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend;

use super::{Conn, FailClass, Out, State, Verdict};
use crate::kinds;
use crate::report::FailureKind;

/// The start of libpq's complaints about a NegotiateProtocolVersion message.
const P: &str = "received invalid protocol negotiation message";

impl Conn {
    pub(super) fn on_auth_phase(&mut self, tag: u8, body: &[u8], out: &mut Vec<Out>) -> Verdict {
        match tag {
            b'E' => {
                let (text, code) = self.refusal(body);
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
                let class = FailClass::for_startup_error(code, ConnectStage::BeforeAuthOk);
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
        self.record_refused_options(count, body.get(8..).unwrap_or_default())
    }

    /// Records the `count` protocol options NegotiateProtocolVersion lists in `names` as
    /// refused; the server breaks the protocol by listing one this connection did not ask for.
    fn record_refused_options(&mut self, count: i32, names: &[u8]) -> Verdict {
        let mut rest = names;
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

    /// `sslcertmode=require`'s refusal of an AuthenticationOk: the server never asked for a
    /// client certificate (always so without TLS), or asked and the client had none to send.
    fn cert_refusal(&self, code: i32) -> Option<&'static str> {
        if !self.params.cert_required || u32::try_from(code) != Ok(auth_request::OK) {
            return None;
        }
        match self.client_cert {
            crate::ClientCert::NotRequested => Some("server did not request an SSL certificate\n"),
            crate::ClientCert::NoneSent => {
                Some("server accepted connection without a valid SSL certificate\n")
            }
            crate::ClientCert::Sent => None,
        }
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
        // libpq's first check of a request, before `require_auth`'s.
        if let Some(m) = self.cert_refusal(request.code()) {
            return self.fail(FailClass::Abort, FailureKind::Authentication, m);
        }
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
            Ok(AuthStep::Send(resp)) => self.send_auth_response(&resp, out),
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

    /// Sends the client's side of an authentication exchange.
    fn send_auth_response(&mut self, resp: &AuthResponse, out: &mut Vec<Out>) -> Verdict {
        let mut b = BytesMut::new();
        let r = match resp {
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
        out.push(Out::Send(Vec::from(b)));
        Verdict::Pending
    }
}

/// libpq's text for an authentication failure, newline included.
fn auth_error_text(e: &AuthError) -> String {
    let mut m = e.to_string();
    m.push('\n');
    m
}
