//! The walk over hosts: the slot order of a cycle, each slot's addresses (resolved when
//! needed), the two passes of `prefer-*`, and what starts the next connection.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use pgyard_conninfo::typed::{LoadBalanceHosts, SlotKind, TargetSessionAttrs};
use pgyard_types::{uniform_inclusive, Instant};

use super::attempt::Plan;
use super::{BugId, Connector};
use crate::conn::{Check, ServerRole};
use crate::{resolver_text, Action, FailureKind, HostStatus, OpenTarget, ResolveToken};

/// Base delay between failover cycles; doubles per cycle.
const FAILOVER_BACKOFF_BASE: Duration = Duration::from_millis(100);
/// Cap on the delay between failover cycles.
const FAILOVER_BACKOFF_CAP: Duration = Duration::from_secs(2);

/// Where the walk stands: the pass, the position in the slot order, and that slot's
/// addresses (or the resolution they wait for).
#[derive(Default)]
pub(super) struct Cursor {
    pub(super) second_pass: bool,
    pos: Option<usize>,
    addrs: Vec<OpenTarget>,
    next_addr: usize,
    resolving: Option<(ResolveToken, usize)>,
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
    Aborted,
}

impl Connector {
    /// Computes the slot order and resets the cursor for a new walk.
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
        self.order = order;
        self.cursor = Cursor::default();
        self.last_timer = None;
        self.race_next_at = None;
    }

    /// Starts work: in sequential mode one connection at a time; in race mode another one
    /// when `force` (a failure or the stagger) or nothing runs.
    pub(super) fn pump(&mut self, now: Instant, force: bool) {
        if self.done || self.backoff_until.is_some() {
            return;
        }
        let may_add = self.runs.is_empty() || (self.race() && force);
        if !may_add {
            return;
        }
        match self.next_target(now) {
            Next::Started => {
                if self.race() {
                    self.race_next_at = Some(now + self.config.race_stagger());
                }
            }
            Next::Waiting => {}
            Next::Aborted => self.abort(),
            Next::Exhausted => {
                self.race_next_at = None;
                if self.runs.is_empty() {
                    self.end_of_walk(now);
                }
            }
        }
    }

    fn end_of_walk(&mut self, now: Instant) {
        match self.failover_deadline {
            Some(deadline) if deadline > now => {
                let factor = 1u32.checked_shl(self.cycle.min(16)).unwrap_or(u32::MAX);
                let wait = FAILOVER_BACKOFF_BASE
                    .saturating_mul(factor)
                    .min(FAILOVER_BACKOFF_CAP)
                    .min(deadline.saturating_duration_since(now));
                self.cycle = self.cycle.saturating_add(1);
                self.backoff_until = Some(now + wait);
            }
            _ => self.abort(),
        }
    }

    fn prefer_mode(&self) -> bool {
        matches!(
            self.config.target_session_attrs(),
            TargetSessionAttrs::PreferStandby | TargetSessionAttrs::PreferPrimary
        )
    }

    fn next_target(&mut self, now: Instant) -> Next {
        loop {
            if self.cursor.resolving.is_some() {
                return Next::Waiting;
            }
            if let Some(pos) = self.cursor.pos {
                if self.cursor.next_addr < self.cursor.addrs.len() {
                    let idx = self.cursor.next_addr;
                    self.cursor.next_addr += 1;
                    let target = self.cursor.addrs[idx].clone();
                    let opened = self.start_run(now, pos, idx, target);
                    if self.done {
                        return Next::Aborted;
                    }
                    if !opened {
                        // The address failed before connecting; try the next.
                        continue;
                    }
                    return Next::Started;
                }
            }
            let next = self.cursor.pos.map_or(0, |p| p + 1);
            if next < self.order.len() {
                self.cursor.pos = Some(next);
            } else if !self.cursor.second_pass && self.prefer_mode() && !self.bug(BugId::NoPass2) {
                self.cursor.second_pass = true;
                self.cursor.pos = Some(0);
            } else {
                return Next::Exhausted;
            }
            let Some(&slot) = self.cursor.pos.and_then(|p| self.order.get(p)) else {
                return Next::Exhausted;
            };
            self.cursor.addrs.clear();
            self.cursor.next_addr = 0;
            match self.prepare_slot(slot) {
                Prep::Ready(addrs) => self.set_addrs(addrs),
                Prep::Resolve { host, port } => {
                    let token = ResolveToken(self.next_token);
                    self.next_token += 1;
                    self.cursor.resolving = Some((token, slot));
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
        if self.cursor.pos == Some(plan.pos) && self.cursor.second_pass == plan.second_pass {
            self.cursor.next_addr = self.cursor.addrs.len();
        }
    }

    fn set_addrs(&mut self, mut addrs: Vec<OpenTarget>) {
        if self.config.load_balance_hosts() == LoadBalanceHosts::Random {
            for i in 1..addrs.len() {
                let j = (uniform_inclusive(&mut self.rng, i as u64) as usize).min(i);
                addrs.swap(i, j);
            }
        }
        self.cursor.addrs = addrs;
        self.cursor.next_addr = 0;
    }

    pub(super) fn on_resolved(
        &mut self,
        now: Instant,
        token: ResolveToken,
        result: Result<Vec<SocketAddr>, String>,
    ) {
        let Some((t, slot)) = self.cursor.resolving else {
            return;
        };
        if t != token {
            return;
        }
        self.cursor.resolving = None;
        let host = String::from_utf8_lossy(self.config.slots()[slot].host().unwrap_or_default())
            .into_owned();
        match result {
            Ok(addrs) if !addrs.is_empty() => {
                self.set_addrs(addrs.into_iter().map(OpenTarget::Tcp).collect())
            }
            Ok(_) => {
                self.remember(slot, HostStatus::Down, now);
                self.push_plain_report(
                    slot,
                    format!("could not translate host name \"{host}\" to address: Name or service not known\n"),
                    FailureKind::Transient,
                );
            }
            Err(message) => {
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
                match text.parse::<IpAddr>() {
                    Ok(ip) => Prep::Ready(vec![OpenTarget::Tcp(SocketAddr::new(ip, port))]),
                    Err(_) => Prep::NextSlot(format!(
                        "could not parse network address \"{text}\": Name or service not known\n"
                    )),
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
