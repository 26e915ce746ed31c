//! `pgyard sim merge`: reads the `--json` reports of a sharded sweep and prints what the
//! unsharded sweep prints. Adapter: the folding itself is `pgyard_sim::merge`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use pgyard_sim::merge::FailureRecord;
use pgyard_sim::{merge, Merged, ScenarioReport, SeedSelection, ShardReport};
use serde_json::{json, Map, Value};

use crate::sim_cmd::{parse_shard, print_table, report_json, sweep_json};

/// Arguments of `pgyard sim merge`.
#[derive(Args, Debug)]
pub struct MergeArgs {
    /// The shards' reports (`pgyard sim --seeds N --shard I/N --json`), one per shard, in any
    /// order.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print the unsharded run's trace hash as the last line.
    #[arg(long)]
    trace_hash: bool,
    /// Print the merged summary as the unsharded run's `--json` report.
    #[arg(long)]
    json: bool,
}

/// Runs `pgyard sim merge`: exit 0 when every seed passed, 1 when some failed (each named on
/// stderr with its shard), 2 when the reports are unreadable or do not belong together.
pub fn run(args: MergeArgs) -> ExitCode {
    let mut reports = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let source = path.display().to_string();
        let read = std::fs::read_to_string(path)
            .map_err(|e| format!("{source}: {e}"))
            .and_then(|text| parse_report(&source, &text));
        match read {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("pgyard sim merge: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let merged = match merge(reports) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("pgyard sim merge: {e}");
            return ExitCode::from(2);
        }
    };

    report_failures(&merged);
    if args.json {
        let mut sweep = sweep_json(merged.seeds, None);
        sweep["merged_shards"] = json!(merged.shards);
        println!("{}", report_json(sweep, &merged.scenarios, false));
    } else {
        print_table(&merged.scenarios);
    }
    if args.trace_hash {
        println!("trace-hash {:016x}", merged.trace_hash);
    }
    if merged.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Names every failing seed with the shard that ran it and the command that replays it.
fn report_failures(merged: &Merged) {
    for sc in &merged.scenarios {
        for f in &sc.failures {
            eprintln!(
                "seed {} of scenario {} (shard {}/{}): invariant {} broken: {}",
                f.seed,
                sc.scenario,
                merged.shard_of(f.seed),
                merged.shards,
                f.invariant,
                f.detail
            );
            eprintln!(
                "  replay: pgyard sim --scenario {} --seed {} --trace",
                sc.scenario, f.seed
            );
        }
    }
}

/// Reads one shard's report. The report may be followed by the `trace-hash` line a shard
/// prints when also given `--trace-hash`; anything else after it is refused.
fn parse_report(source: &str, text: &str) -> Result<ShardReport, String> {
    let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = match stream.next() {
        Some(Ok(v)) => v,
        Some(Err(e)) => return Err(format!("{source}: not a JSON report: {e}")),
        None => return Err(format!("{source}: empty file")),
    };
    let rest = text[stream.byte_offset()..].trim();
    if !(rest.is_empty() || rest.starts_with("trace-hash ") && !rest.contains('\n')) {
        return Err(format!("{source}: unexpected text after the JSON report"));
    }
    let at = |what: &str| format!("{source}: {what}");
    let top = value.as_object().ok_or_else(|| at("not a JSON object"))?;
    let sweep = top
        .get("sweep")
        .and_then(Value::as_object)
        .ok_or_else(|| at("no \"sweep\" (written by a pgyard older than `sim merge`?)"))?;
    let seeds = match (sweep.get("seeds"), sweep.get("seed")) {
        (Some(n), None) => SeedSelection::Count(n.as_u64().ok_or_else(|| at("bad sweep.seeds"))?),
        (None, Some(s)) => SeedSelection::One(s.as_u64().ok_or_else(|| at("bad sweep.seed"))?),
        _ => return Err(at("sweep needs exactly one of \"seeds\" and \"seed\"")),
    };
    let shard = match sweep.get("shard") {
        Some(Value::String(s)) => parse_shard(s).map_err(|e| at(&e))?,
        _ => {
            return Err(at(
                "not a shard's report (run each shard with --shard I/N --json)",
            ))
        }
    };
    let scenarios = top
        .get("scenarios")
        .and_then(Value::as_array)
        .ok_or_else(|| at("no \"scenarios\" list"))?
        .iter()
        .map(|v| parse_scenario(v).map_err(|e| at(&e)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ShardReport {
        source: source.to_string(),
        seeds,
        shard,
        scenarios,
    })
}

/// One entry of a report's `scenarios`.
fn parse_scenario(v: &Value) -> Result<ScenarioReport, String> {
    let obj = v.as_object().ok_or("a scenario entry is not an object")?;
    let name = text(obj, "scenario", "")?;
    let ctx = |e: String| format!("scenario {name}: {e}");
    let failures = obj
        .get("failures")
        .and_then(Value::as_array)
        .ok_or_else(|| ctx("no \"failures\" list".into()))?
        .iter()
        .map(|f| {
            let f = f.as_object().ok_or("a failure is not an object")?;
            Ok(FailureRecord {
                seed: number(f, "seed")?,
                invariant: text(f, "invariant", "")?,
                detail: text(f, "detail", "")?,
            })
        })
        .collect::<Result<Vec<_>, String>>()
        .map_err(ctx)?;
    let hex = text(obj, "seed_hashes", "the shard's per-seed hashes").map_err(ctx)?;
    Ok(ScenarioReport {
        seeds: number(obj, "seeds").map_err(ctx)?,
        failures,
        simulated_nanos: number(obj, "simulated_nanos").map_err(ctx)?,
        wall_seconds: obj
            .get("wall_seconds")
            .and_then(Value::as_f64)
            .ok_or_else(|| ctx("no number \"wall_seconds\"".into()))?,
        trace_hash: parse_hash(&text(obj, "trace_hash", "").map_err(ctx)?).map_err(ctx)?,
        seed_hashes: parse_hashes(&hex).map_err(ctx)?,
        scenario: name,
    })
}

fn number(obj: &Map<String, Value>, key: &str) -> Result<u64, String> {
    obj.get(key)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("no whole number {key:?}"))
}

/// A string member; `what` explains a missing one when it needs explaining.
fn text(obj: &Map<String, Value>, key: &str, what: &str) -> Result<String, String> {
    match obj.get(key).and_then(Value::as_str) {
        Some(s) => Ok(s.to_string()),
        None if what.is_empty() => Err(format!("no string {key:?}")),
        None => Err(format!("no string {key:?} ({what})")),
    }
}

/// 16 hex digits, as the reports write hashes.
fn parse_hash(s: &str) -> Result<u64, String> {
    let bad = || format!("bad hash {s:?}: want 16 hex digits");
    if s.len() != 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(bad());
    }
    u64::from_str_radix(s, 16).map_err(|_| bad())
}

/// The per-seed hashes: 16 hex digits per seed, run together.
fn parse_hashes(s: &str) -> Result<Vec<u64>, String> {
    let bad = || "seed_hashes is not a run of 16-digit hex hashes".to_string();
    s.as_bytes()
        .chunks(16)
        .map(|c| {
            std::str::from_utf8(c)
                .map_err(|_| bad())
                .and_then(|h| parse_hash(h).map_err(|_| bad()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"sweep":{"seeds":4,"shard":"1/2"},"scenarios":[{"scenario":"conninfo",
        "seeds":2,"failures":[{"seed":3,"invariant":"x","detail":"y"}],"simulated_nanos":5,
        "wall_seconds":0.25,"trace_hash":"00000000000000ff",
        "seed_hashes":"0000000000000001000000000000000a"}],"ok":false}"#;

    #[test]
    fn a_shard_report_reads_back() {
        let r = parse_report(
            "a.json",
            &format!("{REPORT}\ntrace-hash 0123456789abcdef\n"),
        )
        .expect("parses");
        assert_eq!(r.seeds, SeedSelection::Count(4));
        assert_eq!(r.shard, (1, 2));
        let sc = &r.scenarios[0];
        assert_eq!(sc.seed_hashes, [1, 10]);
        assert_eq!(sc.trace_hash, 0xff);
        assert_eq!(sc.failures[0].seed, 3);
        assert_eq!(sc.simulated_nanos, 5);
    }

    #[test]
    fn bad_reports_are_refused_with_the_file_named() {
        let cases = [
            ("", "a.json: empty file"),
            ("{", "a.json: not a JSON report"),
            ("[]", "a.json: not a JSON object"),
            (r#"{"scenarios":[]}"#, "a.json: no \"sweep\""),
            (
                r#"{"sweep":{"seeds":4,"shard":null},"scenarios":[]}"#,
                "a.json: not a shard's report",
            ),
            (
                r#"{"sweep":{"seeds":4,"shard":"2/2"},"scenarios":[]}"#,
                "a.json: shard 2/2",
            ),
            (
                r#"{"sweep":{"seeds":4,"seed":1,"shard":"0/2"},"scenarios":[]}"#,
                "exactly one of",
            ),
        ];
        for (text, want) in cases {
            let err = parse_report("a.json", text).expect_err(text);
            assert!(err.contains(want), "{text}: {err}");
        }
        let junk = format!("{REPORT}\nsomething else");
        assert!(parse_report("a.json", &junk)
            .expect_err("junk")
            .contains("unexpected text"));
        let short = REPORT.replace("000000000000000a\"", "00a\"");
        assert!(parse_report("a.json", &short)
            .expect_err("short")
            .contains("scenario conninfo: seed_hashes is not"));
        let signed = REPORT.replace("0000000000000001", "+000000000000001");
        assert!(parse_report("a.json", &signed)
            .expect_err("signed")
            .contains("seed_hashes is not"));
        let unhashed = REPORT.replace("\"seed_hashes\"", "\"other\"");
        assert!(parse_report("a.json", &unhashed)
            .expect_err("no hashes")
            .contains("per-seed hashes"));
    }
}
