//! Entry points of the cargo-fuzz targets over the driver's own readers of untrusted bytes:
//! the certificates a server (or, at the proxy, a client) sends, read by the version 1 chain
//! check and the host-name check, and a client key file. Each is an ordinary function, so the
//! committed corpora replay in `cargo test` (`tests/fuzz_corpus.rs`).
//!
//! Beyond "never panics", [`certificates`] is a differential: wherever RustCrypto's
//! `x509-cert` (a strict DER reader) takes a certificate, pgyard's readers must take it too
//! and find the same version, names, validity, key, signature and the extension values the
//! chain rules read. pgyard may take more than `x509-cert` (OpenSSL does: times before 1970,
//! long serial numbers), never less or differently. And wherever webpki reads an end
//! certificate whose validity and key are well-formed (webpki reads those two only when it
//! verifies a chain), pgyard's reader must read it too: the chain rules run over every chain
//! webpki passes, so a certificate only webpki could read would make pgyard refuse a server
//! libpq accepts.

use std::time::Duration;

use der::{Decode, Encode};
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::SignatureScheme;
use x509_cert::ext::pkix::name::GeneralName;
use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName};
use x509_cert::Certificate;

use crate::certnames::CertificateNames;
use crate::keyfile::{self, KeyPassword, Limits};
use crate::tls::ChainPurpose;
use crate::v1chain::{self, Cert, Mode};

/// Host names each readable certificate is checked against (libpq's rules: names, addresses,
/// `inet_aton` forms, wildcards, the empty host).
const HOSTS: [&str; 10] = [
    "localhost",
    "127.0.0.1",
    "::1",
    "127.1",
    "a.example.com",
    "x.a.example.com",
    "example.com",
    "",
    "10.0.0.1",
    "LOCALHOST",
];

/// Times the chains are checked at: 2001, 2025 and 2060.
const NOW_SECS: [u64; 3] = [1_000_000_000, 1_750_000_000, 2_840_000_000];

/// The most certificates one input is cut into.
const MAX_CHUNKS: usize = 24;

/// Certificates from the fuzzer's bytes. The first byte steers (bits 0–1: how many of the
/// last certificates are roots; bit 2: a client's chain; bit 3: TLS 1.3 for the handshake
/// signature); the rest is cut into certificates, each behind a two-byte big-endian length
/// (the last one takes what is left). The first is the end of the chain, the others its
/// intermediates and roots, and each is also read alone.
pub fn certificates(data: &[u8]) {
    let Some((&steer, rest)) = data.split_first() else {
        return;
    };
    let chunks = cut(rest);
    for der in &chunks {
        certificate(der);
    }
    let Some((leaf, others)) = chunks.split_first() else {
        return;
    };
    let roots_count = usize::from(steer & 3).min(others.len());
    let (intermediates, roots) = others.split_at(others.len() - roots_count);
    let purpose = if steer & 4 == 0 {
        ChainPurpose::Server
    } else {
        ChainPurpose::Client
    };
    let leaf = CertificateDer::from(*leaf);
    let intermediates: Vec<CertificateDer<'_>> = intermediates
        .iter()
        .map(|c| CertificateDer::from(*c))
        .collect();
    let roots: Vec<CertificateDer<'static>> = roots
        .iter()
        .map(|c| CertificateDer::from(c.to_vec()))
        .collect();
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    for secs in NOW_SECS {
        let now = UnixTime::since_unix_epoch(Duration::from_secs(secs));
        for mode in [Mode::Alone, Mode::AfterWebpki] {
            let (_, checked) = v1chain::verify_counted(
                &leaf,
                &intermediates,
                &roots,
                now,
                &algorithms,
                purpose,
                mode,
            );
            assert!(
                checked <= 64,
                "the chain search checked {checked} signatures"
            );
        }
    }
    // A lone certificate's chain as OpenSSL would send it, from the others as trusted ones:
    // it starts with the certificate, and the rest are trusted ones, each once.
    let trusted: Vec<CertificateDer<'static>> = others
        .iter()
        .map(|c| CertificateDer::from(c.to_vec()))
        .collect();
    let sent = crate::tls::chain_to_send(
        vec![leaf.clone().into_owned()],
        &trusted,
        UnixTime::since_unix_epoch(Duration::from_secs(NOW_SECS[1])),
    );
    assert_eq!(sent.first().map(|c| c.as_ref()), Some(leaf.as_ref()));
    assert!(
        sent.len() <= trusted.len() + 1 && sent.len() <= 9,
        "{} sent",
        sent.len()
    );
    for c in &sent[1..] {
        assert!(
            trusted.contains(c),
            "a certificate not among the trusted ones"
        );
    }
    // The handshake signature by the end certificate's key: the scheme from the last chunk's
    // first two bytes, the signature its rest, the message the first chunk.
    if let Some(last) = chunks.last().filter(|c| c.len() >= 2) {
        let scheme = SignatureScheme::from(u16::from_be_bytes([last[0], last[1]]));
        let _ = v1chain::verify_scheme_signature(
            leaf.as_ref(),
            rest,
            scheme,
            &last[2..],
            &algorithms,
            steer & 8 != 0,
        );
    }
}

/// The input after the steering byte, cut into at most [`MAX_CHUNKS`] certificates.
fn cut(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut chunks = Vec::new();
    while !rest.is_empty() && chunks.len() < MAX_CHUNKS {
        if rest.len() < 2 || chunks.len() + 1 == MAX_CHUNKS {
            chunks.push(rest);
            break;
        }
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        chunks.push(&rest[2..2 + len]);
        rest = &rest[2 + len..];
    }
    chunks
}

/// One certificate through every reader, compared with `x509-cert` where it reads it; `true`
/// when `x509-cert` read it (strictly) and the two agreed, `false` when only pgyard's readers
/// ran. A disagreement panics.
pub fn certificate(der: &[u8]) -> bool {
    let cert = Cert::parse(der);
    assert_eq!(
        v1chain::is_v1(der),
        cert.as_ref().is_some_and(|c| c.version == 0)
    );
    assert_eq!(v1chain::spki(der), cert.as_ref().map(|c| c.spki));
    let _ = v1chain::beyond_webpki(der);
    let _ = v1chain::self_issued(der);
    for secs in NOW_SECS {
        let _ = v1chain::valid_at(der, UnixTime::since_unix_epoch(Duration::from_secs(secs)));
    }
    if webpki::EndEntityCert::try_from(&CertificateDer::from(der)).is_ok()
        && validity_and_key_read(der)
    {
        assert!(
            cert.is_some(),
            "webpki reads the end certificate, pgyard does not"
        );
    }
    let names = CertificateNames::from_der(der);
    if let Some(names) = &names {
        for host in HOSTS {
            if let Err(text) = names.check(host) {
                assert!(!text.is_empty(), "an empty refusal for {host:?}");
            }
        }
    }
    // Only where x509-cert writes back exactly what it read: it also takes some encodings DER
    // forbids (an explicit default version), and then its values are not the input's bytes.
    let oracle = Certificate::from_der(der).ok();
    if let Some(oracle) = oracle.filter(|o| o.to_der().is_ok_and(|back| back == der)) {
        same_certificate(der, &oracle, cert.as_ref());
        same_names(&oracle, names.as_ref());
        return true;
    }
    false
}

/// Whether the certificate's validity and its key are well-formed as `x509-cert` reads them:
/// webpki reads a certificate's validity and key only when it verifies a chain, so its
/// reading the rest says nothing about them (no chain verifies with a malformed one).
fn validity_and_key_read(der: &[u8]) -> bool {
    fn next(input: &[u8]) -> Option<(&[u8], &[u8])> {
        let (_, _, after) = pgyard_wire::der::element(input).ok()?;
        Some((&input[..input.len() - after.len()], after))
    }
    fn contents(input: &[u8]) -> Option<&[u8]> {
        pgyard_wire::der::element(input).ok().map(|(_, c, _)| c)
    }
    let parts = (|| {
        let tbs = contents(contents(der)?)?;
        let mut rest = tbs;
        if rest.first() == Some(&0xa0) {
            rest = next(rest)?.1;
        }
        // The serial number, the signature algorithm and the issuer come first.
        for _ in 0..3 {
            rest = next(rest)?.1;
        }
        let (validity, rest) = next(rest)?;
        let (_subject, rest) = next(rest)?;
        let (key, _) = next(rest)?;
        Some((validity, key))
    })();
    parts.is_some_and(|(validity, key)| {
        x509_cert::time::Validity::<x509_cert::certificate::Rfc5280>::from_der(validity).is_ok()
            && x509_cert::spki::SubjectPublicKeyInfoOwned::from_der(key).is_ok()
    })
}

/// The whole DER of a part of a certificate `x509-cert` wrote back byte for byte.
fn encoded<T: Encode>(value: &T) -> Vec<u8> {
    value
        .to_der()
        .expect("x509-cert re-encodes what it decoded")
}

/// The contents of a whole DER element.
fn contents(whole: &[u8]) -> &[u8] {
    pgyard_wire::der::element(whole)
        .map(|(_, contents, _)| contents)
        .expect("a whole element")
}

/// pgyard's certificate reader against `x509-cert` on a certificate `x509-cert` took.
fn same_certificate(der: &[u8], oracle: &Certificate, mine: Option<&Cert<'_>>) {
    let tbs = oracle.tbs_certificate();
    // The one thing pgyard checks that x509-cert does not: the signature algorithm inside the
    // signed part is the one outside it (OpenSSL refuses a mismatch when it verifies).
    if tbs.signature() != oracle.signature_algorithm() {
        assert!(
            mine.is_none(),
            "pgyard took a certificate whose two algorithms differ"
        );
        return;
    }
    let Some(mine) = mine else {
        panic!("x509-cert reads the certificate, pgyard does not: {der:02x?}");
    };
    assert_eq!(mine.version, tbs.version() as u8, "version");
    assert_eq!(mine.tbs, encoded(tbs).as_slice(), "tbsCertificate");
    assert_eq!(
        mine.signature_alg,
        contents(&encoded(oracle.signature_algorithm())),
        "signatureAlgorithm"
    );
    match oracle.signature().as_bytes() {
        Some(bits) => assert_eq!(mine.signature, bits, "signatureValue"),
        None => assert_eq!(
            mine.signature,
            oracle.signature().raw_bytes(),
            "signatureValue"
        ),
    }
    assert_eq!(mine.issuer, encoded(tbs.issuer()).as_slice(), "issuer");
    assert_eq!(mine.subject, encoded(tbs.subject()).as_slice(), "subject");
    let spki = tbs.subject_public_key_info();
    assert_eq!(mine.spki, encoded(spki).as_slice(), "subjectPublicKeyInfo");
    assert_eq!(
        mine.key_alg,
        contents(&encoded(&spki.algorithm)),
        "the key's algorithm"
    );
    assert_eq!(mine.key, spki.subject_public_key.raw_bytes(), "the key");
    let validity = tbs.validity();
    let secs = |t: x509_cert::time::Time| i64::try_from(t.to_unix_duration().as_secs());
    assert_eq!(Ok(mine.not_before), secs(validity.not_before), "notBefore");
    assert_eq!(Ok(mine.not_after), secs(validity.not_after), "notAfter");
    same_extensions(oracle, mine);
}

const OID_BC: &str = "2.5.29.19";
const OID_KU: &str = "2.5.29.15";
const OID_EKU: &str = "2.5.29.37";
const OID_NC: &str = "2.5.29.30";
const OID_SERVER_AUTH: &str = "1.3.6.1.5.5.7.3.1";
const OID_CLIENT_AUTH: &str = "1.3.6.1.5.5.7.3.2";

/// The extension values the chain rules read, where `x509-cert` reads each of them.
fn same_extensions(oracle: &Certificate, mine: &Cert<'_>) {
    let list = oracle.tbs_certificate().extensions().map_or(&[][..], |e| e);
    let one = |oid: &str| {
        let mut found = list.iter().filter(|e| e.extn_id.to_string() == oid);
        match (found.next(), found.next()) {
            (Some(e), None) => Some(Some(e.extn_value.as_bytes())),
            (None, _) => Some(None),
            // The same extension twice: which one wins is a choice, not a fact to compare.
            (Some(_), Some(_)) => None,
        }
    };
    let (Some(bc), Some(ku), Some(eku)) = (one(OID_BC), one(OID_KU), one(OID_EKU)) else {
        return;
    };
    let bc = bc.map(BasicConstraints::from_der);
    let ku = ku.map(KeyUsage::from_der);
    let eku = eku.map(ExtendedKeyUsage::from_der);
    if matches!(bc, Some(Err(_))) || matches!(ku, Some(Err(_))) || matches!(eku, Some(Err(_))) {
        return;
    }
    let ext = mine
        .extensions()
        .unwrap_or_else(|e| panic!("x509-cert reads the extensions, pgyard refuses: {e:?}"));
    let bc = bc.and_then(Result::ok).map(|b| {
        let limit = b
            .path_len_constraint
            .map(|n| if n < 0x80 { usize::from(n) } else { usize::MAX });
        (b.ca, limit)
    });
    assert_eq!(ext.basic, bc, "basicConstraints");
    let ku = ku
        .and_then(Result::ok)
        .map(|k| (k.0.bits() & 0xff) as u8)
        .map(|low| low.reverse_bits());
    assert_eq!(ext.key_usage, ku, "keyUsage");
    let eku = eku.and_then(Result::ok).map(|e| {
        let has = |oid: &str| e.0.iter().any(|o| o.to_string() == oid);
        (has(OID_SERVER_AUTH), has(OID_CLIENT_AUTH))
    });
    assert_eq!(ext.ext_key_usage, eku, "extKeyUsage");
    let known = [OID_BC, OID_KU, OID_EKU, OID_NC];
    let unchecked = list.iter().any(|e| {
        let oid = e.extn_id.to_string();
        oid == OID_NC || (e.critical && !known.contains(&oid.as_str()))
    });
    assert_eq!(
        ext.unchecked, unchecked,
        "name constraints or unknown critical"
    );
}

/// The host-name check's names against `x509-cert`'s subjectAltName and Common Name.
fn same_names(oracle: &Certificate, mine: Option<&CertificateNames>) {
    let tbs = oracle.tbs_certificate();
    let list = tbs.extensions().map_or(&[][..], |e| e);
    let san_oid = "2.5.29.17";
    let sans = match list.iter().find(|e| e.extn_id.to_string() == san_oid) {
        None => Vec::new(),
        Some(e) => match SubjectAltName::from_der(e.extn_value.as_bytes()) {
            Ok(names) => names.0,
            // pgyard refuses what it cannot read there; x509-cert does too.
            Err(_) => return,
        },
    };
    let Some(mine) = mine else {
        panic!("x509-cert reads the names, pgyard does not");
    };
    let expected: Vec<(bool, Vec<u8>)> = sans
        .iter()
        .filter_map(|n| match n {
            GeneralName::DnsName(d) => Some((true, d.as_bytes().to_vec())),
            GeneralName::IpAddress(a) => Some((false, a.as_bytes().to_vec())),
            _ => None,
        })
        .collect();
    let (found, cn) = mine.parts();
    let found: Vec<(bool, Vec<u8>)> = found.into_iter().map(|(d, n)| (d, n.to_vec())).collect();
    assert_eq!(found, expected, "subjectAltNames");
    let cn_oid = "2.5.4.3";
    let expected_cn = tbs
        .subject()
        .iter()
        .find(|a| a.oid.to_string() == cn_oid)
        .map(|a| a.value.value().to_vec());
    assert_eq!(cn.map(<[u8]>::to_vec), expected_cn, "Common Name");
}

/// A client key file from the fuzzer's bytes: the first byte's low bit says whether a pass
/// phrase is given, the next byte its length (at most what is left), then the pass phrase and
/// the file. Key derivation is bounded below the file limits so that each input runs in
/// milliseconds; the bounds themselves have unit tests.
pub fn key_file(data: &[u8]) {
    let limits = Limits {
        pbkdf2_iterations: 4_096,
        scrypt_memory: 1 << 20,
    };
    let (password, file) = match data {
        [flag, len, rest @ ..] if flag & 1 == 1 => {
            let n = usize::from(*len).min(rest.len());
            (Some(KeyPassword(rest[..n].to_vec())), &rest[n..])
        }
        [_, rest @ ..] => (None, rest),
        [] => return,
    };
    match keyfile::decode(file.to_vec(), password.as_ref(), &limits) {
        Ok(key) => {
            // What the reader hands on is what the provider is given; it must not panic
            // there either.
            let provider = rustls::crypto::ring::default_provider();
            let _ = provider.key_provider.load_private_key(key);
        }
        Err(reason) => assert!(!reason.is_empty(), "an empty reason"),
    }
}
