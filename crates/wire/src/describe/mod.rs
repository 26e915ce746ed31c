//! Readable descriptions of a one-direction capture, for dumps and golden tests.
//!
//! [`walk`] decodes a raw capture of one side of a connection from its first byte and hands
//! out one [`Description`] per message: the type byte, the length word, the message's name as
//! the PostgreSQL protocol documentation spells it, and its fields as small dependency-free
//! [`Value`]s (bytes become UTF-8-lossy text, except values that are binary by nature, which
//! become lowercase hex). With [`WalkOptions::replication`] the CopyData payloads of a logical
//! replication stream are described as their own layer, and so are the pgoutput messages
//! inside XLogData; pgoutput is read from the server side alone, tracking Stream Start and
//! Stream Stop to know which changes carry an xid.
//!
//! What one side alone cannot know is inferred: the backend side starts with a one-byte
//! SSL/GSSENC answer when its first byte is `N`, `S` or `G` (a second answer may follow when a
//! client tried GSSENC and then SSL); a frontend `p` message is a SASLInitialResponse when it
//! names a SASL mechanism (then SASLResponse follows), else a PasswordMessage when it is one
//! string, else a GSSResponse. Errors carry the absolute byte offset in the capture.
//!
//! It stays in this crate, not in the CLI that prints it, because `tests/golden.rs` counts the
//! described messages of every capture to check that each message type was seen.

use std::fmt;

use pgyard_types::{Lsn, PgTimestamp};

use crate::frame::{FormatCodes, Oids, Values};

mod messages;
mod streaming;
mod walker;

pub use messages::{backend, frontend};
pub use streaming::{pgoutput, replication};

/// A field value: the JSON-like shapes a dump needs, with no serializer attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Value {
    /// Absent / SQL NULL.
    Null,
    /// A flag.
    Bool(bool),
    /// A number.
    Int(i64),
    /// Text (bytes rendered UTF-8-lossy, LSNs as `X/X`, binary data as hex).
    Text(String),
    /// A list.
    List(Vec<Value>),
    /// Named values in order.
    Map(Vec<(String, Value)>),
}

/// Which layer of the capture a description belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layer {
    /// A frontend (client → server) protocol message.
    Frontend,
    /// A backend (server → client) protocol message.
    Backend,
    /// The payload of a CopyData of a replication connection.
    Replication,
    /// A pgoutput message inside XLogData.
    PgOutput,
}

impl Layer {
    /// The layer's name in dumps: `frontend`, `backend`, `replication`, `pgoutput`.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Frontend => "frontend",
            Layer::Backend => "backend",
            Layer::Replication => "replication",
            Layer::PgOutput => "pgoutput",
        }
    }
}

/// One described message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    /// Its layer.
    pub layer: Layer,
    /// Byte offset of the message's first byte in the capture.
    pub offset: usize,
    /// The type byte; `None` for untyped startup-phase packets.
    pub tag: Option<u8>,
    /// The length word; `None` where the message has none (one-byte answers, sub-messages).
    pub len: Option<u32>,
    /// The name the protocol documentation gives the message.
    pub type_name: &'static str,
    /// The decoded fields, in wire order, snake_case names.
    pub fields: Vec<(&'static str, Value)>,
}

/// Which direction a capture holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// What the client sent.
    Frontend,
    /// What the server sent.
    Backend,
}

/// How to walk a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOptions {
    /// The direction the capture holds.
    pub side: Side,
    /// Describe the CopyData payloads of a logical replication stream, and pgoutput.
    pub replication: bool,
}

/// Why a capture could not be walked to its end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalkError {
    /// Absolute byte offset in the capture where the problem is.
    pub offset: usize,
    /// Offset of the first byte of the message that failed.
    pub message_offset: usize,
    /// What went wrong.
    pub reason: String,
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "malformed stream at byte offset {} (in the message starting at byte offset {}): {}",
            self.offset, self.message_offset, self.reason
        )
    }
}

impl std::error::Error for WalkError {}

/// Walks a whole capture, calling `emit` for each message (replication sub-messages right
/// after their CopyData, pgoutput right after its XLogData). Returns the number of
/// descriptions emitted.
pub fn walk(
    capture: &[u8],
    options: WalkOptions,
    mut emit: impl FnMut(Description),
) -> Result<usize, WalkError> {
    let mut w = walker::Walker::new(options);
    w.run(capture, &mut emit)?;
    Ok(w.emitted())
}

/// Walks a whole capture and collects the descriptions.
pub fn describe_all(capture: &[u8], options: WalkOptions) -> Result<Vec<Description>, WalkError> {
    let mut out = Vec::new();
    walk(capture, options, |d| out.push(d))?;
    Ok(out)
}

/// A message's fields, in wire order.
type Fields = Vec<(&'static str, Value)>;

// ---------------------------------------------------------------------------------------------
// value helpers

/// Bytes as UTF-8-lossy text.
fn text(b: &[u8]) -> Value {
    Value::Text(String::from_utf8_lossy(b).into_owned())
}

/// Bytes as lowercase hex.
fn hex(b: &[u8]) -> Value {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(char::from(b"0123456789abcdef"[usize::from(x >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(x & 15)]));
    }
    Value::Text(s)
}

fn opt_text(b: Option<&[u8]>) -> Value {
    b.map_or(Value::Null, text)
}

fn int(n: impl Into<i64>) -> Value {
    Value::Int(n.into())
}

fn lsn(l: Lsn) -> Value {
    Value::Text(l.to_string())
}

/// Microseconds since 2000-01-01 00:00:00 UTC, as on the wire.
fn ts(t: PgTimestamp) -> Value {
    Value::Int(t.0)
}

fn ch(b: u8) -> Value {
    Value::Text(char::from(b).to_string())
}

fn formats(f: &FormatCodes<'_>) -> Value {
    Value::List(f.iter().map(int).collect())
}

fn oids(o: &Oids<'_>) -> Value {
    Value::List(o.iter().map(int).collect())
}

fn values(v: &Values<'_>) -> Value {
    Value::List(v.iter().map(opt_text).collect())
}

#[cfg(test)]
mod tests;
