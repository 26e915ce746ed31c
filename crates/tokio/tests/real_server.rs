//! pgyard-tokio against real PostgreSQL 18 servers started by pgyard-testkit, with psql
//! (libpq 18) and pgyard-blocking as the oracles for every choice and every error text.

use pgyard_tokio::SessionInfo;
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{self, Auth, Options, Primary};
use pgyard_tokio::{connect, connect_with, ConnectOptions, Error, Session, Strategy};

/// What psql printed: `Ok(stdout)` or `Err(libpq's message without "psql: error: ")`.
fn psql(conninfo: &str, sql: &str) -> Result<String, String> {
    cluster::psql(conninfo, sql).map_err(|e| {
        let text = e.to_string();
        match text.split_once("psql: error: ") {
            Some((_, msg)) => msg.trim_end().to_owned(),
            None => text,
        }
    })
}

/// What pgyard-tokio does with the same conninfo: the server port, or libpq's message.
async fn tokio_port(conninfo: &str) -> Result<String, String> {
    let opts = ConnectOptions::default().seed(7);
    let mut s = connect_with(conninfo, &opts)
        .await
        .map_err(|e| e.to_string().trim_end().to_owned())?;
    port_of(&mut s).await.map_err(|e| e.to_string())
}

/// The same through the blocking adapter (on a blocking-pool thread).
async fn blocking_port(conninfo: &str) -> Result<String, String> {
    let ci = conninfo.to_owned();
    tokio::task::spawn_blocking(move || {
        let opts = pgyard_blocking::ConnectOptions::default().seed(7);
        let mut s = pgyard_blocking::connect_with(&ci, &opts)
            .map_err(|e| e.to_string().trim_end().to_owned())?;
        let rows = s
            .simple_query("select inet_server_port()")
            .map_err(|e| e.to_string())?;
        Ok(rows[0][0].clone().unwrap_or_default())
    })
    .await
    .unwrap()
}

async fn port_of(s: &mut Session) -> Result<String, Error> {
    let rows = s.simple_query("select inet_server_port()").await?;
    Ok(rows[0][0].clone().unwrap_or_default())
}

fn hosts(ports: &[u16], extra: &str) -> String {
    let h: Vec<&str> = ports.iter().map(|_| "127.0.0.1").collect();
    let p: Vec<String> = ports.iter().map(u16::to_string).collect();
    format!(
        "host={} port={} user=postgres dbname=postgres {extra}",
        h.join(","),
        p.join(",")
    )
}

/// A port nothing listens on.
fn refused_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_choices_timeouts_race_and_reset() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let s1 = primary.add_standby("s1").expect("standby s1").port();
    let p = primary.port();

    // A plain session: rows as text, server errors, parameters, backend key, cancel.
    let mut s = connect(&primary.conninfo()).await.expect("tcp connect");
    assert_eq!(s.port(), Some(p));
    assert_eq!(
        s.simple_query("select 1, null::text, 'a b' union all select 2, 'x', ''")
            .await
            .unwrap(),
        vec![
            vec![Some("1".into()), None, Some("a b".into())],
            vec![Some("2".into()), Some("x".into()), Some(String::new())],
        ]
    );
    assert!(s.backend_key().is_some());
    assert!(s
        .parameter("server_version")
        .is_some_and(|v| v.starts_with("18")));
    let err = s.simple_query("select 1/0").await.unwrap_err();
    assert_eq!(err.to_string(), "ERROR:  division by zero\n");
    assert_eq!(
        s.simple_query("select 3").await.unwrap(),
        vec![vec![Some("3".into())]]
    );
    // A cancel with nothing running is harmless; a running query is cancelled from
    // another task through the session's cancel token.
    s.cancel().await.expect("cancel");
    let token = s.cancel_token().unwrap();
    let pid = s.backend_key().unwrap().pid;
    let sleeper = tokio::spawn(async move {
        let r = s.simple_query("select pg_sleep(30)").await;
        (s, r)
    });
    let mut admin = connect(&primary.conninfo()).await.unwrap();
    let active =
        format!("select count(*) from pg_stat_activity where pid = {pid} and state = 'active'");
    for _ in 0..250 {
        if admin.simple_query(&active).await.unwrap()[0][0].as_deref() == Some("1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    token.cancel().await.expect("cancel a running query");
    let (mut s, r) = tokio::time::timeout(Duration::from_secs(10), sleeper)
        .await
        .expect("the cancelled query returns")
        .unwrap();
    let err = r.unwrap_err().to_string();
    assert!(
        err.starts_with("ERROR:  canceling statement due to user request"),
        "{err}"
    );
    assert_eq!(port_of(&mut s).await.unwrap(), p.to_string());
    s.close().await;
    admin.close().await;

    // A Unix-socket session.
    let mut u = connect(&primary.socket_conninfo()).await.expect("unix");
    assert!(matches!(u.target(), pgyard_tokio::OpenTarget::Unix(_)));
    assert_eq!(port_of(&mut u).await.unwrap(), "");
    drop(u);

    // target_session_attrs read-write and standby land where psql lands, both host orders.
    for tsa in ["read-write", "standby", "prefer-standby", "read-only"] {
        for ports in [[p, s1], [s1, p]] {
            let ci = hosts(
                &ports,
                &format!("target_session_attrs={tsa} load_balance_hosts=disable"),
            );
            let ours = tokio_port(&ci).await;
            assert_eq!(ours, psql(&ci, "select inet_server_port()"), "{ci}");
            assert_eq!(ours, blocking_port(&ci).await, "{ci}");
        }
    }

    // The race strategy reaches the one server that qualifies.
    let refused = refused_port();
    let ci = hosts(&[refused, s1, p], "target_session_attrs=read-write");
    let opts = ConnectOptions::default().seed(3).strategy(Strategy::Race);
    let mut s = connect_with(&ci, &opts).await.expect("race");
    assert_eq!(s.port(), Some(p));
    assert_eq!(port_of(&mut s).await.unwrap(), p.to_string());
    drop(s);
    let ci = hosts(&[s1, p], "target_session_attrs=standby");
    let s = connect_with(&ci, &opts).await.expect("race standby");
    assert_eq!(s.port(), Some(s1));
    drop(s);

    // A refused port, then the primary.
    let ci = hosts(&[refused, p], "");
    let mut s = connect(&ci).await.expect("refused then primary");
    assert_eq!(s.port(), Some(p));
    assert_eq!(s.attempts().len(), 2, "{:?}", s.attempts());
    assert_eq!(s.attempts()[0].outcome, "Connection refused");
    assert_eq!(port_of(&mut s).await.unwrap(), p.to_string());
    drop(s);

    // A listener that accepts and never answers, connect_timeout=1, then the primary.
    let hung = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((c, _)) = hung.accept().await {
            held.push(c);
        }
    });
    let ci = hosts(&[hung_port, p], "connect_timeout=1");
    let t0 = Instant::now();
    let mut s = connect(&ci).await.expect("hung then primary");
    let took = t0.elapsed();
    assert_eq!(port_of(&mut s).await.unwrap(), p.to_string());
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    assert_eq!(s.attempts().len(), 2, "{:?}", s.attempts());
    drop(s);

    // Everything fails: the message is libpq's, word for word (and the blocking adapter's).
    let ci = hosts(&[refused, hung_port], "connect_timeout=1");
    let ours = tokio_port(&ci).await.unwrap_err();
    assert_eq!(ours, psql(&ci, "select 1").unwrap_err());
    assert_eq!(ours, blocking_port(&ci).await.unwrap_err());
    holder.abort();

    // The primary stops, s1 is promoted: reset() with read-write lands on s1.
    let ci = hosts(&[p, s1], "target_session_attrs=read-write");
    let mut s = connect(&ci).await.expect("read-write");
    assert_eq!(s.port(), Some(p));
    primary.stop().expect("stop primary");
    primary
        .standby_mut("s1")
        .unwrap()
        .promote()
        .expect("promote s1");
    s.reset().await.expect("reset after promotion");
    assert_eq!(s.port(), Some(s1));
    assert_eq!(port_of(&mut s).await.unwrap(), s1.to_string());
    assert_eq!(
        s.simple_query("select pg_is_in_recovery()").await.unwrap(),
        vec![vec![Some("f".into())]]
    );
    assert_eq!(
        tokio_port(&ci).await,
        psql(&ci, "select inet_server_port()")
    );
    s.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_wrong_password_and_tls() {
    let dir = tempfile::Builder::new()
        .prefix("pgyard-tokio-tls-")
        .tempdir()
        .unwrap();
    let (cert, key) = write_server_cert(dir.path());
    let primary = Primary::start(
        Options::default()
            .auth(Auth::ScramSha256)
            .conf("ssl = on")
            .conf(format!("ssl_cert_file = '{cert}'"))
            .conf(format!("ssl_key_file = '{key}'")),
    )
    .expect("primary with TLS");
    let port = primary.port();
    let password = primary.password().unwrap().to_owned();

    // SCRAM over plain TCP.
    let mut s = connect(&format!("{} sslmode=disable", primary.conninfo()))
        .await
        .expect("scram");
    assert!(!s.tls());
    assert_eq!(port_of(&mut s).await.unwrap(), port.to_string());
    drop(s);

    // The wrong-password text is psql's and the blocking adapter's.
    let ci = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres password=nope");
    let ours = tokio_port(&ci).await.unwrap_err();
    assert!(ours.contains("password authentication failed"), "{ours}");
    assert_eq!(ours, psql(&ci, "select 1").unwrap_err());
    assert_eq!(ours, blocking_port(&ci).await.unwrap_err());

    // TLS through tokio-rustls: success exactly when psql succeeds, same texts as blocking.
    let base = |host: &str| {
        format!("host={host} port={port} user=postgres dbname=postgres password={password}")
    };
    let cases = [
        (
            base("127.0.0.1") + " sslmode=require channel_binding=require",
            true,
        ),
        (
            base("localhost") + &format!(" sslmode=verify-full sslrootcert={cert}"),
            true,
        ),
        (
            base("127.0.0.1") + &format!(" sslmode=verify-full sslrootcert={cert}"),
            false,
        ),
        (
            base("127.0.0.1") + " sslmode=require sslnegotiation=direct",
            true,
        ),
    ];
    for (ci, expect_ok) in cases {
        let ours = tokio_port(&ci).await;
        let theirs = psql(&ci, "select inet_server_port()");
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{ci}\nours: {ours:?}\npsql: {theirs:?}"
        );
        assert_eq!(ours.is_ok(), expect_ok, "{ci}: {ours:?}");
        assert_eq!(ours, blocking_port(&ci).await, "{ci}");
    }
    let mut s = connect(&(base("127.0.0.1") + " sslmode=require"))
        .await
        .unwrap();
    assert!(s.tls());
    assert_eq!(port_of(&mut s).await.unwrap(), port.to_string());
    s.close().await;
}

/// Writes a self-signed certificate for `localhost` and its key where the server user can
/// read them (key mode 0600, owned by that user).
fn write_server_cert(dir: &std::path::Path) -> (String, String) {
    use std::os::unix::fs::{chown, MetadataExt, PermissionsExt};
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).expect("rcgen");
    let cert = dir.join("server.crt");
    let key = dir.join("server.key");
    std::fs::write(&cert, ck.cert.pem()).unwrap();
    std::fs::write(&key, ck.key_pair.serialize_pem()).unwrap();
    let user = cluster::ensure_server_user().expect("server user");
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&cert, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let me = std::fs::metadata("/proc/self")
        .map(|m| m.uid())
        .unwrap_or(0);
    if user.uid != me {
        chown(&key, Some(user.uid), Some(user.gid)).unwrap();
        chown(&cert, Some(user.uid), Some(user.gid)).unwrap();
    }
    (
        cert.to_string_lossy().into_owned(),
        key.to_string_lossy().into_owned(),
    )
}
