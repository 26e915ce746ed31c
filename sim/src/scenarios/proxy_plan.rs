//! What each client of the `proxy` scenario does: a few transactions of seven kinds, some
//! preceded by middleware messages (ROUTE, TAG, a class nobody knows), some cancelled while
//! they run, some abandoned by a client that disconnects. The plan is drawn up front; the
//! bytes are written when a request is sent, because they depend on the session that sends
//! them (a named statement is parsed once per session, MIN_LSN carries the client's last
//! write).

use pgyard_proxy::Route;
use pgyard_types::{side_stream, uniform_inclusive, Rng};

/// A middleware message sent before a transaction's first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pre {
    /// ROUTE with this route.
    Route(Route),
    /// TAG `batch`.
    Tag,
    /// A class the proxy does not know.
    Unknown,
}

/// What a transaction does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// One simple query.
    Simple,
    /// `begin`, two queries, `commit`: four requests on one server.
    Block,
    /// Parse/Bind/Describe/Execute/Sync of the unnamed statement.
    Unnamed,
    /// Bind/Describe/Execute/Sync of named statement `s0`..`s2`, parsed first in each session.
    Named(u8),
    /// A write on the primary (ROUTE primary); the reply carries its commit LSN.
    Write,
    /// A read on `standby` or `any`, after MIN_LSN with the client's last write (if any).
    Read,
    /// A query that runs for `ns` of server time.
    Sleep {
        /// How long it runs.
        ns: u64,
    },
    /// Session mode: sets the session variable to the client's connection.
    SetVar,
    /// Session mode: reads the session variable back.
    ShowVar,
    /// `settz zK`: sets the client's `TimeZone` to `zK` (the server reports it).
    SetZone(u8),
    /// `setsp K`: sets the client's `search_path` to [`path`]`(K)` (the server reports it).
    SetPath(u8),
}

/// The `search_path` a `setsp K` sets: a list with a quoted name holding a quote, so that its
/// way back onto another server must quote it right.
pub(super) fn path(k: u8) -> String {
    format!("\"it's {k}\", public")
}

/// One transaction of a client's plan.
#[derive(Clone, Debug)]
pub(super) struct Txn {
    /// Its number within the client (`t7` in query texts).
    pub(super) n: u64,
    /// Middleware messages before its first request.
    pub(super) pre: Vec<Pre>,
    /// What it does.
    pub(super) kind: Kind,
    /// Send a CancelRequest this long after the query went out (sleeps only).
    pub(super) cancel_after: Option<u64>,
    /// Disconnect this long after the first request went out, if still inside it.
    pub(super) leave_after: Option<u64>,
}

impl Txn {
    /// How many requests (messages answered by one ReadyForQuery) it sends.
    pub(super) fn requests(&self) -> usize {
        if self.kind == Kind::Block {
            4
        } else {
            1
        }
    }
}

/// How often the new kinds of trouble come up in one seed (swarm testing: some seeds have
/// none of one kind, others much of it).
#[derive(Clone, Copy, Debug)]
pub(super) struct PlanMix {
    /// Percent of transactions that are writes or reads after a write.
    pub(super) lsn_pct: u64,
    /// Percent of transactions that are sleeps.
    pub(super) sleep_pct: u64,
    /// Percent of sleeps that get a CancelRequest.
    pub(super) cancel_pct: u64,
    /// Percent of transactions the client may walk away from.
    pub(super) leave_pct: u64,
    /// Percent of transactions that set the client's `TimeZone`; when not 0, a quarter of
    /// the clients also send one in their StartupMessage.
    pub(super) zone_pct: u64,
}

impl PlanMix {
    /// Draws the mix.
    pub(super) fn draw(rng: &mut Rng) -> PlanMix {
        let pick = |rng: &mut Rng, options: &[u64]| {
            options[uniform_inclusive(rng, options.len() as u64 - 1) as usize]
        };
        PlanMix {
            lsn_pct: pick(rng, &[0, 20, 50]),
            sleep_pct: pick(rng, &[0, 10, 30]),
            cancel_pct: pick(rng, &[0, 50, 100]),
            leave_pct: pick(rng, &[0, 0, 5, 15]),
            // From a stream of its own: the main stream draws what it drew before.
            zone_pct: pick(&mut side_stream(rng, ZONE_STREAM), &[0, 10, 30]),
        }
    }
}

/// The stream that draws the settings a client changes.
const ZONE_STREAM: u64 = 0x7469_6d65_7a6f_6e65;

/// The `TimeZone` a client sends in its StartupMessage, if any (its own stream): half the
/// time spelt otherwise than the servers spell it (`Z2` for `z2`).
pub(super) fn startup_zone(rng: &Rng, mix: &PlanMix) -> Option<String> {
    let mut side = side_stream(rng, ZONE_STREAM ^ 1);
    let zone = (mix.zone_pct > 0 && uniform_inclusive(&mut side, 3) == 0)
        .then(|| format!("z{}", 1 + uniform_inclusive(&mut side, 2)))?;
    Some(if uniform_inclusive(&mut side, 1) == 0 {
        zone.to_uppercase()
    } else {
        zone
    })
}

/// The stream that draws the `options` a client logs in with.
const OPTIONS_STREAM: u64 = 0x6f70_7469_6f6e_7373;

/// The `options` clients may send: settings the proxy does not track, which it passes to
/// the servers it opens and pools by. Written as the proxy writes them back
/// (`options::server_text`), so a server's login must carry them byte for byte.
pub(super) const OPTIONS: [&str; 2] = ["-c work_mem=64kB", "-c work_mem=128kB"];

/// The `options` a client sends in its StartupMessage, if any (its own stream, so the main
/// stream draws what it drew before): a quarter of the clients, one of [`OPTIONS`], so
/// that the clients of one route split into pools by it.
pub(super) fn startup_options(rng: &Rng) -> Option<String> {
    let mut side = side_stream(rng, OPTIONS_STREAM);
    (uniform_inclusive(&mut side, 3) == 0)
        .then(|| OPTIONS[uniform_inclusive(&mut side, 1) as usize].to_owned())
}

/// The stream that draws the RECONNECT.
const RECONNECT_STREAM: u64 = 0x7265_636f_6e6e_6563;

/// The stream that draws the configuration reload.
const RELOAD_STREAM: u64 = 0x7265_6c6f_6164_7369;

/// The stream that draws whether a PAUSE names the database.
const PAUSE_BY_NAME_STREAM: u64 = 0x7061_7573_6562_796e;

/// The stream that draws `server_reset_query_always`.
const RESET_STREAM: u64 = 0x7265_7365_7461_6c77;

/// The pools' part of the mix: the pool mode and the idle and lifetime limits.
#[derive(Clone, Copy, Debug)]
pub(super) struct PoolMix {
    /// Session mode (else transaction mode).
    pub(super) session: bool,
    /// Transaction mode with `server_reset_query_always`: `DISCARD ALL` after every lending.
    pub(super) reset_always: bool,
    /// `server_idle_timeout`, when there is one.
    pub(super) idle_ns: Option<u64>,
    /// `server_lifetime`, when there is one.
    pub(super) lifetime_ns: Option<u64>,
    /// When the admin console's PAUSE comes, how long until its RESUME, and whether it
    /// names the clients' database (PAUSE db, RESUME db) rather than pausing every one.
    pub(super) pause_ns: Option<(u64, u64, bool)>,
    /// When the admin console's RECONNECT comes, and whether it names the clients' database.
    pub(super) reconnect_ns: Option<(u64, bool)>,
    /// When a configuration reload comes, and the pool size it sets.
    pub(super) reload_ns: Option<(u64, usize)>,
}

impl PoolMix {
    /// Draws the mix: a third of the seeds in session mode; limits short enough to strike
    /// between a client's transactions (which take microseconds to milliseconds) in some
    /// seeds, none in others.
    pub(super) fn draw(rng: &mut Rng) -> PoolMix {
        let session = uniform_inclusive(rng, 2) == 0;
        let idle_ns = match uniform_inclusive(rng, 3) {
            0 | 1 => None,
            2 => Some(100_000 + uniform_inclusive(rng, 1_900_000)),
            _ => Some(2_000_000 + uniform_inclusive(rng, 30_000_000)),
        };
        let lifetime_ns = match uniform_inclusive(rng, 2) {
            0 | 1 => None,
            _ => Some(500_000 + uniform_inclusive(rng, 50_000_000)),
        };
        let pause_ns = (uniform_inclusive(rng, 3) == 0).then(|| {
            let at = 300_000 + uniform_inclusive(rng, 20_000_000);
            // From a stream of its own: the main stream draws what it drew before.
            let mut side = side_stream(rng, PAUSE_BY_NAME_STREAM);
            let by_name = uniform_inclusive(&mut side, 1) == 0;
            (at, 100_000 + uniform_inclusive(rng, 30_000_000), by_name)
        });
        // From a stream of its own too: the main stream draws what it drew before.
        let mut side = side_stream(rng, RECONNECT_STREAM);
        let reconnect_ns = (uniform_inclusive(&mut side, 3) == 0).then(|| {
            let at = 300_000 + uniform_inclusive(&mut side, 20_000_000);
            (at, uniform_inclusive(&mut side, 1) == 0)
        });
        // From a stream of its own too.
        let mut reload = side_stream(rng, RELOAD_STREAM);
        let reload_ns = (uniform_inclusive(&mut reload, 3) == 0).then(|| {
            let at = 200_000 + uniform_inclusive(&mut reload, 20_000_000);
            (at, 1 + uniform_inclusive(&mut reload, 2) as usize)
        });
        // From a stream of its own too; a quarter of the transaction-mode seeds.
        let mut reset = side_stream(rng, RESET_STREAM);
        let reset_always = !session && uniform_inclusive(&mut reset, 3) == 0;
        PoolMix {
            session,
            reset_always,
            idle_ns,
            lifetime_ns,
            pause_ns,
            reconnect_ns,
            reload_ns,
        }
    }
}

/// The transactions of one client.
pub(super) fn plan(rng: &mut Rng, mix: &PlanMix, session: bool) -> Vec<Txn> {
    let mut zones = side_stream(rng, ZONE_STREAM ^ 2);
    let txns = 3 + uniform_inclusive(rng, 7);
    let mut out = Vec::with_capacity(txns as usize);
    for n in 0..txns {
        let mut pre = middleware(rng);
        let roll = uniform_inclusive(rng, 99);
        let kind = if roll < mix.lsn_pct {
            if uniform_inclusive(rng, 1) == 0 {
                pre.push(Pre::Route(Route::Primary));
                Kind::Write
            } else {
                let route = [Route::Standby, Route::Any][uniform_inclusive(rng, 1) as usize];
                pre.push(Pre::Route(route));
                Kind::Read
            }
        } else if roll < mix.lsn_pct + mix.sleep_pct {
            Kind::Sleep {
                ns: 200_000 + uniform_inclusive(rng, 8_000_000),
            }
        } else {
            // The session variable means something only while a client keeps its server.
            let kinds = if session { 5 } else { 3 };
            match uniform_inclusive(rng, kinds) {
                0 => Kind::Simple,
                1 => Kind::Block,
                2 => Kind::Unnamed,
                3 => Kind::Named(uniform_inclusive(rng, 2) as u8),
                4 => Kind::SetVar,
                _ => Kind::ShowVar,
            }
        };
        let cancel_after = (matches!(kind, Kind::Sleep { .. })
            && uniform_inclusive(rng, 99) < mix.cancel_pct)
            .then(|| uniform_inclusive(rng, 6_000_000));
        let leave_after =
            (uniform_inclusive(rng, 99) < mix.leave_pct).then(|| uniform_inclusive(rng, 3_000_000));
        // Drawn over what the main stream drew, which stays as it was.
        let (kind, cancel_after) = if uniform_inclusive(&mut zones, 99) < mix.zone_pct {
            let k = 1 + uniform_inclusive(&mut zones, 2) as u8;
            if uniform_inclusive(&mut zones, 1) == 0 {
                (Kind::SetZone(k), None)
            } else {
                (Kind::SetPath(k), None)
            }
        } else {
            (kind, cancel_after)
        };
        out.push(Txn {
            n,
            pre,
            kind,
            cancel_after,
            leave_after,
        });
    }
    out
}

/// Middleware messages before a transaction, maybe.
fn middleware(rng: &mut Rng) -> Vec<Pre> {
    match uniform_inclusive(rng, 5) {
        0 => {
            let route =
                [Route::Primary, Route::Standby, Route::Any][uniform_inclusive(rng, 2) as usize];
            vec![Pre::Route(route)]
        }
        1 => vec![Pre::Tag],
        2 => vec![Pre::Unknown],
        _ => Vec::new(),
    }
}
