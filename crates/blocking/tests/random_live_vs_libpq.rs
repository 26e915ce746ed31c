//! Randomized differential against libpq 18 on a live PostgreSQL 18: seeded connection
//! strings over one server whose `pg_hba.conf` gives each user another method (trust, md5,
//! SCRAM, cleartext password, reject), with right, wrong and missing passwords, databases
//! that exist, do not, or refuse connections, `require_auth`, `channel_binding`, `sslmode`
//! and `gssencmode` against a server without TLS, `target_session_attrs`, `options` that the
//! server takes or refuses, protocol versions and replication connections. Each string is
//! connected by libpq (`PQconnectdb`) and by the blocking adapter: both must succeed, or both
//! fail with the same text (`PQerrorMessage`), byte for byte.
//!
//! One test in its own binary: it sets the process environment (an empty home, so that no
//! password file or service file of the machine's takes part), which libpq reads too.

#![allow(unsafe_code)]

use std::fmt::Write as _;

use pgyard_blocking::{connect_with, ConnectOptions};
use pgyard_testkit::cluster::quote_conninfo_value;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::draw::{isolate_env, Draw};
use pgyard_testkit::libpq::Libpq;

/// Cases per run; each logs in twice (libpq, pgyard).
const CASES: u64 = 400;

/// Users, the method `pg_hba.conf` gives each, and the password it has.
const USERS: [(&str, &str, &str); 5] = [
    ("trustuser", "trust", "trustpw"),
    ("md5user", "md5", "md5pw"),
    ("scramuser", "scram-sha-256", "scrampw"),
    ("passuser", "password", "plainpw"),
    ("rejectuser", "reject", "rejectpw"),
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
    (
        "target_session_attrs",
        &[
            "any",
            "read-write",
            "read-only",
            "primary",
            "standby",
            "prefer-standby",
        ],
    ),
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

#[test]
fn random_logins_succeed_or_fail_as_in_libpq() {
    let mut options = Options::default();
    for (user, method, _) in USERS {
        options = options.hba(format!("host all {user} 127.0.0.1/32 {method}"));
    }
    let primary = Primary::start(options).expect("a primary");
    let mut sql = String::new();
    for (user, method, password) in USERS {
        // An md5 method with an md5 secret; every other password stored as SCRAM.
        let encryption = if method == "md5" {
            "md5"
        } else {
            "scram-sha-256"
        };
        let _ = write!(
            sql,
            "SET password_encryption = '{encryption}'; \
             CREATE ROLE {user} LOGIN PASSWORD '{password}'; "
        );
    }
    primary.psql(&sql).expect("create the users");

    let libpq = Libpq::shared().expect("libpq 18");
    let home = tempfile::tempdir().expect("a directory");
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    unsafe { isolate_env(home.path()) };
    let options = ConnectOptions::default().seed(1);
    let (mut both_ok, mut both_failed) = (0, 0);
    for case in 0..CASES {
        let mut d = Draw(0x11fe_0000 + case);
        let conninfo = conninfo(&mut d, primary.port());
        let want = libpq.connect_error_text(&conninfo);
        let got = match connect_with(&conninfo, &options) {
            Ok(s) => {
                s.close();
                String::new()
            }
            Err(e) => e.to_string().trim_end().to_owned(),
        };
        assert_eq!(got, want, "case {case}: {conninfo}");
        if want.is_empty() {
            both_ok += 1;
        } else {
            both_failed += 1;
        }
    }
    // The draws reach both outcomes, each often.
    assert!(
        both_ok > CASES / 10 && both_failed > CASES / 10,
        "{both_ok} logins succeeded and {both_failed} failed"
    );
}
