//! Randomized differential against libpq 18 over several hosts: a live PostgreSQL 18
//! primary, its hot standby and a port nothing listens on, in seeded lists of one to four
//! hosts, with every `target_session_attrs`, now and then a database or a user that does not
//! exist, and `sslmode` disable, allow or prefer against servers without TLS. libpq
//! (`PQconnectdb`) and the blocking adapter must both fail with the same `PQerrorMessage`,
//! byte for byte, or both connect to the same server (`PQport` against the session's port).
//!
//! One test in its own binary: it sets the process environment (an empty home, so that no
//! password file or service file of the machine's takes part), which libpq reads too.

#![allow(unsafe_code)]

use std::fmt::Write as _;

use pgyard_blocking::{connect_with, ConnectOptions, SessionInfo};
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::draw::{isolate_env, Draw};
use pgyard_testkit::libpq::Libpq;

/// Cases per run; each connects up to three times (libpq twice, pgyard once).
const CASES: u64 = 300;

/// The connection string of a case over the primary, the standby and a refusing port.
fn conninfo(d: &mut Draw, ports: [u16; 3]) -> String {
    let n = 1 + d.next_u64() % 4;
    let chosen: Vec<String> = (0..n)
        .map(|_| ports[(d.next_u64() % 3) as usize].to_string())
        .collect();
    let hosts = vec!["127.0.0.1"; chosen.len()].join(",");
    let mut text = format!("host={hosts} port={}", chosen.join(","));
    let tsa = d.pick(&[
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
        "",
    ]);
    if !tsa.is_empty() {
        let _ = write!(text, " target_session_attrs={tsa}");
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
    text.push_str(" connect_timeout=10");
    text
}

#[test]
fn random_host_lists_land_or_fail_as_in_libpq() {
    let mut primary = Primary::start(Options::default()).expect("a primary");
    let standby = primary.add_standby("s1").expect("a standby").port();
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let ports = [primary.port(), standby, refused];

    let libpq = Libpq::shared().expect("libpq 18");
    let home = tempfile::tempdir().expect("a directory");
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    unsafe { isolate_env(home.path()) };
    let options = ConnectOptions::default().seed(1);
    let (mut landed, mut failed) = (0, 0);
    for case in 0..CASES {
        let mut d = Draw(0x3a17_0000 + case);
        let conninfo = conninfo(&mut d, ports);
        let want = libpq.connect_error_text(&conninfo);
        match connect_with(&conninfo, &options) {
            Ok(s) => {
                let port = s.port().map(|p| p.to_string()).unwrap_or_default();
                s.close();
                assert_eq!(
                    want, "",
                    "case {case}: pgyard connected, libpq did not: {conninfo}"
                );
                let theirs = libpq.resolved_for(&conninfo).port;
                assert_eq!(port.as_bytes(), &theirs[..], "case {case}: {conninfo}");
                landed += 1;
            }
            Err(e) => {
                assert_eq!(e.to_string().trim_end(), want, "case {case}: {conninfo}");
                failed += 1;
            }
        }
    }
    assert!(
        landed > CASES / 5 && failed > CASES / 5,
        "{landed} connects landed and {failed} failed"
    );
}
