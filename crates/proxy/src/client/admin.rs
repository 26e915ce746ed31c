//! The admin console side of a client session: a client whose database is `pgyard` is
//! checked as usual, then admitted only as an admin user (any user under trust), welcomed
//! with the proxy's own settings, and never given a server. Its simple queries are commands,
//! answered one at a time and in order: a command that needs the adapter (a snapshot, a
//! reload, a pause) holds the ones sent after it until [`ClientSession::handle_admin`].

use bytes::{Buf, Bytes, BytesMut};
use pgyard_wire::backend::Authentication;
use pgyard_wire::frame::{decode_frame, Decoded};

use super::{ClientAuth, ClientOut, ClientSession, Phase};
use crate::admin::{self, AdminReply, Command, ADMIN_MESSAGE_MAX, NOT_ALLOWED};

/// The settings an admin client is shown (PgBouncer's set, with pgyard's version).
fn admin_settings() -> [(&'static str, String); 7] {
    [
        (
            "server_version",
            format!("{}/pgyard", env!("CARGO_PKG_VERSION")),
        ),
        ("client_encoding", "UTF8".into()),
        ("server_encoding", "UTF8".into()),
        ("DateStyle", "ISO".into()),
        ("TimeZone", "UTC".into()),
        ("standard_conforming_strings", "on".into()),
        ("is_superuser", "on".into()),
    ]
}

impl ClientSession {
    /// The password was right and the database is `pgyard`: an admin session, if the user
    /// may have one.
    pub(super) fn admin_logged_in(&mut self) {
        let trusted = matches!(self.config.auth, ClientAuth::Trust);
        if !trusted && !self.config.admin_users.contains(&self.who.user) {
            return self.fatal(b"08P01", NOT_ALLOWED);
        }
        if self.draining {
            return self.shut();
        }
        self.logged_in = true;
        self.admin = true;
        self.labels = self.labels.wrapping_add(1);
        let mut buf = BytesMut::new();
        let _ = Authentication::Ok.encode(&mut buf);
        let mut shown: Vec<(&str, String)> = admin_settings().to_vec();
        if self.who.middleware {
            shown.push(("middleware_messages", "on".into()));
        }
        self.send_welcome(buf, shown.iter().map(|(n, v)| (*n, v.as_str())));
        self.phase = Phase::Admin { pending: None };
    }

    /// Whether this is an admin console session.
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Bytes of admin messages: held until whole, then taken one by one.
    pub(super) fn admin_bytes(&mut self, bytes: &Bytes) {
        self.last_request = Some(self.now);
        self.pending.extend_from_slice(bytes);
        self.admin_next();
    }

    /// Answers the held messages until one needs the adapter.
    fn admin_next(&mut self) {
        while let Phase::Admin { pending: None } = self.phase {
            let (tag, body) = match decode_frame(&self.pending, ADMIN_MESSAGE_MAX) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return,
                Err(e) => return self.fatal(b"08P01", &format!("invalid frontend message: {e}")),
            };
            self.pending.advance(5 + body.len());
            match tag {
                b'Q' => self.admin_query(&body),
                b'X' => return self.admin_terminate(),
                b'P' | b'B' | b'E' | b'D' | b'C' | b'S' | b'H' => {
                    let text = "extended query protocol not supported by admin console";
                    return self.fatal(b"08P01", text);
                }
                other => {
                    let text = format!(
                        "unsupported packet type for admin console: {}",
                        char::from(other)
                    );
                    return self.fatal(b"08P01", &text);
                }
            }
        }
    }

    fn admin_terminate(&mut self) {
        self.out.push_back(ClientOut::Close);
        self.close();
    }

    /// One Query: answered now, or asked of the adapter.
    fn admin_query(&mut self, body: &[u8]) {
        let text = body.strip_suffix(&[0]).unwrap_or(body);
        let text = String::from_utf8_lossy(text);
        let mut buf = BytesMut::new();
        match admin::parse(&text) {
            Ok(command) => match command.request() {
                Some(request) => {
                    self.phase = Phase::Admin {
                        pending: Some(command),
                    };
                    self.out.push_back(ClientOut::Admin(request));
                    return;
                }
                None => admin::answer(command, None, &mut buf),
            },
            Err(message) => {
                let e = admin::AdminError::pooler(message);
                admin::answer(Command::Empty, Some(AdminReply::Failed(e)), &mut buf);
            }
        }
        self.out.push_back(ClientOut::ToClient(buf.freeze()));
    }

    /// The adapter's answer to the [`ClientOut::Admin`] asked last; ignored when none is
    /// awaited (the session closed meanwhile).
    pub fn handle_admin(&mut self, reply: AdminReply) {
        let Phase::Admin { pending } = &mut self.phase else {
            return;
        };
        let Some(command) = pending.take() else {
            return;
        };
        let mut buf = BytesMut::new();
        admin::answer(command, Some(reply), &mut buf);
        self.out.push_back(ClientOut::ToClient(buf.freeze()));
        self.admin_next();
    }
}
