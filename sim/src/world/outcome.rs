//! The end of a simulated connect: the invariants on a won session and on a failure report,
//! then the client's next step.

use std::collections::BTreeSet;

use pgyard_connect::{AttemptId, ConnectError, Established};
use pgyard_conninfo::Strategy;

use super::{attempts_text, role_fits, violation, Ev, Mode, SpecText, World};
use crate::{trace, Trace, Violation};

impl World {
    /// Client `i`'s connect ended with `result`.
    pub(super) fn done(
        &mut self,
        t: &mut Trace,
        i: usize,
        result: Result<Established, ConnectError>,
    ) -> Result<(), Violation> {
        let c = &self.clients[i];
        let winner = result.as_ref().ok().map(|e| e.attempt);
        let leftover: Vec<AttemptId> = c
            .open_now
            .iter()
            .copied()
            .filter(|a| Some(*a) != winner)
            .collect();
        if !leftover.is_empty() {
            return Err(violation(
                "every-open-closed",
                format!(
                    "client {i} finished with {leftover:?} still open{}",
                    attempts_text(c)
                ),
            ));
        }
        match result {
            Ok(est) => self.won(t, i, est),
            Err(e) => self.failed(t, i, e),
        }
    }

    fn won(&mut self, t: &mut Trace, i: usize, est: Established) -> Result<(), Violation> {
        let now = self.now;
        let listed = self.listed_nodes(&self.clients[i].spec);
        let c = &self.clients[i];
        let Some(&id) = c.socks.get(&est.attempt) else {
            return Err(violation(
                "winner-is-an-attempt",
                format!("client {i} won with unknown a{}", est.attempt.0),
            ));
        };
        let sock = self.socks.get(&id);
        let node = sock.map(|s| s.node);
        let role = sock.and_then(|s| s.session.in_recovery_at_check);
        // Stated on its own terms, not through the machine's verdict function: a TLS session
        // stands only on ALPN `postgresql`, or on none when TLS was negotiated by SSLRequest.
        if let Some((direct, alpn)) = sock.and_then(|s| s.tls).filter(|_| est.tls) {
            let acceptable = match alpn {
                Some(p) => p == b"postgresql",
                None => !direct,
            };
            if !acceptable {
                return Err(violation(
                    "tls-alpn-accepted-as-libpq",
                    format!(
                        "client {i} a{} established TLS (direct={direct}) with ALPN {:?}",
                        est.attempt.0,
                        alpn.map(String::from_utf8_lossy)
                    ),
                ));
            }
        }
        let name = node.map_or("?", |n| self.nodes[n].name.as_str());
        trace!(
            t,
            "t={} c{i} connected a{} to {name} in_recovery={role:?}",
            now.0,
            est.attempt.0,
        );
        if !node.is_some_and(|n| listed.contains(&n)) {
            return Err(violation(
                "connected-to-listed-server",
                format!("client {i} connected to node {node:?}, listed {listed:?}"),
            ));
        }
        if !role_fits(c.spec.config.target_session_attrs(), role) {
            return Err(violation(
                "target-session-attrs-met",
                format!(
                    "client {i} ({}) accepted {name} whose in_recovery was {role:?} when it answered{}",
                    SpecText(&c.spec),
                    attempts_text(c)
                ),
            ));
        }
        let started = c.core.as_ref().and_then(|k| k.attempt(est.attempt));
        if let (Some(ct_ns), Some(a)) = (c.ct_ns, started) {
            let life = now.0 - a.started.as_nanos() as u64;
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
        let c = &mut self.clients[i];
        c.open_now.remove(&est.attempt);
        c.established = Some(est.attempt);
        c.session = Some((est.attempt, id));
        c.mode = Mode::Session;
        self.stats.connected += 1;
        if let Some(n) = node {
            self.stats.sessions.push((i, n));
        }
        self.finish(t, i, true)?;
        let c = &mut self.clients[i];
        if c.mode == Mode::Session {
            if let Some(hold) = c.spec.hold_ns {
                let gen = c.gen;
                self.queue
                    .push(super::Instant(now.0 + hold), Ev::Wake(i, gen));
            }
        }
        Ok(())
    }

    fn failed(&mut self, t: &mut Trace, i: usize, e: ConnectError) -> Result<(), Violation> {
        let now = self.now;
        let c = &self.clients[i];
        let reported: BTreeSet<AttemptId> = e.reports.iter().filter_map(|r| r.attempt).collect();
        let missing: Vec<AttemptId> = c.opened_this.difference(&reported).copied().collect();
        trace!(
            t,
            "t={} c{i} failed: {} report entries",
            now.0,
            e.reports.len()
        );
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
        if !missing.is_empty() {
            return Err(violation(
                "report-names-every-attempt",
                format!(
                    "client {i}: attempts {missing:?} missing from the report:\n{}",
                    e.message()
                ),
            ));
        }
        self.stats.failed += 1;
        let excused = self.ended_by_fault_phase_attempt(i, &e);
        if excused {
            trace!(
                t,
                "t={} c{i} ended by an attempt from before the calm",
                now.0
            );
        }
        let c = &mut self.clients[i];
        c.mode = Mode::Idle;
        if c.liveness && c.expect_success && !excused {
            return Err(violation(
                "liveness-connects",
                format!(
                    "client {i} ({}) failed although a fitting server was reachable:\n{}{}",
                    SpecText(&c.spec),
                    e.message(),
                    attempts_text(c)
                ),
            ));
        }
        self.finish(t, i, false)
    }

    /// Whether a carried sequential connect ended on the failure of an attempt opened before
    /// the faults stopped. libpq ends a sequential connect at once on some failures (a server
    /// gone in the middle of its startup), failover budget or not, so a fault that struck
    /// such an attempt may still end the connect in the calm.
    fn ended_by_fault_phase_attempt(&self, i: usize, e: &ConnectError) -> bool {
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
}
