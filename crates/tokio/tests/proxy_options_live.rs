//! A StartupMessage's `options` through `pgyard proxy` in transaction mode, against a direct
//! login to the same PostgreSQL 18 (session 34): each `options` text either gives the same
//! welcome (the tracked settings, as the server spells them) or ends the login with the same
//! error after the same AuthenticationOk. So does a `replication` parameter a server reads as
//! a plain session or refuses.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use pgyard_proxy::client::TRACKED;
use pgyard_testkit::cluster::{Options, Primary};
use pgyard_wire::error_fields::ErrorFields;

mod common;
#[path = "common/raw.rs"]
mod raw;

use raw::{loopback, status, Raw};

/// What a login with `extra` in its StartupMessage ended with: the tracked settings of its
/// welcome, or AuthenticationOk (whether it came first) and the error's code, message,
/// detail and hint.
#[derive(Debug, PartialEq, Eq)]
enum Login {
    Welcome(BTreeMap<&'static str, Option<String>>),
    Refused {
        authenticated: bool,
        fields: (String, String, Option<String>, Option<String>),
    },
}

async fn login(addr: SocketAddr, extra: &[(&str, &str)]) -> Login {
    let mut c = Raw::start(addr, extra).await;
    let messages = c.until_ready().await;
    if let Some(i) = messages.iter().position(|(t, _)| *t == b'E') {
        let f = ErrorFields::decode(&messages[i].1).expect("error fields");
        let text = |code: u8| f.get(code).map(|v| String::from_utf8_lossy(v).into_owned());
        let authenticated = messages[..i]
            .iter()
            .any(|(t, b)| *t == b'R' && b.as_slice() == [0, 0, 0, 0]);
        return Login::Refused {
            authenticated,
            fields: (
                text(b'C').unwrap_or_default(),
                text(b'M').unwrap_or_default(),
                text(b'D'),
                text(b'H'),
            ),
        };
    }
    Login::Welcome(TRACKED.iter().map(|&n| (n, status(&messages, n))).collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_give_what_a_direct_login_gets() {
    let primary = Primary::start(Options::default()).expect("primary");
    let direct = loopback(primary.port());
    let proxied = common::transaction_proxy(primary.port(), 1, 5, |_| {}).await;
    let cases: &[&[(&str, &str)]] = &[
        &[(
            "options",
            r"-c search_path=s1 -c application_name=my\ app --DateStyle=German",
        )],
        &[("options", "-csearch_path=x,y")],
        &[("options", "--default-transaction-read-only=on")],
        &[("options", "-e")],
        &[("options", "-ec application_name=g -E -j -d 5 --")],
        &[("options", "-c Application_Name=v -c TIMEZONE=europe/paris")],
        &[("options", "-c application_name=a -c application_name=b")],
        &[(
            "options",
            r"-c application_name=a\\b -c IntervalStyle=iso_8601",
        )],
        &[("options", "-c client_encoding=LATIN1")],
        &[
            ("application_name", "top"),
            ("options", "-c application_name=fromopt"),
        ],
        &[
            ("options", "-c application_name=fromopt"),
            ("application_name", "top"),
        ],
        &[("options", "-c TimeZone=Not/AZone")],
        &[("options", "-c foo")],
        &[("options", "--foo")],
        &[("options", "-z")],
        &[("options", "abc -c application_name=zz")],
        &[("options", "-c application_name=1 -c")],
        &[("options", "-zc foo")],
        &[("options", "-- -c application_name=q")],
        &[("options", "-c =x")],
        // Settings and switches a pooled server cannot track: the servers of the client's
        // own pool log in with them, so the server takes or refuses them as it does here.
        &[(
            "options",
            r"-c statement_timeout=5s -c app.note=a\ b -S 1MB -E -d 0",
        )],
        &[("options", "-c bogus=1")],
        &[("options", "-c statement_timeout=abc")],
        &[("options", "-c statement_timeout=5parsecs")],
        &[("options", "-c default_transaction_isolation=foo")],
        // So do the StartupMessage's own settings the proxy does not track, but for
        // `extra_float_digits` (ignored, which changes nothing a client is shown).
        &[("statement_timeout", "5s"), ("Geqo", "off")],
        &[("bogus", "1")],
        &[("extra_float_digits", "3")],
        &[
            ("options", "-c statement_timeout=1s"),
            ("statement_timeout", "soon"),
        ],
        &[("options", "-B 100")],
        &[("options", "-c Transaction_Isolation=serializable")],
        // A name no `-c` can carry: refused after the password, in the server's words.
        &[("statement_timeout", "5s"), ("a=b", "x")],
        &[("my.x=y", "x")],
        &[("my.x=y", "x"), ("options", "-c foo")],
        // `replication` off in a server's spellings is a plain session; a value a server
        // cannot read is refused before the password, in its words.
        &[("replication", "false")],
        &[("replication", "of")],
        &[("replication", "o")],
        &[("replication", "")],
    ];
    let mut welcomed = 0;
    for extra in cases {
        let want = login(direct, extra).await;
        let got = login(proxied, extra).await;
        assert_eq!(got, want, "{extra:?}");
        welcomed += usize::from(matches!(want, Login::Welcome(_)));
    }
    assert_eq!(welcomed, 17, "the cases that log in");
    // The settings hold on the server the client's transactions run on.
    let options = [("options", "-c search_path=pg_catalog,public -e")];
    let mut shown = Vec::new();
    for addr in [direct, proxied] {
        let mut c = Raw::start(addr, &options).await;
        c.until_ready().await;
        shown.push((
            c.one("show search_path").await,
            c.one("show DateStyle").await,
        ));
    }
    assert_eq!(shown[1], shown[0]);
    assert_eq!(shown[1].1, "ISO, DMY");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_a_pool_cannot_track_hold_for_the_client_that_asked_and_no_other() {
    let primary = Primary::start(Options::default()).expect("primary");
    let port = primary.port();
    // The operator's own `options` in the backend's conninfo: a client's come after them.
    let proxied = common::transaction_proxy(port, 1, 7, |c| {
        let backend = format!(
            "host=127.0.0.1 port={port} options='-c statement_timeout=9s -c lock_timeout=7s'"
        );
        c.backend = Some(backend);
    })
    .await;
    let mut timed = Raw::start(
        proxied,
        &[("options", r"-c statement_timeout=250ms -c app.note=a\ b")],
    )
    .await;
    timed.until_ready().await;
    let mut plain = Raw::start(proxied, &[]).await;
    plain.until_ready().await;
    // One server per pool: each client's transactions alternate on the server of its own.
    for _ in 0..3 {
        assert_eq!(timed.one("show statement_timeout").await, "250ms");
        assert_eq!(timed.one("show lock_timeout").await, "7s");
        assert_eq!(timed.one("select current_setting('app.note')").await, "a b");
        assert_eq!(plain.one("show statement_timeout").await, "9s");
        assert_eq!(
            plain
                .one("select coalesce(current_setting('app.note', true), 'unset')")
                .await,
            "unset"
        );
    }
    // Settings of the StartupMessage likewise, but for the ignored `extra_float_digits`.
    let extra = [("statement_timeout", "300ms"), ("extra_float_digits", "3")];
    let mut startup = Raw::start(proxied, &extra).await;
    startup.until_ready().await;
    assert_eq!(startup.one("show statement_timeout").await, "300ms");
    assert_eq!(startup.one("show extra_float_digits").await, "1");
    assert_eq!(plain.one("show statement_timeout").await, "9s");
    // The limit is the server's: a longer statement is cancelled there.
    let reply = timed.reply("select pg_sleep(5)").await;
    let error = reply.iter().find(|(t, _)| *t == b'E').expect("an error");
    let f = ErrorFields::decode(&error.1).expect("error fields");
    assert_eq!(f.get(b'C'), Some(&b"57014"[..]), "{reply:?}");
    // A `SET` in a transaction is the client's own, as on a direct login, and a plain
    // client's next transaction still has the operator's value.
    timed.exec("set statement_timeout = '1min'").await;
    assert_eq!(plain.one("show statement_timeout").await, "9s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_does_not_exist_is_refused_at_once_as_a_server_refuses_it() {
    let primary = Primary::start(Options::default()).expect("primary");
    let direct = loopback(primary.port());
    // Clients wait up to 60 s for a server; the answer must come long before (Raw gives
    // up after 20 s of silence).
    let proxied = common::transaction_proxy(primary.port(), 2, 7, |_| {}).await;
    // A later `database` in a StartupMessage wins, on a server as in the proxy.
    let asked = [("database", "pgyard_no_such_db")];
    let want = login(direct, &asked).await;
    let Login::Refused { fields, .. } = &want else {
        panic!("a direct login to a missing database succeeded");
    };
    assert_eq!(fields.0, "3D000");
    // The first client makes the pool open a server; the second comes after the refusal.
    for _ in 0..2 {
        assert_eq!(login(proxied, &asked).await, want);
    }
}
