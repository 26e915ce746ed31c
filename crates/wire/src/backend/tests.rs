//! Unit tests of the backend messages: round trips, subtypes and lying lengths.

use super::*;
use crate::frame::{decode_frame, CStrs, Decoded, ProtocolVersion};

fn decode_one(buf: &[u8]) -> BackendMessage<'_> {
    let Ok(Decoded::Frame(f)) = decode_frame(buf, usize::MAX) else {
        panic!("frame")
    };
    assert_eq!(f.wire_len(), buf.len());
    let m = BackendMessage::decode(f.tag, f.body).unwrap();
    let mut again = BytesMut::new();
    m.encode(&mut again).unwrap();
    assert_eq!(&again[..], buf);
    m
}

#[test]
fn data_row_fields() {
    let mut buf = BytesMut::new();
    encode_data_row(&[Some(b"1"), None, Some(b"")], &mut buf).unwrap();
    assert_eq!(
        &buf[..],
        b"D\0\0\0\x13\0\x03\0\0\0\x011\xff\xff\xff\xff\0\0\0\0"
    );
    let BackendMessage::DataRow(row) = decode_one(&buf) else {
        panic!()
    };
    assert_eq!(row.len(), 3);
    assert_eq!(
        row.fields().collect::<Vec<_>>(),
        [Some(&b"1"[..]), None, Some(&b""[..])]
    );
    assert_eq!(row.fields().len(), 3);
}

#[test]
fn data_row_rejects_lies() {
    // Count says 2, one value present.
    assert!(DataRow::decode(b"\0\x02\0\0\0\x01x").is_err());
    // Length -2.
    assert!(matches!(
        DataRow::decode(b"\0\x01\xff\xff\xff\xfe"),
        Err(DecodeError::InvalidLength {
            length: -2,
            offset: 2
        })
    ));
    // Value overruns.
    assert!(matches!(
        DataRow::decode(b"\0\x01\0\0\0\x05abc"),
        Err(DecodeError::InvalidLength {
            length: 5,
            offset: 2
        })
    ));
    // Trailing byte.
    assert!(matches!(
        DataRow::decode(b"\0\x01\0\0\0\x01ab"),
        Err(DecodeError::TrailingBytes {
            offset: 7,
            count: 1
        })
    ));
    // Huge count with a tiny body.
    assert!(matches!(
        DataRow::decode(b"\xff\xff\0\0"),
        Err(DecodeError::InvalidCount { count: 65535, .. })
    ));
}

#[test]
fn authentication_subtypes() {
    let cases: Vec<Authentication<'_>> = vec![
        Authentication::Ok,
        Authentication::KerberosV5,
        Authentication::CleartextPassword,
        Authentication::Md5Password { salt: [1, 2, 3, 4] },
        Authentication::ScmCredential,
        Authentication::Gss,
        Authentication::GssContinue(b"tok"),
        Authentication::Sspi,
        Authentication::SaslContinue(b"r=abc,s=xyz,i=4096"),
        Authentication::SaslFinal(b"v=sig"),
    ];
    for a in cases {
        let mut buf = BytesMut::new();
        a.encode(&mut buf).unwrap();
        assert_eq!(decode_one(&buf), BackendMessage::Authentication(a));
    }
    let mut buf = BytesMut::new();
    encode_auth_sasl(&[b"SCRAM-SHA-256-PLUS", b"SCRAM-SHA-256"], &mut buf).unwrap();
    let BackendMessage::Authentication(Authentication::Sasl(m)) = decode_one(&buf) else {
        panic!()
    };
    assert_eq!(
        m.iter().collect::<Vec<_>>(),
        [&b"SCRAM-SHA-256-PLUS"[..], &b"SCRAM-SHA-256"[..]]
    );
    // AuthenticationOk with trailing bytes, MD5 with a short salt, unknown subtype.
    assert!(Authentication::decode(b"\0\0\0\0x").is_err());
    assert!(Authentication::decode(b"\0\0\0\x05ab").is_err());
    assert!(Authentication::decode(b"\0\0\0\x0d").is_err());
    // SASL list without its terminator.
    assert!(Authentication::decode(b"\0\0\0\x0aSCRAM\0").is_err());
}

#[test]
fn backend_key_data_both_versions() {
    for key in [&[1u8, 2, 3, 4][..], &[5u8; 32][..], &[6u8; 256][..]] {
        let mut buf = BytesMut::new();
        BackendKeyData { pid: 77, key }.encode(&mut buf).unwrap();
        let BackendMessage::BackendKeyData(k) = decode_one(&buf) else {
            panic!()
        };
        assert_eq!((k.pid, k.key), (77, key));
        assert!(k.fits_version(ProtocolVersion::V3_2));
        assert_eq!(k.fits_version(ProtocolVersion::V3_0), key.len() == 4);
    }
    assert!(BackendKeyData::decode(b"\0\0\0\x01").is_err());
    assert!(BackendKeyData::decode(&[0; 4 + 257]).is_err());
}

#[test]
fn negotiate_protocol_version() {
    let mut buf = BytesMut::new();
    encode_negotiate_protocol_version(ProtocolVersion::V3_0, &[b"_pq_.a", b"_pq_.b"], &mut buf)
        .unwrap();
    let BackendMessage::NegotiateProtocolVersion(n) = decode_one(&buf) else {
        panic!()
    };
    assert_eq!(n.version(), ProtocolVersion::V3_0);
    assert_eq!(
        n.unrecognized.iter().collect::<Vec<_>>(),
        [&b"_pq_.a"[..], b"_pq_.b"]
    );
    let minor_only = NegotiateProtocolVersion {
        newest_minor: 2,
        unrecognized: CStrs::default(),
    };
    assert_eq!(minor_only.version(), ProtocolVersion::V3_2);
    // Count larger than the strings present.
    assert!(NegotiateProtocolVersion::decode(b"\0\x03\0\0\0\0\0\x02a\0").is_err());
    assert!(NegotiateProtocolVersion::decode(b"\0\x03\0\0\xff\xff\xff\xff").is_err());
}

#[test]
fn row_description_and_others() {
    let f = FieldDescription {
        name: b"id",
        table_oid: 16384,
        column_id: 1,
        type_oid: 23,
        type_size: 4,
        type_modifier: -1,
        format: 0,
    };
    let mut buf = BytesMut::new();
    encode_row_description(&[f, FieldDescription { name: b"", ..f }], &mut buf).unwrap();
    let BackendMessage::RowDescription(rd) = decode_one(&buf) else {
        panic!()
    };
    assert_eq!(
        rd.fields().collect::<Vec<_>>(),
        [f, FieldDescription { name: b"", ..f }]
    );
    assert!(RowDescription::decode(b"\0\x01id\0").is_err());

    let mut buf = BytesMut::new();
    encode_ready_for_query(TransactionStatus::Failed, &mut buf);
    assert_eq!(
        decode_one(&buf),
        BackendMessage::ReadyForQuery(TransactionStatus::Failed)
    );
    assert!(TransactionStatus::decode(b"X").is_err());

    for t in *b"123cIns" {
        let mut buf = BytesMut::new();
        encode_empty(t, &mut buf);
        assert_eq!(decode_one(&buf).tag(), t);
    }
    let mut buf = BytesMut::new();
    encode_copy_response(b'W', 1, &[1, 1], &mut buf).unwrap();
    assert!(matches!(decode_one(&buf), BackendMessage::CopyBothResponse(c) if c.format == 1));
    let mut buf = BytesMut::new();
    encode_function_call_response(None, &mut buf).unwrap();
    assert_eq!(decode_one(&buf), BackendMessage::FunctionCallResponse(None));
    let mut buf = BytesMut::new();
    encode_parameter_description(&[23, 25], &mut buf).unwrap();
    let BackendMessage::ParameterDescription(o) = decode_one(&buf) else {
        panic!()
    };
    assert_eq!(o.iter().collect::<Vec<_>>(), [23, 25]);
    let mut buf = BytesMut::new();
    Notification {
        pid: 1,
        channel: b"ch",
        payload: b"",
    }
    .encode(&mut buf)
    .unwrap();
    decode_one(&buf);
    assert_eq!(command_tag_rows(b"INSERT 0 5"), Some(5));
    assert_eq!(command_tag_rows(b"SELECT 12"), Some(12));
    assert_eq!(command_tag_rows(b"BEGIN"), None);
    assert_eq!(
        BackendMessage::decode(b'?', b""),
        Err(DecodeError::UnknownTag { tag: b'?' })
    );
}
