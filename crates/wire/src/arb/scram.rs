//! Generated SCRAM-SHA-256(-PLUS) exchanges ([`ScramExchange`]): the client and server machines
//! of [`crate::auth`] run against each other on generated settings, and the messages they
//! produce are kept.

use arbitrary::{Arbitrary, Result, Unstructured};

use super::bytes;
use crate::auth::{
    scram_secret, ChannelBinding, ClientFirst, Mechanism, ScramClient, ScramServer, NONCE_RAW_LEN,
};
use crate::backend::{Authentication, BackendMessage};
use crate::frame::CStrs;
use crate::frontend::{FrontendMessage, SaslInitialResponse};

/// The settings of one exchange.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Settings {
    password: Vec<u8>,
    /// Whether the server's secret was made from another password.
    wrong_password: bool,
    salt: Vec<u8>,
    iterations: u32,
    channel_binding: ChannelBinding,
    /// The client's TLS end-point hash (32, 48 or 64 bytes: SHA-256/384/512 certificates).
    tls: Option<Vec<u8>>,
    /// Whether the server knows its end-point hash (offers -PLUS); only with TLS.
    server_binds: bool,
    /// Whether the server's hash differs from the client's (a man in the middle).
    tls_mismatch: bool,
    username: String,
    client_nonce: [u8; NONCE_RAW_LEN],
    server_nonce: [u8; NONCE_RAW_LEN],
}

/// A generated SCRAM exchange: the settings (password right or wrong, channel binding mode,
/// TLS end point known, unknown or mismatched, salt, iterations, nonces, user name) and the
/// four messages the client and server machines produced from them, as far as the exchange
/// got. [`frontend_messages`](Self::frontend_messages) and
/// [`backend_messages`](Self::backend_messages) lend them wrapped in protocol messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScramExchange {
    settings: Settings,
    /// AuthenticationSASL's mechanism names, each with its NUL, and their count.
    offered: (Vec<u8>, usize),
    client_first: Option<ClientFirst>,
    server_first: Option<Vec<u8>>,
    client_final: Option<Vec<u8>>,
    server_final: Option<Vec<u8>>,
    client_done: bool,
    server_done: bool,
    client_bound: bool,
    server_bound: bool,
}

fn settings(u: &mut Unstructured<'_>) -> Result<Settings> {
    let tls = match u.int_in_range(0u8..=5)? {
        0 | 1 => None,
        n => {
            let len = [32, 32, 48, 64][usize::from(n - 2)];
            let mut hash = u.bytes(len.min(u.len()))?.to_vec();
            hash.resize(len, 0x3c);
            Some(hash)
        }
    };
    let server_binds = tls.is_some() && u.ratio(3, 4)?;
    let username = match u.int_in_range(0u8..=3)? {
        0 => String::new(),
        1 => "postgres".to_owned(),
        // The characters SCRAM escapes in a name.
        2 => "a=b,c==,".to_owned(),
        // A user name comes from a C string (the startup packet), so it never holds a NUL;
        // one would end client-first early and the server would rightly refuse it.
        _ => u.arbitrary::<String>()?.replace('\0', ""),
    };
    let mut salt = bytes(u, 64)?;
    if salt.is_empty() {
        salt.push(0);
    }
    Ok(Settings {
        password: bytes(u, 256)?,
        wrong_password: u.ratio(1, 8)?,
        salt,
        // PBKDF2 runs on every exchange: the edge (1) and a little more, never thousands.
        iterations: u.int_in_range(1..=4)?,
        channel_binding: [
            ChannelBinding::Disable,
            ChannelBinding::Prefer,
            ChannelBinding::Require,
        ][u.choose_index(3)?],
        tls,
        server_binds,
        tls_mismatch: server_binds && u.ratio(1, 8)?,
        username,
        client_nonce: u.arbitrary()?,
        server_nonce: u.arbitrary()?,
    })
}

impl<'a> Arbitrary<'a> for ScramExchange {
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        Ok(ScramExchange::run(settings(u)?))
    }
}

impl ScramExchange {
    fn run(settings: Settings) -> Self {
        let s = &settings;
        let server_password: &[u8] = if s.wrong_password {
            b"not the password"
        } else {
            &s.password
        };
        let server_tls = s.tls.clone().filter(|_| s.server_binds).map(|mut h| {
            if s.tls_mismatch {
                h[0] ^= 1;
            }
            h
        });
        let mut server = ScramServer::new(
            scram_secret(server_password, &s.salt, s.iterations),
            server_tls.as_deref(),
            s.server_nonce,
        );
        let mut client = ScramClient::new(
            &s.password,
            s.channel_binding,
            s.tls.as_deref(),
            s.client_nonce,
        )
        .with_username(&s.username);
        let mut offered = Vec::new();
        for m in server.mechanisms() {
            offered.extend_from_slice(m.as_bytes());
            offered.push(0);
        }
        let offered = (offered, server.mechanisms().len());
        let client_first = client.client_first(server.mechanisms()).ok();
        let server_first = client_first.as_ref().and_then(|c| {
            server
                .handle_client_first(c.mechanism.name().as_bytes(), &c.message)
                .ok()
        });
        let client_final = server_first
            .as_ref()
            .and_then(|m| client.handle_server_first(m).ok());
        let server_final = client_final
            .as_ref()
            .and_then(|m| server.handle_client_final(m).ok());
        let client_done = server_final
            .as_ref()
            .is_some_and(|m| client.handle_server_final(m).is_ok());
        ScramExchange {
            offered,
            client_first,
            server_first,
            client_final,
            server_final,
            client_done: client_done && client.is_complete(),
            server_done: server.is_complete(),
            client_bound: client.is_channel_bound(),
            server_bound: server.is_channel_bound(),
            settings,
        }
    }

    /// Whether the settings call for -PLUS: TLS, a server that knows its end point, and a
    /// client that does not disable channel binding.
    pub fn expects_channel_binding(&self) -> bool {
        let s = &self.settings;
        s.tls.is_some() && s.server_binds && s.channel_binding != ChannelBinding::Disable
    }

    /// Whether the settings should authenticate: the right password, channel binding when
    /// required, and no end-point mismatch when -PLUS is used.
    pub fn expects_success(&self) -> bool {
        let s = &self.settings;
        let plus = self.expects_channel_binding();
        !s.wrong_password
            && (s.channel_binding != ChannelBinding::Require || plus)
            && !(plus && s.tls_mismatch)
    }

    /// Whether both machines completed: the server accepted the proof and the client the
    /// server's signature.
    pub fn authenticated(&self) -> bool {
        self.client_done && self.server_done
    }

    /// Whether both machines report channel binding.
    pub fn channel_bound(&self) -> bool {
        self.client_bound && self.server_bound
    }

    /// The client's messages as far as the exchange got: SASLInitialResponse (client-first),
    /// SASLResponse (client-final).
    pub fn frontend_messages(&self) -> Vec<FrontendMessage<'_>> {
        let mut out = Vec::new();
        if let Some(first) = &self.client_first {
            out.push(FrontendMessage::SaslInitialResponse(SaslInitialResponse {
                mechanism: mechanism_name(first.mechanism),
                data: Some(&first.message),
            }));
        }
        if let Some(last) = &self.client_final {
            out.push(FrontendMessage::SaslResponse(last));
        }
        out
    }

    /// The server's messages as far as the exchange got: AuthenticationSASL (the offer),
    /// AuthenticationSASLContinue (server-first), AuthenticationSASLFinal (server-final).
    pub fn backend_messages(&self) -> Vec<BackendMessage<'_>> {
        let mut out = vec![BackendMessage::Authentication(Authentication::Sasl(
            CStrs::from_raw(&self.offered.0, self.offered.1),
        ))];
        if let Some(first) = &self.server_first {
            out.push(BackendMessage::Authentication(
                Authentication::SaslContinue(first),
            ));
        }
        if let Some(last) = &self.server_final {
            out.push(BackendMessage::Authentication(Authentication::SaslFinal(
                last,
            )));
        }
        out
    }
}

fn mechanism_name(m: Mechanism) -> &'static [u8] {
    m.name().as_bytes()
}
