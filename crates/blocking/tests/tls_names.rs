//! `sslmode=verify-full` host-name mismatches against a real PostgreSQL 18 server, with psql
//! (libpq 18) as the oracle for the whole error text: which names libpq examines (DNS and IP
//! subjectAltNames in certificate order, the Common Name only when no SAN has the host's type),
//! how it prints an IP address, and its "(and N other name[s])" count.
//!
//! One server serves every certificate in turn: `ALTER SYSTEM` points `ssl_cert_file` at the
//! next one and `pg_reload_conf()` makes the postmaster load it, so the test starts one server.

use std::net::IpAddr;
use std::path::Path;

use pgyard_blocking::connect;
use pgyard_driver::CertificateNames;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::fixtures::{
    psql_outcome as psql, serve_certificate, server_readable_dir, write_for_server, TestCa,
};
use rcgen::{CertificateParams, DistinguishedName, DnType, SanType};

/// What pgyard does with the same conninfo: `Ok(())` or its message.
fn pgyard(conninfo: &str) -> Result<(), String> {
    connect(conninfo)
        .map(drop)
        .map_err(|e| e.to_string().trim_end().to_owned())
}

/// One server certificate: its subjectAltNames in order and its subject's Common Name.
struct Case {
    label: &'static str,
    sans: Vec<SanType>,
    cn: Option<&'static str>,
}

fn dns(name: &str) -> SanType {
    SanType::DnsName(name.try_into().expect("an IA5 name"))
}

fn ip(addr: &str) -> SanType {
    SanType::IpAddress(addr.parse::<IpAddr>().expect("an address"))
}

fn cases() -> Vec<Case> {
    let case = |label, sans, cn| Case { label, sans, cn };
    vec![
        // The issue's four certificates.
        case(
            "three DNS SANs",
            vec![dns("a.example"), dns("b.example"), dns("c.example")],
            Some("cn.example"),
        ),
        case(
            "two DNS SANs and an IP SAN",
            vec![dns("a.example"), dns("b.example"), ip("10.0.0.1")],
            Some("cn.example"),
        ),
        case("one DNS SAN", vec![dns("a.example")], Some("cn.example")),
        case("no SAN, a CN", vec![], Some("cn.example")),
        // Around them: what libpq counts, what it prints first, and when the CN joins in.
        case("one IP SAN", vec![ip("10.0.0.1")], Some("cn.example")),
        case(
            "IP SANs first",
            vec![ip("2001:db8::5"), dns("a.example"), ip("10.0.0.1")],
            None,
        ),
        case(
            "e-mail and URI SANs are not names",
            vec![
                SanType::Rfc822Name("pg@a.example".try_into().expect("IA5")),
                dns("a.example"),
                SanType::URI("https://a.example/".try_into().expect("IA5")),
            ],
            Some("cn.example"),
        ),
        case("no names at all", vec![], None),
        case("IPv4-mapped IPv6", vec![ip("::ffff:10.0.0.1")], None),
        case("IPv4-compatible IPv6", vec![ip("::10.0.0.1")], None),
        // webpki would print this one as `2001:db8::1::1`, which fits several addresses.
        case(
            "two equal zero runs",
            vec![ip("2001:db8:0:0:1:0:0:1")],
            None,
        ),
        case("trailing zero run", vec![ip("fe80::")], None),
        case("one zero group", vec![ip("2001:db8:0:1:1:1:1:1")], None),
        case("loopback", vec![ip("::1"), dns("a.example")], None),
    ]
}

/// Writes the certificate for `case`, signed by `ca`, and its key where the server user can
/// read them; returns the certificate's DER and both paths.
fn issue(ca: &TestCa, dir: &Path, n: usize, case: &Case) -> (Vec<u8>, String, String) {
    let mut params = CertificateParams::default();
    params.subject_alt_names = case.sans.clone();
    params.distinguished_name = DistinguishedName::new();
    if let Some(cn) = case.cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    let (cert, key) = ca.sign(params).expect("server certificate");
    let write = |name: String, pem: String, mode| {
        write_for_server(dir, &name, &pem, mode).expect("written for the server")
    };
    let cert_path = write(format!("server-{n}.crt"), cert.pem(), 0o644);
    let key_path = write(format!("server-{n}.key"), key.serialize_pem(), 0o600);
    (cert.der().to_vec(), cert_path, key_path)
}

/// A CA, the certificates of `cases` it signed (written where the server reads them), and a
/// primary to serve them in turn.
struct Served {
    dir: tempfile::TempDir,
    ca_path: String,
    issued: Vec<(Vec<u8>, String, String)>,
    primary: Primary,
}

fn served(prefix: &str, cases: &[Case]) -> Served {
    let dir = server_readable_dir(prefix).expect("a directory");
    let ca = TestCa::new(&format!("{prefix}CA")).expect("CA");
    let ca_path = write_for_server(dir.path(), "ca.crt", &ca.cert.pem(), 0o644).expect("written");
    let issued = cases
        .iter()
        .enumerate()
        .map(|(n, case)| issue(&ca, dir.path(), n, case))
        .collect();
    let primary = Primary::start(Options::default()).expect("primary");
    Served {
        dir,
        ca_path,
        issued,
        primary,
    }
}

/// The two kinds of host name libpq tells apart (an IP address turns off the Common Name
/// fallback only when an iPAddress SAN exists), neither of which any certificate here names.
const HOSTS: [(&str, &str); 2] = [
    ("host=localhost hostaddr=127.0.0.1", "localhost"),
    ("host=127.0.0.1", "127.0.0.1"),
];

/// For every certificate and both kinds of host name, the text libpq gives is the one pgyard
/// words from the certificate's names, and the one pgyard gives when it connects.
#[test]
fn verify_full_name_mismatch_texts_match_psql() {
    let cases = cases();
    let Served {
        dir: _dir,
        ca_path,
        issued,
        primary,
    } = served("pgyard-tls-names-", &cases);
    let port = primary.port();

    let mut differences = Vec::new();
    let mut compared = 0;
    for (case, (der, cert, key)) in cases.iter().zip(&issued) {
        serve_certificate(&primary, cert, key).expect("the server takes the certificate");
        let names = CertificateNames::from_der(der).expect("rcgen's certificate reads");
        for (keywords, host) in HOSTS {
            let ci = format!(
                "{keywords} port={port} user=postgres dbname=postgres \
                 sslmode=verify-full sslrootcert={ca_path}"
            );
            let theirs = psql(&ci, "select 1");
            let Err(theirs) = theirs else {
                panic!("{}, {keywords}: psql connected: {theirs:?}", case.label);
            };
            assert!(
                theirs.contains("does not match host name")
                    || theirs.contains("could not get server's host name"),
                "{}, {keywords}: psql failed for another reason: {theirs}",
                case.label
            );
            let (_, their_reason) = theirs.split_once(" failed: ").expect("libpq's prefix");
            let worded = names.check(host);
            if worded.as_ref().err().map(String::as_str) != Some(their_reason) {
                differences.push(format!(
                    "{}, {keywords}, from the certificate:\n  ours: {worded:?}\n  psql: {their_reason:?}",
                    case.label
                ));
            }
            let ours = pgyard(&ci);
            if ours.as_ref().err() != Some(&theirs) {
                differences.push(format!(
                    "{}, {keywords}, connecting:\n  ours: {ours:?}\n  psql: {theirs:?}",
                    case.label
                ));
            }
            compared += 2;
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {compared} texts differ from psql's:\n{}",
        differences.len(),
        differences.join("\n")
    );
}

/// Certificates whose names libpq accepts for some host and webpki would not (a Common Name
/// alone, a dNSName spelt like an address, a Common Name beside an iPAddress SAN), and their
/// neighbours that both refuse.
fn acceptance_cases() -> Vec<Case> {
    let case = |label, sans, cn| Case { label, sans, cn };
    vec![
        case("no SAN, CN localhost", vec![], Some("localhost")),
        case("no SAN, CN in capitals", vec![], Some("LocalHost")),
        case("no SAN, CN an address", vec![], Some("127.0.0.1")),
        case(
            "a dNSName spelt as an address",
            vec![dns("127.0.0.1")],
            None,
        ),
        case(
            "an IP SAN and CN localhost",
            vec![ip("127.0.0.1")],
            Some("localhost"),
        ),
        case(
            "a DNS SAN and another CN",
            vec![dns("localhost")],
            Some("cn.example"),
        ),
        case(
            "another IP SAN and CN localhost",
            vec![ip("10.0.0.1")],
            Some("localhost"),
        ),
        case("no SAN, a wildcard CN", vec![], Some("*.localhost")),
        case("a wildcard DNS SAN", vec![dns("*.LocalHost")], None),
        case(
            "another DNS SAN and CN localhost",
            vec![dns("other.example")],
            Some("localhost"),
        ),
    ]
}

/// Host settings for [`acceptance_cases`]: names, an address in two notations, a wildcard's
/// one and two labels, a trailing dot, an address alone (no host name to compare with: an
/// empty `host` keeps out the `PGHOST` Debian's psql wrapper sets), and a socket folder
/// beside an address (libpq then compares the names with the folder's path).
const ACCEPTANCE_HOSTS: [&str; 9] = [
    "host=localhost hostaddr=127.0.0.1",
    "host=LOCALHOST hostaddr=127.0.0.1",
    "host=127.0.0.1",
    "host=127.1 hostaddr=127.0.0.1",
    "host=db.localhost hostaddr=127.0.0.1",
    "host=a.db.localhost hostaddr=127.0.0.1",
    "host=localhost. hostaddr=127.0.0.1",
    "host='' hostaddr=127.0.0.1",
    "host=/tmp hostaddr=127.0.0.1",
];

/// Under `verify-full` pgyard connects exactly where libpq connects and refuses with libpq's
/// text where it refuses: libpq's name rules, not webpki's, decide (the Common Name that the
/// PostgreSQL documentation's own `openssl req -subj "/CN=…"` recipe puts in a certificate
/// without subjectAltNames).
#[test]
fn verify_full_accepts_the_names_libpq_accepts() {
    let cases = acceptance_cases();
    let Served {
        dir: _dir,
        ca_path,
        issued,
        primary,
    } = served("pgyard-tls-accept-", &cases);
    let port = primary.port();

    let mut differences = Vec::new();
    let (mut accepted, mut refused) = (Vec::new(), 0);
    for (case, (_, cert, key)) in cases.iter().zip(&issued) {
        serve_certificate(&primary, cert, key).expect("the server takes the certificate");
        for keywords in ACCEPTANCE_HOSTS {
            let ci = format!(
                "{keywords} port={port} user=postgres dbname=postgres \
                 sslmode=verify-full sslrootcert={ca_path}"
            );
            let theirs = psql(&ci, "select 1").map(drop);
            match &theirs {
                Ok(()) => accepted.push(format!("{}, {keywords}", case.label)),
                Err(_) => refused += 1,
            }
            let ours = pgyard(&ci);
            if ours != theirs {
                differences.push(format!(
                    "{}, {keywords}:\n  ours: {ours:?}\n  psql: {theirs:?}",
                    case.label
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} outcomes differ from psql's:\n{}",
        differences.len(),
        cases.len() * ACCEPTANCE_HOSTS.len(),
        differences.join("\n")
    );
    // The premise, from the oracle: libpq takes a Common Name alone, and refuses elsewhere.
    assert!(
        accepted.contains(&"no SAN, CN localhost, host=localhost hostaddr=127.0.0.1".to_owned()),
        "psql refused the Common Name: {accepted:?}"
    );
    assert!(refused > 0, "psql accepted every case");
}
