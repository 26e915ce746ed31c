//! The client session's transaction-mode shortcuts (a request read whole between
//! transactions, a reply chunk that ends the transaction, servers remembered as aligned)
//! against the same session without them: the outputs and what SHOW CLIENTS shows must not
//! differ. The structured session
//! fuzzer compares the two on every run (`session_fuzz.rs`); these cases cover what its
//! model server never sends.

use bytes::{BufMut, Bytes, BytesMut};
use pgyard_proxy::{ClientOut, ClientSession, Lent, PoolMode};
use pgyard_wire::backend::{self, TransactionStatus};
use pgyard_wire::frame::ProtocolVersion;
use pgyard_wire::frontend;

mod common;

use common::{outputs, query, released, server, session, T0};

fn parameter_status(name: &str, value: &str, b: &mut BytesMut) {
    b.put_u8(b'S');
    b.put_i32((4 + name.len() + 1 + value.len() + 1) as i32);
    b.put_slice(name.as_bytes());
    b.put_u8(0);
    b.put_slice(value.as_bytes());
    b.put_u8(0);
}

/// A logged-in transaction-mode session, shortcuts as `on` says, with everything it said.
fn logged_in(on: bool) -> (ClientSession, Vec<ClientOut>) {
    let s = session(PoolMode::Transaction);
    let mut s = if on { s } else { s.without_shortcuts() };
    let params: [(&[u8], &[u8]); 2] = [(b"user", b"alice"), (b"database", b"app")];
    let mut b = BytesMut::new();
    frontend::encode_startup(ProtocolVersion::V3_0, &params, &mut b).expect("startup");
    s.handle_client_bytes(T0, &b);
    let mut out = outputs(&mut s);
    s.handle_server(
        T0,
        server(1, &[("TimeZone", "UTC"), ("application_name", "")]),
    );
    out.extend(outputs(&mut s));
    (s, out)
}

/// One transaction: `request` read at once, a server lent, `reply` in one chunk.
fn transaction(s: &mut ClientSession, request: &[u8], lent: Lent, reply: Bytes) -> Vec<ClientOut> {
    s.handle_client_bytes(T0, request);
    let mut out = outputs(s);
    s.handle_server(T0, lent);
    out.extend(outputs(s));
    s.handle_server_bytes(T0, reply);
    out.extend(outputs(s));
    out
}

/// A setting the server reports in the reply that ends a transaction (SET inside it) is
/// what the client wants from then on: a server it used (and found aligned) before is
/// aligned to it, with or without the shortcuts and the memory of aligned servers.
#[test]
fn a_setting_reported_at_the_end_of_a_transaction_follows_the_client() {
    let mut runs = Vec::new();
    for on in [true, false] {
        let (mut s, mut out) = logged_in(on);
        // A first transaction on server 3, found aligned.
        let settings = [("TimeZone", "UTC"), ("application_name", "")];
        let ok = reply(b"CZ", b"SELECT 1");
        let step = transaction(&mut s, &query("select 0"), server(3, &settings), ok);
        let three = released(step.clone()).expect("a server given back");
        out.extend(step);
        let mut reply = BytesMut::new();
        parameter_status("application_name", "reports", &mut reply);
        backend::encode_command_complete(b"SET", &mut reply).expect("C");
        backend::encode_ready_for_query(TransactionStatus::Idle, &mut reply);
        let set = query("set application_name to 'reports'");
        let lent = server(2, &[("TimeZone", "UTC"), ("application_name", "")]);
        out.extend(transaction(&mut s, &set, lent, reply.freeze()));
        let mut reply = BytesMut::new();
        backend::encode_command_complete(b"SELECT 1", &mut reply).expect("C");
        backend::encode_ready_for_query(TransactionStatus::Idle, &mut reply);
        // Server 3, unchanged since, no longer has what the client wants: its
        // application_name is aligned first.
        out.extend(transaction(&mut s, &query("select 1"), three, Bytes::new()));
        let aligned = out.iter().any(|o| {
            matches!(o, ClientOut::ToServer(b)
                if String::from_utf8_lossy(b).contains("SET application_name TO 'reports'"))
        });
        assert!(aligned, "shortcuts {on}: {out:?}");
        runs.push((out, s.activity(), s.shortcuts_taken()));
    }
    assert_eq!(runs[0].0, runs[1].0, "the same outputs");
    assert_eq!(runs[0].1, runs[1].1, "the same activity");
    assert_eq!(runs[0].2, (3, 2), "both shortcuts taken");
    assert_eq!(runs[1].2, (0, 0), "none taken");
}

/// The reply frames named by their types, each empty but CommandComplete (`tag`) and
/// ReadyForQuery (idle).
fn reply(types: &[u8], tag: &[u8]) -> Bytes {
    let mut b = BytesMut::new();
    for &t in types {
        match t {
            b'C' => backend::encode_command_complete(tag, &mut b).expect("C"),
            b'Z' => backend::encode_ready_for_query(TransactionStatus::Idle, &mut b),
            t => backend::encode_empty(t, &mut b),
        }
    }
    b.freeze()
}

/// `DISCARD ALL` in a transaction whose reply takes the shortcut drops the statements the
/// proxy prepared on that server: a later Bind of the client's statement there is preceded
/// by its Parse again.
#[test]
fn discard_all_at_the_end_of_a_transaction_forgets_the_servers_statements() {
    let mut runs = Vec::new();
    for on in [true, false] {
        let (mut s, mut out) = logged_in(on);
        let settings = [("TimeZone", "UTC"), ("application_name", "")];
        let mut prepare = BytesMut::new();
        frontend::encode_parse(b"s1", b"select 1", &[], &mut prepare).expect("P");
        frontend::encode_sync(&mut prepare);
        let step = transaction(&mut s, &prepare, server(2, &settings), reply(b"1Z", b""));
        let lent = released(step.clone()).expect("a server given back");
        out.extend(step);
        let discard = query("discard all");
        let step = transaction(&mut s, &discard, lent, reply(b"CZ", b"DISCARD ALL"));
        let lent = released(step.clone()).expect("a server given back");
        out.extend(step);
        let mut bind = BytesMut::new();
        frontend::encode_bind(b"", b"s1", &[], &[], &[], &mut bind).expect("B");
        frontend::encode_execute(b"", 0, &mut bind).expect("E");
        frontend::encode_sync(&mut bind);
        let step = transaction(&mut s, &bind, lent, Bytes::new());
        let parsed_again = step
            .iter()
            .any(|o| matches!(o, ClientOut::ToServer(b) if b.first() == Some(&b'P')));
        assert!(parsed_again, "shortcuts {on}: {step:?}");
        out.extend(step);
        runs.push((out, s.activity(), s.shortcuts_taken()));
    }
    assert_eq!(runs[0].0, runs[1].0, "the same outputs");
    assert_eq!(runs[0].1, runs[1].1, "the same activity");
    assert!(
        runs[0].2 .1 >= 1,
        "the DISCARD ALL reply took the shortcut: {:?}",
        runs[0].2
    );
    assert_eq!(runs[1].2, (0, 0), "none taken");
}

/// A client remembers the servers it found aligned with it, but a server whose settings
/// another client changed meanwhile is compared (and aligned) again.
#[test]
fn a_server_another_client_changed_is_aligned_again() {
    let mut runs = Vec::new();
    for on in [true, false] {
        let (mut a, mut out) = logged_in(on);
        let (mut b, _) = logged_in(on);
        let settings = [("TimeZone", "UTC"), ("application_name", "")];
        let ok = || reply(b"CZ", b"SELECT 1");
        let step = transaction(&mut a, &query("select 1"), server(2, &settings), ok());
        let lent = released(step.clone()).expect("a server given back");
        out.extend(step);
        // Client `a` again on the same server: nothing to align.
        let step = transaction(&mut a, &query("select 2"), lent, ok());
        assert!(
            !step.iter().any(|o| matches!(o, ClientOut::ToServer(b) if b.first() == Some(&b'Q') && String::from_utf8_lossy(b).contains("SET "))),
            "shortcuts {on}: {step:?}"
        );
        let lent = released(step.clone()).expect("a server given back");
        out.extend(step);
        // Client `b` changes the server's TimeZone in its transaction.
        let mut changed = BytesMut::new();
        parameter_status("TimeZone", "Asia/Tokyo", &mut changed);
        backend::encode_command_complete(b"SET", &mut changed).expect("C");
        backend::encode_ready_for_query(TransactionStatus::Idle, &mut changed);
        let step = transaction(
            &mut b,
            &query("set timezone to 'Asia/Tokyo'"),
            lent,
            changed.freeze(),
        );
        let lent = released(step.clone()).expect("a server given back");
        // Back to `a`: its TimeZone is set again before its query.
        let step = transaction(&mut a, &query("select 3"), lent, Bytes::new());
        let aligned = step.iter().any(|o| {
            matches!(o, ClientOut::ToServer(b)
                if String::from_utf8_lossy(b).contains("SET TimeZone TO 'UTC'"))
        });
        assert!(aligned, "shortcuts {on}: {step:?}");
        out.extend(step);
        runs.push((out, a.activity()));
    }
    assert_eq!(runs[0].0, runs[1].0, "the same outputs");
    assert_eq!(runs[0].1, runs[1].1, "the same activity");
}
