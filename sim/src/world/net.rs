//! The simulated network and DNS: per-link latency (a minimum plus an exponential tail,
//! integer arithmetic only so every machine draws the same numbers), loss as TCP
//! retransmission delay, resets mid-stream, refused ports, SYN blackholes, partitions that
//! heal, and names with several addresses that may fail to resolve.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use pgyard_types::{uniform_inclusive, Instant, Rng, RngCore};

/// Linux's default SYN retry budget (`tcp_syn_retries = 6`): about 127 s until ETIMEDOUT.
pub const SYN_TIMEOUT_NS: u64 = 127_000_000_000;
/// The port every simulated server listens on.
pub const PORT: u16 = 5432;

/// One direction-independent link's latency.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    /// Minimum one-way delay.
    pub min_ns: u64,
    /// Mean of the exponential part.
    pub mean_ns: u64,
}

impl Link {
    /// The largest one-way delay this link can draw without loss.
    pub fn max_ns(&self) -> u64 {
        self.min_ns + 8 * self.mean_ns
    }
}

/// A set of nodes cut off from every client during `[from, until)`.
#[derive(Clone, Debug)]
pub struct Partition {
    /// Nodes on the far side.
    pub nodes: Vec<usize>,
    /// Start.
    pub from: Instant,
    /// Heal.
    pub until: Instant,
}

/// The fault mix of the network, drawn per seed.
#[derive(Clone, Default)]
pub struct NetMix {
    /// Percent of segments delayed by a retransmission timeout.
    pub loss_pct: u64,
    /// Per-mille of server replies replaced by a connection reset.
    pub reset_permille: u64,
    /// Percent of connects refused (a firewall REJECT, a port not yet bound).
    pub refuse_pct: u64,
    /// Percent of connects whose SYN vanishes (ETIMEDOUT after the SYN budget).
    pub blackhole_pct: u64,
    /// Percent of TLS handshakes that fail.
    pub tls_fail_pct: u64,
    /// Percent of resolutions failing temporarily.
    pub dns_fail_pct: u64,
}

/// The text `#[derive(Debug)]` would print, in one `write!`: it starts every connect seed's
/// trace, and the derived builder costs several times more.
impl std::fmt::Debug for NetMix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "NetMix {{ loss_pct: {}, reset_permille: {}, refuse_pct: {}, blackhole_pct: {}, \
             tls_fail_pct: {}, dns_fail_pct: {} }}",
            self.loss_pct,
            self.reset_permille,
            self.refuse_pct,
            self.blackhole_pct,
            self.tls_fail_pct,
            self.dns_fail_pct
        )
    }
}

/// Links, partitions and the fault switch.
#[derive(Clone, Debug)]
pub struct Net {
    /// `links[client][node]`.
    pub links: Vec<Vec<Link>>,
    /// Fault mix (applies only while `faults` is on).
    pub mix: NetMix,
    /// Partitions, in start order.
    pub partitions: Vec<Partition>,
    /// Faults on (safety phase) or off (liveness phase).
    pub faults: bool,
}

/// Exponential sample with mean `mean`, capped at 8 × mean, from integers only: the count of
/// leading zero bits of a uniform word is geometric with p = 1/2, and a uniform fraction
/// fills in between, scaled by ln 2.
pub fn exp_ns(rng: &mut Rng, mean: u64) -> u64 {
    if mean == 0 {
        return 0;
    }
    let w = rng.next_u64();
    let k = u64::from(w.leading_zeros().min(11));
    let frac = w & 0x3ff;
    let units = (k * 1024 + frac) * 710 / 1024; // × ln 2 in 1/1024ths
    (mean.saturating_mul(units) / 1024).min(mean * 8)
}

impl Net {
    /// Whether `node` is cut off at `now`, and until when.
    pub fn partitioned(&self, node: usize, now: Instant) -> Option<Instant> {
        if !self.faults {
            return None;
        }
        self.partitions
            .iter()
            .filter(|p| p.from <= now && now < p.until && p.nodes.contains(&node))
            .map(|p| p.until)
            .max()
    }

    /// One-way delay from `now` for a segment on (client, node), including loss and
    /// partitions (segments are held until the partition heals, as TCP retransmits them).
    pub fn delay(&self, rng: &mut Rng, client: usize, node: usize, now: Instant) -> u64 {
        let link = self.links[client][node];
        let mut d = link.min_ns + exp_ns(rng, link.mean_ns);
        if self.faults && self.mix.loss_pct > 0 && uniform_inclusive(rng, 99) < self.mix.loss_pct {
            d += 200_000_000 * (1 + uniform_inclusive(rng, 2));
        }
        if let Some(until) = self.partitioned(node, now) {
            d += until.0 - now.0;
        }
        d
    }

    /// Whether a fault with `pct` percent fires now.
    pub fn fires(&self, rng: &mut Rng, pct: u64) -> bool {
        self.faults && pct > 0 && uniform_inclusive(rng, 99) < pct
    }
}

/// The address of node `i`: `10.N.64.(199+N)` for N = i + 1, so that the addresses a report
/// names have octets of one, two and three digits.
pub fn node_addr(i: usize) -> SocketAddr {
    let n = u8::try_from(i + 1).unwrap_or(u8::MAX).min(56);
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, n, 64, 199 + n)), PORT)
}

/// The node behind an address.
pub fn addr_node(addr: &SocketAddr) -> Option<usize> {
    match addr.ip() {
        IpAddr::V4(v4) if addr.port() == PORT => match v4.octets() {
            [10, n, 64, last] if n >= 1 && u16::from(last) == 199 + u16::from(n) => {
                Some(usize::from(n) - 1)
            }
            _ => None,
        },
        _ => None,
    }
}

/// DNS: name → node indexes, in resolver order.
#[derive(Clone, Debug, Default)]
pub struct Dns {
    /// Records; a name missing here does not exist.
    pub names: BTreeMap<String, Vec<usize>>,
    /// Resolver latency.
    pub latency_ns: u64,
}

impl Dns {
    /// The answer to a lookup.
    pub fn lookup(&self, name: &str) -> Result<Vec<SocketAddr>, String> {
        match self.names.get(name) {
            Some(nodes) => Ok(nodes.iter().map(|&n| node_addr(n)).collect()),
            None => Err("Name or service not known".to_owned()),
        }
    }

    /// How many addresses `name` has (1 for a name that fails: one error line).
    pub fn count(&self, name: &str) -> usize {
        self.names.get(name).map_or(1, |v| v.len().max(1))
    }
}
