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

    /// Records one step made of `pieces`: the line `trace!` gives for the same text (and so
    /// the same hash), put together without `fmt`'s machinery. For the lines every seed
    /// writes many times; [`trace_line!`](crate::trace_line) builds the pieces.
    pub fn line(&mut self, pieces: &[Piece<'_>]) {
        self.steps += 1;
        let mut digits = [0u8; 20];
        if let Some(lines) = &mut self.lines {
            self.scratch.clear();
            for p in pieces {
                match *p {
                    Piece::Text(text) => self.scratch.push_str(text),
                    Piece::Num(n) => self
                        .scratch
                        .extend(decimal(n, &mut digits).iter().map(|&d| char::from(d))),
                }
            }
            lines.push(self.scratch.clone());
            self.scratch.push('\n');
            self.hash.bytes(self.scratch.as_bytes());
        } else {
            let mut w = LineHasher {
                hash: &mut self.hash,
                buf: [0; LINE_BUF],
                len: 0,
            };
            for p in pieces {
                match *p {
                    Piece::Text(text) => w.push(text.as_bytes()),
                    Piece::Num(n) => w.push(decimal(n, &mut digits)),
                }
            }
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

/// A piece of a trace line for [`Trace::line`]: text, or a number written in decimal as
/// `Display` writes it.
#[derive(Clone, Copy, Debug)]
pub enum Piece<'a> {
    /// Text as is.
    Text(&'a str),
    /// An unsigned number.
    Num(u64),
}

impl<'a> From<&'a str> for Piece<'a> {
    fn from(text: &'a str) -> Self {
        Piece::Text(text)
    }
}

impl<'a> From<&'a String> for Piece<'a> {
    fn from(text: &'a String) -> Self {
        Piece::Text(text)
    }
}

impl From<u64> for Piece<'_> {
    fn from(n: u64) -> Self {
        Piece::Num(n)
    }
}

impl From<u32> for Piece<'_> {
    fn from(n: u32) -> Self {
        Piece::Num(u64::from(n))
    }
}

impl From<usize> for Piece<'_> {
    fn from(n: usize) -> Self {
        Piece::Num(n as u64)
    }
}

impl From<bool> for Piece<'_> {
    fn from(b: bool) -> Self {
        Piece::Text(if b { "true" } else { "false" })
    }
}

/// Writes `pieces` to a formatter: for the `Display` and `Debug` impls whose text a trace
/// line also builds from the same pieces.
pub fn write_pieces(f: &mut std::fmt::Formatter<'_>, pieces: &[Piece<'_>]) -> std::fmt::Result {
    for p in pieces {
        match *p {
            Piece::Text(text) => f.write_str(text)?,
            Piece::Num(n) => write!(f, "{n}")?,
        }
    }
    Ok(())
}

/// Pushes the pieces of `d` as `{:?}` writes it (`2s`, `1.05s`, `250ms`, `1.5µs`, `0ns`):
/// the whole units of the largest unit that is not zero, then the fraction without its
/// trailing zeros. A client's trace line carries two durations, and `Duration`'s `Debug`
/// was most of that line's cost.
pub fn push_duration_debug(d: std::time::Duration, out: &mut Vec<Piece<'_>>) {
    /// Leading zeros of a fraction, as many as needed.
    const ZEROS: &str = "00000000";
    let (secs, nanos) = (d.as_secs(), u64::from(d.subsec_nanos()));
    // (whole units, fraction, digits of the fraction, unit)
    let (whole, mut frac, mut digits, unit) = if secs > 0 {
        (secs, nanos, 9, "s")
    } else if nanos >= 1_000_000 {
        (nanos / 1_000_000, nanos % 1_000_000, 6, "ms")
    } else if nanos >= 1_000 {
        (nanos / 1_000, nanos % 1_000, 3, "\u{b5}s")
    } else {
        (nanos, 0, 0, "ns")
    };
    out.push(Piece::Num(whole));
    if frac > 0 {
        while frac % 10 == 0 {
            frac /= 10;
            digits -= 1;
        }
        let mut len = 1;
        let mut rest = frac / 10;
        while rest > 0 {
            len += 1;
            rest /= 10;
        }
        out.push(Piece::Text("."));
        out.push(Piece::Text(&ZEROS[..digits - len]));
        out.push(Piece::Num(frac));
    }
    out.push(Piece::Text(unit));
}

/// [`push_duration_debug`] for an optional duration: `None` or `Some(…)`, as `{:?}` writes it.
pub fn push_option_duration_debug(d: Option<std::time::Duration>, out: &mut Vec<Piece<'_>>) {
    match d {
        None => out.push(Piece::Text("None")),
        Some(d) => {
            out.push(Piece::Text("Some("));
            push_duration_debug(d, out);
            out.push(Piece::Text(")"));
        }
    }
}

/// `n` in decimal (ASCII digits), written at the end of `buf`, two digits per step.
pub(crate) fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut at = buf.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        at -= 2;
        buf[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else {
        at -= 1;
        buf[at] = b'0' + n as u8;
    }
    &buf[at..]
}

const LINE_BUF: usize = 192;

/// A `fmt::Write` that buffers a line on the stack and feeds it to the hash.
struct LineHasher<'a> {
    hash: &'a mut StreamHash,
    buf: [u8; LINE_BUF],
    len: usize,
}

impl LineHasher<'_> {
    // Always inlined: a call per piece of every line showed up in profiles.
    #[inline(always)]
    fn push(&mut self, b: &[u8]) {
        if b.len() > LINE_BUF - self.len {
            self.flush();
            if b.len() >= LINE_BUF {
                self.hash.bytes(b);
                return;
            }
        }
        copy_short(&mut self.buf[self.len..self.len + b.len()], b);
        self.len += b.len();
    }

    fn flush(&mut self) {
        self.hash.bytes(&self.buf[..self.len]);
        self.len = 0;
    }
}

/// `dst.copy_from_slice(src)` for slices of equal length, without a call into `memcpy` for
/// the few bytes most pieces of a line have (a call per piece showed up in profiles): two
/// overlapping fixed-size copies cover any length between a size and its double.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    debug_assert_eq!(n, dst.len());
    if n > 32 {
        dst.copy_from_slice(src);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&src[..16]);
        dst[n - 16..].copy_from_slice(&src[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
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
        if self.pending_len != 0 {
            let take = (8 - self.pending_len as usize).min(b.len());
            self.pending |= load_le(&b[..take]) << (8 * self.pending_len);
            self.pending_len += take as u32;
            b = &b[take..];
            if self.pending_len < 8 {
                return;
            }
            let w = self.pending;
            self.fold(w);
            self.pending = 0;
            self.pending_len = 0;
        }
        let mut chunks = b.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.fold(u64::from_le_bytes(w));
        }
        // No partial word is pending here.
        let rest = chunks.remainder();
        self.pending = load_le(rest);
        self.pending_len = rest.len() as u32;
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

/// Up to eight bytes as a little-endian word, read with fixed-size loads (two overlapping
/// ones for four bytes or more) instead of a byte loop.
#[inline]
fn load_le(b: &[u8]) -> u64 {
    let n = b.len();
    debug_assert!(n <= 8);
    let word4 = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&b[at..at + 4]);
        u64::from(u32::from_le_bytes(w))
    };
    if n >= 4 {
        word4(0) | word4(n - 4) << (8 * (n - 4))
    } else if n > 0 {
        u64::from(b[0])
            | u64::from(b[n / 2]) << (8 * (n / 2))
            | u64::from(b[n - 1]) << (8 * (n - 1))
    } else {
        0
    }
}

/// Records a formatted step: `trace!(t, "connect {}", host)`.
#[macro_export]
macro_rules! trace {
    ($t:expr, $($arg:tt)*) => { $t.step(format_args!($($arg)*)) };
}

/// Records a step from pieces (see [`Trace::line`]): `trace_line!(t, "t=", now, " open")`
/// records the same line as `trace!(t, "t={now} open")`.
#[macro_export]
macro_rules! trace_line {
    ($t:expr, $($piece:expr),+ $(,)?) => {
        $t.line(&[$($crate::trace::Piece::from($piece)),+])
    };
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
    fn duration_pieces_read_as_debug_does() {
        use std::time::Duration;
        let text = |d: Option<Duration>| {
            let mut pieces = Vec::new();
            super::push_option_duration_debug(d, &mut pieces);
            let mut t = super::Trace::recording();
            t.line(&pieces);
            t.lines()[0].clone()
        };
        let mut cases = vec![None, Some(Duration::ZERO), Some(Duration::MAX)];
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for i in 0..20_000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Whole and round values as well as arbitrary ones, in every unit.
            let nanos = match i % 5 {
                0 => x % 1_000,
                1 => x % 1_000_000,
                2 => x % 1_000_000_000,
                3 => (x % 100) * 10u64.pow((x >> 40) as u32 % 10),
                _ => x % 3_600_000_000_000,
            };
            cases.push(Some(Duration::from_nanos(nanos)));
            cases.push(Some(Duration::new(x >> 20, (x % 1_000_000_000) as u32)));
        }
        for d in cases {
            assert_eq!(text(d), format!("{d:?}"));
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
    fn pieces_make_the_line_fmt_makes() {
        let numbers = [0u64, 7, 10, 99, 100, 101, 12_345, 1 << 40, u64::MAX];
        let texts = [
            "",
            "a",
            "ab",
            "abc",
            "abcd",
            "abcdefg",
            "abcdefgh",
            "abcdefghijklmno",
            "abcdefghijklmnop",
            "abcdefghijklmnopqrstuvwxyz0123",
            "abcdefghijklmnopqrstuvwxyz012345",
            "abcdefghijklmnopqrstuvwxyz0123456",
        ];
        let long = "y".repeat(300);
        for &n in &numbers {
            for &text in &texts {
                let mut f = super::Trace::hashing();
                let mut p = super::Trace::hashing();
                let mut r = super::Trace::recording();
                crate::trace!(f, "t={n} {text}|{long}{}", n / 3);
                crate::trace_line!(p, "t=", n, " ", text, "|", &long, n / 3);
                crate::trace_line!(r, "t=", n, " ", text, "|", &long, n / 3);
                assert_eq!(p.hash(), f.hash(), "{n} {text:?}");
                assert_eq!(r.hash(), f.hash(), "{n} {text:?}");
                assert_eq!(r.lines()[0], format!("t={n} {text}|{long}{}", n / 3));
            }
        }
        let mut f = super::Trace::hashing();
        let mut p = super::Trace::hashing();
        crate::trace!(f, "c{} fitting={} {}", 3usize, true, 9u32);
        crate::trace_line!(p, "c", 3usize, " fitting=", true, " ", 9u32);
        assert_eq!(p.hash(), f.hash());
    }

    #[test]
    fn word_loads_hash_as_the_plain_definition() {
        // The definition: fold each whole little-endian word, keep the tail as pending.
        let reference = |b: &[u8]| {
            let mut h = StreamHash::new();
            let mut words = b.chunks_exact(8);
            for c in &mut words {
                let w = c.iter().rev().fold(0u64, |w, &x| w << 8 | u64::from(x));
                h.fold(w);
            }
            for (i, &x) in words.remainder().iter().enumerate() {
                h.pending |= u64::from(x) << (8 * i);
            }
            h.pending_len = words.remainder().len() as u32;
            h.total = b.len() as u64;
            h.finish()
        };
        let text: Vec<u8> = (0u8..=90).map(|i| i.wrapping_mul(151) ^ 0x5a).collect();
        for len in 0..text.len() {
            let b = &text[..len];
            for cut in 0..=len {
                let got = hash_pieces(&[&b[..cut], &b[cut..]]);
                assert_eq!(got, reference(b), "length {len} cut at {cut}");
            }
        }
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
