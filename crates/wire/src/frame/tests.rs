//! Unit tests of framing, the frame decoder and the shared array views.

use super::*;

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![tag];
    v.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn decode_frame_needs_header_then_body() {
    let f = frame(b'Z', b"I");
    for cut in 0..5 {
        assert_eq!(
            decode_frame(&f[..cut], 100),
            Ok(Decoded::NeedMore { at_least: 5 - cut })
        );
    }
    assert_eq!(
        decode_frame(&f[..5], 100),
        Ok(Decoded::NeedMore { at_least: 1 })
    );
    assert_eq!(
        decode_frame(&f, 100),
        Ok(Decoded::Frame(FrameRef {
            tag: b'Z',
            body: b"I"
        }))
    );
}

#[test]
fn lengths_are_checked_before_waiting() {
    assert_eq!(
        decode_frame(&[b'D', 0, 0, 0, 3], 100),
        Err(DecodeError::InvalidLength {
            length: 3,
            offset: 1
        })
    );
    assert_eq!(
        decode_frame(&[b'D', 0xff, 0xff, 0xff, 0xff], 100),
        Err(DecodeError::InvalidLength {
            length: -1,
            offset: 1
        })
    );
    assert_eq!(
        decode_frame(&[b'D', 0, 0, 0, 101], 100),
        Err(DecodeError::TooLarge {
            length: 101,
            max: 100
        })
    );
    let mut d = FrameDecoder::backend(Limits::uniform(1000));
    d.feed(&[b'D', 0x7f, 0xff, 0xff, 0xff]);
    assert!(matches!(d.decode(), Err(DecodeError::TooLarge { .. })));
    // Sticky, and the buffer never grew beyond what was fed.
    assert!(d.buffer_mut().capacity() < 1000);
    d.feed(&frame(b'Z', b"I"));
    assert!(matches!(d.decode(), Err(DecodeError::TooLarge { .. })));
}

#[test]
fn frame_iter_stops_at_partial_frames() {
    let mut s = frame(b'1', b"");
    s.extend(frame(b'C', b"SELECT 1\0"));
    s.extend_from_slice(&frame(b'Z', b"I")[..3]);
    let mut it = frames(&s, 1000);
    assert_eq!(it.next().map(|f| f.map(|f| f.tag)), Some(Ok(b'1')));
    assert_eq!(it.next().map(|f| f.map(|f| f.tag)), Some(Ok(b'C')));
    assert_eq!(it.next(), None);
    assert_eq!(it.consumed(), 5 + 14);
    assert_eq!(it.need_more(), Some(2));
}

#[test]
fn frontend_decoder_walks_startup_phase() {
    let mut d = FrameDecoder::frontend(Limits::postgres_server());
    let mut s = Vec::new();
    s.extend_from_slice(&8u32.to_be_bytes());
    s.extend_from_slice(&SSL_REQUEST_CODE.to_be_bytes());
    s.extend_from_slice(&9u32.to_be_bytes());
    s.extend_from_slice(&ProtocolVersion::V3_0.0.to_be_bytes());
    s.push(0);
    s.extend(frame(b'Q', b"select 1\0"));
    for &b in &s {
        d.feed(&[b]);
    }
    let Ok(Decoded::Frame(Unit::Startup(p))) = d.decode() else {
        panic!("ssl request")
    };
    assert_eq!(p.kind(), StartupKind::SslRequest);
    assert_eq!(d.phase(), Phase::Startup);
    let Ok(Decoded::Frame(Unit::Startup(p))) = d.decode() else {
        panic!("startup")
    };
    assert_eq!(p.kind(), StartupKind::Startup(ProtocolVersion::V3_0));
    assert_eq!(p.wire().len(), 9);
    let Ok(Decoded::Frame(Unit::Typed(f))) = d.decode() else {
        panic!("query")
    };
    assert_eq!((f.tag(), f.body()), (b'Q', &b"select 1\0"[..]));
    assert_eq!(d.decode(), Ok(Decoded::NeedMore { at_least: 5 }));
}

#[test]
fn presets_equal_tables_built_by_hand() {
    let mut server = Limits::uniform(SMALL_MESSAGE_MAX);
    for &t in b"QPBFd" {
        server = server.with_tag_max(t, LARGE_MESSAGE_MAX);
    }
    server = server.with_tag_max(b'p', AUTH_MESSAGE_MAX);
    assert_eq!(server, Limits::postgres_server());
    let mut client = Limits::uniform(LIBPQ_SMALL_MESSAGE_MAX);
    for &t in b"TDdVENA" {
        client = client.with_tag_max(t, BACKEND_MESSAGE_MAX);
    }
    assert_eq!(client, Limits::libpq_client());
    assert_ne!(client, Limits::postgres_server());
    // Customising a shared preset copies it; the preset itself stays as it was.
    let custom = Limits::postgres_server().with_tag_max(b'Q', 100);
    assert_eq!(custom.tag_max(b'Q'), 100);
    assert_eq!(
        Limits::postgres_server().tag_max(b'Q'),
        LARGE_MESSAGE_MAX as usize
    );
    assert_eq!(Limits::default().tag_max(b'x'), LARGE_MESSAGE_MAX as usize);
}

#[test]
fn startup_limits_and_direct_tls() {
    let mut d = FrameDecoder::frontend(Limits::default());
    d.feed(&[0, 0, 0, 7]);
    assert_eq!(
        d.decode(),
        Err(DecodeError::InvalidLength {
            length: 7,
            offset: 0
        })
    );
    let mut d = FrameDecoder::frontend(Limits::default());
    d.feed(&10_005u32.to_be_bytes());
    assert_eq!(
        d.decode(),
        Err(DecodeError::TooLarge {
            length: 10_005,
            max: 10_004
        })
    );
    let mut d = FrameDecoder::frontend(Limits::default());
    d.feed(&[0x16, 3, 1]);
    assert!(matches!(d.decode(), Err(DecodeError::Invalid { .. })));
}

#[test]
fn backend_decoder_reads_one_byte_after_ssl_request() {
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.expect_encryption_response(EncryptionRequest::Ssl);
    d.feed(b"N");
    assert_eq!(d.decode(), Ok(Decoded::Frame(Unit::Byte(b'N'))));
    assert_eq!(d.phase(), Phase::Typed);

    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.expect_encryption_response(EncryptionRequest::Ssl);
    d.feed(b"S");
    assert_eq!(d.decode_ref(), Ok(Decoded::Frame(UnitRef::Byte(b'S'))));
    assert_eq!(d.phase(), Phase::Encrypted);
    d.feed(b"x");
    assert!(d.decode().is_err());

    // Buffer stuffing: bytes behind the `S`.
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.expect_encryption_response(EncryptionRequest::Ssl);
    d.feed(b"Sxx");
    assert!(matches!(
        d.decode(),
        Err(DecodeError::Invalid { offset: 1, .. })
    ));

    // `G` is not an answer to SSLRequest.
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.expect_encryption_response(EncryptionRequest::Ssl);
    d.feed(b"G");
    assert!(d.decode().is_err());

    // An old server's ErrorResponse is decoded as a typed frame.
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.expect_encryption_response(EncryptionRequest::GssEnc);
    d.feed(&frame(b'E', b"\0"));
    assert!(matches!(
        d.decode(),
        Ok(Decoded::Frame(Unit::Typed(f))) if f.tag() == b'E'
    ));
}

#[test]
fn cancel_request_finishes_the_stream() {
    let mut d = FrameDecoder::frontend(Limits::default());
    let mut s = 16u32.to_be_bytes().to_vec();
    s.extend_from_slice(&CANCEL_REQUEST_CODE.to_be_bytes());
    s.extend_from_slice(&[0, 0, 0, 1, 9, 9, 9, 9]);
    d.feed(&s);
    assert!(matches!(d.decode(), Ok(Decoded::Frame(Unit::Startup(_)))));
    assert_eq!(d.phase(), Phase::Finished);
    assert_eq!(d.decode(), Ok(Decoded::NeedMore { at_least: 1 }));
    d.feed(b"Q");
    assert!(d.decode().is_err());
}

#[test]
fn owned_and_borrowed_paths_agree() {
    let mut s = frame(b'D', &[0, 1, 0, 0, 0, 1, b'x']);
    s.extend(frame(b'Z', b"I"));
    let mut a = FrameDecoder::backend(Limits::default());
    let mut b = FrameDecoder::backend(Limits::default());
    a.feed(&s);
    b.feed(&s);
    for _ in 0..2 {
        let Ok(Decoded::Frame(Unit::Typed(fa))) = a.decode() else {
            panic!()
        };
        let Ok(Decoded::Frame(UnitRef::Typed(fb))) = b.decode_ref() else {
            panic!()
        };
        assert_eq!(fa.as_ref(), fb);
        assert_eq!(Frame::from_wire(fa.wire().clone()), Ok(fa.clone()));
    }
}

#[test]
fn limits_presets() {
    let s = Limits::postgres_server();
    assert_eq!(s.tag_max(b'S'), 10_000);
    assert_eq!(s.tag_max(b'B'), LARGE_MESSAGE_MAX as usize);
    assert_eq!(s.tag_max(b'p'), 65_535);
    let c = Limits::libpq_client();
    assert_eq!(c.tag_max(b'Z'), 30_000);
    assert_eq!(c.tag_max(b'D'), BACKEND_MESSAGE_MAX as usize);
    assert_eq!(ProtocolVersion::V3_2.minor(), 2);
    assert!(ProtocolVersion::V3_2.has_variable_cancel_key());
    assert!(!ProtocolVersion::V3_0.has_variable_cancel_key());
}

/// A walsender's CopyData as long as a server can make one is accepted (its header is read
/// and the rest awaited); four bytes more is not something a server sends.
#[test]
fn the_longest_copy_data_a_server_sends_is_accepted() {
    let head = |len: u32| {
        let mut h = vec![b'd'];
        h.extend_from_slice(&len.to_be_bytes());
        h
    };
    let max = BACKEND_MESSAGE_MAX;
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.feed(&head(max));
    assert_eq!(
        d.decode(),
        Ok(Decoded::NeedMore {
            at_least: max as usize - 4
        })
    );
    assert_eq!(
        decode_frame(&head(max), max as usize),
        Ok(Decoded::NeedMore {
            at_least: max as usize - 4
        })
    );
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    d.feed(&head(max + 1));
    assert!(matches!(d.decode(), Err(DecodeError::TooLarge { .. })));
    // 100 MB, whole: the frame decodes and borrows its body.
    let body = vec![7u8; 100 << 20];
    let mut wire = head(body.len() as u32 + 4);
    wire.extend_from_slice(&body);
    let Ok(Decoded::Frame(f)) = decode_frame(&wire, max as usize) else {
        panic!("a 100 MB CopyData is refused")
    };
    assert_eq!((f.tag, f.body.len()), (b'd', 100 << 20));
}
