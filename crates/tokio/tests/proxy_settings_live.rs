//! A client's startup settings through `pgyard proxy` in transaction mode, against a real
//! PostgreSQL 18 (session 33): shown as the server spells them, as a direct login shows them;
//! set once, not before every transaction; refused at login when the server refuses them;
//! and a value with a backslash set intact on a server another client left with
//! `standard_conforming_strings = off`. A session-level `SET SESSION AUTHORIZATION` (session
//! 34) stays with the client that ran it. A startup `application_name` of any bytes is shown
//! as a direct login shows it (session 35).

use std::net::SocketAddr;

use bytes::BytesMut;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_wire::error_fields::ErrorFields;
use pgyard_wire::frontend;
use tokio::io::AsyncWriteExt;

mod common;
#[path = "common/raw.rs"]
mod raw;

use raw::{loopback, status, Raw};

/// A transaction-mode proxy with one server connection in front of the server on `port`.
async fn proxy(port: u16) -> SocketAddr {
    common::transaction_proxy(port, 1, 3, |_| {}).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_settings_are_spelt_as_the_server_spells_them_set_once_or_refused() {
    let primary =
        Primary::start(Options::default().conf("log_statement = 'all'")).expect("primary");
    let p = primary.port();
    let addr = proxy(p).await;
    let asked = [
        ("DateStyle", "ISO"),
        ("TimeZone", "europe/paris"),
        ("client_encoding", "utf8"),
    ];

    // What a direct login shows, then the same through the proxy.
    let mut direct = Raw::start(loopback(p), &asked).await;
    let direct_welcome = direct.until_ready().await;
    let mut c = Raw::start(addr, &asked).await;
    let welcome = c.until_ready().await;
    for name in ["DateStyle", "TimeZone", "client_encoding"] {
        let shown = status(&welcome, name);
        assert!(shown.is_some(), "{name}: {welcome:?}");
        assert_eq!(shown, status(&direct_welcome, name), "{name}");
    }
    assert_eq!(status(&welcome, "DateStyle").as_deref(), Some("ISO, MDY"));

    // Three transactions on the one server: the settings were set before the welcome and are
    // never set again.
    for _ in 0..3 {
        assert_eq!(c.one("show DateStyle").await, "ISO, MDY");
    }
    assert_eq!(c.one("show TimeZone").await, "Europe/Paris");
    let sets = primary.log_text().matches("SET DateStyle TO 'ISO'").count();
    assert_eq!(sets, 1, "the alignment ran once");

    // A value the server refuses ends the login with the server's own error, as directly.
    let bad = [("TimeZone", "Not/AZone")];
    let mut d = Raw::start(addr, &bad).await;
    let refused = d.until_ready().await;
    let mut direct = Raw::start(loopback(p), &bad).await;
    let direct_refused = direct.until_ready().await;
    let error = |m: &[(u8, Vec<u8>)]| {
        let (_, body) = m.iter().find(|(t, _)| *t == b'E').expect("an error");
        let f = ErrorFields::decode(body).expect("fields");
        let text = |v: Option<&[u8]>| String::from_utf8_lossy(v.unwrap_or_default()).into_owned();
        (text(f.severity()), text(f.code()), text(f.message()))
    };
    assert_eq!(error(&refused), error(&direct_refused));
    assert_eq!(refused.first().map(|m| m.0), Some(b'R'));
    assert_eq!(
        refused.last().map(|m| m.0),
        Some(b'E'),
        "and then the end: {refused:?}"
    );

    // The server the refusal used is still good: the next transaction runs on it.
    assert_eq!(c.one("show TimeZone").await, "Europe/Paris");

    // One client leaves the server with standard_conforming_strings off; a backslash in the
    // next client's application_name must still reach the server as written.
    let mut e = Raw::start(addr, &[]).await;
    e.until_ready().await;
    e.one("select set_config('standard_conforming_strings', 'off', false)")
        .await;
    let app = r"C:\temp\it's";
    let mut f = Raw::start(addr, &[("application_name", app)]).await;
    let welcome = f.until_ready().await;
    assert_eq!(status(&welcome, "application_name").as_deref(), Some(app));
    assert_eq!(f.one("show application_name").await, app);
    assert_eq!(f.one("show standard_conforming_strings").await, "on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_path_follows_the_client_where_the_server_reports_it() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;

    // One server connection: what a client sets is on it when the next client comes.
    let mut a = Raw::start(addr, &[]).await;
    let login = status(&a.until_ready().await, "search_path").expect("PostgreSQL 18 reports it");
    a.exec("set search_path to pg_catalog, public").await;
    let mut b = Raw::start(addr, &[]).await;
    assert_eq!(
        status(&b.until_ready().await, "search_path"),
        Some(login.clone())
    );
    assert_eq!(b.one("show search_path").await, login);
    assert_eq!(a.one("show search_path").await, "pg_catalog, public");

    // pg_dump's way of emptying it (GitLab's outage through PgBouncer, its issue #89).
    a.one("select pg_catalog.set_config('search_path', '', false)")
        .await;
    assert_eq!(b.one("show search_path").await, login);
    assert_eq!(a.one("show search_path").await, "");

    // A startup search_path is taken, as a direct login takes it.
    let mut c = Raw::start(addr, &[("search_path", "information_schema, public")]).await;
    let welcome = c.until_ready().await;
    assert_eq!(
        status(&welcome, "search_path").as_deref(),
        Some("information_schema, public")
    );
    assert_eq!(c.one("select count(*) > 0 from tables").await, "t");
    assert_eq!(b.one("show search_path").await, login);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_report_search_path_neither_shows_nor_sets_it() {
    let options = Options::default()
        .major(pgyard_testkit::postgres::Major::V17)
        .conf("log_statement = 'all'");
    let primary = Primary::start(options).expect("a PostgreSQL 17 primary");
    let addr = proxy(primary.port()).await;
    let mut c = Raw::start(addr, &[("search_path", "information_schema, public")]).await;
    let welcome = c.until_ready().await;
    assert_eq!(
        status(&welcome, "server_version").map(|v| v.starts_with("17")),
        Some(true)
    );
    assert_eq!(status(&welcome, "search_path"), None, "{welcome:?}");
    assert_eq!(c.one("show search_path").await, r#""$user", public"#);
    assert_eq!(c.one("show search_path").await, r#""$user", public"#);
    assert!(
        !primary.log_text().contains("set_config"),
        "nothing tried to set it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_default_stays_with_the_client_that_set_it() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    let mut a = Raw::start(addr, &[]).await;
    a.until_ready().await;
    a.exec("set default_transaction_read_only = on").await;
    let mut b = Raw::start(addr, &[]).await;
    let welcome = b.until_ready().await;
    assert_eq!(
        status(&welcome, "default_transaction_read_only").as_deref(),
        Some("off")
    );
    b.exec("create temp table t (x int)").await;
    assert_eq!(b.one("show default_transaction_read_only").await, "off");
    assert_eq!(a.one("show default_transaction_read_only").await, "on");
    let mut q = BytesMut::new();
    frontend::encode_query(b"create temp table u (x int)", &mut q).expect("query");
    a.sock.write_all(&q).await.expect("write");
    let refused = a.until_ready().await;
    let (_, body) = refused.iter().find(|(t, _)| *t == b'E').expect("read-only");
    let code = ErrorFields::decode(body)
        .expect("fields")
        .code()
        .map(<[u8]>::to_vec);
    assert_eq!(code.as_deref(), Some(&b"25006"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_are_read_in_the_clients_encoding_whatever_the_last_client_left() {
    let primary = Primary::start(Options::default()).expect("primary");
    let p = primary.port();
    let addr = proxy(p).await;
    let asked = [
        ("client_encoding", "UTF8"),
        ("application_name", "caf\u{e9}"),
        ("search_path", "\"sch\u{e9}ma\", public"),
    ];
    let mut direct = Raw::start(loopback(p), &asked).await;
    let direct_welcome = direct.until_ready().await;

    // The one server connection is left in LATIN1, where the bytes of `é` in UTF-8 would be
    // read as two other letters.
    let mut a = Raw::start(addr, &[]).await;
    a.until_ready().await;
    a.exec("set client_encoding to 'LATIN1'").await;
    let mut b = Raw::start(addr, &asked).await;
    let welcome = b.until_ready().await;
    for name in ["application_name", "search_path", "client_encoding"] {
        assert_eq!(
            status(&welcome, name),
            status(&direct_welcome, name),
            "{name}"
        );
    }
    assert_eq!(
        b.one("show application_name").await,
        direct.one("show application_name").await
    );
    assert_eq!(b.one("show search_path").await, "\"sch\u{e9}ma\", public");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_authorization_stays_with_the_client_that_set_it() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    let mut a = Raw::start(addr, &[]).await;
    a.until_ready().await;
    a.exec("create role pgyard_bob").await;
    let set = a.exec("set session authorization pgyard_bob").await;
    assert_eq!(
        status(&set, "session_authorization").as_deref(),
        Some("pgyard_bob")
    );
    a.exec("set scram_iterations = 8192").await;
    // One server: every transaction below finds it as the other client left it.
    let mut b = Raw::start(addr, &[]).await;
    let welcome = b.until_ready().await;
    assert_eq!(
        status(&welcome, "session_authorization").as_deref(),
        Some("postgres")
    );
    assert_eq!(status(&welcome, "is_superuser").as_deref(), Some("on"));
    assert_eq!(b.one("select current_user").await, "postgres");
    assert_eq!(b.one("show scram_iterations").await, "4096");
    let again = a.exec("select session_user").await;
    assert!(
        again.iter().all(|(t, _)| *t != b'S'),
        "the alignment's reports are the proxy's: {again:?}"
    );
    assert_eq!(a.one("select session_user").await, "pgyard_bob");
    assert_eq!(a.one("show scram_iterations").await, "8192");
    assert_eq!(b.one("select session_user").await, "postgres");
    // A direct login ignores a StartupMessage's session_authorization; so does the proxy.
    let asked = [("session_authorization", "pgyard_bob")];
    let mut direct = Raw::start(loopback(primary.port()), &asked).await;
    let direct_welcome = direct.until_ready().await;
    assert_eq!(
        status(&direct_welcome, "session_authorization").as_deref(),
        Some("postgres")
    );
    let mut c = Raw::start(addr, &asked).await;
    let welcome = c.until_ready().await;
    assert_eq!(
        status(&welcome, "session_authorization").as_deref(),
        Some("postgres")
    );
    assert_eq!(c.one("select session_user").await, "postgres");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_startup_date_style_starts_from_the_servers_login_value() {
    let primary = Primary::start(Options::default()).expect("primary");
    let direct = loopback(primary.port());
    let addr = proxy(primary.port()).await;
    let mut a = Raw::start(addr, &[]).await;
    a.until_ready().await;
    a.exec("set DateStyle = 'SQL, DMY'").await;
    // pgJDBC sends `ISO`, `-e` asks for `euro`: each names half of a DateStyle, which a
    // server puts over its login value, not over what another client left.
    let cases: [&[(&str, &str)]; 2] = [&[("DateStyle", "ISO")], &[("options", "-e")]];
    for asked in cases {
        // The one server takes a's value again.
        a.exec("select 1").await;
        let mut d = Raw::start(direct, asked).await;
        let want = status(&d.until_ready().await, "DateStyle");
        let mut b = Raw::start(addr, asked).await;
        let got = status(&b.until_ready().await, "DateStyle");
        assert_eq!(got, want, "{asked:?}");
        let sql = "select '01/02/2024'::date::text";
        assert_eq!(b.one(sql).await, d.one(sql).await, "{asked:?}");
    }
    assert_eq!(a.one("show DateStyle").await, "SQL, DMY");
}

/// A startup `application_name` that is not UTF-8 (LATIN1's `café`), or holds control
/// characters, is shown and kept as a direct login shows it (session 35: the proxy read it
/// lossily, and the server then cleaned the replacement character's three bytes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_name_of_any_bytes_is_shown_as_a_direct_login_shows_it() {
    let primary = Primary::start(Options::default()).expect("primary");
    let addr = proxy(primary.port()).await;
    // A server takes the name in any case.
    let values: [(&[u8], &[u8]); 4] = [
        (b"application_name", b"caf\xe9"),
        (b"application_name", b"caf\xc3\xa9"),
        (b"application_name", b"a\x01b\x7f~ z"),
        (b"Application_Name", b"caf\xe9"),
    ];
    for (name, value) in values {
        let asked = [(name, value)];
        let mut direct = Raw::start_bytes(loopback(primary.port()), &asked).await;
        let direct_shown = status(&direct.until_ready().await, "application_name");
        let mut c = Raw::start_bytes(addr, &asked).await;
        let shown = status(&c.until_ready().await, "application_name");
        assert!(direct_shown.is_some(), "{value:?}");
        assert_eq!(shown, direct_shown, "{value:?}");
        let kept = c.one("show application_name").await;
        assert_eq!(Some(kept), direct_shown, "{value:?}");
    }
}
