//! The trace of one seed: a stable hash of every recorded step, and optionally the lines.

use std::fmt::Write as _;

/// FNV-1a parameters: a hash that is the same on every platform and Rust version.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Records the steps of a run. Hashing is always on; keeping the text is opt-in because a
/// sweep of thousands of seeds only needs the hash.
#[derive(Clone, Debug)]
pub struct Trace {
    hash: u64,
    lines: Option<Vec<String>>,
    scratch: String,
    steps: u64,
}

impl Trace {
    /// A trace that keeps only the hash.
    pub fn hashing() -> Self {
        Trace {
            hash: FNV_OFFSET,
            lines: None,
            scratch: String::new(),
            steps: 0,
        }
    }

    /// A trace that also keeps every line.
    pub fn recording() -> Self {
        Trace {
            lines: Some(Vec::new()),
            ..Self::hashing()
        }
    }

    /// Records one step.
    pub fn step(&mut self, args: std::fmt::Arguments<'_>) {
        self.steps += 1;
        if let Some(lines) = &mut self.lines {
            self.scratch.clear();
            // Writing into a String cannot fail.
            let _ = self.scratch.write_fmt(args);
            self.hash = fnv(self.hash, self.scratch.as_bytes());
            lines.push(self.scratch.clone());
        } else {
            // Hash the formatted pieces as they are produced: the same bytes in the same order
            // as the recorded line, without building it.
            let mut w = Hasher(self.hash);
            // Hashing cannot fail.
            let _ = w.write_fmt(args);
            self.hash = w.0;
        }
        self.hash = fnv(self.hash, b"\n");
    }

    /// The hash of everything recorded so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// How many steps were recorded.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The recorded lines (empty unless built with [`Trace::recording`]).
    pub fn lines(&self) -> &[String] {
        self.lines.as_deref().unwrap_or(&[])
    }
}

/// FNV-1a over `bytes`, continuing from `h`.
#[inline]
fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// A `fmt::Write` that only hashes what is written.
struct Hasher(u64);

impl std::fmt::Write for Hasher {
    #[inline]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0 = fnv(self.0, s.as_bytes());
        Ok(())
    }
}

/// Records a formatted step: `trace!(t, "connect {}", host)`.
#[macro_export]
macro_rules! trace {
    ($t:expr, $($arg:tt)*) => { $t.step(format_args!($($arg)*)) };
}

/// Folds a sequence of per-seed hashes into one, in order.
pub fn combine(acc: u64, seed: u64, hash: u64) -> u64 {
    let mut h = acc;
    for b in seed.to_le_bytes().into_iter().chain(hash.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The starting value for [`combine`].
pub const COMBINE_START: u64 = FNV_OFFSET;
