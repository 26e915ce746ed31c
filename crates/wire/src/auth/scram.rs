//! SCRAM-SHA-256 and SCRAM-SHA-256-PLUS (RFC 5802, RFC 7677) as PostgreSQL uses them: a client
//! machine that plays libpq's part and a server machine that plays the backend's part.
//!
//! Both are sans-IO: they turn the payload of one SASL message into the payload of the next.
//! Nonces (and salts) are inputs. After the first error a machine stays failed and returns that
//! error from every later call.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use rand_core::RngCore;
use sha2::{Digest, Sha256};

use super::saslprep::saslprep_password;
use super::{ct_eq, ChannelBinding};

/// Name of the mechanism without channel binding.
pub const SCRAM_SHA_256: &str = "SCRAM-SHA-256";
/// Name of the mechanism with channel binding.
pub const SCRAM_SHA_256_PLUS: &str = "SCRAM-SHA-256-PLUS";
/// The only channel-binding type PostgreSQL supports.
pub const CHANNEL_BINDING_TYPE: &str = "tls-server-end-point";
/// Random bytes in a nonce (as libpq and the server use; base64 makes 24 characters).
pub const NONCE_RAW_LEN: usize = 18;
/// Length of SCRAM-SHA-256 keys, proofs and signatures.
pub const KEY_LEN: usize = 32;
/// PostgreSQL's default iteration count (`scram_iterations`).
pub const DEFAULT_ITERATIONS: u32 = 4096;
/// PostgreSQL's default salt length in bytes.
pub const DEFAULT_SALT_LEN: usize = 16;
/// Default cap on the iteration count a server may ask a client for (a hostile server could
/// otherwise make the client burn CPU); [`ScramClient::with_max_iterations`] changes it.
pub const DEFAULT_MAX_ITERATIONS: u32 = 1_000_000;

const GS2_PLUS: &str = "p=tls-server-end-point,,";
const GS2_YES: &str = "y,,";
const GS2_NO: &str = "n,,";

/// A SASL mechanism this module implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// `SCRAM-SHA-256`.
    ScramSha256,
    /// `SCRAM-SHA-256-PLUS` (with `tls-server-end-point` channel binding).
    ScramSha256Plus,
}

impl Mechanism {
    /// The name as it appears in AuthenticationSASL and SASLInitialResponse.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::ScramSha256 => SCRAM_SHA_256,
            Mechanism::ScramSha256Plus => SCRAM_SHA_256_PLUS,
        }
    }

    /// The mechanism named `name`, if it is one of ours.
    pub fn from_name(name: &[u8]) -> Option<Mechanism> {
        match name {
            b"SCRAM-SHA-256" => Some(Mechanism::ScramSha256),
            b"SCRAM-SHA-256-PLUS" => Some(Mechanism::ScramSha256Plus),
            _ => None,
        }
    }
}

impl fmt::Display for Mechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the client side of a SCRAM exchange failed. Texts are libpq's where libpq has one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramError {
    /// `channel_binding=require` on a connection without TLS.
    #[error("channel binding required, but SSL not in use")]
    ChannelBindingSslNotInUse,
    /// The server offered `SCRAM-SHA-256-PLUS` on a connection without TLS (TLS stripped?).
    #[error("server offered SCRAM-SHA-256-PLUS authentication over a non-SSL connection")]
    PlusOverPlaintext,
    /// No offered mechanism is one we support.
    #[error("none of the server's SASL authentication mechanisms are supported")]
    NoSupportedMechanism,
    /// `channel_binding=require`, but `SCRAM-SHA-256-PLUS` was not offered.
    #[error(
        "channel binding is required, but server did not offer an authentication method that supports channel binding"
    )]
    ChannelBindingNotOffered,
    /// A server message was empty.
    #[error("malformed SCRAM message (empty message)")]
    EmptyMessage,
    /// A server message contained a NUL byte.
    #[error("malformed SCRAM message (length mismatch)")]
    LengthMismatch,
    /// The next attribute was not the expected one.
    #[error("malformed SCRAM message (attribute \"{0}\" expected)")]
    AttributeExpected(char),
    /// An attribute name was not followed by `=`.
    #[error("malformed SCRAM message (expected character \"=\" for attribute \"{0}\")")]
    EqualsExpected(char),
    /// The server asked for a mandatory extension (`m=`), which nobody defines.
    #[error("malformed SCRAM message (unsupported mandatory extension)")]
    MandatoryExtension,
    /// The server nonce does not extend the client nonce.
    #[error("invalid SCRAM response (nonce mismatch)")]
    NonceMismatch,
    /// The nonce contains characters outside printable ASCII (or a client nonce given to
    /// [`ScramClient::with_nonce_text`] does, or contains `,`).
    #[error("malformed SCRAM message (invalid nonce)")]
    InvalidNonce,
    /// The salt is not valid base64, or empty.
    #[error("malformed SCRAM message (invalid salt)")]
    InvalidSalt,
    /// The iteration count is not a decimal integer of at least 1.
    #[error("malformed SCRAM message (invalid iteration count)")]
    InvalidIterationCount,
    /// The iteration count is above the client's cap.
    #[error("SCRAM iteration count {count} exceeds the configured maximum of {max}")]
    TooManyIterations {
        /// What the server asked for.
        count: u32,
        /// The cap.
        max: u32,
    },
    /// Attributes after the iteration count.
    #[error("malformed SCRAM message (garbage at end of server-first-message)")]
    GarbageAfterServerFirst,
    /// Attributes after the server signature.
    #[error("malformed SCRAM message (garbage at end of server-final-message)")]
    GarbageAfterServerFinal,
    /// The `v=` value is not base64 of exactly 32 bytes.
    #[error("malformed SCRAM message (invalid server signature)")]
    InvalidServerSignature,
    /// The server's signature does not match: it does not know the password (or a MITM).
    #[error("incorrect server signature")]
    ServerSignatureMismatch,
    /// The server ended the exchange with `e=`.
    #[error("error received from server in SCRAM exchange: {0}")]
    ServerError(String),
    /// A call out of order (e.g. a server-final before a server-first).
    #[error("invalid SCRAM exchange state")]
    InvalidState,
}

/// The client's first SASL message: the mechanism it chose and the initial response.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientFirst {
    /// Goes into SASLInitialResponse's mechanism field.
    pub mechanism: Mechanism,
    /// Goes into SASLInitialResponse's data (gs2 header and client-first-message-bare).
    pub message: Vec<u8>,
}

/// Picks the mechanism as libpq does from the server's list (in the server's order), the
/// `channel_binding` setting, and whether the connection uses TLS.
pub fn select_mechanism<I>(
    mechanisms: I,
    channel_binding: ChannelBinding,
    tls_in_use: bool,
) -> Result<Mechanism, ScramError>
where
    I: IntoIterator,
    I::Item: AsRef<[u8]>,
{
    if channel_binding == ChannelBinding::Require && !tls_in_use {
        return Err(ScramError::ChannelBindingSslNotInUse);
    }
    let mut selected = None;
    for name in mechanisms {
        match Mechanism::from_name(name.as_ref()) {
            Some(Mechanism::ScramSha256Plus) => {
                if !tls_in_use {
                    return Err(ScramError::PlusOverPlaintext);
                }
                if channel_binding != ChannelBinding::Disable {
                    selected = Some(Mechanism::ScramSha256Plus);
                }
            }
            Some(Mechanism::ScramSha256) if selected.is_none() => {
                selected = Some(Mechanism::ScramSha256);
            }
            _ => {}
        }
    }
    let selected = selected.ok_or(ScramError::NoSupportedMechanism)?;
    if channel_binding == ChannelBinding::Require && selected != Mechanism::ScramSha256Plus {
        return Err(ScramError::ChannelBindingNotOffered);
    }
    Ok(selected)
}

/// The client side of a SCRAM-SHA-256(-PLUS) exchange.
///
/// Order of calls: [`client_first`](Self::client_first) (with the mechanisms from
/// AuthenticationSASL), [`handle_server_first`](Self::handle_server_first) (payload of
/// AuthenticationSASLContinue, returns the SASLResponse payload), then
/// [`handle_server_final`](Self::handle_server_final) (payload of AuthenticationSASLFinal).
/// Only after that succeeds may the driver accept AuthenticationOk.
#[derive(Clone)]
pub struct ScramClient {
    channel_binding: ChannelBinding,
    client_nonce: String,
    username: String,
    max_iterations: u32,
    state: ClientState,
}

#[derive(Clone)]
enum ClientState {
    Start {
        password: Vec<u8>,
        cb_data: Option<Vec<u8>>,
    },
    AwaitServerFirst {
        password: Vec<u8>,
        cb_data: Option<Vec<u8>>,
        mechanism: Mechanism,
        gs2_header: &'static str,
        client_first_bare: String,
    },
    AwaitServerFinal {
        mechanism: Mechanism,
        expected_signature: [u8; KEY_LEN],
    },
    Done {
        mechanism: Mechanism,
    },
    Failed(ScramError),
}

impl fmt::Debug for ScramClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The password and keys stay out of logs.
        let state = match &self.state {
            ClientState::Start { .. } => "Start",
            ClientState::AwaitServerFirst { .. } => "AwaitServerFirst",
            ClientState::AwaitServerFinal { .. } => "AwaitServerFinal",
            ClientState::Done { .. } => "Done",
            ClientState::Failed(_) => "Failed",
        };
        f.debug_struct("ScramClient")
            .field("channel_binding", &self.channel_binding)
            .field("client_nonce", &self.client_nonce)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl ScramClient {
    /// A client for `password` (SASLprep'd as PostgreSQL does), the `channel_binding` setting,
    /// the connection's `tls-server-end-point` data (`None` on a plaintext connection; see
    /// [`tls_server_end_point`](super::tls_server_end_point)), and 18 random bytes for the nonce.
    pub fn new(
        password: impl AsRef<[u8]>,
        channel_binding: ChannelBinding,
        tls_end_point: Option<&[u8]>,
        nonce: [u8; NONCE_RAW_LEN],
    ) -> Self {
        ScramClient {
            channel_binding,
            client_nonce: BASE64.encode(nonce),
            username: String::new(),
            max_iterations: DEFAULT_MAX_ITERATIONS,
            state: ClientState::Start {
                password: saslprep_password(password.as_ref()).into_owned(),
                cb_data: tls_end_point.map(<[u8]>::to_vec),
            },
        }
    }

    /// [`new`](Self::new) with the nonce drawn from `rng`.
    pub fn from_rng(
        password: impl AsRef<[u8]>,
        channel_binding: ChannelBinding,
        tls_end_point: Option<&[u8]>,
        rng: &mut impl RngCore,
    ) -> Self {
        let mut nonce = [0u8; NONCE_RAW_LEN];
        rng.fill_bytes(&mut nonce);
        Self::new(password, channel_binding, tls_end_point, nonce)
    }

    /// Uses `nonce` verbatim as the client nonce (for test vectors). It must be non-empty
    /// printable ASCII without `,`.
    pub fn with_nonce_text(mut self, nonce: &str) -> Result<Self, ScramError> {
        if !valid_nonce(nonce.as_bytes()) {
            return Err(ScramError::InvalidNonce);
        }
        self.client_nonce = nonce.to_owned();
        Ok(self)
    }

    /// Puts `username` into client-first (`n=`), escaped as RFC 5802 says. PostgreSQL ignores
    /// it and libpq sends it empty, which is the default; test vectors need it.
    pub fn with_username(mut self, username: &str) -> Self {
        self.username = username.replace('=', "=3D").replace(',', "=2C");
        self
    }

    /// Sets the largest iteration count accepted from the server (at least 1).
    pub fn with_max_iterations(mut self, max: u32) -> Self {
        self.max_iterations = max.max(1);
        self
    }

    /// The client nonce as sent.
    pub fn client_nonce(&self) -> &str {
        &self.client_nonce
    }

    /// Chooses the mechanism from the server's list (see [`select_mechanism`]) and builds the
    /// client-first message.
    pub fn client_first<I>(&mut self, mechanisms: I) -> Result<ClientFirst, ScramError>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let channel_binding = self.channel_binding;
        let nonce = self.client_nonce.clone();
        let username = self.username.clone();
        self.step(|state| match state {
            ClientState::Start { password, cb_data } => {
                let mechanism = select_mechanism(mechanisms, channel_binding, cb_data.is_some())?;
                let gs2_header = if mechanism == Mechanism::ScramSha256Plus {
                    GS2_PLUS
                } else if channel_binding != ChannelBinding::Disable && cb_data.is_some() {
                    GS2_YES
                } else {
                    GS2_NO
                };
                // Built with push_str, not format!: a simulated login runs this thousands of
                // times a second.
                let mut client_first_bare = String::with_capacity(4 + username.len() + nonce.len());
                client_first_bare.push_str("n=");
                client_first_bare.push_str(&username);
                client_first_bare.push_str(",r=");
                client_first_bare.push_str(&nonce);
                let mut message = Vec::with_capacity(gs2_header.len() + client_first_bare.len());
                message.extend_from_slice(gs2_header.as_bytes());
                message.extend_from_slice(client_first_bare.as_bytes());
                let next = ClientState::AwaitServerFirst {
                    password,
                    cb_data,
                    mechanism,
                    gs2_header,
                    client_first_bare,
                };
                Ok((next, ClientFirst { mechanism, message }))
            }
            _ => Err(ScramError::InvalidState),
        })
    }

    /// Checks the server-first message and returns the client-final message.
    pub fn handle_server_first(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramError> {
        let client_nonce = self.client_nonce.clone();
        let max_iterations = self.max_iterations;
        self.step(|state| {
            let ClientState::AwaitServerFirst {
                password,
                cb_data,
                mechanism,
                gs2_header,
                client_first_bare,
            } = state
            else {
                return Err(ScramError::InvalidState);
            };
            let first = parse_server_first(message, &client_nonce, max_iterations)?;

            let mut cbind_input = gs2_header.as_bytes().to_vec();
            if mechanism == Mechanism::ScramSha256Plus {
                // Selection only picks -PLUS when the end-point data is present.
                cbind_input.extend_from_slice(cb_data.as_deref().unwrap_or_default());
            }
            let mut without_proof = String::with_capacity(96 + first.nonce.len());
            without_proof.push_str("c=");
            BASE64.encode_string(&cbind_input, &mut without_proof);
            without_proof.push_str(",r=");
            without_proof.push_str(&first.nonce);

            let keys = Keys::derive(&password, &first.salt, first.iterations);
            let auth_message = auth_message(
                client_first_bare.as_bytes(),
                message,
                without_proof.as_bytes(),
            );
            let client_signature = hmac(&keys.stored_key, &auth_message);
            let mut proof = keys.client_key;
            for (p, s) in proof.iter_mut().zip(client_signature) {
                *p ^= s;
            }
            let expected_signature = hmac(&keys.server_key, &auth_message);
            let mut out = without_proof;
            out.push_str(",p=");
            BASE64.encode_string(proof, &mut out);
            let out = out.into_bytes();
            let next = ClientState::AwaitServerFinal {
                mechanism,
                expected_signature,
            };
            Ok((next, out))
        })
    }

    /// Checks the server-final message: `e=` is the server's error, `v=` must be the server
    /// signature (compared in constant time).
    pub fn handle_server_final(&mut self, message: &[u8]) -> Result<(), ScramError> {
        self.step(|state| {
            let ClientState::AwaitServerFinal {
                mechanism,
                expected_signature,
            } = state
            else {
                return Err(ScramError::InvalidState);
            };
            check_text(message)?;
            let mut attrs = Attrs::new(message);
            if message.first() == Some(&b'e') {
                let text = attrs.attr(b'e').map_err(client_attr_error)?;
                return Err(ScramError::ServerError(
                    String::from_utf8_lossy(text).into_owned(),
                ));
            }
            let encoded = attrs.attr(b'v').map_err(client_attr_error)?;
            if !attrs.at_end() {
                return Err(ScramError::GarbageAfterServerFinal);
            }
            let signature = BASE64
                .decode(encoded)
                .map_err(|_| ScramError::InvalidServerSignature)?;
            if signature.len() != KEY_LEN {
                return Err(ScramError::InvalidServerSignature);
            }
            if !ct_eq(&signature, &expected_signature) {
                return Err(ScramError::ServerSignatureMismatch);
            }
            Ok((ClientState::Done { mechanism }, ()))
        })
    }

    /// The mechanism chosen by [`client_first`](Self::client_first), if it ran.
    pub fn mechanism(&self) -> Option<Mechanism> {
        match &self.state {
            ClientState::AwaitServerFirst { mechanism, .. }
            | ClientState::AwaitServerFinal { mechanism, .. }
            | ClientState::Done { mechanism } => Some(*mechanism),
            ClientState::Start { .. } | ClientState::Failed(_) => None,
        }
    }

    /// Whether the server's signature was verified.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, ClientState::Done { .. })
    }

    /// Whether client-first was sent and server-first is due.
    pub(crate) fn awaits_server_first(&self) -> bool {
        matches!(self.state, ClientState::AwaitServerFirst { .. })
    }

    /// Whether the exchange completed with channel binding (what `channel_binding=require`
    /// checks when AuthenticationOk arrives).
    pub fn is_channel_bound(&self) -> bool {
        matches!(
            self.state,
            ClientState::Done {
                mechanism: Mechanism::ScramSha256Plus
            }
        )
    }

    /// The error the machine failed with, if any.
    pub fn error(&self) -> Option<&ScramError> {
        self.state.failure()
    }

    fn step<T>(
        &mut self,
        f: impl FnOnce(ClientState) -> Result<(ClientState, T), ScramError>,
    ) -> Result<T, ScramError> {
        sticky_step(&mut self.state, ScramError::InvalidState, f)
    }
}

/// A stored SCRAM-SHA-256 verifier, as in `pg_authid.rolpassword`:
/// `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>` (base64 fields).
#[derive(Clone, PartialEq, Eq)]
pub struct ScramSecret {
    /// PBKDF2 iteration count (at least 1).
    pub iterations: u32,
    /// The salt.
    pub salt: Vec<u8>,
    /// `H(HMAC(SaltedPassword, "Client Key"))`.
    pub stored_key: [u8; KEY_LEN],
    /// `HMAC(SaltedPassword, "Server Key")`.
    pub server_key: [u8; KEY_LEN],
}

/// Why a stored SCRAM secret could not be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid SCRAM secret: {0}")]
pub struct SecretError(&'static str);

/// The verifier PostgreSQL stores for `password` with `salt` and `iterations` (0 counts as 1);
/// its `Display` is the `pg_authid` text.
pub fn scram_secret(password: impl AsRef<[u8]>, salt: &[u8], iterations: u32) -> ScramSecret {
    ScramSecret::new(password, salt, iterations)
}

impl ScramSecret {
    /// See [`scram_secret`].
    pub fn new(password: impl AsRef<[u8]>, salt: &[u8], iterations: u32) -> Self {
        let iterations = iterations.max(1);
        let password = saslprep_password(password.as_ref());
        let keys = Keys::derive(&password, salt, iterations);
        ScramSecret {
            iterations,
            salt: salt.to_vec(),
            stored_key: keys.stored_key,
            server_key: keys.server_key,
        }
    }

    /// [`new`](Self::new) with a [`DEFAULT_SALT_LEN`]-byte salt drawn from `rng`.
    pub fn from_rng(password: impl AsRef<[u8]>, iterations: u32, rng: &mut impl RngCore) -> Self {
        let mut salt = [0u8; DEFAULT_SALT_LEN];
        rng.fill_bytes(&mut salt);
        Self::new(password, &salt, iterations)
    }

    /// Parses the `pg_authid` text form.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let rest = text
            .strip_prefix("SCRAM-SHA-256$")
            .ok_or(SecretError("does not start with SCRAM-SHA-256$"))?;
        let (params, keys) = rest.split_once('$').ok_or(SecretError("missing '$'"))?;
        let (iterations, salt) = params
            .split_once(':')
            .ok_or(SecretError("missing ':' after iterations"))?;
        let (stored, server) = keys
            .split_once(':')
            .ok_or(SecretError("missing ':' between keys"))?;
        let iterations = parse_decimal(iterations.as_bytes())
            .filter(|&i| i >= 1)
            .ok_or(SecretError("invalid iteration count"))?;
        let salt = BASE64
            .decode(salt)
            .map_err(|_| SecretError("invalid salt"))?;
        let key = |text: &str, what: &'static str| -> Result<[u8; KEY_LEN], SecretError> {
            let bytes = BASE64.decode(text).map_err(|_| SecretError(what))?;
            <[u8; KEY_LEN]>::try_from(bytes.as_slice()).map_err(|_| SecretError(what))
        };
        Ok(ScramSecret {
            iterations,
            salt,
            stored_key: key(stored, "invalid StoredKey")?,
            server_key: key(server, "invalid ServerKey")?,
        })
    }
}

impl FromStr for ScramSecret {
    type Err = SecretError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ScramSecret::parse(s)
    }
}

impl fmt::Display for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            BASE64.encode(&self.salt),
            BASE64.encode(self.stored_key),
            BASE64.encode(self.server_key)
        )
    }
}

impl fmt::Debug for ScramSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys are password equivalents for SCRAM; keep them out of logs.
        f.debug_struct("ScramSecret")
            .field("iterations", &self.iterations)
            .field("salt", &BASE64.encode(&self.salt))
            .finish_non_exhaustive()
    }
}

/// Why the server side of a SCRAM exchange rejected the client, with the SQLSTATE PostgreSQL
/// reports (the simulator turns it into an ErrorResponse).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramServerError {
    /// The mechanism in SASLInitialResponse was not offered.
    #[error("client selected an invalid SASL authentication mechanism")]
    InvalidMechanism,
    /// A client message does not follow the grammar; the text says where.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client sent `y` although this server supports channel binding (downgrade attempt).
    #[error("SCRAM channel binding negotiation error")]
    ChannelBindingNegotiation,
    /// A channel-binding type other than `tls-server-end-point`.
    #[error("unsupported SCRAM channel-binding type \"{0}\"")]
    UnsupportedChannelBindingType(String),
    /// An authorization identity (`a=`) in the gs2 header.
    #[error("client uses authorization identity, but it is not supported")]
    AuthzidUnsupported,
    /// A mandatory extension (`m=`).
    #[error("client requires an unsupported SCRAM extension")]
    UnsupportedExtension,
    /// The `c=` value does not reproduce the gs2 header and channel-binding data.
    #[error("SCRAM channel binding check failed")]
    ChannelBindingCheckFailed,
    /// `c=` differs from the gs2 header of client-first (without channel binding).
    #[error("unexpected SCRAM channel-binding attribute in client-final-message")]
    UnexpectedChannelBindingAttribute,
    /// The nonce in client-final is not the combined nonce.
    #[error("invalid SCRAM response: nonce does not match")]
    NonceMismatch,
    /// The proof is wrong: wrong password, or an unknown user (mock exchange).
    #[error("password authentication failed")]
    InvalidProof,
    /// A call out of order.
    #[error("invalid SCRAM exchange state")]
    InvalidState,
}

impl ScramServerError {
    /// The SQLSTATE PostgreSQL sends for this failure.
    pub fn sqlstate(&self) -> &'static str {
        match self {
            ScramServerError::InvalidProof => "28P01",
            ScramServerError::AuthzidUnsupported | ScramServerError::UnsupportedExtension => {
                "0A000"
            }
            _ => "08P01",
        }
    }
}

/// The server side of a SCRAM-SHA-256(-PLUS) exchange, for simulated PostgreSQL servers.
///
/// Offer [`mechanisms`](Self::mechanisms) in AuthenticationSASL; feed SASLInitialResponse to
/// [`handle_client_first`](Self::handle_client_first) (answer in AuthenticationSASLContinue)
/// and SASLResponse to [`handle_client_final`](Self::handle_client_final) (answer in
/// AuthenticationSASLFinal, then AuthenticationOk).
#[derive(Clone)]
pub struct ScramServer {
    cb_data: Option<Vec<u8>>,
    server_nonce: String,
    state: ServerState,
}

#[derive(Clone)]
enum ServerState {
    Start {
        secret: ScramSecret,
        doomed: bool,
    },
    AwaitClientFinal {
        secret: ScramSecret,
        doomed: bool,
        mechanism: Mechanism,
        gs2_header: Vec<u8>,
        client_first_bare: Vec<u8>,
        server_first: Vec<u8>,
        nonce: String,
    },
    Done {
        mechanism: Mechanism,
    },
    Failed(ScramServerError),
}

impl fmt::Debug for ScramServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            ServerState::Start { .. } => "Start",
            ServerState::AwaitClientFinal { .. } => "AwaitClientFinal",
            ServerState::Done { .. } => "Done",
            ServerState::Failed(_) => "Failed",
        };
        f.debug_struct("ScramServer")
            .field("tls", &self.cb_data.is_some())
            .field("server_nonce", &self.server_nonce)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

impl ScramServer {
    /// A server checking against `secret`, on a connection whose `tls-server-end-point` data is
    /// `tls_end_point` (`None`: plaintext, so no `-PLUS`), with 18 random bytes for its nonce.
    pub fn new(
        secret: ScramSecret,
        tls_end_point: Option<&[u8]>,
        nonce: [u8; NONCE_RAW_LEN],
    ) -> Self {
        ScramServer {
            cb_data: tls_end_point.map(<[u8]>::to_vec),
            server_nonce: BASE64.encode(nonce),
            state: ServerState::Start {
                secret,
                doomed: false,
            },
        }
    }

    /// A server for a user that does not exist (or has no SCRAM secret): it runs the whole
    /// exchange with `salt` and `iterations` and then fails with
    /// [`ScramServerError::InvalidProof`], as PostgreSQL does so as not to reveal the user.
    pub fn mock(
        salt: &[u8],
        iterations: u32,
        tls_end_point: Option<&[u8]>,
        nonce: [u8; NONCE_RAW_LEN],
    ) -> Self {
        let secret = ScramSecret {
            iterations: iterations.max(1),
            salt: salt.to_vec(),
            stored_key: [0; KEY_LEN],
            server_key: [0; KEY_LEN],
        };
        let mut server = Self::new(secret, tls_end_point, nonce);
        if let ServerState::Start { doomed, .. } = &mut server.state {
            *doomed = true;
        }
        server
    }

    /// Uses `nonce` verbatim as the server's part of the nonce (for test vectors). It must be
    /// non-empty printable ASCII without `,`.
    pub fn with_nonce_text(mut self, nonce: &str) -> Result<Self, ScramServerError> {
        if !valid_nonce(nonce.as_bytes()) {
            return Err(ScramServerError::Malformed("invalid server nonce"));
        }
        self.server_nonce = nonce.to_owned();
        Ok(self)
    }

    /// The mechanisms to offer, in PostgreSQL's order (`-PLUS` only on TLS connections).
    pub fn mechanisms(&self) -> &'static [&'static str] {
        if self.cb_data.is_some() {
            &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]
        } else {
            &[SCRAM_SHA_256]
        }
    }

    /// Checks SASLInitialResponse (`mechanism` and client-first) and returns server-first.
    pub fn handle_client_first(
        &mut self,
        mechanism: &[u8],
        message: &[u8],
    ) -> Result<Vec<u8>, ScramServerError> {
        let tls = self.cb_data.is_some();
        let server_nonce = self.server_nonce.clone();
        self.step(|state| {
            let ServerState::Start { secret, doomed } = state else {
                return Err(ScramServerError::InvalidState);
            };
            let mechanism = match Mechanism::from_name(mechanism) {
                Some(Mechanism::ScramSha256Plus) if !tls => {
                    return Err(ScramServerError::InvalidMechanism)
                }
                Some(m) => m,
                None => return Err(ScramServerError::InvalidMechanism),
            };
            let first = parse_client_first(message, mechanism, tls)?;
            let mut nonce = String::with_capacity(first.client_nonce.len() + server_nonce.len());
            nonce.push_str(first.client_nonce);
            nonce.push_str(&server_nonce);
            let mut server_first = String::with_capacity(64 + nonce.len());
            server_first.push_str("r=");
            server_first.push_str(&nonce);
            server_first.push_str(",s=");
            BASE64.encode_string(&secret.salt, &mut server_first);
            server_first.push_str(",i=");
            // Writing into a String cannot fail.
            let _ = std::fmt::Write::write_fmt(
                &mut server_first,
                format_args!("{}", secret.iterations),
            );
            let server_first = server_first.into_bytes();
            let next = ServerState::AwaitClientFinal {
                secret,
                doomed,
                mechanism,
                gs2_header: first.gs2_header.to_vec(),
                client_first_bare: first.bare.to_vec(),
                server_first: server_first.clone(),
                nonce,
            };
            Ok((next, server_first))
        })
    }

    /// Checks client-final (channel binding, nonce, proof) and returns server-final.
    pub fn handle_client_final(&mut self, message: &[u8]) -> Result<Vec<u8>, ScramServerError> {
        let cb_data = self.cb_data.clone();
        self.step(|state| {
            let ServerState::AwaitClientFinal {
                secret,
                doomed,
                mechanism,
                gs2_header,
                client_first_bare,
                server_first,
                nonce,
            } = state
            else {
                return Err(ScramServerError::InvalidState);
            };
            if message.is_empty() || message.contains(&0) {
                return Err(ScramServerError::Malformed("invalid client-final-message"));
            }
            let mut attrs = Attrs::new(message);
            let cbind = attrs.attr(b'c').map_err(server_attr_error)?;
            let cbind = BASE64
                .decode(cbind)
                .map_err(|_| ScramServerError::Malformed("invalid channel binding data"))?;
            if mechanism == Mechanism::ScramSha256Plus {
                let mut expected = gs2_header.clone();
                expected.extend_from_slice(cb_data.as_deref().unwrap_or_default());
                if !ct_eq(&cbind, &expected) {
                    return Err(ScramServerError::ChannelBindingCheckFailed);
                }
            } else if cbind != gs2_header {
                return Err(ScramServerError::UnexpectedChannelBindingAttribute);
            }
            let client_nonce = attrs.attr(b'r').map_err(server_attr_error)?;
            if !ct_eq(client_nonce, nonce.as_bytes()) {
                return Err(ScramServerError::NonceMismatch);
            }
            // Extensions may follow; the proof is the last attribute.
            let proof = loop {
                let (name, value) = attrs.any().map_err(server_attr_error)?;
                if name == b'p' {
                    break value;
                }
            };
            if !attrs.at_end() {
                return Err(ScramServerError::Malformed(
                    "garbage found at the end of client-final-message",
                ));
            }
            let proof = BASE64
                .decode(proof)
                .ok()
                .and_then(|p| <[u8; KEY_LEN]>::try_from(p.as_slice()).ok())
                .ok_or(ScramServerError::Malformed(
                    "malformed proof in client-final-message",
                ))?;
            // Everything before ",p=".
            let without_proof = &message[..message.len() - proof_attr_len(message)];
            let auth_message = auth_message(&client_first_bare, &server_first, without_proof);
            let client_signature = hmac(&secret.stored_key, &auth_message);
            let mut client_key = proof;
            for (k, s) in client_key.iter_mut().zip(client_signature) {
                *k ^= s;
            }
            let computed_stored: [u8; KEY_LEN] = Sha256::digest(client_key).into();
            if doomed || !ct_eq(&computed_stored, &secret.stored_key) {
                return Err(ScramServerError::InvalidProof);
            }
            let signature = hmac(&secret.server_key, &auth_message);
            let mut out = String::from("v=");
            BASE64.encode_string(signature, &mut out);
            let out = out.into_bytes();
            Ok((ServerState::Done { mechanism }, out))
        })
    }

    /// Whether the client's proof was verified.
    pub fn is_complete(&self) -> bool {
        matches!(self.state, ServerState::Done { .. })
    }

    /// Whether the exchange completed with channel binding.
    pub fn is_channel_bound(&self) -> bool {
        matches!(
            self.state,
            ServerState::Done {
                mechanism: Mechanism::ScramSha256Plus
            }
        )
    }

    /// The error the machine failed with, if any.
    pub fn error(&self) -> Option<&ScramServerError> {
        self.state.failure()
    }

    fn step<T>(
        &mut self,
        f: impl FnOnce(ServerState) -> Result<(ServerState, T), ScramServerError>,
    ) -> Result<T, ScramServerError> {
        sticky_step(&mut self.state, ScramServerError::InvalidState, f)
    }
}

/// A machine state with a terminal failed state that keeps its error: once failed, every
/// later input gets the same error back (the client and the server machine share this).
trait Sticky: Sized {
    type Error: Clone;
    fn failed(e: Self::Error) -> Self;
    fn failure(&self) -> Option<&Self::Error>;
}

impl Sticky for ClientState {
    type Error = ScramError;
    fn failed(e: ScramError) -> Self {
        ClientState::Failed(e)
    }
    fn failure(&self) -> Option<&ScramError> {
        match self {
            ClientState::Failed(e) => Some(e),
            _ => None,
        }
    }
}

impl Sticky for ServerState {
    type Error = ScramServerError;
    fn failed(e: ScramServerError) -> Self {
        ServerState::Failed(e)
    }
    fn failure(&self) -> Option<&ScramServerError> {
        match self {
            ServerState::Failed(e) => Some(e),
            _ => None,
        }
    }
}

/// Runs one transition on `slot`: a failed machine stays failed, an error fails it.
fn sticky_step<S: Sticky, T>(
    slot: &mut S,
    placeholder: S::Error,
    f: impl FnOnce(S) -> Result<(S, T), S::Error>,
) -> Result<T, S::Error> {
    let state = std::mem::replace(slot, S::failed(placeholder));
    if let Some(e) = state.failure() {
        let e = e.clone();
        *slot = S::failed(e.clone());
        return Err(e);
    }
    match f(state) {
        Ok((next, out)) => {
            *slot = next;
            Ok(out)
        }
        Err(e) => {
            *slot = S::failed(e.clone());
            Err(e)
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers.

/// The keys derived from a (prepared) password.
struct Keys {
    client_key: [u8; KEY_LEN],
    stored_key: [u8; KEY_LEN],
    server_key: [u8; KEY_LEN],
}

impl Keys {
    fn derive(password: &[u8], salt: &[u8], iterations: u32) -> Keys {
        let salted: [u8; KEY_LEN] =
            pbkdf2::pbkdf2_hmac_array::<Sha256, KEY_LEN>(password, salt, iterations.max(1));
        let client_key = hmac(&salted, b"Client Key");
        Keys {
            client_key,
            stored_key: Sha256::digest(client_key).into(),
            server_key: hmac(&salted, b"Server Key"),
        }
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; KEY_LEN] {
    // HMAC takes keys of any length, so construction cannot fail.
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

fn auth_message(client_first_bare: &[u8], server_first: &[u8], without_proof: &[u8]) -> Vec<u8> {
    let mut out =
        Vec::with_capacity(client_first_bare.len() + server_first.len() + without_proof.len() + 2);
    out.extend_from_slice(client_first_bare);
    out.push(b',');
    out.extend_from_slice(server_first);
    out.push(b',');
    out.extend_from_slice(without_proof);
    out
}

/// Length of the trailing `,p=…` of a client-final message whose last attribute is `p`.
fn proof_attr_len(message: &[u8]) -> usize {
    match message.iter().rposition(|&b| b == b',') {
        Some(comma) => message.len() - comma,
        None => message.len(),
    }
}

/// A nonce is non-empty printable ASCII other than `,`.
fn valid_nonce(nonce: &[u8]) -> bool {
    !nonce.is_empty()
        && nonce
            .iter()
            .all(|&b| (0x21..=0x7e).contains(&b) && b != b',')
}

fn parse_decimal(digits: &[u8]) -> Option<u32> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let start = digits
        .iter()
        .position(|&d| d != b'0')
        .unwrap_or(digits.len());
    let significant = &digits[start..];
    if significant.len() > 10 {
        return None;
    }
    let value = significant
        .iter()
        .fold(0u64, |acc, &d| acc * 10 + u64::from(d - b'0'));
    u32::try_from(value).ok()
}

fn check_text(message: &[u8]) -> Result<(), ScramError> {
    if message.is_empty() {
        return Err(ScramError::EmptyMessage);
    }
    if message.contains(&0) {
        return Err(ScramError::LengthMismatch);
    }
    Ok(())
}

struct ServerFirst {
    nonce: String,
    salt: Vec<u8>,
    iterations: u32,
}

fn parse_server_first(
    message: &[u8],
    client_nonce: &str,
    max_iterations: u32,
) -> Result<ServerFirst, ScramError> {
    check_text(message)?;
    if message.starts_with(b"m=") {
        return Err(ScramError::MandatoryExtension);
    }
    let mut attrs = Attrs::new(message);
    let nonce = attrs.attr(b'r').map_err(client_attr_error)?;
    if !valid_nonce(nonce) {
        return Err(ScramError::InvalidNonce);
    }
    if nonce.len() <= client_nonce.len() || !nonce.starts_with(client_nonce.as_bytes()) {
        return Err(ScramError::NonceMismatch);
    }
    let salt = attrs.attr(b's').map_err(client_attr_error)?;
    let salt = BASE64.decode(salt).map_err(|_| ScramError::InvalidSalt)?;
    if salt.is_empty() {
        return Err(ScramError::InvalidSalt);
    }
    let iterations = attrs.attr(b'i').map_err(client_attr_error)?;
    if iterations.is_empty()
        || !iterations.iter().all(u8::is_ascii_digit)
        || iterations.iter().all(|&d| d == b'0')
    {
        return Err(ScramError::InvalidIterationCount);
    }
    // All digits and not zero: only a count beyond u32 fails to parse.
    let iterations = parse_decimal(iterations).ok_or(ScramError::TooManyIterations {
        count: u32::MAX,
        max: max_iterations,
    })?;
    if iterations > max_iterations {
        return Err(ScramError::TooManyIterations {
            count: iterations,
            max: max_iterations,
        });
    }
    if !attrs.at_end() {
        return Err(ScramError::GarbageAfterServerFirst);
    }
    Ok(ServerFirst {
        // Checked above: printable ASCII.
        nonce: String::from_utf8_lossy(nonce).into_owned(),
        salt,
        iterations,
    })
}

struct ClientFirstParts<'a> {
    gs2_header: &'a [u8],
    bare: &'a [u8],
    client_nonce: &'a str,
}

fn parse_client_first(
    message: &[u8],
    mechanism: Mechanism,
    tls: bool,
) -> Result<ClientFirstParts<'_>, ScramServerError> {
    use ScramServerError::Malformed;
    if message.is_empty() || message.contains(&0) {
        return Err(Malformed("invalid client-first-message"));
    }
    let plus = mechanism == Mechanism::ScramSha256Plus;
    let mut pos;
    match message[0] {
        flag @ (b'n' | b'y') => {
            if plus {
                return Err(Malformed(
                    "the client selected SCRAM-SHA-256-PLUS, but the SCRAM message does not include channel binding data",
                ));
            }
            if flag == b'y' && tls {
                return Err(ScramServerError::ChannelBindingNegotiation);
            }
            pos = 1;
        }
        b'p' => {
            if !plus {
                return Err(Malformed(
                    "the client selected SCRAM-SHA-256 without channel binding, but the SCRAM message includes channel binding data",
                ));
            }
            if message.get(1) != Some(&b'=') {
                return Err(Malformed("expected \"=\" after channel-binding flag \"p\""));
            }
            let rest = &message[2..];
            let end = rest.iter().position(|&b| b == b',').unwrap_or(rest.len());
            let name = &rest[..end];
            if name != CHANNEL_BINDING_TYPE.as_bytes() {
                return Err(ScramServerError::UnsupportedChannelBindingType(
                    String::from_utf8_lossy(name).into_owned(),
                ));
            }
            pos = 2 + end;
        }
        _ => return Err(Malformed("unexpected channel-binding flag")),
    }
    if message.get(pos) != Some(&b',') {
        return Err(Malformed("comma expected after channel-binding flag"));
    }
    pos += 1;
    if message.get(pos) == Some(&b'a') {
        return Err(ScramServerError::AuthzidUnsupported);
    }
    if message.get(pos) != Some(&b',') {
        return Err(Malformed("unexpected attribute in client-first-message"));
    }
    pos += 1;
    let (gs2_header, bare) = message.split_at(pos);
    if bare.first() == Some(&b'm') {
        return Err(ScramServerError::UnsupportedExtension);
    }
    let mut attrs = Attrs::new(bare);
    attrs.attr(b'n').map_err(server_attr_error)?; // user name: ignored, as PostgreSQL does
    let nonce = attrs.attr(b'r').map_err(server_attr_error)?;
    if !valid_nonce(nonce) {
        return Err(Malformed("non-printable characters in SCRAM nonce"));
    }
    while !attrs.at_end() {
        attrs.any().map_err(server_attr_error)?; // extensions are ignored
    }
    Ok(ClientFirstParts {
        gs2_header,
        bare,
        // Checked above: printable ASCII.
        client_nonce: std::str::from_utf8(nonce).unwrap_or_default(),
    })
}

/// Attribute-parse failure, mapped to each side's error type.
enum AttrError {
    Expected(u8),
    NoEquals(u8),
}

fn client_attr_error(e: AttrError) -> ScramError {
    match e {
        AttrError::Expected(a) => ScramError::AttributeExpected(char::from(a)),
        AttrError::NoEquals(a) => ScramError::EqualsExpected(char::from(a)),
    }
}

fn server_attr_error(e: AttrError) -> ScramServerError {
    match e {
        AttrError::Expected(_) => ScramServerError::Malformed("expected attribute missing"),
        AttrError::NoEquals(_) => ScramServerError::Malformed("expected \"=\" after attribute"),
    }
}

/// A cursor over `name=value` attributes separated by `,`.
struct Attrs<'a> {
    rest: &'a [u8],
    started: bool,
}

impl<'a> Attrs<'a> {
    fn new(message: &'a [u8]) -> Self {
        Attrs {
            rest: message,
            started: false,
        }
    }

    /// True when nothing (not even a separator) is left.
    fn at_end(&self) -> bool {
        self.rest.is_empty()
    }

    /// Skips the separator before every attribute but the first.
    fn begin(&mut self) -> Option<u8> {
        if self.started {
            // The previous value ended at a ',' (or at the end, in which case rest is empty).
            self.rest = self.rest.get(1..).unwrap_or_default();
        }
        self.started = true;
        self.rest.first().copied()
    }

    fn value(&mut self, name: u8) -> Result<&'a [u8], AttrError> {
        if self.rest.get(1) != Some(&b'=') {
            return Err(AttrError::NoEquals(name));
        }
        let body = &self.rest[2..];
        let end = body.iter().position(|&b| b == b',').unwrap_or(body.len());
        let (value, rest) = body.split_at(end);
        self.rest = rest;
        Ok(value)
    }

    fn attr(&mut self, name: u8) -> Result<&'a [u8], AttrError> {
        match self.begin() {
            Some(found) if found == name => self.value(name),
            _ => Err(AttrError::Expected(name)),
        }
    }

    fn any(&mut self) -> Result<(u8, &'a [u8]), AttrError> {
        match self.begin() {
            Some(name) if name.is_ascii_alphabetic() => Ok((name, self.value(name)?)),
            _ => Err(AttrError::Expected(b'?')),
        }
    }
}
