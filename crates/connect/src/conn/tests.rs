//! Unit tests of the connection's pure helpers.

use pgyard_conninfo::typed::TargetSessionAttrs;

use super::session::parse_server_version;
use super::{Check, FailClass};

#[test]
fn server_version_parsing_follows_libpq() {
    assert_eq!(parse_server_version(b"18.4"), 180004);
    assert_eq!(parse_server_version(b"9.6.24"), 90624);
    assert_eq!(parse_server_version(b"9.6"), 90600);
    assert_eq!(parse_server_version(b"13.2 (Debian)"), 130002);
    assert_eq!(parse_server_version(b"18devel"), 180000);
    assert_eq!(parse_server_version(b"x"), 0);
    // A number too large for an int ends the parse; a byte that is not ASCII ends a number.
    assert_eq!(parse_server_version(b"99999999999.1"), 0);
    assert_eq!(parse_server_version(b"17.99999999999"), 170000);
    assert_eq!(parse_server_version(b"10.\xff3"), 100000);
    assert_eq!(parse_server_version(b"16\xc3\xa9.2"), 160000);
}

#[test]
fn check_mapping_per_pass() {
    use TargetSessionAttrs as T;
    assert_eq!(Check::for_pass(T::PreferStandby, false), Check::Standby);
    assert_eq!(Check::for_pass(T::PreferStandby, true), Check::Any);
    assert_eq!(Check::for_pass(T::PreferPrimary, false), Check::Primary);
    assert_eq!(Check::for_pass(T::ReadWrite, true), Check::ReadWrite);
}

#[test]
fn startup_errors_follow_libpq() {
    use pgyard_wire::error_fields::{ConnectStage::*, SqlState};
    let before = |s| FailClass::for_startup_error(s, BeforeAuthOk);
    assert_eq!(
        before(Some(SqlState::CANNOT_CONNECT_NOW)),
        FailClass::NextSlot
    );
    assert_eq!(
        before(Some(SqlState::TOO_MANY_CONNECTIONS)),
        FailClass::NextMethod
    );
    assert_eq!(before(None), FailClass::NextMethod);
    let after = FailClass::for_startup_error(Some(SqlState::CANNOT_CONNECT_NOW), AfterAuthOk);
    assert_eq!(after, FailClass::Abort);
}
