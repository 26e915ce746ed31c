//! The validity of the root certificate itself, against libpq 18 on a live PostgreSQL 18:
//! OpenSSL checks every certificate of the chain against the clock, the trusted root
//! included, where webpki takes a root as a bare name and key. A server certificate (valid
//! now) signed by a root that expired, by one not yet valid, and by one valid now; `verify-ca`
//! and `verify-full`: psql and the blocking adapter connect, or fail with the same text.

use pgyard_blocking::connect;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::fixtures::{
    psql_outcome, serve_certificate, server_readable_dir, write_for_server, TestCa,
};

#[test]
fn a_root_out_of_its_validity_fails_as_in_libpq() {
    let dir = server_readable_dir("pgyard-root-validity-").expect("a directory");
    let d = dir.path();
    let primary = Primary::start(Options::default()).expect("primary");
    let mut differences = Vec::new();
    for (label, years, connects) in [
        ("valid now", Some((2020, 2120)), true),
        ("expired", Some((2000, 2010)), false),
        ("not yet valid", Some((2090, 2100)), false),
    ] {
        let ca = TestCa::with_years(&format!("root {label}"), years).expect("CA");
        let params = rcgen::CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
        let (cert, key) = ca.sign(params).expect("server certificate");
        let n = label.replace(' ', "-");
        let cert = write_for_server(d, &format!("{n}.crt"), &cert.pem(), 0o644).unwrap();
        let key = write_for_server(d, &format!("{n}.key"), &key.serialize_pem(), 0o600).unwrap();
        let root = write_for_server(d, &format!("{n}-root.crt"), &ca.cert.pem(), 0o644).unwrap();
        serve_certificate(&primary, &cert, &key).expect("the server takes the certificate");
        for mode in ["verify-ca", "verify-full"] {
            let conninfo = format!(
                "host=localhost port={} user=postgres dbname=postgres sslmode={mode} \
                 sslrootcert={root}",
                primary.port()
            );
            let theirs = psql_outcome(&conninfo, "select 1").map(drop);
            let ours = connect(&conninfo)
                .map(drop)
                .map_err(|e| e.to_string().trim_end().to_owned());
            if ours != theirs || theirs.is_ok() != connects {
                differences.push(format!(
                    "root {label}, sslmode={mode}:\n  ours: {ours:?}\n  psql: {theirs:?}"
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
