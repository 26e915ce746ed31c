//! The judging half of the world: the invariants a client's connects must keep, stated on
//! what the world saw rather than on the machine's own verdicts. Nothing here moves the run:
//! the checks read the world and write only the clients' [`Watch`]es, the record they keep
//! of what each machine opened and closed, of a 57P03 the client heard, and of what the
//! liveness phase promised. The moving half tells a client's watch what happened and calls
//! the checks at the moments they apply; each returns the first broken invariant.

use std::collections::BTreeSet;
use std::time::Duration;

use pgyard_connect::{AttemptId, ConnectError, Established, FailureKind, IoErrorKind, OpenTarget};
use pgyard_conninfo::typed::{SslMode, TargetSessionAttrs};
use pgyard_conninfo::Strategy;
use pgyard_types::Instant;
use pgyard_wire::frame::ProtocolVersion;

use super::client::Stage;
use super::drive::{Seen, SimCore};
use super::net::addr_node;
use super::pg::{NodeState, RoleSeen};
use super::{ClientSpec, SpecText, World};
use crate::Violation;

/// What the liveness phase promises about one connect.
#[derive(Clone, Copy, Debug)]
pub(super) struct Promise {
    /// A fitting server is surely reachable, so the connect must end with a session.
    pub(super) must_succeed: bool,
    /// The connect must end by then.
    pub(super) deadline: Instant,
}

/// What the checks know of one client's connects. The attempt lists are plain `Vec`s: they
/// hold a handful of ids, each id enters a list at most once (a repeated open breaks
/// `attempt-ids-unique` before it is recorded) and in increasing order, and clearing them
/// keeps their allocation for the next connect.
#[derive(Debug, Default)]
pub(super) struct Watch {
    /// Every attempt the machine opened since it was built: ids must never repeat.
    ever_opened: Vec<AttemptId>,
    /// The attempts of the connect under way: a failure report must name each.
    opened_this: Vec<AttemptId>,
    /// The attempts open now: each closes once, and only the winner outlives the connect.
    open_now: Vec<AttemptId>,
    /// The attempt whose session the client holds, which `reset()` closes later.
    established: Option<AttemptId>,
    /// The host being tried answered 57P03, after which a sequential walk must move on.
    after_cannot_connect: bool,
    /// What the world told the connect under way about its attempts, for the wording check.
    pub(super) heard: Vec<(AttemptId, Heard)>,
    /// What the connect under way must achieve (from the liveness phase on).
    promise: Option<Promise>,
    /// Connections the connect under way opened to each node.
    opens_per_node: Vec<(usize, u32)>,
}

/// What the world told a client about one attempt, which its failure report must say.
#[derive(Clone, Debug)]
pub(super) enum Heard {
    /// The connection could not be opened.
    OpenFailed(IoErrorKind),
    /// The server sent a FATAL error with this SQLSTATE.
    Fatal([u8; 5]),
    /// The server sent a well-formed NegotiateProtocolVersion offering this version.
    Negotiated(ProtocolVersion),
    /// The server's first authentication message, which `require_auth` refuses for this
    /// reason (libpq's words).
    AuthRefused(&'static str),
    /// Plaintext came right after the server's `S` to SSLRequest.
    Stuffed,
    /// A TLS handshake completed, started directly or by SSLRequest, with the server's ALPN
    /// selection.
    Tls {
        /// Started without SSLRequest.
        direct: bool,
        /// What the server selected.
        alpn: Option<&'static [u8]>,
    },
    /// After its TLS handshake the connection broke with an alert ([`ALERT_TEXT`]), as the
    /// adapters report a server that refuses the client's certificate under TLS 1.3.
    Broken,
}

/// What the adapters report for a connection that broke with that alert (libpq's words).
pub(super) const ALERT_TEXT: &str = "SSL error: tlsv1 alert unknown ca";

impl Watch {
    /// A connect on a new machine begins: nothing of the old one counts any more.
    pub(super) fn fresh(&mut self) {
        self.ever_opened.clear();
        self.opened_this.clear();
        self.open_now.clear();
        self.established = None;
        self.after_cannot_connect = false;
        self.heard.clear();
        self.opens_per_node.clear();
    }

    /// `reset()` begins a connect on the same machine, whose attempt ids go on counting.
    pub(super) fn reset(&mut self) {
        self.opened_this.clear();
        self.after_cannot_connect = false;
        self.heard.clear();
        self.opens_per_node.clear();
    }

    /// The world told attempt `attempt` something its report must say.
    pub(super) fn heard(&mut self, attempt: AttemptId, what: Heard) {
        self.heard.push((attempt, what));
    }

    /// The application dropped the machine: its attempts closed with it.
    pub(super) fn abandoned(&mut self) {
        self.open_now.clear();
    }

    /// The machine resolves a host, so it has left the one it was trying.
    pub(super) fn resolving(&mut self) {
        self.after_cannot_connect = false;
    }

    /// A server told the client it cannot take connections now (57P03).
    pub(super) fn heard_cannot_connect_now(&mut self) {
        self.after_cannot_connect = true;
    }

    /// The client holds a session on `attempt`: it stays open past the connect.
    pub(super) fn established(&mut self, attempt: AttemptId) {
        take(&mut self.open_now, attempt);
        self.established = Some(attempt);
    }

    /// What the liveness phase asks of the connect under way.
    pub(super) fn promise(&mut self, promise: Promise) {
        self.promise = Some(promise);
    }

    /// The invariants on one raw action of client `i`'s machine, recorded as it goes.
    fn action(&mut self, i: usize, now: Instant, c: ClientView<'_>, seen: Seen) -> CheckResult {
        match seen {
            Seen::Open(attempt) => {
                if self.ever_opened.contains(&attempt) {
                    let detail = format!(
                        "client {i} opened a{} twice{}",
                        attempt.0,
                        attempts_text(c.core)
                    );
                    return Err(violation("attempt-ids-unique", detail));
                }
                self.ever_opened.push(attempt);
                let sequential = c.spec.config.strategy() == Strategy::Sequential;
                if self.after_cannot_connect && sequential {
                    let detail = format!(
                        "client {i} opened a{} on the same host after 57P03{}",
                        attempt.0,
                        attempts_text(c.core)
                    );
                    return Err(violation("57P03-moves-to-next-host", detail));
                }
                self.open_now.push(attempt);
                self.opened_this.push(attempt);
            }
            Seen::Close(attempt) => {
                if !take(&mut self.open_now, attempt) {
                    if self.established == Some(attempt) {
                        self.established = None;
                        return Ok(());
                    }
                    let detail = format!("client {i} closed a{} which is not open", attempt.0);
                    return Err(violation("close-once", detail));
                }
                let started = c.core.and_then(|k| k.attempt(attempt));
                if let (Some(ct_ns), Some(a)) = (c.ct_ns, started) {
                    let life = now.0 - a.started.as_nanos() as u64;
                    if life > ct_ns {
                        let ct = Duration::from_nanos(ct_ns);
                        let detail = format!(
                            "client {i} a{} lived {life}ns > connect_timeout {ct:?}{}",
                            attempt.0,
                            attempts_text(c.core)
                        );
                        return Err(violation("attempt-within-connect-timeout", detail));
                    }
                }
            }
        }
        Ok(())
    }
}

/// What a check's verdict is: nothing, or the invariant that broke.
pub(super) type CheckResult = Result<(), Violation>;

/// The parts of a client the checks on its machine's actions read.
#[derive(Clone, Copy)]
struct ClientView<'a> {
    spec: &'a ClientSpec,
    ct_ns: Option<u64>,
    core: Option<&'a SimCore>,
}

impl World {
    /// The invariants on a raw action of client `i`'s machine: an attempt id is never reused,
    /// a sequential walk leaves a host that answered 57P03, a close is never repeated, and
    /// no attempt outlives `connect_timeout`.
    pub(super) fn check_action(&mut self, i: usize, seen: Seen) -> CheckResult {
        let now = self.now;
        let c = &mut self.clients[i];
        let view = ClientView {
            spec: &c.spec,
            ct_ns: c.ct_ns,
            core: c.core.as_ref(),
        };
        c.watch.action(i, now, view, seen)
    }

    /// Client `i`'s connect opens a connection to `node`. libpq tries each address of a slot
    /// at most once per encryption method in a pass, so a connect without a failover budget
    /// (which walks again) opens to a node at most (slots whose name leads to it) × (methods of
    /// its sslmode) × (passes of its `target_session_attrs`) times.
    pub(super) fn check_one_walk(&mut self, i: usize, node: usize) -> CheckResult {
        let spec = &self.clients[i].spec;
        if spec.config.failover_timeout().is_some() {
            return Ok(());
        }
        let slots = spec
            .hosts
            .iter()
            .filter(|h| self.dns.names.get(*h).is_some_and(|ns| ns.contains(&node)))
            .count() as u32;
        let methods = match spec.config.sslmode() {
            SslMode::Allow | SslMode::Prefer => 2,
            _ => 1,
        };
        let passes = match spec.config.target_session_attrs() {
            TargetSessionAttrs::PreferStandby | TargetSessionAttrs::PreferPrimary => 2,
            _ => 1,
        };
        let limit = slots * methods * passes;
        let c = &mut self.clients[i];
        let opens = match c.watch.opens_per_node.iter_mut().find(|(n, _)| *n == node) {
            Some((_, k)) => {
                *k += 1;
                *k
            }
            None => {
                c.watch.opens_per_node.push((node, 1));
                1
            }
        };
        if opens <= limit {
            return Ok(());
        }
        Err(violation(
            "one-walk-per-connect",
            format!(
                "client {i} ({}) opened {opens} connections to node {node} in one connect, \
                 at most {limit} in libpq's walk{}",
                SpecText(&c.spec),
                attempts_text(c.core.as_ref())
            ),
        ))
    }

    /// A connect that ended left no attempt open but the one it won.
    pub(super) fn check_all_closed(&self, i: usize, winner: Option<AttemptId>) -> CheckResult {
        let c = &self.clients[i];
        let leftover: Vec<AttemptId> = c
            .watch
            .open_now
            .iter()
            .copied()
            .filter(|a| Some(*a) != winner)
            .collect();
        if leftover.is_empty() {
            return Ok(());
        }
        Err(violation(
            "every-open-closed",
            format!(
                "client {i} finished with {leftover:?} still open{}",
                attempts_text(c.core.as_ref())
            ),
        ))
    }

    /// The session won is one of the connect's attempts; its socket.
    pub(super) fn check_winner_known(&self, i: usize, est: &Established) -> Result<u64, Violation> {
        match self.clients[i].socks.get(&est.attempt) {
            Some(&id) => Ok(id),
            None => Err(violation(
                "winner-is-an-attempt",
                format!("client {i} won with unknown a{}", est.attempt.0),
            )),
        }
    }

    /// A TLS session stands only on ALPN `postgresql`, or on none when TLS was negotiated
    /// by SSLRequest. Stated on its own terms, not through the machine's verdict function.
    pub(super) fn check_alpn(&self, i: usize, est: &Established, id: u64) -> CheckResult {
        let tls = self.socks.get(&id).and_then(|s| s.tls);
        let Some(hs) = tls.filter(|_| est.tls) else {
            return Ok(());
        };
        let acceptable = match hs.alpn {
            Some(p) => p == b"postgresql",
            None => !hs.direct,
        };
        if acceptable {
            return Ok(());
        }
        Err(violation(
            "tls-alpn-accepted-as-libpq",
            format!(
                "client {i} a{} established TLS (direct={}) with ALPN {:?}",
                est.attempt.0,
                hs.direct,
                hs.alpn.map(String::from_utf8_lossy)
            ),
        ))
    }

    /// What the machine hands over of the session won is what its server told the client:
    /// the ParameterStatus messages in order, the backend key, the protocol version run.
    pub(super) fn check_told(&self, i: usize, est: &Established, id: u64) -> CheckResult {
        let Some(s) = self.socks.get(&id) else {
            return Ok(());
        };
        let told = s.session.told.as_ref();
        let key = est.backend_key.as_ref().map(|k| (k.pid, k.key.as_slice()));
        let protocol = s.session.protocol.map(|v| (v.major(), v.minor()));
        let fits = told.is_some_and(|t| {
            est.parameters.iter().eq(t.params.iter().copied())
                && key == Some((t.pid, t.key.as_slice()))
        }) && protocol == Some(est.protocol_version);
        if fits {
            return Ok(());
        }
        Err(violation(
            "session-as-told",
            format!(
                "client {i} a{} was handed parameters {:?}, key {key:?}, protocol {:?}; the \
                 server told {told:?} on protocol {protocol:?}",
                est.attempt.0, est.parameters, est.protocol_version
            ),
        ))
    }

    /// The session won is on a listed server (`node`), whose role when it answered (`role`)
    /// fits `target_session_attrs` as libpq judges it, and its attempt kept within
    /// `connect_timeout`.
    pub(super) fn check_won(
        &self,
        i: usize,
        est: &Established,
        node: Option<usize>,
        role: Option<RoleSeen>,
    ) -> CheckResult {
        let c = &self.clients[i];
        if !node.is_some_and(|n| self.is_listed(&c.spec, n)) {
            let listed = self.listed_nodes(&c.spec);
            return Err(violation(
                "connected-to-listed-server",
                format!("client {i} connected to node {node:?}, listed {listed:?}"),
            ));
        }
        if !role_fits(c.spec.config.target_session_attrs(), role) {
            let name = node.map_or("?", |n| self.nodes[n].name.as_str());
            return Err(violation(
                "target-session-attrs-met",
                format!(
                    "client {i} ({}) accepted {name} whose role was {role:?} when it answered{}",
                    SpecText(&c.spec),
                    attempts_text(c.core.as_ref())
                ),
            ));
        }
        let stuffed =
            |(a, h): &(AttemptId, Heard)| *a == est.attempt && matches!(h, Heard::Stuffed);
        if c.watch.heard.iter().any(stuffed) {
            return Err(violation(
                "plaintext-after-ssl-response-refused",
                format!(
                    "client {i} won with a{}, whose server sent plaintext after its S{}",
                    est.attempt.0,
                    attempts_text(c.core.as_ref())
                ),
            ));
        }
        let refused = node.and_then(|n| {
            let required = c.spec.require_auth?;
            required.refusal(&self.nodes[n].auth).map(|r| (required, r))
        });
        if let Some((required, reason)) = refused {
            let name = node.map_or("?", |n| self.nodes[n].name.as_str());
            return Err(violation(
                "require-auth-honoured",
                format!(
                    "client {i} ({}) holds a session on {name}, which libpq refuses: {}{}",
                    SpecText(&c.spec),
                    required.message(reason).trim_end(),
                    attempts_text(c.core.as_ref())
                ),
            ));
        }
        let started = c.core.as_ref().and_then(|k| k.attempt(est.attempt));
        if let (Some(ct_ns), Some(a)) = (c.ct_ns, started) {
            let life = self.now.0 - a.started.as_nanos() as u64;
            if life > ct_ns {
                return Err(violation(
                    "attempt-within-connect-timeout",
                    format!(
                        "client {i} won with a{} after {life}ns > {ct_ns}ns",
                        est.attempt.0
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The won session asked no check query its login already answered: libpq judges a
    /// server that reports `in_hot_standby` and `default_transaction_read_only` (14+) by them
    /// alone, so a query there costs a round trip and can read a role that changed since.
    pub(super) fn check_no_needless_check(
        &self,
        i: usize,
        node: Option<usize>,
        needless: u64,
    ) -> CheckResult {
        if needless == 0 {
            return Ok(());
        }
        let c = &self.clients[i];
        let name = node.map_or("?", |n| self.nodes[n].name.as_str());
        Err(violation(
            "no-needless-check",
            format!(
                "client {i} ({}) sent {needless} check queries to {name}, which reported its \
                 role at login",
                SpecText(&c.spec)
            ),
        ))
    }

    /// A failure report words resolver errors as libpq does and names every attempt the
    /// connect opened.
    pub(super) fn check_report(&self, i: usize, e: &ConnectError) -> CheckResult {
        // The platform's wording of a resolver error never reaches libpq's text.
        if let Some(r) = e.reports.iter().find(|r| {
            r.text.starts_with("could not translate host name")
                && !r.text.ends_with("to address: Name or service not known\n")
                && !r
                    .text
                    .ends_with("to address: Temporary failure in name resolution\n")
        }) {
            return Err(violation(
                "resolver-error-worded-as-libpq",
                format!("client {i}: {:?}", r.text),
            ));
        }
        let reported: BTreeSet<AttemptId> = e.reports.iter().filter_map(|r| r.attempt).collect();
        let watch = &self.clients[i].watch;
        let missing: Vec<AttemptId> = watch
            .opened_this
            .iter()
            .filter(|a| !reported.contains(a))
            .copied()
            .collect();
        if !missing.is_empty() {
            return Err(violation(
                "report-names-every-attempt",
                format!(
                    "client {i}: attempts {missing:?} missing from the report:\n{}",
                    e.message()
                ),
            ));
        }
        Ok(())
    }

    /// Whether a carried sequential connect ended on the failure of an attempt opened before
    /// the faults stopped. libpq ends a sequential connect at once on some failures (a server
    /// gone in the middle of its startup), failover budget or not, so a fault that struck
    /// such an attempt may still end the connect in the calm.
    pub(super) fn ended_by_fault_phase_attempt(&self, i: usize, e: &ConnectError) -> bool {
        let c = &self.clients[i];
        let (Some(calm), Some(core)) = (self.calm_since, c.core.as_ref()) else {
            return false;
        };
        let sequential = c.spec.config.strategy() == Strategy::Sequential;
        let last = e
            .reports
            .iter()
            .rev()
            .find(|r| !r.cancelled && !r.text.is_empty());
        let opened = last.and_then(|r| r.attempt).and_then(|a| core.attempt(a));
        sequential && opened.is_some_and(|a| (a.started.as_nanos() as u64) < calm.0)
    }

    /// A connect with a failover budget walks again after every walk that found nothing
    /// until the budget is spent. One that failed earlier must have ended on something that
    /// gives up on the whole connect (as libpq gives up on a server that closed during
    /// startup, or on a refused authentication), which an attempt whose connection was
    /// refused or timed out, or whose server had the wrong role, is not: after one of those
    /// libpq goes on to the next address, and past the last one the budget walks again.
    pub(super) fn check_budget_used(&self, i: usize, e: &ConnectError) -> CheckResult {
        let c = &self.clients[i];
        let end = c.budget_end();
        if c.spec.config.failover_timeout().is_none() || self.now.0 >= end {
            return Ok(());
        }
        let last = e
            .reports
            .iter()
            .rev()
            .find(|r| !r.cancelled && !r.text.is_empty());
        let moves_on = [
            "Connection refused\n",
            "Connection timed out\n",
            "session is read-only\n",
            "session is not read-only\n",
            "server is in hot standby mode\n",
            "server is not in hot standby mode\n",
        ];
        let walked_out = last.is_some_and(|r| {
            r.kind == FailureKind::Transient && moves_on.iter().any(|m| r.text.ends_with(m))
        });
        if !walked_out {
            return Ok(());
        }
        Err(violation(
            "failover-budget-used",
            format!(
                "client {i} ({}) gave up at {}ns, its budget ran to {end}ns:\n{}{}",
                SpecText(&c.spec),
                self.now.0,
                e.message(),
                attempts_text(c.core.as_ref())
            ),
        ))
    }

    /// A liveness connect that had to succeed fails only when `excused` (a fault from before
    /// the calm ended it).
    pub(super) fn check_live_failure(
        &self,
        i: usize,
        e: &ConnectError,
        excused: bool,
    ) -> CheckResult {
        let c = &self.clients[i];
        let must_succeed = c.watch.promise.is_some_and(|p| p.must_succeed);
        if !must_succeed || excused {
            return Ok(());
        }
        Err(violation(
            "liveness-connects",
            format!(
                "client {i} ({}) failed although a fitting server was reachable:\n{}{}",
                SpecText(&c.spec),
                e.message(),
                attempts_text(c.core.as_ref())
            ),
        ))
    }

    /// A connect of the liveness phase ended by its deadline.
    pub(super) fn check_within_bound(&self, i: usize) -> CheckResult {
        let c = &self.clients[i];
        let Some(deadline) = c.watch.promise.map(|p| p.deadline) else {
            return Ok(());
        };
        if self.now <= deadline {
            return Ok(());
        }
        Err(violation(
            "liveness-within-bound",
            format!(
                "client {i} ({}) finished at {}ns, bound was {}ns{}",
                SpecText(&c.spec),
                self.now.0,
                deadline.0,
                attempts_text(c.core.as_ref())
            ),
        ))
    }

    /// At the end of the run every client has finished its liveness connect.
    pub(super) fn check_converged(&self) -> CheckResult {
        for (i, c) in self.clients.iter().enumerate() {
            if matches!(c.stage, Stage::Carried | Stage::Live) {
                return Err(violation(
                    "liveness-converges",
                    format!(
                        "client {i} ({}) still {:?} at t={}ns{}",
                        SpecText(&c.spec),
                        c.mode,
                        self.now.0,
                        attempts_text(c.core.as_ref())
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The promise on client `i`'s connect that runs on into the liveness phase: it may use
    /// up its failover budget and the attempt under way its whole `connect_timeout`; it must
    /// succeed only when the budget outlasts one more walk and a fitting server exists.
    pub(super) fn carried_promise(&self, i: usize) -> Promise {
        let c = &self.clients[i];
        let now = self.now.0;
        let budget_end = c.budget_end();
        let bound = self.bound_ns(i);
        let ct = c.ct_ns.unwrap_or(0);
        let deadline = Instant(now.max(budget_end) + ct + 2 * bound + 2_000_000_000);
        let must_succeed = c.spec.budget_rides_out
            && budget_end > now + ct + bound + 2_000_000_000
            && self.fitting_exists(&c.spec);
        Promise {
            must_succeed,
            deadline,
        }
    }

    /// The promise on a liveness connect client `i` starts now, and the bound on one walk.
    pub(super) fn fresh_promise(&self, i: usize) -> (Promise, u64) {
        let spec = &self.clients[i].spec;
        let fitting = self.fitting_exists(spec);
        let bound = self.bound_ns(i);
        // Without a fitting server the failover budget may run out first, then one more
        // walk may still be under way, after a backoff of at most 2 s.
        let budget = spec
            .config
            .failover_timeout()
            .map_or(0, |b| b.as_nanos() as u64 + bound + 2_000_000_000);
        let allowed = if fitting { bound } else { bound + budget };
        let promise = Promise {
            must_succeed: fitting,
            deadline: Instant(self.now.0 + allowed),
        };
        (promise, bound)
    }

    /// Whether a listed name surely leads to a fitting server now. A mismatch or a 57P03
    /// skips the rest of a name's addresses (libpq), so a name counts only when one of its
    /// addresses fits and every other one either fits or refuses (a crashed node).
    fn fitting_exists(&self, spec: &ClientSpec) -> bool {
        // A server that offers less than `min_protocol_version` ends the whole connect
        // (libpq), so such a client is promised nothing while one may answer.
        let too_old = |n: usize| {
            let node = &self.nodes[n];
            node.old_version && node.state != NodeState::Crashed
        };
        if spec.startup.min_version > ProtocolVersion::V3_0 && self.listed(spec).any(too_old) {
            return false;
        }
        // A server whose authentication `require_auth` refuses ends the whole connect too
        // (libpq gives up on the connection, not the host), whenever the walk reaches it.
        let refused = |n: usize| {
            let r = spec.require_auth;
            r.is_some_and(|r| r.refusal(&self.nodes[n].auth).is_some())
        };
        if self.listed(spec).any(refused) {
            return false;
        }
        // So does plaintext after a server's `S`, whenever the client asks for TLS.
        let stuffs = |n: usize| self.nodes[n].tls && self.nodes[n].stuffs_after_ssl;
        if spec.config.sslmode() != SslMode::Disable && self.listed(spec).any(stuffs) {
            return false;
        }
        let tsa = spec.config.target_session_attrs();
        let fits = |n: usize| {
            let node = &self.nodes[n];
            node.state.serving() && role_fits(tsa, Some(node.seen()))
        };
        spec.hosts
            .iter()
            .filter_map(|h| self.dns.names.get(h))
            .any(|nodes| {
                nodes.iter().any(|&n| fits(n))
                    && nodes
                        .iter()
                        .all(|&n| fits(n) || self.nodes[n].state == NodeState::Crashed)
            })
    }

    /// The nodes the client's host list names.
    fn listed_nodes(&self, spec: &ClientSpec) -> BTreeSet<usize> {
        self.listed(spec).collect()
    }

    /// Whether the client's host list names `node` (asked on every session won, so without
    /// collecting the set).
    fn is_listed(&self, spec: &ClientSpec, node: usize) -> bool {
        self.listed(spec).any(|n| n == node)
    }

    /// The nodes the client's host list names, with repeats.
    fn listed<'a>(&'a self, spec: &'a ClientSpec) -> impl Iterator<Item = usize> + 'a {
        spec.hosts
            .iter()
            .filter_map(|h| self.dns.names.get(h))
            .flatten()
            .copied()
    }

    /// The time a connect may take once faults stop: every (slot, address) attempt bounded
    /// by `connect_timeout` or by the round trips a login needs, per pass, plus resolution.
    fn bound_ns(&self, client: usize) -> u64 {
        let ct_ns = self.clients[client].ct_ns;
        let spec = &self.clients[client].spec;
        let lat_max = self.net.links[client]
            .iter()
            .map(|l| l.max_ns())
            .max()
            .unwrap_or(0);
        let round_trips = 40 * lat_max + 1_000_000;
        let per_attempt = ct_ns.map_or(round_trips, |ct| round_trips.min(ct));
        let passes = match spec.config.target_session_attrs() {
            TargetSessionAttrs::PreferStandby | TargetSessionAttrs::PreferPrimary => 2,
            _ => 1,
        };
        let walk: u64 = spec
            .hosts
            .iter()
            .map(|h| self.dns.latency_ns + self.dns.count(h) as u64 * per_attempt)
            .sum();
        passes * walk + 1_000_000
    }
}

/// Whether a server whose role was `seen` at the check fits `tsa` as libpq decides it:
/// `read-write` wants `transaction_read_only` off and `read-only` on (so a primary with
/// `default_transaction_read_only = on` is read-only), `primary` wants a server not in
/// recovery and `standby` one in recovery, whatever its default; prefer-* and `any`
/// accept every server.
fn role_fits(tsa: TargetSessionAttrs, seen: Option<RoleSeen>) -> bool {
    let Some(s) = seen else {
        return !matches!(
            tsa,
            TargetSessionAttrs::ReadWrite
                | TargetSessionAttrs::ReadOnly
                | TargetSessionAttrs::Primary
                | TargetSessionAttrs::Standby
        );
    };
    match tsa {
        TargetSessionAttrs::ReadWrite => !s.transaction_read_only(),
        TargetSessionAttrs::ReadOnly => s.transaction_read_only(),
        TargetSessionAttrs::Primary => !s.in_recovery,
        TargetSessionAttrs::Standby => s.in_recovery,
        _ => true,
    }
}

/// Removes `attempt` from `list`; whether it was there.
fn take(list: &mut Vec<AttemptId>, attempt: AttemptId) -> bool {
    match list.iter().position(|&a| a == attempt) {
        Some(at) => {
            list.remove(at);
            true
        }
        None => false,
    }
}

/// A broken invariant with what was seen.
pub(super) fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

/// Every attempt of a connect's core, for a violation's detail.
fn attempts_text(core: Option<&SimCore>) -> String {
    let mut s = String::from("\nattempts:");
    for a in core.map_or(&[][..], SimCore::attempts) {
        let node = match &a.target {
            OpenTarget::Tcp(addr) => addr_node(addr),
            OpenTarget::Unix(_) => None,
        };
        s.push_str(&format!(
            "\n  {} -> node {node:?} at {}ns {}",
            a.host,
            a.started.as_nanos(),
            a.outcome
        ));
    }
    s
}
