//! `pgyard connect` against a real PostgreSQL 18 primary: rows like `psql -At` with tabs,
//! `--explain` on standard error, and libpq's message (as psql prints it) on failure.

use std::net::TcpListener;
use std::process::{Command, Output};

use pgyard_testkit::cluster::{self, Options, Primary};

fn pgyard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("connect")
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("run pgyard")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn refused_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn connect_prints_rows_explains_attempts_and_fails_like_psql() {
    let primary = Primary::start(Options::default()).expect("primary");
    let p = primary.port();
    let ci = format!("{} connect_timeout=5", primary.conninfo());

    let out = pgyard(&[&ci, "-c", "select 1, null, 'x' union all select 2, 'y', ''"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\t\tx\n2\ty\t\n");

    let out = pgyard(&[&ci, "-c", "select 1/0"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "ERROR:  division by zero\n");

    let r = refused_port();
    let two = format!(
        "host=127.0.0.1,127.0.0.1 port={r},{p} user=postgres dbname=postgres connect_timeout=5"
    );
    for strategy in ["sequential", "race"] {
        let out = pgyard(&[
            &two,
            "-c",
            "select inet_server_port()",
            "--explain",
            "--strategy",
            strategy,
            "--seed",
            "1",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("{p}\n"));
        let err = text(&out.stderr);
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 2, "{err}");
        assert!(lines[0].contains(&format!("127.0.0.1:{r}")), "{err}");
        assert!(lines[0].contains("Connection refused"), "{err}");
        assert!(lines[1].contains(&format!("127.0.0.1:{p}")), "{err}");
        assert!(lines[1].contains("connected"), "{err}");
    }

    let bad = format!("host=127.0.0.1 port={r} user=postgres dbname=postgres");
    let out = pgyard(&[&bad, "-c", "select 1"]);
    assert_eq!(out.status.code(), Some(2));
    let psql_err = cluster::psql(&bad, "select 1").unwrap_err().to_string();
    let libpq = psql_err
        .split_once("psql: error: ")
        .map(|(_, m)| m.trim_end().to_owned())
        .unwrap_or(psql_err);
    assert_eq!(text(&out.stderr), format!("pgyard: error: {libpq}\n"));
}
