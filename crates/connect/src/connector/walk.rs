//! The walk over hosts: the slot order of a cycle, each slot's addresses (resolved when
//! needed), the two passes of `prefer-*`, and what starts the next connection.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pgyard_conninfo::typed::{LoadBalanceHosts, SlotKind, TargetSessionAttrs};
use pgyard_types::{uniform_inclusive, Instant};

use super::attempt::Plan;
use super::{Connector, Phase, PlantedBug};
use crate::conn::{Check, ServerRole};
use crate::{
    resolver_text, Action, FailureKind, HostStatus, NumericHost, OpenTarget, ResolveToken,
};

/// Base delay between failover cycles; doubles per cycle.
const FAILOVER_BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Cap on the delay between failover cycles.
const FAILOVER_BACKOFF_CAP: Duration = Duration::from_secs(2);

/// One cycle's walk over the slots: their order, where the walk stands in it, and the
/// timers that belong to it.
pub(super) struct Walk {
    /// Slot indices in the order this cycle tries them.
    pub(super) order: Vec<usize>,
    /// Whether this is the second pass of `prefer-*` (any server is accepted).
    pub(super) second_pass: bool,
    /// Position in `order`; `None` before the first slot.
    pos: Option<usize>,
    /// The current slot's addresses, and the next one to try.
    addrs: Vec<OpenTarget>,
    next_addr: usize,
    /// The resolution the current slot waits for, and the slot.
    resolving: Option<(ResolveToken, usize)>,
    /// The last `connect_timeout` deadline and the (position, address) it was armed for.
    pub(super) last_timer: Option<((usize, usize), Option<Instant>)>,
    /// When race mode starts another connection without waiting for a failure.
    pub(super) race_next_at: Option<Instant>,
}

impl Walk {
    fn new(order: Vec<usize>) -> Walk {
        Walk {
            order,
            second_pass: false,
            pos: None,
            addrs: Vec::new(),
            next_addr: 0,
            resolving: None,
            last_timer: None,
            race_next_at: None,
        }
    }

    /// The current slot's next address as (position, address index, target), moving past it.
    fn take_address(&mut self) -> Option<(usize, usize, OpenTarget)> {
        let pos = self.pos?;
        let idx = self.next_addr;
        let target = self.addrs.get(idx)?.clone();
        self.next_addr += 1;
        Some((pos, idx, target))
    }

    /// Moves to the next slot, starting the second pass after the first when
    /// `second_pass_allowed`; the slot, or `None` when the walk is over.
    fn next_slot(&mut self, second_pass_allowed: bool) -> Option<usize> {
        let next = self.pos.map_or(0, |p| p + 1);
        if next < self.order.len() {
            self.pos = Some(next);
        } else if !self.second_pass && second_pass_allowed {
            self.second_pass = true;
            self.pos = Some(0);
        } else {
            return None;
        }
        let slot = *self.order.get(self.pos?)?;
        self.addrs.clear();
        self.next_addr = 0;
        Some(slot)
    }
}

/// What a slot needs before its addresses can be tried.
enum Prep {
    Ready(Vec<OpenTarget>),
    Resolve { host: String, port: u16 },
    NextSlot(String),
    Abort(String),
}

/// What asking the walk for another connection came to.
enum Next {
    Started,
    Waiting,
    Exhausted,
    /// A slot's error ends the connect, which is left to the caller.
    Aborted,
    /// Opening already ended the connect (a bad `connect_timeout`): ending it again would
    /// emit a second, empty Done.
    Finished,
}

impl Connector {
    /// Computes the slot order and starts walking it.
    pub(super) fn begin_cycle(&mut self, now: Instant) {
        let n = self.config.slots().len();
        let mut order: Vec<usize> = (0..n).collect();
        if let Some(mem) = self.memory.as_mut() {
            if n > 0 {
                let start = (mem.take_start() % n as u64) as usize;
                order.rotate_left(start);
            }
            let check = Check::for_pass(self.config.target_session_attrs(), false);
            let slots = self.config.slots();
            let bad = |&s: &usize| -> bool {
                let slot = &slots[s];
                let status = mem.fresh_status(
                    slot.display_host(),
                    slot.port_raw().unwrap_or_default(),
                    now,
                );
                match status {
                    Some(HostStatus::Down) => true,
                    Some(HostStatus::Up(Some(role))) => !role_fits(check, role),
                    _ => false,
                }
            };
            let (good, worse): (Vec<usize>, Vec<usize>) = order.iter().partition(|s| !bad(s));
            order = good.into_iter().chain(worse).collect();
        }
        self.phase = Phase::Walking(Walk::new(order));
    }

    /// Starts work: in sequential mode one connection at a time; in race mode another one
    /// when `force` (a failure or the stagger) or nothing runs.
    pub(super) fn pump(&mut self, now: Instant, force: bool) {
        if !matches!(self.phase, Phase::Walking(_)) {
            return;
        }
        let may_add = self.runs.is_empty() || (self.race() && force);
        if !may_add {
            return;
        }
        match self.next_target(now) {
            Next::Started => {
                if self.race() {
                    let at = now + self.config.race_stagger();
                    if let Some(walk) = self.walk_mut() {
                        walk.race_next_at = Some(at);
                    }
                }
            }
            Next::Waiting | Next::Finished => {}
            Next::Aborted => self.abort(),
            Next::Exhausted => {
                if let Some(walk) = self.walk_mut() {
                    walk.race_next_at = None;
                }
                if self.runs.is_empty() {
                    self.end_of_walk(now);
                }
            }
        }
    }

    /// Every address failed: walk again after a backoff while `failover_timeout` allows,
    /// else give up.
    fn end_of_walk(&mut self, now: Instant) {
        match self.failover_deadline {
            Some(deadline) if deadline > now => {
                let factor = 1u32.checked_shl(self.cycle.min(16)).unwrap_or(u32::MAX);
                let wait = FAILOVER_BACKOFF_BASE
                    .saturating_mul(factor)
                    .min(FAILOVER_BACKOFF_CAP)
                    .min(deadline.saturating_duration_since(now));
                self.cycle = self.cycle.saturating_add(1);
                self.phase = Phase::Backoff { until: now + wait };
            }
            _ => self.abort(),
        }
    }

    /// Whether `target_session_attrs` has a second pass that accepts any server.
    fn prefer_mode(&self) -> bool {
        matches!(
            self.config.target_session_attrs(),
            TargetSessionAttrs::PreferStandby | TargetSessionAttrs::PreferPrimary
        )
    }

    /// Starts the walk's next address, moving through slots (resolving or skipping them) as
    /// needed.
    fn next_target(&mut self, now: Instant) -> Next {
        loop {
            let second_pass_allowed =
                self.prefer_mode() && !self.bug(PlantedBug::SkipPreferSecondPass);
            let Some(walk) = self.walk_mut() else {
                // Only pump asks, and only while walking.
                return Next::Waiting;
            };
            if walk.resolving.is_some() {
                return Next::Waiting;
            }
            if let Some((pos, idx, target)) = walk.take_address() {
                let opened = self.start_run(now, pos, idx, target);
                if self.is_done() {
                    return Next::Finished;
                }
                if !opened {
                    // The address failed before connecting; try the next.
                    continue;
                }
                return Next::Started;
            }
            let Some(slot) = walk.next_slot(second_pass_allowed) else {
                return Next::Exhausted;
            };
            match self.prepare_slot(slot) {
                Prep::Ready(addrs) => self.set_addrs(addrs),
                Prep::Resolve { host, port } => {
                    let token = ResolveToken(self.next_token);
                    self.next_token += 1;
                    if let Some(walk) = self.walk_mut() {
                        walk.resolving = Some((token, slot));
                    }
                    self.actions
                        .push_back(Action::Resolve { token, host, port });
                    return Next::Waiting;
                }
                Prep::NextSlot(msg) => {
                    self.remember(slot, HostStatus::Down, now);
                    self.push_plain_report(slot, msg, FailureKind::Configuration);
                }
                Prep::Abort(msg) => {
                    self.push_plain_report(slot, msg, FailureKind::Configuration);
                    return Next::Aborted;
                }
            }
        }
    }

    /// Gives up the rest of `plan`'s slot, unless the walk has moved past it already.
    pub(super) fn skip_slot_of(&mut self, plan: &Plan) {
        if let Some(walk) = self.walk_mut() {
            if walk.pos == Some(plan.pos) && walk.second_pass == plan.second_pass {
                walk.next_addr = walk.addrs.len();
            }
        }
    }

    fn set_addrs(&mut self, mut addrs: Vec<OpenTarget>) {
        if self.config.load_balance_hosts() == LoadBalanceHosts::Random {
            for i in 1..addrs.len() {
                let j = (uniform_inclusive(&mut self.rng, i as u64) as usize).min(i);
                addrs.swap(i, j);
            }
        }
        if let Some(walk) = self.walk_mut() {
            walk.addrs = addrs;
            walk.next_addr = 0;
        }
    }

    pub(super) fn on_resolved(
        &mut self,
        now: Instant,
        token: ResolveToken,
        result: Result<Vec<SocketAddr>, String>,
    ) {
        let Some(walk) = self.walk_mut() else {
            return;
        };
        let Some((t, slot)) = walk.resolving else {
            return;
        };
        if t != token {
            return;
        }
        walk.resolving = None;
        // The host's name is only needed for an error line.
        let host = |c: &Self| {
            String::from_utf8_lossy(c.config.slots()[slot].host().unwrap_or_default()).into_owned()
        };
        let address = self.config.slots()[slot].kind() == SlotKind::Address;
        match result {
            Ok(addrs) if !addrs.is_empty() => {
                self.set_addrs(addrs.into_iter().map(OpenTarget::Tcp).collect())
            }
            // A link-local `hostaddr` with a zone the system knows no interface by: libpq's
            // AI_NUMERICHOST lookup fails with EAI_NONAME, whatever the resolver said.
            _ if address => {
                let text = self.config.slots()[slot].hostaddr().unwrap_or_default();
                let text = unparsable(&String::from_utf8_lossy(text));
                self.remember(slot, HostStatus::Down, now);
                self.push_plain_report(slot, text, FailureKind::Configuration);
            }
            Ok(_) => {
                let host = host(self);
                self.remember(slot, HostStatus::Down, now);
                self.push_plain_report(
                    slot,
                    format!("could not translate host name \"{host}\" to address: Name or service not known\n"),
                    FailureKind::Transient,
                );
            }
            Err(message) => {
                let host = host(self);
                self.remember(slot, HostStatus::Down, now);
                let text = resolver_text(&message);
                self.push_plain_report(
                    slot,
                    format!("could not translate host name \"{host}\" to address: {text}\n"),
                    FailureKind::Transient,
                );
            }
        }
        let force = self.race();
        self.pump(now, force);
    }

    fn prepare_slot(&self, slot: usize) -> Prep {
        let s = &self.config.slots()[slot];
        let msg = |e: &pgyard_conninfo::typed::SlotError| {
            String::from_utf8_lossy(&e.error().libpq_message()).into_owned()
        };
        let port = match s.port() {
            Ok(p) => p,
            Err(e) if e.aborts() => return Prep::Abort(msg(&e)),
            Err(e) => return Prep::NextSlot(msg(&e)),
        };
        match s.kind() {
            SlotKind::UnixSocket | SlotKind::DefaultUnixSocket => match s.unix_socket_path() {
                Some(Ok(p)) => Prep::Ready(vec![OpenTarget::Unix(p)]),
                Some(Err(e)) if e.aborts() => Prep::Abort(msg(&e)),
                Some(Err(e)) => Prep::NextSlot(msg(&e)),
                None => Prep::NextSlot(String::new()),
            },
            SlotKind::Address => {
                let text = String::from_utf8_lossy(s.hostaddr().unwrap_or_default()).into_owned();
                // getaddrinfo with AI_NUMERICHOST: inet_aton's forms (`127.1`), then IPv6
                // with its zone.
                match crate::numeric_host(&text) {
                    NumericHost::Interface => Prep::Resolve { host: text, port },
                    numeric => match numeric.at(port) {
                        Some(addr) => Prep::Ready(vec![OpenTarget::Tcp(addr)]),
                        None => Prep::NextSlot(unparsable(&text)),
                    },
                }
            }
            SlotKind::HostName => {
                let host = String::from_utf8_lossy(s.host().unwrap_or_default()).into_owned();
                // A numeric host needs no lookup (getaddrinfo returns it as is).
                match host.parse::<IpAddr>() {
                    Ok(ip) => Prep::Ready(vec![OpenTarget::Tcp(SocketAddr::new(ip, port))]),
                    Err(_) => Prep::Resolve { host, port },
                }
            }
        }
    }
}

fn role_fits(check: Check, role: ServerRole) -> bool {
    match check {
        Check::Any => true,
        Check::Primary | Check::ReadWrite => role == ServerRole::Primary,
        Check::Standby | Check::ReadOnly => role == ServerRole::Standby,
    }
}

/// libpq's line for a `hostaddr` that `getaddrinfo` with `AI_NUMERICHOST` refuses.
fn unparsable(text: &str) -> String {
    format!("could not parse network address \"{text}\": Name or service not known\n")
}
