//! Structured session fuzzing of the client-session machine: the fuzzer's bytes choose a
//! client's well-formed requests (simple queries, transaction blocks, failing statements,
//! the extended protocol with named statements, pipelines, middleware messages), how the
//! bytes are cut, which server the pool lends, and faults. One backend answers the client
//! directly as a reference; the proxy's client must see the same replies. Checked after
//! every step and at the end:
//!
//! - no middleware message and no Terminate reaches a server, and every byte a server
//!   gets is a whole, readable frame;
//! - a server goes back reusable only when it stands idle: no block, no error awaiting its
//!   Sync, no partial message and no unread reply;
//! - servers are acquired one at a time and released only by their holder; nothing but a
//!   late release follows Close;
//! - until a fault, what the client has read is a prefix of what the reference backend
//!   said (ParameterStatus, BackendKeyData and notices aside), and once the run settles,
//!   all of it;
//! - the same input gives the same outputs (determinism), with the session's
//!   transaction-mode shortcuts and without them.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use arbitrary::Unstructured;
use bytes::Bytes;
use pgyard_types::Instant;
use pgyard_wire::frame::{decode_frame, Decoded};

use super::backend::Backend;
use crate::arb::{pick, WellFormedClient};
use crate::client::{ClientAuth, ClientConfig, ClientOut, ClientSession, Lent, PoolMode};
use crate::pool::{ClientId, ServerId};

/// Steps no input can exceed: every step but a delivery consumes input, and deliveries end.
const MAX_STEPS: usize = 50_000;

/// What one run reached, for tests of the fuzzer's reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOutcome {
    /// Requests the client sent.
    pub requests: usize,
    /// Servers lent to it.
    pub lent: usize,
    /// Servers it gave back reusable.
    pub reused: usize,
    /// Faults injected.
    pub faults: usize,
    /// Reply frames the client read past its welcome, all matching the reference when no
    /// fault struck.
    pub replies: usize,
    /// A hash of every output, in order.
    pub trace: u64,
    /// Requests and replies that took the session's transaction-mode shortcuts.
    pub shortcuts: (u64, u64),
}

/// Drives one client session with `data`; panics only when a check above fails.
pub fn structured_session(data: &[u8]) -> SessionOutcome {
    twins(data, true)
}

/// [`structured_session`] in transaction mode without faults, the client sending each
/// request only once it has its welcome and every earlier answer: runs get deep into their
/// transactions one at a time (a fault or a request before the welcome ends most runs
/// early, and pipelined requests share reply chunks), which tests of the transaction-mode
/// shortcuts need.
pub fn structured_session_without_faults(data: &[u8]) -> SessionOutcome {
    twins(data, false)
}

fn twins(data: &[u8], faults: bool) -> SessionOutcome {
    let first = run(data, |s| s, faults);
    // The second run never takes the transaction-mode shortcuts: the same outputs show both
    // that they change nothing and that the session is deterministic.
    let again = run(data, ClientSession::without_shortcuts, faults);
    assert_eq!(
        first.trace, again.trace,
        "the same input gave different outputs (with and without the shortcuts)"
    );
    first
}

/// One run with `bug` planted in the session (no determinism check): tests show that the
/// checks above catch it.
#[cfg(feature = "planted-bugs")]
pub fn structured_session_with_bug(data: &[u8], bug: crate::PlantedBug) -> SessionOutcome {
    run(data, |s| s.with_planted_bug(bug), true)
}

/// How many of `len` waiting bytes one delivery carries (at least one): all of them half
/// the time, as a socket read usually gets them (the session's shortcuts take only reads of
/// whole frames), else a random cut.
fn cut(u: &mut Unstructured<'_>, len: usize) -> usize {
    if pick(u, 2) == 0 {
        len
    } else {
        len - pick(u, len)
    }
}

#[derive(Clone, Copy)]
enum Move {
    SendClient,
    DeliverServer,
    Lend,
    NextRequest,
    ServerGone,
    ClientGone,
    Refuse,
    Clock,
}

struct Run<'u, 'd> {
    u: &'u mut Unstructured<'d>,
    session: ClientSession,
    client: WellFormedClient,
    /// Client bytes not yet fed to the session.
    client_out: Vec<u8>,
    /// The server lent now, and its backend.
    lent: Option<(ServerId, Backend)>,
    /// The lent server's connection broke; the session still has to give it back.
    lent_gone: bool,
    /// Servers given back reusable, with the backends that hold their statements.
    idle: Vec<(Lent, Backend)>,
    acquiring: bool,
    closed: bool,
    next_server: u64,
    now: Instant,
    /// What the client read, and how much of it has been checked.
    read: Vec<u8>,
    read_at: usize,
    welcomed: bool,
    /// Transaction mode, no faults, and each request only once the client has its welcome
    /// and every earlier answer (as most clients do): runs that go deep into their
    /// transactions one at a time.
    calm: bool,
    replies: Vec<(u8, Vec<u8>)>,
    reference: Backend,
    expected: Vec<(u8, Vec<u8>)>,
    faults: usize,
    lent_count: usize,
    reused: usize,
    trace: DefaultHasher,
}

fn run(
    data: &[u8],
    plant: impl FnOnce(ClientSession) -> ClientSession,
    with_faults: bool,
) -> SessionOutcome {
    let mut u = Unstructured::new(data);
    // Calm runs test what only transaction mode does (its shortcuts).
    let pool_mode = [PoolMode::Transaction, PoolMode::Session][pick(&mut u, 2)];
    let pool_mode = if with_faults {
        pool_mode
    } else {
        PoolMode::Transaction
    };
    let config = ClientConfig::new(ClientAuth::Trust, pool_mode);
    let (key, random) = super::fixed_key_and_random();
    let session = ClientSession::new(Instant(0), ClientId(1), config, key, random);
    let client = WellFormedClient::arbitrary(&mut u);
    let client_out = client.startup();
    let mut run = Run {
        u: &mut u,
        session: plant(session),
        client,
        client_out,
        lent: None,
        lent_gone: false,
        idle: Vec::new(),
        acquiring: false,
        closed: false,
        next_server: 1,
        now: Instant(0),
        read: Vec::new(),
        read_at: 0,
        welcomed: false,
        calm: !with_faults,
        replies: Vec::new(),
        reference: Backend::new(),
        expected: Vec::new(),
        faults: 0,
        lent_count: 0,
        reused: 0,
        trace: DefaultHasher::new(),
    };
    for _ in 0..MAX_STEPS {
        let (ordinary, faults) = run.moves();
        if ordinary.is_empty() {
            return run.finish();
        }
        // One step in 32 may be a fault, so that long runs also test the fault-free promise.
        let fault = !faults.is_empty() && pick(run.u, 32) == 31;
        let chosen = if fault {
            run.faults += 1;
            faults[pick(run.u, faults.len())]
        } else {
            ordinary[pick(run.u, ordinary.len())]
        };
        run.step(chosen);
        run.outputs();
        // What SHOW CLIENTS would show (state, counters, labels) belongs to the trace too.
        format!("{:?}", run.session.activity()).hash(&mut run.trace);
        run.check_replies();
    }
    panic!("the session did not settle in {MAX_STEPS} steps");
}

impl Run<'_, '_> {
    fn moves(&self) -> (Vec<Move>, Vec<Move>) {
        let mut ordinary = Vec::new();
        let mut faults = Vec::new();
        if !self.closed && !self.client_out.is_empty() {
            ordinary.push(Move::SendClient);
        }
        if let Some((_, backend)) = self.lent.as_ref().filter(|_| !self.lent_gone) {
            if !backend.out.is_empty() {
                ordinary.push(Move::DeliverServer);
            }
            faults.push(Move::ServerGone);
        }
        if self.acquiring {
            ordinary.push(Move::Lend);
            faults.push(Move::Refuse);
        }
        // A calm client waits for the answer to each request, as most clients do.
        let answered = self.client_out.is_empty() && self.replies.len() >= self.expected.len();
        let patient = !self.calm || (self.welcomed && answered);
        if !self.closed && !self.u.is_empty() && !self.client.finished() && patient {
            ordinary.push(Move::NextRequest);
        }
        if !self.closed {
            faults.push(Move::ClientGone);
            faults.push(Move::Clock);
        }
        if self.calm {
            faults.clear();
        }
        (ordinary, faults)
    }

    fn step(&mut self, m: Move) {
        match m {
            Move::SendClient => {
                let n = cut(self.u, self.client_out.len());
                let bytes: Vec<u8> = self.client_out.drain(..n).collect();
                self.session.handle_client_bytes(self.now, &bytes);
            }
            Move::DeliverServer => {
                let Some((_, backend)) = self.lent.as_mut() else {
                    return;
                };
                let n = cut(self.u, backend.out.len());
                let bytes: Vec<u8> = backend.out.drain(..n).collect();
                self.session
                    .handle_server_bytes(self.now, Bytes::from(bytes));
            }
            Move::Lend => self.lend(),
            Move::NextRequest => {
                let bytes = self.client.next_request(self.u);
                self.reference_takes(&bytes);
                self.client_out.extend_from_slice(&bytes);
            }
            Move::ServerGone => {
                self.lent_gone = true;
                self.session.handle_server_gone();
            }
            Move::ClientGone => self.session.handle_client_gone(),
            Move::Refuse => {
                self.acquiring = false;
                self.session.handle_refused("query_wait_timeout");
            }
            Move::Clock => {
                let secs = 1 + pick(self.u, 120) as u64;
                self.now = self.now + Duration::from_secs(secs);
                self.session.handle_timeout(self.now);
            }
        }
    }

    /// The reference backend answers what the client says to it directly: everything but
    /// the startup, middleware messages and Terminate.
    fn reference_takes(&mut self, bytes: &[u8]) {
        let mut at = 0;
        while let Ok(Decoded::Frame(f)) = decode_frame(&bytes[at..], usize::MAX) {
            let len = 5 + f.body.len();
            if !matches!(f.tag, b'M' | b'X') {
                let frame = &bytes[at..at + len];
                if let Err(e) = self.reference.receive(frame) {
                    panic!("the fuzzer's client wrote what no server takes: {e}");
                }
            }
            at += len;
        }
        let out = std::mem::take(&mut self.reference.out);
        self.expected
            .extend(frames(&out).into_iter().filter(|f| shown(f.0)));
    }

    /// The pool lends a server: one given back earlier, or a new one.
    fn lend(&mut self) {
        self.acquiring = false;
        let reuse = !self.idle.is_empty() && pick(self.u, 2) == 1;
        let (server, backend) = if reuse {
            let i = pick(self.u, self.idle.len());
            self.idle.remove(i)
        } else {
            let id = ServerId(self.next_server);
            self.next_server += 1;
            let mut settings = crate::client::Settings::new();
            settings.insert("client_encoding".into(), "UTF8".into());
            let app = ["", "other"][pick(self.u, 2)];
            settings.insert("application_name".into(), app.into());
            let lent = Lent {
                id,
                settings,
                prepared: Default::default(),
            };
            (lent, Backend::new())
        };
        self.lent_count += 1;
        self.lent = Some((server.id, backend));
        self.session.handle_server(self.now, server);
    }

    fn outputs(&mut self) {
        while let Some(out) = self.session.poll_output() {
            format!("{out:?}").hash(&mut self.trace);
            let late_release = matches!(out, ClientOut::Release { .. });
            assert!(!self.closed || late_release, "output after Close: {out:?}");
            match out {
                ClientOut::ToClient(b) => self.read.extend_from_slice(&b),
                ClientOut::ToServer(b) => {
                    let Some((id, backend)) = self.lent.as_mut() else {
                        panic!("bytes for a server none lent");
                    };
                    assert!(
                        !self.lent_gone,
                        "bytes for server {} after it was lost",
                        id.0
                    );
                    if let Err(e) = backend.receive(&b) {
                        panic!("server {}: {e}", id.0);
                    }
                }
                ClientOut::Acquire(_) => {
                    assert!(!self.acquiring && self.lent.is_none(), "acquire twice");
                    self.acquiring = true;
                }
                ClientOut::Release { server, reusable } => self.release(server, reusable),
                ClientOut::Close => self.closed = true,
                other => panic!("an output a trusting, plain client never causes: {other:?}"),
            }
        }
    }

    fn release(&mut self, server: Lent, reusable: bool) {
        let Some((id, backend)) = self.lent.take() else {
            // A server lent to an acquire that the close overtook goes straight back.
            assert!(
                self.closed,
                "released {:?}, which was never lent",
                server.id
            );
            return;
        };
        assert_eq!(id, server.id, "released a server other than the one lent");
        let gone = std::mem::take(&mut self.lent_gone);
        assert!(
            !(gone && reusable),
            "server {} went back reusable after it was lost",
            id.0
        );
        if reusable {
            if let Err(why) = backend.idle() {
                panic!("server {} went back reusable while it {why}", id.0);
            }
            self.reused += 1;
            self.idle.push((server, backend));
        }
    }

    /// What the client read, frame by frame, against the reference's replies.
    fn check_replies(&mut self) {
        let mut at = self.read_at;
        while let Ok(Decoded::Frame(f)) = decode_frame(&self.read[at..], usize::MAX) {
            let frame = (f.tag, f.body.to_vec());
            at += 5 + f.body.len();
            if !self.welcomed {
                self.welcomed = frame.0 == b'Z';
                continue;
            }
            if shown(frame.0) {
                self.replies.push(frame);
            }
        }
        if let Err(e) = decode_frame(&self.read[at..], usize::MAX) {
            panic!("the client read unreadable bytes: {e}");
        }
        self.read_at = at;
        if self.faults > 0 {
            return;
        }
        let n = self.replies.len();
        let same = first_difference(&self.replies, &self.expected);
        assert!(
            n <= self.expected.len() && same == n,
            "reply {same} differs from the reference: got {}, expected {}",
            window(&self.replies, same),
            window(&self.expected, same),
        );
    }

    fn finish(self) -> SessionOutcome {
        if self.faults == 0 && !self.closed {
            assert_eq!(
                self.replies.len(),
                self.expected.len(),
                "the run settled with replies missing: {:?}",
                &self.expected[self.replies.len()..]
            );
        }
        SessionOutcome {
            requests: self.client.sent(),
            lent: self.lent_count,
            reused: self.reused,
            faults: self.faults,
            replies: self.replies.len(),
            trace: self.trace.finish(),
            shortcuts: self.session.shortcuts_taken(),
        }
    }
}

/// Replies a client sees from a direct connection the same way: everything but reports
/// (ParameterStatus), BackendKeyData and notices, which a pooler may add or leave out.
fn shown(tag: u8) -> bool {
    !matches!(tag, b'S' | b'K' | b'N')
}

fn frames(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while let Ok(Decoded::Frame(f)) = decode_frame(&bytes[at..], usize::MAX) {
        at += 5 + f.body.len();
        out.push((f.tag, f.body.to_vec()));
    }
    out
}

/// The frames around `at`, as their type letters with `|` at `at` (and the message of a
/// CommandComplete or ErrorResponse).
fn window(frames: &[(u8, Vec<u8>)], at: usize) -> String {
    let from = at.saturating_sub(6);
    let mut text = String::new();
    for (i, (tag, body)) in frames.iter().enumerate().skip(from).take(12) {
        if i == at {
            text.push('|');
        }
        text.push(char::from(*tag));
        if matches!(tag, b'C' | b'Z' | b'E') {
            text.push_str(&format!(
                "({})",
                String::from_utf8_lossy(body).trim_end_matches('\0')
            ));
        }
        text.push(' ');
    }
    text
}

fn first_difference(a: &[(u8, Vec<u8>)], b: &[(u8, Vec<u8>)]) -> usize {
    a.iter()
        .zip(b)
        .take_while(|(x, y)| same_reply(x, y))
        .count()
}

/// Replies are the same frame, except that an error about a named statement may name the
/// proxy's statement (`pgyard_…`) where the server would name the client's: a difference
/// docs/proxy.md lists. Such errors must still agree on their SQLSTATE.
fn same_reply(got: &(u8, Vec<u8>), expected: &(u8, Vec<u8>)) -> bool {
    if got == expected {
        return true;
    }
    let field = |body: &[u8], code: u8| {
        body.split(|&b| b == 0)
            .find(|f| f.first() == Some(&code))
            .map(<[u8]>::to_vec)
    };
    let names_statement = |body: &[u8], prefix: &[u8]| {
        field(body, b'M').is_some_and(|m| m.windows(prefix.len()).any(|w| w == prefix))
    };
    got.0 == b'E'
        && expected.0 == b'E'
        && field(&got.1, b'C') == field(&expected.1, b'C')
        && names_statement(&got.1, b"prepared statement \"pgyard_")
        && names_statement(&expected.1, b"prepared statement \"")
}
