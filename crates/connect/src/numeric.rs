//! Numeric IPv4 addresses as glibc reads them, for what libpq hands to `getaddrinfo` with
//! `AI_NUMERICHOST` (a `hostaddr`) and for the certificate-name check: the classic
//! `inet_aton` forms, not only the dotted quad Rust's parser takes; and IPv6 addresses with
//! a zone (`fe80::1%eth0`, `::1%1`), as glibc's `getaddrinfo` splits and reads them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};

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

/// What `getaddrinfo` with `AI_NUMERICHOST` makes of a `hostaddr`, as far as the text alone
/// can tell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NumericHost {
    /// An address; for IPv6, with the zone index the text gave (0: none).
    Addr(IpAddr, u32),
    /// An IPv6 address of link-local scope (unicast `fe80::/10`, multicast node- or
    /// link-local) with a zone: glibc first looks the zone up as an interface name, which
    /// only the system can answer, so the text goes to the system's resolver.
    Interface,
    /// Not a numeric address.
    Invalid,
}

impl NumericHost {
    /// The socket address at `port`, unless the system must be asked.
    pub fn at(self, port: u16) -> Option<SocketAddr> {
        match self {
            NumericHost::Addr(IpAddr::V6(ip), scope) => {
                Some(SocketAddr::V6(SocketAddrV6::new(ip, port, 0, scope)))
            }
            NumericHost::Addr(ip, _) => Some(SocketAddr::new(ip, port)),
            NumericHost::Interface | NumericHost::Invalid => None,
        }
    }
}

/// Reads `text` as glibc's `getaddrinfo` does a numeric host: `inet_aton`'s forms, else an
/// IPv6 address, where everything after the first `%` is its zone. Outside link-local
/// scope a zone must be decimal digits naming at most `u32::MAX` (`strtoull` over the whole
/// rest, which must start with a digit); an interface name is taken only in link-local
/// scope, and an IPv4 address never has a zone.
pub fn numeric_host(text: &str) -> NumericHost {
    if let Some(v4) = inet_aton(text) {
        return NumericHost::Addr(IpAddr::V4(v4), 0);
    }
    let (addr, zone) = match text.split_once('%') {
        Some((addr, zone)) => (addr, Some(zone)),
        None => (text, None),
    };
    let Ok(ip) = addr.parse::<Ipv6Addr>() else {
        return NumericHost::Invalid;
    };
    let Some(zone) = zone else {
        return NumericHost::Addr(IpAddr::V6(ip), 0);
    };
    if link_scoped(&ip) {
        return NumericHost::Interface;
    }
    let digits = !zone.is_empty() && zone.bytes().all(|b| b.is_ascii_digit());
    // Leading zeros are fine; past u32::MAX (or u64's overflow, where strtoull saturates) not.
    match zone.parse::<u64>().ok().and_then(|n| u32::try_from(n).ok()) {
        Some(scope) if digits => NumericHost::Addr(IpAddr::V6(ip), scope),
        _ => NumericHost::Invalid,
    }
}

/// glibc's scopes where a zone may be an interface name: unicast link-local and multicast
/// node- and link-local (the scope is the low half of the second byte).
fn link_scoped(ip: &Ipv6Addr) -> bool {
    let [a, b, ..] = ip.octets();
    (a == 0xfe && b & 0xc0 == 0x80) || (a == 0xff && matches!(b & 0x0f, 1 | 2))
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

    #[test]
    fn zones_as_glibc_reads_them() {
        let v6 = |t: &str, scope| NumericHost::Addr(IpAddr::V6(t.parse().expect("v6")), scope);
        assert_eq!(numeric_host("::1"), v6("::1", 0));
        assert_eq!(numeric_host("::1%1"), v6("::1", 1));
        assert_eq!(numeric_host("::1%0"), v6("::1", 0));
        assert_eq!(numeric_host("::1%007"), v6("::1", 7));
        assert_eq!(
            numeric_host("2001:db8::1%4294967295"),
            v6("2001:db8::1", u32::MAX)
        );
        assert_eq!(numeric_host("::ffff:10.0.0.1%3"), v6("::ffff:10.0.0.1", 3));
        assert_eq!(
            numeric_host("127.1"),
            NumericHost::Addr(IpAddr::V4(Ipv4Addr::LOCALHOST), 0)
        );
        // Interface names only in link-local scope; there the system must say.
        for asks in [
            "fe80::1%lo",
            "fe80::1%1",
            "febf::1%eth0",
            "fe80::1%",
            "ff02::1%lo",
            "ff12::1%2",
            "ff01::1%lo",
        ] {
            assert_eq!(numeric_host(asks), NumericHost::Interface, "{asks:?}");
        }
        for refused in [
            "::1%lo",
            "::1%",
            "::1%1%2",
            "::1%+1",
            "::1% 1",
            "::1%1 ",
            "::1%4294967296",
            "::1%99999999999999999999999",
            "fec0::1%lo",
            "ff05::1%lo",
            "127.0.0.1%1",
            "%1",
            "host%1",
            "[::1]%1",
        ] {
            assert_eq!(numeric_host(refused), NumericHost::Invalid, "{refused:?}");
        }
        assert_eq!(
            numeric_host("::1%2").at(5432),
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::LOCALHOST,
                5432,
                0,
                2
            )))
        );
        assert_eq!(NumericHost::Interface.at(5432), None);
    }
}
