//! `pgyard proxy` as a user runs it, with `pgyard connect --middleware` as its client, in front
//! of a real PostgreSQL 18 primary and standby.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{Options, Primary};

/// The proxy process, killed on drop.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn connect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("connect")
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("run pgyard connect")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn routes_by_middleware_message_from_the_command_line() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let standby = primary.add_standby("s1").expect("standby").port();
    let port = free_port();
    let backend = format!("host=127.0.0.1,127.0.0.1 port={},{standby}", primary.port());
    let _proxy = Proxy(
        Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["proxy", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--backend", &backend, "--auth", "trust", "--pool-size", "2"])
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgyard proxy"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the proxy never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let via = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=disable");
    let sql = "select pg_is_in_recovery(), inet_server_port()";

    let out = connect(&[&via, "-c", sql]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("f\t{}\n", primary.port()));

    let out = connect(&[&via, "--middleware", "2147483649:standby", "-c", sql]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("t\t{standby}\n"));

    // Straight to the server, the message is refused before it could end the session.
    let direct = format!("{} sslmode=disable", primary.conninfo());
    let out = connect(&[&direct, "--middleware", "2147483649:standby", "-c", sql]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not consumed"),
        "{}",
        text(&out.stderr)
    );

    let out = connect(&[&via, "--middleware", "standby", "-c", sql]);
    assert_eq!(out.status.code(), Some(2), "a bad flag is a usage error");
}
