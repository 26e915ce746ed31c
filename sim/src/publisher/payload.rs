//! The publisher's payload bytes, written without `format!`: one or two per message of every
//! seed, and the same bytes `format!` would give (the trace hashes them).

/// Appends `n` in decimal to `out`: what `format!("{n}")` writes, without the formatting
/// machinery (payloads are built for every message of every seed).
pub(crate) fn decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(crate::trace::decimal(n, &mut [0u8; 20]));
}

/// A payload naming what it carries: `tag`, then `n` in decimal (`B1000` for a Begin).
pub(super) fn tagged(tag: u8, n: u64) -> Vec<u8> {
    let mut p = Vec::with_capacity(24);
    p.push(tag);
    decimal(&mut p, n);
    p
}

/// `tag`, `a`, `sep`, `b`: `C1000.7` for the 7th change, made by transaction 1000.
pub(super) fn pair(tag: u8, a: u64, sep: u8, b: u64) -> Vec<u8> {
    let mut p = tagged(tag, a);
    p.push(sep);
    decimal(&mut p, b);
    p
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_bytes_are_what_format_writes() {
        for n in [0, 7, 10, 99, 1000, 123_456_789, u64::MAX] {
            let mut d = Vec::new();
            super::decimal(&mut d, n);
            assert_eq!(d, n.to_string().into_bytes());
            assert_eq!(super::tagged(b'B', n), format!("B{n}").into_bytes());
            assert_eq!(
                super::pair(b'C', n, b'.', 3),
                format!("C{n}.3").into_bytes()
            );
        }
    }
}
