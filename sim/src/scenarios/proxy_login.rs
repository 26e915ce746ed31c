//! `proxy-login`: pgyard-proxy's client sessions from the first byte to the welcome, and the
//! admin console after it (`proxy_console.rs`). Each seed draws the proxy's TLS mode (and
//! whether its certificate gives a channel-binding hash), trust or an auth file the scenario
//! writes itself in PgBouncer's format (quotes doubled inside names, comment lines, fields past
//! the second, a later line for a user overriding an earlier one, MD5 secrets and SCRAM
//! verifiers, now and then a plain password), and its admin users, and perhaps a CA for client
//! certificates (with `verify-ca`, `verify-full` or the `cert` method); then connections that
//! each open with an encryption prelude (none; SSLRequest, with plaintext stuffed behind it or
//! not; GSSENCRequest; both; a request repeated; direct TLS with or without ALPN `postgresql`),
//! log in as a listed user with the right or a wrong password or as nobody listed, to a
//! database or to the console. The scenario plays the adapter (a TLS handshake is its outcome,
//! ALPN and the client's certificate) and the clients (their password exchanges by
//! pgyard-wire's `AuthClient`), and judges every answer against its own reading of
//! `docs/proxy.md` (PostgreSQL's and PgBouncer's rules), not against the machine: which byte
//! answers a request, which FATAL ends a connection and in which words, which mechanisms a
//! password check offers, who reaches a server or the console, and that the cancel key the
//! adapter would register is the one the client was told.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use pgyard_proxy::admin::ClientState;
use pgyard_proxy::{
    CancelKey, ClientAuth, ClientCert, ClientConfig, ClientOut, ClientSession, ClientTls, TlsMode,
};
use pgyard_types::{side_stream, uniform_inclusive, Instant, Rng, RngCore};
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend::encode_startup;

use super::proxy::Bug;
use super::proxy_console as console;
use super::proxy_login_auth::{self as auth, Login};
use super::proxy_login_settings::{
    direct_date_style, gone, has, judge_activity, refused_at_welcome, server_settings, SERVER_LOGIN,
};
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct ProxyLoginScenario;

/// PostgreSQL's answer to a request code it no longer expects: 1234.5679 is SSLRequest's.
pub(super) const SECOND_SSL: &str =
    "unsupported frontend protocol 1234.5679: server supports 3.0 to 3.2";
/// … and 1234.5680 GSSENCRequest's.
pub(super) const SECOND_GSS: &str =
    "unsupported frontend protocol 1234.5680: server supports 3.0 to 3.2";

/// How a connection opens, before its StartupMessage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Prelude {
    Plain,
    Ssl,
    SslStuffed,
    Gss,
    GssStuffed,
    GssThenSsl,
    SslTwice,
    GssAfterTls,
    Direct,
    GssThenRecord,
}

/// A client's `options`, and what its pool's servers log in with: the settings and switches
/// the proxy does not track, written as a server reads them back.
const OPTIONS: [(&str, &str); 4] = [
    ("-c geqo=off", "-c geqo=off"),
    ("--work-mem=1MB -E", "-c work_mem=1MB -E"),
    (r"-c app.note=a\ b -d5", r"-c app.note=a\ b -d 5"),
    ("-c search_path=s1", ""),
];

/// The stream a client's `options` text is drawn from.
const OPTIONS_STREAM: u64 = 0x6f70_7431;

const PRELUDES: [Prelude; 10] = [
    Prelude::Plain,
    Prelude::Ssl,
    Prelude::SslStuffed,
    Prelude::Gss,
    Prelude::GssStuffed,
    Prelude::GssThenSsl,
    Prelude::SslTwice,
    Prelude::GssAfterTls,
    Prelude::Direct,
    Prelude::GssThenRecord,
];

/// What a seed's proxy is.
pub(super) struct Proxy {
    pub(super) mode: TlsMode,
    pub(super) end_point: Option<Arc<[u8]>>,
    pub(super) login: Login,
    pub(super) admins: BTreeSet<String>,
    /// Transaction mode gives a server back after the welcome; session mode keeps it.
    pub(super) pool_mode: pgyard_proxy::PoolMode,
    /// The proxy checks client certificates against a CA: its clients may show one.
    pub(super) client_ca: bool,
}

/// One client connection: the proxy's session and what it sent back.
pub(super) struct Conn {
    pub(super) s: ClientSession,
    /// Bytes the proxy wrote to the client, not read yet.
    pub(super) rx: BytesMut,
    /// The proxy closed the connection.
    pub(super) closed: bool,
    /// The handshake the proxy asked for, with the bytes it already read.
    pub(super) started_tls: Option<Vec<u8>>,
    /// Admin requests asked of the adapter, oldest first.
    pub(super) asks: Vec<pgyard_proxy::admin::AdminRequest>,
    /// The session asked for a server (a database login passed), of the pool with these
    /// `options`.
    pub(super) acquired: Option<String>,
    /// It gave its server back (transaction mode, after the welcome), with these settings.
    pub(super) released: Option<pgyard_proxy::client::Settings>,
    /// What it wrote to its server (the settings the client asked for), not answered yet.
    to_server: Vec<u8>,
    /// Under a client CA, the stream this connection's certificate is drawn from.
    pub(super) certs: Option<Rng>,
    /// The certificate the client showed in its handshake.
    pub(super) cert: Option<ClientCert>,
    pub(super) now: Instant,
}

impl Conn {
    /// A connection to session `s` nothing has happened on yet; `certs` as for [`Conn::certs`].
    fn new(s: ClientSession, certs: Option<Rng>, now: Instant) -> Self {
        Conn {
            s,
            rx: BytesMut::new(),
            closed: false,
            started_tls: None,
            asks: Vec::new(),
            acquired: None,
            released: None,
            to_server: Vec::new(),
            certs,
            cert: None,
            now,
        }
    }

    /// Feeds client bytes and collects what comes out.
    pub(super) fn send(&mut self, bytes: &[u8]) -> Result<(), Violation> {
        self.s.handle_client_bytes(self.now, bytes);
        self.pump()
    }

    /// Takes the session's outputs once a server was lent: it may give it back.
    fn pump_lent(&mut self) -> Result<(), Violation> {
        while let Some(o) = self.s.poll_output() {
            match o {
                ClientOut::ToClient(b) => self.rx.extend_from_slice(&b),
                ClientOut::Release { server, .. } if self.released.is_none() => {
                    self.released = Some(server.settings);
                }
                ClientOut::ToServer(b) => self.to_server.extend_from_slice(&b),
                ClientOut::Close => self.closed = true,
                other => {
                    let detail = format!("a welcomed session asked for {other:?}");
                    return Err(fail("login-outputs", detail));
                }
            }
        }
        Ok(())
    }

    /// Takes the session's outputs.
    pub(super) fn pump(&mut self) -> Result<(), Violation> {
        while let Some(o) = self.s.poll_output() {
            match o {
                ClientOut::ToClient(b) => self.rx.extend_from_slice(&b),
                ClientOut::StartTls { early } => self.started_tls = Some(early.to_vec()),
                ClientOut::Acquire(key) => self.acquired = Some(key.options.clone()),
                ClientOut::Admin(r) => self.asks.push(r),
                ClientOut::Close => self.closed = true,
                other => {
                    let detail = format!("a session before its welcome asked for {other:?}");
                    return Err(fail("login-outputs", detail));
                }
            }
        }
        Ok(())
    }

    /// Every whole message the proxy wrote that the client has not read.
    pub(super) fn messages(&mut self) -> Vec<(u8, Vec<u8>)> {
        std::iter::from_fn(|| self.message()).collect()
    }

    /// The next whole message the proxy wrote: tag and body.
    pub(super) fn message(&mut self) -> Option<(u8, Vec<u8>)> {
        let len = u32::from_be_bytes(*self.rx.get(1..5)?.first_chunk::<4>()?) as usize;
        if len < 4 || self.rx.len() < 1 + len {
            return None;
        }
        let tag = self.rx[0];
        let body = self.rx[5..1 + len].to_vec();
        self.rx.advance(1 + len);
        Some((tag, body))
    }
}

/// The key a client is told: 4 bytes under protocol 3.0, all 32 under 3.2.
fn told_key(key: &CancelKey, version: ProtocolVersion) -> &[u8] {
    if version == ProtocolVersion::V3_0 {
        &key.secret[..4]
    } else {
        &key.secret[..]
    }
}

/// The welcome `docs/proxy.md` states: AuthenticationOk, `settings` in the order given, the
/// client's cancel key, ReadyForQuery.
pub(super) fn welcome_messages<'a>(
    settings: impl IntoIterator<Item = (&'a str, &'a str)>,
    key: &CancelKey,
    version: ProtocolVersion,
) -> Vec<(u8, Vec<u8>)> {
    let mut want: Vec<(u8, Vec<u8>)> = vec![(b'R', 0u32.to_be_bytes().to_vec())];
    for (n, v) in settings {
        want.push((b'S', [n.as_bytes(), b"\0", v.as_bytes(), b"\0"].concat()));
    }
    let told = told_key(key, version);
    want.push((b'K', [&key.pid.to_be_bytes()[..], told].concat()));
    want.push((b'Z', b"I".to_vec()));
    want
}

/// What the adapter reads from a welcomed session as the key to register for CancelRequests
/// is the key its client was told.
pub(super) fn judge_key(
    c: &Conn,
    key: &CancelKey,
    version: ProtocolVersion,
) -> Result<(), Violation> {
    let told = told_key(key, version);
    if c.s.cancel_pid() == key.pid && c.s.cancel_secret() == Some(told) {
        return Ok(());
    }
    let detail = format!(
        "the session registers key ({}, {:?}), its client was told ({}, {told:?})",
        c.s.cancel_pid(),
        c.s.cancel_secret(),
        key.pid
    );
    Err(fail("cancel-key-as-told", detail))
}

pub(super) fn fail(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// An ErrorResponse's fields by code.
pub(super) fn field(body: &[u8], code: u8) -> Option<String> {
    let mut rest = body;
    while let Some((&t, after)) = rest.split_first() {
        if t == 0 {
            return None;
        }
        let end = after.iter().position(|&b| b == 0)?;
        if t == code {
            return Some(String::from_utf8_lossy(&after[..end]).into_owned());
        }
        rest = &after[end + 1..];
    }
    None
}

/// The connection must end now with FATAL `code` `text`, nothing before or after it.
pub(super) fn ends_with_fatal(c: &mut Conn, code: &str, text: &str) -> Result<(), Violation> {
    let got = c.message();
    let fits = got.as_ref().is_some_and(|(tag, body)| {
        *tag == b'E'
            && field(body, b'S').as_deref() == Some("FATAL")
            && field(body, b'C').as_deref() == Some(code)
            && field(body, b'M').as_deref() == Some(text)
    });
    // Closed: the adapter must stop reading from it.
    if fits && c.rx.is_empty() && c.closed && !c.s.wants_client_bytes() {
        return Ok(());
    }
    let detail = format!(
        "expected FATAL {code} {text:?} and the end; got {:?}, {} more bytes, closed={}",
        got.map(|(t, b)| (char::from(t), String::from_utf8_lossy(&b).into_owned())),
        c.rx.len(),
        c.closed
    );
    Err(fail("login-answered-as-postgresql", detail))
}

/// The proxy must have answered exactly `byte` and nothing else yet.
pub(super) fn answered(c: &mut Conn, byte: u8, what: &str) -> Result<(), Violation> {
    if c.rx.first() == Some(&byte) && !c.closed {
        c.rx.advance(1);
        if c.rx.is_empty() {
            return Ok(());
        }
    }
    let detail = format!(
        "{what} answered {:?} (closed={}), expected {:?}",
        String::from_utf8_lossy(&c.rx),
        c.closed,
        char::from(byte)
    );
    Err(fail("login-answered-as-postgresql", detail))
}

impl Scenario for ProxyLoginScenario {
    fn name(&self) -> &'static str {
        "proxy-login"
    }

    fn description(&self) -> &'static str {
        "pgyard-proxy's logins: TLS preludes, auth files, the admin console"
    }

    fn run(&self, rng: &mut Rng, t: &mut Trace) -> Result<u64, Violation> {
        run_proxy_login(rng, t, None)
    }
}

/// Runs one seed with `bug` planted in every client session.
pub fn run_proxy_login(rng: &mut Rng, t: &mut Trace, bug: Bug) -> Result<u64, Violation> {
    let proxy = draw_proxy(rng, t)?;
    let conns = 1 + uniform_inclusive(rng, 5);
    let mut now = Instant::ZERO;
    for k in 0..conns {
        now = Instant(now.0 + 1_000_000);
        connection(rng, t, (&proxy, bug), k, now)?;
    }
    Ok(now.0)
}

/// The proxy's mode, certificate, password check and admin users.
fn draw_proxy(rng: &mut Rng, t: &mut Trace) -> Result<Proxy, Violation> {
    let modes = [
        TlsMode::Disable,
        TlsMode::Allow,
        TlsMode::Prefer,
        TlsMode::Require,
    ];
    let mode = modes[uniform_inclusive(rng, 3) as usize];
    let end_point = (uniform_inclusive(rng, 2) > 0).then(|| {
        let mut h = [0u8; 32];
        rng.fill_bytes(&mut h);
        Arc::from(&h[..])
    });
    let mut login = auth::draw(rng, t)?;
    let (mode, end_point) = match login.auth {
        // A Unix socket's clients: no TLS there, as the adapter offers none.
        ClientAuth::Peer { .. } => (TlsMode::Disable, None),
        _ => (mode, end_point),
    };
    let (mode, client_ca) = auth::draw_client_ca(rng, t, mode, &mut login);
    let admins: BTreeSet<String> = login
        .users
        .iter()
        .filter(|_| uniform_inclusive(rng, 1) == 0)
        .map(|u| u.name.clone())
        .collect();
    let pool_mode = if uniform_inclusive(rng, 2) == 0 {
        pgyard_proxy::PoolMode::Session
    } else {
        pgyard_proxy::PoolMode::Transaction
    };
    trace!(
        t,
        "proxy tls={mode:?} end_point={} admins={admins:?} {pool_mode:?}",
        end_point.is_some()
    );
    Ok(Proxy {
        mode,
        end_point,
        login,
        admins,
        pool_mode,
        client_ca,
    })
}

/// One connection from its first byte to its welcome (and console commands after it).
fn connection(
    rng: &mut Rng,
    t: &mut Trace,
    (p, bug): (&Proxy, Bug),
    k: u64,
    now: Instant,
) -> Result<(), Violation> {
    let prelude = PRELUDES[uniform_inclusive(rng, PRELUDES.len() as u64 - 1) as usize];
    let key = draw_key(rng);
    let random = pgyard_wire::auth::LoginRandom::draw(rng);
    // Peer authentication: the adapter names the socket's owner when the client connects.
    let owner = auth::socket_owner(rng, &p.login);
    let own = owner.as_ref().map(|os_user| Login {
        auth: ClientAuth::Peer {
            os_user: os_user.clone(),
        },
        users: Vec::new(),
    });
    let login = own.as_ref().unwrap_or(&p.login);
    let s = session((p, bug), login, (k, now), &key, random);
    let mut c = Conn::new(s, p.client_ca.then(|| auth::cert_stream(rng, k)), now);
    trace!(t, "conn {k} prelude {prelude:?}");
    if let Some(os_user) = &owner {
        trace!(t, "conn {k} on the Unix socket of {os_user:?}");
    }
    if uniform_inclusive(rng, 19) == 0 {
        // SIGTERM before the first byte: no login is let in any more.
        trace!(t, "conn {k} drained at once");
        return drained(&mut c);
    }
    let Some(tls) = super::proxy_login_prelude::prelude(rng, t, p, &mut c, prelude)? else {
        return Ok(());
    };
    let start = Startup::draw(rng, t, k, &p.login, tls);
    c.send(&start.encode())?;
    let tls_only = [TlsMode::Require, TlsMode::VerifyCa, TlsMode::VerifyFull];
    if tls_only.contains(&p.mode) && !tls {
        return ends_with_fatal(&mut c, "08P01", "SSL required");
    }
    let who = &start.who;
    let end_point = p.end_point.as_deref().filter(|_| tls);
    let shown = c.cert.clone();
    let cert = shown.as_ref();
    if !auth::cert_gate(&mut c, p.mode, &login.auth, cert)?
        || !auth::log_in(&mut c, login, who, end_point, cert)?
        || !auth::full_verify(&mut c, p.mode, &login.auth, who, cert)?
    {
        return Ok(());
    }
    let app = start.app();
    let drain = uniform_inclusive(rng, 9) == 0;
    if who.database != pgyard_proxy::admin::ADMIN_DATABASE {
        if let Some(got) = c.acquired.as_deref() {
            // docs/proxy.md: settings and switches of `options` that are not tracked make
            // a pool of their own, whose servers log in with them, written again.
            let options = start.options;
            let want = options.map_or("", |(_, rest)| rest);
            if got != want {
                let detail = format!("options {options:?}: a pool with options {got:?}");
                return Err(fail("pool-per-options", detail));
            }
        }
        if c.acquired.is_some() && c.rx.is_empty() && !c.closed {
            judge_activity(&c, ClientState::Waiting, false, app)?;
            if drain {
                return drained(&mut c);
            }
            let session = p.pool_mode == pgyard_proxy::PoolMode::Session;
            return lend(rng, &mut c, k, &key, &start, session);
        }
        let detail = format!(
            "{who:?} passed the password check but the session did not ask for a server \
             (closed={}, {} bytes)",
            c.closed,
            c.rx.len()
        );
        return Err(fail("login-reaches-a-server", detail));
    }
    let trusted = matches!(p.login.auth, ClientAuth::Trust);
    if !trusted && !p.admins.contains(&who.user) {
        return ends_with_fatal(&mut c, "08P01", "not allowed");
    }
    console::welcome(&mut c, &key, start.version, start.middleware)?;
    judge_activity(&c, ClientState::Idle, true, app)?;
    if drain {
        return drained(&mut c);
    }
    console::commands(rng, t, &mut c)
}

/// The cancel key a connection's client is told: the secret is drawn before the pid.
fn draw_key(rng: &mut Rng) -> CancelKey {
    let mut secret = vec![0u8; 32];
    rng.fill_bytes(&mut secret);
    CancelKey {
        pid: (rng.next_u32() >> 1) as i32,
        secret,
    }
}

/// Connection `k`'s session on `p`, checking passwords by `login` (the proxy's, or the
/// socket owner's under peer authentication), with `bug` planted when the feature is on.
fn session(
    (p, bug): (&Proxy, Bug),
    login: &Login,
    (k, now): (u64, Instant),
    key: &CancelKey,
    random: pgyard_wire::auth::LoginRandom,
) -> ClientSession {
    let config = ClientConfig {
        auth: login.auth.clone(),
        disabled: Default::default(),
        admin_users: Arc::new(p.admins.clone()),
        ..super::proxy_client::client_config(p.pool_mode)
    };
    let tls = ClientTls {
        mode: p.mode,
        end_point: p.end_point.clone(),
    };
    let s = ClientSession::new(now, pgyard_proxy::ClientId(k), config, key.clone(), random)
        .with_tls(tls);
    #[cfg(feature = "planted-bugs")]
    if let Some(b) = bug {
        return s.with_planted_bug(b);
    }
    #[cfg(not(feature = "planted-bugs"))]
    let _ = bug;
    s
}

/// What a client's StartupMessage asks for, kept for judging the answers to it.
struct Startup {
    who: auth::Who,
    version: ProtocolVersion,
    /// `application_name`, empty when the client sends none.
    app: &'static str,
    /// The client's `options`, and what its pool's servers log in with (see [`OPTIONS`]).
    options: Option<(&'static str, &'static str)>,
    /// The tracked settings the client sends.
    asked: Vec<(&'static str, &'static str)>,
    /// The client asks for `_pq_.middleware_messages`.
    middleware: bool,
}

impl Startup {
    /// Draws connection `k`'s StartupMessage, after a prelude that did (or did not) start TLS.
    fn draw(rng: &mut Rng, t: &mut Trace, k: u64, login: &Login, tls: bool) -> Self {
        let who = auth::draw_client(rng, login);
        let version = if uniform_inclusive(rng, 1) == 0 {
            ProtocolVersion::V3_0
        } else {
            ProtocolVersion::V3_2
        };
        trace!(t, "conn {k} {who:?} tls={tls} {version:?}");
        let app = ["", "psql", "nightly batch"][uniform_inclusive(rng, 2) as usize];
        let options = (uniform_inclusive(rng, 3) == 0).then(|| {
            // Which text is drawn on a side stream, so that the other draws stay as they were
            // when every client's `options` was `-c geqo=off`.
            let side = &mut side_stream(rng, OPTIONS_STREAM);
            OPTIONS[uniform_inclusive(side, OPTIONS.len() as u64 - 1) as usize]
        });
        let asked = super::proxy_login_settings::draw_asked(rng);
        let middleware = uniform_inclusive(rng, 2) == 0;
        Startup {
            who,
            version,
            app,
            options,
            asked,
            middleware,
        }
    }

    /// The message as the client sends it.
    fn encode(&self) -> BytesMut {
        let mut params: Vec<(&[u8], &[u8])> = vec![
            (b"user", self.who.user.as_bytes()),
            (b"database", self.who.database.as_bytes()),
        ];
        if !self.app.is_empty() {
            params.push((b"application_name", self.app.as_bytes()));
        }
        if let Some((text, _)) = self.options {
            params.push((b"options", text.as_bytes()));
        }
        for (n, v) in &self.asked {
            params.push((n.as_bytes(), v.as_bytes()));
        }
        if self.middleware {
            params.push((b"_pq_.middleware_messages", b"on"));
        }
        let mut b = BytesMut::new();
        let _ = encode_startup(self.version, &params, &mut b);
        b
    }

    /// The `application_name` the session must report, if the client sent one.
    fn app(&self) -> Option<&'static str> {
        (!self.app.is_empty()).then_some(self.app)
    }
}

/// The adapter's answer to the session's request for a server: the pool's refusal (its wait
/// timed out), or a server whose settings make the welcome.
fn lend(
    rng: &mut Rng,
    c: &mut Conn,
    k: u64,
    key: &CancelKey,
    start: &Startup,
    session: bool,
) -> Result<(), Violation> {
    if uniform_inclusive(rng, 4) == 0 {
        c.s.handle_refused("query_wait_timeout");
        c.pump()?;
        return ends_with_fatal(c, "08P01", "query_wait_timeout");
    }
    if uniform_inclusive(rng, 5) == 0 {
        demoted_primary(c, k)?;
    }
    let mut settings = server_settings("off");
    // One server in four was left by an earlier client with a DateStyle of its own.
    let leftover = (uniform_inclusive(rng, 3) == 0)
        .then(|| ["SQL, DMY", "German, YMD", "Postgres, DMY"][uniform_inclusive(rng, 2) as usize]);
    if let Some(left) = leftover {
        settings.report("DateStyle".to_owned(), left.to_owned());
    }
    let lent = pgyard_proxy::Lent {
        id: pgyard_proxy::ServerId(k),
        settings,
        prepared: Default::default(),
    };
    c.s.handle_server(c.now, lent);
    c.pump_lent()?;
    let login: BTreeMap<String, String> = SERVER_LOGIN
        .iter()
        .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
        .collect();
    let mut have = login.clone();
    if let Some(left) = leftover {
        have.insert("DateStyle".to_owned(), left.to_owned());
    }
    if let Some(text) = align(c, start, &mut have, leftover.is_some())? {
        return refused_at_welcome(c, &text);
    }
    direct_date_style(&start.asked, &login, &have)?;
    judge_welcome(c, k, key, start, &have, session)
}

/// A primary demoted since it was opened never serves the `primary` route: it goes back as
/// unusable and another is asked for; the client hears nothing of it.
fn demoted_primary(c: &mut Conn, k: u64) -> Result<(), Violation> {
    let demoted = pgyard_proxy::Lent {
        id: pgyard_proxy::ServerId(1000 + k),
        settings: server_settings("on"),
        prepared: Default::default(),
    };
    c.s.handle_server(c.now, demoted);
    let outs: Vec<String> = std::iter::from_fn(|| c.s.poll_output())
        .map(|o| match o {
            ClientOut::Release { server, reusable } => {
                format!("release {} reusable={reusable}", server.id.0)
            }
            ClientOut::Acquire(key) => format!("acquire {:?}", key.route),
            other => format!("{other:?}"),
        })
        .collect();
    let want = [
        format!("release {} reusable=false", 1000 + k),
        "acquire Primary".into(),
    ];
    if outs != want {
        let detail = format!("a demoted primary lent for `primary`: {outs:?}, expected {want:?}");
        return Err(fail("welcome-as-documented", detail));
    }
    Ok(())
}

/// The docs: the server first takes the tracked values the client sent that differ from
/// what it has, `have` (nothing reaches the client meanwhile); the text of a value it refuses,
/// which ends the login with its error after AuthenticationOk, as a direct login ends.
fn align(
    c: &mut Conn,
    start: &Startup,
    have: &mut BTreeMap<String, String>,
    leftover: bool,
) -> Result<Option<String>, Violation> {
    let canonical = |n: &str| {
        ["DateStyle", "TimeZone", "client_encoding"]
            .into_iter()
            .find(|t| t.eq_ignore_ascii_case(n))
    };
    let differs = start
        .asked
        .iter()
        .filter_map(|(n, v)| Some((canonical(n)?, *v)))
        .chain(start.app().map(|a| ("application_name", a)))
        .any(|(n, v)| have.get(n).map(String::as_str) != Some(v));
    if !differs && !leftover {
        return Ok(None);
    }
    let sql = std::mem::take(&mut c.to_server);
    if sql.is_empty() || !c.rx.is_empty() || c.released.is_some() || c.closed {
        let detail = format!(
            "the welcome did not wait for the client's settings: wrote {} bytes to the \
             server, {} to the client, released={}",
            sql.len(),
            c.rx.len(),
            c.released.is_some()
        );
        return Err(fail("welcome-as-documented", detail));
    }
    let (reply, refused) = super::proxy_login_settings::answer(&sql, have)?;
    c.s.handle_server_bytes(c.now, reply);
    c.pump_lent()?;
    Ok(refused)
}

/// The welcome once the server has the client's settings, `have`, and what the session then
/// does with its server (connection `k`'s): keeps it in session mode, else gives it back.
fn judge_welcome(
    c: &mut Conn,
    k: u64,
    key: &CancelKey,
    start: &Startup,
    have: &BTreeMap<String, String>,
    session: bool,
) -> Result<(), Violation> {
    // The server's values as it now has them (the client's as the server spells them),
    // `middleware_messages=on` when asked for, in the order of the names.
    let mut shown = have.clone();
    if start.middleware {
        shown.insert("middleware_messages".into(), "on".into());
    }
    let want = welcome_messages(
        shown.iter().map(|(n, v)| (n.as_str(), v.as_str())),
        key,
        start.version,
    );
    let got = c.messages();
    judge_key(c, key, start.version)?;
    // Transaction mode gives the server back at once, with the client's settings; session
    // mode keeps it.
    let keeps = c.s.server() == Some(pgyard_proxy::ServerId(k));
    let holds = c.to_server.is_empty()
        && if session {
            keeps && c.released.is_none()
        } else {
            !keeps && c.released.as_ref().is_some_and(|s| has(s, have))
        };
    if got == want && !c.closed && holds {
        return if session { gone(c, have) } else { Ok(()) };
    }
    let show = |l: &[(u8, Vec<u8>)]| -> Vec<String> {
        l.iter()
            .map(|(t, b)| format!("{}{}", char::from(*t), String::from_utf8_lossy(b)))
            .collect()
    };
    let detail = format!(
        "welcome {:?} (closed={}, released={:?}, server {:?}, wrote {} more bytes to it, \
         session mode {session}), expected {:?}",
        show(&got),
        c.closed,
        c.released,
        c.s.server(),
        c.to_server.len(),
        show(&want)
    );
    Err(fail("welcome-as-documented", detail))
}

/// SIGTERM reaches a session that holds no server: FATAL 08P01 `pooler is shutting down`.
fn drained(c: &mut Conn) -> Result<(), Violation> {
    c.s.handle_shutdown();
    c.pump()?;
    ends_with_fatal(c, "08P01", "pooler is shutting down")
}
