//! Unit tests of error fields, libpq's rendering and the SQLSTATE classification.

use super::sqlstate::SQLSTATE_NAMES;
use super::*;

fn body(fields: &[(u8, &[u8])]) -> Vec<u8> {
    let mut b = BytesMut::new();
    encode_error_response(fields, &mut b).unwrap();
    b[5..].to_vec()
}

#[test]
fn decodes_every_field_and_keeps_unknown_codes() {
    let codes = b"SVCMDHPpqWstcdnFLRZ";
    let fields: Vec<(u8, &[u8])> = codes.iter().map(|&c| (c, &b"v"[..])).collect();
    let b = body(&fields);
    let f = ErrorFields::decode(&b).unwrap();
    let got: Vec<u8> = f.iter().map(|(c, _)| c.byte()).collect();
    assert_eq!(&got[..], &codes[..]);
    assert_eq!(
        f.iter().last().map(|(c, _)| c),
        Some(FieldCode::Unknown(b'Z'))
    );
    for &c in codes {
        assert_eq!(FieldCode::from_byte(c).byte(), c);
    }
}

#[test]
fn last_duplicate_wins_and_v_beats_s() {
    let b = body(&[
        (b'S', b"FEHLER"),
        (b'V', b"ERROR"),
        (b'M', b"a"),
        (b'M', b"b"),
    ]);
    let f = ErrorFields::decode(&b).unwrap();
    assert_eq!(f.message(), Some(&b"b"[..]));
    assert_eq!(f.severity(), Some(&b"ERROR"[..]));
    assert_eq!(f.severity_localized(), Some(&b"FEHLER"[..]));
}

#[test]
fn malformed_bodies() {
    assert!(matches!(
        ErrorFields::decode(b"Mabc"),
        Err(DecodeError::MissingTerminator { .. })
    ));
    assert!(matches!(
        ErrorFields::decode(b"Mabc\0"),
        Err(DecodeError::UnexpectedEnd { .. })
    ));
    assert!(matches!(
        ErrorFields::decode(b"\0x"),
        Err(DecodeError::TrailingBytes {
            offset: 1,
            count: 1
        })
    ));
    assert_eq!(ErrorFields::decode(b"\0").map(|f| f.iter().count()), Ok(0));
    let mut buf = BytesMut::new();
    assert!(encode_error_response(&[(b'M', b"a\0b")], &mut buf).is_err());
    assert!(encode_error_response(&[(0, b"a")], &mut buf).is_err());
    assert!(buf.is_empty());
}

#[test]
fn renders_like_libpq() {
    let b = body(&[
        (b'S', b"FATAL"),
        (b'V', b"FATAL"),
        (b'C', b"28P01"),
        (b'M', b"password authentication failed for user \"u\""),
        (b'F', b"auth.c"),
        (b'L', b"321"),
        (b'R', b"auth_failed"),
    ]);
    let f = ErrorFields::decode(&b).unwrap();
    assert_eq!(
        f.to_string(),
        "FATAL:  password authentication failed for user \"u\""
    );
    assert_eq!(
        f.render(Verbosity::Verbose, true),
        "FATAL:  28P01: password authentication failed for user \"u\"\n\
         LOCATION:  auth_failed, auth.c:321\n"
    );
    assert_eq!(f.render(Verbosity::Sqlstate, true), "FATAL:  28P01\n");

    let b = body(&[
        (b'S', b"ERROR"),
        (b'C', b"42601"),
        (b'M', b"syntax error at or near \"x\""),
        (b'P', b"8"),
        (b'D', b"some detail"),
        (b'H', b"a hint"),
        (b'W', b"SQL function"),
    ]);
    let f = ErrorFields::decode(&b).unwrap();
    assert_eq!(
        f.render(Verbosity::Default, true),
        "ERROR:  syntax error at or near \"x\" at character 8\n\
         DETAIL:  some detail\nHINT:  a hint\nCONTEXT:  SQL function\n"
    );
    assert_eq!(
        f.render(Verbosity::Default, false),
        "ERROR:  syntax error at or near \"x\" at character 8\n\
         DETAIL:  some detail\nHINT:  a hint\n"
    );
    assert_eq!(
        f.render(Verbosity::Terse, true),
        "ERROR:  syntax error at or near \"x\" at character 8\n"
    );
    let owned = f.to_owned_fields();
    assert_eq!(owned.fields(), f);
    assert_eq!(owned.to_string(), f.to_string());
}

#[test]
fn sqlstates_and_classification() {
    let s = SqlState::from_bytes(b"57P03").unwrap();
    assert_eq!(s, SqlState::CANNOT_CONNECT_NOW);
    assert_eq!(s.name(), Some("cannot_connect_now"));
    assert_eq!(s.to_string(), "57P03");
    assert!(SqlState::from_bytes(b"57p03").is_none());
    assert!(SqlState::from_bytes(b"5703").is_none());
    assert!(SqlState::ADMIN_SHUTDOWN.is_admin_shutdown());
    assert!(SqlState::TOO_MANY_CONNECTIONS.is_too_many_connections());
    assert!(SqlState::INVALID_PASSWORD.is_invalid_password());
    assert!(SqlState::READ_ONLY_SQL_TRANSACTION.is_read_only_transaction());
    assert!(SqlState::PROTOCOL_VIOLATION.is_connection_exception());
    assert!(SqlState::DEADLOCK_DETECTED.is_transaction_rollback());
    assert!(SqlState::IDLE_SESSION_TIMEOUT.terminates_session());
    use ConnectDisposition::*;
    use ConnectStage::*;
    assert_eq!(connect_disposition(Some(s), BeforeAuthOk), NextHost);
    assert_eq!(
        connect_disposition(Some(SqlState::TOO_MANY_CONNECTIONS), BeforeAuthOk),
        NextMethodSameAddress
    );
    assert_eq!(
        connect_disposition(Some(SqlState::INVALID_PASSWORD), BeforeAuthOk),
        NextMethodSameAddress
    );
    assert_eq!(
        connect_disposition(None, BeforeAuthOk),
        NextMethodSameAddress
    );
    assert_eq!(connect_disposition(Some(s), AfterAuthOk), Abort);
    assert_eq!(
        connect_disposition(Some(SqlState::INVALID_CATALOG_NAME), AfterAuthOk),
        Abort
    );
    // Every constant parses back to itself and has a name.
    for (s, n) in SQLSTATE_NAMES {
        assert_eq!(SqlState::from_bytes(&s.bytes()), Some(*s), "{n}");
        assert_eq!(s.name(), Some(*n));
    }
}
