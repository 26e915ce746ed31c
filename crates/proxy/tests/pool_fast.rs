//! The pools' shortcuts for the common lend and return (`lend_idle`, `return_idle`) against
//! the general `acquire` and `release`: two pools driven by the same random operations, one
//! taking a shortcut wherever it applies, must end every step in the same state with the
//! same outputs, and a shortcut must never bring the next timeout earlier (the adapter skips
//! re-arming its timer after one).

use std::time::Duration;

use pgyard_proxy::{ClientId, PoolKey, PoolOut, PoolSettings, Pools, Returned, Route, ServerId};
use pgyard_types::Instant;

/// Pool 0 and 1 of database `app` (users alice and bob), pool 2 of database `shop`.
fn key(n: u64) -> PoolKey {
    PoolKey {
        database: if n == 2 { "shop" } else { "app" }.into(),
        user: if n == 0 { "alice" } else { "bob" }.into(),
        route: Route::Primary,
        options: String::new(),
    }
}

fn drain(p: &mut Pools) -> Vec<PoolOut> {
    std::iter::from_fn(|| p.poll_output()).collect()
}

/// A fixed-seed xorshift: the same operations every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// The two pools and what the clients hold or wait for.
struct Twins {
    fast: Pools,
    slow: Pools,
    now: u64,
    next_client: u64,
    held: Vec<(ClientId, ServerId)>,
    waiting: Vec<ClientId>,
    opening: Vec<ServerId>,
    shortcuts: [u32; 2],
}

impl Twins {
    fn new(size: usize) -> Self {
        let settings = PoolSettings {
            size,
            wait_timeout: Duration::from_millis(50),
            idle_timeout: Some(Duration::from_millis(400)),
            lifetime: Some(Duration::from_millis(3_000)),
        };
        Twins {
            fast: Pools::new(settings),
            slow: Pools::new(settings),
            now: 0,
            next_client: 1,
            held: Vec::new(),
            waiting: Vec::new(),
            opening: Vec::new(),
            shortcuts: [0; 2],
        }
    }

    fn at(&self) -> Instant {
        Instant(self.now * 1_000_000)
    }

    /// Both pools' outputs of one step must match; the model follows them.
    fn settle(&mut self, step: &str) {
        let out = drain(&mut self.slow);
        assert_eq!(drain(&mut self.fast), out, "outputs differ after {step}");
        for o in out {
            match o {
                PoolOut::Grant { client, server } => {
                    self.waiting.retain(|c| *c != client);
                    self.held.push((client, server));
                }
                PoolOut::Open { server, .. } => self.opening.push(server),
                PoolOut::Refuse { client, .. } => self.waiting.retain(|c| *c != client),
                PoolOut::Close { server } => self.opening.retain(|s| *s != server),
            }
        }
        assert_eq!(self.fast.servers(), self.slow.servers(), "after {step}");
        assert_eq!(self.fast.counts(), self.slow.counts(), "after {step}");
        assert_eq!(
            self.fast.poll_timeout(),
            self.slow.poll_timeout(),
            "after {step}"
        );
    }

    fn acquire(&mut self, pool: u64) {
        let client = ClientId(self.next_client);
        self.next_client += 1;
        let (now, key) = (self.at(), key(pool));
        let before = self.fast.poll_timeout();
        if let Some(server) = self.fast.lend_idle(client, &key) {
            self.shortcuts[0] += 1;
            assert!(later_or_same(before, self.fast.poll_timeout()));
            self.slow.acquire(now, client, &key);
            let out = drain(&mut self.slow);
            assert_eq!(
                out,
                [PoolOut::Grant { client, server }],
                "a lend takes the last back"
            );
            self.held.push((client, server));
        } else {
            self.fast.acquire(now, client, &key);
            self.slow.acquire(now, client, &key);
            self.waiting.push(client);
        }
        self.settle("an acquire");
    }

    fn release(&mut self, pick: usize, reusable: bool) {
        let (_, server) = self.held.swap_remove(pick % self.held.len());
        let now = self.at();
        let before = self.fast.poll_timeout();
        let returned = if reusable {
            self.fast.return_idle(now, server)
        } else {
            Returned::No
        };
        if let Returned::Idle { deadline } = returned {
            self.shortcuts[1] += 1;
            // Nothing earlier than before, or than the deadline it reports.
            let floor = match (before, deadline) {
                (Some(b), Some(d)) => Some(b.min(d)),
                (b, d) => b.or(d),
            };
            assert!(later_or_same(floor, self.fast.poll_timeout()));
            if deadline.is_some() {
                assert_eq!(
                    self.fast.poll_timeout(),
                    floor,
                    "the reported deadline is due"
                );
            }
            self.slow.release(now, server, true);
            assert!(
                self.slow.poll_output().is_none(),
                "a return outputs nothing"
            );
        } else {
            self.fast.release(now, server, reusable);
            self.slow.release(now, server, reusable);
        }
        self.settle("a release");
    }

    fn step(&mut self, rng: &mut Rng) {
        match rng.below(11) {
            0..=3 if self.waiting.len() < 2 => {
                let pool = [0, 0, 2, 1, 1, 1, 1, 1][rng.below(8) as usize];
                self.acquire(pool)
            }
            4..=6 if !self.held.is_empty() => {
                let reusable = rng.below(8) != 0;
                self.release(rng.below(64) as usize, reusable);
            }
            7 if !self.opening.is_empty() => {
                let server = self.opening.remove(0);
                let result = if rng.below(6) == 0 {
                    Err("connection refused".to_owned())
                } else {
                    Ok(())
                };
                let now = self.at();
                self.fast.opened(now, server, result.clone());
                self.slow.opened(now, server, result);
                self.settle("an open");
            }
            8 if !self.waiting.is_empty() => {
                let client = self
                    .waiting
                    .remove(rng.below(64) as usize % self.waiting.len());
                self.fast.cancel_wait(client);
                self.slow.cancel_wait(client);
                self.settle("a cancelled wait");
            }
            9 if self.fast.is_paused() || rng.below(20) == 0 => {
                let now = self.at();
                if self.fast.is_paused() {
                    assert!(self.fast.resume(now) && self.slow.resume(now));
                } else {
                    assert!(self.fast.pause(now) && self.slow.pause(now));
                }
                self.settle("a pause or resume");
            }
            // A pause by name (PAUSE db, KILL db), of a database taking shortcuts or not.
            10 if self.fast.is_paused_by_name("app") || rng.below(20) == 0 => {
                let (now, db) = (self.at(), "app");
                if self.fast.is_paused_by_name(db) {
                    assert!(self.fast.resume_database(now, db));
                    assert!(self.slow.resume_database(now, db));
                } else {
                    assert!(self.fast.pause_database(now, db));
                    assert!(self.slow.pause_database(now, db));
                }
                self.settle("a pause or resume of one database");
            }
            _ => {
                self.now += rng.below(40);
                let now = self.at();
                self.fast.handle_timeout(now);
                self.slow.handle_timeout(now);
                self.settle("a timeout");
            }
        }
    }
}

/// Whether `after` is no earlier a deadline than `before` (none at all is the latest).
fn later_or_same(before: Option<Instant>, after: Option<Instant>) -> bool {
    match (before, after) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(b), Some(a)) => a >= b,
    }
}

#[test]
fn the_shortcuts_leave_the_pools_as_the_general_path_does() {
    for seed in 1..=40u64 {
        let mut twins = Twins::new(2 + (seed % 5) as usize);
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        for _ in 0..600 {
            twins.step(&mut rng);
        }
        let [lends, returns] = twins.shortcuts;
        assert!(
            lends > 30 && returns > 5,
            "seed {seed}: {lends} lends, {returns} returns"
        );
    }
}

#[test]
fn a_shortcut_needs_an_idle_server_and_no_pause() {
    let mut p = Pools::new(PoolSettings {
        size: 2,
        wait_timeout: Duration::from_secs(2),
        idle_timeout: Some(Duration::from_secs(10)),
        lifetime: None,
    });
    let t = Instant(0);
    let k = key(0);
    p.acquire(t, ClientId(1), &k);
    p.acquire(t, ClientId(2), &k);
    let opens: Vec<ServerId> = drain(&mut p)
        .into_iter()
        .filter_map(|o| match o {
            PoolOut::Open { server, .. } => Some(server),
            _ => None,
        })
        .collect();
    assert_eq!(opens.len(), 2);
    p.opened(t, opens[0], Ok(()));
    p.opened(t, opens[1], Ok(()));
    drain(&mut p);
    // The first server back starts the idle list and its timeout; the second joins it.
    let first = Returned::Idle {
        deadline: Some(Instant(10_000_000_000)),
    };
    assert_eq!(p.return_idle(t, opens[0]), first);
    assert_eq!(p.poll_timeout(), Some(Instant(10_000_000_000)));
    assert_eq!(
        p.return_idle(t, opens[1]),
        Returned::Idle { deadline: None }
    );
    // A third client waits behind no one: lent at once, the last server back first.
    assert_eq!(p.lend_idle(ClientId(3), &k), Some(opens[1]));
    assert_eq!(p.lend_idle(ClientId(4), &k), Some(opens[0]));
    assert_eq!(p.lend_idle(ClientId(5), &k), None, "nothing idle");
    p.acquire(t, ClientId(5), &k);
    p.release(t, opens[0], true);
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(5),
            server: opens[0]
        }]
    );
    p.acquire(t, ClientId(6), &k);
    p.release(t, opens[1], true);
    drain(&mut p);
    p.release(t, opens[0], true);
    assert!(p.pause(t));
    assert_eq!(drain(&mut p), [PoolOut::Close { server: opens[0] }]);
    assert_eq!(p.lend_idle(ClientId(7), &k), None, "paused");
    assert_eq!(
        p.return_idle(t, opens[1]),
        Returned::No,
        "paused: a server back is closed"
    );
    p.release(t, opens[1], true);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: opens[1] }]);
    assert!(p.pause_complete());
}
