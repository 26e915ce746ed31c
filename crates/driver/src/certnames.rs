//! The names in a server certificate that libpq compares with the host name, and libpq's
//! exact texts when none matches: subjectAltNames of both kinds, the Common Name when no
//! subjectAltName has the host's kind, addresses in PostgreSQL's notation. Certificates come
//! from the network, so the reader returns `None` on anything malformed and never panics.

use std::sync::Arc;

use rustls::CertificateError;

/// libpq's verdict against a server certificate's names, for a verifier to return (through
/// [`HostNameMismatch::error`]) instead of webpki's: libpq, not webpki, decides which names a
/// `verify-full` connection accepts (the Common Name when no subjectAltName has the host's
/// kind, a dNSName spelt like an address, `inet_aton`'s forms of IPv4), and words the refusal
/// with every address in PostgreSQL's notation, which webpki's error cannot give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostNameMismatch {
    /// libpq's text for the refusal (see [`CertificateNames::check`]).
    pub text: String,
}

impl HostNameMismatch {
    /// The rustls error that carries libpq's `text`, for [`crate::tls::handshake_error_text`].
    pub fn error(text: String) -> rustls::Error {
        rustls::Error::InvalidCertificate(CertificateError::Other(rustls::OtherError(Arc::new(
            HostNameMismatch { text },
        ))))
    }
}

impl std::fmt::Display for HostNameMismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for HostNameMismatch {}

/// The names in a server certificate that libpq compares with the host name: the DNS and IP
/// subjectAltNames in certificate order, and the subject's first Common Name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertificateNames {
    sans: Vec<SanName>,
    common_name: Option<Vec<u8>>,
}

/// [`CertificateNames::parts`]: the DNS (`true`) and IP subjectAltNames, the Common Name.
#[cfg(feature = "fuzzing")]
pub(crate) type NameParts<'a> = (Vec<(bool, &'a [u8])>, Option<&'a [u8]>);

/// One subjectAltName libpq examines; the other kinds (e-mail, URI, directory name, …) it skips.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SanName {
    Dns(Vec<u8>),
    Ip(Vec<u8>),
    /// An address webpki printed too lossily to recover (an IPv6 address with several runs
    /// of zeros), shown as webpki printed it.
    IpText(String),
}

impl CertificateNames {
    /// Reads the names from a DER certificate; `None` if it is not one.
    pub fn from_der(der: &[u8]) -> Option<CertificateNames> {
        let mut input = der;
        let mut certificate = der_expect(&mut input, DER_SEQUENCE)?;
        let mut tbs = der_expect(&mut certificate, DER_SEQUENCE)?;
        let (mut tag, _) = der_next(&mut tbs)?;
        if tag == DER_VERSION {
            (tag, _) = der_next(&mut tbs)?;
        }
        if tag != DER_INTEGER {
            return None;
        }
        // signature algorithm, issuer, validity
        for _ in 0..3 {
            der_expect(&mut tbs, DER_SEQUENCE)?;
        }
        let subject = der_expect(&mut tbs, DER_SEQUENCE)?;
        der_expect(&mut tbs, DER_SEQUENCE)?;
        let mut sans = Vec::new();
        // What follows the key: the optional unique identifiers, then the extensions.
        while let Some((tag, value)) = der_next(&mut tbs) {
            if tag == DER_EXTENSIONS {
                sans = subject_alt_names(value)?;
            }
        }
        Some(CertificateNames {
            sans,
            common_name: common_name(subject),
        })
    }

    /// libpq's verdict on `host` (as written in the connection string): `Ok` when one of the
    /// names matches, else libpq's error text.
    pub fn check(&self, host: &str) -> Result<(), String> {
        if host.is_empty() {
            return Err("host name must be specified for a verified SSL connection".to_owned());
        }
        let host_is_ip = inet_aton(host).is_some() || host.parse::<std::net::Ipv6Addr>().is_ok();
        let mut examined = 0usize;
        let mut first = None;
        // libpq falls back to the Common Name unless a subjectAltName has the host's kind.
        let mut check_cn = true;
        for san in &self.sans {
            let san_is_ip = !matches!(san, SanName::Dns(_));
            if san_is_ip == host_is_ip {
                check_cn = false;
            }
            examined += 1;
            let (matched, shown) = match san {
                SanName::Dns(name) => name_matches(name, host)?,
                SanName::Ip(address) => address_matches(address, host)?,
                SanName::IpText(text) => (false, text.clone()),
            };
            first.get_or_insert(shown);
            if matched {
                return Ok(());
            }
        }
        if let (true, Some(cn)) = (check_cn, &self.common_name) {
            examined += 1;
            let (matched, shown) = name_matches(cn, host)?;
            first.get_or_insert(shown);
            if matched {
                return Ok(());
            }
        }
        Err(match (first, examined.saturating_sub(1)) {
            (None, _) => "could not get server's host name from server certificate".to_owned(),
            (Some(first), 0) => {
                format!("server certificate for \"{first}\" does not match host name \"{host}\"")
            }
            (Some(first), others) => format!(
                "server certificate for \"{first}\" (and {others} other name{}) does not match host name \"{host}\"",
                if others == 1 { "" } else { "s" }
            ),
        })
    }

    /// The DNS (`true`) and IP (`false`) subjectAltNames in order, and the Common Name's
    /// bytes: what the differential fuzz target compares with another X.509 reader.
    #[cfg(feature = "fuzzing")]
    pub(crate) fn parts(&self) -> NameParts<'_> {
        let sans = self
            .sans
            .iter()
            .filter_map(|s| match s {
                SanName::Dns(n) => Some((true, n.as_slice())),
                SanName::Ip(a) => Some((false, a.as_slice())),
                SanName::IpText(_) => None,
            })
            .collect();
        (sans, self.common_name.as_deref())
    }

    /// The names in webpki's error: the subjectAltNames, but not the Common Name.
    pub(crate) fn from_presented(presented: &[String]) -> CertificateNames {
        CertificateNames {
            sans: presented.iter().filter_map(|n| presented_name(n)).collect(),
            common_name: None,
        }
    }

    /// libpq's text for a certificate webpki refused for `host`, from webpki's list alone
    /// (only where the certificate was one this module cannot read, so libpq's own verdict
    /// could not be reached).
    pub(crate) fn mismatch_text(&self, host: &str) -> String {
        match self.check(host) {
            Err(text) => text,
            // webpki refused a name that libpq would take: no libpq text exists for that.
            Ok(()) => format!("server certificate does not match host name \"{host}\""),
        }
    }
}

/// One name from webpki's list, which holds each subjectAltName's `Debug` form:
/// `DnsName("x")`, `IpAddress(10.0.0.1)`, `UniformResourceIdentifier("…")`, `Unsupported(0x01)`, ….
fn presented_name(n: &str) -> Option<SanName> {
    if let Some(name) = n
        .strip_prefix("DnsName(\"")
        .and_then(|r| r.strip_suffix("\")"))
    {
        return Some(SanName::Dns(name.as_bytes().to_vec()));
    }
    let text = n.strip_prefix("IpAddress(")?.strip_suffix(')')?;
    if let Some(bytes) = text
        .strip_prefix("[invalid: ")
        .and_then(|r| r.strip_suffix(']'))
    {
        let bytes = bytes
            .split(", ")
            .map(|b| u8::from_str_radix(b, 16).ok())
            .collect::<Option<Vec<u8>>>();
        return Some(bytes.map_or_else(|| SanName::IpText(text.to_owned()), SanName::Ip));
    }
    if let Ok(v4) = text.parse::<std::net::Ipv4Addr>() {
        return Some(SanName::Ip(v4.octets().to_vec()));
    }
    Some(webpki_ipv6(text).map_or_else(
        || SanName::IpText(text.to_owned()),
        |a| SanName::Ip(a.to_vec()),
    ))
}

/// Recovers an IPv6 address from webpki's notation, which leaves out every zero group after
/// the first group (a run inside the address becomes `::`, one at the end disappears), so
/// only the group count says how many zeros are gone. With a single `::` the zeros are taken
/// to be there, as the usual notation reads it; with several, only if each stands for one.
fn webpki_ipv6(text: &str) -> Option<[u8; 16]> {
    let runs: Vec<&str> = text.split("::").collect();
    let mut groups = Vec::with_capacity(runs.len());
    for run in &runs {
        let parsed = run
            .split(':')
            .map(|g| u16::from_str_radix(g, 16).ok())
            .collect::<Option<Vec<u16>>>()?;
        groups.push(parsed);
    }
    let written: usize = groups.iter().map(Vec::len).sum();
    let missing = 8usize.checked_sub(written)?;
    let gaps = runs.len() - 1;
    let (per_gap, trailing) = match gaps {
        0 => (0, missing),
        1 if missing >= 1 => (missing, 0),
        _ if missing == gaps => (1, 0),
        _ => return None,
    };
    let mut words = Vec::with_capacity(8);
    for (i, run) in groups.iter().enumerate() {
        if i > 0 {
            words.extend(std::iter::repeat_n(0, per_gap));
        }
        words.extend_from_slice(run);
    }
    words.extend(std::iter::repeat_n(0, trailing));
    let mut out = [0u8; 16];
    for (chunk, word) in out.chunks_exact_mut(2).zip(&words) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    Some(out)
}

/// libpq's comparison of a DNS name or Common Name with the host: the name and how libpq
/// prints it, or libpq's error for a name with a NUL in it.
fn name_matches(name: &[u8], host: &str) -> Result<(bool, String), String> {
    if name.contains(&0) {
        return Err("SSL certificate's name contains embedded null".to_owned());
    }
    let host = host.as_bytes();
    let matched = name.eq_ignore_ascii_case(host) || wildcard_matches(name, host);
    Ok((matched, String::from_utf8_lossy(name).into_owned()))
}

/// libpq's wildcard rule: only a leading `*.`, and the `*` covers no dot (except, as in libpq,
/// one at its very end).
fn wildcard_matches(pattern: &[u8], host: &[u8]) -> bool {
    if pattern.len() < 3 || !pattern.starts_with(b"*.") || pattern.len() > host.len() {
        return false;
    }
    let star_end = host.len() - pattern.len();
    host[star_end + 1..].eq_ignore_ascii_case(&pattern[1..])
        && host.iter().position(|&c| c == b'.') >= Some(star_end)
}

/// libpq's comparison of an iPAddress subjectAltName with the host, and the address as libpq
/// prints it.
fn address_matches(address: &[u8], host: &str) -> Result<(bool, String), String> {
    if let Ok(v4) = <[u8; 4]>::try_from(address) {
        let shown = std::net::Ipv4Addr::from(v4).to_string();
        return Ok((inet_aton(host) == Some(v4), shown));
    }
    if let Ok(v6) = <[u8; 16]>::try_from(address) {
        let matched = host.parse::<std::net::Ipv6Addr>().ok() == Some(std::net::Ipv6Addr::from(v6));
        return Ok((matched, ipv6_text(&v6)));
    }
    Err(format!(
        "certificate contains IP address with invalid length {}",
        address.len()
    ))
}

/// An IPv6 address as PostgreSQL prints one: the first longest run of two or more zero groups
/// as `::`, and the last 32 bits dotted after `::` or `::ffff:` (Rust's `Display` differs
/// on `::a.b.c.d` and on ties).
fn ipv6_text(address: &[u8; 16]) -> String {
    let words: Vec<u16> = address
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    let mut best: Option<(usize, usize)> = None;
    let mut i = 0;
    while i < 8 {
        if words[i] != 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < 8 && words[i] == 0 {
            i += 1;
        }
        if best.is_none_or(|(_, len)| i - start > len) {
            best = Some((start, i - start));
        }
    }
    let (run_start, run_len) = best.filter(|&(_, len)| len >= 2).unwrap_or((8, 0));
    let embedded_v4 = run_start == 0 && (run_len == 6 || (run_len == 5 && words[5] == 0xffff));
    let mut out = String::new();
    for (i, word) in words.iter().enumerate() {
        if (run_start..run_start + run_len).contains(&i) {
            if i == run_start {
                out.push(':');
            }
            continue;
        }
        if i != 0 {
            out.push(':');
        }
        if i == 6 && embedded_v4 {
            let v4 = std::net::Ipv4Addr::new(address[12], address[13], address[14], address[15]);
            out.push_str(&v4.to_string());
            return out;
        }
        out.push_str(&format!("{word:x}"));
    }
    if run_len > 0 && run_start + run_len == 8 {
        out.push(':');
    }
    out
}

/// Whether libpq takes `host` for an IPv4 address, as glibc's `inet_aton` reads one (see
/// `pgyard_connect::inet_aton`), anything after the first blank ignored.
fn inet_aton(host: &str) -> Option<[u8; 4]> {
    let text = host.split(|c: char| c.is_ascii_whitespace()).next()?;
    pgyard_connect::inet_aton(text).map(|a| a.octets())
}

const DER_INTEGER: u8 = 0x02;
const DER_OCTET_STRING: u8 = 0x04;
const DER_OID: u8 = 0x06;
const DER_BOOLEAN: u8 = 0x01;
const DER_SEQUENCE: u8 = 0x30;
const DER_SET: u8 = 0x31;
const DER_VERSION: u8 = 0xa0;
const DER_EXTENSIONS: u8 = 0xa3;
const DER_DNS_NAME: u8 = 0x82;
const DER_IP_ADDRESS: u8 = 0x87;
/// 2.5.29.17, subjectAltName.
const OID_SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];
/// 2.5.4.3, commonName.
const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];

/// The next DER element of `input` (pgyard-wire's reader): its tag and contents.
fn der_next<'a>(input: &mut &'a [u8]) -> Option<(u8, &'a [u8])> {
    let (tag, contents, after) = pgyard_wire::der::element(input).ok()?;
    *input = after;
    Some((tag, contents))
}

/// The contents of the next element of `input`, which must have tag `tag`.
fn der_expect<'a>(input: &mut &'a [u8], tag: u8) -> Option<&'a [u8]> {
    let (contents, after) = pgyard_wire::der::expect(input, tag).ok()?;
    *input = after;
    Some(contents)
}

/// The DNS and IP names of the subjectAltName extension, in order, from the extensions field.
fn subject_alt_names(mut explicit: &[u8]) -> Option<Vec<SanName>> {
    let mut extensions = der_expect(&mut explicit, DER_SEQUENCE)?;
    while !extensions.is_empty() {
        let mut extension = der_expect(&mut extensions, DER_SEQUENCE)?;
        if der_expect(&mut extension, DER_OID)? != OID_SUBJECT_ALT_NAME {
            continue;
        }
        let (mut tag, mut value) = der_next(&mut extension)?;
        if tag == DER_BOOLEAN {
            (tag, value) = der_next(&mut extension)?;
        }
        if tag != DER_OCTET_STRING {
            return None;
        }
        let mut names = der_expect(&mut value, DER_SEQUENCE)?;
        let mut out = Vec::new();
        while !names.is_empty() {
            match der_next(&mut names)? {
                (DER_DNS_NAME, name) => out.push(SanName::Dns(name.to_vec())),
                (DER_IP_ADDRESS, address) => out.push(SanName::Ip(address.to_vec())),
                _ => {}
            }
        }
        return Some(out);
    }
    Some(Vec::new())
}

/// The first Common Name of a subject, as the bytes of its string (libpq compares those).
fn common_name(mut rdns: &[u8]) -> Option<Vec<u8>> {
    while !rdns.is_empty() {
        let mut set = der_expect(&mut rdns, DER_SET)?;
        while !set.is_empty() {
            let mut attribute = der_expect(&mut set, DER_SEQUENCE)?;
            if der_expect(&mut attribute, DER_OID)? == OID_COMMON_NAME {
                return der_next(&mut attribute).map(|(_, value)| value.to_vec());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::handshake_error_text;
    use rustls::pki_types::ServerName;
    use std::net::IpAddr;

    fn names(sans: Vec<SanName>, cn: Option<&str>) -> CertificateNames {
        CertificateNames {
            sans,
            common_name: cn.map(|c| c.as_bytes().to_vec()),
        }
    }

    fn dns(n: &str) -> SanName {
        SanName::Dns(n.as_bytes().to_vec())
    }

    fn ip(a: &str) -> SanName {
        match a.parse::<IpAddr>().unwrap() {
            IpAddr::V4(v4) => SanName::Ip(v4.octets().to_vec()),
            IpAddr::V6(v6) => SanName::Ip(v6.octets().to_vec()),
        }
    }

    fn mismatch(first: &str, others: usize, host: &str) -> Result<(), String> {
        Err(match others {
            0 => format!("server certificate for \"{first}\" does not match host name \"{host}\""),
            1 => format!("server certificate for \"{first}\" (and 1 other name) does not match host name \"{host}\""),
            n => format!("server certificate for \"{first}\" (and {n} other names) does not match host name \"{host}\""),
        })
    }

    #[test]
    fn counts_sans_of_both_kinds_and_the_cn_only_without_a_san_of_the_hosts_kind() {
        let three = names(vec![dns("a.x"), dns("b.x"), dns("c.x")], Some("cn.x"));
        assert_eq!(three.check("db.x"), mismatch("a.x", 2, "db.x"));
        assert_eq!(three.check("10.0.0.9"), mismatch("a.x", 3, "10.0.0.9"));
        let mixed = names(vec![ip("10.0.0.1"), dns("a.x")], Some("cn.x"));
        assert_eq!(mixed.check("db.x"), mismatch("10.0.0.1", 1, "db.x"));
        assert_eq!(mixed.check("10.0.0.9"), mismatch("10.0.0.1", 1, "10.0.0.9"));
        let only_ip = names(vec![ip("10.0.0.1")], Some("cn.x"));
        assert_eq!(only_ip.check("db.x"), mismatch("10.0.0.1", 1, "db.x"));
        let cn_only = names(vec![], Some("cn.x"));
        assert_eq!(cn_only.check("db.x"), mismatch("cn.x", 0, "db.x"));
        assert_eq!(
            names(vec![], None).check("db.x"),
            Err("could not get server's host name from server certificate".to_owned())
        );
    }

    #[test]
    fn matches_as_libpq_does() {
        let n = names(
            vec![dns("*.example.com"), ip("10.0.0.1")],
            Some("127.0.0.1"),
        );
        assert_eq!(n.check("DB.Example.COM"), Ok(()));
        assert_eq!(n.check("10.0.0.1"), Ok(()));
        assert_eq!(n.check("10.1"), Ok(()), "inet_aton reads 10.1 as 10.0.0.1");
        assert_eq!(n.check("10.2"), mismatch("*.example.com", 1, "10.2"));
        assert_eq!(n.check("012.0.0.1"), Ok(()), "inet_aton reads octal");
        assert!(n.check("a.b.example.com").is_err());
        // No iPAddress SAN: an IP host falls back to the Common Name, even past a DNS SAN.
        let dns_only = names(vec![dns("db.x")], Some("127.0.0.1"));
        assert_eq!(dns_only.check("127.0.0.1"), Ok(()));
        // A DNS name written like the address matches too.
        assert_eq!(
            names(vec![dns("127.0.0.1")], None).check("127.0.0.1"),
            Ok(())
        );
    }

    #[test]
    fn libpq_errors_for_names_it_cannot_use() {
        let nul = CertificateNames {
            sans: vec![SanName::Dns(b"a\0.x".to_vec())],
            common_name: None,
        };
        assert_eq!(
            nul.check("a.x"),
            Err("SSL certificate's name contains embedded null".to_owned())
        );
        let short = names(vec![SanName::Ip(vec![10, 0, 0])], None);
        assert_eq!(
            short.check("a.x"),
            Err("certificate contains IP address with invalid length 3".to_owned())
        );
        assert_eq!(
            names(vec![dns("a.x")], None).check(""),
            Err("host name must be specified for a verified SSL connection".to_owned())
        );
    }

    #[test]
    fn wildcards() {
        assert!(wildcard_matches(b"*.x.org", b"a.x.org"));
        assert!(wildcard_matches(b"*.X.org", b"a.x.ORG"));
        assert!(!wildcard_matches(b"*.x.org", b"x.org"));
        assert!(!wildcard_matches(b"*.x.org", b"a.b.x.org"));
        assert!(!wildcard_matches(b"a.*.org", b"a.x.org"));
        assert!(!wildcard_matches(b"*.", b"a."));
        // libpq lets the `*` end in a dot.
        assert!(wildcard_matches(b"*.b", b"a..b"));
    }

    #[test]
    fn inet_aton_reads_what_glibc_reads() {
        let ok = [
            ("127.0.0.1", [127, 0, 0, 1]),
            ("127.1", [127, 0, 0, 1]),
            ("0x7f.0.1", [127, 0, 0, 1]),
            ("2130706433", [127, 0, 0, 1]),
            ("010.0.0.1", [8, 0, 0, 1]),
            ("0", [0, 0, 0, 0]),
            ("1.2.3.4 trailing", [1, 2, 3, 4]),
            ("1.65535", [1, 0, 255, 255]),
        ];
        for (text, bytes) in ok {
            assert_eq!(inet_aton(text), Some(bytes), "{text}");
        }
        for text in [
            "",
            " 1.2.3.4",
            "1.2.3.256",
            "256.1",
            "1.16777216",
            "1.2.3.4.5",
            "08.1",
            "0x",
            "1..2",
            "a.b",
            "1.2.3.4x",
            "::1",
            "4294967296",
        ] {
            assert_eq!(inet_aton(text), None, "{text}");
        }
    }

    #[test]
    fn ipv6_as_postgresql_prints_it() {
        let cases = [
            ("2001:db8::5", "2001:db8::5"),
            ("::1", "::1"),
            ("::", "::"),
            ("::2", "::2"),
            ("1::", "1::"),
            ("fe80::", "fe80::"),
            ("::ffff:10.0.0.1", "::ffff:10.0.0.1"),
            ("::10.0.0.1", "::10.0.0.1"),
            ("::1:0:0:1", "::1:0:0:1"),
            ("2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1"),
            ("2001:db8:0:1:1:1:1:1", "2001:db8:0:1:1:1:1:1"),
            ("1:0:0:2:0:0:0:3", "1:0:0:2::3"),
            ("ABCD:0:0:0:0:0:0:FFFF", "abcd::ffff"),
        ];
        for (input, shown) in cases {
            let a = input.parse::<std::net::Ipv6Addr>().unwrap().octets();
            assert_eq!(ipv6_text(&a), shown, "{input}");
        }
    }

    #[test]
    fn reads_webpki_names() {
        assert_eq!(presented_name("DnsName(\"a.x\")"), Some(dns("a.x")));
        assert_eq!(presented_name("IpAddress(10.0.0.1)"), Some(ip("10.0.0.1")));
        assert_eq!(presented_name("IpAddress(0::1)"), Some(ip("::1")));
        assert_eq!(presented_name("IpAddress(fe80)"), Some(ip("fe80::")));
        assert_eq!(
            presented_name("IpAddress(2001:db8::1:1:1:1:1)"),
            Some(ip("2001:db8:0:1:1:1:1:1"))
        );
        assert_eq!(
            presented_name("IpAddress(2001:db8::1::1)"),
            Some(SanName::IpText("2001:db8::1::1".to_owned()))
        );
        assert_eq!(
            presented_name("IpAddress([invalid: 0a, 00, 00])"),
            Some(SanName::Ip(vec![10, 0, 0]))
        );
        for other in [
            "Unsupported(0x01)",
            "UniformResourceIdentifier(\"https://a.x/\")",
            "DirectoryName",
        ] {
            assert_eq!(presented_name(other), None, "{other}");
        }
    }

    #[test]
    fn handshake_error_text_from_webpkis_list() {
        let e = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("db.x").unwrap(),
            presented: vec![
                "Unsupported(0x01)".to_owned(),
                "IpAddress(0::ffff:a00:1)".to_owned(),
                "DnsName(\"a.x\")".to_owned(),
            ],
        });
        assert_eq!(
            handshake_error_text(&e, "db.x"),
            "server certificate for \"::ffff:10.0.0.1\" (and 1 other name) does not match host name \"db.x\""
        );
    }

    /// One DER element.
    fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        match content.len() {
            n if n < 0x80 => out.push(n as u8),
            n if n < 0x100 => out.extend([0x81, n as u8]),
            n => out.extend([0x82, (n >> 8) as u8, n as u8]),
        }
        out.extend_from_slice(content);
        out
    }

    /// A certificate's outline: only the fields `from_der` walks are filled in.
    fn certificate(subject_cn: Option<&str>, sans: &[Vec<u8>], critical: bool) -> Vec<u8> {
        let mut subject = Vec::new();
        let ou = tlv(
            0x30,
            &[tlv(0x06, &[0x55, 0x04, 0x0b]), tlv(0x0c, b"unit")].concat(),
        );
        subject.extend(tlv(0x31, &ou));
        if let Some(cn) = subject_cn {
            let atv = tlv(
                0x30,
                &[tlv(0x06, OID_COMMON_NAME), tlv(0x0c, cn.as_bytes())].concat(),
            );
            subject.extend(tlv(0x31, &atv));
        }
        let mut tbs = [
            tlv(0xa0, &tlv(0x02, &[2])),
            tlv(0x02, &[1]),
            tlv(0x30, &[]),
            tlv(0x30, &[]),
            tlv(0x30, &[]),
            tlv(0x30, &subject),
            tlv(0x30, &[]),
        ]
        .concat();
        let basic = tlv(
            0x30,
            &[tlv(0x06, &[0x55, 0x1d, 0x13]), tlv(0x04, &tlv(0x30, &[]))].concat(),
        );
        let mut exts = basic;
        if !sans.is_empty() {
            let mut san = tlv(0x06, OID_SUBJECT_ALT_NAME);
            if critical {
                san.extend(tlv(0x01, &[0xff]));
            }
            san.extend(tlv(0x04, &tlv(0x30, &sans.concat())));
            exts.extend(tlv(0x30, &san));
        }
        tbs.extend(tlv(0xa3, &tlv(0x30, &exts)));
        tlv(
            0x30,
            &[tlv(0x30, &tbs), tlv(0x30, &[]), tlv(0x03, &[0])].concat(),
        )
    }

    #[test]
    fn reads_names_from_der() {
        let long = format!("{}.x", "a".repeat(200));
        let sans = [
            tlv(0x81, b"pg@a.x"),
            tlv(0x82, long.as_bytes()),
            tlv(0x87, &[10, 0, 0, 1]),
            tlv(0x86, b"https://a.x/"),
            tlv(0xa4, &tlv(0x30, &[])),
            tlv(0x82, b"b.x"),
        ];
        let der = certificate(Some("cn.x"), &sans, true);
        assert_eq!(
            CertificateNames::from_der(&der),
            Some(names(
                vec![dns(&long), ip("10.0.0.1"), dns("b.x")],
                Some("cn.x")
            ))
        );
        let der = certificate(Some("cn.x"), &[], false);
        assert_eq!(
            CertificateNames::from_der(&der),
            Some(names(vec![], Some("cn.x")))
        );
        assert_eq!(CertificateNames::from_der(&der[..der.len() - 1]), None);
        assert_eq!(CertificateNames::from_der(b"not a certificate"), None);
    }

    #[test]
    fn handshake_error_text_from_the_verdict() {
        let der = certificate(Some("cn.x"), &[tlv(0x82, b"a.x")], false);
        let names = CertificateNames::from_der(&der).unwrap();
        let e = HostNameMismatch::error(names.check("10.0.0.9").unwrap_err());
        assert_eq!(
            handshake_error_text(&e, "ignored"),
            "server certificate for \"a.x\" (and 1 other name) does not match host name \"10.0.0.9\""
        );
        assert_eq!(names.check("cn.x"), mismatch("a.x", 0, "cn.x"));
        assert_eq!(names.check("A.X"), Ok(()));
    }
}
