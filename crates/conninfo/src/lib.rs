//! PostgreSQL connection strings, exactly as libpq 18 parses them. Pure: no environment, files,
//! clocks or sockets are read here; callers pass them in.
//!
//! The pipeline mirrors libpq's phases: [`parse`] (keyword/value or URI, like
//! `PQconninfoParse`) and [`parse_params`] (the keyword arrays of `PQconnectdbParams`) give a
//! [`ConnInfo`] holding only what was written; `resolve` fills defaults from a supplied
//! environment, service files and password file; `typed` derives the host list and enums with
//! libpq's validation messages.

mod error;
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
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ConnInfo {
    values: [Option<Vec<u8>>; keywords::COUNT],
}

impl Default for ConnInfo {
    fn default() -> Self {
        ConnInfo {
            values: [const { None }; keywords::COUNT],
        }
    }
}

impl ConnInfo {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The value of `kw`, if set.
    #[inline]
    pub fn get(&self, kw: Keyword) -> Option<&[u8]> {
        self.values[kw as usize].as_deref()
    }

    /// The value of `kw` as text (lossy), if set.
    pub fn get_str(&self, kw: Keyword) -> Option<std::borrow::Cow<'_, str>> {
        self.get(kw).map(String::from_utf8_lossy)
    }

    /// Sets `kw`, replacing any earlier value.
    #[inline]
    pub fn set(&mut self, kw: Keyword, value: impl Into<Vec<u8>>) {
        self.values[kw as usize] = Some(value.into());
    }

    /// Unsets `kw`, returning what it held.
    pub fn take(&mut self, kw: Keyword) -> Option<Vec<u8>> {
        self.values[kw as usize].take()
    }

    /// Whether `kw` is set (possibly to the empty string).
    pub fn is_set(&self, kw: Keyword) -> bool {
        self.values[kw as usize].is_some()
    }

    /// The set keywords and their values, in libpq's table order.
    pub fn iter(&self) -> impl Iterator<Item = (Keyword, &[u8])> + '_ {
        keywords::ALL
            .iter()
            .zip(self.values.iter())
            .filter_map(|(kw, v)| v.as_deref().map(|v| (*kw, v)))
    }

    /// Number of set keywords.
    pub fn len(&self) -> usize {
        self.values.iter().filter(|v| v.is_some()).count()
    }

    /// Whether no keyword is set.
    pub fn is_empty(&self) -> bool {
        self.values.iter().all(Option::is_none)
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
