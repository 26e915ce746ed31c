//! `pgyard`: the command line of the pgyard workspace. This is an adapter: it reads the process
//! environment, files and clocks, and hands them to the pure crates.

mod allocator;
mod connect_cmd;
mod conninfo_cmd;
mod delayq_apply;
mod delayq_cmd;
mod delayq_control;
mod delayq_copy;
mod delayq_follow;
mod delayq_loop;
mod delayq_run;
mod delayq_sub;
mod logging;
mod memory;
mod proxy_cmd;
mod sim_cmd;
mod sim_merge;
mod slotsync_cmd;
mod wire_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// pgyard: PostgreSQL connection strings, failover, wire codec, slot sync and delayed apply.
#[derive(Parser, Debug)]
#[command(name = "pgyard", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the deterministic simulator (the main job).
    Sim(sim_cmd::SimArgs),
    /// Connect through the failover machine and run SQL (rows like `psql -At`).
    Connect(connect_cmd::ConnectArgs),
    /// Connection strings, parsed exactly as libpq 18 parses them.
    Conninfo {
        #[command(subcommand)]
        command: conninfo_cmd::ConninfoCommand,
    },
    /// The crash-safe delay queue for time-delayed logical replication.
    Delayq {
        #[command(subcommand)]
        command: delayq_cmd::DelayqCommand,
    },
    /// A connection pooler that honours the middleware message, with failover built in.
    Proxy(proxy_cmd::ProxyArgs),
    /// Logical slot synchronization, decided as PostgreSQL 18 decides it.
    Slotsync {
        #[command(subcommand)]
        command: slotsync_cmd::SlotsyncCommand,
    },
    /// The FE/BE protocol codec on raw captures.
    Wire {
        #[command(subcommand)]
        command: wire_cmd::WireCommand,
    },
}

/// mimalloc instead of the system allocator: the simulator, the main job, makes many small
/// short-lived allocations, and this alone is worth a fifth of its speed.
#[global_allocator]
static GLOBAL: allocator::Allocator = allocator::Allocator;

fn main() -> ExitCode {
    memory::no_transparent_huge_pages();
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(args) => sim_cmd::run(args),
        Command::Connect(args) => connect_cmd::run(args),
        Command::Conninfo { command } => conninfo_cmd::run(command),
        Command::Proxy(args) => proxy_cmd::run(args),
        Command::Slotsync { command } => slotsync_cmd::run(command),
        Command::Delayq { command } => delayq_cmd::run(command),
        Command::Wire { command } => wire_cmd::run(command),
    }
}
