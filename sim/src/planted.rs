//! The planted bugs, in one registry. Each is a realistic mistake, switched off unless a run
//! asks for it: in the machines under test (compiled in only with feature `planted-bugs`) or
//! in a scenario's own driving code. The registered scenarios always run without one; the
//! registry (`REGISTRY`, feature `planted-bugs`) names, for every bug, the scenario whose
//! invariants must catch it, the invariant that breaks, and the seeds it may take, so that
//! `sim/tests/planted.rs` can prove the simulator has teeth.

/// A bug a scenario can plant in its own driving code (never in the engines it drives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ScenarioBug {
    /// `slotsync`: the failover walsender ignores `synchronized_standby_slots` and sends
    /// everything the primary flushed, past what the standby has.
    IgnoreStandbySlots,
    /// `slotsync`: the readiness check is not told what the walsender has sent, so it judges
    /// by the slot's `confirmed_flush_lsn`, which lags what the subscriber received.
    CheckWithoutSentLsn,
}

/// A bug of the connect machine, as the world takes it. Without the feature the type has no
/// values, so the world's code is the same either way and a plain build cannot plant one.
#[cfg(feature = "planted-bugs")]
pub type ConnectBug = pgyard_connect::PlantedBug;
/// A bug of the connect machine, as the world takes it (none without `planted-bugs`).
#[cfg(not(feature = "planted-bugs"))]
pub type ConnectBug = std::convert::Infallible;

/// A bug of the proxy's client sessions, as the `proxy` scenario takes it (none without the
/// feature, for the same reason as [`ConnectBug`]).
#[cfg(feature = "planted-bugs")]
pub type ProxyBug = pgyard_proxy::PlantedBug;
/// A bug of the proxy's client sessions (none without `planted-bugs`).
#[cfg(not(feature = "planted-bugs"))]
pub type ProxyBug = std::convert::Infallible;

/// A bug of the apply machine, as the `delayq` scenario takes it (none without the feature,
/// for the same reason as [`ConnectBug`]).
#[cfg(feature = "planted-bugs")]
pub type ApplyBug = pgyard_delayq::apply::PlantedBug;
/// A bug of the apply machine (none without `planted-bugs`).
#[cfg(not(feature = "planted-bugs"))]
pub type ApplyBug = std::convert::Infallible;

/// A bug of the follow machine, as the `delayq` scenario takes it (none without the feature,
/// for the same reason as [`ConnectBug`]).
#[cfg(feature = "planted-bugs")]
pub type FollowBug = pgyard_delayq::follow::PlantedBug;
/// A bug of the follow machine (none without `planted-bugs`).
#[cfg(not(feature = "planted-bugs"))]
pub type FollowBug = std::convert::Infallible;

/// A bug of the slot-sync engine, as the `slotsync` scenario takes it (none without the
/// feature, for the same reason as [`ConnectBug`]).
#[cfg(feature = "planted-bugs")]
pub type SyncBug = pgyard_slotsync::PlantedBug;
/// A bug of the slot-sync engine (none without `planted-bugs`).
#[cfg(not(feature = "planted-bugs"))]
pub type SyncBug = std::convert::Infallible;

#[cfg(feature = "planted-bugs")]
pub use registry::{Entry, Planted, REGISTRY};

#[cfg(feature = "planted-bugs")]
mod registry {
    use super::{ApplyBug, ConnectBug, FollowBug, ProxyBug, ScenarioBug, SyncBug};
    use crate::runner::{derive_seed, SeedOutcome};
    use crate::scenarios::{connect, delayq, failover, proxy, proxy_login, slotsync};
    use crate::trace::Trace;
    use crate::Violation;
    use pgyard_connect::PlantedBug as C;
    use pgyard_delayq::apply::PlantedBug as A;
    use pgyard_delayq::follow::PlantedBug as F;
    use pgyard_proxy::PlantedBug as P;
    use pgyard_slotsync::PlantedBug as S;
    use Planted::{Apply, Connect, Follow, Proxy, Scenario, Sync};

    /// A planted bug, by where it lives: that decides which runs can switch it on.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Planted {
        /// In every `Connector` the `connect` and `failover` scenarios build.
        Connect(ConnectBug),
        /// In every client session of the `proxy` and `proxy-login` scenarios.
        Proxy(ProxyBug),
        /// In every apply machine the `delayq` scenario starts.
        Apply(ApplyBug),
        /// In every follow machine the `delayq` scenario starts.
        Follow(FollowBug),
        /// In every sync (worker cycle or function call) of the `slotsync` scenario.
        Sync(SyncBug),
        /// In the driving code of the `delayq` or `slotsync` scenario.
        Scenario(ScenarioBug),
    }

    impl std::fmt::Display for Planted {
        // The bug's own name: the catch lines in the CI log print it.
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                Planted::Connect(b) => write!(f, "{b:?}"),
                Planted::Proxy(b) => write!(f, "{b:?}"),
                Planted::Apply(b) => write!(f, "{b:?}"),
                Planted::Follow(b) => write!(f, "{b:?}"),
                Planted::Sync(b) => write!(f, "{b:?}"),
                Planted::Scenario(b) => write!(f, "{b:?}"),
            }
        }
    }

    /// One planted bug and what must catch it.
    #[derive(Clone, Copy, Debug)]
    pub struct Entry {
        /// The bug.
        pub bug: Planted,
        /// The scenario whose invariants must catch it.
        pub scenario: &'static str,
        /// The invariant that breaks at the first seed that catches it.
        pub invariant: &'static str,
        /// It must be caught at one of the seeds `0..seeds_max`.
        pub seeds_max: u64,
    }

    /// The budget: every bug within this many seeds.
    const SEEDS_MAX: u64 = 1000;

    /// A registry row with the common budget.
    const fn entry(bug: Planted, scenario: &'static str, invariant: &'static str) -> Entry {
        Entry {
            bug,
            scenario,
            invariant,
            seeds_max: SEEDS_MAX,
        }
    }

    /// Every planted bug, once, in a fixed order.
    pub const REGISTRY: &[Entry] = &[
        entry(
            Connect(C::IgnoreTargetSessionAttrs),
            "connect",
            "target-session-attrs-met",
        ),
        entry(
            Connect(C::DropAttemptTimeout),
            "connect",
            "attempt-within-connect-timeout",
        ),
        entry(
            Connect(C::ReuseClosedAttempt),
            "failover",
            "attempt-ids-unique",
        ),
        entry(
            Connect(C::SkipPreferSecondPass),
            "failover",
            "liveness-connects",
        ),
        entry(
            Connect(C::TrustStaleParameterStatus),
            "failover",
            "liveness-connects",
        ),
        entry(
            Connect(C::StartupErrorNextAddress),
            "connect",
            "57P03-moves-to-next-host",
        ),
        entry(
            Connect(C::AcceptAnyAlpn),
            "failover",
            // Its other face first since session 20: an attempt goes on past a handshake
            // libpq refuses, and a failed connect's report then says nothing of the ALPN.
            "report-worded-as-libpq",
        ),
        entry(
            Connect(C::IgnoreDefaultReadOnly),
            "connect",
            // Its other face first since the world's second growth moved the seeds: a
            // `read-only` client refuses a read-only primary (see docs/simulation.md).
            "liveness-connects",
        ),
        // Added after the issue: a TLS connection ended during its connect is rare in the
        // connect world (about two seeds in a thousand see an alert), so its budget is five
        // times the issue's. The `connect_session` fuzzer catches it within a few hundred
        // inputs (`sim/tests/session_fuzz_teeth.rs`).
        Entry {
            bug: Connect(C::BrokenWordedAsClosed),
            scenario: "connect",
            invariant: "report-worded-as-libpq",
            seeds_max: 5 * SEEDS_MAX,
        },
        entry(
            Proxy(P::ReleaseInTransaction),
            "proxy",
            "transaction-on-one-server",
        ),
        entry(
            Proxy(P::ForwardMiddleware),
            "proxy",
            "no-middleware-or-terminate-reaches-a-server",
        ),
        entry(
            Proxy(P::ForgetStatementOnNewServer),
            "proxy",
            "statements-exist-where-bound",
        ),
        entry(Proxy(P::IgnoreMinLsn), "proxy", "min-lsn-honoured"),
        entry(
            Proxy(P::ReleaseSessionAtReady),
            "proxy",
            "session-on-one-server",
        ),
        entry(
            Proxy(P::WelcomeShowsCurrentSettings),
            "proxy",
            "settings-private",
        ),
        entry(
            Proxy(P::TrustServerAlignedOnce),
            "proxy",
            "settings-follow-the-client",
        ),
        entry(
            Proxy(P::WelcomeShowsClientSpelling),
            "proxy",
            "settings-private",
        ),
        entry(
            Proxy(P::PoolIgnoresOptions),
            "proxy-login",
            "pool-per-options",
        ),
        entry(
            Follow(F::ReportWriteAsFlush),
            "delayq",
            "flushed-survives-crash",
        ),
        entry(
            Apply(A::AckBeforeCommit),
            "delayq",
            "applied-only-when-durable",
        ),
        entry(
            Scenario(ScenarioBug::IgnoreStandbySlots),
            "slotsync",
            "failover-loses-nothing",
        ),
        entry(
            Scenario(ScenarioBug::CheckWithoutSentLsn),
            "slotsync",
            "ready-means-lossless",
        ),
        entry(
            Sync(S::TakePrecedingRemote),
            "slotsync",
            // Since the sync judges (session 14) the slot is caught in the act, at the tick
            // its `restart_lsn` goes back before the standby's oldest WAL.
            "synced-slot-wal-kept",
        ),
    ];

    impl Entry {
        /// Runs `seed` of the entry's scenario with its bug switched on, the RNG seeded as the
        /// runner seeds the registered scenario; `None` when that scenario cannot take the bug.
        pub fn run(&self, seed: u64, trace: &mut Trace) -> Option<SeedOutcome> {
            let name = self.scenario;
            let mut rng = pgyard_types::rng_from_seed(derive_seed(name, seed));
            crate::trace!(trace, "SEED={seed} scenario={name} planted={}", self.bug);
            let result = match (self.bug, name) {
                (Connect(b), "connect") => connect::run_connect(&mut rng, trace, Some(b)),
                (Connect(b), "failover") => failover::run_failover(&mut rng, trace, Some(b)),
                (Proxy(b), "proxy") => proxy::run_proxy(&mut rng, trace, Some(b)),
                (Proxy(b), "proxy-login") => proxy_login::run_proxy_login(&mut rng, trace, Some(b)),
                (Apply(b), "delayq") => delayq::run_delayq(&mut rng, trace, Some(b), None),
                (Follow(b), "delayq") => delayq::run_delayq(&mut rng, trace, None, Some(b)),
                (Scenario(b), "slotsync") => {
                    slotsync::run_slotsync(&mut rng, trace, Some(b), None).map(|r| r.nanos)
                }
                (Sync(b), "slotsync") => {
                    slotsync::run_slotsync(&mut rng, trace, None, Some(b)).map(|r| r.nanos)
                }
                _ => return None,
            };
            let (simulated_nanos, violation) = match result {
                Ok(t) => (t, None),
                Err(v) => (0, Some(v)),
            };
            Some(SeedOutcome {
                seed,
                hash: trace.hash(),
                simulated_nanos,
                violation,
            })
        }

        /// The first seed within the budget at which the scenario catches the bug, with the
        /// invariant that broke; `None` when no seed does (or the scenario cannot take it).
        pub fn first_catch(&self) -> Option<(u64, Violation)> {
            (0..self.seeds_max).find_map(|seed| {
                self.run(seed, &mut Trace::hashing())?
                    .violation
                    .map(|v| (seed, v))
            })
        }
    }
}
