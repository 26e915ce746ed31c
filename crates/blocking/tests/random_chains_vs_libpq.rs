//! A randomized differential of certificate chains against libpq 18 on a live PostgreSQL 18:
//! seeded chains of a root, an optional intermediate and a server certificate, each drawn
//! with or without `basicConstraints` (CA or not, a path length), `keyUsage` (with or
//! without keyCertSign, digitalSignature, keyEncipherment), `extKeyUsage` (serverAuth,
//! clientAuth, both), validity (now, expired, not yet valid) and, for the server, names
//! (a subjectAltName for `localhost`, the Common Name alone, another name); the server sends
//! the intermediate or not, and the root file holds the root, the intermediate, or both; the
//! handshake is TLS 1.3 or 1.2.
//! psql and the blocking adapter, under `verify-ca` and `verify-full`, both connect or both
//! fail with the same text. The TLS library under libpq is OpenSSL and under pgyard webpki
//! (and pgyard's own rules where the two differ), so this is where their chain rules meet.
//! Each case is named by its seed.

use pgyard_blocking::connect;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::draw::Draw;
use pgyard_testkit::fixtures::{
    psql_outcome, serve_certificate, server_readable_dir, write_for_server,
};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Chains per run; each reloads the server once and connects four times.
const CASES: u64 = 40;

/// The validity of one certificate.
fn validity(d: &mut Draw, p: &mut CertificateParams) -> &'static str {
    let (label, from, to) = match d.below(10) {
        0 => ("expired", 2000, 2010),
        1 => ("future", 2090, 2100),
        _ => ("now", 2020, 2120),
    };
    p.not_before = rcgen::date_time_ymd(from, 1, 1);
    p.not_after = rcgen::date_time_ymd(to, 1, 1);
    label
}

/// The extensions a CA may or may not have, drawn mostly as a CA has them.
fn ca_extensions(d: &mut Draw, p: &mut CertificateParams) -> String {
    let mut text = String::new();
    p.is_ca = match d.below(10) {
        0 => {
            text.push_str(" no-bc");
            IsCa::NoCa
        }
        1 => {
            text.push_str(" bc-not-ca");
            IsCa::ExplicitNoCa
        }
        2 => {
            text.push_str(" pathlen0");
            IsCa::Ca(BasicConstraints::Constrained(0))
        }
        _ => IsCa::Ca(BasicConstraints::Unconstrained),
    };
    match d.below(6) {
        0 => {
            text.push_str(" ku-no-certsign");
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        }
        1 => {
            text.push_str(" ku-certsign");
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        }
        _ => {}
    }
    if d.chance(10) {
        text.push_str(" eku-client");
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    }
    text
}

/// The server certificate's own extensions and names.
fn leaf_extensions(d: &mut Draw, p: &mut CertificateParams) -> String {
    let mut text = String::new();
    if d.chance(10) {
        text.push_str(" bc-ca");
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    match d.below(8) {
        0 => {
            text.push_str(" ku-sign");
            p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        }
        1 => {
            text.push_str(" ku-encipher");
            p.key_usages = vec![KeyUsagePurpose::KeyEncipherment];
        }
        2 => {
            text.push_str(" ku-certsign");
            p.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        }
        _ => {}
    }
    p.extended_key_usages = match d.below(8) {
        0 => {
            text.push_str(" eku-client");
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        }
        1 => {
            text.push_str(" eku-server");
            vec![ExtendedKeyUsagePurpose::ServerAuth]
        }
        2 => {
            text.push_str(" eku-both");
            vec![
                ExtendedKeyUsagePurpose::ClientAuth,
                ExtendedKeyUsagePurpose::ServerAuth,
            ]
        }
        _ => Vec::new(),
    };
    p.distinguished_name = rcgen::DistinguishedName::new();
    match d.below(6) {
        0 => {
            text.push_str(" cn-only");
            p.distinguished_name.push(DnType::CommonName, "localhost");
        }
        1 => {
            text.push_str(" other-name");
            p.subject_alt_names = vec![SanType::DnsName("db.example".try_into().unwrap())];
        }
        _ => {
            p.subject_alt_names = vec![SanType::DnsName("localhost".try_into().unwrap())];
        }
    }
    text
}

/// One drawn chain, written into `dir` as `N-served.crt`, `N-served.key` and `N-root.crt`;
/// returns (served certificate, key, root file, a description).
fn chain(d: &mut Draw, dir: &std::path::Path, n: u64) -> (String, String, String, String) {
    let mut desc = String::new();
    let mut root_params = CertificateParams::default();
    root_params
        .distinguished_name
        .push(DnType::CommonName, format!("root {n}"));
    desc += &format!("root[{}", validity(d, &mut root_params));
    desc += &ca_extensions(d, &mut root_params);
    desc += "]";
    let root_key = KeyPair::generate().unwrap();
    let root = root_params.self_signed(&root_key).unwrap();

    let intermediate = d.chance(50).then(|| {
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::CommonName, format!("intermediate {n}"));
        desc += &format!(" int[{}", validity(d, &mut p));
        desc += &ca_extensions(d, &mut p);
        desc += "]";
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &root, &root_key).unwrap();
        (cert, key)
    });

    let mut leaf_params = CertificateParams::default();
    desc += &format!(" leaf[{}", validity(d, &mut leaf_params));
    desc += &leaf_extensions(d, &mut leaf_params);
    desc += "]";
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = match &intermediate {
        Some((cert, key)) => leaf_params.signed_by(&leaf_key, cert, key).unwrap(),
        None => leaf_params.signed_by(&leaf_key, &root, &root_key).unwrap(),
    };

    let mut served = leaf.pem();
    let mut trusted = root.pem();
    if let Some((cert, _)) = &intermediate {
        match d.below(10) {
            0 => desc += " int-not-sent",
            1 => {
                desc += " int-as-root";
                served += &cert.pem();
                trusted = cert.pem();
            }
            2 => {
                desc += " int-in-root-file";
                trusted = cert.pem() + &root.pem();
            }
            _ => served += &cert.pem(),
        }
    }
    let write = |name: &str, text: &str, mode| {
        write_for_server(dir, &format!("{n}-{name}"), text, mode).expect("written")
    };
    (
        write("served.crt", &served, 0o644),
        write("served.key", &leaf_key.serialize_pem(), 0o600),
        write("root.crt", &trusted, 0o644),
        desc,
    )
}

#[test]
fn random_chains_verify_as_in_libpq() {
    let dir = server_readable_dir("pgyard-chains-").expect("a directory");
    let primary = Primary::start(Options::default()).expect("primary");
    let mut differences = Vec::new();
    let (mut connected, mut refused) = (0, 0);
    for case in 0..CASES {
        let mut d = Draw(0x0c4a_1000 + case);
        let (cert, key, root, desc) = chain(&mut d, dir.path(), case);
        serve_certificate(&primary, &cert, &key).expect("the server takes the certificate");
        // TLS 1.2 checks the certificate's keyUsage against the cipher suite's use of it.
        let version = if d.chance(30) { "TLSv1.2" } else { "TLSv1.3" };
        let desc = format!("{desc} {version}");
        for mode in ["verify-ca", "verify-full"] {
            let conninfo = format!(
                "host=localhost port={} user=postgres dbname=postgres sslmode={mode} \
                 sslrootcert={root} ssl_max_protocol_version={version}",
                primary.port()
            );
            let theirs = psql_outcome(&conninfo, "select 1").map(drop);
            let ours = connect(&conninfo)
                .map(drop)
                .map_err(|e| e.to_string().trim_end().to_owned());
            match &theirs {
                Ok(()) => connected += 1,
                Err(_) => refused += 1,
            }
            if ours != theirs {
                differences.push(format!(
                    "case {case} {mode} {desc}:\n  ours: {ours:?}\n  psql: {theirs:?}"
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} outcomes differ:\n{}",
        differences.len(),
        differences.join("\n")
    );
    assert!(
        connected > CASES / 4 && refused > CASES / 4,
        "{connected} connected and {refused} refused"
    );
}
