//! How the `proxy` scenario opens a server connection: as `pgyard proxy`'s adapter opens one
//! (`crates/tokio/src/proxy/shared.rs`, `open`), through the real connect machine and the
//! shared driver core, with the backend's host list and the route's `target_session_attrs`
//! (`read-write` for `primary`, `prefer-standby` for `standby`, `any` with
//! `load_balance_hosts=random` for `any`) and the seed's `failover_timeout`. The sockets are
//! simulated here: a name resolves to its node, a connect to a dead node is refused, bytes
//! take a short random time each way, and the node's login side is [`pg::Session`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use pgyard_connect::{AttemptId, Connector, Established, Event, IoErrorKind, OpenTarget};
use pgyard_conninfo::typed::{ConnectConfig, Context};
use pgyard_driver::core::{Core, Io, Mailbox, Step, TlsRequest, TlsSetup, WorkerCmd};
use pgyard_proxy::Route;
use pgyard_types::{uniform_inclusive, Instant, Rng};

use super::proxy_cluster::Cluster;
use super::proxy_plan::OPTIONS;
use crate::world::net::{addr_node, node_addr};
use crate::world::pg::{self, NodeState, USER};
use crate::world::Queue;
use crate::Violation;

/// What the network of a server connect delivers, and to which side.
#[derive(Debug)]
pub(super) enum NetEv {
    /// A host name resolved.
    Resolved {
        token: pgyard_connect::ResolveToken,
        host: String,
    },
    /// The socket connected, or was refused.
    Opened { attempt: AttemptId, ok: bool },
    /// Bytes reach the server.
    ToServer { attempt: AttemptId, bytes: Vec<u8> },
    /// Bytes reach the proxy.
    ToProxy { attempt: AttemptId, bytes: Vec<u8> },
    /// The server closed the connection.
    Closed { attempt: AttemptId },
}

/// The connection settings of each pool, as the adapter builds them (`server_conninfo`):
/// the backend's hosts, the route's settings, and the pool's `options`.
#[derive(Clone, Debug)]
pub(super) struct Routes {
    /// Per route and per `options` a client may send (`""` for none, then [`OPTIONS`]).
    configs: Vec<(Route, String, ConnectConfig)>,
}

impl Routes {
    /// The configurations over `nodes` servers with the failover budget.
    pub(super) fn new(nodes: usize, failover_ns: Option<u64>) -> Result<Routes, Violation> {
        let hosts: Vec<String> = (0..nodes).map(|n| format!("pg{n}")).collect();
        let base = format!(
            "host={} port=5432 user={USER} dbname=app sslmode=disable",
            hosts.join(",")
        );
        let make = |extra: &str| -> Result<ConnectConfig, Violation> {
            let text = format!("{base} {extra}");
            let bad = |e: String| Violation {
                invariant: "generated-config-parses",
                detail: format!("{text}: {e}"),
            };
            let info = pgyard_conninfo::parse(text.as_bytes()).map_err(|e| bad(e.to_string()))?;
            let mut c = ConnectConfig::from_resolved(&info, &Context::new().with_os_user(USER))
                .map_err(|e| bad(e.to_string()))?;
            c.set_failover_timeout(failover_ns.map(Duration::from_nanos));
            Ok(c)
        };
        let routes = [
            (Route::Primary, "target_session_attrs=read-write"),
            (Route::Standby, "target_session_attrs=prefer-standby"),
            (
                Route::Any,
                "target_session_attrs=any load_balance_hosts=random",
            ),
        ];
        let mut configs = Vec::new();
        for (route, settings) in routes {
            for options in std::iter::once("").chain(OPTIONS) {
                let extra = match options {
                    "" => settings.to_owned(),
                    o => format!("{settings} options='{o}'"),
                };
                configs.push((route, options.to_owned(), make(&extra)?));
            }
        }
        Ok(Routes { configs })
    }

    /// The configuration of `route`'s pool for `options`, if a client can ask for it.
    fn of(&self, route: Route, options: &str) -> Option<&ConnectConfig> {
        self.configs
            .iter()
            .find(|(r, o, _)| *r == route && o == options)
            .map(|(_, _, c)| c)
    }
}

type Mail = Rc<RefCell<Vec<(AttemptId, WorkerCmd<()>)>>>;

/// An attempt's mailbox: its commands queue for the scenario to carry out.
struct SimMailbox {
    attempt: AttemptId,
    out: Mail,
}

impl Mailbox<()> for SimMailbox {
    fn post(&self, cmd: WorkerCmd<()>) {
        self.out.borrow_mut().push((self.attempt, cmd));
    }
}

/// Server connects use `sslmode=disable`: no handshake is ever asked for.
struct NoTls;

impl TlsSetup for NoTls {
    type Start = ();

    fn start(&self, _request: TlsRequest<'_>) -> Result<(), String> {
        Err("TLS is not configured in this simulation".into())
    }
}

/// One simulated socket of a connect.
#[derive(Debug)]
pub(super) struct Sock {
    /// The server.
    pub(super) node: usize,
    /// The server's life it reaches.
    pub(super) life: u32,
    /// The server's end of it.
    pub(super) session: pg::Session,
    /// The server end is gone (its process died, or it closed).
    pub(super) gone: bool,
    /// The machine was told the socket connected.
    opened: bool,
}

/// How a connect ended.
pub(super) enum Outcome {
    /// A logged-in connection, with its socket.
    Won(Box<(Established, Sock)>),
    /// The connect failed: the error's text, and whether the server refused the login
    /// (`ErrorKind::Authentication`: retrying will not cure it).
    Failed(String, bool),
}

/// A server connect in progress.
pub(super) struct Opening {
    /// The route it is for.
    pub(super) route: Route,
    /// The `options` of its pool.
    pub(super) options: String,
    /// The cluster's epoch when it began.
    pub(super) epoch: u64,
    machine: Connector,
    core: Core<SimMailbox, NoTls>,
    mail: Mail,
    socks: BTreeMap<AttemptId, Sock>,
}

/// One network hop: 20 µs to 320 µs.
pub(super) fn hop(rng: &mut Rng) -> u64 {
    20_000 + uniform_inclusive(rng, 300_000)
}

impl Opening {
    /// Starts a connect for `route`'s pool with `options` at `now`; a violation when no
    /// client could have asked for that pool.
    pub(super) fn new(
        routes: &Routes,
        (route, options): (Route, &str),
        now: Instant,
        seed: u64,
        epoch: u64,
    ) -> Result<Self, Violation> {
        let Some(config) = routes.of(route, options) else {
            let detail =
                format!("the pools opened a server for {route:?} with options {options:?}");
            return Err(Violation {
                invariant: "pool-per-options",
                detail,
            });
        };
        Ok(Opening {
            route,
            options: options.to_owned(),
            epoch,
            machine: Connector::new(config.clone(), now, seed),
            core: Core::new(NoTls, None),
            mail: Rc::default(),
            socks: BTreeMap::new(),
        })
    }

    /// When the machine next needs the clock.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout()
    }

    /// Server `node` died: its sockets close (the proxy hears it a hop later).
    pub(super) fn node_died<E>(
        &mut self,
        node: usize,
        now: Instant,
        rng: &mut Rng,
        q: &mut Queue<E>,
        wrap: impl Fn(NetEv) -> E,
    ) {
        for (attempt, s) in self.socks.iter_mut() {
            if s.node == node && !s.gone {
                s.gone = true;
                let closed = NetEv::Closed { attempt: *attempt };
                q.push(Instant(now.0 + hop(rng)), wrap(closed));
            }
        }
    }

    /// A network delivery; then the connect is stepped.
    pub(super) fn deliver<E>(
        &mut self,
        ev: NetEv,
        now: Instant,
        cluster: &mut Cluster,
        rng: &mut Rng,
        q: &mut Queue<E>,
        wrap: &impl Fn(NetEv) -> E,
    ) -> Result<Option<Outcome>, Violation> {
        let event = match ev {
            NetEv::Resolved { token, host } => {
                let node = host
                    .strip_prefix("pg")
                    .and_then(|n| n.parse::<usize>().ok());
                let result = match node {
                    Some(n) if n < cluster.members.len() => Ok(vec![node_addr(n)]),
                    _ => Err("Name or service not known".to_owned()),
                };
                self.core
                    .resolved(&mut self.machine, now, token, &host, result);
                None
            }
            NetEv::Opened { attempt, ok } => {
                // A server that died before the handshake completed refused it.
                let sock = self.socks.get_mut(&attempt).filter(|s| ok && !s.gone);
                Some(match sock {
                    Some(s) => {
                        s.opened = true;
                        Event::Opened { attempt }
                    }
                    None => {
                        self.socks.remove(&attempt);
                        Event::OpenFailed {
                            attempt,
                            error: IoErrorKind::ConnectionRefused,
                        }
                    }
                })
            }
            NetEv::ToServer { attempt, bytes } => {
                self.feed_server(attempt, &bytes, now, cluster, rng, q, wrap);
                None
            }
            NetEv::ToProxy { attempt, bytes } => self
                .socks
                .contains_key(&attempt)
                .then_some(Event::Received { attempt, bytes }),
            NetEv::Closed { attempt } => self
                .socks
                .get(&attempt)
                .is_some_and(|s| s.opened)
                .then_some(Event::Closed { attempt }),
        };
        if let Some(event) = event {
            self.core.report(&mut self.machine, now, event);
        }
        self.drain(now, cluster, rng, q, wrap)
    }

    /// Bytes reach the server end of `attempt`: its login side answers.
    #[allow(clippy::too_many_arguments)]
    fn feed_server<E>(
        &mut self,
        attempt: AttemptId,
        bytes: &[u8],
        now: Instant,
        cluster: &mut Cluster,
        rng: &mut Rng,
        q: &mut Queue<E>,
        wrap: &impl Fn(NetEv) -> E,
    ) {
        let Some(s) = self.socks.get_mut(&attempt) else {
            return;
        };
        let member = &mut cluster.members[s.node];
        if s.gone || member.life != s.life {
            return;
        }
        let reply = s.session.receive(&mut member.node, bytes, rng);
        let at = Instant(now.0 + hop(rng));
        if !reply.bytes.is_empty() {
            let bytes = reply.bytes;
            q.push(at, wrap(NetEv::ToProxy { attempt, bytes }));
        }
        if reply.close {
            s.gone = true;
            q.push(Instant(at.0 + 1), wrap(NetEv::Closed { attempt }));
        }
    }

    /// Steps the core until it waits, performing its I/O; the outcome once the connect ends.
    pub(super) fn drain<E>(
        &mut self,
        now: Instant,
        cluster: &mut Cluster,
        rng: &mut Rng,
        q: &mut Queue<E>,
        wrap: &impl Fn(NetEv) -> E,
    ) -> Result<Option<Outcome>, Violation> {
        loop {
            let step = self.core.step(&mut self.machine, now);
            let mail = std::mem::take(&mut *self.mail.borrow_mut());
            for (attempt, cmd) in mail {
                match cmd {
                    WorkerCmd::Send(bytes) => {
                        let ev = NetEv::ToServer { attempt, bytes };
                        q.push(Instant(now.0 + hop(rng)), wrap(ev));
                    }
                    WorkerCmd::Close => {
                        if let Some(mut s) = self.socks.remove(&attempt) {
                            s.session.end(&mut cluster.members[s.node].node);
                        }
                    }
                    WorkerCmd::StartTls(()) => {
                        let detail = format!("attempt {} asked for TLS", attempt.0);
                        return Err(Violation {
                            invariant: "server-connects-without-tls",
                            detail,
                        });
                    }
                    WorkerCmd::Handover => {}
                }
            }
            match step {
                Step::Io(io) => self.perform(io, now, cluster, rng, q, wrap)?,
                Step::Wait { .. } => return Ok(None),
                Step::Won(est) => {
                    let sock = self.socks.remove(&est.attempt);
                    self.close_all(cluster);
                    return Ok(Some(match sock {
                        Some(s) => Outcome::Won(Box::new((*est, s))),
                        None => Outcome::Failed("the winning socket is gone".into(), false),
                    }));
                }
                Step::Failed(e) => {
                    self.close_all(cluster);
                    let text = e.to_string();
                    let login = e.kind().is_refusal_for_good();
                    return Ok(Some(Outcome::Failed(text.trim_end().to_owned(), login)));
                }
            }
        }
    }

    fn close_all(&mut self, cluster: &mut Cluster) {
        for (_, mut s) in std::mem::take(&mut self.socks) {
            s.session.end(&mut cluster.members[s.node].node);
        }
    }

    fn perform<E>(
        &mut self,
        io: Io,
        now: Instant,
        cluster: &mut Cluster,
        rng: &mut Rng,
        q: &mut Queue<E>,
        wrap: &impl Fn(NetEv) -> E,
    ) -> Result<(), Violation> {
        match io {
            Io::Resolve { token, host, .. } => {
                q.push(
                    Instant(now.0 + 1_000),
                    wrap(NetEv::Resolved { token, host }),
                );
            }
            Io::Open {
                attempt, target, ..
            } => {
                let node = match &target {
                    OpenTarget::Tcp(a) => addr_node(a),
                    OpenTarget::Unix(_) => None,
                };
                let Some(node) = node.filter(|n| *n < cluster.members.len()) else {
                    let detail = format!("{target:?}");
                    return Err(Violation {
                        invariant: "known-address",
                        detail,
                    });
                };
                let mailbox = SimMailbox {
                    attempt,
                    out: Rc::clone(&self.mail),
                };
                self.core.spawned(attempt, mailbox);
                let member = &cluster.members[node];
                let ok = member.node.state != NodeState::Crashed;
                if ok {
                    let sock = Sock {
                        node,
                        life: member.life,
                        session: pg::Session::new(),
                        gone: false,
                        opened: false,
                    };
                    self.socks.insert(attempt, sock);
                }
                let at = Instant(now.0 + hop(rng));
                q.push(at, wrap(NetEv::Opened { attempt, ok }));
            }
            // No reset: a pooled server connection is never reset, only replaced.
            Io::SendHeld { .. } | Io::CloseHeld => {}
        }
        Ok(())
    }
}

/// The `options` a server's StartupMessage carried (empty: none).
pub(super) fn login_options(login: &pg::Session) -> Vec<u8> {
    let seen = login.startup_seen.as_ref();
    seen.and_then(|s| s.params().find(|(n, _)| *n == b"options"))
        .map(|(_, v)| v.to_vec())
        .unwrap_or_default()
}
