//! The certificates under `testdata/v1chain` were written by OpenSSL 3's command-line tool
//! (`openssl x509 -req`, EC P-256, valid 2026–2126); the outcome each case expects is what
//! `openssl verify -purpose sslserver` says of the same files, except where this module
//! refuses what it does not check (name constraints).

use super::*;
// A chain checked alone (the version 1 route), as the adapters check it.
use crate::tls::verify_v1_chain as verify;

fn der(name: &str) -> CertificateDer<'static> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/v1chain")
        .join(format!("{name}.der"));
    CertificateDer::from(std::fs::read(&path).unwrap_or_else(|e| panic!("{path:?}: {e}")))
}

/// 2030-01-01, inside every certificate's validity.
const NOW: u64 = 1_893_456_000;

fn check(
    leaf: &str,
    intermediates: &[&str],
    roots: &[&str],
    now: u64,
) -> Result<(), CertificateError> {
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let inter: Vec<_> = intermediates.iter().map(|n| der(n)).collect();
    let roots: Vec<_> = roots.iter().map(|n| der(n)).collect();
    verify(
        &der(leaf),
        &inter,
        &roots,
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(now)),
        &algorithms,
        ChainPurpose::Server,
    )
}

#[test]
fn what_openssl_accepts() {
    assert!(is_v1(der("leaf").as_ref()));
    assert!(!is_v1(der("int").as_ref()));
    assert!(!is_v1(b"not a certificate"));
    assert_eq!(check("leaf", &[], &["root"], NOW), Ok(()));
    assert_eq!(check("leaf-via-int", &["int"], &["root"], NOW), Ok(()));
    // The server may send more than the chain, in any order.
    assert_eq!(
        check(
            "leaf-via-int",
            &["int-notca", "other-root", "int"],
            &["other-root", "root"],
            NOW
        ),
        Ok(())
    );
    assert_eq!(check("self-v1", &[], &["self-v1"], NOW), Ok(()));
}

#[test]
fn what_openssl_refuses() {
    // Signed by another key under the same name.
    assert_eq!(
        check("leaf", &[], &["other-root"], NOW),
        Err(CertificateError::BadSignature)
    );
    // The intermediate missing.
    assert_eq!(
        check("leaf-via-int", &[], &["root"], NOW),
        Err(CertificateError::UnknownIssuer)
    );
    // Issuers that are not CAs: no basicConstraints, a version 1 certificate that is not
    // self-signed, keyUsage without keyCertSign, a path length exceeded.
    for (leaf, inter) in [
        ("leaf-via-notca", "int-notca"),
        ("leaf-via-v1int", "int-v1"),
        ("leaf-via-nosign", "int-nosign"),
    ] {
        assert_eq!(
            check(leaf, &[inter], &["root"], NOW),
            Err(CertificateError::UnknownIssuer),
            "{leaf}"
        );
    }
    assert_eq!(
        check(
            "leaf-via-pathlen0",
            &["int-pathlen0", "int2-under-pathlen0"],
            &["root"],
            NOW
        ),
        Err(CertificateError::UnknownIssuer)
    );
    // An issuer limited to client authentication.
    assert_eq!(
        check("leaf-via-ekuclient", &["int-ekuclient"], &["root"], NOW),
        Err(CertificateError::InvalidPurpose)
    );
    // A self-signed leaf that is not trusted.
    assert_eq!(
        check("self-v1", &[], &["root"], NOW),
        Err(CertificateError::UnknownIssuer)
    );
}

#[test]
fn refused_where_unchecked_and_out_of_time() {
    // OpenSSL accepts this one (the constraint permits localhost); name constraints are not
    // checked here, so the chain is refused rather than taken unchecked.
    assert_eq!(
        check("leaf-via-nc", &["int-nc"], &["root"], NOW),
        Err(CertificateError::UnknownIssuer)
    );
    assert_eq!(
        check("leaf", &[], &["root"], 1_577_836_800),
        Err(CertificateError::NotValidYet)
    );
    assert_eq!(
        check("leaf", &[], &["root"], 7_258_118_400),
        Err(CertificateError::Expired)
    );
    assert_eq!(
        check("self-v1", &[], &["self-v1"], 7_258_118_400),
        Err(CertificateError::Expired)
    );
}

#[test]
fn a_changed_byte_fails() {
    let leaf = der("leaf");
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(NOW));
    let roots = [der("root")];
    assert_eq!(
        verify(&leaf, &[], &roots, now, &algorithms, ChainPurpose::Server),
        Ok(())
    );
    let n = leaf.as_ref().len();
    // In the subject's name, in the key, in the signature.
    for i in [n / 3, n / 2, n - 1] {
        let mut bytes = leaf.as_ref().to_vec();
        bytes[i] ^= 0x01;
        let result = verify(
            &CertificateDer::from(bytes),
            &[],
            &roots,
            now,
            &algorithms,
            ChainPurpose::Server,
        );
        assert!(result.is_err(), "byte {i} changed and still verified");
    }
}

#[test]
fn issuers_that_sign_each_other_cost_bounded_work() {
    // A and B sign each other, sixteen copies of the pair: without a bound the search would
    // walk 8^7 paths; no root is ever reached.
    let mut inter = Vec::new();
    for _ in 0..MAX_INTERMEDIATES / 2 {
        inter.push(der("cross-a"));
        inter.push(der("cross-b"));
    }
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(NOW));
    let (result, checked) = verify_counted(
        &der("leaf-via-cross"),
        &inter,
        &[der("root")],
        now,
        &algorithms,
        ChainPurpose::Server,
        Mode::Alone,
    );
    assert_eq!(result, Err(CertificateError::UnknownIssuer));
    assert_eq!(
        checked, MAX_SIGNATURES,
        "the search ran to its bound and stopped"
    );
    // The ordinary chain costs one signature per link.
    let (result, checked) = verify_counted(
        &der("leaf-via-int"),
        &[der("int")],
        &[der("root")],
        now,
        &algorithms,
        ChainPurpose::Server,
        Mode::Alone,
    );
    assert_eq!((result, checked), (Ok(()), 2));
}

#[test]
fn times_as_written() {
    let t = |tag: u8, s: &str| {
        let mut bytes = vec![tag, s.len() as u8];
        bytes.extend_from_slice(s.as_bytes());
        time(&mut bytes.as_slice())
    };
    assert_eq!(t(UTC_TIME, "700101000000Z"), Some(0));
    assert_eq!(t(UTC_TIME, "491231235959Z"), Some(2_524_607_999));
    assert_eq!(t(UTC_TIME, "500101000000Z"), Some(-631_152_000));
    assert_eq!(t(GENERALIZED_TIME, "21261112080258Z"), Some(4_950_144_178));
    assert_eq!(t(GENERALIZED_TIME, "20000229000000Z"), Some(951_782_400));
    assert_eq!(t(UTC_TIME, "700101000000"), None);
    assert_eq!(t(UTC_TIME, "701301000000Z"), None);
    assert_eq!(t(GENERALIZED_TIME, "2000022900000Z"), None);
}

#[test]
fn after_webpki_name_constraints_are_webpkis_and_the_purpose_is_the_callers() {
    let algorithms = rustls::crypto::ring::default_provider().signature_verification_algorithms;
    let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(NOW));
    let run = |leaf: &str, inter: &str, purpose, mode| {
        verify_counted(
            &der(leaf),
            &[der(inter)],
            &[der("root")],
            now,
            &algorithms,
            purpose,
            mode,
        )
        .0
    };
    // Refused alone (not checked here), taken after webpki (which checks them).
    assert_eq!(
        run("leaf-via-nc", "int-nc", ChainPurpose::Server, Mode::Alone),
        Err(CertificateError::UnknownIssuer)
    );
    assert_eq!(
        run(
            "leaf-via-nc",
            "int-nc",
            ChainPurpose::Server,
            Mode::AfterWebpki
        ),
        Ok(())
    );
    // An issuer limited to client authentication serves a client's chain, not a server's.
    assert_eq!(
        run(
            "leaf-via-ekuclient",
            "int-ekuclient",
            ChainPurpose::Client,
            Mode::Alone
        ),
        Ok(())
    );
    assert_eq!(
        run(
            "leaf-via-ekuclient",
            "int-ekuclient",
            ChainPurpose::Server,
            Mode::AfterWebpki
        ),
        Err(CertificateError::InvalidPurpose)
    );
    // A name only one certificate has: after webpki, that is the one webpki's path went
    // through, its signature already checked, so it is not checked again (alone it is).
    let lone = |roots: &[&str], mode| {
        let roots: Vec<_> = roots.iter().map(|n| der(n)).collect();
        verify_counted(
            &der("leaf"),
            &[],
            &roots,
            now,
            &algorithms,
            ChainPurpose::Server,
            mode,
        )
        .0
    };
    assert_eq!(lone(&["other-root"], Mode::AfterWebpki), Ok(()));
    assert_eq!(
        lone(&["other-root"], Mode::Alone),
        Err(CertificateError::BadSignature)
    );
    // Two of the name: the signatures pick.
    assert_eq!(lone(&["other-root", "root"], Mode::AfterWebpki), Ok(()));
    assert_eq!(
        lone(&["other-root", "other-root"], Mode::AfterWebpki),
        Err(CertificateError::BadSignature)
    );
    assert!(beyond_webpki(der("leaf").as_ref()));
    assert!(
        beyond_webpki(der("int").as_ref()),
        "a CA certificate as the end"
    );
    assert!(!beyond_webpki(der("int-notca").as_ref()));
}

#[test]
fn key_usage_ignores_the_bits_its_encoding_marks_unused() {
    // `03 02 05 a8`: three bits used (digitalSignature, nonRepudiation, keyEncipherment as
    // 1, 0, 1), a stray keyAgreement bit among the five unused ones: OpenSSL clears it.
    assert_eq!(key_usage_byte(&[5, 0xa8]), 0xa0);
    // One bit used, the rest stray: nothing a server may use the key for.
    assert_eq!(key_usage_byte(&[7, 0x08]), 0x00);
    assert_eq!(key_usage_byte(&[0, 0x84]), 0x84);
    // Two bytes (decipherOnly set): the unused bits are in the second.
    assert_eq!(key_usage_byte(&[7, 0x05, 0x80]), 0x05);
    // Malformed: grants nothing.
    assert_eq!(key_usage_byte(&[8, 0xff]), 0);
    assert_eq!(key_usage_byte(&[3]), 0);
    assert_eq!(key_usage_byte(&[]), 0);
}
