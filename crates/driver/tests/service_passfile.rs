//! The password a connect settles on, against libpq 18's (`PQpass` after `PQconnectdb`):
//! from the string, from the service file, or from a password file — also one that the
//! service file names (`passfile=`), which libpq reads as one the string names.
//!
//! One test in its own binary: it sets the process environment, which libpq reads too, and
//! no other thread of this process reads it meanwhile.

#![allow(unsafe_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pgyard_driver::{prepare, ConnectOptions};
use pgyard_testkit::draw::set_env;
use pgyard_testkit::libpq::Libpq;

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    unsafe { set_env(name, value) }
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write a file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

fn text(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// pgyard's password for the last host of `conninfo`: where libpq's `PQpass` looks once
/// every host has refused.
fn pgyard(conninfo: &str) -> Option<Vec<u8>> {
    let p = prepare(conninfo, &ConnectOptions::default().seed(1)).expect("prepares");
    let last = p.config.slots().len().saturating_sub(1);
    p.config.password_for(last).map(<[u8]>::to_vec)
}

#[test]
fn passwords_match_libpq_with_service_and_password_files() {
    let libpq = Libpq::shared().expect("libpq 18");
    let dir = tempfile::tempdir().expect("a directory");
    let (home, svc) = (dir.path().join("home"), dir.path().join("services"));
    std::fs::create_dir(&home).expect("a home");
    let (named, own, loose) = (
        dir.path().join("named"),
        dir.path().join("own"),
        dir.path().join("loose"),
    );
    write(&named, "*:*:*:*:from-named\n", 0o600);
    write(&own, "*:*:*:*:from-own\n", 0o600);
    write(&loose, "*:*:*:*:from-loose\n", 0o644);
    write(&home.join(".pgpass"), "*:*:*:*:from-home\n", 0o600);
    let services = format!(
        "[named]\npassfile={}\n[loose]\npassfile={}\n[missing]\npassfile={}/nothing\n\
         [inline]\npassword=from-service\npassfile={}\n[plain]\ndbname=d\n",
        text(&named),
        text(&loose),
        text(dir.path()),
        text(&named),
    );
    write(&svc, &services, 0o600);
    set("HOME", Some(text(&home)));
    set("PGSERVICEFILE", Some(text(&svc)));
    for v in [
        "PGPASSFILE",
        "PGPASSWORD",
        "PGSERVICE",
        "PGUSER",
        "PGHOST",
        "PGPORT",
    ] {
        set(v, None);
    }
    // Port 1 refuses at once: libpq resolves everything, fails, and keeps the password.
    let base = "host=127.0.0.1 port=1 user=u dbname=d connect_timeout=2";
    let own_file = format!("passfile={}", text(&own));
    let cases: Vec<(String, Option<&str>)> = vec![
        ("service=named".into(), None),
        (format!("service=named {own_file}"), None),
        ("service=inline".into(), None),
        ("service=loose".into(), None),
        ("service=missing".into(), None),
        ("service=plain".into(), None),
        ("service=named".into(), Some(text(&own))),
        ("service=plain".into(), Some(text(&own))),
        (own_file.clone(), None),
        (String::new(), None),
    ];
    for (extra, pgpassfile) in cases {
        set("PGPASSFILE", pgpassfile);
        let conninfo = format!("{base} {extra}");
        let want = libpq.password_for(&conninfo);
        assert_eq!(
            pgyard(&conninfo),
            want,
            "{conninfo} with PGPASSFILE={pgpassfile:?} (libpq: {:?})",
            want.as_deref().map(String::from_utf8_lossy)
        );
    }
    // Matching within one password file: host, port, database and user fields, wildcards,
    // escaped colons and backslashes, comments, the first match winning.
    let lines = "# comment\n127.0.0.1:1:d:u:exact\n127.0.0.1:*:d:u:any-port\n\
                 localhost:1:*:*:by-name\n*:*:e\\:x:u:escaped\n*:*:*:v:user-v\n\
                 *:*:*:*:fall\\\\back\n";
    write(&own, lines, 0o600);
    set("PGPASSFILE", Some(text(&own)));
    for extra in [
        "",
        "port=2",
        "dbname=other",
        "user=v",
        "dbname=e:x",
        "host=localhost",
        "host=localhost port=2",
        "hostaddr=127.0.0.1",
        "host=localhost hostaddr=127.0.0.1",
        "host=127.0.0.1,localhost",
        "host=localhost,127.0.0.1 port=1,2",
    ] {
        let conninfo = format!("{base} {extra}");
        assert_eq!(
            pgyard(&conninfo),
            libpq.password_for(&conninfo),
            "{conninfo} over {lines:?}"
        );
    }
    // A service named by PGSERVICE sets the password file too.
    set("PGPASSFILE", None);
    set("PGSERVICE", Some("named"));
    assert_eq!(pgyard(base), libpq.password_for(base));
    assert_eq!(pgyard(base).as_deref(), Some(&b"from-named"[..]));
    set("PGSERVICE", None);
    // The service's password file changes between two connects with the same string.
    let conninfo = format!("{base} service=named");
    assert_eq!(pgyard(&conninfo).as_deref(), Some(&b"from-named"[..]));
    write(&named, "*:*:*:*:named-again\n", 0o600);
    assert_eq!(pgyard(&conninfo), libpq.password_for(&conninfo));
    assert_eq!(pgyard(&conninfo).as_deref(), Some(&b"named-again"[..]));
}
