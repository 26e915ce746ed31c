//! Randomized differentials against libpq 18 on live PostgreSQL 18 servers, in two phases
//! over one cluster:
//!
//! * logins: seeded connection strings to the primary, whose `pg_hba.conf` gives each user
//!   another method (trust, md5, SCRAM, cleartext password, reject), with right, wrong and
//!   missing passwords, databases that exist, do not, or refuse connections, `require_auth`,
//!   `channel_binding`, `sslmode` and `gssencmode` against a server without TLS,
//!   `target_session_attrs`, `options` the server takes or refuses, protocol versions and
//!   replication connections;
//! * host lists: the primary, its hot standby and a port nothing listens on, over TCP and
//!   over the servers' Unix sockets (and a socket folder without the socket, and one that
//!   does not exist), in seeded lists of one to four hosts, now and then with `requirepeer`
//!   naming the servers' owner or another user, with every `target_session_attrs`, now and then a database or a
//!   user that does not exist, and `sslmode` disable, allow or prefer.
//!
//! Each string is connected by libpq (`PQconnectdb`) and by the blocking adapter: both fail
//! with the same text (`PQerrorMessage`), byte for byte, or both connect to the same server
//! (`PQport` against the session's port).
//!
//! One test in its own binary: it sets the process environment (an empty home, so that no
//! password file or service file of the machine's takes part), which libpq reads too.

#![allow(unsafe_code)]

use std::fmt::Write as _;

use pgyard_blocking::{connect_with, ConnectOptions, SessionInfo};
use pgyard_connect::OpenTarget;
use pgyard_testkit::cluster::quote_conninfo_value;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::draw::{isolate_env, Draw};
use pgyard_testkit::fixtures::create_login_roles_sql;
use pgyard_testkit::libpq::Libpq;

/// Login cases per run; each logs in two to three times (libpq, pgyard, libpq again for the
/// port when it landed).
const CASES: u64 = 400;

/// Host-list cases per run.
const HOST_LISTS: u64 = 300;

/// Users, the method `pg_hba.conf` gives each, and the password it has.
const USERS: [(&str, &str, &str); 5] = [
    ("trustuser", "trust", "trustpw"),
    ("md5user", "md5", "md5pw"),
    ("scramuser", "scram-sha-256", "scrampw"),
    ("passuser", "password", "plainpw"),
    ("rejectuser", "reject", "rejectpw"),
];

/// libpq's `target_session_attrs` values, spelt out here rather than taken from pgyard.
const TARGETS: [&str; 6] = [
    "any",
    "read-write",
    "read-only",
    "primary",
    "standby",
    "prefer-standby",
];

/// Settings drawn now and then, with values the server or libpq takes and some they refuse.
const SETTINGS: &[(&str, &[&str])] = &[
    (
        "require_auth",
        &[
            "none",
            "password",
            "md5",
            "scram-sha-256",
            "!password",
            "!none",
            "md5,scram-sha-256",
        ],
    ),
    ("channel_binding", &["disable", "prefer", "require"]),
    ("sslmode", &["disable", "allow", "prefer", "require"]),
    ("gssencmode", &["disable", "prefer"]),
    ("target_session_attrs", &TARGETS),
    (
        "options",
        &[
            "-c work_mem=64kB",
            "-c work_mem=bogus",
            "-c no_such_setting=1",
            "-c geqo=off",
        ],
    ),
    ("application_name", &["app", "a b"]),
    ("min_protocol_version", &["3.0", "3.2", "latest"]),
    ("max_protocol_version", &["3.0", "3.2", "latest"]),
    ("replication", &["database", "true"]),
    ("client_encoding", &["UTF8", "LATIN1", "bogus"]),
];

/// The connection string of a case against the server on `port`.
fn conninfo(d: &mut Draw, port: u16) -> String {
    let (user, _, right) = USERS[(d.next_u64() % (USERS.len() as u64 + 1)) as usize % USERS.len()];
    let user = if d.chance(5) { "nosuchuser" } else { user };
    let mut text = format!("host=127.0.0.1 port={port} user={user}");
    match d.next_u64() % 4 {
        0 | 1 => {
            let _ = write!(text, " password={right}");
        }
        2 => text.push_str(" password=wrong"),
        _ => {}
    }
    let db = d.pick(&["postgres", "postgres", "postgres", "nosuchdb", "template0"]);
    let _ = write!(text, " dbname={db}");
    for (key, values) in SETTINGS {
        if d.chance(15) {
            let _ = write!(text, " {key}={}", quote_conninfo_value(d.pick(values)));
        }
    }
    text.push_str(" connect_timeout=10");
    text
}

/// The connection string of a case over `ends`: hosts (addresses or socket folders) with
/// their ports; `peers` are the values `requirepeer` may take (the servers' owner among
/// them).
fn host_list(d: &mut Draw, ends: &[(String, u16)], peers: &[&str]) -> String {
    let n = 1 + d.next_u64() % 4;
    let chosen: Vec<&(String, u16)> = (0..n)
        .map(|_| &ends[(d.next_u64() % ends.len() as u64) as usize])
        .collect();
    let hosts: Vec<&str> = chosen.iter().map(|(h, _)| h.as_str()).collect();
    let ports: Vec<String> = chosen.iter().map(|(_, p)| p.to_string()).collect();
    let mut text = format!("host={} port={}", hosts.join(","), ports.join(","));
    // About one list in seven leaves the setting out.
    if !d.chance(14) {
        let _ = write!(text, " target_session_attrs={}", d.pick(&TARGETS));
    }
    let user = if d.chance(8) {
        "nosuchuser"
    } else {
        "postgres"
    };
    let db = if d.chance(8) { "nosuchdb" } else { "postgres" };
    let _ = write!(text, " user={user} dbname={db}");
    if d.chance(40) {
        let _ = write!(text, " sslmode={}", d.pick(&["disable", "allow", "prefer"]));
    }
    if d.chance(15) {
        text.push_str(" application_name=multi");
    }
    if d.chance(4) {
        let _ = write!(text, " requirepeer={}", quote_conninfo_value(d.pick(peers)));
    }
    text.push_str(" connect_timeout=10");
    text
}

/// The port of the server a session reached: the TCP port, or the one in the socket file's
/// name (`.s.PGSQL.5432`), which is what `PQport` reports for a socket.
fn session_port(target: &OpenTarget) -> String {
    match target {
        OpenTarget::Tcp(a) => a.port().to_string(),
        OpenTarget::Unix(path) => String::from_utf8_lossy(path)
            .rsplit_once(".s.PGSQL.")
            .map(|(_, port)| port.to_owned())
            .unwrap_or_default(),
    }
}

/// Connects `conninfo` through libpq and through pgyard: the same error text, or the same
/// server (`PQport`) under the same name (`PQhost`). True when both landed.
fn compare(libpq: &Libpq, options: &ConnectOptions, case: u64, conninfo: &str) -> bool {
    let want = libpq.connect_error_text(conninfo);
    match connect_with(conninfo, options) {
        Ok(s) => {
            let (port, host) = (session_port(s.target()), s.host().to_owned());
            s.close();
            assert_eq!(
                want, "",
                "case {case}: pgyard connected, libpq did not: {conninfo}"
            );
            let theirs = libpq.resolved_for(conninfo);
            assert_eq!(port.as_bytes(), &theirs.port[..], "case {case}: {conninfo}");
            assert_eq!(host.as_bytes(), &theirs.host[..], "case {case}: {conninfo}");
            true
        }
        Err(e) => {
            assert_eq!(e.to_string().trim_end(), want, "case {case}: {conninfo}");
            false
        }
    }
}

/// Both outcomes reached, each in more than a `1/share` of the `cases`.
fn assert_mixed(what: &str, landed: u64, cases: u64, share: u64) {
    let failed = cases - landed;
    assert!(
        landed > cases / share && failed > cases / share,
        "{what}: {landed} connects landed and {failed} failed"
    );
}

#[test]
fn random_logins_and_host_lists_land_or_fail_as_in_libpq() {
    let mut options = Options::default();
    for (user, method, _) in USERS {
        options = options.hba(format!("host all {user} 127.0.0.1/32 {method}"));
    }
    let mut primary = Primary::start(options).expect("a primary");
    // An md5 method with an md5 secret; every other password stored as SCRAM.
    let sql = create_login_roles_sql(
        USERS
            .iter()
            .map(|&(user, method, password)| (user, method == "md5", password)),
    );
    primary.psql(&sql).expect("create the users");

    let libpq = Libpq::shared().expect("libpq 18");
    let home = tempfile::tempdir().expect("a directory");
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    unsafe { isolate_env(home.path()) };
    let options = ConnectOptions::default().seed(1);
    let landed = (0..CASES)
        .filter(|&case| {
            let conninfo = conninfo(&mut Draw(0x11fe_0000 + case), primary.port());
            compare(libpq, &options, case, &conninfo)
        })
        .count() as u64;
    assert_mixed("logins", landed, CASES, 10);

    let standby = primary.add_standby("s1").expect("a standby").port();
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let owner = pgyard_testkit::cluster::ensure_server_user()
        .expect("the servers' user")
        .name;
    let peers = [owner.as_str(), owner.as_str(), "root", "nobody", ""];
    let local = "127.0.0.1".to_owned();
    let folder = |n: &pgyard_testkit::cluster::Node| n.socket_dir().to_string_lossy().into_owned();
    let standby_folder = folder(primary.standby("s1").expect("the standby"));
    // TCP to the primary, the standby and a refusing port; the two servers' sockets; a socket
    // folder without that port's socket, and a folder that does not exist.
    let ends = [
        (local.clone(), primary.port()),
        (local.clone(), standby),
        (local, refused),
        (folder(&primary), primary.port()),
        (standby_folder, standby),
        (folder(&primary), refused),
        ("/nonexistent/socket/folder".to_owned(), primary.port()),
    ];
    // Written out first: the servers' owner passes `requirepeer` over a socket, another user
    // fails it in libpq's words, and TCP is never checked.
    let socket = format!("host={} port={}", folder(&primary), primary.port());
    for (conninfo, lands) in [
        (format!("{socket} user=postgres requirepeer={owner}"), true),
        (format!("{socket} user=postgres requirepeer=root"), false),
        (
            format!(
                "host=127.0.0.1 port={} user=postgres requirepeer=root",
                primary.port()
            ),
            true,
        ),
    ] {
        assert_eq!(
            compare(libpq, &options, u64::MAX, &conninfo),
            lands,
            "{conninfo}"
        );
    }
    let landed = (0..HOST_LISTS)
        .filter(|&case| {
            let conninfo = host_list(&mut Draw(0x3a17_0000 + case), &ends, &peers);
            compare(libpq, &options, case, &conninfo)
        })
        .count() as u64;
    assert_mixed("host lists", landed, HOST_LISTS, 5);
}
