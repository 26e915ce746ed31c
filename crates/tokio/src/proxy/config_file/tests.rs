//! The configuration file: every key read, every mistake named.

use std::time::Duration;

use pgyard_proxy::{ClientAuth, Databases, PoolMode, Route, TlsMode};

use super::*;

const FULL: &str = r#"
listen = ["127.0.0.1:6432", "[::1]:6433"]
unix_socket_dir = "/run/pgyard"
unix_auth = "peer"
backend = "host=db1,db2 port=5432"
pool_mode = "session"
pool_size = 7
default_route = "standby"
auth = "trust"
max_client_conn = 50
query_wait_timeout = 1.5
client_login_timeout = 9
server_idle_timeout = 0
server_lifetime = 120
failover_timeout = 20
shutdown_timeout = 5
server_reset_query_always = true
admin_users = ["ops", "root"]
ignore_startup_parameters = ["Extra_Float_Digits", "geqo"]

[databases.shop]
conninfo = "host=a,b,c port=5433 dbname=shop_live"

[databases."with space"]
conninfo = "postgresql://x:5434/other"
"#;

/// The StartupMessage settings `p` ignores, in order.
fn ignored(p: &ProxyConfig) -> Vec<&str> {
    let names = p.client.ignore_startup_parameters.iter();
    names.map(String::as_str).collect()
}

fn parse(text: &str) -> Result<FileConfig, String> {
    parse_config(text, Path::new("/nonexistent"))
}

fn error(text: &str) -> String {
    parse(text).expect_err("an error")
}

const MIN: &str = "auth = \"trust\"\nbackend = \"host=db\"\n";

#[test]
fn every_key_is_read() {
    let c = parse(FULL).expect("parses");
    assert_eq!(
        c.listen,
        vec![
            "127.0.0.1:6432".parse().unwrap(),
            "[::1]:6433".parse().unwrap()
        ]
    );
    assert_eq!(c.unix_socket_dir.as_deref(), Some(Path::new("/run/pgyard")));
    let p = &c.proxy;
    assert!(p.unix_peer);
    assert_eq!(p.backend.as_deref(), Some("host=db1,db2 port=5432"));
    assert_eq!(
        p.databases.get("shop").map(String::as_str),
        Some("host=a,b,c port=5433 dbname=shop_live")
    );
    assert!(p.databases.contains_key("with space"));
    assert_eq!(p.client.pool_mode, PoolMode::Session);
    assert_eq!(p.client.default_route, Route::Standby);
    assert!(matches!(p.client.auth, ClientAuth::Trust));
    assert_eq!(p.client.login_timeout, Duration::from_secs(9));
    assert_eq!(
        p.client.databases,
        Databases::Any,
        "the backend serves the rest"
    );
    assert_eq!(p.pool.size, 7);
    assert_eq!(p.pool.wait_timeout, Duration::from_millis(1500));
    assert_eq!(p.pool.idle_timeout, None, "0 is never");
    assert_eq!(p.pool.lifetime, Some(Duration::from_secs(120)));
    assert_eq!(p.max_client_conn, 50);
    assert_eq!(p.failover_timeout, Some(Duration::from_secs(20)));
    assert_eq!(p.shutdown_timeout, Duration::from_secs(5));
    assert!(p.server_reset_query_always);
    let admins: Vec<&str> = p.client.admin_users.iter().map(String::as_str).collect();
    assert_eq!(admins, ["ops", "root"]);
    assert_eq!(ignored(p), ["extra_float_digits", "geqo"], "in lower case");
    assert_eq!(p.file, None, "parsed from text, not read from a file");
}

#[test]
fn defaults_fill_what_is_left_out() {
    let c = parse(MIN).expect("parses");
    assert_eq!(c.listen, vec!["127.0.0.1:6432".parse().unwrap()]);
    assert_eq!(c.unix_socket_dir, None, "no Unix socket unless asked for");
    let p = &c.proxy;
    assert!(
        !p.unix_peer,
        "the socket's clients use `auth` too unless told"
    );
    assert_eq!(p.client.pool_mode, PoolMode::Transaction);
    assert_eq!(p.client.default_route, Route::Primary);
    assert_eq!(p.client.login_timeout, Duration::from_secs(60));
    assert_eq!(p.pool, pgyard_proxy::PoolSettings::default());
    assert_eq!(p.max_client_conn, 100);
    assert_eq!(p.failover_timeout, None);
    assert_eq!(p.shutdown_timeout, Duration::from_secs(30));
    assert!(
        !p.server_reset_query_always,
        "transaction mode resets nothing unless asked"
    );
    assert!(p.client.admin_users.is_empty());
    assert_eq!(
        ignored(p),
        ["extra_float_digits"],
        "pgJDBC's unasked setting"
    );
    let none = parse(&format!("ignore_startup_parameters = []\n{MIN}")).expect("none");
    assert!(none.proxy.client.ignore_startup_parameters.is_empty());
    let e = error(&format!("ignore_startup_parameters = [\"\"]\n{MIN}"));
    assert!(
        e.contains("ignore_startup_parameters: an empty name"),
        "{e}"
    );
    let one = parse(&format!("listen = \"127.0.0.2:7000\"\n{MIN}")).expect("one address");
    assert_eq!(one.listen, vec!["127.0.0.2:7000".parse().unwrap()]);
}

#[test]
fn a_relative_unix_socket_dir_is_taken_from_beside_the_file() {
    let c = parse_config(
        &format!("unix_socket_dir = \"sockets\"\n{MIN}"),
        Path::new("/etc/pgyard"),
    )
    .expect("parses");
    assert_eq!(
        c.unix_socket_dir.as_deref(),
        Some(Path::new("/etc/pgyard/sockets"))
    );
}

#[test]
fn without_a_backend_only_the_listed_databases_are_served() {
    let c = parse("auth = \"trust\"\n[databases.a]\nconninfo = \"host=x\"\n").expect("parses");
    let Databases::Only(names) = &c.proxy.client.databases else {
        panic!("{:?}", c.proxy.client.databases)
    };
    assert_eq!(names.iter().collect::<Vec<_>>(), ["a"]);
    assert!(error("auth = \"trust\"\n").contains("nothing to serve"));
}

#[test]
fn an_unknown_key_is_named() {
    let e = error(&format!("{MIN}pool_sise = 3\n"));
    assert!(e.contains("pool_sise"), "{e}");
    let e = error(&format!("{MIN}[databases.a]\nconninf = \"host=x\"\n"));
    assert!(e.contains("conninf"), "{e}");
    let e = error(&format!("{MIN}[databases.a]\n"));
    assert!(e.contains("conninfo"), "a missing conninfo is named: {e}");
}

#[test]
fn wrong_values_are_named() {
    for (line, named) in [
        ("pool_mode = \"statement\"", "statement"),
        ("default_route = \"master\"", "master"),
        ("pool_size = -1", "pool_size"),
        ("pool_size = 0", "pool_size"),
        ("max_client_conn = 0", "max_client_conn"),
        ("query_wait_timeout = 0", "query_wait_timeout"),
        ("client_login_timeout = -2", "client_login_timeout"),
        ("server_lifetime = 1e300", "server_lifetime"),
        ("shutdown_timeout = nan", "shutdown_timeout"),
        ("listen = \"localhost:6432\"", "localhost:6432"),
        ("listen = []", "listen"),
        ("listen = 6432", "listen"),
        ("unix_socket_dir = \"\"", "unix_socket_dir"),
        ("unix_socket_dir = 5", "unix_socket_dir"),
        ("unix_auth = \"peer\"", "needs unix_socket_dir"),
        ("unix_socket_dir = \"/s\"\nunix_auth = \"ident\"", "ident"),
    ] {
        let e = error(&format!("{line}\n{MIN}"));
        assert!(e.contains(named), "{line}: {e}");
    }
}

#[test]
fn the_auth_is_exactly_one_of_a_file_and_trust() {
    let e = error("backend = \"host=db\"\n");
    assert!(e.contains("auth_file"), "{e}");
    let e = error(&format!("auth_file = \"users.txt\"\n{MIN}"));
    assert!(e.contains("not both"), "{e}");
    let e = error(&format!("listen = \"0.0.0.0:6432\"\n{MIN}"));
    assert!(e.contains("loopback"), "{e}");
    let e = error("auth = \"md5\"\nbackend = \"host=db\"\n");
    assert!(e.contains("md5"), "{e}");
}

#[test]
fn the_auth_file_is_read_from_beside_the_config_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("users.txt"), "\"alice\" \"secret\"\n").expect("write");
    let text = "auth_file = \"users.txt\"\nbackend = \"host=db\"\n";
    std::fs::write(dir.path().join("proxy.toml"), text).expect("write");
    let c = load_config(&dir.path().join("proxy.toml")).expect("loads");
    let ClientAuth::File(file) = &c.proxy.client.auth else {
        panic!("an auth file")
    };
    assert!(file.get("alice").is_some());
    assert_eq!(
        c.proxy.file,
        Some(dir.path().join("proxy.toml")),
        "RELOAD re-reads it"
    );
    std::fs::write(dir.path().join("users.txt"), "\"alice\" \"unterminated\n").expect("write");
    let e = load_config(&dir.path().join("proxy.toml")).expect_err("a broken auth file");
    assert!(e.contains("users.txt") && e.contains("line 1"), "{e}");
    let e = load_config(&dir.path().join("missing.toml")).expect_err("no file");
    assert!(e.contains("missing.toml"), "{e}");
}

#[test]
fn connection_strings_are_checked() {
    let e = error("auth = \"trust\"\nbackend = \"host='db\"\n");
    assert!(e.starts_with("backend:"), "{e}");
    let e = error(&format!(
        "{MIN}[databases.shop]\nconninfo = \"host=x user=app\"\n"
    ));
    assert!(e.contains("databases.shop") && e.contains("user"), "{e}");
    let e = error(&format!("{MIN}[databases.shop]\nconninfo = \"nonsense\"\n"));
    assert!(e.contains("databases.shop"), "{e}");
}

/// A folder with a self-signed certificate for localhost (`c.pem`) and its key (`k.pem`).
fn certificate_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = rcgen::CertificateParams::new(vec!["localhost".into()])
        .expect("params")
        .self_signed(&key)
        .expect("cert");
    std::fs::write(dir.path().join("c.pem"), cert.pem()).expect("write");
    std::fs::write(dir.path().join("k.pem"), key.serialize_pem()).expect("write");
    dir
}

#[test]
fn tls_files_are_read_and_paired_and_each_mistake_named() {
    let dir = certificate_folder();
    let other = rcgen::KeyPair::generate().expect("another key");
    std::fs::write(dir.path().join("other.pem"), other.serialize_pem()).expect("write");
    std::fs::write(dir.path().join("junk.pem"), "not pem").expect("write");
    let with = |table: &str| parse_config(&format!("{MIN}[tls]\n{table}"), dir.path());
    let files = |c: &str, k: &str| format!("cert_file = \"{c}\"\nkey_file = \"{k}\"\n");

    let c = with(&files("c.pem", "k.pem")).expect("a certificate and its key");
    let tls = c.proxy.tls.expect("TLS on");
    assert_eq!(
        tls.mode,
        TlsMode::Prefer,
        "a certificate means TLS is wanted"
    );
    assert!(tls.channel_binding(), "ECDSA-SHA256 has an end-point hash");
    for (name, mode) in [
        ("disable", TlsMode::Disable),
        ("allow", TlsMode::Allow),
        ("prefer", TlsMode::Prefer),
        ("require", TlsMode::Require),
    ] {
        let text = format!("{}mode = \"{name}\"\n", files("c.pem", "k.pem"));
        let c = with(&text).expect(name);
        assert_eq!(c.proxy.tls.expect("tls").mode, mode);
    }
    assert!(parse(MIN).expect("no table").proxy.tls.is_none());

    let e = with(&files("missing.pem", "k.pem")).expect_err("missing");
    assert!(
        e.contains("tls.cert_file") && e.contains("missing.pem"),
        "{e}"
    );
    let e = with(&files("junk.pem", "k.pem")).expect_err("junk");
    assert!(
        e.contains("tls.cert_file") && e.contains("no PEM certificate"),
        "{e}"
    );
    let e = with(&files("c.pem", "c.pem")).expect_err("a certificate as the key");
    assert!(
        e.contains("tls.key_file") && e.contains("no PEM private key"),
        "{e}"
    );
    let e = with(&files("c.pem", "other.pem")).expect_err("someone else's key");
    assert!(
        e.contains("tls.key_file") && e.contains("does not go with the certificate"),
        "{e}"
    );
    let e = with("cert_file = \"c.pem\"\n").expect_err("no key");
    assert!(e.contains("tls.key_file") && e.contains("missing"), "{e}");
    let e = with("key_file = \"k.pem\"\n").expect_err("no certificate");
    assert!(e.contains("tls.cert_file"), "{e}");
    let text = format!("{}mode = \"verify-full\"\n", files("c.pem", "k.pem"));
    let e = with(&text).expect_err("client certificates without a CA");
    assert!(
        e.contains("tls.ca_file") && e.contains("mode verify-full needs a CA file"),
        "{e}"
    );
    let text = format!("{}mode = \"sometimes\"\n", files("c.pem", "k.pem"));
    let e = with(&text).expect_err("unknown mode");
    assert!(e.contains("unknown mode \"sometimes\""), "{e}");
    let e = with("cert = \"c.pem\"\n").expect_err("unknown key");
    assert!(e.contains("unknown field `cert`"), "{e}");
}

#[test]
fn client_certificates_need_a_ca_and_cert_auth_needs_client_certificates() {
    let dir = certificate_folder();
    std::fs::write(dir.path().join("junk.pem"), "not pem").expect("write");
    let files = "cert_file = \"c.pem\"\nkey_file = \"k.pem\"\n";
    let with = |top: &str, table: &str| {
        let text = format!("{top}backend = \"host=db\"\n[tls]\n{files}{table}");
        parse_config(&text, dir.path())
    };

    for (name, mode) in [
        ("verify-ca", TlsMode::VerifyCa),
        ("verify-full", TlsMode::VerifyFull),
    ] {
        let table = format!("mode = \"{name}\"\nca_file = \"c.pem\"\n");
        let c = with("auth = \"trust\"\n", &table).expect(name);
        let tls = c.proxy.tls.expect("tls");
        assert_eq!(tls.mode, mode);
        assert!(tls.verifies_clients());
        assert_eq!(tls.ca_file(), Some(dir.path().join("c.pem").as_path()));
    }
    // A CA with an optional mode: certificates are asked for and checked when shown.
    let c = with("auth = \"cert\"\n", "ca_file = \"c.pem\"\n").expect("cert auth");
    assert!(matches!(c.proxy.client.auth, ClientAuth::Cert));
    assert_eq!(c.proxy.tls.expect("tls").mode, TlsMode::Prefer);

    let e = with("auth = \"cert\"\n", "").expect_err("no CA");
    assert!(
        e.contains("auth = \"cert\" needs client certificates"),
        "{e}"
    );
    let e = parse_config("auth = \"cert\"\nbackend = \"host=db\"\n", dir.path())
        .expect_err("no TLS at all");
    assert!(
        e.contains("auth = \"cert\" needs client certificates"),
        "{e}"
    );
    let e = with("auth = \"trust\"\n", "ca_file = \"junk.pem\"\n").expect_err("junk CA");
    assert!(
        e.contains("tls.ca_file") && e.contains("no PEM certificate"),
        "{e}"
    );
    let e = with("auth = \"trust\"\n", "ca_file = \"gone.pem\"\n").expect_err("no file");
    assert!(e.contains("tls.ca_file") && e.contains("gone.pem"), "{e}");
}

#[test]
fn any_prefix_of_a_file_parses_or_fails_without_panicking() {
    let mut cut = 0;
    while cut <= FULL.len() {
        let _ = parse(&FULL[..cut]);
        cut += 1;
        while !FULL.is_char_boundary(cut.min(FULL.len())) {
            cut += 1;
        }
    }
    let _ = parse("\u{0}\u{feff}[[[=\"\\u{d800}\"");
}

#[test]
fn admin_users_are_names_and_pgyard_is_the_consoles_database() {
    let e = error(&format!("admin_users = [\"ops\", \"\"]\n{MIN}"));
    assert!(e.contains("admin_users: an empty user name"), "{e}");
    let e = error(&format!("admin_users = \"ops\"\n{MIN}"));
    assert!(e.contains("admin_users"), "{e}");
    let e = error(&format!("{MIN}[databases.pgyard]\nconninfo = \"host=x\"\n"));
    assert!(
        e.contains("databases.pgyard") && e.contains("admin console"),
        "{e}"
    );
}
