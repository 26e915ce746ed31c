//! Fixtures the adapters' real-server tests share, so that each adapter is held to the same
//! cases: psql as the oracle for connection outcomes, TLS certificates and the table of
//! `sslmode` cases, a failover, and a query's expected text rows.

use std::io;
use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
use std::path::Path;

use crate::cluster::{self, Auth, Options, Primary};

/// What psql printed: `Ok(stdout)` or `Err(libpq's message without "psql: error: ")`.
pub fn psql_outcome(conninfo: &str, sql: &str) -> Result<String, String> {
    cluster::psql(conninfo, sql).map_err(|e| {
        let text = e.to_string();
        match text.split_once("psql: error: ") {
            Some((_, msg)) => msg.trim_end().to_owned(),
            None => text,
        }
    })
}

/// Asserts that an adapter's outcome for `conninfo` (the answer to `sql`, or the error text
/// without its trailing newline) is psql's, word for word.
pub fn assert_same_as_psql(conninfo: &str, sql: &str, ours: &Result<String, String>) {
    let theirs = psql_outcome(conninfo, sql);
    assert_eq!(
        ours, &theirs,
        "{conninfo}\nours: {ours:?}\npsql: {theirs:?}"
    );
}

/// Fails over: stops the primary and promotes its standby `name`.
pub fn fail_over(primary: &mut Primary, name: &str) -> io::Result<()> {
    primary.stop()?;
    let standby = primary
        .standby_mut(name)
        .ok_or_else(|| io::Error::other(format!("no standby named {name}")))?;
    standby.promote()
}

/// A query whose rows mix values, NULL and empty text: what every adapter's simple query must
/// return as text rows.
pub const MIXED_ROWS_SQL: &str = "select 1, null::text, 'a b' union all select 2, 'x', ''";

/// The rows of [`MIXED_ROWS_SQL`] (`None` for NULL).
pub fn mixed_rows() -> Vec<Vec<Option<String>>> {
    let text = |s: &str| Some(s.to_owned());
    vec![
        vec![text("1"), None, text("a b")],
        vec![text("2"), text("x"), text("")],
    ]
}

/// Writes a self-signed certificate for `names` (DNS names or IP literals) and its key into
/// `dir`, readable by the server user (key mode 0600, owned by that user). Returns the paths.
pub fn write_server_cert(dir: &Path, names: &[&str]) -> io::Result<(String, String)> {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let ck = rcgen::generate_simple_self_signed(names).map_err(io::Error::other)?;
    write_cert_files(dir, &ck.cert.pem(), &ck.key_pair.serialize_pem())
}

/// A certificate authority for tests: it signs server and client certificates, and clients
/// that should verify trust only its certificate.
pub struct TestCa {
    /// The CA's self-signed certificate.
    pub cert: rcgen::Certificate,
    key: rcgen::KeyPair,
}

impl TestCa {
    /// A new CA whose subject's Common Name is `name`.
    pub fn new(name: &str) -> io::Result<TestCa> {
        TestCa::with_years(name, None)
    }

    /// A new CA valid from the start of the first year to the start of the second (rcgen's
    /// default span for `None`).
    pub fn with_years(name: &str, years: Option<(i32, i32)>) -> io::Result<TestCa> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        if let Some((from, to)) = years {
            params.not_before = rcgen::date_time_ymd(from, 1, 1);
            params.not_after = rcgen::date_time_ymd(to, 1, 1);
        }
        let key = KeyPair::generate().map_err(io::Error::other)?;
        let cert = params.self_signed(&key).map_err(io::Error::other)?;
        Ok(TestCa { cert, key })
    }

    /// The CA's private key in PEM, for signing with other tools (`openssl x509 -req`).
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// A revocation list of this CA, in PEM, revoking the certificates with `serials`; issued
    /// in 2020 and due again at the start of `next_year` (a past year makes it expired).
    pub fn crl(&self, serials: &[u64], next_year: i32) -> io::Result<String> {
        use rcgen::{
            date_time_ymd, CertificateRevocationListParams, KeyIdMethod, RevocationReason,
            RevokedCertParams, SerialNumber,
        };
        let params = CertificateRevocationListParams {
            this_update: date_time_ymd(2020, 1, 1),
            next_update: date_time_ymd(next_year, 1, 1),
            crl_number: SerialNumber::from(1u64),
            issuing_distribution_point: None,
            revoked_certs: serials
                .iter()
                .map(|&serial| RevokedCertParams {
                    serial_number: SerialNumber::from(serial),
                    revocation_time: date_time_ymd(2020, 1, 1),
                    reason_code: Some(RevocationReason::KeyCompromise),
                    invalidity_date: None,
                })
                .collect(),
            key_identifier_method: KeyIdMethod::Sha256,
        };
        let crl = params
            .signed_by(&self.cert, &self.key)
            .map_err(io::Error::other)?;
        crl.pem().map_err(io::Error::other)
    }

    /// An intermediate CA under this one, whose subject's Common Name is `name`.
    pub fn intermediate(&self, name: &str) -> io::Result<TestCa> {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa};
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let (cert, key) = self.sign(params)?;
        Ok(TestCa { cert, key })
    }

    /// A certificate for `params`, signed by this CA, with its new key.
    pub fn sign(
        &self,
        params: rcgen::CertificateParams,
    ) -> io::Result<(rcgen::Certificate, rcgen::KeyPair)> {
        let key = rcgen::KeyPair::generate().map_err(io::Error::other)?;
        let cert = params
            .signed_by(&key, &self.cert, &self.key)
            .map_err(io::Error::other)?;
        Ok((cert, key))
    }
}

/// A CA, a server certificate for `localhost` signed by it, and a client certificate for
/// `certuser`, as files: the server's readable to the server user, the client's this
/// process's (the key mode 0600, as libpq requires).
pub struct Pki {
    /// The CA's certificate (a root file for `verify-*`, the server's `ssl_ca_file`).
    pub ca: String,
    /// The server's certificate, for `localhost`.
    pub server_cert: String,
    /// The server's key.
    pub server_key: String,
    /// The client certificate, Common Name `certuser`.
    pub client_cert: String,
    /// The client certificate's key.
    pub client_key: String,
}

/// Writes a [`Pki`] into `dir` (made world-readable, so that the server reaches its files).
pub fn write_pki(dir: &Path) -> io::Result<Pki> {
    use rcgen::{CertificateParams, DnType};
    let ca = TestCa::new("pgyard test CA")?;
    let params = CertificateParams::new(vec!["localhost".to_owned()]).map_err(io::Error::other)?;
    let (server_cert, server_key) = ca.sign(params)?;
    let mut client_params =
        CertificateParams::new(Vec::<String>::new()).map_err(io::Error::other)?;
    client_params
        .distinguished_name
        .push(DnType::CommonName, "certuser");
    let (client_cert, client_key) = ca.sign(client_params)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    let client = |name: &str, text: String, mode: u32| -> io::Result<String> {
        let path = dir.join(name);
        std::fs::write(&path, text)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
        Ok(path.to_string_lossy().into_owned())
    };
    Ok(Pki {
        ca: write_for_server(dir, "ca.crt", &ca.cert.pem(), 0o644)?,
        server_cert: write_for_server(dir, "server.crt", &server_cert.pem(), 0o644)?,
        server_key: write_for_server(dir, "server.key", &server_key.serialize_pem(), 0o600)?,
        client_cert: client("client.crt", client_cert.pem(), 0o644)?,
        client_key: client("client.key", client_key.serialize_pem(), 0o600)?,
    })
}

/// Options for a server that serves TLS with `pki`'s certificate for `localhost` and asks
/// every client for a certificate signed by `pki`'s CA (as any server with `ssl_ca_file`).
pub fn pki_tls_options(pki: &Pki) -> Options {
    tls_options(&pki.server_cert, &pki.server_key, Some(&pki.ca))
}

/// Options for a server that serves TLS with the certificate file `cert` and key file `key`
/// (paths the server's account can read), with `ca` as its `ssl_ca_file` when given: the
/// issuers it sends with its certificate, and the CAs a client certificate must chain to.
pub fn tls_options(cert: &str, key: &str, ca: Option<&str>) -> Options {
    let options = Options::default()
        .conf("ssl = on")
        .conf(format!("ssl_cert_file = '{cert}'"))
        .conf(format!("ssl_key_file = '{key}'"));
    match ca {
        Some(ca) => options.conf(format!("ssl_ca_file = '{ca}'")),
        None => options,
    }
}

/// A second CA's certificate, written into `dir` as `other-ca.crt`: a root file under which
/// nothing a [`Pki`] signed verifies. Returns its path.
pub fn write_other_ca(dir: &Path) -> io::Result<String> {
    let other = TestCa::new("another CA")?;
    let path = dir.join("other-ca.crt");
    std::fs::write(&path, other.cert.pem())?;
    Ok(path.to_string_lossy().into_owned())
}

/// SQL creating login roles with passwords, each stored as md5 where `md5` says so and as
/// SCRAM otherwise: `(name, md5, password)`.
pub fn create_login_roles_sql<'a>(
    roles: impl IntoIterator<Item = (&'a str, bool, &'a str)>,
) -> String {
    let mut sql = String::new();
    for (name, md5, password) in roles {
        let encryption = if md5 { "md5" } else { "scram-sha-256" };
        sql.push_str(&format!(
            "SET password_encryption = '{encryption}'; \
             CREATE ROLE {name} LOGIN PASSWORD '{password}'; "
        ));
    }
    sql
}

/// Writes a PEM certificate and key into `dir` as `server.crt` and `server.key`, readable by
/// the server user.
pub fn write_cert_files(dir: &Path, cert_pem: &str, key_pem: &str) -> io::Result<(String, String)> {
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    Ok((
        write_for_server(dir, "server.crt", cert_pem, 0o644)?,
        write_for_server(dir, "server.key", key_pem, 0o600)?,
    ))
}

/// Writes `name` in `dir` with `mode`, owned by the server user: the server refuses a key file
/// it does not own (or that others can read). Returns the path.
pub fn write_for_server(dir: &Path, name: &str, contents: &str, mode: u32) -> io::Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, contents)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))?;
    let user = cluster::ensure_server_user()?;
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    if user.uid != me {
        chown(&path, Some(user.uid), Some(user.gid))?;
    }
    Ok(path.to_string_lossy().into_owned())
}

/// A SCRAM primary serving TLS with a self-signed certificate for `localhost` (kept in the
/// cluster's folder, removed with it); returns it with the certificate's path (a root file for
/// `verify-*`).
pub fn tls_primary() -> io::Result<(Primary, String)> {
    let primary = Primary::start(Options::default().auth(Auth::ScramSha256))?;
    let dir = primary.root().join("tls");
    std::fs::create_dir_all(&dir)?;
    let (cert, key) = write_server_cert(&dir, &["localhost"])?;
    serve_certificate(&primary, &cert, &key)?;
    Ok((primary, cert))
}

/// Turns TLS on in a running server with `cert` and `key` (or moves it to them), and waits
/// until new connections get them: a backend forked after the postmaster handled the reload
/// reports the new file, and the postmaster reloads its TLS context in that same step.
pub fn serve_certificate(primary: &Primary, cert: &str, key: &str) -> io::Result<()> {
    primary.psql(&format!("alter system set ssl_cert_file = '{cert}'"))?;
    primary.psql(&format!("alter system set ssl_key_file = '{key}'"))?;
    primary.psql("alter system set ssl = on")?;
    primary.psql("select pg_reload_conf()")?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while primary
        .psql("select current_setting('ssl') || ' ' || current_setting('ssl_cert_file')")?
        != format!("on {cert}")
    {
        if std::time::Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "the server did not serve {cert} after a reload:\n{}",
                primary.log_text()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

/// The `sslmode` cases against a [`tls_primary`], each with whether psql connects.
pub fn tls_cases(primary: &Primary, cert: &str) -> Vec<(String, bool)> {
    let port = primary.port();
    let password = primary.password().unwrap_or_default();
    let base = |host: &str| {
        format!("host={host} port={port} user=postgres dbname=postgres password={password}")
    };
    vec![
        (base("127.0.0.1") + " sslmode=require", true),
        (
            base("127.0.0.1") + " sslmode=require channel_binding=require",
            true,
        ),
        (
            base("127.0.0.1") + &format!(" sslmode=verify-ca sslrootcert={cert}"),
            true,
        ),
        (
            base("127.0.0.1") + &format!(" sslmode=verify-full sslrootcert={cert}"),
            false,
        ),
        (
            base("localhost") + &format!(" sslmode=verify-full sslrootcert={cert}"),
            true,
        ),
        (
            base("127.0.0.1") + " sslmode=verify-ca sslrootcert=/nonexistent/root.crt",
            false,
        ),
        (
            base("127.0.0.1") + " sslmode=require sslnegotiation=direct",
            true,
        ),
    ]
}

/// Runs Debian's `pgbench` (next to its psql) on libpq 18 with `args` and returns its standard
/// output; a non-zero exit is an error carrying its standard error.
pub fn pgbench(args: &[&str], timeout: std::time::Duration) -> io::Result<String> {
    let install = crate::postgres::ensure_installed()?;
    let psql = crate::cluster::psql_path()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "psql (and pgbench) not found"))?;
    let pgbench = psql.with_file_name("pgbench");
    let mut cmd = std::process::Command::new(&pgbench);
    cmd.args(args)
        .env("LD_LIBRARY_PATH", &install.lib_dir)
        .env("PGCONNECT_TIMEOUT", "10")
        .env("LC_ALL", "C");
    let out = crate::cluster::run_bounded_output(&mut cmd, timeout)?;
    Ok(out)
}

/// Runs Debian's `openssl` command with `args` in `dir` (for files made the way users make
/// them: version 1 certificates, encrypted keys, revocation list hashes) and returns its
/// standard output; it must succeed.
pub fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("the openssl command (Debian's openssl package)");
    assert!(out.status.success(), "openssl {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A temporary folder named with `prefix` that the servers' account can read (mode 0755),
/// for the certificates and keys a test has a server load.
pub fn server_readable_dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix(prefix).tempdir()?;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
    Ok(dir)
}
