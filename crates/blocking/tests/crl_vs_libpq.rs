//! Certificate revocation lists against libpq 18: a PostgreSQL 18 serving a certificate that
//! a CA's list revokes (or does not), and connection strings naming lists by file (`sslcrl`),
//! by folder (`sslcrldir`, files named by OpenSSL's issuer hash) or by the default file in
//! the home folder, beside a root file or without one. Each outcome is libpq's: the same
//! error text, byte for byte, or a session on the same server.
//!
//! One test in its own binary: it sets the process environment (a home folder of its own,
//! where the default `root.crl` is written), which libpq reads too.

#![allow(unsafe_code)]

use std::path::Path;

use pgyard_blocking::{connect_with, ConnectOptions, SessionInfo};
use pgyard_testkit::cluster::Primary;
use pgyard_testkit::draw::isolate_env;
use pgyard_testkit::fixtures::{openssl, tls_options, write_for_server, TestCa};
use pgyard_testkit::libpq::Libpq;

/// The server certificate's serial number.
const SERIAL: u64 = 4242;

/// OpenSSL's hash of the list's issuer (`openssl crl -hash`), the name a hashed folder wants.
fn issuer_hash(crl: &Path) -> String {
    let file = crl.to_str().expect("a UTF-8 path");
    openssl(Path::new("/"), &["crl", "-hash", "-noout", "-in", file])
        .trim()
        .to_owned()
}

#[test]
fn revocation_lists_are_honoured_as_libpq_honours_them() {
    let dir = tempfile::Builder::new()
        .prefix("pgyard-crl-")
        .tempdir()
        .expect("a directory");
    let d = dir.path();
    let ca = TestCa::new("pgyard test CA").expect("a CA");
    let other = TestCa::new("another CA").expect("a second CA");
    let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).expect("params");
    params.serial_number = Some(rcgen::SerialNumber::from(SERIAL));
    let (cert, key) = ca.sign(params).expect("the server's certificate");
    std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("readable");
    let server_cert = write_for_server(d, "server.crt", &cert.pem(), 0o644).expect("written");
    let server_key =
        write_for_server(d, "server.key", &key.serialize_pem(), 0o600).expect("written");
    let server = Primary::start(tls_options(&server_cert, &server_key, None))
        .expect("a primary serving TLS");

    let write = |name: &str, text: &str| {
        let path = d.join(name);
        std::fs::write(&path, text).expect("written");
        path.display().to_string()
    };
    let root = write("root.crt", &ca.cert.pem());
    let revoking = write("revoking.crl", &ca.crl(&[SERIAL], 2099).expect("a list"));
    let other_serial = write("other-serial.crl", &ca.crl(&[7], 2099).expect("a list"));
    let expired = write("expired.crl", &ca.crl(&[7], 2021).expect("a list"));
    let foreign = write("foreign.crl", &other.crl(&[7], 2099).expect("a list"));
    let junk = write("junk.crl", "not a list\n");
    let hashed = |name: &str, from: &str| {
        let folder = d.join(name);
        std::fs::create_dir_all(&folder).expect("a folder");
        let hash = issuer_hash(Path::new(from));
        std::fs::copy(from, folder.join(format!("{hash}.r0"))).expect("copied");
        folder.display().to_string()
    };
    let revoking_dir = hashed("revoking-dir", &revoking);
    let clean_dir = hashed("clean-dir", &other_serial);
    let empty_dir = d.join("empty-dir");
    std::fs::create_dir_all(&empty_dir).expect("a folder");
    let empty_dir = empty_dir.display().to_string();

    // The default list is `~/.postgresql/root.crl` of this home folder.
    let home = d.join("home");
    std::fs::create_dir_all(home.join(".postgresql")).expect("a folder");
    std::fs::copy(&revoking, home.join(".postgresql/root.crl")).expect("copied");
    // SAFETY: this binary's only test runs on one thread and nothing else runs meanwhile.
    unsafe { isolate_env(&home) };

    let base = format!(
        "host=localhost port={} user=postgres dbname=postgres sslrootcert={root}",
        server.port()
    );
    let cases = [
        (
            format!("{base} sslmode=verify-full sslcrl={revoking}"),
            false,
        ),
        (format!("{base} sslmode=verify-ca sslcrl={revoking}"), false),
        (format!("{base} sslmode=require sslcrl={revoking}"), false),
        (format!("{base} sslmode=prefer sslcrl={revoking}"), true),
        (
            format!("{base} sslmode=verify-full sslcrl={other_serial}"),
            true,
        ),
        (
            format!("{base} sslmode=verify-full sslcrl={expired}"),
            false,
        ),
        (
            format!("{base} sslmode=verify-full sslcrl={foreign}"),
            false,
        ),
        (format!("{base} sslmode=verify-full sslcrl={junk}"), true),
        (
            format!("{base} sslmode=verify-full sslcrl=/nonexistent/list.crl"),
            true,
        ),
        (
            format!("{base} sslmode=verify-full sslcrldir={revoking_dir}"),
            false,
        ),
        (
            format!("{base} sslmode=verify-full sslcrldir={clean_dir}"),
            true,
        ),
        (
            format!("{base} sslmode=verify-full sslcrldir={empty_dir}"),
            false,
        ),
        (
            format!("{base} sslmode=verify-full sslcrldir=/nonexistent/lists"),
            false,
        ),
        (
            format!(
                "{base} sslmode=verify-full sslcrl=/nonexistent/list.crl sslcrldir={empty_dir}"
            ),
            true,
        ),
        (
            // A list for the issuer in the file is found first; the folder's is not consulted.
            format!("{base} sslmode=verify-full sslcrl={other_serial} sslcrldir={revoking_dir}"),
            true,
        ),
        // The default file, which revokes.
        (format!("{base} sslmode=verify-full"), false),
        (format!("{base} sslmode=verify-full sslcrl="), false),
        // Without a root file nothing is verified, so no list is read.
        (
            format!(
                "host=localhost port={} user=postgres dbname=postgres sslmode=require \
                 sslrootcert=/nonexistent/root.crt sslcrl={revoking}",
                server.port()
            ),
            true,
        ),
    ];
    let libpq = Libpq::shared().expect("libpq 18");
    let options = ConnectOptions::default().seed(1);
    for (conninfo, lands) in &cases {
        let theirs = libpq.connect_outcome(conninfo);
        let ours = match connect_with(conninfo, &options) {
            Ok(s) => {
                let landed = (s.port().unwrap_or(0).to_string().into_bytes(), s.tls());
                s.close();
                Ok(landed)
            }
            Err(e) => Err(e.to_string().trim_end().to_owned()),
        };
        assert_eq!(ours, theirs, "{conninfo}");
        assert_eq!(theirs.is_ok(), *lands, "libpq: {conninfo}");
    }
}
