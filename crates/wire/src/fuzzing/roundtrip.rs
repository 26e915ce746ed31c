//! Round trips of generated messages ([`crate::arb`]): each function turns the input into
//! messages with [`arbitrary::Unstructured`], encodes each, decodes it, and asserts the decoded
//! message equals the generated one and re-encodes to the same bytes. The generators only make
//! what the protocol allows, so any failure is a codec (or generator) bug.

use arbitrary::{Arbitrary, Unstructured};
use bytes::BytesMut;

use crate::arb::{
    OwnedBackend, OwnedFrontend, OwnedMiddleware, OwnedPgOutput, OwnedReplication, OwnedStartup,
    ScramExchange,
};
use crate::backend::BackendMessage;
use crate::frame::{decode_frame, Decoded, FrameDecoder, FrameRef, Limits, Phase, Unit};
use crate::frontend::{AuthResponseKind, FrontendMessage, StartupPacket};

/// Messages generated per input at most: enough to cover sequences, few enough to stay fast.
const PER_INPUT: usize = 8;

/// Runs `each` on up to [`PER_INPUT`] values generated from `data`, stopping when the input
/// is used up.
fn generate_each<'a, T: Arbitrary<'a>>(data: &'a [u8], mut each: impl FnMut(&T)) {
    let mut u = Unstructured::new(data);
    for _ in 0..PER_INPUT {
        let Ok(value) = T::arbitrary(&mut u) else {
            return;
        };
        each(&value);
        if u.is_empty() {
            return;
        }
    }
}

/// The one whole frame of `wire`.
fn single_frame(wire: &[u8]) -> FrameRef<'_> {
    match decode_frame(wire, usize::MAX) {
        Ok(Decoded::Frame(f)) => {
            assert_eq!(f.wire_len(), wire.len(), "one message encodes to one frame");
            f
        }
        other => panic!("an encoded message does not frame: {other:?}"),
    }
}

/// Feeds `wire` (one encoded message) to a phase-aware decoder in two pieces: it must yield
/// exactly that message when its length is within `fits`, and fail otherwise.
fn check_framing(phase: Phase, limits: Limits, wire: &[u8], fits: bool) {
    let mut d = FrameDecoder::with_phase(phase, limits);
    let (first, second) = wire.split_at(wire.len() / 2);
    let mut unit = None;
    for piece in [first, second] {
        d.feed(piece);
        match d.decode() {
            Ok(Decoded::Frame(u)) => {
                unit = Some(u);
                break;
            }
            Ok(Decoded::NeedMore { .. }) => {}
            Err(e) => {
                assert!(
                    !fits,
                    "a decoder refused {} bytes within its limits: {e}",
                    wire.len()
                );
                return;
            }
        }
    }
    assert!(
        fits,
        "a decoder took {} bytes beyond its limits",
        wire.len()
    );
    let framed = match unit {
        Some(Unit::Typed(f)) => f.into_wire(),
        Some(Unit::Startup(p)) => p.into_wire(),
        other => panic!("a decoder made {other:?} of {} bytes", wire.len()),
    };
    assert_eq!(&framed[..], wire);
    assert_eq!(d.buffered(), 0);
}

/// Encode, decode (as a `p` message of `kind` when given), compare, re-encode.
pub(crate) fn check_frontend(m: FrontendMessage<'_>, kind: Option<AuthResponseKind>) {
    let mut wire = BytesMut::new();
    m.encode(&mut wire)
        .unwrap_or_else(|e| panic!("generated {m:?} does not encode: {e}"));
    let f = single_frame(&wire);
    assert_eq!(f.tag, m.tag());
    let back = FrontendMessage::decode_with(f.tag, f.body, kind)
        .unwrap_or_else(|e| panic!("encoded {m:?} does not decode: {e}"));
    assert_eq!(back, m);
    let mut again = BytesMut::new();
    back.encode(&mut again).expect("a decoded message encodes");
    assert_eq!(again, wire, "re-encoding changed the bytes");
    let limits = Limits::postgres_server();
    let fits = wire.len() - 1 <= limits.tag_max(f.tag);
    check_framing(Phase::Typed, limits, &wire, fits);
    if let FrontendMessage::Bind(b) = back {
        assert_eq!(b.params.iter().count(), b.params.len());
    }
}

/// Encode, decode from the length word on, compare, re-encode.
pub(crate) fn check_startup(m: StartupPacket<'_>) {
    let mut wire = BytesMut::new();
    m.encode(&mut wire)
        .unwrap_or_else(|e| panic!("generated {m:?} does not encode: {e}"));
    let (len, body) = wire.split_at(4);
    assert_eq!(
        u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize,
        wire.len()
    );
    let back = StartupPacket::decode(body)
        .unwrap_or_else(|e| panic!("encoded {m:?} does not decode: {e}"));
    assert_eq!(back, m);
    let mut again = BytesMut::new();
    back.encode(&mut again).expect("a decoded packet encodes");
    assert_eq!(again, wire, "re-encoding changed the bytes");
    let limits = Limits::postgres_server();
    let fits = body.len() <= limits.startup_body_max();
    check_framing(Phase::Startup, limits, &wire, fits);
}

/// Encode, decode, compare, re-encode; the lazy views must iterate their whole length.
pub(crate) fn check_backend(m: BackendMessage<'_>) {
    use crate::backend::Authentication;
    let mut wire = BytesMut::new();
    m.encode(&mut wire)
        .unwrap_or_else(|e| panic!("generated {m:?} does not encode: {e}"));
    let f = single_frame(&wire);
    assert_eq!(f.tag, m.tag());
    let back = BackendMessage::decode(f.tag, f.body)
        .unwrap_or_else(|e| panic!("{m:?} does not decode: {e}"));
    assert_eq!(back, m);
    let mut again = BytesMut::new();
    back.encode(&mut again).expect("a decoded message encodes");
    assert_eq!(again, wire, "re-encoding changed the bytes");
    let limits = Limits::libpq_client();
    let fits = wire.len() - 1 <= limits.tag_max(f.tag);
    check_framing(Phase::Typed, limits, &wire, fits);
    match back {
        BackendMessage::DataRow(r) => assert_eq!(r.fields().count(), r.len()),
        BackendMessage::RowDescription(r) => assert_eq!(r.fields().count(), r.len()),
        BackendMessage::NegotiateProtocolVersion(n) => {
            assert_eq!(n.unrecognized.iter().count(), n.unrecognized.len())
        }
        BackendMessage::Authentication(Authentication::Sasl(m)) => {
            assert_eq!(m.iter().count(), m.len())
        }
        BackendMessage::ErrorResponse(e) | BackendMessage::NoticeResponse(e) => {
            // Every field but the terminator: a code byte and a NUL-terminated value.
            let fields: usize = e.iter().map(|(_, v)| v.len() + 2).sum();
            assert_eq!(fields + 1, e.raw().len());
        }
        _ => {}
    }
}

/// Frontend messages and startup packets generated from `data` (each value picks which).
pub fn roundtrip_frontend(data: &[u8]) {
    generate_each(data, |m: &Either<OwnedStartup, OwnedFrontend>| match m {
        Either::A(s) => check_startup(s.message()),
        Either::B(f) => {
            check_frontend(f.message(), f.auth_kind());
            // An undecided `p` message decodes as the raw AuthResponse.
            if f.message().tag() == crate::frontend::tag::AUTH_RESPONSE {
                let mut wire = BytesMut::new();
                f.message().encode(&mut wire).expect("encodes");
                let g = single_frame(&wire);
                assert_eq!(
                    FrontendMessage::decode(g.tag, g.body),
                    Ok(FrontendMessage::AuthResponse(g.body))
                );
            }
        }
    });
}

/// Backend messages generated from `data`.
pub fn roundtrip_backend(data: &[u8]) {
    generate_each(data, |m: &OwnedBackend| check_backend(m.message()));
}

/// Streaming-replication messages generated from `data`.
pub fn roundtrip_replication(data: &[u8]) {
    use crate::replication::ReplicationMessage;
    generate_each(data, |g: &OwnedReplication| {
        let m = g.message();
        let wire = m.to_bytes();
        assert_eq!(m.encoded_len(), wire.len());
        assert_eq!(wire[0], m.tag());
        let back = ReplicationMessage::decode(&wire)
            .unwrap_or_else(|e| panic!("{m:?} does not decode: {e}"));
        assert_eq!(back, m);
        assert_eq!(back.to_bytes(), wire, "re-encoding changed the bytes");
        let (server, client) = (
            ReplicationMessage::decode_from_server(&wire),
            ReplicationMessage::decode_from_client(&wire),
        );
        assert_eq!(server.is_ok(), m.is_from_server());
        assert_eq!(client.is_ok(), !m.is_from_server());
    });
}

/// pgoutput messages generated from `data`, each for its protocol version, decoded alone and
/// by a stream decoder in the matching state; then all of them in order through one version-4
/// stream decoder, with STREAM START/STOP put around them as the stream rules require.
pub fn roundtrip_pgoutput(data: &[u8]) {
    use crate::pgoutput::{PgOutputDecoder, PgOutputMessage};
    let mut all = Vec::new();
    generate_each(data, |g: &OwnedPgOutput| {
        let m = g.message();
        assert!(
            m.min_proto_version() <= g.version(),
            "{m:?} for {:?}",
            g.version()
        );
        let wire = m
            .to_bytes()
            .unwrap_or_else(|e| panic!("generated {m:?} does not encode: {e}"));
        let in_stream = m.stream_xid().is_some();
        let back = PgOutputMessage::decode(&wire, in_stream)
            .unwrap_or_else(|e| panic!("{m:?} does not decode: {e}"));
        assert_eq!(back, m);
        assert_eq!(back.to_bytes().as_deref(), Ok(&wire[..]));
        // Inside a stream block for streamed changes and STREAM STOP, outside for the rest.
        let stream = match m {
            PgOutputMessage::StreamStop => Some(pgyard_types::Xid(1)),
            _ => m.stream_xid(),
        };
        let mut decoder = PgOutputDecoder::resume(g.version(), stream);
        assert_eq!(decoder.decode(&wire), Ok(m));
        all.push(g.clone());
    });
    pgoutput_stream(&all);
}

/// Feeds `messages` to one decoder, opening and closing stream blocks between them so each is
/// legal where it lands; every message must come back as generated and the decoder must
/// track the block's transaction.
fn pgoutput_stream(messages: &[OwnedPgOutput]) {
    use crate::pgoutput::{PgOutputDecoder, PgOutputMessage, ProtoVersion, StreamStart};
    let mut decoder = PgOutputDecoder::new(ProtoVersion::V4);
    let mut feed = |m: PgOutputMessage<'_>| {
        let wire = m.to_bytes().expect("generated messages encode");
        assert_eq!(
            decoder.decode(&wire),
            Ok(m),
            "in a stream: {}",
            decoder.in_stream()
        );
        match m {
            PgOutputMessage::StreamStart(s) => assert_eq!(decoder.stream_xid(), Some(s.xid)),
            PgOutputMessage::StreamStop => assert!(!decoder.in_stream()),
            _ => {}
        }
        decoder.in_stream()
    };
    let mut in_stream = false;
    for g in messages {
        let m = g.message();
        // Origin and STREAM STOP read the same in and out of a block; the other changes carry
        // the block's transaction ID exactly when inside one.
        let want_stream = match m {
            PgOutputMessage::StreamStop => true,
            PgOutputMessage::StreamStart(_) => false,
            PgOutputMessage::Origin(_) => in_stream,
            other => other.stream_xid().is_some(),
        };
        if in_stream != want_stream {
            let bracket = if in_stream {
                PgOutputMessage::StreamStop
            } else {
                PgOutputMessage::StreamStart(StreamStart {
                    xid: m.stream_xid().unwrap_or(pgyard_types::Xid(0)),
                    first_segment: true,
                })
            };
            assert_eq!(feed(bracket), want_stream);
        }
        in_stream = feed(m);
    }
}

/// Middleware messages generated from `data`, decoded alone and by a default [`Splitter`],
/// which takes the ones within its length limit and refuses the others.
///
/// [`Splitter`]: crate::middleware::Splitter
pub fn roundtrip_middleware(data: &[u8]) {
    use crate::middleware::{
        MiddlewareMessage, SplitItem, SplitPhase, Splitter, DEFAULT_MIDDLEWARE_LEN_MAX,
    };
    generate_each(data, |g: &OwnedMiddleware| {
        let m = g.message();
        let mut wire = BytesMut::new();
        m.encode(&mut wire)
            .unwrap_or_else(|e| panic!("generated {m:?} does not encode: {e}"));
        let f = single_frame(&wire);
        let back = MiddlewareMessage::decode(f.body)
            .unwrap_or_else(|e| panic!("{m:?} does not decode: {e}"));
        assert_eq!(back, m);
        let mut again = BytesMut::new();
        back.encode(&mut again).expect("a decoded message encodes");
        assert_eq!(again, wire, "re-encoding changed the bytes");
        let mut splitter = Splitter::default();
        splitter.set_phase(SplitPhase::Typed);
        splitter.feed(&wire);
        let fits = wire.len() - 1 <= DEFAULT_MIDDLEWARE_LEN_MAX as usize;
        match splitter.split() {
            Ok(Decoded::Frame(SplitItem::Middleware(o))) if fits => {
                assert_eq!(o.as_message(), m);
                assert_eq!(&o.wire()[..], &wire[..]);
            }
            Err(_) if !fits => {}
            other => panic!("splitter on {} bytes: {other:?}", wire.len()),
        }
    });
}

/// One SCRAM exchange generated from `data`: every message the machines produced survives
/// the round trip in its protocol message, and the outcome (authenticated or not, channel
/// bound or not) is the one the settings call for.
pub fn roundtrip_scram(data: &[u8]) {
    let Ok(ex) = ScramExchange::arbitrary(&mut Unstructured::new(data)) else {
        return;
    };
    let kinds = [AuthResponseKind::SaslInitial, AuthResponseKind::Sasl];
    let frontend = ex.frontend_messages();
    for (m, kind) in frontend.iter().zip(kinds) {
        check_frontend(*m, Some(kind));
    }
    let backend = ex.backend_messages();
    for m in &backend {
        check_backend(*m);
    }
    assert_eq!(ex.authenticated(), ex.expects_success(), "{ex:?}");
    if ex.authenticated() {
        assert_eq!(frontend.len(), 2);
        assert_eq!(backend.len(), 3);
        assert_eq!(ex.channel_bound(), ex.expects_channel_binding(), "{ex:?}");
    }
}

/// One of two generated values (the first choice byte picks).
#[derive(Debug)]
enum Either<A, B> {
    A(A),
    B(B),
}

impl<'a, A: Arbitrary<'a>, B: Arbitrary<'a>> Arbitrary<'a> for Either<A, B> {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        Ok(if u.ratio(1, 3)? {
            Either::A(A::arbitrary(u)?)
        } else {
            Either::B(B::arbitrary(u)?)
        })
    }
}
