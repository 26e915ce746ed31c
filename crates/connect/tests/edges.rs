//! Edges of the walk and the session check that the scripted servers elsewhere do not reach:
//! a resolver that answers with no address, a server that reports only one of the two role
//! settings, and the host-status memory's window.

mod common;

use std::time::Duration;

use common::*;
use pgyard_connect::HostStatusMemory;

#[test]
fn a_resolver_answer_without_addresses_reads_as_an_unknown_name() {
    let mut w = World::new()
        .dns("empty.example", &[])
        .dns("db.example", &["127.0.0.1:6001"])
        .pg("127.0.0.1:6001", Pg::primary());
    let e = connect(&mut w, "host=empty.example port=6001").expect_err("no address");
    assert_eq!(
        e.message(),
        "could not translate host name \"empty.example\" to address: Name or service not known\n"
    );
    // The walk goes on to the next host, as after any name that does not resolve.
    let est = connect(&mut w, "host=empty.example,db.example port=6001").expect("the second");
    assert_eq!(est.slot, 1);
}

#[test]
fn a_server_reporting_only_default_transaction_read_only_is_asked() {
    // libpq asks `SHOW transaction_read_only` unless the login reported both settings; a
    // server that reports `default_transaction_read_only` alone (off) may still be in
    // recovery, which only the question tells.
    let mut pg = Pg::primary();
    pg.params = vec![
        ("server_version".into(), "18.4".into()),
        ("default_transaction_read_only".into(), "off".into()),
    ];
    pg.show_ro = Some("on".into());
    let mut w = World::new().pg("127.0.0.1:6001", pg.clone());
    let e = connect(
        &mut w,
        "host=127.0.0.1 port=6001 target_session_attrs=read-write",
    )
    .expect_err("read-only by the answer");
    assert!(
        e.message().ends_with("session is read-only\n"),
        "{}",
        e.message()
    );
    pg.show_ro = Some("off".into());
    let mut w = World::new().pg("127.0.0.1:6001", pg);
    connect(
        &mut w,
        "host=127.0.0.1 port=6001 target_session_attrs=read-write",
    )
    .expect("read-write by the answer");
}

#[test]
fn the_memory_keeps_the_window_it_was_given() {
    assert_eq!(
        HostStatusMemory::new(Duration::from_millis(2500)).recheck(),
        Duration::from_millis(2500)
    );
    assert_eq!(
        HostStatusMemory::default().recheck(),
        Duration::from_secs(10),
        "pgjdbc's hostRecheckSeconds"
    );
}
