//! Encrypted client keys (`sslpassword`) against libpq 18 on a live PostgreSQL 18 that logs
//! `certuser` in by certificate (`hostssl … cert`): one client key written by OpenSSL's
//! command-line tool in every form libpq reads — PKCS#8 encrypted with PBES2 (PBKDF2 with
//! HMAC-SHA256 or HMAC-SHA1, scrypt; AES or 3DES), OpenSSL's older `Proc-Type: 4,ENCRYPTED`
//! PEM (AES, 3DES), DER in the clear, a certificate before the key in one file — each with the
//! right pass phrase, a wrong one, and for keys in the clear a pass phrase that is ignored.
//! psql (libpq 18) and the blocking adapter must both log in, or both fail, with the same text
//! where libpq says `bad decrypt`. (A wrong pass phrase has one chance in 256 of leaving
//! valid padding under a file's random salt; OpenSSL then fails on the decrypted bytes with
//! another reason, so only that libpq's reason is compared word for word.)
//!
//! A missing pass phrase is not compared: libpq then lets OpenSSL prompt on the terminal,
//! which pgyard never does (the unit tests of `pgyard-driver`'s key reader hold its text).

use std::path::Path;

use pgyard_blocking::connect;
use pgyard_testkit::cluster::Primary;
use pgyard_testkit::fixtures::{self, pki_tls_options, psql_outcome, write_pki};

const PASS: &str = "pw-1 two";

/// Runs `openssl ARGS` (Debian's openssl package) with absolute paths, which must succeed.
fn openssl(args: &[&str]) {
    fixtures::openssl(Path::new("/"), args);
}

/// Writes the key at `clear` (PKCS#8 PEM) into `dir` in every form; returns (name, path,
/// encrypted).
fn key_forms(dir: &Path, clear: &str, cert: &str) -> Vec<(&'static str, String, bool)> {
    let pass = format!("pass:{PASS}");
    let path = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let mut forms = vec![("PKCS#8 in the clear", clear.to_owned(), false)];
    let pkcs8: [(&str, &str, &[&str]); 4] = [
        (
            "PBES2 AES-256 HMAC-SHA256",
            "p8-aes256.pem",
            &["-v2", "aes-256-cbc"],
        ),
        (
            "PBES2 AES-128 HMAC-SHA1",
            "p8-aes128-sha1.pem",
            &["-v2", "aes-128-cbc", "-v2prf", "hmacWithSHA1"],
        ),
        ("PBES2 scrypt", "p8-scrypt.pem", &["-scrypt"]),
        ("PBES2 3DES", "p8-des3.pem", &["-v2", "des3"]),
    ];
    for (label, name, extra) in pkcs8 {
        let out = path(name);
        let mut args = vec![
            "pkcs8", "-topk8", "-in", clear, "-out", &out, "-passout", &pass,
        ];
        args.extend_from_slice(extra);
        openssl(&args);
        forms.push((label, out, true));
    }
    for (label, name, cipher) in [
        ("older PEM, AES-256", "ec-aes256.pem", "-aes256"),
        ("older PEM, 3DES", "ec-des3.pem", "-des3"),
    ] {
        let out = path(name);
        openssl(&["ec", "-in", clear, "-out", &out, cipher, "-passout", &pass]);
        forms.push((label, out, true));
    }
    let p8der = path("p8.der");
    openssl(&[
        "pkcs8", "-topk8", "-nocrypt", "-in", clear, "-outform", "DER", "-out", &p8der,
    ]);
    forms.push(("PKCS#8 DER in the clear", p8der, false));
    let sec1der = path("sec1.der");
    openssl(&["ec", "-in", clear, "-outform", "DER", "-out", &sec1der]);
    forms.push(("SEC1 DER in the clear", sec1der, false));
    let both = path("cert-and-key.pem");
    let text = std::fs::read_to_string(cert).unwrap()
        + &std::fs::read_to_string(path("p8-aes256.pem")).unwrap();
    std::fs::write(&both, text).unwrap();
    forms.push(("a certificate, then the key", both, true));
    for (_, file, _) in &forms {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    forms
}

#[test]
fn encrypted_client_keys_log_in_or_fail_as_in_libpq() {
    let dir = tempfile::Builder::new()
        .prefix("pgyard-keys-")
        .tempdir()
        .expect("a directory");
    let pki = write_pki(dir.path()).expect("certificates written");
    let forms = key_forms(dir.path(), &pki.client_key, &pki.client_cert);
    let primary =
        Primary::start(pki_tls_options(&pki).hba("hostssl all certuser 127.0.0.1/32 cert"))
            .expect("a primary serving TLS");
    primary
        .psql("CREATE ROLE certuser LOGIN")
        .expect("the certificate's user");

    let mut differences = Vec::new();
    let mut logins = 0;
    for (label, key, encrypted) in &forms {
        for (password, right) in [(PASS, true), ("wrong", false)] {
            let conninfo = format!(
                "host=localhost port={} user=certuser dbname=postgres sslmode=verify-full \
                 sslrootcert={} sslcert={} sslkey={key} sslpassword='{password}'",
                primary.port(),
                pki.ca,
                pki.client_cert
            );
            let theirs = psql_outcome(&conninfo, "select current_user").map(|_| ());
            let ours = connect(&conninfo)
                .map(drop)
                .map_err(|e| e.to_string().trim_end().to_owned());
            let expect_login = right || !encrypted;
            let same = match (&ours, &theirs) {
                (Ok(()), Ok(())) => true,
                (Err(o), Err(t)) => !t.ends_with(": bad decrypt") || o == t,
                _ => false,
            };
            if !same || theirs.is_ok() != expect_login {
                differences.push(format!(
                    "{label}, pass phrase {password:?}:\n  ours: {ours:?}\n  psql: {theirs:?}"
                ));
            }
            logins += usize::from(ours.is_ok());
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} outcomes differ:\n{}",
        differences.len(),
        forms.len() * 2,
        differences.join("\n")
    );
    assert_eq!(
        logins,
        forms.len() + 3,
        "every right pass phrase and every key in the clear"
    );
}
