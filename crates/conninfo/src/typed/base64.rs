//! The base64 decoder libpq uses for the SCRAM pass-through keys (`pg_b64_decode`), with its
//! leniencies: characters after the padding are still decoded, whitespace is an error, and the
//! input must end on a 4-character boundary.

/// Decodes `src`; `None` where PostgreSQL's decoder reports an error.
pub(crate) fn decode(src: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut group: u32 = 0;
    let mut filled = 0u8;
    // 0: no padding seen; 1: padding began at the 3rd character of a group (one byte per
    // group from then on); 2: it began at the 4th (two bytes per group).
    let mut padding = 0u8;
    for &c in src {
        let sextet = if c == b'=' {
            if padding == 0 {
                padding = match filled {
                    2 => 1,
                    3 => 2,
                    _ => return None,
                };
            }
            0
        } else {
            sextet_of(c)?
        };
        group = (group << 6) | sextet;
        filled += 1;
        if filled == 4 {
            out.push((group >> 16) as u8);
            if padding != 1 {
                out.push((group >> 8) as u8);
            }
            if padding == 0 {
                out.push(group as u8);
            }
            group = 0;
            filled = 0;
        }
    }
    if filled != 0 {
        return None;
    }
    Some(out)
}

/// The 6-bit value of a base64 alphabet character (standard alphabet, `+` and `/`).
fn sextet_of(c: u8) -> Option<u32> {
    let v = match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    };
    Some(u32::from(v))
}

#[cfg(test)]
mod tests {
    use super::decode;

    #[test]
    fn standard_inputs() {
        assert_eq!(decode(b"").as_deref(), Some(&b""[..]));
        assert_eq!(decode(b"TWFu").as_deref(), Some(&b"Man"[..]));
        assert_eq!(decode(b"TWE=").as_deref(), Some(&b"Ma"[..]));
        assert_eq!(decode(b"TQ==").as_deref(), Some(&b"M"[..]));
        assert_eq!(decode(b"+/+/").as_deref(), Some(&[0xfb, 0xff, 0xbf][..]));
    }

    #[test]
    fn errors() {
        for bad in [
            &b"abc"[..],
            b"a",
            b"ab c",
            b"ab\tc",
            b"T===",
            b"=AAA",
            b"AA-A",
            b"\xc3\xa9AA",
        ] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn postgres_leniencies() {
        // After padding began, later groups still decode, one byte each (padding at 3rd char).
        assert_eq!(decode(b"TQ==TQ==").as_deref(), Some(&b"MM"[..]));
        assert_eq!(decode(b"TQ==TWFu").as_deref(), Some(&b"MM"[..]));
        // Padding at the 4th char: two bytes per later group.
        assert_eq!(decode(b"TWE=TWFu").as_deref(), Some(&b"MaMa"[..]));
        // A second '=' inside the same group is fine once padding began.
        assert_eq!(decode(b"TQ=A").as_deref(), Some(&b"M"[..]));
    }
}
