//! [`Limits`]: the largest length word accepted per type byte, and the startup-packet cap.

use super::{
    AUTH_MESSAGE_MAX, BACKEND_MESSAGE_MAX, LARGE_MESSAGE_MAX, LIBPQ_SMALL_MESSAGE_MAX,
    MAX_STARTUP_BODY_BYTES, SMALL_MESSAGE_MAX,
};

/// Maximum length words per type byte, plus the startup-packet cap.
///
/// A limit applies to the length word (which counts itself, not the type byte).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    per_tag: Table,
    startup_body_max: u32,
}

/// A per-tag table: the presets are shared statics, so a decoder stays small (it is created
/// for every connection a proxy or the simulator accepts); a customised table is boxed.
#[derive(Clone, Debug)]
enum Table {
    Shared(&'static [u32; 256]),
    Owned(Box<[u32; 256]>),
}

impl Table {
    #[inline]
    fn get(&self) -> &[u32; 256] {
        match self {
            Table::Shared(t) => t,
            Table::Owned(t) => t,
        }
    }

    fn make_mut(&mut self) -> &mut [u32; 256] {
        if let Table::Shared(t) = self {
            *self = Table::Owned(Box::new(**t));
        }
        match self {
            Table::Owned(t) => t,
            // Just replaced by an owned copy.
            Table::Shared(_) => unreachable!("table was made owned above"),
        }
    }
}

impl PartialEq for Table {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for Table {}

/// `default` for every tag, `large_max` for the tags in `large`, and one more override.
const fn preset(default: u32, large: &[u8], large_max: u32, extra: (u8, u32)) -> [u32; 256] {
    let mut t = [default; 256];
    let mut i = 0;
    while i < large.len() {
        t[large[i] as usize] = large_max;
        i += 1;
    }
    t[extra.0 as usize] = extra.1;
    t
}

static UNIFORM_LARGE: [u32; 256] = [LARGE_MESSAGE_MAX; 256];
static POSTGRES_SERVER: [u32; 256] = preset(
    SMALL_MESSAGE_MAX,
    b"QPBFd",
    LARGE_MESSAGE_MAX,
    (b'p', AUTH_MESSAGE_MAX),
);
static LIBPQ_CLIENT: [u32; 256] = preset(
    LIBPQ_SMALL_MESSAGE_MAX,
    b"TDdVENA",
    BACKEND_MESSAGE_MAX,
    (b'T', BACKEND_MESSAGE_MAX),
);

impl Default for Limits {
    /// [`Limits::uniform`] at [`LARGE_MESSAGE_MAX`].
    fn default() -> Self {
        Limits::uniform(LARGE_MESSAGE_MAX)
    }
}

impl Limits {
    /// The same maximum for every type byte; startup packets keep the server's 10 000 bytes.
    pub fn uniform(len_max: u32) -> Self {
        let per_tag = if len_max == LARGE_MESSAGE_MAX {
            Table::Shared(&UNIFORM_LARGE)
        } else {
            Table::Owned(Box::new([len_max; 256]))
        };
        Limits {
            per_tag,
            startup_body_max: MAX_STARTUP_BODY_BYTES as u32,
        }
    }

    /// What a PostgreSQL 18 server enforces on frontend messages: 10 000 for small and
    /// unknown types, about 1 GiB for `Q P B F d`, 65 535 for `p`.
    pub fn postgres_server() -> Self {
        Limits {
            per_tag: Table::Shared(&POSTGRES_SERVER),
            startup_body_max: MAX_STARTUP_BODY_BYTES as u32,
        }
    }

    /// What libpq enforces on backend messages: 30 000 except `T D d V E N A`, which libpq
    /// takes at any length and which are capped here at the longest a server can send
    /// ([`BACKEND_MESSAGE_MAX`](super::BACKEND_MESSAGE_MAX), about 1 GiB).
    pub fn libpq_client() -> Self {
        Limits {
            per_tag: Table::Shared(&LIBPQ_CLIENT),
            startup_body_max: MAX_STARTUP_BODY_BYTES as u32,
        }
    }

    /// Sets the maximum length word for one type byte.
    pub fn with_tag_max(mut self, tag: u8, len_max: u32) -> Self {
        self.per_tag.make_mut()[usize::from(tag)] = len_max;
        self
    }

    /// Sets the cap on a startup packet's bytes after its length word.
    pub fn with_startup_body_max(mut self, body_max: u32) -> Self {
        self.startup_body_max = body_max;
        self
    }

    /// The maximum length word for `tag`.
    #[inline]
    pub fn tag_max(&self, tag: u8) -> usize {
        self.per_tag.get()[usize::from(tag)] as usize
    }

    /// The cap on a startup packet's bytes after its length word.
    pub fn startup_body_max(&self) -> usize {
        self.startup_body_max as usize
    }
}
