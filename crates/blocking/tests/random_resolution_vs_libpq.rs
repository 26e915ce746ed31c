//! Randomized differential against libpq 18: seeded combinations of a connection string
//! (keyword/value or URI), the `PG…` environment and a service file, each connected by both
//! sides to ports nothing listens on. libpq's connection object afterwards (`PQuser`, `PQdb`,
//! `PQhost`, `PQport`, `PQoptions`) must equal what pgyard resolves, and `PQerrorMessage`
//! must equal the blocking adapter's error text, byte for byte: the refusals name every host,
//! address and port tried, and a string libpq refuses must be refused in the same words.
//!
//! One test in its own binary: it sets the process environment, which libpq reads too, and
//! no other thread of this process reads it meanwhile.

#![allow(unsafe_code)]

use std::fmt::Write as _;

use pgyard_blocking::{connect_with, ConnectOptions};
use pgyard_conninfo::typed::{HostSlot, SlotError};
use pgyard_driver::prepare;
use pgyard_testkit::libpq::{Libpq, Resolved};

/// Cases per run; each connects twice through libpq and once through pgyard.
const CASES: u64 = 5000;

/// Variables the cases draw; every case starts with all of them unset.
const VARS: [&str; 11] = [
    "PGSSLMODE",
    "PGCONNECT_TIMEOUT",
    "PGTARGETSESSIONATTRS",
    "PGREQUIREAUTH",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGOPTIONS",
    "PGSERVICE",
];

/// Keywords beyond the resolved ones, with values libpq takes and some it refuses.
const EXTRAS: &[(&str, &[&str])] = &[
    (
        "sslmode",
        &[
            "disable",
            "prefer",
            "allow",
            "require",
            "verify-ca",
            "bogus",
        ],
    ),
    (
        "target_session_attrs",
        &["any", "read-write", "standby", "prefer-standby", "x"],
    ),
    ("connect_timeout", &["1", "0", "-5", "abc", "2s"]),
    ("application_name", &["app", "", "a b"]),
    ("fallback_application_name", &["fb"]),
    (
        "require_auth",
        &["password", "!md5", "scram-sha-256,none", "bogus"],
    ),
    ("channel_binding", &["disable", "prefer", "require", "x"]),
    ("gssencmode", &["disable", "prefer", "require"]),
    ("sslnegotiation", &["postgres", "direct", "x"]),
    ("min_protocol_version", &["3.0", "3.2", "latest", "3.1"]),
    ("max_protocol_version", &["3.0", "3.2", "latest", "4"]),
    ("keepalives", &["0", "1", "x"]),
    ("keepalives_idle", &["10", "x"]),
    ("tcp_user_timeout", &["100", "-1"]),
    ("load_balance_hosts", &["disable", "bogus"]),
    ("client_encoding", &["UTF8", "auto", "LATIN1"]),
    ("sslcertmode", &["disable", "allow", "require", "x"]),
    ("ssl_min_protocol_version", &["TLSv1.2", "TLSv1.9"]),
    ("replication", &["database", "true", "x"]),
];

/// Services the file defines (`nowhere` is asked for but never defined).
const SERVICES: [&str; 4] = ["alpha", "beta", "gamma", "nowhere"];

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    match value {
        Some(v) => std::env::set_var(name, v),
        None => std::env::remove_var(name),
    }
}

/// SplitMix64, seeded per case so a failing case can be named and rerun alone.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> usize {
        (self.next() % n) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64)]
    }

    /// A comma-separated list of one to three entries from `from`.
    fn list(&mut self, from: &[&str]) -> String {
        let n = 1 + self.below(3);
        (0..n)
            .map(|_| self.pick(from))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// A host list: loopback addresses and names, an empty entry, a socket folder that
    /// does not exist.
    fn hosts(&mut self, missing_dir: &str) -> String {
        let from = [
            "127.0.0.1",
            "localhost",
            "127.0.0.1",
            "",
            missing_dir,
            "::1",
        ];
        self.list(&from)
    }

    /// A port list: ports nothing listens on, empty entries, now and then a value libpq
    /// refuses.
    fn ports(&mut self) -> String {
        if self.chance(5) {
            return self.pick(&["abc", "99999", "-1"]).to_owned();
        }
        self.list(&["1", "2", "3", ""])
    }
}

/// One keyword's value for a keyword/value string, quoted when it needs to be.
fn quoted(value: &str) -> String {
    if !value.is_empty() && !value.contains([' ', '\'', '\\']) {
        return value.to_owned();
    }
    let mut q = String::from("'");
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            q.push('\\');
        }
        q.push(c);
    }
    q.push('\'');
    q
}

/// Keywords (and values) a string or a service section may hold.
fn keywords(d: &mut Draw, missing_dir: &str, with_service: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if d.chance(60) {
        out.push(("host", d.hosts(missing_dir)));
    }
    if d.chance(20) {
        let from = [
            "127.0.0.1",
            "",
            "127.0.0.1",
            "::1",
            "not-an-address",
            "999.1.1.1",
        ];
        out.push(("hostaddr", d.list(&from)));
    }
    if d.chance(60) {
        out.push(("port", d.ports()));
    }
    if d.chance(40) {
        out.push(("user", d.pick(&["alice", "bob", ""]).to_owned()));
    }
    if d.chance(40) {
        // A dbname holding `=` or a URI is itself a connection string libpq expands.
        let from = [
            "app",
            "stats",
            "",
            "port=2 user=zed",
            "postgresql://127.0.0.1:3/x",
        ];
        out.push(("dbname", d.pick(&from).to_owned()));
    }
    if d.chance(25) {
        let o = d.pick(&["-c geqo=off", "-cwork_mem=1MB", "", "-c search_path=a\\,b"]);
        out.push(("options", o.to_owned()));
    }
    // Settings that only change how the connect goes or fails, now and then a value libpq
    // refuses.
    for (key, values) in EXTRAS {
        if d.chance(8) {
            out.push((*key, d.pick(values).to_owned()));
        }
    }
    if with_service && d.chance(35) {
        out.push(("service", d.pick(&SERVICES).to_owned()));
    }
    out
}

/// The service file: each defined service with a random set of keywords.
fn service_file(d: &mut Draw, missing_dir: &str) -> String {
    let mut text = String::new();
    for name in &SERVICES[..3] {
        let _ = writeln!(text, "[{name}]");
        for (k, v) in keywords(d, missing_dir, false) {
            let _ = writeln!(text, "{k}={v}");
        }
    }
    text
}

/// The environment of a case: a few of [`VARS`], with values like the string's.
fn environment(d: &mut Draw, missing_dir: &str) -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    for var in VARS {
        if !d.chance(20) {
            continue;
        }
        let value = match var {
            "PGHOST" => d.hosts(missing_dir),
            "PGHOSTADDR" => "127.0.0.1".to_owned(),
            "PGPORT" => d.ports(),
            "PGUSER" => d.pick(&["carol", ""]).to_owned(),
            "PGDATABASE" => d.pick(&["envdb", ""]).to_owned(),
            "PGOPTIONS" => d.pick(&["-c geqo=off", ""]).to_owned(),
            "PGSSLMODE" => d.pick(&["disable", "require", "bogus"]).to_owned(),
            "PGCONNECT_TIMEOUT" => d.pick(&["3", "x", ""]).to_owned(),
            "PGTARGETSESSIONATTRS" => d.pick(&["read-only", "bogus"]).to_owned(),
            "PGREQUIREAUTH" => d.pick(&["none", "md5", "bogus"]).to_owned(),
            _ => d.pick(&SERVICES).to_owned(),
        };
        env.push((var, value));
    }
    env
}

/// The connection string of a case: keyword/value pairs, or (a quarter of the time, when
/// every value allows it) the same as a URI.
fn conninfo(d: &mut Draw, missing_dir: &str) -> String {
    let pairs = keywords(d, missing_dir, true);
    let uri_safe = pairs
        .iter()
        .all(|(k, v)| !v.contains(['/', ' ', '\\', ':', '=']) && (*k != "host" || !v.is_empty()));
    if uri_safe && d.chance(25) {
        let get = |key: &str| pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| v);
        let mut uri = String::from("postgresql://");
        if let Some(u) = get("user") {
            let _ = write!(uri, "{u}@");
        }
        let hosts: Vec<&str> = get("host").map_or(Vec::new(), |h| h.split(',').collect());
        let ports: Vec<&str> = get("port").map_or(Vec::new(), |p| p.split(',').collect());
        if ports.len() <= hosts.len().max(1) {
            let n = hosts.len().max(ports.len());
            let spots: Vec<String> = (0..n)
                .map(|i| {
                    let h = hosts.get(i).copied().unwrap_or_default();
                    match ports.get(i) {
                        Some(p) => format!("{h}:{p}"),
                        None => h.to_owned(),
                    }
                })
                .collect();
            uri.push_str(&spots.join(","));
            uri.push('/');
            if let Some(db) = get("dbname") {
                uri.push_str(db);
            }
            let mut sep = '?';
            for (k, v) in &pairs {
                if matches!(*k, "hostaddr" | "options" | "service") {
                    let _ = write!(uri, "{sep}{k}={}", v.replace('=', "%3D"));
                    sep = '&';
                }
            }
            let _ = write!(uri, "{sep}connect_timeout=2");
            return uri;
        }
    }
    let mut text = String::new();
    for (k, v) in &pairs {
        let _ = write!(text, "{k}={} ", quoted(v));
    }
    text.push_str("connect_timeout=2");
    text
}

/// pgyard's resolution in libpq's terms: the host and port are the last host's, where
/// libpq's connection object stands once every host has refused, or those of the host whose
/// port ended the connect.
fn pgyard_resolved(conninfo: &str) -> Option<Resolved> {
    let p = prepare(conninfo, &ConnectOptions::default().seed(1)).ok()?;
    let c = &p.config;
    // A port that is no integer ends the connect at its host, which the object keeps (one
    // out of range only moves on to the next host).
    let slots = c.slots();
    let abort = |s: &&HostSlot| matches!(s.port(), Err(SlotError::Abort(_)));
    let last = slots.iter().find(abort).or(slots.last())?;
    // `PQhost`: the host as written unless empty, else the address.
    let written = |h: &Option<&[u8]>| h.is_some_and(|h| !h.is_empty());
    let host = [last.host(), last.hostaddr()]
        .into_iter()
        .find(written)
        .flatten()
        .unwrap_or_default();
    Some(Resolved {
        user: c.user().to_vec(),
        db: c.dbname().to_vec(),
        host: host.to_vec(),
        // A port it cannot read stays as written: the connect refuses it, and libpq's
        // object holds the text.
        port: last.port().map_or_else(
            |_| last.port_raw().unwrap_or_default().to_vec(),
            |p| p.to_string().into_bytes(),
        ),
        options: c.options().to_vec(),
    })
}

fn trimmed(text: &[u8]) -> String {
    String::from_utf8_lossy(text).trim_end().to_owned()
}

#[test]
fn random_strings_environments_and_service_files_resolve_and_fail_as_in_libpq() {
    let libpq = Libpq::shared().expect("libpq 18");
    let dir = tempfile::tempdir().expect("a directory");
    let svc = dir.path().join("services");
    let missing = dir.path().join("no-such-dir");
    let missing = missing.to_str().expect("a UTF-8 path");
    set("PGSERVICEFILE", Some(svc.to_str().expect("a UTF-8 path")));
    // An empty home: no ~/.pgpass and no ~/.pg_service.conf to read.
    set("HOME", Some(dir.path().to_str().expect("a UTF-8 path")));
    set("PGPASSFILE", None);
    let options = ConnectOptions::default().seed(1);
    let mut resolved_compared = 0;
    for case in 0..CASES {
        let mut d = Draw(0x5eed_0000 + case);
        let file = service_file(&mut d, missing);
        std::fs::write(&svc, &file).expect("write the service file");
        let env = environment(&mut d, missing);
        for v in VARS {
            set(v, None);
        }
        for (k, v) in &env {
            set(k, Some(v));
        }
        let conninfo = conninfo(&mut d, missing);
        let context =
            || format!("case {case}: {conninfo:?}, environment {env:?}, services:\n{file}");

        let want = trimmed(&libpq.connect_error(&conninfo));
        assert!(!want.is_empty(), "libpq connected: {}", context());
        let got = match connect_with(&conninfo, &options) {
            Ok(_) => panic!("pgyard connected: {}", context()),
            Err(e) => e.to_string().trim_end().to_owned(),
        };
        assert_eq!(got, want, "{}", context());
        if let Some(mine) = pgyard_resolved(&conninfo) {
            assert_eq!(mine, libpq.resolved_for(&conninfo), "{}", context());
            resolved_compared += 1;
        }
    }
    // The draws reach both outcomes: many strings resolve and are refused by every host
    // (the others, mostly host and port lists of different lengths, fail before).
    assert!(
        resolved_compared > CASES / 5,
        "only {resolved_compared} of {CASES} cases resolved"
    );
}
