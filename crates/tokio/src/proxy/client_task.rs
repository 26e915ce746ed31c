//! One client connection's task: it feeds the client's bytes, the lent server's bytes, the
//! pool's answers and the time to the [`ClientSession`], and performs what it asks.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Bytes, BytesMut};
use pgyard_driver::Clock;
use pgyard_proxy::admin::{AdminError, AdminReply, AdminRequest};
use pgyard_proxy::{CancelKey, ClientConfig, ClientId, ClientOut, ClientSession, Lent, PoolKey};
use pgyard_types::{rng_from_seed, Instant, Lsn, RngCore};
use pgyard_wire::auth::LoginRandom;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{oneshot, watch};
use tokio::time::Sleep;
use tokio_rustls::TlsAcceptor;

use super::client_io::ClientIo;
use super::shared::{Acquired, AdminOutcome, ClientSlot, Granted, Shared};
use super::tls::ProxyTls;
use super::Phase;
use crate::Session;

/// Bytes read from a socket at a time.
const READ_CHUNK: usize = 32 * 1024;

pub(super) struct ClientTask {
    id: ClientId,
    session: ClientSession,
    clock: Clock,
    pool: Arc<Shared>,
    /// The lent server's connection (the session machine keeps its settings).
    server: Option<Box<Session>>,
    waiting: Option<oneshot::Receiver<Granted>>,
    /// Whether the pool task knows the client's cancel key.
    registered: bool,
    /// The pool the awaited server comes from.
    wanted: Option<Arc<PoolKey>>,
    /// The proxy's phase: draining asks the session to finish, stopping ends the task. Read
    /// when the slot's kick says it changed.
    phase: watch::Receiver<Phase>,
    /// The time read at the start of this turn of the loop (the pools' clock): one reading
    /// serves the session and the pools.
    now: Instant,
    /// Where the admin console reads this session's activity, and the labels last put there.
    slot: Arc<ClientSlot>,
    published: Option<u32>,
    /// A PAUSE's answer, awaited.
    admin_wait: Option<oneshot::Receiver<Result<(), String>>>,
    /// The handshake a client that asks for TLS gets (`None`: TLS is not configured).
    tls: Option<TlsAcceptor>,
}

impl ClientTask {
    pub(super) fn new(
        id: u64,
        seed: u64,
        over_limit: bool,
        config: ClientConfig,
        pool: Arc<Shared>,
        phase: watch::Receiver<Phase>,
        slot: Arc<ClientSlot>,
    ) -> Self {
        let mut rng = rng_from_seed(seed ^ id.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut secret = vec![0u8; 32];
        rng.fill_bytes(&mut secret);
        let key = CancelKey {
            pid: (rng.next_u32() >> 1) as i32,
            secret,
        };
        let random = LoginRandom::draw(&mut rng);
        let clock = slot.clock();
        let id = ClientId(id);
        let mut session = ClientSession::new(clock.now(), id, config, key, random);
        if over_limit {
            session = session.over_limit();
        }
        let mut published = None;
        slot.publish(&session, &mut published);
        ClientTask {
            id,
            session,
            now: clock.now(),
            clock,
            pool,
            server: None,
            waiting: None,
            registered: false,
            wanted: None,
            phase,
            slot,
            published,
            admin_wait: None,
            tls: None,
        }
    }

    /// Offers TLS as `tls` says (the configuration in force when the client connected).
    pub(super) fn with_tls(self, tls: &ProxyTls) -> Self {
        ClientTask {
            session: self.session.with_tls(tls.client()),
            tls: tls.mode.enabled().then(|| tls.acceptor()),
            ..self
        }
    }

    pub(super) async fn run(mut self, mut sock: ClientIo) {
        let mut from_client = BytesMut::with_capacity(READ_CHUNK);
        let mut from_server = BytesMut::with_capacity(READ_CHUNK);
        // The slot's kick is already given: the first turn reads the phase (a client
        // accepted just as the proxy began to drain is told at once).
        let slot = self.slot.clone();
        let mut timer: Option<Pin<Box<Sleep>>> = None;
        while self.perform(&mut sock).await {
            self.register();
            self.slot.publish(&self.session, &mut self.published);
            let deadline = self.session.poll_timeout().map(|d| self.clock.deadline(d));
            arm(&mut timer, deadline);
            let reading = self.session.wants_client_bytes();
            let turn = self
                .next_turn(
                    &slot,
                    &mut timer,
                    &mut sock,
                    reading,
                    &mut from_client,
                    &mut from_server,
                )
                .await;
            self.now = self.clock.now();
            match turn {
                Turn::Kicked => {
                    if self.slot.take_killed() {
                        self.session.handle_kill();
                    }
                    match *self.phase.borrow_and_update() {
                        Phase::Running => {}
                        Phase::Draining if !self.session.is_draining() => {
                            self.session.handle_shutdown();
                        }
                        Phase::Draining => {}
                        Phase::Stopped => break,
                    }
                }
                Turn::Admin(r) => {
                    self.admin_wait = None;
                    let reply = match r {
                        Some(Ok(())) => AdminReply::Done,
                        Some(Err(e)) => AdminReply::Failed(AdminError::pooler(e)),
                        None => AdminReply::Failed(AdminError::pooler("the proxy stopped")),
                    };
                    self.session.handle_admin(reply);
                }
                Turn::Granted(g) => {
                    self.waiting = None;
                    match g {
                        Some(Granted::Server(conn, lent)) => self.take(conn, lent).await,
                        Some(Granted::Refused(text, None)) => self.session.handle_refused(&text),
                        Some(Granted::Refused(_, Some(answer))) => {
                            self.session.handle_refused_as(&answer)
                        }
                        None => self.session.handle_refused("the pools are gone"),
                    }
                }
                Turn::Timeout => self.session.handle_timeout(self.now),
                Turn::Server(Ok(())) => {
                    let chunk = from_server.split().freeze();
                    self.session.handle_server_bytes(self.now, chunk);
                }
                Turn::Server(Err(())) => self.session.handle_server_gone(),
                Turn::Client(Ok(n)) if n > 0 => {
                    self.session.handle_client_bytes(self.now, &from_client);
                    from_client.clear();
                }
                Turn::Client(_) => self.session.handle_client_gone(),
            }
            if from_server.capacity() < READ_CHUNK / 2 {
                from_server.reserve(READ_CHUNK);
            }
        }
        if let Some(rx) = self.waiting.take() {
            self.pool.abandon_wait(self.id, rx);
        }
        // A server still held goes back as the machine judges it (mid-protocol: not reusable).
        self.session.handle_client_gone();
        let now = self.clock.now();
        while let Some(out) = self.session.poll_output() {
            if let ClientOut::Release { server, reusable } = out {
                self.pool
                    .release(self.id, server, self.server.take(), reusable, now);
            }
        }
        self.slot.publish(&self.session, &mut self.published);
        self.pool.unregister(self.id);
    }

    /// Waits for what the loop handles next, asked in this order: the proxy's phase, the
    /// admin answer, the pools' answer and the time before the sockets, so that a long reply
    /// streaming from the server cannot hold back a drain or a timeout; the server's bytes
    /// before the client's, so that the turn that reads a reply does not first poll the
    /// client's socket for nothing. One hand-written poll: `select!` built and dropped six
    /// futures a turn, about 500 instructions a transaction, for the three that are
    /// almost never armed.
    async fn next_turn(
        &mut self,
        slot: &ClientSlot,
        timer: &mut Option<Pin<Box<Sleep>>>,
        sock: &mut ClientIo,
        reading: bool,
        from_client: &mut BytesMut,
        from_server: &mut BytesMut,
    ) -> Turn {
        let (admin_wait, waiting, server) =
            (&mut self.admin_wait, &mut self.waiting, &mut self.server);
        std::future::poll_fn(|cx| {
            if slot.kick.poll(cx).is_ready() {
                return Poll::Ready(Turn::Kicked);
            }
            if let Some(rx) = admin_wait {
                if let Poll::Ready(r) = Pin::new(rx).poll(cx) {
                    return Poll::Ready(Turn::Admin(r.ok()));
                }
            }
            if let Some(rx) = waiting {
                if let Poll::Ready(g) = Pin::new(rx).poll(cx) {
                    return Poll::Ready(Turn::Granted(g.ok()));
                }
            }
            if let Some(t) = timer {
                if t.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Turn::Timeout);
                }
            }
            if let Some(conn) = server {
                // Cancel-safe: bytes read stay in `from_server` (a future made per poll).
                let recv = std::pin::pin!(conn.recv_bytes(from_server));
                if let Poll::Ready(r) = recv.poll(cx) {
                    return Poll::Ready(Turn::Server(r.map_err(|_| ())));
                }
            }
            if reading {
                let read = std::pin::pin!(sock.read_buf(from_client));
                if let Poll::Ready(r) = read.poll(cx) {
                    return Poll::Ready(Turn::Client(r));
                }
            }
            Poll::Pending
        })
        .await
    }

    /// Asks the pools for a server of `key`: lent now, or awaited.
    async fn acquire(&mut self, key: Arc<PoolKey>) {
        let key = self.wanted.insert(key);
        match self
            .pool
            .acquire(self.id, key, self.session.proven_secret(), self.now)
        {
            Acquired::Now(conn, lent) => self.take(conn, lent).await,
            Acquired::Later(rx) => self.waiting = Some(rx),
        }
    }

    /// Lends a granted server to the session, unless it spoke or closed while idle (a server
    /// shutting down says FATAL first): then it goes back as broken and another is asked for.
    async fn take(&mut self, mut conn: Box<Session>, mut lent: Lent) {
        while stale(&mut conn).await {
            self.pool.release(self.id, lent, None, false, self.now);
            let Some(key) = &self.wanted else {
                return;
            };
            match self
                .pool
                .acquire(self.id, key, self.session.proven_secret(), self.now)
            {
                Acquired::Now(c, l) => (conn, lent) = (c, l),
                Acquired::Later(rx) => return self.waiting = Some(rx),
            }
        }
        if let Some(need) = self.session.needs_lsn() {
            // MIN_LSN: a server behind the position goes back, and the transaction runs on
            // the primary.
            let behind = out_of_line_replayed(&mut conn, need).await;
            self.now = self.clock.now();
            if behind != Ok(true) {
                let now = self.now;
                self.pool
                    .release(self.id, lent, Some(conn), behind.is_ok(), now);
                return self.session.fall_back();
            }
        }
        self.server = Some(conn);
        self.session.handle_server(self.now, lent);
    }

    /// An admin command's request: answered now, or (PAUSE) once the pools say so; false
    /// when the proxy stopped (SHUTDOWN), which closes this connection unanswered.
    fn admin(&mut self, request: AdminRequest) -> bool {
        // SHOW CLIENTS shows this session as it is now.
        self.slot.publish(&self.session, &mut self.published);
        match self.pool.admin(request) {
            AdminOutcome::Now(reply) => self.session.handle_admin(reply),
            AdminOutcome::Later(rx) => self.admin_wait = Some(rx),
            AdminOutcome::Stopped => return false,
        }
        true
    }

    /// Tells the pool task the cancel key once the client has been given it.
    fn register(&mut self) {
        if self.registered {
            return;
        }
        if let Some(secret) = self.session.cancel_secret() {
            self.registered = true;
            let pid = self.session.cancel_pid();
            self.pool.register(self.id, pid, secret.to_vec());
        }
    }

    /// Performs the session's output; false once the client connection is to close.
    async fn perform(&mut self, sock: &mut ClientIo) -> bool {
        while let Some(out) = self.session.poll_output() {
            match out {
                ClientOut::ToClient(bytes) => {
                    // TLS holds written records until flushed (`write_whole` flushes).
                    if sock.write_whole(&bytes).await.is_err() {
                        self.session.handle_client_gone();
                    }
                }
                ClientOut::ToServer(bytes) => {
                    let sent = match self.server.as_mut() {
                        Some(conn) => conn.send_frame(&bytes).await.is_ok(),
                        None => false,
                    };
                    if !sent {
                        self.session.handle_server_gone();
                    }
                }
                ClientOut::Acquire(key) => self.acquire(key).await,
                ClientOut::Release { server, reusable } => {
                    let conn = self.server.take();
                    self.pool.release(self.id, server, conn, reusable, self.now);
                }
                ClientOut::Cancel { pid, key } => self.pool.cancel(pid, &key),
                ClientOut::Admin(request) => {
                    if !self.admin(request) {
                        return false;
                    }
                }
                ClientOut::StartTls { early } => self.out_of_line_tls(sock, early).await,
                ClientOut::Close => {
                    out_of_line_linger(sock).await;
                    return false;
                }
            }
        }
        !self.session.is_closed()
    }

    /// [`ClientTask::start_tls`]'s future, made and kept on the heap (see [`OutOfLine`]).
    #[inline(never)]
    fn out_of_line_tls<'a>(
        &'a mut self,
        sock: &'a mut ClientIo,
        early: Bytes,
    ) -> OutOfLine<'a, ()> {
        Box::pin(self.start_tls(sock, early))
    }

    /// Runs the TLS handshake the session asked for, within the login timeout; a stop cuts
    /// it off. A failed handshake ends the connection (there is no plaintext left to write
    /// an error on).
    async fn start_tls(&mut self, sock: &mut ClientIo, early: Bytes) {
        let Some(acceptor) = self.tls.clone() else {
            return self.session.handle_client_gone();
        };
        let deadline = self.session.poll_timeout().map(|d| self.clock.deadline(d));
        // A clone, so that the run loop still sees a drain that began meanwhile.
        let mut phase = self.phase.clone();
        let direct = !early.is_empty();
        let outcome = tokio::select! {
            r = sock.accept_tls(acceptor, early) => r,
            () = sleep(deadline) => Err(std::io::ErrorKind::TimedOut.into()),
            _ = phase.wait_for(|p| *p == Phase::Stopped) => {
                Err(std::io::Error::other("the proxy stopped"))
            }
        };
        match outcome {
            Ok((alpn, cert)) => {
                let cn = cert.as_ref().and_then(|c| c.common_name.as_deref());
                tracing::debug!(client = self.id.0, direct, ?cn, "client TLS established");
                if let Some(text) = sock.tls_description() {
                    self.slot.set_tls(text);
                }
                self.session
                    .handle_tls_established_with_cert(alpn.as_deref(), cert);
            }
            Err(e) => {
                let client = self.id.0;
                tracing::debug!(client, direct, error = %e, "client TLS handshake failed");
                self.session.handle_client_gone();
            }
        }
    }
}

/// A rare await's future, made by a function that is never inlined and kept on the heap, so
/// that neither its state nor the temporaries of making it enlarge the client loop's future
/// and stack frame, which every transaction walks. With everything inlined into it, the
/// loop's poll of the PGO build had a 28 KiB stack frame: seven stack probes (one per 4 KiB
/// page, each a write) and some 15 data-cache misses per transaction (session 45,
/// docs/proxy-performance.md).
type OutOfLine<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// [`linger`]'s future, made and kept on the heap (see [`OutOfLine`]).
#[inline(never)]
fn out_of_line_linger(sock: &mut ClientIo) -> OutOfLine<'_, ()> {
    Box::pin(linger(sock))
}

/// [`replayed`]'s future, made and kept on the heap (see [`OutOfLine`]).
#[inline(never)]
fn out_of_line_replayed(conn: &mut Session, need: Lsn) -> OutOfLine<'_, Result<bool, ()>> {
    Box::pin(replayed(conn, need))
}

/// Closes our side, then reads and drops what the client still sends for a moment, so that
/// a closing socket with unread data does not reset the connection and take the error just
/// written with it.
async fn linger(sock: &mut ClientIo) {
    let _ = sock.shutdown().await;
    let mut sink = [0u8; 4096];
    let drain = async { while matches!(sock.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), drain).await;
}

/// Whether an idle server has something to say (or is closed): an idle server speaks only
/// to end the session, so any byte, EOF or error means it must not be lent. One poll, no
/// waiting (a zero timeout would wait for the timer's next tick). On a plain socket a
/// non-blocking read that registers no wake-up (a third of the cost of a poll).
async fn stale(conn: &mut Session) -> bool {
    if let Some(spoke) = conn.spoke_unread() {
        return spoke;
    }
    let mut buf = BytesMut::new();
    let mut read = std::pin::pin!(conn.recv_bytes(&mut buf));
    std::future::poll_fn(|cx| {
        std::task::Poll::Ready(std::future::Future::poll(read.as_mut(), cx).is_ready())
    })
    .await
}

/// Whether the server has replayed up to `need`; an error when it could not say. A server
/// out of recovery has every write: no row. (`pg_last_wal_replay_lsn()` alone is NULL only
/// on a server that never recovered; on a promoted standby it stays where recovery ended.)
async fn replayed(conn: &mut Session, need: Lsn) -> Result<bool, ()> {
    let rows = conn
        .simple_query(
            "select pg_catalog.pg_last_wal_replay_lsn() where pg_catalog.pg_is_in_recovery()",
        )
        .await
        .map_err(|_| ())?;
    match rows.first().and_then(|r| r.first()).cloned().flatten() {
        None => Ok(true),
        Some(text) => Ok(text.parse::<Lsn>().is_ok_and(|at| at >= need)),
    }
}

/// What one turn of the client loop handles.
enum Turn {
    /// The slot's kick: the proxy's phase may have changed.
    Kicked,
    /// A PAUSE's answer (`None`: the proxy stopped).
    Admin(Option<Result<(), String>>),
    /// The pools' answer to a wait (`None`: the pools are gone).
    Granted(Option<Granted>),
    /// The session's deadline passed.
    Timeout,
    /// Bytes from the lent server joined the buffer, or the connection broke.
    Server(Result<(), ()>),
    /// A read from the client (0: end of stream).
    Client(std::io::Result<usize>),
}

/// Keeps `timer` on `deadline`: one timer entry reset in place, not a new one each turn.
fn arm(timer: &mut Option<Pin<Box<Sleep>>>, deadline: Option<std::time::Instant>) {
    match (timer.as_mut(), deadline) {
        (None, None) => {}
        (Some(_), None) => *timer = None,
        (Some(t), Some(d)) => {
            if t.deadline() != d.into() {
                t.as_mut().reset(d.into());
            }
        }
        (None, Some(d)) => *timer = Some(Box::pin(tokio::time::sleep_until(d.into()))),
    }
}

async fn sleep(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::replayed;
    use crate::proxy::stand_in::{Backend, Role, PRIMARY};
    use pgyard_types::Lsn;

    async fn check(role: Role, need: Lsn) -> Result<bool, ()> {
        let backend = Backend::start(role).await;
        let conninfo = format!(
            "host=127.0.0.1 port={} user=app dbname=app sslmode=disable",
            backend.port
        );
        let mut session = crate::connect(&conninfo).await.expect("connect");
        replayed(&mut session, need).await
    }

    /// MIN_LSN's check on the server offered: a standby must have replayed that far; a
    /// server out of recovery has every write — also a promoted standby, whose
    /// `pg_last_wal_replay_lsn()` stays where its recovery ended (found by the simulator's
    /// `proxy` scenario, which models that: every read after a write on a promoted primary
    /// fell back needlessly).
    #[tokio::test]
    async fn only_a_standby_behind_the_position_is_behind() {
        let at = Lsn(0x500_0000);
        let standby = Role {
            in_recovery: true,
            replay: Some(at),
        };
        assert_eq!(check(standby, Lsn(0x400_0000)).await, Ok(true));
        assert_eq!(check(standby, at).await, Ok(true));
        assert_eq!(check(standby, Lsn(0x600_0000)).await, Ok(false));
        assert_eq!(check(PRIMARY, Lsn(0x600_0000)).await, Ok(true));
        let promoted = Role {
            in_recovery: false,
            replay: Some(at),
        };
        assert_eq!(check(promoted, Lsn(0x600_0000)).await, Ok(true));
    }
}
