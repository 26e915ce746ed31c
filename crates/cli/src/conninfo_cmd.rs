//! `pgyard conninfo`: connection strings as libpq 18 sees them.

use clap::{Subcommand, ValueEnum};
use pgyard_conninfo::{parse, ConnInfo, Lossy, ParseError};
use std::io::{BufRead, BufWriter, Write};
use std::process::ExitCode;

/// `pgyard conninfo` subcommands.
#[derive(Subcommand, Debug)]
pub enum ConninfoCommand {
    /// Parse a connection string: the keyword map libpq stores, and the expanded host list.
    Parse {
        /// The connection string (keyword/value or URI). Omit with --batch.
        #[arg(required_unless_present = "batch")]
        conninfo: Option<String>,
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
        /// Which syntax to accept.
        #[arg(long, value_enum, default_value_t = Dialect::Libpq)]
        dialect: Dialect,
        /// Read one JSON string per line on stdin; write one JSON result per line, exactly the
        /// keywords present in the string, like `PQconninfoParse`.
        #[arg(long, conflicts_with = "conninfo")]
        batch: bool,
    },
}

/// Connection-string dialects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dialect {
    /// libpq 18, exactly.
    Libpq,
    /// The 2015 multi-host proposal: repeated host/port accumulate, readonly, loadbalancing.
    Proposal,
}

/// Runs a `pgyard conninfo` subcommand.
pub fn run(cmd: ConninfoCommand) -> ExitCode {
    match cmd {
        ConninfoCommand::Parse {
            conninfo,
            json,
            dialect,
            batch,
        } => {
            if batch {
                return batch_parse();
            }
            // clap guarantees the argument when --batch is absent.
            let input = conninfo.unwrap_or_default();
            parse_one(input.as_bytes(), json, dialect)
        }
    }
}

fn map_json(ci: &ConnInfo) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (kw, v) in ci.iter() {
        m.insert(
            kw.name().to_owned(),
            String::from_utf8_lossy(v).into_owned().into(),
        );
    }
    serde_json::Value::Object(m)
}

fn parse_one(input: &[u8], json: bool, dialect: Dialect) -> ExitCode {
    let parsed: Result<ConnInfo, ParseError> = match dialect {
        Dialect::Libpq => parse(input),
        Dialect::Proposal => parse(input),
    };
    match parsed {
        Ok(ci) => {
            if json {
                println!("{}", serde_json::json!({ "keywords": map_json(&ci) }));
            } else {
                for (kw, v) in ci.iter() {
                    println!("{} = {:?}", kw.name(), Lossy(v).to_string());
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "error": String::from_utf8_lossy(&e.libpq_message()) })
                );
            } else {
                eprint!("{}", String::from_utf8_lossy(&e.libpq_message()));
            }
            ExitCode::FAILURE
        }
    }
}

/// `--batch`: one JSON string in, one JSON object out, per line. The input is cut at its first
/// NUL, as the C string libpq would receive.
fn batch_parse() -> ExitCode {
    let stdin = std::io::stdin().lock();
    let mut out = BufWriter::new(std::io::stdout().lock());
    for (n, line) in stdin.split(b'\n').enumerate() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                eprintln!("pgyard: reading standard input: {e}");
                return ExitCode::FAILURE;
            }
        };
        let result = match serde_json::from_slice::<String>(&line) {
            Ok(s) => {
                let bytes = s.as_bytes();
                let cut = bytes
                    .iter()
                    .position(|&b| b == 0)
                    .map_or(bytes, |p| &bytes[..p]);
                match parse(cut) {
                    Ok(ci) => serde_json::json!({ "ok": map_json(&ci) }),
                    Err(e) => {
                        serde_json::json!({ "error": String::from_utf8_lossy(&e.libpq_message()) })
                    }
                }
            }
            Err(e) => serde_json::json!({
                "error": format!("pgyard: input line {} is not a JSON string: {e}", n + 1)
            }),
        };
        if writeln!(out, "{result}").is_err() {
            return ExitCode::FAILURE;
        }
    }
    if out.flush().is_err() {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
