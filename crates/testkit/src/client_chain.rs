//! A server that trusts only a root CA and logs `certuser` in by a certificate an intermediate
//! CA issued, and the connection strings that present that certificate with and without its
//! issuer (in the certificate file, or only in the root file), for comparing an adapter with
//! libpq: OpenSSL completes a lone client certificate's chain from the root file.

use std::io;
use std::os::unix::fs::PermissionsExt;

use rcgen::{CertificateParams, DnType};

use crate::cluster::Primary;
use crate::fixtures::{psql_outcome, server_readable_dir, tls_options, write_for_server, TestCa};

/// The running server, the folder of the files, and the cases.
pub struct ClientChainCases {
    /// The server (`hostssl … certuser … cert`, `ssl_ca_file` the root alone).
    pub primary: Primary,
    /// Holds the certificates and keys; removed when dropped.
    pub dir: tempfile::TempDir,
    /// (what the case presents, its connection string, whether libpq 18 logs in).
    pub cases: Vec<(String, String, bool)>,
}

/// Starts the server and writes the files; see the module's documentation.
pub fn client_chain_cases() -> io::Result<ClientChainCases> {
    let dir = server_readable_dir("pgyard-client-chain-")?;
    let path = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
    let root = TestCa::new("pgyard chain root")?;
    let int = root.intermediate("pgyard chain intermediate")?;
    let other_int = root.intermediate("pgyard other intermediate")?;
    let server_params =
        CertificateParams::new(vec!["localhost".to_owned()]).map_err(io::Error::other)?;
    let (server_cert, server_key) = root.sign(server_params)?;
    let mut client_params =
        CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
    client_params
        .distinguished_name
        .push(DnType::CommonName, "certuser");
    let (client_cert, client_key) = int.sign(client_params)?;

    let server_cert = write_for_server(dir.path(), "server.crt", &server_cert.pem(), 0o644)?;
    let server_key =
        write_for_server(dir.path(), "server.key", &server_key.serialize_pem(), 0o600)?;
    let ca = write_for_server(dir.path(), "root.crt", &root.cert.pem(), 0o644)?;
    let options = tls_options(&server_cert, &server_key, Some(&ca))
        .hba("hostssl all certuser 127.0.0.1/32 cert");
    let primary = Primary::start(options)?;
    primary.psql("CREATE ROLE certuser LOGIN")?;

    let key = path("client.key");
    std::fs::write(&key, client_key.serialize_pem())?;
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
    let leaf = client_cert.pem();
    let files = [
        ("leaf.crt", leaf.clone()),
        ("leaf-int.crt", leaf + &int.cert.pem()),
        ("roots-root.crt", root.cert.pem()),
        ("roots-root-int.crt", root.cert.pem() + &int.cert.pem()),
        ("roots-int-root.crt", int.cert.pem() + &root.cert.pem()),
        (
            "roots-other-root.crt",
            other_int.cert.pem() + &root.cert.pem(),
        ),
    ];
    for (name, text) in files {
        std::fs::write(path(name), text)?;
    }
    // (certificate file, root file, sslmode, whether libpq logs in)
    let table = [
        ("leaf.crt", "roots-root-int.crt", "verify-full", true),
        ("leaf.crt", "roots-int-root.crt", "verify-ca", true),
        ("leaf.crt", "roots-root-int.crt", "require", true),
        ("leaf.crt", "roots-root.crt", "verify-full", false),
        ("leaf.crt", "roots-other-root.crt", "verify-full", false),
        ("leaf-int.crt", "roots-root.crt", "verify-full", true),
        ("leaf-int.crt", "roots-root-int.crt", "verify-full", true),
        ("leaf.crt", "missing.crt", "require", false),
    ];
    let cases = table
        .iter()
        .map(|(cert, roots, mode, logs_in)| {
            let conninfo = format!(
                "host=localhost port={} user=certuser dbname=postgres sslmode={mode} \
                 sslrootcert={} sslcert={} sslkey={key}",
                primary.port(),
                path(roots),
                path(cert)
            );
            (format!("{cert} with {roots}, {mode}"), conninfo, *logs_in)
        })
        .collect();
    Ok(ClientChainCases {
        primary,
        dir,
        cases,
    })
}

impl ClientChainCases {
    /// Asserts that `ours` (an adapter's outcome for each case, in order: logged in, or its
    /// error text) is psql's, word for word, and psql did what libpq 18 is known to.
    pub fn assert_same_as_psql(&self, ours: &[Result<(), String>]) {
        let differences = self.differences(ours);
        assert!(
            differences.is_empty(),
            "{} of {} outcomes differ:\n{}",
            differences.len(),
            ours.len(),
            differences.join("\n")
        );
    }

    fn differences(&self, ours: &[Result<(), String>]) -> Vec<String> {
        assert_eq!(ours.len(), self.cases.len(), "one outcome per case");
        let mut out = Vec::new();
        for ((label, conninfo, logs_in), ours) in self.cases.iter().zip(ours) {
            let theirs = psql_outcome(conninfo, "select current_user").map(|_| ());
            if *ours != theirs || theirs.is_ok() != *logs_in {
                out.push(format!("{label}:\n  ours: {ours:?}\n  psql: {theirs:?}"));
            }
        }
        out
    }
}
