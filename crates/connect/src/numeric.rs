//! Numeric IPv4 addresses as glibc reads them, for what libpq hands to `getaddrinfo` with
//! `AI_NUMERICHOST` (a `hostaddr`) and for the certificate-name check: the classic
//! `inet_aton` forms, not only the dotted quad Rust's parser takes.

use std::net::Ipv4Addr;

/// The address `text` names in `inet_aton`'s forms, the whole text and nothing after it (as
/// glibc's `__inet_aton_exact`, which `getaddrinfo` uses): one to four parts separated by
/// dots, each decimal, octal (a leading `0`) or hexadecimal (`0x`), every part but the last
/// one byte and the last filling the bytes left (`127.1` is 127.0.0.1, `2130706433` too).
pub fn inet_aton(text: &str) -> Option<Ipv4Addr> {
    let parts = text.split('.').map(part).collect::<Option<Vec<u32>>>()?;
    let (&last, leading) = parts.split_last()?;
    if leading.len() > 3 || leading.iter().any(|&p| p > 0xff) {
        return None;
    }
    let last_bits = 32 - 8 * leading.len() as u32;
    if last_bits < 32 && last >> last_bits != 0 {
        return None;
    }
    let value = leading
        .iter()
        .enumerate()
        .fold(last, |acc, (i, &p)| acc | (p << (24 - 8 * i as u32)));
    Some(Ipv4Addr::from(value))
}

/// One part: it must start with a digit (`strtoul` with base 0 reads it, and glibc refuses
/// what does not start with one: a sign, a blank, an empty part).
fn part(text: &str) -> Option<u32> {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let (digits, radix) = match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if text.len() > 1 && text.starts_with('0') => (&text[1..], 8),
        None => (text, 10),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_forms_glibc_takes_and_refuses() {
        let v4 = |a, b, c, d| Some(Ipv4Addr::new(a, b, c, d));
        assert_eq!(inet_aton("127.0.0.1"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("127.1"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("127.0.1"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("2130706433"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("0x7f.1"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("0177.0.0.01"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("0X7F000001"), v4(127, 0, 0, 1));
        assert_eq!(inet_aton("1.2.65535"), v4(1, 2, 255, 255));
        assert_eq!(inet_aton("0"), v4(0, 0, 0, 0));
        assert_eq!(inet_aton("1.0x100"), v4(1, 0, 1, 0));
        for refused in [
            "",
            ".",
            "1.",
            ".1",
            "1..2",
            "1.2.3.4.5",
            "256.1",
            "1.2.3.256",
            "1.2.65536",
            "4294967296",
            "0x",
            "0x1g",
            "08",
            "09.1",
            "+1",
            " 1",
            "1 ",
            "1.2.3.4 ",
            "a.b",
            "0x100000000",
            "1.2.3.0x100",
        ] {
            assert_eq!(inet_aton(refused), None, "{refused:?}");
        }
    }
}
