//! The pool bookkeeping on virtual time: sizes, the FIFO queue of waiters, the idle list
//! (last in, first lent), waits that time out, failed opens retried while clients wait,
//! idle and lifetime limits.

use std::time::Duration;

use pgyard_proxy::{
    ClientId, PoolKey, PoolOut, PoolSettings, Pools, Returned, Route, ServerId, ServerUse,
};
use pgyard_types::Instant;
use pgyard_wire::error_fields::{encode_error_response, OwnedErrorFields};

fn key() -> PoolKey {
    PoolKey {
        database: "app".into(),
        user: "alice".into(),
        route: Route::Primary,
        options: String::new(),
    }
}

fn ms(n: u64) -> Instant {
    Instant(n * 1_000_000)
}

fn pools(size: usize) -> Pools {
    Pools::new(PoolSettings {
        size,
        wait_timeout: Duration::from_secs(2),
        idle_timeout: Some(Duration::from_secs(10)),
        lifetime: Some(Duration::from_secs(60)),
    })
}

fn drain(p: &mut Pools) -> Vec<PoolOut> {
    std::iter::from_fn(|| p.poll_output()).collect()
}

/// `client` asks at `at` ms, a server is opened for it a millisecond later and lent.
fn opened_for(p: &mut Pools, client: u64, at: u64) -> ServerId {
    p.acquire(ms(at), ClientId(client), &key());
    let out = drain(p);
    let [PoolOut::Open { server, .. }] = out[..] else {
        panic!("one open expected: {out:?}")
    };
    p.opened(ms(at + 1), server, Ok(()));
    assert_eq!(
        drain(p),
        [PoolOut::Grant {
            client: ClientId(client),
            server
        }]
    );
    server
}

#[test]
fn waiters_are_served_in_order_within_the_size() {
    let mut p = pools(1);
    p.acquire(ms(0), ClientId(1), &key());
    p.acquire(ms(1), ClientId(2), &key());
    p.acquire(ms(2), ClientId(3), &key());
    let out = drain(&mut p);
    assert_eq!(out.len(), 1, "one open for a pool of one: {out:?}");
    let PoolOut::Open { server, .. } = out[0].clone() else {
        panic!("{out:?}")
    };
    p.opened(ms(3), server, Ok(()));
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(1),
            server
        }]
    );
    p.release(ms(4), server, true);
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(2),
            server
        }]
    );
    p.cancel_wait(ClientId(3));
    p.release(ms(5), server, true);
    assert!(drain(&mut p).is_empty(), "client 3 left the queue");
    assert_eq!(p.counts()[&key()].idle, 1);
}

/// The server given back last is lent first (PgBouncer's default), so that a light load
/// keeps to a few warm servers; the ones left at the front of the idle list are the ones
/// that age out.
#[test]
fn the_last_server_given_back_is_lent_first_and_the_oldest_ages_out() {
    let mut p = pools(3);
    let a = opened_for(&mut p, 1, 0);
    let b = opened_for(&mut p, 2, 10);
    let c = opened_for(&mut p, 3, 20);
    p.release(ms(100), a, true);
    p.release(ms(200), b, true);
    p.release(ms(300), c, true);
    p.acquire(ms(400), ClientId(4), &key());
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(4),
            server: c
        }]
    );
    p.release(ms(500), c, true);
    p.acquire(ms(600), ClientId(5), &key());
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(5),
            server: c
        }]
    );
    // `a` came back first and has not been lent since: it is the first to time out.
    assert_eq!(p.poll_timeout(), Some(ms(10_100)));
    p.handle_timeout(ms(10_100));
    assert_eq!(drain(&mut p), [PoolOut::Close { server: a }]);
    assert_eq!(p.poll_timeout(), Some(ms(10_200)));
}

#[test]
fn a_wait_times_out_with_the_last_connect_error() {
    let mut p = pools(1);
    p.acquire(ms(0), ClientId(1), &key());
    let PoolOut::Open { server, .. } = drain(&mut p)[0].clone() else {
        panic!()
    };
    p.opened(ms(10), server, Err("connection refused".into()));
    assert!(drain(&mut p).is_empty(), "the retry waits its pause");
    // The first retry comes 100 ms after the failure.
    assert_eq!(p.poll_timeout(), Some(ms(110)));
    p.handle_timeout(ms(110));
    let out = drain(&mut p);
    let [PoolOut::Open { server: again, .. }] = &out[..] else {
        panic!("{out:?}")
    };
    assert_ne!(*again, server);
    p.opened(ms(120), *again, Err("connection refused".into()));
    assert_eq!(p.poll_timeout(), Some(ms(320)), "the pause doubles");
    p.handle_timeout(ms(2000));
    let out = drain(&mut p);
    assert!(
        out.contains(&PoolOut::Refuse {
            client: ClientId(1),
            message: "query_wait_timeout (server connect failed: connection refused)".into(),
            answer: None,
        }),
        "{out:?}"
    );
}

#[test]
fn idle_and_old_servers_are_closed() {
    let mut p = pools(2);
    let server = opened_for(&mut p, 1, 0);
    p.release(ms(2), server, true);
    assert_eq!(p.poll_timeout(), Some(ms(10_002)));
    p.handle_timeout(ms(10_002));
    assert_eq!(drain(&mut p), [PoolOut::Close { server }]);

    let server = opened_for(&mut p, 2, 20_000);
    p.release(ms(90_000), server, true);
    assert_eq!(
        drain(&mut p),
        [PoolOut::Close { server }],
        "past its lifetime"
    );
    p.acquire(ms(90_001), ClientId(3), &key());
    assert!(matches!(drain(&mut p)[..], [PoolOut::Open { .. }]));
}

#[test]
fn a_server_that_is_not_reusable_makes_room_for_a_new_one() {
    let mut p = pools(1);
    let server = opened_for(&mut p, 1, 0);
    p.acquire(ms(2), ClientId(2), &key());
    assert!(drain(&mut p).is_empty());
    p.release(ms(3), server, false);
    let out = drain(&mut p);
    assert_eq!(out[0], PoolOut::Close { server });
    assert!(
        matches!(out[1], PoolOut::Open { server: ServerId(n), .. } if n != server.0),
        "{out:?}"
    );
}

#[test]
fn new_settings_shrink_and_grow_the_pools() {
    let mut p = pools(2);
    let a = opened_for(&mut p, 1, 0);
    let b = opened_for(&mut p, 2, 2);
    p.release(ms(4), a, true);
    // Size 1: the idle server goes now, the busy one when it comes back.
    let smaller = PoolSettings {
        size: 1,
        ..p.settings()
    };
    p.set_settings(ms(5), smaller);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: a }]);
    p.release(ms(6), b, true);
    assert!(drain(&mut p).is_empty(), "one server is within the size");
    assert_eq!(p.counts()[&key()].idle, 1);

    // Two waiters behind the one busy server: a larger size opens another at once.
    p.acquire(ms(7), ClientId(3), &key());
    p.acquire(ms(8), ClientId(4), &key());
    p.acquire(ms(9), ClientId(5), &key());
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(3),
            server: b
        }]
    );
    p.set_settings(ms(10), PoolSettings { size: 2, ..smaller });
    assert!(
        matches!(drain(&mut p)[..], [PoolOut::Open { .. }]),
        "one more server for the waiters"
    );
}

/// Found by the simulator's reloads (session 32): a server being opened when a reload made
/// the pool smaller arrived after its waiter had been served by another, and was kept idle,
/// holding the pool over its size until its idle limit.
#[test]
fn a_server_opened_for_a_pool_a_reload_made_smaller_is_closed_if_nobody_waits() {
    let mut p = pools(2);
    let a = opened_for(&mut p, 1, 0);
    p.acquire(ms(2), ClientId(2), &key());
    let out = drain(&mut p);
    let [PoolOut::Open { server: b, .. }] = out[..] else {
        panic!("{out:?}")
    };
    // The first server comes back and goes to the waiter; then the pool shrinks.
    p.release(ms(3), a, true);
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(2),
            server: a
        }]
    );
    let smaller = PoolSettings {
        size: 1,
        ..p.settings()
    };
    p.set_settings(ms(4), smaller);
    assert!(drain(&mut p).is_empty(), "nothing idle to close");
    p.opened(ms(5), b, Ok(()));
    assert_eq!(drain(&mut p), [PoolOut::Close { server: b }]);
    assert_eq!(p.counts()[&key()].idle, 0);

    // Within the size, an arrival nobody waits for is kept idle, as always.
    p.release(ms(6), a, true);
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.counts()[&key()].idle, 1);
}

#[test]
fn reconnect_retires_every_database_and_is_waited_for_until_the_last_closes() {
    let mut p = pools(3);
    let idle = opened_for(&mut p, 1, 0);
    let busy = opened_for(&mut p, 2, 2);
    p.release(ms(4), idle, true);
    assert!(!p.retiring(None) && !p.retiring(Some("app")));
    p.retire(ms(5), None);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: idle }]);
    // The lent one is still open, marked: WAIT_CLOSE of its database, or of all, waits.
    assert!(p.retiring(None) && p.retiring(Some("app")));
    assert!(!p.retiring(Some("other")));
    assert!(p.servers().iter().any(|s| s.id == busy && s.retired));
    p.release(ms(6), busy, true);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: busy }]);
    assert!(!p.retiring(None) && !p.retiring(Some("app")));
}

#[test]
fn a_retired_database_never_lends_its_old_servers_again() {
    let mut p = pools(3);
    let idle = opened_for(&mut p, 1, 0);
    let busy = opened_for(&mut p, 2, 2);
    p.release(ms(4), idle, true);
    p.retire_database(ms(5), "other");
    assert!(drain(&mut p).is_empty(), "another database's servers stay");
    p.retire_database(ms(5), "app");
    assert_eq!(drain(&mut p), [PoolOut::Close { server: idle }]);
    p.release(ms(6), busy, true);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: busy }]);

    // An open under way when the backend changed used the old settings: closed, and
    // another opened for its waiter.
    p.acquire(ms(7), ClientId(3), &key());
    let PoolOut::Open {
        server: opening, ..
    } = drain(&mut p)[0].clone()
    else {
        panic!("an open for client 3")
    };
    p.retire_database(ms(8), "app");
    p.opened(ms(9), opening, Ok(()));
    let out = drain(&mut p);
    assert_eq!(out[0], PoolOut::Close { server: opening });
    let [_, PoolOut::Open { server: fresh, .. }] = out[..] else {
        panic!("{out:?}")
    };
    p.opened(ms(10), fresh, Ok(()));
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(3),
            server: fresh
        }]
    );
}

#[test]
fn a_database_paused_by_name_holds_only_its_own_pools() {
    let mut p = pools(3);
    let shop = PoolKey {
        database: "shop".into(),
        ..key()
    };
    let idle = opened_for(&mut p, 1, 0);
    let busy = opened_for(&mut p, 2, 2);
    p.release(ms(4), idle, true);
    p.acquire(ms(5), ClientId(3), &shop);
    let PoolOut::Open { server: other, .. } = drain(&mut p)[0].clone() else {
        panic!("an open for shop")
    };
    p.opened(ms(5), other, Ok(()));
    drain(&mut p);

    assert!(p.pause_database(ms(6), "app"));
    assert!(!p.pause_database(ms(6), "app"), "paused by name already");
    assert!(p.is_paused_by_name("app") && !p.is_paused() && !p.is_paused_by_name("shop"));
    assert_eq!(drain(&mut p), [PoolOut::Close { server: idle }]);
    assert!(!p.pause_complete_for("app"), "one of its servers is lent");
    // Another database lends as before; this one's clients wait, and its lent server
    // closes when it comes back.
    p.release(ms(7), other, true);
    assert_eq!(p.lend_idle(ClientId(4), &shop), Some(other));
    assert_eq!(p.lend_idle(ClientId(5), &key()), None);
    p.acquire(ms(8), ClientId(5), &key());
    assert!(
        drain(&mut p).is_empty(),
        "nothing opened for a paused database"
    );
    assert_eq!(p.return_idle(ms(9), busy), Returned::No);
    p.release(ms(9), busy, true);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: busy }]);
    assert!(p.pause_complete_for("app") && !p.pause_complete_for("shop"));

    // A PAUSE of every database and its RESUME leave the named one paused; RESUME of it
    // serves its waiter.
    assert!(p.pause(ms(10)) && p.resume(ms(11)));
    assert!(drain(&mut p)
        .iter()
        .all(|o| matches!(o, PoolOut::Close { .. })));
    assert!(
        !p.resume_database(ms(12), "shop"),
        "shop was never paused by name"
    );
    assert!(p.resume_database(ms(12), "app"));
    assert!(
        matches!(drain(&mut p)[..], [PoolOut::Open { .. }]),
        "a server is opened for the waiter"
    );
}

#[test]
fn pause_closes_what_is_not_lent_and_waits_for_what_is() {
    let mut p = pools(3);
    let idle = opened_for(&mut p, 1, 0);
    let busy = opened_for(&mut p, 2, 2);
    p.release(ms(4), idle, true);
    let standby = PoolKey {
        route: Route::Standby,
        ..key()
    };
    p.acquire(ms(5), ClientId(3), &standby);
    let PoolOut::Open {
        server: opening, ..
    } = drain(&mut p)[0].clone()
    else {
        panic!("an open for client 3")
    };

    assert!(p.pause(ms(6)));
    assert!(!p.pause(ms(6)), "already paused");
    assert!(p.is_paused());
    assert_eq!(
        drain(&mut p),
        [PoolOut::Close { server: idle }],
        "the idle one closes; the one being opened is forgotten"
    );
    assert!(!p.pause_complete(), "one server is still lent");
    let states: Vec<ServerUse> = p.servers().iter().map(|s| s.state).collect();
    assert_eq!(states, [ServerUse::Busy(ClientId(2))]);

    // The forgotten open arrives: closed, not lent to the waiter.
    p.opened(ms(7), opening, Ok(()));
    assert_eq!(drain(&mut p), [PoolOut::Close { server: opening }]);
    // The lent one comes back: closed too, and the pause is complete.
    p.release(ms(8), busy, true);
    assert_eq!(drain(&mut p), [PoolOut::Close { server: busy }]);
    assert!(p.pause_complete());

    // While paused, clients wait, and nothing is opened for them.
    p.acquire(ms(9), ClientId(4), &key());
    assert!(drain(&mut p).is_empty());
    assert_eq!(p.counts()[&key()].waiting, 1);
    assert_eq!(p.counts()[&standby].waiting, 1);
    assert_eq!(p.keys(), [key(), standby.clone()]);

    // RESUME opens servers for the waiters, first come first served.
    assert!(p.resume(ms(10)));
    assert!(!p.resume(ms(10)), "not paused any more");
    let out = drain(&mut p);
    assert_eq!(out.len(), 2, "one open per waiter: {out:?}");
    let PoolOut::Open { server, key: k } = out[1].clone() else {
        panic!("{out:?}")
    };
    assert_eq!(k, standby);
    p.opened(ms(11), server, Ok(()));
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(3),
            server
        }]
    );
}

#[test]
fn a_pause_keeps_wait_timeouts_but_no_retry_timer() {
    let mut p = pools(1);
    p.acquire(ms(0), ClientId(1), &key());
    let PoolOut::Open { server, .. } = drain(&mut p)[0].clone() else {
        panic!()
    };
    p.opened(ms(10), server, Err("connection refused".into()));
    assert_eq!(p.poll_timeout(), Some(ms(110)));
    assert!(p.pause(ms(20)));
    assert!(p.pause_complete(), "nothing was open");
    // The retry is not due while paused (a timer at a past retry would spin): only the
    // wait timeout remains.
    assert_eq!(p.poll_timeout(), Some(ms(2000)));
    p.handle_timeout(ms(500));
    assert!(drain(&mut p).is_empty());
    p.handle_timeout(ms(2000));
    assert!(matches!(&drain(&mut p)[..], [PoolOut::Refuse { .. }]));
}

#[test]
fn a_retry_under_way_leaves_no_past_deadline_for_the_timer() {
    let mut p = pools(1);
    p.acquire(ms(0), ClientId(1), &key());
    let PoolOut::Open { server, .. } = drain(&mut p)[0].clone() else {
        panic!()
    };
    p.opened(ms(10), server, Err("connection refused".into()));
    assert_eq!(p.poll_timeout(), Some(ms(110)));
    p.handle_timeout(ms(110));
    assert!(matches!(drain(&mut p)[..], [PoolOut::Open { .. }]));
    // The retry is being opened: the next deadline is the wait's, not the retry's (which is
    // past, and would make the timer spin while the open takes its time).
    assert_eq!(p.poll_timeout(), Some(ms(2000)));
}

#[test]
fn a_refused_login_refuses_every_waiter_now_and_retries_on_later_demand() {
    let mut p = pools(2);
    p.acquire(ms(0), ClientId(1), &key());
    p.acquire(ms(1), ClientId(2), &key());
    let opens: Vec<ServerId> = drain(&mut p)
        .into_iter()
        .filter_map(|o| match o {
            PoolOut::Open { server, .. } => Some(server),
            _ => None,
        })
        .collect();
    assert_eq!(opens.len(), 2, "one open per waiter within the size");
    p.login_refused(
        ms(5),
        opens[0],
        "password authentication failed".into(),
        None,
    );
    let refused = drain(&mut p);
    assert_eq!(
        refused,
        [1, 2].map(|c| PoolOut::Refuse {
            client: ClientId(c),
            message: "server login failed: password authentication failed".into(),
            answer: None,
        }),
        "both waiters hear it at once, not at their wait timeout"
    );
    // The other open still lands (as an idle server), and a later client gets it.
    p.opened(ms(6), opens[1], Ok(()));
    assert_eq!(drain(&mut p), []);
    p.acquire(ms(7), ClientId(3), &key());
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(3),
            server: opens[1]
        }]
    );
}

/// Found by the simulator (`proxy`, cancels): a CancelRequest travels to the server on a
/// connection of its own; a server given back before it arrives and lent at once had its
/// next client's query cancelled. Such a server is held, PgBouncer's `sv_being_canceled`,
/// until the cancel is done.
#[test]
fn a_server_with_a_cancel_on_its_way_is_lent_to_no_one_else_until_it_is_done() {
    let mut p = pools(1);
    let server = opened_for(&mut p, 1, 0);
    p.acquire(ms(2), ClientId(2), &key());
    assert_eq!(drain(&mut p), []);
    p.cancel_sent(server);
    p.release(ms(3), server, true);
    assert_eq!(drain(&mut p), [], "lent while the cancel is on its way");
    assert!(p
        .servers()
        .iter()
        .any(|v| v.id == server && v.state == ServerUse::Canceling));
    assert_eq!(p.counts()[&key()].active, 1);
    p.cancel_done(ms(4), server);
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(2),
            server
        }]
    );
    // A cancel done while the server is still lent changes nothing.
    p.cancel_sent(server);
    p.cancel_done(ms(5), server);
    assert_eq!(drain(&mut p), []);
    p.release(ms(6), server, true);
    assert_eq!(p.counts()[&key()].idle, 1);
    // An unusable server is closed at once, cancel or not.
    p.acquire(ms(7), ClientId(3), &key());
    assert_eq!(
        drain(&mut p),
        [PoolOut::Grant {
            client: ClientId(3),
            server
        }]
    );
    p.cancel_sent(server);
    p.release(ms(9), server, false);
    assert_eq!(drain(&mut p), [PoolOut::Close { server }]);
}

#[test]
fn a_login_refused_over_the_clients_database_answers_in_the_servers_words() {
    let mut p = pools(1);
    p.acquire(ms(0), ClientId(1), &key());
    let [PoolOut::Open { server, .. }] = drain(&mut p)[..] else {
        panic!()
    };
    let words = "database \"nope\" does not exist".to_owned();
    let answer = server_said(b"3D000", &words, Some("a hint"));
    p.login_refused(ms(3), server, "FATAL: …".into(), Some(answer.clone()));
    assert_eq!(
        drain(&mut p),
        [PoolOut::Refuse {
            client: ClientId(1),
            message: words,
            answer: Some(answer),
        }]
    );
}

/// A server's FATAL ErrorResponse with `code`, `message` and `hint`.
fn server_said(code: &[u8], message: &str, hint: Option<&str>) -> OwnedErrorFields {
    let mut fields: Vec<(u8, &[u8])> = vec![
        (b'S', b"FATAL"),
        (b'V', b"FATAL"),
        (b'C', code),
        (b'M', message.as_bytes()),
    ];
    if let Some(h) = hint {
        fields.push((b'H', h.as_bytes()));
    }
    let mut b = bytes::BytesMut::new();
    encode_error_response(&fields, &mut b).expect("E");
    OwnedErrorFields::decode(b.freeze().slice(5..)).expect("fields")
}

/// A client looping over made-up database names, each refused by the server (3D000), used to
/// leave a pool behind for every name. Pools that hold nothing are forgotten now, once there
/// are enough of them; a pool with a server lent or being opened, and one whose retry pause
/// still runs, are kept.
#[test]
fn pools_that_hold_nothing_are_forgotten() {
    let mut p = pools(1);
    opened_for(&mut p, 1, 0);
    let opening = PoolKey {
        database: "opening".into(),
        ..key()
    };
    p.acquire(ms(1), ClientId(2), &opening);
    assert_eq!(drain(&mut p).len(), 1, "an open for the second pool");
    let name = |n: u64| PoolKey {
        database: format!("nodb_{n}"),
        ..key()
    };
    let mut sweeps = 0;
    for n in 0..1_000u64 {
        // 40 ms apart: the first retry pause after a refusal is 100 ms, so the pools of
        // the last two names still have theirs running at each new name.
        let at = 10 + 40 * n;
        let before = p.keys().len();
        p.acquire(ms(at), ClientId(100 + n), &name(n));
        let [PoolOut::Open { server, .. }] = drain(&mut p)[..] else {
            panic!("one open for {n}")
        };
        let answer = server_said(b"3D000", "no", None);
        p.login_refused(ms(at), server, "FATAL".into(), Some(answer));
        assert_eq!(drain(&mut p).len(), 1, "the client is refused");
        let keys = p.keys();
        assert!(
            keys.len() <= 2 * 64 + 1,
            "{} pools after {n} names",
            keys.len()
        );
        if keys.len() < before {
            sweeps += 1;
            for kept in [key(), opening.clone(), name(n - 1), name(n - 2)] {
                assert!(keys.contains(&kept), "{kept:?} forgotten at {n}");
            }
            assert!(!keys.contains(&name(n - 3)), "an empty pool kept at {n}");
        }
    }
    assert!(sweeps > 10, "{sweeps} sweeps");
    // A forgotten pool is made again by its next client.
    p.acquire(ms(100_000), ClientId(5_000), &name(0));
    assert!(matches!(drain(&mut p)[..], [PoolOut::Open { .. }]));
}

proptest::proptest! {
    /// Pool keys order as their fields do in turn, each name by its bytes (SHOW POOLS lists
    /// them in this order, and the pools' map finds them by it): the hand-written order
    /// agrees with a tuple's, and is equal exactly when the keys are.
    #[test]
    fn pool_keys_order_by_their_fields_bytes(
        a in proptest::collection::vec((r"[a-c\u{e9}]{0,19}", r"[a-c]{0,10}", 0..3u8, r"[-ca=]{0,12}"), 2),
    ) {
        let route = |r: u8| [Route::Primary, Route::Standby, Route::Any][usize::from(r)];
        let keys: Vec<PoolKey> = a
            .iter()
            .map(|(d, u, r, o)| PoolKey {
                database: d.clone(),
                user: u.clone(),
                route: route(*r),
                options: o.clone(),
            })
            .collect();
        let (x, y) = (&keys[0], &keys[1]);
        let tuple = |k: &PoolKey| {
            (k.database.as_bytes().to_vec(), k.user.as_bytes().to_vec(), k.route, k.options.as_bytes().to_vec())
        };
        proptest::prop_assert_eq!(x.cmp(y), tuple(x).cmp(&tuple(y)));
        proptest::prop_assert_eq!(x.cmp(y) == std::cmp::Ordering::Equal, x == y);
        proptest::prop_assert_eq!(x.cmp(x), std::cmp::Ordering::Equal);
        // A shared prefix longer than a word, then a difference.
        let mut z = x.clone();
        z.database.push_str("aaaaaaaaa");
        let mut w = x.clone();
        w.database.push_str("aaaaaaaab");
        proptest::prop_assert_eq!(z.cmp(&w), std::cmp::Ordering::Less);
        proptest::prop_assert_eq!(w.cmp(&z), std::cmp::Ordering::Greater);
    }
}
