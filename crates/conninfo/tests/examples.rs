//! The crate's example, `tokio_postgres_config`, kept honest: the `Config` it builds from a
//! service file and a password file in a temporary folder carries every value libpq would
//! use, tokio-postgres connects through it to a real PostgreSQL 18 server
//! (`pgyard_testkit::cluster`), and what tokio-postgres cannot hold is refused or reported.

// The example's `main` is not called here; the tests drive `config_from`.
#[allow(dead_code)]
#[path = "../examples/tokio_postgres_config.rs"]
mod tokio_postgres_config;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use pgyard_conninfo::resolve::Environment;
use pgyard_testkit::cluster::{Auth, Options, Primary};
use tokio_postgres::config::{Host, LoadBalanceHosts, SslMode, TargetSessionAttrs};
use tokio_postgres::NoTls;
use tokio_postgres_config::config_from;

/// A port that was free a moment ago, so connecting to it is refused.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address").port()
}

fn write(path: &Path, text: &str, mode: u32) {
    std::fs::write(path, text).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// An environment that knows nothing but `vars`, with home `dir`.
fn env_in(dir: &Path, vars: &[(&str, String)]) -> Environment {
    let mut env = Environment::new()
        .with_var("HOME", dir.to_str().expect("UTF-8 path"))
        .with_os_user("nobody");
    for (name, value) in vars {
        env = env.with_var(*name, value.as_str());
    }
    env
}

#[test]
fn service_and_password_files_reach_tokio_postgres() {
    let primary = Primary::start(Options::default().auth(Auth::ScramSha256)).expect("primary");
    let password = primary.password().expect("a SCRAM server has a password");
    let (port, refused) = (primary.port(), refused_port());
    let dir = tempfile::tempdir().expect("temporary folder");
    let pgpass = dir.path().join("pgpass");
    // The service names the password file; the password file names both hosts.
    let service = format!(
        "[shop]\nhost=127.0.0.1,127.0.0.1\nport={refused},{port}\ndbname=postgres\n\
         user=postgres\napplication_name=billing\nconnect_timeout=7\nkeepalives_idle=30\n\
         target_session_attrs=read-write\nsslmode=disable\npassfile={}\n",
        pgpass.display()
    );
    write(&dir.path().join("pg_service.conf"), &service, 0o644);
    let lines = format!(
        "127.0.0.1:{refused}:*:postgres:{password}\n127.0.0.1:{port}:*:postgres:{password}\n"
    );
    write(&pgpass, &lines, 0o600);
    let env = env_in(
        dir.path(),
        &[(
            "PGSERVICEFILE",
            format!("{}/pg_service.conf", dir.path().display()),
        )],
    );

    let mapped =
        config_from("service=shop options='-c statement_timeout=5s'", &env).expect("a config");
    assert!(mapped.left_out.is_empty(), "{:?}", mapped.left_out);
    let c = &mapped.config;
    let local = Host::Tcp("127.0.0.1".into());
    assert_eq!(c.get_hosts(), [local.clone(), local]);
    assert_eq!(c.get_ports(), [refused, port]);
    assert_eq!(c.get_dbname(), Some("postgres"));
    assert_eq!(c.get_user(), Some("postgres"));
    assert_eq!(c.get_password(), Some(password.as_bytes()));
    assert_eq!(c.get_options(), Some("-c statement_timeout=5s"));
    assert_eq!(c.get_application_name(), Some("billing"));
    assert_eq!(c.get_connect_timeout(), Some(&Duration::from_secs(7)));
    assert_eq!(c.get_keepalives_idle(), Duration::from_secs(30));
    assert_eq!(c.get_target_session_attrs(), TargetSessionAttrs::ReadWrite);
    assert_eq!(c.get_ssl_mode(), SslMode::Disable);
    assert_eq!(c.get_load_balance_hosts(), LoadBalanceHosts::Disable);

    // tokio-postgres walks past the refused port and logs in with the file's password.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (name, timeout) = runtime.block_on(async {
        let (client, connection) = c.connect(NoTls).await.expect("tokio-postgres connects");
        tokio::spawn(connection);
        let sql = "select current_setting('application_name'), \
                   current_setting('statement_timeout')";
        let row = client.query_one(sql, &[]).await.expect("query");
        (row.get::<_, String>(0), row.get::<_, String>(1))
    });
    assert_eq!((name.as_str(), timeout.as_str()), ("billing", "5s"));
}

#[test]
fn what_tokio_postgres_cannot_hold_is_refused_or_reported() {
    let dir = tempfile::tempdir().expect("temporary folder");
    // ~/.pgpass, found through HOME, knows a password for db2 only.
    write(&dir.path().join(".pgpass"), "db2:*:*:*:only-db2\n", 0o600);
    let env = env_in(dir.path(), &[("PGSSLROOTCERT", "/etc/ca.pem".into())]);

    let err = |conninfo: &str| match config_from(conninfo, &env) {
        Ok(_) => panic!("{conninfo}: mapped"),
        Err(e) => e.to_string(),
    };
    assert_eq!(
        err("host=db1 target_session_attrs=primary"),
        "tokio-postgres has no target_session_attrs=primary"
    );
    assert_eq!(
        err("host=db1 sslmode=allow"),
        "tokio-postgres has no sslmode=allow"
    );
    assert!(err("host=db1,db2").contains("different passwords"));
    assert!(err("host=a,b hostaddr=10.0.0.1,").contains("a hostaddr for every host"));
    // libpq's own errors keep libpq's words.
    assert_eq!(
        err("host=db1 port=1,2"),
        "could not match 2 port numbers to 1 hosts"
    );

    let mapped =
        config_from("host=db2 hostaddr=10.0.0.2 sslmode=verify-full", &env).expect("mapped");
    assert_eq!(
        mapped.config.get_hostaddrs(),
        ["10.0.0.2".parse::<std::net::IpAddr>().unwrap()]
    );
    assert_eq!(mapped.config.get_password(), Some(&b"only-db2"[..]));
    // The verification is the TLS connector's; the root certificate it must use is reported.
    assert_eq!(mapped.config.get_ssl_mode(), SslMode::Require);
    assert_eq!(mapped.left_out, ["sslrootcert"]);
}
