//! A client of the `proxy` scenario as its application sees it: a plan of transactions, the
//! bytes of its next request (written for the session at hand), and what it reads back —
//! whole replies, each command tag in the order it asked, the LSN of its writes, and the
//! errors it may legitimately get (57014 after its own cancel, 57P01 or 08006 when its server
//! died under its transaction; the scenario judges the last two). In session mode its query
//! texts also name its connection (`c3 g1`), it sets and reads back a session variable (it
//! must see its own value or none, never another connection's), and every ROUTE it sends
//! after its server is assigned must be answered with the proxy's NOTICE.

use std::collections::{BTreeSet, VecDeque};

use bytes::BytesMut;
use pgyard_proxy::classes::{MIN_LSN, ROUTE, TAG};
use pgyard_proxy::{CancelKey, ClientAuth, ClientConfig, ClientId, ClientSession, PoolMode, Route};
use pgyard_types::{Instant, Lsn, Rng, RngCore};
use pgyard_wire::auth::LoginRandom;
use pgyard_wire::frame::{decode_frame, Decoded, ProtocolVersion};
use pgyard_wire::frontend;
use pgyard_wire::middleware::encode_middleware;

use super::proxy_cluster::{PATH, ZONE};
use super::proxy_plan::{Kind, Pre, Txn};
use crate::Violation;

/// A bug planted in every client session (see [`crate::planted`]).
pub type Bug = Option<crate::planted::ProxyBug>;

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// The proxy's configuration of every client session of the scenario.
pub(super) fn client_config(pool_mode: PoolMode) -> ClientConfig {
    ClientConfig {
        databases: pgyard_proxy::Databases::Any,
        ..ClientConfig::new(ClientAuth::Trust, pool_mode)
    }
}

/// A session of the proxy as the adapter creates one for a new connection: its cancel key
/// drawn from `rng`, the planted bug switched on.
pub(super) fn new_session(
    now: Instant,
    id: ClientId,
    rng: &mut Rng,
    bug: Bug,
    mode: PoolMode,
) -> ClientSession {
    let mut secret = vec![0u8; 32];
    rng.fill_bytes(&mut secret);
    let key = CancelKey {
        pid: (rng.next_u32() >> 1) as i32,
        secret,
    };
    let random = LoginRandom {
        salt: [0; 4],
        nonce: [0; 18],
        mock_salt: [0; 16],
    };
    #[allow(unused_mut)]
    let mut session = ClientSession::new(now, id, client_config(mode), key, random);
    #[cfg(feature = "planted-bugs")]
    if let Some(b) = bug {
        session = session.with_planted_bug(b);
    }
    #[cfg(not(feature = "planted-bugs"))]
    let _ = bug;
    session
}

/// What a client heard that the scenario must judge.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Heard {
    /// Nothing to judge.
    Nothing,
    /// Its server was lost (57P01 from the server, or the proxy's 08006).
    Loss,
}

/// One request of a client: its bytes, the tags its answer carries, and the MIN_LSN it sent.
pub(super) struct Request {
    /// What is sent, middleware messages included.
    pub(super) bytes: Vec<u8>,
    /// The transaction it belongs to, when it is a transaction's first request.
    pub(super) first_of: Option<u64>,
    /// The MIN_LSN sent before it.
    pub(super) min_lsn: Option<Lsn>,
}

/// A client: its plan, its current session, and what it expects back.
pub(super) struct Client {
    /// Its number (`c3` in query texts).
    pub(super) c: u64,
    /// The proxy's session of its current connection.
    pub(super) session: ClientSession,
    /// Connections opened so far (stale timers name an earlier one).
    pub(super) gen: u32,
    /// What is left to do; the front transaction is under way once `at > 0` or `waiting`.
    pub(super) txns: VecDeque<Txn>,
    /// Requests of the front transaction answered so far.
    pub(super) at: usize,
    /// The StartupMessage is still to be sent on this connection.
    pub(super) startup: bool,
    /// Tags still expected, in order, before the ReadyForQuery that ends the request.
    pub(super) expect: VecDeque<Vec<u8>>,
    /// A request (or the welcome) awaits its ReadyForQuery.
    pub(super) waiting: bool,
    /// Inside a transaction block, as the last ReadyForQuery said.
    pub(super) in_block: bool,
    inbox: Vec<u8>,
    welcomed: bool,
    /// Named statements parsed on this connection.
    parsed: BTreeSet<u8>,
    /// The LSN of its last write.
    pub(super) last_write: Option<Lsn>,
    /// A CancelRequest went out for the request under way.
    pub(super) cancelled: bool,
    /// It heard its server was lost: the proxy must close it.
    pub(super) lost: bool,
    /// It said goodbye (Terminate) after its last transaction.
    pub(super) done: bool,
    /// The proxy runs in session mode.
    session_mode: bool,
    /// Session mode: it set the session variable on this connection.
    set_var: bool,
    /// Session mode: NOTICEs owed for ROUTE messages sent after the server was assigned.
    notices_owed: u32,
    /// It sent a CancelRequest on this connection.
    pub(super) cancel_sent: bool,
    /// Middleware messages sent on this connection, and of them those of a class no one
    /// knows.
    m_sent: (u64, u64),
    /// A request's answer ended since the session's counters were last judged.
    ended: bool,
    /// The `TimeZone` it sends in its StartupMessage, if any.
    startup_zone: Option<String>,
    /// The `options` it sends in its StartupMessage, if any: every server it is lent must
    /// have logged in with them.
    pub(super) startup_options: Option<String>,
    /// Its `TimeZone` on this connection: the startup one or else the servers' login value,
    /// then what its own `settz` set. Its transactions must run with it.
    zone: String,
    /// Its `search_path` on this connection: the servers' login value, then what its own
    /// `setsp` set. Its transactions must run with it.
    path: String,
}

/// The zone a client starts with: the one it sends, as the servers spell it,
/// or the servers' own.
fn spelt(startup_zone: Option<&str>) -> String {
    startup_zone.map_or_else(|| ZONE.to_owned(), super::proxy_cluster::spell_zone)
}

impl Client {
    /// A client with its plan, connecting with `session`.
    pub(super) fn new(
        c: u64,
        session: ClientSession,
        txns: Vec<Txn>,
        session_mode: bool,
        (startup_zone, startup_options): (Option<String>, Option<String>),
    ) -> Client {
        Client {
            zone: spelt(startup_zone.as_deref()),
            startup_zone,
            startup_options,
            path: PATH.to_owned(),
            c,
            session,
            gen: 0,
            txns: txns.into(),
            at: 0,
            startup: true,
            expect: VecDeque::new(),
            waiting: false,
            in_block: false,
            inbox: Vec::new(),
            welcomed: false,
            parsed: BTreeSet::new(),
            last_write: None,
            cancelled: false,
            lost: false,
            done: false,
            session_mode,
            set_var: false,
            notices_owed: 0,
            cancel_sent: false,
            m_sent: (0, 0),
            ended: false,
        }
    }

    /// How its query texts name it: the client, and in session mode its connection too.
    fn who(&self) -> String {
        if self.session_mode {
            format!("c{} g{}", self.c, self.gen)
        } else {
            format!("c{}", self.c)
        }
    }

    /// Whether it has something to send now.
    pub(super) fn ready_to_send(&self) -> bool {
        !self.done && !self.waiting && !self.lost && !self.session.is_closed()
    }

    /// The front transaction, if one is under way (a request sent, or answered).
    pub(super) fn current(&self) -> Option<&Txn> {
        let under_way = self.welcomed && (self.at > 0 || self.waiting);
        self.txns.front().filter(|_| under_way)
    }

    /// Its connection is gone (it left, or the proxy closed it): the transaction under way
    /// is abandoned and a new connection starts with `session`.
    pub(super) fn reconnect(&mut self, session: ClientSession) {
        if self.current().is_some() {
            self.txns.pop_front();
        }
        self.session = session;
        self.m_sent = (0, 0);
        self.ended = false;
        self.gen += 1;
        self.at = 0;
        self.startup = true;
        self.expect.clear();
        self.waiting = false;
        self.in_block = false;
        self.inbox.clear();
        self.welcomed = false;
        self.parsed.clear();
        self.cancelled = false;
        self.lost = false;
        self.set_var = false;
        self.notices_owed = 0;
        self.cancel_sent = false;
        self.zone = spelt(self.startup_zone.as_deref());
        PATH.clone_into(&mut self.path);
    }

    /// Its `TimeZone` on this connection.
    pub(super) fn zone(&self) -> &str {
        &self.zone
    }

    /// Its `search_path` on this connection.
    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// Whether its connection ended in the middle of a message (the proxy had nothing
    /// whole to say: its server died mid-message); it then counts as having heard of the
    /// loss.
    pub(super) fn cut_off(&mut self) -> bool {
        if self.inbox.is_empty() {
            return false;
        }
        self.lost = true;
        true
    }

    /// The next request; `None` when the plan is done (the client then says goodbye).
    pub(super) fn next_request(&mut self) -> Option<Request> {
        if self.startup {
            self.startup = false;
            let mut b = BytesMut::new();
            let mut params: Vec<(&[u8], &[u8])> = vec![(b"user", b"app")];
            if let Some(zone) = &self.startup_zone {
                params.push((b"TimeZone", zone.as_bytes()));
            }
            if let Some(options) = &self.startup_options {
                params.push((b"options", options.as_bytes()));
            }
            let _ = frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b);
            if self.session_mode && (self.c + u64::from(self.gen)) % 2 == 1 {
                // Pipelined behind the StartupMessage: the server is being asked for already,
                // so the proxy ignores it with a NOTICE after the welcome.
                let _ = encode_middleware(ROUTE, b"standby", &mut b);
                self.m_sent.0 += 1;
                self.notices_owed += 1;
            }
            return Some(self.request(b, Vec::new(), None, None));
        }
        let txn = self.txns.front()?.clone();
        let c = self.who();
        let t = txn.n;
        let name = |n: u64| format!("{c} t{t} n{n}").into_bytes();
        let mut b = BytesMut::new();
        let mut min_lsn = None;
        if self.at == 0 {
            for p in &txn.pre {
                if matches!(p, Pre::Route(_)) && self.session_mode {
                    // Ignored once a server is assigned, which is at login in session mode.
                    self.notices_owed += 1;
                }
                self.m_sent.0 += 1;
                self.m_sent.1 += u64::from(matches!(p, Pre::Unknown));
                let _ = match p {
                    Pre::Route(r) => encode_middleware(ROUTE, route_text(*r), &mut b),
                    Pre::Tag => encode_middleware(TAG, b"batch", &mut b),
                    Pre::Unknown => encode_middleware(4_000_000_007, b"someone else's", &mut b),
                };
            }
            if txn.kind == Kind::Read {
                if let Some(lsn) = self.last_write {
                    let _ = encode_middleware(MIN_LSN, lsn.to_string().as_bytes(), &mut b);
                    self.m_sent.0 += 1;
                    min_lsn = Some(lsn);
                }
            }
        }
        let tag = match txn.kind {
            Kind::Simple => query(&mut b, name(0)),
            Kind::Block => match self.at {
                0 => query(&mut b, format!("begin {c} t{t}").into_bytes()),
                3 => query(&mut b, format!("commit {c} t{t}").into_bytes()),
                n => query(&mut b, name(n as u64)),
            },
            Kind::Unnamed => extended(&mut b, b"", true, name(0)),
            Kind::Named(k) => {
                let statement = format!("s{k}").into_bytes();
                let parse = self.parsed.insert(k);
                extended(&mut b, &statement, parse, name(0))
            }
            Kind::Write => query(&mut b, format!("write {c} t{t} n0").into_bytes()),
            Kind::Read => query(&mut b, format!("read {c} t{t} n0").into_bytes()),
            Kind::Sleep { ns } => query(&mut b, format!("sleep {c} t{t} n0 d{ns}").into_bytes()),
            Kind::SetVar => query(&mut b, format!("set {c} t{t} n0").into_bytes()),
            Kind::ShowVar => query(&mut b, format!("show {c} t{t} n0").into_bytes()),
            Kind::SetZone(k) => query(&mut b, format!("settz z{k} {c} t{t} n0").into_bytes()),
            Kind::SetPath(k) => query(&mut b, format!("setsp {k} {c} t{t} n0").into_bytes()),
        };
        let first_of = (self.at == 0).then_some(t);
        Some(self.request(b, vec![tag], first_of, min_lsn))
    }

    fn request(
        &mut self,
        bytes: BytesMut,
        tags: Vec<Vec<u8>>,
        first_of: Option<u64>,
        min_lsn: Option<Lsn>,
    ) -> Request {
        self.expect.extend(tags);
        self.waiting = true;
        Request {
            bytes: bytes.to_vec(),
            first_of,
            min_lsn,
        }
    }

    /// Bytes from the proxy; reads whole replies, and returns what must be judged.
    pub(super) fn read(&mut self, bytes: &[u8]) -> Result<Heard, Violation> {
        self.inbox.extend_from_slice(bytes);
        let mut heard = Heard::Nothing;
        loop {
            let (tag, body) = match decode_frame(&self.inbox, 1 << 20) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return Ok(heard),
                Err(e) => {
                    let detail = format!("c{}: {e}", self.c);
                    return Err(violation("replies-well-formed", detail));
                }
            };
            self.inbox.drain(..5 + body.len());
            if self.reply(tag, &body)? == Heard::Loss {
                heard = Heard::Loss;
            }
        }
    }

    /// One reply frame: the welcome first, then each request's tags in order and its
    /// ReadyForQuery.
    fn reply(&mut self, tag: u8, body: &[u8]) -> Result<Heard, Violation> {
        let c = self.c;
        match tag {
            b'E' => self.error(body),
            b'D' => {
                let kind = self.current().map(|t| t.kind);
                if kind == Some(Kind::Write) {
                    self.last_write = data_row_lsn(body);
                } else if kind == Some(Kind::ShowVar) {
                    self.shown(body)?;
                }
                Ok(Heard::Nothing)
            }
            b'S' => self.setting(body),
            b'N' => {
                if self.notices_owed == 0 {
                    let text = String::from_utf8_lossy(body).replace('\0', " ");
                    let detail = format!("client {c} got a NOTICE it did not expect: {text}");
                    return Err(violation("route-ignored-with-notice", detail));
                }
                self.notices_owed -= 1;
                Ok(Heard::Nothing)
            }
            b'C' => {
                let got = body.strip_suffix(&[0]).unwrap_or(body);
                match self.expect.pop_front() {
                    Some(want) if want == got => Ok(Heard::Nothing),
                    want => Err(violation(
                        "replies-in-order",
                        format!(
                            "client {c} got {:?}, expected {:?}",
                            String::from_utf8_lossy(got),
                            want.map(|w| String::from_utf8_lossy(&w).into_owned())
                        ),
                    )),
                }
            }
            b'Z' => {
                if !self.expect.is_empty() {
                    let detail = format!(
                        "client {c}: ReadyForQuery with {} tags owed",
                        self.expect.len()
                    );
                    return Err(violation("replies-in-order", detail));
                }
                if self.notices_owed > 0 && self.welcomed {
                    let detail = format!(
                        "client {c}: a ROUTE sent once its server was asked for (session mode) got no \
                         NOTICE before the ReadyForQuery"
                    );
                    return Err(violation("route-ignored-with-notice", detail));
                }
                self.ready(body.first().copied());
                Ok(Heard::Nothing)
            }
            _ => Ok(Heard::Nothing),
        }
    }

    /// A ParameterStatus. A `TimeZone` (or `search_path`, likewise) the client hears is its own: in the welcome the one it
    /// sent, as the servers spell it (a direct login reports it so), or else the servers'
    /// login value, afterwards only its own `settz`'s (the proxy's
    /// alignment answers are the proxy's, and what another client set is never shown).
    fn setting(&mut self, body: &[u8]) -> Result<Heard, Violation> {
        let mut parts = body.split(|b| *b == 0);
        let name = parts.next().unwrap_or_default();
        let heard = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
        let kind = self.current().map(|t| t.kind);
        let (own, mine) = match name {
            b"TimeZone" => match kind {
                _ if !self.welcomed => (Some(self.zone.clone()), &self.zone),
                Some(Kind::SetZone(k)) => (Some(format!("z{k}")), &self.zone),
                _ => (None, &self.zone),
            },
            b"search_path" => match kind {
                _ if !self.welcomed => (Some(self.path.clone()), &self.path),
                Some(Kind::SetPath(k)) => (Some(super::proxy_plan::path(k)), &self.path),
                _ => (None, &self.path),
            },
            _ => return Ok(Heard::Nothing),
        };
        if own.as_deref() == Some(heard.as_str()) {
            return Ok(Heard::Nothing);
        }
        let detail = format!(
            "client {} heard {} {heard} (welcomed {}); its own is {mine}, and it expected {own:?}",
            self.c,
            String::from_utf8_lossy(name),
            self.welcomed,
        );
        Err(violation("settings-private", detail))
    }

    /// A ReadyForQuery: the welcome, or the end of the request under way.
    fn ready(&mut self, status: Option<u8>) {
        self.waiting = false;
        self.in_block = status == Some(b'T');
        if !self.welcomed {
            self.welcomed = true;
            return;
        }
        self.cancelled = false;
        self.ended = true;
        if self.txns.front().is_some_and(|t| t.kind == Kind::SetVar) {
            self.set_var = true;
        }
        match self.txns.front().map(|t| t.kind) {
            Some(Kind::SetZone(k)) => self.zone = format!("z{k}"),
            Some(Kind::SetPath(k)) => self.path = super::proxy_plan::path(k),
            _ => {}
        }
        self.at += 1;
        if self.txns.front().is_some_and(|t| self.at >= t.requests()) {
            self.txns.pop_front();
            self.at = 0;
        }
    }

    /// Once a request's answer has ended, the session has counted every middleware message
    /// of the connection, apart those of a class nobody knows (SHOW STATS sums them), and in
    /// transaction mode, where the proxy keeps named statements to rename them, it says it has
    /// those the client parsed (SHOW CLIENTS' `prepared_statements`).
    pub(super) fn judge_counters(&mut self) -> Result<(), Violation> {
        if !std::mem::take(&mut self.ended) {
            return Ok(());
        }
        let c = self.c;
        let st = self.session.stats();
        let counted = (st.middleware, st.unknown_classes);
        if counted != self.m_sent {
            let detail = format!(
                "client {c}: sent {:?} middleware messages (all, unknown class), the session \
                 counted {counted:?}",
                self.m_sent
            );
            return Err(violation("counters-true", detail));
        }
        let prepared = self.session.activity().prepared;
        if !self.session_mode && prepared != self.parsed.len() {
            let detail = format!(
                "client {c}: parsed statements {:?}, the session says it has {prepared}",
                self.parsed
            );
            return Err(violation("counters-true", detail));
        }
        Ok(())
    }

    /// An ErrorResponse: the ones a client may get here, or a broken promise.
    fn error(&mut self, body: &[u8]) -> Result<Heard, Violation> {
        let c = self.c;
        let code = error_code(body);
        let text = String::from_utf8_lossy(body).replace('\0', " ");
        match code.as_slice() {
            b"57P01" | b"08006" => {
                self.lost = true;
                self.expect.clear();
                self.notices_owed = 0;
                Ok(Heard::Loss)
            }
            b"42P05" => Err(violation(
                "session-state-private",
                format!("client {c} found another connection's statement: {text}"),
            )),
            b"57014" => {
                let sleeping = self
                    .current()
                    .is_some_and(|t| matches!(t.kind, Kind::Sleep { .. }));
                // In session mode the server stays the client's, so a cancel that arrives
                // after its query ended stops the connection's next one, as on a direct
                // connection (transaction mode holds the server back until it is done).
                let late = self.session_mode && self.cancel_sent;
                if !((self.cancelled || late) && sleeping) {
                    let detail = format!(
                        "client {c} got a cancel it did not ask for (cancelled={}): {text}",
                        self.cancelled
                    );
                    return Err(violation("cancel-reaches-only-its-clients-server", detail));
                }
                // The statement's CommandComplete will never come.
                self.expect.pop_front();
                Ok(Heard::Nothing)
            }
            b"26000" => Err(violation(
                "statements-exist-where-bound",
                format!("client {c} got an error: {text}"),
            )),
            _ => Err(violation(
                "no-errors",
                format!("client {c} got an error: {text}"),
            )),
        }
    }
}

impl Client {
    /// Session mode: the session variable it read back must be its own, or none if it
    /// never set one on this connection.
    fn shown(&mut self, body: &[u8]) -> Result<(), Violation> {
        let len = body
            .get(2..6)
            .map_or(0, |b| i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        let end = 6 + usize::try_from(len).unwrap_or(0);
        let got = String::from_utf8_lossy(body.get(6..end).unwrap_or_default()).into_owned();
        let want = if self.set_var {
            format!("c{} g{}", self.c, self.gen)
        } else {
            "none".to_owned()
        };
        if got != want {
            let detail = format!(
                "client {} connection {} read the session variable as {got:?}, expected {want:?}",
                self.c, self.gen
            );
            return Err(violation("session-state-private", detail));
        }
        Ok(())
    }
}

fn route_text(r: Route) -> &'static [u8] {
    match r {
        Route::Primary => b"primary",
        Route::Standby => b"standby",
        Route::Any => b"any",
    }
}

/// A simple query; its command tag is its text.
fn query(b: &mut BytesMut, text: Vec<u8>) -> Vec<u8> {
    let _ = frontend::encode_query(&text, b);
    text
}

/// An extended-protocol round of `statement` with the text as its parameter (the server
/// answers with the parameter as its tag).
fn extended(b: &mut BytesMut, statement: &[u8], parse: bool, param: Vec<u8>) -> Vec<u8> {
    if parse {
        let _ = frontend::encode_parse(statement, b"select $1", &[25], b);
    }
    let _ = frontend::encode_bind(b"", statement, &[], &[Some(&param)], &[], b);
    let _ = frontend::encode_describe(frontend::Target::Portal, b"", b);
    let _ = frontend::encode_execute(b"", 0, b);
    frontend::encode_sync(b);
    param
}

/// The SQLSTATE of an ErrorResponse body.
fn error_code(body: &[u8]) -> Vec<u8> {
    let mut rest = body;
    while let Some((&kind, tail)) = rest.split_first() {
        if kind == 0 {
            break;
        }
        let end = tail.iter().position(|&b| b == 0).unwrap_or(tail.len());
        if kind == b'C' {
            return tail[..end].to_vec();
        }
        rest = tail.get(end + 1..).unwrap_or_default();
    }
    Vec::new()
}

/// The LSN in the one text column of a DataRow.
fn data_row_lsn(body: &[u8]) -> Option<Lsn> {
    let len = i32::from_be_bytes(body.get(2..6)?.try_into().ok()?);
    let text = body.get(6..6 + usize::try_from(len).ok()?)?;
    std::str::from_utf8(text).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_code_and_a_data_row_lsn_are_read_back() {
        let mut b = BytesMut::new();
        let fields: [(u8, &[u8]); 3] = [(b'S', b"FATAL"), (b'C', b"57P01"), (b'M', b"bye")];
        pgyard_wire::error_fields::encode_error_response(&fields, &mut b).expect("E");
        assert_eq!(error_code(&b[5..]), b"57P01");
        assert_eq!(error_code(b"SERROR\0\0"), b"");
        let mut d = BytesMut::new();
        pgyard_wire::backend::encode_data_row(&[Some(b"1/2A".as_slice())], &mut d).expect("D");
        assert_eq!(data_row_lsn(&d[5..]), Some(Lsn(0x1_0000_002A)));
        assert_eq!(data_row_lsn(&[0, 1]), None);
    }

    #[test]
    fn a_read_after_a_write_carries_min_lsn_and_a_new_connection_parses_again() {
        let mut rng = pgyard_types::rng_from_seed(3);
        let session = new_session(
            Instant(0),
            ClientId(0),
            &mut rng,
            None,
            PoolMode::Transaction,
        );
        let txn = |n, kind| Txn {
            n,
            pre: Vec::new(),
            kind,
            cancel_after: None,
            leave_after: None,
        };
        let plan = vec![
            txn(0, Kind::Named(1)),
            txn(1, Kind::Read),
            txn(2, Kind::Named(1)),
        ];
        let mut c = Client::new(4, session, plan, false, (None, None));
        let startup = c.next_request().expect("startup");
        assert!(startup.first_of.is_none() && c.waiting);
        c.read(&[b'Z', 0, 0, 0, 5, b'I']).expect("welcome");
        let first = c.next_request().expect("named");
        assert_eq!(first.bytes[0], b'P', "parsed on first use");
        c.read(&[b'Z', 0, 0, 0, 5, b'I'])
            .expect_err("its tag is owed");
        c.expect.clear();
        c.read(&[b'Z', 0, 0, 0, 5, b'I']).expect("done");
        c.last_write = Some(Lsn(0x500));
        let read = c.next_request().expect("read");
        assert_eq!((read.first_of, read.min_lsn), (Some(1), Some(Lsn(0x500))));
        assert_eq!(read.bytes[0], b'M');
        c.reconnect(new_session(
            Instant(0),
            ClientId(1),
            &mut rng,
            None,
            PoolMode::Transaction,
        ));
        assert_eq!(c.txns.len(), 1, "the read under way is abandoned");
        c.next_request().expect("startup again");
        c.read(&[b'Z', 0, 0, 0, 5, b'I']).expect("welcome");
        let again = c.next_request().expect("named again");
        assert_eq!(again.bytes[0], b'P', "a new connection parses again");
    }

    /// A ParameterStatus `TimeZone` body.
    fn zone_status(value: &str) -> Vec<u8> {
        let mut b = BytesMut::new();
        let status = pgyard_wire::backend::ParameterStatus {
            name: b"TimeZone",
            value: value.as_bytes(),
        };
        status.encode(&mut b).expect("S");
        b.to_vec()
    }

    #[test]
    fn a_client_hears_only_its_own_time_zone() {
        let mut rng = pgyard_types::rng_from_seed(5);
        let mode = PoolMode::Transaction;
        let session = new_session(Instant(0), ClientId(0), &mut rng, None, mode);
        let plan = vec![Txn {
            n: 0,
            pre: Vec::new(),
            kind: Kind::SetZone(2),
            cancel_after: None,
            leave_after: None,
        }];
        let mut c = Client::new(1, session, plan, false, (Some("z1".into()), None));
        let startup = c.next_request().expect("startup");
        assert!(String::from_utf8_lossy(&startup.bytes).contains("TimeZone\0z1"));
        let wrong = c.read(&zone_status(ZONE));
        assert_eq!(wrong.map_err(|v| v.invariant), Err("settings-private"));
        c.inbox.clear();
        c.read(&zone_status("z1")).expect("its startup zone");
        c.read(&[b'Z', 0, 0, 0, 5, b'I']).expect("welcome");
        let set = c.next_request().expect("settz");
        assert!(String::from_utf8_lossy(&set.bytes).contains("settz z2 c1 t0 n0"));
        assert_eq!(c.zone(), "z1", "until the answer comes");
        c.read(&zone_status("z2")).expect("its own settz");
        c.expect.clear();
        c.read(&[b'Z', 0, 0, 0, 5, b'I']).expect("done");
        assert_eq!(c.zone(), "z2");
        let late = c.read(&zone_status("z3"));
        assert_eq!(late.map_err(|v| v.invariant), Err("settings-private"));
    }
}
