//! The password half of `proxy-login`: the auth file the scenario writes in PgBouncer's
//! format and the users it means, the clients' choice of user, password and database, and
//! the exchange, judged by the rules of `docs/proxy.md` ("The auth file"): an MD5 entry asks
//! for MD5, a SCRAM verifier or a plain password for SCRAM-SHA-256 (with SCRAM-SHA-256-PLUS
//! first over TLS when the certificate has a channel-binding hash), a user the file does not
//! list goes through the same SCRAM exchange as any other, and a wrong password or an
//! unknown user ends with FATAL 28P01 `password authentication failed for user "NAME"`. Also
//! the client certificates (`docs/simulation.md`, "Client certificates"): the proxy's CA and
//! modes, the certificate each handshake shows, and PostgreSQL's checks of it around the
//! method.

use std::fmt::Write as _;
use std::sync::Arc;

use bytes::BytesMut;
use pgyard_proxy::{AuthFile, ClientAuth, ClientCert, TlsMode};
use pgyard_types::{side_stream, uniform_inclusive, Rng, RngCore};
use pgyard_wire::auth::{
    md5_secret, scram_secret, AuthClient, AuthConfig, AuthRequest, AuthResponse, AuthStep,
    ChannelBinding,
};
use pgyard_wire::frontend::{encode_password, encode_sasl_initial_response, encode_sasl_response};

use super::proxy_login::{ends_with_fatal, fail, Conn};
use crate::{trace, Trace, Violation};

/// How a user's password is stored in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Stored {
    Md5,
    Scram,
    Plain,
}

/// A user as the file means it (its last line).
#[derive(Clone, Debug)]
pub(super) struct User {
    pub(super) name: String,
    password: String,
    stored: Stored,
}

/// The proxy's password check, and the users it knows.
pub(super) struct Login {
    pub(super) auth: ClientAuth,
    pub(super) users: Vec<User>,
}

/// Who a connection logs in as.
#[derive(Clone, Debug)]
pub(super) struct Who {
    pub(super) user: String,
    pub(super) database: String,
    password: String,
}

const NAMES: [&str; 5] = ["app", "ops", "o\"brien", "data team", "zoë"];

/// Trust one seed in eight, peer authentication (a Unix socket's clients) one in eight; else
/// an auth file of one to three users.
pub(super) fn draw(rng: &mut Rng, t: &mut Trace) -> Result<Login, Violation> {
    if uniform_inclusive(rng, 3) == 0 {
        if uniform_inclusive(rng, 1) == 0 {
            trace!(t, "auth trust");
            return Ok(Login {
                auth: ClientAuth::Trust,
                users: Vec::new(),
            });
        }
        return Ok(peer(rng, t));
    }
    let mut names: Vec<&str> = NAMES.to_vec();
    let n = 1 + uniform_inclusive(rng, 2) as usize;
    let mut users = Vec::new();
    let mut text = String::new();
    for i in 0..n {
        let name = names.remove(any_index(rng, names.len()));
        // A plain password costs a 4,096-iteration verifier when the file is read and
        // at each login with it: one user in sixty.
        let stored = match uniform_inclusive(rng, 59) {
            0..=23 => Stored::Md5,
            24..=58 => Stored::Scram,
            _ => Stored::Plain,
        };
        let user = User {
            name: name.to_owned(),
            password: format!("pw{i}-{}", rng.next_u32() % 1000),
            stored,
        };
        if uniform_inclusive(rng, 2) == 0 {
            text.push_str(
                [
                    "; a comment\n",
                    "\n",
                    "# another\n",
                    "user without quotes\n",
                ][uniform_inclusive(rng, 3) as usize],
            );
        }
        if uniform_inclusive(rng, 3) == 0 {
            // An earlier line for the same user, which the later one overrides.
            line(rng, &mut text, name, "an old password", Stored::Md5);
        }
        line(rng, &mut text, name, &user.password, stored);
        users.push(user);
    }
    trace!(t, "auth file {text:?}");
    let file = AuthFile::parse(&text, rng)
        .map_err(|e| fail("auth-file-parses", format!("{text:?}: {e}")))?;
    Ok(Login {
        auth: ClientAuth::File(Arc::new(file)),
        users,
    })
}

/// Peer authentication: one to three operating-system users who connect (no passwords);
/// each connection's socket owner is drawn by [`socket_owner`].
fn peer(rng: &mut Rng, t: &mut Trace) -> Login {
    let mut names: Vec<&str> = NAMES.to_vec();
    let n = 1 + uniform_inclusive(rng, 2) as usize;
    let users: Vec<User> = (0..n)
        .map(|_| User {
            name: names.remove(any_index(rng, names.len())).to_owned(),
            password: String::new(),
            stored: Stored::Plain,
        })
        .collect();
    let listed: Vec<&str> = users.iter().map(|u| u.name.as_str()).collect();
    trace!(t, "auth peer {listed:?}");
    Login {
        auth: ClientAuth::Peer { os_user: None },
        users,
    }
}

/// Under peer authentication, the owner of a connection's socket: one of the seed's users
/// (half the time), someone else, or nobody the adapter could name. `None` for other checks.
pub(super) fn socket_owner(rng: &mut Rng, login: &Login) -> Option<Option<String>> {
    if !matches!(login.auth, ClientAuth::Peer { .. }) {
        return None;
    }
    Some(match uniform_inclusive(rng, 3) {
        0 => None,
        1 => Some("nobody".to_owned()),
        _ => Some(login.users[any_index(rng, login.users.len())].name.clone()),
    })
}

/// An index into a list of `len` (at least one) items, uniformly.
fn any_index(rng: &mut Rng, len: usize) -> usize {
    uniform_inclusive(rng, len as u64 - 1) as usize
}

/// Writes one `"name" "secret"` line, quotes doubled, sometimes indented or with a field
/// more.
fn line(rng: &mut Rng, text: &mut String, name: &str, password: &str, stored: Stored) {
    let secret = match stored {
        Stored::Md5 => md5_secret(name, password),
        Stored::Scram => {
            let mut salt = [0u8; 16];
            rng.fill_bytes(&mut salt);
            let iterations = 1 + uniform_inclusive(rng, 3) as u32;
            scram_secret(password, &salt, iterations).to_string()
        }
        Stored::Plain => password.to_owned(),
    };
    let quote = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
    if uniform_inclusive(rng, 3) == 0 {
        text.push_str("  ");
    }
    let _ = write!(text, "{} {}", quote(name), quote(&secret));
    if uniform_inclusive(rng, 3) == 0 {
        text.push_str(" \"a third field\"");
    }
    text.push('\n');
}

/// A listed user (seven in ten) or nobody listed, the right password (four in five), and the
/// console (two in five) or a database.
pub(super) fn draw_client(rng: &mut Rng, login: &Login) -> Who {
    let listed = !login.users.is_empty() && uniform_inclusive(rng, 9) < 7;
    let (user, password) = if listed {
        let u = &login.users[any_index(rng, login.users.len())];
        (u.name.clone(), u.password.clone())
    } else {
        ("nobody".to_owned(), "whatever".to_owned())
    };
    let password = if uniform_inclusive(rng, 4) == 0 {
        "wrong".to_owned()
    } else {
        password
    };
    let database = if uniform_inclusive(rng, 4) < 2 {
        pgyard_proxy::admin::ADMIN_DATABASE.to_owned()
    } else {
        "app".to_owned()
    };
    Who {
        user,
        database,
        password,
    }
}

/// The login method after the StartupMessage (the password exchange, or none): `Ok(true)`
/// when the check passed (the caller judges what follows), `Ok(false)` when it ended with the
/// FATAL it must.
pub(super) fn log_in(
    c: &mut Conn,
    login: &Login,
    who: &Who,
    end_point: Option<&[u8]>,
    cert: Option<&ClientCert>,
) -> Result<bool, Violation> {
    match &login.auth {
        ClientAuth::Trust => return Ok(true),
        // No password is asked: the socket's owner is the user asked for, or PostgreSQL's
        // FATAL 28000.
        ClientAuth::Peer { os_user } if os_user.as_deref() == Some(who.user.as_str()) => {
            return Ok(true)
        }
        ClientAuth::Peer { .. } => {
            let text = format!("Peer authentication failed for user \"{}\"", who.user);
            return ends_with_fatal(c, "28000", &text).map(|()| false);
        }
        ClientAuth::Cert => return cert_method(c, who, cert),
        ClientAuth::File(_) => {}
    }
    let entry = login.users.iter().find(|u| u.name == who.user);
    let passes = entry.is_some_and(|u| u.password == who.password);
    let stored = entry.map(|u| u.stored);
    if !passes && stored != Some(Stored::Md5) {
        return impostor(c, who, stored, end_point);
    }
    let mut client = AuthClient::new(
        AuthConfig {
            user: who.user.clone(),
            password: Some(who.password.clone().into_bytes()),
            channel_binding: ChannelBinding::Prefer,
            tls_end_point: end_point.map(<[u8]>::to_vec),
            max_iterations: None,
            secret: None,
        },
        [7; 18],
    );
    let mut first = true;
    // Authentication requests up to AuthenticationOk: what follows them (a welcome, a
    // FATAL) is judged after.
    while c.rx.first() == Some(&b'R') && c.rx.get(5..9) != Some(&[0, 0, 0, 0][..]) {
        let Some((_, body)) = c.message() else {
            break;
        };
        let request = AuthRequest::decode(&body)
            .map_err(|e| fail("login-answered-as-postgresql", format!("bad R: {e}")))?;
        if std::mem::take(&mut first) {
            judge_first(&request, stored, end_point)?;
        }
        let step = client.handle_request(request).map_err(|e| {
            let detail = format!("{who:?}: the proxy's exchange broke the client: {e}");
            fail("login-answered-as-postgresql", detail)
        })?;
        if let AuthStep::Send(resp) = step {
            let mut b = BytesMut::new();
            let _ = match &resp {
                AuthResponse::Password(p) => {
                    encode_password(p.strip_suffix(&[0]).unwrap_or(p), &mut b)
                }
                AuthResponse::SaslInitial { mechanism, data } => encode_sasl_initial_response(
                    mechanism.name().as_bytes(),
                    Some(data.as_slice()),
                    &mut b,
                ),
                AuthResponse::Sasl(data) => encode_sasl_response(data, &mut b),
            };
            c.send(&b)?;
        }
    }
    if first {
        let detail = format!("{who:?}: no password was asked for");
        return Err(fail("login-answered-as-postgresql", detail));
    }
    if passes {
        return Ok(true);
    }
    let text = format!("password authentication failed for user \"{}\"", who.user);
    ends_with_fatal(c, "28P01", &text).map(|()| false)
}

/// 32 zero bytes in base64: a proof from someone who does not know the password.
const NO_PROOF: &str = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";

/// A SCRAM exchange by a client that does not know the password (or a user nobody
/// listed): well-formed messages with a proof that cannot be right, computed from nothing,
/// so that no side runs the 4,096 iterations a plain password's verifier has. It must end
/// with FATAL 28P01 after the client-final message, as PostgreSQL ends it.
fn impostor(
    c: &mut Conn,
    who: &Who,
    stored: Option<Stored>,
    end_point: Option<&[u8]>,
) -> Result<bool, Violation> {
    let broke = |what: String| fail("login-answered-as-postgresql", format!("{who:?}: {what}"));
    let Some((b'R', body)) = c.message() else {
        return Err(broke("no password was asked for".into()));
    };
    let request = AuthRequest::decode(&body).map_err(|e| broke(format!("bad R: {e}")))?;
    judge_first(&request, stored, end_point)?;
    let mut b = BytesMut::new();
    let first = b"n,,n=,r=impostorimpostorimpostor";
    let _ = encode_sasl_initial_response(b"SCRAM-SHA-256", Some(first), &mut b);
    c.send(&b)?;
    let server_first = match c.message() {
        Some((b'R', body)) => match AuthRequest::decode(&body) {
            Ok(AuthRequest::SaslContinue(data)) => data.to_vec(),
            other => return Err(broke(format!("after client-first: {other:?}"))),
        },
        other => return Err(broke(format!("after client-first: {other:?}"))),
    };
    let text = String::from_utf8_lossy(&server_first).into_owned();
    let nonce = text
        .split(',')
        .find_map(|f| f.strip_prefix("r="))
        .filter(|r| r.starts_with("impostorimpostorimpostor"))
        .ok_or_else(|| broke(format!("server-first {text:?}")))?;
    let mut b = BytesMut::new();
    let last = format!("c=biws,r={nonce},p={NO_PROOF}");
    let _ = encode_sasl_response(last.as_bytes(), &mut b);
    c.send(&b)?;
    let text = format!("password authentication failed for user \"{}\"", who.user);
    ends_with_fatal(c, "28P01", &text).map(|()| false)
}

/// The first request: MD5 for an MD5 entry, else SCRAM-SHA-256, with `-PLUS` first over TLS
/// with a channel-binding hash.
fn judge_first(
    request: &AuthRequest<'_>,
    stored: Option<Stored>,
    end_point: Option<&[u8]>,
) -> Result<(), Violation> {
    let fits = match (request, stored) {
        (AuthRequest::Md5Password { .. }, Some(Stored::Md5)) => true,
        (AuthRequest::Sasl(m), s) if s != Some(Stored::Md5) => {
            let offered: Vec<&[u8]> = m.iter().collect();
            let want: &[&[u8]] = if end_point.is_some() {
                &[b"SCRAM-SHA-256-PLUS", b"SCRAM-SHA-256"]
            } else {
                &[b"SCRAM-SHA-256"]
            };
            offered == want
        }
        _ => false,
    };
    if fits {
        return Ok(());
    }
    let detail = format!(
        "stored {stored:?}, TLS binding {}: asked {request:?}",
        end_point.is_some()
    );
    Err(fail("login-method-as-stored", detail))
}

/// The stream certificate draws come from: a seed whose proxy has no client CA draws and
/// prints what it did before certificates were drawn.
const CERT_STREAM: u64 = 0x6365_7274_7321;

/// The seed's client certificates, from a stream of their own: half the seeds that may see
/// TLS give the proxy a CA to check clients' certificates against (`true`), and with it
/// perhaps `verify-ca` or `verify-full` in place of the mode drawn (a proxy without TLS keeps
/// it: no certificate can reach it), and in place of an auth file perhaps the `cert` method,
/// whose users stay the names clients ask for.
pub(super) fn draw_client_ca(
    rng: &Rng,
    t: &mut Trace,
    mode: TlsMode,
    login: &mut Login,
) -> (TlsMode, bool) {
    if matches!(login.auth, ClientAuth::Peer { .. }) {
        return (mode, false);
    }
    let mut side = side_stream(rng, CERT_STREAM);
    if uniform_inclusive(&mut side, 1) == 0 {
        return (mode, false);
    }
    let mode = match (mode, uniform_inclusive(&mut side, 2)) {
        (TlsMode::Disable, _) | (_, 0) => mode,
        (_, 1) => TlsMode::VerifyCa,
        _ => TlsMode::VerifyFull,
    };
    let cert = matches!(login.auth, ClientAuth::File(_)) && uniform_inclusive(&mut side, 2) == 0;
    if cert {
        login.auth = ClientAuth::Cert;
    }
    trace!(t, "client CA, auth cert={cert}");
    (mode, true)
}

/// Connection `k`'s certificate draws: a stream of their own, one per connection, so that
/// how much one connection draws never moves another's.
pub(super) fn cert_stream(rng: &Rng, k: u64) -> Rng {
    side_stream(rng, CERT_STREAM + 1 + k)
}

/// The certificate a client shows in its handshake (the proxy has a client CA): none one
/// time in five; else one without a Common Name, or naming the user the client is about to
/// ask for (`next`), or that name in capitals (PostgreSQL compares the name byte for byte),
/// another listed user, a stranger.
pub(super) fn draw_cert(side: &mut Rng, next: &str, login: &Login) -> Option<ClientCert> {
    let others: Vec<&str> = login
        .users
        .iter()
        .map(|u| u.name.as_str())
        .filter(|n| *n != next)
        .collect();
    let common_name = match uniform_inclusive(side, 9) {
        0 | 1 => return None,
        2 => None,
        3..=6 => Some(next.to_owned()),
        7 => Some(next.to_uppercase()),
        8 if !others.is_empty() => Some(others[any_index(side, others.len())].to_owned()),
        _ => Some("mallory".to_owned()),
    };
    Some(ClientCert { common_name })
}

/// Whether the certificate names exactly this user.
fn names(cert: Option<&ClientCert>, who: &Who) -> bool {
    cert.and_then(|c| c.common_name.as_deref()) == Some(who.user.as_str())
}

/// Before any method: where a certificate is required (PostgreSQL's `clientcert` under the
/// `verify-*` modes, and the `cert` method) a client that showed none, or could not over
/// plaintext, gets FATAL 28000 and nothing else; no password is asked first. `Ok(true)`:
/// the method runs.
pub(super) fn cert_gate(
    c: &mut Conn,
    mode: TlsMode,
    auth: &ClientAuth,
    cert: Option<&ClientCert>,
) -> Result<bool, Violation> {
    let required =
        matches!(mode, TlsMode::VerifyCa | TlsMode::VerifyFull) || matches!(auth, ClientAuth::Cert);
    if !required || cert.is_some() {
        return Ok(true);
    }
    let text = "connection requires a valid client certificate";
    ends_with_fatal(c, "28000", text).map(|()| false)
}

/// The `cert` method: no password; the Common Name is the user name or FATAL 28000. A
/// certificate without a name names nobody.
fn cert_method(c: &mut Conn, who: &Who, cert: Option<&ClientCert>) -> Result<bool, Violation> {
    if names(cert, who) {
        return Ok(true);
    }
    let text = format!(
        "certificate authentication failed for user \"{}\"",
        who.user
    );
    ends_with_fatal(c, "28000", &text).map(|()| false)
}

/// `verify-full` after a method that passed: a certificate naming someone else (or no one)
/// ends the login with the FATAL the method gives when it fails, since PostgreSQL compares
/// the name only once the method succeeded and reports the failure in the method's words.
/// `verify-ca` and the modes without a CA never look at the name.
pub(super) fn full_verify(
    c: &mut Conn,
    mode: TlsMode,
    auth: &ClientAuth,
    who: &Who,
    cert: Option<&ClientCert>,
) -> Result<bool, Violation> {
    if mode != TlsMode::VerifyFull || names(cert, who) {
        return Ok(true);
    }
    let user = &who.user;
    let (code, text) = match auth {
        // Its method already compared the name.
        ClientAuth::Cert => return Ok(true),
        ClientAuth::Trust => (
            "28000",
            format!("\"trust\" authentication failed for user \"{user}\""),
        ),
        ClientAuth::Peer { .. } => (
            "28000",
            format!("Peer authentication failed for user \"{user}\""),
        ),
        ClientAuth::File(_) => (
            "28P01",
            format!("password authentication failed for user \"{user}\""),
        ),
    };
    ends_with_fatal(c, code, &text).map(|()| false)
}
