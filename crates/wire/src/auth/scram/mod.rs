//! SCRAM-SHA-256 and SCRAM-SHA-256-PLUS (RFC 5802, RFC 7677) as PostgreSQL uses them: a client
//! machine that plays libpq's part and a server machine that plays the backend's part.
//!
//! Both are sans-IO: they turn the payload of one SASL message into the payload of the next.
//! Nonces (and salts) are inputs. After the first error a machine stays failed and returns that
//! error from every later call.

use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

mod client;
mod keys;
mod parse;
mod secret;
mod server;

pub use client::{select_mechanism, ClientFirst, ScramClient, ScramError};
pub use keys::ScramKeys;
pub use secret::{scram_secret, ScramSecret, SecretError};
pub use server::{ScramServer, ScramServerError};

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

/// A machine state with a terminal failed state that keeps its error: once failed, every
/// later input gets the same error back (the client and the server machine share this).
trait Sticky: Sized {
    type Error: Clone;
    fn failed(e: Self::Error) -> Self;
    fn failure(&self) -> Option<&Self::Error>;
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
        // Both keys are HMACs under the salted password: its key schedule (two SHA-256
        // blocks) is computed once and the keyed state cloned.
        let keyed = keyed_mac(&salted);
        let client_key = finish_mac(keyed.clone(), b"Client Key");
        Keys {
            client_key,
            stored_key: Sha256::digest(client_key).into(),
            server_key: finish_mac(keyed, b"Server Key"),
        }
    }
}

fn hmac(key: &[u8], data: &[u8]) -> [u8; KEY_LEN] {
    finish_mac(keyed_mac(key), data)
}

/// HMAC-SHA-256 keyed with `key`, before any data.
fn keyed_mac(key: &[u8]) -> Hmac<Sha256> {
    // HMAC takes keys of any length, so construction cannot fail.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC accepts any key")
}

/// The MAC of `data` under an already keyed state.
fn finish_mac(mut mac: Hmac<Sha256>, data: &[u8]) -> [u8; KEY_LEN] {
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
