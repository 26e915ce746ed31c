//! `pgyard slotsync`: the slot synchronization engine on JSON snapshots (`plan`), on live
//! servers (`snapshot`, `check`). Adapter: reads files or runs the snapshot queries over
//! pgyard's blocking driver and hands the results to the pure `pgyard-slotsync` crate.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use pgyard_blocking::{Error, Session};
use pgyard_slotsync::check::{check, Report};
use pgyard_slotsync::snapshot::{collect, QueryError, Snapshot, Source};

/// Slot synchronization to physical standbys, as PostgreSQL 17 and 18 decide it.
#[derive(Subcommand, Debug)]
pub enum SlotsyncCommand {
    /// Predict one `pg_sync_replication_slots()` call: actions and the standby's slots after.
    Plan {
        /// JSON file with `remote_slots`, `local_slots` and `standby` (optionally with the
        /// standby's `server_version_num`, `serialized_snapshots`, `running_xacts`, `xacts`
        /// and the previous call's `effective_catalog_xmins`; see docs/slotsync.md).
        /// `pgyard slotsync snapshot` writes such a file.
        #[arg(long)]
        input: PathBuf,
    },
    /// Read everything `plan --input` takes from the live primary and standby, as JSON.
    Snapshot {
        /// Connection string of the primary.
        #[arg(long)]
        primary: String,
        /// Connection string of the standby.
        #[arg(long)]
        standby: String,
    },
    /// Would every failover slot's subscribers carry on if the standby were promoted now?
    /// Exit 0: all ready; 1: some not ready; 2: cannot connect or bad input.
    Check {
        /// Connection string of the primary (leave out when it is gone: the verdict then
        /// uses what the standby knows and says what it could not check).
        #[arg(long)]
        primary: Option<String>,
        /// Connection string of the standby (or use `--input`).
        #[arg(long, required_unless_present = "input")]
        standby: Option<String>,
        /// Check a snapshot file (`pgyard slotsync snapshot` output) instead of live servers.
        #[arg(long, conflicts_with_all = ["primary", "standby", "watch"])]
        input: Option<PathBuf>,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
        /// Check again every SECS seconds until interrupted.
        #[arg(long, value_name = "SECS")]
        watch: Option<f64>,
    },
}

/// Runs a `slotsync` subcommand; exit 0 on success, 1 where the server raises an error
/// (`plan`) or a slot is not ready (`check`), 2 for unreadable input or no connection.
pub fn run(cmd: SlotsyncCommand) -> ExitCode {
    match cmd {
        SlotsyncCommand::Plan { input } => {
            let Some(text) = read_input("plan", &input) else {
                return ExitCode::from(2);
            };
            let run = pgyard_slotsync::run_plan_text(&text);
            let _ = std::io::stdout().write_all(run.stdout.as_bytes());
            let _ = std::io::stderr().write_all(run.stderr.as_bytes());
            ExitCode::from(run.exit_code)
        }
        SlotsyncCommand::Snapshot { primary, standby } => {
            match take_snapshot(Some(&primary), &standby) {
                Ok(snap) => {
                    println!("{}", pretty(&snap.to_json()));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("pgyard slotsync snapshot: {e}");
                    ExitCode::from(2)
                }
            }
        }
        SlotsyncCommand::Check {
            primary,
            standby,
            input,
            json,
            watch,
        } => match (input, standby) {
            (Some(path), _) => check_file(&path, json),
            (None, Some(standby)) => check_live(primary.as_deref(), &standby, json, watch),
            (None, None) => ExitCode::from(2),
        },
    }
}

fn read_input(cmd: &str, path: &PathBuf) -> Option<String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("pgyard slotsync {cmd}: {}: {e}", path.display());
            None
        }
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default()
}

/// A live server as the snapshot code's [`Source`].
struct Live(Session);

impl Source for Live {
    fn value(&mut self, sql: &str) -> Result<Option<String>, QueryError> {
        match self.0.simple_query(sql) {
            Ok(rows) => Ok(rows
                .into_iter()
                .next()
                .and_then(|r| r.into_iter().next())
                .flatten()),
            Err(Error::Server { sqlstate, text }) => Err(QueryError {
                sqlstate: Some(sqlstate.to_string()),
                message: first_line(&text),
            }),
            Err(e) => Err(QueryError {
                sqlstate: None,
                message: e.to_string(),
            }),
        }
    }
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    line.strip_prefix("ERROR:  ").unwrap_or(line).to_owned()
}

/// Connects to both servers (primary first) and reads a snapshot.
fn take_snapshot(primary: Option<&str>, standby: &str) -> Result<Snapshot, String> {
    let connect = |role: &str, conninfo: &str| {
        pgyard_blocking::connect(conninfo)
            .map(Live)
            .map_err(|e| format!("cannot connect to the {role}: {}", e.to_string().trim_end()))
    };
    let mut p = primary.map(|c| connect("primary", c)).transpose()?;
    let mut s = connect("standby", standby)?;
    let snap = collect(p.as_mut().map(|p| p as &mut dyn Source), &mut s);
    for live in p.into_iter().chain([s]) {
        live.0.close();
    }
    snap.map_err(|e| e.to_string())
}

fn print_report(report: &Report, json: bool) {
    if json {
        println!("{}", pretty(&report.to_json()));
    } else {
        print!("{}", report.to_text());
    }
    let _ = std::io::stdout().flush();
}

fn check_file(path: &PathBuf, json: bool) -> ExitCode {
    let Some(text) = read_input("check", path) else {
        return ExitCode::from(2);
    };
    let snap = serde_json::from_str(&text)
        .map_err(|e| e.to_string())
        .and_then(|v| Snapshot::from_json(&v).map_err(|e| e.to_string()));
    match snap {
        Ok(snap) => {
            let report = check(&snap);
            print_report(&report, json);
            ExitCode::from(report.exit_code())
        }
        Err(e) => {
            eprintln!("pgyard slotsync check: {}: {e}", path.display());
            ExitCode::from(2)
        }
    }
}

fn check_live(primary: Option<&str>, standby: &str, json: bool, watch: Option<f64>) -> ExitCode {
    let pause = match watch.map(Duration::try_from_secs_f64) {
        None => None,
        Some(Ok(d)) if !d.is_zero() => Some(d),
        Some(_) => {
            eprintln!("pgyard slotsync check: --watch needs a positive number of seconds");
            return ExitCode::from(2);
        }
    };
    loop {
        let code = match take_snapshot(primary, standby) {
            Ok(snap) => {
                let report = check(&snap);
                print_report(&report, json);
                report.exit_code()
            }
            Err(e) => {
                eprintln!("pgyard slotsync check: {e}");
                2
            }
        };
        match pause {
            None => return ExitCode::from(code),
            Some(d) => {
                if !json {
                    println!();
                }
                std::thread::sleep(d);
            }
        }
    }
}
