//! The server's side of password authentication, request to verdict: what a PostgreSQL
//! server (the simulator's) or a middleware that checks its own clients (the proxy) runs
//! after the StartupMessage.
//!
//! [`ServerLogin::start`] writes the first authentication request; each PasswordMessage
//! (`'p'`) body goes to [`ServerLogin::password_message`], which writes the next request and
//! says whether the login goes on, succeeded or failed. A failure is always reported as
//! PostgreSQL reports a wrong password (28P01), whatever went wrong, so that a client cannot
//! tell a missing user from a wrong password.

use bytes::BytesMut;

use super::md5::md5_verify;
use super::scram::{ScramSecret, ScramServer, NONCE_RAW_LEN};
use super::LoginSecret;
use crate::backend::{encode_auth_sasl, Authentication};

/// What the server holds for a user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredSecret {
    /// No password check (`trust`).
    Trust,
    /// An `md5…` secret: MD5 authentication.
    Md5(String),
    /// A SCRAM verifier: SCRAM-SHA-256.
    Scram(ScramSecret),
    /// No such user (or no usable secret): a SCRAM exchange that fails at its end.
    Unknown,
}

/// The randomness a login draws: MD5's salt, SCRAM's nonce, and the mock salt for unknown
/// users.
#[derive(Clone, Copy, Debug)]
pub struct LoginRandom {
    /// The MD5 salt.
    pub salt: [u8; 4],
    /// The server's SCRAM nonce.
    pub nonce: [u8; NONCE_RAW_LEN],
    /// The salt a mock SCRAM exchange shows for an unknown user.
    pub mock_salt: [u8; 16],
}

impl LoginRandom {
    /// Draws every field from `rng`, in the order they are declared (a seeded caller gets
    /// the same login whoever draws it: the proxy, or the simulator's model of it).
    pub fn draw(rng: &mut impl rand_core::RngCore) -> Self {
        let mut random = LoginRandom {
            salt: [0; 4],
            nonce: [0; NONCE_RAW_LEN],
            mock_salt: [0; 16],
        };
        rng.fill_bytes(&mut random.salt);
        rng.fill_bytes(&mut random.nonce);
        rng.fill_bytes(&mut random.mock_salt);
        random
    }
}

/// Where a login stands after a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoginStep {
    /// The client has another message to send.
    Continue,
    /// Authenticated: send AuthenticationOk next.
    Done,
    /// Failed: send 28P01 and close.
    Failed,
}

#[derive(Debug)]
enum State {
    Md5 { secret: String, salt: [u8; 4] },
    ScramFirst(Box<ScramServer>),
    ScramFinal(Box<ScramServer>),
    Finished,
}

/// One login's password exchange.
#[derive(Debug)]
pub struct ServerLogin {
    state: State,
    /// What the client proved, once it did (a proxy logs in to servers with it).
    proven: Option<LoginSecret>,
}

impl ServerLogin {
    /// Starts the exchange for `secret`, writing the first request into `out`. `tls_end_point`
    /// is the certificate hash on a TLS connection (it enables `-PLUS`). For
    /// [`StoredSecret::Trust`] nothing is written and the step is already [`LoginStep::Done`].
    pub fn start(
        secret: StoredSecret,
        tls_end_point: Option<&[u8]>,
        random: LoginRandom,
        out: &mut BytesMut,
    ) -> (ServerLogin, LoginStep) {
        let scram = match secret {
            StoredSecret::Trust => return (Self::finished(), LoginStep::Done),
            StoredSecret::Md5(secret) => {
                let salt = random.salt;
                put(out, |b| Authentication::Md5Password { salt }.encode(b));
                let state = State::Md5 { secret, salt };
                let login = ServerLogin {
                    state,
                    proven: None,
                };
                return (login, LoginStep::Continue);
            }
            StoredSecret::Scram(s) => ScramServer::new(s, tls_end_point, random.nonce),
            StoredSecret::Unknown => ScramServer::mock(
                &random.mock_salt,
                super::DEFAULT_ITERATIONS,
                tls_end_point,
                random.nonce,
            ),
        };
        let mechs: Vec<&[u8]> = scram.mechanisms().iter().map(|m| m.as_bytes()).collect();
        put(out, |b| encode_auth_sasl(&mechs, b));
        let state = State::ScramFirst(Box::new(scram));
        let login = ServerLogin {
            state,
            proven: None,
        };
        (login, LoginStep::Continue)
    }

    fn finished() -> ServerLogin {
        ServerLogin {
            state: State::Finished,
            proven: None,
        }
    }

    /// What the client proved knowledge of, after [`LoginStep::Done`]: the MD5 secret or the
    /// SCRAM keys (never for `Trust`). A proxy answers servers' MD5 or SCRAM requests with it.
    pub fn proven(&self) -> Option<&LoginSecret> {
        self.proven.as_ref()
    }

    /// Takes a PasswordMessage body (password, SASLInitialResponse or SASLResponse), writing
    /// the next request (SASL continue or final data) into `out`.
    pub fn password_message(&mut self, body: &[u8], out: &mut BytesMut) -> LoginStep {
        match std::mem::replace(&mut self.state, State::Finished) {
            State::Md5 { secret, salt } => {
                let step = verdict(md5_verify(&secret, salt, body));
                if step == LoginStep::Done {
                    self.proven = Some(LoginSecret::Md5(secret));
                }
                step
            }
            State::ScramFirst(mut server) => {
                let Some((mech, msg)) = sasl_initial(body) else {
                    return LoginStep::Failed;
                };
                match server.handle_client_first(mech, msg) {
                    Ok(first) => {
                        put(out, |b| Authentication::SaslContinue(&first).encode(b));
                        self.state = State::ScramFinal(server);
                        LoginStep::Continue
                    }
                    Err(_) => LoginStep::Failed,
                }
            }
            State::ScramFinal(mut server) => match server.handle_client_final(body) {
                Ok(fin) => {
                    put(out, |b| Authentication::SaslFinal(&fin).encode(b));
                    self.proven = server.proven_keys().cloned().map(LoginSecret::Scram);
                    LoginStep::Done
                }
                Err(_) => LoginStep::Failed,
            },
            State::Finished => LoginStep::Failed,
        }
    }
}

fn verdict(ok: bool) -> LoginStep {
    if ok {
        LoginStep::Done
    } else {
        LoginStep::Failed
    }
}

/// Splits a SASLInitialResponse body: mechanism, then the length-prefixed client-first.
fn sasl_initial(body: &[u8]) -> Option<(&[u8], &[u8])> {
    let nul = body.iter().position(|&b| b == 0)?;
    let (mech, rest) = (&body[..nul], body.get(nul + 1..)?);
    let len = i32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    let msg = rest.get(4..)?;
    (usize::try_from(len).ok()? == msg.len()).then_some((mech, msg))
}

/// Encodes a message this module builds; they are all well-formed and small, so an encode
/// error cannot happen, and dropping the message would show as a protocol error anyway.
fn put<E>(out: &mut BytesMut, f: impl FnOnce(&mut BytesMut) -> Result<(), E>) {
    let _ = f(out);
}
