//! Shared value types for pgyard. Pure: no clocks, sockets, files or global randomness.
//!
//! Every other crate speaks in these: write-ahead-log positions ([`Lsn`]), transaction ids
//! ([`Xid`]), PostgreSQL wall-clock timestamps ([`PgTimestamp`]), the virtual monotonic clock that
//! state machines take as input ([`Instant`]) and the one seeded random source ([`Rng`]).
//!
//! It sits at the bottom of the workspace and depends on nothing of pgyard's. A driver meets
//! these types at the edges of the machines: it converts its own clock into [`Instant`]s
//! from an origin it chooses, and hands each machine a seed instead of a random source.
//!
//! ```
//! use std::time::Duration;
//! use pgyard_types::{rng_from_seed, uniform_inclusive, Instant, Lsn, PgTimestamp, UnixTime};
//!
//! // LSNs read and print as PostgreSQL's `pg_lsn` does.
//! let lsn: Lsn = "16/B374D848".parse()?;
//! assert_eq!(lsn, Lsn(0x16_B374_D848));
//! assert_eq!(lsn.to_string(), "16/B374D848");
//! assert!("16/".parse::<Lsn>().is_err());
//!
//! // PostgreSQL counts microseconds from 2000-01-01, Unix from 1970-01-01.
//! assert_eq!(PgTimestamp(0).to_unix(), UnixTime(946_684_800_000_000));
//!
//! // The machines' clock is a plain number of nanoseconds: deadlines are additions.
//! let deadline = Instant::ZERO + Duration::from_millis(250);
//! assert_eq!(deadline.saturating_duration_since(Instant::ZERO), Duration::from_millis(250));
//!
//! // One seed, one sequence: a run is replayed by reusing its seed.
//! let (mut a, mut b) = (rng_from_seed(42), rng_from_seed(42));
//! assert_eq!(uniform_inclusive(&mut a, 9), uniform_inclusive(&mut b, 9));
//! # Ok::<(), pgyard_types::LsnParseError>(())
//! ```

mod hash;
pub use hash::WordHasher;

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use nom::bytes::complete::{tag, take_while_m_n};
use nom::combinator::{all_consuming, map_res};
use nom::sequence::separated_pair;
use nom::{IResult, Parser};

pub use rand_chacha::ChaCha8Rng;
pub use rand_core::{RngCore, SeedableRng};

/// The project's seeded random source: reproducible across platforms and crate versions.
pub type Rng = ChaCha8Rng;

/// Builds the project RNG from a 64-bit seed.
pub fn rng_from_seed(seed: u64) -> Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// A second source beside `rng` (its position, another stream), which leaves `rng` as it was:
/// a draw added to a simulation takes it from here, so every draw made before stays the same
/// and old seeds keep their traces.
pub fn side_stream(rng: &Rng, stream: u64) -> Rng {
    let mut side = rng.clone();
    side.set_stream(stream);
    side
}

/// `len` bytes drawn from the project RNG seeded with `seed`: the reproducible stand-in for a
/// fuzzer's input in seeded tests and examples.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    rng_from_seed(seed).fill_bytes(&mut bytes);
    bytes
}

/// Draws a uniform integer in `0..=max` without modulo bias (rejection sampling).
pub fn uniform_inclusive(rng: &mut impl RngCore, max: u64) -> u64 {
    if max == u64::MAX {
        return rng.next_u64();
    }
    let range = max + 1;
    // Largest multiple of `range` that fits; values at or above it would bias the result.
    let zone = u64::MAX - (u64::MAX % range + 1) % range;
    loop {
        let v = rng.next_u64();
        if v <= zone {
            return v % range;
        }
    }
}

/// A position in the write-ahead log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

impl Lsn {
    /// The invalid LSN `0/0`.
    pub const INVALID: Lsn = Lsn(0);
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// Error for text that is not an LSN in PostgreSQL's `X/Y` form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LsnParseError(pub String);

impl fmt::Display for LsnParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid input syntax for type pg_lsn: \"{}\"", self.0)
    }
}

impl std::error::Error for LsnParseError {}

impl FromStr for Lsn {
    type Err = LsnParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // `pg_lsn_in`: two runs of 1 to 8 hex digits around one `/`, nothing else.
        fn half(input: &str) -> IResult<&str, u32, ()> {
            let digits = take_while_m_n(1, 8, |c: char| c.is_ascii_hexdigit());
            map_res(digits, |h| u32::from_str_radix(h, 16)).parse(input)
        }
        let (_, (hi, lo)) = all_consuming(separated_pair(half, tag("/"), half))
            .parse(s)
            .map_err(|_| LsnParseError(s.to_owned()))?;
        Ok(Lsn((u64::from(hi) << 32) | u64::from(lo)))
    }
}

/// A 32-bit transaction id as the protocol carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Xid(pub u32);

impl fmt::Display for Xid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Microseconds between the Unix epoch and PostgreSQL's epoch, 2000-01-01 00:00:00 UTC.
pub const PG_EPOCH_OFFSET_MICROS: i64 = 946_684_800_000_000;

/// A PostgreSQL timestamp: microseconds since 2000-01-01 00:00:00 UTC.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PgTimestamp(pub i64);

impl PgTimestamp {
    /// Converts from Unix wall time.
    pub fn from_unix(t: UnixTime) -> Self {
        PgTimestamp(t.0.saturating_sub(PG_EPOCH_OFFSET_MICROS))
    }
    /// Converts to Unix wall time.
    pub fn to_unix(self) -> UnixTime {
        UnixTime(self.0.saturating_add(PG_EPOCH_OFFSET_MICROS))
    }
}

/// Wall-clock time: microseconds since the Unix epoch. An input, never read by pure crates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixTime(pub i64);

/// A point on a virtual monotonic clock, in nanoseconds from an origin the driver chooses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instant(pub u64);

impl Instant {
    /// The clock's origin.
    pub const ZERO: Instant = Instant(0);

    /// Nanoseconds since the origin.
    pub fn as_nanos(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at the end of time.
    pub fn saturating_add(self, d: Duration) -> Instant {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Instant(self.0.saturating_add(nanos))
    }

    /// Time elapsed since `earlier`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
}

impl std::ops::Add<Duration> for Instant {
    type Output = Instant;
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_text_round_trip() {
        for (text, value) in [
            ("0/0", 0u64),
            ("0/2896DD0", 0x2896DD0),
            ("16/B374D848", 0x16_B374_D848),
        ] {
            let lsn: Lsn = text.parse().unwrap();
            assert_eq!(lsn, Lsn(value));
            assert_eq!(lsn.to_string(), text);
        }
        for bad in ["", "0", "/1", "1/", "g/1", "123456789/0", "1/2/3"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
    }

    #[test]
    fn lsn_text_edges() {
        assert_eq!("FFFFFFFF/ffffffff".parse::<Lsn>(), Ok(Lsn(u64::MAX)));
        assert_eq!("00000001/00000000".parse::<Lsn>(), Ok(Lsn(1 << 32)));
        for bad in [
            " 1/1",
            "1/1 ",
            "+1/1",
            "1/+1",
            "1/123456789",
            "1//1",
            "0x1/1",
            "1/1\n",
            "\u{661}/1",
        ] {
            assert_eq!(
                bad.parse::<Lsn>(),
                Err(LsnParseError(bad.to_owned())),
                "{bad:?}"
            );
        }
        assert_eq!(
            "x/1".parse::<Lsn>().unwrap_err().to_string(),
            "invalid input syntax for type pg_lsn: \"x/1\""
        );
    }

    #[test]
    fn pg_epoch_conversion() {
        let unix = UnixTime(PG_EPOCH_OFFSET_MICROS + 5);
        assert_eq!(PgTimestamp::from_unix(unix), PgTimestamp(5));
        assert_eq!(PgTimestamp(5).to_unix(), unix);
    }

    #[test]
    fn seeded_rng_is_reproducible_and_uniform_stays_in_range() {
        let mut a = rng_from_seed(7);
        let mut b = rng_from_seed(7);
        for max in [0u64, 1, 2, 6, 1000, u64::MAX] {
            let x = uniform_inclusive(&mut a, max);
            assert_eq!(x, uniform_inclusive(&mut b, max));
            assert!(x <= max);
        }
        let mut seen = [0u32; 3];
        for _ in 0..3000 {
            seen[uniform_inclusive(&mut a, 2) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 800), "{seen:?}");
    }

    #[test]
    fn instant_arithmetic_saturates() {
        let t = Instant(u64::MAX - 1) + Duration::from_secs(1);
        assert_eq!(t, Instant(u64::MAX));
        assert_eq!(
            Instant(5).saturating_duration_since(Instant(9)),
            Duration::ZERO
        );
    }
}
