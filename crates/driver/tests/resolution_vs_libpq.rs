//! What a connect resolves from the string, the environment and a service file, against
//! libpq 18's connection object after `PQconnectdb` (`PQuser`, `PQdb`, `PQhost`, `PQport`,
//! `PQoptions`): the keyword defaults are compared elsewhere through `PQconndefaults`, which
//! sees no string and so no `service=` of one.
//!
//! One test in its own binary: it sets the process environment, which libpq reads too, and
//! no other thread of this process reads it meanwhile.

#![allow(unsafe_code)]

use pgyard_driver::{prepare, ConnectOptions};
use pgyard_testkit::libpq::{Libpq, Resolved};

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    match value {
        Some(v) => std::env::set_var(name, v),
        None => std::env::remove_var(name),
    }
}

/// pgyard's resolution in libpq's terms: the host and port are the last host's, where
/// libpq's connection object stands once every host has refused.
fn pgyard(conninfo: &str) -> Resolved {
    let p = prepare(conninfo, &ConnectOptions::default().seed(1)).expect("prepares");
    let c = &p.config;
    let last = c.slots().last().expect("a host");
    Resolved {
        user: c.user().to_vec(),
        db: c.dbname().to_vec(),
        host: last.host().or(last.hostaddr()).unwrap_or_default().to_vec(),
        port: last
            .port()
            .map(|p| p.to_string())
            .unwrap_or_default()
            .into_bytes(),
        options: c.options().to_vec(),
    }
}

#[test]
fn resolution_matches_libpq_with_environment_and_service_file() {
    let libpq = Libpq::shared().expect("libpq 18");
    let dir = tempfile::tempdir().expect("a directory");
    let svc = dir.path().join("services");
    let services = "[full]\nhost=127.0.0.1\nport=1\nuser=svc_user\ndbname=svc_db\n\
                    options=-c work_mem=1MB\n[hosts]\nhost=127.0.0.1,localhost\nport=1,2\n\
                    [bare]\nconnect_timeout=2\n";
    std::fs::write(&svc, services).expect("write the service file");
    set("PGSERVICEFILE", Some(svc.to_str().expect("a UTF-8 path")));
    set("HOME", Some(dir.path().to_str().expect("a UTF-8 path")));
    let all = [
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGUSER",
        "PGDATABASE",
        "PGOPTIONS",
        "PGSERVICE",
        "PGPASSFILE",
    ];
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
        for v in all {
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
        assert_eq!(
            pgyard(&conninfo),
            libpq.resolved_for(&conninfo),
            "{conninfo} with {env:?}"
        );
    }
    // The oracle itself reads the service file and the environment.
    for v in all {
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
    assert_eq!(
        libpq.resolved_for("host=127.0.0.1 port=1").user,
        b"env_user"
    );
}
