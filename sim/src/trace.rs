//! The trace of one seed: a stable hash of every recorded step, and optionally the lines.

use std::fmt::Write as _;

/// FNV-1a parameters, for [`combine`]: the same on every platform and Rust version.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Records the steps of a run. Hashing is always on; keeping the text is opt-in because a
/// sweep of thousands of seeds only needs the hash.
#[derive(Clone, Debug)]
pub struct Trace {
    hash: StreamHash,
    lines: Option<Vec<String>>,
    scratch: String,
    steps: u64,
}

impl Trace {
    /// A trace that keeps only the hash.
    pub fn hashing() -> Self {
        Trace {
            hash: StreamHash::new(),
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
            lines.push(self.scratch.clone());
            self.scratch.push('\n');
            self.hash.bytes(self.scratch.as_bytes());
        } else {
            // Gathering `fmt`'s many tiny pieces in a stack buffer and hashing it in one go
            // is cheaper than hashing them one by one or growing a String; the hash only
            // depends on the bytes, so it equals the recorded line's.
            let mut w = LineHasher {
                hash: &mut self.hash,
                buf: [0; LINE_BUF],
                len: 0,
            };
            // Hashing cannot fail.
            let _ = w.write_fmt(args);
            w.push(b"\n");
            w.flush();
        }
    }

    /// The hash of everything recorded so far.
    pub fn hash(&self) -> u64 {
        self.hash.finish()
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

const LINE_BUF: usize = 192;

/// A `fmt::Write` that buffers a line on the stack and feeds it to the hash.
struct LineHasher<'a> {
    hash: &'a mut StreamHash,
    buf: [u8; LINE_BUF],
    len: usize,
}

impl LineHasher<'_> {
    #[inline]
    fn push(&mut self, b: &[u8]) {
        if b.len() > LINE_BUF - self.len {
            self.flush();
            if b.len() >= LINE_BUF {
                self.hash.bytes(b);
                return;
            }
        }
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
    }

    fn flush(&mut self) {
        self.hash.bytes(&self.buf[..self.len]);
        self.len = 0;
    }
}

impl std::fmt::Write for LineHasher<'_> {
    #[inline]
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push(s.as_bytes());
        Ok(())
    }
}

/// A streaming hash of a byte sequence that takes eight bytes per multiply (the trace is
/// hashed on every step of every seed, so byte-at-a-time FNV showed up in profiles). Fixed
/// constants and little-endian assembly keep it the same on every platform.
#[derive(Clone, Debug)]
struct StreamHash {
    h: u64,
    /// Bytes not yet folded in, little-endian, `pending_len` of them.
    pending: u64,
    pending_len: u32,
    total: u64,
}

const MIX: u64 = 0x9E37_79B9_7F4A_7C15;

impl StreamHash {
    fn new() -> Self {
        StreamHash {
            h: FNV_OFFSET,
            pending: 0,
            pending_len: 0,
            total: 0,
        }
    }

    #[inline]
    fn fold(&mut self, word: u64) {
        self.h = (self.h.rotate_left(23) ^ word).wrapping_mul(MIX);
    }

    #[inline]
    fn bytes(&mut self, mut b: &[u8]) {
        self.total = self.total.wrapping_add(b.len() as u64);
        // Fill a partial word first, so the result never depends on where pieces were cut.
        while self.pending_len != 0 && !b.is_empty() {
            self.pending |= u64::from(b[0]) << (8 * self.pending_len);
            self.pending_len += 1;
            b = &b[1..];
            if self.pending_len == 8 {
                let w = self.pending;
                self.fold(w);
                self.pending = 0;
                self.pending_len = 0;
            }
        }
        if b.is_empty() {
            return;
        }
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.fold(u64::from_le_bytes(w));
        }
        for (i, &byte) in chunks.remainder().iter().enumerate() {
            self.pending |= u64::from(byte) << (8 * i);
        }
        self.pending_len = chunks.remainder().len() as u32;
    }

    /// The hash of the bytes so far (murmur3's finalizer, so nearby streams spread out).
    fn finish(&self) -> u64 {
        let mut h = (self.h.rotate_left(23) ^ self.pending).wrapping_mul(MIX) ^ self.total;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
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

/// The hash of a whole run (`--trace-hash`): the scenarios' combined hashes folded in the
/// order they ran.
pub fn combine_run(per_scenario: impl IntoIterator<Item = u64>) -> u64 {
    per_scenario
        .into_iter()
        .fold(COMBINE_START, |acc, h| combine(acc, 0, h))
}

#[cfg(test)]
mod tests {
    use super::StreamHash;

    fn hash_pieces(pieces: &[&[u8]]) -> u64 {
        let mut h = StreamHash::new();
        for p in pieces {
            h.bytes(p);
        }
        h.finish()
    }

    #[test]
    fn the_hash_depends_on_the_bytes_not_on_the_cuts() {
        let text: Vec<u8> = (0u8..=200).map(|i| i.wrapping_mul(37)).collect();
        let whole = hash_pieces(&[&text]);
        for cut1 in 0..text.len() {
            let cut2 = (cut1 * 7 + 3) % (text.len() + 1);
            let (a, b) = (cut1.min(cut2), cut1.max(cut2));
            let got = hash_pieces(&[&text[..a], &text[a..b], &[], &text[b..]]);
            assert_eq!(got, whole, "cuts at {a} and {b}");
        }
    }

    #[test]
    fn hashing_and_recording_traces_agree() {
        let long = "x".repeat(500);
        let mut a = super::Trace::hashing();
        let mut b = super::Trace::recording();
        for t in [&mut a, &mut b] {
            crate::trace!(t, "t={} c{} open a{} {}", 123_456_789u64, 2, 17, "pg1");
            crate::trace!(t, "{long}{}", 5);
            crate::trace!(t, "");
            crate::trace!(t, "{:?}", (1, "two", [3.5]));
        }
        assert_eq!(a.hash(), b.hash());
        assert_eq!(b.lines().len(), 4);
        assert_eq!(b.lines()[0], "t=123456789 c2 open a17 pg1");
    }

    #[test]
    fn different_streams_hash_differently() {
        let mut seen = std::collections::BTreeSet::new();
        // Every byte string of length 0..=2 plus trailing zeros (which a padding bug would
        // merge) must give a distinct hash.
        seen.insert(hash_pieces(&[]));
        for a in 0u8..=255 {
            assert!(seen.insert(hash_pieces(&[&[a]])));
            assert!(seen.insert(hash_pieces(&[&[a, 0]])));
            assert!(seen.insert(hash_pieces(&[&[0, a, 1]])));
        }
        assert_ne!(hash_pieces(&[b"ab\n"]), hash_pieces(&[b"a\nb"]));
    }
}
