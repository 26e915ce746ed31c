//! `conninfo`: seeded generation of connection strings in both forms. Invariants: a string that
//! parses serializes (keyword/value and URI) to strings that parse to the same map, and the
//! typed view of the map agrees with the map it came from.

use pgyard_conninfo::keywords::{Keyword, ALL as KEYWORDS};
use pgyard_conninfo::typed::{ConnectConfig, Context, SlotKind};
use pgyard_conninfo::{parse, ConnInfo};
use pgyard_types::{uniform_inclusive, Rng, RngCore};

use crate::{trace, Scenario, Trace, Violation};

/// The scenario.
pub struct ConninfoScenario;

/// What one seed draws before it starts (swarm testing: each seed stresses a different mix).
#[derive(Debug)]
struct Mix {
    /// Strings generated per seed.
    strings: u64,
    /// Percent chance a generated string is a URI.
    uri_percent: u64,
    /// Alphabet richness: 0 plain, 1 punctuation, 2 grammar-significant, 3 any byte.
    alphabet: u64,
    /// Most keywords per map.
    keywords_max: u64,
    /// Percent chance of corrupting a generated string with a random edit.
    mutate_percent: u64,
}

impl Scenario for ConninfoScenario {
    fn name(&self) -> &'static str {
        "conninfo"
    }

    fn description(&self) -> &'static str {
        "connection strings in both forms: parse, serialize, re-parse, typed view"
    }

    fn run(&self, rng: &mut Rng, t: &mut Trace) -> Result<u64, Violation> {
        let mix = Mix {
            strings: 1 + uniform_inclusive(rng, 7),
            uri_percent: uniform_inclusive(rng, 100),
            alphabet: uniform_inclusive(rng, 3),
            keywords_max: 1 + uniform_inclusive(rng, 12),
            mutate_percent: uniform_inclusive(rng, 60),
        };
        trace!(t, "mix {mix:?}");
        for i in 0..mix.strings {
            let map = random_map(rng, &mix);
            check_map_round_trip(t, i, &map)?;
            let s = random_string(rng, &mix);
            match parse(&s) {
                Ok(parsed) => {
                    trace!(t, "string {i} {:?} -> {} keywords", Esc(&s), parsed.len());
                    check_map_round_trip(t, i, &parsed)?;
                }
                Err(e) => trace!(t, "string {i} {:?} -> error {e}", Esc(&s)),
            }
        }
        Ok(0)
    }
}

fn check_map_round_trip(t: &mut Trace, i: u64, map: &ConnInfo) -> Result<(), Violation> {
    for (form, text) in [
        (
            "keyword/value",
            pgyard_conninfo::serialize::to_keyword_value(map),
        ),
        ("uri", pgyard_conninfo::serialize::to_uri(map)),
    ] {
        trace!(t, "map {i} as {form}: {:?}", Esc(&text));
        match parse(&text) {
            Ok(back) if &back == map => {}
            Ok(back) => {
                return Err(Violation {
                    invariant: "serialize-reparse",
                    detail: format!(
                        "{form} {:?} parsed to {back:?}, expected {map:?}",
                        Esc(&text)
                    ),
                })
            }
            Err(e) => {
                return Err(Violation {
                    invariant: "serialize-reparse",
                    detail: format!("{form} {:?} of {map:?} failed to parse: {e}", Esc(&text)),
                })
            }
        }
    }
    check_typed_view(t, i, map)
}

/// The typed view's host list must be the comma split of the map's `host`, `hostaddr` and
/// `port` strings, paired as libpq pairs them (one port for all, or one per host).
fn check_typed_view(t: &mut Trace, i: u64, map: &ConnInfo) -> Result<(), Violation> {
    let ctx = Context::new().with_os_user("sim");
    let cfg = match ConnectConfig::from_resolved(map, &ctx) {
        Ok(c) => c,
        Err(e) => {
            trace!(t, "map {i} typed: {e}");
            return Ok(());
        }
    };
    let split = |kw: Keyword| -> Option<Vec<&[u8]>> {
        map.get(kw)
            .filter(|v| !v.is_empty())
            .map(|v| v.split(|&b| b == b',').collect())
    };
    let (hostaddrs, hosts, ports) = (
        split(Keyword::Hostaddr),
        split(Keyword::Host),
        split(Keyword::Port),
    );
    let n = hostaddrs.as_ref().or(hosts.as_ref()).map_or(1, Vec::len);
    let slots = cfg.slots();
    let fail = |detail: String| Violation {
        invariant: "typed-view-agrees",
        detail,
    };
    if slots.len() != n {
        return Err(fail(format!(
            "{} slots for {map:?}, expected {n}",
            slots.len()
        )));
    }
    let nonempty = |v: Option<&[u8]>| v.filter(|v| !v.is_empty()).map(<[u8]>::to_vec);
    for (k, slot) in slots.iter().enumerate() {
        let want_host = hosts.as_ref().and_then(|h| nonempty(h.get(k).copied()));
        let want_addr = hostaddrs.as_ref().and_then(|h| nonempty(h.get(k).copied()));
        let want_port = ports
            .as_ref()
            .and_then(|p| nonempty(if p.len() == 1 { p.first() } else { p.get(k) }.copied()));
        // A slot with neither host nor hostaddr is the default socket directory, which the
        // typed view names as its host.
        let got_host = if slot.kind() == SlotKind::DefaultUnixSocket {
            None
        } else {
            nonempty(slot.host())
        };
        let got = (
            got_host,
            nonempty(slot.hostaddr()),
            nonempty(slot.port_raw()),
        );
        if got != (want_host.clone(), want_addr.clone(), want_port.clone()) {
            return Err(fail(format!(
                "slot {k} of {map:?} is {got:?}, expected {:?}",
                (want_host, want_addr, want_port)
            )));
        }
    }
    trace!(t, "map {i} typed: {} slots", slots.len());
    Ok(())
}

const PLAIN: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789._-";
const PUNCT: &[u8] = b"abcxyz019 .,:/@?=&%+-_";
const GRAMMAR: &[u8] = b"ab19 \t\n\r\x0b\x0c'\\\"=&?/:@,[]%#+2F0";

fn pick(rng: &mut Rng, items: &[u8]) -> u8 {
    items[uniform_inclusive(rng, items.len() as u64 - 1) as usize]
}

fn random_value(rng: &mut Rng, mix: &Mix) -> Vec<u8> {
    let len = uniform_inclusive(rng, 12) as usize;
    (0..len)
        .map(|_| match mix.alphabet {
            0 => pick(rng, PLAIN),
            1 => pick(rng, PUNCT),
            2 => pick(rng, GRAMMAR),
            // Any byte but NUL, which no C string can carry.
            _ => 1 + (rng.next_u32() % 255) as u8,
        })
        .collect()
}

fn random_keyword(rng: &mut Rng) -> Keyword {
    // Weight the multi-host and identity keywords: they carry the interesting grammar.
    const HOT: &[Keyword] = &[
        Keyword::Host,
        Keyword::Hostaddr,
        Keyword::Port,
        Keyword::User,
        Keyword::Password,
        Keyword::Dbname,
    ];
    if rng.next_u32().is_multiple_of(2) {
        HOT[uniform_inclusive(rng, HOT.len() as u64 - 1) as usize]
    } else {
        KEYWORDS[uniform_inclusive(rng, KEYWORDS.len() as u64 - 1) as usize]
    }
}

fn random_map(rng: &mut Rng, mix: &Mix) -> ConnInfo {
    let mut map = ConnInfo::new();
    for _ in 0..uniform_inclusive(rng, mix.keywords_max) {
        let kw = random_keyword(rng);
        let v = random_value(rng, mix);
        map.set(kw, v);
    }
    map
}

/// A string built from grammar pieces, then possibly mutated, so that most parse and many fail
/// in interesting places.
fn random_string(rng: &mut Rng, mix: &Mix) -> Vec<u8> {
    let mut s = Vec::new();
    if uniform_inclusive(rng, 99) < mix.uri_percent {
        s.extend_from_slice(if rng.next_u32().is_multiple_of(2) {
            b"postgresql://"
        } else {
            b"postgres://"
        });
        if rng.next_u32().is_multiple_of(3) {
            s.extend(random_value(rng, mix));
            if rng.next_u32().is_multiple_of(2) {
                s.push(b':');
                s.extend(random_value(rng, mix));
            }
            s.push(b'@');
        }
        for h in 0..=uniform_inclusive(rng, 3) {
            if h > 0 {
                s.push(b',');
            }
            if rng.next_u32().is_multiple_of(5) {
                s.extend_from_slice(b"[::1]");
            } else {
                s.extend(random_value(rng, mix));
            }
            if rng.next_u32().is_multiple_of(2) {
                s.push(b':');
                s.extend(random_value(rng, mix));
            }
        }
        if rng.next_u32().is_multiple_of(2) {
            s.push(b'/');
            s.extend(random_value(rng, mix));
        }
        if rng.next_u32().is_multiple_of(2) {
            s.push(b'?');
            for p in 0..=uniform_inclusive(rng, 3) {
                if p > 0 {
                    s.push(b'&');
                }
                s.extend_from_slice(random_keyword(rng).name().as_bytes());
                s.push(b'=');
                s.extend(random_value(rng, mix));
            }
        }
    } else {
        for _ in 0..=uniform_inclusive(rng, mix.keywords_max) {
            s.extend_from_slice(random_keyword(rng).name().as_bytes());
            s.extend_from_slice(if rng.next_u32().is_multiple_of(4) {
                b" = "
            } else {
                b"="
            });
            if rng.next_u32().is_multiple_of(3) {
                s.push(b'\'');
                s.extend(random_value(rng, mix));
                s.push(b'\'');
            } else {
                s.extend(random_value(rng, mix));
            }
            s.push(b' ');
        }
    }
    if uniform_inclusive(rng, 99) < mix.mutate_percent && !s.is_empty() {
        let at = uniform_inclusive(rng, s.len() as u64 - 1) as usize;
        match rng.next_u32() % 3 {
            0 => {
                s.remove(at);
            }
            1 => s.insert(at, pick(rng, GRAMMAR)),
            _ => s[at] = pick(rng, GRAMMAR),
        }
    }
    s
}

/// Bytes shown with escapes, for traces.
struct Esc<'a>(&'a [u8]);

impl std::fmt::Debug for Esc<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{}\"", self.0.escape_ascii())
    }
}
