//! `pgyard delayq`: look into a delay queue directory.

use clap::Subcommand;
use pgyard_delayq::{verify, Config, DelayQueue, FsStorage, Inspection, Recovery};
use std::path::PathBuf;
use std::process::ExitCode;

/// `pgyard delayq` subcommands.
#[derive(Subcommand, Debug)]
pub enum DelayqCommand {
    /// Open (and so recover) a queue directory; list segments, watermarks and transactions.
    Inspect {
        /// The queue directory.
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check every record without changing anything; non-zero exit on corruption.
    Verify {
        /// The queue directory.
        dir: PathBuf,
    },
}

/// Runs a `pgyard delayq` subcommand.
pub fn run(cmd: DelayqCommand) -> ExitCode {
    match cmd {
        DelayqCommand::Inspect { dir, json } => inspect(&dir, json),
        DelayqCommand::Verify { dir } => verify_dir(&dir),
    }
}

fn inspect(dir: &std::path::Path, json: bool) -> ExitCode {
    let storage = match FsStorage::open(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pgyard delayq: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    let q = match DelayQueue::open(storage, Config::default()) {
        Ok(q) => q,
        Err(e) => {
            eprintln!("pgyard delayq: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    report_torn(q.recovery(), "truncated");
    let info = q.inspect();
    let text = if json {
        format!("{}\n", to_json(&info))
    } else {
        text_report(&info)
    };
    // A closed pipe (`| head`) is not an error worth a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes());
    ExitCode::SUCCESS
}

fn verify_dir(dir: &std::path::Path) -> ExitCode {
    let storage = match FsStorage::open(dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("pgyard delayq: {}: {e}", dir.display());
            return ExitCode::FAILURE;
        }
    };
    match verify(&storage) {
        Ok(rep) => {
            report_torn(&rep, "would be truncated on open");
            println!(
                "ok: {} segment(s), {} record(s) verified",
                rep.segments, rep.records
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("pgyard delayq: {}: {e}", dir.display());
            ExitCode::FAILURE
        }
    }
}

fn report_torn(rep: &Recovery, what: &str) {
    if let Some(t) = &rep.torn_tail {
        eprintln!(
            "pgyard delayq: torn tail in \"{}\" at byte offset {} ({} byte(s) {what}: {})",
            t.file, t.offset, t.dropped_bytes, t.reason
        );
    }
}

fn to_json(info: &Inspection) -> serde_json::Value {
    use serde_json::{json, Value};
    let segments: Vec<Value> = info
        .segments
        .iter()
        .map(|s| {
            json!({
                "file": s.file,
                "valid_bytes": s.valid_bytes,
                "seq": s.seq,
                "capacity": s.capacity,
                "records": s.records,
            })
        })
        .collect();
    let transactions: Vec<Value> = info
        .transactions
        .iter()
        .map(|t| {
            json!({
                "xid": t.xid.0,
                "state": t.state.as_str(),
                "commit_lsn": t.commit_lsn.map(|l| l.to_string()),
                "commit_time": t.commit_time.map(|ts| pg_timestamp_text(ts.0)),
                "messages": t.messages,
                "end_lsn": t.end_lsn.map(|l| l.to_string()),
                "first_segment": t.first_segment,
            })
        })
        .collect();
    json!({
        "flush_lsn": info.flush_lsn.to_string(),
        "apply_lsn": info.apply_lsn.to_string(),
        "resume_lsn": info.resume_lsn.to_string(),
        "segments": segments,
        "transactions": transactions,
        "messages_pending": info.messages_pending,
        "disk_bytes": info.disk_bytes,
    })
}

fn text_report(info: &Inspection) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "flush_lsn   {}", info.flush_lsn);
    let _ = writeln!(o, "apply_lsn   {}", info.apply_lsn);
    let _ = writeln!(o, "resume_lsn  {}", info.resume_lsn);
    let _ = writeln!(o, "disk_bytes  {}", info.disk_bytes);
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:<30} {:>12} {:>12} {:>8}",
        "segment", "valid_bytes", "capacity", "records"
    );
    for s in &info.segments {
        let _ = writeln!(
            o,
            "{:<30} {:>12} {:>12} {:>8}",
            s.file, s.valid_bytes, s.capacity, s.records
        );
    }
    let _ = writeln!(o);
    let _ = writeln!(
        o,
        "{:>10} {:<12} {:>14} {:<30} {:>8}",
        "xid", "state", "commit_lsn", "commit_time", "messages"
    );
    for t in &info.transactions {
        let _ = writeln!(
            o,
            "{:>10} {:<12} {:>14} {:<30} {:>8}",
            t.xid.0,
            t.state.as_str(),
            t.commit_lsn
                .map_or_else(|| "-".to_owned(), |l| l.to_string()),
            t.commit_time
                .map_or_else(|| "-".to_owned(), |ts| pg_timestamp_text(ts.0)),
            t.messages
        );
    }
    if info.messages_pending > 0 {
        let _ = writeln!(o);
        let _ = writeln!(
            o,
            "{} non-transactional message(s) pending",
            info.messages_pending
        );
    }
    o
}

/// A PostgreSQL timestamp (µs since 2000-01-01 UTC) as `YYYY-MM-DD HH:MM:SS.ffffff+00`.
fn pg_timestamp_text(micros_since_2000: i64) -> String {
    const DAY: i64 = 86_400_000_000;
    let days = micros_since_2000.div_euclid(DAY);
    let rem = micros_since_2000.rem_euclid(DAY);
    // Days since 1970-01-01, then the civil date (Howard Hinnant's algorithm).
    let z = days + 10_957 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let secs = rem / 1_000_000;
    let frac = rem % 1_000_000;
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{frac:06}+00",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

#[cfg(test)]
mod tests {
    use super::pg_timestamp_text;

    #[test]
    fn timestamps_print_like_postgres() {
        assert_eq!(pg_timestamp_text(0), "2000-01-01 00:00:00.000000+00");
        // From the spec's capture: 0x0003047570302D2B.
        assert_eq!(
            pg_timestamp_text(849_327_370_022_187),
            "2026-11-30 04:16:10.022187+00"
        );
        assert_eq!(pg_timestamp_text(-1), "1999-12-31 23:59:59.999999+00");
    }
}
