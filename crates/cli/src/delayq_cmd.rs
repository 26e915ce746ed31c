//! `pgyard delayq`: look into a delay queue directory.

use clap::Subcommand;
use pgyard_delayq::{verify, Config, DelayQueue, FsStorage, Inspection, Received, Recovery};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

/// `pgyard delayq` subcommands.
#[derive(Subcommand, Debug)]
pub enum DelayqCommand {
    /// Stream a publisher's logical slot (pgoutput) into DIR, holding every transaction for
    /// --delay and reporting the durable position as flushed.
    Follow(crate::delayq_follow::FollowArgs),
    /// Apply DIR's due transactions to a subscriber, exactly once (a replication origin on
    /// the subscriber records what was applied), until the queue holds nothing more.
    Apply(crate::delayq_apply::ApplyArgs),
    /// A delayed logical replica in one process: follow the publisher's slot into DIR and
    /// apply each transaction to the subscriber --delay after its commit, until Ctrl-C.
    Run(crate::delayq_run::RunArgs),
    /// Queue a raw backend capture of a logical replication connection (what
    /// `pgyard wire decode --replication` reads) into DIR; prints `flushed LSN` lines as flush
    /// points become durable. It only queues: it never applies or purges.
    Ingest {
        /// The queue directory (created if missing).
        dir: PathBuf,
        /// The backend-side capture.
        #[arg(long)]
        capture: PathBuf,
        /// Apply delay, e.g. `30s`, `5min`, `1h`.
        #[arg(long, default_value = "0s", value_parser = parse_delay)]
        delay: std::time::Duration,
        /// Flush after every N queued messages (and at the end).
        #[arg(long, default_value_t = 64)]
        sync_every: u64,
    },
    /// What a delayed replica holds: queued transactions (with their commit LSNs), the next
    /// due time, what was applied and its lag, and the operator's controls.
    Status {
        /// The queue directory.
        dir: PathBuf,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Stop applying (durable; a running process obeys within a second).
    Pause {
        /// The queue directory.
        dir: PathBuf,
    },
    /// Go on applying after `pause`.
    Resume {
        /// The queue directory.
        dir: PathBuf,
    },
    /// Drop one queued transaction instead of applying it (durable; see `status`).
    Skip {
        /// The queue directory.
        dir: PathBuf,
        /// The transaction's commit LSN, as `status` lists it.
        #[arg(long)]
        commit_lsn: pgyard_types::Lsn,
    },
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
        DelayqCommand::Ingest {
            dir,
            capture,
            delay,
            sync_every,
        } => ingest(&dir, &capture, delay, sync_every.max(1)),
        DelayqCommand::Follow(args) => crate::delayq_follow::run(args),
        DelayqCommand::Apply(args) => crate::delayq_apply::run(args),
        DelayqCommand::Run(args) => crate::delayq_run::run(args),
        DelayqCommand::Status { dir, json } => crate::delayq_control::status(&dir, json),
        DelayqCommand::Pause { dir } => crate::delayq_control::set_paused(&dir, true),
        DelayqCommand::Resume { dir } => crate::delayq_control::set_paused(&dir, false),
        DelayqCommand::Skip { dir, commit_lsn } => crate::delayq_control::skip(&dir, commit_lsn),
        DelayqCommand::Inspect { dir, json } => inspect(&dir, json),
        DelayqCommand::Verify { dir } => verify_dir(&dir),
    }
}

/// `30s`, `5min`, `1h`, `250ms`, `2d`, or plain seconds.
pub(crate) fn parse_delay(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("invalid delay {s:?}: expected e.g. 30s, 5min, 1h"))?;
    let secs = |k: u64| std::time::Duration::from_secs(n.saturating_mul(k));
    Ok(match unit.trim() {
        "" | "s" | "sec" | "secs" => secs(1),
        "ms" => std::time::Duration::from_millis(n),
        "min" | "mins" | "m" => secs(60),
        "h" | "hour" | "hours" => secs(3600),
        "d" | "day" | "days" => secs(86_400),
        other => {
            return Err(format!(
                "invalid delay unit {other:?} in {s:?}: use ms, s, min, h or d"
            ))
        }
    })
}

fn ingest(
    dir: &std::path::Path,
    capture: &std::path::Path,
    delay: std::time::Duration,
    sync_every: u64,
) -> ExitCode {
    let fail = |what: String| {
        eprintln!("pgyard delayq ingest: {what}");
        ExitCode::FAILURE
    };
    let bytes = match std::fs::read(capture) {
        Ok(b) => b,
        Err(e) => return fail(format!("{}: {e}", capture.display())),
    };
    let _lock = match crate::delayq_control::lock_dir(dir) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    let storage = match FsStorage::open(dir) {
        Ok(s) => s,
        Err(e) => return fail(format!("{}: {e}", dir.display())),
    };
    let config = Config {
        delay,
        ..Config::default()
    };
    let mut q = match DelayQueue::open(storage, config) {
        Ok(q) => q,
        Err(e) => return fail(format!("{}: {e}", dir.display())),
    };
    report_torn(q.recovery(), "truncated");
    let mut out = std::io::stdout().lock();
    let mut reported = q.flush_lsn();
    let mut since_flush = 0u64;
    let mut flush = |q: &mut DelayQueue<FsStorage>, out: &mut std::io::StdoutLock<'_>| {
        q.flush().map(|_| {
            let now = q.flush_lsn();
            if now > reported {
                reported = now;
                let _ = writeln!(out, "flushed {now}");
            }
        })
    };
    let result = feed_capture(&bytes, |item| {
        let (wal_lsn, payload, msg) = match item {
            Fed::Received(end) => {
                q.note_received(end);
                return Ok(());
            }
            Fed::Message(wal_lsn, payload, msg) => (wal_lsn, payload, msg),
        };
        let event = pgyard_delayq::pgoutput::event(msg);
        let now = pgyard_types::UnixTime(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
        );
        q.handle(
            now,
            Received {
                wal_lsn,
                payload,
                event,
            },
        )
        .map_err(|e| format!("queueing the message at {wal_lsn}: {e}"))?;
        since_flush += 1;
        if since_flush >= sync_every {
            since_flush = 0;
            flush(&mut q, &mut out).map_err(|e| format!("flush: {e}"))?;
        }
        Ok(())
    });
    if let Err(e) = result {
        return fail(e);
    }
    if let Err(e) = flush(&mut q, &mut out) {
        return fail(format!("flush: {e}"));
    }
    ExitCode::SUCCESS
}

/// What a capture walk hands out.
enum Fed<'a, 'b> {
    /// A pgoutput message with the WAL position it arrived at and its raw bytes.
    Message(
        pgyard_types::Lsn,
        &'a [u8],
        &'b pgyard_wire::pgoutput::PgOutputMessage<'a>,
    ),
    /// The server's report of how far it has sent WAL.
    Received(pgyard_types::Lsn),
}

/// Walks a backend capture: skips the one-byte encryption answer, follows the connection into
/// CopyBoth, and hands every XLogData's decoded pgoutput message and every WAL end reported to
/// `each`.
fn feed_capture(
    capture: &[u8],
    mut each: impl FnMut(Fed<'_, '_>) -> Result<(), String>,
) -> Result<(), String> {
    use pgyard_wire::pgoutput::{PgOutputDecoder, ProtoVersion};
    use pgyard_wire::replication::ReplicationMessage;
    // A capture may open with the one-byte answer to SSLRequest/GSSENCRequest; a typed frame
    // never starts with a length word whose first byte is non-zero after `N`.
    let mut start = 0;
    while start < 2
        && matches!(capture.get(start), Some(b'N' | b'S' | b'G'))
        && capture.get(start + 1) != Some(&0)
    {
        start += 1;
    }
    let mut copy_both = false;
    let mut decoder = PgOutputDecoder::new(ProtoVersion::MAX);
    let mut pos = start;
    for frame in pgyard_wire::frame::frames(&capture[start..], 1 << 30) {
        let frame = frame.map_err(|e| format!("malformed capture at byte offset {pos}: {e}"))?;
        let at = pos;
        pos += frame.body.len() + 5;
        match frame.tag {
            b'W' => copy_both = true,
            b'd' if copy_both => {
                let msg = ReplicationMessage::decode_from_server(frame.body)
                    .map_err(|e| format!("replication message at byte offset {at}: {e}"))?;
                match msg {
                    ReplicationMessage::XLogData(x) => {
                        let m = decoder
                            .decode(x.data)
                            .map_err(|e| format!("pgoutput message at byte offset {at}: {e}"))?;
                        each(Fed::Message(x.start, x.data, &m))?;
                        each(Fed::Received(x.end))?;
                    }
                    ReplicationMessage::PrimaryKeepalive(k) => each(Fed::Received(k.wal_end))?,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    if pos != capture.len() {
        return Err(format!(
            "the capture ends inside a message at byte offset {pos}"
        ));
    }
    Ok(())
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
        "budget_bytes": info.budget_bytes,
    })
}

fn text_report(info: &Inspection) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(o, "flush_lsn   {}", info.flush_lsn);
    let _ = writeln!(o, "apply_lsn   {}", info.apply_lsn);
    let _ = writeln!(o, "resume_lsn  {}", info.resume_lsn);
    let _ = writeln!(o, "disk_bytes  {}", info.disk_bytes);
    let _ = writeln!(o, "budget_bytes {}", info.budget_bytes);
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
