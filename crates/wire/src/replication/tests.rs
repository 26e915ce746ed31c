//! Unit tests of the replication sub-messages, result rows and command text.

use super::*;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
        .collect()
}

fn check(bytes: &[u8], want: ReplicationMessage<'_>) {
    assert_eq!(ReplicationMessage::decode(bytes), Ok(want));
    assert_eq!(&want.to_bytes()[..], bytes);
    assert_eq!(want.encoded_len(), bytes.len());
}

#[test]
fn captured_sub_messages() {
    check(
        &hex("6b 0000000005028288 0003047570302d2b 00"),
        ReplicationMessage::PrimaryKeepalive(PrimaryKeepalive {
            wal_end: Lsn(0x5028288),
            send_time: PgTimestamp(849_327_370_022_187),
            reply_requested: false,
        }),
    );
    check(
        &hex("72 0000000006000000 0000000006000000 0000000005fffff8 0003047577eb0e52 01"),
        ReplicationMessage::StandbyStatusUpdate(StandbyStatusUpdate {
            write: Lsn(0x6000000),
            flush: Lsn(0x6000000),
            apply: Lsn(0x5fffff8),
            send_time: PgTimestamp(0x3047577eb0e52),
            reply_requested: true,
        }),
    );
    check(
        &hex("68 0003047577eb0e52 000002fa 00000000 000002f9 00000000"),
        ReplicationMessage::HotStandbyFeedback(HotStandbyFeedback {
            send_time: PgTimestamp(0x3047577eb0e52),
            xmin: Xid(762),
            xmin_epoch: 0,
            catalog_xmin: Xid(761),
            catalog_xmin_epoch: 0,
        }),
    );
    let mut w = hex("77 000000000502a238 0000000006000000 0003047577eb0e52");
    w.extend_from_slice(b"walbytes");
    check(
        &w,
        ReplicationMessage::XLogData(XLogData {
            start: Lsn(0x502a238),
            end: Lsn(0x6000000),
            send_time: PgTimestamp(0x3047577eb0e52),
            data: b"walbytes",
        }),
    );
}

#[test]
fn malformed_sub_messages() {
    assert_eq!(
        ReplicationMessage::decode(&hex("6b 0000000005028288 0003047570302d2b 02")),
        Err(DecodeError::Invalid {
            what: "reply-requested flag",
            offset: 17
        })
    );
    assert_eq!(
        ReplicationMessage::decode(&hex("6b 0000000005028288 0003047570302d2b 00 00")),
        Err(DecodeError::TrailingBytes {
            offset: 18,
            count: 1
        })
    );
    assert_eq!(
        ReplicationMessage::decode(&hex("68 0003047577eb0e52 000002fa")),
        Err(DecodeError::UnexpectedEnd {
            offset: 13,
            needed: 4
        })
    );
    assert_eq!(
        ReplicationMessage::decode(b"x"),
        Err(DecodeError::UnknownTag { tag: b'x' })
    );
    let k = hex("6b 0000000005028288 0003047570302d2b 00");
    assert!(ReplicationMessage::decode_from_server(&k).is_ok());
    assert_eq!(
        ReplicationMessage::decode_from_client(&k),
        Err(DecodeError::UnknownTag { tag: b'k' })
    );
}

#[test]
fn result_rows() {
    let row = [
        Some(&b"7123456789012345678"[..]),
        Some(b"1"),
        Some(b"0/1773E08"),
        Some(b"postgres"),
    ];
    assert_eq!(
        IdentifySystem::from_row(&row),
        Ok(IdentifySystem {
            systemid: 7_123_456_789_012_345_678,
            timeline: 1,
            xlogpos: Lsn(0x1773E08),
            dbname: Some("postgres"),
        })
    );
    let physical = [Some(&b"1"[..]), Some(b"2"), Some(b"0/0"), None];
    assert_eq!(
        IdentifySystem::from_row(&physical).map(|r| r.dbname),
        Ok(None)
    );
    let bad = [Some(&b"1"[..]), Some(b"+2"), Some(b"0/0"), None];
    assert_eq!(
        IdentifySystem::from_row(&bad),
        Err(DecodeError::Invalid {
            what: "IDENTIFY_SYSTEM timeline",
            offset: 1
        })
    );
    assert_eq!(
        IdentifySystem::from_row(&bad[..3]),
        Err(DecodeError::InvalidCount {
            count: 3,
            offset: 0
        })
    );
    let created = [
        Some(&b"s1"[..]),
        Some(b"0/1773E40"),
        Some(b"00000003-00000002-1"),
        Some(b"pgoutput"),
    ];
    assert_eq!(
        CreatedSlot::from_row(&created),
        Ok(CreatedSlot {
            slot_name: "s1",
            consistent_point: Lsn(0x1773E40),
            snapshot_name: Some("00000003-00000002-1"),
            output_plugin: Some("pgoutput"),
        })
    );
    let missing = [None, None, None];
    let read = ReadSlot::from_row(&missing).expect("all NULL");
    assert!(!read.exists());
    let read = ReadSlot::from_row(&[Some(&b"physical"[..]), Some(b"0/5000060"), Some(b"1")])
        .expect("slot row");
    assert_eq!(read.restart_lsn, Some(Lsn(0x5000060)));
    assert_eq!(read.restart_tli, Some(1));
    assert!(ReadSlot::from_row(&[Some(&b"physical"[..]), Some(b"0-5"), None]).is_err());
}

#[test]
fn command_text() {
    let mut o = PgOutputOptions::new(4, &["pub", "we\"ird'name"]);
    o.streaming = Streaming::Parallel;
    o.two_phase = true;
    o.origin = Some(OriginFilter::Any);
    o.binary = true;
    o.messages = true;
    assert_eq!(
        start_replication_pgoutput("my slot", Lsn(0x1_0000_00A0), &o),
        "START_REPLICATION SLOT \"my slot\" LOGICAL 1/A0 (proto_version '4', \
         streaming 'parallel', two_phase 'on', origin 'any', \
         publication_names '\"pub\",\"we\"\"ird''name\"', binary 'true', messages 'true')"
    );
    assert_eq!(
        start_replication_logical("s", Lsn(0), &[("Odd", "x")]),
        "START_REPLICATION SLOT \"s\" LOGICAL 0/0 (\"Odd\" 'x')"
    );
    assert_eq!(
        start_replication_physical(Some("sb"), Lsn(0x5000000), Some(2)),
        "START_REPLICATION SLOT \"sb\" PHYSICAL 0/5000000 TIMELINE 2"
    );
    assert_eq!(
        create_replication_slot(
            "s",
            false,
            &SlotKind::Logical {
                plugin: "pgoutput".to_owned(),
                two_phase: true,
                failover: true,
                snapshot: Some(SnapshotAction::Nothing),
            }
        ),
        "CREATE_REPLICATION_SLOT \"s\" LOGICAL \"pgoutput\" \
         (TWO_PHASE, FAILOVER, SNAPSHOT 'nothing')"
    );
    assert_eq!(
        create_replication_slot("p", true, &SlotKind::Physical { reserve_wal: true }),
        "CREATE_REPLICATION_SLOT \"p\" TEMPORARY PHYSICAL (RESERVE_WAL)"
    );
    assert_eq!(
        drop_replication_slot("s", true),
        "DROP_REPLICATION_SLOT \"s\" WAIT"
    );
    assert_eq!(read_replication_slot("s"), "READ_REPLICATION_SLOT \"s\"");
}
