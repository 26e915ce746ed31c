//! The network and the checks of the session fuzzer: one run of the machine against the
//! servers the input describes.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::net::SocketAddr;

use arbitrary::Unstructured;
use pgyard_conninfo::resolve::{Environment, MemFiles};
use pgyard_types::Instant;

use super::pick;
use super::server::{Persona, Session, Told};
use crate::{Action, AttemptId, Connector, Established, Event, IoErrorKind, OpenTarget};

/// More steps than any input can ask for: every step but the machine's own timers consumes
/// input, and an exhausted input only answers.
const MAX_STEPS: usize = 20_000;

/// What one run reached, for tests that check the fuzzer's reach.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The machine returned a connection.
    pub ok: bool,
    /// The connection it returned uses TLS.
    pub tls: bool,
    /// The protocol version of the returned connection.
    pub protocol: Option<(u16, u16)>,
    /// The `target_session_attrs` of the run.
    pub target_session_attrs: &'static str,
    /// Attempts the machine opened.
    pub attempts: usize,
    /// Faults injected: hang-ups, failed handshakes and timers fired early.
    pub faults: usize,
    /// Connections that broke with an alert after their handshake (some of the hang-ups).
    pub broken: usize,
    /// A hash of every action, in order.
    pub trace: u64,
}

const TARGETS: [&str; 6] = [
    "any",
    "read-write",
    "read-only",
    "primary",
    "standby",
    "prefer-standby",
];
const SSLMODES: [&str; 3] = ["disable", "prefer", "require"];

struct Setup {
    tsa: &'static str,
    sslmode: &'static str,
    /// `sslcertmode=require` (never beside `sslmode=disable`, which libpq refuses).
    cert_required: bool,
    personas: Vec<Persona>,
    conninfo: String,
    seed: u64,
}

impl Setup {
    fn arbitrary(u: &mut Unstructured<'_>) -> Setup {
        let hosts = 1 + pick(u, 3);
        let tsa = TARGETS[pick(u, TARGETS.len())];
        let sslmode = SSLMODES[pick(u, SSLMODES.len())];
        // Direct TLS needs sslmode=require or stronger.
        let direct = sslmode == "require" && pick(u, 2) == 1;
        let negotiation = if direct { " sslnegotiation=direct" } else { "" };
        let balance = ["disable", "random"][pick(u, 2)];
        let timeout = ["", " connect_timeout=2", " connect_timeout=10"][pick(u, 3)];
        let protocol = ["", " max_protocol_version=3.2"][pick(u, 2)];
        let cert_required = sslmode != "disable" && pick(u, 4) == 3;
        let certmode = if cert_required {
            " sslcertmode=require"
        } else {
            ""
        };
        let seed = u.arbitrary::<u64>().unwrap_or(0);
        let names: Vec<String> = (0..hosts).map(|h| format!("h{h}")).collect();
        let conninfo = format!(
            "host={} port=5432 user={} password={} dbname=d gssencmode=disable \
             sslmode={sslmode} target_session_attrs={tsa} load_balance_hosts={balance}\
             {timeout}{protocol}{negotiation}{certmode}",
            names.join(","),
            super::server::USER,
            super::server::PASSWORD,
        );
        let may_hang = !timeout.is_empty();
        let personas = (0..hosts)
            .map(|_| Persona::arbitrary(u, may_hang))
            .collect();
        Setup {
            tsa,
            sslmode,
            cert_required,
            personas,
            conninfo,
            seed,
        }
    }

    fn machine(&self) -> Connector {
        let info = pgyard_conninfo::parse(&self.conninfo).expect("a generated conninfo parses");
        let config = pgyard_conninfo::configure(info, &Environment::new(), &MemFiles::new())
            .expect("a generated conninfo configures")
            .config;
        Connector::new(config, Instant::ZERO, self.seed)
    }
}

/// An action waiting for the network's answer.
enum Pending {
    Resolve {
        token: crate::ResolveToken,
        host: usize,
    },
    Open {
        attempt: AttemptId,
        addr: SocketAddr,
    },
    Tls {
        attempt: AttemptId,
    },
}

/// The client end of one attempt, as the network sees it.
struct Link {
    attempt: AttemptId,
    host: usize,
    addr: SocketAddr,
    /// The server's 57P03 reached the machine in full.
    cannot_connect_now: bool,
    session: Session,
    /// `Opened` was delivered.
    open: bool,
    /// The machine closed it.
    closed: bool,
    tls: bool,
    tls_pending: bool,
    /// The handshake was direct TLS (no SSLRequest first).
    direct: bool,
    /// The handshake ended in something libpq refuses: an ALPN it does not accept, or
    /// direct TLS to a server that does not speak it.
    tls_refused: bool,
    /// Server bytes not yet delivered.
    outbox: Vec<u8>,
    /// The server closes once the outbox is delivered.
    server_closes: bool,
    /// The connection broke with an alert ([`BROKEN_MESSAGE`]) after its handshake.
    broken: bool,
}

/// What a link that breaks with an alert reports (the adapters' text for a refused client
/// certificate under TLS 1.3).
const BROKEN_MESSAGE: &str = "SSL error: tlsv1 alert unknown ca";

/// One step the network can take.
#[derive(Clone, Copy)]
enum Move {
    Answer(usize),
    Deliver(usize),
    ServerClose(usize),
    Timeout(Instant),
    HangUp(usize),
    FailTls(usize),
}

struct Run<'u, 'd> {
    u: &'u mut Unstructured<'d>,
    setup: Setup,
    machine: Connector,
    now: Instant,
    pending: Vec<Pending>,
    links: Vec<Link>,
    /// Per address: whether connecting to it is refused.
    refuses: HashMap<SocketAddr, bool>,
    /// Per host: whether it resolved to an address that accepts, once asked.
    reachable: Vec<Option<bool>>,
    result: Option<Result<Established, String>>,
    faults: usize,
    /// The most any handshake of the connect reported of client certificates.
    cert_seen: crate::ClientCert,
    trace: DefaultHasher,
}

/// One run of the machine against the servers `data` describes.
pub(super) fn run(data: &[u8], plant: impl FnOnce(Connector) -> Connector) -> Outcome {
    let mut u = Unstructured::new(data);
    let setup = Setup::arbitrary(&mut u);
    let machine = plant(setup.machine());
    let hosts = setup.personas.len();
    let mut run = Run {
        u: &mut u,
        setup,
        machine,
        now: Instant::ZERO,
        pending: Vec::new(),
        links: Vec::new(),
        refuses: HashMap::new(),
        reachable: vec![None; hosts],
        result: None,
        faults: 0,
        cert_seen: crate::ClientCert::NotRequested,
        trace: DefaultHasher::new(),
    };
    for _ in 0..MAX_STEPS {
        run.take_actions();
        if run.result.is_some() {
            return run.finish();
        }
        run.step();
    }
    panic!("the machine did not finish in {MAX_STEPS} steps");
}

impl Run<'_, '_> {
    fn take_actions(&mut self) {
        while let Some(action) = self.machine.poll_action() {
            format!("{action:?}").hash(&mut self.trace);
            assert!(self.result.is_none(), "an action after Done: {action:?}");
            self.act(action);
        }
    }

    fn act(&mut self, action: Action) {
        match action {
            Action::Resolve { token, host, .. } => {
                let host = host_index(&host, self.setup.personas.len());
                self.pending.push(Pending::Resolve { token, host });
            }
            Action::Open {
                attempt, target, ..
            } => {
                let OpenTarget::Tcp(addr) = target else {
                    panic!("opened {target:?}: every generated host is a name");
                };
                assert!(
                    self.refuses.contains_key(&addr),
                    "opened {addr}, which no resolve returned"
                );
                assert!(
                    self.links.iter().all(|l| l.attempt != attempt),
                    "attempt {attempt:?} opened twice"
                );
                let host = usize::from(ip_octets(addr)[2]);
                self.check_next_host_after_57p03(host, addr);
                let pid = 1000 + self.links.len() as i32;
                self.links.push(Link {
                    attempt,
                    host,
                    addr,
                    cannot_connect_now: false,
                    session: Session::new(pid),
                    open: false,
                    closed: false,
                    tls: false,
                    tls_pending: false,
                    direct: false,
                    tls_refused: false,
                    outbox: Vec::new(),
                    server_closes: false,
                    broken: false,
                });
                self.pending.push(Pending::Open { attempt, addr });
            }
            Action::Send { attempt, bytes } => {
                let i = self.live_link(attempt, "sent on");
                let link = &mut self.links[i];
                assert!(
                    link.open,
                    "sent on {attempt:?} before it connected or after it closed"
                );
                assert!(
                    !link.tls_pending,
                    "sent on {attempt:?} during its handshake"
                );
                if !link.server_closes {
                    let reply = link
                        .session
                        .receive(&self.setup.personas[link.host], &bytes);
                    link.outbox.extend_from_slice(&reply.bytes);
                    link.server_closes = reply.close;
                }
            }
            Action::StartTls {
                attempt, direct, ..
            } => {
                let i = self.live_link(attempt, "started TLS on");
                let link = &mut self.links[i];
                assert!(
                    link.open && !link.tls && !link.tls_pending,
                    "a second handshake"
                );
                link.tls_pending = true;
                link.direct = direct;
                self.pending.push(Pending::Tls { attempt });
            }
            Action::Close { attempt } => {
                let i = self.live_link(attempt, "closed");
                self.links[i].closed = true;
                self.pending
                    .retain(|p| !matches!(p, Pending::Open { attempt: a, .. } | Pending::Tls { attempt: a } if *a == attempt));
            }
            Action::Done(result) => {
                self.result = Some(result.map(|est| *est).map_err(|e| e.to_string()));
            }
        }
    }

    /// The index of a link the machine may still act on.
    fn live_link(&self, attempt: AttemptId, what: &str) -> usize {
        let i = self.links.iter().position(|l| l.attempt == attempt);
        let i = i.unwrap_or_else(|| panic!("{what} {attempt:?}, which was never opened"));
        assert!(!self.links[i].closed, "{what} {attempt:?} after closing it");
        i
    }

    /// The ordinary moves (answers, deliveries, a server's close; the machine's timer when
    /// nothing else can happen) and the faults (hang-ups, failed handshakes, a timer fired
    /// while an answer was on its way).
    fn moves(&self) -> (Vec<Move>, Vec<Move>) {
        let mut ordinary: Vec<Move> = (0..self.pending.len()).map(Move::Answer).collect();
        let mut faults = Vec::new();
        let live = |l: &&Link| l.open && !l.closed;
        for (i, link) in self.links.iter().enumerate() {
            if live(&link) && !link.outbox.is_empty() {
                ordinary.push(Move::Deliver(i));
            } else if live(&link) && link.server_closes {
                ordinary.push(Move::ServerClose(i));
            }
            if live(&link) && !link.server_closes {
                faults.push(Move::HangUp(i));
            }
        }
        if let Some(at) = self.machine.poll_timeout() {
            let group = if ordinary.is_empty() {
                &mut ordinary
            } else {
                &mut faults
            };
            group.push(Move::Timeout(at));
        }
        for (i, p) in self.pending.iter().enumerate() {
            if matches!(p, Pending::Tls { .. }) {
                faults.push(Move::FailTls(i));
            }
        }
        (ordinary, faults)
    }

    fn step(&mut self) {
        let (ordinary, faults) = self.moves();
        // A hung server is the only thing a machine may wait on, and only with a timer.
        assert!(
            !ordinary.is_empty(),
            "the machine stalled: no action, no timer, not done"
        );
        // One step in eight may be a fault, so most inputs also test the fault-free promises.
        let fault = !faults.is_empty() && pick(self.u, 8) == 7;
        let chosen = if fault {
            self.faults += 1;
            faults[pick(self.u, faults.len())]
        } else {
            ordinary[pick(self.u, ordinary.len())]
        };
        match chosen {
            Move::Answer(i) => self.answer(i),
            Move::Deliver(i) => self.deliver(i),
            Move::ServerClose(i) => {
                let attempt = self.links[i].attempt;
                self.links[i].server_closes = false;
                self.links[i].open = false;
                self.machine
                    .handle_event(self.now, Event::Closed { attempt });
            }
            Move::Timeout(at) => {
                self.now = self.now.max(at);
                self.machine.handle_timeout(self.now);
                if let Some(next) = self.machine.poll_timeout() {
                    assert!(next > self.now, "a fired timer is still due at {next:?}");
                }
            }
            Move::HangUp(i) => {
                let attempt = self.links[i].attempt;
                self.links[i].open = false;
                self.links[i].outbox.clear();
                // Over TLS the peer may end with an alert instead: the adapters report it as
                // `Broken`, in libpq's words, which the final error must carry.
                let event = if self.links[i].tls && pick(self.u, 2) == 1 {
                    self.links[i].broken = true;
                    let message = BROKEN_MESSAGE.to_owned();
                    Event::Broken { attempt, message }
                } else {
                    Event::Closed { attempt }
                };
                self.machine.handle_event(self.now, event);
            }
            Move::FailTls(i) => {
                let Pending::Tls { attempt } = self.pending.remove(i) else {
                    unreachable!("FailTls is only offered for a handshake");
                };
                let link = self.links.iter_mut().find(|l| l.attempt == attempt);
                if let Some(link) = link {
                    link.tls_pending = false;
                }
                let event = Event::TlsFailed {
                    attempt,
                    message: "SSL error: unexpected eof while reading".into(),
                    kind: crate::FailureKind::Transient,
                    client_cert: crate::ClientCert::NotRequested,
                };
                self.machine.handle_event(self.now, event);
            }
        }
    }

    fn answer(&mut self, i: usize) {
        let event = match self.pending.remove(i) {
            Pending::Resolve { token, host } => self.resolve(token, host),
            Pending::Open { attempt, addr } => {
                if self.refuses[&addr] {
                    let error = IoErrorKind::ConnectionRefused;
                    Event::OpenFailed { attempt, error }
                } else {
                    self.link_mut(attempt).open = true;
                    Event::Opened { attempt }
                }
            }
            Pending::Tls { attempt } => {
                let i = self.links.iter().position(|l| l.attempt == attempt);
                let link = &mut self.links[i.expect("a pending handshake belongs to a link")];
                let persona = &self.setup.personas[link.host];
                link.tls_pending = false;
                if link.direct && !persona.tls {
                    // A server without TLS reads the ClientHello as a bad startup packet.
                    link.tls_refused = true;
                    Event::TlsFailed {
                        attempt,
                        message: "SSL SYSCALL error: EOF detected".into(),
                        kind: crate::FailureKind::Transient,
                        client_cert: crate::ClientCert::NotRequested,
                    }
                } else {
                    link.tls = true;
                    link.tls_refused = crate::alpn_refusal(persona.alpn, link.direct).is_some();
                    let client_cert = persona.client_cert;
                    self.cert_seen = self.cert_seen.max(client_cert);
                    Event::TlsEstablished {
                        attempt,
                        server_end_point: None,
                        alpn: persona.alpn.map(<[u8]>::to_vec),
                        client_cert,
                    }
                }
            }
        };
        self.machine.handle_event(self.now, event);
    }

    fn resolve(&mut self, token: crate::ResolveToken, host: usize) -> Event {
        let count = match pick(self.u, 4) {
            0 => 1,
            1 => 2,
            2 => 0,
            _ => {
                self.note_resolution(host, false);
                let message = "Name or service not known".to_owned();
                return Event::ResolveFailed { token, message };
            }
        };
        let mut addrs = Vec::new();
        for k in 0..count {
            let addr = SocketAddr::from(([10, 0, host as u8, k as u8], 5432));
            let refuses = pick(self.u, 4) == 3;
            self.refuses.insert(addr, refuses);
            addrs.push(addr);
        }
        let accepts = addrs.iter().any(|a| !self.refuses[a]);
        self.note_resolution(host, accepts);
        Event::Resolved { token, addrs }
    }

    /// A host that was reachable and is not on a later look-up (prefer-standby's second
    /// pass resolves again) is a fault of the network, not the machine's doing.
    fn note_resolution(&mut self, host: usize, accepts: bool) {
        let before = self.reachable[host];
        if before == Some(true) && !accepts {
            self.faults += 1;
        }
        self.reachable[host] = Some(before.unwrap_or(false) || accepts);
    }

    fn deliver(&mut self, i: usize) {
        let link = &mut self.links[i];
        let len = link.outbox.len();
        // Whole by default; any cut the input asks for.
        let n = len - pick(self.u, len);
        let bytes: Vec<u8> = link.outbox.drain(..n).collect();
        let attempt = link.attempt;
        let refusal = self.setup.personas[link.host].refusal;
        let starting_up = refusal == Some(super::server::Refusal::StartingUp);
        link.cannot_connect_now |= link.outbox.is_empty() && link.server_closes && starting_up;
        self.machine
            .handle_event(self.now, Event::Received { attempt, bytes });
    }

    /// libpq moves to the next host after 57P03, leaving the host's other addresses untried
    /// (prefer-standby's second pass starts over, so it is not judged).
    fn check_next_host_after_57p03(&self, host: usize, addr: SocketAddr) {
        if self.setup.tsa == "prefer-standby" {
            return;
        }
        let earlier = self
            .links
            .iter()
            .find(|l| l.host == host && l.cannot_connect_now);
        if let Some(earlier) = earlier {
            assert_eq!(
                earlier.addr, addr,
                "tried another address of h{host} after its 57P03"
            );
        }
    }

    fn link_mut(&mut self, attempt: AttemptId) -> &mut Link {
        let link = self.links.iter_mut().find(|l| l.attempt == attempt);
        link.expect("a pending answer belongs to a link")
    }

    fn finish(mut self) -> Outcome {
        assert!(self.machine.is_done(), "Done, yet the machine is not done");
        assert!(self.machine.poll_action().is_none(), "an action after Done");
        assert_eq!(self.machine.poll_timeout(), None, "a timer after Done");
        let result = self.result.take().expect("finish runs after Done");
        let winner = result.as_ref().ok().map(|e| e.attempt);
        for link in &self.links {
            if Some(link.attempt) == winner {
                assert!(!link.closed, "the returned attempt was closed");
            } else {
                assert!(link.closed, "attempt {:?} was never closed", link.attempt);
            }
        }
        let (ok, tls, protocol) = match &result {
            Ok(e) => {
                self.check_established(e);
                (true, e.tls, Some(e.protocol_version))
            }
            Err(message) => {
                self.check_failure_was_due(message);
                (false, false, None)
            }
        };
        Outcome {
            ok,
            tls,
            protocol,
            target_session_attrs: self.setup.tsa,
            attempts: self.links.len(),
            faults: self.faults,
            broken: self.links.iter().filter(|l| l.broken).count(),
            trace: self.trace.finish(),
        }
    }

    fn check_established(&self, e: &Established) {
        let link = self.links.iter().find(|l| l.attempt == e.attempt);
        let link = link.expect("the returned attempt was opened");
        let told = &link.session.told;
        assert_eq!(
            e.host,
            format!("h{}", link.host),
            "the host of the returned attempt"
        );
        assert_eq!(e.tls, link.tls, "whether the returned connection uses TLS");
        let alpn = self.setup.personas[link.host].alpn;
        if let Some(why) = e
            .tls
            .then(|| crate::alpn_refusal(alpn, link.direct))
            .flatten()
        {
            panic!("accepted a TLS connection libpq refuses: {why}");
        }
        assert_eq!(
            Some(e.protocol_version),
            told.version,
            "the protocol version"
        );
        let key = e.backend_key.as_ref().map(|k| (k.pid, k.key.clone()));
        assert_eq!(key, told.key, "the backend key");
        assert_eq!(
            e.parameters.to_vec(),
            told.params,
            "the parameters reported"
        );
        assert!(e.leftover.is_empty(), "leftover bytes: {:?}", e.leftover);
        // libpq's latch: some handshake of the connect was asked for a certificate and had
        // one to send.
        assert!(
            !self.setup.cert_required || self.cert_seen == crate::ClientCert::Sent,
            "accepted a login under sslcertmode=require after {:?}",
            self.cert_seen
        );
        match satisfies(self.setup.tsa, told) {
            Some(true) => {}
            verdict => panic!(
                "accepted h{} for target_session_attrs={} on {told:?} ({verdict:?})",
                link.host, self.setup.tsa
            ),
        }
        // prefer-standby settles for a primary only when no standby could serve.
        if self.setup.tsa == "prefer-standby" && self.faults == 0 && standby(told) == Some(false) {
            for h in 0..self.setup.personas.len() {
                let facts = self.setup.personas[h].facts();
                assert!(
                    !(self.serves(h) && standby(&facts) == Some(true)),
                    "prefer-standby settled for a primary while h{h} was a healthy standby"
                );
            }
        }
    }

    fn check_failure_was_due(&self, message: &str) {
        // Every attempt's reason joins libpq's final message, an alert's text among them.
        if self.links.iter().any(|l| l.broken) {
            assert!(
                message.contains(BROKEN_MESSAGE),
                "a connection broke with an alert, and the error does not say so: {message}"
            );
        }
        // libpq gives up on every host after a refused login, and after a server that will
        // not encrypt when encryption is required.
        let required = self.setup.sslmode == "require";
        // How libpq goes on after a refused TLS handshake is not modelled here: it only
        // excuses the failure.
        let aborted = self.links.iter().any(|l| {
            let refused = l.session.started && self.setup.personas[l.host].aborts();
            refused || (required && l.session.refused_tls) || l.tls_refused
        });
        // sslcertmode=require refuses every login no handshake of the connect vouched for.
        let uncertified = self.setup.cert_required && self.cert_seen != crate::ClientCert::Sent;
        if self.faults > 0 || aborted || uncertified {
            return;
        }
        for h in 0..self.setup.personas.len() {
            let facts = self.setup.personas[h].facts();
            let fits = satisfies(self.setup.tsa, &facts).unwrap_or(true);
            assert!(
                !(self.serves(h) && fits),
                "failed ({message}) while h{h} ({:?}) would have served {}",
                self.setup.personas[h],
                self.setup.tsa
            );
        }
    }

    /// Whether host `h` lets a client in: reachable, admitting, and encrypting if required.
    fn serves(&self, h: usize) -> bool {
        let p = &self.setup.personas[h];
        let reachable = self.reachable[h].unwrap_or(true);
        reachable && p.admits() && (self.setup.sslmode != "require" || p.tls)
    }
}

/// Whether what a connection was told passes `target_session_attrs`; `None` when the machine
/// could not have known, or the attribute accepts any server.
fn satisfies(tsa: &str, told: &Told) -> Option<bool> {
    match tsa {
        "read-write" => read_only(told).map(|r| !r),
        "read-only" => read_only(told),
        "primary" => standby(told).map(|s| !s),
        "standby" => standby(told),
        _ => Some(true),
    }
}

/// libpq 14+: both reported parameters decide; otherwise `SHOW transaction_read_only`.
fn read_only(told: &Told) -> Option<bool> {
    match (told.hot_standby, told.default_read_only) {
        (Some(hot), Some(read_only)) => Some(hot || read_only),
        _ => told.show_read_only,
    }
}

/// `in_hot_standby` when reported; otherwise `pg_is_in_recovery()`.
fn standby(told: &Told) -> Option<bool> {
    told.hot_standby.or(told.in_recovery)
}

fn host_index(host: &str, hosts: usize) -> usize {
    let index = host.strip_prefix('h').and_then(|n| n.parse::<usize>().ok());
    match index {
        Some(i) if i < hosts => i,
        _ => panic!("asked to resolve {host:?}, which is not a configured host"),
    }
}

fn ip_octets(addr: SocketAddr) -> [u8; 4] {
    match addr {
        SocketAddr::V4(v4) => v4.ip().octets(),
        SocketAddr::V6(_) => unreachable!("the network only hands out IPv4 addresses"),
    }
}
