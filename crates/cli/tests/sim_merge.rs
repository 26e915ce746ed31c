//! `pgyard sim merge` as a batch engine uses it: shards run as separate processes, their
//! `--json` reports merged, compared with the unsharded run.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Small enough to keep the test at a second or two in debug builds, big enough that every
/// shard runs several seeds of every scenario.
const SEEDS: &str = "40";

struct Out {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn pgyard(args: &[&str]) -> Out {
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(args)
        .output()
        .expect("pgyard runs");
    Out {
        code: out.status.code(),
        stdout: String::from_utf8(out.stdout).expect("UTF-8"),
        stderr: String::from_utf8(out.stderr).expect("UTF-8"),
    }
}

/// A fresh directory of this test's own.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("sim_merge-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Runs `shards` shard processes at once, each writing its report to `shard-I.json` in `dir`,
/// as a batch engine's tasks would; returns the files.
fn run_shards(dir: &Path, extra: &[&str], seeds: &str, shards: u64) -> Vec<String> {
    let files: Vec<PathBuf> = (0..shards)
        .map(|i| dir.join(format!("shard-{i}.json")))
        .collect();
    let children: Vec<_> = files
        .iter()
        .enumerate()
        .map(|(i, file)| {
            Command::new(env!("CARGO_BIN_EXE_pgyard"))
                .args(["sim", "--seeds", seeds, "--jobs", "1", "--json"])
                .args(["--shard", &format!("{i}/{shards}")])
                .args(extra)
                .stdout(File::create(file).expect("report file"))
                .stderr(Stdio::inherit())
                .spawn()
                .expect("shard starts")
        })
        .collect();
    for mut child in children {
        let status = child.wait().expect("shard ends");
        assert!(status.success(), "a shard failed: {status}");
    }
    files
        .iter()
        .map(|f| f.to_str().expect("UTF-8 path").to_string())
        .collect()
}

fn merge(files: &[String], extra: &[&str]) -> Out {
    let mut args = vec!["sim", "merge"];
    args.extend(files.iter().map(String::as_str));
    args.extend(extra);
    pgyard(&args)
}

/// The summary without the two columns that measure time (wall, seeds/s).
fn without_timing(summary: &str) -> Vec<String> {
    summary
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() == 6 && fields[0] != "scenario" {
                fields[..4].join(" ")
            } else {
                line.to_string()
            }
        })
        .collect()
}

#[test]
fn four_shard_processes_merge_into_the_unsharded_run() {
    let dir = scratch("four");
    let files = run_shards(&dir, &[], SEEDS, 4);
    let whole = pgyard(&["sim", "--seeds", SEEDS, "--trace-hash"]);
    assert_eq!(whole.code, Some(0), "{}", whole.stderr);
    // The batch engine hands the files over in whatever order it likes.
    let shuffled = [&files[2], &files[0], &files[3], &files[1]].map(String::clone);
    let merged = merge(&shuffled, &["--trace-hash"]);
    assert_eq!(merged.code, Some(0), "{}", merged.stderr);

    let (w, m) = (
        without_timing(&whole.stdout),
        without_timing(&merged.stdout),
    );
    assert_eq!(
        m, w,
        "merged:\n{}\nunsharded:\n{}",
        merged.stdout, whole.stdout
    );
    assert!(w.iter().any(|l| l.starts_with("slotsync 40 0 ")), "{w:?}");
    let last = merged.stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("trace-hash "), "{}", merged.stdout);
    assert_eq!(last, whole.stdout.lines().last().unwrap_or_default());
    assert_eq!(w[w.len() - 2], "ok");

    // The merged JSON is the unsharded JSON, timing aside.
    let whole_json = json(&pgyard(&["sim", "--seeds", SEEDS, "--json"]).stdout);
    let merged_json = json(&merge(&files, &["--json"]).stdout);
    assert_eq!(merged_json["sweep"]["merged_shards"], 4);
    assert_eq!(merged_json["ok"], whole_json["ok"]);
    let (ws, ms) = (&whole_json["scenarios"], &merged_json["scenarios"]);
    assert_eq!(ms.as_array().map(Vec::len), ws.as_array().map(Vec::len));
    for (w, m) in ws
        .as_array()
        .into_iter()
        .flatten()
        .zip(ms.as_array().into_iter().flatten())
    {
        for key in [
            "scenario",
            "seeds",
            "failures",
            "simulated_nanos",
            "trace_hash",
        ] {
            assert_eq!(m[key], w[key], "{key} of {}", w["scenario"]);
        }
    }
}

fn json(text: &str) -> serde_json::Value {
    serde_json::from_str(text.trim()).expect("one JSON report")
}

#[test]
fn a_failing_seed_is_named_with_its_shard() {
    let dir = scratch("failing");
    let files = run_shards(&dir, &["--scenario", "middleware"], "12", 4);
    // No registered scenario fails, so write a failure into shard 1's report by hand.
    let mut report = json(&std::fs::read_to_string(&files[1]).expect("report"));
    report["scenarios"][0]["failures"] = serde_json::json!([
        { "seed": 5, "invariant": "planted", "detail": "written by the test" }
    ]);
    std::fs::write(&files[1], report.to_string()).expect("rewrite");

    let merged = merge(&files, &["--trace-hash"]);
    assert_eq!(merged.code, Some(1), "{}", merged.stderr);
    assert!(
        merged.stderr.contains(
            "seed 5 of scenario middleware (shard 1/4): invariant planted broken: \
             written by the test"
        ),
        "{}",
        merged.stderr
    );
    assert!(merged
        .stderr
        .contains("replay: pgyard sim --scenario middleware --seed 5 --trace"));
    let lines: Vec<&str> = merged.stdout.lines().collect();
    assert_eq!(
        lines[lines.len() - 2],
        "FAILED: 1 seed(s) broke an invariant"
    );
}

#[test]
fn reports_that_do_not_belong_together_are_refused() {
    let dir = scratch("refused");
    let conninfo = ["--scenario", "conninfo"];
    let files = run_shards(&dir, &conninfo, "20", 3);
    let other_dir = scratch("refused-other");
    let longer = run_shards(&other_dir, &conninfo, "21", 3);
    let other_dir = scratch("refused-scenario");
    let middleware = run_shards(&other_dir, &["--scenario", "middleware"], "20", 3);
    let unsharded = dir.join("whole.json");
    let whole = pgyard(&["sim", "--scenario", "conninfo", "--seeds", "20", "--json"]);
    std::fs::write(&unsharded, whole.stdout).expect("write");
    let unsharded = unsharded.to_str().expect("UTF-8").to_string();

    let f = |i: usize| files[i].clone();
    let cases: Vec<(Vec<String>, String)> = vec![
        (vec![f(0), f(2)], "missing shard(s) 1/3".into()),
        (
            vec![f(0), f(1), f(1), f(2)],
            format!("shard 1/3 given twice: {} and {}", f(1), f(1)),
        ),
        (
            vec![f(0), longer[1].clone(), f(2)],
            "is a shard of a sweep of seeds 0..21".into(),
        ),
        (
            vec![f(0), middleware[1].clone(), f(2)],
            "ran scenarios [middleware]".into(),
        ),
        (vec![unsharded], "not a shard's report".into()),
        (
            vec!["/nonexistent/shard.json".into()],
            "/nonexistent/shard.json: ".into(),
        ),
    ];
    for (inputs, want) in cases {
        let out = merge(&inputs, &["--trace-hash"]);
        assert_eq!(out.code, Some(2), "{inputs:?}: {}", out.stderr);
        assert!(out.stderr.contains(&want), "{inputs:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{inputs:?}: {}", out.stdout);
    }
}
