//! The replication commands' SQL text, with every name and value quoted.

use pgyard_types::Lsn;

/// The `IDENTIFY_SYSTEM` command.
pub const IDENTIFY_SYSTEM: &str = "IDENTIFY_SYSTEM";

/// Quotes a name as an identifier: `"..."` with inner `"` doubled.
pub fn quote_identifier(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('"');
    for c in name.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    out.push('"');
    out
}

/// Quotes a value as a string literal: `'...'` with inner `'` doubled (the replication
/// grammar has no backslash escapes).
pub fn quote_literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        if c == '\'' {
            out.push('\'');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// pgoutput's `streaming` option.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Streaming {
    /// Whole transactions only, at commit (not sent).
    #[default]
    Off,
    /// Stream large in-progress transactions (v2+).
    On,
    /// Stream for parallel apply: Stream Abort carries abort LSN and time (v4).
    Parallel,
}

/// pgoutput's `origin` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OriginFilter {
    /// Only changes without a replication origin.
    None,
    /// Every change.
    Any,
}

/// The options of `START_REPLICATION … LOGICAL` understood by pgoutput.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PgOutputOptions {
    /// `proto_version` (1 to 4).
    pub proto_version: u32,
    /// `publication_names`, sent as a quoted identifier list.
    pub publication_names: Vec<String>,
    /// `binary`: values in binary send format.
    pub binary: bool,
    /// `messages`: send `pg_logical_emit_message` messages.
    pub messages: bool,
    /// `streaming`.
    pub streaming: Streaming,
    /// `two_phase`: decode prepared transactions at PREPARE.
    pub two_phase: bool,
    /// `origin`; `None` leaves the server default (`any`).
    pub origin: Option<OriginFilter>,
}

impl PgOutputOptions {
    /// Options with the given version and publications and everything else off.
    pub fn new(proto_version: u32, publication_names: &[&str]) -> Self {
        PgOutputOptions {
            proto_version,
            publication_names: publication_names.iter().map(|s| (*s).to_owned()).collect(),
            binary: false,
            messages: false,
            streaming: Streaming::Off,
            two_phase: false,
            origin: None,
        }
    }

    /// `(name, value)` pairs, in the order the built-in subscriber sends them; options left
    /// at their defaults are omitted.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = vec![("proto_version", self.proto_version.to_string())];
        match self.streaming {
            Streaming::Off => {}
            Streaming::On => pairs.push(("streaming", "on".to_owned())),
            Streaming::Parallel => pairs.push(("streaming", "parallel".to_owned())),
        }
        if self.two_phase {
            pairs.push(("two_phase", "on".to_owned()));
        }
        match self.origin {
            None => {}
            Some(OriginFilter::None) => pairs.push(("origin", "none".to_owned())),
            Some(OriginFilter::Any) => pairs.push(("origin", "any".to_owned())),
        }
        let names: Vec<String> = self
            .publication_names
            .iter()
            .map(|n| quote_identifier(n))
            .collect();
        pairs.push(("publication_names", names.join(",")));
        if self.binary {
            pairs.push(("binary", "true".to_owned()));
        }
        if self.messages {
            pairs.push(("messages", "true".to_owned()));
        }
        pairs
    }
}

/// `START_REPLICATION SLOT "slot" LOGICAL X/Y (name 'value', ...)` with any plugin options.
pub fn start_replication_logical(slot: &str, start: Lsn, options: &[(&str, &str)]) -> String {
    let mut sql = format!(
        "START_REPLICATION SLOT {} LOGICAL {start}",
        quote_identifier(slot)
    );
    if !options.is_empty() {
        let parts: Vec<String> = options
            .iter()
            .map(|(name, value)| format!("{} {}", option_name(name), quote_literal(value)))
            .collect();
        sql.push_str(" (");
        sql.push_str(&parts.join(", "));
        sql.push(')');
    }
    sql
}

/// `START_REPLICATION SLOT "slot" LOGICAL X/Y (...)` with pgoutput's options.
pub fn start_replication_pgoutput(slot: &str, start: Lsn, options: &PgOutputOptions) -> String {
    let pairs = options.to_pairs();
    let refs: Vec<(&str, &str)> = pairs.iter().map(|(n, v)| (*n, v.as_str())).collect();
    start_replication_logical(slot, start, &refs)
}

/// `START_REPLICATION [SLOT "slot"] PHYSICAL X/Y [TIMELINE tli]`.
pub fn start_replication_physical(slot: Option<&str>, start: Lsn, timeline: Option<u32>) -> String {
    let mut sql = String::from("START_REPLICATION");
    if let Some(slot) = slot {
        sql.push_str(" SLOT ");
        sql.push_str(&quote_identifier(slot));
    }
    sql.push_str(&format!(" PHYSICAL {start}"));
    if let Some(tli) = timeline {
        sql.push_str(&format!(" TIMELINE {tli}"));
    }
    sql
}

/// What `CREATE_REPLICATION_SLOT` does with the slot's initial snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SnapshotAction {
    /// `'export'`: export it for other sessions (the default).
    Export,
    /// `'use'`: use it in the current transaction.
    Use,
    /// `'nothing'`: neither.
    Nothing,
}

/// The kind of slot `CREATE_REPLICATION_SLOT` creates, with its kind's options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SlotKind {
    /// `PHYSICAL`.
    Physical {
        /// `RESERVE_WAL`: reserve WAL from now on.
        reserve_wal: bool,
    },
    /// `LOGICAL plugin`.
    Logical {
        /// The output plugin, e.g. `pgoutput`.
        plugin: String,
        /// `TWO_PHASE`: decode prepared transactions.
        two_phase: bool,
        /// `FAILOVER`: synchronize the slot to standbys (17+).
        failover: bool,
        /// `SNAPSHOT`; `None` leaves the server default (`export`).
        snapshot: Option<SnapshotAction>,
    },
}

/// `CREATE_REPLICATION_SLOT "slot" [TEMPORARY] {PHYSICAL | LOGICAL "plugin"} [(options)]`.
pub fn create_replication_slot(slot: &str, temporary: bool, kind: &SlotKind) -> String {
    let mut sql = format!("CREATE_REPLICATION_SLOT {}", quote_identifier(slot));
    if temporary {
        sql.push_str(" TEMPORARY");
    }
    let mut options: Vec<String> = Vec::new();
    match kind {
        SlotKind::Physical { reserve_wal } => {
            sql.push_str(" PHYSICAL");
            if *reserve_wal {
                options.push("RESERVE_WAL".to_owned());
            }
        }
        SlotKind::Logical {
            plugin,
            two_phase,
            failover,
            snapshot,
        } => {
            sql.push_str(" LOGICAL ");
            sql.push_str(&quote_identifier(plugin));
            if *two_phase {
                options.push("TWO_PHASE".to_owned());
            }
            if *failover {
                options.push("FAILOVER".to_owned());
            }
            if let Some(s) = snapshot {
                let value = match s {
                    SnapshotAction::Export => "export",
                    SnapshotAction::Use => "use",
                    SnapshotAction::Nothing => "nothing",
                };
                options.push(format!("SNAPSHOT {}", quote_literal(value)));
            }
        }
    }
    if !options.is_empty() {
        sql.push_str(" (");
        sql.push_str(&options.join(", "));
        sql.push(')');
    }
    sql
}

/// `READ_REPLICATION_SLOT "slot"`.
pub fn read_replication_slot(slot: &str) -> String {
    format!("READ_REPLICATION_SLOT {}", quote_identifier(slot))
}

/// `DROP_REPLICATION_SLOT "slot" [WAIT]`.
pub fn drop_replication_slot(slot: &str, wait: bool) -> String {
    let mut sql = format!("DROP_REPLICATION_SLOT {}", quote_identifier(slot));
    if wait {
        sql.push_str(" WAIT");
    }
    sql
}

/// An option name as is when it is a plain lower-case word, else quoted.
fn option_name(name: &str) -> String {
    let plain = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if plain {
        name.to_owned()
    } else {
        quote_identifier(name)
    }
}
