//! The operator's controls of a delayed replica, kept durably beside the queue: `pause`,
//! `resume` and `skip` write `DIR/control.json` (write, fsync, rename, fsync the folder), and a
//! running `run` or `apply` reads it at least every 200 ms. `DIR/pgyard.lock` keeps two
//! processes from opening one queue; the process holding it writes `DIR/status.json` every
//! second for `pgyard delayq status`.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::Write as _;
use std::path::{Path, PathBuf};

use pgyard_delayq::apply::timestamp_text;
use pgyard_delayq::{Inspection, TxnState};
use pgyard_types::{Lsn, PgTimestamp, UnixTime};
use serde_json::{json, Value};

/// What the operator asked for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Apply nothing until resumed.
    pub paused: bool,
    /// Transactions (by commit LSN) to drop instead of applying.
    pub skip: BTreeSet<Lsn>,
}

fn control_path(dir: &Path) -> PathBuf {
    dir.join("control.json")
}

impl Control {
    /// Reads `DIR/control.json` (absent: nothing asked).
    pub fn load(dir: &Path) -> Result<Control, String> {
        let path = control_path(dir);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Control::default()),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let bad = |what: &str| format!("{}: {what}", path.display());
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(&e.to_string()))?;
        let paused = v["paused"].as_bool().unwrap_or(false);
        let mut skip = BTreeSet::new();
        for l in v["skip"].as_array().into_iter().flatten() {
            let l = l
                .as_str()
                .and_then(|s| s.parse::<Lsn>().ok())
                .ok_or_else(|| bad("skip: expected LSNs like \"0/16B3748\""))?;
            skip.insert(l);
        }
        Ok(Control { paused, skip })
    }

    /// Writes `DIR/control.json` durably.
    pub fn save(&self, dir: &Path) -> Result<(), String> {
        let skip: Vec<String> = self.skip.iter().map(Lsn::to_string).collect();
        let text = json!({"paused": self.paused, "skip": skip}).to_string();
        write_durably(dir, &control_path(dir), text.as_bytes())
    }
}

/// Replaces `path` in `dir` with `bytes` so that a crash leaves the old or the new file.
pub fn write_durably(dir: &Path, path: &Path, bytes: &[u8]) -> Result<(), String> {
    let tmp = path.with_extension("tmp");
    let err = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut f = File::create(&tmp).map_err(err)?;
    f.write_all(bytes).map_err(err)?;
    f.sync_all().map_err(err)?;
    fs::rename(&tmp, path).map_err(err)?;
    File::open(dir).and_then(|d| d.sync_all()).map_err(err)
}

/// Where applying stops and holds: the apply machine's own type.
pub use pgyard_delayq::apply::Until;

/// `--until`: an LSN (`0/16B3748`) or a UTC time (`2026-12-01 18:00:00`, `T` and a
/// trailing `Z` or `+00` allowed, fractions of a second too).
pub fn parse_until(s: &str) -> Result<Until, String> {
    if let Ok(l) = s.parse::<Lsn>() {
        return Ok(Until::Lsn(l));
    }
    parse_utc(s).map(Until::Time).ok_or_else(|| {
        format!(
            "--until {s:?}: expected an LSN like 0/16B3748 or a UTC time like 2026-12-01 18:00:00"
        )
    })
}

fn parse_utc(s: &str) -> Option<UnixTime> {
    let s = s.trim();
    let s = s
        .strip_suffix('Z')
        .or_else(|| s.strip_suffix("+00"))
        .unwrap_or(s);
    let (date, time) = s.split_once(['T', ' '])?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, m, day) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, sec) = (t.next()??, t.next()??, t.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&day) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let micros: i64 = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain(std::iter::repeat('0')).take(6).collect();
        digits.parse().ok()?
    };
    let days = days_from_civil(y, m, day);
    Some(UnixTime(
        ((days * 86_400 + h * 3600 + mi * 60 + sec) * 1_000_000) + micros,
    ))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (eras of 400 years).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Takes `DIR/pgyard.lock` for the life of the returned file, or says who holds it.
pub fn lock_dir(dir: &Path) -> Result<File, String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("pgyard.lock");
    let f = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(_) => Err(format!(
            "{} is in use by another pgyard process (it holds {})",
            dir.display(),
            path.display()
        )),
    }
}

/// The status `pgyard delayq status` prints, from an inspection of the queue.
pub fn status_json(
    i: &Inspection,
    control: &Control,
    applied: Option<(Lsn, PgTimestamp)>,
    now: UnixTime,
) -> Value {
    let queued: Vec<_> = i
        .transactions
        .iter()
        .filter(|t| {
            matches!(
                t.state,
                TxnState::Committed | TxnState::Prepared | TxnState::InProgress
            )
        })
        .collect();
    let pending: Vec<Value> = queued
        .iter()
        .filter(|t| t.state == TxnState::Committed)
        .take(100)
        .map(|t| {
            json!({
                "commit_lsn": t.commit_lsn.map(|l| l.to_string()),
                "commit_time": t.commit_time.map(timestamp_text),
                "due_in_seconds": t.due.map(|d| (d.0 - now.0) as f64 / 1e6),
                "skip": t.commit_lsn.is_some_and(|l| control.skip.contains(&l)),
            })
        })
        .collect();
    let next_due = queued
        .iter()
        .filter_map(|t| t.due)
        .min()
        .map(|d| (d.0 - now.0) as f64 / 1e6);
    json!({
        "queued_transactions": queued.len(),
        "queued_bytes": i.disk_bytes,
        "next_due_in_seconds": next_due,
        "applied_through": applied.map_or(i.apply_lsn, |a| a.0).to_string(),
        "last_applied_commit_time": applied.map(|a| timestamp_text(a.1)),
        "lag_seconds": applied.map(|a| (now.0 - a.1.to_unix().0) as f64 / 1e6),
        "paused": control.paused,
        "skip": control.skip.iter().map(Lsn::to_string).collect::<Vec<_>>(),
        "pending": pending,
    })
}

/// `pgyard delayq pause|resume DIR`: durably asks a running (or the next) `run`/`apply` to
/// stop applying, or to go on.
pub fn set_paused(dir: &Path, paused: bool) -> std::process::ExitCode {
    let verb = if paused { "pause" } else { "resume" };
    let r = Control::load(dir).and_then(|mut c| {
        c.paused = paused;
        c.save(dir)
    });
    match r {
        Ok(()) => {
            println!(
                "{}: applying {}",
                dir.display(),
                if paused { "paused" } else { "resumed" }
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pgyard delayq {verb}: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// `pgyard delayq skip DIR --commit-lsn LSN`: durably drops that transaction when its turn
/// comes (the running process, or the next one, marks it applied without applying it).
pub fn skip(dir: &Path, commit_lsn: Lsn) -> std::process::ExitCode {
    let r = Control::load(dir).and_then(|mut c| {
        c.skip.insert(commit_lsn);
        c.save(dir)
    });
    match r {
        Ok(()) => {
            println!(
                "{}: the transaction committed at {commit_lsn} will be skipped",
                dir.display()
            );
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pgyard delayq skip: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

/// `pgyard delayq status DIR [--json]`: what the process holding the queue last wrote, or,
/// with no process running, what the queue itself holds.
pub fn status(dir: &Path, json_out: bool) -> std::process::ExitCode {
    let fail = |e: String| {
        eprintln!("pgyard delayq status: {e}");
        std::process::ExitCode::from(2)
    };
    let control = match Control::load(dir) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let v = match lock_dir(dir) {
        // Nobody holds the queue: open it (recovering it) and look.
        Ok(_held) => {
            let q = pgyard_delayq::FsStorage::open(dir)
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    pgyard_delayq::DelayQueue::open(s, pgyard_delayq::Config::default())
                        .map_err(|e| e.to_string())
                });
            match q {
                Ok(q) => {
                    let mut v = status_json(&q.inspect(), &control, None, now());
                    v["running"] = false.into();
                    v
                }
                Err(e) => return fail(format!("{}: {e}", dir.display())),
            }
        }
        Err(_) => {
            let path = dir.join("status.json");
            match fs::read_to_string(&path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| e.to_string()))
            {
                Ok(mut v) => {
                    // The file is up to a second old; the controls are read fresh.
                    v["paused"] = control.paused.into();
                    v["skip"] = json!(control.skip.iter().map(Lsn::to_string).collect::<Vec<_>>());
                    for p in v["pending"].as_array_mut().into_iter().flatten() {
                        let skipped = p["commit_lsn"]
                            .as_str()
                            .and_then(|l| l.parse::<Lsn>().ok())
                            .is_some_and(|l| control.skip.contains(&l));
                        p["skip"] = skipped.into();
                    }
                    v
                }
                Err(e) => return fail(format!("{}: {e}", path.display())),
            }
        }
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        print!("{}", status_text(&v));
    }
    std::process::ExitCode::SUCCESS
}

fn now() -> UnixTime {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    UnixTime(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

fn status_text(v: &Value) -> String {
    let mut out = format!(
        "{} transactions queued ({} bytes){}{}\n",
        v["queued_transactions"],
        v["queued_bytes"],
        if v["running"] == true {
            ", a process is applying"
        } else {
            ", no process running"
        },
        if v["paused"] == true { ", PAUSED" } else { "" },
    );
    if let Some(d) = v["next_due_in_seconds"].as_f64() {
        out.push_str(&format!("next due in {d:.1}s\n"));
    }
    out.push_str(&format!(
        "applied through {}",
        v["applied_through"].as_str().unwrap_or("?")
    ));
    if let (Some(t), Some(lag)) = (
        v["last_applied_commit_time"].as_str(),
        v["lag_seconds"].as_f64(),
    ) {
        out.push_str(&format!(" (committed {t}, lag {lag:.1}s)"));
    }
    out.push('\n');
    if let Some(h) = v["held_at"].as_str() {
        out.push_str(&format!("held at {h} (--until)\n"));
    }
    for p in v["pending"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "  commit {} at {}{}\n",
            p["commit_lsn"].as_str().unwrap_or("?"),
            p["commit_time"].as_str().unwrap_or("?"),
            if p["skip"] == true { "  (skip)" } else { "" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_reads_lsns_and_utc_times() {
        assert_eq!(parse_until("0/16B3748"), Ok(Until::Lsn(Lsn(0x16B3748))));
        assert_eq!(
            parse_until("1970-01-02 00:00:01"),
            Ok(Until::Time(UnixTime(86_401_000_000)))
        );
        assert_eq!(
            parse_until("2024-02-29T12:34:56.789012Z"),
            Ok(Until::Time(UnixTime(1_709_210_096_789_012)))
        );
        assert!(parse_until("yesterday").is_err());
        assert!(parse_until("2024-13-01 00:00:00").is_err());
    }

    #[test]
    fn controls_survive_a_round_trip() {
        let dir = std::env::temp_dir().join(format!("pgyard-control-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(Control::load(&dir), Ok(Control::default()));
        let c = Control {
            paused: true,
            skip: [Lsn(5), Lsn(0x1_0000_0000)].into_iter().collect(),
        };
        c.save(&dir).unwrap();
        assert_eq!(Control::load(&dir), Ok(c));
        fs::write(control_path(&dir), "{\"skip\": [\"nope\"]}").unwrap();
        assert!(Control::load(&dir).unwrap_err().contains("expected LSNs"));
        let held = lock_dir(&dir).unwrap();
        assert!(lock_dir(&dir).unwrap_err().contains("in use"));
        drop(held);
        assert!(lock_dir(&dir).is_ok());
        let _ = fs::remove_dir_all(&dir);
    }
}
