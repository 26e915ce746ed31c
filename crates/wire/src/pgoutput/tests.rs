//! Unit tests of the pgoutput codec on bytes captured from PostgreSQL.

use bytes::BytesMut;
use pgyard_types::{Lsn, PgTimestamp};

use super::*;

/// Parses spaced hex as the spec writes it; `"quoted"` parts are taken as ASCII.
fn hex(s: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in s.split_whitespace() {
        if let Some(text) = part.strip_prefix('"').and_then(|p| p.strip_suffix('"')) {
            out.extend_from_slice(text.as_bytes());
            continue;
        }
        assert!(part.len() % 2 == 0, "odd hex {part}");
        for i in (0..part.len()).step_by(2) {
            out.push(u8::from_str_radix(&part[i..i + 2], 16).expect("test hex"));
        }
    }
    out
}

/// Decodes, checks the expected message, and checks that re-encoding gives the bytes back.
fn check(bytes: &[u8], in_stream: bool, want: PgOutputMessage<'_>) {
    let got = decode(bytes, in_stream).expect("decodes");
    assert_eq!(got, want);
    assert_eq!(&got.to_bytes().expect("encodes")[..], bytes);
    assert_eq!(&want.to_bytes().expect("encodes")[..], bytes);
}

#[test]
fn begin_commit_origin_from_captures() {
    check(
        &hex("42 0000000005028310 00030475702ebe9c 000002fe"),
        false,
        PgOutputMessage::Begin(Begin {
            final_lsn: Lsn(0x5028310),
            commit_time: PgTimestamp(0x30475702ebe9c),
            xid: Xid(0x2fe),
        }),
    );
    check(
        &hex("43 00 0000000005028310 0000000005028340 00030475702ebe9c"),
        false,
        PgOutputMessage::Commit(Commit {
            commit_lsn: Lsn(0x5028310),
            end_lsn: Lsn(0x5028340),
            commit_time: PgTimestamp(0x30475702ebe9c),
        }),
    );
    check(
        &hex("4f 0000000000abcdef 6f7269673100"),
        false,
        PgOutputMessage::Origin(Origin {
            commit_lsn: Lsn(0xabcdef),
            name: b"orig1",
        }),
    );
}

#[test]
fn commit_flags_must_be_zero() {
    let bytes = hex("43 01 0000000005028310 0000000005028340 00030475702ebe9c");
    assert_eq!(
        decode(&bytes, false),
        Err(DecodeError::Invalid {
            what: "commit flags",
            offset: 1
        })
    );
}

#[test]
fn relation_and_type_from_captures() {
    let cols = [
        RelationColumn {
            key: true,
            name: b"a",
            type_oid: 23,
            type_modifier: -1,
        },
        RelationColumn {
            key: false,
            name: b"b",
            type_oid: 25,
            type_modifier: -1,
        },
    ];
    let rel = Relation {
        xid: None,
        oid: 0x4000,
        namespace: b"public",
        name: b"t",
        replica_identity: ReplicaIdentity::Default,
        columns: Seq::from_slice(&cols),
    };
    let wire = "52 00004000 7075626c696300 7400 64 0002 01 6100 00000017 ffffffff \
                00 6200 00000019 ffffffff";
    check(&hex(wire), false, PgOutputMessage::Relation(rel));
    let streamed = format!("52 00000309 {}", &wire[3..]);
    check(
        &hex(&streamed),
        true,
        PgOutputMessage::Relation(Relation {
            xid: Some(Xid(0x309)),
            ..rel
        }),
    );
    let wire_bytes = hex(wire);
    let decoded = decode(&wire_bytes, false).expect("decodes");
    let PgOutputMessage::Relation(r) = decoded else {
        panic!("not a relation: {decoded:?}")
    };
    let names: Vec<&[u8]> = r.columns.iter().map(|c| c.name).collect();
    assert_eq!(names, [&b"a"[..], b"b"]);
    check(
        &hex("59 0000400d 7075626c696300 6d6f6f6400"),
        false,
        PgOutputMessage::Type(Type {
            xid: None,
            oid: 0x400d,
            namespace: b"public",
            name: b"mood",
        }),
    );
}

#[test]
fn relation_with_bad_identity_or_column_flag() {
    let bad_identity = hex("52 00004000 7000 7400 78 0000");
    assert!(matches!(
        decode(&bad_identity, false),
        Err(DecodeError::Invalid { offset: 9, .. })
    ));
    let bad_flag = hex("52 00004000 7000 7400 64 0001 02 6100 00000017 ffffffff");
    assert_eq!(
        decode(&bad_flag, false),
        Err(DecodeError::Invalid {
            what: "relation column flags",
            offset: 12
        })
    );
}

#[test]
fn insert_update_delete_from_captures() {
    let vals = [TupleValue::Text(b"1000"), TupleValue::Text(b"hello")];
    check(
        &hex("49 00004000 4e 0002 74 00000004 31303030 74 00000005 68656c6c6f"),
        false,
        PgOutputMessage::Insert(Insert {
            xid: None,
            relation: 0x4000,
            new: Seq::from_slice(&vals),
        }),
    );
    let key = [TupleValue::Text(b"1000"), TupleValue::Null];
    check(
        &hex("44 00004000 4b 0002 74 00000004 31303030 6e"),
        false,
        PgOutputMessage::Delete(Delete {
            xid: None,
            relation: 0x4000,
            old: OldTuple::Key(Seq::from_slice(&key)),
        }),
    );
    let old = [
        TupleValue::Text(b"1"),
        TupleValue::Text(b"happy"),
        TupleValue::Text(b"n1"),
    ];
    let new = [
        TupleValue::Text(b"1"),
        TupleValue::UnchangedToast,
        TupleValue::Binary(b"n2"),
    ];
    check(
        &hex(
            "55 0000030a 00004013 4f 0003 74 00000001 \"1\" 74 00000005 \"happy\" \
             74 00000002 \"n1\" 4e 0003 74 00000001 \"1\" 75 62 00000002 \"n2\"",
        ),
        true,
        PgOutputMessage::Update(Update {
            xid: Some(Xid(0x30a)),
            relation: 0x4013,
            old: Some(OldTuple::Full(Seq::from_slice(&old))),
            new: Seq::from_slice(&new),
        }),
    );
    check(
        &hex("55 00004013 4e 0001 6e"),
        false,
        PgOutputMessage::Update(Update {
            xid: None,
            relation: 0x4013,
            old: None,
            new: Seq::from_slice(&[TupleValue::Null]),
        }),
    );
}

#[test]
fn tuple_errors_are_specific() {
    // Unknown column kind.
    assert_eq!(
        decode(&hex("49 00004000 4e 0001 78"), false),
        Err(DecodeError::Invalid {
            what: "tuple column kind (expected 'n', 'u', 't' or 'b')",
            offset: 8
        })
    );
    // Count larger than the bytes left.
    assert_eq!(
        decode(&hex("49 00004000 4e 0003 6e 6e"), false),
        Err(DecodeError::InvalidCount {
            count: 3,
            offset: 6
        })
    );
    // Value length beyond the message.
    assert_eq!(
        decode(&hex("49 00004000 4e 0001 74 00000009 31"), false),
        Err(DecodeError::InvalidLength {
            length: 9,
            offset: 9
        })
    );
    // Negative value length.
    assert!(matches!(
        decode(&hex("49 00004000 4e 0001 74 ffffffff"), false),
        Err(DecodeError::InvalidLength { length: -1, .. })
    ));
    // Missing 'N'.
    assert!(matches!(
        decode(&hex("49 00004000 4b 0000"), false),
        Err(DecodeError::Invalid { offset: 5, .. })
    ));
    // Update with an old tuple but no new one.
    assert!(matches!(
        decode(&hex("55 00004000 4b 0001 6e"), false),
        Err(DecodeError::UnexpectedEnd { .. })
    ));
    // Delete needs 'K' or 'O'.
    assert!(matches!(
        decode(&hex("44 00004000 4e 0000"), false),
        Err(DecodeError::Invalid { offset: 5, .. })
    ));
    // Trailing bytes.
    assert_eq!(
        decode(&hex("49 00004000 4e 0001 6e 00"), false),
        Err(DecodeError::TrailingBytes {
            offset: 9,
            count: 1
        })
    );
}

#[test]
fn truncate_and_messages_from_captures() {
    check(
        &hex("54 00000001 00 00004013"),
        false,
        PgOutputMessage::Truncate(Truncate {
            xid: None,
            cascade: false,
            restart_identity: false,
            relations: Seq::from_slice(&[0x4013]),
        }),
    );
    check(
        &hex("54 00000309 00000002 03 00004013 00004000"),
        true,
        PgOutputMessage::Truncate(Truncate {
            xid: Some(Xid(0x309)),
            cascade: true,
            restart_identity: true,
            relations: Seq::from_slice(&[0x4013, 0x4000]),
        }),
    );
    assert_eq!(
        decode(&hex("54 00000002 00 00004013"), false),
        Err(DecodeError::InvalidCount {
            count: 2,
            offset: 1
        })
    );
    assert!(matches!(
        decode(&hex("54 00000000 04"), false),
        Err(DecodeError::Invalid { offset: 5, .. })
    ));
    check(
        &hex("4d 01 0000000005028748 70667800 00000006 74782d6d7367"),
        false,
        PgOutputMessage::Message(LogicalMessage {
            xid: None,
            transactional: true,
            lsn: Lsn(0x5028748),
            prefix: b"pfx",
            content: b"tx-msg",
        }),
    );
    check(
        &hex("4d 00 00000000050287b8 70667800 00000005 6e6f6e7478"),
        false,
        PgOutputMessage::Message(LogicalMessage {
            xid: None,
            transactional: false,
            lsn: Lsn(0x50287b8),
            prefix: b"pfx",
            content: b"nontx",
        }),
    );
}

#[test]
fn two_phase_from_captures() {
    let gid1 = Prepare {
        prepare_lsn: Lsn(0x5029528),
        end_lsn: Lsn(0x5029620),
        prepare_time: PgTimestamp(0x30475702ee814),
        xid: Xid(0x306),
        gid: b"gid1",
    };
    check(
        &hex("62 0000000005029528 0000000005029620 00030475702ee814 00000306 6769643100"),
        false,
        PgOutputMessage::BeginPrepare(gid1),
    );
    check(
        &hex("50 00 0000000005029528 0000000005029620 00030475702ee814 00000306 6769643100"),
        false,
        PgOutputMessage::Prepare(gid1),
    );
    check(
        &hex("4b 00 0000000005029620 0000000005029658 00030475702ee9e1 00000306 6769643100"),
        false,
        PgOutputMessage::CommitPrepared(CommitPrepared {
            commit_lsn: Lsn(0x5029620),
            end_lsn: Lsn(0x5029658),
            commit_time: PgTimestamp(0x30475702ee9e1),
            xid: Xid(0x306),
            gid: b"gid1",
        }),
    );
    check(
        &hex(
            "72 00 00000000050297d8 0000000005029810 00030475702eec88 00030475702eedbf \
             00000307 6769643200",
        ),
        false,
        PgOutputMessage::RollbackPrepared(RollbackPrepared {
            prepare_end_lsn: Lsn(0x50297d8),
            rollback_end_lsn: Lsn(0x5029810),
            prepare_time: PgTimestamp(0x30475702eec88),
            rollback_time: PgTimestamp(0x30475702eedbf),
            xid: Xid(0x307),
            gid: b"gid2",
        }),
    );
    check(
        &hex("70 00 0000000005029c88 0000000005029d80 0003047571fac18c 0000030d 6769643300"),
        false,
        PgOutputMessage::StreamPrepare(Prepare {
            prepare_lsn: Lsn(0x5029c88),
            end_lsn: Lsn(0x5029d80),
            prepare_time: PgTimestamp(0x3047571fac18c),
            xid: Xid(0x30d),
            gid: b"gid3",
        }),
    );
    // A GID without its terminator.
    assert!(matches!(
        decode(
            &hex("4b 00 0000000005029620 0000000005029658 00030475702ee9e1 00000306 67"),
            false
        ),
        Err(DecodeError::MissingTerminator { offset: 30 })
    ));
}

#[test]
fn streaming_from_captures() {
    check(
        &hex("53 00000309 01"),
        false,
        PgOutputMessage::StreamStart(StreamStart {
            xid: Xid(0x309),
            first_segment: true,
        }),
    );
    check(&hex("45"), true, PgOutputMessage::StreamStop);
    check(
        &hex("49 00000309 00004000 4e 0002 74 00000004 32303030 74 00000002 7331"),
        true,
        PgOutputMessage::Insert(Insert {
            xid: Some(Xid(0x309)),
            relation: 0x4000,
            new: Seq::from_slice(&[TupleValue::Text(b"2000"), TupleValue::Text(b"s1")]),
        }),
    );
    check(
        &hex("41 00000309 0000030a 0000000005029a90 0003047571fabbeb"),
        false,
        PgOutputMessage::StreamAbort(StreamAbort {
            xid: Xid(0x309),
            subxid: Xid(0x30a),
            abort: Some(AbortInfo {
                lsn: Lsn(0x5029a90),
                time: PgTimestamp(0x3047571fabbeb),
            }),
        }),
    );
    check(
        &hex("41 0000030e 0000030f"),
        false,
        PgOutputMessage::StreamAbort(StreamAbort {
            xid: Xid(0x30e),
            subxid: Xid(0x30f),
            abort: None,
        }),
    );
    // Neither 9 nor 25 bytes.
    assert!(matches!(
        decode(&hex("41 0000030e 0000030f 00"), false),
        Err(DecodeError::UnexpectedEnd { offset: 9, .. })
    ));
    check(
        &hex("63 00000309 00 0000000005029b18 0000000005029b50 0003047571fabccd"),
        false,
        PgOutputMessage::StreamCommit(StreamCommit {
            xid: Xid(0x309),
            commit_lsn: Lsn(0x5029b18),
            end_lsn: Lsn(0x5029b50),
            commit_time: PgTimestamp(0x3047571fabccd),
        }),
    );
}

#[test]
fn decoder_tracks_stream_blocks() {
    let mut d = PgOutputDecoder::new(ProtoVersion::V4);
    let start = hex("53 00000309 01");
    let insert = hex("49 00000309 00004000 4e 0001 6e");
    let stop = hex("45");
    assert!(matches!(
        d.decode(&stop),
        Err(DecodeError::Invalid { offset: 0, .. })
    ));
    d.decode(&start).expect("stream start");
    assert_eq!(d.stream_xid(), Some(Xid(0x309)));
    assert!(matches!(d.decode(&start), Err(DecodeError::Invalid { .. })));
    let m = d.decode(&insert).expect("insert in stream");
    assert_eq!(m.stream_xid(), Some(Xid(0x309)));
    let begin = hex("42 0000000005028310 00030475702ebe9c 000002fe");
    assert!(d.decode(&begin).is_err());
    d.decode(&stop).expect("stream stop");
    assert!(!d.in_stream());
    d.decode(&begin).expect("begin outside a block");

    let mut v1 = PgOutputDecoder::new(ProtoVersion::V1);
    assert!(v1.decode(&start).is_err());
    let mut v3 = PgOutputDecoder::new(ProtoVersion::V3);
    assert!(v3
        .decode(&hex(
            "41 00000309 0000030a 0000000005029a90 0003047571fabbeb"
        ))
        .is_err());
    assert!(v3.decode(&hex("41 00000309 0000030a")).is_ok());
}

#[test]
fn encode_rejects_unrepresentable_values() {
    let mut out = BytesMut::from(&b"keep"[..]);
    let m = PgOutputMessage::Origin(Origin {
        commit_lsn: Lsn(1),
        name: b"a\0b",
    });
    assert_eq!(
        m.encode(&mut out),
        Err(EncodeError::NulInString {
            what: "origin name"
        })
    );
    assert_eq!(&out[..], b"keep");
    let many = vec![TupleValue::Null; 40_000];
    let m = PgOutputMessage::Insert(Insert {
        xid: None,
        relation: 1,
        new: Seq::from_slice(&many),
    });
    assert!(matches!(
        m.encode(&mut out),
        Err(EncodeError::TooLong { max: 32767, .. })
    ));
    assert_eq!(&out[..], b"keep");
}

#[test]
fn unknown_tag_and_empty_payload() {
    assert_eq!(
        decode(b"Z", false),
        Err(DecodeError::UnknownTag { tag: b'Z' })
    );
    assert!(matches!(
        decode(b"", false),
        Err(DecodeError::UnexpectedEnd { offset: 0, .. })
    ));
}
