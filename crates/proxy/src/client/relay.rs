//! After login: client frames are held until a server is lent, then relayed both ways; the
//! server's ReadyForQuery says when a transaction ends and the server can go back.

use bytes::{Bytes, BytesMut};
use pgyard_types::Instant;
use pgyard_wire::backend::TransactionStatus;
use pgyard_wire::error_fields::{encode_notice_response, OwnedErrorFields};
use pgyard_wire::frontend::encode_query;

use pgyard_wire::frame::{decode_frame, Decoded};

use super::prepared::{self, Rewrite};
use super::{params, Alignment, ClientOut, ClientSession, Lent, Phase, PoolMode};
use crate::scan::Frame;

/// Largest client message in transaction mode, where messages are read whole.
pub const CLIENT_FRAME_MAX: usize = 64 << 20;
use crate::classes::{directive, Directive, Route};

impl ClientSession {
    /// A middleware message: consumed here, never forwarded.
    pub(super) fn middleware(&mut self, class: i64, payload: &[u8]) {
        self.stats.middleware += 1;
        match directive(class, payload) {
            Ok(Directive::Route(r)) => {
                // In session mode the server is asked for at login: a ROUTE read while the
                // welcome waits for it comes too late to choose the pool.
                let assigned = matches!(
                    self.phase,
                    Phase::Welcome | Phase::Active | Phase::Aligning(_)
                );
                if self.config.pool_mode == PoolMode::Session && assigned {
                    let text = "ROUTE ignored: in session mode the route is fixed once a server is assigned";
                    self.notice(text);
                } else {
                    self.route = r;
                }
            }
            Ok(Directive::MinLsn(lsn)) => self.min_lsn = Some(lsn),
            Ok(Directive::Tag(t)) => {
                self.tag = Some(t);
                self.labels = self.labels.wrapping_add(1);
            }
            Ok(Directive::Unknown(_)) => self.stats.unknown_classes += 1,
            Err(text) => self.fatal(b"08P01", &text),
        }
    }

    fn notice(&mut self, text: &str) {
        let mut buf = BytesMut::new();
        let fields: [(u8, &[u8]); 4] = [
            (b'S', b"NOTICE"),
            (b'V', b"NOTICE"),
            (b'C', b"00000"),
            (b'M', text.as_bytes()),
        ];
        if encode_notice_response(&fields, &mut buf).is_err() {
            return;
        }
        // Inside a server frame the notice would be read as that frame's rest; before the
        // welcome, libpq would take it for a broken authentication exchange. While the
        // settings are aligned the server's stream is the proxy's, not the client's (which
        // stands between frames): held then, it would reach the client only after the reply
        // to the request that came with it.
        let aligning = matches!(self.phase, Phase::Aligning(_));
        let mid_frame = self.server.is_some() && !aligning && !self.server_scan.at_boundary();
        let welcome = matches!(
            self.phase,
            Phase::Welcome | Phase::Aligning(Alignment { welcome: true, .. })
        );
        if mid_frame || welcome {
            self.held_notices.extend_from_slice(&buf);
        } else {
            self.out.push_back(ClientOut::ToClient(buf.freeze()));
        }
    }

    /// The notices held back, once the server's stream to the client stands between frames.
    fn release_notices(&mut self) {
        if !self.held_notices.is_empty() && self.server_scan.at_boundary() {
            let held = self.held_notices.split().freeze();
            self.out.push_back(ClientOut::ToClient(held));
        }
    }

    /// Typed client frames after login.
    pub(super) fn client_frames(&mut self, now: Instant, bytes: Bytes) {
        self.now = self.now.max(now);
        self.last_request = Some(self.now);
        if self.config.pool_mode == PoolMode::Transaction {
            return self.whole_frames(bytes);
        }
        let scanned = match self.client_scan.scan(bytes) {
            Ok(s) => s,
            Err(e) => return self.fatal(b"08P01", &format!("invalid frontend message: {e}")),
        };
        let mut from = 0;
        let mut terminate = false;
        for f in &scanned.frames {
            if f.tag == b'X' {
                // Terminate is the proxy's: the server stays for the next client. The scanner
                // holds one until whole (`Scanner::holding`), so it starts in this chunk.
                let start = f.start.unwrap_or(0);
                self.forward(&scanned.bytes.slice(from..start));
                from = f.end;
                terminate = true;
            } else {
                self.count(f.tag);
            }
        }
        if from < scanned.bytes.len() {
            self.forward(&scanned.bytes.slice(from..));
        }
        if terminate {
            self.terminate();
        }
    }

    /// What a client message means for the replies owed.
    fn count(&mut self, tag: u8) {
        // A message starts the query and the transaction it belongs to, unless one runs.
        self.query_start.get_or_insert(self.now);
        self.xact_start.get_or_insert(self.now);
        let (owed, unsynced) = owes(tag);
        self.outstanding += owed;
        if let Some(u) = unsynced {
            self.unsynced = u;
        }
    }

    fn terminate(&mut self) {
        if self.is_closed() {
            return;
        }
        self.release_for_good();
        self.out.push_back(ClientOut::Close);
        self.close();
    }

    /// Transaction mode: whole frames, since a named statement's messages are rewritten for
    /// the server they land on. The frames are slices of what was read; only a frame cut
    /// across reads is copied (into `client_buf`, until its end comes).
    fn whole_frames(&mut self, bytes: Bytes) {
        let data = if self.client_buf.is_empty() {
            bytes
        } else {
            self.client_buf.extend_from_slice(&bytes);
            self.client_buf.split().freeze()
        };
        let mut at = 0;
        loop {
            let rest = data.get(at..).unwrap_or_default();
            let (tag, len) = match decode_frame(rest, CLIENT_FRAME_MAX) {
                Ok(Decoded::Frame(f)) => (f.tag, 5 + f.body.len()),
                Ok(Decoded::NeedMore { .. }) => break,
                Err(e) => {
                    return self.fatal(b"08P01", &format!("invalid frontend message: {e}"));
                }
            };
            if tag == b'X' {
                self.forward(&data.slice(..at));
                return self.terminate();
            }
            self.count(tag);
            at += len;
        }
        self.client_buf
            .extend_from_slice(data.get(at..).unwrap_or_default());
        self.forward(&data.slice(..at));
    }

    /// Client bytes for the server: sent now, or held until a server is lent and aligned.
    fn forward(&mut self, bytes: &Bytes) {
        if bytes.is_empty() {
            return;
        }
        match self.phase {
            Phase::Active => self.send(bytes),
            Phase::Idle => {
                self.pending.extend_from_slice(bytes);
                self.phase = Phase::Waiting;
                self.acquire(self.route);
            }
            _ => self.pending.extend_from_slice(bytes),
        }
    }

    /// Sends client bytes to the lent server: as they are in session mode; in transaction
    /// mode frame by frame, named statements renamed for this server.
    fn send(&mut self, bytes: &Bytes) {
        if self.config.pool_mode == PoolMode::Session {
            self.out.push_back(ClientOut::ToServer(bytes.clone()));
            return;
        }
        #[cfg(feature = "planted-bugs")]
        self.prepared
            .set_forgetful(self.planted(super::PlantedBug::ForgetStatementOnNewServer));
        let Some(server) = self.server.as_mut() else {
            return;
        };
        self.prepared.set_failed_block(self.status == b'E');
        // Copied only from the first frame that is rewritten: most are sent as they came.
        let mut out: Option<BytesMut> = None;
        let mut at = 0;
        // `bytes` holds whole frames only (they were read whole).
        while let Ok(Decoded::Frame(f)) = decode_frame(&bytes[at..], usize::MAX) {
            let len = 5 + f.body.len();
            let rewrite = self.prepared.client_frame(
                f.tag,
                Some(f.body),
                &mut server.prepared,
                &mut self.seq,
            );
            match rewrite {
                Ok(Rewrite::Keep) => {
                    if let Some(out) = out.as_mut() {
                        out.extend_from_slice(&bytes[at..at + len]);
                    }
                }
                Ok(Rewrite::Replace(b)) => {
                    let out = out.get_or_insert_with(|| {
                        let mut o = BytesMut::with_capacity(bytes.len() + b.len());
                        o.extend_from_slice(&bytes[..at]);
                        o
                    });
                    out.extend_from_slice(&b);
                }
                Err(text) => return self.fatal(b"08P01", &text),
            }
            at += len;
        }
        match out {
            Some(out) if !out.is_empty() => self.out.push_back(ClientOut::ToServer(out.freeze())),
            Some(_) => {}
            None if at > 0 => self.out.push_back(ClientOut::ToServer(bytes.slice(..at))),
            None => {}
        }
        self.inject(Vec::new());
    }

    /// Writes the proxy's own replies that are due.
    fn inject(&mut self, mut due: Vec<&'static [u8]>) {
        self.prepared.injections(&mut due);
        if !due.is_empty() {
            let bytes: Vec<u8> = due.concat();
            self.out.push_back(ClientOut::ToClient(Bytes::from(bytes)));
        }
    }

    /// The pool lends `server` (answering [`ClientOut::Acquire`]).
    pub fn handle_server(&mut self, now: Instant, server: Lent) {
        self.now = self.now.max(now);
        if self.is_closed() {
            self.out.push_back(ClientOut::Release {
                server,
                reusable: true,
            });
            return;
        }
        // A server that has become a standby since it was opened (a demoted primary) never
        // serves `primary`: it goes back as unusable, and another is asked for.
        let asked = self.asked.take();
        if let Some(route) = asked.filter(|r| *r == Route::Primary) {
            if server.in_recovery() == Some(true) {
                self.out.push_back(ClientOut::Release {
                    server,
                    reusable: false,
                });
                return self.acquire(route);
            }
        }
        if let Some(since) = self.wait_since.take() {
            let waited = self.now.saturating_duration_since(since);
            self.stats.wait_us = self.stats.wait_us.saturating_add(micros(waited));
        }
        self.stats.assignments += 1;
        let welcome = matches!(self.phase, Phase::Welcome);
        self.server = Some(server);
        self.status = b'I';
        self.min_lsn = None;
        if welcome {
            self.forget_unreported();
            self.login_values_unless_sent();
        }
        // The welcome's server first takes the client's startup values, so that the login
        // fails where a direct one would and the client is shown them as the server spells
        // them (libpq-era drivers send `DateStyle=ISO`, which a server reports as
        // `ISO, MDY`: compared as sent, every transaction would set it again).
        let queries = self.alignment(welcome);
        if queries.is_empty() {
            return if welcome {
                self.welcome(true)
            } else {
                self.go_active()
            };
        }
        let mut buf = BytesMut::new();
        let mut readies = 0;
        for sql in &queries {
            if encode_query(sql.as_bytes(), &mut buf).is_ok() {
                readies += 1;
            }
        }
        self.out.push_back(ClientOut::ToServer(buf.freeze()));
        self.phase = Phase::Aligning(Alignment {
            welcome,
            failed: None,
            readies,
        });
    }

    /// The query strings the lent server needs to have the client's settings (none when it
    /// has them; see `params::alignment_queries`). In
    /// transaction mode a server found aligned before is skipped while neither side's
    /// settings changed since (most transactions land on a server the client has used).
    fn alignment(&mut self, welcome: bool) -> Vec<String> {
        let Some(server) = self.server.as_ref() else {
            return Vec::new();
        };
        let remember = self.shortcuts && self.config.pool_mode == PoolMode::Transaction;
        #[allow(unused_mut)]
        let mut settings = &server.settings;
        #[cfg(feature = "planted-bugs")]
        let made;
        #[cfg(feature = "planted-bugs")]
        if self.planted(super::PlantedBug::TrustServerAlignedOnce) {
            // The server's changes uncounted: once found aligned, it stays so.
            made = server.settings.without_history();
            settings = &made;
        }
        if remember && self.verified.holds(&self.wanted, server.id, settings) {
            return Vec::new();
        }
        let queries = if welcome {
            params::welcome_alignment_queries(&self.wanted, &server.settings)
        } else {
            params::alignment_queries(&self.wanted, &server.settings)
        };
        if queries.is_empty() && remember {
            self.verified.record(server.id, settings);
        }
        queries
    }

    /// The pool could not lend a server (its wait timed out): the client gets the error.
    pub fn handle_refused(&mut self, message: &str) {
        self.wait_since = None;
        if !self.is_closed() {
            self.fatal(b"08P01", message);
        }
    }

    /// The pool's server refused what the client asked for (its database, its `options`):
    /// the client gets the server's ErrorResponse, every field as the server sent it, after
    /// AuthenticationOk if it was still waiting for its welcome, as a direct login answers
    /// (`3D000 database "x" does not exist`; `22023 invalid value for parameter …` with the
    /// server's HINT), and the connection closes.
    pub fn handle_refused_as(&mut self, answer: &OwnedErrorFields) {
        self.wait_since = None;
        let fields = answer.fields();
        let fields: Vec<(u8, &[u8])> = fields.iter().map(|(c, v)| (c.byte(), v)).collect();
        self.fatal_fields(matches!(self.phase, Phase::Welcome), &fields);
    }

    /// The alignment's ReadyForQuery came; `rest` followed it in the same chunk.
    fn aligned(&mut self, rest: Bytes) {
        let Phase::Aligning(alignment) = std::mem::replace(&mut self.phase, Phase::Active) else {
            return;
        };
        if let Some(error) = alignment.failed {
            return self.refused_settings(alignment.welcome, &error);
        }
        if alignment.welcome {
            self.take_server_spelling();
            // A frame begun after the ReadyForQuery may be held whole in the scanner.
            self.welcome(rest.is_empty() && self.server_scan.at_boundary());
            if self.config.pool_mode == PoolMode::Transaction {
                // The server went back (unusable if it said more): nothing it said is the
                // client's.
                return;
            }
        } else {
            self.go_active();
        }
        // What the server said after the alignment's end was said between requests.
        if !rest.is_empty() && !self.is_closed() {
            self.out.push_back(ClientOut::ToClient(rest));
        }
    }

    /// Startup values of the settings tracked only where reported (`search_path`, which
    /// PostgreSQL 17 does not report) that the welcome's server does not report: neither
    /// shown nor set.
    fn forget_unreported(&mut self) {
        let Some(server) = self.server.as_ref() else {
            return;
        };
        for name in &params::TRACKED[params::CARRIED..] {
            if server.settings.get(name).is_none() {
                self.wanted.forget(name);
            }
        }
    }

    /// The settings a client carries that it did not send at startup: the welcome's server's
    /// login values, which it will be shown. Wanted before the welcome's alignment, so that
    /// a server another client left with other values (its `client_encoding` above all, in
    /// which the server reads the values the client did send) is set back before the welcome.
    fn login_values_unless_sent(&mut self) {
        let Some(server) = self.server.as_ref() else {
            return;
        };
        #[cfg(feature = "planted-bugs")]
        let current = self.planted(super::PlantedBug::WelcomeShowsCurrentSettings);
        #[cfg(not(feature = "planted-bugs"))]
        let current = false;
        for name in &params::TRACKED[..params::CARRIED] {
            if self.wanted.get(name).is_some() {
                continue;
            }
            let value = if current {
                server.settings.tracked(name)
            } else {
                server.settings.login_value(name)
            };
            if let Some(value) = value {
                self.wanted.insert((*name).to_owned(), value.clone());
            }
        }
    }

    /// After the welcome's alignment: the client's startup values are shown and compared
    /// from now on as the server spells them (`ISO, MDY` for `ISO`, `UTF8` for `utf8`), which
    /// is what a direct login reports and what every later report will say.
    fn take_server_spelling(&mut self) {
        #[cfg(feature = "planted-bugs")]
        if self.planted(super::PlantedBug::WelcomeShowsClientSpelling) {
            return;
        }
        let Some(server) = self.server.as_ref() else {
            return;
        };
        let names: Vec<String> = self.wanted.iter().map(|(n, _)| n.clone()).collect();
        for name in names {
            if let Some(value) = server.settings.tracked(&name) {
                self.wanted.insert(name, value.clone());
            }
        }
    }

    /// The server refused the client's settings (a value it does not know, which a direct
    /// login would have refused at startup, or which this server does not take though
    /// another did): the client cannot have its session here and is ended with the server's
    /// own error, made FATAL — after an AuthenticationOk at the welcome, as a server that
    /// refuses a startup setting sends one first. The failed query's `SET`s changed nothing
    /// (the statements of one query string roll back together; an encoding set by the query
    /// before it was reported and is in the server's record), so the server goes back clean.
    fn refused_settings(&mut self, welcome: bool, error: &[u8]) {
        if welcome {
            let mut buf = BytesMut::new();
            let _ = pgyard_wire::backend::Authentication::Ok.encode(&mut buf);
            self.out.push_back(ClientOut::ToClient(buf.freeze()));
        }
        let fields = pgyard_wire::error_fields::ErrorFields::decode(error).ok();
        let field = |code: u8| fields.and_then(|f| f.get(code));
        let code = field(b'C').unwrap_or(b"08P01");
        let message = field(b'M').map(String::from_utf8_lossy);
        let message = message.unwrap_or("the server refused the client's session settings".into());
        // What the client sent meanwhile was held, never sent: the server owes it nothing.
        self.pending.clear();
        self.outstanding = 0;
        self.unsynced = false;
        self.fatal(code, &message);
    }

    fn go_active(&mut self) {
        self.phase = Phase::Active;
        if !self.pending.is_empty() {
            let held = self.pending.split().freeze();
            self.send(&held);
        }
    }

    /// Bytes from the lent server.
    pub fn handle_server_bytes(&mut self, now: Instant, data: Bytes) {
        if self.server.is_none() {
            return;
        }
        self.now = self.now.max(now);
        let Err(data) = self.whole_reply(data) else {
            return;
        };
        let frames = std::mem::take(&mut self.server_frames);
        let scanned = match self.server_scan.scan_reusing(data, frames) {
            Ok(s) => s,
            Err(e) => {
                let text = format!("server sent an invalid message: {e}");
                self.outstanding = u32::MAX;
                return self.fatal(b"08P01", &text);
            }
        };
        let mut frames = scanned.frames;
        self.relay_server_frames(scanned.bytes, &frames);
        // Cleared now, so the captured bodies do not keep the chunk alive.
        frames.clear();
        self.server_frames = frames;
    }

    /// The frames of one server chunk (`bytes`), relayed to the client.
    fn relay_server_frames(&mut self, bytes: Bytes, frames: &[Frame]) {
        let aligning = matches!(self.phase, Phase::Aligning(_));
        let mut ready_at = None;
        // Transaction mode: the ReadyForQuery that ends the transaction. What follows it in
        // the chunk was said by a server between transactions (a shutdown's FATAL): it is
        // not the client's, and the server goes back unusable.
        let mut ended_at = None;
        let rewriting = !aligning && self.config.pool_mode == PoolMode::Transaction;
        // Transaction mode: the proxy's own replies go in, its added messages' replies out.
        let mut edits: Vec<(usize, usize, Vec<&'static [u8]>)> = Vec::new();
        for f in frames {
            let body = f.body.as_deref().unwrap_or_default();
            match f.tag {
                b'S' => self.note_setting(body, aligning),
                b'E' if aligning => {
                    // Its text when it came whole in this chunk (a SET's error is short).
                    let text = f.start.map(|s| bytes.slice(s + 5..f.end));
                    if let Phase::Aligning(a) = &mut self.phase {
                        a.failed.get_or_insert(text.unwrap_or_default());
                    }
                }
                b'Z' if aligning => {
                    if let Phase::Aligning(a) = &mut self.phase {
                        a.readies = a.readies.saturating_sub(1);
                        if a.readies > 0 {
                            continue;
                        }
                    }
                    ready_at = Some(f.end);
                    break;
                }
                b'Z' => {
                    self.outstanding = self.outstanding.saturating_sub(1);
                    self.status = body.first().copied().unwrap_or(b'E');
                    self.time_ready();
                    if self.releases_at_ready() && self.transaction_done() {
                        ended_at = Some(f.end);
                    }
                }
                b'C' => {
                    if let Some(s) = self.server.as_mut() {
                        prepared::Prepared::command_complete(body, &mut s.prepared);
                    }
                }
                _ => {}
            }
            if rewriting {
                let Some(server) = self.server.as_mut() else {
                    break;
                };
                let mut due = Vec::new();
                let keep = self
                    .prepared
                    .server_frame(f.tag, &mut server.prepared, &mut due);
                if !keep || !due.is_empty() {
                    let start = if keep { f.end } else { f.start.unwrap_or(0) };
                    edits.push((start, f.end, due));
                }
            }
            if ended_at.is_some() {
                break;
            }
        }
        if aligning {
            if let Some(end) = ready_at {
                self.aligned(bytes.slice(end..));
            }
            return;
        }
        let Some(end) = ended_at else {
            let bytes = apply(bytes, &edits);
            self.out.push_back(ClientOut::ToClient(bytes));
            self.release_notices();
            return;
        };
        let idle_talk = end < bytes.len() || !self.server_scan.at_boundary();
        let bytes = apply(bytes.slice(..end), &edits);
        self.out.push_back(ClientOut::ToClient(bytes));
        if idle_talk {
            // The next server's bytes start at a frame boundary.
            self.server_scan = super::server_scanner();
        }
        self.release_at_transaction_end(!idle_talk);
    }

    /// A ParameterStatus: the server has it now, and (outside alignment) the client saw it.
    pub(super) fn note_setting(&mut self, body: &[u8], aligning: bool) {
        let Some((name, value)) = params::parameter_status(body) else {
            return;
        };
        if let Some(s) = self.server.as_mut() {
            s.settings.report(name.clone(), value.clone());
        }
        if !aligning && params::tracked(&name).is_some() {
            if name == "application_name" && self.wanted.get(&name) != Some(&value) {
                self.labels = self.labels.wrapping_add(1);
            }
            self.wanted.insert(name, value);
        }
    }

    /// A ReadyForQuery of the client's: a query ended, and with status `I` a transaction.
    /// With more messages owed, the next ones are taken to start now.
    pub(super) fn time_ready(&mut self) {
        let now = self.now;
        let more = self.outstanding > 0;
        self.stats.queries += 1;
        if let Some(start) = self.query_start.take() {
            let took = micros(now.saturating_duration_since(start));
            self.stats.query_us = self.stats.query_us.saturating_add(took);
        }
        if more {
            self.query_start = Some(now);
        }
        if self.status == TransactionStatus::Idle.byte() {
            if let Some(start) = self.xact_start.take() {
                self.stats.xacts += 1;
                let took = micros(now.saturating_duration_since(start));
                self.stats.xact_us = self.stats.xact_us.saturating_add(took);
            }
            if more {
                self.xact_start = Some(now);
            }
        }
    }

    /// Whether the server goes back when a transaction ends: in transaction mode only (in
    /// session mode the client's session state lives on it until it leaves).
    fn releases_at_ready(&self) -> bool {
        #[cfg(feature = "planted-bugs")]
        if self.planted(super::PlantedBug::ReleaseSessionAtReady) {
            return true;
        }
        self.config.pool_mode == PoolMode::Transaction
    }

    /// At a ReadyForQuery: whether the transaction is over, nothing outstanding and no
    /// transaction open.
    fn transaction_done(&self) -> bool {
        #[allow(unused_mut)]
        let mut idle = self.status == TransactionStatus::Idle.byte();
        #[cfg(feature = "planted-bugs")]
        if self.planted(super::PlantedBug::ReleaseInTransaction) {
            idle |= self.status == TransactionStatus::InTransaction.byte();
        }
        idle && self.outstanding == 0 && !self.unsynced
    }

    /// The transaction is over: the server goes back to the pool (`reusable` unless it said
    /// something after it).
    pub(super) fn release_at_transaction_end(&mut self, reusable: bool) {
        self.stats.transactions += 1;
        self.prepared.reset_queue();
        if let Some(server) = self.server.take() {
            self.out.push_back(ClientOut::Release { server, reusable });
        }
        self.phase = Phase::Idle;
        if self.draining {
            self.shut();
        }
    }

    /// Gives the server back between transactions: unusable when it said something nobody
    /// asked for (a shutdown's FATAL), whose rest the scanner must not carry over.
    pub(super) fn release_between_transactions(&mut self, reusable: bool) {
        self.prepared.reset_queue();
        if let Some(server) = self.server.take() {
            self.out.push_back(ClientOut::Release { server, reusable });
        }
        if !reusable {
            self.server_scan = super::server_scanner();
        }
    }

    /// The lent server's connection broke. Inside a transaction (or with a reply owed) the
    /// client cannot know what happened, so it gets an error and is disconnected, as a direct
    /// connection would be; otherwise it never notices.
    pub fn handle_server_gone(&mut self) {
        let Some(server) = self.server.take() else {
            return;
        };
        self.prepared.reset_queue();
        self.out.push_back(ClientOut::Release {
            server,
            reusable: false,
        });
        if matches!(self.phase, Phase::Aligning(Alignment { welcome: true, .. })) {
            // Nothing of the client's reached it: the welcome waits for another server.
            self.server_scan = super::server_scanner();
            self.phase = Phase::Welcome;
            return self.acquire(self.route);
        }
        let owed = self.outstanding > 0 || self.unsynced || self.status != b'I';
        let session = self.config.pool_mode == PoolMode::Session;
        // Header bytes held back never reached the client.
        let whole = !self.server_scan.inside_frame();
        self.server_scan = super::server_scanner();
        if (owed || session || !self.pending.is_empty()) && !whole {
            // The server's last message reached the client only in part: a message of the
            // proxy's own would be read as its rest. The connection ends without a word, as
            // it would have from the server.
            self.pending.clear();
            self.out.push_back(ClientOut::Close);
            self.close();
        } else if owed || session || !self.pending.is_empty() {
            let text = "server connection lost; the transaction's outcome is unknown";
            self.fatal(b"08006", text);
        } else {
            self.phase = Phase::Idle;
            if self.draining {
                self.shut();
            }
        }
    }
}

/// What a client message of type `tag` changes in the replies owed: ReadyForQuerys added,
/// and whether an extended-protocol message now awaits its Sync (`None`: unchanged).
pub(super) fn owes(tag: u8) -> (u32, Option<bool>) {
    match tag {
        b'Q' | b'F' => (1, None),
        b'S' => (1, Some(false)),
        b'P' | b'B' | b'D' | b'E' | b'C' | b'H' => (0, Some(true)),
        _ => (0, None),
    }
}

/// Whole microseconds of `d`, saturating.
fn micros(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// `bytes` with each edit's range `[start, end)` removed and its injected replies put in its
/// place (edits in order; a kept frame has an empty range at its end).
fn apply(bytes: Bytes, edits: &[(usize, usize, Vec<&'static [u8]>)]) -> Bytes {
    if edits.is_empty() {
        return bytes;
    }
    let mut out = BytesMut::with_capacity(bytes.len() + 16);
    let mut at = 0;
    for (start, end, due) in edits {
        out.extend_from_slice(&bytes[at..*start]);
        for d in due {
            out.extend_from_slice(d);
        }
        at = *end;
    }
    out.extend_from_slice(&bytes[at..]);
    out.freeze()
}
