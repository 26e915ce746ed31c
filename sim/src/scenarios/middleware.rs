//! `middleware`: clients interleave middleware (`M`) messages with queries. Some go through
//! a middleware running pgyard-wire's [`Splitter`] on their byte stream, cut into random
//! chunks; some talk to servers directly. Servers either follow the proposal (ignore `M`,
//! optionally with a debug NOTICE) or behave as real servers do today (FATAL 08P01 on the
//! unknown type). Invariants: no server ever receives an `M` through the middleware; every
//! `M` reaches the middleware exactly once and in order (a prefix of what was sent when the
//! connection was reset); every query through the middleware is answered; direct clients
//! see exactly what their server's stance implies.

use bytes::BytesMut;
use pgyard_types::{uniform_inclusive, Instant, Rng, RngCore};
use pgyard_wire::frame::{Decoded, FrameDecoder, Limits, ProtocolVersion, UnitRef};
use pgyard_wire::frontend::encode_startup;
use pgyard_wire::middleware::{encode_middleware, SplitItem, Splitter};

use crate::world::net::exp_ns;
use crate::world::pg::{MiddlewareStance, Node, NodeState, Session, USER};
use crate::world::Queue;
use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct MiddlewareScenario;

/// What one seed draws first.
#[derive(Debug)]
struct Mix {
    servers: usize,
    clients: usize,
    chunk_max: u64,
    reset_permille: u64,
    direct_pct: u64,
    items_max: u64,
    latency_mean_ns: u64,
}

#[derive(Debug)]
enum Ev {
    /// Client bytes reach the middleware (or the server, for a direct client).
    FromClient { conn: usize, bytes: Vec<u8> },
    /// Forwarded bytes reach the server.
    ToServer { conn: usize, bytes: Vec<u8> },
    /// Server bytes reach the client.
    ToClient { conn: usize, bytes: Vec<u8> },
    /// The connection was reset.
    Reset(usize),
}

/// How far a connection is from its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Bytes flow both ways.
    Open,
    /// Nothing more goes towards the server: it closed the connection, or a reset is on its
    /// way; what the server already sent still reaches the client.
    Closed,
    /// The connection was reset: nothing more reaches either end.
    Reset,
}

struct Conn {
    server: usize,
    direct: bool,
    splitter: Splitter,
    session: Session,
    sent_m: Vec<(i64, Vec<u8>)>,
    got_m: Vec<(i64, Vec<u8>)>,
    queries: u64,
    ready: u64,
    notices: u64,
    fatal_08p01: bool,
    link: Link,
    dec: FrameDecoder,
    last: [Instant; 3],
}

impl Scenario for MiddlewareScenario {
    fn name(&self) -> &'static str {
        "middleware"
    }

    fn description(&self) -> &'static str {
        "M messages interleaved with queries through the splitter; proposal vs real servers"
    }

    fn run(&self, rng: &mut Rng, t: &mut Trace) -> Result<u64, Violation> {
        let mix = draw_mix(rng);
        trace!(t, "mix {mix:?}");
        let mut nodes = draw_nodes(rng, t, &mix);
        let mut q: Queue<Ev> = Queue::new();
        let mut conns = Vec::new();
        for c in 0..mix.clients {
            conns.push(draw_client(rng, t, &mix, &mut q, c));
        }
        let mut now = Instant::ZERO;
        let mut steps = 0u64;
        while let Some((at, ev)) = q.pop() {
            now = at;
            steps += 1;
            if steps > 100_000 {
                return Err(fail("no-busy-loop", "too many steps".to_owned()));
            }
            match ev {
                Ev::FromClient { conn: c, bytes } => {
                    from_client(rng, t, &mix, &mut q, now, c, &mut conns[c], &bytes)?;
                }
                Ev::ToServer { conn: c, bytes } => {
                    to_server(rng, &mix, &mut q, now, c, &mut conns[c], &mut nodes, &bytes)?;
                }
                Ev::ToClient { conn: c, bytes } => to_client(&mut conns[c], &bytes),
                Ev::Reset(c) => {
                    let conn = &mut conns[c];
                    conn.link = Link::Reset;
                    conn.session.end(&mut nodes[conn.server]);
                }
            }
        }
        for (c, conn) in conns.iter().enumerate() {
            check_client(t, c, conn, nodes[conn.server].middleware)?;
        }
        Ok(now.0)
    }
}

fn draw_mix(rng: &mut Rng) -> Mix {
    Mix {
        servers: 1 + uniform_inclusive(rng, 2) as usize,
        clients: 1 + uniform_inclusive(rng, 3) as usize,
        chunk_max: [1, 7, 64, 4096][uniform_inclusive(rng, 3) as usize],
        reset_permille: if uniform_inclusive(rng, 3) == 0 {
            1 + uniform_inclusive(rng, 40)
        } else {
            0
        },
        direct_pct: uniform_inclusive(rng, 50),
        items_max: 1 + uniform_inclusive(rng, 12),
        latency_mean_ns: 10_000 + uniform_inclusive(rng, 2_000_000),
    }
}

/// The servers, each with a drawn stance on `M` messages.
fn draw_nodes(rng: &mut Rng, t: &mut Trace, mix: &Mix) -> Vec<Node> {
    let mut nodes = Vec::new();
    for i in 0..mix.servers {
        let mut n = Node::new(format!("pg{i}"), NodeState::Primary, 0, 1, rng);
        n.middleware = [
            MiddlewareStance::Reject,
            MiddlewareStance::Ignore,
            MiddlewareStance::Notice,
        ][uniform_inclusive(rng, 2) as usize];
        trace!(t, "node {} middleware={:?}", n.name, n.middleware);
        nodes.push(n);
    }
    nodes
}

/// Client `c`: its server, its byte stream of queries and `M` messages, and the chunks of
/// that stream queued for delivery.
fn draw_client(rng: &mut Rng, t: &mut Trace, mix: &Mix, q: &mut Queue<Ev>, c: usize) -> Conn {
    let server = uniform_inclusive(rng, mix.servers as u64 - 1) as usize;
    let direct = uniform_inclusive(rng, 99) < mix.direct_pct;
    let mut stream = BytesMut::new();
    let _ = encode_startup(
        ProtocolVersion::V3_0,
        &[(b"user", USER.as_bytes()), (b"database", b"app")],
        &mut stream,
    );
    let mut sent_m = Vec::new();
    let mut queries = 0;
    let items = 1 + uniform_inclusive(rng, mix.items_max - 1);
    for _ in 0..items {
        if uniform_inclusive(rng, 1) == 0 {
            queries += 1;
            stream.extend_from_slice(&query_bytes(b"SELECT 1"));
        } else {
            let class = if uniform_inclusive(rng, 1) == 0 {
                uniform_inclusive(rng, 1000) as i64
            } else {
                (1i64 << 31) + uniform_inclusive(rng, 1 << 20) as i64
            };
            let mut payload = vec![0u8; uniform_inclusive(rng, 40) as usize];
            rng.fill_bytes(&mut payload);
            let _ = encode_middleware(class, &payload, &mut stream);
            sent_m.push((class, payload));
        }
    }
    trace!(
        t,
        "client {c} -> pg{server} direct={direct} queries={queries} m={} bytes={}",
        sent_m.len(),
        stream.len()
    );
    // Cut the stream at random points and send the chunks over time.
    let mut at = uniform_inclusive(rng, 1_000_000);
    let mut rest: &[u8] = &stream;
    while !rest.is_empty() {
        let n = (1 + uniform_inclusive(rng, mix.chunk_max - 1) as usize).min(rest.len());
        at += 1 + exp_ns(rng, mix.latency_mean_ns);
        let bytes = rest[..n].to_vec();
        q.push(Instant(at), Ev::FromClient { conn: c, bytes });
        rest = &rest[n..];
    }
    Conn {
        server,
        direct,
        splitter: Splitter::default(),
        session: Session::new(),
        sent_m,
        got_m: Vec::new(),
        queries,
        ready: 0,
        notices: 0,
        fatal_08p01: false,
        link: Link::Open,
        dec: FrameDecoder::backend(Limits::libpq_client()),
        last: [Instant::ZERO; 3],
    }
}

/// Client bytes arrive: maybe the connection resets; a direct client's go to its server, the
/// others through the splitter, which keeps the `M` messages and forwards the rest.
#[allow(clippy::too_many_arguments)]
fn from_client(
    rng: &mut Rng,
    t: &mut Trace,
    mix: &Mix,
    q: &mut Queue<Ev>,
    now: Instant,
    c: usize,
    conn: &mut Conn,
    bytes: &[u8],
) -> Result<(), Violation> {
    if conn.link != Link::Open {
        return Ok(());
    }
    if mix.reset_permille > 0 && uniform_inclusive(rng, 999) < mix.reset_permille {
        trace!(t, "t={} c{c} reset", now.0);
        q.push(now, Ev::Reset(c));
        conn.link = Link::Closed;
        return Ok(());
    }
    if conn.direct {
        let d = hop(rng, &mut conn.last[1], now, mix.latency_mean_ns);
        let bytes = bytes.to_vec();
        q.push(d, Ev::ToServer { conn: c, bytes });
        return Ok(());
    }
    conn.splitter.feed(bytes);
    loop {
        match conn.splitter.split() {
            Ok(Decoded::Frame(SplitItem::Forward(b))) => {
                let d = hop(rng, &mut conn.last[1], now, mix.latency_mean_ns);
                let bytes = b.to_vec();
                q.push(d, Ev::ToServer { conn: c, bytes });
            }
            Ok(Decoded::Frame(SplitItem::Middleware(m))) => {
                trace!(
                    t,
                    "t={} c{c} middleware got class {}",
                    now.0,
                    m.class().get()
                );
                conn.got_m.push((m.class().get(), m.payload().to_vec()));
            }
            Ok(Decoded::NeedMore { .. }) => return Ok(()),
            Err(e) => return Err(fail("splitter-accepts-valid-streams", format!("c{c}: {e}"))),
        }
    }
}

/// Bytes reach the server, which must never see an `M` that went through the middleware.
#[allow(clippy::too_many_arguments)]
fn to_server(
    rng: &mut Rng,
    mix: &Mix,
    q: &mut Queue<Ev>,
    now: Instant,
    c: usize,
    conn: &mut Conn,
    nodes: &mut [Node],
    bytes: &[u8],
) -> Result<(), Violation> {
    if conn.link != Link::Open {
        return Ok(());
    }
    let node = &mut nodes[conn.server];
    let before = node.middleware_seen;
    let reply = conn.session.receive(node, bytes, rng);
    if !conn.direct && node.middleware_seen != before {
        return Err(fail(
            "no-m-reaches-a-server-through-the-middleware",
            format!(
                "c{c}: pg{} received an M ({:?})",
                conn.server, node.middleware
            ),
        ));
    }
    if !reply.bytes.is_empty() {
        let d = hop(rng, &mut conn.last[2], now, mix.latency_mean_ns);
        q.push(
            d,
            Ev::ToClient {
                conn: c,
                bytes: reply.bytes,
            },
        );
    }
    if reply.close {
        conn.link = Link::Closed;
    }
    Ok(())
}

/// Server bytes reach the client, which counts ReadyForQuery, notices and an 08P01 error.
fn to_client(conn: &mut Conn, bytes: &[u8]) {
    if conn.link == Link::Reset {
        return;
    }
    conn.dec.feed(bytes);
    while let Ok(Decoded::Frame(u)) = conn.dec.decode_ref() {
        if let UnitRef::Typed(f) = u {
            match f.tag {
                b'Z' => conn.ready += 1,
                b'N' => conn.notices += 1,
                b'E' => conn.fatal_08p01 |= f.body.windows(6).any(|w| w == b"C08P01"),
                _ => {}
            }
        }
    }
}

/// The end-of-run invariants for client `c`, whose server has `stance`.
fn check_client(
    t: &mut Trace,
    c: usize,
    conn: &Conn,
    stance: MiddlewareStance,
) -> Result<(), Violation> {
    let reset = conn.link == Link::Reset;
    trace!(
        t,
        "client {c} done: ready={} notices={} fatal={} m_got={} reset={reset}",
        conn.ready,
        conn.notices,
        conn.fatal_08p01,
        conn.got_m.len(),
    );
    if conn.direct {
        if reset {
            return Ok(());
        }
        let expect_fatal = stance == MiddlewareStance::Reject && !conn.sent_m.is_empty();
        if conn.fatal_08p01 != expect_fatal {
            return Err(fail(
                "servers-treat-m-by-their-stance",
                format!("c{c} direct to {stance:?}: fatal={}", conn.fatal_08p01),
            ));
        }
        if !expect_fatal && conn.ready != conn.queries + 1 {
            return Err(fail(
                "proposal-servers-answer-every-query",
                format!("c{c}: {} of {} answered", conn.ready, conn.queries + 1),
            ));
        }
        let notices = if stance == MiddlewareStance::Notice {
            conn.sent_m.len() as u64
        } else {
            0
        };
        if !expect_fatal && conn.notices != notices {
            return Err(fail(
                "notice-per-m",
                format!("c{c}: {} notices, expected {notices}", conn.notices),
            ));
        }
        return Ok(());
    }
    let prefix_ok =
        conn.got_m.len() <= conn.sent_m.len() && conn.got_m[..] == conn.sent_m[..conn.got_m.len()];
    let all = conn.got_m.len() == conn.sent_m.len();
    if !prefix_ok || (!reset && !all) {
        return Err(fail(
            "every-m-reaches-the-middleware-once-in-order",
            format!(
                "c{c}: sent {:?}, middleware got {:?}",
                classes(&conn.sent_m),
                classes(&conn.got_m)
            ),
        ));
    }
    if !reset && (conn.ready != conn.queries + 1 || conn.fatal_08p01 || conn.notices > 0) {
        return Err(fail(
            "queries-through-the-middleware-answered",
            format!(
                "c{c}: ready {} of {}, fatal={}, notices={}",
                conn.ready,
                conn.queries + 1,
                conn.fatal_08p01,
                conn.notices
            ),
        ));
    }
    Ok(())
}

/// The next delivery time on one FIFO hop.
fn hop(rng: &mut Rng, last: &mut Instant, now: Instant, mean: u64) -> Instant {
    let at = Instant((now.0 + 1 + exp_ns(rng, mean)).max(last.0 + 1));
    *last = at;
    at
}

fn query_bytes(sql: &[u8]) -> Vec<u8> {
    let len = u32::try_from(sql.len() + 5).unwrap_or(u32::MAX);
    let mut v = vec![b'Q'];
    v.extend_from_slice(&len.to_be_bytes());
    v.extend_from_slice(sql);
    v.push(0);
    v
}

fn classes(m: &[(i64, Vec<u8>)]) -> Vec<i64> {
    m.iter().map(|(c, _)| *c).collect()
}

fn fail(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}
