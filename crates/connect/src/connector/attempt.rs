//! One attempt on one address: opening its connection (again, for encryption fallback),
//! feeding it events, and what its success or failure does to the whole connect.

use pgyard_conninfo::typed::{SlotKind, SslMode};
use pgyard_types::{Instant, RngCore};
use pgyard_wire::auth::NONCE_RAW_LEN;

use super::{Connector, Phase, PlantedBug};
use crate::conn::{self, Conn, FailClass, Method, Out, Verdict};
use crate::report;
use crate::{
    Action, AttemptId, AttemptReport, ConnectError, Established, FailureKind, HostStatus,
    OpenTarget, TcpOptions, TlsVerify,
};

/// What one address is tried with: the slot and pass it belongs to, its encryption methods
/// in order, and the deadline its connections share.
pub(super) struct Plan {
    pub(super) slot: usize,
    pub(super) pos: usize,
    pub(super) target: OpenTarget,
    pub(super) second_pass: bool,
    pub(super) methods: &'static [Method],
    pub(super) method_idx: usize,
    pub(super) deadline: Option<Instant>,
    /// The startup packet carries `application_name` (libpq's `send_appname`, reset for
    /// every address): false after a 42704 refusal, on the new connection that follows.
    pub(super) send_appname: bool,
}

/// One address being tried: its plan and the connection of the current method.
pub(super) struct Run {
    pub(super) plan: Plan,
    pub(super) id: AttemptId,
    pub(super) conn: Conn,
    /// Index of the attempt's entry in the error buffer.
    pub(super) report: usize,
    /// Who owns the server's end of its Unix socket ([`Event::PeerUser`]).
    pub(super) peer: Option<Result<String, String>>,
}

impl Connector {
    /// The index in `runs` of attempt `id`, if it is still running.
    pub(super) fn run_index(&self, id: AttemptId) -> Option<usize> {
        self.runs.iter().position(|r| r.id == id)
    }

    /// Appends `msg` to the error-buffer entry of `runs[run]`.
    pub(super) fn append(&mut self, run: usize, msg: &str) {
        let r = self.runs[run].report;
        if let Some(rep) = self.reports.get_mut(r) {
            rep.text.push_str(msg);
        }
    }

    /// `requirepeer`, when set and not empty (libpq checks nothing for an empty one).
    pub(super) fn requirepeer(&self) -> Option<&[u8]> {
        self.config.requirepeer().filter(|r| !r.is_empty())
    }

    /// libpq's refusal of attempt `id`'s Unix socket under `requirepeer`: the peer's user is
    /// unknown, or not the one required. Checked when the socket connects, before anything
    /// is sent; `None` for TCP, without `requirepeer`, or when the owner is the one named.
    pub(super) fn peer_refusal(&mut self, id: AttemptId) -> Option<String> {
        let i = self.run_index(id)?;
        if !matches!(self.runs[i].plan.target, OpenTarget::Unix(_)) {
            return None;
        }
        let want = String::from_utf8_lossy(self.requirepeer()?).into_owned();
        match self.runs[i].peer.take() {
            None => Some("could not get peer credentials: not reported by the driver\n".into()),
            Some(Err(why)) => Some(format!("{why}\n")),
            Some(Ok(user)) if user == want => None,
            Some(Ok(user)) => Some(format!(
                "requirepeer specifies \"{want}\", but actual peer user name is \"{user}\"\n"
            )),
        }
    }

    /// Keeps what a handshake of attempt `id` saw of client certificates, if it is still
    /// running (events of ended attempts are ignored throughout), and tells every running
    /// connection, each of which judges its AuthenticationOk by it.
    pub(super) fn latch_client_cert(&mut self, id: AttemptId, seen: crate::ClientCert) {
        if self.run_index(id).is_some() && seen > self.client_cert {
            self.client_cert = seen;
            for run in &mut self.runs {
                run.conn.client_cert = seen;
            }
        }
    }

    /// Feeds attempt `id`'s connection through `f`, performs what it asks for, and acts on
    /// how it stands afterwards.
    pub(super) fn with_run(
        &mut self,
        now: Instant,
        id: AttemptId,
        f: impl FnOnce(&mut Conn, &mut Vec<Out>) -> Verdict,
    ) {
        let Some(i) = self.run_index(id) else { return };
        // The list is the machine's spare one, handed back empty below: no allocation per
        // event.
        let mut out = std::mem::take(&mut self.out_buf);
        let verdict = f(&mut self.runs[i].conn, &mut out);
        if self.runs[i].conn.fell_back_to_plain {
            self.runs[i].conn.fell_back_to_plain = false;
            self.runs[i].plan.method_idx += 1;
        }
        for o in out.drain(..) {
            match o {
                Out::Send(bytes) => self.actions.push_back(Action::Send { attempt: id, bytes }),
                Out::StartTls { direct } => {
                    let start = self.start_tls(id, self.runs[i].plan.slot, direct);
                    self.actions.push_back(start);
                }
            }
        }
        self.out_buf = out;
        let msgs = std::mem::take(&mut self.runs[i].conn.messages);
        self.append(i, &msgs);
        match verdict {
            Verdict::Pending => {}
            Verdict::Qualified => self.win(now, i),
            Verdict::Failed { class, kind } => self.fail_run(now, i, class, kind),
        }
    }

    fn win(&mut self, now: Instant, i: usize) {
        let mut run = self.runs.remove(i);
        self.remember(run.plan.slot, HostStatus::Up(run.conn.role), now);
        // Losers of a race: Terminate where the protocol is up, then Close.
        for other in self.runs.drain(..) {
            if other.conn.startup_sent && !other.conn.in_tls_handshake() {
                self.actions.push_back(Action::Send {
                    attempt: other.id,
                    bytes: conn::terminate_bytes(),
                });
            }
            self.actions.push_back(Action::Close { attempt: other.id });
            if let Some(rep) = self.reports.get_mut(other.report) {
                rep.cancelled = true;
            }
        }
        let slot = &self.config.slots()[run.plan.slot];
        let est = Established {
            attempt: run.id,
            slot: run.plan.slot,
            host: String::from_utf8_lossy(slot.display_host()).into_owned(),
            target: run.plan.target.clone(),
            parameters: run.conn.take_parameters(),
            backend_key: run.conn.backend_key.take(),
            protocol_version: (run.conn.protocol.major(), run.conn.protocol.minor()),
            tls: run.conn.tls,
            role: run.conn.role,
            leftover: std::mem::take(&mut run.conn.leftover),
            refused_options: std::mem::take(&mut run.conn.refused_options),
        };
        self.reports.clear();
        self.finish(Ok(est));
    }

    fn finish(&mut self, result: Result<Established, ConnectError>) {
        let established = result.as_ref().ok().map(|est| est.attempt);
        self.phase = Phase::Done { established };
        self.actions.push_back(Action::Done(result.map(Box::new)));
    }

    pub(super) fn abort(&mut self) {
        for other in self.runs.drain(..) {
            self.actions.push_back(Action::Close { attempt: other.id });
        }
        let reports = std::mem::take(&mut self.reports);
        self.finish(Err(ConnectError { reports }));
    }

    /// The TLS handshake for attempt `id` to `slot`: SNI and verify-full use the slot's host.
    fn start_tls(&self, id: AttemptId, slot: usize, direct: bool) -> Action {
        let slot = &self.config.slots()[slot];
        let server_name = slot
            .host()
            .filter(|h| !h.is_empty() && !slot.kind().is_unix_socket())
            .map(|h| String::from_utf8_lossy(h).into_owned());
        let verify = match self.config.sslmode() {
            SslMode::VerifyFull => TlsVerify::Full,
            SslMode::VerifyCa => TlsVerify::Ca,
            _ => TlsVerify::None,
        };
        Action::StartTls {
            attempt: id,
            server_name,
            direct,
            verify,
        }
    }

    /// Ends connection `i` with `class`, its report marked `kind`, and moves on as libpq would.
    pub(super) fn fail_run(&mut self, now: Instant, i: usize, class: FailClass, kind: FailureKind) {
        let mut run = self.runs.remove(i);
        if let Some(rep) = self.reports.get_mut(run.report) {
            rep.kind = kind;
            rep.server_fields = run.conn.server_fields.take();
        }
        self.actions.push_back(Action::Close { attempt: run.id });
        #[cfg(feature = "planted-bugs")]
        {
            self.stale_role = Some(run.conn.role_state());
        }
        let class = if class == FailClass::NextSlot && self.bug(PlantedBug::StartupErrorNextAddress)
        {
            FailClass::NextAddr
        } else {
            class
        };
        match class {
            FailClass::NextMethod => {
                if run.plan.method_idx + 1 < run.plan.methods.len() {
                    run.plan.method_idx += 1;
                    let old = run.id;
                    if !self.open_conn(now, run.plan, Some(old)) {
                        self.pump(now, true);
                    }
                    return;
                }
                if self.race() {
                    self.remember(run.plan.slot, HostStatus::Down, now);
                    self.pump(now, true);
                } else {
                    self.abort();
                }
                return;
            }
            FailClass::WithoutAppName => {
                // libpq's retry for servers that refuse `application_name` (42704): the same
                // address, a new connection with the encryption in use, no name this time.
                run.plan.send_appname = false;
                let in_use = if run.conn.tls {
                    Method::Ssl
                } else {
                    Method::Plain
                };
                if let Some(i) = run.plan.methods.iter().position(|m| *m == in_use) {
                    run.plan.method_idx = i;
                }
                if !self.open_conn(now, run.plan, Some(run.id)) {
                    self.pump(now, true);
                }
                return;
            }
            FailClass::NextAddr => self.remember(run.plan.slot, HostStatus::Down, now),
            FailClass::NextSlot => {
                self.remember(run.plan.slot, HostStatus::Down, now);
                self.skip_slot_of(&run.plan);
            }
            FailClass::Mismatch => {
                self.remember(run.plan.slot, HostStatus::Up(run.conn.role), now);
                if !self.config.keep_trying_addresses_after_mismatch() {
                    self.skip_slot_of(&run.plan);
                }
            }
            FailClass::Abort => {
                if !self.race() {
                    self.abort();
                    return;
                }
            }
        }
        self.pump(now, true);
    }

    fn methods_for(&self, target: &OpenTarget) -> &'static [Method] {
        if matches!(target, OpenTarget::Unix(_)) {
            return &[Method::Plain];
        }
        match self.config.sslmode() {
            SslMode::Disable => &[Method::Plain],
            SslMode::Allow => &[Method::Plain, Method::Ssl],
            SslMode::Prefer => &[Method::Ssl, Method::Plain],
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => &[Method::Ssl],
        }
    }

    /// Starts trying address `addr_idx` (`target`) of the slot at `pos` in the walk's order.
    pub(super) fn start_run(
        &mut self,
        now: Instant,
        pos: usize,
        addr_idx: usize,
        target: OpenTarget,
    ) -> bool {
        let methods = self.methods_for(&target);
        let timeout = self.timeout.clone().ok().flatten();
        let drop_timeout = self.bug(PlantedBug::DropAttemptTimeout);
        let race = self.race();
        let Some(walk) = self.walk_mut() else {
            return false;
        };
        let Some(&slot) = walk.order.get(pos) else {
            return false;
        };
        // libpq re-arms the timer only when (host, address) changes; race runs each get one.
        let key = (pos, addr_idx);
        let deadline = if drop_timeout {
            None
        } else {
            match walk.last_timer {
                Some((k, d)) if k == key && !race => d,
                _ => timeout.map(|t| now + t),
            }
        };
        walk.last_timer = Some((key, deadline));
        let plan = Plan {
            slot,
            pos,
            target,
            second_pass: walk.second_pass,
            methods,
            method_idx: 0,
            deadline,
            send_appname: true,
        };
        self.open_conn(now, plan, None)
    }

    /// Opens a new connection for `plan` with its current method (`old`: the id of the
    /// connection it replaces, for encryption fallback). False when the address was skipped
    /// (or the whole connect aborted) before a socket was asked for.
    fn open_conn(&mut self, now: Instant, plan: Plan, old: Option<AttemptId>) -> bool {
        let id = self.attempt_id(old);
        let conn = self.new_conn(&plan);
        let report = self.push_attempt_report(id, &plan);
        // TCP socket options are parsed when the socket is made; a bad one skips the address.
        let tcp = match &plan.target {
            OpenTarget::Unix(_) => None,
            OpenTarget::Tcp(_) => match self.tcp_options() {
                Ok(o) => Some(o),
                Err(msg) => {
                    self.configuration_failure(report, &msg);
                    self.remember(plan.slot, HostStatus::Down, now);
                    return false;
                }
            },
        };
        // libpq reads connect_timeout when it first connects, so a bad value fails the
        // connect there, after the first attempt's prefix.
        if !self.first_open_done {
            self.first_open_done = true;
            if let Err(msg) = self.timeout.clone() {
                self.configuration_failure(report, &msg);
                self.abort();
                return false;
            }
        }
        let peer_user = matches!(plan.target, OpenTarget::Unix(_)) && self.requirepeer().is_some();
        self.actions.push_back(Action::Open {
            attempt: id,
            target: plan.target.clone(),
            tcp,
            peer_user,
        });
        self.runs.push(Run {
            plan,
            id,
            conn,
            report,
            peer: None,
        });
        true
    }

    /// A new attempt id (the replaced one again only under a planted bug).
    fn attempt_id(&mut self, old: Option<AttemptId>) -> AttemptId {
        match old {
            Some(old) if self.bug(PlantedBug::ReuseClosedAttempt) => old,
            _ => {
                let id = AttemptId(self.next_id);
                self.next_id += 1;
                id
            }
        }
    }

    /// A connection for `plan`'s current method, with a SCRAM nonce of its own.
    fn new_conn(&mut self, plan: &Plan) -> Conn {
        let method = plan
            .methods
            .get(plan.method_idx)
            .copied()
            .unwrap_or(Method::Plain);
        let plain_next = plan.methods.get(plan.method_idx + 1) == Some(&Method::Plain);
        let params = self.conn_params(plan.slot, plan.second_pass, plan.send_appname);
        let mut nonce = [0u8; NONCE_RAW_LEN];
        self.nonce_rng.fill_bytes(&mut nonce);
        let mut conn = Conn::new(method, plain_next, params, nonce);
        conn.client_cert = self.client_cert;
        self.plant_in_conn(conn)
    }

    /// Opens the attempt's entry in the error buffer with libpq's host-identity prefix, and
    /// returns its index.
    fn push_attempt_report(&mut self, id: AttemptId, plan: &Plan) -> usize {
        let slot = &self.config.slots()[plan.slot];
        // The prefix names hostaddr for address slots, else host (spec §8.4).
        let shown = if slot.kind() == SlotKind::Address {
            slot.hostaddr().unwrap_or_default()
        } else {
            slot.host().unwrap_or_default()
        };
        let port = match slot.port_raw() {
            Some(p) if !p.is_empty() => p,
            _ => b"5432",
        };
        let prefix = report::prefix_for(
            slot.kind() == SlotKind::Address,
            &String::from_utf8_lossy(shown),
            &String::from_utf8_lossy(port),
            &plan.target,
        );
        self.reports.push(AttemptReport {
            attempt: Some(id),
            slot: Some(plan.slot),
            target: Some(plan.target.clone()),
            prefix,
            text: String::new(),
            cancelled: false,
            kind: FailureKind::Transient,
            server_fields: None,
        });
        self.reports.len() - 1
    }

    /// Ends entry `report` of the error buffer with a configuration error.
    fn configuration_failure(&mut self, report: usize, msg: &str) {
        if let Some(rep) = self.reports.get_mut(report) {
            rep.text.push_str(msg);
            rep.kind = FailureKind::Configuration;
        }
    }

    fn tcp_options(&self) -> Result<TcpOptions, String> {
        let c = &self.config;
        let m = |e: pgyard_conninfo::typed::ConfigError| {
            String::from_utf8_lossy(&e.libpq_message()).into_owned()
        };
        // libpq's ladder: with keepalives off it reads none of the keepalive timings and not
        // `tcp_user_timeout` either (an invalid value there is never seen, and the timeout
        // is not set), so neither is read here.
        if !c.keepalives().map_err(m)? {
            return Ok(TcpOptions {
                keepalives: false,
                ..TcpOptions::default()
            });
        }
        Ok(TcpOptions {
            keepalives: true,
            keepalives_idle: c.keepalives_idle().map_err(m)?,
            keepalives_interval: c.keepalives_interval().map_err(m)?,
            keepalives_count: c.keepalives_count().map_err(m)?,
            tcp_user_timeout: c.tcp_user_timeout().map_err(m)?,
        })
    }
}
