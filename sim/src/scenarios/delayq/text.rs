//! Numbers in trace lines, written in one piece: the same text as their `Display`, without
//! the formatting machinery's padding logic per digit group. A few lines are traced for every
//! transaction of every seed, and formatting them was a twentieth of a run.

use std::fmt;

use pgyard_types::Lsn;

use crate::trace::decimal;

/// A signed decimal number.
pub(super) struct Dec(pub i64);

/// An LSN as its `Display` shows it: `X/Y`, upper-case hex.
pub(super) struct LsnText(pub Lsn);

impl fmt::Display for Dec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 20];
        if self.0 < 0 {
            f.write_str("-")?;
        }
        f.write_str(ascii(decimal(self.0.unsigned_abs(), &mut buf)))
    }
}

impl fmt::Display for LsnText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(lsn_str(self.0, &mut [0u8; 17]))
    }
}

/// The text of [`LsnText`], written into `buf`: for a `trace_line!` piece.
pub(super) fn lsn_str(lsn: Lsn, buf: &mut [u8; 17]) -> &str {
    let mut len = hex(lsn.0 >> 32, buf);
    buf[len] = b'/';
    len += 1;
    let mut low = [0u8; 8];
    let n = hex(lsn.0 & 0xFFFF_FFFF, &mut low);
    buf[len..len + n].copy_from_slice(&low[..n]);
    ascii(&buf[..len + n])
}

/// Writes `v` (below 2^32) in upper-case hex at the start of `out`; returns how many digits.
fn hex(v: u64, out: &mut [u8]) -> usize {
    let digits = (64 - (v | 1).leading_zeros() as usize).div_ceil(4);
    for (i, slot) in out[..digits].iter_mut().enumerate() {
        let d = (v >> (4 * (digits - 1 - i))) & 0xF;
        *slot = b"0123456789ABCDEF"[d as usize];
    }
    digits
}

/// The LSN and commit time of the origin-progress-and-COMMIT query the apply machine ends a
/// transaction with (`SELECT pg_catalog.pg_replication_origin_xact_setup('L', 'T'); COMMIT`),
/// the time as microseconds since the Unix epoch; `None` for any other text.
pub(super) fn origin_setup(sql: &str) -> Option<(Lsn, i64)> {
    let rest = sql.strip_prefix("SELECT pg_catalog.pg_replication_origin_xact_setup('")?;
    let (lsn, rest) = rest.split_once("', '")?;
    let ts = rest.strip_suffix("'); COMMIT")?;
    Some((lsn.parse().ok()?, utc_micros(ts)?))
}

/// `YYYY-MM-DD HH:MM:SS.ffffff+00` as microseconds since the Unix epoch (what a server reads
/// from that text; any other form is `None`).
fn utc_micros(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    let seps = [
        (4, b'-'),
        (7, b'-'),
        (10, b' '),
        (13, b':'),
        (16, b':'),
        (19, b'.'),
    ];
    if b.len() != 29 || &b[26..] != b"+00" || seps.iter().any(|(i, c)| b[*i] != *c) {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        b[r].iter().try_fold(0i64, |n, c| {
            Some(n * 10 + i64::from(c.checked_sub(b'0').filter(|d| *d < 10)?))
        })
    };
    let (y, m, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hh, mm, ss, us) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || hh > 23 || mm > 59 || ss > 59 {
        return None;
    }
    // Days since 1970-01-01: count from a year that starts in March, so that the leap day
    // falls at the end of the counted year.
    let y = if m <= 2 { y - 1 } else { y };
    let shifted_month = (m + 9) % 12;
    let day_of_year = (153 * shifted_month + 2) / 5 + d - 1;
    let days =
        365 * y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400) + day_of_year - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000_000 + ss * 1_000_000 + us)
}

/// The text of bytes this module wrote (always ASCII).
fn ascii(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::{origin_setup, Dec, LsnText};
    use pgyard_delayq::apply::Plan;
    use pgyard_types::{Lsn, PgTimestamp, UnixTime};

    #[test]
    fn the_commit_query_reads_back() {
        // Around the Unix and PostgreSQL epochs, leap days, a century that is not a leap year,
        // and far from both; before 1970 too.
        for unix in [
            0i64,
            -1,
            946_684_800_000_000,
            951_782_400_123_456,
            4_107_542_399_999_999,
            1_700_000_000_654_321,
            -2_208_988_800_000_000,
            253_402_300_799_999_999,
        ] {
            let plan = Plan {
                steps: Vec::new(),
                commit_lsn: Lsn(1),
                end_lsn: Lsn(0x1_0000_00A8),
                commit_ts: PgTimestamp::from_unix(UnixTime(unix)),
                changes: 0,
                opens: true,
                closes: true,
            };
            let sql = plan.commit_sql();
            assert_eq!(
                origin_setup(&sql),
                Some((Lsn(0x1_0000_00A8), unix)),
                "{sql}"
            );
        }
        assert_eq!(origin_setup("COMMIT"), None);
        let bad = "SELECT pg_catalog.pg_replication_origin_xact_setup('0/1', \
                   '2024-13-01 00:00:00.000000+00'); COMMIT";
        assert_eq!(origin_setup(bad), None, "month 13");
    }

    #[test]
    fn same_text_as_display() {
        for n in [0i64, 7, -7, 10, 1_700_000_000_123_456, i64::MIN, i64::MAX] {
            assert_eq!(Dec(n).to_string(), n.to_string());
        }
        for l in [
            0u64,
            0xF,
            0x10,
            0x1_0000_0000,
            0x100_0048,
            0xFFFF_FFFF_FFFF_FFFF,
            0xAB_0000_0001,
        ] {
            assert_eq!(LsnText(Lsn(l)).to_string(), Lsn(l).to_string());
        }
    }
}
