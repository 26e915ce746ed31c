//! `pgyard sim` as a process: summary, exit status, trace hashes, shards and JSON.

use std::process::Command;

fn sim(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("sim")
        .args(args)
        .output()
        .expect("pgyard runs");
    (
        out.status.success(),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}

fn last_line(s: &str) -> &str {
    s.lines().last().unwrap_or_default()
}

#[test]
fn a_sweep_passes_and_prints_the_summary_table() {
    let (ok, out, err) = sim(&["--seeds", "100"]);
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("scenario"), "{out}");
    assert!(out.contains("conninfo"), "{out}");
    assert_eq!(last_line(&out), "ok");
}

#[test]
fn the_same_seed_gives_the_same_trace_hash_whether_traced_or_sharded() {
    let (ok, a, _) = sim(&["--scenario", "conninfo", "--seed", "77", "--trace-hash"]);
    assert!(ok);
    let (ok, b, _) = sim(&[
        "--scenario",
        "conninfo",
        "--seed",
        "77",
        "--trace",
        "--trace-hash",
    ]);
    assert!(ok);
    assert!(last_line(&a).starts_with("trace-hash "));
    assert_eq!(last_line(&a), last_line(&b));
    assert!(b.contains("SEED=77 scenario=conninfo"), "{b}");
    let (_, c, _) = sim(&["--scenario", "conninfo", "--seed", "78", "--trace-hash"]);
    assert_ne!(last_line(&a), last_line(&c));
}

#[test]
fn json_summary_and_shards() {
    let (ok, out, _) = sim(&["--seeds", "60", "--shard", "1/3", "--json"]);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(v["ok"], true);
    assert_eq!(v["scenarios"][0]["seeds"], 20);
}

#[test]
fn bad_arguments_are_refused() {
    let (ok, _, err) = sim(&["--scenario", "nosuch"]);
    assert!(!ok);
    assert!(err.contains("unknown scenario"), "{err}");
    let (ok, _, _) = sim(&["--shard", "3/3"]);
    assert!(!ok);
}
