//! Differential against libpq 18: written-out cases first, then seeded combinations of a
//! connection string (keyword/value or URI), the `PG…` environment and a service file, each
//! connected by both sides to ports nothing listens on. libpq's connection object afterwards
//! (`PQuser`, `PQdb`, `PQhost`, `PQport`, `PQoptions`) must equal what pgyard resolves, and
//! `PQerrorMessage` must equal the blocking adapter's error text, byte for byte: the refusals
//! name every host, address and port tried, and a string libpq refuses must be refused in the
//! same words.
//!
//! One test in its own binary: it sets the process environment, which libpq reads too, and
//! no other thread of this process reads it meanwhile.

#![allow(unsafe_code)]

use std::fmt::Write as _;

use pgyard_blocking::{connect_with, ConnectOptions};
use pgyard_conninfo::typed::{HostSlot, SlotError};
use pgyard_driver::prepare;
use pgyard_testkit::cluster::quote_conninfo_value;
use pgyard_testkit::draw::{set_env, Draw};
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
    unsafe { set_env(name, value) }
}

/// A comma-separated list of one to three entries from `from`.
fn list(d: &mut Draw, from: &[&str]) -> String {
    let n = 1 + d.below(3);
    (0..n).map(|_| d.pick(from)).collect::<Vec<_>>().join(",")
}

/// A host list: loopback addresses and names, an empty entry, a socket folder that does not
/// exist.
fn hosts(d: &mut Draw, missing_dir: &str) -> String {
    let from = [
        "127.0.0.1",
        "localhost",
        "127.0.0.1",
        "",
        missing_dir,
        "::1",
        "::1%1",
    ];
    list(d, &from)
}

/// A port list: ports nothing listens on, empty entries, now and then a value libpq refuses.
fn ports(d: &mut Draw) -> String {
    if d.chance(5) {
        return d.pick(&["abc", "99999", "-1"]).to_owned();
    }
    list(d, &["1", "2", "3", ""])
}

/// Keywords (and values) a string or a service section may hold.
fn keywords(d: &mut Draw, missing_dir: &str, with_service: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if d.chance(60) {
        out.push(("host", hosts(d, missing_dir)));
    }
    if d.chance(20) {
        let from = [
            "127.0.0.1",
            "",
            "127.0.0.1",
            "::1",
            "not-an-address",
            "999.1.1.1",
            "::1%1",
            "fe80::1%lo",
            "::1%lo",
        ];
        out.push(("hostaddr", list(d, &from)));
    }
    if d.chance(60) {
        out.push(("port", ports(d)));
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
            "PGHOST" => hosts(d, missing_dir),
            "PGHOSTADDR" => "127.0.0.1".to_owned(),
            "PGPORT" => ports(d),
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
        let _ = write!(text, "{k}={} ", quote_conninfo_value(v));
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

/// Written-out cases first (session 38): a string's and `PGSERVICE`'s service, the
/// environment's `PGHOST`, `PGPORT` lists, `PGUSER`, `PGDATABASE`, `PGOPTIONS`, a URI's
/// `service` parameter, `hostaddr`; then a check that the oracle reads them too.
fn written_cases(libpq: &Libpq, svc: &std::path::Path) {
    let services = "[full]\nhost=127.0.0.1\nport=1\nuser=svc_user\ndbname=svc_db\n\
                    options=-c work_mem=1MB\n[hosts]\nhost=127.0.0.1,localhost\nport=1,2\n\
                    [bare]\nconnect_timeout=2\n";
    std::fs::write(svc, services).expect("write the service file");
    // (string, environment)
    let cases: &[(&str, &[(&str, &str)])] = &[
        ("service=full", &[]),
        ("service=full user=mine dbname=own port=2", &[]),
        (
            "service=full",
            &[("PGUSER", "env_user"), ("PGDATABASE", "env_db")],
        ),
        (
            "service=bare host=127.0.0.1 port=1",
            &[("PGUSER", "env_user")],
        ),
        ("host=127.0.0.1 port=1", &[("PGSERVICE", "full")]),
        ("service=hosts user=u", &[]),
        ("service=hosts user=u port=2", &[]),
        ("user=u", &[("PGHOST", "127.0.0.1"), ("PGPORT", "1")]),
        ("user=u host=127.0.0.1,127.0.0.1", &[("PGPORT", "1,2")]),
        (
            "host=127.0.0.1 port=1 user=u",
            &[("PGOPTIONS", "-c geqo=off")],
        ),
        ("host=127.0.0.1 port=1", &[("PGUSER", "only_user")]),
        (
            "host=127.0.0.1 port=1 user=u options=-cx.y=1",
            &[("PGOPTIONS", "-c geqo=off"), ("PGDATABASE", "d")],
        ),
        ("postgresql://u@127.0.0.1:1/db?service=full", &[]),
        ("host=127.0.0.1 port=1", &[]),
        ("hostaddr=127.0.0.1 port=1 user=u", &[]),
        ("host=localhost hostaddr=127.0.0.1 port=1 user=u", &[]),
        ("host=,127.0.0.1 port=1 user=u", &[("PGHOST", "127.0.0.1")]),
    ];
    for (extra, env) in cases {
        for v in VARS {
            set(v, None);
        }
        for (k, v) in *env {
            set(k, Some(v));
        }
        let conninfo = if extra.starts_with("postgresql://") {
            format!("{extra}&connect_timeout=2")
        } else {
            format!("{extra} connect_timeout=2")
        };
        let mine = pgyard_resolved(&conninfo).expect("prepares");
        assert_eq!(
            mine,
            libpq.resolved_for(&conninfo),
            "{conninfo} with {env:?}"
        );
    }
    for v in VARS {
        set(v, None);
    }
    let r = libpq.resolved_for("service=full connect_timeout=2");
    let want = (
        &b"svc_user"[..],
        &b"svc_db"[..],
        &b"-c work_mem=1MB"[..],
        &b"1"[..],
    );
    assert_eq!((&r.user[..], &r.db[..], &r.options[..], &r.port[..]), want);
    set("PGUSER", Some("env_user"));
    let user = libpq.resolved_for("host=127.0.0.1 port=1").user;
    assert_eq!(user, b"env_user");
    set("PGUSER", None);
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
    written_cases(libpq, &svc);
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

        let want = libpq.connect_error_text(&conninfo);
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
