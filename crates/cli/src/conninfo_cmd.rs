//! `pgyard conninfo`: connection strings as libpq 18 sees them.

use clap::{Subcommand, ValueEnum};
use pgyard_blocking::RealInputs;
use pgyard_conninfo::typed::ConnectConfig;
use pgyard_conninfo::{configure, keywords, parse, Configured, ConnInfo, Lossy};
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
    let parsed = match dialect {
        Dialect::Libpq => parse(input).map(|ci| (ci, None)),
        Dialect::Proposal => {
            pgyard_conninfo::proposal::parse(input).map(|p| (p.conninfo, Some(p.strategy)))
        }
    };
    let (ci, dialect_strategy) = match parsed {
        Ok(p) => p,
        Err(e) => {
            if json {
                println!(
                    "{}",
                    serde_json::json!({ "error": String::from_utf8_lossy(&e.libpq_message()) })
                );
            } else {
                eprint!("{}", String::from_utf8_lossy(&e.libpq_message()));
            }
            return ExitCode::FAILURE;
        }
    };
    let real = RealInputs::read(&ci);
    let configured = configure(ci.clone(), &real.env, &real.files);
    let mut ok = true;
    let mut out = serde_json::Map::new();
    out.insert("keywords".into(), map_json(&ci));
    match &configured {
        Ok(c) => {
            let mut config = c.config.clone();
            if let Some(s) = dialect_strategy {
                config.set_strategy(s);
            }
            out.insert("hosts".into(), hosts_json(&config));
            out.insert("resolved".into(), resolved_json(c));
            out.insert(
                "strategy".into(),
                format!("{:?}", config.strategy()).to_lowercase().into(),
            );
            for w in &c.warnings {
                eprint!("{}", String::from_utf8_lossy(&w.libpq_message()));
            }
        }
        Err(e) => {
            ok = false;
            out.insert(
                "config_error".into(),
                String::from_utf8_lossy(&e.libpq_message())
                    .into_owned()
                    .into(),
            );
        }
    }
    if json {
        println!("{}", serde_json::Value::Object(out));
    } else {
        println!("keywords (as written):");
        for (kw, v) in ci.iter() {
            println!("  {} = {:?}", kw.name(), Lossy(v).to_string());
        }
        match &configured {
            Ok(_) => {
                println!("hosts (in connect order before any load-balance shuffle):");
                if let Some(serde_json::Value::Array(hosts)) = out.get("hosts") {
                    for (i, h) in hosts.iter().enumerate() {
                        println!("  {}: {}", i + 1, h);
                    }
                }
                if let Some(s) = out.get("strategy") {
                    println!("strategy: {}", s.as_str().unwrap_or_default());
                }
            }
            Err(e) => eprint!("{}", String::from_utf8_lossy(&e.libpq_message())),
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn lossy(b: Option<&[u8]>) -> serde_json::Value {
    b.map_or(serde_json::Value::Null, |b| {
        String::from_utf8_lossy(b).into_owned().into()
    })
}

fn hosts_json(config: &ConnectConfig) -> serde_json::Value {
    let slots = config
        .slots()
        .iter()
        .map(|s| {
            let mut m = serde_json::Map::new();
            m.insert("host".into(), lossy(s.host()));
            m.insert("hostaddr".into(), lossy(s.hostaddr()));
            m.insert("port_raw".into(), lossy(s.port_raw()));
            m.insert("kind".into(), format!("{:?}", s.kind()).into());
            match s.port() {
                Ok(p) => m.insert("port".into(), p.into()),
                Err(e) => m.insert("port_error".into(), e.error().to_string().into()),
            };
            if let Some(path) = s.unix_socket_path() {
                match path {
                    Ok(p) => m.insert("socket".into(), lossy(Some(&p))),
                    Err(e) => m.insert("socket_error".into(), e.error().to_string().into()),
                };
            }
            m.insert("password_from_file".into(), s.password().is_some().into());
            serde_json::Value::Object(m)
        })
        .collect();
    serde_json::Value::Array(slots)
}

fn resolved_json(c: &Configured) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for (kw, v) in c.config.conninfo().iter() {
        let source = c.sources.get(kw).map(|s| s.to_string());
        let value = if kw.info().display == keywords::Display::Secret {
            "********".into()
        } else {
            lossy(Some(v))
        };
        m.insert(
            kw.name().to_owned(),
            serde_json::json!({ "value": value, "source": source }),
        );
    }
    serde_json::Value::Object(m)
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
