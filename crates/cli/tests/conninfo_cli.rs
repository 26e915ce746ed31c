//! `pgyard conninfo parse`, end to end: the batch mode agrees with the real libpq 18 line for
//! line, and the human and JSON outputs show the expanded host list.

use std::io::Write;
use std::process::{Command, Stdio};

use pgyard_testkit::libpq::Libpq;

fn pgyard() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
}

/// Strings of both forms, accepted and rejected, including non-ASCII text.
const INPUTS: &[&str] = &[
    "",
    "host=a port=1",
    "host='a b' dbname=x\\ y",
    "foo=bar",
    "host",
    "host='unterminated",
    "requiressl=1 sslmode=disable",
    "postgresql://u:p@h1:1,h2/db?sslmode=require&application_name=caf%C3%A9",
    "postgresql://[::1",
    "postgresql://h/db?options=a=b",
    "postgresql://h/db name",
    "postgres://%2Ftmp/db?ssl=true",
    "application_name='caf\u{e9}'",
    "postgresql://h/%FFx",
];

#[test]
fn batch_mode_matches_libpq_line_for_line() {
    let libpq = Libpq::shared().expect("libpq 18 must load for this test");
    let mut child = pgyard()
        .args(["conninfo", "parse", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("pgyard runs");
    {
        let mut stdin = child.stdin.take().expect("piped");
        for s in INPUTS {
            writeln!(
                stdin,
                "{}",
                serde_json::to_string(s).expect("a string serializes")
            )
            .expect("write");
        }
    }
    let out = child.wait_with_output().expect("pgyard finishes");
    assert!(out.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .expect("JSON output is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect();
    assert_eq!(lines.len(), INPUTS.len());
    for (input, line) in INPUTS.iter().zip(&lines) {
        let expected = match libpq.conninfo_parse(input.as_bytes()) {
            Ok(pairs) => {
                let mut m = serde_json::Map::new();
                for (k, v) in pairs {
                    m.insert(k, String::from_utf8_lossy(&v).into_owned().into());
                }
                serde_json::json!({ "ok": m })
            }
            Err(msg) => serde_json::json!({ "error": String::from_utf8_lossy(&msg) }),
        };
        assert_eq!(line, &expected, "input {input:?}");
    }
}

#[test]
fn batch_mode_reports_lines_that_are_not_json_strings() {
    let mut child = pgyard()
        .args(["conninfo", "parse", "--batch"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("pgyard runs");
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(b"not json\n\"host=a\"\n")
        .expect("write");
    let out = child.wait_with_output().expect("pgyard finishes");
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines[0].contains("input line 1 is not a JSON string"),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1], r#"{"ok":{"host":"a"}}"#);
}

#[test]
fn parse_shows_the_expanded_host_list() {
    let out = pgyard()
        .args([
            "conninfo",
            "parse",
            "--json",
            "host=a,/sock,b port=5433,,6000 user=u dbname=d",
        ])
        .env_clear()
        .env("HOME", "/nonexistent")
        .output()
        .expect("pgyard runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let hosts = v["hosts"].as_array().expect("hosts");
    assert_eq!(hosts.len(), 3);
    assert_eq!(hosts[0]["host"], "a");
    assert_eq!(hosts[0]["port"], 5433);
    assert_eq!(hosts[1]["kind"], "UnixSocket");
    assert_eq!(hosts[1]["socket"], "/sock/.s.PGSQL.5432");
    assert_eq!(hosts[2]["port"], 6000);
    assert_eq!(v["resolved"]["sslmode"]["source"], "compiled");
}

#[test]
fn parse_fails_with_libpqs_message() {
    let out = pgyard()
        .args(["conninfo", "parse", "host=a port=1,2"])
        .env_clear()
        .env("HOME", "/nonexistent")
        .output()
        .expect("pgyard runs");
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "could not match 2 port numbers to 1 hosts\n"
    );
    let out = pgyard()
        .args(["conninfo", "parse", "foo=1"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "invalid connection option \"foo\"\n"
    );
}

#[test]
fn proposal_dialect_accumulates_hosts_and_races() {
    let out = pgyard()
        .args([
            "conninfo",
            "parse",
            "--json",
            "--dialect",
            "proposal",
            "host=a host=b readonly=false",
        ])
        .env_clear()
        .env("HOME", "/nonexistent")
        .output()
        .expect("pgyard runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["keywords"]["host"], "a,b");
    assert_eq!(v["keywords"]["target_session_attrs"], "read-write");
    assert_eq!(v["strategy"], "race");
}
