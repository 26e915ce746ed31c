//! pgyard-tokio against real PostgreSQL 18 servers started by pgyard-testkit, with psql
//! (libpq 18) as the oracle for every choice and every error text.

use pgyard_tokio::SessionInfo;
use std::time::{Duration, Instant};

use pgyard_testkit::cluster::{Options, Primary};
use pgyard_testkit::fixtures::{
    assert_same_as_psql, fail_over, mixed_rows, psql_outcome as psql, tls_cases, tls_primary,
    MIXED_ROWS_SQL,
};
use pgyard_tokio::{connect, connect_with, ConnectOptions, Error, Session, Strategy};

/// What pgyard-tokio does with the same conninfo: the server port, or libpq's message.
async fn tokio_port(conninfo: &str) -> Result<String, String> {
    let opts = ConnectOptions::default().seed(7);
    let mut s = connect_with(conninfo, &opts)
        .await
        .map_err(|e| e.to_string().trim_end().to_owned())?;
    port_of(&mut s).await.map_err(|e| e.to_string())
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
    let rows = s.simple_query(MIXED_ROWS_SQL).await;
    assert_eq!(rows.unwrap(), mixed_rows());
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

    // Everything fails: the message is libpq's, word for word.
    let ci = hosts(&[refused, hung_port], "connect_timeout=1");
    let ours = tokio_port(&ci).await.unwrap_err();
    assert_eq!(ours, psql(&ci, "select 1").unwrap_err());
    holder.abort();

    // The primary stops, s1 is promoted: reset() with read-write lands on s1.
    let ci = hosts(&[p, s1], "target_session_attrs=read-write");
    let mut s = connect(&ci).await.expect("read-write");
    assert_eq!(s.port(), Some(p));
    fail_over(&mut primary, "s1").expect("promote s1 after stopping the primary");
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
    let (primary, cert) = tls_primary().expect("primary with TLS");
    let port = primary.port();

    // SCRAM over plain TCP, then the wrong password: psql's text.
    let mut s = connect(&format!("{} sslmode=disable", primary.conninfo()))
        .await
        .expect("scram");
    assert!(!s.tls());
    assert_eq!(port_of(&mut s).await.unwrap(), port.to_string());
    drop(s);
    let ci = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres password=nope");
    let ours = tokio_port(&ci).await.unwrap_err();
    assert!(ours.contains("password authentication failed"), "{ours}");
    assert_eq!(ours, psql(&ci, "select 1").unwrap_err());

    // TLS through tokio-rustls: success exactly when psql succeeds, with psql's texts.
    for (ci, expect_ok) in tls_cases(&primary, &cert) {
        let ours = tokio_port(&ci).await;
        assert_eq!(ours.is_ok(), expect_ok, "{ci}: {ours:?}");
        assert_same_as_psql(&ci, "select inet_server_port()", &ours);
    }
    let mut s = connect(&format!("{} sslmode=require", primary.conninfo()))
        .await
        .unwrap();
    assert!(s.tls());
    assert_eq!(port_of(&mut s).await.unwrap(), port.to_string());
}
