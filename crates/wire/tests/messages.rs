//! Property tests for framing and every FE/BE message: encode → decode gives back the
//! fields, re-encoding gives back the bytes, streams split anywhere decode the same, hostile
//! input is rejected without panics or early allocation, and the middleware splitter keeps
//! its invariants.

use bytes::BytesMut;
use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

use pgyard_wire::backend::{
    self, encode_auth_sasl, encode_command_complete, encode_copy_response, encode_data_row,
    encode_empty, encode_function_call_response, encode_negotiate_protocol_version,
    encode_parameter_description, encode_ready_for_query, encode_row_description, Authentication,
    BackendKeyData, BackendMessage, FieldDescription, Notification, ParameterStatus,
    TransactionStatus,
};
use pgyard_wire::error_fields::{encode_error_response, encode_notice_response, FieldCode};
use pgyard_wire::frame::{
    decode_frame, frames, Decoded, FrameDecoder, Limits, ProtocolVersion, Unit,
    CANCEL_REQUEST_CODE, GSSENC_REQUEST_CODE, SSL_REQUEST_CODE,
};
use pgyard_wire::frontend::{self, AuthResponseKind, FrontendMessage, StartupPacket, Target};
use pgyard_wire::middleware::{
    encode_middleware, MiddlewareMessage, SplitItem, SplitPhase, Splitter, MIDDLEWARE_TAG,
};
use pgyard_wire::DecodeError;

// ---------------------------------------------------------------------------------------
// Strategies.

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..40)
}

/// A C string: any bytes but NUL.
fn cstr() -> impl Strategy<Value = Vec<u8>> {
    vec(1u8..=255, 0..24)
}

fn nonempty_cstr() -> impl Strategy<Value = Vec<u8>> {
    vec(1u8..=255, 1..24)
}

fn values() -> impl Strategy<Value = Vec<Option<Vec<u8>>>> {
    vec(option::of(bytes()), 0..8)
}

fn refs(v: &[Option<Vec<u8>>]) -> Vec<Option<&[u8]>> {
    v.iter().map(Option::as_deref).collect()
}

fn target() -> impl Strategy<Value = Target> {
    prop_oneof![Just(Target::Statement), Just(Target::Portal)]
}

/// One frontend message with owned fields.
#[derive(Clone, Debug)]
enum Fe {
    Bind(Vec<u8>, Vec<u8>, Vec<i16>, Vec<Option<Vec<u8>>>, Vec<i16>),
    Close(Target, Vec<u8>),
    CopyData(Vec<u8>),
    CopyDone,
    CopyFail(Vec<u8>),
    Describe(Target, Vec<u8>),
    Execute(Vec<u8>, i32),
    Flush,
    FunctionCall(u32, Vec<i16>, Vec<Option<Vec<u8>>>, i16),
    Parse(Vec<u8>, Vec<u8>, Vec<u32>),
    Query(Vec<u8>),
    Sync,
    Terminate,
    Password(Vec<u8>),
    Gss(Vec<u8>),
    SaslInitial(Vec<u8>, Option<Vec<u8>>),
    Sasl(Vec<u8>),
}

fn fe() -> impl Strategy<Value = Fe> {
    prop_oneof![
        (
            cstr(),
            cstr(),
            vec(any::<i16>(), 0..4),
            values(),
            vec(any::<i16>(), 0..4)
        )
            .prop_map(|(a, b, c, d, e)| Fe::Bind(a, b, c, d, e)),
        (target(), cstr()).prop_map(|(t, n)| Fe::Close(t, n)),
        bytes().prop_map(Fe::CopyData),
        Just(Fe::CopyDone),
        cstr().prop_map(Fe::CopyFail),
        (target(), cstr()).prop_map(|(t, n)| Fe::Describe(t, n)),
        (cstr(), any::<i32>()).prop_map(|(p, n)| Fe::Execute(p, n)),
        Just(Fe::Flush),
        (
            any::<u32>(),
            vec(any::<i16>(), 0..4),
            values(),
            any::<i16>()
        )
            .prop_map(|(a, b, c, d)| Fe::FunctionCall(a, b, c, d)),
        (cstr(), cstr(), vec(any::<u32>(), 0..6)).prop_map(|(a, b, c)| Fe::Parse(a, b, c)),
        cstr().prop_map(Fe::Query),
        Just(Fe::Sync),
        Just(Fe::Terminate),
        cstr().prop_map(Fe::Password),
        bytes().prop_map(Fe::Gss),
        (cstr(), option::of(bytes())).prop_map(|(m, d)| Fe::SaslInitial(m, d)),
        bytes().prop_map(Fe::Sasl),
    ]
}

impl Fe {
    fn encode(&self, buf: &mut BytesMut) {
        let r = match self {
            Fe::Bind(p, s, pf, v, rf) => frontend::encode_bind(p, s, pf, &refs(v), rf, buf),
            Fe::Close(t, n) => frontend::encode_close(*t, n, buf),
            Fe::CopyData(d) => frontend::encode_copy_data(d, buf),
            Fe::CopyDone => {
                frontend::encode_copy_done(buf);
                Ok(())
            }
            Fe::CopyFail(m) => frontend::encode_copy_fail(m, buf),
            Fe::Describe(t, n) => frontend::encode_describe(*t, n, buf),
            Fe::Execute(p, n) => frontend::encode_execute(p, *n, buf),
            Fe::Flush => {
                frontend::encode_flush(buf);
                Ok(())
            }
            Fe::FunctionCall(o, f, a, r) => {
                frontend::encode_function_call(*o, f, &refs(a), *r, buf)
            }
            Fe::Parse(n, q, t) => frontend::encode_parse(n, q, t, buf),
            Fe::Query(q) => frontend::encode_query(q, buf),
            Fe::Sync => {
                frontend::encode_sync(buf);
                Ok(())
            }
            Fe::Terminate => {
                frontend::encode_terminate(buf);
                Ok(())
            }
            Fe::Password(p) => frontend::encode_password(p, buf),
            Fe::Gss(t) => frontend::encode_gss_response(t, buf),
            Fe::SaslInitial(m, d) => frontend::encode_sasl_initial_response(m, d.as_deref(), buf),
            Fe::Sasl(d) => frontend::encode_sasl_response(d, buf),
        };
        r.expect("valid fields encode");
    }

    fn auth(&self) -> Option<AuthResponseKind> {
        match self {
            Fe::Password(_) => Some(AuthResponseKind::Password),
            Fe::Gss(_) => Some(AuthResponseKind::Gss),
            Fe::SaslInitial(..) => Some(AuthResponseKind::SaslInitial),
            Fe::Sasl(_) => Some(AuthResponseKind::Sasl),
            _ => None,
        }
    }

    /// Asserts that `m` carries exactly these fields.
    fn check(&self, m: &FrontendMessage<'_>) {
        match (self, m) {
            (Fe::Bind(p, s, pf, v, rf), FrontendMessage::Bind(b)) => {
                assert_eq!((b.portal, b.statement), (&p[..], &s[..]));
                assert_eq!(b.param_formats.iter().collect::<Vec<_>>(), *pf);
                assert_eq!(b.params.iter().collect::<Vec<_>>(), refs(v));
                assert_eq!(b.params.len(), v.len());
                assert_eq!(b.result_formats.iter().collect::<Vec<_>>(), *rf);
            }
            (Fe::Close(t, n), FrontendMessage::Close(c))
            | (Fe::Describe(t, n), FrontendMessage::Describe(c)) => {
                assert_eq!((c.target, c.name), (*t, &n[..]));
            }
            (Fe::CopyData(d), FrontendMessage::CopyData(e))
            | (Fe::CopyFail(d), FrontendMessage::CopyFail(e))
            | (Fe::Query(d), FrontendMessage::Query(e))
            | (Fe::Password(d), FrontendMessage::PasswordMessage(e))
            | (Fe::Gss(d), FrontendMessage::GssResponse(e))
            | (Fe::Sasl(d), FrontendMessage::SaslResponse(e)) => assert_eq!(&d[..], *e),
            (Fe::CopyDone, FrontendMessage::CopyDone)
            | (Fe::Flush, FrontendMessage::Flush)
            | (Fe::Sync, FrontendMessage::Sync)
            | (Fe::Terminate, FrontendMessage::Terminate) => {}
            (Fe::Execute(p, n), FrontendMessage::Execute(e)) => {
                assert_eq!((e.portal, e.max_rows), (&p[..], *n));
            }
            (Fe::FunctionCall(o, f, a, r), FrontendMessage::FunctionCall(c)) => {
                assert_eq!(c.function_oid, *o);
                assert_eq!(c.arg_formats.iter().collect::<Vec<_>>(), *f);
                assert_eq!(c.args.iter().collect::<Vec<_>>(), refs(a));
                assert_eq!(c.result_format, *r);
            }
            (Fe::Parse(n, q, t), FrontendMessage::Parse(p)) => {
                assert_eq!((p.name, p.query), (&n[..], &q[..]));
                assert_eq!(p.param_types.iter().collect::<Vec<_>>(), *t);
            }
            (Fe::SaslInitial(mech, d), FrontendMessage::SaslInitialResponse(s)) => {
                assert_eq!((s.mechanism, s.data), (&mech[..], d.as_deref()));
            }
            (want, got) => panic!("expected {want:?}, decoded {got:?}"),
        }
    }
}

/// One backend message with owned fields.
#[derive(Clone, Debug)]
enum Be {
    Auth(u8, Vec<u8>),
    Sasl(Vec<Vec<u8>>),
    KeyData(i32, Vec<u8>),
    Empty(u8),
    CommandComplete(Vec<u8>),
    CopyData(Vec<u8>),
    CopyResponse(u8, u8, Vec<i16>),
    DataRow(Vec<Option<Vec<u8>>>),
    Fields(u8, Vec<(u8, Vec<u8>)>),
    FunctionCallResponse(Option<Vec<u8>>),
    Negotiate(u32, Vec<Vec<u8>>),
    Notification(i32, Vec<u8>, Vec<u8>),
    ParameterDescription(Vec<u32>),
    ParameterStatus(Vec<u8>, Vec<u8>),
    Ready(TransactionStatus),
    RowDescription(Vec<Column>),
}

/// Owned RowDescription field: name, table OID, attnum, type OID, typlen, typmod, format.
type Column = (Vec<u8>, u32, i16, u32, i16, i32, i16);

fn be() -> impl Strategy<Value = Be> {
    prop_oneof![
        (0u8..11, bytes()).prop_map(|(k, d)| Be::Auth(k, d)),
        vec(nonempty_cstr(), 0..4).prop_map(Be::Sasl),
        (any::<i32>(), vec(any::<u8>(), 1..=256)).prop_map(|(p, k)| Be::KeyData(p, k)),
        prop::sample::select(b"123cIns".to_vec()).prop_map(Be::Empty),
        cstr().prop_map(Be::CommandComplete),
        bytes().prop_map(Be::CopyData),
        (
            prop::sample::select(b"GHW".to_vec()),
            any::<u8>(),
            vec(any::<i16>(), 0..5)
        )
            .prop_map(|(t, f, c)| Be::CopyResponse(t, f, c)),
        values().prop_map(Be::DataRow),
        (
            prop::sample::select(b"EN".to_vec()),
            vec((1u8..=255, cstr()), 0..8)
        )
            .prop_map(|(t, f)| Be::Fields(t, f)),
        option::of(bytes()).prop_map(Be::FunctionCallResponse),
        (any::<u32>(), vec(cstr(), 0..4)).prop_map(|(v, o)| Be::Negotiate(v, o)),
        (any::<i32>(), cstr(), cstr()).prop_map(|(p, c, d)| Be::Notification(p, c, d)),
        vec(any::<u32>(), 0..6).prop_map(Be::ParameterDescription),
        (cstr(), cstr()).prop_map(|(n, v)| Be::ParameterStatus(n, v)),
        prop_oneof![
            Just(TransactionStatus::Idle),
            Just(TransactionStatus::InTransaction),
            Just(TransactionStatus::Failed)
        ]
        .prop_map(Be::Ready),
        vec(
            (
                cstr(),
                any::<u32>(),
                any::<i16>(),
                any::<u32>(),
                any::<i16>(),
                any::<i32>(),
                any::<i16>()
            ),
            0..4
        )
        .prop_map(Be::RowDescription),
    ]
}

/// Authentication subtypes by index, with `d` supplying data where the subtype has any.
fn auth_of(k: u8, d: &[u8]) -> Authentication<'_> {
    match k {
        0 => Authentication::Ok,
        1 => Authentication::KerberosV5,
        2 => Authentication::CleartextPassword,
        3 => {
            let mut salt = [0; 4];
            for (s, b) in salt.iter_mut().zip(d) {
                *s = *b;
            }
            Authentication::Md5Password { salt }
        }
        4 => Authentication::ScmCredential,
        5 => Authentication::Gss,
        6 => Authentication::GssContinue(d),
        7 => Authentication::Sspi,
        8 => Authentication::SaslContinue(d),
        _ => Authentication::SaslFinal(d),
    }
}

fn field_desc(f: &Column) -> FieldDescription<'_> {
    FieldDescription {
        name: &f.0,
        table_oid: f.1,
        column_id: f.2,
        type_oid: f.3,
        type_size: f.4,
        type_modifier: f.5,
        format: f.6,
    }
}

impl Be {
    fn encode(&self, buf: &mut BytesMut) {
        let r = match self {
            Be::Auth(k, d) => auth_of(*k, d).encode(buf),
            Be::Sasl(m) => encode_auth_sasl(&m.iter().map(Vec::as_slice).collect::<Vec<_>>(), buf),
            Be::KeyData(pid, key) => BackendKeyData { pid: *pid, key }.encode(buf),
            Be::Empty(t) => {
                encode_empty(*t, buf);
                Ok(())
            }
            Be::CommandComplete(t) => encode_command_complete(t, buf),
            Be::CopyData(d) => frontend::encode_copy_data(d, buf),
            Be::CopyResponse(t, f, c) => encode_copy_response(*t, *f, c, buf),
            Be::DataRow(v) => encode_data_row(&refs(v), buf),
            Be::Fields(t, f) => {
                let f: Vec<(u8, &[u8])> = f.iter().map(|(c, v)| (*c, &v[..])).collect();
                if *t == b'E' {
                    encode_error_response(&f, buf)
                } else {
                    encode_notice_response(&f, buf)
                }
            }
            Be::FunctionCallResponse(v) => encode_function_call_response(v.as_deref(), buf),
            Be::Negotiate(v, o) => encode_negotiate_protocol_version(
                ProtocolVersion(*v),
                &o.iter().map(Vec::as_slice).collect::<Vec<_>>(),
                buf,
            ),
            Be::Notification(pid, c, p) => Notification {
                pid: *pid,
                channel: c,
                payload: p,
            }
            .encode(buf),
            Be::ParameterDescription(t) => encode_parameter_description(t, buf),
            Be::ParameterStatus(n, v) => ParameterStatus { name: n, value: v }.encode(buf),
            Be::Ready(s) => {
                encode_ready_for_query(*s, buf);
                Ok(())
            }
            Be::RowDescription(f) => {
                encode_row_description(&f.iter().map(field_desc).collect::<Vec<_>>(), buf)
            }
        };
        r.expect("valid fields encode");
    }

    /// Asserts that `m` carries exactly these fields.
    fn check(&self, m: &BackendMessage<'_>) {
        match (self, m) {
            (Be::Auth(k, d), BackendMessage::Authentication(a)) => assert_eq!(*a, auth_of(*k, d)),
            (Be::Sasl(want), BackendMessage::Authentication(Authentication::Sasl(got))) => {
                assert_eq!(got.iter().collect::<Vec<_>>(), *want);
                assert_eq!(got.len(), want.len());
            }
            (Be::KeyData(pid, key), BackendMessage::BackendKeyData(k)) => {
                assert_eq!((k.pid, k.key), (*pid, &key[..]));
            }
            (Be::Empty(t), m) => assert_eq!(m.tag(), *t),
            (Be::CommandComplete(t), BackendMessage::CommandComplete(u))
            | (Be::CopyData(t), BackendMessage::CopyData(u)) => assert_eq!(&t[..], *u),
            (Be::CopyResponse(t, f, c), m) => {
                let (BackendMessage::CopyInResponse(r)
                | BackendMessage::CopyOutResponse(r)
                | BackendMessage::CopyBothResponse(r)) = m
                else {
                    panic!("expected a copy response, decoded {m:?}")
                };
                assert_eq!(m.tag(), *t);
                assert_eq!(r.format, *f);
                assert_eq!(r.column_formats.iter().collect::<Vec<_>>(), *c);
            }
            (Be::DataRow(v), BackendMessage::DataRow(r)) => {
                assert_eq!(r.len(), v.len());
                assert_eq!(r.fields().collect::<Vec<_>>(), refs(v));
            }
            (Be::Fields(t, want), m) => {
                let (BackendMessage::ErrorResponse(f) | BackendMessage::NoticeResponse(f)) = m
                else {
                    panic!("expected error fields, decoded {m:?}")
                };
                assert_eq!(m.tag(), *t);
                let got: Vec<(u8, &[u8])> = f.iter().map(|(c, v)| (c.byte(), v)).collect();
                let want: Vec<(u8, &[u8])> = want.iter().map(|(c, v)| (*c, &v[..])).collect();
                assert_eq!(got, want);
                for (c, v) in &want {
                    assert_eq!(FieldCode::from_byte(*c).byte(), *c);
                    let last = want.iter().rev().find(|(d, _)| d == c).map(|(_, v)| *v);
                    assert_eq!(f.get(*c), last);
                    let _ = v;
                }
            }
            (Be::FunctionCallResponse(v), BackendMessage::FunctionCallResponse(w)) => {
                assert_eq!(v.as_deref(), *w);
            }
            (Be::Negotiate(v, o), BackendMessage::NegotiateProtocolVersion(n)) => {
                assert_eq!(n.newest_minor, *v);
                assert_eq!(n.unrecognized.iter().collect::<Vec<_>>(), *o);
            }
            (Be::Notification(pid, c, p), BackendMessage::NotificationResponse(n)) => {
                assert_eq!((n.pid, n.channel, n.payload), (*pid, &c[..], &p[..]));
            }
            (Be::ParameterDescription(t), BackendMessage::ParameterDescription(o)) => {
                assert_eq!(o.iter().collect::<Vec<_>>(), *t);
            }
            (Be::ParameterStatus(n, v), BackendMessage::ParameterStatus(p)) => {
                assert_eq!((p.name, p.value), (&n[..], &v[..]));
            }
            (Be::Ready(s), BackendMessage::ReadyForQuery(t)) => assert_eq!(s, t),
            (Be::RowDescription(f), BackendMessage::RowDescription(r)) => {
                assert_eq!(r.len(), f.len());
                assert_eq!(
                    r.fields().collect::<Vec<_>>(),
                    f.iter().map(field_desc).collect::<Vec<_>>()
                );
            }
            (want, got) => panic!("expected {want:?}, decoded {got:?}"),
        }
    }
}

/// Decodes the single frame in `buf`, exactly.
fn only_frame(buf: &[u8]) -> (u8, &[u8]) {
    match decode_frame(buf, usize::MAX) {
        Ok(Decoded::Frame(f)) => {
            assert_eq!(f.wire_len(), buf.len(), "one frame, nothing after it");
            (f.tag, f.body)
        }
        other => panic!("not one whole frame: {other:?}"),
    }
}

fn chunk_sizes() -> impl Strategy<Value = Vec<usize>> {
    prop_oneof![Just(vec![1]), vec(1usize..64, 1..16)]
}

/// Feeds `stream` in pieces of the given sizes (cycled) and collects the units.
fn decode_in_pieces(
    mut d: FrameDecoder,
    stream: &[u8],
    sizes: &[usize],
) -> (Vec<Unit>, Option<DecodeError>) {
    let mut units = Vec::new();
    let mut at = 0;
    let mut i = 0;
    loop {
        loop {
            match d.decode() {
                Ok(Decoded::Frame(u)) => units.push(u),
                Ok(Decoded::NeedMore { at_least }) => {
                    assert!(at_least > 0);
                    break;
                }
                Err(e) => return (units, Some(e)),
            }
        }
        if at == stream.len() {
            return (units, None);
        }
        let n = sizes[i % sizes.len()].min(stream.len() - at);
        d.feed(&stream[at..at + n]);
        at += n;
        i += 1;
    }
}

// ---------------------------------------------------------------------------------------
// Round trips.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_frontend_message_round_trips(m in fe()) {
        let mut buf = BytesMut::new();
        m.encode(&mut buf);
        let (tag, body) = only_frame(&buf);
        let decoded = FrontendMessage::decode_with(tag, body, m.auth()).unwrap();
        m.check(&decoded);
        let mut again = BytesMut::new();
        decoded.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);
        // Uninterpreted `p` keeps the raw body and re-encodes identically too.
        let raw = FrontendMessage::decode(tag, body).unwrap();
        let mut again = BytesMut::new();
        raw.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);
    }

    #[test]
    fn every_backend_message_round_trips(m in be()) {
        let mut buf = BytesMut::new();
        m.encode(&mut buf);
        let (tag, body) = only_frame(&buf);
        let decoded = BackendMessage::decode(tag, body).unwrap();
        m.check(&decoded);
        let mut again = BytesMut::new();
        decoded.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);
    }

    #[test]
    fn hot_builders_round_trip_with_unnamed_objects(
        name in prop_oneof![Just(Vec::new()), cstr()],
        portal in prop_oneof![Just(Vec::new()), cstr()],
        query in cstr(),
        types in vec(any::<u32>(), 0..3),
        pf in vec(any::<i16>(), 0..3),
        params in values(),
        rf in vec(any::<i16>(), 0..3),
        target in target(),
        max_rows in any::<i32>(),
    ) {
        let batch = [
            Fe::Parse(name.clone(), query, types),
            Fe::Bind(portal.clone(), name.clone(), pf, params, rf),
            Fe::Describe(target, portal.clone()),
            Fe::Execute(portal, max_rows),
            Fe::Sync,
        ];
        let mut buf = BytesMut::new();
        for m in &batch {
            m.encode(&mut buf);
        }
        let mut it = frames(&buf, usize::MAX);
        for m in &batch {
            let f = it.next().unwrap().unwrap();
            let decoded = FrontendMessage::decode(f.tag, f.body).unwrap();
            m.check(&decoded);
            let mut again = BytesMut::new();
            decoded.encode(&mut again).unwrap();
            let mut alone = BytesMut::new();
            m.encode(&mut alone);
            prop_assert_eq!(&again[..], &alone[..]);
        }
        prop_assert!(it.next().is_none());
        prop_assert_eq!(it.consumed(), buf.len());
    }

    #[test]
    fn startup_packets_round_trip(
        version in any::<u32>().prop_filter("not a request code", |v| {
            ![SSL_REQUEST_CODE, GSSENC_REQUEST_CODE, CANCEL_REQUEST_CODE].contains(v)
        }),
        params in vec((nonempty_cstr(), cstr()), 0..6),
        pid in any::<i32>(),
        key in vec(any::<u8>(), 1..=256),
    ) {
        let pairs: Vec<(&[u8], &[u8])> = params.iter().map(|(n, v)| (&n[..], &v[..])).collect();
        let mut buf = BytesMut::new();
        frontend::encode_startup(ProtocolVersion(version), &pairs, &mut buf).unwrap();
        prop_assert_eq!(&buf[..4], &(buf.len() as u32).to_be_bytes()[..]);
        let StartupPacket::Startup(s) = StartupPacket::decode(&buf[4..]).unwrap() else {
            panic!("not a startup message")
        };
        prop_assert_eq!(s.version, ProtocolVersion(version));
        prop_assert_eq!(s.params.iter().collect::<Vec<_>>(), pairs);
        let mut again = BytesMut::new();
        StartupPacket::Startup(s).encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);

        let mut buf = BytesMut::new();
        frontend::encode_cancel_request(pid, &key, &mut buf).unwrap();
        let p = StartupPacket::decode(&buf[4..]).unwrap();
        let StartupPacket::CancelRequest(c) = p else { panic!("not a cancel request") };
        prop_assert_eq!((c.pid, c.key), (pid, &key[..]));
        let mut again = BytesMut::new();
        p.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);
    }

    #[test]
    fn middleware_messages_round_trip(class in 0..=i64::MAX, payload in bytes()) {
        let mut buf = BytesMut::new();
        encode_middleware(class, &payload, &mut buf).unwrap();
        let (tag, body) = only_frame(&buf);
        prop_assert_eq!(tag, MIDDLEWARE_TAG);
        let m = MiddlewareMessage::decode(body).unwrap();
        prop_assert_eq!((m.class.get(), m.payload), (class, &payload[..]));
        let mut again = BytesMut::new();
        m.encode(&mut again).unwrap();
        prop_assert_eq!(&again[..], &buf[..]);
    }

    #[test]
    fn negative_middleware_classes_are_refused(class in i64::MIN..0, payload in bytes()) {
        let mut buf = BytesMut::new();
        prop_assert!(encode_middleware(class, &payload, &mut buf).is_err());
        prop_assert!(buf.is_empty());
        let mut body = class.to_be_bytes().to_vec();
        body.extend_from_slice(&payload);
        let is_invalid = matches!(MiddlewareMessage::decode(&body), Err(DecodeError::Invalid { .. }));
        prop_assert!(is_invalid);
    }
}

// ---------------------------------------------------------------------------------------
// Streams split anywhere.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn backend_streams_split_anywhere(msgs in vec(be(), 0..12), sizes in chunk_sizes()) {
        let mut stream = BytesMut::new();
        for m in &msgs {
            m.encode(&mut stream);
        }
        let whole = decode_in_pieces(FrameDecoder::backend(Limits::default()), &stream, &[usize::MAX]);
        let split = decode_in_pieces(FrameDecoder::backend(Limits::default()), &stream, &sizes);
        prop_assert_eq!(&whole, &split);
        prop_assert_eq!(whole.1, None);
        prop_assert_eq!(whole.0.len(), msgs.len());
        for (m, u) in msgs.iter().zip(&whole.0) {
            let Unit::Typed(f) = u else { panic!("typed frame expected") };
            m.check(&BackendMessage::decode(f.tag(), f.body()).unwrap());
        }
        // The borrowed slice iterator agrees.
        let tags: Vec<u8> = frames(&stream, usize::MAX).map(|f| f.unwrap().tag).collect();
        let want: Vec<u8> = whole.0.iter().map(|u| match u { Unit::Typed(f) => f.tag(), _ => 0 }).collect();
        prop_assert_eq!(tags, want);
    }

    #[test]
    fn frontend_streams_split_anywhere(
        user in nonempty_cstr(),
        ssl_first in any::<bool>(),
        msgs in vec(fe(), 0..12),
        sizes in chunk_sizes(),
    ) {
        let mut stream = BytesMut::new();
        if ssl_first {
            frontend::encode_ssl_request(&mut stream);
        }
        frontend::encode_startup(ProtocolVersion::V3_2, &[(b"user", &user)], &mut stream).unwrap();
        for m in &msgs {
            m.encode(&mut stream);
        }
        let limits = Limits::postgres_server();
        let whole = decode_in_pieces(FrameDecoder::frontend(limits.clone()), &stream, &[usize::MAX]);
        let split = decode_in_pieces(FrameDecoder::frontend(limits), &stream, &sizes);
        prop_assert_eq!(&whole, &split);
        prop_assert_eq!(&whole.1, &None);
        let startups = usize::from(ssl_first) + 1;
        prop_assert_eq!(whole.0.len(), startups + msgs.len());
        for (m, u) in msgs.iter().zip(&whole.0[startups..]) {
            let Unit::Typed(f) = u else { panic!("typed frame expected") };
            m.check(&FrontendMessage::decode_with(f.tag(), f.body(), m.auth()).unwrap());
        }
    }

    #[test]
    fn splitter_separates_middleware_messages(
        user in nonempty_cstr(),
        items in vec(prop_oneof![
            fe().prop_map(Ok),
            (0..=i64::MAX, bytes()).prop_map(Err),
        ], 0..16),
        sizes in chunk_sizes(),
    ) {
        let mut input = BytesMut::new();
        frontend::encode_ssl_request(&mut input);
        frontend::encode_startup(ProtocolVersion::V3_0, &[(b"user", &user)], &mut input).unwrap();
        let mut server_bound = input.clone();
        let mut expected_mw = Vec::new();
        for item in &items {
            match item {
                Ok(m) => {
                    m.encode(&mut input);
                    m.encode(&mut server_bound);
                }
                Err((class, payload)) => {
                    encode_middleware(*class, payload, &mut input).unwrap();
                    expected_mw.push((*class, payload.clone()));
                }
            }
        }
        let mut s = Splitter::default();
        let mut forwarded = Vec::new();
        let mut got_mw = Vec::new();
        let mut at = 0;
        let mut i = 0;
        loop {
            loop {
                match s.split().unwrap() {
                    Decoded::Frame(SplitItem::Forward(b)) => {
                        // Zero-copy slices of what the client sent, in order.
                        forwarded.extend_from_slice(&b);
                    }
                    Decoded::Frame(SplitItem::Middleware(m)) => {
                        got_mw.push((m.class().get(), m.payload().to_vec()));
                    }
                    Decoded::NeedMore { .. } => break,
                }
            }
            if at == input.len() {
                break;
            }
            let n = sizes[i % sizes.len()].min(input.len() - at);
            s.feed(&input[at..at + n]);
            at += n;
            i += 1;
        }
        prop_assert_eq!(&forwarded[..], &server_bound[..]);
        prop_assert_eq!(got_mw, expected_mw);
        prop_assert_eq!(s.buffered(), 0);
        prop_assert_eq!(s.phase(), SplitPhase::Typed);
    }
}

// ---------------------------------------------------------------------------------------
// Hostile input.

#[test]
fn lengths_below_four_negative_or_huge_are_rejected_up_front() {
    for raw in [0i32, 1, 3, -1, i32::MIN] {
        let mut s = vec![b'D'];
        s.extend_from_slice(&raw.to_be_bytes());
        assert_eq!(
            decode_frame(&s, usize::MAX),
            Err(DecodeError::InvalidLength {
                length: raw.into(),
                offset: 1
            })
        );
        let mut d = FrameDecoder::backend(Limits::default());
        d.feed(&s);
        assert!(matches!(d.decode(), Err(DecodeError::InvalidLength { .. })));
    }
    // A claimed 1 GiB frame with a 1 KiB limit fails on the header, and nothing was reserved.
    let mut d = FrameDecoder::backend(Limits::uniform(1024));
    d.feed(&[b'D', 0x40, 0, 0, 0]);
    assert_eq!(
        d.decode(),
        Err(DecodeError::TooLarge {
            length: 0x4000_0000,
            max: 1024
        })
    );
    assert!(d.buffer_mut().capacity() < 4096);
    // Within the limit, a partial frame makes the decoder wait, still without reserving.
    let mut d = FrameDecoder::backend(Limits::uniform(1 << 30));
    d.feed(&[b'd', 0x3f, 0, 0, 0]);
    assert_eq!(
        d.decode(),
        Ok(Decoded::NeedMore {
            at_least: 0x3f00_0000 - 4
        })
    );
    assert!(d.buffer_mut().capacity() < 4096);
    // Per-type limits: libpq refuses a 30 001-byte ParameterStatus but not a DataRow.
    let l = Limits::libpq_client();
    let mut d = FrameDecoder::backend(l.clone());
    d.feed(&[b'S', 0, 0, 0x75, 0x31]);
    assert!(matches!(d.decode(), Err(DecodeError::TooLarge { .. })));
    let mut d = FrameDecoder::backend(l);
    d.feed(&[b'D', 0, 0, 0x75, 0x31]);
    assert!(matches!(d.decode(), Ok(Decoded::NeedMore { .. })));
}

#[test]
fn truncated_fields_missing_terminators_and_overrunning_counts() {
    let be_cases: &[(u8, &[u8])] = &[
        (b'C', b"SELECT 1"),                     // no terminator
        (b'S', b"name\0value"),                  // second string unterminated
        (b'D', b"\0\x02\0\0\0\x01a"),            // count 2, one value
        (b'D', b"\x80\0"),                       // count 32768 (u16), no bytes
        (b'D', b"\0\x01\x7f\xff\xff\xff"),       // value length overruns
        (b'T', b"\0\x01col\0\0\0"),              // field truncated
        (b't', b"\0\x03\0\0\0\x17"),             // 3 OIDs, 1 present
        (b'v', b"\0\x03\0\x02\x7f\xff\xff\xff"), // option count overruns
        (b'v', b"\0\x03\0\x02\xff\xff\xff\xff"), // negative option count
        (b'G', b"\0\0\x05\0\0"),                 // format count overruns
        (b'R', b"\0\0\0\x05\x01\x02"),           // MD5 salt truncated
        (b'R', b"\0\0\0\x0aSCRAM-SHA-256\0"),    // mechanism list unterminated
        (b'K', b"\0\0\0\x01"),                   // empty cancel key
        (b'Z', b""),                             // status missing
        (b'Z', b"IT"),                           // trailing byte
        (b'E', b"Mmessage\0"),                   // no final zero
        (b'A', b"\0\0\0\x01chan\0"),             // payload missing
        (b'V', b"\0\0\0\x05ab"),                 // result overruns
        (b'1', b"x"),                            // body on an empty message
    ];
    for &(tag, body) in be_cases {
        assert!(
            BackendMessage::decode(tag, body).is_err(),
            "backend {:?} {:?} should fail",
            char::from(tag),
            body
        );
    }
    let fe_cases: &[(u8, &[u8])] = &[
        (b'Q', b"select 1"),
        (b'P', b"s\0select\0\0\x02\0\0\0\x17"),
        (b'B', b"p\0s\0\0\x01"),
        (b'B', b"p\0s\0\0\0\0\x01\xff\xff\xff\xfe\0\0"),
        (b'E', b"portal\0\0\0"),
        (b'D', b"Q\0"),
        (b'C', b"S"),
        (b'F', b"\0\0\0\x01\0\0\0\0"),
        (b'H', b"\0"),
    ];
    for &(tag, body) in fe_cases {
        assert!(
            FrontendMessage::decode(tag, body).is_err(),
            "frontend {:?} {:?} should fail",
            char::from(tag),
            body
        );
    }
    assert!(
        frontend::decode_auth_response(AuthResponseKind::SaslInitial, b"SCRAM\0\0\0\0\x09ab")
            .is_err()
    );
    assert!(StartupPacket::decode(&[0, 3, 0, 0, b'u', 0]).is_err());
}

#[test]
fn backend_key_data_sizes() {
    let mut buf = BytesMut::new();
    BackendKeyData {
        pid: 1,
        key: &[0; 32],
    }
    .encode(&mut buf)
    .unwrap();
    let (_, body) = only_frame(&buf);
    let k = backend::BackendKeyData::decode(body).unwrap();
    assert!(k.fits_version(ProtocolVersion::V3_2));
    assert!(!k.fits_version(ProtocolVersion::V3_0));
}

// ---------------------------------------------------------------------------------------
// Fuzz entry points as seeded-random tests.

/// `pgyard_wire::fuzzing` exists only with the `fuzzing` feature, which `cargo test --workspace`
/// turns on.
#[cfg(feature = "fuzzing")]
mod fuzz_entry_points {
    use super::*;
    use pgyard_wire::fuzzing;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]

        #[test]
        fn fuzz_entry_points_never_panic_on_random_bytes(data in vec(any::<u8>(), 0..200)) {
            fuzzing::frames(&data);
            fuzzing::frontend_messages(&data);
            fuzzing::backend_messages(&data);
            fuzzing::middleware_split(&data);
        }

        #[test]
        fn fuzz_entry_points_on_mutated_valid_streams(
            fes in vec(fe(), 0..6),
            bes in vec(be(), 0..6),
            flags in any::<u8>(),
            flips in vec((any::<prop::sample::Index>(), any::<u8>()), 0..3),
        ) {
            let mut fe_stream = BytesMut::new();
            fe_stream.extend_from_slice(&[flags | 1]);
            for m in &fes {
                m.encode(&mut fe_stream);
            }
            let mut be_stream = BytesMut::new();
            be_stream.extend_from_slice(&[flags & !1]);
            for m in &bes {
                m.encode(&mut be_stream);
            }
            for stream in [&mut fe_stream, &mut be_stream] {
                fuzzing::frames(stream);
                fuzzing::frontend_messages(stream);
                fuzzing::backend_messages(stream);
                fuzzing::middleware_split(stream);
                let len = stream.len();
                for (at, b) in &flips {
                    let i = at.index(len);
                    if i > 0 {
                        stream[i] ^= *b;
                    }
                }
                fuzzing::frames(stream);
                fuzzing::frontend_messages(stream);
                fuzzing::backend_messages(stream);
                fuzzing::middleware_split(stream);
            }
        }
    }
}

mod one_pass_data_rows {
    use bytes::BytesMut;
    use pgyard_wire::backend::{encode_data_row, DataRow, DataRowFields};
    use proptest::prelude::*;

    fn body(fields: &[Option<Vec<u8>>]) -> Vec<u8> {
        let refs: Vec<Option<&[u8]>> = fields.iter().map(|f| f.as_deref()).collect();
        let mut buf = BytesMut::new();
        encode_data_row(&refs, &mut buf).expect("encodes");
        buf[5..].to_vec()
    }

    proptest! {
        /// On well-formed rows the one-pass reader yields exactly what the validated view does.
        #[test]
        fn agrees_with_the_validated_view(fields in proptest::collection::vec(
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)), 0..20)) {
            let b = body(&fields);
            let validated: Vec<Option<&[u8]>> = DataRow::decode(&b).expect("valid").fields().collect();
            let lazy: Result<Vec<Option<&[u8]>>, _> = DataRowFields::new(&b).expect("count").collect();
            prop_assert_eq!(lazy.expect("valid"), validated);
        }

        /// On any bytes, the one-pass reader fails exactly when the validated decode fails.
        #[test]
        fn fails_exactly_when_validation_fails(b in proptest::collection::vec(any::<u8>(), 0..64)) {
            let validated = DataRow::decode(&b);
            let lazy = DataRowFields::new(&b).and_then(|f| f.collect::<Result<Vec<_>, _>>());
            prop_assert_eq!(validated.is_ok(), lazy.is_ok(), "{:?} vs {:?}", validated, lazy);
        }
    }

    #[test]
    fn negative_lengths_other_than_null_are_refused() {
        for len in [-2i32, -1000, i32::MIN] {
            let mut b = vec![0, 1];
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(&[b'x'; 8]);
            let mut f = DataRowFields::new(&b).expect("count fits");
            assert_eq!(
                f.next(),
                Some(Err(pgyard_wire::DecodeError::InvalidLength {
                    length: len.into(),
                    offset: 2
                })),
                "length {len}"
            );
            assert_eq!(f.next(), None);
        }
    }

    #[test]
    fn errors_name_the_offset() {
        // Two columns claimed; the second length runs past the end.
        let b = [0, 2, 0, 0, 0, 1, b'x', 0, 0, 0, 9, b'y'];
        let mut f = DataRowFields::new(&b).expect("count fits");
        assert_eq!(f.next(), Some(Ok(Some(&b"x"[..]))));
        assert_eq!(
            f.next(),
            Some(Err(pgyard_wire::DecodeError::InvalidLength {
                length: 9,
                offset: 7
            }))
        );
        assert_eq!(f.next(), None);
        // One column and a stray byte after it.
        let b = [0, 1, 0xff, 0xff, 0xff, 0xff, 7];
        let f: Vec<_> = DataRowFields::new(&b).expect("count fits").collect();
        assert_eq!(f.len(), 2);
        assert!(matches!(
            f[1],
            Err(pgyard_wire::DecodeError::TrailingBytes {
                offset: 6,
                count: 1
            })
        ));
    }
}
