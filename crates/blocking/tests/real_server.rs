//! pgyard-blocking against real PostgreSQL 18 servers started by pgyard-testkit, with psql
//! (libpq 18) as the oracle for every choice and every error text.

use pgyard_blocking::SessionInfo;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pgyard_blocking::{connect, connect_with, ConnectOptions, Error, Session};
use pgyard_testkit::cluster::{Auth, Options, Primary};
use pgyard_testkit::fixtures::{
    assert_same_as_psql, fail_over, mixed_rows, pki_tls_options, psql_outcome as psql, tls_cases,
    tls_primary, write_pki, MIXED_ROWS_SQL,
};
use pgyard_wire::error_fields::SqlState;

const DIVISION_BY_ZERO: SqlState = SqlState::from_array(*b"22012");

/// What pgyard does with the same conninfo: the server port, or libpq's message.
fn pgyard_port(conninfo: &str) -> Result<String, String> {
    let opts = ConnectOptions::default().seed(7);
    let mut s = connect_with(conninfo, &opts).map_err(|e| e.to_string().trim_end().to_owned())?;
    port_of(&mut s).map_err(|e| e.to_string())
}

fn port_of(s: &mut Session) -> Result<String, Error> {
    let rows = s.simple_query("select inet_server_port()")?;
    Ok(rows[0][0].clone().unwrap_or_default())
}

fn three_hosts(ports: [u16; 3], extra: &str) -> String {
    format!(
        "host=127.0.0.1,127.0.0.1,127.0.0.1 port={},{},{} user=postgres dbname=postgres {extra}",
        ports[0], ports[1], ports[2]
    )
}

#[test]
fn target_session_attrs_refused_hung_and_reset_after_promotion() {
    let mut primary = Primary::start(Options::default()).expect("primary");
    let s1 = primary.add_standby("s1").expect("standby s1").port();
    let s2 = primary.add_standby("s2").expect("standby s2").port();
    let p = primary.port();

    // Plain TCP and a Unix socket session, and simple_query's text rows.
    let mut s = connect(&primary.conninfo()).expect("tcp connect");
    assert_eq!(s.port(), Some(p));
    assert_eq!(s.simple_query(MIXED_ROWS_SQL).unwrap(), mixed_rows());
    assert!(s.backend_key().is_some());
    assert!(s
        .parameter("server_version")
        .is_some_and(|v| v.starts_with("18")));
    // A server error leaves the session usable.
    let err = s.simple_query("select 1/0").unwrap_err();
    assert_eq!(err.to_string(), "ERROR:  division by zero\n");
    assert_eq!(
        err.kind(),
        pgyard_blocking::ErrorKind::Refused(DIVISION_BY_ZERO)
    );
    assert_eq!(
        s.simple_query("select 3").unwrap()[0][0].as_deref(),
        Some("3")
    );
    // A cancel with nothing running is accepted and harmless.
    s.cancel().expect("cancel");
    drop(s);
    let mut u = connect(&primary.socket_conninfo()).expect("unix connect");
    assert!(matches!(u.target(), pgyard_blocking::OpenTarget::Unix(_)));
    assert_eq!(port_of(&mut u).unwrap(), "");
    drop(u);

    // (a) Every target_session_attrs value, in two host orders: pgyard lands where psql does.
    let orders = [[p, s1, s2], [s1, p, s2], [s2, s1, p]];
    for tsa in [
        "any",
        "read-write",
        "read-only",
        "primary",
        "standby",
        "prefer-standby",
    ] {
        for ports in orders {
            let ci = three_hosts(
                ports,
                &format!("target_session_attrs={tsa} load_balance_hosts=disable"),
            );
            let ours = pgyard_port(&ci);
            let theirs = psql(&ci, "select inet_server_port()");
            assert_eq!(ours, theirs, "{ci}");
        }
    }
    // With load_balance_hosts=random only one server qualifies for these, whatever the order.
    for tsa in ["read-write", "primary"] {
        let ci = three_hosts(
            [s1, s2, p],
            &format!("target_session_attrs={tsa} load_balance_hosts=random"),
        );
        assert_eq!(
            pgyard_port(&ci),
            psql(&ci, "select inet_server_port()"),
            "{ci}"
        );
        assert_eq!(pgyard_port(&ci), Ok(p.to_string()));
    }

    // The race strategy reaches the one server that qualifies, too.
    let ci = three_hosts([s1, s2, p], "target_session_attrs=read-write");
    let opts = ConnectOptions::default()
        .seed(3)
        .strategy(pgyard_blocking::Strategy::Race);
    let s = connect_with(&ci, &opts).expect("race");
    assert_eq!(s.port(), Some(p));
    drop(s);

    // (e) A refused port, then the primary.
    let refused = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let ci = format!("host=127.0.0.1,127.0.0.1 port={refused},{p} user=postgres dbname=postgres");
    let mut s = connect(&ci).expect("refused then primary");
    assert_eq!(s.port(), Some(p));
    assert_eq!(port_of(&mut s).unwrap(), p.to_string());
    drop(s);

    // A listener that accepts and never answers, with connect_timeout=1, then the primary.
    let hung = TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_port = hung.local_addr().unwrap().port();
    let held = Arc::new(Mutex::new(Vec::new()));
    {
        let held = held.clone();
        thread::spawn(move || {
            for c in hung.incoming().flatten() {
                held.lock().unwrap().push(c);
            }
        });
    }
    let ci = format!(
        "host=127.0.0.1,127.0.0.1 port={hung_port},{p} user=postgres dbname=postgres connect_timeout=1"
    );
    let t0 = Instant::now();
    let mut s = connect(&ci).expect("hung then primary");
    let took = t0.elapsed();
    assert_eq!(port_of(&mut s).unwrap(), p.to_string());
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    assert_eq!(s.attempts().len(), 2, "{:?}", s.attempts());
    drop(s);

    // Everything fails: the message is libpq's, word for word.
    let ci = format!(
        "host=127.0.0.1,127.0.0.1 port={refused},{hung_port} user=postgres dbname=postgres connect_timeout=1"
    );
    let ours = pgyard_port(&ci).unwrap_err();
    let theirs = psql(&ci, "select 1").unwrap_err();
    assert_eq!(ours, theirs);

    // (b) The primary stops, s1 is promoted: reset() with read-write lands on s1.
    let ci = three_hosts([p, s1, s2], "target_session_attrs=read-write");
    let mut s = connect(&ci).expect("read-write");
    assert_eq!(s.port(), Some(p));
    fail_over(&mut primary, "s1").expect("promote s1 after stopping the primary");
    s.reset().expect("reset after promotion");
    assert_eq!(s.port(), Some(s1));
    assert_eq!(port_of(&mut s).unwrap(), s1.to_string());
    assert_eq!(
        s.simple_query("select pg_is_in_recovery()").unwrap(),
        vec![vec![Some("f".into())]]
    );
    assert_eq!(pgyard_port(&ci), psql(&ci, "select inet_server_port()"));
    drop(s);
    drop(held);
}

#[test]
fn md5_login_and_wrong_password() {
    let primary = Primary::start(Options::default().auth(Auth::Md5)).expect("primary");
    let mut s = connect(&primary.conninfo()).expect("md5 login");
    assert_eq!(port_of(&mut s).unwrap(), primary.port().to_string());
    drop(s);
    let ci = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres password=wrong",
        primary.port()
    );
    let ours = pgyard_port(&ci).unwrap_err();
    assert_eq!(ours, psql(&ci, "select 1").unwrap_err());
    assert!(ours.contains("password authentication failed"), "{ours}");
}

#[test]
fn scram_and_tls_modes_match_psql() {
    let (primary, cert) = tls_primary().expect("primary with TLS");
    let port = primary.port();

    // (c) SCRAM login over plain TCP, and the wrong-password text.
    let mut s = connect(&format!("{} sslmode=disable", primary.conninfo())).expect("scram");
    assert!(!s.tls());
    assert_eq!(port_of(&mut s).unwrap(), port.to_string());
    drop(s);
    let ci = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres password=nope");
    let ours = pgyard_port(&ci).unwrap_err();
    assert_eq!(ours, psql(&ci, "select 1").unwrap_err());

    // (d) TLS modes: pgyard succeeds exactly when psql does, with psql's texts.
    for (ci, expect_ok) in tls_cases(&primary, &cert) {
        let ours = pgyard_port(&ci);
        assert_eq!(ours.is_ok(), expect_ok, "{ci}: {ours:?}");
        assert_same_as_psql(&ci, "select inet_server_port()", &ours);
    }
    let base = primary.conninfo();
    assert!(connect(&format!("{base} sslmode=require")).unwrap().tls());
}

/// Client-certificate authentication (`cert` in pg_hba.conf): with `sslcert`/`sslkey` the
/// login succeeds, without them it fails, exactly as for psql.
#[test]
fn client_certificates_authenticate_as_psql_does() {
    let dir = tempfile::Builder::new()
        .prefix("pgyard-pki-")
        .tempdir()
        .unwrap();
    let pki = write_pki(dir.path()).expect("certificates written");
    let primary =
        Primary::start(pki_tls_options(&pki).hba("hostssl all certuser 127.0.0.1/32 cert"))
            .expect("primary with client-certificate auth");
    primary
        .psql("create role certuser login")
        .expect("role created");
    let base = format!(
        "host=localhost hostaddr=127.0.0.1 port={} user=certuser dbname=postgres \
         sslmode=verify-full sslrootcert={}",
        primary.port(),
        pki.ca
    );
    let with_cert = format!(
        "{base} sslcert={} sslkey={}",
        pki.client_cert, pki.client_key
    );
    let ours = pgyard_port(&with_cert);
    let theirs = psql(&with_cert, "select inet_server_port()");
    assert!(ours.is_ok(), "{ours:?}");
    assert_eq!(ours, theirs);
    let s = connect(&with_cert).expect("certificate login");
    assert!(s.tls());

    // Without a client certificate the server refuses the login, for both.
    let missing = format!("{base} sslcert=/nonexistent/client.crt sslkey=/nonexistent/client.key");
    let ours = pgyard_port(&missing);
    let theirs = psql(&missing, "select 1");
    assert!(ours.is_err(), "{ours:?}");
    assert!(theirs.is_err(), "{theirs:?}");
}

/// Raw frames reach a real server unchanged, and the proposal's middleware message shows why a
/// middleware must consume every `M`: PostgreSQL 18 rejects the unknown type byte.
#[test]
fn raw_frames_and_a_middleware_message_against_a_real_server() {
    let primary = Primary::start(Options::default()).expect("primary");
    let mut s = connect(&format!("{} sslmode=disable", primary.conninfo())).expect("session");

    let mut buf = bytes::BytesMut::new();
    pgyard_wire::frontend::encode_query(b"select 41 + 1", &mut buf).expect("encodes");
    s.send_frame(&buf).expect("sent");
    let mut tags = Vec::new();
    let mut value = None;
    loop {
        let f = s.recv_frame().expect("a frame");
        tags.push(f.tag);
        if f.tag == b'D' {
            let row = pgyard_wire::backend::DataRow::decode(&f.body).expect("a DataRow");
            value = row.fields().next().flatten().map(<[u8]>::to_vec);
        }
        if f.tag == b'Z' {
            break;
        }
    }
    assert_eq!(tags, b"TDCZ");
    assert_eq!(value.as_deref(), Some(&b"42"[..]));

    // Asked for, middleware messages are refused by a server reached directly: it answers
    // NegotiateProtocolVersion naming the option, the connect goes on, and the session will
    // not send one (it would end the session).
    let options = ConnectOptions::default().middleware(true);
    let conninfo = format!("{} sslmode=disable", primary.conninfo());
    let mut asked = connect_with(&conninfo, &options).expect("connects despite the refusal");
    assert_eq!(
        asked.established().refused_options,
        ["_pq_.middleware_messages"]
    );
    assert!(!asked.middleware_consumed());
    let refused = asked.send_middleware(1 << 40, b"x").expect_err("refused");
    assert_eq!(
        refused.kind(),
        pgyard_blocking::ErrorKind::Configuration,
        "{refused}"
    );
    assert!(refused.to_string().contains("not consumed"), "{refused}");
    assert_eq!(
        asked.simple_query("select 1").expect("still usable")[0][0].as_deref(),
        Some("1")
    );

    s.send_middleware_unchecked(1 << 40, b"route: replica")
        .expect("sent");
    let f = s.recv_frame().expect("the server answers");
    assert_eq!(f.tag, b'E', "a real server refuses the unknown type byte");
    let fields = pgyard_wire::error_fields::ErrorFields::decode(&f.body).expect("error fields");
    assert_eq!(fields.code(), Some(&b"08P01"[..]), "{fields}");
}

/// `copy_out` streams every CopyData of a `COPY … TO STDOUT` to the sink, reports the server's
/// error in its words, and after a sink error (the query cancelled) the session is usable.
#[test]
fn copy_out_streams_rows_and_reports_errors() {
    let primary = Primary::start(Options::default()).expect("primary");
    let mut s = connect(&format!("{} sslmode=disable", primary.conninfo())).expect("session");
    let mut got = Vec::new();
    s.copy_out(
        "copy (select g, 'r' || g from generate_series(1, 3) g) to stdout",
        |d| {
            got.extend_from_slice(d);
            Ok(())
        },
    )
    .expect("copied");
    assert_eq!(String::from_utf8_lossy(&got), "1\tr1\n2\tr2\n3\tr3\n");

    let e = s
        .copy_out("copy no_such_table to stdout", |_| Ok(()))
        .expect_err("no table");
    assert!(
        e.to_string()
            .contains("relation \"no_such_table\" does not exist"),
        "{e}"
    );

    let mut calls = 0;
    let e = s
        .copy_out(
            "copy (select g from generate_series(1, 5000000) g) to stdout",
            |_| {
                calls += 1;
                Err(Error::Config("sink full".to_owned()))
            },
        )
        .expect_err("the sink's error");
    assert_eq!(calls, 1);
    assert!(e.to_string().contains("sink full"), "{e}");
    assert_eq!(
        s.simple_query("select 1").expect("still usable")[0][0].as_deref(),
        Some("1")
    );
}
