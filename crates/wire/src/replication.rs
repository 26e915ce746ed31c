//! Streaming replication: CopyBoth sub-messages and the replication commands' result rows.
//!
//! After `START_REPLICATION` both sides exchange CopyData messages whose payload starts with a
//! type byte: XLogData (`'w'`) and primary keepalive (`'k'`) from the server, standby status
//! update (`'r'`) and hot standby feedback (`'h'`) from the client. [`ReplicationMessage`]
//! decodes such a payload (borrowing the WAL or pgoutput data) and encodes one into a
//! `BytesMut`. The typed result rows of `IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT` and
//! `READ_REPLICATION_SLOT` are parsed from DataRow text fields, and the commands' SQL text is
//! built with every name and value quoted.

use bytes::{BufMut, BytesMut};
use pgyard_types::{Lsn, PgTimestamp, Xid};

use crate::buf::{DecodeError, Reader};

/// The type bytes of the CopyData sub-messages.
pub mod tag {
    /// XLogData (server → client).
    pub const XLOG_DATA: u8 = b'w';
    /// Primary keepalive (server → client).
    pub const PRIMARY_KEEPALIVE: u8 = b'k';
    /// Standby status update (client → server).
    pub const STANDBY_STATUS_UPDATE: u8 = b'r';
    /// Hot standby feedback (client → server).
    pub const HOT_STANDBY_FEEDBACK: u8 = b'h';
}

/// XLogData (`'w'`): WAL (physical) or one pgoutput message (logical).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct XLogData<'a> {
    /// LSN of the first byte of `data` (logical: of the write, or 0).
    pub start: Lsn,
    /// The server's current end of WAL (logical: as `start`).
    pub end: Lsn,
    /// When the server sent it.
    pub send_time: PgTimestamp,
    /// The WAL bytes or the pgoutput message.
    pub data: &'a [u8],
}

/// Primary keepalive (`'k'`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrimaryKeepalive {
    /// The server's current end of WAL (logical: the decoder's sent position).
    pub wal_end: Lsn,
    /// When the server sent it.
    pub send_time: PgTimestamp,
    /// Whether the client should answer with a status update at once.
    pub reply_requested: bool,
}

/// Standby status update (`'r'`): positions are "last byte + 1".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StandbyStatusUpdate {
    /// Received and written.
    pub write: Lsn,
    /// Flushed to durable storage.
    pub flush: Lsn,
    /// Applied (replayed).
    pub apply: Lsn,
    /// When the client sent it.
    pub send_time: PgTimestamp,
    /// Whether the server should answer with a keepalive at once.
    pub reply_requested: bool,
}

/// Hot standby feedback (`'h'`); an xid of 0 means "none", and both 0 stops feedback.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct HotStandbyFeedback {
    /// When the client sent it.
    pub send_time: PgTimestamp,
    /// The standby's oldest running xmin.
    pub xmin: Xid,
    /// Epoch of `xmin`.
    pub xmin_epoch: u32,
    /// The oldest catalog xmin of the standby's slots.
    pub catalog_xmin: Xid,
    /// Epoch of `catalog_xmin`.
    pub catalog_xmin_epoch: u32,
}

/// Any CopyData payload of a replication connection, borrowing from the payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplicationMessage<'a> {
    /// `'w'`.
    XLogData(XLogData<'a>),
    /// `'k'`.
    PrimaryKeepalive(PrimaryKeepalive),
    /// `'r'`.
    StandbyStatusUpdate(StandbyStatusUpdate),
    /// `'h'`.
    HotStandbyFeedback(HotStandbyFeedback),
}

impl<'a> ReplicationMessage<'a> {
    /// Decodes a CopyData payload of either direction.
    pub fn decode(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(payload);
        let msg = match r.u8()? {
            tag::XLOG_DATA => ReplicationMessage::XLogData(XLogData {
                start: Lsn(r.u64()?),
                end: Lsn(r.u64()?),
                send_time: PgTimestamp(r.i64()?),
                data: r.take_rest(),
            }),
            tag::PRIMARY_KEEPALIVE => ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: Lsn(r.u64()?),
                send_time: PgTimestamp(r.i64()?),
                reply_requested: reply_flag(&mut r)?,
            }),
            tag::STANDBY_STATUS_UPDATE => {
                ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                    write: Lsn(r.u64()?),
                    flush: Lsn(r.u64()?),
                    apply: Lsn(r.u64()?),
                    send_time: PgTimestamp(r.i64()?),
                    reply_requested: reply_flag(&mut r)?,
                })
            }
            tag::HOT_STANDBY_FEEDBACK => {
                ReplicationMessage::HotStandbyFeedback(HotStandbyFeedback {
                    send_time: PgTimestamp(r.i64()?),
                    xmin: Xid(r.u32()?),
                    xmin_epoch: r.u32()?,
                    catalog_xmin: Xid(r.u32()?),
                    catalog_xmin_epoch: r.u32()?,
                })
            }
            other => return Err(DecodeError::UnknownTag { tag: other }),
        };
        r.finish()?;
        Ok(msg)
    }

    /// Decodes a payload the server sent (`'w'` or `'k'`); client types are unknown tags.
    pub fn decode_from_server(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let msg = Self::decode(payload)?;
        if msg.is_from_server() {
            Ok(msg)
        } else {
            Err(DecodeError::UnknownTag { tag: msg.tag() })
        }
    }

    /// Decodes a payload a client sent (`'r'` or `'h'`); server types are unknown tags.
    pub fn decode_from_client(payload: &'a [u8]) -> Result<Self, DecodeError> {
        let msg = Self::decode(payload)?;
        if msg.is_from_server() {
            Err(DecodeError::UnknownTag { tag: msg.tag() })
        } else {
            Ok(msg)
        }
    }

    /// Whether the server sends this kind of message.
    pub fn is_from_server(&self) -> bool {
        matches!(
            self,
            ReplicationMessage::XLogData(_) | ReplicationMessage::PrimaryKeepalive(_)
        )
    }

    /// The type byte.
    pub fn tag(&self) -> u8 {
        match self {
            ReplicationMessage::XLogData(_) => tag::XLOG_DATA,
            ReplicationMessage::PrimaryKeepalive(_) => tag::PRIMARY_KEEPALIVE,
            ReplicationMessage::StandbyStatusUpdate(_) => tag::STANDBY_STATUS_UPDATE,
            ReplicationMessage::HotStandbyFeedback(_) => tag::HOT_STANDBY_FEEDBACK,
        }
    }

    /// The payload's length in bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            ReplicationMessage::XLogData(m) => 25 + m.data.len(),
            ReplicationMessage::PrimaryKeepalive(_) => 18,
            ReplicationMessage::StandbyStatusUpdate(_) => 34,
            ReplicationMessage::HotStandbyFeedback(_) => 25,
        }
    }

    /// Appends the CopyData payload (type byte included) to `out`.
    pub fn encode(&self, out: &mut BytesMut) {
        out.reserve(self.encoded_len());
        out.put_u8(self.tag());
        match self {
            ReplicationMessage::XLogData(m) => {
                out.put_u64(m.start.0);
                out.put_u64(m.end.0);
                out.put_i64(m.send_time.0);
                out.extend_from_slice(m.data);
            }
            ReplicationMessage::PrimaryKeepalive(m) => {
                out.put_u64(m.wal_end.0);
                out.put_i64(m.send_time.0);
                out.put_u8(m.reply_requested.into());
            }
            ReplicationMessage::StandbyStatusUpdate(m) => {
                out.put_u64(m.write.0);
                out.put_u64(m.flush.0);
                out.put_u64(m.apply.0);
                out.put_i64(m.send_time.0);
                out.put_u8(m.reply_requested.into());
            }
            ReplicationMessage::HotStandbyFeedback(m) => {
                out.put_i64(m.send_time.0);
                out.put_u32(m.xmin.0);
                out.put_u32(m.xmin_epoch);
                out.put_u32(m.catalog_xmin.0);
                out.put_u32(m.catalog_xmin_epoch);
            }
        }
    }

    /// The payload in a new buffer.
    pub fn to_bytes(&self) -> BytesMut {
        let mut out = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut out);
        out
    }
}

// ---------------------------------------------------------------------------------------------
// result rows
//
// Errors about a row use `DecodeError` with `offset` = the column's index.

/// The row `IDENTIFY_SYSTEM` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IdentifySystem<'a> {
    /// The cluster's system identifier.
    pub systemid: u64,
    /// The current timeline.
    pub timeline: u32,
    /// The current WAL flush position (on a standby: its flush or replay position).
    pub xlogpos: Lsn,
    /// The database of a logical replication connection (NULL on a physical one).
    pub dbname: Option<&'a str>,
}

impl<'a> IdentifySystem<'a> {
    /// Parses the row's text fields (`systemid`, `timeline`, `xlogpos`, `dbname`).
    pub fn from_row(fields: &[Option<&'a [u8]>]) -> Result<Self, DecodeError> {
        let f = Fields::new(fields, 4)?;
        Ok(IdentifySystem {
            systemid: f.required(0, "IDENTIFY_SYSTEM systemid", parse_decimal)?,
            timeline: f.required(1, "IDENTIFY_SYSTEM timeline", parse_decimal)?,
            xlogpos: f.required(2, "IDENTIFY_SYSTEM xlogpos", parse_lsn)?,
            dbname: f.optional(3, "IDENTIFY_SYSTEM dbname", parse_text)?,
        })
    }
}

/// The row `CREATE_REPLICATION_SLOT` returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CreatedSlot<'a> {
    /// The slot's name.
    pub slot_name: &'a str,
    /// Where decoding of a logical slot starts (its initial `confirmed_flush`; `0/0` for a
    /// physical slot).
    pub consistent_point: Lsn,
    /// The exported snapshot (only with `SNAPSHOT 'export'`).
    pub snapshot_name: Option<&'a str>,
    /// The output plugin (NULL for a physical slot).
    pub output_plugin: Option<&'a str>,
}

impl<'a> CreatedSlot<'a> {
    /// Parses the row's text fields (`slot_name`, `consistent_point`, `snapshot_name`,
    /// `output_plugin`).
    pub fn from_row(fields: &[Option<&'a [u8]>]) -> Result<Self, DecodeError> {
        let f = Fields::new(fields, 4)?;
        Ok(CreatedSlot {
            slot_name: f.required(0, "CREATE_REPLICATION_SLOT slot_name", parse_text)?,
            consistent_point: f.required(
                1,
                "CREATE_REPLICATION_SLOT consistent_point",
                parse_lsn,
            )?,
            snapshot_name: f.optional(2, "CREATE_REPLICATION_SLOT snapshot_name", parse_text)?,
            output_plugin: f.optional(3, "CREATE_REPLICATION_SLOT output_plugin", parse_text)?,
        })
    }
}

/// The row `READ_REPLICATION_SLOT` returns; every field is `None` when the slot does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadSlot<'a> {
    /// `physical` (logical slots are an error).
    pub slot_type: Option<&'a str>,
    /// The slot's restart LSN, when it has one.
    pub restart_lsn: Option<Lsn>,
    /// The timeline of the restart LSN.
    pub restart_tli: Option<u32>,
}

impl<'a> ReadSlot<'a> {
    /// Parses the row's text fields (`slot_type`, `restart_lsn`, `restart_tli`).
    pub fn from_row(fields: &[Option<&'a [u8]>]) -> Result<Self, DecodeError> {
        let f = Fields::new(fields, 3)?;
        Ok(ReadSlot {
            slot_type: f.optional(0, "READ_REPLICATION_SLOT slot_type", parse_text)?,
            restart_lsn: f.optional(1, "READ_REPLICATION_SLOT restart_lsn", parse_lsn)?,
            restart_tli: f.optional(2, "READ_REPLICATION_SLOT restart_tli", parse_decimal)?,
        })
    }

    /// Whether the slot exists.
    pub fn exists(&self) -> bool {
        self.slot_type.is_some()
    }
}

// ---------------------------------------------------------------------------------------------
// commands

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

// ---------------------------------------------------------------------------------------------
// helpers

fn reply_flag(r: &mut Reader<'_>) -> Result<bool, DecodeError> {
    let at = r.offset();
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Invalid {
            what: "reply-requested flag",
            offset: at,
        }),
    }
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

/// A row's fields, checked for count.
struct Fields<'r, 'a> {
    fields: &'r [Option<&'a [u8]>],
}

impl<'r, 'a> Fields<'r, 'a> {
    fn new(fields: &'r [Option<&'a [u8]>], want: usize) -> Result<Self, DecodeError> {
        if fields.len() != want {
            return Err(DecodeError::InvalidCount {
                count: i64::try_from(fields.len()).unwrap_or(i64::MAX),
                offset: 0,
            });
        }
        Ok(Fields { fields })
    }

    fn optional<T>(
        &self,
        i: usize,
        what: &'static str,
        parse: fn(&'a [u8]) -> Option<T>,
    ) -> Result<Option<T>, DecodeError> {
        match self.fields.get(i).copied().flatten() {
            None => Ok(None),
            Some(v) => parse(v)
                .map(Some)
                .ok_or(DecodeError::Invalid { what, offset: i }),
        }
    }

    fn required<T>(
        &self,
        i: usize,
        what: &'static str,
        parse: fn(&'a [u8]) -> Option<T>,
    ) -> Result<T, DecodeError> {
        self.optional(i, what, parse)?
            .ok_or(DecodeError::Invalid { what, offset: i })
    }
}

fn parse_text(v: &[u8]) -> Option<&str> {
    std::str::from_utf8(v).ok()
}

fn parse_decimal<T: std::str::FromStr>(v: &[u8]) -> Option<T> {
    let s = parse_text(v)?;
    // `FromStr` for integers accepts a leading '+'; the server never sends one.
    if !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn parse_lsn(v: &[u8]) -> Option<Lsn> {
    parse_text(v)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
            .collect()
    }

    fn check(bytes: &[u8], want: ReplicationMessage<'_>) {
        assert_eq!(ReplicationMessage::decode(bytes), Ok(want));
        assert_eq!(&want.to_bytes()[..], bytes);
        assert_eq!(want.encoded_len(), bytes.len());
    }

    #[test]
    fn captured_sub_messages() {
        check(
            &hex("6b 0000000005028288 0003047570302d2b 00"),
            ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: Lsn(0x5028288),
                send_time: PgTimestamp(849_327_370_022_187),
                reply_requested: false,
            }),
        );
        check(
            &hex("72 0000000006000000 0000000006000000 0000000005fffff8 0003047577eb0e52 01"),
            ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                write: Lsn(0x6000000),
                flush: Lsn(0x6000000),
                apply: Lsn(0x5fffff8),
                send_time: PgTimestamp(0x3047577eb0e52),
                reply_requested: true,
            }),
        );
        check(
            &hex("68 0003047577eb0e52 000002fa 00000000 000002f9 00000000"),
            ReplicationMessage::HotStandbyFeedback(HotStandbyFeedback {
                send_time: PgTimestamp(0x3047577eb0e52),
                xmin: Xid(762),
                xmin_epoch: 0,
                catalog_xmin: Xid(761),
                catalog_xmin_epoch: 0,
            }),
        );
        let mut w = hex("77 000000000502a238 0000000006000000 0003047577eb0e52");
        w.extend_from_slice(b"walbytes");
        check(
            &w,
            ReplicationMessage::XLogData(XLogData {
                start: Lsn(0x502a238),
                end: Lsn(0x6000000),
                send_time: PgTimestamp(0x3047577eb0e52),
                data: b"walbytes",
            }),
        );
    }

    #[test]
    fn malformed_sub_messages() {
        assert_eq!(
            ReplicationMessage::decode(&hex("6b 0000000005028288 0003047570302d2b 02")),
            Err(DecodeError::Invalid {
                what: "reply-requested flag",
                offset: 17
            })
        );
        assert_eq!(
            ReplicationMessage::decode(&hex("6b 0000000005028288 0003047570302d2b 00 00")),
            Err(DecodeError::TrailingBytes {
                offset: 18,
                count: 1
            })
        );
        assert_eq!(
            ReplicationMessage::decode(&hex("68 0003047577eb0e52 000002fa")),
            Err(DecodeError::UnexpectedEnd {
                offset: 13,
                needed: 4
            })
        );
        assert_eq!(
            ReplicationMessage::decode(b"x"),
            Err(DecodeError::UnknownTag { tag: b'x' })
        );
        let k = hex("6b 0000000005028288 0003047570302d2b 00");
        assert!(ReplicationMessage::decode_from_server(&k).is_ok());
        assert_eq!(
            ReplicationMessage::decode_from_client(&k),
            Err(DecodeError::UnknownTag { tag: b'k' })
        );
    }

    #[test]
    fn result_rows() {
        let row = [
            Some(&b"7123456789012345678"[..]),
            Some(b"1"),
            Some(b"0/1773E08"),
            Some(b"postgres"),
        ];
        assert_eq!(
            IdentifySystem::from_row(&row),
            Ok(IdentifySystem {
                systemid: 7_123_456_789_012_345_678,
                timeline: 1,
                xlogpos: Lsn(0x1773E08),
                dbname: Some("postgres"),
            })
        );
        let physical = [Some(&b"1"[..]), Some(b"2"), Some(b"0/0"), None];
        assert_eq!(
            IdentifySystem::from_row(&physical).map(|r| r.dbname),
            Ok(None)
        );
        let bad = [Some(&b"1"[..]), Some(b"+2"), Some(b"0/0"), None];
        assert_eq!(
            IdentifySystem::from_row(&bad),
            Err(DecodeError::Invalid {
                what: "IDENTIFY_SYSTEM timeline",
                offset: 1
            })
        );
        assert_eq!(
            IdentifySystem::from_row(&bad[..3]),
            Err(DecodeError::InvalidCount {
                count: 3,
                offset: 0
            })
        );
        let created = [
            Some(&b"s1"[..]),
            Some(b"0/1773E40"),
            Some(b"00000003-00000002-1"),
            Some(b"pgoutput"),
        ];
        assert_eq!(
            CreatedSlot::from_row(&created),
            Ok(CreatedSlot {
                slot_name: "s1",
                consistent_point: Lsn(0x1773E40),
                snapshot_name: Some("00000003-00000002-1"),
                output_plugin: Some("pgoutput"),
            })
        );
        let missing = [None, None, None];
        let read = ReadSlot::from_row(&missing).expect("all NULL");
        assert!(!read.exists());
        let read = ReadSlot::from_row(&[Some(&b"physical"[..]), Some(b"0/5000060"), Some(b"1")])
            .expect("slot row");
        assert_eq!(read.restart_lsn, Some(Lsn(0x5000060)));
        assert_eq!(read.restart_tli, Some(1));
        assert!(ReadSlot::from_row(&[Some(&b"physical"[..]), Some(b"0-5"), None]).is_err());
    }

    #[test]
    fn command_text() {
        let mut o = PgOutputOptions::new(4, &["pub", "we\"ird'name"]);
        o.streaming = Streaming::Parallel;
        o.two_phase = true;
        o.origin = Some(OriginFilter::Any);
        o.binary = true;
        o.messages = true;
        assert_eq!(
            start_replication_pgoutput("my slot", Lsn(0x1_0000_00A0), &o),
            "START_REPLICATION SLOT \"my slot\" LOGICAL 1/A0 (proto_version '4', \
             streaming 'parallel', two_phase 'on', origin 'any', \
             publication_names '\"pub\",\"we\"\"ird''name\"', binary 'true', messages 'true')"
        );
        assert_eq!(
            start_replication_logical("s", Lsn(0), &[("Odd", "x")]),
            "START_REPLICATION SLOT \"s\" LOGICAL 0/0 (\"Odd\" 'x')"
        );
        assert_eq!(
            start_replication_physical(Some("sb"), Lsn(0x5000000), Some(2)),
            "START_REPLICATION SLOT \"sb\" PHYSICAL 0/5000000 TIMELINE 2"
        );
        assert_eq!(
            create_replication_slot(
                "s",
                false,
                &SlotKind::Logical {
                    plugin: "pgoutput".to_owned(),
                    two_phase: true,
                    failover: true,
                    snapshot: Some(SnapshotAction::Nothing),
                }
            ),
            "CREATE_REPLICATION_SLOT \"s\" LOGICAL \"pgoutput\" \
             (TWO_PHASE, FAILOVER, SNAPSHOT 'nothing')"
        );
        assert_eq!(
            create_replication_slot("p", true, &SlotKind::Physical { reserve_wal: true }),
            "CREATE_REPLICATION_SLOT \"p\" TEMPORARY PHYSICAL (RESERVE_WAL)"
        );
        assert_eq!(
            drop_replication_slot("s", true),
            "DROP_REPLICATION_SLOT \"s\" WAIT"
        );
        assert_eq!(read_replication_slot("s"), "READ_REPLICATION_SLOT \"s\"");
    }
}
