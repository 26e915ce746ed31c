//! `pgyard delayq follow` as a process against a real PostgreSQL 18: a missing slot or a failed
//! authentication ends it (no reconnecting) with the server's or libpq's own error.

use std::process::Command;

use pgyard_testkit::cluster::{Options, Primary};

#[test]
fn a_missing_slot_is_refused_with_the_servers_error() {
    let primary = Primary::start(Options::default()).expect("a primary starts");
    let dir = std::env::temp_dir().join(format!("pgyard-follow-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args([
            "delayq",
            "follow",
            &primary.conninfo(),
            "--slot",
            "nope",
            "--delay",
            "1h",
        ])
        .arg(&dir)
        .output()
        .expect("pgyard runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("replication slot \"nope\" does not exist"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A wrong password is final: `follow` does not keep reconnecting but exits with libpq's text.
#[test]
fn a_failed_authentication_ends_follow_instead_of_retrying() {
    use pgyard_testkit::cluster::Auth;
    use std::time::{Duration, Instant};
    let primary =
        Primary::start(Options::default().auth(Auth::ScramSha256)).expect("a primary starts");
    let dir = std::env::temp_dir().join(format!("pgyard-follow-auth-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args([
            "delayq",
            "follow",
            &format!("{} password=wrong", primary.conninfo()),
            "--slot",
            "any",
            "--delay",
            "1h",
        ])
        .arg(&dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("pgyard runs");
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("follow kept retrying a failed authentication");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("password authentication failed"), "{err}");
    assert!(!err.contains("reconnecting"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
