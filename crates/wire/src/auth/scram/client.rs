//! The client side of a SCRAM exchange: mechanism selection as libpq does it, and
//! [`ScramClient`], the machine that plays libpq's part.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use rand_core::RngCore;
use sha2::{Digest, Sha256};

use super::parse::{check_text, client_attr_error, parse_server_first, valid_nonce, Attrs};
use super::{
    auth_message, hmac, sticky_step, Keys, Mechanism, ScramKeys, Sticky, DEFAULT_MAX_ITERATIONS,
    GS2_NO, GS2_PLUS, GS2_YES, KEY_LEN, NONCE_RAW_LEN,
};
use crate::auth::saslprep::saslprep_password;
use crate::auth::{ct_eq, ChannelBinding};

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
    /// Logging in with [`ScramKeys`] to a server whose verifier has another salt or iteration
    /// count: the keys cannot answer it, only the password could.
    #[error(
        "the server's SCRAM verifier (salt or iteration count) differs from the one the keys come from"
    )]
    ForeignVerifier,
}

/// What the client proves: the password, or keys taken from a verifier.
#[derive(Clone)]
enum Credential {
    Password(Vec<u8>),
    Keys(ScramKeys),
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
        password: Credential,
        cb_data: Option<Vec<u8>>,
    },
    AwaitServerFirst {
        password: Credential,
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
    /// [`tls_server_end_point`](crate::auth::tls_server_end_point)), and 18 random bytes for
    /// the nonce.
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
                password: Credential::Password(saslprep_password(password.as_ref()).into_owned()),
                cb_data: tls_end_point.map(<[u8]>::to_vec),
            },
        }
    }

    /// A client that proves `keys` instead of a password (see [`ScramKeys`]); it fails with
    /// [`ScramError::ForeignVerifier`] against a server whose salt or iteration count differs.
    pub fn with_keys(
        keys: ScramKeys,
        channel_binding: ChannelBinding,
        tls_end_point: Option<&[u8]>,
        nonce: [u8; NONCE_RAW_LEN],
    ) -> Self {
        let mut client = Self::new(b"", channel_binding, tls_end_point, nonce);
        client.state = ClientState::Start {
            password: Credential::Keys(keys),
            cb_data: tls_end_point.map(<[u8]>::to_vec),
        };
        client
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

            let keys = match password {
                Credential::Password(p) => Keys::derive(&p, &first.salt, first.iterations),
                Credential::Keys(k) if k.fits(&first.salt, first.iterations) => Keys {
                    client_key: k.client_key,
                    stored_key: Sha256::digest(k.client_key).into(),
                    server_key: k.server_key,
                },
                Credential::Keys(_) => return Err(ScramError::ForeignVerifier),
            };
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
