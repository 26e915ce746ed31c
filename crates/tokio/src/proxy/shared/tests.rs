//! The shared pools against the stand-in backend (`stand_in.rs`), a primary that holds every
//! CancelRequest until told: the two races the simulator's `proxy` scenario found in
//! this adapter, each played step by step, where a cancel goes, and what a reset server keeps.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use pgyard_proxy::{ClientAuth, ClientConfig, ClientId, PoolKey, PoolMode, Route};
use tokio::sync::oneshot;

use super::{Acquired, Granted, Shared};
use crate::proxy::stand_in::{Backend, PRIMARY};
use crate::proxy::ProxyConfig;
use crate::Session;

fn shared(backend: &Backend) -> Arc<Shared> {
    shared_with(backend, |_| {})
}

/// [`shared`] with `change` made to the configuration first.
fn shared_with(backend: &Backend, change: impl FnOnce(&mut ProxyConfig)) -> Arc<Shared> {
    let client = ClientConfig {
        login_timeout: Duration::from_secs(5),
        ..ClientConfig::new(ClientAuth::Trust, PoolMode::Transaction)
    };
    let conninfo = format!("host=127.0.0.1 port={} sslmode=disable", backend.port);
    let mut config = ProxyConfig::new(conninfo, client);
    config.pool.size = 1;
    config.seed = Some(7);
    change(&mut config);
    Shared::start(
        Arc::new(config.checked().expect("config")),
        Vec::new(),
        None,
    )
}

fn key() -> PoolKey {
    PoolKey {
        database: "app".into(),
        user: "app".into(),
        route: Route::Primary,
        options: String::new(),
    }
}

/// The server an acquire hands out, now or through its channel.
async fn granted(acquired: Acquired) -> (Box<Session>, pgyard_proxy::Lent) {
    match acquired {
        Acquired::Now(session, lent) => (session, lent),
        Acquired::Later(rx) => match tokio::time::timeout(Duration::from_secs(10), rx).await {
            Ok(Ok(Granted::Server(session, lent))) => (session, lent),
            _ => panic!("no server within 10 s"),
        },
    }
}

fn later(acquired: Acquired) -> oneshot::Receiver<Granted> {
    match acquired {
        Acquired::Later(rx) => rx,
        Acquired::Now(..) => panic!("a pool of one lent a second server"),
    }
}

/// A client task that ends while a server is already on its way to it through its channel
/// (its socket's EOF chosen over the grant) used to drop the server with the channel: the
/// pools counted it lent for ever, and a pool of one served nobody again.
#[tokio::test]
async fn a_server_sent_to_a_client_that_left_goes_back_to_the_pool() {
    let backend = Backend::start(PRIMARY).await;
    let shared = shared(&backend);
    let (session, lent) = granted(shared.acquire(ClientId(1), &key(), None, shared.now())).await;
    let rx = later(shared.acquire(ClientId(2), &key(), None, shared.now()));
    // Client 1's transaction ends: the server is sent to client 2's channel.
    shared.release(ClientId(1), lent, Some(session), true, shared.now());
    // Client 2's task ends without reading it.
    shared.abandon_wait(ClientId(2), rx);
    let counts = shared.lock().pools.counts()[&key()].clone();
    assert_eq!((counts.active, counts.idle), (0, 1), "{counts:?}");
    assert!(matches!(
        shared.acquire(ClientId(3), &key(), None, shared.now()),
        Acquired::Now(..)
    ));
}

/// A CancelRequest travels to the server on a connection of its own; the server its client
/// gives back meanwhile used to be lent at once, and the cancel then stopped the next
/// client's query. It waits for the cancel now.
#[tokio::test]
async fn a_server_is_not_lent_again_before_a_cancel_sent_to_it_is_done() {
    let backend = Backend::start(PRIMARY).await;
    let shared = shared(&backend);
    let (session, lent) = granted(shared.acquire(ClientId(1), &key(), None, shared.now())).await;
    shared.register(ClientId(1), 77, vec![9; 4]);
    let mut rx = later(shared.acquire(ClientId(2), &key(), None, shared.now()));
    shared.cancel(77, &[9; 4]);
    shared.release(ClientId(1), lent, Some(session), true, shared.now());
    let early = tokio::time::timeout(Duration::from_millis(300), &mut rx).await;
    assert!(early.is_err(), "lent while the cancel was on its way");
    assert_eq!(backend.cancels.load(Ordering::SeqCst), 1);
    backend.answer_cancels();
    match tokio::time::timeout(Duration::from_secs(10), rx).await {
        Ok(Ok(Granted::Server(..))) => {}
        _ => panic!("not lent once the cancel was done"),
    }
}

/// A cancel follows the server its client holds at that moment: none before the client is
/// lent one or after it gives it back (the server may serve someone else by then), and a
/// wrong secret reaches nothing.
#[tokio::test]
async fn a_cancel_reaches_only_the_server_its_client_holds_now() {
    let backend = Backend::start(PRIMARY).await;
    let shared = shared(&backend);
    shared.register(ClientId(1), 77, vec![9; 4]);
    shared.cancel(77, &[9; 4]);
    let (session, lent) = granted(shared.acquire(ClientId(1), &key(), None, shared.now())).await;
    shared.cancel(77, &[8; 4]);
    shared.release(ClientId(1), lent, Some(session), true, shared.now());
    shared.cancel(77, &[9; 4]);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        backend.cancels.load(Ordering::SeqCst),
        0,
        "a cancel went out"
    );
    let (_session, _lent) = granted(shared.acquire(ClientId(1), &key(), None, shared.now())).await;
    shared.cancel(77, &[9; 4]);
    let sent = async {
        while backend.cancels.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    };
    let reached = tokio::time::timeout(Duration::from_secs(10), sent).await;
    assert!(
        reached.is_ok(),
        "the cancel of a client holding a server never went out"
    );
}

/// With `server_reset_query_always` a server given back in transaction mode runs DISCARD ALL
/// before it is lent again: the proxy's statements there are forgotten, and what the server
/// reported while lent that DISCARD does not reset (here a promotion's `in_hot_standby`)
/// stays as reported; the login's value came back until session 35.
#[tokio::test]
async fn a_reset_server_keeps_what_it_reported_while_lent_and_forgets_statements() {
    use crate::proxy::stand_in::Role;
    let standby = Role {
        in_recovery: true,
        replay: None,
    };
    let backend = Backend::start(standby).await;
    let shared = shared_with(&backend, |c| c.server_reset_query_always = true);
    let any = PoolKey {
        route: Route::Any,
        ..key()
    };
    let (session, mut lent) = granted(shared.acquire(ClientId(1), &any, None, shared.now())).await;
    assert_eq!(lent.in_recovery(), Some(true), "a standby logged in");
    lent.settings.report("in_hot_standby".into(), "off".into());
    lent.prepared.insert("pgyard_s1".into(), 1);
    shared.release(ClientId(1), lent, Some(session), true, shared.now());
    // Being reset, the pool's one server is not lent at once.
    let rx = later(shared.acquire(ClientId(2), &any, None, shared.now()));
    let (_, lent) = granted(Acquired::Later(rx)).await;
    assert_eq!(lent.in_recovery(), Some(false), "as it reported while lent");
    assert!(
        lent.prepared.is_empty(),
        "DISCARD ALL removed the proxy's statements"
    );
}
