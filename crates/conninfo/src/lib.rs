//! PostgreSQL connection strings, exactly as libpq 18 parses them. Pure: no environment, files,
//! clocks or sockets are read here; callers pass them in.
//!
//! The pipeline mirrors libpq's phases: [`parse`] (keyword/value or URI, like
//! `PQconninfoParse`) and [`parse_params`] (the keyword arrays of `PQconnectdbParams`) give a
//! [`ConnInfo`] holding only what was written; `resolve` fills defaults from a supplied
//! environment, service files and password file; `typed` derives the host list and enums with
//! libpq's validation messages.

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
