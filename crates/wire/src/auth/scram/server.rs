//! The server side of a SCRAM exchange: [`ScramServer`], the machine that plays the backend's
//! part for simulated PostgreSQL servers.

use std::fmt;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::parse::{parse_client_first, proof_attr_len, server_attr_error, valid_nonce, Attrs};
use super::{
    auth_message, hmac, sticky_step, Mechanism, ScramKeys, ScramSecret, Sticky, KEY_LEN,
    NONCE_RAW_LEN, SCRAM_SHA_256, SCRAM_SHA_256_PLUS,
};
use crate::auth::ct_eq;

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
        keys: Box<ScramKeys>,
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
            let keys = Box::new(ScramKeys {
                iterations: secret.iterations,
                salt: secret.salt,
                client_key,
                server_key: secret.server_key,
            });
            Ok((ServerState::Done { mechanism, keys }, out))
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
                mechanism: Mechanism::ScramSha256Plus,
                ..
            }
        )
    }

    /// The keys the client proved, once its proof checked out (see [`ScramKeys`]).
    pub fn proven_keys(&self) -> Option<&ScramKeys> {
        match &self.state {
            ServerState::Done { keys, .. } => Some(keys),
            _ => None,
        }
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
