//! `pgyard connect`: connect as libpq would (or race), optionally run SQL and print its rows
//! like `psql -At` with tab-separated columns, and explain every attempt on standard error.

use std::io::Write;
use std::process::ExitCode;

use pgyard_blocking::{ConnectOptions, Strategy};

/// Arguments of `pgyard connect`.
#[derive(clap::Args, Debug)]
pub struct ConnectArgs {
    /// Connection string: `key=value` pairs or a `postgresql://` URI.
    pub conninfo: String,
    /// SQL to run with the simple query protocol; rows are printed one a line, columns
    /// separated by tabs, NULL as an empty string.
    #[arg(short = 'c', long = "command")]
    pub command: Option<String>,
    /// How to walk the host list: libpq's `sequential` walk or staggered `race`.
    #[arg(long, value_enum)]
    pub strategy: Option<StrategyArg>,
    /// Seed for load-balancing shuffles and SCRAM nonces (default: from the OS).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write each attempt (host, address, outcome, elapsed) to standard error.
    #[arg(long)]
    pub explain: bool,
    /// A middleware message `CLASS:PAYLOAD` sent before the command (repeatable; e.g.
    /// `2147483649:standby`, pgyard proxy's ROUTE). Asks for middleware messages at connect
    /// and fails unless a middleware consumes them.
    #[arg(long = "middleware", value_parser = parse_middleware)]
    pub middleware: Vec<(i64, String)>,
}

/// `CLASS:PAYLOAD`, CLASS a non-negative integer.
fn parse_middleware(s: &str) -> Result<(i64, String), String> {
    let (class, payload) = s
        .split_once(':')
        .ok_or_else(|| format!("expected CLASS:PAYLOAD, got {s:?}"))?;
    let class: i64 = class
        .parse()
        .ok()
        .filter(|c| *c >= 0)
        .ok_or_else(|| format!("CLASS must be a non-negative integer, got {class:?}"))?;
    Ok((class, payload.to_owned()))
}

/// `--strategy` values.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrategyArg {
    /// One attempt at a time, as libpq.
    Sequential,
    /// Staggered parallel attempts; the first qualifying server wins.
    Race,
}

/// Runs `pgyard connect`. Exit status 0 on success, 1 when the SQL fails, 2 when the
/// connection cannot be made (as psql).
pub fn run(args: ConnectArgs) -> ExitCode {
    let options = ConnectOptions {
        seed: args.seed,
        strategy: args.strategy.map(|s| match s {
            StrategyArg::Sequential => Strategy::Sequential,
            StrategyArg::Race => Strategy::Race,
        }),
        middleware: !args.middleware.is_empty(),
        ..ConnectOptions::default()
    };
    let mut log = Vec::new();
    let connected = pgyard_blocking::connect_logged(&args.conninfo, &options, &mut log);
    if args.explain {
        explain(&log);
    }
    let mut session = match connected {
        Ok(s) => s,
        Err(e) => {
            eprint!("pgyard: error: {}", e.libpq_message());
            return ExitCode::from(2);
        }
    };
    for (class, payload) in &args.middleware {
        if let Err(e) = session.send_middleware(*class, payload.as_bytes()) {
            eprintln!("pgyard: error: {e}");
            return ExitCode::from(2);
        }
    }
    let Some(sql) = args.command else {
        return ExitCode::SUCCESS;
    };
    match session.simple_query(&sql) {
        Ok(rows) => {
            let mut out = std::io::stdout().lock();
            for row in rows {
                let line: Vec<&str> = row.iter().map(|v| v.as_deref().unwrap_or("")).collect();
                if writeln!(out, "{}", line.join("\t")).is_err() {
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprint!("{}", e.libpq_message());
            ExitCode::FAILURE
        }
    }
}

fn explain(attempts: &[pgyard_blocking::Attempt]) {
    for (i, a) in attempts.iter().enumerate() {
        eprintln!(
            "attempt {}: host {} address {}: {} ({:.1} ms, started at {:.1} ms)",
            i + 1,
            a.host,
            a.address(),
            a.outcome,
            a.elapsed().as_secs_f64() * 1e3,
            a.started.as_secs_f64() * 1e3,
        );
    }
}
