//! `pgyard slotsync`: the slot synchronization engine on JSON snapshots. Adapter: reads the
//! input file and hands it to the pure `pgyard-slotsync` crate.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;

/// Slot synchronization to physical standbys, as PostgreSQL 18 decides it.
#[derive(Subcommand, Debug)]
pub enum SlotsyncCommand {
    /// Predict one `pg_sync_replication_slots()` call: actions and the standby's slots after.
    Plan {
        /// JSON file with `remote_slots`, `local_slots` and `standby` (optionally with the
        /// standby's `serialized_snapshots`, `running_xacts`, `xacts` and the previous call's
        /// `effective_catalog_xmins`; see docs/slotsync.md).
        #[arg(long)]
        input: PathBuf,
    },
}

/// Runs a `slotsync` subcommand; exit 0 on success, 1 where the server raises an error
/// (its text on standard error), 2 for unreadable input.
pub fn run(cmd: SlotsyncCommand) -> ExitCode {
    match cmd {
        SlotsyncCommand::Plan { input } => {
            let text = match std::fs::read_to_string(&input) {
                Ok(t) => t,
                Err(e) => {
                    eprintln!("pgyard slotsync plan: {}: {e}", input.display());
                    return ExitCode::from(2);
                }
            };
            let run = pgyard_slotsync::run_plan_text(&text);
            let _ = std::io::stdout().write_all(run.stdout.as_bytes());
            let _ = std::io::stderr().write_all(run.stderr.as_bytes());
            ExitCode::from(run.exit_code)
        }
    }
}
