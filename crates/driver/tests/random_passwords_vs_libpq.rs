//! Randomized differential against libpq 18's password lookup: seeded password files (host,
//! port, database and user fields with wildcards, escaped colons and backslashes, comments,
//! blank and short lines, lines cut by a final backslash), named by the string, by
//! `PGPASSFILE` or found at `~/.pgpass`, loose or private, with `PGPASSWORD` and a string's
//! own `password` now and then, over strings of one to three hosts (addresses, names, a
//! socket folder, `hostaddr`). The password pgyard settles on for the host where libpq's
//! object stops (the last, once every one has refused) must equal `PQpass` after
//! `PQconnectdb`.
//!
//! One test in its own binary: it sets the process environment, which libpq reads too, and
//! no other thread of this process reads it meanwhile.

#![allow(unsafe_code)]

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use pgyard_driver::{prepare, ConnectOptions};
use pgyard_testkit::cluster::quote_conninfo_value;
use pgyard_testkit::draw::{set_env, Draw};
use pgyard_testkit::libpq::Libpq;

/// Cases per run; each connects once through libpq.
const CASES: u64 = 3000;

fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment).
    unsafe { set_env(name, value) }
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write a file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// A password-file field: the value, `*`, or the value with its colons and backslashes
/// escaped (the value itself may hold them).
fn field(d: &mut Draw, values: &[&str]) -> String {
    if d.chance(30) {
        return "*".to_owned();
    }
    let v = d.pick(values);
    if d.chance(80) {
        v.replace('\\', "\\\\").replace(':', "\\:")
    } else {
        v.to_owned()
    }
}

/// One to six lines of a password file.
fn password_file(d: &mut Draw, socket_dir: &str) -> String {
    let mut text = String::new();
    let lines = 1 + d.next_u64() % 6;
    for i in 0..lines {
        match d.next_u64() % 20 {
            0 => text.push_str("# a comment\n"),
            1 => text.push('\n'),
            2 => text.push_str("127.0.0.1:1:d\n"),
            _ => {
                let host = field(d, &["127.0.0.1", "localhost", socket_dir, "::1"]);
                let port = field(d, &["1", "2", "5432"]);
                let db = field(d, &["d", "other", "e:x", "b\\s"]);
                let user = field(d, &["u", "v", "w:x"]);
                let pass = d.pick(&["p", "with:colon", "back\\slash", "", "end"]);
                let mut pass = format!("{i}{}", pass.replace('\\', "\\\\").replace(':', "\\:"));
                // A password field may also run on with an unescaped colon, or end in a lone
                // backslash.
                match d.next_u64() % 10 {
                    0 => pass.push_str(":tail"),
                    1 => pass.push('\\'),
                    _ => {}
                }
                let _ = write!(text, "{host}:{port}:{db}:{user}:{pass}");
                if d.chance(90) {
                    text.push('\n');
                }
            }
        }
    }
    text
}

/// pgyard's password for the host where libpq's object stops: the last.
fn pgyard(conninfo: &str) -> Option<Vec<u8>> {
    let p = prepare(conninfo, &ConnectOptions::default().seed(1)).expect("prepares");
    let last = p.config.slots().len().saturating_sub(1);
    // `PQpass` says "" for no password, which the oracle reads as none.
    let found = p.config.password_for(last).filter(|p| !p.is_empty());
    found.map(<[u8]>::to_vec)
}

#[test]
fn random_password_files_give_the_password_libpq_gives() {
    let libpq = Libpq::shared().expect("libpq 18");
    let dir = tempfile::tempdir().expect("a directory");
    let home = dir.path().join("home");
    std::fs::create_dir(&home).expect("a home");
    let named = dir.path().join("named");
    let socket_dir = dir.path().join("sockets");
    let socket_dir = socket_dir.to_str().expect("a UTF-8 path");
    let home_text = home.to_str().expect("a UTF-8 path");
    set("HOME", Some(home_text));
    for v in [
        "PGSERVICE",
        "PGSERVICEFILE",
        "PGUSER",
        "PGHOST",
        "PGHOSTADDR",
        "PGPORT",
        "PGDATABASE",
    ] {
        set(v, None);
    }
    let mut found = 0;
    for case in 0..CASES {
        let mut d = Draw(0x9a55_0000 + case);
        let file = password_file(&mut d, socket_dir);
        let mode = if d.chance(10) { 0o644 } else { 0o600 };
        // Where the file is: named by the string, by PGPASSFILE, or at ~/.pgpass.
        let place = d.next_u64() % 3;
        let path = if place == 2 {
            home.join(".pgpass")
        } else {
            named.clone()
        };
        let _ = std::fs::remove_file(home.join(".pgpass"));
        let _ = std::fs::remove_file(&named);
        write(&path, &file, mode);
        let named_text = named.to_str().expect("a UTF-8 path");
        set("PGPASSFILE", (place == 1).then_some(named_text));
        set("PGPASSWORD", d.chance(10).then_some("from-env"));

        let hosts: Vec<&str> = (0..1 + d.next_u64() % 3)
            .map(|_| d.pick(&["127.0.0.1", "localhost", socket_dir]))
            .collect();
        let mut conninfo = format!("host={} port=1", quote_conninfo_value(&hosts.join(",")));
        if d.chance(15) {
            let addrs = vec!["127.0.0.1"; hosts.len()].join(",");
            let _ = write!(conninfo, " hostaddr={addrs}");
        }
        if d.chance(20) {
            let _ = write!(conninfo, " port={}", d.pick(&["2", "5432"]));
        }
        let db = d.pick(&["d", "other", "e:x", "b\\s"]);
        let user = d.pick(&["u", "v", "w:x"]);
        let _ = write!(
            conninfo,
            " dbname={} user={}",
            quote_conninfo_value(db),
            quote_conninfo_value(user)
        );
        if d.chance(8) {
            let _ = write!(conninfo, " password={}", d.pick(&["given", ""]));
        }
        if place == 0 {
            let _ = write!(conninfo, " passfile={}", quote_conninfo_value(named_text));
        }
        conninfo.push_str(" connect_timeout=2");

        let want = libpq.password_for(&conninfo);
        found += usize::from(want.is_some());
        assert_eq!(
            pgyard(&conninfo),
            want,
            "case {case}: {conninfo:?} (mode {mode:o}, PGPASSFILE {:?}) over {file:?}",
            place == 1
        );
    }
    // The draws reach both outcomes.
    let found = found as u64;
    assert!(
        found > CASES / 5 && found < CASES * 4 / 5,
        "libpq found a password in {found} of {CASES} cases"
    );
}
