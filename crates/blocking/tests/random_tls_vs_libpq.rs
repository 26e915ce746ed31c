//! A randomized differential against libpq 18 over TLS: seeded connection strings to a live
//! PostgreSQL 18 that serves TLS with a CA-signed certificate for `localhost` (and to a second
//! one that serves no TLS), with every `sslmode`, root files that hold the right CA, another
//! CA, nothing (a missing file) or `system`, client certificates present, missing or not
//! asked for (`sslcertmode`), `sslnegotiation`, the TLS version bounds, `channel_binding`,
//! `sslsni`, `require_auth`, `target_session_attrs` (its check runs over TLS or not),
//! `gssencmode`, and users whose `pg_hba.conf` line asks for TLS, for no TLS, or for a client
//! certificate.
//!
//! Each string is connected by libpq (`PQconnectdb`) and by the blocking adapter: both fail
//! with the same text (`PQerrorMessage`), byte for byte, or both land on the same server
//! (`PQport`) with TLS in use or not alike (`PQsslInUse`). The TLS library under libpq is
//! OpenSSL and under pgyard rustls, so this is where their wording must meet.
//!
//! One test in its own binary: it sets the process environment (an empty home, so that no
//! root, certificate, password or service file of the machine's takes part), which libpq
//! reads too.

#![allow(unsafe_code)]

use std::fmt::Write as _;

use pgyard_blocking::{connect_with, ConnectOptions, SessionInfo};
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::draw::{isolate_env, Draw};
use pgyard_testkit::fixtures::{
    create_login_roles_sql, pki_tls_options, write_other_ca, write_pki,
};
use pgyard_testkit::libpq::Libpq;

/// Cases per run; each connects twice (libpq, then pgyard).
const CASES: u64 = 600;

/// Users with the `pg_hba.conf` method each gets on the TLS server, and their passwords
/// (`certuser` logs in by certificate and has none).
const USERS: [(&str, &str, &str); 4] = [
    (
        "ssluser",
        "hostssl all ssluser 127.0.0.1/32 scram-sha-256",
        "sslpw",
    ),
    (
        "nossluser",
        "hostnossl all nossluser 127.0.0.1/32 scram-sha-256",
        "nosslpw",
    ),
    ("certuser", "hostssl all certuser 127.0.0.1/32 cert", ""),
    ("md5user", "host all md5user 127.0.0.1/32 md5", "md5pw"),
];

/// The files a case may name.
struct Files {
    ca: String,
    other_ca: String,
    client_cert: String,
    client_key: String,
}

/// Settings drawn now and then (each with one chance in three), with values libpq takes and
/// some it refuses.
const SETTINGS: &[(&str, &[&str])] = &[
    ("sslnegotiation", &["postgres", "direct", "bogus"]),
    (
        "ssl_min_protocol_version",
        &["TLSv1.2", "TLSv1.3", "TLSv1.9"],
    ),
    ("ssl_max_protocol_version", &["TLSv1.2", "TLSv1.3"]),
    ("channel_binding", &["disable", "prefer", "require"]),
    ("sslsni", &["0", "1"]),
    ("sslcertmode", &["disable", "allow", "require"]),
    (
        "require_auth",
        &["scram-sha-256", "none", "!password", "md5"],
    ),
    (
        "target_session_attrs",
        &["read-write", "read-only", "standby", "prefer-standby"],
    ),
    ("gssencmode", &["disable", "prefer"]),
];

/// The connection string of a case; `ports` are the TLS server's and the plain one's.
fn conninfo(d: &mut Draw, ports: [u16; 2], files: &Files) -> String {
    let port = if d.chance(6) { ports[1] } else { ports[0] };
    let host = d.pick(&[
        "host=localhost",
        "host=localhost",
        "host=127.0.0.1",
        "host=localhost hostaddr=127.0.0.1",
    ]);
    let (user, _, right) = USERS[(d.next_u64() % USERS.len() as u64) as usize];
    let user = if d.chance(12) { "postgres" } else { user };
    let mut text = format!("{host} port={port} user={user} dbname=postgres");
    match d.next_u64() % 3 {
        0 | 1 if !right.is_empty() => {
            let _ = write!(text, " password={right}");
        }
        0 => {}
        _ => text.push_str(" password=wrong"),
    }
    if !d.chance(8) {
        let mode = d.pick(&[
            "disable",
            "allow",
            "prefer",
            "require",
            "verify-ca",
            "verify-full",
            "verify-full",
        ]);
        let _ = write!(text, " sslmode={mode}");
    }
    match d.next_u64() % 6 {
        0 | 1 => {
            let _ = write!(text, " sslrootcert={}", files.ca);
        }
        2 => {
            let _ = write!(text, " sslrootcert={}", files.other_ca);
        }
        3 => text.push_str(" sslrootcert=/nonexistent/root.crt"),
        4 if d.chance(3) => text.push_str(" sslrootcert=system"),
        _ => {}
    }
    match d.next_u64() % 4 {
        0 | 1 => {
            let _ = write!(
                text,
                " sslcert={} sslkey={}",
                files.client_cert, files.client_key
            );
        }
        2 => text.push_str(" sslcert=/nonexistent/client.crt sslkey=/nonexistent/client.key"),
        _ => {}
    }
    for (key, values) in SETTINGS {
        if d.chance(3) {
            let _ = write!(text, " {key}={}", d.pick(values));
        }
    }
    text.push_str(" connect_timeout=10");
    text
}

/// Connects `conninfo` through libpq and through pgyard: the same error text, or the same
/// server with TLS alike. True when both landed.
fn compare(libpq: &Libpq, options: &ConnectOptions, case: u64, conninfo: &str) -> bool {
    let theirs = libpq.connect_outcome(conninfo);
    let ours = match connect_with(conninfo, options) {
        Ok(s) => {
            let port = s.port().map(|p| p.to_string()).unwrap_or_default();
            let tls = s.tls();
            s.close();
            Ok((port.into_bytes(), tls))
        }
        Err(e) => Err(e.to_string().trim_end().to_owned()),
    };
    assert_eq!(ours, theirs, "case {case}: {conninfo}");
    ours.is_ok()
}

#[test]
fn random_tls_connects_land_or_fail_as_in_libpq() {
    let dir = tempfile::Builder::new()
        .prefix("pgyard-tls-diff-")
        .tempdir()
        .expect("a directory");
    let pki = write_pki(dir.path()).expect("certificates written");
    let files = Files {
        ca: pki.ca.clone(),
        other_ca: write_other_ca(dir.path()).expect("a second CA"),
        client_cert: pki.client_cert.clone(),
        client_key: pki.client_key.clone(),
    };
    let mut options = pki_tls_options(&pki);
    for (_, line, _) in USERS {
        options = options.hba(line);
    }
    let tls = Primary::start(options).expect("a primary serving TLS");
    let sql = create_login_roles_sql(
        USERS
            .iter()
            .map(|&(user, line, password)| (user, line.ends_with("md5"), password)),
    );
    tls.psql(&sql).expect("create the users");
    let plain = Primary::start(Options::default()).expect("a primary without TLS");
    plain.psql(&sql).expect("create the users");

    let libpq = Libpq::shared().expect("libpq 18");
    let home = tempfile::tempdir().expect("a directory");
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    unsafe { isolate_env(home.path()) };
    let connect = ConnectOptions::default().seed(1);
    let ports = [tls.port(), plain.port()];
    // Written out first: a handshake that asked for a certificate and then failed the chain
    // leaves its request on record for the plaintext retry in TLS 1.3, but not in TLS 1.2,
    // where OpenSSL rejects the chain before it reads the request.
    for version in [
        "ssl_max_protocol_version=TLSv1.2",
        "ssl_min_protocol_version=TLSv1.3",
    ] {
        let conninfo = format!(
            "host=localhost port={} user=nossluser password=nosslpw dbname=postgres \
             sslrootcert={} sslcertmode=require {version}",
            ports[0], files.other_ca
        );
        assert!(!compare(libpq, &connect, u64::MAX, &conninfo));
    }
    let landed = (0..CASES)
        .filter(|&case| {
            let conninfo = conninfo(&mut Draw(0x7150_0000 + case), ports, &files);
            compare(libpq, &connect, case, &conninfo)
        })
        .count() as u64;
    let failed = CASES - landed;
    assert!(
        landed > CASES / 8 && failed > CASES / 8,
        "{landed} connects landed and {failed} failed"
    );
}
