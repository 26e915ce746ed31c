//! The startup phase: SSLRequest and GSSENCRequest are answered as `tls.rs` decides,
//! CancelRequest is passed to the adapter, the StartupMessage names the user, database and
//! settings; then the password check, and the welcome once the first server's settings are
//! known.

use bytes::{Bytes, BytesMut};
use pgyard_types::Instant;
use pgyard_wire::auth::{LoginStep, ServerLogin, StoredSecret};
use pgyard_wire::backend::{
    encode_negotiate_protocol_version, encode_ready_for_query, Authentication, BackendKeyData,
    ParameterStatus, TransactionStatus,
};
use pgyard_wire::frame::{decode_frame, Decoded, ProtocolVersion, StartupKind};
use pgyard_wire::frontend::{is_protocol_option, StartupMessage, StartupPacket};
use pgyard_wire::middleware::SplitItem;

use super::options::Switch;
use super::{params, Alignment, ClientAuth, ClientOut, ClientSession, Identity, Phase, PoolMode};

/// The protocol option a client asks for middleware messages with.
pub const MIDDLEWARE_OPTION: &[u8] = b"_pq_.middleware_messages";

/// Longest password message read during login.
const LOGIN_MESSAGE_MAX: usize = 64 * 1024;

impl ClientSession {
    /// Takes what the splitter has ready, phase by phase.
    pub(super) fn drain_client(&mut self, now: Instant) {
        loop {
            if self.is_closed() {
                return;
            }
            let item = match self.splitter.split() {
                Ok(Decoded::Frame(item)) => item,
                Ok(Decoded::NeedMore { .. }) => return,
                Err(e) => {
                    let text = format!("invalid frontend message: {e}");
                    return self.fatal(b"08P01", &text);
                }
            };
            match item {
                SplitItem::Middleware(m) => {
                    let msg = m.as_message();
                    self.middleware(msg.class.get(), msg.payload);
                    #[cfg(feature = "planted-bugs")]
                    if self.planted(super::PlantedBug::ForwardMiddleware) && !self.is_closed() {
                        self.client_frames(now, m.wire().clone());
                    }
                }
                SplitItem::Forward(bytes) => self.client_item(now, bytes),
            }
        }
    }

    /// Client bytes the splitter passed on, to the phase they belong to.
    fn client_item(&mut self, now: Instant, bytes: Bytes) {
        match self.phase {
            Phase::Startup => self.startup_packet(now, bytes),
            Phase::Login(_) => self.login_bytes(&bytes),
            Phase::Welcome | Phase::Aligning(Alignment { welcome: true, .. }) => {
                self.fatal(b"08P01", "message received before the server was ready")
            }
            Phase::Admin { .. } => self.admin_bytes(&bytes),
            _ => self.client_frames(now, bytes),
        }
    }

    fn startup_packet(&mut self, now: Instant, packet: Bytes) {
        // The splitter passes a StartupMessage on together with the typed bytes that followed
        // it in the same read: the message is its declared length, and what follows belongs
        // to the phase the message leads to (fuzzing found those bytes read as more startup
        // parameters, while the splitter counted them as the start of a frame whose rest it
        // then forwarded to a server, a middleware message included).
        let declared = packet
            .first_chunk::<4>()
            .map_or(0, |h| u32::from_be_bytes(*h) as usize)
            .min(packet.len());
        let body = match super::tls::request_len(&packet) {
            // SSLRequest and GSSENCRequest are read alone; what came with them is judged
            // on its own (buffer stuffing).
            Some(len) => packet.get(4..len).unwrap_or_default(),
            None => packet.get(4..declared).unwrap_or_default(),
        };
        match StartupPacket::decode(body) {
            Ok(StartupPacket::SslRequest) => self.ssl_request(&packet),
            Ok(StartupPacket::GssEncRequest) => self.gss_request(&packet),
            Ok(StartupPacket::CancelRequest(c)) => {
                self.out.push_back(ClientOut::Cancel {
                    pid: c.pid,
                    key: c.key.to_vec(),
                });
                self.out.push_back(ClientOut::Close);
                self.close();
            }
            Ok(StartupPacket::Startup(m)) => {
                self.startup_message(now, m);
                let rest = packet.slice(declared..);
                if !rest.is_empty() && !self.is_closed() {
                    if matches!(self.phase, Phase::Startup) {
                        return self.fatal(b"08P01", "data after the startup packet");
                    }
                    self.client_item(now, rest);
                }
            }
            Err(e) => {
                let code = body.first_chunk::<4>().map(|c| u32::from_be_bytes(*c));
                let startup = code.map(StartupKind::from_code);
                if let Some(StartupKind::Startup(_)) = startup {
                    // A server reads parameters up to a name it cannot end and then wants
                    // the list's terminator to be the last byte; it says only that.
                    let text = "invalid startup packet layout: expected terminator as last byte";
                    return self.fatal(b"08P01", text);
                }
                self.fatal(b"08P01", &format!("invalid startup packet layout: {e}"))
            }
        }
    }

    fn startup_message(&mut self, _now: Instant, m: StartupMessage<'_>) {
        let v = m.version;
        if v.major() != 3 {
            let text = format!(
                "unsupported frontend protocol {}.{}: server supports 3.0 to 3.2",
                v.major(),
                v.minor()
            );
            return self.fatal(b"0A000", &text);
        }
        if !self.tls_admits_startup() {
            return;
        }
        let mut who = Identity {
            version: Some(v.min(ProtocolVersion::V3_2)),
            ..Identity::default()
        };
        let mut unsupported: Vec<&[u8]> = Vec::new();
        let mut options: Option<String> = None;
        let mut passed: Vec<Switch> = Vec::new();
        for (name, value) in m.params.iter() {
            let lossy = String::from_utf8_lossy(value);
            // A value the proxy would carry as text must be text: a lossy reading would
            // hand a server other bytes than the client sent (it takes them as they are).
            let exact = matches!(lossy, std::borrow::Cow::Borrowed(_));
            let text = lossy.into_owned();
            match name {
                b"user" | b"database" | b"options" if !exact => return self.not_utf8(name),
                b"user" => who.user = text,
                b"database" => who.database = text,
                b"replication" => match replication(value) {
                    // `false` in any of a server's spellings asks for a plain session.
                    Some(false) => {}
                    Some(true) => {
                        let msg = "replication connections are not supported by pgyard proxy";
                        return self.fatal(b"08P01", msg);
                    }
                    None => {
                        let msg =
                            format!("invalid value for parameter \"replication\": \"{text}\"");
                        let hint = "Valid values are: \"false\", 0, \"true\", 1, \"database\".";
                        self.error_hinted(b"FATAL", b"22023", &msg, Some(hint));
                        return self.fatal_sent();
                    }
                },
                MIDDLEWARE_OPTION => who.middleware = value == b"on",
                b"options" => options = Some(text),
                n if is_protocol_option(n) => unsupported.push(n),
                n => {
                    // The tracked settings follow the client; the others go to the servers
                    // of its pool, but for those the configuration ignores, as PgBouncer's
                    // `ignore_startup_parameters`.
                    let name = String::from_utf8_lossy(n);
                    if let Some(t) = params::startup_setting(&name) {
                        // A server cleans a startup `application_name`'s own bytes, under
                        // any spelling of the name.
                        let text = match t {
                            "application_name" => params::clean_application_name(value),
                            _ if !exact => return self.not_utf8(n),
                            _ => text,
                        };
                        self.wanted.insert(t.to_owned(), text);
                    } else if self.passes_on(&name) {
                        if !exact || matches!(name, std::borrow::Cow::Owned(_)) {
                            return self.not_utf8(n);
                        }
                        if name.contains('=') {
                            // The server refuses it once the password is right; an error
                            // in `options`, which it reads first, wins.
                            let e = super::options::OptionsError::setting_name(&name);
                            self.options_refused.get_or_insert(e);
                        } else {
                            passed.push(Switch::Setting(name.into_owned(), text));
                        }
                    }
                }
            }
        }
        let mut rest = match options {
            Some(text) => self.take_options(&text),
            None => Vec::new(),
        };
        // A server reads the StartupMessage's settings after `options`: later, they win.
        rest.extend(passed);
        who.options = super::options::server_text(&rest);
        if who.user.is_empty() {
            return self.fatal(
                b"28000",
                "no PostgreSQL user name specified in startup packet",
            );
        }
        if self.over_limit {
            return self.fatal(b"53300", "no more connections allowed (max_client_conn)");
        }
        if who.database.is_empty() {
            who.database = who.user.clone();
        }
        if v.minor() > 2 || !unsupported.is_empty() {
            let mut buf = BytesMut::new();
            let newest = ProtocolVersion::V3_2.min(v);
            if encode_negotiate_protocol_version(newest, &unsupported, &mut buf).is_ok() {
                self.out.push_back(ClientOut::ToClient(buf.freeze()));
            }
        }
        self.who = who;
        let Some(cert_ok) = self.cert_check() else {
            return;
        };
        let secret = match &self.config.auth {
            ClientAuth::Cert if cert_ok => StoredSecret::Trust,
            ClientAuth::Cert => {
                let text = format!(
                    "certificate authentication failed for user \"{}\"",
                    self.who.user
                );
                return self.fatal(b"28000", &text);
            }
            ClientAuth::Trust => StoredSecret::Trust,
            ClientAuth::Peer { os_user } if os_user.as_deref() == Some(self.who.user.as_str()) => {
                StoredSecret::Trust
            }
            ClientAuth::Peer { .. } => {
                // PostgreSQL's words; the user found is in the adapter's log.
                let text = format!("Peer authentication failed for user \"{}\"", self.who.user);
                return self.fatal(b"28000", &text);
            }
            ClientAuth::File(f) => f
                .get(&self.who.user)
                .map_or(StoredSecret::Unknown, |p| p.stored()),
        };
        let mut buf = BytesMut::new();
        let (login, step) = ServerLogin::start(secret, self.tls.end_point(), self.random, &mut buf);
        if !buf.is_empty() {
            self.out.push_back(ClientOut::ToClient(buf.freeze()));
        }
        self.phase = Phase::Login(Box::new(login));
        if step == LoginStep::Done {
            self.logged_in();
        }
    }

    /// Whether the StartupMessage setting `name`, which the proxy does not track, goes to
    /// the servers of the client's pool: not one the configuration ignores.
    fn passes_on(&self, name: &str) -> bool {
        !self
            .config
            .ignore_startup_parameters
            .contains(&name.to_ascii_lowercase())
    }

    /// Ends the login over StartupMessage parameter `name`, whose name or value is not
    /// UTF-8: the proxy carries them to servers as text, and would change the bytes.
    fn not_utf8(&mut self, name: &[u8]) {
        let text = format!(
            "startup parameter \"{}\" is not valid UTF-8",
            String::from_utf8_lossy(name)
        );
        let hint = "pgyard proxy passes user and database names and settings to its servers \
                    as UTF-8 text; only application_name is cleaned as a server cleans it.";
        self.error_hinted(b"FATAL", b"22021", &text, Some(hint));
        self.fatal_sent();
    }

    /// FATAL as a server ends a login it has let in over `options` or a StartupMessage
    /// setting: AuthenticationOk first, then every field the server sends but its source
    /// position.
    fn refuse_after_auth_ok(&mut self, e: super::options::OptionsError) {
        let mut fields: Vec<(u8, &[u8])> = vec![
            (b'S', b"FATAL"),
            (b'V', b"FATAL"),
            (b'C', e.code),
            (b'M', e.message.as_bytes()),
        ];
        fields.extend(e.detail.map(|d| (b'D', d.as_bytes())));
        fields.extend(e.hint.map(|h| (b'H', h.as_bytes())));
        self.fatal_fields(true, &fields);
    }

    /// Ends the connection with an ErrorResponse of `fields`, after AuthenticationOk when
    /// `authenticated` (a server that has let the client in and then refuses it).
    pub(super) fn fatal_fields(&mut self, authenticated: bool, fields: &[(u8, &[u8])]) {
        if self.is_closed() {
            return;
        }
        let mut buf = BytesMut::new();
        if authenticated {
            let _ = Authentication::Ok.encode(&mut buf);
        }
        if pgyard_wire::error_fields::encode_error_response(fields, &mut buf).is_ok() {
            self.out.push_back(ClientOut::ToClient(buf.freeze()));
        }
        self.fatal_sent();
    }

    /// The tracked settings `options` gives, under those the StartupMessage names itself (a
    /// server reads `options` first, then the other parameters over it), and the rest for
    /// the servers of the client's pool; or the error that ends the login once the password
    /// is right.
    fn take_options(&mut self, text: &str) -> Vec<Switch> {
        match super::options::parse(text) {
            Ok(found) => {
                let own = std::mem::take(&mut self.wanted);
                let mut rest = Vec::new();
                for s in found {
                    match s {
                        Switch::Setting(name, value) => match params::startup_setting(&name) {
                            Some(t) => {
                                self.wanted.insert(t.to_owned(), value);
                            }
                            None => rest.push(Switch::Setting(name, value)),
                        },
                        other => rest.push(other),
                    }
                }
                for (name, value) in &own {
                    self.wanted.insert(name.clone(), value.clone());
                }
                rest
            }
            Err(e) => {
                self.options_refused = Some(e);
                Vec::new()
            }
        }
    }

    /// Password messages, read whole.
    fn login_bytes(&mut self, bytes: &[u8]) {
        self.login_buf.extend_from_slice(bytes);
        loop {
            let (tag, body) = match decode_frame(&self.login_buf, LOGIN_MESSAGE_MAX) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return,
                Err(e) => {
                    return self.fatal(b"08P01", &format!("invalid password packet: {e}"));
                }
            };
            let _ = self.login_buf.split_to(5 + body.len());
            if tag != b'p' {
                let text = format!(
                    "expected password response, got message type {}",
                    char::from(tag)
                );
                return self.fatal(b"08P01", &text);
            }
            let Phase::Login(login) = &mut self.phase else {
                return;
            };
            let mut buf = BytesMut::new();
            let step = login.password_message(&body, &mut buf);
            if !buf.is_empty() {
                self.out.push_back(ClientOut::ToClient(buf.freeze()));
            }
            match step {
                LoginStep::Continue => {}
                LoginStep::Done => {
                    self.proven = login.proven().cloned();
                    return self.logged_in();
                }
                LoginStep::Failed => {
                    let text = format!(
                        "password authentication failed for user \"{}\"",
                        self.who.user
                    );
                    return self.fatal(b"28P01", &text);
                }
            }
        }
    }

    /// Whether a certificate is needed and there is none (then the login ends here with
    /// PostgreSQL's FATAL, and `None` is returned); else whether the certificate's Common
    /// Name is the user name, which `verify-full` and `Cert` require.
    fn cert_check(&mut self) -> Option<bool> {
        let needed =
            self.tls.mode().requires_cert() || matches!(self.config.auth, ClientAuth::Cert);
        if needed && self.tls.client_cert().is_none() {
            self.fatal(b"28000", "connection requires a valid client certificate");
            return None;
        }
        Some(self.tls.cert_names(&self.who.user))
    }

    /// In `verify-full`, the method's own failure when the certificate names someone else:
    /// PostgreSQL checks the name after the method succeeded and reports the method's text.
    fn full_verify_refuses(&mut self) -> bool {
        if self.tls.mode() != super::TlsMode::VerifyFull
            || matches!(self.config.auth, ClientAuth::Cert)
        {
            return false;
        }
        if self.tls.cert_names(&self.who.user) {
            return false;
        }
        let user = &self.who.user;
        let (code, text): (&[u8; 5], String) = match &self.config.auth {
            ClientAuth::Trust => (
                b"28000",
                format!("\"trust\" authentication failed for user \"{user}\""),
            ),
            ClientAuth::Peer { .. } => (
                b"28000",
                format!("Peer authentication failed for user \"{user}\""),
            ),
            ClientAuth::File(_) | ClientAuth::Cert => (
                b"28P01",
                format!("password authentication failed for user \"{user}\""),
            ),
        };
        self.fatal(code, &text);
        true
    }

    /// The password is right: the first server's settings make the welcome.
    fn logged_in(&mut self) {
        if self.full_verify_refuses() {
            return;
        }
        self.deadline = None;
        if self.who.database == crate::admin::ADMIN_DATABASE {
            return self.admin_logged_in();
        }
        if !self.config.databases.allows(&self.who.database) {
            let text = crate::admin::no_such_database(&self.who.database);
            return self.fatal(b"08P01", &text);
        }
        if self.config.disabled.contains(&self.who.database) {
            let text = crate::admin::database_disabled(&self.who.database);
            return self.fatal(b"08P01", &text);
        }
        if self.draining {
            return self.shut();
        }
        if let Some(e) = self.options_refused.take() {
            // A server reads `options` after it has let the client in.
            return self.refuse_after_auth_ok(e);
        }
        self.logged_in = true;
        self.labels = self.labels.wrapping_add(1);
        self.phase = Phase::Welcome;
        self.acquire(self.route);
    }

    /// Ends a welcome begun in `buf` (AuthenticationOk): the settings `shown`, the proxy's
    /// cancel key, and ReadyForQuery, sent to the client.
    pub(super) fn send_welcome<'a>(
        &mut self,
        mut buf: BytesMut,
        shown: impl Iterator<Item = (&'a str, &'a str)>,
    ) {
        for (name, value) in shown {
            let ps = ParameterStatus {
                name: name.as_bytes(),
                value: value.as_bytes(),
            };
            let _ = ps.encode(&mut buf);
        }
        let key = self.cancel_secret().unwrap_or_default();
        let _ = BackendKeyData {
            pid: self.key.pid,
            key,
        }
        .encode(&mut buf);
        encode_ready_for_query(TransactionStatus::Idle, &mut buf);
        self.out.push_back(ClientOut::ToClient(buf.freeze()));
    }

    /// AuthenticationOk, the settings a direct connection would report, the proxy's cancel
    /// key, and ReadyForQuery; in transaction mode the server goes back, reusable when
    /// `clean` (it said nothing after the alignment's end).
    pub(super) fn welcome(&mut self, clean: bool) {
        let mut buf = BytesMut::new();
        let _ = Authentication::Ok.encode(&mut buf);
        let server = self
            .server
            .as_ref()
            .map(|s| s.settings.shown_to_new_client());
        let mut shown = server.unwrap_or_default();
        for (name, value) in &self.wanted {
            shown.insert(name.clone(), value.clone());
        }
        if self.who.middleware {
            shown.insert("middleware_messages".into(), "on".into());
        }
        self.send_welcome(buf, shown.iter().map(|(n, v)| (n.as_str(), v.as_str())));
        if !self.held_notices.is_empty() {
            // Notices the client earned while the welcome waited for its server.
            let held = self.held_notices.split().freeze();
            self.out.push_back(ClientOut::ToClient(held));
        }
        match self.config.pool_mode {
            PoolMode::Transaction => {
                self.release_between_transactions(clean);
                self.phase = Phase::Idle;
                if self.draining {
                    self.shut();
                }
            }
            PoolMode::Session => self.phase = Phase::Active,
        }
    }
}

/// A StartupMessage's `replication` as a server reads it: `database` (exactly) or a boolean
/// in any of `parse_bool`'s spellings — a non-empty prefix of `true`, `false`, `yes` or `no`
/// in any case, `on`, `off` or `of`, `1` or `0`; `None` for anything else.
fn replication(value: &[u8]) -> Option<bool> {
    if value == b"database" {
        return Some(true);
    }
    let lower = value.to_ascii_lowercase();
    let prefix_of = |word: &[u8], least: usize| {
        lower.len() >= least && lower.len() <= word.len() && word.starts_with(&lower)
    };
    match lower.first()? {
        b't' if prefix_of(b"true", 1) => Some(true),
        b'f' if prefix_of(b"false", 1) => Some(false),
        b'y' if prefix_of(b"yes", 1) => Some(true),
        b'n' if prefix_of(b"no", 1) => Some(false),
        b'o' if prefix_of(b"on", 2) => Some(true),
        b'o' if prefix_of(b"off", 2) => Some(false),
        b'1' if lower.len() == 1 => Some(true),
        b'0' if lower.len() == 1 => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::replication;

    #[test]
    fn replication_is_read_as_a_server_reads_it() {
        for v in ["false", "FALSE", "f", "no", "N", "off", "of", "0"] {
            assert_eq!(replication(v.as_bytes()), Some(false), "{v}");
        }
        for v in ["database", "true", "tr", "Yes", "on", "1"] {
            assert_eq!(replication(v.as_bytes()), Some(true), "{v}");
        }
        for v in ["", "o", "Database", "truex", "offf", "01", "garbage"] {
            assert_eq!(replication(v.as_bytes()), None, "{v}");
        }
    }
}
