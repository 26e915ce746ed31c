//! The generators reach the edges they promise, never fail, and round-trip.

use std::collections::BTreeSet;

use arbitrary::{Arbitrary, Unstructured};
use proptest::prelude::*;

use super::*;
use crate::backend::{Authentication, BackendMessage};
use crate::frontend::{FrontendMessage, StartupPacket};
use crate::fuzzing::roundtrip::{check_backend, check_frontend, check_startup};
use crate::pgoutput::{PgOutputMessage, ProtoVersion};
use crate::replication::ReplicationMessage;

/// Pseudo-random inputs of varied lengths (splitmix64), the same on every run.
fn inputs(n: u64) -> impl Iterator<Item = Vec<u8>> {
    (0..n).map(|seed| {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed;
        let mut next = move || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let len = [0, 1, 7, 64, 300, 2048, 8192][(seed % 7) as usize];
        (0..len).map(|_| next() as u8).collect()
    })
}

/// Generates one value per input (never failing) and collects the labels `label` gives it.
fn labels<T: for<'a> Arbitrary<'a>>(
    n: u64,
    label: impl Fn(&T, &mut Vec<String>),
) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for data in inputs(n) {
        let mut u = Unstructured::new(&data);
        let value = T::arbitrary(&mut u).expect("the generators never fail");
        let mut out = Vec::new();
        label(&value, &mut out);
        seen.extend(out);
    }
    seen
}

fn assert_seen(seen: &BTreeSet<String>, wanted: &[&str]) {
    let missing: Vec<_> = wanted.iter().filter(|w| !seen.contains(**w)).collect();
    assert!(
        missing.is_empty(),
        "never generated: {missing:?}\nseen: {seen:?}"
    );
}

#[test]
fn the_empty_input_still_generates() {
    let mut u = Unstructured::new(&[]);
    assert!(OwnedFrontend::arbitrary(&mut u).is_ok());
    assert!(OwnedStartup::arbitrary(&mut u).is_ok());
    assert!(OwnedBackend::arbitrary(&mut u).is_ok());
    assert!(OwnedReplication::arbitrary(&mut u).is_ok());
    assert!(OwnedPgOutput::arbitrary(&mut u).is_ok());
    assert!(OwnedMiddleware::arbitrary(&mut u).is_ok());
    assert!(ScramExchange::arbitrary(&mut u).is_ok());
}

#[test]
fn every_roundtrip_holds_on_seeded_inputs() {
    for data in inputs(300) {
        crate::fuzzing::roundtrip_frontend(&data);
        crate::fuzzing::roundtrip_backend(&data);
        crate::fuzzing::roundtrip_replication(&data);
        crate::fuzzing::roundtrip_pgoutput(&data);
        crate::fuzzing::roundtrip_middleware(&data);
        crate::fuzzing::roundtrip_scram(&data);
    }
}

#[test]
fn frontend_generator_reaches_the_edges() {
    let seen = labels(3000, |m: &OwnedFrontend, out| {
        let m = m.message();
        out.push(format!("tag {}", m.tag() as char));
        out.push(
            format!("{m:?}")
                .split('(')
                .next()
                .unwrap_or_default()
                .to_owned(),
        );
        match m {
            FrontendMessage::Bind(b) => {
                if b.params.is_empty() {
                    out.push("bind no params".into());
                }
                if b.params.len() % 2 == 1 {
                    out.push("bind odd params".into());
                }
                if b.params.iter().any(|v| v.is_none()) {
                    out.push("bind NULL".into());
                }
                if b.params.len() == usize::from(u16::MAX) || b.param_formats.len() == 65535 {
                    out.push("bind u16 max".into());
                }
            }
            FrontendMessage::Query(q) if std::str::from_utf8(q).is_err() => {
                out.push("query not UTF-8".into())
            }
            FrontendMessage::SaslInitialResponse(s) if s.data.is_none() => {
                out.push("sasl NULL data".into())
            }
            FrontendMessage::Close(c) | FrontendMessage::Describe(c) if c.name.len() >= 9994 => {
                out.push(format!("target name {}", c.name.len()))
            }
            FrontendMessage::SaslResponse(d) if d.len() >= 65531 => {
                out.push(format!("sasl {}", d.len()))
            }
            _ => {}
        }
    });
    assert_seen(
        &seen,
        &[
            "Bind",
            "Close",
            "CopyData",
            "CopyDone",
            "CopyFail",
            "Describe",
            "Execute",
            "Flush",
            "FunctionCall",
            "Parse",
            "Query",
            "Sync",
            "Terminate",
            "PasswordMessage",
            "GssResponse",
            "SaslInitialResponse",
            "SaslResponse",
            "AuthResponse",
            "bind no params",
            "bind odd params",
            "bind NULL",
            "bind u16 max",
            "query not UTF-8",
            "sasl NULL data",
            "target name 9994",
            "target name 9995",
            "sasl 65531",
            "sasl 65532",
        ],
    );
}

#[test]
fn startup_generator_reaches_the_edges() {
    let seen = labels(2000, |m: &OwnedStartup, out| match m.message() {
        StartupPacket::Startup(s) => {
            out.push(format!("version {:x}", s.version.0));
            out.push(format!("body {}", 4 + s.params.raw().len() + 1));
            let n = s.params.iter().count();
            out.push(
                if n == 0 {
                    "no params"
                } else if n % 2 == 1 {
                    "odd params"
                } else {
                    "params"
                }
                .into(),
            );
        }
        StartupPacket::SslRequest => out.push("ssl".into()),
        StartupPacket::GssEncRequest => out.push("gssenc".into()),
        StartupPacket::CancelRequest(c) => out.push(format!("cancel key {}", c.key.len())),
    });
    assert_seen(
        &seen,
        &[
            "version 30000",
            "version 30002",
            "version 3270f",
            "no params",
            "odd params",
            "ssl",
            "gssenc",
            "cancel key 4",
            "cancel key 32",
            "cancel key 256",
            "cancel key 1",
            "body 10000",
            "body 10001",
        ],
    );
}

#[test]
fn backend_generator_reaches_the_edges() {
    let seen = labels(4000, |m: &OwnedBackend, out| {
        let m = m.message();
        out.push(format!("tag {}", m.tag() as char));
        match m {
            BackendMessage::Authentication(a) => out.push(format!("auth {}", a.code())),
            BackendMessage::BackendKeyData(k) => out.push(format!("key {}", k.key.len())),
            BackendMessage::DataRow(r) => {
                if r.is_empty() {
                    out.push("row empty".into());
                }
                if r.fields().any(|v| v.is_none()) {
                    out.push("row NULL".into());
                }
                if r.len() == 65535 {
                    out.push("row u16 max".into());
                }
            }
            BackendMessage::FunctionCallResponse(None) => out.push("fcall NULL".into()),
            BackendMessage::RowDescription(r) if r.len() == 65535 => {
                out.push("columns u16 max".into())
            }
            BackendMessage::ParameterDescription(o) if o.len() == 65535 => {
                out.push("oids u16 max".into())
            }
            BackendMessage::CommandComplete(t) if t.len() >= 29995 => {
                out.push(format!("command tag {}", t.len()))
            }
            BackendMessage::NegotiateProtocolVersion(n) if n.unrecognized.is_empty() => {
                out.push("negotiate none".into())
            }
            _ => {}
        }
    });
    let mut wanted: Vec<String> = "R K 2 3 C d c G H W D I E V v n N A t S 1 s Z T"
        .split(' ')
        .map(|t| format!("tag {t}"))
        .collect();
    wanted.extend([0, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12].map(|c| format!("auth {c}")));
    wanted.extend(
        [
            "key 4",
            "key 256",
            "row empty",
            "row NULL",
            "row u16 max",
            "fcall NULL",
            "columns u16 max",
            "oids u16 max",
            "command tag 29995",
            "command tag 29996",
            "negotiate none",
        ]
        .map(String::from),
    );
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    assert_seen(&seen, &wanted);
}

#[test]
fn replication_and_middleware_generators_reach_the_edges() {
    let seen = labels(500, |m: &OwnedReplication, out| {
        let m = m.message();
        out.push(format!("tag {}", m.tag() as char));
        if let ReplicationMessage::XLogData(x) = m {
            out.push(
                if x.data.is_empty() {
                    "wal empty"
                } else {
                    "wal"
                }
                .into(),
            );
        }
    });
    assert_seen(
        &seen,
        &["tag w", "tag k", "tag r", "tag h", "wal empty", "wal"],
    );
    let seen = labels(500, |m: &OwnedMiddleware, out| {
        let m = m.message();
        out.push(format!("{:?}", m.class.range()));
        out.push(format!("class {}", m.class.get()));
        out.push(format!("payload {}", m.payload.len()));
    });
    assert_seen(
        &seen,
        &[
            "PostgresProject",
            "External",
            "class 0",
            "class 2147483647",
            "class 2147483648",
            "class 9223372036854775807",
            "payload 0",
            "payload 65524",
            "payload 65525",
        ],
    );
}

#[test]
fn pgoutput_generator_reaches_every_message_and_version() {
    let seen = labels(4000, |g: &OwnedPgOutput, out| {
        let m = g.message();
        out.push(format!("{:?} tag {}", g.version(), m.tag() as char));
        if m.stream_xid().is_some() {
            out.push("streamed change".into());
        }
        match m {
            PgOutputMessage::StreamAbort(a) if a.abort.is_some() => out.push("abort info".into()),
            PgOutputMessage::Insert(i) if i.new.len() == i16::MAX as usize => {
                out.push("tuple i16 max".into())
            }
            PgOutputMessage::Update(u) if u.old.is_none() => out.push("update no old".into()),
            PgOutputMessage::Relation(r) if r.columns.len() == i16::MAX as usize => {
                out.push("columns i16 max".into())
            }
            _ => {}
        }
    });
    let mut wanted: Vec<String> = Vec::new();
    for v in ProtoVersion::ALL {
        let tags = match v {
            ProtoVersion::V1 => "BCORYIUDTM",
            ProtoVersion::V2 => "BCORYIUDTMSEcA",
            _ => "BCORYIUDTMSEcAbPKrp",
        };
        wanted.extend(tags.chars().map(|t| format!("{v:?} tag {t}")));
    }
    wanted.extend(
        [
            "streamed change",
            "abort info",
            "update no old",
            "columns i16 max",
        ]
        .map(String::from),
    );
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    assert_seen(&seen, &wanted);
}

#[test]
fn scram_exchanges_succeed_fail_and_bind() {
    let seen = labels(400, |ex: &ScramExchange, out| {
        out.push(format!("authenticated {}", ex.authenticated()));
        out.push(format!("bound {}", ex.channel_bound()));
        out.push(format!(
            "messages {}",
            ex.frontend_messages().len() + ex.backend_messages().len()
        ));
        if let Some(BackendMessage::Authentication(Authentication::Sasl(m))) =
            ex.backend_messages().first()
        {
            out.push(format!("offered {}", m.len()));
        }
    });
    assert_seen(
        &seen,
        &[
            "authenticated true",
            "authenticated false",
            "bound true",
            "bound false",
            "messages 5",
            "messages 1",
            "offered 1",
            "offered 2",
        ],
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// An owned generator as a proptest strategy: the value outlives its input bytes.
    #[test]
    fn owned_generators_work_as_strategies(
        (fe, st, be) in proptest::collection::vec(any::<u8>(), 0..512).prop_map(|b| {
            let mut u = Unstructured::new(&b);
            let fe = OwnedFrontend::arbitrary(&mut u).expect("never fails");
            let st = OwnedStartup::arbitrary(&mut u).expect("never fails");
            let be = OwnedBackend::arbitrary(&mut u).expect("never fails");
            (fe, st, be)
        })
    ) {
        let copy = fe.clone();
        prop_assert_eq!(copy.message(), fe.message());
        check_frontend(fe.message(), fe.auth_kind());
        check_startup(st.message());
        check_backend(be.message());
    }
}
