//! PostgreSQL connection strings, exactly as libpq 18 parses them. Pure: no environment, files,
//! clocks or sockets are read here; callers pass them in.
//!
//! The pipeline mirrors libpq's phases: [`parse`] (keyword/value or URI, like
//! `PQconninfoParse`) and [`parse_params`] (the keyword arrays of `PQconnectdbParams`) give a
//! [`ConnInfo`] holding only what was written; `resolve` fills defaults from a supplied
//! environment, service files and password file; `typed` derives the host list and enums with
//! libpq's validation messages. [`configure`] chains the last two as `PQconnectdb` does.
//!
//! Every other pgyard crate that connects starts here, and so can any driver that wants
//! libpq's reading of a connection string without linking libpq: the result is plain data
//! (a host list with per-host passwords, typed enums, raw values for what libpq parses late).
//! `examples/tokio_postgres_config.rs` turns it into a `tokio_postgres::Config`, service and
//! password files included.
//!
//! ```
//! use pgyard_conninfo::resolve::{Environment, MemFile, MemFiles};
//! use pgyard_conninfo::typed::{SlotKind, TargetSessionAttrs};
//! use pgyard_conninfo::{configure, parse, Keyword};
//!
//! // Phase 1 keeps what was written, nothing more; the URI form fills the same table.
//! let info = parse("postgresql://app@db1:5433,db2/shop?target_session_attrs=read-write")?;
//! assert_eq!(info.get(Keyword::Host), Some(&b"db1,db2"[..]));
//! assert_eq!(info.get(Keyword::Dbname), Some(&b"shop"[..]));
//! assert_eq!(info.get(Keyword::Password), None);
//!
//! // Errors carry libpq's words.
//! let err = parse("host=db1 colour=blue").unwrap_err();
//! assert_eq!(err.to_string(), r#"invalid connection option "colour""#);
//!
//! // Phases 2 and 3 read an environment and files the caller supplies (here in memory):
//! // the service names the hosts, the password file holds one host's password.
//! let env = Environment::new()
//!     .with_var("PGSERVICEFILE", "/etc/pg_service.conf")
//!     .with_var("HOME", "/home/app")
//!     .with_os_user("app");
//! let files = MemFiles::new()
//!     .with("/etc/pg_service.conf", MemFile::regular("[shop]\nhost=db1,db2\ndbname=orders\n"))
//!     .with("/home/app/.pgpass", MemFile::regular("db2:5432:orders:app:s3cret\n"));
//! let ready = configure(parse("service=shop target_session_attrs=read-write")?, &env, &files)?;
//! let config = &ready.config;
//! assert_eq!(config.user(), b"app"); // the OS user, as libpq defaults it
//! assert_eq!(config.target_session_attrs(), TargetSessionAttrs::ReadWrite);
//! let slots = config.slots();
//! assert_eq!(slots.len(), 2);
//! assert_eq!(slots[0].kind(), SlotKind::HostName);
//! assert_eq!((slots[0].password(), slots[1].password()), (None, Some(&b"s3cret"[..])));
//! assert_eq!(slots[1].port()?, 5432);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#[cfg(feature = "arbitrary")]
pub mod arb;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod keywords;
mod parse;
mod pipeline;
pub mod proposal;
pub mod resolve;
pub mod serialize;
pub mod typed;

pub use error::{Lossy, ParseError};
pub use keywords::Keyword;
pub use parse::{is_uri, parse, parse_into, parse_params, recognized_connection_string, Sink};
pub use pipeline::{configure, ConfigureError, Configured};

/// The libpq option table: one optional byte-string value per keyword.
///
/// An explicitly empty value (`host=''`) is `Some(b"")`, distinct from unset (`None`), because
/// libpq treats them differently when filling defaults.
///
/// All values live in one byte buffer, each behind a 4-byte length, with an offset per keyword,
/// so parsing a string costs one allocation however many keywords it sets (a replaced value's
/// old bytes stay in the buffer until the table is dropped).
#[derive(Clone)]
pub struct ConnInfo {
    offsets: [u32; keywords::COUNT],
    bytes: Vec<u8>,
}

/// The offset of a keyword that has no value.
const UNSET: u32 = u32::MAX;

impl Default for ConnInfo {
    fn default() -> Self {
        ConnInfo {
            offsets: [UNSET; keywords::COUNT],
            bytes: Vec::new(),
        }
    }
}

impl PartialEq for ConnInfo {
    fn eq(&self, other: &Self) -> bool {
        keywords::ALL
            .iter()
            .all(|&kw| self.get(kw) == other.get(kw))
    }
}

impl Eq for ConnInfo {}

impl std::hash::Hash for ConnInfo {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        for &kw in keywords::ALL {
            self.get(kw).hash(state);
        }
    }
}

impl ConnInfo {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table whose value buffer holds `bytes` (plus length headers) without growing.
    pub fn with_capacity(bytes: usize) -> Self {
        ConnInfo {
            offsets: [UNSET; keywords::COUNT],
            bytes: Vec::with_capacity(bytes + 64),
        }
    }

    /// The value of `kw`, if set.
    #[inline]
    pub fn get(&self, kw: Keyword) -> Option<&[u8]> {
        let at = self.offsets[kw as usize];
        if at == UNSET {
            return None;
        }
        // Offsets are only ever made by `set`, which writes the length header there.
        let at = at as usize;
        let header = self.bytes.get(at..at + 4)?;
        let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]) as usize;
        self.bytes.get(at + 4..at + 4 + len)
    }

    /// The value of `kw` as text (lossy), if set.
    pub fn get_str(&self, kw: Keyword) -> Option<std::borrow::Cow<'_, str>> {
        self.get(kw).map(String::from_utf8_lossy)
    }

    /// Sets `kw`, replacing any earlier value.
    ///
    /// The buffer is addressed with 32-bit offsets; a value that would carry it past 4 GiB is
    /// cut short rather than panicking (no parse of a smaller input can get there).
    #[inline]
    pub fn set(&mut self, kw: Keyword, value: impl AsRef<[u8]>) {
        let value = value.as_ref();
        let at = self.bytes.len();
        let room = (UNSET as usize - 8).saturating_sub(at);
        let value = &value[..value.len().min(room)];
        // Both fit in u32 because of `room` above.
        self.bytes
            .extend_from_slice(&(value.len() as u32).to_le_bytes());
        self.bytes.extend_from_slice(value);
        self.offsets[kw as usize] = at as u32;
    }

    /// Unsets `kw`, returning what it held.
    pub fn take(&mut self, kw: Keyword) -> Option<Vec<u8>> {
        let v = self.get(kw).map(<[u8]>::to_vec);
        self.offsets[kw as usize] = UNSET;
        v
    }

    /// Whether `kw` is set (possibly to the empty string).
    pub fn is_set(&self, kw: Keyword) -> bool {
        self.offsets[kw as usize] != UNSET
    }

    /// The set keywords and their values, in libpq's table order.
    pub fn iter(&self) -> impl Iterator<Item = (Keyword, &[u8])> + '_ {
        keywords::ALL
            .iter()
            .filter_map(move |&kw| self.get(kw).map(|v| (kw, v)))
    }

    /// Number of set keywords.
    pub fn len(&self) -> usize {
        self.offsets.iter().filter(|&&o| o != UNSET).count()
    }

    /// Whether no keyword is set.
    pub fn is_empty(&self) -> bool {
        self.offsets.iter().all(|&o| o == UNSET)
    }
}

impl std::fmt::Debug for ConnInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (kw, v) in self.iter() {
            if kw.info().display == keywords::Display::Secret {
                m.entry(&kw.name(), &"********");
            } else {
                m.entry(&kw.name(), &Lossy(v).to_string());
            }
        }
        m.finish()
    }
}

/// How a connect walks the host list: libpq's one way, or the proposal's race.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// One attempt at a time, in list order (after any `load_balance_hosts` shuffle), as libpq.
    #[default]
    Sequential,
    /// Staggered parallel attempts; the first server that qualifies wins.
    Race,
}
