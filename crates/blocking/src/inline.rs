//! The connect loop on the caller's thread, for libpq's sequential strategy without a
//! `connect_timeout`: at most one attempt is open at a time, so nothing needs a thread of
//! its own, and no deadline needs to fire while a socket connect blocks. The machine's commands
//! are carried out as soon as it posts them and the loop waits on the attempt's socket
//! itself. With a worker thread per attempt every step crossed threads twice (a command
//! posted and woken, an event sent back), and on a busy 2-core machine each crossing waited
//! for a core: a trust connect took 1.3× libpq's time there (docs/connect.md).
//!
//! `Strategy::Race` and a set `connect_timeout` keep the workers of `driver.rs`: racing
//! attempts overlap, each in a blocking connect of its own, and the machine's
//! `connect_timeout` must be able to fire while a connect still blocks.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::net::ToSocketAddrs;
use std::time::Duration;

use pgyard_connect::{AttemptId, Established, Event};
use pgyard_driver::core::{Inline, Io, Posted, Step, WorkerCmd};
use pgyard_driver::{open_event, peer_event, Attempt, Driving, Error, Machine};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::driver::{ends, may_wait, read_step, start_tls, Next, POLL};
use crate::transport::{open, Transport};

/// One open attempt's connection.
struct Conn {
    attempt: AttemptId,
    stream: Transport,
    /// While a handshake is under way: the host named in certificate errors, and what it did
    /// with client certificates.
    handshake: Option<(String, pgyard_driver::tls::CertProbe)>,
    /// Reading ended (EOF, reset, a failed handshake): only commands are left for it.
    ended: bool,
    /// Its reads are bounded by [`POLL`] (set only where a read may come without a poll
    /// saying there is something: a TLS handshake, or after a failed poll), so that a plain
    /// connect spends no system calls setting and clearing a bound it never needs.
    timed: bool,
}

/// Bounds `stream`'s reads by [`POLL`]; whether that took.
fn bound_reads(stream: &Transport) -> bool {
    stream.sock().set_read_timeout(Some(POLL)).is_ok()
}

/// The longest single wait when the machine has no deadline: only a bound, since the loop
/// is the only one that can make progress.
const IDLE: Duration = Duration::from_millis(100);

/// The size of the buffer sockets are read into while connecting.
const READ_BUF: usize = 16 * 1024;

thread_local! {
    /// The read buffer of the connects run on this thread, kept from one to the next: only
    /// `buf[..n]` of a read is ever looked at, and zeroing a fresh 16 KiB for every connect was
    /// a sixth of the instructions a trust connect spends outside the kernel.
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `machine` on this thread until it is done, appending its attempts to `log`. `held`
/// is the established connection a reset replaces.
pub(crate) fn run(
    machine: &mut Machine,
    held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
) -> Result<(Established, Transport), Error> {
    BUF.with(|cell| match cell.try_borrow_mut() {
        Ok(mut buf) => {
            buf.resize(READ_BUF, 0);
            run_with(machine, held, log, &mut buf)
        }
        // A connect inside a connect on the same thread (not done today) gets its own.
        Err(_) => run_with(machine, held, log, &mut vec![0u8; READ_BUF]),
    })
}

fn run_with(
    machine: &mut Machine,
    mut held: Option<(AttemptId, Transport)>,
    log: &mut Vec<Attempt>,
    buf: &mut [u8],
) -> Result<(Established, Transport), Error> {
    let posted: Posted = Posted::default();
    let mut conns: Vec<Conn> = Vec::new();
    let mut events: VecDeque<Event> = VecDeque::new();
    let mut handed = None;
    let d: Driving<'_, Inline> = machine.driving(held.as_ref().map(|h| h.0));
    let (m, clock, bound, mut core) = (d.machine, d.clock, d.bound, d.core);
    let outcome = loop {
        carry_out(&posted, &mut conns, &mut events, &mut handed);
        if let Some(ev) = events.pop_front() {
            core.report(m, clock.now(), ev);
            continue;
        }
        match core.step(m, clock.now()) {
            Step::Io(Io::Resolve { token, host, port }) => {
                let found = (host.as_str(), port).to_socket_addrs();
                let result = found.map(Iterator::collect).map_err(|e| e.to_string());
                core.resolved(m, clock.now(), token, &host, result);
            }
            Step::Io(Io::Open {
                attempt,
                target,
                tcp,
                peer_user,
            }) => {
                // A walk moving on posts the previous attempt's Terminate and Close first.
                carry_out(&posted, &mut conns, &mut events, &mut handed);
                let opened = open(&target, tcp.as_ref(), bound);
                core.spawned(attempt, posted.mailbox(attempt));
                if let (true, Ok(sock)) = (peer_user, &opened) {
                    events.push_back(peer_event(attempt, sock));
                }
                events.push_back(open_event(attempt, &opened));
                if let Ok(sock) = opened {
                    conns.push(Conn {
                        attempt,
                        stream: Transport::Plain(sock),
                        handshake: None,
                        ended: false,
                        timed: false,
                    });
                }
            }
            // The old connection may be dead already; Terminate is a courtesy.
            Step::Io(Io::SendHeld { bytes }) => {
                if let Some((_, t)) = held.as_mut() {
                    let _ = t.send(&bytes);
                }
            }
            Step::Io(Io::CloseHeld) => {
                if let Some((_, t)) = held.take() {
                    t.close();
                }
            }
            Step::Wait { within } => {
                if posted.is_empty() {
                    wait(&mut conns, within, buf, &mut events);
                }
            }
            Step::Won(est) => {
                // The winner's Handover and the losers' Close are queued by now.
                carry_out(&posted, &mut conns, &mut events, &mut handed);
                break match handed.take() {
                    Some((id, t)) if id == est.attempt => Ok((*est, t)),
                    _ => Err(Error::Internal("the winning connection was lost".into())),
                };
            }
            Step::Failed(e) => break Err(e),
        }
    };
    log.append(&mut core.take_attempts());
    // Commands still queued (a failed walk's last Terminate) go out, as a worker carries out
    // its channel's commands before it sees the channel end; then whatever is open closes.
    carry_out(&posted, &mut conns, &mut events, &mut handed);
    for c in conns {
        c.stream.close();
    }
    outcome
}

/// Carries out the posted commands in order; the socket a Handover gives up goes to `handed`.
fn carry_out(
    posted: &Posted,
    conns: &mut Vec<Conn>,
    events: &mut VecDeque<Event>,
    handed: &mut Option<(AttemptId, Transport)>,
) {
    loop {
        let Some((attempt, cmd)) = posted.pop() else {
            return;
        };
        let Some(at) = conns.iter().position(|c| c.attempt == attempt) else {
            // Its socket never opened, or it was closed or handed over already.
            continue;
        };
        match cmd {
            WorkerCmd::Send(bytes) => {
                let c = &mut conns[at];
                if !c.ended && c.stream.send(&bytes).is_err() {
                    c.ended = true;
                    events.push_back(Event::Closed { attempt });
                }
            }
            WorkerCmd::StartTls(start) => {
                let mut c = conns.swap_remove(at);
                match start_tls(attempt, c.stream, start) {
                    Ok((tls, pending)) => {
                        // The handshake's own reads wait on the socket: bounded, so that the
                        // loop gets back to the machine's deadline.
                        c.timed = c.timed || bound_reads(&tls);
                        c.stream = tls;
                        c.handshake = Some(pending);
                    }
                    Err((same, ev)) => {
                        c.stream = same;
                        c.ended = true;
                        events.push_back(ev);
                    }
                }
                conns.push(c);
            }
            WorkerCmd::Close => conns.swap_remove(at).stream.close(),
            WorkerCmd::Handover => {
                let c = conns.swap_remove(at);
                if c.timed {
                    let _ = c.stream.sock().set_read_timeout(None);
                }
                *handed = Some((attempt, c.stream));
            }
        }
    }
}

/// Waits until an attempt's socket has something or the machine's deadline (`within`)
/// comes, then reads what there is; an event goes to `events`.
fn wait(
    conns: &mut [Conn],
    within: Option<Duration>,
    buf: &mut [u8],
    events: &mut VecDeque<Event>,
) {
    let live: Vec<usize> = (0..conns.len()).filter(|&i| !conns[i].ended).collect();
    // TLS may hold decrypted bytes or bytes to write, which no poll announces.
    let ready_now: Vec<usize> = live
        .iter()
        .copied()
        .filter(|&i| !may_wait(&conns[i].stream))
        .collect();
    let ready = if ready_now.is_empty() {
        let limit = within.map_or(IDLE, |w| w.min(IDLE));
        let timeout = Timespec {
            tv_sec: i64::try_from(limit.as_secs()).unwrap_or(0),
            tv_nsec: i64::from(limit.subsec_nanos()),
        };
        let mut fds: Vec<PollFd<'_>> = live
            .iter()
            .map(|&i| PollFd::new(conns[i].stream.sock(), PollFlags::IN))
            .collect();
        match poll(&mut fds, Some(&timeout)) {
            Ok(0) => return,
            Err(e) if e == rustix::io::Errno::INTR => return,
            // A failed poll falls back to timed reads.
            Err(_) => {
                for &i in &live {
                    let c = &mut conns[i];
                    c.timed = c.timed || bound_reads(&c.stream);
                }
                live.clone()
            }
            Ok(_) => live
                .iter()
                .zip(&fds)
                .filter(|(_, fd)| !fd.revents().is_empty())
                .map(|(&i, _)| i)
                .collect(),
        }
    } else {
        ready_now
    };
    for i in ready {
        let c = &mut conns[i];
        if let Next::Report(ev) = read_step(c.attempt, &mut c.stream, &mut c.handshake, buf) {
            if ends(&ev) {
                c.ended = true;
            }
            events.push_back(ev);
        }
    }
}
