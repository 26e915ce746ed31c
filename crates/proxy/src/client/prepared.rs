//! Named prepared statements in transaction mode. A client's statement must exist on
//! whichever server its transaction lands on, so the proxy renames it: `pgyard_` and the first
//! 128 bits of SHA-256 over the query text and parameter types, the same name for the same
//! statement from any client, so servers share them. A server that has the statement already is
//! not sent the Parse again (the client gets the ParseComplete the server would have sent); a
//! server that lacks it when a Bind or Describe names it is sent the Parse first (its
//! ParseComplete is the proxy's and is dropped). Closing a named statement closes the
//! client's name only; the server keeps the statement for others.
//!
//! To put the proxy's own replies in the right place, every message sent on is matched with the
//! reply that ends it, in order ([`Expect`]); an ErrorResponse voids the rest up to the Sync, as
//! the server skips those messages.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::{Bytes, BytesMut};
use pgyard_wire::frontend::{self, Bind, Parse, Target, TargetName};
use sha2::{Digest, Sha256};

/// Statements a server keeps for the proxy before the oldest is closed.
pub const SERVER_STATEMENTS_MAX: usize = 1000;
/// Names a client may have prepared before its oldest is forgotten.
pub const CLIENT_STATEMENTS_MAX: usize = 10_000;

/// ParseComplete and CloseComplete, as the server would send them.
const PARSE_COMPLETE: &[u8] = &[b'1', 0, 0, 0, 4];
const CLOSE_COMPLETE: &[u8] = &[b'3', 0, 0, 0, 4];

/// What ends the reply to one message sent to the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ends {
    Parse,
    /// A Parse of a named statement, tracked until its ParseComplete.
    NamedParse,
    Bind,
    Close,
    DescribeStatement,
    DescribePortal,
    Execute,
    Sync,
    /// Query or FunctionCall: ReadyForQuery.
    Ready,
}

impl Ends {
    fn ended_by(self, tag: u8) -> bool {
        match self {
            Ends::Parse | Ends::NamedParse => tag == b'1',
            Ends::Bind => tag == b'2',
            Ends::Close => tag == b'3',
            Ends::DescribeStatement | Ends::DescribePortal => matches!(tag, b'T' | b'n'),
            Ends::Execute => matches!(tag, b'C' | b'I' | b's'),
            Ends::Sync | Ends::Ready => tag == b'Z',
        }
    }

    /// Whether an ErrorResponse ends it and makes the server skip to the next Sync.
    fn extended(self) -> bool {
        !matches!(self, Ends::Sync | Ends::Ready)
    }
}

/// One place in the reply stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Expect {
    /// The server's reply to a client message: forwarded.
    Reply(Ends),
    /// The server's reply to a message the proxy added: its success is dropped.
    Swallow(Ends),
    /// A reply the proxy makes itself, sent once everything before it has arrived.
    Inject(&'static [u8]),
}

/// A client's statement.
#[derive(Clone, Debug)]
struct Statement {
    proxy: String,
    /// The Parse under the proxy's name.
    parse: Bytes,
}

/// The client's named statements and the reply queue of the lent server.
#[derive(Debug, Default)]
pub(super) struct Prepared {
    names: BTreeMap<Vec<u8>, Statement>,
    order: VecDeque<Vec<u8>>,
    pub(super) queue: VecDeque<Expect>,
    /// Parses sent whose ParseComplete has not come yet (a failure voids them).
    in_flight: VecDeque<String>,
    /// An error struck a pipeline whose Sync has not been sent: the server ignores every
    /// message until that Sync, so they are passed on untouched and owe no reply.
    skipping: bool,
    /// The client's statement names whose Parse has not been answered yet, in queue order:
    /// a name whose Parse fails is forgotten, as the server never created it.
    unconfirmed: VecDeque<Vec<u8>>,
    /// The server's last ReadyForQuery said the transaction block failed.
    failed_block: bool,
    /// Statements the proxy is parsing on the server ahead of a client's Bind or Describe,
    /// counted as there only once the server says so: a failed block may refuse the Parse.
    ensuring: BTreeSet<String>,
    /// The planted bug: never parse ahead of a Bind or Describe.
    #[cfg(feature = "planted-bugs")]
    forgetful: bool,
}

/// Whether a queue entry stands for the answer to one of the client's own named Parses.
fn is_client_parse(e: &Expect) -> bool {
    matches!(e, Expect::Reply(Ends::NamedParse)) || *e == Expect::Inject(PARSE_COMPLETE)
}

/// `p` encoded under the statement name `name`.
fn renamed(p: &Parse<'_>, name: &str) -> Result<BytesMut, String> {
    let mut out = BytesMut::new();
    Parse {
        name: name.as_bytes(),
        ..*p
    }
    .encode(&mut out)
    .map_err(|e| e.to_string())?;
    Ok(out)
}

/// The proxy's name for a statement.
fn proxy_name(parse: &Parse<'_>) -> String {
    let mut h = Sha256::new();
    h.update((parse.query.len() as u64).to_be_bytes());
    h.update(parse.query);
    h.update(parse.param_types.raw());
    let digest = h.finalize();
    let mut name = String::from("pgyard_");
    for b in &digest[..16] {
        name.push_str(&format!("{b:02x}"));
    }
    name
}

/// What to send the server for one client frame.
pub(super) enum Rewrite {
    /// The frame as it is.
    Keep,
    /// These bytes instead (possibly nothing).
    Replace(BytesMut),
}

impl Prepared {
    /// Rewrites one client frame (`body` captured for P, B, D and C) against `server`'s
    /// statements, queueing what its reply will be.
    pub(super) fn client_frame(
        &mut self,
        tag: u8,
        body: Option<&[u8]>,
        server: &mut BTreeMap<String, u64>,
        seq: &mut u64,
    ) -> Result<Rewrite, String> {
        let body = body.unwrap_or_default();
        let bad = |e: pgyard_wire::DecodeError| format!("invalid frontend message: {e}");
        if self.skipping {
            if tag == b'S' {
                self.skipping = false;
                return self.reply(Ends::Sync);
            }
            return Ok(Rewrite::Keep);
        }
        match tag {
            b'P' => {
                let p = Parse::decode(body).map_err(bad)?;
                if p.name.is_empty() {
                    self.queue.push_back(Expect::Reply(Ends::Parse));
                    return Ok(Rewrite::Keep);
                }
                let proxy = proxy_name(&p);
                let parse = renamed(&p, &proxy)?;
                self.unconfirmed.push_back(p.name.to_vec());
                if server.contains_key(&proxy) && !self.failed_block {
                    self.remember(p.name, proxy, parse.freeze());
                    self.queue.push_back(Expect::Inject(PARSE_COMPLETE));
                    return Ok(Rewrite::Replace(BytesMut::new()));
                }
                // In a failed block the server must refuse the Parse itself, so one it already
                // holds goes under a name of its own (the refusal then voids only that).
                let (proxy, parse) = if server.contains_key(&proxy) {
                    *seq += 1;
                    let unique = format!("{proxy}_{seq}");
                    let again = renamed(&p, &unique)?;
                    (unique, again)
                } else {
                    (proxy, parse)
                };
                self.remember(p.name, proxy.clone(), parse.clone().freeze());
                let mut out = self.make_room(server);
                out.extend_from_slice(&parse);
                self.sent_parse(proxy, server, seq);
                self.queue.push_back(Expect::Reply(Ends::NamedParse));
                Ok(Rewrite::Replace(out))
            }
            b'B' => {
                let b = Bind::decode(body).map_err(bad)?;
                let Some(st) = self.names.get(b.statement).cloned() else {
                    self.queue.push_back(Expect::Reply(Ends::Bind));
                    return Ok(Rewrite::Keep);
                };
                let (mut out, name) = self.ensure(&st, server, seq)?;
                Bind {
                    statement: name.as_bytes(),
                    ..b
                }
                .encode(&mut out)
                .map_err(|e| e.to_string())?;
                self.queue.push_back(Expect::Reply(Ends::Bind));
                Ok(Rewrite::Replace(out))
            }
            b'D' | b'C' => self.target_frame(tag, body, server, seq),
            b'E' => self.reply(Ends::Execute),
            b'S' => self.reply(Ends::Sync),
            b'Q' | b'F' => self.reply(Ends::Ready),
            _ => Ok(Rewrite::Keep),
        }
    }

    fn reply(&mut self, ends: Ends) -> Result<Rewrite, String> {
        self.queue.push_back(Expect::Reply(ends));
        Ok(Rewrite::Keep)
    }

    /// Describe or Close.
    fn target_frame(
        &mut self,
        tag: u8,
        body: &[u8],
        server: &mut BTreeMap<String, u64>,
        seq: &mut u64,
    ) -> Result<Rewrite, String> {
        let t = TargetName::decode(body).map_err(|e| format!("invalid frontend message: {e}"))?;
        let describe = tag == b'D';
        let named = t.target == Target::Statement && !t.name.is_empty();
        let known = named.then(|| self.names.get(t.name).cloned()).flatten();
        match (describe, known) {
            (true, Some(st)) => {
                let (mut out, name) = self.ensure(&st, server, seq)?;
                frontend::encode_describe(Target::Statement, name.as_bytes(), &mut out)
                    .map_err(|e| e.to_string())?;
                self.queue.push_back(Expect::Reply(Ends::DescribeStatement));
                Ok(Rewrite::Replace(out))
            }
            (false, Some(_)) => {
                // The client's name goes; the server keeps the statement for others.
                self.names.remove(t.name);
                self.order.retain(|n| n != t.name);
                self.queue.push_back(Expect::Inject(CLOSE_COMPLETE));
                Ok(Rewrite::Replace(BytesMut::new()))
            }
            (true, None) if t.target == Target::Statement => self.reply(Ends::DescribeStatement),
            (true, None) => self.reply(Ends::DescribePortal),
            (false, None) => self.reply(Ends::Close),
        }
    }

    fn remember(&mut self, name: &[u8], proxy: String, parse: Bytes) {
        if self
            .names
            .insert(name.to_vec(), Statement { proxy, parse })
            .is_none()
        {
            self.order.push_back(name.to_vec());
            if self.order.len() > CLIENT_STATEMENTS_MAX {
                if let Some(old) = self.order.pop_front() {
                    self.names.remove(&old);
                }
            }
        }
    }

    /// How many named statements the client has.
    pub(super) fn count(&self) -> usize {
        self.names.len()
    }

    /// Switches the planted bug on or off.
    #[cfg(feature = "planted-bugs")]
    pub(super) fn set_forgetful(&mut self, on: bool) {
        self.forgetful = on;
    }

    /// The Parse a server lacks, ahead of a Bind or Describe of it.
    fn ensure(
        &mut self,
        st: &Statement,
        server: &mut BTreeMap<String, u64>,
        seq: &mut u64,
    ) -> Result<(BytesMut, String), String> {
        #[cfg(feature = "planted-bugs")]
        if self.forgetful {
            return Ok((BytesMut::new(), st.proxy.clone()));
        }
        if server.contains_key(&st.proxy) {
            return Ok((BytesMut::new(), st.proxy.clone()));
        }
        let mut out = self.make_room(server);
        // While the proxy's own Parse of it is unanswered, the statement may yet be refused:
        // this Bind gets a Parse of its own, under a name of its own, so that it stands or
        // falls with the server's state at its place in the stream, as on a direct connection.
        let name = if self.ensuring.contains(&st.proxy) {
            *seq += 1;
            let alias = format!("{}_{seq}", st.proxy);
            let p = Parse::decode(st.parse.get(5..).unwrap_or_default())
                .map_err(|e| format!("a remembered Parse no longer reads: {e}"))?;
            out.extend_from_slice(&renamed(&p, &alias)?);
            alias
        } else {
            out.extend_from_slice(&st.parse);
            st.proxy.clone()
        };
        self.in_flight.push_back(name.clone());
        self.ensuring.insert(name.clone());
        self.queue.push_back(Expect::Swallow(Ends::NamedParse));
        Ok((out, name))
    }

    fn sent_parse(&mut self, proxy: String, server: &mut BTreeMap<String, u64>, seq: &mut u64) {
        *seq += 1;
        server.insert(proxy.clone(), *seq);
        self.in_flight.push_back(proxy);
    }

    /// Closes the server's oldest statement when it keeps too many.
    fn make_room(&mut self, server: &mut BTreeMap<String, u64>) -> BytesMut {
        let mut out = BytesMut::new();
        if server.len() < SERVER_STATEMENTS_MAX {
            return out;
        }
        let oldest = server
            .iter()
            .filter(|(n, _)| !self.in_flight.contains(n))
            .min_by_key(|(_, s)| **s)
            .map(|(n, _)| n.clone());
        if let Some(victim) = oldest {
            server.remove(&victim);
            if frontend::encode_close(Target::Statement, victim.as_bytes(), &mut out).is_ok() {
                self.queue.push_back(Expect::Swallow(Ends::Close));
            }
        }
        out
    }

    /// One server frame: whether to forward it, and the injected replies that follow it.
    pub(super) fn server_frame(
        &mut self,
        tag: u8,
        server: &mut BTreeMap<String, u64>,
        out: &mut Vec<&'static [u8]>,
    ) -> bool {
        if matches!(tag, b'N' | b'S' | b'A') {
            // Notices, settings and notifications come at any time.
            return true;
        }
        let forward = match self.queue.front() {
            Some(Expect::Swallow(_)) => tag == b'E',
            _ => true,
        };
        let head = match self.queue.front() {
            Some(Expect::Reply(e) | Expect::Swallow(e)) => Some(*e),
            _ => None,
        };
        if tag == b'E' {
            if head.is_some_and(Ends::extended) {
                while let Some(e) = self.queue.front() {
                    if matches!(e, Expect::Reply(Ends::Sync) | Expect::Swallow(Ends::Sync)) {
                        break;
                    }
                    // The failed Parse, and those the server skips after it, created nothing
                    // (Parses after the Sync still run, so they stay in flight).
                    if matches!(
                        e,
                        Expect::Reply(Ends::NamedParse) | Expect::Swallow(Ends::NamedParse)
                    ) {
                        if let Some(name) = self.in_flight.pop_front() {
                            server.remove(&name);
                            self.ensuring.remove(&name);
                        }
                    }
                    if is_client_parse(e) {
                        self.forget_unconfirmed();
                    }
                    self.queue.pop_front();
                }
                // No Sync sent yet: what the client sends until it is skipped too.
                self.skipping = self.queue.is_empty();
            }
        } else if let Some(e) = head.filter(|e| e.ended_by(tag)) {
            if e == Ends::NamedParse {
                if let Some(name) = self.in_flight.pop_front() {
                    // The proxy's own Parse went through: now the server holds it.
                    if self.ensuring.remove(&name) {
                        let stamp = server.values().max().map_or(1, |m| m + 1);
                        server.insert(name, stamp);
                    }
                }
            }
            if self.queue.front().is_some_and(is_client_parse) {
                self.unconfirmed.pop_front();
            }
            self.queue.pop_front();
        }
        self.injections(out);
        forward
    }

    /// Whether the queue holds only replies to the client's own messages, none a named
    /// Parse, and nothing is being skipped: then reply frames other than an ErrorResponse
    /// are forwarded as they are, and nothing is injected among them.
    pub(super) fn plain(&self) -> bool {
        !self.skipping
            && self
                .queue
                .iter()
                .all(|e| matches!(e, Expect::Reply(e) if *e != Ends::NamedParse))
    }

    /// The proxy's replies now at the head of the queue.
    #[inline]
    pub(super) fn injections(&mut self, out: &mut Vec<&'static [u8]>) {
        // Asked after every frame both ways; almost always there is nothing to inject.
        if matches!(self.queue.front(), Some(Expect::Inject(_))) {
            self.take_injections(out);
        }
    }

    fn take_injections(&mut self, out: &mut Vec<&'static [u8]>) {
        while let Some(Expect::Inject(bytes)) = self.queue.front() {
            if *bytes == PARSE_COMPLETE {
                self.unconfirmed.pop_front();
            }
            out.push(bytes);
            self.queue.pop_front();
        }
    }

    /// The oldest unanswered client Parse failed: its name goes.
    fn forget_unconfirmed(&mut self) {
        if let Some(name) = self.unconfirmed.pop_front() {
            self.names.remove(&name);
            self.order.retain(|n| *n != name);
        }
    }

    /// Whether the last ReadyForQuery reported a failed transaction block.
    pub(super) fn set_failed_block(&mut self, failed: bool) {
        self.failed_block = failed;
    }

    /// A command tag that drops every statement of the session (SQL `DEALLOCATE ALL`,
    /// `DISCARD ALL`).
    pub(super) fn command_complete(body: &[u8], server: &mut BTreeMap<String, u64>) {
        let tag = body.strip_suffix(&[0]).unwrap_or(body);
        if tag == b"DEALLOCATE ALL" || tag == b"DISCARD ALL" {
            server.clear();
        }
    }

    /// Forgets the reply queue (the server went back or broke).
    pub(super) fn reset_queue(&mut self) {
        self.queue.clear();
        self.skipping = false;
        // Empty unless named statements were on the way (this runs every transaction).
        if !(self.in_flight.is_empty() && self.unconfirmed.is_empty() && self.ensuring.is_empty()) {
            self.in_flight.clear();
            self.unconfirmed.clear();
            self.ensuring.clear();
        }
    }
}
