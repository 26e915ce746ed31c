//! Entry points for fuzz targets and corpus replays; each must never panic on any bytes.

#[cfg(feature = "arbitrary")]
pub(crate) mod roundtrip;
#[cfg(feature = "arbitrary")]
pub use roundtrip::{
    roundtrip_backend, roundtrip_frontend, roundtrip_middleware, roundtrip_pgoutput,
    roundtrip_replication, roundtrip_scram,
};

/// Streaming-replication CopyData payloads and replication-command rows: decoding never
/// panics, and whatever decodes re-encodes to the same bytes.
pub fn replication_messages(data: &[u8]) {
    use crate::replication::{CreatedSlot, IdentifySystem, ReadSlot, ReplicationMessage};
    if let Ok(m) = ReplicationMessage::decode(data) {
        assert_eq!(
            &m.to_bytes()[..],
            data,
            "replication message re-encodes differently"
        );
        assert_eq!(m.encoded_len(), data.len());
        assert_eq!(
            ReplicationMessage::decode_from_server(data).is_ok(),
            m.is_from_server()
        );
        assert_eq!(
            ReplicationMessage::decode_from_client(data).is_ok(),
            !m.is_from_server()
        );
    }
    // The same bytes as a result row: fields separated by NUL, an empty field is NULL.
    let fields: Vec<Option<&[u8]>> = data
        .split(|&b| b == 0)
        .take(5)
        .map(|f| (!f.is_empty()).then_some(f))
        .collect();
    let _ = IdentifySystem::from_row(&fields);
    let _ = CreatedSlot::from_row(&fields);
    let _ = ReadSlot::from_row(&fields);
}

/// pgoutput messages, alone and as a stream: the first byte picks the protocol version; the
/// rest is a sequence of `[length: u8][payload]` chunks fed to a stateful decoder. Decoding never
/// panics, and whatever decodes re-encodes to the same bytes.
pub fn pgoutput_messages(data: &[u8]) {
    use crate::pgoutput::{PgOutputDecoder, PgOutputMessage, ProtoVersion};
    for in_stream in [false, true] {
        if let Ok(m) = PgOutputMessage::decode(data, in_stream) {
            let again = m.to_bytes();
            assert_eq!(
                again.as_deref(),
                Ok(data),
                "pgoutput message re-encodes differently"
            );
        }
    }
    let Some((&first, mut rest)) = data.split_first() else {
        return;
    };
    let version = ProtoVersion::ALL[usize::from(first % 4)];
    let mut decoder = PgOutputDecoder::new(version);
    while let Some((&len, tail)) = rest.split_first() {
        let n = usize::from(len).min(tail.len());
        let (payload, next) = tail.split_at(n);
        rest = next;
        let in_stream = decoder.in_stream();
        if let Ok(m) = decoder.decode(payload) {
            assert_eq!(m.to_bytes().as_deref(), Ok(payload));
            assert!(m.min_proto_version() <= version);
            assert_eq!(PgOutputMessage::decode(payload, in_stream), Ok(m));
        }
    }
}

/// The SCRAM client (and the authentication driver) against hostile server messages. The first
/// byte picks channel binding, TLS, the offered mechanisms and whether server-first starts with
/// the right nonce (to reach deeper checks); the rest, split at the first `0xFF`, is server-first
/// and server-final. Never panics; the iteration cap keeps PBKDF2 cheap.
pub fn scram_client(data: &[u8]) {
    use crate::auth::{
        AuthClient, AuthConfig, AuthRequest, ChannelBinding, ScramClient, SCRAM_SHA_256,
        SCRAM_SHA_256_PLUS,
    };
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let channel_binding = match flags & 3 {
        0 => ChannelBinding::Disable,
        1 => ChannelBinding::Prefer,
        _ => ChannelBinding::Require,
    };
    let tls: Option<&[u8]> = (flags & 4 != 0).then_some(&[0x5a; 32]);
    let offered: &[&str] = if flags & 16 != 0 {
        &[SCRAM_SHA_256_PLUS, SCRAM_SHA_256]
    } else {
        &[SCRAM_SHA_256]
    };
    let (server_first, server_final) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut client = ScramClient::new("pw", channel_binding, tls, [7; 18]).with_max_iterations(16);
    if client.client_first(offered).is_ok() {
        let mut first = Vec::new();
        if flags & 8 != 0 {
            first.extend_from_slice(b"r=");
            first.extend_from_slice(client.client_nonce().as_bytes());
        }
        first.extend_from_slice(server_first);
        let _ = client.handle_server_first(&first);
        let _ = client.handle_server_final(server_final);
        let _ = client.is_channel_bound();
    }
    let mut driver = AuthClient::new(
        AuthConfig {
            user: "u".into(),
            password: Some(b"pw".to_vec()),
            channel_binding,
            tls_end_point: tls.map(<[u8]>::to_vec),
            max_iterations: Some(16),
            secret: None,
        },
        [7; 18],
    );
    for body in [server_first, server_final] {
        if let Ok(request) = AuthRequest::decode(body) {
            let _ = driver.handle_request(request);
        }
    }
}

/// The SCRAM server (as the simulator runs it) against hostile client messages. The first
/// byte picks TLS, the mechanism and whether the messages start with well-formed prefixes (the
/// client-final prefix carries the right channel binding and nonce, so the proof check runs);
/// the rest, split at the first `0xFF`, is client-first and client-final. Never panics.
pub fn scram_server(data: &[u8]) {
    use crate::auth::{scram_secret, ScramServer, SCRAM_SHA_256, SCRAM_SHA_256_PLUS};
    use base64::Engine as _;
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let tls: Option<&[u8]> = (flags & 1 != 0).then_some(&[0x5a; 32]);
    let plus = flags & 2 != 0;
    let mechanism = if plus {
        SCRAM_SHA_256_PLUS
    } else {
        SCRAM_SHA_256
    };
    let gs2: &[u8] = if plus {
        b"p=tls-server-end-point,,"
    } else {
        b"n,,"
    };
    let (client_first, client_final) = match rest.iter().position(|&b| b == 0xff) {
        Some(i) => (&rest[..i], &rest[i + 1..]),
        None => (rest, &[][..]),
    };
    let mut server = ScramServer::new(scram_secret("pw", b"salt", 1), tls, [9; 18]);
    let _ = server.mechanisms();
    let mut first = Vec::new();
    if flags & 4 != 0 {
        first.extend_from_slice(gs2);
        first.extend_from_slice(b"n=,r=");
    }
    first.extend_from_slice(client_first);
    let Ok(server_first) = server.handle_client_first(mechanism.as_bytes(), &first) else {
        let _ = server.handle_client_final(client_final);
        return;
    };
    let mut last = Vec::new();
    if flags & 8 != 0 {
        let nonce_end = server_first
            .iter()
            .position(|&b| b == b',')
            .unwrap_or(server_first.len());
        let mut cbind = gs2.to_vec();
        if plus {
            cbind.extend_from_slice(tls.unwrap_or_default());
        }
        last.extend_from_slice(b"c=");
        last.extend_from_slice(
            base64::engine::general_purpose::STANDARD
                .encode(&cbind)
                .as_bytes(),
        );
        last.extend_from_slice(b",");
        last.extend_from_slice(server_first.get(..nonce_end).unwrap_or_default());
    }
    last.extend_from_slice(client_final);
    let _ = server.handle_client_final(&last);
    let _ = (server.is_complete(), server.is_channel_bound());
}

/// Feeds `data` to a decoder and collects the units it yields (owned and borrowed paths in
/// lockstep) until it needs more or fails.
fn frame_units(
    mut make: impl FnMut() -> crate::frame::FrameDecoder,
    chunks: &mut dyn Iterator<Item = &[u8]>,
) -> (Vec<crate::frame::Unit>, Option<crate::DecodeError>) {
    use crate::frame::{Decoded, Unit, UnitRef};
    let mut owned = make();
    let mut borrowed = make();
    let mut units = Vec::new();
    for chunk in chunks {
        owned.feed(chunk);
        borrowed.feed(chunk);
        loop {
            let a = owned.decode();
            let b = borrowed.decode_ref();
            match (a, b) {
                (Ok(Decoded::Frame(u)), Ok(Decoded::Frame(r))) => {
                    let same = match (&u, r) {
                        (Unit::Typed(f), UnitRef::Typed(g)) => f.as_ref() == g,
                        (Unit::Startup(p), UnitRef::Startup(body)) => p.body() == body,
                        (Unit::Byte(x), UnitRef::Byte(y)) => *x == y,
                        _ => false,
                    };
                    assert!(same, "owned and borrowed decoders disagree");
                    units.push(u);
                }
                (Ok(Decoded::NeedMore { at_least: x }), Ok(Decoded::NeedMore { at_least: y })) => {
                    assert_eq!(x, y);
                    assert!(x > 0);
                    break;
                }
                (Err(x), Err(y)) => {
                    assert_eq!(&x, &y);
                    assert_eq!(owned.decode().err(), Some(x.clone()), "errors are sticky");
                    return (units, Some(x));
                }
                _ => panic!("owned and borrowed decoders disagree"),
            }
        }
    }
    (units, None)
}

/// The phase-aware frame decoder on arbitrary bytes. The first byte picks the side, the
/// starting phase and a chunk size; the rest is decoded fed whole and fed in chunks, with
/// the owned and the borrowed API: all runs must agree, and every typed frame must re-frame
/// to its own bytes.
pub fn frames(data: &[u8]) {
    use crate::frame::{
        decode_frame, Decoded, EncryptionRequest, Frame, FrameDecoder, Limits, Phase, Unit,
    };
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let limits = Limits::uniform(4096).with_startup_body_max(2048);
    let phase = match flags & 3 {
        0 => Phase::Startup,
        1 => Phase::Typed,
        2 => Phase::EncryptionResponse(EncryptionRequest::Ssl),
        _ => Phase::EncryptionResponse(EncryptionRequest::GssEnc),
    };
    let make = || FrameDecoder::with_phase(phase, limits.clone());
    let whole = frame_units(make, &mut std::iter::once(rest));
    let chunk = usize::from(flags >> 2) + 1;
    let pieces = frame_units(make, &mut rest.chunks(chunk));
    // After an encryption answer the outcome depends on what was buffered with it (the
    // buffer-stuffing check), so only the other phases must be split-invariant.
    if !matches!(phase, Phase::EncryptionResponse(_)) {
        assert_eq!(whole, pieces, "splitting the input changed the frames");
    }
    for unit in &whole.0 {
        if let Unit::Typed(f) = unit {
            assert_eq!(Frame::from_wire(f.wire().clone()).as_ref(), Ok(f));
            let mut again = vec![f.tag()];
            again.extend_from_slice(&(f.body().len() as u32 + 4).to_be_bytes());
            again.extend_from_slice(f.body());
            assert_eq!(&again[..], &f.wire()[..]);
        }
    }
    // The slice API agrees with a typed-phase decoder.
    if phase == Phase::Typed {
        let mut at = 0;
        let mut n = 0;
        while let Ok(Decoded::Frame(f)) = decode_frame(&rest[at..], 4096) {
            assert!(matches!(whole.0.get(n), Some(Unit::Typed(g)) if g.as_ref() == f));
            at += f.wire_len();
            n += 1;
        }
        assert_eq!(n, whole.0.len());
    }
}

/// Frontend messages: the first byte picks whether decoding starts in the startup phase;
/// every startup packet and typed message that decodes (under each interpretation of `p`)
/// must re-encode to its exact bytes.
pub fn frontend_messages(data: &[u8]) {
    use crate::frame::{Decoded, FrameDecoder, Limits, Phase, Unit};
    use crate::frontend::{AuthResponseKind, FrontendMessage, StartupPacket};
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let phase = if flags & 1 == 0 {
        Phase::Startup
    } else {
        Phase::Typed
    };
    let mut d = FrameDecoder::with_phase(phase, Limits::postgres_server());
    d.feed(rest);
    while let Ok(Decoded::Frame(unit)) = d.decode() {
        let mut out = bytes::BytesMut::new();
        match unit {
            Unit::Startup(p) => {
                if let Ok(m) = StartupPacket::decode(p.body()) {
                    m.encode(&mut out)
                        .expect("a decoded startup packet re-encodes");
                    assert_eq!(&out[..], &p.wire()[..]);
                    if let StartupPacket::Startup(s) = m {
                        let _ = (s.params.iter().count(), s.params.user());
                        let _ = s.params.protocol_options().count();
                    }
                }
            }
            Unit::Typed(f) => {
                let kinds = [
                    None,
                    Some(AuthResponseKind::Password),
                    Some(AuthResponseKind::Gss),
                    Some(AuthResponseKind::SaslInitial),
                    Some(AuthResponseKind::Sasl),
                ];
                for auth in kinds {
                    if let Ok(m) = FrontendMessage::decode_with(f.tag(), f.body(), auth) {
                        out.clear();
                        m.encode(&mut out).expect("a decoded message re-encodes");
                        assert_eq!(&out[..], &f.wire()[..], "{m:?}");
                        assert_eq!(m.tag(), f.tag());
                        if let FrontendMessage::Bind(b) = m {
                            assert_eq!(b.params.iter().count(), b.params.len());
                        }
                    }
                }
            }
            Unit::Byte(_) => {}
        }
    }
}

/// Backend messages: the first byte picks whether an encryption answer is expected first;
/// every message that decodes must re-encode to its exact bytes, and its lazy views must
/// iterate without panicking.
pub fn backend_messages(data: &[u8]) {
    use crate::backend::BackendMessage;
    use crate::error_fields::Verbosity;
    use crate::frame::{Decoded, EncryptionRequest, FrameDecoder, Limits, Unit};
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut d = FrameDecoder::backend(Limits::libpq_client());
    if flags & 1 != 0 {
        d.expect_encryption_response(EncryptionRequest::Ssl);
    }
    d.feed(rest);
    while let Ok(Decoded::Frame(unit)) = d.decode() {
        let Unit::Typed(f) = unit else {
            continue;
        };
        let Ok(m) = BackendMessage::decode(f.tag(), f.body()) else {
            continue;
        };
        let mut out = bytes::BytesMut::new();
        m.encode(&mut out).expect("a decoded message re-encodes");
        assert_eq!(&out[..], &f.wire()[..], "{m:?}");
        assert_eq!(m.tag(), f.tag());
        match m {
            BackendMessage::DataRow(r) => assert_eq!(r.fields().count(), r.len()),
            BackendMessage::RowDescription(r) => assert_eq!(r.fields().count(), r.len()),
            BackendMessage::ErrorResponse(e) | BackendMessage::NoticeResponse(e) => {
                let _ = (
                    e.render(Verbosity::Verbose, true),
                    e.sqlstate(),
                    e.to_string(),
                );
            }
            BackendMessage::NegotiateProtocolVersion(n) => {
                let _ = (n.version(), n.unrecognized.iter().count());
            }
            BackendMessage::Authentication(crate::backend::Authentication::Sasl(m)) => {
                assert_eq!(m.iter().count(), m.len());
            }
            _ => {}
        }
    }
}

/// The middleware splitter: the first byte picks the starting phase and a chunk size. Fed
/// whole and in chunks it must surface the same items; forwarded bytes and middleware frames,
/// concatenated in order, must be exactly the consumed prefix of the input; every middleware
/// message must re-encode to its frame.
pub fn middleware_split(data: &[u8]) {
    use crate::frame::{Decoded, Limits};
    use crate::middleware::{SplitItem, SplitPhase, Splitter, MIDDLEWARE_TAG};
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let phase = if flags & 1 == 0 {
        SplitPhase::Startup
    } else {
        SplitPhase::Typed
    };
    let limits = Limits::uniform(4096).with_tag_max(MIDDLEWARE_TAG, 512);
    let run = |chunks: &mut dyn Iterator<Item = &[u8]>| {
        let mut s = Splitter::with_phase(phase, limits.clone());
        let mut forwarded = Vec::new();
        let mut middleware = Vec::new();
        let mut rebuilt = Vec::new();
        let mut failed = false;
        'feed: for chunk in chunks {
            s.feed(chunk);
            loop {
                match s.split() {
                    Ok(Decoded::Frame(SplitItem::Forward(b))) => {
                        assert!(!b.is_empty());
                        forwarded.extend_from_slice(&b);
                        rebuilt.extend_from_slice(&b);
                    }
                    Ok(Decoded::Frame(SplitItem::Middleware(m))) => {
                        let mut again = bytes::BytesMut::new();
                        m.as_message().encode(&mut again).expect("re-encodes");
                        assert_eq!(&again[..], &m.wire()[..]);
                        assert_eq!(m.payload(), m.wire().slice(13..));
                        rebuilt.extend_from_slice(m.wire());
                        middleware.push(m);
                    }
                    Ok(Decoded::NeedMore { .. }) => break,
                    Err(_) => {
                        assert!(s.split().is_err(), "errors are sticky");
                        failed = true;
                        break 'feed;
                    }
                }
            }
        }
        assert_eq!(&rebuilt[..], &rest[..rebuilt.len()]);
        if !failed {
            assert_eq!(rebuilt.len() + s.buffered(), rest.len());
        }
        (forwarded, middleware, failed)
    };
    let whole = run(&mut std::iter::once(rest));
    let chunk = usize::from(flags >> 1) + 1;
    let pieces = run(&mut rest.chunks(chunk));
    assert_eq!(whole, pieces, "splitting the input changed the split");
}
