//! `pgyard proxy` as a user runs it, with `pgyard connect --middleware` as its client, in front
//! of a real PostgreSQL 18 primary and standby.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{Options, Primary};

/// The proxy process, killed on drop.
struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn connect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pgyard"))
        .arg("connect")
        .args(args)
        .env("LC_ALL", "C")
        .output()
        .expect("run pgyard connect")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn routes_by_middleware_message_from_the_command_line() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let standby = primary.add_standby("s1").expect("standby").port();
    let port = free_port();
    let backend = format!("host=127.0.0.1,127.0.0.1 port={},{standby}", primary.port());
    let _proxy = Proxy(
        Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["proxy", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--backend", &backend, "--auth", "trust", "--pool-size", "2"])
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgyard proxy"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the proxy never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let via = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=disable");
    let sql = "select pg_is_in_recovery(), inet_server_port()";

    let out = connect(&[&via, "-c", sql]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("f\t{}\n", primary.port()));

    let out = connect(&[&via, "--middleware", "2147483649:standby", "-c", sql]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("t\t{standby}\n"));

    // Straight to the server, the message is refused before it could end the session.
    let direct = format!("{} sslmode=disable", primary.conninfo());
    let out = connect(&[&direct, "--middleware", "2147483649:standby", "-c", sql]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("not consumed"),
        "{}",
        text(&out.stderr)
    );

    let out = connect(&[&via, "--middleware", "standby", "-c", sql]);
    assert_eq!(out.status.code(), Some(2), "a bad flag is a usage error");
}

/// `pgyard proxy --config FILE` with its log in a folder of its own; killed on drop.
struct Configured {
    child: Child,
    dir: std::path::PathBuf,
}

impl Configured {
    /// Writes `toml` to `proxy.toml` in a fresh folder (with an empty `run` folder beside it,
    /// for a Unix socket) and starts the proxy on it; returns once `port` accepts connections.
    fn start(name: &str, toml: &str, port: u16) -> Configured {
        let dir = std::env::temp_dir().join(format!("pgyard-proxy-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("run")).expect("folder");
        std::fs::write(dir.join("proxy.toml"), toml).expect("config file");
        let log = std::fs::File::create(dir.join("proxy.log")).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .arg("proxy")
            .arg("--config")
            .arg(dir.join("proxy.toml"))
            .env("RUST_LOG", "debug")
            .stderr(log)
            .spawn()
            .expect("start pgyard proxy");
        let mut proxy = Configured { child, dir };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Ok(Some(status)) = proxy.child.try_wait() {
                panic!("the proxy exited with {status}:\n{}", proxy.log());
            }
            assert!(
                Instant::now() < deadline,
                "never listened:\n{}",
                proxy.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }

    fn rewrite(&self, toml: &str) {
        std::fs::write(self.dir.join("proxy.toml"), toml).expect("config file");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("proxy.log")).unwrap_or_default()
    }

    fn signal(&self, name: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill")
            .success();
        assert!(ok, "kill -{name}");
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

    /// The exit status, within `bound`.
    fn exit(&mut self, bound: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "still running:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Configured {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn client(port: u16, db: &str) -> Result<pgyard_blocking::Session, pgyard_blocking::Error> {
    pgyard_blocking::connect(&format!(
        "host=127.0.0.1 port={port} user=postgres dbname={db} sslmode=disable"
    ))
}

fn one(s: &mut pgyard_blocking::Session, sql: &str) -> String {
    let rows = s.simple_query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows[0][0].clone().unwrap_or_default()
}

#[test]
fn a_config_file_routes_its_databases_and_a_reload_adds_one() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let standby = primary.add_standby("s1").expect("standby").port();
    let p = primary.port();
    let (a, b) = (free_port(), free_port());
    let toml = |extra: &str| {
        format!(
            "listen = [\"127.0.0.1:{a}\", \"127.0.0.1:{b}\"]\n\
             auth = \"trust\"\npool_size = 2\nquery_wait_timeout = 20\n\
             [databases.app]\nconninfo = \"host=127.0.0.1,127.0.0.1 port={p},{standby} dbname=postgres\"\n\
             {extra}"
        )
    };
    let proxy = Configured::start("config", &toml(""), a);
    proxy.wait_log("pgyard proxy started", 1);

    // `app` is served by its own backend, on the server's database `postgres`, on both ports.
    for port in [a, b] {
        let mut c = client(port, "app").expect("app through the proxy");
        assert_eq!(
            one(
                &mut c,
                "select current_database() || ' ' || inet_server_port()"
            ),
            format!("postgres {p}")
        );
    }
    // Without a top-level backend, a database without an entry gets PgBouncer's answer.
    let err = client(a, "extra")
        .expect_err("no such database")
        .to_string();
    assert!(err.contains("no such database: extra"), "{err}");

    // SIGHUP: the file now has `extra`, on the server's template1.
    let entry =
        format!("[databases.extra]\nconninfo = \"host=127.0.0.1 port={p} dbname=template1\"\n");
    proxy.rewrite(&toml(&entry));
    proxy.signal("HUP");
    proxy.wait_log("configuration reloaded", 1);
    let mut c = client(a, "extra").expect("extra after the reload");
    assert_eq!(one(&mut c, "select current_database()"), "template1");

    // A broken file is logged and changes nothing.
    proxy.rewrite("pool_size = \"many\"\n");
    proxy.signal("HUP");
    proxy.wait_log("reload failed", 1);
    let mut c = client(b, "extra").expect("still served");
    assert_eq!(one(&mut c, "select current_database()"), "template1");
    assert!(proxy.log().contains("pool_size"), "{}", proxy.log());
}

#[test]
fn sigterm_lets_an_open_transaction_commit_then_exits() {
    let primary = Primary::start(Options::default()).expect("primary");
    let port = free_port();
    let toml = format!(
        "listen = \"127.0.0.1:{port}\"\nauth = \"trust\"\nbackend = \"host=127.0.0.1 port={}\"\n\
         shutdown_timeout = 120\n",
        primary.port()
    );
    let mut proxy = Configured::start("sigterm", &toml, port);
    let mut busy = client(port, "postgres").expect("client");
    busy.simple_query("create table t(x int)").expect("ddl");
    busy.simple_query("begin").expect("begin");
    busy.simple_query("insert into t values (1)")
        .expect("insert");
    let mut idle = client(port, "postgres").expect("an idle client");

    proxy.signal("TERM");
    // The idle client is closed between transactions, unasked.
    let fatal = idle.recv_frame().expect("the proxy's word");
    let text = String::from_utf8_lossy(&fatal.body).into_owned();
    assert!(
        fatal.tag == b'E' && text.contains("pooler is shutting down"),
        "{text}"
    );
    // The listening socket closes: new connections are refused.
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "still accepting:\n{}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The busy client still holds its transaction, so the proxy waits for it.
    assert!(
        proxy.child.try_wait().expect("wait").is_none(),
        "exited early"
    );
    busy.simple_query("commit")
        .expect("the transaction commits");
    let status = proxy.exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    let direct = format!("{} sslmode=disable", primary.conninfo());
    let mut check = pgyard_blocking::connect(&direct).expect("direct");
    assert_eq!(one(&mut check, "select count(*) from t"), "1");
    let fatal = busy.recv_frame().expect("closed after its commit");
    assert_eq!(fatal.tag, b'E');
}

/// A proxy started as `name` whose drain bound is ten minutes, and a client of it holding a
/// transaction open: only an immediate stop exits within the tests' bounds.
fn proxy_with_a_transaction_open(
    name: &str,
) -> (Primary, u16, Configured, pgyard_blocking::Session) {
    let primary = Primary::start(Options::default()).expect("primary");
    let port = free_port();
    let toml = format!(
        "listen = \"127.0.0.1:{port}\"\nauth = \"trust\"\nbackend = \"host=127.0.0.1 port={}\"\n\
         shutdown_timeout = 600\n",
        primary.port()
    );
    let proxy = Configured::start(name, &toml, port);
    let mut busy = client(port, "postgres").expect("client");
    busy.simple_query("begin").expect("begin");
    (primary, port, proxy, busy)
}

#[test]
fn sigint_stops_at_once() {
    let (_primary, _port, mut proxy, mut busy) = proxy_with_a_transaction_open("sigint");
    proxy.signal("INT");
    let status = proxy.exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    assert!(busy.simple_query("commit").is_err(), "cut off");
}

#[test]
fn shutdown_on_the_console_stops_at_once_unanswered() {
    let (_primary, port, mut proxy, mut busy) = proxy_with_a_transaction_open("shutdown");
    // As PgBouncer 1.18: no answer, the connection just closes.
    let err = console(port, "postgres", "SHUTDOWN").expect_err("unanswered");
    assert!(
        err.to_string()
            .contains("server closed the connection unexpectedly"),
        "{err}"
    );
    let status = proxy.exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    assert!(
        proxy.log().contains("SHUTDOWN on the console"),
        "{}",
        proxy.log()
    );
    assert!(busy.simple_query("commit").is_err(), "cut off");
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "still listening"
    );
}

/// psql against the admin console of the proxy on `port` as `user`.
fn console(port: u16, user: &str, sql: &str) -> std::io::Result<String> {
    let conninfo =
        format!("host=127.0.0.1 port={port} user={user} password=pw dbname=pgyard sslmode=disable");
    pgyard_testkit::cluster::psql(&conninfo, sql)
}

#[test]
fn the_admin_consoles_reload_rereads_the_config_file() {
    let primary = Primary::start(Options::default()).expect("primary");
    let port = free_port();
    let toml = |size: u32| {
        format!(
            "listen = \"127.0.0.1:{port}\"\nauth = \"trust\"\n\
             backend = \"host=127.0.0.1 port={}\"\npool_size = {size}\n",
            primary.port()
        )
    };
    let proxy = Configured::start("admin-reload", &toml(2), port);
    // Under trust every user may use the console.
    let config = console(port, "postgres", "SHOW CONFIG").expect("SHOW CONFIG");
    assert!(
        config.lines().any(|l| l == "pool_size|2|20|yes"),
        "{config}"
    );

    proxy.rewrite(&toml(5));
    assert_eq!(console(port, "postgres", "RELOAD").expect("RELOAD"), "");
    proxy.wait_log("configuration reloaded", 1);
    let config = console(port, "postgres", "show config").expect("SHOW CONFIG");
    assert!(
        config.lines().any(|l| l == "pool_size|5|20|yes"),
        "{config}"
    );

    // A broken file: RELOAD says why, and the configuration stays.
    proxy.rewrite("pool_size = \"many\"\n");
    let err = console(port, "postgres", "RELOAD").expect_err("a broken file");
    let err = err.to_string();
    assert!(
        err.contains("RELOAD failed") && err.contains("pool_size"),
        "{err}"
    );
    let config = console(port, "postgres", "SHOW CONFIG").expect("SHOW CONFIG");
    assert!(
        config.lines().any(|l| l == "pool_size|5|20|yes"),
        "{config}"
    );
    let mut c = client(port, "postgres").expect("still serving");
    assert_eq!(one(&mut c, "select 1"), "1");
}

#[test]
fn admin_users_from_the_flags_and_no_file_to_reload() {
    let primary = Primary::start(Options::default()).expect("primary");
    let dir = std::env::temp_dir().join(format!("pgyard-proxy-admin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("folder");
    let users = dir.join("users.txt");
    std::fs::write(&users, "\"postgres\" \"pw\"\n\"ops\" \"pw\"\n").expect("auth file");
    let port = free_port();
    let backend = format!("host=127.0.0.1 port={}", primary.port());
    let _proxy = Proxy(
        Command::new(env!("CARGO_BIN_EXE_pgyard"))
            .args(["proxy", "--listen", &format!("127.0.0.1:{port}")])
            .args(["--backend", &backend, "--auth-file"])
            .arg(&users)
            .args(["--admin-user", "ops", "--admin-user", "root"])
            .stderr(Stdio::null())
            .spawn()
            .expect("start pgyard proxy"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the proxy never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let config = console(port, "ops", "SHOW CONFIG").expect("an admin user");
    assert!(config.contains("admin_users|ops, root||yes"), "{config}");
    let err = console(port, "postgres", "SHOW POOLS").expect_err("not an admin user");
    assert!(err.to_string().contains("not allowed"), "{err}");
    let err = console(port, "ops", "RELOAD").expect_err("started with flags");
    assert!(err.to_string().contains("nothing to re-read"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_unix_socket_beside_the_config_file_serves_and_goes_on_sigterm() {
    let primary = Primary::start(Options::default()).expect("primary");
    let port = free_port();
    let toml = format!(
        "listen = \"127.0.0.1:{port}\"\nunix_socket_dir = \"run\"\nauth = \"trust\"\n\
         backend = \"host=127.0.0.1 port={}\"\n",
        primary.port()
    );
    // `run` is taken from beside the file; the folder exists (as PgBouncer's must), the
    // socket file in it is the proxy's to make.
    let mut proxy = Configured::start("unix", &toml, port);
    let socket = proxy.dir.join("run").join(format!(".s.PGSQL.{port}"));
    assert!(socket.exists(), "{}", proxy.log());
    let via = format!(
        "host={} port={port} user=postgres dbname=postgres",
        proxy.dir.join("run").display()
    );
    let out = connect(&[&via, "-c", "select inet_server_port()"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), format!("{}\n", primary.port()));
    proxy.signal("TERM");
    let status = proxy.exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{}", proxy.log());
    assert!(!socket.exists(), "the socket file goes with the proxy");
}
