//! Property tests for pgoutput and the streaming-replication sub-messages: exact round trips
//! for every message and protocol version, stream-block tracking, and hostile input (prefixes,
//! corrupted kinds, overrunning counts, random bytes) that must give errors, never panics.

use bytes::BytesMut;
use pgyard_types::{Lsn, PgTimestamp, Xid};
use pgyard_wire::pgoutput::{
    self, AbortInfo, Begin, Commit, CommitPrepared, Delete, Insert, LogicalMessage, OldTuple,
    Origin, PgOutputDecoder, PgOutputMessage, Prepare, ProtoVersion, Relation, RelationColumn,
    ReplicaIdentity, RollbackPrepared, Seq, StreamAbort, StreamCommit, StreamStart, Truncate,
    TupleValue, Type, Update,
};
use pgyard_wire::replication::{
    HotStandbyFeedback, PrimaryKeepalive, ReplicationMessage, StandbyStatusUpdate, XLogData,
};
use pgyard_wire::DecodeError;
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// owned message descriptions (messages borrow, so tests generate these and build from them)

#[derive(Clone, Debug)]
enum Val {
    Null,
    Toast,
    Text(Vec<u8>),
    Binary(Vec<u8>),
}

#[derive(Clone, Debug)]
struct Col {
    key: bool,
    name: Vec<u8>,
    type_oid: u32,
    typmod: i32,
}

#[derive(Clone, Debug)]
enum Owned {
    Begin(u64, i64, u32),
    Commit(u64, u64, i64),
    Origin(u64, Vec<u8>),
    Relation {
        xid: Option<u32>,
        oid: u32,
        ns: Vec<u8>,
        name: Vec<u8>,
        ident: usize,
        cols: Vec<Col>,
    },
    Type {
        xid: Option<u32>,
        oid: u32,
        ns: Vec<u8>,
        name: Vec<u8>,
    },
    Insert {
        xid: Option<u32>,
        rel: u32,
        new: Vec<Val>,
    },
    Update {
        xid: Option<u32>,
        rel: u32,
        old: Option<(bool, Vec<Val>)>,
        new: Vec<Val>,
    },
    Delete {
        xid: Option<u32>,
        rel: u32,
        full: bool,
        old: Vec<Val>,
    },
    Truncate {
        xid: Option<u32>,
        cascade: bool,
        restart: bool,
        rels: Vec<u32>,
    },
    Message {
        xid: Option<u32>,
        transactional: bool,
        lsn: u64,
        prefix: Vec<u8>,
        content: Vec<u8>,
    },
    StreamStart(u32, bool),
    StreamStop,
    StreamCommit(u32, u64, u64, i64),
    StreamAbort(u32, u32, Option<(u64, i64)>),
    BeginPrepare(u64, u64, i64, u32, Vec<u8>),
    Prepare(u64, u64, i64, u32, Vec<u8>),
    CommitPrepared(u64, u64, i64, u32, Vec<u8>),
    RollbackPrepared(u64, u64, i64, i64, u32, Vec<u8>),
    StreamPrepare(u64, u64, i64, u32, Vec<u8>),
}

fn values(v: &[Val]) -> Vec<TupleValue<'_>> {
    v.iter()
        .map(|v| match v {
            Val::Null => TupleValue::Null,
            Val::Toast => TupleValue::UnchangedToast,
            Val::Text(b) => TupleValue::Text(b),
            Val::Binary(b) => TupleValue::Binary(b),
        })
        .collect()
}

const IDENTS: [ReplicaIdentity; 4] = [
    ReplicaIdentity::Default,
    ReplicaIdentity::Nothing,
    ReplicaIdentity::Full,
    ReplicaIdentity::Index,
];

impl Owned {
    /// Builds the borrowed message and hands it to `f`.
    fn with<R>(&self, f: impl FnOnce(PgOutputMessage<'_>) -> R) -> R {
        let xid = |x: &Option<u32>| x.map(Xid);
        match self {
            Owned::Relation {
                xid: x,
                oid,
                ns,
                name,
                ident,
                cols,
            } => {
                let cols: Vec<RelationColumn<'_>> = cols
                    .iter()
                    .map(|c| RelationColumn {
                        key: c.key,
                        name: &c.name,
                        type_oid: c.type_oid,
                        type_modifier: c.typmod,
                    })
                    .collect();
                f(PgOutputMessage::Relation(Relation {
                    xid: xid(x),
                    oid: *oid,
                    namespace: ns,
                    name,
                    replica_identity: IDENTS[*ident],
                    columns: Seq::from_slice(&cols),
                }))
            }
            Owned::Insert { xid: x, rel, new } => {
                let new = values(new);
                f(PgOutputMessage::Insert(Insert {
                    xid: xid(x),
                    relation: *rel,
                    new: Seq::from_slice(&new),
                }))
            }
            Owned::Update {
                xid: x,
                rel,
                old,
                new,
            } => {
                let new = values(new);
                let old_vals = old.as_ref().map(|(_, v)| values(v)).unwrap_or_default();
                let old = old.as_ref().map(|(full, _)| {
                    if *full {
                        OldTuple::Full(Seq::from_slice(&old_vals))
                    } else {
                        OldTuple::Key(Seq::from_slice(&old_vals))
                    }
                });
                f(PgOutputMessage::Update(Update {
                    xid: xid(x),
                    relation: *rel,
                    old,
                    new: Seq::from_slice(&new),
                }))
            }
            Owned::Delete {
                xid: x,
                rel,
                full,
                old,
            } => {
                let old = values(old);
                let old = if *full {
                    OldTuple::Full(Seq::from_slice(&old))
                } else {
                    OldTuple::Key(Seq::from_slice(&old))
                };
                f(PgOutputMessage::Delete(Delete {
                    xid: xid(x),
                    relation: *rel,
                    old,
                }))
            }
            other => f(other.without_tuples()),
        }
    }

    /// These borrow only from `self`, so unlike the tuple-carrying ones they can be returned.
    fn without_tuples(&self) -> PgOutputMessage<'_> {
        let xid = |x: &Option<u32>| x.map(Xid);
        match self {
            Owned::Begin(l, t, x) => PgOutputMessage::Begin(Begin {
                final_lsn: Lsn(*l),
                commit_time: PgTimestamp(*t),
                xid: Xid(*x),
            }),
            Owned::Commit(a, b, t) => PgOutputMessage::Commit(Commit {
                commit_lsn: Lsn(*a),
                end_lsn: Lsn(*b),
                commit_time: PgTimestamp(*t),
            }),
            Owned::Origin(l, n) => PgOutputMessage::Origin(Origin {
                commit_lsn: Lsn(*l),
                name: n,
            }),
            Owned::Type {
                xid: x,
                oid,
                ns,
                name,
            } => PgOutputMessage::Type(Type {
                xid: xid(x),
                oid: *oid,
                namespace: ns,
                name,
            }),
            Owned::Truncate {
                xid: x,
                cascade,
                restart,
                rels,
            } => PgOutputMessage::Truncate(Truncate {
                xid: xid(x),
                cascade: *cascade,
                restart_identity: *restart,
                relations: Seq::from_slice(rels),
            }),
            Owned::Message {
                xid: x,
                transactional,
                lsn,
                prefix,
                content,
            } => PgOutputMessage::Message(LogicalMessage {
                xid: xid(x),
                transactional: *transactional,
                lsn: Lsn(*lsn),
                prefix,
                content,
            }),
            Owned::StreamStart(x, first) => PgOutputMessage::StreamStart(StreamStart {
                xid: Xid(*x),
                first_segment: *first,
            }),
            Owned::StreamStop => PgOutputMessage::StreamStop,
            Owned::StreamCommit(x, a, b, t) => PgOutputMessage::StreamCommit(StreamCommit {
                xid: Xid(*x),
                commit_lsn: Lsn(*a),
                end_lsn: Lsn(*b),
                commit_time: PgTimestamp(*t),
            }),
            Owned::StreamAbort(x, s, info) => PgOutputMessage::StreamAbort(StreamAbort {
                xid: Xid(*x),
                subxid: Xid(*s),
                abort: info.map(|(l, t)| AbortInfo {
                    lsn: Lsn(l),
                    time: PgTimestamp(t),
                }),
            }),
            Owned::BeginPrepare(a, b, t, x, g)
            | Owned::Prepare(a, b, t, x, g)
            | Owned::StreamPrepare(a, b, t, x, g) => {
                let p = Prepare {
                    prepare_lsn: Lsn(*a),
                    end_lsn: Lsn(*b),
                    prepare_time: PgTimestamp(*t),
                    xid: Xid(*x),
                    gid: g,
                };
                match self {
                    Owned::BeginPrepare(..) => PgOutputMessage::BeginPrepare(p),
                    Owned::Prepare(..) => PgOutputMessage::Prepare(p),
                    _ => PgOutputMessage::StreamPrepare(p),
                }
            }
            Owned::CommitPrepared(a, b, t, x, g) => {
                PgOutputMessage::CommitPrepared(CommitPrepared {
                    commit_lsn: Lsn(*a),
                    end_lsn: Lsn(*b),
                    commit_time: PgTimestamp(*t),
                    xid: Xid(*x),
                    gid: g,
                })
            }
            Owned::RollbackPrepared(a, b, t1, t2, x, g) => {
                PgOutputMessage::RollbackPrepared(RollbackPrepared {
                    prepare_end_lsn: Lsn(*a),
                    rollback_end_lsn: Lsn(*b),
                    prepare_time: PgTimestamp(*t1),
                    rollback_time: PgTimestamp(*t2),
                    xid: Xid(*x),
                    gid: g,
                })
            }
            Owned::Relation { .. }
            | Owned::Insert { .. }
            | Owned::Update { .. }
            | Owned::Delete { .. } => unreachable!("`with` builds the tuple-carrying messages"),
        }
    }

    fn encode(&self) -> Vec<u8> {
        self.with(|m| m.to_bytes().expect("generated messages encode").to_vec())
    }

    fn in_stream(&self) -> bool {
        self.with(|m| m.stream_xid().is_some())
    }
}

// ---------------------------------------------------------------------------------------------
// strategies

fn name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(1u8..=255, 0..10)
}

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..20)
}

fn val() -> impl Strategy<Value = Val> {
    prop_oneof![
        Just(Val::Null),
        Just(Val::Toast),
        bytes().prop_map(Val::Text),
        bytes().prop_map(Val::Binary),
    ]
}

fn tuple() -> impl Strategy<Value = Vec<Val>> {
    prop::collection::vec(val(), 0..6)
}

fn col() -> impl Strategy<Value = Col> {
    (any::<bool>(), name(), any::<u32>(), any::<i32>()).prop_map(|(key, name, type_oid, typmod)| {
        Col {
            key,
            name,
            type_oid,
            typmod,
        }
    })
}

/// Changes: the messages that carry an xid inside a stream block.
fn change(xid: Option<u32>) -> BoxedStrategy<Owned> {
    prop_oneof![
        (
            any::<u32>(),
            name(),
            name(),
            0usize..4,
            prop::collection::vec(col(), 0..5)
        )
            .prop_map(move |(oid, ns, name, ident, cols)| Owned::Relation {
                xid,
                oid,
                ns,
                name,
                ident,
                cols
            }),
        (any::<u32>(), name(), name()).prop_map(move |(oid, ns, name)| Owned::Type {
            xid,
            oid,
            ns,
            name
        }),
        (any::<u32>(), tuple()).prop_map(move |(rel, new)| Owned::Insert { xid, rel, new }),
        (
            any::<u32>(),
            prop::option::of((any::<bool>(), tuple())),
            tuple()
        )
            .prop_map(move |(rel, old, new)| Owned::Update { xid, rel, old, new }),
        (any::<u32>(), any::<bool>(), tuple()).prop_map(move |(rel, full, old)| Owned::Delete {
            xid,
            rel,
            full,
            old
        }),
        (
            any::<bool>(),
            any::<bool>(),
            prop::collection::vec(any::<u32>(), 0..5)
        )
            .prop_map(move |(cascade, restart, rels)| Owned::Truncate {
                xid,
                cascade,
                restart,
                rels
            }),
        (any::<bool>(), any::<u64>(), name(), bytes()).prop_map(
            move |(transactional, lsn, prefix, content)| Owned::Message {
                xid,
                transactional,
                lsn,
                prefix,
                content
            }
        ),
    ]
    .boxed()
}

/// Messages that never carry the stream xid, for the given version.
fn framing(version: ProtoVersion) -> BoxedStrategy<Owned> {
    let v1 = prop_oneof![
        (any::<u64>(), any::<i64>(), any::<u32>()).prop_map(|(l, t, x)| Owned::Begin(l, t, x)),
        (any::<u64>(), any::<u64>(), any::<i64>()).prop_map(|(a, b, t)| Owned::Commit(a, b, t)),
        (any::<u64>(), name()).prop_map(|(l, n)| Owned::Origin(l, n)),
    ];
    let v2 = prop_oneof![
        (any::<u32>(), any::<bool>()).prop_map(|(x, f)| Owned::StreamStart(x, f)),
        Just(Owned::StreamStop),
        (any::<u32>(), any::<u64>(), any::<u64>(), any::<i64>())
            .prop_map(|(x, a, b, t)| Owned::StreamCommit(x, a, b, t)),
        (any::<u32>(), any::<u32>()).prop_map(|(x, s)| Owned::StreamAbort(x, s, None)),
    ];
    let prep = || {
        (
            any::<u64>(),
            any::<u64>(),
            any::<i64>(),
            any::<u32>(),
            name(),
        )
    };
    let v3 = prop_oneof![
        prep().prop_map(|(a, b, t, x, g)| Owned::BeginPrepare(a, b, t, x, g)),
        prep().prop_map(|(a, b, t, x, g)| Owned::Prepare(a, b, t, x, g)),
        prep().prop_map(|(a, b, t, x, g)| Owned::StreamPrepare(a, b, t, x, g)),
        prep().prop_map(|(a, b, t, x, g)| Owned::CommitPrepared(a, b, t, x, g)),
        (
            any::<u64>(),
            any::<u64>(),
            any::<i64>(),
            any::<i64>(),
            any::<u32>(),
            name()
        )
            .prop_map(|(a, b, t1, t2, x, g)| Owned::RollbackPrepared(a, b, t1, t2, x, g)),
    ];
    let v4 = (any::<u32>(), any::<u32>(), any::<u64>(), any::<i64>())
        .prop_map(|(x, s, l, t)| Owned::StreamAbort(x, s, Some((l, t))));
    match version {
        ProtoVersion::V1 => v1.boxed(),
        ProtoVersion::V2 => prop_oneof![v1, v2].boxed(),
        ProtoVersion::V3 => prop_oneof![v1, v2, v3].boxed(),
        ProtoVersion::V4 => prop_oneof![v1, v2, v3, v4].boxed(),
    }
}

fn version() -> impl Strategy<Value = ProtoVersion> {
    prop::sample::select(ProtoVersion::ALL.to_vec())
}

/// Any message valid for `version`, with the stream xid where the version allows it.
fn message_for(version: ProtoVersion) -> BoxedStrategy<Owned> {
    if version == ProtoVersion::V1 {
        prop_oneof![framing(version), change(None)].boxed()
    } else {
        prop_oneof![
            framing(version),
            change(None),
            any::<u32>().prop_flat_map(|x| change(Some(x))),
        ]
        .boxed()
    }
}

fn any_message() -> impl Strategy<Value = (ProtoVersion, Owned)> {
    version().prop_flat_map(|v| (Just(v), message_for(v)))
}

/// A stream: plain messages between blocks, and blocks of changes carrying an xid.
#[derive(Clone, Debug)]
enum Part {
    Plain(Owned),
    Block(u32, bool, Vec<Owned>),
}

fn stream_parts() -> impl Strategy<Value = Vec<Part>> {
    let plain = prop_oneof![framing(ProtoVersion::V1), change(None)]
        .prop_filter("stream framing is generated as blocks", |m| {
            !matches!(m, Owned::StreamStart(..) | Owned::StreamStop)
        })
        .prop_map(Part::Plain);
    let block = (any::<u32>(), any::<bool>()).prop_flat_map(|(x, first)| {
        prop::collection::vec(change(Some(x)), 0..4)
            .prop_map(move |changes| Part::Block(x, first, changes))
    });
    prop::collection::vec(prop_oneof![plain, block], 0..8)
}

// ---------------------------------------------------------------------------------------------
// properties

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_message_round_trips_exactly((version, owned) in any_message()) {
        let bytes = owned.encode();
        let in_stream = owned.in_stream();
        owned.with(|want| {
            let got = pgoutput::decode(&bytes, in_stream).expect("decodes");
            prop_assert_eq!(got, want);
            prop_assert_eq!(&got.to_bytes().expect("re-encodes")[..], &bytes[..]);
            prop_assert!(want.min_proto_version() <= version);
            // A decoder for any version at least the message's accepts it; older ones refuse.
            for v in ProtoVersion::ALL {
                let stream = if in_stream { want.stream_xid() } else { None };
                let mut d = PgOutputDecoder::resume(v, stream);
                let r = d.decode(&bytes);
                let allowed = if in_stream {
                    want.allowed_in_stream()
                } else {
                    !matches!(want, PgOutputMessage::StreamStop)
                };
                prop_assert_eq!(r.is_ok(), allowed && want.min_proto_version() <= v, "{:?}", r);
            }
            Ok(())
        })?;
    }

    #[test]
    fn prefixes_fail_cleanly((_v, owned) in any_message()) {
        let bytes = owned.encode();
        let in_stream = owned.in_stream();
        for n in 0..bytes.len() {
            match pgoutput::decode(&bytes[..n], in_stream) {
                Err(_) => {}
                // Stream Abort without its v4 tail is itself a valid message.
                Ok(m) => {
                    prop_assert!(matches!(m, PgOutputMessage::StreamAbort(_)) && n == 9);
                    prop_assert_eq!(&m.to_bytes().expect("re-encodes")[..], &bytes[..n]);
                }
            }
        }
        // Decoding with the wrong stream context never panics.
        let _ = pgoutput::decode(&bytes, !in_stream);
    }

    #[test]
    fn decoder_tracks_stream_blocks(parts in stream_parts()) {
        let mut payloads: Vec<(Vec<u8>, bool)> = Vec::new();
        for part in &parts {
            match part {
                Part::Plain(m) => payloads.push((m.encode(), false)),
                Part::Block(x, first, changes) => {
                    payloads.push((Owned::StreamStart(*x, *first).encode(), false));
                    for c in changes {
                        payloads.push((c.encode(), true));
                    }
                    payloads.push((Owned::StreamStop.encode(), true));
                }
            }
        }
        let mut d = PgOutputDecoder::new(ProtoVersion::V2);
        for (bytes, in_stream) in &payloads {
            prop_assert_eq!(d.in_stream(), *in_stream);
            let m = d.decode(bytes).expect("decodes in context");
            prop_assert_eq!(m, pgoutput::decode(bytes, *in_stream).expect("stateless"));
            if *in_stream && !matches!(m, PgOutputMessage::StreamStop) {
                prop_assert_eq!(m.stream_xid(), d.stream_xid());
            }
        }
        prop_assert!(!d.in_stream());
    }

    #[test]
    fn random_bytes_never_panic_and_accepted_bytes_are_canonical(
        data in prop::collection::vec(any::<u8>(), 0..64),
        in_stream in any::<bool>(),
    ) {
        if let Ok(m) = pgoutput::decode(&data, in_stream) {
            prop_assert_eq!(&m.to_bytes().expect("re-encodes")[..], &data[..]);
        }
        let mut d = PgOutputDecoder::new(ProtoVersion::V4);
        let _ = d.decode(&data);
        if let Ok(m) = ReplicationMessage::decode(&data) {
            prop_assert_eq!(&m.to_bytes()[..], &data[..]);
        }
    }

    #[test]
    fn corrupted_messages_never_panic(
        (_v, owned) in any_message(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
    ) {
        let mut bytes = owned.encode();
        let i = at.index(bytes.len());
        bytes[i] = byte;
        let in_stream = owned.in_stream();
        if let Ok(m) = pgoutput::decode(&bytes, in_stream) {
            prop_assert_eq!(&m.to_bytes().expect("re-encodes")[..], &bytes[..]);
        }
    }

    #[test]
    fn replication_messages_round_trip(m in replication_message()) {
        m.with(|msg| {
            let bytes = msg.to_bytes();
            prop_assert_eq!(bytes.len(), msg.encoded_len());
            prop_assert_eq!(ReplicationMessage::decode(&bytes), Ok(msg));
            let fixed = !matches!(msg, ReplicationMessage::XLogData(_));
            for n in 0..bytes.len() {
                let r = ReplicationMessage::decode(&bytes[..n]);
                if fixed || n < 25 {
                    prop_assert!(r.is_err());
                }
            }
            Ok(())
        })?;
    }
}

#[derive(Clone, Debug)]
enum OwnedRepl {
    W(u64, u64, i64, Vec<u8>),
    Other(ReplicationMessage<'static>),
}

impl OwnedRepl {
    fn with<R>(&self, f: impl FnOnce(ReplicationMessage<'_>) -> R) -> R {
        match self {
            OwnedRepl::W(s, e, t, d) => f(ReplicationMessage::XLogData(XLogData {
                start: Lsn(*s),
                end: Lsn(*e),
                send_time: PgTimestamp(*t),
                data: d,
            })),
            OwnedRepl::Other(m) => f(*m),
        }
    }
}

fn replication_message() -> impl Strategy<Value = OwnedRepl> {
    prop_oneof![
        (any::<u64>(), any::<u64>(), any::<i64>(), bytes())
            .prop_map(|(s, e, t, d)| OwnedRepl::W(s, e, t, d)),
        (any::<u64>(), any::<i64>(), any::<bool>()).prop_map(|(l, t, r)| OwnedRepl::Other(
            ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
                wal_end: Lsn(l),
                send_time: PgTimestamp(t),
                reply_requested: r,
            })
        )),
        (any::<[u64; 3]>(), any::<i64>(), any::<bool>()).prop_map(|(l, t, r)| OwnedRepl::Other(
            ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
                write: Lsn(l[0]),
                flush: Lsn(l[1]),
                apply: Lsn(l[2]),
                send_time: PgTimestamp(t),
                reply_requested: r,
            })
        )),
        (any::<i64>(), any::<[u32; 4]>()).prop_map(|(t, x)| OwnedRepl::Other(
            ReplicationMessage::HotStandbyFeedback(HotStandbyFeedback {
                send_time: PgTimestamp(t),
                xmin: Xid(x[0]),
                xmin_epoch: x[1],
                catalog_xmin: Xid(x[2]),
                catalog_xmin_epoch: x[3],
            })
        )),
    ]
}

// ---------------------------------------------------------------------------------------------
// specific malformed inputs

#[test]
fn bad_tuple_kind_in_each_tuple_position_is_reported_where_it_is() {
    // Insert: kind byte at 8. Update old tuple: at 8; new tuple after 'N' at 12. Delete: at 8.
    let cases: [(&[u8], usize); 4] = [
        (b"I\0\0\0\x01N\0\x01x", 8),
        (b"U\0\0\0\x01K\0\x01x", 8),
        (b"U\0\0\0\x01K\0\x01nN\0\x01x", 12),
        (b"D\0\0\0\x01O\0\x01x", 8),
    ];
    for (bytes, offset) in cases {
        assert_eq!(
            pgoutput::decode(bytes, false),
            Err(DecodeError::Invalid {
                what: "tuple column kind (expected 'n', 'u', 't' or 'b')",
                offset
            }),
            "{bytes:?}"
        );
    }
}

#[test]
fn counts_overrunning_the_payload_are_rejected_before_reading() {
    // Tuple with 32767 columns but 1 byte left.
    assert_eq!(
        pgoutput::decode(b"I\0\0\0\x01N\x7f\xffn", false),
        Err(DecodeError::InvalidCount {
            count: 32767,
            offset: 6
        })
    );
    // Negative tuple count.
    assert_eq!(
        pgoutput::decode(b"I\0\0\0\x01N\xff\xff", false),
        Err(DecodeError::InvalidCount {
            count: -1,
            offset: 6
        })
    );
    // Relation claiming 2 columns with room for fewer than 2 × 10 bytes.
    assert_eq!(
        pgoutput::decode(
            b"R\0\0\0\x01\0t\0d\0\x02\x01a\0\0\0\0\x17\xff\xff\xff\xff",
            false
        ),
        Err(DecodeError::InvalidCount {
            count: 2,
            offset: 9
        })
    );
    // Truncate of i32::MAX relations.
    assert_eq!(
        pgoutput::decode(b"T\x7f\xff\xff\xff\0\0\0\0\x01", false),
        Err(DecodeError::InvalidCount {
            count: i32::MAX.into(),
            offset: 1
        })
    );
    // Message content longer than the payload.
    assert_eq!(
        pgoutput::decode(b"M\x01\0\0\0\0\0\0\0\x01p\0\0\0\x01\0ab", false),
        Err(DecodeError::InvalidLength {
            length: 256,
            offset: 12
        })
    );
}

#[test]
fn in_stream_context_changes_the_meaning_of_the_first_four_bytes() {
    // An Insert sent inside a block, read as if outside: the xid is taken as the relation and
    // the relation's first byte as the 'N' marker, which it is not.
    let mut out = BytesMut::new();
    let vals = [TupleValue::Null];
    PgOutputMessage::Insert(Insert {
        xid: Some(Xid(7)),
        relation: 0x4000,
        new: Seq::from_slice(&vals),
    })
    .encode(&mut out)
    .expect("encodes");
    assert!(matches!(
        pgoutput::decode(&out, false),
        Err(DecodeError::Invalid { offset: 5, .. })
    ));
    assert!(pgoutput::decode(&out, true).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The fuzz entry points, replayed on stable with random input and on streams of valid
    /// messages (so their re-encode assertions are reached). `pgyard_wire::fuzzing` exists only
    /// with the `fuzzing` feature, which `cargo test --workspace` turns on.
    #[cfg(feature = "fuzzing")]
    #[test]
    fn fuzz_entry_points_hold(
        data in prop::collection::vec(any::<u8>(), 0..128),
        parts in prop::collection::vec(any_message(), 0..6),
    ) {
        pgyard_wire::fuzzing::pgoutput_messages(&data);
        pgyard_wire::fuzzing::replication_messages(&data);
        let mut stream = vec![3u8];
        for (_v, m) in &parts {
            let bytes = m.encode();
            if let Ok(len) = u8::try_from(bytes.len()) {
                stream.push(len);
                stream.extend_from_slice(&bytes);
            }
            pgyard_wire::fuzzing::pgoutput_messages(&bytes);
        }
        pgyard_wire::fuzzing::pgoutput_messages(&stream);
    }
}
