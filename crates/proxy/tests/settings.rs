//! Session settings across clients in transaction mode: what one client `SET` on a server
//! never becomes what the next client of that server is shown or runs with.

use pgyard_proxy::{ClientOut, ClientSession, Lent, PoolMode};
use pgyard_wire::frame::frames;

mod common;

use common::{outputs, query, released, server, set_reply, starting, welcome_outputs, T0};

/// A logged-in transaction-mode client, welcomed on `lent`; the server it gave back.
fn welcomed(lent: Lent) -> (ClientSession, Vec<u8>, Lent) {
    let mut s = starting(PoolMode::Transaction, &[]);
    s.handle_server(T0, lent);
    // Another client may have left the server otherwise: it is set back before the welcome.
    let out = welcome_outputs(&mut s);
    let Some(ClientOut::ToClient(welcome)) = out.first() else {
        panic!("{out:?}")
    };
    let welcome = welcome.to_vec();
    let back = released(out).expect("transaction mode gives the welcome server back");
    (s, welcome, back)
}

/// The value of every ParameterStatus `name` in `bytes`, in order.
fn reported(bytes: &[u8], name: &str) -> Vec<String> {
    frames(bytes, 1 << 20)
        .map(|f| f.expect("frame"))
        .filter(|f| f.tag == b'S')
        .filter_map(|f| {
            let mut parts = f.body.split(|&b| b == 0);
            (parts.next() == Some(name.as_bytes()))
                .then(|| String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned())
        })
        .collect()
}

#[test]
fn a_new_client_is_shown_the_servers_login_settings_not_an_earlier_clients_set() {
    let login = [
        ("TimeZone", "Etc/UTC"),
        ("application_name", ""),
        ("session_authorization", "alice"),
    ];
    let (mut a, welcome, back) = welcomed(server(1, &login));
    assert_eq!(reported(&welcome, "TimeZone"), ["Etc/UTC"]);

    // The first client sets its TimeZone and its application_name on the server.
    a.handle_client_bytes(
        T0,
        &query("set timezone to 'Asia/Tokyo'; set application_name to 'a'"),
    );
    outputs(&mut a);
    a.handle_server(T0, back);
    let out = outputs(&mut a);
    assert!(matches!(&out[..], [ClientOut::ToServer(_)]), "{out:?}");
    let changed: [(&[u8], &[u8]); 2] = [(b"TimeZone", b"Asia/Tokyo"), (b"application_name", b"a")];
    a.handle_server_bytes(T0, set_reply(2, &changed));
    let out = outputs(&mut a);
    let dirty = released(out).expect("the transaction ended");
    assert_eq!(
        dirty.settings.tracked("TimeZone").map(String::as_str),
        Some("Asia/Tokyo"),
        "the server's record follows what it reported"
    );

    // A second client welcomed on that server sees the tracked settings as the server
    // reported them at login, as a direct connection would; the others (which alignment does
    // not carry: `SET SESSION AUTHORIZATION` here, `in_hot_standby` after a promotion) as the
    // server reports them now.
    let mut dirty = dirty;
    dirty
        .settings
        .insert("session_authorization".into(), "bob".into());
    let (mut b, welcome, back) = welcomed(dirty);
    assert_eq!(reported(&welcome, "TimeZone"), ["Etc/UTC"]);
    assert_eq!(reported(&welcome, "application_name"), [""]);
    assert_eq!(reported(&welcome, "session_authorization"), ["bob"]);

    // ... and runs with them: the welcome undid the first client's settings on the server
    // (since session 33; before, its first transaction did), so nothing is left to set.
    assert_eq!(
        back.settings.tracked("TimeZone").map(String::as_str),
        Some("Etc/UTC")
    );
    b.handle_client_bytes(T0, &query("select now()"));
    outputs(&mut b);
    b.handle_server(T0, back);
    let out = outputs(&mut b);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(q)] if q.ends_with(b"select now()\0")),
        "{out:?}"
    );
}

/// Found against PostgreSQL 18 in session 33 (PgBouncer 1.18 alike): a client's
/// `SET default_transaction_read_only = on` stayed on the server, so the next client of it
/// could not write (25006 `cannot execute CREATE TABLE in a read-only transaction`), and was
/// even welcomed with `on`. It is now tracked where reported: the first client carries it, and
/// a client that never set it gets each server's own login value back.
#[test]
fn a_read_only_default_one_client_set_never_reaches_the_next() {
    let login = [
        ("TimeZone", "Etc/UTC"),
        ("default_transaction_read_only", "off"),
    ];
    let (mut a, _, back) = welcomed(server(1, &login));
    a.handle_client_bytes(T0, &query("set default_transaction_read_only = on"));
    outputs(&mut a);
    a.handle_server(T0, back);
    assert!(matches!(&outputs(&mut a)[..], [ClientOut::ToServer(_)]));
    a.handle_server_bytes(
        T0,
        set_reply(1, &[(b"default_transaction_read_only", b"on")]),
    );
    let dirty = released(outputs(&mut a)).expect("the transaction ended");

    // The next client welcomed there: the server gets its own value back first.
    let mut b = starting(PoolMode::Transaction, &[]);
    b.handle_server(T0, dirty);
    let out = outputs(&mut b);
    let [ClientOut::ToServer(set)] = &out[..] else {
        panic!("{out:?}")
    };
    let sql = String::from_utf8_lossy(&set[5..]).into_owned();
    assert_eq!(sql, "SET default_transaction_read_only TO 'off';\0");
    b.handle_server_bytes(
        T0,
        set_reply(1, &[(b"default_transaction_read_only", b"off")]),
    );
    let out = outputs(&mut b);
    let Some(ClientOut::ToClient(welcome)) = out.first() else {
        panic!("{out:?}")
    };
    assert_eq!(reported(welcome, "default_transaction_read_only"), ["off"]);
    let back = released(out).expect("transaction mode gives the welcome server back");
    b.handle_client_bytes(T0, &query("create table t (x int)"));
    outputs(&mut b);
    b.handle_server(T0, back);
    let out = outputs(&mut b);
    assert!(
        matches!(&out[..], [ClientOut::ToServer(q)] if q.starts_with(b"Q") && q.ends_with(b"(x int)\0")),
        "nothing more to set: {out:?}"
    );

    // The first client still runs read-only wherever it lands.
    let again = server(2, &login);
    a.handle_client_bytes(T0, &query("select 1"));
    outputs(&mut a);
    a.handle_server(T0, again);
    let out = outputs(&mut a);
    let [ClientOut::ToServer(set)] = &out[..] else {
        panic!("{out:?}")
    };
    assert!(String::from_utf8_lossy(set).contains("SET default_transaction_read_only TO 'on';"));
}
