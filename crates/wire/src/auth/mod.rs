//! Authentication exchanges as sans-IO state machines: SCRAM-SHA-256(-PLUS), MD5, cleartext.
//!
//! - [`ScramClient`] / [`ScramServer`]: the two sides of SCRAM-SHA-256(-PLUS); payloads in and
//!   out are what SASLInitialResponse, SASLResponse, AuthenticationSASLContinue and
//!   AuthenticationSASLFinal carry. [`scram_secret`] builds PostgreSQL's stored verifier.
//! - [`md5_password`], [`md5_verify`], [`cleartext_payload`]: the password exchanges.
//! - [`ServerLogin`]: the server's whole password check, for servers and middleware.
//! - [`tls_server_end_point`]: channel-binding data from the server certificate.
//! - [`AuthClient`]: the client's whole authentication phase, request by request, with libpq's
//!   `channel_binding` rules; what a connection driver plugs in.
//!
//! Nothing here does I/O or reads a clock; nonces and salts are inputs.

mod cert;
mod md5;
mod saslprep;
mod scram;
mod server;

#[cfg(test)]
mod pass_through_tests;
#[cfg(test)]
mod tests;

pub use cert::{end_point_hash, tls_server_end_point, CertHashError, EndPointHash};
pub use md5::{
    cleartext_payload, is_md5_secret, md5_password, md5_payload, md5_payload_from_secret,
    md5_secret, md5_verify, MD5_PASSWORD_LEN,
};
pub use saslprep::saslprep_password;
pub use scram::{
    scram_secret, select_mechanism, ClientFirst, Mechanism, ScramClient, ScramError, ScramKeys,
    ScramSecret, ScramServer, ScramServerError, SecretError, CHANNEL_BINDING_TYPE,
    DEFAULT_ITERATIONS, DEFAULT_MAX_ITERATIONS, DEFAULT_SALT_LEN, KEY_LEN, NONCE_RAW_LEN,
    SCRAM_SHA_256, SCRAM_SHA_256_PLUS,
};
pub use server::{LoginRandom, LoginStep, ServerLogin, StoredSecret};

use crate::{DecodeError, Reader};

/// libpq's `channel_binding` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ChannelBinding {
    /// Never use channel binding.
    Disable,
    /// Use it when the server offers it on a TLS connection (libpq's default).
    #[default]
    Prefer,
    /// Fail unless the server authenticates with channel binding.
    Require,
}

/// AuthenticationRequest codes (first Int32 of an `'R'` message).
pub mod code {
    /// AuthenticationOk.
    pub const OK: i32 = 0;
    /// Kerberos V4 (obsolete).
    pub const KRB4: i32 = 1;
    /// AuthenticationKerberosV5.
    pub const KRB5: i32 = 2;
    /// AuthenticationCleartextPassword.
    pub const PASSWORD: i32 = 3;
    /// crypt() (obsolete).
    pub const CRYPT: i32 = 4;
    /// AuthenticationMD5Password.
    pub const MD5: i32 = 5;
    /// SCM credentials (obsolete).
    pub const SCM_CREDS: i32 = 6;
    /// AuthenticationGSS.
    pub const GSS: i32 = 7;
    /// AuthenticationGSSContinue.
    pub const GSS_CONTINUE: i32 = 8;
    /// AuthenticationSSPI.
    pub const SSPI: i32 = 9;
    /// AuthenticationSASL.
    pub const SASL: i32 = 10;
    /// AuthenticationSASLContinue.
    pub const SASL_CONTINUE: i32 = 11;
    /// AuthenticationSASLFinal.
    pub const SASL_FINAL: i32 = 12;
}

/// An authentication request from the server: the body of an `'R'` message, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthRequest<'a> {
    /// AuthenticationOk.
    Ok,
    /// AuthenticationCleartextPassword.
    CleartextPassword,
    /// AuthenticationMD5Password with its salt.
    Md5Password {
        /// The 4 salt bytes.
        salt: [u8; 4],
    },
    /// AuthenticationSASL with the offered mechanisms.
    Sasl(SaslMechanisms<'a>),
    /// AuthenticationSASLContinue with the server's challenge (server-first).
    SaslContinue(&'a [u8]),
    /// AuthenticationSASLFinal with the server's additional data (server-final).
    SaslFinal(&'a [u8]),
    /// Any other code (Kerberos, GSS, SSPI, obsolete or unknown); payload not interpreted.
    Other {
        /// The request code.
        code: i32,
    },
}

impl<'a> AuthRequest<'a> {
    /// Decodes the body of an `'R'` message (everything after the length word).
    pub fn decode(body: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(body);
        let request = match r.i32()? {
            code::OK => AuthRequest::Ok,
            code::PASSWORD => AuthRequest::CleartextPassword,
            code::MD5 => {
                let salt = r.bytes(4)?;
                AuthRequest::Md5Password {
                    salt: [salt[0], salt[1], salt[2], salt[3]],
                }
            }
            code::SASL => {
                let list = r.rest();
                let at = r.offset();
                loop {
                    if r.cstr()?.is_empty() {
                        break;
                    }
                }
                let used = r.offset() - at;
                AuthRequest::Sasl(SaslMechanisms {
                    list: &list[..used],
                })
            }
            code::SASL_CONTINUE => AuthRequest::SaslContinue(r.take_rest()),
            code::SASL_FINAL => AuthRequest::SaslFinal(r.take_rest()),
            other => AuthRequest::Other { code: other },
        };
        if matches!(request, AuthRequest::Other { .. }) {
            return Ok(request);
        }
        r.finish()?;
        Ok(request)
    }

    /// The request code.
    pub fn code(&self) -> i32 {
        match self {
            AuthRequest::Ok => code::OK,
            AuthRequest::CleartextPassword => code::PASSWORD,
            AuthRequest::Md5Password { .. } => code::MD5,
            AuthRequest::Sasl(_) => code::SASL,
            AuthRequest::SaslContinue(_) => code::SASL_CONTINUE,
            AuthRequest::SaslFinal(_) => code::SASL_FINAL,
            AuthRequest::Other { code } => *code,
        }
    }
}

/// The mechanism list of AuthenticationSASL: NUL-terminated names, then an empty name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SaslMechanisms<'a> {
    list: &'a [u8],
}

impl<'a> SaslMechanisms<'a> {
    /// Wraps an encoded list; names after an empty one (or an unterminated tail) are ignored.
    pub fn new(list: &'a [u8]) -> Self {
        SaslMechanisms { list }
    }

    /// The names in the server's order.
    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + 'a {
        let mut rest = self.list;
        std::iter::from_fn(move || {
            let end = rest.iter().position(|&b| b == 0)?;
            let (name, after) = rest.split_at(end);
            rest = &after[1..];
            (!name.is_empty()).then_some(name)
        })
    }
}

/// What the client must put in its next `'p'` message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthResponse {
    /// PasswordMessage: the whole body (cleartext or `md5…`, NUL-terminated).
    Password(Vec<u8>),
    /// SASLInitialResponse: the mechanism name and the client-first data.
    SaslInitial {
        /// Mechanism chosen.
        mechanism: Mechanism,
        /// client-first-message (goes after the Int32 length).
        data: Vec<u8>,
    },
    /// SASLResponse: the client-final data.
    Sasl(Vec<u8>),
}

/// What happened after an authentication request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthStep {
    /// Send this, then wait for the next `'R'` (or ErrorResponse).
    Send(AuthResponse),
    /// Nothing to send (the server's SCRAM signature was verified); AuthenticationOk follows.
    Wait,
    /// AuthenticationOk accepted: ParameterStatus, BackendKeyData and ReadyForQuery follow.
    Authenticated,
}

/// Why the client abandoned authentication. Texts are libpq's where libpq has one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The SCRAM exchange failed.
    #[error(transparent)]
    Scram(#[from] ScramError),
    /// The server asked for a password and none (or an empty one) was configured.
    #[error("fe_sendauth: no password supplied")]
    NoPasswordSupplied,
    /// `channel_binding=require`, and AuthenticationOk came without a channel-bound exchange.
    #[error("channel binding required, but server authenticated client without channel binding")]
    ChannelBindingNotUsed,
    /// `channel_binding=require`, and the server asked for a non-SASL method.
    #[error("channel binding required but not supported by server's authentication request")]
    ChannelBindingUnsupportedRequest,
    /// AuthenticationOk after a SCRAM exchange began but before the server proved itself.
    #[error("server did not complete authentication")]
    IncompleteSasl,
    /// A second AuthenticationSASL.
    #[error("duplicate SASL authentication request")]
    DuplicateSasl,
    /// AuthenticationSASLContinue without a SASL exchange.
    #[error(
        "fe_sendauth: invalid authentication request from server: AUTH_REQ_SASL_CONT without AUTH_REQ_SASL"
    )]
    SaslContinueWithoutSasl,
    /// AuthenticationSASLFinal without a SASL exchange.
    #[error(
        "fe_sendauth: invalid authentication request from server: AUTH_REQ_SASL_FIN without AUTH_REQ_SASL"
    )]
    SaslFinalWithoutSasl,
    /// AuthenticationSASLFinal while the client still expected server-first.
    #[error(
        "AuthenticationSASLFinal received from server, but SASL authentication was not completed"
    )]
    SaslFinalTooEarly,
    /// Kerberos V4.
    #[error("Kerberos 4 authentication not supported")]
    KerberosV4,
    /// Kerberos V5.
    #[error("Kerberos 5 authentication not supported")]
    KerberosV5,
    /// GSSAPI (not implemented here).
    #[error("GSSAPI authentication not supported")]
    Gss,
    /// SSPI.
    #[error("SSPI authentication not supported")]
    Sspi,
    /// crypt().
    #[error("Crypt authentication not supported")]
    Crypt,
    /// Any other code.
    #[error("authentication method {0} not supported")]
    Unsupported(i32),
    /// A request after AuthenticationOk.
    #[error("unexpected authentication request after authentication completed")]
    AfterAuthenticated,
}

/// Settings for [`AuthClient`].
#[derive(Clone, Default, PartialEq, Eq)]
pub struct AuthConfig {
    /// The user name from the startup packet (MD5 hashes it).
    pub user: String,
    /// The password, if any.
    pub password: Option<Vec<u8>>,
    /// libpq's `channel_binding`.
    pub channel_binding: ChannelBinding,
    /// `tls-server-end-point` data of the connection; `None` when TLS is not in use.
    pub tls_end_point: Option<Vec<u8>>,
    /// Cap on the SCRAM iteration count; `None` is [`DEFAULT_MAX_ITERATIONS`].
    pub max_iterations: Option<u32>,
    /// What answers the server when there is no password (a proxy's pass-through).
    pub secret: Option<LoginSecret>,
}

/// A credential that stands in for the password: what a proxy holds after checking a client
/// against a stored secret ([`ServerLogin::proven`]). A password, when there is one, wins.
#[derive(Clone, PartialEq, Eq)]
pub enum LoginSecret {
    /// A stored MD5 secret (`md5` and 32 hex digits): answers MD5 requests, as the stored value
    /// alone suffices for them.
    Md5(String),
    /// SCRAM keys: answer SCRAM requests of a server storing the same verifier.
    Scram(ScramKeys),
}

impl std::fmt::Debug for LoginSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoginSecret::Md5(_) => f.write_str("LoginSecret::Md5(<hidden>)"),
            LoginSecret::Scram(k) => write!(f, "LoginSecret::Scram({k:?})"),
        }
    }
}

impl std::fmt::Debug for AuthConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthConfig")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<hidden>"))
            .field("channel_binding", &self.channel_binding)
            .field("tls", &self.tls_end_point.is_some())
            .field("max_iterations", &self.max_iterations)
            .field("secret", &self.secret.as_ref().map(|_| "<hidden>"))
            .finish()
    }
}

/// The client's authentication phase: feed each `'R'` request to
/// [`handle_request`](Self::handle_request) and do what the returned [`AuthStep`] says.
///
/// Enforces `channel_binding` as libpq does, refuses AuthenticationOk in the middle of a SCRAM
/// exchange (before the server's signature was verified), and keeps its first error.
#[derive(Debug)]
pub struct AuthClient {
    config: AuthConfig,
    nonce: [u8; NONCE_RAW_LEN],
    state: AuthState,
}

#[derive(Debug)]
enum AuthState {
    Start,
    PasswordSent,
    Scram(Box<ScramClient>),
    Authenticated,
    Failed(AuthError),
}

impl AuthClient {
    /// A client for `config`; `nonce` (18 random bytes) is used if SCRAM is requested.
    pub fn new(config: AuthConfig, nonce: [u8; NONCE_RAW_LEN]) -> Self {
        AuthClient {
            config,
            nonce,
            state: AuthState::Start,
        }
    }

    /// Handles one authentication request.
    pub fn handle_request(&mut self, request: AuthRequest<'_>) -> Result<AuthStep, AuthError> {
        let state = std::mem::replace(&mut self.state, AuthState::Start);
        if let AuthState::Failed(e) = state {
            self.state = AuthState::Failed(e.clone());
            return Err(e);
        }
        match self.step(state, request) {
            Ok((next, step)) => {
                self.state = next;
                Ok(step)
            }
            Err(e) => {
                self.state = AuthState::Failed(e.clone());
                Err(e)
            }
        }
    }

    /// Whether AuthenticationOk was accepted.
    pub fn is_authenticated(&self) -> bool {
        matches!(self.state, AuthState::Authenticated)
    }

    /// Whether SCRAM completed with channel binding.
    pub fn is_channel_bound(&self) -> bool {
        matches!(&self.state, AuthState::Scram(c) if c.is_channel_bound())
    }

    fn step(
        &self,
        state: AuthState,
        request: AuthRequest<'_>,
    ) -> Result<(AuthState, AuthStep), AuthError> {
        if matches!(state, AuthState::Authenticated) {
            return Err(AuthError::AfterAuthenticated);
        }
        let require = self.config.channel_binding == ChannelBinding::Require;
        match request {
            AuthRequest::Ok => {
                let bound = matches!(&state, AuthState::Scram(c) if c.is_channel_bound());
                if let AuthState::Scram(client) = &state {
                    if !client.is_complete() {
                        return Err(AuthError::IncompleteSasl);
                    }
                }
                if require && !bound {
                    return Err(AuthError::ChannelBindingNotUsed);
                }
                Ok((AuthState::Authenticated, AuthStep::Authenticated))
            }
            AuthRequest::Sasl(mechanisms) => {
                if let AuthState::Scram(_) = state {
                    return Err(AuthError::DuplicateSasl);
                }
                // libpq checks the mechanisms before asking for the password.
                select_mechanism(
                    mechanisms.iter(),
                    self.config.channel_binding,
                    self.config.tls_end_point.is_some(),
                )?;
                let tls = self.config.tls_end_point.as_deref();
                let binding = self.config.channel_binding;
                let mut client = match (self.password(), &self.config.secret) {
                    (Err(AuthError::NoPasswordSupplied), Some(LoginSecret::Scram(keys))) => {
                        ScramClient::with_keys(keys.clone(), binding, tls, self.nonce)
                    }
                    (password, _) => ScramClient::new(password?, binding, tls, self.nonce),
                };
                if let Some(max) = self.config.max_iterations {
                    client = client.with_max_iterations(max);
                }
                let first = client.client_first(mechanisms.iter())?;
                let response = AuthResponse::SaslInitial {
                    mechanism: first.mechanism,
                    data: first.message,
                };
                Ok((AuthState::Scram(Box::new(client)), AuthStep::Send(response)))
            }
            AuthRequest::SaslContinue(data) => {
                let AuthState::Scram(mut client) = state else {
                    return Err(AuthError::SaslContinueWithoutSasl);
                };
                let out = client.handle_server_first(data)?;
                Ok((
                    AuthState::Scram(client),
                    AuthStep::Send(AuthResponse::Sasl(out)),
                ))
            }
            AuthRequest::SaslFinal(data) => {
                let AuthState::Scram(mut client) = state else {
                    return Err(AuthError::SaslFinalWithoutSasl);
                };
                if client.awaits_server_first() {
                    return Err(AuthError::SaslFinalTooEarly);
                }
                client.handle_server_final(data)?;
                Ok((AuthState::Scram(client), AuthStep::Wait))
            }
            _ if require => Err(AuthError::ChannelBindingUnsupportedRequest),
            AuthRequest::CleartextPassword => {
                let payload = cleartext_payload(self.password()?);
                Ok((
                    AuthState::PasswordSent,
                    AuthStep::Send(AuthResponse::Password(payload)),
                ))
            }
            AuthRequest::Md5Password { salt } => {
                let payload = match (self.password(), &self.config.secret) {
                    (Err(AuthError::NoPasswordSupplied), Some(LoginSecret::Md5(secret))) => {
                        md5_payload_from_secret(secret, salt)
                    }
                    (password, _) => md5_payload(&self.config.user, password?, salt),
                };
                Ok((
                    AuthState::PasswordSent,
                    AuthStep::Send(AuthResponse::Password(payload)),
                ))
            }
            AuthRequest::Other { code } => Err(match code {
                code::KRB4 => AuthError::KerberosV4,
                code::KRB5 => AuthError::KerberosV5,
                code::GSS | code::GSS_CONTINUE => AuthError::Gss,
                code::SSPI => AuthError::Sspi,
                code::CRYPT => AuthError::Crypt,
                other => AuthError::Unsupported(other),
            }),
        }
    }

    fn password(&self) -> Result<&[u8], AuthError> {
        match self.config.password.as_deref() {
            Some(p) if !p.is_empty() => Ok(p),
            _ => Err(AuthError::NoPasswordSupplied),
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths.
pub(crate) fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}
