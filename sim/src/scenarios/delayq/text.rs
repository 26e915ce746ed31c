//! Numbers in trace lines, written in one piece: the same text as their `Display`, without
//! the formatting machinery's padding logic per digit group. A few lines are traced for every
//! transaction of every seed, and formatting them was a twentieth of a run.

use std::fmt;

use pgyard_types::Lsn;

/// A signed decimal number.
pub(super) struct Dec(pub i64);

/// An LSN as its `Display` shows it: `X/Y`, upper-case hex.
pub(super) struct LsnText(pub Lsn);

impl fmt::Display for Dec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 20];
        let mut at = buf.len();
        let mut n = self.0.unsigned_abs();
        loop {
            at -= 1;
            buf[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        if self.0 < 0 {
            f.write_str("-")?;
        }
        f.write_str(ascii(&buf[at..]))
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

/// The text of bytes this module wrote (always ASCII).
fn ascii(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("?")
}

#[cfg(test)]
mod tests {
    use super::{Dec, LsnText};
    use pgyard_types::Lsn;

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
