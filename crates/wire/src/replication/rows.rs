//! The typed result rows of `IDENTIFY_SYSTEM`, `CREATE_REPLICATION_SLOT` and
//! `READ_REPLICATION_SLOT`, parsed from DataRow text fields. Errors about a row use
//! `DecodeError` with `offset` = the column's index.

use pgyard_types::Lsn;

use crate::buf::DecodeError;

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
