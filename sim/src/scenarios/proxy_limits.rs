//! The `proxy` scenario's session mode and pool limits. The adapter's part: in session mode a
//! server given back reusable runs `DISCARD ALL` (`shared.rs`'s `discard`) and only goes back
//! to the idle list once the answer came, with the settings it reported; the idle list itself,
//! kept with the time each server joined it. The judge's part, each a promise of the pools:
//! no server stays idle past `server_idle_timeout` (the pools' timer fires at the deadline, so
//! the simulator's granularity is zero), none goes back to the idle list past its
//! `server_lifetime`, none is closed while lent, being reset or inside a transaction, and no
//! pool has more connections than its size. PAUSE and RESUME come as the admin console sends
//! them (`Pools::pause`, `Pools::resume`): while paused nothing is opened, lent or kept idle,
//! and the PAUSE completes once no server connection is left; after RESUME every client must
//! still finish.

use pgyard_proxy::{Lent, ServerId, ServerUse};
use pgyard_types::Instant;
use pgyard_wire::frame::{decode_frame, Decoded};

use super::proxy::{violation, Ev, World};
use super::proxy_connect::hop;
use crate::{trace, Trace, Violation};

/// Every client of this world logs in as `app` to the database of its name.
const CLIENTS_DATABASE: &str = "app";

impl World {
    /// Puts `server` on the adapter's idle list; `returned` when it comes back from a client
    /// (not freshly opened), which is when the pools judge its lifetime.
    pub(super) fn pool_idle(&mut self, server: ServerId, lent: Lent, returned: bool) {
        self.idle.insert(server, lent);
        self.idle_since.insert(server, (self.now, returned));
    }

    /// Takes `server` off the adapter's idle list.
    pub(super) fn unidle(&mut self, server: ServerId) -> Option<Lent> {
        self.idle_since.remove(&server);
        self.idle.remove(&server)
    }

    /// Session mode: `DISCARD ALL` on a server its client gave back clean; it rejoins the
    /// idle list when the answer has come (a hop there and back).
    pub(super) fn reset(&mut self, t: &mut Trace, lent: Lent) {
        let server = lent.id;
        let writable = self.conns.get(&server).is_some_and(|c| !c.eof);
        let mut query = bytes::BytesMut::new();
        let sent = pgyard_wire::frontend::encode_query(b"DISCARD ALL", &mut query).is_ok();
        if !(writable && sent && self.feed_server(server, &query).is_ok()) {
            self.close_conn(server);
            self.pools.release(self.now, server, false);
            self.perform_pools(t, None);
            return;
        }
        trace!(t, "t={} s{} runs DISCARD ALL", self.now.0, server.0);
        self.resetting.insert(server, lent);
        let at = Instant(self.now.0 + hop(&mut self.rng) + hop(&mut self.rng));
        self.q.push(at, Ev::ResetDone { server });
    }

    /// The answer to `DISCARD ALL` has come: a server that answered it whole goes back to the
    /// pools with what it reported; one that died or said something else is closed.
    pub(super) fn reset_done(&mut self, t: &mut Trace, server: ServerId) -> Result<(), Violation> {
        let Some(mut lent) = self.resetting.remove(&server) else {
            return Ok(());
        };
        let reply: Option<Vec<u8>> = self
            .conns
            .get_mut(&server)
            .filter(|c| !c.dead && !c.eof)
            .map(|c| c.replies.drain(..).collect());
        let clean = reply.is_some_and(|r| discarded(&r, &mut lent));
        trace!(t, "t={} s{} reset clean={clean}", self.now.0, server.0);
        if clean {
            lent.prepared.clear();
            self.pool_idle(server, lent, true);
        } else {
            self.close_conn(server);
        }
        self.pools.release(self.now, server, clean);
        self.perform_pools(t, None);
        Ok(())
    }

    /// The pools close `server`: it must not be lent, being reset, or inside a transaction.
    pub(super) fn judge_close(&mut self, server: ServerId) {
        if self.forgotten.remove(&server) {
            // A connect a PAUSE forgot, closed as it arrives.
            return;
        }
        let lent = self.holder.contains_key(&server) || self.resetting.contains_key(&server);
        let block = self.conns.get(&server).and_then(|c| c.fake.open_block());
        let busy = self.conns.get(&server).and_then(|c| c.fake.mid_protocol());
        let why = match (lent, block, busy) {
            (true, _, _) => "while in use".to_owned(),
            (_, Some((c, x)), _) => format!("inside the block of client {c} transaction {x}"),
            (_, _, Some(why)) => format!("while it {why}"),
            _ => return self.judge_idle_close(server),
        };
        let detail = format!("the pools closed server {} {why}", server.0);
        self.fault
            .get_or_insert(violation("never-closed-in-use", detail));
    }

    /// The admin console's PAUSE: idle servers close now, lent ones when they come back.
    pub(super) fn pause(&mut self, t: &mut Trace, resume_after: u64, by_name: bool) {
        self.paused_by_name = by_name;
        if by_name {
            trace!(t, "t={} PAUSE {CLIENTS_DATABASE}", self.now.0);
            self.paused = self.pools.pause_database(self.now, CLIENTS_DATABASE);
        } else {
            trace!(t, "t={} PAUSE", self.now.0);
            self.paused = self.pools.pause(self.now);
        }
        self.forgotten.extend(self.openings.keys().copied());
        self.perform_pools(t, None);
        let at = Instant(self.now.0 + resume_after);
        self.q.push(at, Ev::Resume);
    }

    /// The admin console's RESUME: the waiting clients are served.
    pub(super) fn resume(&mut self, t: &mut Trace) {
        trace!(t, "t={} RESUME", self.now.0);
        self.paused = false;
        if self.paused_by_name {
            self.pools.resume_database(self.now, CLIENTS_DATABASE);
        } else {
            self.pools.resume(self.now);
        }
        self.perform_pools(t, None);
    }

    /// The pools opened or lent `server` (`what`): never while PAUSE is in force.
    pub(super) fn judge_paused(&mut self, what: &str, server: ServerId) {
        if self.paused {
            let detail = format!("the pools {what} server {} while paused", server.0);
            self.fault
                .get_or_insert(violation("nothing-lent-while-paused", detail));
        }
    }

    /// While paused no server stays idle, and the PAUSE is complete exactly when no server
    /// connection is left.
    fn judge_pause(&self) -> Result<(), Violation> {
        if !self.paused {
            return Ok(());
        }
        let views = self.pools.servers();
        if let Some(s) = views.iter().find(|s| s.state == ServerUse::Idle) {
            let detail = format!("server {} is idle in the pools while paused", s.id.0);
            return Err(violation("nothing-lent-while-paused", detail));
        }
        let done = if self.paused_by_name {
            self.pools.pause_complete_for(CLIENTS_DATABASE)
        } else {
            self.pools.pause_complete()
        };
        if done != self.conns.is_empty() {
            let detail = format!(
                "the PAUSE reports complete={done} with {} server connections open",
                self.conns.len()
            );
            return Err(violation("pause-completes", detail));
        }
        Ok(())
    }

    /// Nothing in this world but the idle limit closes an idle server (but a PAUSE, which
    /// closes them all, a RECONNECT and a reload that shrinks the pools): one closed before
    /// its limit was closed for a wrong reason.
    fn judge_idle_close(&mut self, server: ServerId) {
        // A PAUSE closes idle servers, a RECONNECT those it retired, and a pool over the size
        // a reload set those beyond it.
        if self.paused || self.retired.contains(&server) || self.over_size(server) {
            return;
        }
        let Some(&(since, returned)) = self.idle_since.get(&server) else {
            return;
        };
        let now = self.now.0;
        if returned && since.0 == now {
            // A server coming back, closed at once: only its lifetime may close it here.
            let born = self.born.get(&server).map_or(0, |b| b.0);
            if self.limits.lifetime_ns.is_some_and(|l| now >= born + l) {
                return;
            }
            let detail = format!(
                "the pools closed server {} (opened at t={born}) as it came back at t={now}, \
                 before its lifetime ({:?} ns)",
                server.0, self.limits.lifetime_ns
            );
            self.fault.get_or_insert(violation("lifetime-kept", detail));
            return;
        }
        if self.limits.idle_ns.is_some_and(|i| now >= since.0 + i) {
            return;
        }
        let detail = format!(
            "the pools closed server {}, idle since t={}, at t={now}, before its idle limit \
             ({:?} ns)",
            server.0, since.0, self.limits.idle_ns
        );
        self.fault
            .get_or_insert(violation("idle-limit-kept", detail));
    }

    /// After every step: the limits the pools promise, and a broken promise seen where it
    /// could not be returned.
    pub(super) fn judge_limits(&mut self) -> Result<(), Violation> {
        if let Some(v) = self.fault.take() {
            return Err(v);
        }
        self.judge_sizes()?;
        self.judge_pause()?;
        self.judge_retired()?;
        let now = self.now.0;
        let (idle, life) = (self.limits.idle_ns, self.limits.lifetime_ns);
        let suspect = |(server, &(since, returned)): (&ServerId, &(Instant, bool))| {
            let born = self.born.get(server).map_or(0, |b| b.0);
            let idle_past = idle.is_some_and(|i| now > since.0 + i);
            let old = life.is_some_and(|l| returned && since.0 >= born + l);
            (idle_past || old).then_some((*server, since.0, born, idle_past))
        };
        let Some((server, since, born, idle_past)) = self.idle_since.iter().find_map(suspect)
        else {
            return Ok(());
        };
        // A server given back while a cancel to it is on its way is held out of the idle
        // list (and its timers) until the cancel is done, and judged from then on.
        let pooled = self
            .pools
            .servers()
            .iter()
            .any(|s| s.id == server && s.state == ServerUse::Idle);
        if !pooled {
            return Ok(());
        }
        let detail = if idle_past {
            format!(
                "server {} idle since t={since} is still pooled at t={now}, past its idle limit \
                 of {} ns",
                server.0,
                idle.unwrap_or(0)
            )
        } else {
            format!(
                "server {} opened at t={born} went back to the idle list at t={since}, past its \
                 lifetime of {} ns",
                server.0,
                life.unwrap_or(0)
            )
        };
        let invariant = if idle_past {
            "idle-limit-kept"
        } else {
            "lifetime-kept"
        };
        Err(violation(invariant, detail))
    }
}

/// Whether `reply` is a whole answer to `DISCARD ALL` ending in ReadyForQuery `I`; the
/// settings it reported are written into `lent`, as the adapter reads them from its session.
fn discarded(reply: &[u8], lent: &mut Lent) -> bool {
    let mut at = 0;
    let mut last = None;
    while let Ok(Decoded::Frame(f)) = decode_frame(&reply[at..], 1 << 20) {
        if f.tag == b'S' {
            let mut parts = f.body.split(|b| *b == 0);
            if let (Some(n), Some(v)) = (parts.next(), parts.next()) {
                let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                lent.settings.insert(text(n), text(v));
            }
        }
        last = Some((f.tag, f.body.first().copied()));
        at += 5 + f.body.len();
    }
    at == reply.len() && last == Some((b'Z', Some(b'I')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use pgyard_wire::backend::{self, ParameterStatus, TransactionStatus};

    #[test]
    fn a_discard_all_answer_is_read_whole_with_its_settings() {
        let mut lent = Lent {
            id: ServerId(1),
            settings: Default::default(),
            prepared: Default::default(),
        };
        let mut out = BytesMut::new();
        backend::encode_command_complete(b"DISCARD ALL", &mut out).expect("C");
        let ps = ParameterStatus {
            name: b"in_hot_standby",
            value: b"off",
        };
        ps.encode(&mut out).expect("S");
        backend::encode_ready_for_query(TransactionStatus::Idle, &mut out);
        assert!(discarded(&out, &mut lent));
        assert_eq!(lent.in_recovery(), Some(false));
        assert!(!discarded(&out[..out.len() - 1], &mut lent), "cut short");
    }
}
