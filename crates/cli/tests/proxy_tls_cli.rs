//! `pgyard proxy` serving TLS to its clients, as a user sets it up: a `[tls]` table in the
//! configuration file (and a SIGHUP that swaps the certificate), or `--tls-cert`/`--tls-key`;
//! `pgyard connect` is the client, verifying the certificate and binding its SCRAM login to it.

use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::fixtures::write_server_cert;

/// The proxy process and its folder, both gone on drop.
struct Running {
    child: Child,
    dir: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Running {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("proxy.log")).unwrap_or_default()
    }

    /// Waits until the log holds `needle` `times` times.
    fn wait_log(&self, needle: &str, times: usize) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.log().matches(needle).count() < times {
            assert!(
                Instant::now() < deadline,
                "no {needle:?} in:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A fresh folder under the temp dir, world-readable (the key files are written for the
/// server's account).
fn folder(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pgyard-ptls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("folder");
    dir
}

/// Runs `pgyard proxy ARGS` with its log in `dir`; returns once `port` accepts connections.
fn start(dir: PathBuf, args: &[&str], port: u16) -> Running {
    let log = std::fs::File::create(dir.join("proxy.log")).expect("log file");
    let child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("proxy")
        .args(args)
        .env("RUST_LOG", "debug")
        .stdin(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start pgyard proxy");
    let mut running = Running { child, dir };
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Ok(Some(status)) = running.child.try_wait() {
            panic!("the proxy exited with {status}:\n{}", running.log());
        }
        assert!(
            Instant::now() < deadline,
            "never listened:\n{}",
            running.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    running
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("address").port()
}

/// `pgyard connect CONNINFO -c SQL`.
fn connect(conninfo: &str, sql: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args(["connect", conninfo, "-c", sql])
        .env("LC_ALL", "C")
        .output()
        .expect("run pgyard connect")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A self-signed certificate for 127.0.0.1 in `dir` (its own root for `verify-full`).
fn cert(dir: &Path) -> (String, String) {
    std::fs::create_dir_all(dir).expect("folder");
    write_server_cert(dir, &["127.0.0.1"]).expect("certificate")
}

/// Logging in as `postgres` through the proxy on `port`, with `tls` settings.
fn via(port: u16, tls: &str) -> String {
    format!("host=127.0.0.1 port={port} user=postgres password=s3cret dbname=postgres {tls}")
}

fn verify(root: &str) -> String {
    format!("sslmode=verify-full sslrootcert={root} channel_binding=require")
}

#[test]
fn a_tls_table_requires_tls_and_a_sighup_swaps_the_certificate() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = folder("config");
    std::fs::write(dir.join("users.txt"), "\"postgres\" \"s3cret\"\n").expect("auth file");
    let (old_cert, old_key) = cert(&dir.join("old"));
    let (new_cert, new_key) = cert(&dir.join("new"));
    let port = free_port();
    let toml = |cert: &str, key: &str| {
        format!(
            "listen = \"127.0.0.1:{port}\"\nauth_file = \"users.txt\"\n\
             backend = \"host=127.0.0.1 port={}\"\n\
             [tls]\ncert_file = \"{cert}\"\nkey_file = \"{key}\"\nmode = \"require\"\n",
            primary.port()
        )
    };
    let file = dir.join("proxy.toml");
    std::fs::write(&file, toml(&old_cert, &old_key)).expect("config file");
    let proxy = start(dir.clone(), &["--config", &file.to_string_lossy()], port);
    proxy.wait_log("pgyard proxy started", 1);

    let out = connect(&via(port, &verify(&old_cert)), "select 1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "1\n");
    let out = connect(&via(port, "sslmode=disable"), "select 1");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("SSL required"),
        "{}",
        text(&out.stderr)
    );

    // New files and SIGHUP: connections from then on see the new certificate.
    std::fs::write(&file, toml(&new_cert, &new_key)).expect("config file");
    let ok = Command::new("kill")
        .args(["-HUP", &proxy.child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -HUP");
    proxy.wait_log("configuration reloaded", 1);
    let out = connect(&via(port, &verify(&new_cert)), "select 2");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = connect(&via(port, &verify(&old_cert)), "select 3");
    assert!(
        !out.status.success(),
        "the old certificate is no longer shown"
    );
}

#[test]
fn tls_flags_serve_a_certificate_without_a_file() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = folder("flags");
    std::fs::write(dir.join("users.txt"), "\"postgres\" \"s3cret\"\n").expect("auth file");
    let (cert, key) = cert(&dir.join("tls"));
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let users = dir.join("users.txt").to_string_lossy().into_owned();
    let args = [
        "--listen",
        &listen,
        "--backend",
        &backend,
        "--auth-file",
        &users,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-mode",
        "require",
    ];
    let _proxy = start(dir.clone(), &args, port);
    let direct = format!("{} sslnegotiation=direct", verify(&cert));
    let out = connect(&via(port, &direct), "select 1");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = connect(&via(port, "sslmode=disable"), "select 1");
    assert!(
        text(&out.stderr).contains("SSL required"),
        "{}",
        text(&out.stderr)
    );

    // A key without its certificate is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .args([
            "proxy",
            "--backend",
            &backend,
            "--auth",
            "trust",
            "--tls-key",
            &key,
        ])
        .output()
        .expect("run pgyard proxy");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn auth_cert_from_the_flags_lets_in_the_certificates_user() {
    use std::os::unix::fs::PermissionsExt;
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = folder("cert");
    let ca = pgyard_testkit::fixtures::TestCa::new("flags CA").expect("CA");
    let sign = |names: Vec<String>, cn: &str, stem: &str| {
        let mut params = rcgen::CertificateParams::new(names).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        let (cert, key) = ca.sign(params).expect("signed");
        let (crt, key_path) = (
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        );
        std::fs::write(&crt, cert.pem()).expect("write");
        std::fs::write(&key_path, key.serialize_pem()).expect("write");
        std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        (
            crt.to_string_lossy().into_owned(),
            key_path.to_string_lossy().into_owned(),
        )
    };
    let (server_crt, server_key) = sign(vec!["127.0.0.1".into()], "proxy", "server");
    let (pg_crt, pg_key) = sign(Vec::new(), "postgres", "postgres");
    let (other_crt, other_key) = sign(Vec::new(), "someone", "someone");
    let ca_file = dir.join("root.crt");
    std::fs::write(&ca_file, ca.cert.pem()).expect("write");
    let ca_file = ca_file.to_string_lossy().into_owned();

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let mut args = vec![
        "--listen",
        &listen,
        "--backend",
        &backend,
        "--auth",
        "cert",
        "--tls-cert",
        &server_crt,
        "--tls-key",
        &server_key,
        "--tls-mode",
        "verify-full",
    ];
    // Without the CA there is nothing to check a certificate against.
    let out = Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("proxy")
        .args(&args)
        .output()
        .expect("run pgyard proxy");
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("--auth cert needs client certificates: --tls-ca FILE"),
        "{}",
        text(&out.stderr)
    );
    args.extend(["--tls-ca", &ca_file]);
    let _proxy = start(dir.clone(), &args, port);

    let login = |crt: &str, key: &str| {
        let conninfo = format!(
            "host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=verify-full \
             sslrootcert={ca_file} sslcert={crt} sslkey={key}"
        );
        connect(&conninfo, "select current_user")
    };
    let out = login(&pg_crt, &pg_key);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "postgres\n");
    let out = login(&other_crt, &other_key);
    assert!(
        text(&out.stderr).contains("certificate authentication failed for user \"postgres\""),
        "{}",
        text(&out.stderr)
    );
}
