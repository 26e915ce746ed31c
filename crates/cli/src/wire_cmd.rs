//! `pgyard wire`: the FE/BE protocol codec on raw captures. Adapter: reads the file, lets the
//! pure `pgyard-wire` crate describe every message, and prints the descriptions as JSON lines.

use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Subcommand, ValueEnum};
use pgyard_wire::describe::{self, Description, Side, Value, WalkOptions};
use serde_json::{Map, Value as Json};

/// Which direction of a connection a capture holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum SideArg {
    /// What the client sent (starts with the startup packet).
    Frontend,
    /// What the server sent (may start with the one-byte SSL/GSSENC answer).
    Backend,
}

/// The PostgreSQL frontend/backend protocol, decoded from raw captures.
#[derive(Subcommand, Debug)]
pub enum WireCommand {
    /// Decode a raw one-direction capture from its first byte: one JSON object per message.
    Decode {
        /// Which side sent the bytes.
        #[arg(long, value_enum)]
        side: SideArg,
        /// Logical replication: also print each CopyData payload (`"layer": "replication"`)
        /// and each XLogData's pgoutput message (`"layer": "pgoutput"`) as their own lines.
        #[arg(long)]
        replication: bool,
        /// The capture file.
        file: PathBuf,
    },
}

/// Runs a `wire` subcommand: exit 0 when the whole capture decoded, 1 for a malformed stream
/// (the lines before the error are printed; the error names the byte offset), 2 for an
/// unreadable file.
pub fn run(cmd: WireCommand) -> ExitCode {
    match cmd {
        WireCommand::Decode {
            side,
            replication,
            file,
        } => {
            let bytes = match std::fs::read(&file) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("pgyard wire decode: {}: {e}", file.display());
                    return ExitCode::from(2);
                }
            };
            let options = WalkOptions {
                side: match side {
                    SideArg::Frontend => Side::Frontend,
                    SideArg::Backend => Side::Backend,
                },
                replication,
            };
            let stdout = io::stdout();
            let mut out = BufWriter::new(stdout.lock());
            let mut write_error: Option<io::Error> = None;
            let walked = describe::walk(&bytes, options, |d| {
                if write_error.is_none() {
                    if let Err(e) = writeln!(out, "{}", render(&d)) {
                        write_error = Some(e);
                    }
                }
            });
            let flushed = out.flush();
            if let Some(e) = write_error.or(flushed.err()) {
                if e.kind() == io::ErrorKind::BrokenPipe {
                    return ExitCode::SUCCESS;
                }
                eprintln!("pgyard wire decode: writing the output: {e}");
                return ExitCode::from(2);
            }
            match walked {
                Ok(_) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("pgyard wire decode: {}: {e}", file.display());
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// One description as a JSON object: `tag`, `len`, `type`, `layer`, `offset`, then the fields.
pub fn render(d: &Description) -> Json {
    let mut m = Map::new();
    m.insert(
        "tag".into(),
        d.tag
            .map_or(Json::Null, |t| Json::String(char::from(t).to_string())),
    );
    m.insert("len".into(), d.len.map_or(Json::Null, Json::from));
    m.insert("type".into(), Json::String(d.type_name.into()));
    m.insert("layer".into(), Json::String(d.layer.name().into()));
    m.insert("offset".into(), Json::from(d.offset));
    for (k, v) in &d.fields {
        m.insert((*k).into(), json(v));
    }
    Json::Object(m)
}

fn json(v: &Value) -> Json {
    match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(n) => Json::from(*n),
        Value::Text(s) => Json::String(s.clone()),
        Value::List(items) => Json::Array(items.iter().map(json).collect()),
        Value::Map(pairs) => {
            Json::Object(pairs.iter().map(|(k, v)| (k.clone(), json(v))).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_header_then_fields() {
        let d = Description {
            layer: describe::Layer::Backend,
            offset: 7,
            tag: Some(b'S'),
            len: Some(25),
            type_name: "ParameterStatus",
            fields: vec![
                ("name", Value::Text("TimeZone".into())),
                ("value", Value::Text("UTC".into())),
            ],
        };
        assert_eq!(
            render(&d).to_string(),
            r#"{"tag":"S","len":25,"type":"ParameterStatus","layer":"backend","offset":7,"name":"TimeZone","value":"UTC"}"#
        );
    }
}
