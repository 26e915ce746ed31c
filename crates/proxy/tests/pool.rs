//! The pool bookkeeping on virtual time: sizes, the FIFO queue, waits that time out, failed
//! opens retried while clients wait, idle and lifetime limits.

use std::time::Duration;

use pgyard_proxy::{ClientId, PoolKey, PoolOut, PoolSettings, Pools, Route, ServerId};
use pgyard_types::Instant;

fn key() -> PoolKey {
    PoolKey {
        database: "app".into(),
        user: "alice".into(),
        route: Route::Primary,
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
            message: "query_wait_timeout (server connect failed: connection refused)".into()
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
