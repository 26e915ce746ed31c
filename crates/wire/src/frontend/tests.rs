//! Unit tests of the frontend messages: fixed bytes, round trips and malformed bodies.

use super::builders::has_nul;
use super::*;
use crate::frame::{decode_frame, Decoded, ProtocolVersion, CANCEL_REQUEST_CODE};

fn round_trip(m: FrontendMessage<'_>, auth: Option<AuthResponseKind>) -> Vec<u8> {
    let mut buf = BytesMut::new();
    m.encode(&mut buf).unwrap();
    let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
        panic!("frame")
    };
    assert_eq!(f.wire_len(), buf.len());
    let back = FrontendMessage::decode_with(f.tag, f.body, auth).unwrap();
    assert_eq!(back, m);
    buf.to_vec()
}

#[test]
fn simple_messages_have_fixed_bytes() {
    assert_eq!(round_trip(FrontendMessage::Sync, None), b"S\0\0\0\x04");
    assert_eq!(round_trip(FrontendMessage::Flush, None), b"H\0\0\0\x04");
    assert_eq!(round_trip(FrontendMessage::Terminate, None), b"X\0\0\0\x04");
    assert_eq!(round_trip(FrontendMessage::CopyDone, None), b"c\0\0\0\x04");
    assert_eq!(
        round_trip(FrontendMessage::Query(b"select 1"), None),
        b"Q\0\0\0\x0dselect 1\0"
    );
    assert_eq!(
        round_trip(
            FrontendMessage::Execute(Execute {
                portal: b"",
                max_rows: 0
            }),
            None
        ),
        b"E\0\0\0\x09\0\0\0\0\0"
    );
    assert_eq!(
        round_trip(
            FrontendMessage::Describe(TargetName {
                target: Target::Portal,
                name: b""
            }),
            None
        ),
        b"D\0\0\0\x06P\0"
    );
}

#[test]
fn bind_parse_function_call() {
    let mut buf = BytesMut::new();
    encode_bind(b"p", b"s", &[1], &[Some(b"42"), None], &[0, 1], &mut buf).unwrap();
    let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
        panic!()
    };
    let FrontendMessage::Bind(b) = FrontendMessage::decode(f.tag, f.body).unwrap() else {
        panic!()
    };
    assert_eq!((b.portal, b.statement), (&b"p"[..], &b"s"[..]));
    assert_eq!(b.param_formats.iter().collect::<Vec<_>>(), [1]);
    assert_eq!(
        b.params.iter().collect::<Vec<_>>(),
        [Some(&b"42"[..]), None]
    );
    assert_eq!(b.result_formats.iter().collect::<Vec<_>>(), [0, 1]);
    assert_eq!(b.result_formats.for_index(1), Some(1));
    round_trip(FrontendMessage::Bind(b), None);

    let mut buf = BytesMut::new();
    encode_parse(b"s1", b"select $1", &[23], &mut buf).unwrap();
    let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
        panic!()
    };
    let FrontendMessage::Parse(p) = FrontendMessage::decode(f.tag, f.body).unwrap() else {
        panic!()
    };
    assert_eq!(p.param_types.iter().collect::<Vec<_>>(), [23]);

    let mut buf = BytesMut::new();
    encode_function_call(1598, &[], &[None, Some(b"")], 1, &mut buf).unwrap();
    let Ok(Decoded::Frame(f)) = decode_frame(&buf, usize::MAX) else {
        panic!()
    };
    let m = FrontendMessage::decode(f.tag, f.body).unwrap();
    round_trip(m, None);
}

#[test]
fn auth_responses_need_context() {
    let mut buf = BytesMut::new();
    encode_sasl_initial_response(b"SCRAM-SHA-256", Some(b"n,,n=,r=abc"), &mut buf).unwrap();
    let body = &buf[5..];
    assert_eq!(
        FrontendMessage::decode(b'p', body),
        Ok(FrontendMessage::AuthResponse(body))
    );
    let m = decode_auth_response(AuthResponseKind::SaslInitial, body).unwrap();
    assert_eq!(
        m,
        FrontendMessage::SaslInitialResponse(SaslInitialResponse {
            mechanism: b"SCRAM-SHA-256",
            data: Some(b"n,,n=,r=abc")
        })
    );
    round_trip(m, Some(AuthResponseKind::SaslInitial));
    round_trip(
        FrontendMessage::SaslInitialResponse(SaslInitialResponse {
            mechanism: b"X",
            data: None,
        }),
        Some(AuthResponseKind::SaslInitial),
    );
    round_trip(
        FrontendMessage::PasswordMessage(b"md5abc"),
        Some(AuthResponseKind::Password),
    );
    round_trip(
        FrontendMessage::GssResponse(b"\0tok"),
        Some(AuthResponseKind::Gss),
    );
    round_trip(
        FrontendMessage::SaslResponse(b"c=biws"),
        Some(AuthResponseKind::Sasl),
    );
    // A password body without its terminator is malformed.
    assert!(decode_auth_response(AuthResponseKind::Password, b"abc").is_err());
}

#[test]
fn startup_packets() {
    let mut buf = BytesMut::new();
    encode_startup(
        ProtocolVersion::V3_2,
        &[
            (b"user", b"alice"),
            (b"database", b"db"),
            (b"_pq_.opt", b"1"),
        ],
        &mut buf,
    )
    .unwrap();
    assert_eq!(&buf[..4], &(buf.len() as u32).to_be_bytes());
    let StartupPacket::Startup(s) = StartupPacket::decode(&buf[4..]).unwrap() else {
        panic!()
    };
    assert_eq!(s.version, ProtocolVersion::V3_2);
    assert_eq!(s.params.user(), Some(&b"alice"[..]));
    assert_eq!(s.params.database(), Some(&b"db"[..]));
    assert_eq!(
        s.params.protocol_options().collect::<Vec<_>>(),
        [(&b"_pq_.opt"[..], &b"1"[..])]
    );
    let mut again = BytesMut::new();
    StartupPacket::Startup(s).encode(&mut again).unwrap();
    assert_eq!(again, buf);

    // The terminator must be the last byte, and values must be terminated.
    let mut body = ProtocolVersion::V3_0.0.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0a\0\0x");
    assert!(matches!(
        StartupPacket::decode(&body),
        Err(DecodeError::TrailingBytes { .. })
    ));
    let mut body = ProtocolVersion::V3_0.0.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0a");
    assert!(StartupPacket::decode(&body).is_err());
    let mut body = ProtocolVersion::V3_0.0.to_be_bytes().to_vec();
    body.extend_from_slice(b"user\0a\0");
    assert!(matches!(
        StartupPacket::decode(&body),
        Err(DecodeError::MissingTerminator { .. })
    ));

    let mut buf = BytesMut::new();
    encode_ssl_request(&mut buf);
    assert_eq!(&buf[..], &[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f]);
    assert_eq!(
        StartupPacket::decode(&buf[4..]),
        Ok(StartupPacket::SslRequest)
    );
    let mut buf = BytesMut::new();
    encode_gssenc_request(&mut buf);
    assert_eq!(
        StartupPacket::decode(&buf[4..]),
        Ok(StartupPacket::GssEncRequest)
    );
    assert!(StartupPacket::decode(&[0x04, 0xd2, 0x16, 0x2f, 0]).is_err());
}

#[test]
fn cancel_requests_3_0_and_3_2() {
    for key in [
        &[1u8, 2, 3, 4][..],
        &[7u8; 32][..],
        &[9u8; 256][..],
        &[1u8][..],
    ] {
        let mut buf = BytesMut::new();
        encode_cancel_request(1234, key, &mut buf).unwrap();
        assert_eq!(buf.len(), 12 + key.len());
        let p = StartupPacket::decode(&buf[4..]).unwrap();
        assert_eq!(
            p,
            StartupPacket::CancelRequest(CancelRequest { pid: 1234, key })
        );
    }
    let mut buf = BytesMut::new();
    assert!(encode_cancel_request(1, &[], &mut buf).is_err());
    assert!(encode_cancel_request(1, &[0; 257], &mut buf).is_err());
    let mut body = CANCEL_REQUEST_CODE.to_be_bytes().to_vec();
    body.extend_from_slice(&[0, 0, 0, 1]);
    assert!(StartupPacket::decode(&body).is_err());
    body.extend_from_slice(&[0; 257]);
    assert!(StartupPacket::decode(&body).is_err());
}

#[test]
fn malformed_bodies_are_rejected() {
    // Close with a bad target byte.
    assert!(matches!(
        FrontendMessage::decode(b'C', b"X\0"),
        Err(DecodeError::Invalid { offset: 0, .. })
    ));
    // Sync with a body.
    assert!(FrontendMessage::decode(b'S', b"x").is_err());
    // Bind whose parameter count overruns the frame.
    assert!(matches!(
        FrontendMessage::decode(b'B', b"\0\0\0\0\xff\xff"),
        Err(DecodeError::InvalidCount { count: 65535, .. })
    ));
    // Bind whose value length overruns the frame.
    assert!(matches!(
        FrontendMessage::decode(b'B', b"\0\0\0\0\0\x01\0\0\0\x09ab\0\0"),
        Err(DecodeError::InvalidLength { length: 9, .. })
    ));
    // Query without its terminator.
    assert!(matches!(
        FrontendMessage::decode(b'Q', b"select"),
        Err(DecodeError::MissingTerminator { .. })
    ));
    assert_eq!(
        FrontendMessage::decode(b'M', b""),
        Err(DecodeError::UnknownTag { tag: b'M' })
    );
    // Encoders refuse embedded NULs and leave the buffer untouched.
    let mut buf = BytesMut::from(&b"keep"[..]);
    assert_eq!(
        encode_query(b"a\0b", &mut buf),
        Err(EncodeError::NulInString { what: "query" })
    );
    assert_eq!(&buf[..], b"keep");
    let many = vec![None; 70_000];
    assert!(encode_bind(b"", b"", &[], &many, &[], &mut buf).is_err());
    assert_eq!(&buf[..], b"keep");
}

#[test]
fn sixty_five_thousand_parameters_are_allowed() {
    let params = vec![None; 65_535];
    let mut buf = BytesMut::new();
    encode_bind(b"", b"", &[], &params, &[], &mut buf).unwrap();
    let b = Bind::decode(&buf[5..]).unwrap();
    assert_eq!(b.params.len(), 65_535);
}

#[test]
fn word_at_a_time_nul_check_agrees_with_a_byte_search() {
    let alphabet = [0u8, 1, 0x7f, 0x80, 0x81, 0xff, b'a'];
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    for len in 0..40 {
        for _ in 0..200 {
            let v: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    alphabet[(state % alphabet.len() as u64) as usize]
                })
                .collect();
            assert_eq!(has_nul(&v), v.contains(&0), "{v:?}");
        }
    }
}
