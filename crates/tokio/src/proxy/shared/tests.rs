//! The shared pools against a stand-in backend on loopback that logs anyone in and holds
//! every CancelRequest until told: the two races the simulator's `proxy` scenario found in
//! this adapter, each played step by step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use pgyard_proxy::{ClientAuth, ClientConfig, ClientId, Databases, PoolKey, PoolMode, Route};
use pgyard_wire::backend::{
    encode_ready_for_query, Authentication, BackendKeyData, ParameterStatus, TransactionStatus,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{oneshot, Notify};

use super::{Acquired, Granted, Shared};
use crate::proxy::ProxyConfig;
use crate::Session;

/// PostgreSQL's CancelRequest code.
const CANCEL_REQUEST: u32 = 80_877_102;

/// A backend that logs every client in as a primary and keeps each CancelRequest's
/// connection open until [`Backend::answer_cancels`].
struct Backend {
    port: u16,
    cancels: Arc<AtomicUsize>,
    answer: Arc<Notify>,
}

impl Backend {
    async fn start() -> Backend {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let cancels = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(Notify::new());
        let (c, a) = (cancels.clone(), answer.clone());
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(serve(sock, c.clone(), a.clone()));
            }
        });
        Backend {
            port,
            cancels,
            answer,
        }
    }

    /// Lets the CancelRequests received so far (and the next one) end.
    fn answer_cancels(&self) {
        self.answer.notify_waiters();
        self.answer.notify_one();
    }
}

async fn serve(mut sock: TcpStream, cancels: Arc<AtomicUsize>, answer: Arc<Notify>) {
    let mut len = [0u8; 4];
    if sock.read_exact(&mut len).await.is_err() {
        return;
    }
    let mut body = vec![0u8; (u32::from_be_bytes(len) as usize).saturating_sub(4)];
    if sock.read_exact(&mut body).await.is_err() || body.len() < 4 {
        return;
    }
    if u32::from_be_bytes([body[0], body[1], body[2], body[3]]) == CANCEL_REQUEST {
        cancels.fetch_add(1, Ordering::SeqCst);
        // Closing the connection is how a server says the cancel was handled.
        answer.notified().await;
        return;
    }
    let mut out = BytesMut::new();
    let _ = Authentication::Ok.encode(&mut out);
    for (name, value) in [
        ("server_version", "18.1"),
        ("in_hot_standby", "off"),
        ("default_transaction_read_only", "off"),
    ] {
        let ps = ParameterStatus {
            name: name.as_bytes(),
            value: value.as_bytes(),
        };
        let _ = ps.encode(&mut out);
    }
    let key = BackendKeyData {
        pid: 4242,
        key: &[1, 2, 3, 4],
    };
    let _ = key.encode(&mut out);
    encode_ready_for_query(TransactionStatus::Idle, &mut out);
    if sock.write_all(&out).await.is_err() {
        return;
    }
    let mut sink = [0u8; 1024];
    while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {}
}

fn shared(backend: &Backend) -> Arc<Shared> {
    let client = ClientConfig {
        auth: ClientAuth::Trust,
        pool_mode: PoolMode::Transaction,
        default_route: Route::Primary,
        login_timeout: Duration::from_secs(5),
        databases: Databases::Any,
        admin_users: Default::default(),
    };
    let conninfo = format!("host=127.0.0.1 port={} sslmode=disable", backend.port);
    let mut config = ProxyConfig::new(conninfo, client);
    config.pool.size = 1;
    config.seed = Some(7);
    Shared::start(Arc::new(config.checked().expect("config")), Vec::new())
}

fn key() -> PoolKey {
    PoolKey {
        database: "app".into(),
        user: "app".into(),
        route: Route::Primary,
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
    let backend = Backend::start().await;
    let shared = shared(&backend);
    let (session, lent) = granted(shared.acquire(ClientId(1), key(), None)).await;
    let rx = later(shared.acquire(ClientId(2), key(), None));
    // Client 1's transaction ends: the server is sent to client 2's channel.
    shared.release(ClientId(1), lent, Some(session), true);
    // Client 2's task ends without reading it.
    shared.abandon_wait(ClientId(2), rx);
    let counts = shared.lock().pools.counts()[&key()].clone();
    assert_eq!((counts.active, counts.idle), (0, 1), "{counts:?}");
    assert!(matches!(
        shared.acquire(ClientId(3), key(), None),
        Acquired::Now(..)
    ));
}

/// A CancelRequest travels to the server on a connection of its own; the server its client
/// gives back meanwhile used to be lent at once, and the cancel then stopped the next
/// client's query. It waits for the cancel now.
#[tokio::test]
async fn a_server_is_not_lent_again_before_a_cancel_sent_to_it_is_done() {
    let backend = Backend::start().await;
    let shared = shared(&backend);
    let (session, lent) = granted(shared.acquire(ClientId(1), key(), None)).await;
    shared.register(ClientId(1), 77, vec![9; 4]);
    let mut rx = later(shared.acquire(ClientId(2), key(), None));
    shared.cancel(77, &[9; 4]);
    shared.release(ClientId(1), lent, Some(session), true);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut rx).await;
    assert!(early.is_err(), "lent while the cancel was on its way");
    assert_eq!(backend.cancels.load(Ordering::SeqCst), 1);
    backend.answer_cancels();
    match tokio::time::timeout(Duration::from_secs(10), rx).await {
        Ok(Ok(Granted::Server(..))) => {}
        _ => panic!("not lent once the cancel was done"),
    }
}
