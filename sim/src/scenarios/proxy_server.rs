//! The server side of a pooled connection in the `proxy` scenario, once the connect machine
//! has logged it in: just enough of PostgreSQL's extended and simple query protocol to tell
//! whether the proxy kept its promises. Every query names its client and transaction
//! (`c3 t7 n12`), so a server can say which transaction ran where; its replies echo that text
//! as the command tag, so a client can check that answers come in order. `write …` commits
//! on the primary and answers with the commit LSN; `sleep … dNS` runs until its time is up or
//! a cancel stops it; a change of `in_hot_standby` (a promotion) is reported before the next
//! ReadyForQuery, as PostgreSQL 14 and later report it. In session mode a query text also
//! names its client's connection (`c3 g1 t7 n12`), so a server can tell two sessions apart:
//! the session state it keeps (named statements, a `set` variable) belongs to the session that
//! used it since its last `DISCARD ALL`, and a named statement parsed twice fails with 42P05,
//! as PostgreSQL's does.

use std::collections::{BTreeMap, BTreeSet};

use bytes::BytesMut;
use pgyard_types::Lsn;
use pgyard_wire::backend::{self, ParameterStatus, TransactionStatus};
use pgyard_wire::error_fields::encode_error_response;
use pgyard_wire::frame::{decode_frame, Decoded};
use pgyard_wire::frontend::{Bind, Parse, TargetName};

use super::proxy_cluster::{PATH, ZONE};
use crate::Violation;

/// Where each transaction ran: `(client, txn)` → server.
pub type Placement = BTreeMap<(u64, u64), u64>;

/// What the server's surroundings give it and learn from it during one delivery.
pub struct Ctx<'a> {
    /// Where every transaction ran so far.
    pub placed: &'a mut Placement,
    /// Transactions whose first message reached this server in this delivery, each with the
    /// server's `TimeZone` and `search_path` then.
    pub started: Vec<((u64, u64), String, String)>,
    /// Whether the node is in recovery now (a standby, or a standby being promoted).
    pub in_recovery: bool,
    /// The cluster's WAL position, advanced by a write on the primary.
    pub wal: &'a mut Lsn,
    /// Set when a slow query began: how long it runs.
    pub sleep: Option<u64>,
    /// Session mode: the server each client connection (`(client, generation)`) ran on.
    pub sessions: &'a mut BTreeMap<(u64, u64), u64>,
}

/// A slow query the server is running.
#[derive(Debug)]
struct Running {
    /// Its text, the command tag it ends with.
    text: Vec<u8>,
}

/// One simulated server connection.
#[derive(Debug)]
pub struct FakeServer {
    /// The pool's id of the connection.
    pub id: u64,
    buf: Vec<u8>,
    statements: BTreeSet<Vec<u8>>,
    /// After an error, until the next Sync.
    skipping: bool,
    /// The transaction whose `begin` opened the block the server is in.
    block: Option<(u64, u64)>,
    /// The text the unnamed portal answers with.
    portal: Vec<u8>,
    running: Option<Running>,
    /// The `in_hot_standby` the client side last heard.
    reported_recovery: bool,
    /// Session mode: the client connection that has used it since its last `DISCARD ALL`.
    session: Option<(u64, u64)>,
    /// The session variable (`set …`): the client connection that set it.
    var: Option<(u64, u64)>,
    /// Its `TimeZone` (`settz`, the proxy's `SET TimeZone TO …`, `DISCARD ALL`), and the
    /// value last reported: a change is reported before the next ReadyForQuery, as
    /// PostgreSQL reports a changed `GUC_REPORT` setting.
    zone: String,
    reported_zone: String,
    /// Its `search_path` (`setsp`, the proxy's `set_config`, `DISCARD ALL`), and the value
    /// last reported, likewise.
    path: String,
    reported_path: String,
    /// A transaction it served since its login or its last `DISCARD ALL`.
    served: Option<(u64, u64)>,
}

/// The value inside a string literal's quotes, where a quote can only come doubled (a lone
/// one would end the literal on a real server, and the rest be read as SQL).
fn unquote(inner: &str) -> Option<String> {
    let mut value = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\'' && chars.next() != Some('\'') {
            return None;
        }
        value.push(c);
    }
    Some(value)
}

/// How the proxy's alignment sets `search_path` (a list, which a quoted `SET` would not be).
const SET_PATH: &[u8] = b"SELECT pg_catalog.set_config('search_path', ";

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// The `(client, txn)` a query text names, if any.
pub fn owner(text: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut c = None;
    let mut t = None;
    for word in text.split(' ') {
        if let Some(v) = word.strip_prefix('c') {
            c = v.parse().ok();
        } else if let Some(v) = word.strip_prefix('t') {
            t = v.parse().ok();
        }
    }
    Some((c?, t?))
}

/// The client connection a session-mode query text names (`c3 g1`), if any.
pub fn session_of(text: &[u8]) -> Option<(u64, u64)> {
    let text = std::str::from_utf8(text).ok()?;
    let mut c = None;
    let mut g = None;
    for word in text.split(' ') {
        if let Some(v) = word.strip_prefix('c') {
            c = c.or(v.parse().ok());
        } else if let Some(v) = word.strip_prefix('g') {
            g = v.parse().ok();
        }
    }
    Some((c?, g?))
}

/// The duration a `sleep` query names (`d123` nanoseconds).
fn sleep_ns(text: &[u8]) -> u64 {
    let text = std::str::from_utf8(text).unwrap_or_default();
    text.split(' ')
        .find_map(|w| w.strip_prefix('d').and_then(|v| v.parse().ok()))
        .unwrap_or(0)
}

impl FakeServer {
    /// A fresh connection whose login reported `in_recovery`.
    pub fn new(id: u64, in_recovery: bool) -> Self {
        FakeServer {
            id,
            buf: Vec::new(),
            statements: BTreeSet::new(),
            skipping: false,
            block: None,
            portal: Vec::new(),
            running: None,
            reported_recovery: in_recovery,
            session: None,
            var: None,
            zone: ZONE.to_owned(),
            reported_zone: ZONE.to_owned(),
            path: PATH.to_owned(),
            reported_path: PATH.to_owned(),
            served: None,
        }
    }

    /// Why the connection could not serve a new client now: the middle of a message, an
    /// error awaiting its Sync, or a query still running (`None`: it stands clean).
    pub fn mid_protocol(&self) -> Option<&'static str> {
        if !self.buf.is_empty() {
            Some("holds part of a message")
        } else if self.skipping {
            Some("awaits the Sync after an error")
        } else if self.running.is_some() {
            Some("runs a query")
        } else {
            None
        }
    }

    /// The transaction whose block is open on the server, if any.
    pub fn open_block(&self) -> Option<(u64, u64)> {
        self.block
    }

    /// A transaction it served since its login or its last `DISCARD ALL`, if any.
    pub fn served_since_reset(&self) -> Option<(u64, u64)> {
        self.served
    }

    /// Whether a slow query is running.
    pub fn is_running(&self) -> bool {
        self.running.is_some()
    }

    /// Takes bytes from the proxy and answers; records where each transaction ran.
    pub fn receive(
        &mut self,
        bytes: &[u8],
        ctx: &mut Ctx<'_>,
        out: &mut BytesMut,
    ) -> Result<(), Violation> {
        self.buf.extend_from_slice(bytes);
        // A running query holds what follows until it ends, as a backend reads its socket
        // only between commands.
        while self.running.is_none() {
            let (tag, body) = match decode_frame(&self.buf, 1 << 20) {
                Ok(Decoded::Frame(f)) => (f.tag, f.body.to_vec()),
                Ok(Decoded::NeedMore { .. }) => return Ok(()),
                Err(e) => {
                    let detail = format!("server {} got bad bytes: {e}", self.id);
                    return Err(violation("frames-reach-servers-whole", detail));
                }
            };
            self.buf.drain(..5 + body.len());
            self.message(tag, &body, ctx, out)?;
        }
        Ok(())
    }

    /// The slow query ends: done, or stopped by a cancel (57014). The caller then feeds an
    /// empty delivery so that whatever waited behind it is read.
    pub fn finish(&mut self, cancelled: bool, in_recovery: bool, out: &mut BytesMut) {
        let Some(r) = self.running.take() else {
            return;
        };
        if cancelled {
            let fields: [(u8, &[u8]); 4] = [
                (b'S', b"ERROR"),
                (b'V', b"ERROR"),
                (b'C', b"57014"),
                (b'M', b"canceling statement due to user request"),
            ];
            let _ = encode_error_response(&fields, out);
        } else {
            let _ = backend::encode_command_complete(&r.text, out);
        }
        self.ready(in_recovery, out);
    }

    fn place(&mut self, text: &[u8], ctx: &mut Ctx<'_>) -> Result<(), Violation> {
        let Some(key) = owner(text) else {
            return Ok(());
        };
        if let Some(open) = self.block.filter(|b| *b != key) {
            let detail = format!(
                "client {} transaction {} reached server {} inside the block of client {} \
                 transaction {}",
                key.0, key.1, self.id, open.0, open.1
            );
            return Err(violation("transaction-on-one-server", detail));
        }
        if let Some(s) = session_of(text) {
            self.claim(s, ctx)?;
        }
        self.served = Some(key);
        match ctx.placed.insert(key, self.id) {
            Some(other) if other != self.id => Err(violation(
                "transaction-on-one-server",
                format!(
                    "client {} transaction {} ran on server {other} and then on server {}",
                    key.0, key.1, self.id
                ),
            )),
            Some(_) => Ok(()),
            None => {
                ctx.started
                    .push((key, self.zone.clone(), self.path.clone()));
                Ok(())
            }
        }
    }

    /// A session-mode query of client connection `s`: the server must have been reset since
    /// another connection used it, and the connection must have had no other server.
    fn claim(&mut self, s: (u64, u64), ctx: &mut Ctx<'_>) -> Result<(), Violation> {
        if let Some(o) = self.session.filter(|o| *o != s) {
            let detail = format!(
                "server {} served client {} connection {} after client {} connection {} \
                 without a DISCARD ALL between them",
                self.id, s.0, s.1, o.0, o.1
            );
            return Err(violation("reset-between-sessions", detail));
        }
        self.session = Some(s);
        match ctx.sessions.insert(s, self.id) {
            Some(other) if other != self.id => Err(violation(
                "session-on-one-server",
                format!(
                    "client {} connection {} ran on server {other} and then on server {}",
                    s.0, s.1, self.id
                ),
            )),
            _ => Ok(()),
        }
    }

    fn message(
        &mut self,
        tag: u8,
        body: &[u8],
        ctx: &mut Ctx<'_>,
        out: &mut BytesMut,
    ) -> Result<(), Violation> {
        match tag {
            b'M' | b'X' => {
                let detail = format!("server {} received a {} frame", self.id, char::from(tag));
                return Err(violation(
                    "no-middleware-or-terminate-reaches-a-server",
                    detail,
                ));
            }
            b'S' => {
                self.skipping = false;
                self.ready(ctx.in_recovery, out);
            }
            _ if self.skipping => {}
            b'Q' => {
                let text = body.strip_suffix(&[0]).unwrap_or(body);
                if text.starts_with(b"SET ") || text.starts_with(SET_PATH) {
                    self.align(text, out)?;
                    self.ready(ctx.in_recovery, out);
                } else {
                    self.place(text, ctx)?;
                    self.query(text, ctx, out);
                }
            }
            b'P' => {
                let p = Parse::decode(body).map_err(|e| bad(self.id, e))?;
                if !p.name.is_empty() && !self.statements.insert(p.name.to_vec()) {
                    // PostgreSQL's answer to a name the session already holds.
                    let text = format!(
                        "prepared statement \"{}\" already exists",
                        String::from_utf8_lossy(p.name)
                    );
                    let fields: [(u8, &[u8]); 3] =
                        [(b'S', b"ERROR"), (b'C', b"42P05"), (b'M', text.as_bytes())];
                    let _ = encode_error_response(&fields, out);
                    self.skipping = true;
                    return Ok(());
                }
                backend::encode_empty(b'1', out);
            }
            b'B' => {
                let b = Bind::decode(body).map_err(|e| bad(self.id, e))?;
                if !b.statement.is_empty() && !self.statements.contains(b.statement) {
                    let text = format!(
                        "prepared statement \"{}\" does not exist",
                        String::from_utf8_lossy(b.statement)
                    );
                    let fields: [(u8, &[u8]); 3] =
                        [(b'S', b"ERROR"), (b'C', b"26000"), (b'M', text.as_bytes())];
                    let _ = encode_error_response(&fields, out);
                    self.skipping = true;
                    return Ok(());
                }
                let param = b.params.iter().next().flatten().unwrap_or_default();
                self.place(param, ctx)?;
                self.portal = param.to_vec();
                backend::encode_empty(b'2', out);
            }
            b'D' => backend::encode_empty(b'n', out),
            b'E' => {
                let _ = backend::encode_command_complete(&self.portal, out);
            }
            b'C' => {
                let t = TargetName::decode(body).map_err(|e| bad(self.id, e))?;
                self.statements.remove(t.name);
                backend::encode_empty(b'3', out);
            }
            _ => {}
        }
        Ok(())
    }

    /// A simple query: blocks, writes, sleeps, the proxy's alignment, plain queries.
    fn query(&mut self, text: &[u8], ctx: &mut Ctx<'_>, out: &mut BytesMut) {
        if text == b"DISCARD ALL" {
            // The reset the adapter runs before a server serves anyone else (session mode,
            // or `server_reset_query_always`).
            self.statements.clear();
            self.served = None;
            self.session = None;
            self.var = None;
            ZONE.clone_into(&mut self.zone);
            PATH.clone_into(&mut self.path);
        } else if text.starts_with(b"setsp ") {
            let k = text.split(|b| *b == b' ').nth(1).unwrap_or_default();
            let k = std::str::from_utf8(k).ok().and_then(|k| k.parse().ok());
            self.path = super::proxy_plan::path(k.unwrap_or_default());
        } else if text.starts_with(b"settz ") {
            let zone = text.split(|b| *b == b' ').nth(1).unwrap_or_default();
            self.zone = String::from_utf8_lossy(zone).into_owned();
        } else if text.starts_with(b"set ") {
            self.var = session_of(text);
        } else if text.starts_with(b"show ") {
            let value = match self.var {
                Some((c, g)) => format!("c{c} g{g}"),
                None => "none".to_owned(),
            };
            let _ = backend::encode_data_row(&[Some(value.as_bytes())], out);
        } else if text.starts_with(b"begin") {
            self.block = owner(text).or(Some((u64::MAX, u64::MAX)));
        } else if text.starts_with(b"commit") {
            self.block = None;
        } else if text.starts_with(b"sleep") {
            ctx.sleep = Some(sleep_ns(text));
            self.running = Some(Running {
                text: text.to_vec(),
            });
            return;
        } else if text.starts_with(b"write") {
            if ctx.in_recovery {
                let fields: [(u8, &[u8]); 3] = [
                    (b'S', b"ERROR"),
                    (b'C', b"25006"),
                    (b'M', b"cannot execute INSERT in a read-only transaction"),
                ];
                let _ = encode_error_response(&fields, out);
                return self.ready(ctx.in_recovery, out);
            }
            ctx.wal.0 += 0x100;
            let lsn = ctx.wal.to_string();
            let _ = backend::encode_data_row(&[Some(lsn.as_bytes())], out);
        }
        let _ = backend::encode_command_complete(text, out);
        self.ready(ctx.in_recovery, out);
    }

    /// The proxy's alignment: `SET name TO 'value';` statements, a CommandComplete each, and
    /// for `search_path` `SELECT pg_catalog.set_config('search_path', 'value', false);`, a
    /// row and `SELECT 1`. Only `TimeZone` (spelt the server's way: in lower case, as a
    /// client's startup value may not be) and `search_path` change here (the world's clients
    /// change no other tracked setting); anything else the server could not parse is a broken
    /// promise of the proxy's. Values hold a quote and no backslash: a literal is read by
    /// doubling quotes only.
    fn align(&mut self, text: &[u8], out: &mut BytesMut) -> Result<(), Violation> {
        let text = String::from_utf8_lossy(text);
        let literal = |v: &str| unquote(v.strip_prefix('\'')?.strip_suffix('\'')?);
        for statement in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            if let Some(rest) = statement.strip_prefix(std::str::from_utf8(SET_PATH).unwrap_or(""))
            {
                let value = rest.strip_suffix(", false)").and_then(literal);
                let Some(value) = value else {
                    let detail = format!(
                        "server {} got a search_path it cannot read: {text}",
                        self.id
                    );
                    return Err(violation("settings-follow-the-client", detail));
                };
                let column = backend::FieldDescription::text(b"set_config");
                let _ = backend::encode_row_description(&[column], out);
                let _ = backend::encode_data_row(&[Some(value.as_bytes())], out);
                let _ = backend::encode_command_complete(b"SELECT 1", out);
                self.path = value;
                continue;
            }
            let parsed = statement
                .strip_prefix("SET ")
                .and_then(|s| s.split_once(" TO "))
                .and_then(|(name, v)| Some((name, literal(v)?)));
            let Some((name, value)) = parsed else {
                let detail = format!("server {} got an alignment it cannot read: {text}", self.id);
                return Err(violation("settings-follow-the-client", detail));
            };
            if name == "TimeZone" {
                self.zone = super::proxy_cluster::spell_zone(&value);
            }
            let _ = backend::encode_command_complete(b"SET", out);
        }
        Ok(())
    }

    /// ReadyForQuery, after the `in_hot_standby`, `TimeZone` and `search_path` reports when
    /// they changed.
    fn ready(&mut self, in_recovery: bool, out: &mut BytesMut) {
        report(b"search_path", &self.path, &mut self.reported_path, out);
        report(b"TimeZone", &self.zone, &mut self.reported_zone, out);
        if in_recovery != self.reported_recovery {
            self.reported_recovery = in_recovery;
            let value: &[u8] = if in_recovery { b"on" } else { b"off" };
            let _ = ParameterStatus {
                name: b"in_hot_standby",
                value,
            }
            .encode(out);
        }
        let status = if self.block.is_some() {
            TransactionStatus::InTransaction
        } else {
            TransactionStatus::Idle
        };
        backend::encode_ready_for_query(status, out);
    }
}

/// A ParameterStatus for `name` when `value` is not what was `reported` last, as PostgreSQL
/// reports a changed `GUC_REPORT` setting before ReadyForQuery.
fn report(name: &[u8], value: &str, reported: &mut String, out: &mut BytesMut) {
    if value != reported {
        value.clone_into(reported);
        let _ = ParameterStatus {
            name,
            value: value.as_bytes(),
        }
        .encode(out);
    }
}

fn bad(id: u64, e: pgyard_wire::DecodeError) -> Violation {
    violation(
        "frames-reach-servers-whole",
        format!("server {id} could not read a message: {e}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a delivery's context borrows: the placements, the WAL position and the sessions.
    struct Fixture {
        placed: Placement,
        wal: Lsn,
        sessions: BTreeMap<(u64, u64), u64>,
    }

    impl Fixture {
        fn new() -> Self {
            Fixture {
                placed: Placement::new(),
                wal: Lsn(0x100),
                sessions: BTreeMap::new(),
            }
        }

        /// A delivery to a primary.
        fn ctx(&mut self) -> Ctx<'_> {
            Ctx {
                placed: &mut self.placed,
                started: Vec::new(),
                in_recovery: false,
                wal: &mut self.wal,
                sleep: None,
                sessions: &mut self.sessions,
            }
        }
    }

    fn query(text: &str) -> Vec<u8> {
        let mut b = BytesMut::new();
        pgyard_wire::frontend::encode_query(text.as_bytes(), &mut b).expect("Q");
        b.to_vec()
    }

    #[test]
    fn a_block_belongs_to_its_transaction_and_a_sleep_holds_what_follows() {
        let mut world = Fixture::new();
        let mut s = FakeServer::new(7, false);
        let mut out = BytesMut::new();
        let mut ctx = world.ctx();
        s.receive(&query("begin c1 t2"), &mut ctx, &mut out)
            .expect("begin");
        assert_eq!(ctx.started, [((1, 2), ZONE.to_owned(), PATH.to_owned())]);
        assert_eq!(s.open_block(), Some((1, 2)));
        let mixed = s.receive(&query("c3 t0 n0"), &mut ctx, &mut out);
        assert_eq!(
            mixed.map_err(|v| v.invariant),
            Err("transaction-on-one-server")
        );
        s.receive(&query("commit c1 t2"), &mut ctx, &mut out)
            .expect("commit");
        s.receive(&query("write c1 t3 n0"), &mut ctx, &mut out)
            .expect("write");
        assert_eq!(*ctx.wal, Lsn(0x200), "a write commits");
        let mut sleep = query("sleep c1 t4 n0 d500");
        sleep.extend(query("c1 t5 n0"));
        s.receive(&sleep, &mut ctx, &mut out).expect("sleep");
        assert_eq!(ctx.sleep, Some(500));
        assert_eq!(s.mid_protocol(), Some("holds part of a message"));
        out.clear();
        s.finish(true, true, &mut out);
        s.receive(&[], &mut ctx, &mut out).expect("the rest");
        assert!(s.mid_protocol().is_none());
        let text = String::from_utf8_lossy(&out).into_owned();
        // 57014, then a report of the new role, then the query that waited.
        let (cancel, rest) = text.split_once("57014").expect("cancelled");
        assert!(cancel.starts_with('E'));
        assert!(
            rest.contains("in_hot_standby") && rest.contains("c1 t5 n0"),
            "{text}"
        );
    }

    #[test]
    fn a_session_keeps_its_server_until_a_discard_all() {
        let mut world = Fixture::new();
        let mut s = FakeServer::new(3, false);
        let mut out = BytesMut::new();
        let mut ctx = world.ctx();
        s.receive(&query("set c1 g0 t0 n0"), &mut ctx, &mut out)
            .expect("set");
        out.clear();
        s.receive(&query("show c1 g0 t1 n0"), &mut ctx, &mut out)
            .expect("show");
        assert!(String::from_utf8_lossy(&out).contains("c1 g0"));
        let other = s.receive(&query("c2 g0 t0 n0"), &mut ctx, &mut out);
        assert_eq!(
            other.map_err(|v| v.invariant),
            Err("reset-between-sessions")
        );
        s.receive(&query("DISCARD ALL"), &mut ctx, &mut out)
            .expect("reset");
        out.clear();
        s.receive(&query("show c2 g0 t1 n0"), &mut ctx, &mut out)
            .expect("show after the reset");
        assert!(String::from_utf8_lossy(&out).contains("none"));
        let mut t = FakeServer::new(4, false);
        let moved = t.receive(&query("c2 g0 t2 n0"), &mut ctx, &mut out);
        assert_eq!(moved.map_err(|v| v.invariant), Err("session-on-one-server"));
    }

    #[test]
    fn the_time_zone_and_search_path_are_set_aligned_reset_and_reported_when_they_change() {
        let mut world = Fixture::new();
        let mut s = FakeServer::new(5, false);
        let mut out = BytesMut::new();
        let mut ctx = world.ctx();
        s.receive(&query("settz z2 c1 t0 n0"), &mut ctx, &mut out)
            .expect("settz");
        assert!(String::from_utf8_lossy(&out).contains("TimeZone\0z2"));
        out.clear();
        s.receive(&query("setsp 3 c1 t1 n0"), &mut ctx, &mut out)
            .expect("setsp");
        let path = crate::scenarios::proxy_plan::path(3);
        assert!(String::from_utf8_lossy(&out).contains(&format!("search_path\0{path}")));
        out.clear();
        let set_path = "SELECT pg_catalog.set_config('search_path', '\"it''s 1\", public', false);";
        s.receive(
            &query(&format!(
                "SET TimeZone TO 'z1';SET application_name TO 'o''k';{set_path}"
            )),
            &mut ctx,
            &mut out,
        )
        .expect("alignment");
        let text = String::from_utf8_lossy(&out).into_owned();
        assert_eq!(text.matches("SET\0").count(), 2, "{text}");
        assert!(text.contains("SELECT 1\0"), "{text}");
        assert!(text.contains("TimeZone\0z1"), "{text}");
        let path = crate::scenarios::proxy_plan::path(1);
        assert!(text.contains(&format!("search_path\0{path}")), "{text}");
        out.clear();
        s.receive(&query("c2 t0 n0"), &mut ctx, &mut out)
            .expect("query");
        assert_eq!(ctx.started.last(), Some(&((2, 0), "z1".to_owned(), path)));
        assert!(
            !String::from_utf8_lossy(&out).contains("TimeZone"),
            "no change, no report"
        );
        s.receive(&query("DISCARD ALL"), &mut ctx, &mut out)
            .expect("reset");
        assert!(String::from_utf8_lossy(&out).contains(&format!("TimeZone\0{ZONE}")));
        assert!(String::from_utf8_lossy(&out).contains(&format!("search_path\0{PATH}")));
        let bad = s.receive(&query("SET TimeZone = z1"), &mut ctx, &mut out);
        assert_eq!(
            bad.map_err(|v| v.invariant),
            Err("settings-follow-the-client")
        );
    }
}
