//! `prepare` reuses the last resolution of a string only while everything it read is the
//! same: a change to a variable or to the password file between two connects counts at the
//! second, as it does in libpq, which resolves every `PQconnectdb` afresh.
//!
//! One test in its own binary: it changes the process environment, which no other thread of
//! this process reads meanwhile.

#![allow(unsafe_code)]

use std::os::unix::fs::PermissionsExt;

use pgyard_conninfo::Keyword;
use pgyard_driver::{prepare, ConnectOptions, Prepared, RealInputs};
use pgyard_testkit::draw::set_env;

/// Sets or removes a variable.
fn set(name: &str, value: Option<&str>) {
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile
    // (see the module's comment), so no reader of the environment races the change.
    unsafe { set_env(name, value) }
}

fn options() -> ConnectOptions {
    ConnectOptions::default().seed(7)
}

/// The same resolution made from scratch, with inputs read now and handed over explicitly
/// (which bypasses the reuse).
fn fresh(conninfo: &str, options: ConnectOptions) -> Prepared {
    let mut info = pgyard_conninfo::parse(conninfo).expect("parses");
    for (k, v) in &options.overrides {
        info.set(*k, v);
    }
    let inputs = RealInputs::read_for(&info);
    prepare(conninfo, &options.inputs(inputs)).expect("prepares")
}

/// `prepare` as a connect calls it, checked against the resolution from scratch.
fn prepared(conninfo: &str, options: ConnectOptions) -> Prepared {
    let p = prepare(conninfo, &options).expect("prepares");
    let f = fresh(conninfo, options);
    assert!(
        p.config == f.config,
        "reused and fresh configs differ for {conninfo}"
    );
    assert_eq!(p.extra_startup_params, f.extra_startup_params);
    p
}

fn password(p: &Prepared) -> Option<Vec<u8>> {
    p.config.password_for(0).map(<[u8]>::to_vec)
}

#[test]
fn changes_between_connects_count_at_the_next_connect() {
    let home = tempfile::tempdir().expect("a home directory");
    set("HOME", Some(home.path().to_str().expect("a UTF-8 path")));
    for v in [
        "PGPASSFILE",
        "PGPASSWORD",
        "PGAPPNAME",
        "PGTZ",
        "PGUSER",
        "PGSERVICE",
    ] {
        set(v, None);
    }
    let conninfo = "host=h1 port=5432 user=u dbname=d";
    assert_eq!(password(&prepared(conninfo, options())), None);
    assert_eq!(password(&prepared(conninfo, options())), None);

    // The password file appears, then changes (same length, so only the bytes differ).
    let pgpass = home.path().join(".pgpass");
    std::fs::write(&pgpass, "h1:5432:d:u:secret\n").expect("write .pgpass");
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(
        password(&prepared(conninfo, options())).as_deref(),
        Some(&b"secret"[..])
    );
    std::fs::write(&pgpass, "h1:5432:d:u:sesame\n").expect("rewrite .pgpass");
    assert_eq!(
        password(&prepared(conninfo, options())).as_deref(),
        Some(&b"sesame"[..])
    );
    // Its permissions loosen: libpq ignores it then (and warns).
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    assert_eq!(password(&prepared(conninfo, options())), None);
    std::fs::set_permissions(&pgpass, std::fs::Permissions::from_mode(0o600)).expect("chmod");

    // A variable the resolver reads, and one the startup packet reads.
    set("PGAPPNAME", Some("first"));
    let p = prepared(conninfo, options());
    assert_eq!(p.config.application_name(), Some(&b"first"[..]));
    set("PGAPPNAME", Some("other"));
    let p = prepared(conninfo, options());
    assert_eq!(p.config.application_name(), Some(&b"other"[..]));
    set("PGAPPNAME", None);
    assert_eq!(
        prepared(conninfo, options()).config.application_name(),
        None
    );
    set("PGTZ", Some("UTC"));
    let p = prepared(conninfo, options());
    assert!(p
        .extra_startup_params
        .contains(&(b"timezone".to_vec(), b"UTC".to_vec())));
    set("PGTZ", None);
    assert!(prepared(conninfo, options())
        .extra_startup_params
        .is_empty());

    // Another string, and the same string with an override, are resolved for themselves.
    let other = prepared("host=h2 port=5432 user=u dbname=d", options());
    assert_eq!(password(&other), None);
    let overridden = prepared(conninfo, options().set(Keyword::Host, "h2"));
    assert_eq!(password(&overridden), None);
    assert_eq!(
        password(&prepared(conninfo, options())).as_deref(),
        Some(&b"sesame"[..])
    );

    // A password file named by the environment takes over from the one in the home.
    let named = home.path().join("named");
    std::fs::write(&named, "*:*:*:*:named\n").expect("write the named file");
    std::fs::set_permissions(&named, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    set("PGPASSFILE", Some(named.to_str().expect("a UTF-8 path")));
    assert_eq!(
        password(&prepared(conninfo, options())).as_deref(),
        Some(&b"named"[..])
    );
    set("PGPASSFILE", None);
    std::fs::remove_file(&pgpass).expect("remove .pgpass");
    assert_eq!(password(&prepared(conninfo, options())), None);
}
