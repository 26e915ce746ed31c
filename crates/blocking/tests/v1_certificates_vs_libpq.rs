//! Server certificates of X.509 version 1 against libpq 18 on a live PostgreSQL 18, made the
//! way the PostgreSQL documentation makes them (`openssl req` for a CA, `openssl x509 -req`
//! for the server, which writes version 1 when given no extensions, RSA 2048, the name in
//! the Common Name alone): signed by the root, by an intermediate the server sends, by
//! intermediates that are not CAs, a self-signed one trusted as its own root, and chains that
//! miss their root; and, for both versions, a root file that holds only the intermediate
//! (OpenSSL, unlike webpki, ends a chain only at a self-signed certificate) or the
//! intermediate beside the root. Every `sslmode` that verifies, and `require` with the root file present
//! (which libpq then verifies too): psql and the blocking adapter both connect, or both fail
//! with the same text. Until session 41 webpki refused every version 1 certificate, so pgyard
//! could reach no server set up by the book with verification on.

use std::path::Path;

use pgyard_blocking::connect;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::fixtures::{
    openssl, psql_outcome, serve_certificate, server_readable_dir, tls_options, write_for_server,
};

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).expect("written by openssl")
}

/// The documentation's recipe and its neighbours, written into `dir`.
fn make_certificates(dir: &Path) {
    let new_key = ["-newkey", "rsa:2048", "-nodes"];
    let req = |name: &str, cn: &str| {
        let (key, csr, subj) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("/CN={cn}"),
        );
        let mut args = vec!["req", "-new"];
        args.extend_from_slice(&new_key);
        args.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(dir, &args);
    };
    let sign = |name: &str, csr: &str, ca: &str, ext: Option<&str>| {
        let (csr, cert) = (format!("{csr}.csr"), format!("{name}.crt"));
        let (ca_cert, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_cert,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-days",
            "30",
            "-out",
            &cert,
        ];
        if let Some(ext) = ext {
            args.extend_from_slice(&["-extfile", ext]);
        }
        openssl(dir, &args);
    };
    let mut root = vec![
        "req",
        "-new",
        "-x509",
        "-days",
        "30",
        "-subj",
        "/CN=root.yourdomain.com",
    ];
    root.extend_from_slice(&new_key);
    root.extend_from_slice(&["-keyout", "root.key", "-out", "root.crt"]);
    openssl(dir, &root);
    std::fs::write(dir.join("ca.ext"), "basicConstraints=critical,CA:TRUE\n").unwrap();
    std::fs::write(dir.join("notca.ext"), "keyUsage=digitalSignature\n").unwrap();
    std::fs::write(dir.join("v3.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    req("server", "localhost");
    req("client", "certuser");
    req("intermediate", "intermediate.yourdomain.com");
    sign("server", "server", "root", None);
    sign("client", "client", "root", None);
    sign("intermediate", "intermediate", "root", Some("ca.ext"));
    sign("server-via-int", "server", "intermediate", None);
    sign("v3-via-int", "server", "intermediate", Some("v3.ext"));
    sign("notca", "intermediate", "root", Some("notca.ext"));
    std::fs::copy(dir.join("intermediate.key"), dir.join("notca.key")).unwrap();
    sign("server-via-notca", "server", "notca", None);
    sign("v1int", "intermediate", "root", None);
    std::fs::copy(dir.join("intermediate.key"), dir.join("v1int.key")).unwrap();
    sign("server-via-v1int", "server", "v1int", None);
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-signkey",
            "server.key",
            "-days",
            "30",
            "-out",
            "self.crt",
        ],
    );
    let text = openssl(dir, &["x509", "-in", "server.crt", "-noout", "-text"]);
    assert!(
        text.contains("Version: 1 (0x0)"),
        "openssl x509 -req no longer writes version 1: the test lost its subject"
    );
}

#[test]
fn version_1_server_certificates_verify_as_in_libpq() {
    let dir = server_readable_dir("pgyard-v1-").expect("a directory");
    let d = dir.path();
    make_certificates(d);
    let key = write_for_server(d, "served.key", &read(d, "server.key"), 0o600).unwrap();
    let root = d.join("root.crt").to_string_lossy().into_owned();
    let self_root = d.join("self.crt").to_string_lossy().into_owned();
    let int_root = d.join("intermediate.crt").to_string_lossy().into_owned();
    let both = d.join("both.crt");
    std::fs::write(&both, read(d, "intermediate.crt") + &read(d, "root.crt")).unwrap();
    let both = both.to_string_lossy().into_owned();
    // What the server sends, and the root file the client trusts.
    let cases: [(&str, Vec<&str>, &str, bool); 11] = [
        ("signed by the root", vec!["server.crt"], &root, true),
        (
            "through an intermediate",
            vec!["server-via-int.crt", "intermediate.crt"],
            &root,
            true,
        ),
        (
            "a self-signed one as its own root",
            vec!["self.crt"],
            &self_root,
            true,
        ),
        (
            "an intermediate that is not a CA",
            vec!["server-via-notca.crt", "notca.crt"],
            &root,
            false,
        ),
        (
            "a version 1 intermediate",
            vec!["server-via-v1int.crt", "v1int.crt"],
            &root,
            false,
        ),
        (
            "the intermediate not sent",
            vec!["server-via-int.crt"],
            &root,
            false,
        ),
        (
            "the intermediate as the only root",
            vec!["server-via-int.crt", "intermediate.crt"],
            &int_root,
            false,
        ),
        (
            "the root file holding the intermediate too",
            vec!["server-via-int.crt"],
            &both,
            true,
        ),
        // The same two root files with a version 3 certificate (webpki's path): OpenSSL ends
        // a chain only at a self-signed certificate of the root file.
        (
            "version 3, the intermediate as the only root",
            vec!["v3-via-int.crt", "intermediate.crt"],
            &int_root,
            false,
        ),
        (
            "version 3, the intermediate not sent",
            vec!["v3-via-int.crt"],
            &both,
            true,
        ),
        (
            "version 3 through an intermediate",
            vec!["v3-via-int.crt", "intermediate.crt"],
            &root,
            true,
        ),
    ];
    let primary = Primary::start(Options::default()).expect("primary");
    let mut differences = Vec::new();
    for (n, (label, chain, root_file, connects)) in cases.iter().enumerate() {
        let pem: String = chain.iter().map(|f| read(d, f)).collect();
        let served = write_for_server(d, &format!("served-{n}.crt"), &pem, 0o644).unwrap();
        serve_certificate(&primary, &served, &key).expect("the server takes the certificate");
        let missing = d.join("missing.crt").to_string_lossy().into_owned();
        // `require` without a root file verifies nothing, but the handshake's signature is
        // still checked with the certificate's key.
        for (mode, root_file) in [
            ("verify-ca", *root_file),
            ("verify-full", root_file),
            ("require", root_file),
            ("require", &missing),
        ] {
            let expect_connect = *connects || root_file == missing;
            let conninfo = format!(
                "host=localhost port={} user=postgres dbname=postgres sslmode={mode} \
                 sslrootcert={root_file}",
                primary.port()
            );
            let theirs = psql_outcome(&conninfo, "select 1").map(drop);
            let ours = connect(&conninfo)
                .map(drop)
                .map_err(|e| e.to_string().trim_end().to_owned());
            if ours != theirs || theirs.is_ok() != expect_connect {
                differences.push(format!(
                    "{label}, sslmode={mode} sslrootcert={root_file}:\n  ours: {ours:?}\n  psql: {theirs:?}"
                ));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "{} of {} outcomes differ:\n{}",
        differences.len(),
        cases.len() * 4,
        differences.join("\n")
    );
}

/// A version 1 client certificate (the documentation's `openssl x509 -req` for a client) logs
/// in by certificate as with libpq, and one given the wrong key fails with libpq's text.
#[test]
fn version_1_client_certificates_log_in_as_in_libpq() {
    let dir = server_readable_dir("pgyard-v1-client-").expect("a directory");
    let d = dir.path();
    make_certificates(d);
    {
        use std::os::unix::fs::PermissionsExt;
        for key in ["client.key", "intermediate.key"] {
            std::fs::set_permissions(d.join(key), std::fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    let cert = write_for_server(d, "served.crt", &read(d, "server.crt"), 0o644).unwrap();
    let key = write_for_server(d, "served.key", &read(d, "server.key"), 0o600).unwrap();
    let root = write_for_server(d, "ca.crt", &read(d, "root.crt"), 0o644).unwrap();
    let options =
        tls_options(&cert, &key, Some(&root)).hba("hostssl all certuser 127.0.0.1/32 cert");
    let primary = Primary::start(options).expect("a primary serving TLS");
    primary
        .psql("CREATE ROLE certuser LOGIN")
        .expect("the certificate's user");
    let client = d.join("client.crt").to_string_lossy().into_owned();
    let mut outcomes = Vec::new();
    for key in ["client.key", "intermediate.key"] {
        for mode in ["require", "verify-full"] {
            let conninfo = format!(
                "host=localhost port={} user=certuser dbname=postgres sslmode={mode} \
                 sslrootcert={root} sslcert={client} sslkey={}",
                primary.port(),
                d.join(key).display()
            );
            let theirs = psql_outcome(&conninfo, "select current_user").map(drop);
            let ours = connect(&conninfo)
                .map(drop)
                .map_err(|e| e.to_string().trim_end().to_owned());
            assert_eq!(ours, theirs, "{key}, sslmode={mode}");
            outcomes.push(ours.is_ok());
        }
    }
    assert_eq!(
        outcomes,
        [true, true, false, false],
        "the right key logs in, the wrong one not"
    );
}
