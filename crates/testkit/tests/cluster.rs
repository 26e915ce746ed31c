//! Real PostgreSQL 18 servers started by `pgyard_testkit::cluster`: a primary, streaming
//! standbys, promotion, and each authentication method over TCP.

use std::thread;
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{psql, Auth, Options, Primary};

/// Polls `check` every 50 ms until it returns true, failing the test after `timeout`.
fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not true within {timeout:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn primary_answers_over_tcp_as_postgresql_18() {
    let primary = Primary::start(Options::default()).expect("primary starts");
    let version = psql(&primary.conninfo(), "select version()").expect("select version()");
    assert!(version.contains("PostgreSQL 18"), "version: {version}");
    assert_eq!(
        psql(&primary.conninfo(), "show wal_level").unwrap(),
        "logical"
    );
    assert_eq!(
        psql(&primary.conninfo(), "show listen_addresses").unwrap(),
        "127.0.0.1"
    );
    assert_eq!(
        psql(&primary.conninfo(), "select inet_server_port()").unwrap(),
        primary.port().to_string()
    );
    let root = primary.root().to_owned();
    assert!(root.exists());
    drop(primary);
    assert!(!root.exists(), "dropping the primary removes {root:?}");
}

#[test]
fn two_streaming_standbys_follow_and_one_is_promoted() {
    let mut primary = Primary::start(Options::default()).expect("primary starts");
    primary.add_standby("s1").expect("standby s1");
    primary.add_standby("s2").expect("standby s2");

    assert_eq!(primary.psql("select pg_is_in_recovery()").unwrap(), "f");
    for standby in primary.standbys() {
        assert_eq!(
            psql(&standby.conninfo(), "select pg_is_in_recovery()").unwrap(),
            "t",
            "{} is in recovery",
            standby.name()
        );
    }

    let senders = "select count(*) from pg_stat_replication where state = 'streaming'";
    eventually("two streaming senders", Duration::from_secs(20), || {
        primary.psql(senders).unwrap() == "2"
    });
    assert_eq!(
        primary
            .psql("select string_agg(application_name, ',' order by application_name) from pg_stat_replication")
            .unwrap(),
        "s1,s2"
    );

    primary
        .psql("create table t (id int primary key, note text); insert into t values (1, 'one')")
        .expect("write on the primary");
    for standby in primary.standbys() {
        eventually(
            &format!("row visible on {}", standby.name()),
            Duration::from_secs(20),
            || {
                standby
                    .psql("select note from t where id = 1")
                    .ok()
                    .as_deref()
                    == Some("one")
            },
        );
    }

    primary.stop().expect("primary stops");
    let s1 = primary.standby_mut("s1").expect("s1 exists");
    let refused = s1.psql("insert into t values (2, 'two')");
    assert!(refused.is_err(), "a standby refuses writes: {refused:?}");
    s1.promote().expect("s1 promotes");
    assert_eq!(s1.psql("select pg_is_in_recovery()").unwrap(), "f");
    psql(&s1.conninfo(), "insert into t values (2, 'two')").expect("write on the promoted s1");
    assert_eq!(psql(&s1.conninfo(), "select count(*) from t").unwrap(), "2");
}

#[test]
fn password_methods_accept_the_right_password_only() {
    for auth in [Auth::ScramSha256, Auth::Md5] {
        let primary = Primary::start(
            Options::default()
                .auth(auth)
                .password("s3cret 'quoted'")
                .conf("log_connections = on")
                .hba("host all nobody 127.0.0.1/32 reject"),
        )
        .expect("primary starts");
        let stored = primary
            .psql("select left(rolpassword, 5) from pg_authid where rolname = 'postgres'")
            .unwrap();
        let expected_prefix = match auth {
            Auth::Md5 => "md5",
            _ => "SCRAM",
        };
        assert!(stored.starts_with(expected_prefix), "{auth:?}: {stored}");
        assert_eq!(
            psql(&primary.conninfo(), "select 1").expect("right password"),
            "1"
        );
        let wrong = format!("{} password=wrong", primary.conninfo());
        let err = psql(&wrong, "select 1").expect_err("wrong password");
        assert!(
            err.to_string().contains("password authentication failed"),
            "{auth:?}: {err}"
        );
        let nobody = format!("{} user=nobody", primary.conninfo());
        let err = psql(&nobody, "select 1").expect_err("rejected by the extra hba line");
        assert!(err.to_string().contains("pg_hba.conf rejects"), "{err}");
    }
}

#[test]
fn stop_kill_and_restart_keep_the_data() {
    let mut primary = Primary::start(Options::default()).expect("primary starts");
    primary
        .psql("create table k (v int); insert into k values (7)")
        .unwrap();
    primary.kill().expect("immediate stop");
    assert!(!primary.is_running());
    assert!(psql(&primary.conninfo(), "select 1").is_err());
    primary.start().expect("start after crash");
    assert_eq!(primary.psql("select v from k").unwrap(), "7");
    primary.restart().expect("restart");
    assert_eq!(psql(&primary.conninfo(), "select v from k").unwrap(), "7");
}

#[test]
fn a_bad_setting_fails_the_start_with_the_server_message() {
    let started = Instant::now();
    let err = Primary::start(Options::default().conf("no_such_setting_here = 1"))
        .expect_err("the server refuses an unknown setting");
    let text = err.to_string();
    assert!(text.contains("no_such_setting_here"), "{text}");
    assert!(started.elapsed() < Duration::from_secs(30));
}
